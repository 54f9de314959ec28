#!/usr/bin/env bash
# The plain port's landing (docs/0040 step 8): behind a TLS-terminating
# balancer (Debian's haproxy, its own CA, plain HTTP to --plain-listen with
# a PROXY protocol v2 header from 127.0.0.3, the one --trusted-proxy), a
# gateway with --workers 2 --landing any reads each plain connection's
# request line in its preface on loop 0 and lands it as the TLS port lands
# one from its handshake loop:
# - agents dialling through haproxy land by count: one after another,
#   their tunnels stand evenly on both loops (tether_loop_tunnels);
#   `tetherctl connect` echoes to each node and kubectl requests to the
#   cluster work through haproxy;
# - a replica's link (/v1/peer) lands on loop 0 every time, where /healthz
#   asked the same way lands on both loops;
# - the address a landed connection carries to its loop is the client's
#   from the PROXY header (the agents' 127.0.0.1, a named 198.51.100.x),
#   never haproxy's 127.0.0.3;
# - a request, its 12,000-byte body and a pipelined request sent in one
#   write (the line's read takes 8 KiB of it, the rest stays in the
#   socket) are both answered on either loop;
# - on the TLS port, a connection whose PROXY header loop 0 read (its own
#   event on the socket) goes to its handshake loop a pass later (after
#   loop 0's epoll let go of it, the order adopt_send keeps): served on
#   both loops under the header's address; those that close at once after
#   the header end cleanly.  (The order itself was not seen to fail here,
#   under ThreadSanitizer either, with the pass taken out: 3 runs.)
# - --landing decides for plain connections as for TLS ones: with one
#   agent, 8 /k8s requests through haproxy one after another land on both
#   loops with `any` (some streams cross the loop link), on the agent's
#   loop with `route` (none crosses).
# Without the landing every plain connection stays on loop 0.
source "$(dirname "$0")/lib.sh"
chmod 755 "$T"   # nginx's workers do not run as root

command -v haproxy >/dev/null || fail "haproxy is not installed (config/setup.sh)"
KUBECTL=$(command -v kubectl) || fail "kubectl not found (run config/setup.sh)"
py=/usr/bin/python3
$py "$TETHER_SRC/tests/integration/tcpserver.py" echo "$T/echo.port" &
PIDS+=($!)
wait_until 10 "echo server" test -s "$T/echo.port"
echo_port=$(cat "$T/echo.port")
# An nginx standing in for the nodes' kube-apiserver (test_k8s.sh's).
web_port=$(free_port)
mkdir -p "$T/www"
printf '{"major":"1","minor":"28","gitVersion":"v1.28.0-tether-test"}\n' >"$T/www/version"
nginx_start nginx "
    access_log off;
    server { listen 127.0.0.1:$web_port; root $T/www; }"
wait_until 10 "nginx listening" bash -c "(exec 3<>/dev/tcp/127.0.0.1/$web_port)"

# The balancer's own CA and certificate for 127.0.0.1.
mkdir "$T/lb"
openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 2 \
	-subj "/CN=test balancer CA" -keyout "$T/lb/ca.key" -out "$T/lb/ca.crt" 2>/dev/null
openssl req -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -subj "/CN=127.0.0.1" \
	-keyout "$T/lb/lb.key" -out "$T/lb/lb.csr" 2>/dev/null
printf 'subjectAltName=IP:127.0.0.1\n' >"$T/lb/ext"
openssl x509 -req -in "$T/lb/lb.csr" -CA "$T/lb/ca.crt" -CAkey "$T/lb/ca.key" \
	-CAcreateserial -days 2 -extfile "$T/lb/ext" -out "$T/lb/lb.crt" 2>/dev/null
cat "$T/lb/lb.crt" "$T/lb/lb.key" >"$T/lb/lb.pem"

LB_PORT=$(free_port)
PLAIN_PORT=$(free_port)
MP=$(free_port)
LB_URL=https://127.0.0.1:$LB_PORT
gateway_init --url "$LB_URL"
GW_FLAGS=(--workers 2 --log-level debug --plain-listen "127.0.0.1:$PLAIN_PORT"
	--trusted-proxy 127.0.0.3 --public-ca "$T/lb/ca.crt" --metrics-listen "127.0.0.1:$MP")
