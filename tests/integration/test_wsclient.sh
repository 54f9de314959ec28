#!/usr/bin/env bash
# The WebSocket client (common/wsclient.c, driven by tests/tools/wsprobe)
# against the real gateway:
#  - a tether.v1 HELLO offering only an unsupported version gets an ERROR
#    frame that names the version, then a close frame;
#  - an upgrade on a path that is not a tunnel is refused with an HTTP
#    status, reported as such;
#  - a CA that did not sign the gateway's certificate, and a name the
#    certificate does not carry (reached through DNS, /etc/hosts), fail TLS
#    verification with a reason that says so;
#  - a closed port, a server that never answers, and a bad URL fail with a
#    reason, and the gateway keeps serving throughout.
source "$(dirname "$0")/lib.sh"

WSPROBE=${WSPROBE:-$TETHER_BIN/wsprobe}
[ -x "$WSPROBE" ] || fail "no wsprobe at $WSPROBE (build the wsprobe target)"

# HELLO {versions: [107], node: "n1", cred: "agent", id: "a-000000000000"}
HELLO=920184a876657273696f6e73916ba46e6f6465a26e31a463726564a56167656e74a26964ae612d303030303030303030303030
VERSION_HEX=76657273696f6e # "version"

# probe NAME ARGS...: runs wsprobe under a time limit; it must exit 0.
probe() {
	local name=$1 rc=0
	shift
	timeout 30 "$WSPROBE" "$@" >"$T/$name.out" 2>"$T/$name.err" || rc=$?
	if [ "$rc" -ne 0 ]; then
		cat "$T/$name.out" "$T/$name.err" >&2
		fail "$name: wsprobe exited $rc"
	fi
}

close_status() { sed -n 's/^close \([0-9]*\) .*/\1/p' "$T/$1.out"; }

gateway_init
gateway_start
URL=wss://127.0.0.1:$GW_PORT

# (a) An unsupported version: ERROR (type 10, 0x0a) naming it, then close.
probe version --cacert "$GW_DIR/ca.crt" --subprotocol tether.v1 "$URL/v1/connect" "$HELLO"
assert_contains "$T/version.out" "open"
grep -E "^message binary [0-9]+ 920a[0-9a-f]*$VERSION_HEX" "$T/version.out" >/dev/null ||
	{ cat "$T/version.out" >&2; fail "no ERROR frame mentioning the version"; }
grep -n "^close " "$T/version.out" >/dev/null || fail "no close after the ERROR frame"
[ "$(grep -c '^close ' "$T/version.out")" -eq 1 ] || fail "on_close reported more than once"
[ "$(tail -n 1 "$T/version.out" | cut -c1-5)" = "close" ] || fail "close is not the last event"
pass "HELLO with an unsupported version: ERROR frame naming the version, then close ($(grep '^close' "$T/version.out"))"

# (b) Not a tunnel path: the upgrade is refused with an HTTP status.
probe refused --cacert "$GW_DIR/ca.crt" --subprotocol tether.v1 "$URL/v1/nothing"
status=$(close_status refused)
if ! grep -q '^open' "$T/refused.out" && [ -n "$status" ] && [ "$status" -ge 300 ] && [ "$status" -lt 600 ]; then
	pass "upgrade on /v1/nothing refused: $(cat "$T/refused.out")"
else
	cat "$T/refused.out" "$T/refused.err" >&2
	fail "upgrade on /v1/nothing: want an HTTP status in on_close"
fi

# (c) A CA that did not sign the gateway's certificate.
openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 1 \
	-subj /CN=another-ca -keyout "$T/other.key" -out "$T/other.crt" 2>/dev/null
probe wrongca --cacert "$T/other.crt" --subprotocol tether.v1 "$URL/v1/connect" "$HELLO"
grep -q '^close 0 .*certificate verify failed' "$T/wrongca.out" ||
	{ cat "$T/wrongca.out" >&2; fail "wrong CA: want a certificate verification failure"; }
pass "wrong CA: $(cat "$T/wrongca.out")"

