#!/usr/bin/env bash
# SIGTERM with streams still open: a `tetherctl connect` stream held open by
# a FIFO, a `tetherctl forward` stream with a TCP client that keeps its
# connection, and a raw dial WebSocket (Python) are all live when the
# gateway is told to stop.  The gateway must exit 0: LeakSanitizer finds
# nothing (every TLS connection, its SSL and its bufferevent freed before
# the event loop is) and no error is logged.  Several rounds, each under two
# busy loops started here: the CPU load is what lets a connection's deferred
# callback still be queued when the loop stops (docs/0015, Shutdown).
source "$(dirname "$0")/lib.sh"

ROUNDS=${ROUNDS:-4}
py=/usr/bin/python3
$py "$TETHER_SRC/tests/integration/tcpserver.py" echo "$T/echo.port" &
PIDS+=($!)
wait_until 10 "echo server" test -s "$T/echo.port"
echo_port=$(cat "$T/echo.port")

gateway_init
gateway_start
cid=$(cluster_create alpha)
ctl token create --cluster "$cid" >"$T/join.json"
join_node n1 "$T/join.json" --allow "127.0.0.1:$echo_port" >/dev/null
client_start n1
admin=$(cat "$GW_DIR/admin.token")

streams_are() { # streams_are N: /v1/status lists N live streams
	curl -sf --cacert "$GW_DIR/ca.crt" -H "Authorization: Bearer $admin" \
		"$GW_URL/v1/status" | jq -e ".streams | length == $1" >/dev/null
}
port_open() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }

# A raw dial WebSocket that echoes one message, then holds the stream open.
cat >"$T/rawdial.py" <<'PY'
import asyncio, ssl, sys
import websockets
url, ca, token, ready = sys.argv[1:5]
async def main():
    ctx = ssl.create_default_context(cafile=ca)
    async with websockets.connect(url, ssl=ctx,
            extra_headers={"Authorization": "Bearer " + token}) as ws:
        await ws.send(b"raw dial")
        assert await ws.recv() == b"raw dial"
        open(ready, "w").write("ok")
        await asyncio.Future()
asyncio.run(main())
PY

for round in $(seq 1 "$ROUNDS"); do
	[ -n "$GW_PID" ] || gateway_start
	wait_until 30 "agent n1 active (round $round)" agent_is n1 active
	round_pids=()

	# 1. tetherctl connect, its input a FIFO nobody closes.
	rm -f "$T/connect.out" "$T/raw.ready"
	held_connect "$cid" n1 "127.0.0.1:$echo_port" "$T/connect.out" "$T/connect.log"
	round_pids+=("$HELD_PID")
	printf 'held' >&7
	wait_until 20 "connect echoed (round $round)" grep -q held "$T/connect.out"

	# 2. tetherctl forward, and a TCP client that keeps its stream.
	fwd_port=$(free_port)
	"$CTL" forward --cluster "$cid" --node n1 \
		"127.0.0.1:$fwd_port:127.0.0.1:$echo_port" 2>>"$T/forward.log" &
	round_pids+=($!)
	PIDS+=($!)
	wait_until 20 "forward listening (round $round)" port_open "$fwd_port"
	exec 8<>"/dev/tcp/127.0.0.1/$fwd_port"
	printf 'fwd\n' >&8
	read -r -t 20 echoed <&8 || fail "no echo through forward (round $round)"
	[ "$echoed" = fwd ] || fail "forward echoed '$echoed'"

	# 3. A raw dial WebSocket.
	$py "$T/rawdial.py" \
		"wss://127.0.0.1:$GW_PORT/v1/clusters/$cid/dial?target=127.0.0.1:$echo_port&node=n1" \
		"$GW_DIR/ca.crt" "$admin" "$T/raw.ready" >>"$T/rawdial.log" 2>&1 &
	round_pids+=($!)
	PIDS+=($!)
	wait_until 20 "raw dial echoed (round $round)" test -s "$T/raw.ready"
	wait_until 20 "three live streams (round $round)" streams_are 3

	# Two busy loops, only while the gateway stops.
	yes >/dev/null &
	busy1=$!
	yes >/dev/null &
	busy2=$!
	PIDS+=("$busy1" "$busy2")
	gateway_stop
	kill "$busy1" "$busy2"
	grep -q LeakSanitizer "$T/gateway.log" && fail "leak at shutdown (round $round)"
	exec 7>&- 8>&-
	kill "${round_pids[@]}" 2>/dev/null || true
	wait "${round_pids[@]}" 2>/dev/null || true
	pass "round $round: SIGTERM with a connect, a forward and a raw dial stream open: exit 0, no leak"
done
