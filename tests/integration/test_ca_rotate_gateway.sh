#!/usr/bin/env bash
# CA rotation, the gateway's side (docs/0033): `tether-gateway ca rotate
# start` and SIGHUP make the gateway serve a chain that a client trusting
# only the old CA and one trusting only the new CA both verify (OpenSSL's
# s_client and Go's x509 through kubectl); an agent that pinned the old CA
# reconnects; /v1/ca, join documents and kubeconfigs carry the new CA;
# `tetherctl ca status` and the metric say "overlap".  After `finish` and
# SIGHUP the old CA is refused, the new one verifies, the phase is final.
# The one agent follows (SETTINGS "ca"; agent list "cas", ca status); the
# whole fleet with an offline node is test_ca_rotation.
source "$(dirname "$0")/lib.sh"

KUBECTL=$(command -v kubectl) || fail "kubectl not found (run config/setup.sh)"

echo_server_start
gateway_init --hostname gw.example
gateway_start
cid=$(cluster_create alpha)
ctl token create --cluster "$cid" >"$T/join.json"
join_node n1 "$T/join.json" --allow "127.0.0.1:$echo_port" >/dev/null
client_start n1
wait_until 30 "agent n1 active" agent_is n1 active
cp "$GW_DIR/ca.crt" "$T/old-ca.crt"

# verifies CAFILE: new TLS handshakes on the main port verify with CAFILE
# alone as the only trust anchor (OpenSSL).
verifies() {
	openssl s_client -connect "127.0.0.1:$GW_PORT" -servername localhost \
		-CAfile "$1" -verify_return_error </dev/null >"$T/s_client.out" 2>&1 &&
		grep -q 'Verify return code: 0 (ok)' "$T/s_client.out"
}
# go_verifies CAFILE: the same with Go's x509 (kubectl, a kubeconfig whose
# CA is CAFILE, asking the gateway's /readyz).
go_verifies() {
	cat >"$T/probe.kubeconfig" <<-EOF
	apiVersion: v1
	kind: Config
	clusters: [{name: gw, cluster: {server: "$GW_URL", certificate-authority: "$1"}}]
	users: [{name: u, user: {token: none}}]
	contexts: [{name: c, context: {cluster: gw, user: u}}]
	current-context: c
	EOF
	"$KUBECTL" --kubeconfig "$T/probe.kubeconfig" --request-timeout 10s \
		get --raw /readyz >"$T/kubectl.out" 2>&1
}
connected_is() { # connected_is NODE true|false
	ctl agent list | jq -e --arg n "$1" --argjson c "$2" \
		'.[] | select(.node == $n and .connected == $c)' >/dev/null
}
checksum() { printf 'sha256:%s' "$(openssl x509 -in "$1" -outform DER | sha256sum | cut -d' ' -f1)"; }
metric() {
	curl -sf --cacert "$T/old-ca.crt" -H "Authorization: Bearer $(cat "$GW_DIR/admin.token")" \
		"$GW_URL/metrics" | grep "^$1 " | cut -d' ' -f2
}

verifies "$T/old-ca.crt" || fail "the old CA does not verify before the rotation"
ctl ca status >"$T/status.json"
jq -e '.phase == "none" and .new_ca == null and .agents == null' "$T/status.json" >/dev/null ||
	fail "ca status before a rotation: $(cat "$T/status.json")"
[ "$(metric tether_ca_rotation_phase)" = 0 ] || fail "tether_ca_rotation_phase is not 0 before"
pass "before: phase none"