# The same through a name (resolved by evdns from /etc/hosts): the
# certificate carries localhost.
probe byname --cacert "$GW_DIR/ca.crt" --subprotocol tether.v1 "wss://localhost:$GW_PORT/v1/connect" "$HELLO"
grep -E "^message binary [0-9]+ 920a[0-9a-f]*$VERSION_HEX" "$T/byname.out" >/dev/null ||
	{ cat "$T/byname.out" >&2; fail "by name: no ERROR frame"; }
pass "by name (wss://localhost): ERROR frame, then $(grep '^close' "$T/byname.out")"

# A name the certificate does not carry, if /etc/hosts has one for
# 127.0.0.1 besides localhost.
other_name=$(awk '$1 == "127.0.0.1" { for (i = 2; i <= NF; i++) if ($i != "localhost" && $i !~ /^#/) { print $i; exit } }' /etc/hosts)
if [ -n "$other_name" ]; then
	probe wrongname --cacert "$GW_DIR/ca.crt" --subprotocol tether.v1 "wss://$other_name:$GW_PORT/v1/connect"
	grep -q '^close 0 .*certificate verify failed.*hostname mismatch' "$T/wrongname.out" ||
		{ cat "$T/wrongname.out" >&2; fail "wrong name: want a hostname mismatch"; }
	pass "name not in the certificate: $(cat "$T/wrongname.out")"
else
	log "skipped: no other name for 127.0.0.1 in /etc/hosts for the hostname-mismatch case"
fi

# A closed port.
dead_port=$(free_port)
probe refusedport --cacert "$GW_DIR/ca.crt" "wss://127.0.0.1:$dead_port/v1/connect"
grep -q '^close 0 .*refused' "$T/refusedport.out" ||
	{ cat "$T/refusedport.out" >&2; fail "closed port: want connection refused"; }
pass "closed port: $(cat "$T/refusedport.out")"

# A server that accepts TCP and then says nothing: the connect timeout.
silent_port=$(free_port)
python3 -c 'import socket,sys,time
s=socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("127.0.0.1", int(sys.argv[1]))); s.listen(4); time.sleep(60)' "$silent_port" &
PIDS+=($!)
wait_until 10 "silent listener" python3 -c 'import socket,sys; socket.create_connection(("127.0.0.1", int(sys.argv[1]))).close()' "$silent_port"
probe silent --timeout 500 --cacert "$GW_DIR/ca.crt" "wss://127.0.0.1:$silent_port/v1/connect"
grep -q '^close 0 timed out after 500 ms' "$T/silent.out" ||
	{ cat "$T/silent.out" >&2; fail "silent server: want a timeout"; }
pass "silent server: $(cat "$T/silent.out")"

# A bad URL is refused by wsclient_connect itself.
rc=0
"$WSPROBE" "https://127.0.0.1:$GW_PORT/" >"$T/badurl.out" 2>&1 || rc=$?
[ "$rc" -eq 1 ] && grep -q 'wss://' "$T/badurl.out" ||
	{ cat "$T/badurl.out" >&2; fail "bad URL: want exit 1 and a reason"; }
pass "bad URL refused: $(head -n 1 "$T/badurl.out")"

curl -sf --cacert "$GW_DIR/ca.crt" "$GW_URL/healthz" >/dev/null || fail "healthz failed"
pass "the gateway kept serving"
gateway_stop

# The gateway's keepalive (its ping wheel, docs/0018): a connection that
# answers every ping is pinged again each --ping-interval after its pong,
# not once per --ping-timeout.  A tunnel connection that never sends HELLO
# is closed at --handshake-timeout (4 s): by then the gateway must have
# pinged it 6 times (every 200 ms); pinged once per timeout (20 s), it
# would be pinged once.
gateway_start --ping-interval 200 --ping-timeout 20000 --handshake-timeout 4000
probe pings --cacert "$GW_DIR/ca.crt" --subprotocol tether.v1 --pings 6 "$URL/v1/connect"
[ "$(grep -c '^ping$' "$T/pings.out")" -eq 6 ] && grep -q '^close 101 .*code 1000' "$T/pings.out" ||
	{ cat "$T/pings.out" >&2; fail "keepalive: want 6 pings (every 200 ms) before the 4 s handshake deadline, then our close"; }
pass "keepalive: pinged every --ping-interval while the peer answers (6 pings, then our close)"
gateway_stop
