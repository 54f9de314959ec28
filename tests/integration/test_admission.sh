#!/usr/bin/env bash
# TLS admission (docs/0018): with --max-tls-handshakes 1 a connection that
# holds the one slot (TCP open, no ClientHello) makes the next one wait,
# unread, in the queue (--max-tls-queue 1), and the one after that in the
# kernel's listen backlog (the listener paused, said in the log); when the
# slot frees, both are served.  A connection that waited past half of
# --handshake-timeout, or whose client closed, is closed unread and
# counted as shed.  During a drain (SIGTERM) the queue is still served: a
# /readyz probe that waited for a slot hears 503, and the agent's redial on
# RECONNECT is refused at once (not at its 10 s deadline), so the gateway
# exits as soon as the agent has let its tunnel go.  The held connection
# keeps its slot only because --tls-hello-timeout is raised here (by
# default it would lose it after 1 s: test_slot_starvation).
source "$(dirname "$0")/lib.sh"

HOLD_FLAGS=(--tls-hello-timeout 600000 --tls-handshake-timeout 600000)

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

gateway_start --max-tls-handshakes 1 "${HOLD_FLAGS[@]}" --max-tls-queue 1 --metrics-listen "127.0.0.1:$MP"
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

gateway_start --max-tls-handshakes 1 "${HOLD_FLAGS[@]}" --handshake-timeout 100 --metrics-listen "127.0.0.1:$MP"
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
gateway_start --max-tls-handshakes 1 "${HOLD_FLAGS[@]}" --metrics-listen "127.0.0.1:$MP"
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


# --- the queue is served during a drain ---
readyz_code() { # readyz_code FILE: the status of one /readyz, into FILE
	curl -s -o /dev/null -w '%{http_code}' --cacert "$GW_DIR/ca.crt" --max-time 60 \
		"$GW_URL/readyz" >"$1" || true
}
gateway_start --max-tls-handshakes 1 "${HOLD_FLAGS[@]}" --max-tls-queue 4 --drain-timeout 60000 \
	--metrics-listen "127.0.0.1:$MP"
cid=$(cluster_create admission)
ctl token create --cluster "$cid" >"$T/join.json"
join_node n1 "$T/join.json" >/dev/null
client_start n1
wait_until 30 "n1 active" agent_is n1 active
hold
wait_until 10 "the held connection takes the slot" metric tether_tls_handshakes_in_progress 1
readyz_code "$T/probe.code" & P=$!
wait_until 10 "the probe waits for a slot" metric tether_tls_waiting 1
kill -TERM "$GW_PID"
wait_until 10 "the drain starts" grep -q 'msg="stopping: draining"' "$T/gateway.log"
release
wait "$P"
[ "$(cat "$T/probe.code")" = 503 ] ||
	fail "a /readyz probe queued for a TLS slot got '$(cat "$T/probe.code")' during the drain, not 503"
pass "a probe queued for a TLS slot is served during the drain: 503"
wait_until 20 "the draining gateway refuses the agent's new tunnel" \
	grep -q 'msg="cannot open the tunnel".*http_status=503' "$T/client-n1.log"
rc=0
wait "$GW_PID" || rc=$?
[ "$rc" -eq 0 ] || fail "gateway exited $rc after the drain (see gateway.log)"
GW_PID=
pass "the agent's redial was answered 503 (not left to its 10 s deadline) and the gateway exited 0 after it"
