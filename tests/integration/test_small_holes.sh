#!/usr/bin/env bash
# The smaller holes of issue 22 (8): every answer the gateway writes says
# X-Content-Type-Options: nosniff (JSON errors, Kubernetes Status answers,
# /readyz, the --metrics-listen port); every audit line names the client's
# address (the socket's, or the PROXY header's from a --trusted-proxy);
# with --require-proxy-header a trusted source that sends no PROXY header
# is refused, one that sends one is served.  (Impersonate_User and other
# names that normalise to Impersonate-*: test_k8s_smuggling.)
source "$(dirname "$0")/lib.sh"
py=/usr/bin/python3

PLAIN_PORT=$(free_port)
MP=$(free_port)
gateway_init
gateway_start --plain-listen "127.0.0.1:$PLAIN_PORT" --trusted-proxy 127.0.0.3 \
	--metrics-listen "127.0.0.1:$MP"
CA=$GW_DIR/ca.crt

# nosniff URL [CURL_ARGS...]: the answer's head carries the header.
nosniff() {
	local url=$1
	shift
	curl -s --cacert "$CA" -D "$T/head" -o /dev/null "$@" "$url" || true
	grep -qi '^X-Content-Type-Options: nosniff' "$T/head" ||
		fail "no nosniff on $url: $(cat "$T/head")"
}
nosniff "$GW_URL/readyz"
nosniff "$GW_URL/v1/no-such-thing"                                  # JSON error
nosniff "$GW_URL/v1/clusters" -H "Authorization: Bearer ttu_nope"   # JSON 401
nosniff "$GW_URL/k8s/clusters/c-none/version"                       # k8s Status 401
nosniff "$GW_URL/ui/"
nosniff "http://127.0.0.1:$MP/metrics"
nosniff "http://127.0.0.1:$MP/other"
pass "nosniff on /readyz, JSON errors, a Kubernetes Status, the UI and both answers of --metrics-listen"

# raw SRC PORT KIND REQUEST-PATH: one request from SRC, with a PROXY v2
# header naming 198.51.100.7:4242 (good) or none; prints the status line or
# "closed".
cat >"$T/send.py" <<'PY'
import socket, struct, sys
src, port, kind, path = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4]
sig = b"\r\n\r\n\x00\r\nQUIT\n"
addrs = socket.inet_aton("198.51.100.7") + socket.inet_aton("127.0.0.1") + struct.pack(">HH", 4242, port)
hdr = {"good": sig + b"\x21\x11" + struct.pack(">H", 12) + addrs, "none": b""}[kind]
s = socket.socket()
s.bind((src, 0))
s.connect(("127.0.0.1", port))
s.sendall(hdr + b"GET " + path.encode() + b" HTTP/1.1\r\nHost: x\r\n"
          b"Authorization: Bearer ttu_madeup_0123456789\r\nConnection: close\r\n\r\n")
s.settimeout(10)
data = b""
try:
    while True:
        d = s.recv(4096)
        if not d:
            break
        data += d
except (ConnectionResetError, socket.timeout):
    pass
sys.stdout.write(data.decode("latin-1").split("\r\n")[0] if data else "closed")
PY
raw() { $py "$T/send.py" "$@"; }

# --- the client's address in audit lines ---
code=$(curl -s --cacert "$CA" -o /dev/null -w '%{http_code}' \
	-H "Authorization: Bearer ttu_madeup_0123456789" "$GW_URL/k8s/clusters/c-direct/version")
[ "$code" = 401 ] || fail "a made-up token on /k8s got $code"
wait_until 10 "the audit line of the direct request" grep -q \
	'msg=audit event=k8s .*cluster=c-direct .*status=401 .*client=127\.0\.0\.1:[0-9]' "$T/gateway.log"
r=$(raw 127.0.0.3 "$PLAIN_PORT" good /k8s/clusters/c-behind/version)
[ "$r" = "HTTP/1.1 401 Unauthorized" ] || fail "through the plain port with a PROXY header: $r"
wait_until 10 "the audit line of the request behind the balancer" grep -q \
	'msg=audit event=k8s .*cluster=c-behind .*status=401 .*client=198\.51\.100\.7:4242' "$T/gateway.log"
pass "audit lines name the client: the socket's address, or the PROXY header's behind a trusted balancer"

# --- the header optional (default), then required ---
r=$(raw 127.0.0.3 "$PLAIN_PORT" none /readyz)
[ "$r" = "HTTP/1.1 200 OK" ] || fail "without --require-proxy-header, no header from the trusted source got: $r"
gateway_stop
gateway_start --plain-listen "127.0.0.1:$PLAIN_PORT" --trusted-proxy 127.0.0.3 --require-proxy-header
r=$(raw 127.0.0.3 "$PLAIN_PORT" none /readyz)
[ "$r" = closed ] || fail "--require-proxy-header: a trusted source without a header got: $r"
wait_until 10 "the refusal logged" grep -q \
	'msg="connection refused".*reason="no PROXY protocol header from a --trusted-proxy source (--require-proxy-header)"' \
	"$T/gateway.log"
r=$(raw 127.0.0.3 "$PLAIN_PORT" good /readyz)
[ "$r" = "HTTP/1.1 200 OK" ] || fail "--require-proxy-header: a trusted source with a header got: $r"
curl -sf --cacert "$CA" "$GW_URL/readyz" >/dev/null || fail "an untrusted client on the TLS port was refused"
pass "--require-proxy-header: a trusted source without a PROXY header is refused with its reason, with one served; other clients unaffected"

gateway_stop
expect_exit 1 "$GATEWAY" serve --data-dir "$GW_DIR" --listen 127.0.0.1:0 --require-proxy-header
grep -q 'require-proxy-header needs --trusted-proxy' "$T/last.err" ||
	fail "--require-proxy-header alone: $(cat "$T/last.err")"
pass "--require-proxy-header without --trusted-proxy is refused at start"
