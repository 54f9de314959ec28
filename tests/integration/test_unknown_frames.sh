#!/usr/bin/env bash
# A newer peer's frames are skipped, never a reason to drop a tunnel or its
# streams (docs/interface.md, "The tunnel"): frame types 99, 27 (with a
# stream id) and 28, which no release knows, sent mid-tunnel
# (newer_peer.py).
# - a newer agent (the node's key, a HELLO with a key this release does not
#   know) against the real gateway: after the unknown frames the gateway
#   still answers its PING, and sends no ERROR;
# - a newer gateway (the gateway's own certificate) for the real agent:
#   unknown frames after WELCOME and between a stream's DATA frames; the
#   stream echoes both lines and the agent answers a PING after them; a
#   SETTINGS with a key the agent does not know: the URL list kept and
#   acknowledged (SETTINGS_ACK);
# - a newer gateway's dial endpoint for `tetherctl forward`: unknown frames
#   around OPEN_OK and before every echoed DATA; the forwarded connection
#   echoes both lines and forward keeps running.
source "$(dirname "$0")/lib.sh"

echo_server_start
gateway_init
gateway_start
cid=$(cluster_create newer)
ctl token create --cluster "$cid" >"$T/join.json"
join_node n1 "$T/join.json" --allow "127.0.0.1:$echo_port" >/dev/null
client_start n1
wait_until 30 "n1 active" agent_is n1 active
client_stop "$CLIENT_PID"

# --- a newer agent, the real gateway ---
/usr/bin/python3 "$TETHER_SRC/tests/integration/newer_peer.py" agent "$GW_URL" \
	"$GW_DIR/ca.crt" "$T/n1" "$T/agent.out" || true
grep -qx ok "$T/agent.out" || fail "the gateway did not carry on: $(cat "$T/agent.out")"
pass "a newer agent's unknown frames: the gateway skips them and answers its PING"

# --- a newer gateway, the real agent ---
fake_port=$(free_port)
/usr/bin/python3 "$TETHER_SRC/tests/integration/newer_peer.py" gateway "$fake_port" \
	"$GW_DIR/server.crt" "$GW_DIR/server.key" "$T/gateway.out" "$echo_port" &
fake=$!
PIDS+=("$fake")
wait_until 10 "the newer gateway listening" grep -qx listening "$T/gateway.out"
jq --arg u "https://127.0.0.1:$fake_port" '.gateway_url = $u' "$T/n1/state.json" >"$T/state.json"
cp "$T/state.json" "$T/n1/state.json"
client_start n1 --log-level debug
wait_until 30 "the newer gateway's verdict" grep -qE '^(ok|failed)' "$T/gateway.out"
grep -qx ok "$T/gateway.out" || fail "the agent did not carry on: $(cat "$T/gateway.out")"
assert_contains "$T/client-n1.log" 'msg="frame of an unknown type skipped" err="unknown frame type 99"'
kill -0 "$CLIENT_PID" || fail "the agent exited"
# The list the newer gateway pushed (SETTINGS) is in state.json, 0600,
# and in `status`; the list with a plain-http URL was not taken.
want="[\"https://127.0.0.1:$fake_port\",\"https://gw-b.invalid:8443\"]"
[ "$(jq -c .gateway_urls "$T/n1/state.json")" = "$want" ] ||
	fail "state.json's gateway_urls: $(jq -c .gateway_urls "$T/n1/state.json")"
[ "$(stat -c %a "$T/n1/state.json")" = 600 ] || fail "state.json is not 0600"
"$TETHER_BIN/tether-client" status --state-dir "$T/n1" >"$T/status.json"
[ "$(jq -c .gateway_urls "$T/status.json")" = "$want" ] ||
	fail "status: $(cat "$T/status.json")"
assert_contains "$T/client-n1.log" 'msg="gateway sent a URL list this agent cannot use: kept the one it has"'
pass "SETTINGS from a newer gateway: its unknown key skipped, the URL list kept in state.json (0600) and acknowledged; a list with an http:// URL refused whole"
client_stop "$CLIENT_PID"
pass "a newer gateway's unknown frames, between a stream's DATA: the agent skips them; the stream echoes; PING answered"

# --- a newer gateway's dial endpoint, the real tetherctl forward ---
dial_port=$(free_port)
/usr/bin/python3 "$TETHER_SRC/tests/integration/newer_peer.py" dial "$dial_port" \
	"$GW_DIR/server.crt" "$GW_DIR/server.key" "$T/dial.out" &
PIDS+=($!)
wait_until 10 "the newer dial endpoint listening" grep -qx listening "$T/dial.out"
fwd_port=$(free_port)
TETHER_SERVER=https://127.0.0.1:$dial_port "$CTL" forward --cluster "$cid" \
	"127.0.0.1:$fwd_port:127.0.0.1:$echo_port" 2>>"$T/forward.log" &
fwd=$!
PIDS+=("$fwd")
wait_until 20 "forward listening" bash -c "(exec 3<>/dev/tcp/127.0.0.1/$fwd_port)"
exec 8<>"/dev/tcp/127.0.0.1/$fwd_port"
echo one >&8
read -r -t 10 line1 <&8 || fail "no echo of the first line: $(cat "$T/dial.out" "$T/forward.log")"
echo two >&8
read -r -t 10 line2 <&8 || fail "no echo of the second line: $(cat "$T/dial.out" "$T/forward.log")"
exec 8<&-
[ "$line1 $line2" = "one two" ] || fail "forward echoed '$line1 $line2'"
kill -0 "$fwd" || fail "tetherctl forward exited: $(cat "$T/forward.log")"
if grep -q "protocol error" "$T/forward.log"; then
	fail "tetherctl forward saw a protocol error: $(cat "$T/forward.log")"
fi
pass "a newer gateway's unknown frames around OPEN_OK and DATA: tetherctl forward skips them; the stream echoes"
gateway_stop
