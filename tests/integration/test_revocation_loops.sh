#!/usr/bin/env bash
# A revocation ends the streams of every event loop (docs/0040 step 6):
# one gateway with two loops whose operator connections land on the loop
# that ran their handshake (--workers 2 --landing any), one agent. A user
# token holds nine streams at once (six dials, a `tetherctl forward`
# stream, two upgraded /k8s connections), spread over both loops: the ones
# on the agent's loop reach it there, the others cross the link between
# the loops (tether_loop_link_streams_total says how many). The user's
# token is revoked through the API (one connection, on one of the loops):
# every stream ends, each audited end=revoked, the count of all nine is
# logged once; the token is refused at once on connections landing on
# either loop (no loop's cache of proven tokens kept it). Then the agent
# is revoked with admin streams open on both loops: they end too.
source "$(dirname "$0")/lib.sh"

py=/usr/bin/python3
NSTREAMS=9

echo_server_start
$py "$TETHER_SRC/tests/integration/k8s_upstream.py" "$T/py.port" &
PIDS+=($!)
wait_until 10 "the kube-api stand-in" test -s "$T/py.port"

gateway_init
gateway_start --workers 2 --landing any
cid=$(cluster_create loops)
ctl token create --cluster "$cid" >"$T/join.json"
join_node n1 "$T/join.json" --allow "127.0.0.1:$echo_port" \
	--service "kube-api=http://127.0.0.1:$(cat "$T/py.port")" >/dev/null
client_start n1
wait_until 20 "n1 active" agent_is n1 active

# open_streams TOKEN TAG: NSTREAMS streams of TAG, each echoing, held by
# held_streams.py (its report in $T/TAG.streams).
open_streams() {
	local token=$1 tag=$2 fwd_port specs=()
	fwd_port=$(free_port)
	env -u TETHER_TOKEN_FILE TETHER_TOKEN="$token" "$CTL" forward \
		--cluster "$cid" --node n1 "127.0.0.1:$fwd_port:127.0.0.1:$echo_port" \
		2>>"$T/forward-$tag.log" &
	PIDS+=($!)
	wait_until 10 "the forward of $tag listening" bash -c "(exec 3<>/dev/tcp/127.0.0.1/$fwd_port)"
	for i in 1 2 3 4 5 6; do specs+=("dial:dial-$i:$GW_URL"); done
	specs+=("tcp:forward:$fwd_port")
	for i in 1 2; do
		specs+=("k8s:k8s-$i:$GW_URL/k8s/clusters/$cid/api/v1/namespaces/default/pods/p$i/exec")
	done
	CTL=$CTL CLUSTER=$cid NODE=n1 ECHO_PORT=$echo_port TOKEN=$token \
		CAFILE=$GW_DIR/ca.crt $py "$TETHER_SRC/tests/integration/held_streams.py" \
		"${specs[@]}" >"$T/$tag.streams" &
	PIDS+=($!)
	wait_until 30 "the $NSTREAMS streams of $tag echo" \
		sh -c "[ \$(grep -c '^ready ' '$T/$tag.streams') -eq $NSTREAMS ]"
	if grep '^broken ' "$T/$tag.streams"; then fail "$tag: a stream broke"; fi
}

# on_both_loops BEFORE: of the streams opened since the link count was
# BEFORE, some crossed between the loops and some did not.
on_both_loops() {
	local n=$(( $(loop_crossings) - $1 ))
	log "$n of $NSTREAMS streams crossed between the loops"
	[ "$n" -gt 0 ] && [ "$n" -lt "$NSTREAMS" ] ||
		fail "$n of $NSTREAMS streams crossed: they are not on both loops"
}

all_end() { # all_end TAG
	wait_until 5 "the $NSTREAMS streams of $1 end" \
		sh -c "[ \$(grep -c '^ended ' '$T/$1.streams') -eq $NSTREAMS ]"
}

audited() { [ "$(grep -c -- "$1" "$T/gateway.log")" -ge "$2" ]; }

# --- a user's token revoked through the API ---
alice=$(ctl user create alice --cluster "$cid" | jq -er .token)
alice_id=$(ctl user list | jq -er '.[] | select(.name == "alice") | .token_id')
c0=$(loop_crossings)
open_streams "$alice" user
on_both_loops "$c0"
ctl user revoke-token "$alice_id" >/dev/null
all_end user
wait_until 5 "every stream of alice audited end=revoked" audited \
	"msg=audit event=[a-z0-9]* who=user:alice .*end=revoked reason=" "$NSTREAMS"
assert_contains "$T/gateway.log" \
	"msg=\"revocation: ending the streams it opened here\" token=$alice_id streams=$NSTREAMS"
# At once, on new connections landing on either loop (they alternate):
# refused, never taken from a loop's cache of proven tokens.
for i in 1 2 3 4; do
	out=$(printf 'x\n' | env -u TETHER_TOKEN_FILE TETHER_TOKEN="$alice" "$CTL" connect \
		--cluster "$cid" --node n1 "127.0.0.1:$echo_port" 2>&1) &&
		fail "alice's revoked token still reached the agent (try $i): $out"
	case $out in *revoked*|*401*) ;; *) fail "try $i: not refused as revoked: $out" ;; esac
done
pass "a token revoked through the API: its $NSTREAMS streams on both loops ended, each audited end=revoked, counted once; the token refused at once on either loop"

# --- the agent revoked, admin streams open on both loops ---
admin=$(cat "$GW_DIR/admin.token")
c0=$(loop_crossings)
open_streams "$admin" agent
on_both_loops "$c0"
ctl agent revoke "$(agent_id_of n1)" >/dev/null
all_end agent
assert_contains "$T/gateway.log" \
	"msg=\"revocation: ending the streams it opened here\" agent=$(agent_id_of n1) streams=$NSTREAMS"
pass "an agent revoked: the $NSTREAMS admin streams on both loops ended"

gateway_stop
pass "the gateway stops cleanly"
