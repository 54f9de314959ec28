#!/usr/bin/env bash
# No stampede (docs/0035): in a storm, an agent the gateway cannot take at
# once waits for a handshake slot (--handshake-wait) or is told when to come
# back, and waits as told, so that each agent dials about once.  N swarm
# agents (the agent's own tunnel code, tests/bench/swarm.c) against a
# gateway that takes 8 tunnel handshakes at once (--max-handshakes 8; the
# per-source caps raised: every agent dials from 127.0.0.1) register, then
# the gateway restarts under them and they all redial at once.
#
# 1. With the default --handshake-wait, no upgrade is refused at once:
#    every one past the 8 slots waits in line (refusing them at once, as
#    before, costs the burst a second dial each: about 1.9 per agent).  A
#    waiter whose --handshake-wait runs out is told when to come back, so
#    the upgrades the new gateway answers until all are active again
#    (each dial that reached it, counted by the gateway: the swarm's count
#    from the first report after readiness missed 73 of them on a quiet
#    machine) stay under one per agent plus one per time told plus a
#    tenth, and none came before a moment it was told; some waited
#    and got a slot (tether_handshake_waits_total).  How many waits run
#    out depends on the machine's speed (on 2 loaded cores the first
#    handshakes took over 3 s and 82 of 200 ran out; 1.3 dials per agent,
#    the bound here before, failed at 317): the dials per agent are a
#    figure of tests/bench/storm_retry.sh, not a bound here.
# 2. With --handshake-wait 0 (every upgrade past the cap refused at once),
#    the 503s carry a Retry-After and no agent dials again before the moment
#    it was told (the swarm measures, per agent, the monotonic time from the
#    refusal to the next dial: early=0), and a turned-away agent gets in on
#    the dial it was told to make: the storm's upgrades stay under one per
#    agent plus one per refusal plus a tenth (coming back to a full gateway
#    again would add one for each).
# 3. A control swarm that counts the same refusals but ignores them
#    (--ignore-retry-after, the old backoff) is caught redialling early:
#    the check of 2 can fail.  It registers through one slot
#    (--max-handshakes 1): through 8 a fast machine may refuse none of
#    200 registrations at --rate 200 (12 to 44 refused here, 2 cores).
# 4. Told ahead of time (SETTINGS "redial_spread_ms"): N agents and a
#    control swarm of N/2 that ignores the spread (--ignore-redial-spread)
#    lose the gateway to a kill -9 (nothing said) and a new one starts on
#    the same data.  Each of the N agents drew its first redial once, in
#    [0, the spread it was told] (at least --redial-spread-min 6000), and
#    waited on average more than a quarter of it, measured from the loss to
#    the dial; the control waited less (its backoff: the check can fail);
#    the N agents dialled the new gateway at most 1.3 times each.
# Counts only: timing lives in tests/bench/storm_retry.sh.
source "$(dirname "$0")/lib.sh"

SWARM=$TETHER_BIN/tether-swarm
N=200
CAPS=(--max-handshakes 8 --hello-timeout 10000 --max-handshakes-per-source 100000
	--max-tls-per-source 100000 --max-connections-per-source 100000)
gateway_init
gateway_start "${CAPS[@]}"
cid=$(cluster_create storm)
ctl token create --cluster "$cid" --uses $((4 * N)) >"$T/join.json"

# field FILE NAME: NAME's value on FILE's last report line.
field() { grep '^swarm ms=' "$1" | tail -n 1 | grep -o " $2=[0-9]*" | cut -d= -f2; }
all_active() { [ "$(field "$1" active)" = "$2" ]; }
refusals() { grep -c 'refusing a tunnel: too many handshakes' "$T/gateway.log" || true; }
metrics() {
	curl -sf --cacert "$GW_DIR/ca.crt" -H "Authorization: Bearer $(cat "$GW_DIR/admin.token")" \
		"$GW_URL/metrics"
}
# waits RESULT: the gateway's upgrades whose wait for a slot ended so
# (tether_handshake_waits_total: served, expired, ...).
waits() {
	metrics | awk -v k="tether_handshake_waits_total{result=\"$1\"}" \
		'$1 == k { n = $2 } END { print n + 0 }'
}
# handshakes_ended: the gateway's tunnel handshakes ended, any result.
handshakes_ended() {
	metrics | awk '$1 ~ /^tether_handshakes_total[{]/ { n += $2 } END { print n + 0 }'
}

run_swarm() {   # run_swarm OUT PREFIX [swarm flags...]
	local out=$1 prefix=$2
	shift 2
	"$SWARM" --join "$T/join.json" --ca-file "$GW_DIR/ca.crt" --agents "$N" \
		--prefix "$prefix" --rate 200 --report-ms 100 --log-level error "$@" \
		>"$out" 2>>"$T/swarm.log" &
	SWARM_PID=$!
	PIDS+=("$SWARM_PID")
}

