#!/usr/bin/env bash
# kill -9 of the gateway at random moments loses and duplicates nothing.
#
# While agents register with multi-use import tokens and streams echo data
# through an agent, the gateway is killed with SIGKILL KILLS times (default
# 5), each after a random 0.2-2 s, and started again.  Afterwards:
#   - each token's uses_left is its uses minus the agents made with it,
#   - each node has exactly one agent (none duplicated, none lost) and its
#     state directory names that agent,
#   - every agent is active and connected again,
#   - PRAGMA integrity_check says ok,
#   - every stream either echoed all its bytes back unchanged (exit 0) or
#     its client exited non-zero: none ended "successfully" with less.
# It prints "counts: ..." for tests/bench/kill9_campaign.sh, which runs this
# same script with a large KILLS.
source "$(dirname "$0")/lib.sh"

KILLS=${KILLS:-5}
STREAM_BYTES=${STREAM_BYTES:-1048576}
NODES_PER_TOKEN=${NODES_PER_TOKEN:-3}

gateway_init
gateway_start
cid=$(cluster_create crash)

python3 "$TETHER_SRC/tests/integration/tcpserver.py" echo "$T/echo.port" \
	>"$T/echo.log" 2>&1 &
PIDS+=($!)
wait_until 10 "echo server" test -s "$T/echo.port"
echo_port=$(cat "$T/echo.port")

# The stream node: joined and active before the first kill.
ctl token create --cluster "$cid" >"$T/s0.json"
join_node s0 "$T/s0.json" --allow "127.0.0.1:$echo_port" >/dev/null
declare -A agent_pid
client_start s0
agent_pid[s0]=$CLIENT_PID
wait_until 30 "s0 active" agent_is s0 active

# Two multi-use tokens; their nodes join and register while the gateway dies.
nodes=()
for tok in a b; do
	ctl token create --cluster "$cid" --uses "$NODES_PER_TOKEN" >"$T/tok-$tok.json"
	for i in $(seq 1 "$NODES_PER_TOKEN"); do nodes+=("$tok$i"); done
done
token_id_of() { jq -er .token "$T/tok-$1.json" | sed 's/^tti_//; s/\..*//'; }

# stream_worker W: connects again and again until $T/stop exists, each time
# sending STREAM_BYTES random bytes through the echo server; one result line
# per stream: completed, errored or truncated.
stream_worker() {
	local w=$1 n=0 rc
	while [ ! -e "$T/stop" ]; do
		n=$((n + 1))
		head -c "$STREAM_BYTES" /dev/urandom >"$T/w$w.in"
		rc=0
		timeout 60 "$CTL" connect --cluster "$cid" --node s0 \
			"127.0.0.1:$echo_port" <"$T/w$w.in" >"$T/w$w.out" \
			2>"$T/w$w.err" || rc=$?
		if [ "$rc" -eq 124 ]; then
			echo hung
		elif [ "$rc" -ne 0 ]; then
			# Cut once open ("stream to ... ended: ..."), or never
			# opened (the gateway was down or had no agent yet).
			if grep -q "ended:" "$T/w$w.err"; then echo "errored cut"; else echo "errored refused"; fi
			sleep 0.1   # pacing, not readiness: no busy loop while it is down
		elif cmp -s "$T/w$w.in" "$T/w$w.out"; then
			echo completed
		else
			echo "truncated $(stat -c %s "$T/w$w.out") of $STREAM_BYTES"
			cp "$T/w$w.in" "$T/w$w-bad$n.in"
			cp "$T/w$w.out" "$T/w$w-bad$n.out"
		fi
	done >"$T/streams-$w.txt"
}
for w in 1 2; do
	stream_worker "$w" &
	PIDS+=($!)
	workers+=($!)
done

# join_retry NODE DOC: join needs the gateway for its CA; it is retried
# until it succeeds (a failed join writes nothing).
join_retry() {
	local tries=0
	until join_node "$1" "$2" >/dev/null 2>>"$T/join-$1.err"; do
		tries=$((tries + 1))
		[ "$tries" -lt 200 ] || fail "join of $1 never succeeded"
		sleep 0.1
	done
}

