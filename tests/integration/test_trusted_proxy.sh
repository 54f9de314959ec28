#!/usr/bin/env bash
# Behind a TLS-terminating load balancer (docs/0017): Debian's haproxy
# terminates TLS with its own CA and forwards plain HTTP to the gateway's
# --plain-listen port with a PROXY protocol v2 header, connecting from
# 127.0.0.3, the one --trusted-proxy.  Clients and the agent talk only to
# haproxy:
# - /v1/ca through haproxy is the balancer's CA (--public-ca); the join
#   document pins its checksum; join and run work through haproxy, and a
#   `tetherctl connect` stream echoes;
# - the gateway logs the clients' own addresses (from the PROXY headers),
#   never haproxy's 127.0.0.3;
# - a PROXY header from an untrusted source (the TLS port, from 127.0.0.1)
#   is refused; the plain port refuses untrusted sources; a malformed
#   header from the trusted source is refused with its reason; a valid one
#   sets the peer to the address it names.
source "$(dirname "$0")/lib.sh"

command -v haproxy >/dev/null || fail "haproxy is not installed (config/setup.sh)"
py=/usr/bin/python3
$py "$TETHER_SRC/tests/integration/tcpserver.py" echo "$T/echo.port" &
PIDS+=($!)
wait_until 10 "echo server" test -s "$T/echo.port"
echo_port=$(cat "$T/echo.port")

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
lb_sum="sha256:$(openssl x509 -in "$T/lb/ca.crt" -outform DER | sha256sum | cut -d' ' -f1)"

LB_PORT=$(free_port)
PLAIN_PORT=$(free_port)
LB_URL=https://127.0.0.1:$LB_PORT
gateway_init --url "$LB_URL"
gateway_start --log-level debug --plain-listen "127.0.0.1:$PLAIN_PORT" \
	--trusted-proxy 127.0.0.3 --trusted-proxy 10.99.0.0/16 --public-ca "$T/lb/ca.crt"
assert_contains "$T/gateway.log" 'msg="plain HTTP listening for a TLS-terminating balancer"'

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
curl -sf --cacert "$T/lb/ca.crt" "$LB_URL/v1/ca" >"$T/served-ca.pem"
cmp -s "$T/served-ca.pem" "$T/lb/ca.crt" || fail "/v1/ca is not the balancer's CA"
cid=$(cluster_create lb)
ctl token create --cluster "$cid" >"$T/join.json"
jq -e --arg u "$LB_URL" --arg s "$lb_sum" '.gateway_url == $u and .ca_checksum == $s' \
	"$T/join.json" >/dev/null || fail "the join document does not name the balancer and its CA: $(cat "$T/join.json")"
join_node n1 "$T/join.json" --allow "127.0.0.1:$echo_port" >/dev/null
cmp -s "$T/n1/ca.crt" "$T/lb/ca.crt" || fail "the agent did not pin the balancer's CA"
pass "join through haproxy pins the balancer's CA by its checksum ($lb_sum)"

client_start n1
wait_until 30 "n1 active through haproxy" agent_is n1 active
echo "through the balancer" | "$CTL" connect --cluster "$cid" --node n1 \
	"127.0.0.1:$echo_port" >"$T/out" 2>"$T/connect.err" ||
	fail "tetherctl connect through haproxy failed: $(cat "$T/connect.err")"
grep -q "through the balancer" "$T/out" || fail "no echo through haproxy"
pass "the agent's tunnel and a connect stream run through haproxy (TLS terminated, PROXY v2)"

grep -q 'msg="agent connected".* peer=127\.0\.0\.1:' "$T/gateway.log" ||
	fail "the agent's address is not the one from its PROXY header"
grep -q 'peer=127\.0\.0\.3' "$T/gateway.log" &&
	fail "the gateway logged haproxy's own address as a client's"
pass "the gateway logs the clients' addresses from the PROXY headers, never haproxy's"

# --- refusals, and a header from the trusted source ---
cat >"$T/send.py" <<'PY'
import socket, struct, sys
src, port, kind = sys.argv[1], int(sys.argv[2]), sys.argv[3]
sig = b"\r\n\r\n\x00\r\nQUIT\n"
addrs = socket.inet_aton("198.51.100.7") + socket.inet_aton("127.0.0.1") + struct.pack(">HH", 4242, port)
hdr = {"good": sig + b"\x21\x11" + struct.pack(">H", 12) + addrs,
       "badversion": sig + b"\x11\x11" + struct.pack(">H", 12) + addrs,
       "none": b""}[kind]
s = socket.socket()
s.bind((src, 0))
s.connect(("127.0.0.1", port))
s.sendall(hdr + b"GET /readyz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
s.settimeout(10)
data = b""
try:
    while True:
        d = s.recv(4096)
        if not d:
            break
        data += d
except (ConnectionResetError, socket.timeout) as e:
    sys.stderr.write("send.py: %r after %d bytes\n" % (e, len(data)))
sys.stdout.write(data.decode("latin-1").split("\r\n")[0] if data else "closed")
PY
refused() { # refused PORT-LABEL REASON: the gateway logged a refusal with REASON
	grep -q "msg=\"connection refused\".*reason=\"$1" "$T/gateway.log"
}

r=$($py "$T/send.py" 127.0.0.1 "$GW_PORT" good)
[ "$r" = closed ] || fail "a PROXY header from an untrusted source got: $r"
wait_until 10 "the refusal logged" refused "a PROXY protocol header from a source that is not a --trusted-proxy"
pass "a PROXY header from an untrusted source (127.0.0.1 on the TLS port) is refused"

r=$($py "$T/send.py" 127.0.0.1 "$PLAIN_PORT" none)
[ "$r" = closed ] || fail "the plain port answered an untrusted source: $r"
wait_until 10 "the refusal logged" refused "the plain HTTP port (--plain-listen) takes only --trusted-proxy sources"
pass "the plain HTTP port refuses a source that is not a --trusted-proxy"

r=$($py "$T/send.py" 127.0.0.3 "$PLAIN_PORT" badversion)
[ "$r" = closed ] || fail "a malformed PROXY header got: $r"
wait_until 10 "the refusal logged" refused "PROXY v2 header: version is not 2"
pass "a malformed PROXY header from the trusted source is refused with its reason"

r=$($py "$T/send.py" 127.0.0.3 "$PLAIN_PORT" good)
[ "$r" = "HTTP/1.1 200 OK" ] || fail "a valid PROXY header from the trusted source got: $r"
assert_contains "$T/gateway.log" 'peer=198.51.100.7:4242'
pass "a valid PROXY header from the trusted source: answered, its address is the peer"

client_stop "$CLIENT_PID"
gateway_stop
