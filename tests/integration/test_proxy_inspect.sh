#!/usr/bin/env bash
# A TLS-inspecting proxy (tests/integration/inspectproxy.py: it answers
# CONNECT, then terminates the agent's TLS with a certificate for the
# gateway's address issued by its own CA, "Corp Inspection CA").  The agent's
# CA pin refuses it: the error names the certificate it got (subject and
# issuer), says the proxy may be intercepting TLS and what to do, and the
# agent keeps retrying with backoff.  Exempting the gateway (NO_PROXY)
# connects directly; --trust-proxy-ca with the proxy's CA connects through
# the inspection, with a loud warning at start.
source "$(dirname "$0")/lib.sh"

gateway_init
gateway_start
cid=$(cluster_create inspected)
ctl token create --cluster "$cid" --uses 1 >"$T/join.json"
echo_server_start
join_node n1 "$T/join.json" --allow "127.0.0.1:$echo_port" >/dev/null

# The inspection CA and the certificate it forges for the gateway's address.
openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 1 \
	-subj "/O=Corp/CN=Corp Inspection CA" -keyout "$T/ica.key" -out "$T/ica.crt" 2>/dev/null
openssl req -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes \
	-subj "/CN=127.0.0.1" -keyout "$T/leaf.key" -out "$T/leaf.csr" 2>/dev/null
printf 'subjectAltName=IP:127.0.0.1\n' >"$T/leaf.ext"
openssl x509 -req -in "$T/leaf.csr" -CA "$T/ica.crt" -CAkey "$T/ica.key" \
	-CAcreateserial -days 1 -extfile "$T/leaf.ext" -out "$T/leaf.crt" 2>/dev/null

python3 "$TETHER_SRC/tests/integration/inspectproxy.py" "$T/ip.port" \
	"$T/leaf.crt" "$T/leaf.key" "$T/inspect.log" &
PIDS+=($!)
wait_until 10 "inspecting proxy" test -s "$T/ip.port"
PROXY=http://127.0.0.1:$(cat "$T/ip.port")

run_node() { # run_node [ENV=VALUE...] -- [run flags...]; sets CLIENT_PID
	local envs=()
	while [ $# -gt 0 ] && [ "$1" != -- ]; do envs+=("$1"); shift; done
	shift
	env -u https_proxy -u HTTPS_PROXY -u no_proxy -u NO_PROXY "${envs[@]}" \
		"$CLIENT" run --state-dir "$T/n1" "$@" >>"$T/client-n1.log" 2>&1 &
	CLIENT_PID=$!
	PIDS+=("$CLIENT_PID")
}

# 1. Through the inspecting proxy: refused, named, retried.
refusals() { grep -c 'may be intercepting TLS' "$T/client-n1.log" || true; }
two_refusals() { [ "$(refusals)" -ge 2 ]; }
run_node "HTTPS_PROXY=$PROXY" --
wait_until 30 "two refusals of the inspecting proxy (retried with backoff)" two_refusals
line=$(grep -m1 'may be intercepting TLS' "$T/client-n1.log")
for want in 'TLS certificate verify failed for 127.0.0.1' \
	'subject \"CN=127.0.0.1\"' 'issued by \"CN=Corp Inspection CA,O=Corp\"' \
	"proxy $PROXY may be intercepting TLS" 'Exempt 127.0.0.1 from TLS inspection' \
	'no-proxy' '--trust-proxy-ca FILE'; do
	case $line in
	*"$want"*) ;;
	*) fail "the refusal does not say '$want': $line" ;;
	esac
done
grep -q 'msg=reconnecting delay_ms=' "$T/client-n1.log" || fail "no backoff between attempts"
grep -q "intercepting 127.0.0.1:$GW_PORT" "$T/inspect.log" || fail "the proxy did not intercept"
if agent_is n1 active 2>/dev/null; then fail "n1 registered through an inspecting proxy"; fi
client_stop "$CLIENT_PID"
pass "inspecting proxy refused: $(printf '%s' "$line" | grep -o 'reason="[^"]*' | cut -c9-200)..."

# 2. The gateway exempted (NO_PROXY): direct, active.
run_node "HTTPS_PROXY=$PROXY" "NO_PROXY=127.0.0.1" --
wait_until 30 "n1 active directly (NO_PROXY)" agent_is n1 active
client_stop "$CLIENT_PID"
pass "NO_PROXY exempting the gateway: active directly"

# 3. The proxy's CA pinned on purpose: active through the inspection, and
# the agent says so loudly.
: >"$T/inspect.log"
: >"$T/client-n1.log"
run_node "HTTPS_PROXY=$PROXY" -- --trust-proxy-ca "$T/ica.crt"
wait_until 30 "n1 active through the inspecting proxy" agent_is n1 active
grep -q "intercepted 127.0.0.1:$GW_PORT" "$T/inspect.log" || fail "not through the proxy"
assert_contains "$T/client-n1.log" "TRUSTING A TLS-INSPECTING PROXY'S CA"
out=$(printf 'ping' | "$CTL" connect --cluster "$cid" --node n1 "127.0.0.1:$echo_port") ||
	fail "stream through the inspected tunnel failed"
[ "$out" = ping ] || fail "stream echoed \"$out\""
client_stop "$CLIENT_PID"
pass "--trust-proxy-ca: active through the inspecting proxy with a loud warning, a stream went through"

# The config key does the same; a missing file is an error at start.
printf 'trust-proxy-ca = %s\n' "$T/nothing.crt" >"$T/n1.conf"
expect_exit 1 env -u https_proxy -u HTTPS_PROXY "$CLIENT" run --state-dir "$T/n1" --config "$T/n1.conf"
assert_contains "$T/last.err" "cannot load --trust-proxy-ca"
pass "an unreadable --trust-proxy-ca (config key) stops the agent with a reason"
gateway_stop