next=0
kills=0
for k in $(seq 1 "$KILLS"); do
	# Two more nodes join and start registering in this round.
	for _ in 1 2; do
		if [ "$next" -lt "${#nodes[@]}" ]; then
			n=${nodes[$next]}
			join_retry "$n" "$T/tok-${n:0:1}.json"
			client_start "$n"
			agent_pid[$n]=$CLIENT_PID
			next=$((next + 1))
		fi
	done
	ms=$((RANDOM % 1800 + 200))
	sleep "$((ms / 1000)).$(printf %03d $((ms % 1000)))"
	kill -KILL "$GW_PID"
	wait "$GW_PID" 2>/dev/null || true
	kills=$((kills + 1))
	gateway_start
done
while [ "$next" -lt "${#nodes[@]}" ]; do
	n=${nodes[$next]}
	join_retry "$n" "$T/tok-${n:0:1}.json"
	client_start "$n"
	agent_pid[$n]=$CLIENT_PID
	next=$((next + 1))
done

for n in s0 "${nodes[@]}"; do
	wait_until 90 "$n registered, reconnected and active" agent_is "$n" active
done
touch "$T/stop"
for pid in "${workers[@]}"; do wait "$pid"; done
# Stopped (exit 0, no leaks) before their state directories are looked at:
# a running agent may be writing status.json at that moment.
for n in "${!agent_pid[@]}"; do client_stop "${agent_pid[$n]}"; done
gateway_stop

db=$GW_DIR/tether.db
q() { sqlite3 -batch -noheader "$db" "$1"; }
integrity=$(q "PRAGMA integrity_check")
[ "$integrity" = ok ] || fail "integrity_check: $integrity"

for tok in a b; do
	tid=$(token_id_of "$tok")
	made=$(q "SELECT count(*) FROM agents WHERE token_id = '$tid'")
	left=$(q "SELECT uses_left FROM tokens WHERE id = '$tid'")
	[ "$made" -eq "$NODES_PER_TOKEN" ] ||
		fail "token $tid made $made agents, want $NODES_PER_TOKEN"
	[ "$left" -eq $((NODES_PER_TOKEN - made)) ] ||
		fail "token $tid has $left uses left after making $made of $NODES_PER_TOKEN"
done
for n in s0 "${nodes[@]}"; do
	rows=$(q "SELECT count(*) FROM agents WHERE cluster_id = '$cid' AND node = '$n'")
	[ "$rows" -eq 1 ] || fail "node $n has $rows agent records, want 1"
	id=$(q "SELECT id FROM agents WHERE cluster_id = '$cid' AND node = '$n' AND state = 'active'")
	[ "$id" = "$(agent_id_of "$n")" ] ||
		fail "node $n: state dir says $(agent_id_of "$n"), store has active '$id'"
	ls "$T/$n" | grep -q '\.tmp\.' && fail "node $n: temporary files left: $(ls "$T/$n")"
done
total=$(q "SELECT count(*) FROM agents")
[ "$total" -eq $((1 + ${#nodes[@]})) ] || fail "$total agents in the store, want $((1 + ${#nodes[@]}))"

cat "$T"/streams-*.txt >"$T/streams.txt"
completed=$(grep -c '^completed' "$T/streams.txt" || true)
errored=$(grep -c '^errored' "$T/streams.txt" || true)
cut=$(grep -c '^errored cut' "$T/streams.txt" || true)
bad=$(grep -c -v -e '^completed' -e '^errored' "$T/streams.txt" || true)
retried=$(grep -hc 'msg="agent registered".*retried=true' "$T/gateway.log" || true)
echo "counts: kills=$kills registrations_attempted=${#nodes[@]}" \
	"registrations_succeeded=$(q "SELECT count(*) FROM agents WHERE node <> 's0'")" \
	"registrations_retried=$retried streams_attempted=$(wc -l <"$T/streams.txt")" \
	"streams_completed=$completed streams_errored=$errored (cut_mid_stream=$cut refused_at_open=$((errored - cut)))" \
	"streams_truncated_or_hung=$bad" \
	"integrity=$integrity"
[ "$bad" -eq 0 ] || fail "streams that lost data silently or hung: $(grep -v -e '^completed' -e '^errored' "$T/streams.txt" | head -5)"
[ "$completed" -gt 0 ] || fail "no stream completed at all"
pass "$kills kills: tokens, agents and the store are consistent; $completed streams completed, $errored got an error, none lost data silently"
