#!/usr/bin/env bash
# Streams through the tunnel: integrity of 64 MiB each way through
# `tetherctl connect`, 100 concurrent streams through `tetherctl forward`,
# half-close, isolation of a stopped reader, and every refusal with its
# reason and exit code.  With two loops whose operator connections stay on
# the loop that ran their handshake (--landing any, docs/0040): streams
# reach the tunnel from both loops, some over the link between them.
source "$(dirname "$0")/lib.sh"

py=/usr/bin/python3
$py "$TETHER_SRC/tests/integration/tcpserver.py" echo "$T/echo.port" &
PIDS+=($!)
$py "$TETHER_SRC/tests/integration/tcpserver.py" source "$T/source.port" "$T/source.count" &
PIDS+=($!)
$py "$TETHER_SRC/tests/integration/blackhole.py" "$T/blackhole.port" &
PIDS+=($!)
wait_until 10 "echo, source and blackhole servers" \
	test -s "$T/echo.port" -a -s "$T/source.port" -a -s "$T/blackhole.port"
blackhole_port=$(cat "$T/blackhole.port")
echo_port=$(cat "$T/echo.port")
source_port=$(cat "$T/source.port")
closed_port=$(free_port)

gateway_init
gateway_start --workers 2 --landing any --stream-window 262144
cid=$(cluster_create streams)
ctl token create --cluster "$cid" >"$T/join.json"
join_node n1 "$T/join.json" --allow "127.0.0.1:$echo_port" --allow "127.0.0.1:$source_port" \
	--allow "127.0.0.1:$closed_port" --allow "127.0.0.1:$blackhole_port" >/dev/null
"$CLIENT" run --state-dir "$T/n1" --stream-window 262144 --dial-timeout 1000 \
	>>"$T/client-n1.log" 2>&1 &
agent_pid=$!
PIDS+=($agent_pid)
wait_until 20 "n1 active" agent_is n1 active

head -c $((64 << 20)) /dev/urandom >"$T/big"
"$CTL" connect --cluster "$cid" "127.0.0.1:$echo_port" <"$T/big" >"$T/big.echo" ||
	fail "connect exited $?"
[ "$(sha256sum <"$T/big")" = "$(sha256sum <"$T/big.echo")" ] ||
	fail "64 MiB through connect: $(stat -c %s "$T/big.echo") bytes came back, or they differ"
pass "64 MiB of random bytes through connect and back, SHA-256 equal"
# The same through pipes, whose reader may be slower than the tunnel.
sum=$(cat "$T/big" | "$CTL" connect --cluster "$cid" "127.0.0.1:$echo_port" | sha256sum) ||
	fail "connect through pipes exited $?"
[ "$sum" = "$(sha256sum <"$T/big")" ] || fail "64 MiB through connect with pipes: SHA-256 differs"
pass "the same through pipes: SHA-256 equal"

fwd_port=$(free_port)
"$CTL" forward --cluster "$cid" --node n1 "127.0.0.1:$fwd_port:127.0.0.1:$echo_port" \
	2>>"$T/forward.log" &
fwd_pid=$!
PIDS+=($fwd_pid)
port_open() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }
wait_until 20 "forward listening" port_open "$fwd_port"
$py "$TETHER_SRC/tests/integration/streamclient.py" "$fwd_port" 100 $((1 << 20)) >"$T/many.out" ||
	fail "100 concurrent streams: $(cat "$T/many.out")"
pass "100 concurrent streams of 1 MiB each through forward, all SHA-256 equal"

# Isolation: a reader that stops while other streams move bulk data.
fwd2_port=$(free_port)
"$CTL" forward --cluster "$cid" "127.0.0.1:$fwd2_port:127.0.0.1:$source_port" \
	2>>"$T/forward2.log" &
PIDS+=($!)
wait_until 20 "second forward listening" port_open "$fwd2_port"
gw_get() { # gw_get PATH: an admin GET into $T/get.out
	curl -sf --cacert "$GW_DIR/ca.crt" -H "Authorization: Bearer $(cat "$GW_DIR/admin.token")" \
		-o "$T/get.out" "$GW_URL$1"
}
recv='tether_stream_bytes_total{direction="received"}'
received() { # what the gateway received from tunnels, every stream so far
	gw_get /metrics && awk -v s="$recv" '$1 == s { v = $2 } END { print v + 0 }' "$T/get.out"
}
received0=$(received)   # the streams before have ended: the stalled one's from here
$py - "$fwd2_port" <<'PY' &
import socket, sys, time
s = socket.create_connection(("127.0.0.1", int(sys.argv[1])))
time.sleep(3600)   # connects to the source and never reads
PY
PIDS+=($!)
wait_until 20 "the source to start sending" test -s "$T/source.count"
src_down() { # the stream to the source: its bytes_down in /v1/status
	gw_get /v1/status && jq -er --arg t "127.0.0.1:$source_port" \
		'[.streams[] | select(.target == $t)] | if length == 1 then .[0].bytes_down
		 else error("want one stream to the source, got \(length)") end' "$T/get.out"
}
# What the gateway received of the stalled stream from the tunnel so far.
gw_received() { echo $(($(received) - received0)); }
window=262144
wait_until 60 "the stalled stream held in the gateway, still" \
	stream_stalled "$window" "$T/source.count"
