#!/usr/bin/env bash
# An NTLM proxy: Debian's squid with NTLM authentication, its authenticator
# tests/integration/ntlmhelper.py (squid's helper protocol; it checks the
# agent's NTLMv2 response against the account CORP\alice's password, which
# squid's own ntlm_fake_auth would not).  With the right password (from a
# 0600 file named in the config file, or in the proxy URL) the agent becomes
# active through squid and carries a stream; with a wrong one the error says
# the proxy refused the NTLM credentials, and it retries with backoff; a
# password file others can read is refused at start.
source "$(dirname "$0")/lib.sh"

PASSWORD='S3cret pass, with ü'
nt_hash=$(printf '%s' "$PASSWORD" | iconv -f UTF-8 -t UTF-16LE |
	openssl dgst -md4 -provider legacy -provider default -r | cut -d' ' -f1)
[ ${#nt_hash} -eq 32 ] || fail "cannot compute the NT hash with openssl (legacy provider)"

gateway_init
gateway_start
cid=$(cluster_create ntlm)
ctl token create --cluster "$cid" --uses 1 >"$T/join.json"
echo_server_start
join_node n1 "$T/join.json" --allow "127.0.0.1:$echo_port" >/dev/null

squid_start "auth_param ntlm program /usr/bin/python3 @DIR@/ntlmhelper.py $nt_hash alice CORP @DIR@/ntlm.log
auth_param ntlm children 4 startup=1 idle=1
auth_param ntlm keep_alive on" "$TETHER_SRC/tests/integration/ntlmhelper.py"
PROXY=http://127.0.0.1:$SQUID_PORT

run_node() { # run_node [run flags...]; sets CLIENT_PID
	env -u https_proxy -u HTTPS_PROXY -u no_proxy -u NO_PROXY \
		"$CLIENT" run --state-dir "$T/n1" "$@" >>"$T/client-n1.log" 2>&1 &
	CLIENT_PID=$!
	PIDS+=("$CLIENT_PID")
}

# 1. The right password, from a 0600 file, every setting in the config file.
printf '%s\n' "$PASSWORD" >"$T/proxy.pass"
chmod 600 "$T/proxy.pass"
cat >"$T/n1.conf" <<CONF
proxy = $PROXY
proxy-auth = ntlm
proxy-user = CORP\\alice
proxy-password-file = $T/proxy.pass
CONF
run_node --config "$T/n1.conf"
wait_until 30 "n1 active through squid with NTLM" agent_is n1 active
grep -q "accepted CORP\\\\alice" "$SQUID_DIR/ntlm.log" || fail "the NTLM helper accepted nobody"
out=$(printf 'ping' | "$CTL" connect --cluster "$cid" --node n1 "127.0.0.1:$echo_port") ||
	fail "stream through the NTLM proxy failed"
[ "$out" = ping ] || fail "stream echoed \"$out\""
if grep -q "S3cret" "$T/client-n1.log"; then fail "the password is in the agent's log"; fi
client_stop "$CLIENT_PID"
# squid logs a CONNECT when its tunnel ends.
wait_until 10 "squid's access.log: a CONNECT by alice" \
	grep -Eq "CONNECT 127.0.0.1:$GW_PORT alice " "$SQUID_DIR/access.log"
pass "NTLMv2 through squid (config file, 0600 password file): active, the helper verified the response, a stream went through"

# 2. The credentials in the proxy URL (DOMAIN\user percent-encoded).
: >"$SQUID_DIR/ntlm.log"
enc=$(python3 -c 'import sys, urllib.parse; print(urllib.parse.quote(sys.argv[1], safe=""))' "$PASSWORD")
run_node --proxy "http://CORP%5Calice:$enc@127.0.0.1:$SQUID_PORT" --proxy-auth ntlm
wait_until 30 "n1 active with the URL's credentials" agent_is n1 active
grep -q "accepted CORP\\\\alice" "$SQUID_DIR/ntlm.log" || fail "not through NTLM"
client_stop "$CLIENT_PID"
pass "NTLM with the proxy URL's DOMAIN\\user and password"

# 3. A wrong password: a clear error, retried with backoff.
: >"$T/client-n1.log"
printf 'not the password\n' >"$T/wrong.pass"
chmod 600 "$T/wrong.pass"
refusals() { grep -c 'the proxy refused the NTLM credentials of CORP\\\\alice' "$T/client-n1.log" || true; }
two_refusals() { [ "$(refusals)" -ge 2 ]; }
run_node --proxy "$PROXY" --proxy-auth ntlm --proxy-user 'CORP\alice' \
	--proxy-password-file "$T/wrong.pass"
wait_until 30 "two refusals of a wrong NTLM password" two_refusals
assert_contains "$T/client-n1.log" "proxy $PROXY refused CONNECT to 127.0.0.1:$GW_PORT: HTTP/1.1 407"
grep -q 'msg=reconnecting delay_ms=' "$T/client-n1.log" || fail "no backoff between attempts"
grep -q "refused wrong password for CORP\\\\alice" "$SQUID_DIR/ntlm.log" ||
	fail "the helper did not see a wrong password"
if agent_is n1 active 2>/dev/null; then fail "active with a wrong password"; fi
client_stop "$CLIENT_PID"
pass "wrong NTLM password: '$(grep -o 'the proxy refused the NTLM[^"]*' "$T/client-n1.log" | head -1)', retried with backoff"

# 4. join goes through the same proxy with the same authentication.
ctl token create --cluster "$cid" --uses 1 >"$T/join2.json"
: >"$SQUID_DIR/ntlm.log"
env -u https_proxy -u HTTPS_PROXY -u no_proxy -u NO_PROXY \
	"$CLIENT" join --state-dir "$T/n2" --node-name n2 --proxy "$PROXY" --proxy-auth ntlm \
	--proxy-user 'CORP\alice' --proxy-password-file "$T/proxy.pass" <"$T/join2.json" >/dev/null ||
	fail "join through the NTLM proxy failed"
[ "$(grep -c "accepted CORP\\\\alice" "$SQUID_DIR/ntlm.log")" -ge 2 ] ||
	fail "join's two requests did not both authenticate with NTLM"
expect_exit 4 env -u https_proxy -u HTTPS_PROXY -u no_proxy -u NO_PROXY \
	"$CLIENT" join --state-dir "$T/n3" --node-name n3 --proxy "$PROXY" --proxy-auth ntlm \
	--proxy-user 'CORP\alice' --proxy-password-file "$T/wrong.pass" <"$T/join2.json"
assert_contains "$T/last.err" "the proxy refused the NTLM credentials of CORP\\alice"
pass "join through the NTLM proxy (both its requests), and a wrong password refused"

# 5. A password file the group can read is refused at start, and so is
# NTLM without a user.
chmod 640 "$T/proxy.pass"
expect_exit 1 env -u https_proxy -u HTTPS_PROXY "$CLIENT" run --state-dir "$T/n1" \
	--config "$T/n1.conf"
assert_contains "$T/last.err" "proxy.pass is readable by others than its owner"
assert_contains "$T/last.err" 'mode 0640'
chmod 600 "$T/proxy.pass"
expect_exit 2 env -u https_proxy -u HTTPS_PROXY "$CLIENT" run --state-dir "$T/n1" \
	--proxy "$PROXY" --proxy-auth ntlm
assert_contains "$T/last.err" "--proxy-auth ntlm needs a user"
pass "a group-readable password file, and NTLM without a user, are refused with a reason"
kill -TERM "$SQUID_PID"
wait "$SQUID_PID" || true
gateway_stop
