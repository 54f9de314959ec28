#!/usr/bin/env bash
# Enrollment, the happy path: an operator creates a cluster and an import
# token, three nodes join with it and their agents swap it for their own
# key-bound credentials and reach `active`.
source "$(dirname "$0")/lib.sh"

gateway_init
gateway_start
assert_mode "$GW_DIR/admin.token" 600
assert_mode "$GW_DIR/ca.key" 600

cid=$(cluster_create demo)
ctl token create --cluster "$cid" --uses 3 >"$T/join.json"
jq -e --arg c "$cid" '.cluster == $c and (.token | startswith("tti_"))' "$T/join.json" >/dev/null ||
	fail "join document: $(cat "$T/join.json")"
ca_sum=$(awk '/^ca_checksum/ {print $2}' "$T/init.out")
jq -e --arg s "$ca_sum" '.ca_checksum == $s' "$T/join.json" >/dev/null ||
	fail "join document's ca_checksum differs from init's $ca_sum"
pass "token create prints a join document with init's CA checksum"

for n in node-a node-b node-c; do
	join_node "$n" "$T/join.json" --allow 127.0.0.1:22 >"$T/join-$n.out" ||
		fail "join $n exited $?"
	assert_mode "$T/$n/agent.key" 600
	assert_mode "$T/$n/import.token" 600
	assert_mode "$T/$n/state.json" 600
done
pass "three nodes joined; key, token and state files are 0600"

"$CLIENT" status --state-dir "$T/node-a" >"$T/status0.json"
jq -e --arg c "$cid" '.cluster == $c and .connected == false' "$T/status0.json" >/dev/null ||
	fail "status before run: $(cat "$T/status0.json")"

declare -A pid
for n in node-a node-b node-c; do
	client_start "$n"
	pid[$n]=$CLIENT_PID
done
for n in node-a node-b node-c; do
	wait_until 20 "$n active" agent_is "$n" active
	[ ! -e "$T/$n/import.token" ] || fail "$n still keeps its import token after registering"
done
pass "three agents registered and active; import tokens forgotten"

"$CLIENT" status --state-dir "$T/node-a" >"$T/status.json"
jq -e --arg id "$(agent_id_of node-a)" --arg u "$GW_URL" \
	'.agent_id == $id and .state == "active" and .connected == true and .gateway_url == $u' \
	"$T/status.json" >/dev/null || fail "status: $(cat "$T/status.json")"
pass "tether-client status reports active and connected"

[ "$(ctl agent list --cluster "$cid" | jq length)" = 3 ] || fail "agent list: want 3 agents"
[ "$(ctl cluster list | jq -r --arg c "$cid" '.[] | select(.id == $c) | .agents_connected')" = 3 ] ||
	fail "cluster list: want agents_connected 3"
pass "agent list and cluster list agree"

# The token had three uses: a fourth node is refused, run exits 1 with the reason.
join_node node-d "$T/join.json" >/dev/null
expect_exit 1 "$CLIENT" run --state-dir "$T/node-d"
assert_contains "$T/last.err" "used up"
pass "a used-up token: run exits 1 saying so"

if grep -q "$(jq -r .token "$T/join.json" | cut -d. -f2)" "$T"/*.log; then
	fail "an import token secret appears in a log"
fi
pass "no token secret in any log"

agent=$(agent_id_of node-b)
ctl agent verify "$agent" >"$T/verify.json"
jq -e '.state == "verifying"' "$T/verify.json" >/dev/null || fail "verify answered $(cat "$T/verify.json")"
wait_until 20 "node-b active again after verify" agent_is node-b active
pass "agent verify re-runs verification back to active"

for n in node-a node-b node-c; do client_stop "${pid[$n]}"; done
gateway_stop
pass "clients and gateway stop cleanly on SIGTERM"