count1=$(cat "$T/source.count")
$py "$TETHER_SRC/tests/integration/streamclient.py" "$fwd_port" 4 $((8 << 20)) >"$T/bulk.out" ||
	fail "bulk streams beside a stalled one: $(cat "$T/bulk.out")"
count2=$(cat "$T/source.count")
# Sent into a reader that never reads: kernel socket buffers on each hop plus
# one 256 KiB window per hop.  Far below this bound, and no longer growing.
[ "$count2" -lt $((48 << 20)) ] || fail "stalled stream absorbed $count2 bytes"
[ "$count2" = "$count1" ] || fail "stalled stream still growing: $count1 -> $count2"
pass "a stalled reader holds $count2 bytes in flight (bounded) while bulk streams complete"

# Half-close: the client shuts down its write side and still reads the reply.
printf 'ping' | "$CTL" connect --cluster "$cid" "127.0.0.1:$echo_port" >"$T/pong" ||
	fail "half-close connect exited $?"
[ "$(cat "$T/pong")" = ping ] || fail "half-close: got '$(cat "$T/pong")'"
pass "half-close: the reply arrives after the client's end of input"

# Refusals, each with its reason and exit code.
expect_exit 1 "$CTL" connect --cluster "$cid" 127.0.0.1:1 </dev/null
assert_contains "$T/last.err" not_allowed
assert_contains "$T/last.err" 502
expect_exit 1 "$CTL" connect --cluster "$cid" "127.0.0.1:$closed_port" </dev/null
assert_contains "$T/last.err" refused
expect_exit 1 "$CTL" connect --cluster "$cid" "127.0.0.1:$blackhole_port" </dev/null
assert_contains "$T/last.err" timeout
expect_exit 1 "$CTL" connect --cluster c-000000000000 "127.0.0.1:$echo_port" </dev/null
assert_contains "$T/last.err" 404
expect_exit 1 "$CTL" connect --cluster "$cid" --node nobody "127.0.0.1:$echo_port" </dev/null
assert_contains "$T/last.err" 404
expect_exit 3 "$CTL" --server "https://127.0.0.1:$(free_port)" connect --cluster "$cid" \
	"127.0.0.1:$echo_port" </dev/null
pass "not allowed, refused, timed out (502 each), unknown cluster and node (404), unreachable gateway (exit 3)"

agent_is n1 active || fail "refusals cost the agent its tunnel"
pass "a refused stream leaves the tunnel and the other streams alone"

# Losing the tunnel ends its streams at once: the client sees an error, not a hang.
mkfifo "$T/slow"
"$CTL" connect --cluster "$cid" "127.0.0.1:$echo_port" <"$T/slow" >"$T/lost.out" 2>"$T/lost.err" &
lost_pid=$!
exec 7>"$T/slow"
printf 'hello' >&7
wait_until 10 "the stream to carry bytes" grep -q hello "$T/lost.out"
kill -KILL "$agent_pid"
rc=0
wait "$lost_pid" || rc=$?
exec 7>&-
[ "$rc" -ne 0 ] || fail "connect exited 0 after its tunnel was lost"
pass "the agent dies mid-stream: connect exits $rc promptly ($(head -c 200 "$T/lost.err"))"
expect_exit 1 "$CTL" connect --cluster "$cid" "127.0.0.1:$echo_port" </dev/null
assert_contains "$T/last.err" 503
pass "with no agent connected: 503 and exit 1"

wait_until 10 "a stream's audit line in the gateway log" lines_match "$T/gateway.log" "msg=audit event=stream who=admin:"
pass "every stream leaves an audit line"
crossings=$(loop_crossings)
[ "$crossings" -gt 0 ] || fail "no stream crossed between the loops (--landing any)"
pass "$crossings streams crossed between the loops"

kill -TERM "$fwd_pid"
wait "$fwd_pid" || fail "forward did not exit 0 on SIGTERM"
gateway_stop
