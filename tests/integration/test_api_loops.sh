#!/usr/bin/env bash
# The admin API, the status page, /metrics and /readyz served on one loop
# while the agent's tunnel lives on the other (--workers 2 --landing any,
# docs/0040 step 6): two agents, one tunnel per loop (step 7 lands a
# tunnel on the loop with the fewest: the second goes where the first is
# not, shown by tether_loop_tunnels); each agent's requests go on
# connections that landed on the loop its tunnel is not on (on_loop.py),
# and each session action reaches the session on its own loop and is
# answered as with one loop:
#   - approve of a manual-approval agent: 200 "verifying", then active
#     (the session was told and ran the VERIFY round trip);
#   - verify: 200 "verifying", then active again;
#   - rotate-key: 200, the session was found ("held=here") and the agent's
#     key is new, the agent active throughout;
#   - the URL list: both agents are told (agents_told 2);
#   - /v1/status, /metrics, /readyz: answered;
#   - streams to edge_a from connections landed on both loops (those on
#     the other loop cross the loop link): /v1/status lists every one
#     (each loop lists its own: a gather);
#   - revoke: 200 "revoked" once every loop ended the agent's streams
#     (each audited end=revoked, none cut as "tunnel_lost" by the kick
#     that follows), the tunnel closes and the agent exits 77.
# Without the crossing (an action run on the asking loop finds no session
# there) the agent stays "verifying" and is never kicked.
source "$(dirname "$0")/lib.sh"

py=/usr/bin/python3
here=$(dirname "$0")

# ask METHOD PATH [BODY]: the admin request on a connection landed on loop
# $AL; its status in $T/ask.status, its body in $T/ask.body.
ask() {
	$py "$here/on_loop.py" "$GW_PORT" "$GW_DIR/ca.crt" "$GW_DIR/admin.token" \
		"$T/gateway.log" "$AL" "$@" >"$T/ask.out" 2>&1 || fail "on loop $AL: $*: $(cat "$T/ask.out")"
	head -n 1 "$T/ask.out" >"$T/ask.status"
	tail -n +2 "$T/ask.out" >"$T/ask.body"
}
# answered STATUS [JQ]: the last ask's answer.
answered() {
	[ "$(cat "$T/ask.status")" = "$1" ] || fail "answer $(cat "$T/ask.status"), want $1: $(cat "$T/ask.body")"
	[ -z "${2:-}" ] || jq -e "$2" "$T/ask.body" >/dev/null || fail "answer does not hold $2: $(cat "$T/ask.body")"
}
metrics() {
	curl -sf --cacert "$GW_DIR/ca.crt" -H "Authorization: Bearer $(cat "$GW_DIR/admin.token")" \
		"$GW_URL/metrics"
}
# tunnels_on N: the tunnels loop N holds (tether_loop_tunnels).
tunnels_on() {
	metrics | awk -v l="$1" '$1 == "tether_loop_tunnels{loop=\"" l "\"}" { n = $2 } END { print n + 0 }'
}
pub_of() { openssl pkey -in "$1" -pubout -outform DER | tail -c 32 | od -An -tx1 | tr -d ' \n'; }
rotated() { # rotated NODE ID OLDPUB
	[ "$(agent_field "$2" key | jq -er .rotation)" = none ] &&
		[ "$(pub_of "$T/$1/agent.key")" != "$3" ]
}
gone() { ! kill -0 "$1" 2>/dev/null; }

# connect NODE: joins NODE (manual approval) and runs its agent until it
# waits for approval; sets PID_<NODE> and ID_<NODE>.
connect() {
	join_node "$1" "$T/join.json" --allow "127.0.0.1:$echo_port" >/dev/null
	client_start "$1"
	printf -v "PID_$1" %s "$CLIENT_PID"
	wait_until 20 "$1 connected, pending approval" agent_is "$1" pending-approval
	printf -v "ID_$1" %s "$(agent_id_of "$1")"
}

# actions NODE TL: approve, verify and rotate-key of NODE, whose tunnel is
# on loop TL, each asked on the other loop.
actions() {
	local node=$1 TL=$2 id pub0
	local -n pid=PID_$node
	id=$(agent_id_of "$node")
	AL=$((1 - TL))
	ask POST "/v1/agents/$id/approve"
	answered 200 '.state == "verifying"'
	wait_until 20 "$node active after an approve served on loop $AL" agent_is "$node" active
	pass "$node: approve served on loop $AL: the session on loop $TL ran the VERIFY round trip"

	ask POST "/v1/agents/$id/verify"
	answered 200 '.state == "verifying"'
	wait_until 20 "$node active again after a verify served on loop $AL" agent_is "$node" active
	pass "$node: verify served on loop $AL: the session on loop $TL verified again"

	pub0=$(pub_of "$T/$node/agent.key")
	ask POST "/v1/agents/$id/rotate-key"
	answered 200 '.key.rotation != "none"'
	grep -q "msg=\"agent key rotation requested\" agent=$id held=here" "$T/gateway.log" ||
		fail "rotate-key did not find $node's session: $(grep 'rotation requested' "$T/gateway.log")"
	wait_until 30 "$node's key rotated" rotated "$node" "$id" "$pub0"
	agent_is "$node" active || fail "$node not active after its rotation"
	pass "$node: rotate-key served on loop $AL: the session on loop $TL rotated the agent's key"
	: "$pid"
}

