#!/usr/bin/env bash
# Replica identity (issue 22 hole 7, docs/0034): two replicas on one private
# PostgreSQL.
# - a second replica started with the --replica-id of a live one exits
#   non-zero and says why (the id, the holder's peer URL, its last
#   renewal); the first keeps its agent, its lease and its tunnel record;
# - the default id is the host name and the process id: two replicas
#   started without --replica-id on one host hold two leases;
# - a clean stop frees the id at once; after kill -9 a new process takes
#   the id once the dead one's lease ends (within one lease, 6 s);
# - a replica whose lease another process took stops (as on SIGTERM) and
#   leaves that lease alone.
# Before the change the second r1 started, renewed r1's lease with its own
# peer URL, and dials to the first one's agent went to the wrong replica.
source "$(dirname "$0")/lib.sh"

pg_start
RPORT[1]=$(free_port)
gateway_init --store "$PG_URL" --url "https://127.0.0.1:${RPORT[1]}"
echo_server_start
replica_start 1
wait_until 30 "replica 1 ready" replica_ready 1
export TETHER_SERVER=https://127.0.0.1:${RPORT[1]}
cid=$(cluster_create identity)
ctl token create --cluster "$cid" >"$T/join.json"
join_node n1 "$T/join.json" --allow "127.0.0.1:$echo_port" >/dev/null
client_start n1
agent=$CLIENT_PID
wait_until 30 "n1 active" agent_is n1 active
id=$(agent_id_of n1)
[ "$(pg_query "SELECT replica_id FROM tunnels WHERE agent_id = '$id'")" = r1 ] ||
	fail "n1's tunnel is not recorded against r1: $(pg_query 'SELECT * FROM tunnels')"
r1_url=https://127.0.0.1:${RPORT[1]}
pass "r1 holds n1"

# --- a second process with r1's id: refused, r1 untouched ---
replica_start 2 --replica-id r1
started=$SECONDS
gone() { ! kill -0 "$1" 2>/dev/null; }
wait_until 30 "the second r1 to exit" gone "${RPID[2]}"
rc=0
wait "${RPID[2]}" || rc=$?
[ "$rc" -ne 0 ] || fail "a second replica with r1's id started (exit 0)"
grep -q 'replica id r1 is held by a live replica' "$T/replica2.log" ||
	fail "the refused replica does not say why: $(tail -3 "$T/replica2.log")"
assert_contains "$T/replica2.log" "$r1_url"
assert_contains "$T/replica2.log" "lease last renewed"
[ "$(pg_query "SELECT peer_url FROM replicas WHERE id = 'r1'")" = "$r1_url" ] ||
	fail "r1's lease names another peer URL: $(pg_query 'SELECT * FROM replicas')"
[ "$(pg_query "SELECT replica_id FROM tunnels WHERE agent_id = '$id'")" = r1 ] ||
	fail "n1's record left r1: $(pg_query 'SELECT * FROM tunnels')"
agent_is n1 active || fail "n1 is not active after the refused start"
printf 'ping\n' | "$CTL" connect --cluster "$cid" --node n1 "127.0.0.1:$echo_port" >"$T/echo.out" 2>"$T/echo.err" ||
	fail "a dial to n1 through r1 failed: $(cat "$T/echo.err")"
assert_contains "$T/echo.out" ping
log "refused after $((SECONDS - started)) s: $(grep -o 'replica id r1 is held.*' "$T/replica2.log" | head -1)"
pass "a second replica with r1's id exits $rc and says why; r1 keeps its lease, n1 and its record"

# --- the default id: host name and process id, one per process ---
REPLICA_NO_ID=1 replica_start 3
REPLICA_NO_ID=1 replica_start 4
for i in 3 4; do wait_until 30 "replica $i ready" replica_ready "$i"; done
host=$(hostname | cut -c1-48)
for i in 3 4; do
	[ "$(pg_query "SELECT count(*) FROM replicas WHERE id = '$host-${RPID[$i]}' AND peer_url = 'https://127.0.0.1:${RPORT[$i]}'")" = 1 ] ||
		fail "replica $i's lease is not $host-${RPID[$i]}: $(pg_query 'SELECT id, peer_url FROM replicas')"
	assert_contains "$T/replica$i.log" "replica=$host-${RPID[$i]}"
done
pass "two replicas without --replica-id on one host: two leases, $host-${RPID[3]} and $host-${RPID[4]}"
for i in 3 4; do replica_stop "$i"; done

# --- a clean stop frees the id at once ---
client_stop "$agent"
replica_stop 1
[ "$(pg_query "SELECT count(*) FROM replicas WHERE id = 'r1'")" = 0 ] ||
	fail "SIGTERM left r1's lease"
replica_start 1
wait_until 30 "replica 1 ready again" replica_ready 1
pass "after a clean stop a new process takes r1 at once"

# --- kill -9 frees the id once the lease has ended ---
kill -KILL "${RPID[1]}"
wait "${RPID[1]}" 2>/dev/null || true
killed=$SECONDS
replica_start 1
wait_until 30 "replica 1 ready after kill -9" replica_ready 1
assert_contains "$T/replica1.log" "waiting for its lease to end or be renewed"
pass "after kill -9 a new r1 waited for the dead lease to end and took the id ($((SECONDS - killed)) s)"

# --- a lease taken by another process (as after a long outage) ---
# The row rewritten as another process renewing it would: r1's next
# renewal finds it not its own and live, and r1 steps down.
pg_query "UPDATE replicas SET lease_until = lease_until + 60000, peer_url = 'https://other:1' WHERE id = 'r1'" >/dev/null
wait_until 20 "r1 to stop after losing its id" gone "${RPID[1]}"
rc=0
wait "${RPID[1]}" || rc=$?
[ "$rc" -eq 0 ] || fail "r1 exited $rc after losing its id (want the clean stop of SIGTERM)"
assert_contains "$T/replica1.log" "another process took this replica's id: stopping"
[ "$(pg_query "SELECT peer_url FROM replicas WHERE id = 'r1'")" = https://other:1 ] ||
	fail "r1's stop touched the lease another process holds: $(pg_query 'SELECT * FROM replicas')"
pass "r1, its lease taken by another process, stops cleanly and leaves that lease alone"
