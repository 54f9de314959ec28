#!/usr/bin/env bash
# A peer link's OPEN for an agent whose tunnel lives on another loop
# (docs/0040 step 7): the gateway runs two loops and lands tunnels by count
# (--workers 2 --landing any), so its two agents live one per loop; the
# peer route is loop 0's.  peerprobe.py plays another replica on the peer
# port and opens a stream to each agent's echo server: both carry 1 MiB
# there and back, SHA-256 equal; the one to the agent on loop 1 crossed the
# loop link from loop 0 (tether_loop_link_streams_total{from="0",to="1"}),
# and the audit names the asking replica (via=) for each.  Without the crossing loop 0 refuses the agent on loop 1
# (agent_not_here).
source "$(dirname "$0")/lib.sh"

py=/usr/bin/python3
$py "$TETHER_SRC/tests/integration/tcpserver.py" echo "$T/echo.port" &
PIDS+=($!)
wait_until 10 "echo server" test -s "$T/echo.port"
echo_port=$(cat "$T/echo.port")

metrics() {
	curl -sf --cacert "$GW_DIR/ca.crt" -H "Authorization: Bearer $(cat "$GW_DIR/admin.token")" \
		"$GW_URL/metrics"
}
tunnel_loop() {  # tunnel_loop FILE N: loop N's tether_loop_tunnels
	awk -v l="tether_loop_tunnels{loop=\"$2\"}" '$1 == l { v = $2 } END { print v + 0 }' "$1"
}
link_streams() {  # link_streams FILE FROM TO
	awk -v l="tether_loop_link_streams_total{from=\"$2\",to=\"$3\"}" \
		'$1 == l { v = $2 } END { print v + 0 }' "$1"
}
one_each() {
	metrics >"$T/each.metrics" && [ "$(tunnel_loop "$T/each.metrics" 0)" = 1 ] &&
		[ "$(tunnel_loop "$T/each.metrics" 1)" = 1 ]
}

gateway_init
PP=$(free_port)
gateway_start --workers 2 --landing any --log-level debug --peer-listen "127.0.0.1:$PP" \
	--peer-url "https://127.0.0.1:$PP" --replica-id r1 --audit-log "$T/audit.log"
cid=$(cluster_create peers)
ctl token create --cluster "$cid" --uses 2 >"$T/join.json"
join_node n1 "$T/join.json" --allow "127.0.0.1:$echo_port" >/dev/null
join_node n2 "$T/join.json" --allow "127.0.0.1:$echo_port" >/dev/null
client_start n1
wait_until 30 "n1 active" agent_is n1 active
# n2 lands on the other loop, whichever loop runs its handshake.  Only a
# request line later than the landing's wait (LAND_WAIT_MS, 250 ms after
# the handshake: a loaded machine) lands it on loop 0 whatever the counts;
# the gateway says so (a debug line), and only then does n2 dial again (at
# most 4 times).
for try in 1 2 3 4; do
	seen=$(late)
	client_start n2
	n2_pid=$CLIENT_PID
	wait_until 30 "n2 active" agent_is n2 active
	one_each && break
	[ "$(late)" -gt "$seen" ] && [ "$try" -lt 4 ] ||
		fail "n2 landed beside n1 (try $try): $(grep tether_loop_tunnels "$T/each.metrics")"
	log "a request line came late (try $try): n2 may have landed on loop 0 beside n1; again"
	client_stop "$n2_pid"
	wait_until 30 "n2 gone" eval '! agent_is n2 active'
done

probe() {
	$py "$TETHER_SRC/tests/integration/peerprobe.py" "wss://127.0.0.1:$PP/v1/peer" "$GW_DIR" "$@"
}
for n in n1 n2; do
	id=$(jq -r .agent_id "$T/$n/state.json")
	out=$(probe r-probe echo "$id" user:alice "127.0.0.1:$echo_port" $((1 << 20))) ||
		fail "$n: a stream over the peer link: $out"
	[ "$out" = "ok $((1 << 20))" ] || fail "$n: a stream over the peer link: $out"
done
metrics >"$T/after.metrics"
[ "$(link_streams "$T/after.metrics" 0 1)" -ge 1 ] ||
	fail "no stream crossed from loop 0 to loop 1: $(grep '^tether_loop_link' "$T/after.metrics")"
both_audited() { [ "$(grep 'event=stream' "$T/audit.log" | grep -c 'via=r-probe')" -ge 2 ]; }
wait_until 10 "both streams' audit lines naming the asking replica (via=r-probe)" both_audited
pass "peer OPENs for agents on loop 0 and loop 1: 1 MiB each way, SHA-256 equal; the one to loop 1 crossed the loop link; audited via=r-probe"

gateway_stop
pass "SIGTERM: exit 0"