gateway_start "${GW_FLAGS[@]}" --landing any
grep -q 'msg="tether-gateway listening".* workers=2' "$T/gateway.log" ||
	fail "the listening line does not say workers=2"

cat >"$T/haproxy.cfg" <<EOF
global
	maxconn 256
defaults
	mode tcp
	timeout connect 5s
	timeout client 60s
	timeout server 60s
	timeout tunnel 1h
frontend fe
	bind 127.0.0.1:$LB_PORT ssl crt $T/lb/lb.pem alpn http/1.1
	default_backend gw
backend gw
	server g1 127.0.0.1:$PLAIN_PORT source 127.0.0.3 send-proxy-v2
EOF
haproxy -c -f "$T/haproxy.cfg" >"$T/haproxy-check.log" 2>&1 ||
	{ cat "$T/haproxy-check.log" >&2; fail "haproxy rejects its config"; }
haproxy -db -f "$T/haproxy.cfg" >>"$T/haproxy.log" 2>&1 &
PIDS+=($!)
lb_ready() { curl -sf --cacert "$T/lb/ca.crt" "$LB_URL/readyz"; }
wait_until 20 "the gateway ready through haproxy" lb_ready
# Clients see only the balancer.
export TETHER_SERVER=$LB_URL TETHER_CACERT=$T/lb/ca.crt

# The scrapes go to the metrics port, which lands nothing.
metrics() { curl -sf "http://127.0.0.1:$MP/metrics"; }
tun() {  # tun FILE N: loop N's tunnels in a scrape
	awk -v l="tether_loop_tunnels{loop=\"$2\"}" '$1 == l { v = $2 } END { print v + 0 }' "$1"
}
tunnels_are() {  # tunnels_are N: N tunnels in all (scrape in $T/t.metrics)
	metrics >"$T/t.metrics" && [ "$(($(tun "$T/t.metrics" 0) + $(tun "$T/t.metrics" 1)))" = "$1" ]
}
# landed_on PEER: the loop the connection from PEER (as the gateway names
# it) landed on, by its debug line 'http: landed'; empty when none.
landed_on() {
	grep "msg=\"http: landed\".* peer=\"\?$1\"\? " "$T/gateway.log" |
		sed -n 's/.* loop="\{0,1\}\([0-9]*\)"\{0,1\}\( .*\)\{0,1\}$/\1/p' | head -1
}

# --- agents through haproxy land by count ---
cid=$(cluster_create plain)
ctl token create --cluster "$cid" --uses 4 >"$T/join.json"
for i in 1 2 3 4; do
	join_node "a$i" "$T/join.json" --allow "127.0.0.1:$echo_port" \
		--service "kube-api=http://127.0.0.1:$web_port" >/dev/null
done
sid=$(cluster_create solo)
ctl token create --cluster "$sid" >"$T/join-solo.json"
join_node b1 "$T/join-solo.json" --service "kube-api=http://127.0.0.1:$web_port" >/dev/null
# dial NAME N: starts NAME's agent (CLIENT_PID) and waits until N tunnels
# stand; non-zero when they do not stand evenly and a request line came
# later than the landing waits for it (a loaded machine: it lands on loop
# 0 whatever the counts, and the gateway says so): the agent is stopped
# again.  Uneven without a late line fails at once.
dial() {
	local name=$1 n=$2 seen t0 t1
	seen=$(late)
	client_start "$name"
	wait_until 30 "$name's tunnel" tunnels_are "$n"
	t0=$(tun "$T/t.metrics" 0) t1=$(tun "$T/t.metrics" 1)
	[ $((t0 - t1)) -le 1 ] && [ $((t1 - t0)) -le 1 ] && return 0
	[ "$(late)" -gt "$seen" ] ||
		fail "$name landed beside the others: loop 0 $t0, loop 1 $t1 tunnels"
	log "$name's request line came late: on loop 0; again"
	client_stop "$CLIENT_PID"
	wait_until 30 "$name's tunnel gone" tunnels_are $((n - 1))
	return 1
}
apids=()
for i in 1 2 3 4; do
	dial "a$i" "$i" || dial "a$i" "$i" || dial "a$i" "$i" ||
		fail "a$i: a request line came late 3 times"
	apids+=("$CLIENT_PID")
