#!/usr/bin/env bash
# Manual approval holds an agent in pending-approval until an operator
# approves it; revoke closes its tunnel at once and refuses it from then on.
source "$(dirname "$0")/lib.sh"

gateway_init
gateway_start
cid=$(cluster_create approvals)
ctl token create --cluster "$cid" --approval manual >"$T/join.json"
join_node edge1 "$T/join.json" >/dev/null
client_start edge1
edge1=$CLIENT_PID
wait_until 20 "edge1 connected, pending approval" agent_is edge1 pending-approval
jq -e '.state == "pending-approval"' "$T/edge1/status.json" >/dev/null ||
	fail "client status: $(cat "$T/edge1/status.json")"
pass "a manual-approval agent waits in pending-approval"

id=$(agent_id_of edge1)
expect_exit 1 "$CTL" agent verify "$id"
assert_contains "$T/last.err" "awaits approval"
pass "verify before approval is refused with a reason"

ctl agent approve "$id" >/dev/null
wait_until 20 "edge1 active after approval" agent_is edge1 active
pass "approve moves it to active"

expect_exit 1 "$CTL" agent approve "$id"
assert_contains "$T/last.err" "active"
pass "approving an active agent is refused (exit 1)"

ctl agent revoke "$id" >"$T/revoke.json"
jq -e '.state == "revoked"' "$T/revoke.json" >/dev/null || fail "revoke: $(cat "$T/revoke.json")"
rc=0
wait "$edge1" || rc=$?
[ "$rc" -eq 77 ] || fail "revoked agent's run exited $rc, want 77 (revoked: not restarted)"
assert_contains "$T/client-edge1.log" "revoked"
[ "$(agent_field "$id" connected)" = false ] || fail "revoked agent still connected"
pass "revoke closes the tunnel and the agent exits 77"

expect_exit 77 "$CLIENT" run --state-dir "$T/edge1"
assert_contains "$T/last.err" "revoked"
pass "a revoked credential is refused on reconnect"

expect_exit 1 "$CTL" agent revoke "$id"
expect_exit 1 "$CTL" agent approve a-000000000000
assert_contains "$T/last.err" "no agent"
pass "revoking twice and unknown agents are refused"

gateway_stop
