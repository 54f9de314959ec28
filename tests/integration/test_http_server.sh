#!/usr/bin/env bash
# The gateway's own HTTP/1.1 server (gateway/transport/server.c, gateway/transport/http.c):
# keep-alive, pipelining, the head and body limits, malformed requests,
# WebSocket upgrades refused with a reason, and slow clients dropped at the
# request deadline (--http-timeout).  Ends with a connection still open at
# SIGTERM: the gateway must free it and exit 0 (no leak under ASan).
source "$(dirname "$0")/lib.sh"

gateway_init
gateway_start --http-timeout 1500
CA=$GW_DIR/ca.crt
AUTH="Authorization: Bearer $(cat "$GW_DIR/admin.token")"

# expect_http CODE TEXT CURL_ARGS...: the status is CODE and the body holds TEXT.
expect_http() {
	local want=$1 text=$2 code
	shift 2
	code=$(curl -s --cacert "$CA" -o "$T/body" -w '%{http_code}' "$@") || true
	[ "$code" = "$want" ] || { cat "$T/body" >&2; fail "$* -> HTTP $code, want $want"; }
	assert_contains "$T/body" "$text"
}

# raw_tls BYTES_FILE: sends the file's bytes over TLS, prints all that comes
# back until the gateway closes, then "elapsed SECONDS".
raw_tls() {
	python3 - "$GW_PORT" "$CA" "$1" <<'EOF'
import socket, ssl, sys, time
port, ca, path = int(sys.argv[1]), sys.argv[2], sys.argv[3]
ctx = ssl.create_default_context(cafile=ca)
s = ctx.wrap_socket(socket.create_connection(("127.0.0.1", port), timeout=10),
                    server_hostname="127.0.0.1")
t0 = time.monotonic()
data = open(path, "rb").read()
if data:
    s.sendall(data)
out = b""
while True:
    try:
        d = s.recv(65536)
    except (ssl.SSLError, ConnectionResetError) as e:
        out += ("\n[%s]" % e).encode()
        break
    if not d:
        break
    out += d
sys.stdout.write(out.decode("latin-1"))
print("\nelapsed %.2f" % (time.monotonic() - t0))
EOF
}

# --- keep-alive -------------------------------------------------------------
curl -sv --cacert "$CA" "$GW_URL/healthz" "$GW_URL/readyz" >"$T/ka.out" 2>"$T/ka.err" ||
	fail "curl of two URLs failed"
assert_contains "$T/ka.err" "Re-using existing connection"
[ "$(grep -c '^< HTTP/1.1 200' "$T/ka.err")" = 2 ] || fail "two 200 answers expected"
assert_contains "$T/ka.err" "Cache-Control: no-store"
pass "keep-alive: two requests on one connection"

printf 'GET /healthz HTTP/1.1\r\nHost: x\r\n\r\nGET /readyz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n' >"$T/pipe.in"
raw_tls "$T/pipe.in" >"$T/pipe.out"
[ "$(grep -c '^HTTP/1.1 200 OK' "$T/pipe.out")" = 2 ] || { cat "$T/pipe.out" >&2; fail "pipelined: two answers expected"; }
assert_contains "$T/pipe.out" "Connection: close"
pass "pipelining: both answered in order, closed on Connection: close"

# More pipelined requests than one pull of the read-ahead takes (64 KiB,
# server.c hconn_pull), their answers small (no output high-water to
# wait on): the records read ahead raise no socket event, and every
# request is answered all the same, with no wait for a timeout.
pad=$(head -c 4000 /dev/zero | tr '\0' p)
{
	for _ in $(seq 59); do printf 'GET /healthz HTTP/1.1\r\nHost: x\r\nX-Pad: %s\r\n\r\n' "$pad"; done
	printf 'GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n'
} >"$T/pipe-many.in"
raw_tls "$T/pipe-many.in" >"$T/pipe-many.out" 2>&1 || true
n=$(grep -c '^HTTP/1.1 200 OK' "$T/pipe-many.out" || true)
[ "$n" = 60 ] || fail "60 pipelined requests ($(wc -c <"$T/pipe-many.in") bytes): $n answered ($(tail -n 3 "$T/pipe-many.out"))"
pass "60 pipelined requests ($(($(wc -c <"$T/pipe-many.in") >> 10)) KiB): all answered, $(tail -n 1 "$T/pipe-many.out")"

# --- limits -------------------------------------------------------------------
big=$(head -c 20000 /dev/zero | tr '\0' a)
expect_http 431 "request head larger than 16384 bytes" -H "X-Big: $big" "$GW_URL/healthz"
pass "a 20 KB header: 431 with a reason"

head -c 70000 /dev/zero >"$T/big.body"
expect_http 413 "request body too large" -H "$AUTH" --data-binary @"$T/big.body" "$GW_URL/v1/clusters"
expect_http 413 "request body too large" -H "$AUTH" -H 'Expect:' --data-binary @"$T/big.body" \
	"$GW_URL/v1/clusters"
pass "a 70 KB body: 413, with and without Expect: 100-continue"
expect_http 201 '"name":"after-limits"' -H "$AUTH" -H 'Content-Type: application/json' \
	--data '{"name":"after-limits"}' "$GW_URL/v1/clusters"
