#!/usr/bin/env bash
# A revocation ends what is open (docs/0027): two replicas on PostgreSQL,
# the agent's tunnel on replica B (r2). A credential holds four streams at
# once: a dial through B (local), a dial through A (r1, across the peer
# link to B), a `tetherctl forward` stream through B, and an upgraded /k8s
# connection through A (across the peer link). Each is proven to echo,
# then the credential is revoked and every stream must end, each with an
# audit line saying end=revoked:
# - a user, revoked on A (`tetherctl user revoke`);
# - one token, revoked in the store by another hand (SQL: no replica's API
#   call; both replicas learn it from the store's notice only);
# - one token of a user's two, revoked on B (`tetherctl user revoke-token`):
#   the other keeps working;
# - one token revoked while both replicas' listeners are down (the notice
#   is lost): the re-read of open streams' tokens at reconnect ends them;
# - the agent, revoked on A while B holds its tunnel (streams as admin).
# The time from the revocation to the last stream ended is logged (the
# figure for docs/0027); the pass/fail deadline is a generous 5 s.  Each
# replica has two loops whose operator connections stay on the loop that
# ran their handshake (--workers 2 --landing any, docs/0040): streams live
# on both loops of each, the agent's tunnel on one of B's, and a dial
# through A on loop 1 reaches B through loop 0 (which holds the peer
# links); every loop's streams end.
source "$(dirname "$0")/lib.sh"

py=/usr/bin/python3
PING=(--ping-interval 300 --ping-timeout 1000)
now_ms() { date +%s%3N; }

two_replicas_on_pg "${PING[@]}" --workers 2 --landing any
$py "$TETHER_SRC/tests/integration/k8s_upstream.py" "$T/py.port" &
PIDS+=($!)
wait_until 10 "the kube-api stand-in" test -s "$T/py.port"

cid=$(on 1 cluster create revoke | jq -er .id)
join_agent() { # join_agent NAME: joined, active, its tunnel on B; sets AGENT_ID AGENT_PID
	on 1 token create --cluster "$cid" >"$T/join-$1.json"
	join_node "$1" "$T/join-$1.json" --allow "127.0.0.1:$echo_port" \
		--service "kube-api=http://127.0.0.1:$(cat "$T/py.port")" >/dev/null
	client_start "$1" "${PING[@]}"
	AGENT_PID=$CLIENT_PID
	wait_until 20 "$1 joined" jq -er '.agent_id | select(. != "")' "$T/$1/state.json"
	AGENT_ID=$(jq -er .agent_id "$T/$1/state.json")
	wait_until 30 "$1 active on B" sh -c "TETHER_SERVER=https://127.0.0.1:${RPORT[2]} \
		'$CTL' -o json agent list | jq -e --arg id '$AGENT_ID' \
		'.[] | select(.id == \$id and .state == \"active\" and .replica == \"r2\")'"
}

# open_streams TOKEN NODE TAG: the four streams of TAG, each echoing, held
# by held_streams.py (its report in $T/TAG.streams).
open_streams() {
	local token=$1 node=$2 tag=$3 fwd_port
	fwd_port=$(free_port)
	env -u TETHER_TOKEN_FILE TETHER_TOKEN="$token" \
		TETHER_SERVER="https://127.0.0.1:${RPORT[2]}" "$CTL" forward \
		--cluster "$cid" --node "$node" "127.0.0.1:$fwd_port:127.0.0.1:$echo_port" \
		2>>"$T/forward-$tag.log" &
	PIDS+=($!)
	wait_until 10 "the forward of $tag listening" bash -c "(exec 3<>/dev/tcp/127.0.0.1/$fwd_port)"
	CTL=$CTL CLUSTER=$cid NODE=$node ECHO_PORT=$echo_port TOKEN=$token \
		CAFILE=$GW_DIR/ca.crt $py "$TETHER_SRC/tests/integration/held_streams.py" \
		"dial:dial-local:https://127.0.0.1:${RPORT[2]}" \
		"dial:dial-peer:https://127.0.0.1:${RPORT[1]}" \
		"tcp:forward:$fwd_port" \
		"k8s:k8s-exec:https://127.0.0.1:${RPORT[1]}/k8s/clusters/$cid/api/v1/namespaces/default/pods/p/exec" \
		>"$T/$tag.streams" &
	PIDS+=($!)
	wait_until 30 "the four streams of $tag echo" \
		sh -c "[ \$(grep -c '^ready ' '$T/$tag.streams') -eq 4 ]"
	if grep '^broken ' "$T/$tag.streams"; then fail "$tag: a stream broke"; fi
}

