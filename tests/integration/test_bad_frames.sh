#!/usr/bin/env bash
# Bad input on the tunnel: an out-of-phase frame, garbage, an unknown frame
# type, a text message, an oversized frame, silence past the handshake
# timeout, and an unsupported version each get an ERROR frame with a reason
# and a closed connection, while an agent connected beside them keeps working.
source "$(dirname "$0")/lib.sh"

gateway_init
gateway_start --handshake-timeout 1000
cid=$(cluster_create frames)
ctl token create --cluster "$cid" >"$T/join.json"
join_node good "$T/join.json" >/dev/null
client_start good
wait_until 20 "good agent active" agent_is good active

check_case() { # check_case CASE EXPECTED_CODE
	local rc=0
	/usr/bin/python3 "$TETHER_SRC/tests/integration/rawws.py" "wss://127.0.0.1:$GW_PORT/v1/connect" \
		"$GW_DIR/ca.crt" "$1" >"$T/raw-$1.out" 2>&1 || rc=$?
	[ "$rc" -eq 0 ] || { cat "$T/raw-$1.out" >&2; fail "$1: no ERROR frame before close"; }
	assert_contains "$T/raw-$1.out" "$2"
	assert_contains "$T/raw-$1.out" "closed"
	pass "$1: ERROR $2, connection closed"
}

check_case out-of-phase out_of_phase
check_case garbage malformed
check_case unknown-type malformed
check_case text protocol
check_case oversized frame_too_large
check_case silent timeout
check_case bad-version version

agent_is good active || fail "the good agent lost its tunnel"
curl -sf --cacert "$GW_DIR/ca.crt" "$GW_URL/healthz" >/dev/null || fail "healthz failed"
pass "the gateway kept serving and the good agent stayed connected"

# A WebSocket on another path, or without the subprotocol, is refused.
rc=0
curl -s -o /dev/null -w '%{http_code}' --cacert "$GW_DIR/ca.crt" "$GW_URL/v1/connect" >"$T/code" || rc=$?
[ "$(cat "$T/code")" = 400 ] || fail "/v1/connect without upgrade: HTTP $(cat "$T/code"), want 400"
pass "/v1/connect without a WebSocket upgrade: 400 with a reason"

gateway_stop
