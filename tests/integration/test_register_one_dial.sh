#!/usr/bin/env bash
# A join takes one connection (docs/0044): the agent proves its new key in
# REGISTER and the gateway goes on with WELCOME on the connection that
# registered it, instead of closing it for a redial with the key.  Counted
# on the gateway: its TLS handshakes (tether_loop_tls_handshakes_total,
# every loop, scraped over --metrics-listen, plain HTTP, so the scrapes
# make none) from before the agent starts until it is active, which the
# test learns from the agent's own status file (no tetherctl call in
# between): exactly one.  The agent's log says it went on and never that
# it reconnected; the agent is active in `agent list` and its record is
# the registered one.  (An older agent, which sends no proof and redials,
# and an older gateway, which closes: test_skew.)
source "$(dirname "$0")/lib.sh"

gateway_init
MP=$(free_port)
gateway_start --metrics-listen "127.0.0.1:$MP"
cid=$(cluster_create onedial)
ctl token create --cluster "$cid" >"$T/join.json"
join_node node1 "$T/join.json" >/dev/null

# handshakes: the TLS handshakes every loop of the gateway has finished.
handshakes() {
	curl -sf "http://127.0.0.1:$MP/metrics" |
		awk '$1 ~ /^tether_loop_tls_handshakes_total[{]/ { n += $2 } END { print n + 0 }'
}
local_active() {
	"$CLIENT" status --state-dir "$T/node1" |
		jq -e '.state == "active" and .connected == true' >/dev/null
}

h0=$(handshakes)
client_start node1
wait_until 30 "node1 active (its own status)" local_active
h1=$(handshakes)
[ $((h1 - h0)) -eq 1 ] ||
	fail "the join took $((h1 - h0)) TLS handshakes on the gateway, want 1 (see client-node1.log)"
assert_contains "$T/client-node1.log" "going on as the agent on this connection"
! grep -q "reconnecting with the agent key" "$T/client-node1.log" ||
	fail "the agent redialled after REGISTERED: $(grep reconnecting "$T/client-node1.log")"
pass "a join is one TLS handshake: REGISTERED goes on, WELCOME on the same connection"

id=$(agent_id_of node1)
wait_until 20 "node1 active in agent list" agent_is node1 active
[ "$(agent_field "$id" node)" = node1 ] || fail "agent $id is not node1's"
[ "$(grep -c 'msg="agent registered"' "$T/gateway.log")" -eq 1 ] ||
	fail "the gateway registered node1 more than once"
client_stop "$CLIENT_PID"
gateway_stop
pass "the agent that went on is node1's, active, registered once; both exit cleanly"
