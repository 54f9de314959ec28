#!/usr/bin/env bash
# No ghost presence after a store outage (issue 22 hole 7, docs/0034): two
# replicas on one private PostgreSQL, node n1 on r2, dials through r1.
# PostgreSQL stops; n1's agent is killed (kill -9), so its tunnel on r2
# closes while r2 cannot tell the store; PostgreSQL starts again.  Within
# a few renewals r2 makes its tunnel records match its tunnels: n1's row
# goes, r1 stops routing to r2 for it, and dials to n1 through r1 fail at
# once with "not connected to any replica" (10 of 10), never reaching r2.
# Before the change the row stayed for as long as r2 ran and r1 kept
# sending n1's dials to r2: 10 of 10 failed there with 502 "agent ... has
# no tunnel on replica r2 (agent_not_here)" (the issue: 182 of ~600).
source "$(dirname "$0")/lib.sh"

two_replicas_on_pg
export TETHER_SERVER=https://127.0.0.1:${RPORT[1]}
cid=$(cluster_create ghost)
ctl token create --cluster "$cid" >"$T/join.json"
# The join document names r2 (two_replicas_on_pg's --url): n1 is r2's.
join_node n1 "$T/join.json" --allow "127.0.0.1:$echo_port" >/dev/null
client_start n1
agent=$CLIENT_PID
wait_until 30 "n1 active" agent_is n1 active
id=$(agent_id_of n1)
row() { pg_query "SELECT replica_id FROM tunnels WHERE agent_id = '$id'"; }
[ "$(row)" = r2 ] || fail "n1's tunnel is not recorded against r2: $(pg_query 'SELECT * FROM tunnels')"
dial() { printf 'ping\n' | "$CTL" connect --cluster "$cid" --node n1 "127.0.0.1:$echo_port" >"$T/dial.out" 2>"$T/dial.err"; }
wait_until 20 "a dial to n1 through r1" dial
assert_contains "$T/dial.out" ping
pass "n1 on r2, reached through r1"

# --- the tunnel closes while the store is down ---
pg_stop
log "PostgreSQL stopped"
kill -KILL "$agent"
wait "$agent" 2>/dev/null || true
wait_until 20 "r2 failing to forget n1's tunnel" \
	grep -q "msg=\"presence: cannot forget the tunnel\" agent=$id" "$T/replica2.log"
pass "n1 killed during the outage: r2 could not forget its tunnel"
pg_ctl_start || { cat "$PG_DIR/log" >&2; fail "PostgreSQL did not start again"; }
back=$SECONDS
log "PostgreSQL back"

# --- no ghost once the store is back ---
no_row() { [ -z "$(row)" ]; }
wait_until 20 "n1's ghost row removed" no_row
log "n1's row gone $((SECONDS - back)) s after the store's return"
# The row goes in the store thread's transaction; the line is logged when
# its answer reaches the loop, a moment later: wait for it, do not race it.
wait_until 10 "r2 logging the repair" \
	grep -q "tunnel records repaired after the store's return" "$T/replica2.log"
pass "r2 logged the repair of its tunnel records"
right_error() { ! dial && grep -q 'not connected to any replica' "$T/dial.err"; }
wait_until 20 "r1 answering n1's dials itself" right_error
for i in $(seq 1 10); do
	right_error || fail "dial $i to n1 through r1: $(cat "$T/dial.err")"
done
pass "the ghost row is gone; 10 of 10 dials to n1 through r1 fail at once: not connected to any replica"
for i in 1 2; do replica_stop "$i"; done