# storm OUT [serve flags]: restart the gateway under the swarm, wait until
# all are back; sets DIALS (the dials from the new gateway's readiness until
# all are active, as the swarm counts them: those after readiness but
# before its next report line are left out), REFUSED (the new gateway's
# 503s at once past --max-handshakes) and UPGRADES (every dial that reached
# the new gateway's /v1/connect, once, whatever the machine's speed: the
# tunnel handshakes it ended, its 503s at once and the waits for a slot
# that ended without one; not the dials refused while no gateway listened).
storm() {
	local out=$1 d0
	shift
	gateway_stop
	wait_until 30 "the swarm sees every tunnel gone" \
		bash -c "grep '^swarm ms=' '$out' | tail -n 1 | grep -q ' established=0 '"
	: >"$T/gateway.log"
	gateway_start "${CAPS[@]}" "$@"
	# The first report line after readiness counts the dials made so far
	# (those that found no gateway in between included).
	local n0
	n0=$(grep -c '^swarm ms=' "$out")
	wait_until 10 "a swarm report after the restart" \
		bash -c "[ \$(grep -c '^swarm ms=' '$out') -gt $n0 ]"
	d0=$(field "$out" dials)
	# The report line that counts all active counts every dial before it.
	wait_until 240 "$N agents active again after the restart" all_active "$out" "$N"
	DIALS=$(( $(field "$out" dials) - d0 ))
	REFUSED=$(refusals)
	UPGRADES=$(( $(handshakes_ended) + REFUSED + $(waits expired) + $(waits abandoned) ))
}

run_swarm "$T/honour.out" storm
wait_until 240 "$N agents registered and active" all_active "$T/honour.out" "$N"
pass "$N agents registered through --max-handshakes 8"

# 1. Waiting for a slot: one dial each, and one more only when told.
# (told counts from before the stop: every time an agent was told in the
# storm, whether its next dial came before the first report or after.)
told0=$(field "$T/honour.out" told)
storm "$T/honour.out"
told=$(( $(field "$T/honour.out" told) - told0 ))
early=$(field "$T/honour.out" early)
served=$(waits served) expired=$(waits expired)
[ "$REFUSED" -eq 0 ] ||
	fail "storm: $REFUSED upgrades refused at once: they did not wait for a slot (--handshake-wait)"
[ $((served + expired)) -gt 0 ] || fail "the storm met no full gateway: nothing was tested"
[ "$served" -gt 0 ] || fail "storm: $expired upgrades waited for a slot, none got one"
[ "$early" -eq 0 ] || fail "$early dials came before the gateway's retry-after"
[ $((UPGRADES * 10)) -le $((N * 11 + told * 10)) ] ||
	fail "storm: $UPGRADES upgrades for $N agents, told $told times when to come back ($expired" \
		"waits ran out): more dials than the agents were asked for"
pass "storm: none refused at once, $served upgrades waited for a slot and got one," \
	"$expired waited past --handshake-wait ($told times told when to come back), none" \
	"early, $UPGRADES upgrades for $N agents (at most one each, one per time told and a" \
	"tenth; $DIALS dials counted by the swarm)"

# 2. Refused at once: told when to come back, and in on that dial.
told0=$(field "$T/honour.out" told)
storm "$T/honour.out" --handshake-wait 0
told=$(( $(field "$T/honour.out" told) - told0 ))
early=$(field "$T/honour.out" early)
[ "$REFUSED" -gt 0 ] || fail "the storm met no --max-handshakes refusal: nothing was tested"
[ "$told" -gt 0 ] || fail "$REFUSED upgrades refused, yet no agent was told when to come back"
[ "$early" -eq 0 ] || fail "$early dials came before the gateway's retry-after"
[ $((UPGRADES * 10)) -le $((N * 11 + REFUSED * 10)) ] ||
	fail "storm: $UPGRADES upgrades for $N agents and $REFUSED refusals: turned-away agents came back to a full gateway"
pass "storm, --handshake-wait 0: $REFUSED refusals, $told times told when to come back," \
	"no dial early, $UPGRADES upgrades for $N agents (at most one each, one per refusal and a" \
	"tenth; $DIALS dials counted by the swarm)"
kill -TERM "$SWARM_PID"
wait "$SWARM_PID" || fail "tether-swarm exited $? after SIGTERM"

