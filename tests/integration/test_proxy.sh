#!/usr/bin/env bash
# Agents behind an HTTP CONNECT proxy: a real tinyproxy that requires Basic
# auth (private config, port picked now, pid and log under $T).  The agent
# becomes active through it (HTTPS_PROXY, credentials percent-encoded in the
# URL) and carries a stream; the proxy's log shows the CONNECT; a wrong
# password or none is a clear error quoting the proxy's status line (407
# without credentials; tinyproxy says 401 to wrong ones), retried with backoff;
# NO_PROXY (here from the config file) bypasses the proxy; an https:// proxy
# (socat's TLS in front of tinyproxy) is verified against --proxy-cacert.
# `join` reaches the gateway the same way (HTTPS_PROXY, --proxy, NO_PROXY).
source "$(dirname "$0")/lib.sh"

# tinyproxy takes only [A-Za-z0-9._-] in BasicAuth; the URL still encodes
# two of them, so the agent must percent-decode to get in.
PROXY_USER=alice PROXY_PASS='p4ss.w-rd_1'
PROXY_PASS_ENC='p4ss%2Ew%2Drd_1'

gateway_init
gateway_start
cid=$(cluster_create proxied)
ctl token create --cluster "$cid" --uses 4 >"$T/join.json"

python3 "$TETHER_SRC/tests/integration/tcpserver.py" echo "$T/echo.port" &
PIDS+=($!)
wait_until 10 "echo server" test -s "$T/echo.port"
echo_port=$(cat "$T/echo.port")
for n in n1 n2 n3 n4; do
	join_node "$n" "$T/join.json" --allow "127.0.0.1:$echo_port" >/dev/null
done

tp_port=$(free_port)
cat >"$T/tinyproxy.conf" <<CONF
Port $tp_port
Listen 127.0.0.1
Timeout 60
LogFile "$T/tinyproxy.log"
LogLevel Connect
PidFile "$T/tinyproxy.pid"
MaxClients 32
BasicAuth $PROXY_USER $PROXY_PASS
CONF
tinyproxy -d -c "$T/tinyproxy.conf" >>"$T/tinyproxy.out" 2>&1 &
PIDS+=($!)
port_open() { python3 -c 'import socket,sys; socket.create_connection(("127.0.0.1", int(sys.argv[1])), 1)' "$1"; }
wait_until 10 "tinyproxy on $tp_port" port_open "$tp_port"
connects() { grep -c "CONNECT 127.0.0.1:$GW_PORT" "$T/tinyproxy.log" || true; }