# all_end TAG T0: all four streams end within 5 s; logs the time from T0
# (ms) to the last one ended.
all_end() {
	local tag=$1 t0=$2 last
	wait_until 5 "the four streams of $tag end" \
		sh -c "[ \$(grep -c '^ended ' '$T/$tag.streams') -eq 4 ]"
	last=$(awk '$1 == "ended" { if ($3 > m) m = $3 } END { print m }' "$T/$tag.streams")
	log "$tag: the last of 4 streams ended $(( last - t0 )) ms after the revocation began" \
		"($(awk -v t0="$t0" '$1 == "ended" { printf "%s %d ms; ", $2, $3 - t0 }' "$T/$tag.streams"))"
}

# audited N PATTERN COUNT: replica N's log has COUNT audit lines matching.
audited() { [ "$(grep -c -- "$2" "$T/replica$1.log")" -ge "$3" ]; }
# revoked_audits WHO: each stream's audit line says end=revoked: on A the
# peer dial and the /k8s exchange, on B the local dial, the forward stream,
# and the far halves of A's two.
revoked_audits() {
	local who=$1
	wait_until 5 "A's audit lines for $who" audited 1 \
		"msg=audit event=stream who=$who .* replica=r2 via=\"\" .*end=revoked reason=" 1
	wait_until 5 "A's /k8s audit line for $who" audited 1 \
		"msg=audit event=k8s who=$who .*path=/api/v1/namespaces/default/pods/p/exec status=101 .*end=revoked reason=" 1
	wait_until 5 "B's audit lines for $who" audited 2 \
		"msg=audit event=stream who=$who .* replica=r2 via=\"\" .*end=revoked reason=" 2
	wait_until 5 "B's audit lines for $who's streams from A" audited 2 \
		"msg=audit event=stream who=$who .* replica=r2 via=r1 .*end=revoked reason=" 2
}

join_agent n1
n1=$AGENT_PID
n1_id=$AGENT_ID

# --- a token, revoked in the store: both replicas hear the notice only ---
bob=$(on 1 user create bob --cluster "$cid" | jq -er .token)
bob_id=$(on 1 user list | jq -er '.[] | select(.name == "bob") | .token_id')
open_streams "$bob" n1 token
t0=$(now_ms)
pg_query "UPDATE tokens SET revoked = 1 WHERE id = '$bob_id'" >/dev/null
all_end token "$t0"
revoked_audits user:bob
assert_contains "$T/replica1.log" "msg=\"notices: a revocation ends the streams it opened here\" token=$bob_id streams=2"
assert_contains "$T/replica2.log" "msg=\"notices: a revocation ends the streams it opened here\" token=$bob_id streams=2"
pass "a token revoked in the store: its four streams on both replicas ended, each audited end=revoked"

# --- one token of two, revoked on B with `tetherctl user revoke-token` ---
dave=$(on 1 user create dave --cluster "$cid" | jq -er .token)
dave_id=$(on 1 user list | jq -er '.[] | select(.name == "dave") | .token_id')
dave2=$(on 1 user create dave --cluster "$cid" | jq -er .token)
open_streams "$dave" n1 one-token
t0=$(now_ms)
on 2 user revoke-token "$dave_id" >"$T/revoke-token.json"
all_end one-token "$t0"
jq -e --arg id "$dave_id" '.token_id == $id and .name == "dave" and .revoked == true' \
	"$T/revoke-token.json" >/dev/null || fail "revoke-token answered $(cat "$T/revoke-token.json")"
