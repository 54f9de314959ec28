#!/usr/bin/env bash
# A peer that stops answering is noticed by its keepalive, both ways.
#
# SIGSTOP of the gateway for longer than the agent's ping timeout: the agent
# drops the tunnel, and after SIGCONT it is connected and active again.
# SIGSTOP of an agent with a stream open: the gateway drops it after its own
# ping timeout, the stream's client gets an error (exit non-zero), and after
# SIGCONT the agent comes back.  Small ping values keep it quick.
source "$(dirname "$0")/lib.sh"

PING=(--ping-interval 300 --ping-timeout 700)
gone() { ! kill -0 "$1" 2>/dev/null; }
stopped=()
on_cleanup 'for p in "${stopped[@]}"; do kill -CONT "$p" 2>/dev/null; done'

gateway_init
gateway_start "${PING[@]}"
cid=$(cluster_create stop)

python3 "$TETHER_SRC/tests/integration/tcpserver.py" echo "$T/echo.port" \
	>"$T/echo.log" 2>&1 &
PIDS+=($!)
wait_until 10 "echo server" test -s "$T/echo.port"
echo_port=$(cat "$T/echo.port")

ctl token create --cluster "$cid" >"$T/n1.json"
join_node n1 "$T/n1.json" --allow "127.0.0.1:$echo_port" >/dev/null
client_start n1 "${PING[@]}"
agent=$CLIENT_PID
wait_until 30 "n1 active" agent_is n1 active

# --- the gateway stops ---
kill -STOP "$GW_PID"
stopped+=("$GW_PID")
wait_until 20 "the agent notices the silent gateway" \
	grep -q 'msg="tunnel: no answer to a ping: dropping it and reconnecting" ping_timeout_ms=700' "$T/client-n1.log"
wait_until 20 "the agent's status says disconnected" \
	jq -e '.connected == false' "$T/n1/status.json"
kill -CONT "$GW_PID"
wait_until 40 "n1 reconnected and active after SIGCONT" agent_is n1 active
[ "$(grep -c "msg=connected gateway=$GW_URL" "$T/client-n1.log")" -ge 2 ] ||
	fail "the agent did not connect a second time"
pass "a stopped gateway is noticed by the agent's keepalive; it reconnects after SIGCONT"

# --- the agent stops, with a stream open ---
held_connect "$cid" n1 "127.0.0.1:$echo_port" "$T/out" "$T/connect.err"
cpid=$HELD_PID
echo "before the stop" >&7
wait_until 20 "the echo through the stream" grep -q "before the stop" "$T/out"

kill -STOP "$agent"
stopped+=("$agent")
wait_until 20 "the stream's client ends" gone "$cpid"
rc=0
wait "$cpid" || rc=$?
exec 7>&-
[ "$rc" -ne 0 ] || fail "tetherctl connect exited 0 although its agent was dropped"
assert_contains "$T/connect.err" "stream to 127.0.0.1:$echo_port ended"
assert_contains "$T/gateway.log" 'msg="websocket: no answer to a ping: dropping"'
assert_contains "$T/gateway.log" "ping_timeout_ms=700"
[ "$(ctl agent list | jq -r '.[0].connected')" = false ] ||
	fail "the gateway still lists the stopped agent as connected"
pass "a stopped agent is dropped by the gateway's keepalive; its stream's client exits $rc: $(cat "$T/connect.err")"

kill -CONT "$agent"
wait_until 40 "n1 back after SIGCONT" agent_is n1 active
pass "the agent comes back after SIGCONT"

client_stop "$agent"
gateway_stop
