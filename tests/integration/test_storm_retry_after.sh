#!/usr/bin/env bash
# No stampede (docs/0035): agents the gateway turns away during a storm are
# told when to come back, and wait as told.  80 swarm agents (the agent's
# own tunnel code, tests/bench/swarm.c) against a gateway that takes 8
# tunnel handshakes at once (--max-handshakes 8; the per-source caps raised:
# every agent dials from 127.0.0.1) register, then the gateway restarts
# under them and they all redial at once.  The 503s carry a Retry-After and
# no agent dials again before the moment it was told (the swarm measures,
# per agent, the monotonic time from the refusal to the next dial: early=0),
# while the gateway's log shows the refusals happened.  A control swarm that
# counts the same refusals but ignores them (--ignore-retry-after, the old
# backoff) shows the check sees agents redialling early.  Dials per
# agent are printed, not judged: timing lives in tests/bench/storm_retry.sh.
source "$(dirname "$0")/lib.sh"

SWARM=$TETHER_BIN/tether-swarm
N=80
CAPS=(--max-handshakes 8 --hello-timeout 10000 --max-handshakes-per-source 100000
	--max-tls-per-source 100000 --max-connections-per-source 100000)
gateway_init
gateway_start "${CAPS[@]}"
cid=$(cluster_create storm)
ctl token create --cluster "$cid" --uses $((2 * N)) >"$T/join.json"

# field FILE NAME: NAME's value on FILE's last report line.
field() { tail -1 "$1" | grep -o " $2=[0-9]*" | cut -d= -f2; }
all_active() { [ "$(field "$1" active)" = "$2" ]; }

run_swarm() {   # run_swarm OUT PREFIX [swarm flags...]
	local out=$1 prefix=$2
	shift 2
	"$SWARM" --join "$T/join.json" --ca-file "$GW_DIR/ca.crt" --agents "$N" \
		--prefix "$prefix" --rate 100 --report-ms 200 --log-level error "$@" \
		>"$out" 2>>"$T/swarm.log" &
	SWARM_PID=$!
	PIDS+=("$SWARM_PID")
}

storm() {   # storm OUT: restart the gateway under the swarm, wait until all are back
	local out=$1
	gateway_stop
	wait_until 30 "the swarm sees every tunnel gone" \
		bash -c "tail -1 '$out' | grep -q ' established=0 '"
	: >"$T/gateway.log"
	gateway_start "${CAPS[@]}"
	# The report line that counts all active counts every dial before it.
	wait_until 240 "$N agents active again after the restart" all_active "$out" "$N"
}

# 1. Honouring the gateway's retry-after.
run_swarm "$T/honour.out" storm
wait_until 240 "$N agents registered and active" all_active "$T/honour.out" "$N"
pass "$N agents registered through --max-handshakes 8"
reg_dials=$(field "$T/honour.out" dials)
storm "$T/honour.out"
told=$(field "$T/honour.out" told)
early=$(field "$T/honour.out" early)
dials=$(( $(field "$T/honour.out" dials) - reg_dials ))
refused=$(grep -c 'refusing a tunnel: too many handshakes' "$T/gateway.log" || true)
[ "$refused" -gt 0 ] || fail "the storm met no --max-handshakes refusal: nothing was tested"
[ "$told" -gt 0 ] || fail "$refused upgrades refused, yet no agent was told when to come back"
[ "$early" -eq 0 ] || fail "$early dials came before the gateway's retry-after"
pass "storm: $refused refusals, $told times told when to come back, no dial early" \
	"($dials dials for $N agents in the storm, max $(field "$T/honour.out" max_dials) by one agent since start)"
kill -TERM "$SWARM_PID"
wait "$SWARM_PID" || fail "tether-swarm exited $? after SIGTERM"

# 2. The control: agents that count the retry-after but redial on their
# own backoff (--ignore-retry-after) are caught redialling early, as soon
# as they register through the same cap.
run_swarm "$T/ignore.out" control --ignore-retry-after
early_seen() { [ "$(field "$T/ignore.out" early)" -gt 0 ]; }
wait_until 240 "a control agent redialling before its retry-after" early_seen
pass "control: ignoring the retry-after, $(field "$T/ignore.out" early) dials came early" \
	"(told $(field "$T/ignore.out" told) times)"
kill -TERM "$SWARM_PID"
wait "$SWARM_PID" || fail "tether-swarm exited $? after SIGTERM"
gateway_stop
