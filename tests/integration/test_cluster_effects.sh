#!/usr/bin/env bash
# Cluster-wide effects (docs/0021): two gateway replicas on one private
# PostgreSQL, each driven directly; the agents' join documents name
# replica B, so B holds every tunnel, and the operator acts on replica A.
# - a user token used on B (so B has it cached) and revoked on A: B
#   refuses it at once (B's log says the revocation reached it);
# - an agent waiting for approval on B, approved on A: it becomes active
#   on B; verified on A: B runs the verification and it is active again;
# - an agent revoked on A while B holds its tunnel: B closes the tunnel
#   (the agent exits 77, "revoked"); nothing but the notice could have done
#   it (B's log names it).
# Latencies are logged, not asserted (timing is for tests/bench/).  Each
# replica runs two loops that land connections where they ran their
# handshake and tunnels by count (--workers 2 --landing any, docs/0040):
# B's two tunnels are most often one per loop (logged), and each notice
# reaches its session on the loop it lives on.
source "$(dirname "$0")/lib.sh"

PING=(--ping-interval 300 --ping-timeout 1000)
held_by_b() { # held_by_b ID STATE: B holds the agent's tunnel, in STATE
	on 2 agent list | jq -e --arg id "$1" --arg s "$2" \
		'.[] | select(.id == $id and .state == $s and .replica == "r2")' >/dev/null
}
now_ms() { date +%s%3N; }

two_replicas_on_pg "${PING[@]}" --workers 2 --landing any

cid=$(on 1 cluster create effects | jq -er .id)
on 1 token create --cluster "$cid" >"$T/join.json"
join_node n1 "$T/join.json" --allow "127.0.0.1:$echo_port" >/dev/null
client_start n1 "${PING[@]}"
n1=$CLIENT_PID
id1=$(wait_until 20 "n1 joined" jq -er '.agent_id | select(. != "")' "$T/n1/state.json";
	jq -er .agent_id "$T/n1/state.json")
wait_until 30 "n1 active on B" held_by_b "$id1" active
pass "the agent's tunnel is held by replica B (r2)"

# --- a user token revoked on A: B forgets it had proven it ---
alice=$(on 1 user create alice --cluster "$cid" | jq -er .token)
via_b_as_alice() {
	printf "$1" | env -u TETHER_TOKEN_FILE TETHER_TOKEN="$alice" \
		TETHER_SERVER="https://127.0.0.1:${RPORT[2]}" "$CTL" connect \
		--cluster "$cid" "127.0.0.1:$echo_port"
}
[ "$(via_b_as_alice cached)" = cached ] || fail "alice's token does not reach the cluster through B"
on 1 user revoke alice >/dev/null
t0=$(now_ms)
refused_on_b() {
	! via_b_as_alice again >/dev/null 2>"$T/alice.err" &&
		grep -q 401 "$T/alice.err"
}
wait_until 5 "B refuses alice's revoked token" refused_on_b
log "user token revoked on A: B refused it $(( $(now_ms) - t0 )) ms after the revoke returned (cache TTL 2000 ms)"
assert_contains "$T/replica2.log" "notices: a token was revoked: proven tokens forgotten"
pass "a user token revoked on A is refused by B, which had it cached: the notice emptied B's cache"

# --- an agent approved (and verified) on A while B holds it ---
on 1 token create --cluster "$cid" --approval manual >"$T/join2.json"
join_node n2 "$T/join2.json" >/dev/null
client_start n2 "${PING[@]}"
wait_until 20 "n2 joined" jq -er '.agent_id | select(. != "")' "$T/n2/state.json"
id2=$(jq -er .agent_id "$T/n2/state.json")
wait_until 30 "n2 pending approval on B" held_by_b "$id2" pending-approval
log "B's tunnels per loop: $(curl -sf --cacert "$GW_DIR/ca.crt" \
	-H "Authorization: Bearer $(cat "$GW_DIR/admin.token")" \
	"https://127.0.0.1:${RPORT[2]}/metrics" | grep '^tether_loop_tunnels{' | tr '\n' ' ')"
on 1 agent approve "$id2" >/dev/null
t0=$(now_ms)
wait_until 10 "n2 active on B after the approval on A" held_by_b "$id2" active
log "agent approved on A: active on B $(( $(now_ms) - t0 )) ms later (notice, re-read, VERIFY round trip)"
assert_contains "$T/replica2.log" "msg=\"agent changed in the store\" agent=$id2 from=pending-approval to=enroll"
jq -e '.state == "active"' "$T/n2/status.json" >/dev/null ||
	fail "the agent does not know it is active: $(cat "$T/n2/status.json")"
pass "an agent approved on A becomes active on B, which holds it"

on 1 agent verify "$id2" >"$T/verify.json"
jq -e '.state == "verifying"' "$T/verify.json" >/dev/null ||
	fail "verify on A: $(cat "$T/verify.json")"
wait_until 10 "n2 active again after the verification on A" held_by_b "$id2" active
on 1 agent list | jq -e --arg id "$id2" '.[] | select(.id == $id) | .last_error == ""' >/dev/null ||
	fail "the verification failed: $(on 1 agent list | jq -c --arg id "$id2" '.[] | select(.id == $id)')"
assert_contains "$T/replica2.log" "msg=\"agent changed in the store\" agent=$id2 from=active to=verifying"
pass "verify on A: B runs the round trip and the agent is active again"

# --- an agent revoked on A while B holds its tunnel ---
# Nothing on B closes a tunnel whose agent the store says is revoked but
# the notice: no periodic check, no ping failure (the agent is alive).
on 1 agent revoke "$id1" >/dev/null
t0=$(now_ms)
rc=0
wait_until 5 "B closes the revoked agent's tunnel" sh -c "! kill -0 $n1 2>/dev/null"
log "agent revoked on A: its tunnel on B closed $(( $(now_ms) - t0 )) ms after the revoke returned"
wait "$n1" || rc=$?
[ "$rc" -eq 77 ] || fail "the revoked agent's run exited $rc, want 77"
assert_contains "$T/client-n1.log" "revoked"
assert_contains "$T/replica2.log" "msg=\"agent revoked in the store: closing its tunnel\" agent=$id1"
on 2 agent list | jq -e --arg id "$id1" '.[] | select(.id == $id) | .connected == false' >/dev/null ||
	fail "B still lists the revoked agent as connected"
pass "an agent revoked on A: B closed its tunnel (the agent exits 77, revoked)"

# The other agent was left alone.
held_by_b "$id2" active || fail "n2 was disturbed by n1's revocation"
for i in 1 2; do replica_stop "$i"; done
pass "both replicas stop cleanly"