# 3. The control: agents that count the retry-after but redial on their
# own backoff (--ignore-retry-after) are caught redialling early, as soon
# as they register through one slot (two registrations at once: one is
# refused and told).
gateway_stop
gateway_start "${CAPS[@]}" --handshake-wait 0 --max-handshakes 1
run_swarm "$T/ignore.out" control --ignore-retry-after
early_seen() { [ "$(field "$T/ignore.out" early)" -gt 0 ]; }
wait_until 240 "a control agent redialling before its retry-after" early_seen
pass "control: ignoring the retry-after, $(field "$T/ignore.out" early) dials came early" \
	"(told $(field "$T/ignore.out" told) times)"
kill -TERM "$SWARM_PID"
wait "$SWARM_PID" || fail "tether-swarm exited $? after SIGTERM"
gateway_stop

# 4. kill -9: the agents spread their first redial as the gateway told them.
SPREAD_CAPS=(--redial-spread-min 6000 --hello-timeout 10000 --max-handshakes-per-source 100000
	--max-tls-per-source 100000 --max-connections-per-source 100000)
gateway_start "${SPREAD_CAPS[@]}"
run_swarm "$T/spread.out" spread
spread_pid=$SWARM_PID
N_CONTROL=$((N / 2))
"$SWARM" --join "$T/join.json" --ca-file "$GW_DIR/ca.crt" --agents "$N_CONTROL" \
	--prefix spreadless --rate 200 --report-ms 100 --log-level error \
	--ignore-redial-spread >"$T/spreadless.out" 2>>"$T/swarm.log" &
control_pid=$!
PIDS+=("$control_pid")
told_spread() { [ "$(field "$1" spread_ms)" -ge 6000 ]; }
wait_until 240 "$N agents active" all_active "$T/spread.out" "$N"
wait_until 240 "$N_CONTROL control agents active" all_active "$T/spreadless.out" "$N_CONTROL"
wait_until 30 "the agents told a redial spread" told_spread "$T/spread.out"
wait_until 30 "the control agents told a redial spread" told_spread "$T/spreadless.out"
d0=$(field "$T/spread.out" dials)
kill -KILL "$GW_PID"
wait "$GW_PID" 2>/dev/null || true
lost() { [ "$(field "$1" losses)" -ge "$2" ]; }
wait_until 30 "every agent saw its tunnel lost" lost "$T/spread.out" "$N"
wait_until 30 "every control agent saw its tunnel lost" lost "$T/spreadless.out" "$N_CONTROL"
gateway_start "${SPREAD_CAPS[@]}"
# As in storm: the dials counted from the first report after readiness
# (those that found no gateway before are the restart's, not the storm's).
n0=$(grep -c '^swarm ms=' "$T/spread.out")
wait_until 10 "a swarm report after the restart" \
	bash -c "[ \$(grep -c '^swarm ms=' '$T/spread.out') -gt $n0 ]"
d1=$(field "$T/spread.out" dials)
wait_until 240 "$N agents active again after the kill" all_active "$T/spread.out" "$N"
wait_until 240 "$N_CONTROL control agents active again" all_active "$T/spreadless.out" "$N_CONTROL"
S=$(field "$T/spread.out" spread_ms)
draws=$(field "$T/spread.out" draws) drawn=$(field "$T/spread.out" drawn_ms)
max_drawn=$(field "$T/spread.out" max_drawn_ms) waited=$(field "$T/spread.out" waited_ms)
dials=$(( $(field "$T/spread.out" dials) - d1 ))
[ "$draws" -eq "$N" ] || fail "$draws of $N agents drew their redial in the spread told ($S ms)"
[ "$max_drawn" -le "$S" ] || fail "a redial drawn $max_drawn ms out, past the spread told ($S ms)"
[ $((waited * 4)) -ge $((N * S)) ] ||
	fail "the agents waited $((waited / N)) ms on average after the loss: not spread over $S ms"
[ $((dials * 10)) -le $((N * 13)) ] ||
	fail "kill -9: $dials dials for $N agents, over 1.3 per agent"
pass "kill -9: $N agents each drew their first redial in [0, $S ms] (mean" \
	"$((drawn / N)) ms drawn, $((waited / N)) ms waited), $dials dials on the" \
	"new gateway ($((d1 - d0)) before it was ready)"
c_draws=$(field "$T/spreadless.out" draws) c_waited=$(field "$T/spreadless.out" waited_ms)
[ "$c_draws" -eq 0 ] || fail "the control swarm drew $c_draws redials in a spread"
[ $((c_waited * 4)) -lt $((N_CONTROL * S)) ] ||
	fail "the control swarm (its backoff) waited $((c_waited / N_CONTROL)) ms on average: the check cannot fail"
pass "control: ignoring the spread, its agents waited $((c_waited / N_CONTROL)) ms on average"
for p in "$spread_pid" "$control_pid"; do
	kill -TERM "$p"
	wait "$p" || fail "tether-swarm exited $? after SIGTERM"
done
gateway_stop
