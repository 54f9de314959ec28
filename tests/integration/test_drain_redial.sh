#!/usr/bin/env bash
# A drain's redial that lands back on the draining replica (docs/0017,
# 0023): two replicas on one private PostgreSQL, node n1 joined to r2 (its
# only URL: what a balancer does until its health check has seen r2's
# /readyz turn 503), dials to n1 through r1.
# - SIGTERM to r2 (long --drain-timeout): the agent is told to reconnect
#   elsewhere (another replica is live), retires its tunnel and dials
#   again; r2 refuses (draining), twice.  The retired tunnel stays: 10 of 10
#   dials to n1 through r1 still reach it, over the peer link to r2.
#   Before the change the agent closed the retired tunnel at the first
#   refused dial and n1 had no tunnel anywhere until a dial got through:
#   every request meanwhile failed "not connected to any replica" (CI's
#   test_ha rolling restart: 4 of 40, all for the agent whose redial
#   haproxy had sent back to the draining replica).
# - a second SIGTERM ends r2's drain; r1 stops cleanly.
# The agent alone (test_drain): its redial refused, it lets the retired
# tunnel go at once, and the gateway exits before its drain timeout.
source "$(dirname "$0")/lib.sh"

REPLICA_DRAIN_MS=60000
two_replicas_on_pg
export TETHER_SERVER=https://127.0.0.1:${RPORT[1]}
cid=$(cluster_create redial)
ctl token create --cluster "$cid" >"$T/join.json"
# The join document names r2 (two_replicas_on_pg's --url): n1 is r2's.
join_node n1 "$T/join.json" --allow "127.0.0.1:$echo_port" >/dev/null
client_start n1
agent=$CLIENT_PID
wait_until 30 "n1 active" agent_is n1 active
[ "$(pg_query "SELECT replica_id FROM tunnels WHERE agent_id = '$(agent_id_of n1)'")" = r2 ] ||
	fail "n1's tunnel is not recorded against r2: $(pg_query 'SELECT * FROM tunnels')"
dial() { printf 'ping\n' | "$CTL" connect --cluster "$cid" --node n1 "127.0.0.1:$echo_port" >"$T/dial.out" 2>"$T/dial.err" &&
	grep -q ping "$T/dial.out"; }
wait_until 20 "a dial to n1 through r1" dial
pass "n1 on r2, reached through r1"

kill -TERM "${RPID[2]}"
wait_until 20 "the agent told to reconnect elsewhere" \
	grep -q 'msg="gateway asks to reconnect elsewhere" reason="gateway draining".* elsewhere=1' \
	"$T/client-n1.log"
refused() { [ "$(grep -c 'msg="cannot open the tunnel".*http_status=503' "$T/client-n1.log")" -ge "$1" ]; }
wait_until 30 "r2 refusing the agent's redial twice" refused 2
for i in $(seq 1 10); do
	dial || fail "dial $i to n1 through r1 after r2 refused its redial: $(cat "$T/dial.err")"
done
grep -q 'previous tunnel closed' "$T/client-n1.log" &&
	fail "the agent let its retired tunnel go: $(grep 'previous tunnel' "$T/client-n1.log")"
assert_contains "$T/client-n1.log" 'the previous tunnel stays: another replica is live'
pass "r2 refused n1's redial twice; the retired tunnel stayed; 10 of 10 dials to n1 through r1 reached it"

replica_stop 2    # the second SIGTERM: the drain ends now
assert_contains "$T/replica2.log" 'msg="second signal: ending the drain now"'
client_stop "$agent"
replica_stop 1
pass "a second SIGTERM ends r2's drain; the agent and r1 stop cleanly"
