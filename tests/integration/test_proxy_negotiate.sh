#!/usr/bin/env bash
# A Kerberos (Negotiate) proxy: a real MIT KDC (krb5kdc, its database made
# with kdb5_util and kadmin.local, realm TETHER.TEST on a free loopback
# port, its own krb5.conf and kdc.conf through KRB5_CONFIG and
# KRB5_KDC_PROFILE) and Debian's squid with negotiate_kerberos_auth and
# the keytab of HTTP/localhost.  The agent (GSSAPI loaded at run time) gets
# a ticket with the node's keytab (KRB5_CLIENT_KTNAME) and becomes active
# through squid, carrying a stream; so it does with a credential cache
# from kinit.  Without credentials, and with a keytab whose key the KDC no
# longer has, the error says Kerberos could not make a ticket (GSSAPI's own
# words); with a ticket squid's keytab cannot read, it says the proxy
# refused the ticket; each is retried with backoff.  join goes through
# squid with the keytab too.
source "$(dirname "$0")/lib.sh"

REALM=TETHER.TEST
KDC_PORT=$(free_port)
# squid's helper runs as squid's user: the Kerberos files it reads live in
# a directory it can enter.
KDIR=$(mktemp -d "${TMPDIR:-/tmp}/tether-krb.XXXXXX")
on_cleanup "rm -rf '$KDIR'"
chmod 755 "$KDIR"
cat >"$KDIR/krb5.conf" <<CONF
[libdefaults]
	default_realm = $REALM
	dns_lookup_kdc = false
	dns_lookup_realm = false
	dns_canonicalize_hostname = false
	rdns = false
[realms]
	$REALM = {
		kdc = 127.0.0.1:$KDC_PORT
	}
[domain_realm]
	localhost = $REALM
CONF
cat >"$KDIR/kdc.conf" <<CONF
[kdcdefaults]
	kdc_ports = $KDC_PORT
	kdc_tcp_ports = $KDC_PORT
[realms]
	$REALM = {
		database_name = $KDIR/principal
		key_stash_file = $KDIR/stash
		acl_file = $KDIR/kadm5.acl
		max_life = 1h
	}
[logging]
	kdc = FILE:$KDIR/kdc.log
CONF
chmod 644 "$KDIR/krb5.conf"
export KRB5_CONFIG=$KDIR/krb5.conf KRB5_KDC_PROFILE=$KDIR/kdc.conf
kdb5_util create -s -r "$REALM" -P "master-$$" >"$T/kdb5_util.log" 2>&1
kadm() { kadmin.local -r "$REALM" -q "$1" >>"$T/kadmin.log" 2>&1; }
kadm "addprinc -randkey HTTP/localhost"
kadm "ktadd -k $KDIR/http.keytab HTTP/localhost"
kadm "addprinc -randkey node1"
kadm "ktadd -k $T/node1.keytab node1"
kadm "addprinc -pw node2-password node2"
kadm "addprinc -randkey stale"
kadm "ktadd -k $T/stale.keytab stale"
kadm "cpw -randkey stale"           # the KDC's key moves on; the keytab's is old
if [ "$(id -u)" -eq 0 ]; then chown proxy "$KDIR/http.keytab"; fi
/usr/sbin/krb5kdc -n -P "$KDIR/kdc.pid" >>"$T/krb5kdc.log" 2>&1 &
PIDS+=($!)
wait_until 30 "the KDC on $KDC_PORT" python3 -c \
	'import socket,sys; socket.create_connection(("127.0.0.1", int(sys.argv[1])), 1)' "$KDC_PORT"

gateway_init
gateway_start
cid=$(cluster_create kerberos)
ctl token create --cluster "$cid" --uses 1 >"$T/join.json"
echo_server_start
join_node n1 "$T/join.json" --allow "127.0.0.1:$echo_port" >/dev/null

squid_start "auth_param negotiate program /usr/lib/squid/negotiate_kerberos_auth -s HTTP/localhost@$REALM -k $KDIR/http.keytab -c @DIR@
auth_param negotiate children 4 startup=1 idle=1
auth_param negotiate keep_alive on"
PROXY=http://localhost:$SQUID_PORT

