#!/usr/bin/env bash
# tether-swarm, the scale benchmarks' load generator (tests/bench/swarm.c),
# is real agents: 20 of them in one process register from one multi-use
# token, each with its own key, become active, echo a stream, come back by
# themselves after a gateway restart (the agent's backoff), and the swarm
# exits cleanly (no leak) on SIGTERM.
source "$(dirname "$0")/lib.sh"

SWARM=$TETHER_BIN/tether-swarm
N=20
gateway_init
gateway_start
cid=$(cluster_create swarm)
ctl token create --cluster "$cid" --uses "$N" >"$T/join.json"

"$SWARM" --join "$T/join.json" --ca-file "$GW_DIR/ca.crt" --agents "$N" \
	--report-ms 200 --probe --log-level warn >"$T/swarm.out" 2>>"$T/swarm.log" &
SWARM_PID=$!
PIDS+=("$SWARM_PID")

active_connected() {
	[ "$(ctl agent list --cluster "$cid" |
		jq '[.[] | select(.state == "active" and .connected)] | length')" -eq "$1" ]
}
wait_until 60 "$N swarm agents active" active_connected "$N"
[ "$(ctl agent list --cluster "$cid" | jq '[.[].node] | unique | length')" -eq "$N" ] ||
	fail "expected $N distinct nodes"
wait_until 10 "the swarm reports all active" grep -q '^swarm all_active' "$T/swarm.out"
pass "$N agents registered from one token and are active"

# Each agent signed its own registration: N distinct public keys.
keys=$(sqlite3 "file:$GW_DIR/tether.db?mode=ro" 'SELECT COUNT(DISTINCT hex(pubkey)) FROM agents')
[ "$keys" -eq "$N" ] || fail "$keys distinct agent keys, want $N"
pass "$N distinct agent keys"

head -c 100000 /dev/urandom >"$T/payload"
"$CTL" connect --cluster "$cid" --node swarm-7 127.0.0.1:7 <"$T/payload" >"$T/echoed"
cmp -s "$T/payload" "$T/echoed" || fail "the echo differs from what was sent"
pass "a stream through swarm-7 echoes 100000 bytes"

gateway_stop
wait_until 20 "the swarm sees every tunnel gone" \
	bash -c "tail -1 '$T/swarm.out' | grep -q ' established=0 '"
gateway_start
wait_until 60 "$N swarm agents back and active" active_connected "$N"
wait_until 10 "the swarm reports all active again" \
	bash -c "[ \$(grep -c '^swarm all_active' '$T/swarm.out') -ge 2 ]"
[ "$(ctl agent list --cluster "$cid" | jq length)" -eq "$N" ] ||
	fail "agents were duplicated across the restart"
grep -q 'probe_n=[1-9]' "$T/swarm.out" || fail "the probe agent's pings were never answered"
pass "after a restart all $N are back by themselves, no duplicates"

kill -TERM "$SWARM_PID"
rc=0
wait "$SWARM_PID" || rc=$?
[ "$rc" -eq 0 ] || fail "tether-swarm exited $rc after SIGTERM"
pass "the swarm exits 0 on SIGTERM"
gateway_stop
