#!/usr/bin/env bash
# --landing any (docs/0040 section 2 (i-a)): the loop that ran a
# connection's TLS handshake reads its request line and keeps it, unless
# it is a replica's link (/v1/peer, loop 0's).  The
# bytes read there are the connection's first input: a request line, its
# body and a pipelined second request sent in one TLS record are all
# answered (what OpenSSL decrypted past the line, SSL_pending, is taken
# along; left inside the SSL no socket event would wake the loop it lands
# on).  A line sent late or in pieces is read whole; a connection that
# says nothing for longer than the line's wait lands on loop 0 and is
# served.  A later request for /v1/peer on a connection landed on loop 1
# is refused with 421.  An agent's tunnel (/v1/connect) lands by count
# (docs/0040 step 7) whichever loop runs its handshake: alone, on either
# loop in turn; several, one after another, evenly.
source "$(dirname "$0")/lib.sh"

py=/usr/bin/python3
# The scrapes go to the plain metrics port, on loop 0: they land nowhere
# and do not shift which loop runs the test's own handshakes.
MP=$(free_port)
metrics() { curl -sf "http://127.0.0.1:$MP/metrics"; }
# landed N: how many connections landed on loop N so far (debug lines).
landed() { grep -c "msg=\"http: landed\".* loop=\"\?$1\"\?\( \|$\)" "$T/gateway.log" || true; }

gateway_init
# --max-connections 16: a place a connection landed on loop 1 held and
# did not give back to loop 0 at its end would be missing for good.
gateway_start --workers 2 --landing any --log-level debug --metrics-listen "127.0.0.1:$MP" \
	--max-connections 16 --max-connections-per-source 16
grep -q 'msg="tether-gateway listening".* workers=2' "$T/gateway.log" ||
	fail "the listening line does not say workers=2"

# One TLS record (under 16 KiB): a POST with a 12,000-byte body, then a
# pipelined GET.  The first SSL_read takes LAND_LINE_MAX (8 KiB) of it;
# the rest of the record is only in the SSL.  Eight connections: the
# handshakes alternate between the loops, so some land on loop 1.
$py - "$GW_PORT" "$GW_DIR/ca.crt" 8 >"$T/record.out" 2>&1 <<'PY' || fail "one record: $(cat "$T/record.out")"
import re, socket, ssl, sys
port, ca, n = int(sys.argv[1]), sys.argv[2], int(sys.argv[3])
ctx = ssl.create_default_context(cafile=ca)
body = b'{"name":"' + b"x" * 11988 + b'"}'
req = (b"POST /v1/clusters HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
       b"Content-Length: %d\r\n\r\n" % len(body)) + body + \
      b"GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"
assert len(req) < 16384
for i in range(n):
    with socket.create_connection(("127.0.0.1", port), timeout=20) as s:
        with ctx.wrap_socket(s, server_hostname="127.0.0.1") as t:
            t.sendall(req)          # one SSL_write: one record
            data = b""
            while True:
                try:
                    b = t.recv(65536)
                except TimeoutError:
                    sys.exit("connection %d: no answer to both within 20 s: %r" % (i, data[:300]))
                if not b:
                    break
                data += b
    heads = re.findall(rb"HTTP/1\.1 [0-9]{3}[^\r\n]*", data)
    if len(heads) != 2 or not heads[1].startswith(b"HTTP/1.1 200"):
        sys.exit("connection %d: answers %r" % (i, heads))
    print(i, heads[0].decode(), heads[1].decode())
PY
cat "$T/record.out" >&2
[ "$(landed 1)" -ge 1 ] || fail "no connection landed on loop 1: $(grep -c 'http: TLS handshake done' "$T/gateway.log") handshakes came back to loop 0"
pass "a request, its 12,000-byte body and a pipelined request in one TLS record: both answered, on 8 connections ($(landed 1) landed on loop 1)"

# 48 connections one after another, each a request and its answer: the
# places of those landed on loop 1 come back to loop 0 as they end
# (server_conn_released, batched per pass), so none is refused at the cap.
$py - "$GW_PORT" "$GW_DIR/ca.crt" 48 >"$T/seq.out" 2>&1 <<'PY' || fail "48 in a row: $(cat "$T/seq.out")"
import socket, ssl, sys
port, ca, n = int(sys.argv[1]), sys.argv[2], int(sys.argv[3])
ctx = ssl.create_default_context(cafile=ca)
for i in range(n):
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=20) as s:
            with ctx.wrap_socket(s, server_hostname="127.0.0.1") as t:
                t.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
                data = b""
                while True:
                    b = t.recv(65536)
                    if not b:
                        break
                    data += b
    except OSError as e:
        sys.exit("connection %d: %s" % (i, e))
    if not data.startswith(b"HTTP/1.1 200"):
        sys.exit("connection %d: %r" % (i, data[:100]))
