#!/usr/bin/env bash
# SIGTERM drains the gateway (docs/0017).
#
# 1. With a `tetherctl connect` stream open and a long --drain-timeout:
#    /readyz answers 503 at once, the agent gets the RECONNECT frame, retires
#    its tunnel (which keeps carrying the stream) and tries a new one, which
#    the draining gateway refuses (503).  The stream still echoes during the
#    drain and ends cleanly (its client exits 0); the gateway exits 0 as
#    soon as the stream is over, not at the drain's end.  A new gateway on
#    the same port gets the agent back by itself.
# 2. With a stream that outlives a short --drain-timeout: the drain ends,
#    the stream is cut (its client exits non-zero) and the gateway still
#    exits 0.
source "$(dirname "$0")/lib.sh"

py=/usr/bin/python3
$py "$TETHER_SRC/tests/integration/tcpserver.py" echo "$T/echo.port" &
PIDS+=($!)
wait_until 10 "echo server" test -s "$T/echo.port"
echo_port=$(cat "$T/echo.port")

readyz_code() {
	curl -s -o /dev/null -w '%{http_code}' --cacert "$GW_DIR/ca.crt" "$GW_URL/readyz"
}
gone() { ! kill -0 "$1" 2>/dev/null; }

gateway_init
gateway_start --drain-timeout 60000
cid=$(cluster_create drain)
ctl token create --cluster "$cid" >"$T/join.json"
join_node n1 "$T/join.json" --allow "127.0.0.1:$echo_port" >/dev/null
client_start n1
agent=$CLIENT_PID
wait_until 30 "n1 active" agent_is n1 active
[ "$(readyz_code)" = 200 ] || fail "/readyz is not 200 before the drain"

# --- 1. a stream that finishes within the drain timeout ---
held_connect "$cid" n1 "127.0.0.1:$echo_port" "$T/out" "$T/connect.err"
cpid=$HELD_PID
echo "before the drain" >&7
wait_until 20 "echo before the drain" grep -q "before the drain" "$T/out"

kill -TERM "$GW_PID"
wait_until 5 "/readyz 503 once SIGTERM arrived" test "$(readyz_code)" = 503
pass "/readyz answers 503 during the drain"
wait_until 20 "the agent gets RECONNECT" \
	grep -q 'msg="gateway asks to reconnect elsewhere" reason="gateway draining"' \
	"$T/client-n1.log"
assert_contains "$T/gateway.log" 'msg="drain: agent told to reconnect elsewhere"'
wait_until 20 "the agent retires the tunnel with the stream" \
	grep -q 'msg="reconnecting elsewhere; the streams in flight stay on the previous tunnel" streams=1' \
	"$T/client-n1.log"
wait_until 20 "the draining gateway refuses the agent's new tunnel" \
	grep -q 'msg="cannot open the tunnel".*http_status=503' "$T/client-n1.log"
pass "the agent got the RECONNECT frame and tried a new tunnel; the draining gateway refused it"

echo "during the drain" >&7
wait_until 20 "echo during the drain" grep -q "during the drain" "$T/out"
exec 7>&-
rc=0
wait "$cpid" || rc=$?
[ "$rc" -eq 0 ] || fail "tetherctl connect exited $rc: $(cat "$T/connect.err")"
pass "the stream in flight kept working during the drain and ended cleanly"

rc=0
wait "$GW_PID" || rc=$?
[ "$rc" -eq 0 ] || fail "gateway exited $rc after the drain"
GW_PID=
grep -q 'drain over: closing the tunnels left' "$T/gateway.log" &&
	fail "the drain ran to its timeout although the stream had ended"
pass "the gateway exited 0 once the stream was done, before its drain timeout"
wait_until 20 "the agent closed its retired tunnel" \
	grep -q 'msg="previous tunnel closed"' "$T/client-n1.log"

gateway_start --drain-timeout 1500
wait_until 40 "n1 back on the new gateway by itself" agent_is n1 active
pass "the agent reconnected to the new gateway"

# --- 2. a stream that outlives the drain timeout is cut at its end ---
held_connect "$cid" n1 "127.0.0.1:$echo_port" "$T/out2" "$T/connect2.err"
cpid=$HELD_PID
echo "held" >&7
wait_until 20 "echo of the held stream" grep -q held "$T/out2"
gateway_stop
assert_contains "$T/gateway.log" 'msg="drain over: closing the tunnels left" tunnels=1'
wait_until 20 "the held stream's client ends" gone "$cpid"
rc=0
wait "$cpid" || rc=$?
exec 7>&-
[ "$rc" -ne 0 ] || fail "tetherctl connect exited 0 although its stream was cut"
pass "a stream past --drain-timeout is cut, and the gateway still exits 0"

client_stop "$agent"