done
t0=$(tun "$T/t.metrics" 0) t1=$(tun "$T/t.metrics" 1)
[ "$t0" = 2 ] && [ "$t1" = 2 ] || fail "4 tunnels through the plain port: loop 0 $t0, loop 1 $t1"
pass "4 agents through haproxy and the plain port, one after another: their tunnels stand on both loops (2 and 2)"
# A tunnel stands before its agent is active (a first run verifies it):
# streams flow once it is.
for i in 1 2 3 4; do wait_until 30 "a$i active" agent_is "a$i" active; done

# Each node echoes a 1 MiB stream, and kubectl asks the cluster's
# apiserver, all through haproxy (their connections land on both loops).
head -c $((1 << 20)) /dev/urandom >"$T/blob"
for i in 1 2 3 4; do
	"$CTL" connect --cluster "$cid" --node "a$i" "127.0.0.1:$echo_port" \
		<"$T/blob" >"$T/echo.out" 2>"$T/connect.err" ||
		fail "connect to a$i through haproxy exited $?: $(cat "$T/connect.err")"
	cmp -s "$T/echo.out" "$T/blob" || fail "a$i's echo through haproxy differs"
done
"$CTL" kubeconfig --cluster "$cid" --user kube-user >"$T/kc.yaml" ||
	fail "kubeconfig exited $?"
for i in 1 2 3 4; do
	"$KUBECTL" --kubeconfig "$T/kc.yaml" version -o json >"$T/kv.json" 2>"$T/kv.err" ||
		fail "kubectl version through haproxy exited $?: $(cat "$T/kv.err")"
	jq -e '.serverVersion.gitVersion == "v1.28.0-tether-test"' "$T/kv.json" >/dev/null ||
		fail "kubectl version through haproxy: $(cat "$T/kv.json")"
done
pass "a 1 MiB echo to each node and 4 kubectl requests through haproxy: intact"

# --- the clients' own addresses go with them ---
grep -q 'msg="http: landed".* peer="\?127\.0\.0\.1:[0-9]*"\? .*loop="\?1"\?' "$T/gateway.log" ||
	fail "no connection through haproxy landed on loop 1 under its client's address"
grep -q 'peer="\?127\.0\.0\.3' "$T/gateway.log" &&
	fail "the gateway named haproxy's own address as a client's: $(grep -m1 'peer="\?127\.0\.0\.3' "$T/gateway.log")"