print("ok")
PY
pass "48 connections in a row under --max-connections 16 ($(landed 1) landed on loop 1 so far): none refused"

# A line in pieces (two records 100 ms apart), and a connection silent past
# the line's wait (250 ms): each answered.
$py - "$GW_PORT" "$GW_DIR/ca.crt" >"$T/late.out" 2>&1 <<'PY' || fail "late lines: $(cat "$T/late.out")"
import socket, ssl, sys, time
port, ca = int(sys.argv[1]), sys.argv[2]
ctx = ssl.create_default_context(cafile=ca)
def ask(parts, pause):
    with socket.create_connection(("127.0.0.1", port), timeout=20) as s:
        with ctx.wrap_socket(s, server_hostname="127.0.0.1") as t:
            time.sleep(pause[0])
            for p in parts:
                t.sendall(p)
                time.sleep(pause[1])
            data = b""
            while True:
                b = t.recv(65536)
                if not b:
                    break
                data += b
    return data
for i in range(4):
    d = ask([b"GET /heal", b"thz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"], (0, 0.1))
    if not d.startswith(b"HTTP/1.1 200"):
        sys.exit("in pieces: %r" % d[:200])
    d = ask([b"GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"], (0.6, 0))
    if not d.startswith(b"HTTP/1.1 200"):
        sys.exit("silent first: %r" % d[:200])
print("ok")
PY
pass "a request line in two records, and one sent 600 ms after the handshake: answered"

# A connection landed on loop 1 by its first request may not become a
# replica's link (loop 0's): /v1/peer later on it is refused (421).
$py - "$GW_PORT" "$GW_DIR/ca.crt" 8 >"$T/misplaced.out" 2>&1 <<'PY' || fail "421: $(cat "$T/misplaced.out")"
import re, socket, ssl, sys
port, ca, n = int(sys.argv[1]), sys.argv[2], int(sys.argv[3])
ctx = ssl.create_default_context(cafile=ca)
codes = []
for i in range(n):
    with socket.create_connection(("127.0.0.1", port), timeout=20) as s:
        with ctx.wrap_socket(s, server_hostname="127.0.0.1") as t:
            t.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n"
                      b"GET /v1/peer HTTP/1.1\r\nHost: x\r\nConnection: Upgrade\r\n"
                      b"Upgrade: websocket\r\nSec-WebSocket-Version: 13\r\n"
                      b"Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n\r\n")
            data = b""
            while True:
                b = t.recv(65536)
                if not b:
                    break
                data += b
    heads = re.findall(rb"HTTP/1\.1 [0-9]{3}[^\r\n]*", data)
    codes.append(heads[1][9:12].decode() if len(heads) > 1 else "none")
print(" ".join(codes))
# Those landed on loop 0 go on to the peer route (which refuses a
# client that is no replica); those on loop 1 hear 421.
sys.exit(0 if "421" in codes and all(c != "none" for c in codes) else 1)
PY
log "second request /v1/peer: $(cat "$T/misplaced.out")"
pass "/v1/peer asked later on a connection landed on loop 1: 421"