run_node() { # run_node [ENV=VALUE...] -- [run flags...]; sets CLIENT_PID
	local envs=()
	while [ $# -gt 0 ] && [ "$1" != -- ]; do envs+=("$1"); shift; done
	shift
	env -u https_proxy -u HTTPS_PROXY -u no_proxy -u NO_PROXY -u KRB5CCNAME \
		-u KRB5_CLIENT_KTNAME "${envs[@]}" \
		"$CLIENT" run --state-dir "$T/n1" --proxy "$PROXY" --proxy-auth negotiate "$@" \
		>>"$T/client-n1.log" 2>&1 &
	CLIENT_PID=$!
	PIDS+=("$CLIENT_PID")
}
connects_by() { grep -c "CONNECT 127.0.0.1:$GW_PORT $1@$REALM" "$SQUID_DIR/access.log" || true; }

# 1. The node's keytab: active through squid, a stream goes through.
run_node "KRB5_CLIENT_KTNAME=$T/node1.keytab" "KRB5CCNAME=FILE:$T/n1.ccache" --
wait_until 30 "n1 active through squid with Kerberos (keytab)" agent_is n1 active
out=$(printf 'ping' | "$CTL" connect --cluster "$cid" --node n1 "127.0.0.1:$echo_port") ||
	fail "stream through the Negotiate proxy failed"
[ "$out" = ping ] || fail "stream echoed \"$out\""
client_stop "$CLIENT_PID"
# squid logs a CONNECT when its tunnel ends.
wait_until 10 "squid's access.log: a CONNECT by node1@$REALM" test "$(connects_by node1)" -ge 1
pass "Negotiate with the node's keytab: active through squid (access.log: node1@$REALM), a stream went through"

# 2. A credential cache (kinit with a password), no keytab.
printf 'node2-password\n' | KRB5CCNAME=FILE:$T/n2.ccache kinit node2 >>"$T/kinit.log" 2>&1
run_node "KRB5CCNAME=FILE:$T/n2.ccache" --
wait_until 30 "n1 active with a credential cache" agent_is n1 active
client_stop "$CLIENT_PID"
wait_until 10 "squid's access.log: a CONNECT by node2@$REALM" test "$(connects_by node2)" -ge 1
pass "Negotiate with a credential cache from kinit"

# 3. join goes through the same proxy with Kerberos (the node's keytab).
ctl token create --cluster "$cid" --uses 1 >"$T/join2.json"
env -u https_proxy -u HTTPS_PROXY -u no_proxy -u NO_PROXY \
	KRB5_CLIENT_KTNAME="$T/node1.keytab" KRB5CCNAME="FILE:$T/j.ccache" \
	"$CLIENT" join --state-dir "$T/n2" --node-name n2 --proxy "$PROXY" \
	--proxy-auth negotiate <"$T/join2.json" >/dev/null || fail "join through the Negotiate proxy failed"
wait_until 10 "squid's access.log: join's CONNECTs by node1@$REALM" test "$(connects_by node1)" -ge 3
pass "join through the Negotiate proxy with the node's keytab"

# 4. No ticket and no keytab; then a keytab the KDC no longer honours.
for case in "missing:KRB5CCNAME=FILE:$T/empty.ccache" \
	"stale:KRB5_CLIENT_KTNAME=$T/stale.keytab"; do
	name=${case%%:*} envset=${case#*:}
	: >"$T/client-n1.log"
	run_node "$envset" "KRB5CCNAME=FILE:$T/$name.ccache" --
	refusals() { grep -c "proxy $PROXY: Kerberos (GSSAPI) cannot make a ticket for the proxy" "$T/client-n1.log" || true; }
	two() { [ "$(refusals)" -ge 2 ]; }
	wait_until 30 "two Kerberos failures ($name), retried" two
	grep -q 'msg=reconnecting delay_ms=' "$T/client-n1.log" || fail "no backoff between attempts"
	if agent_is n1 active 2>/dev/null; then fail "active without a valid ticket ($name)"; fi
	client_stop "$CLIENT_PID"
	pass "$name credentials: '$(grep -o 'Kerberos (GSSAPI) cannot[^"]*' "$T/client-n1.log" | head -1)', retried"
done
# 5. A ticket the proxy cannot read: the KDC now issues HTTP/localhost
# tickets under a new key that squid's keytab lacks, so squid answers 407
# again, and the error says the proxy refused the ticket.
kadm "cpw -randkey HTTP/localhost"
: >"$T/client-n1.log"
run_node "KRB5_CLIENT_KTNAME=$T/node1.keytab" "KRB5CCNAME=FILE:$T/n1b.ccache" --
refused() { [ "$(grep -c "the proxy refused this node's Kerberos ticket for HTTP/localhost" "$T/client-n1.log" || true)" -ge 2 ]; }
wait_until 30 "two refusals of a ticket squid cannot read, retried" refused
assert_contains "$T/client-n1.log" "proxy $PROXY refused CONNECT to 127.0.0.1:$GW_PORT: HTTP/1.1 407"
if agent_is n1 active 2>/dev/null; then fail "active with a ticket the proxy refused"; fi
client_stop "$CLIENT_PID"
pass "a ticket the proxy refuses: '$(grep -o "the proxy refused this node's Kerberos[^\"]*" "$T/client-n1.log" | head -1)', retried"
kill -TERM "$SQUID_PID"
wait "$SQUID_PID" || true
gateway_stop
