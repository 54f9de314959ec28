#!/usr/bin/env bash
# CA rotation end to end, the agents' side (docs/0033, issue 21): one
# gateway, three agents online and one stopped.  `ca rotate start` + SIGHUP:
# the three receive the new CA over their tunnels (SETTINGS "ca"), keep it
# as ca.next.crt and stay active with no command run on the nodes; `tetherctl
# ca status`, `agent list` and `tether-client status` say they hold it; a
# kubeconfig issued before the rotation works through the cross-certificate.
# `ca rotate finish` + SIGHUP: the three make the new CA their ca.crt and,
# killed (-9) and started again, connect trusting it alone; the old
# kubeconfig and `openssl s_client -CAfile OLD` are refused, a new
# kubeconfig works.  The stopped agent, started again, cannot verify the
# gateway: its log and `status` say the gateway's CA changed and how to
# recover; it keeps retrying; `tether-client join --rejoin` with a new join
# document brings it back as the same agent.  (The gateway's side alone is
# test_ca_rotate_gateway.)
source "$(dirname "$0")/lib.sh"
chmod 755 "$T"

KUBECTL=$(command -v kubectl) || fail "kubectl not found (run config/setup.sh)"

# An nginx standing in for the nodes' kube-apiserver (as test_k8s).
web_port=$(free_port)
mkdir -p "$T/www"
printf '{"major":"1","minor":"28","gitVersion":"v1.28.0-tether-rotation"}\n' >"$T/www/version"
nginx_start nginx "
    access_log off;
    server { listen 127.0.0.1:$web_port; root $T/www; }"

checksum() { printf 'sha256:%s' "$(openssl x509 -in "$1" -outform DER | sha256sum | cut -d' ' -f1)"; }
node_cas() { # node_cas NODE: the CAs the gateway recorded for it, as JSON
	ctl agent list | jq -c --arg n "$1" '.[] | select(.node == $n) | .cas'
}
holds() { # holds NODE CHECKSUM...: the gateway recorded exactly these, in order
	[ "$(node_cas "$1")" = "$(printf '%s\n' "${@:2}" | jq -R . | jq -sc .)" ]
}
status_cas() { "$CLIENT" status --state-dir "$T/$1" | jq -c .cas; }
verifies() { # verifies CAFILE: a new handshake verifies with CAFILE alone
	openssl s_client -connect "127.0.0.1:$GW_PORT" -servername localhost \
		-CAfile "$1" -verify_return_error </dev/null >"$T/s_client.out" 2>&1 &&
		grep -q 'Verify return code: 0 (ok)' "$T/s_client.out"
}
kubectl_version() { # kubectl_version KUBECONFIG: /version through a node
	"$KUBECTL" --kubeconfig "$1" --request-timeout 10s get --raw /version \
		>"$T/kubectl.out" 2>&1 && grep -q v1.28.0-tether-rotation "$T/kubectl.out"
}
next_is() { # next_is NODE CHECKSUM: the node keeps CHECKSUM as ca.next.crt
	[ -f "$T/$1/ca.next.crt" ] && [ "$(checksum "$T/$1/ca.next.crt")" = "$2" ]
}
promoted() { # promoted NODE CHECKSUM: ca.crt is CHECKSUM alone, state.json says so
	[ ! -e "$T/$1/ca.next.crt" ] && [ "$(checksum "$T/$1/ca.crt")" = "$2" ] &&
		[ "$(jq -r .ca_checksum "$T/$1/state.json")" = "$2" ]
}

gateway_init
gateway_start
cid=$(cluster_create rotation)
declare -A pid
for n in n1 n2 n3 n4; do
	ctl token create --cluster "$cid" >"$T/join-$n.json"
	join_node "$n" "$T/join-$n.json" --service "kube-api=http://127.0.0.1:$web_port" >/dev/null
	client_start "$n"
	pid[$n]=$CLIENT_PID
done
for n in n1 n2 n3 n4; do
	wait_until 30 "agent $n active" agent_is "$n" active
done
n4_id=$(agent_id_of n4)
client_stop "${pid[n4]}"
cp "$GW_DIR/ca.crt" "$T/old-ca.crt"
old=$(checksum "$T/old-ca.crt")
for n in n1 n2 n3; do
	wait_until 20 "the gateway records $n's CA" holds "$n" "$old"
	[ "$(status_cas "$n")" = "[\"$old\"]" ] || fail "$n status cas: $(status_cas "$n")"
done
"$CTL" kubeconfig --cluster "$cid" --user alice >"$T/kc-old.yaml" || fail "kubeconfig exited $?"
wait_until 20 "kubectl with the first kubeconfig" kubectl_version "$T/kc-old.yaml"
pass "before: four agents joined (n4 stopped), each holding the old CA $old"

# --- start: the overlap reaches the three online agents by itself ---
"$GATEWAY" ca rotate start --data-dir "$GW_DIR" >"$T/start.out" || fail "ca rotate start exited $?"
cp "$GW_DIR/ca.next.crt" "$T/new-ca.crt"
new=$(checksum "$T/new-ca.crt")
kill -HUP "$GW_PID"
for n in n1 n2 n3; do
	wait_until 30 "$n keeps the new CA as ca.next.crt" next_is "$n" "$new"
	assert_mode "$T/$n/ca.next.crt" 644
	[ "$(checksum "$T/$n/ca.crt")" = "$old" ] || fail "$n changed ca.crt in the overlap"
	wait_until 20 "the gateway records $n holding both CAs" holds "$n" "$old" "$new"
	[ "$(status_cas "$n")" = "[\"$old\",\"$new\"]" ] ||
		fail "$n status cas in the overlap: $(status_cas "$n")"
	agent_is "$n" active || fail "$n is not active in the overlap"
