#!/usr/bin/env bash
# A draining gateway keeps serving operator connections (docs/0017): a
# balancer sends them until its health check has seen /readyz 503.
#
# A gateway with no tunnel (it used to exit the instant SIGTERM came) and
# --drain-grace 1500: a connection accepted before SIGTERM but not yet in
# TLS, and one opened after it, both get an answer (503 from /readyz); the
# gateway says when it stops accepting (the drain's end, not before the
# grace), and a request under way then still gets its answer; exit 0.
# Before --drain-grace the first two saw the connection closed (the
# gateway was gone) and the third never came.
source "$(dirname "$0")/lib.sh"

gateway_init
gateway_start --drain-timeout 20000 --drain-grace 1500
/usr/bin/python3 "$TETHER_SRC/tests/integration/drain_client.py" "$GW_PORT" \
	"$GW_DIR/ca.crt" "$T/gateway.log" >"$T/drain_client.out" 2>&1 &
dc=$!
PIDS+=("$dc")
wait_until 20 "the connections held" grep -q '^held' "$T/drain_client.out"

kill -TERM "$GW_PID"
rc=0
wait "$dc" || rc=$?
cat "$T/drain_client.out" >&2
[ "$rc" -eq 0 ] || fail "a connection that reached the draining gateway got no answer"
assert_contains "$T/drain_client.out" 'A (accepted before SIGTERM): HTTP/1.1 503'
assert_contains "$T/drain_client.out" 'C (new during the drain): HTTP/1.1 503'
assert_contains "$T/drain_client.out" "B (request in flight at the drain's end): HTTP/1.1 503"
pass "during the drain, connections accepted before SIGTERM, new ones, and a request under way at its end are answered"

rc=0
wait "$GW_PID" || rc=$?
[ "$rc" -eq 0 ] || fail "gateway exited $rc after SIGTERM"
GW_PID=
assert_contains "$T/gateway.log" 'msg="stopping: draining" signal=Terminated tunnels=0 drain_timeout_ms=20000 drain_grace_ms=1500'
pass "the gateway stopped accepting at the drain's end and exited 0"