# A client run in the background with extra environment and flags.
run_node() { # run_node NODE [ENV=VALUE...] -- [run flags...]; sets CLIENT_PID
	local node=$1
	shift
	local envs=()
	while [ $# -gt 0 ] && [ "$1" != -- ]; do envs+=("$1"); shift; done
	shift
	env -u https_proxy -u HTTPS_PROXY -u no_proxy -u NO_PROXY "${envs[@]}" \
		"$CLIENT" run --state-dir "$T/$node" "$@" >>"$T/client-$node.log" 2>&1 &
	CLIENT_PID=$!
	PIDS+=("$CLIENT_PID")
}

# 1. Through the proxy, credentials from HTTPS_PROXY.
run_node n1 "HTTPS_PROXY=http://$PROXY_USER:$PROXY_PASS_ENC@127.0.0.1:$tp_port" --
wait_until 30 "n1 active through the proxy" agent_is n1 active
[ "$(connects)" -ge 1 ] || fail "tinyproxy's log shows no CONNECT to the gateway"
out=$(printf 'ping' | "$CTL" connect --cluster "$cid" --node n1 "127.0.0.1:$echo_port") ||
	fail "stream through the proxied tunnel failed"
[ "$out" = ping ] || fail "stream echoed \"$out\""
assert_contains "$T/client-n1.log" "proxy=http://127.0.0.1:$tp_port"
if grep -q -e "$PROXY_PASS_ENC" -e "$PROXY_PASS" "$T/client-n1.log"; then
	fail "the proxy password is in the agent's log"
fi
client_stop "$CLIENT_PID"
pass "agent active through tinyproxy with Basic auth (HTTPS_PROXY), the proxy logged the CONNECT, a stream went through"

# 2. No credentials: the proxy answers 407, and the error quotes it; a wrong
# password: tinyproxy answers 401 (not 407), quoted the same way.  Both are
# retried with backoff.
refusals() { # refusals NODE STATUS
	grep -c "refused CONNECT to 127.0.0.1:$GW_PORT: HTTP/1.[01] $2" "$T/client-$1.log" || true
}
two_refusals() { [ "$(refusals "$1" "$2")" -ge 2 ]; }
for case in "407:http://127.0.0.1:$tp_port" "401:http://$PROXY_USER:wrong@127.0.0.1:$tp_port"; do
	status=${case%%:*} url=${case#*:}
	: >"$T/client-n2.log"
	run_node n2 -- --proxy "$url"
	wait_until 30 "two $status refusals (retried with backoff)" two_refusals n2 "$status"
	assert_contains "$T/client-n2.log" "proxy http://127.0.0.1:$tp_port refused CONNECT"
	grep -q 'msg=reconnecting delay_ms=' "$T/client-n2.log" || fail "no backoff between attempts"
	if agent_is n2 active 2>/dev/null; then fail "n2 active without the proxy's consent"; fi
	client_stop "$CLIENT_PID"
	pass "proxy refusal: '$(grep -o "proxy http[^\"]*$status[^\"]*" "$T/client-n2.log" | head -1)', retried with backoff"
done

# 3. NO_PROXY bypasses it: the config file names a proxy nobody listens on
# and a no-proxy list that covers the gateway.
dead_port=$(free_port)
before=$(connects)
cat >"$T/n3.conf" <<CONF
proxy = http://$PROXY_USER:$PROXY_PASS_ENC@127.0.0.1:$dead_port
no-proxy = localhost, .example.com, 127.0.0.0/8
CONF
run_node n3 "HTTPS_PROXY=http://127.0.0.1:$tp_port" -- --config "$T/n3.conf"
wait_until 30 "n3 active directly" agent_is n3 active
assert_contains "$T/client-n3.log" "gateway host is in no-proxy"
[ "$(connects)" -eq "$before" ] || fail "n3 went through the proxy despite no-proxy"
client_stop "$CLIENT_PID"
# And NO_PROXY from the environment, with the proxy from the environment.
run_node n3 "HTTPS_PROXY=http://127.0.0.1:$dead_port" "NO_PROXY=*" --
wait_until 30 "n3 active directly (NO_PROXY=*)" agent_is n3 active
client_stop "$CLIENT_PID"
pass "no-proxy (config file: a CIDR; environment: *) bypasses the proxy"

# 4. An https:// proxy: TLS to the proxy (socat in front of tinyproxy),
# verified against --proxy-cacert; without it, the system CAs refuse it.
openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 1 \
	-subj /CN=proxy -addext subjectAltName=IP:127.0.0.1 \
	-keyout "$T/proxy.key" -out "$T/proxy.crt" 2>/dev/null
cat "$T/proxy.crt" "$T/proxy.key" >"$T/proxy.pem"
sp=$(free_port)
socat "OPENSSL-LISTEN:$sp,bind=127.0.0.1,reuseaddr,fork,cert=$T/proxy.pem,verify=0" \
	"TCP:127.0.0.1:$tp_port" 2>>"$T/socat.log" &
PIDS+=($!)
wait_until 10 "TLS proxy on $sp" port_open "$sp"
run_node n4 -- --proxy "https://$PROXY_USER:$PROXY_PASS_ENC@127.0.0.1:$sp"
wait_until 30 "n4 refuses the proxy's certificate" \
	grep -q "TLS certificate verify failed for proxy 127.0.0.1" "$T/client-n4.log"
client_stop "$CLIENT_PID"
before=$(connects)
run_node n4 -- --proxy "https://$PROXY_USER:$PROXY_PASS_ENC@127.0.0.1:$sp" --proxy-cacert "$T/proxy.crt"
wait_until 30 "n4 active through the https proxy" agent_is n4 active
[ "$(connects)" -gt "$before" ] || fail "no CONNECT logged for the https proxy"
out=$(printf 'pong' | "$CTL" connect --cluster "$cid" --node n4 "127.0.0.1:$echo_port") ||
	fail "stream through the https proxy failed"
[ "$out" = pong ] || fail "stream echoed \"$out\""
client_stop "$CLIENT_PID"
pass "https:// proxy: unverifiable without --proxy-cacert, active and carrying a stream with it"

# A hostile proxy: an endless answer is cut at 8 KiB; bytes after a 200
# that the server cannot have sent are refused.
for mode in bighead:8192 trailing:"sent bytes after its answer"; do
	m=${mode%%:*} want=${mode#*:}
	python3 "$TETHER_SRC/tests/integration/fakeproxy.py" "$m" "$T/fake-$m.port" &
	PIDS+=($!)
	wait_until 10 "fake proxy $m" test -s "$T/fake-$m.port"
	: >"$T/client-n2.log"
	run_node n2 -- --proxy "http://127.0.0.1:$(cat "$T/fake-$m.port")"
	wait_until 30 "n2 refuses the $m proxy" grep -q "$want" "$T/client-n2.log"
	client_stop "$CLIENT_PID"
done
pass "a proxy's answer is read to 8 KiB at most; bytes after its 200 are refused"

# 5. join's two requests (the CA, then /healthz with it pinned) take the
# same way: the proxy from HTTPS_PROXY or --proxy, a refusal quoted, and
# NO_PROXY honoured.
before=$(connects)
HTTPS_PROXY="http://$PROXY_USER:$PROXY_PASS_ENC@127.0.0.1:$tp_port" join_node n5 "$T/join.json" >/dev/null ||
	fail "join through the proxy (HTTPS_PROXY) failed"
[ "$(connects)" -ge $((before + 2)) ] || fail "join's requests did not go through the proxy"
expect_exit 4 join_node n6 "$T/join.json" --proxy "http://$PROXY_USER:wrong@127.0.0.1:$tp_port"
assert_contains "$T/last.err" "proxy http://127.0.0.1:$tp_port refused CONNECT to 127.0.0.1:$GW_PORT: HTTP/1."
[ ! -e "$T/n6" ] || fail "a failed join left $T/n6"
before=$(connects)
NO_PROXY=127.0.0.0/8 join_node n6 "$T/join.json" --proxy "http://127.0.0.1:$dead_port" >/dev/null ||
	fail "join with NO_PROXY covering the gateway failed"
[ "$(connects)" -eq "$before" ] || fail "join went through the proxy despite NO_PROXY"
pass "join: through the proxy (HTTPS_PROXY), a refusal quoted (--proxy), NO_PROXY bypasses it"

# A bad proxy URL is refused before anything starts.
expect_exit 2 env HTTPS_PROXY=socks5://127.0.0.1:1 "$CLIENT" run --state-dir "$T/n1"
assert_contains "$T/last.err" "HTTPS_PROXY: unsupported scheme"
expect_exit 2 "$CLIENT" run --state-dir "$T/n1" --proxy "http://127.0.0.1:99999"
assert_contains "$T/last.err" "--proxy: bad port"
pass "bad proxy URLs are refused with a reason, exit 2"
gateway_stop
