#!/usr/bin/env bash
# TLS admission (docs/0018): with --max-tls-handshakes 1 a connection that
# holds the one slot (TCP open, no ClientHello) makes the next one wait,
# unread, in the queue (--max-tls-queue 1), and the one after that in the
# kernel's listen backlog (the listener paused, said in the log); when the
# slot frees, both are served.  A connection that waited past half of
# --handshake-timeout, or whose client closed, is closed unread and
# counted as shed.
source "$(dirname "$0")/lib.sh"

gateway_init
MP=$(free_port)
metric() { # metric NAME VALUE: the gateway's metric NAME equals VALUE
	curl -sf "http://127.0.0.1:$MP/metrics" | grep -qx "$1 $2"
}
# hold: a TCP connection to the gateway that sends nothing until release
# ends its process (the kernel closes the socket).
hold() {
	python3 -c "import socket,time; s=socket.create_connection(('127.0.0.1',$GW_PORT)); time.sleep(300)" &
	HOLD=$!
	PIDS+=("$HOLD")
}
release() { kill "$HOLD"; wait "$HOLD" 2>/dev/null || true; }
fetch() { curl -sf --cacert "$GW_DIR/ca.crt" --max-time 60 "$GW_URL/readyz" >"$T/$1.out"; }

gateway_start --max-tls-handshakes 1 --max-tls-queue 1 --metrics-listen "127.0.0.1:$MP"
hold
wait_until 10 "the held connection takes the slot" metric tether_tls_handshakes_in_progress 1
fetch a & A=$!
wait_until 10 "the next connection waits for a slot" metric tether_tls_waiting 1
wait_until 10 "the queue is full: the listener pauses" \
	grep -q 'msg="TLS admission queue full (--max-tls-queue)' "$T/gateway.log"
fetch b & B=$!
backlog() { [ "$(ss -Hltn "sport = :$GW_PORT" | awk '{ print $2 }')" -ge 1 ]; }
wait_until 10 "the third connection waits in the kernel's listen backlog" backlog
kill -0 "$A" && kill -0 "$B" || fail "a request finished while no TLS slot was free"
wait_until 10 "the queue still holds one" metric tether_tls_waiting 1
pass "one slot held: one connection waits in the queue, the next in the listen backlog"
release
wait "$A" || fail "the queued request failed once the slot was free"
wait "$B" || fail "the request from the backlog failed once the slot was free"
wait_until 10 "the queue is empty" metric tether_tls_waiting 0
grep -q 'msg="TLS admission queue below half: accepting again"' "$T/gateway.log" ||
	fail "no line saying the listener accepts again"
pass "the slot freed: both are served, the listener accepts again"
gateway_stop

gateway_start --max-tls-handshakes 1 --handshake-timeout 100 --metrics-listen "127.0.0.1:$MP"
hold
wait_until 10 "the held connection takes the slot" metric tether_tls_handshakes_in_progress 1
fetch c & C=$!
wait_until 10 "the next connection waits for a slot" metric tether_tls_waiting 1
sleep 0.3   # past --handshake-timeout: this is the deadline under test
release
rc=0
wait "$C" || rc=$?
[ "$rc" -ne 0 ] || fail "a connection that waited past half of --handshake-timeout was served"
wait_until 10 "it is counted as shed" metric tether_tls_shed_total 1
pass "a connection that waited past half of --handshake-timeout is closed unread and counted"
gateway_stop

# A client that gave up while waiting is not handshaken for nothing.
gateway_start --max-tls-handshakes 1 --metrics-listen "127.0.0.1:$MP"
hold
wait_until 10 "the held connection takes the slot" metric tether_tls_handshakes_in_progress 1
rc=0
curl -sf --cacert "$GW_DIR/ca.crt" --max-time 1 "$GW_URL/readyz" >/dev/null || rc=$?
[ "$rc" -eq 28 ] || fail "curl should time out waiting for a slot, exited $rc"
release
# shed counts only connections closed unread: no handshake was started.
wait_until 10 "the closed waiter is shed" metric tether_tls_shed_total 1
pass "a waiting connection whose client closed is closed unread, no handshake"
gateway_stop