[ "$(grep -c 'msg="agent connected".* peer="\?127\.0\.0\.1:' "$T/gateway.log")" -ge 4 ] ||
	fail "the agents' addresses are not the ones from their PROXY headers"
pass "connections landed on loop 1 carry their clients' addresses from the PROXY headers, never haproxy's"

# --- straight to the plain port from the trusted source ---
# ask.py PORT KIND N: N connections from 127.0.0.3, each with a PROXY
# header naming 198.51.100.7:NAMED (NAMED = KIND's base + i, so each is
# told apart in the log); KIND peer asks for a replica's link, healthz for
# /healthz, record sends a POST with a 12,000-byte body and a pipelined
# GET /healthz in one write; tls (to the TLS port) makes a TLS handshake
# after the header and asks /healthz, tlsgone closes right after the
# header.  Prints each connection's named port and status line(s).
cat >"$T/ask.py" <<'PY'
import re, socket, ssl, struct, sys
port, kind, n = int(sys.argv[1]), sys.argv[2], int(sys.argv[3])
base = {"peer": 41000, "healthz": 42000, "record": 43000, "tls": 44000,
        "tlsgone": 45000}[kind]
tls = kind == "tls"
gone = kind == "tlsgone"
ctx = ssl.create_default_context(cafile=sys.argv[4]) if tls else None
sig = b"\r\n\r\n\x00\r\nQUIT\n"
body = b'{"name":"' + b"x" * 11988 + b'"}'
req = {"peer": b"GET /v1/peer HTTP/1.1\r\nHost: x\r\nConnection: Upgrade\r\n"
               b"Upgrade: websocket\r\nSec-WebSocket-Version: 13\r\n"
               b"Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n\r\n",
       "healthz": b"GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
       "record": (b"POST /v1/clusters HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                  b"Content-Length: %d\r\n\r\n" % len(body)) + body +
                 b"GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
       "tls": b"GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
       "tlsgone": b""}[kind]
for i in range(n):
    addrs = socket.inet_aton("198.51.100.7") + socket.inet_aton("127.0.0.1") + \
        struct.pack(">HH", base + i, port)
    s = socket.socket()
    s.bind(("127.0.0.3", 0))
    s.connect(("127.0.0.1", port))
    hdr = sig + b"\x21\x11" + struct.pack(">H", 12) + addrs
    if gone:
        s.sendall(hdr)
        s.close()
        print(base + i, "closed")
        continue
    s.settimeout(20)
    if tls:
        s.sendall(hdr)
        s = ctx.wrap_socket(s, server_hostname="127.0.0.1")
        s.sendall(req)
    else:
        s.sendall(hdr + req)
    data = b""
    try:
        while True:
            d = s.recv(65536)
            if not d:
                break
            data += d
    except socket.timeout:
        sys.exit("%d: no answer within 20 s: %r" % (base + i, data[:300]))
    s.close()
    heads = re.findall(rb"HTTP/1\.1 [0-9]{3}[^\r\n]*", data)
    print(base + i, " | ".join(h.decode() for h in heads))
PY
$py "$T/ask.py" "$PLAIN_PORT" healthz 8 >"$T/healthz.out" 2>&1 || fail "/healthz: $(cat "$T/healthz.out")"
$py "$T/ask.py" "$PLAIN_PORT" peer 8 >"$T/peer.out" 2>&1 || fail "/v1/peer: $(cat "$T/peer.out")"
$py "$T/ask.py" "$PLAIN_PORT" record 8 >"$T/record.out" 2>&1 || fail "one write: $(cat "$T/record.out")"
cat "$T/healthz.out" "$T/peer.out" "$T/record.out" >&2
h1=0 r1=0
while read -r p status; do
	[ "$status" = "HTTP/1.1 200 OK" ] || fail "/healthz from 198.51.100.7:$p: $status"
	l=$(landed_on "198.51.100.7:$p")
	[ -n "$l" ] || fail "/healthz from 198.51.100.7:$p: no landing said under the PROXY header's address"
	[ "$l" = 1 ] && h1=$((h1 + 1))
done <"$T/healthz.out"
[ "$h1" -ge 1 ] && [ "$h1" -le 7 ] || fail "8 plain /healthz connections: $h1 landed on loop 1 (want both loops)"
while read -r p status; do
	case $status in "HTTP/1.1 "*) ;; *) fail "/v1/peer from 198.51.100.7:$p: no answer" ;; esac
	l=$(landed_on "198.51.100.7:$p")
	[ "$l" = 0 ] || fail "/v1/peer from 198.51.100.7:$p landed on loop '$l', not loop 0"
done <"$T/peer.out"
while read -r p status; do
	case $status in *"|"*"HTTP/1.1 200"*) ;; *) fail "one write from 198.51.100.7:$p: answers $status" ;; esac
	[ "$(landed_on "198.51.100.7:$p")" = 1 ] && r1=$((r1 + 1))
done <"$T/record.out"
[ "$r1" -ge 1 ] || fail "none of the 8 one-write connections landed on loop 1"
pass "plain /healthz lands on both loops ($h1 of 8 on loop 1) under the PROXY header's address; /v1/peer 8 of 8 on loop 0; a body and a pipelined request in one write answered ($r1 of 8 on loop 1)"