# --- start: usage, refusals, the files ---
expect_exit 0 "$GATEWAY" ca --help
assert_contains "$T/last.out" "rotate start"
expect_exit 2 "$GATEWAY" ca rotate start
assert_contains "$T/last.err" "--data-dir DIR is required"
mkdir -m 700 "$T/nokey"
cp "$GW_DIR/ca.crt" "$GW_DIR/server.crt" "$GW_DIR/server.key" "$T/nokey/"
expect_exit 1 "$GATEWAY" ca rotate start --data-dir "$T/nokey"
assert_contains "$T/last.err" "no CA key here"
[ ! -e "$T/nokey/ca.next.crt" ] || fail "a refused start wrote ca.next.crt"
expect_exit 0 "$GATEWAY" ca rotate start --data-dir "$GW_DIR"
assert_contains "$T/last.out" "phase overlap"
assert_mode "$GW_DIR/ca.next.key" 600
assert_mode "$GW_DIR/peer.key" 600
cp "$GW_DIR/ca.next.crt" "$T/new-ca.crt"
new=$(checksum "$T/new-ca.crt")
old=$(checksum "$T/old-ca.crt")
assert_contains "$T/last.out" "new_ca $new"
expect_exit 1 "$GATEWAY" ca rotate start --data-dir "$GW_DIR"
assert_contains "$T/last.err" "under way already"
expect_exit 1 "$GATEWAY" cert renew --data-dir "$GW_DIR"
assert_contains "$T/last.err" "rotation is under way"
# The files alone: either CA verifies the chain server.crt holds.
openssl verify -CAfile "$T/old-ca.crt" -untrusted "$GW_DIR/server.crt" "$GW_DIR/server.crt" >/dev/null ||
	fail "server.crt does not verify with the old CA"
openssl verify -CAfile "$T/new-ca.crt" "$GW_DIR/server.crt" >/dev/null ||
	fail "server.crt does not verify with the new CA"
verifies "$T/old-ca.crt" || fail "before SIGHUP the gateway no longer serves the old chain"
pass "ca rotate start: ca.next.crt $new; refusals (no key, twice, cert renew)"

# --- SIGHUP: the overlap ---
kill -HUP "$GW_PID"
wait_until 20 "the overlap in the log" grep -q 'msg="CA rotation" phase=overlap' "$T/gateway.log"
verifies "$T/new-ca.crt" || fail "the new CA does not verify the served chain: $(tail -5 "$T/s_client.out")"
verifies "$T/old-ca.crt" || fail "the old CA does not verify the served chain: $(tail -5 "$T/s_client.out")"
go_verifies "$T/old-ca.crt" || fail "Go (kubectl) with the old CA: $(cat "$T/kubectl.out")"
go_verifies "$T/new-ca.crt" || fail "Go (kubectl) with the new CA: $(cat "$T/kubectl.out")"
pass "overlap: OpenSSL and Go verify the gateway with the old CA alone and with the new one alone"

curl -sf --cacert "$T/old-ca.crt" "$GW_URL/v1/ca" >"$T/v1ca.pem"
[ "$(checksum "$T/v1ca.pem")" = "$new" ] || fail "/v1/ca is not the new CA"
ctl token create --cluster "$cid" >"$T/join2.json"
jq -e --arg s "$new" '.ca_checksum == $s' "$T/join2.json" >/dev/null ||
	fail "a join document of the overlap pins $(jq -r .ca_checksum "$T/join2.json"), not the new CA"
"$CTL" -o json kubeconfig --cluster "$cid" --user alice >"$T/kc.yaml"
"$KUBECTL" config view --kubeconfig "$T/kc.yaml" --raw -o json |
	jq -er '.clusters[0].cluster["certificate-authority-data"]' | base64 -d >"$T/kc-ca.crt"
[ "$(checksum "$T/kc-ca.crt")" = "$new" ] || fail "a kubeconfig of the overlap does not carry the new CA"
ctl ca status >"$T/status.json"
jq -e --arg n "$new" --arg o "$old" '.phase == "overlap" and .new_ca == $n and
	.ca == $o and .handed_out == $n and .agents == 1 and .connected == 1 and
	(.holding_new_ca | type) == "number"' "$T/status.json" >/dev/null ||
	fail "ca status in the overlap: $(cat "$T/status.json")"
[ "$(metric tether_ca_rotation_phase)" = 1 ] || fail "tether_ca_rotation_phase is not 1"
pass "overlap: /v1/ca, join documents and kubeconfigs carry the new CA; ca status, metric"

# The agent was sent the new CA (SETTINGS "ca") and said it holds both.
holds() { # holds NODE CHECKSUM...: the agent's "cas" are exactly these
	local want
	want=$(printf '%s\n' "${@:2}" | sort | jq -R . | jq -sc .)
	ctl agent list | jq -e --arg n "$1" --argjson w "$want" \
		'.[] | select(.node == $n) | (.cas // []) | sort == $w' >/dev/null
}
holding_is() { ctl ca status | jq -e --argjson h "$1" '.holding_new_ca == $h and .connected_holding_new_ca == $h' >/dev/null; }
wait_until 20 "n1 holds the old and the new CA" holds n1 "$old" "$new"
wait_until 10 "ca status counts n1" holding_is 1
pass "overlap: the agent holds both CAs (agent list \"cas\"), ca status counts it"

