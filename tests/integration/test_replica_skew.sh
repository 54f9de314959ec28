#!/usr/bin/env bash
# Leases by the database's clock (issue 22 hole 7, docs/0034): two replicas
# on one private PostgreSQL, r2's clock 20 s behind (Debian's libfaketime,
# LD_PRELOADed; its monotonic clock left alone).  n1 is on r2; r1 must see
# r2's lease as live and carry dials to n1 over the peer link, and list n1
# as held by r2.  Before the change r2 stamped its lease with its own clock
# (20 s behind, so ended 14 s before it was written as far as r1 could
# tell) and r1 answered "not connected to any replica".
source "$(dirname "$0")/lib.sh"

FAKETIME_LIB=$(ls /usr/lib/*/faketime/libfaketimeMT.so.1 2>/dev/null | head -1)
[ -n "$FAKETIME_LIB" ] || fail "libfaketime is not installed (package faketime, config/setup.sh)"
pg_start
RPORT[1]=$(free_port)
RPORT[2]=$(free_port)
gateway_init --store "$PG_URL" --url "https://127.0.0.1:${RPORT[2]}"
echo_server_start
replica_start 1
# ASan's runtime wants to come first; libfaketime comes first here.
LD_PRELOAD=$FAKETIME_LIB FAKETIME=-20s FAKETIME_DONT_FAKE_MONOTONIC=1 \
	ASAN_OPTIONS=$ASAN_OPTIONS:verify_asan_link_order=0 replica_start 2
for i in 1 2; do wait_until 30 "replica $i ready" replica_ready "$i"; done
skew=$(( $(pg_query "SELECT CAST(EXTRACT(EPOCH FROM now()) AS BIGINT)") -
	$(LD_PRELOAD=$FAKETIME_LIB FAKETIME=-20s date +%s) ))
[ "$skew" -ge 15 ] || fail "libfaketime did not set the clock back: $skew s"
pass "r2 runs ${skew} s behind the database"

export TETHER_SERVER=https://127.0.0.1:${RPORT[2]}
cid=$(cluster_create skew)
ctl token create --cluster "$cid" >"$T/join.json"
join_node n1 "$T/join.json" --allow "127.0.0.1:$echo_port" >/dev/null
client_start n1
agent=$CLIENT_PID
wait_until 30 "n1 active on r2" agent_is n1 active
id=$(agent_id_of n1)
[ "$(pg_query "SELECT replica_id FROM tunnels WHERE agent_id = '$id'")" = r2 ] ||
	fail "n1 is not r2's: $(pg_query 'SELECT * FROM tunnels')"
pass "n1 active on r2"

# --- through r1 ---
export TETHER_SERVER=https://127.0.0.1:${RPORT[1]}
dial() { printf 'ping\n' | "$CTL" connect --cluster "$cid" --node n1 "127.0.0.1:$echo_port" >"$T/dial.out" 2>"$T/dial.err" && grep -q ping "$T/dial.out"; }
# r1's directory is read at most one renewal (2 s) after n1's record.
held_by_r2() { [ "$(agent_field "$id" replica)" = r2 ]; }
wait_until 10 "r1 listing n1 as r2's" held_by_r2
ok=0
for i in $(seq 1 10); do
	if dial; then ok=$((ok + 1)); else log "dial $i: $(cat "$T/dial.err")"; fi
done
log "r1 carried $ok of 10 dials to n1 on r2"
[ "$ok" -eq 10 ] || fail "r1 carried $ok of 10 dials to n1 on r2"
pass "with r2 ${skew} s behind, r1 lists n1 on r2 and carries 10 of 10 dials to it"
client_stop "$agent"
for i in 1 2; do replica_stop "$i"; done
