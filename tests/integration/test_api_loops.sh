#!/usr/bin/env bash
# The admin API, the status page, /metrics and /readyz served on loop 1
# while the agent's tunnel lives on loop 0 (--workers 2 --landing any,
# docs/0040 step 6): each request goes on a connection that landed on
# loop 1 (on_loop.py), and each session action reaches the session on its
# own loop and is answered as with one loop:
#   - approve of a manual-approval agent: 200 "verifying", then active
#     (the session was told and ran the VERIFY round trip);
#   - verify: 200 "verifying", then active again;
#   - rotate-key: 200, the session was found ("held=here") and the agent's
#     key is new, the agent active throughout;
#   - the URL list: the agent on loop 0 is told (agents_told 1);
#   - /v1/status, /metrics, /readyz: answered, the tunnel shown on loop 0;
#   - revoke: 200 "revoked", the tunnel closes and the agent exits 77.
# Without the crossing (an action run on loop 1 finds no session there)
# the agent stays "verifying" and is never kicked.
source "$(dirname "$0")/lib.sh"

py=/usr/bin/python3
here=$(dirname "$0")

# on1 METHOD PATH [BODY]: the admin request on a connection landed on
# loop 1; its status in $T/on1.status, its body in $T/on1.body.
on1() {
	$py "$here/on_loop.py" "$GW_PORT" "$GW_DIR/ca.crt" "$GW_DIR/admin.token" \
		"$T/gateway.log" 1 "$@" >"$T/on1.out" 2>&1 || fail "on loop 1: $*: $(cat "$T/on1.out")"
	head -n 1 "$T/on1.out" >"$T/on1.status"
	tail -n +2 "$T/on1.out" >"$T/on1.body"
}
# answered STATUS [JQ]: the last on1's answer.
answered() {
	[ "$(cat "$T/on1.status")" = "$1" ] || fail "answer $(cat "$T/on1.status"), want $1: $(cat "$T/on1.body")"
	[ -z "${2:-}" ] || jq -e "$2" "$T/on1.body" >/dev/null || fail "answer does not hold $2: $(cat "$T/on1.body")"
}
pub_of() { openssl pkey -in "$1" -pubout -outform DER | tail -c 32 | od -An -tx1 | tr -d ' \n'; }
rotated() {
	[ "$(agent_field "$id" key | jq -er .rotation)" = none ] &&
		[ "$(pub_of "$T/edge1/agent.key")" != "$pub0" ]
}
gone() { ! kill -0 "$edge1" 2>/dev/null; }

gateway_init
gateway_start --workers 2 --landing any --log-level debug
cid=$(cluster_create loops)
ctl token create --cluster "$cid" --approval manual >"$T/join.json"
join_node edge1 "$T/join.json" >/dev/null
client_start edge1
edge1=$CLIENT_PID
wait_until 20 "edge1 connected, pending approval" agent_is edge1 pending-approval
id=$(agent_id_of edge1)

on1 GET /metrics
answered 200
grep -q '^tether_loop_tunnels{loop="0"} 1$' "$T/on1.body" ||
	fail "the tunnel is not on loop 0: $(grep tether_loop_tunnels "$T/on1.body")"
on1 GET /readyz
answered 200
grep -q '^ready$' "$T/on1.body" || fail "/readyz: $(cat "$T/on1.body")"
pass "/metrics and /readyz answered on loop 1; the tunnel is on loop 0"

on1 POST "/v1/agents/$id/approve"
answered 200 '.state == "verifying"'
wait_until 20 "edge1 active after an approve served on loop 1" agent_is edge1 active
pass "approve served on loop 1: the session on loop 0 ran the VERIFY round trip"

on1 POST "/v1/agents/$id/verify"
answered 200 '.state == "verifying"'
wait_until 20 "edge1 active again after a verify served on loop 1" agent_is edge1 active
pass "verify served on loop 1: the session on loop 0 verified again"

pub0=$(pub_of "$T/edge1/agent.key")
on1 POST "/v1/agents/$id/rotate-key"
answered 200 '.key.rotation != "none"'
grep -q "msg=\"agent key rotation requested\" agent=$id held=here" "$T/gateway.log" ||
	fail "rotate-key did not find the session: $(grep 'rotation requested' "$T/gateway.log")"
wait_until 30 "edge1's key rotated" rotated
agent_is edge1 active || fail "edge1 not active after its rotation"
pass "rotate-key served on loop 1: the session on loop 0 rotated the agent's key"

on1 POST /v1/gateway/urls "{\"urls\":[\"$GW_URL\"]}"
answered 200 '.agents_told == 1'
pass "the URL list set on loop 1 is told to the agent on loop 0"

on1 GET /v1/status
answered 200 "[.agents[] | select(.id == \"$id\" and .connected)] | length == 1"
pass "/v1/status served on loop 1 shows the agent connected"

on1 POST "/v1/agents/$id/revoke"
answered 200 '.state == "revoked"'
wait_until 20 "edge1 gone after a revoke served on loop 1" gone
rc=0
wait "$edge1" || rc=$?
[ "$rc" -eq 77 ] || fail "revoked agent's run exited $rc, want 77"
pass "revoke served on loop 1 closes the tunnel on loop 0; the agent exits 77"

gateway_stop