pass "a body under the limit still works"

# --- malformed requests ---------------------------------------------------------
printf 'GARBAGE / HTTP/1.1\r\n\r\n' >"$T/bad.in"
raw_tls "$T/bad.in" >"$T/bad.out"
assert_contains "$T/bad.out" "HTTP/1.1 400 Bad Request"
assert_contains "$T/bad.out" '{"error":"malformed request: invalid HTTP method"}'
assert_contains "$T/bad.out" "Connection: close"
pass "a malformed request line: 400 with the parser's reason, then closed"

expect_http 400 "malformed percent-encoding in the query" "$GW_URL/v1/clusters?x=%zz"
pass "a bad percent escape: 400"

# --- WebSocket upgrades -----------------------------------------------------------
WS=(-H 'Connection: Upgrade' -H 'Upgrade: websocket' -H 'Sec-WebSocket-Version: 13'
	-H 'Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==')
expect_http 404 '{"error":"no WebSocket endpoint at /v1/no-such-thing"}' "${WS[@]}" \
	"$GW_URL/v1/no-such-thing"
pass "an upgrade on an unknown path: 404 JSON from api_upgrade"
expect_http 400 "needs the WebSocket subprotocol tether.v1" "${WS[@]}" "$GW_URL/v1/connect"
pass "an upgrade to /v1/connect without tether.v1: 400"
expect_http 400 "Sec-WebSocket-Key must be 16 bytes in base64" -H 'Connection: Upgrade' \
	-H 'Upgrade: websocket' -H 'Sec-WebSocket-Version: 13' -H 'Sec-WebSocket-Key: short' \
	-H 'Sec-WebSocket-Protocol: tether.v1' "$GW_URL/v1/connect"
pass "an upgrade with a bad key: 400"

# --- slow clients -------------------------------------------------------------------
: >"$T/silent.in"
raw_tls "$T/silent.in" >"$T/silent.out"
secs=$(awk '/^elapsed/ {print $2}' "$T/silent.out")
awk -v s="$secs" 'BEGIN { exit !(s >= 1.0 && s < 5.0) }' ||
	fail "a silent client was closed after ${secs}s, want about 1.5s"
pass "a client that sends nothing: closed after ${secs}s (--http-timeout 1500)"

printf 'GET /healthz HTTP/1.1\r\nHost: x\r\n' >"$T/slow.in"
raw_tls "$T/slow.in" >"$T/slow.out"
assert_contains "$T/slow.out" "HTTP/1.1 408 Request Timeout"
assert_contains "$T/slow.out" "request not received within 1500 ms"
pass "a request head left unfinished: 408 at the deadline"

# A keep-alive connection busy for longer than the deadline (a request
# every 0.4 s for 2.4 s): never closed while it asks, and closed about
# --http-timeout after its last answer (the timer is not taken off and
# put back per request: server.c hconn_arm moves the deadline on).
python3 - "$GW_PORT" "$CA" >"$T/busy.out" <<'EOF'
import socket, ssl, sys, time
port, ca = int(sys.argv[1]), sys.argv[2]
ctx = ssl.create_default_context(cafile=ca)
s = ctx.wrap_socket(socket.create_connection(("127.0.0.1", port), timeout=10),
                    server_hostname="127.0.0.1")
def answer():
    got = b""
    while b"\r\n\r\n" not in got:
        d = s.recv(4096)
        if not d:
            return None
        got += d
    head, _, body = got.partition(b"\r\n\r\n")
    n = int([l.split(b":")[1] for l in head.split(b"\r\n") if l.lower().startswith(b"content-length:")][0])
    while len(body) < n:
        body += s.recv(4096)
    return head
for i in range(7):
    s.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
    if answer() is None:
        print("closed while busy, request %d" % i)
        sys.exit(0)
    last = time.monotonic()
    if i < 6:
        time.sleep(0.4)
while s.recv(4096):
    pass
print("idle %.2f" % (time.monotonic() - last))
EOF
grep -q '^idle' "$T/busy.out" || fail "a busy keep-alive connection: $(cat "$T/busy.out")"
idle=$(awk '/^idle/ {print $2}' "$T/busy.out")
awk -v s="$idle" 'BEGIN { exit !(s >= 1.3 && s < 4.0) }' ||
	fail "a busy keep-alive connection was closed ${idle}s after its last answer, want about 1.5s"
pass "a keep-alive connection busy for 2.4s (7 requests): closed ${idle}s after its last answer (--http-timeout 1500)"

curl -sf --cacert "$CA" "$GW_URL/healthz" >/dev/null || fail "healthz failed after the bad requests"

# --- shutdown with a connection open ------------------------------------------------------
python3 - "$GW_PORT" "$CA" <<'EOF' &
import socket, ssl, sys, time
ctx = ssl.create_default_context(cafile=sys.argv[2])
s = ctx.wrap_socket(socket.create_connection(("127.0.0.1", int(sys.argv[1]))),
                    server_hostname="127.0.0.1")
s.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n")
time.sleep(1)
EOF
PIDS+=($!)
sleep 0.5
gateway_stop
pass "SIGTERM with a request half sent: exit 0"
