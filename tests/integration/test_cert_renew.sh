#!/usr/bin/env bash
# `tether-gateway cert renew` and SIGHUP on one gateway (docs/0030): the
# renewed certificate has the old one's names and key and a new serial;
# after SIGHUP new handshakes get it (serial read with openssl s_client)
# while the agent's tunnel stays up (same connected_since) and a stream
# opened before keeps echoing; /readyz, `tetherctl status` and the expiry
# metric say the new serial/notAfter.  Then a broken server.crt and a
# certificate from another CA: SIGHUP keeps the old one, logs why, and the
# gateway goes on serving.  And renewal by itself (--cert-renew-before).
source "$(dirname "$0")/lib.sh"

echo_server_start
gateway_init --hostname gw.example
gateway_start
cid=$(cluster_create alpha)
ctl token create --cluster "$cid" >"$T/join.json"
join_node n1 "$T/join.json" --allow "127.0.0.1:$echo_port" >/dev/null
client_start n1
wait_until 30 "agent n1 active" agent_is n1 active
aid=$(agent_id_of n1)
since=$(agent_field "$aid" connected_since)

served_serial() { # the serial new TLS handshakes on the main port get
	openssl s_client -connect "127.0.0.1:$GW_PORT" -servername localhost \
		</dev/null 2>/dev/null | openssl x509 -noout -serial | sed 's/^serial=//'
}
file_serial() { openssl x509 -in "$GW_DIR/server.crt" -noout -serial | sed 's/^serial=//'; }
serving() { [ "$(served_serial)" = "$1" ]; }

old=$(file_serial)
serving "$old" || fail "the gateway does not serve server.crt's serial $old"
openssl x509 -in "$GW_DIR/server.crt" -noout -ext subjectAltName >"$T/san.old"
openssl x509 -in "$GW_DIR/server.crt" -noout -pubkey >"$T/pub.old"

# A stream in flight across the renewal.
held_connect "$cid" n1 "127.0.0.1:$echo_port" "$T/connect.out" "$T/connect.log"
printf 'before\n' >&7
wait_until 20 "the stream echoed before the renewal" grep -q before "$T/connect.out"

# cert renew: usage and refusals first.
expect_exit 0 "$GATEWAY" cert --help
assert_contains "$T/last.out" "SIGHUP"
expect_exit 2 "$GATEWAY" cert renew
assert_contains "$T/last.err" "--data-dir DIR is required"
expect_exit 2 "$GATEWAY" cert renew --data-dir "$GW_DIR" --days 0
mkdir -m 700 "$T/nokey"
cp "$GW_DIR/ca.crt" "$GW_DIR/server.crt" "$GW_DIR/server.key" "$T/nokey/"
expect_exit 1 "$GATEWAY" cert renew --data-dir "$T/nokey"
assert_contains "$T/last.err" "ca.key: no CA key here"
cmp -s "$T/nokey/server.crt" "$GW_DIR/server.crt" || fail "a refused renewal changed server.crt"

peer_old=$(openssl x509 -in "$GW_DIR/peer.crt" -noout -serial)
expect_exit 0 "$GATEWAY" cert renew --data-dir "$GW_DIR" --days 90
new=$(file_serial)
[ "$(openssl x509 -in "$GW_DIR/peer.crt" -noout -serial)" != "$peer_old" ] ||
	fail "cert renew did not renew peer.crt"
assert_mode "$GW_DIR/peer.key" 600
openssl x509 -in "$GW_DIR/peer.crt" -noout -subject | grep -q 'CN *= *tether-replica' ||
	fail "peer.crt is not the replicas' credential"
[ "$new" != "$old" ] || fail "cert renew kept the serial $old"
assert_contains "$T/last.out" "serial $new"
assert_mode "$GW_DIR/server.crt" 644
assert_mode "$GW_DIR/server.key" 600
openssl verify -CAfile "$GW_DIR/ca.crt" "$GW_DIR/server.crt" >/dev/null ||
	fail "the renewed certificate does not chain to ca.crt"
openssl x509 -in "$GW_DIR/server.crt" -noout -ext subjectAltName >"$T/san.new"
cmp -s "$T/san.old" "$T/san.new" || fail "the renewed certificate has other names: $(cat "$T/san.new")"
openssl x509 -in "$GW_DIR/server.crt" -noout -pubkey | cmp -s - "$T/pub.old" ||
	fail "the renewed certificate is for another key"
openssl x509 -in "$GW_DIR/server.crt" -noout -checkend $((89 * 86400)) >/dev/null &&
	! openssl x509 -in "$GW_DIR/server.crt" -noout -checkend $((91 * 86400)) >/dev/null ||
	fail "--days 90 was not honoured"