# crossed FROM TO: streams opened from loop FROM to loop TO over their link.
crossed() {
	metrics | awk -v k="tether_loop_link_streams_total{from=\"$1\",to=\"$2\"}" \
		'$1 == k { n = $2 } END { print n + 0 }'
}
# open4 B NODE: four `tetherctl connect`s to the echo server through NODE,
# held open (held_streams.py, its report in $T/heldB.streams), each a
# connection of its own, living on loop 0 or 1.
open4() {
	local b=$1 node=$2 specs=() i
	for i in 1 2 3 4; do specs+=("dial:s$b-$i:$GW_URL"); done
	CTL=$CTL CLUSTER=$cid NODE=$node ECHO_PORT=$echo_port TOKEN=$(cat "$GW_DIR/admin.token") \
		CAFILE=$GW_DIR/ca.crt $py "$here/held_streams.py" "${specs[@]}" >"$T/held$b.streams" &
	PIDS+=($!)
	wait_until 30 "the four streams of batch $b echo" \
		sh -c "[ \$(grep -c '^ready ' '$T/held$b.streams') -eq 4 ]"
	if grep '^broken ' "$T/held$b.streams"; then fail "batch $b: a stream broke"; fi
	nstreams=$((nstreams + 4))
}
ended_all() { [ "$(cat "$T"/held*.streams | grep -c '^ended ')" -eq "$nstreams" ]; }

# revoke NODE TL: revoke of NODE, whose tunnel is on loop TL, asked on
# the other loop.
revoke() {
	local node=$1 TL=$2 id rc=0
	local -n pid=PID_$node
	id=$(agent_id_of "$node")
	AL=$((1 - TL))
	ask POST "/v1/agents/$id/revoke"
	answered 200 '.state == "revoked"'
	wait_until 20 "$node gone after a revoke served on loop $AL" gone "$pid"
	wait "$pid" || rc=$?
	[ "$rc" -eq 77 ] || fail "$node: revoked agent's run exited $rc, want 77"
	pass "$node: revoke served on loop $AL closes the tunnel on loop $TL; the agent exits 77"
}

echo_server_start
gateway_init
gateway_start --workers 2 --landing any --log-level debug
cid=$(cluster_create loops)
ctl token create --cluster "$cid" --approval manual --uses 2 >"$T/join.json"
connect edge_a
if [ "$(tunnels_on 0)" -eq 1 ]; then TL_A=0; else TL_A=1; fi
[ "$(tunnels_on "$TL_A")" -eq 1 ] && [ "$(tunnels_on $((1 - TL_A)))" -eq 0 ] ||
	fail "edge_a's tunnel is not on one loop: $(metrics | grep tether_loop_tunnels)"
log "edge_a's tunnel is on loop $TL_A"

AL=$((1 - TL_A))
ask GET /metrics
answered 200
grep -q "^tether_loop_tunnels{loop=\"$TL_A\"} 1\$" "$T/ask.body" ||
	fail "/metrics on loop $AL: $(grep tether_loop_tunnels "$T/ask.body")"
ask GET /readyz
answered 200
grep -q '^ready$' "$T/ask.body" || fail "/readyz: $(cat "$T/ask.body")"
pass "/metrics and /readyz answered on loop $AL"

actions edge_a "$TL_A"

# edge_b, once edge_a is active, lands on the loop with the fewest tunnels.
connect edge_b
TL_B=$((1 - TL_A))
[ "$(tunnels_on "$TL_A")" -eq 1 ] && [ "$(tunnels_on "$TL_B")" -eq 1 ] ||
	fail "edge_b did not land on loop $TL_B: $(metrics | grep tether_loop_tunnels)"
log "edge_b's tunnel is on loop $TL_B"
actions edge_b "$TL_B"

ask POST /v1/gateway/urls "{\"urls\":[\"$GW_URL\"]}"
answered 200 '.agents_told == 2'
pass "the URL list set on loop $AL is told to both agents, one on each loop"

ask GET /v1/status
answered 200 "[.agents[] | select(.connected)] | length == 2"
pass "/v1/status served on loop $AL shows both agents connected"

# Streams to edge_a from connections on both loops: those living on loop
# $TL_B cross the link to its tunnel, the others live on loop $TL_A.
# Batches of four until both loops hold some.
nstreams=0
for b in 1 2 3; do
	open4 "$b" edge_a
	k=$(crossed "$TL_B" "$TL_A")
	[ "$k" -gt 0 ] && [ "$k" -lt "$nstreams" ] && break
done
[ "$k" -gt 0 ] && [ "$k" -lt "$nstreams" ] ||
	fail "the $nstreams streams did not spread over both loops ($k crossed from loop $TL_B)"
for AL in 0 1; do
	ask GET /v1/status
	answered 200 "[.streams[] | select(.kind == \"connect\" and .node == \"edge_a\")] | length == $nstreams"
done
pass "/v1/status on either loop lists all $nstreams live streams: $k on loop $TL_B, $((nstreams - k)) on loop $TL_A"

[ "$(tunnels_on "$TL_A")" -eq 1 ] && [ "$(tunnels_on "$TL_B")" -eq 1 ] ||
	fail "a tunnel moved during the test: $(metrics | grep tether_loop_tunnels)"
revoke edge_a "$TL_A"
wait_until 10 "every stream of edge_a ended" ended_all
audited_revoked() {
	[ "$(grep -c "msg=audit event=stream .*end=revoked reason=\"agent $ID_edge_a revoked\"" "$T/gateway.log")" -eq "$nstreams" ]
}
wait_until 10 "every stream audited end=revoked" audited_revoked
! grep -q 'msg=audit event=stream .*end=tunnel_lost' "$T/gateway.log" ||
	fail "a stream was cut by the tunnel's close: $(grep 'end=tunnel_lost' "$T/gateway.log")"
pass "edge_a's $nstreams streams on both loops ended, each audited end=revoked (none cut by the kick)"
revoke edge_b "$TL_B"

gateway_stop