done
grep -q 'CA rotation: trusting the gateway.s next CA' "$T/client-n1.log" ||
	fail "n1 did not log the next CA"
[ ! -e "$T/n4/ca.next.crt" ] || fail "the stopped agent got ca.next.crt"
ctl ca status >"$T/ca-status.json"
jq -e --arg n "$new" '.phase == "overlap" and .new_ca == $n and .holding_new_ca == 3' \
	"$T/ca-status.json" >/dev/null || fail "ca status in the overlap: $(cat "$T/ca-status.json")"
kubectl_version "$T/kc-old.yaml" ||
	fail "a kubeconfig issued before the rotation fails in the overlap: $(cat "$T/kubectl.out")"
pass "overlap: n1..n3 keep ca.next.crt (0644), stay active, ACK both; ca status 3 hold it; the old kubeconfig works"

# An agent restarted in the overlap dials trusting both and stays.
kill -9 "${pid[n2]}"
wait "${pid[n2]}" 2>/dev/null || true
client_start n2
pid[n2]=$CLIENT_PID
wait_until 30 "n2 back in the overlap" agent_is n2 active
grep -q 'CA rotation under way: trusting ca.crt and ca.next.crt' "$T/client-n2.log" ||
	fail "n2 restarted did not load ca.next.crt"
pass "overlap: an agent killed (-9) and started again loads both CAs and connects"

# --- finish: the three make the new CA theirs ---
"$GATEWAY" ca rotate finish --data-dir "$GW_DIR" >"$T/finish.out" || fail "ca rotate finish exited $?"
kill -HUP "$GW_PID"
for n in n1 n2 n3; do
	wait_until 30 "$n makes the new CA its ca.crt" promoted "$n" "$new"
	assert_mode "$T/$n/ca.crt" 644
	wait_until 20 "the gateway records $n holding the new CA alone" holds "$n" "$new"
	[ "$(status_cas "$n")" = "[\"$new\"]" ] || fail "$n status cas after finish: $(status_cas "$n")"
done
cmp -s "$T/n1/ca.crt" "$T/new-ca.crt" || fail "n1's ca.crt is not the gateway's new CA"
# Killed and started again, they connect trusting the new CA alone.
for n in n1 n2 n3; do
	kill -9 "${pid[$n]}"
	wait "${pid[$n]}" 2>/dev/null || true
	client_start "$n"
	pid[$n]=$CLIENT_PID
done
for n in n1 n2 n3; do
	wait_until 30 "$n active with the new CA alone" agent_is "$n" active
done
! verifies "$T/old-ca.crt" || fail "openssl s_client -CAfile OLD still verifies the gateway"
verifies "$T/new-ca.crt" || fail "openssl s_client -CAfile NEW fails: $(tail -3 "$T/s_client.out")"
! kubectl_version "$T/kc-old.yaml" || fail "the old kubeconfig still works after the finish"
grep -qi 'certificate' "$T/kubectl.out" || fail "the old kubeconfig failed for another reason: $(cat "$T/kubectl.out")"
TETHER_CACERT=$T/new-ca.crt "$CTL" kubeconfig --cluster "$cid" --user alice >"$T/kc-new.yaml" ||
	fail "kubeconfig after the finish exited $?"
kubectl_version "$T/kc-new.yaml" || fail "a new kubeconfig fails: $(cat "$T/kubectl.out")"
pass "finish: n1..n3 hold the new CA alone and reconnect with it; old CA and old kubeconfig refused, new kubeconfig works"

# --- the agent that missed it all ---
export TETHER_CACERT=$T/new-ca.crt
client_start n4
pid[n4]=$CLIENT_PID
wait_until 30 "n4 says why it cannot connect" grep -q "the gateway's CA changed" "$T/client-n4.log"
n4_status_names_cause() {
	"$CLIENT" status --state-dir "$T/n4" >"$T/n4-status.json" &&
	jq -e '.connected == false and (.last_error | startswith("the gateway'"'"'s CA changed")) and
		(.last_error | contains("join --rejoin"))' "$T/n4-status.json" >/dev/null
}
# The agent logs the failure before it writes its status file: polled.
deadline=$((SECONDS + 10))
until n4_status_names_cause; do
	[ "$SECONDS" -lt "$deadline" ] ||
		fail "n4 status does not name the cause and recovery: $(cat "$T/n4-status.json")"
	sleep 0.05
done
wait_until 30 "n4 keeps retrying" bash -c "[ \$(grep -c 'cannot open the tunnel' '$T/client-n4.log') -ge 2 ]"
kill -0 "${pid[n4]}" || fail "n4 gave up"
ctl token create --cluster "$cid" >"$T/join-n4-again.json"
"$CLIENT" join --rejoin --state-dir "$T/n4" <"$T/join-n4-again.json" >"$T/rejoin.out" ||
	fail "join --rejoin exited $?: $(cat "$T/rejoin.out")"
promoted n4 "$new" || fail "join --rejoin did not pin the new CA"
wait_until 30 "n4 back, the same agent" agent_is n4 active
[ "$(agent_id_of n4)" = "$n4_id" ] || fail "n4 came back as another agent"
wait_until 20 "the gateway records n4 holding the new CA" holds n4 "$new"
pass "offline agent: 'the gateway's CA changed' in log and status, retries; join --rejoin brings it back as $n4_id"