serving "$old" || fail "the gateway served the new certificate before SIGHUP"
pass "cert renew: new serial $new, same names and key, 90 days; a new peer credential"

kill -HUP "$GW_PID"
wait_until 20 "the gateway serves serial $new" serving "$new"
wait_until 10 "the reload logged" grep -q "now serving the data directory.s server certificate.*serial=$new" "$T/gateway.log"
not_after=$(date -u -d "$(openssl x509 -in "$GW_DIR/server.crt" -noout -enddate | sed 's/^notAfter=//')" +%Y-%m-%dT%H:%M:%SZ)
curl -sf --cacert "$GW_DIR/ca.crt" "$GW_URL/readyz" >"$T/readyz.body"
assert_contains "$T/readyz.body" "certificate serial $new not_after $not_after"
ctl status >"$T/status.json"
jq -e --arg s "$new" --arg a "$not_after" '.serial == $s and .not_after == $a' \
	"$T/status.json" >/dev/null || fail "tetherctl status says $(cat "$T/status.json")"
curl -sf --cacert "$GW_DIR/ca.crt" -H "Authorization: Bearer $(cat "$GW_DIR/admin.token")" \
	"$GW_URL/metrics" >"$T/metrics.txt"
assert_contains "$T/metrics.txt" "tether_certificate_expiry_timestamp_seconds{cert=\"server\"} $(date -u -d "$not_after" +%s)"
peer_after=$(date -u -d "$(openssl x509 -in "$GW_DIR/peer.crt" -noout -enddate | sed 's/^notAfter=//')" +%s)
assert_contains "$T/metrics.txt" "tether_certificate_expiry_timestamp_seconds{cert=\"peer\"} $peer_after"
agent_is n1 active || fail "the agent is not connected after SIGHUP"
[ "$(agent_field "$aid" connected_since)" = "$since" ] || fail "the tunnel was dropped (connected_since changed)"
printf 'after\n' >&7
wait_until 20 "the stream opened before SIGHUP still echoes" grep -q after "$T/connect.out"
kill -0 "$HELD_PID" || fail "tetherctl connect ended"
pass "SIGHUP: serves $new; tunnel and stream kept; /readyz, status, metric follow"

# A broken server.crt: kept the old one, said why, still serving.
cp "$GW_DIR/server.crt" "$T/good.crt"
printf -- '-----BEGIN CERTIFICATE-----\nbroken\n-----END CERTIFICATE-----\n' >"$GW_DIR/server.crt"
kill -HUP "$GW_PID"
wait_until 20 "the bad certificate refused in the log" grep -q "kept the old server certificate" "$T/gateway.log"
grep "kept the old server certificate" "$T/gateway.log" | grep -q "serial=$new" || fail "the refusal does not name the serial kept ($new)"
serving "$new" || fail "after a bad SIGHUP the gateway does not serve $new"
gateway_ready >/dev/null || fail "not ready after a bad SIGHUP"

# A certificate for our key from another CA: refused too.
mkdir -m 700 "$T/other"
"$GATEWAY" init --data-dir "$T/other" >/dev/null 2>&1
openssl req -new -key "$GW_DIR/server.key" -subj /CN=tether-gateway -out "$T/other.csr" 2>/dev/null
openssl x509 -req -in "$T/other.csr" -CA "$T/other/ca.crt" -CAkey "$T/other/ca.key" \
	-days 30 -out "$GW_DIR/server.crt" 2>/dev/null
kill -HUP "$GW_PID"
wait_until 20 "the foreign certificate refused in the log" grep -q "not issued by" "$T/gateway.log"
serving "$new" || fail "after a foreign certificate the gateway does not serve $new"
cp "$T/good.crt" "$GW_DIR/server.crt"
[ "$(agent_field "$aid" connected_since)" = "$since" ] || fail "a bad SIGHUP dropped the tunnel"
pass "bad server.crt (garbage, another CA): old one kept, logged why"

exec 7>&-
wait "$HELD_PID" 2>/dev/null || true
gateway_stop

# Renewal by itself: the 90-day certificate is within --cert-renew-before 100.
gateway_start --cert-renew-before 100
wait_until 30 "renewed by itself" grep -q "server certificate renewed, now serving it" "$T/gateway.log"
auto=$(file_serial)
[ "$auto" != "$new" ] || fail "no new certificate in server.crt"
wait_until 20 "the gateway serves the renewed $auto" serving "$auto"
openssl x509 -in "$GW_DIR/server.crt" -noout -checkend $((700 * 86400)) >/dev/null ||
	fail "the renewal by itself is not for two years"
gateway_stop
pass "--cert-renew-before: renewed and served $auto"
