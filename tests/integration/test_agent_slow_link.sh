#!/usr/bin/env bash
# A node behind a slow link keeps its tunnel while the tunnel is used: the
# agent's keepalive counts any bytes read from the gateway (a TLS record
# decrypted), not only whole messages (docs/0017, "Heard means any bytes").
#
# The agent dials the gateway through slow_relay.py, which brings the
# gateway's bytes at SLOW_RATE bytes a second, in 20 ms pieces.  An upload
# through the node (tetherctl connect to an echo server beside it) makes
# the gateway send DATA frames larger than the link carries in the agent's
# --ping-interval + --ping-timeout (2 s here), while each TLS record (16 KiB
# at most, 0.5 s) arrives well within it.  The agent must not drop the
# tunnel ("no answer to a ping"), and the bytes come back whole.  An agent
# that counted only whole messages dropped it about 2 s in, the stream
# reset (tunnel_lost).
source "$(dirname "$0")/lib.sh"

SLOW_RATE=${SLOW_RATE:-32768}        # bytes/s: a 16 KiB record in 0.5 s
PING=(--ping-interval 1000 --ping-timeout 1000)
SIZE=$((256 << 10))

gateway_init
gateway_start
cid=$(cluster_create slow)

python3 "$TETHER_SRC/tests/integration/tcpserver.py" echo "$T/echo.port" \
	>"$T/echo.log" 2>&1 &
PIDS+=($!)
python3 "$TETHER_SRC/tests/integration/slow_relay.py" "$T/relay.port" "$GW_PORT" \
	"$SLOW_RATE" >"$T/relay.log" 2>&1 &
PIDS+=($!)
wait_until 10 "echo server" test -s "$T/echo.port"
wait_until 10 "slow relay" test -s "$T/relay.port"
echo_port=$(cat "$T/echo.port")
relay_url=https://127.0.0.1:$(cat "$T/relay.port")

ctl token create --cluster "$cid" >"$T/n1.json"
join_node n1 "$T/n1.json" --allow "127.0.0.1:$echo_port" >/dev/null
# The agent dials the relay (the gateway's certificate names 127.0.0.1).
jq --arg u "$relay_url" '.gateway_url = $u' "$T/n1/state.json" >"$T/state.json"
mv "$T/state.json" "$T/n1/state.json"
client_start n1 "${PING[@]}"
agent=$CLIENT_PID
wait_until 30 "n1 active" agent_is n1 active
grep -q "msg=connected gateway=$relay_url" "$T/client-n1.log" ||
	fail "the agent did not dial the relay: $(grep msg=connected "$T/client-n1.log")"

head -c "$SIZE" /dev/urandom >"$T/up"
start=$(date +%s)
"$CTL" connect --cluster "$cid" --node n1 "127.0.0.1:$echo_port" <"$T/up" >"$T/up.echo" \
	2>"$T/connect.err" || fail "connect exited $?: $(cat "$T/connect.err")"
took=$(($(date +%s) - start))
if grep -q 'no answer to a ping' "$T/client-n1.log"; then
	fail "the agent dropped its busy tunnel: $(grep 'no answer to a ping' "$T/client-n1.log" | head -3)"
fi
cmp -s "$T/up" "$T/up.echo" ||
	fail "$SIZE bytes through the slow link: $(stat -c %s "$T/up.echo") came back, or they differ"
[ "$(grep -c "msg=connected gateway=" "$T/client-n1.log")" -eq 1 ] ||
	fail "the agent connected more than once"
pass "$SIZE bytes up through a ${SLOW_RATE} B/s link in ${took} s, tunnel kept (--ping-interval 1000 --ping-timeout 1000)"

client_stop "$agent"
gateway_stop