revoked_audits user:dave
[ "$(printf 'still\n' | env -u TETHER_TOKEN_FILE TETHER_TOKEN="$dave2" \
	TETHER_SERVER="https://127.0.0.1:${RPORT[1]}" "$CTL" connect --cluster "$cid" \
	--node n1 "127.0.0.1:$echo_port")" = still ] || fail "dave's other token stopped working"
expect_exit 1 on 1 user revoke-token 0123456789abcdef
assert_contains "$T/last.err" "no user token 0123456789abcdef"
pass "one token revoked on B (revoke-token): its four streams ended, each audited end=revoked; the user's other token still works"

# --- a token revoked while both replicas' listeners were down: the notice
# is lost, and the re-read after the listener reconnects ends the streams ---
carol=$(on 1 user create carol --cluster "$cid" | jq -er .token)
carol_id=$(on 1 user list | jq -er '.[] | select(.name == "carol") | .token_id')
open_streams "$carol" n1 missed
t0=$(now_ms)
# One transaction: the listeners' backends are gone (waited for) before the
# revocation commits; they reconnect 0.5 s later at the earliest.
pg_query "SELECT pg_terminate_backend(pid, 5000) FROM pg_stat_activity
	WHERE query ILIKE 'listen%'; UPDATE tokens SET revoked = 1 WHERE id = '$carol_id'" >/dev/null
all_end missed "$t0"
revoked_audits user:carol
for i in 1 2; do
	grep -q "msg=\"notices: a token was revoked: proven tokens forgotten\" token=$carol_id" \
		"$T/replica$i.log" && fail "replica $i heard carol's notice: the test missed nothing"
	assert_contains "$T/replica$i.log" "msg=\"notices: a revocation ends the streams it opened here\" token=$carol_id streams=2"
done
pass "a token revoked while the listeners were down: the re-read after they reconnected ended its four streams"

# --- a user, revoked on A ---
alice=$(on 1 user create alice --cluster "$cid" | jq -er .token)
open_streams "$alice" n1 user
t0=$(now_ms)
on 1 user revoke alice >/dev/null
all_end user "$t0"
revoked_audits user:alice
pass "a user revoked on A: the four streams of its token on both replicas ended, each audited end=revoked"

# --- the agent, revoked on A while B holds its tunnel ---
admin=$(cat "$GW_DIR/admin.token")
open_streams "$admin" n1 agent
t0=$(now_ms)
on 1 agent revoke "$n1_id" >/dev/null
all_end agent "$t0"
wait_until 5 "A's audit lines for the agent" audited 1 \
	"msg=audit event=stream who=admin:.* replica=r2 via=\"\" .*end=revoked reason=" 1
wait_until 5 "A's /k8s audit line for the agent" audited 1 \
	"msg=audit event=k8s who=admin:.*status=101 .*end=revoked reason=" 1
wait_until 5 "B's audit lines for the agent" audited 2 \
	"msg=audit event=stream who=admin:.* replica=r2 via=\"\" .*end=revoked reason=\"agent $n1_id revoked\"" 2
rc=0
wait "$n1" || rc=$?
[ "$rc" -eq 77 ] || fail "the revoked agent exited $rc, want 77"
pass "an agent revoked on A while B holds it: its four streams ended, each audited end=revoked"

# Streams were on both loops of each replica: some crossed between them.
for i in 1 2; do
	c=$(loop_crossings "https://127.0.0.1:${RPORT[$i]}")
	[ "$c" -gt 0 ] || fail "replica $i: no stream crossed between its loops (--landing any)"
	log "replica $i: $c streams crossed between its loops"
done

for i in 1 2; do replica_stop "$i"; done
pass "both replicas stop cleanly"