# Tunnels land by count (docs/0040 step 7) whichever loop runs their
# handshake.  Each dial below has its handshake run on a chosen loop H:
# just before it a connection is kept by the other loop (on_loop.py), and
# handshakes go round the loops; the loops' handshake counts show it (read
# on the plain metrics port, which makes none).  A request line later
# than the landing's wait (LAND_WAIT_MS, 250 ms: a loaded machine) lands
# on loop 0 whatever the counts; the gateway says so (a debug line), and
# only then is that dial made again (at most 3 times).
hs() {  # hs FILE N: loop N's TLS handshakes in a scrape
	awk -v l="tether_loop_tls_handshakes_total{loop=\"$2\"}" '$1 == l { v = $2 } END { print v + 0 }' "$1"
}
tun() {  # tun FILE N: loop N's tunnels in a scrape
	awk -v l="tether_loop_tunnels{loop=\"$2\"}" '$1 == l { v = $2 } END { print v + 0 }' "$1"
}
tunnels_are() {  # tunnels_are N: N tunnels in all (scrape in $T/t.metrics)
	metrics >"$T/t.metrics" && [ "$(($(tun "$T/t.metrics" 0) + $(tun "$T/t.metrics" 1)))" = "$1" ]
}
# dial NODE H N: starts NODE's agent (CLIENT_PID), its handshake run on
# loop H, and waits until N tunnels stand ($T/t.metrics); non-zero when a
# request line came late meanwhile (the agent is then stopped again).
dial() {
	local node=$1 h=$2 n=$3 seen
	$py "$TETHER_SRC/tests/integration/on_loop.py" "$GW_PORT" "$GW_DIR/ca.crt" \
		"$GW_DIR/admin.token" "$T/gateway.log" $((1 - h)) GET /healthz >"$T/on.out" ||
		fail "$node: no connection kept by loop $((1 - h)): $(cat "$T/on.out")"
	metrics >"$T/before.metrics"
	seen=$(late)
	client_start "$node"
	wait_until 30 "$node's tunnel" tunnels_are "$n"
	[ "$(($(hs "$T/t.metrics" "$h") - $(hs "$T/before.metrics" "$h")))" = 1 ] &&
		[ "$(hs "$T/t.metrics" $((1 - h)))" = "$(hs "$T/before.metrics" $((1 - h)))" ] ||
		fail "$node's handshake did not run on loop $h: $(grep '^tether_loop_tls_handshakes' "$T/before.metrics" "$T/t.metrics")"
	[ "$(late)" = "$seen" ] && return 0
	log "$node's request line came late: on loop 0; again"
	client_stop "$CLIENT_PID"
	wait_until 30 "$node's tunnel gone" tunnels_are $((n - 1))
	return 1
}
# dial_again NODE H N: dial, again while a request line came late (3 tries).
dial_again() {
	dial "$@" || dial "$@" || dial "$@" || fail "$1: a request line came late 3 times"
}
# register NODE...: each agent's first run registers it (a tunnel of its
# own before the one that stays): that run comes first and is stopped, so
# that each dial is one handshake.
register() {
	local p pids=()
	for p in "$@"; do
		client_start "$p"
		pids+=("$CLIENT_PID")
	done
	wait_until 60 "$* registered, each a tunnel" tunnels_are $#
	for p in "${pids[@]}"; do
		client_stop "$p"
	done
	wait_until 30 "their tunnels gone" tunnels_are 0
}

# Alone, a tunnel lands on either loop in turn (ties go round): two dials,
# each handshake run on loop 1; one is sent home to loop 0, one stays.
cid=$(cluster_create landing)
ctl token create --cluster "$cid" >"$T/join.json"
join_node n1 "$T/join.json" >/dev/null
register n1
on0=0 on1=0
for i in 1 2; do
	dial_again n1 1 1
	if [ "$(tun "$T/t.metrics" 0)" = 1 ]; then on0=$((on0 + 1)); else on1=$((on1 + 1)); fi
	client_stop "$CLIENT_PID"
	wait_until 30 "n1's tunnel gone ($i)" tunnels_are 0
done
[ "$on0" = 1 ] && [ "$on1" = 1 ] || fail "two lone tunnels, each handshake on loop 1: $on0 on loop 0, $on1 on loop 1"
pass "with --landing any a lone tunnel lands on either loop in turn, its handshake on loop 1 (one sent to loop 0, one kept)"

# Several, each handshake run on loop 0 (fe83428 kept a connection whose
# handshake loop 0 ran on loop 0: a second tunnel then stood beside the
# first, whatever the counts): four agents dial one after another, each
# once the one before is up; after each the loops carry the tunnels
# evenly.
ctl token create --cluster "$cid" --uses 4 >"$T/join4.json"
for i in 1 2 3 4; do
	join_node "a$i" "$T/join4.json" >/dev/null
done
register a1 a2 a3 a4
apids=()
for i in 1 2 3 4; do
	dial_again "a$i" 0 "$i"
	apids+=("$CLIENT_PID")
	t0=$(tun "$T/t.metrics" 0) t1=$(tun "$T/t.metrics" 1)
	[ $((t0 - t1)) -le 1 ] && [ $((t1 - t0)) -le 1 ] ||
		fail "a$i (handshake on loop 0) landed beside the others: loop 0 $t0, loop 1 $t1 tunnels"
done
pass "4 agents one after another, each handshake on loop 0: the tunnels land evenly (loop 0 $t0, loop 1 $t1)"
for p in "${apids[@]}"; do
	client_stop "$p"
done

gateway_stop
pass "SIGTERM: exit 0 with connections landed on loop 1 (closed on their loop)"
