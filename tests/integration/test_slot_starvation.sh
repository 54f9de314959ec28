#!/usr/bin/env bash
# Handshake slots go to those who use them (docs/0028).  One source
# (127.0.0.2) holds 64 TCP connections that never send a ClientHello,
# renewed at 40 a second; then another (127.0.0.3) holds 100 silent tunnel
# upgrades on /v1/connect, reopened as they close (--max-handshakes 64).
# Meanwhile an agent restarts and must be active again, and an operator's
# requests must be answered, within the deadline below: a per-source share
# (--max-tls-per-source, --max-handshakes-per-source) and the short
# deadlines (--tls-hello-timeout, --hello-timeout) leave the rest of the
# slots to others.  Before them, the stalls held every TLS slot for 20 s and
# the upgrades every tunnel handshake slot for 10 s: the agent stayed out.
# The deadline is generous (a loaded machine); the figures are logged.
source "$(dirname "$0")/lib.sh"

DEADLINE=25   # seconds for the agent's return and the operator's requests
MP=$(free_port)
gateway_init
# serve's default TLS deadlines (lib.sh raises them for other tests).
gateway_start --max-handshakes 64 --metrics-listen "127.0.0.1:$MP" \
	--tls-hello-timeout 1000 --tls-handshake-timeout 3000
cid=$(cluster_create slots)
ctl token create --cluster "$cid" >"$T/join.json"
join_node n1 "$T/join.json" >/dev/null
client_start n1
wait_until 30 "n1 active" agent_is n1 active

flood() { # flood MODE SRC N: the attacker in the background, its status in $T/MODE.json
	python3 "$TETHER_SRC/tests/integration/slot_flood.py" "$1" 127.0.0.1 "$GW_PORT" \
		"$2" "$3" "$T/$1.json" &
	FLOOD=$!
	PIDS+=("$FLOOD")
}
flood_stop() { kill "$FLOOD"; wait "$FLOOD" 2>/dev/null || true; }
status_at_least() { # status_at_least MODE FIELD N
	[ -f "$T/$1.json" ] && jq -e --argjson n "$3" ".$2 >= \$n" "$T/$1.json"
}
now() { date +%s.%N; }
since() { awk -v a="$(now)" -v b="$1" 'BEGIN { printf "%.1f\n", a - b }'; }

# The agent restarts; its time until active again, in seconds, into $T/$1.s.
agent_comes_back() {
	client_stop "$CLIENT_PID"
	local t0
	t0=$(now)
	client_start n1
	local deadline=$((SECONDS + DEADLINE))
	until agent_is n1 active; do
		[ "$SECONDS" -lt "$deadline" ] ||
			fail "$1: the restarted agent was not active again within ${DEADLINE}s"
		sleep 0.1
	done
	since "$t0" >"$T/$1.s"
}
# Four operator requests (admin API over TLS); their total time into $T/$1.s.
operator_served() {
	local t0 ok=0
	t0=$(now)
	for _ in 1 2 3 4; do
		timeout "$DEADLINE" "$CTL" -o json cluster list >/dev/null 2>&1 && ok=$((ok + 1))
	done
	since "$t0" >"$T/$1.s"
	[ "$ok" -eq 4 ] || fail "$1: the operator got $ok of 4 requests through"
}

# --- stalled ClientHellos from one source ---
flood stall 127.0.0.2 64
wait_until 20 "the stalling source has opened 64 connections" status_at_least stall opened 64
agent_comes_back stall-agent
operator_served stall-operator
opened=$(jq .opened "$T/stall.json")
flood_stop
pass "64 stalled ClientHellos from 127.0.0.2 ($opened opened in all): the restarted agent was active in $(cat "$T/stall-agent.s") s, 4 of 4 operator requests in $(cat "$T/stall-operator.s") s"

# --- silent tunnel upgrades from one source ---
flood upgrade 127.0.0.3 100
wait_until 30 "the flooding source has had 64 upgrades answered 101" \
	status_at_least upgrade upgraded 64
agent_comes_back upgrade-agent
operator_served upgrade-operator
up=$(jq .upgraded "$T/upgrade.json")
ref=$(jq .refused "$T/upgrade.json")
flood_stop
pass "100 silent upgrades from 127.0.0.3 ($up answered 101, $ref refused): the restarted agent was active in $(cat "$T/upgrade-agent.s") s, 4 of 4 operator requests in $(cat "$T/upgrade-operator.s") s"
gateway_stop