# A restart in the overlap reads the phase from the files; a renewal that
# would be due is put off (cert renew refuses during the overlap), said once.
gateway_stop
gateway_start --cert-renew-before 3650
[ "$(grep -c 'msg="CA rotation" phase=overlap' "$T/gateway.log")" = 2 ] ||
	fail "the restarted gateway did not read the overlap from its files"
wait_until 10 "the put-off renewal logged" grep -q "not renewed during a CA rotation" "$T/gateway.log"
! grep -q "renewal failed" "$T/gateway.log" || fail "the gateway tried to renew during the overlap"
verifies "$T/old-ca.crt" && verifies "$T/new-ca.crt" || fail "after a restart the overlap chain is not served"
pass "overlap: a restart reads the phase; renewal by itself waits for the finish"

# An agent that pinned the old CA reconnects through the cross-certificate.
kill "$CLIENT_PID"
wait "$CLIENT_PID" 2>/dev/null || true
wait_until 20 "agent n1 gone" connected_is n1 false
client_start n1
wait_until 30 "agent n1 back (old CA pinned)" connected_is n1 true
pass "overlap: an agent pinned to the old CA reconnects"

# --- finish ---
expect_exit 0 "$GATEWAY" ca rotate finish --data-dir "$GW_DIR"
assert_contains "$T/last.out" "phase final"
[ "$(checksum "$GW_DIR/ca.crt")" = "$new" ] || fail "ca.crt is not the new CA after finish"
[ "$(checksum "$GW_DIR/ca.old.crt")" = "$old" ] || fail "ca.old.crt is not the old CA"
[ ! -e "$GW_DIR/ca.next.crt" ] && [ ! -e "$GW_DIR/ca.next.key" ] && [ ! -e "$GW_DIR/ca.cross.crt" ] ||
	fail "finish left ca.next.* or ca.cross.crt"
verifies "$T/old-ca.crt" || fail "before SIGHUP the gateway stopped serving the cross chain"
kill -HUP "$GW_PID"
wait_until 20 "final in the log" grep -q 'msg="CA rotation" phase=final' "$T/gateway.log"
verifies "$T/new-ca.crt" || fail "the new CA does not verify after the finish"
! verifies "$T/old-ca.crt" || fail "the old CA still verifies after the finish"
! go_verifies "$T/old-ca.crt" || fail "Go (kubectl) with the old CA still verifies after the finish"
go_verifies "$T/new-ca.crt" || fail "Go (kubectl) with the new CA after the finish: $(cat "$T/kubectl.out")"
TETHER_CACERT=$T/new-ca.crt ctl ca status >"$T/status.json"
jq -e --arg n "$new" --arg o "$old" '.phase == "final" and .ca == $n and
	.old_ca == $o and .handed_out == $n' "$T/status.json" >/dev/null ||
	fail "ca status after the finish: $(cat "$T/status.json")"
not_after() { date -u -d "$(openssl x509 -in "$1" -noout -enddate | sed 's/^notAfter=//')" +%s; }
metric_final() { # the metrics as the new CA's client reads them
	curl -sf --cacert "$T/new-ca.crt" -H "Authorization: Bearer $(cat "$GW_DIR/admin.token")" \
		"$GW_URL/metrics" | grep "^$1 " | cut -d' ' -f2
}
[ "$(metric_final tether_ca_rotation_phase)" = 2 ] || fail "tether_ca_rotation_phase is not 2 after the finish"
[ "$(metric_final 'tether_certificate_expiry_timestamp_seconds{cert="ca"}')" = "$(not_after "$T/new-ca.crt")" ] ||
	fail "the CA expiry metric is not the new CA's after the finish"
pass "finish: the old CA refused (OpenSSL, Go), the new one verifies; phase final, metrics follow"
TETHER_CACERT=$T/new-ca.crt wait_until 20 "n1 holds the new CA alone" holds n1 "$new"
TETHER_CACERT=$T/new-ca.crt connected_is n1 true || fail "n1 is not connected after the finish"
pass "final: the agent holds the new CA alone and stays connected"

gateway_stop
