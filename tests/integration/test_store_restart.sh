#!/usr/bin/env bash
# PostgreSQL restarted under load (docs/0021): two replicas on one private
# PostgreSQL, an agent on replica B and a stream through it moving bytes.
# - PostgreSQL stopped: both replicas' /readyz answer 503 with the reason
#   ("store unreachable: ..."), neither crashes, an admin request fails
#   with a reason (503, "the store cannot answer...", not an invalid token) instead of
#   hanging, and the established stream keeps echoing;
# - PostgreSQL started again: /readyz is 200 again by itself, the stream
#   still echoes, a new agent registers, and the store lost nothing (the
#   counts before, plus what was added since).
source "$(dirname "$0")/lib.sh"

PING=(--ping-interval 300 --ping-timeout 1000)
two_replicas_on_pg "${PING[@]}"
export TETHER_SERVER=https://127.0.0.1:${RPORT[2]}

cid=$(on 1 cluster create restart | jq -er .id)
on 1 token create --cluster "$cid" >"$T/join1.json"
join_node n1 "$T/join1.json" --allow "127.0.0.1:$echo_port" >/dev/null
client_start n1 "${PING[@]}"
n1=$CLIENT_PID
wait_until 30 "n1 active" agent_is n1 active
id1=$(agent_id_of n1)

held_connect "$cid" n1 "127.0.0.1:$echo_port" "$T/stream.out" "$T/stream.err"
echoes() { # echoes WORD: WORD went through the stream and came back
	printf '%s\n' "$1" >&7
	wait_until 10 "'$1' echoed through the stream" grep -qx "$1" "$T/stream.out"
}
echoes before
counts() {
	pg_query "SELECT (SELECT count(*) FROM clusters) || ',' ||
		(SELECT count(*) FROM tokens) || ',' || (SELECT count(*) FROM agents)"
}
before=$(counts)
IFS=, read -r c0 t0 a0 <<<"$before"
log "store before the restart: clusters,tokens,agents = $before"

# --- PostgreSQL down ---
pg_stop
for i in 1 2; do
	wait_until 20 "replica $i's /readyz 503" test "$(replica_readyz "$i")" = 503
	assert_contains "$T/readyz$i.body" "store unreachable: "
	log "replica $i while the store is down: /readyz 503 $(head -1 "$T/readyz$i.body")"
done
pass "PostgreSQL stopped: both replicas answer /readyz 503 with the reason"

started=$SECONDS
rc=0
on 1 cluster list >/dev/null 2>"$T/list.err" || rc=$?
[ "$rc" -eq 1 ] || fail "cluster list while the store is down exited $rc, want 1"
assert_contains "$T/list.err" "store"
log "an admin request while the store is down: exit 1 after $((SECONDS - started)) s: $(head -1 "$T/list.err")"
# A few lease renewals and listener reconnects fail meanwhile: the stream
# moves bytes through all of it.
for w in during-1 during-2 during-3; do
	echoes "$w"
	for i in 1 2; do
		[ "$(replica_readyz "$i")" = 503 ] || fail "replica $i's /readyz is not 503 while the store is down"
	done
done
for i in 1 2; do kill -0 "${RPID[$i]}" 2>/dev/null || fail "replica $i died while the store was down"; done
kill -0 "$n1" 2>/dev/null || fail "the agent exited while the store was down"
pass "while the store is down: no replica crashes, the agent stays, the stream keeps echoing"

# --- PostgreSQL back ---
pg_ctl_start 7>&- || { cat "$PG_DIR/log" >&2; fail "PostgreSQL did not start again"; }
back=$SECONDS
for i in 1 2; do wait_until 30 "replica $i's /readyz 200 again" replica_ready "$i"; done
log "PostgreSQL started again: both replicas ready $((SECONDS - back)) s later"
echoes after
pass "PostgreSQL back: /readyz 200 by itself on both; the stream still echoes"

# The loop's own connection re-opens at its next statement, at most once
# per 2 s (docs/0021): a request in that window fails and is retried.
back=$SECONDS
token_created() { on 1 token create --cluster "$cid" >"$T/join2.json" 2>"$T/create.err"; }
wait_until 10 "replica A's admin API answers again" token_created
log "replica A created a token $((SECONDS - back)) s after it was ready again"
join_node n2 "$T/join2.json" >/dev/null
client_start n2 "${PING[@]}" 7>&-   # not a writer of the stream's input
wait_until 30 "n2 active" agent_is n2 active
pass "a new agent registers and becomes active after the restart"

after=$(counts)
log "store after the restart: clusters,tokens,agents = $after"
[ "$after" = "$c0,$((t0 + 1)),$((a0 + 1))" ] ||
	fail "store after the restart: $after, want $c0,$((t0 + 1)),$((a0 + 1)) (before: $before, plus one token and one agent)"
[ "$(pg_query "SELECT state FROM agents WHERE id = '$id1'")" = active ] ||
	fail "n1's record changed: $(pg_query "SELECT state, last_error FROM agents WHERE id = '$id1'")"
wait_until 10 "n1's tunnel recorded against r2" \
	test "$(pg_query "SELECT replica_id FROM tunnels WHERE agent_id = '$id1'")" = r2
pass "nothing lost: the counts are the ones before plus the new token and agent; n1 is active, held by r2"

exec 7>&-
rc=0
wait "$HELD_PID" || rc=$?
[ "$rc" -eq 0 ] || fail "the stream opened before the restart ended with $rc"
for i in 1 2; do replica_stop "$i"; done
pass "the stream ends cleanly; both replicas stop cleanly"