# The TLS port from the trusted source: the preface is read on loop 0,
# the handshakes go round the loops (a pass later when not loop 0's), and
# those kept by loop 1 say so under the PROXY header's address.
metrics >"$T/before.metrics"
$py "$T/ask.py" "$GW_PORT" tlsgone 8 "$GW_DIR/ca.crt" >"$T/tlsgone.out" 2>&1 ||
	fail "TLS, closed after the header: $(cat "$T/tlsgone.out")"
$py "$T/ask.py" "$GW_PORT" tls 8 "$GW_DIR/ca.crt" >"$T/tls.out" 2>&1 ||
	fail "TLS after a PROXY header: $(cat "$T/tls.out")"
metrics >"$T/after.metrics"
hs() {  # hs FILE N: loop N's TLS handshakes in a scrape
	awk -v l="tether_loop_tls_handshakes_total{loop=\"$2\"}" '$1 == l { v = $2 } END { print v + 0 }' "$1"
}
t1=0
while read -r p status; do
	[ "$status" = "HTTP/1.1 200 OK" ] || fail "TLS /healthz from 198.51.100.7:$p: $status"
	[ "$(landed_on "198.51.100.7:$p")" = 1 ] && t1=$((t1 + 1))
done <"$T/tls.out"
moved=$(($(hs "$T/after.metrics" 1) - $(hs "$T/before.metrics" 1)))
[ "$t1" -ge 1 ] && [ "$moved" -ge 1 ] ||
	fail "TLS after a PROXY header: $t1 kept by loop 1 under the named address, loop 1 ran $moved handshakes"
pass "TLS after a PROXY header: 8 answered, $t1 kept by loop 1 under the named address; 8 more closed after the header"

for p in "${apids[@]}"; do
	client_stop "$p"
done
wait_until 30 "the agents' tunnels gone" tunnels_are 0

# --- --landing any and route for plain /k8s requests ---
# b1 alone (cluster solo): its tunnel on one loop; 8 requests through
# haproxy, one connection each, their streams counted by the loop links.
crossed() { metrics | awk '$1 ~ /^tether_loop_link_streams_total[{]/ { n += $2 } END { print n + 0 }'; }
solo_requests() {  # solo_requests TAG: 8 /k8s/clusters/solo/version, each answered
	local i
	for i in 1 2 3 4 5 6 7 8; do
		curl -sf --cacert "$T/lb/ca.crt" -H "Authorization: Bearer $(cat "$GW_DIR/admin.token")" \
			"$LB_URL/k8s/clusters/$sid/version" >"$T/solo.json" ||
			fail "$1: /k8s request $i through haproxy failed"
		jq -e '.gitVersion == "v1.28.0-tether-test"' "$T/solo.json" >/dev/null ||
			fail "$1: /k8s request $i: $(cat "$T/solo.json")"
	done
}
client_start b1
b1_pid=$CLIENT_PID
wait_until 30 "b1's tunnel" tunnels_are 1
wait_until 30 "b1 active" agent_is b1 active
before=$(crossed)
solo_requests any
n_any=$(($(crossed) - before))
[ "$n_any" -ge 1 ] || fail "--landing any: none of 8 plain /k8s requests crossed to b1's loop"
client_stop "$b1_pid"
gateway_stop
gateway_start "${GW_FLAGS[@]}" --landing route
wait_until 20 "the gateway ready through haproxy again" lb_ready
client_start b1
b1_pid=$CLIENT_PID
wait_until 30 "b1's tunnel (--landing route)" tunnels_are 1
wait_until 30 "b1 active (--landing route)" agent_is b1 active
before=$(crossed) seen=$(late)
solo_requests route
n_route=$(($(crossed) - before))
# A request line later than the landing waits for it (a loaded machine)
# lands on loop 0 whatever the route, and the gateway says so: only such
# a one may cross.
[ "$n_route" -le $(($(late) - seen)) ] ||
	fail "--landing route: $n_route of 8 plain /k8s requests crossed the loop link ($(($(late) - seen)) lines late)"
pass "8 plain /k8s requests to one agent: $n_any crossed with --landing any, none with route (landed on its loop)"
client_stop "$b1_pid"
gateway_stop
pass "SIGTERM: exit 0 with plain connections landed on loop 1"
