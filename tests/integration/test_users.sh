#!/usr/bin/env bash
# User tokens and kubeconfigs: a user token reaches the clusters it is
# scoped to (connect works) and nothing else (another cluster: 403; the
# admin API: 403); revoking the user ends it (401).  A kubeconfig issued by
# `tetherctl kubeconfig` is checked with the real kubectl: its server, its
# CA data (exactly ca.crt) and its token, which must be live and scoped.
source "$(dirname "$0")/lib.sh"

# kubectl is part of what this test checks: missing is a failure, not a
# skip (config/setup.sh installs it).
KUBECTL=$(command -v kubectl) || fail "kubectl not found (run config/setup.sh)"

py=/usr/bin/python3
$py "$TETHER_SRC/tests/integration/tcpserver.py" echo "$T/echo.port" &
PIDS+=($!)
wait_until 10 "echo server" test -s "$T/echo.port"
echo_port=$(cat "$T/echo.port")

gateway_init
gateway_start
cid_a=$(cluster_create users-a)
cid_b=$(cluster_create users-b)
for c in a b; do
	cid_var=cid_$c
	ctl token create --cluster "${!cid_var}" >"$T/join-$c.json"
	join_node "n$c" "$T/join-$c.json" --allow "127.0.0.1:$echo_port" >/dev/null
	client_start "n$c"
done
wait_until 20 "na active" agent_is na active
wait_until 20 "nb active" agent_is nb active

# --- tetherctl user create / list ---
ctl user create alice --cluster "$cid_a" >"$T/alice.json" || fail "user create exited $?"
jq -e --arg a "$cid_a" '.name == "alice" and .clusters == [$a] and
	(.token | startswith("ttu_")) and (.token_id | length == 16) and
	(.token_id as $i | .token | startswith("ttu_" + $i + "."))' "$T/alice.json" >/dev/null ||
	fail "user create answer: $(jq -c 'del(.token)' "$T/alice.json")"
alice_token=$(jq -r .token "$T/alice.json")
alice_id=$(jq -r .token_id "$T/alice.json")
pass "user create prints the record and a ttu_ token"

ctl user list >"$T/users.json"
jq -e --arg id "$alice_id" --arg a "$cid_a" 'map(select(.token_id == $id)) |
	length == 1 and .[0].name == "alice" and .[0].clusters == [$a] and
	.[0].revoked == false' "$T/users.json" >/dev/null || fail "user list: $(cat "$T/users.json")"
if grep -qF -- "${alice_token#*.}" "$T/users.json" "$T/gateway.log"; then
	fail "the token's secret appears in user list or the gateway log"
fi
pass "user list shows the token without its secret; the log never has it"

expect_exit 2 "$CTL" user create 'bad name!' --cluster "$cid_a"
expect_exit 2 "$CTL" user create bob
expect_exit 1 "$CTL" user create bob --cluster c-000000000000
assert_contains "$T/last.err" 404
code=$(curl -s -o "$T/body" -w '%{http_code}' --cacert "$GW_DIR/ca.crt" \
	-H "Authorization: Bearer $(cat "$GW_DIR/admin.token")" \
	-d '{"name":"bob","clusters":["'"$cid_a"'"],"extra":1}' "$GW_URL/v1/users")
[ "$code" = 400 ] || fail "unknown field: HTTP $code $(cat "$T/body")"
code=$(curl -s -o "$T/body" -w '%{http_code}' --cacert "$GW_DIR/ca.crt" \
	-H "Authorization: Bearer $(cat "$GW_DIR/admin.token")" \
	-d '{"name":"bob","clusters":[]}' "$GW_URL/v1/users")
[ "$code" = 400 ] || fail "empty clusters: HTTP $code $(cat "$T/body")"
pass "bad name and no --cluster: exit 2; unknown cluster: 404; unknown field, empty list: 400"

# --- the user token: its cluster only ---
as_alice() { env -u TETHER_TOKEN_FILE TETHER_TOKEN="$alice_token" "$CTL" "$@"; }

printf 'hello-a' | as_alice connect --cluster "$cid_a" "127.0.0.1:$echo_port" >"$T/a.out" ||
	fail "connect with the user token to its cluster exited $?"
[ "$(cat "$T/a.out")" = hello-a ] || fail "echo through cluster A: got '$(cat "$T/a.out")'"
pass "the user token connects to its cluster (echo round trip)"

expect_exit 1 as_alice connect --cluster "$cid_b" "127.0.0.1:$echo_port" </dev/null
assert_contains "$T/last.err" 403
expect_exit 1 as_alice connect --cluster c-000000000000 "127.0.0.1:$echo_port" </dev/null
assert_contains "$T/last.err" 403
pass "another cluster, known or not: 403"

expect_exit 1 as_alice cluster list
assert_contains "$T/last.err" 403
assert_contains "$T/last.err" "admin token is required"
expect_exit 1 as_alice user list
assert_contains "$T/last.err" 403
pass "the admin API refuses the user token: 403"

wait_until 10 "an audit line naming user:alice" lines_match "$T/gateway.log" \
	"msg=audit event=stream who=user:alice cluster=$cid_a"
pass "the stream's audit line names user:alice"

# A forward opened before the revoke: its WebSocket outlives the request.
fwd_port=$(free_port)
# Not through as_alice: $! must be tetherctl itself (env execs it).
env -u TETHER_TOKEN_FILE TETHER_TOKEN="$alice_token" "$CTL" forward --cluster "$cid_a" \
	"127.0.0.1:$fwd_port:127.0.0.1:$echo_port" 2>>"$T/forward.log" &
fwd_pid=$!
PIDS+=($fwd_pid)
port_open() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }
wait_until 20 "forward listening" port_open "$fwd_port"
echo_via_forward() {
	$py - "$fwd_port" <<'PY'
import socket, sys
s = socket.create_connection(("127.0.0.1", int(sys.argv[1])), timeout=10)
s.sendall(b"via-forward")
s.shutdown(socket.SHUT_WR)
data = b""
while True:
    chunk = s.recv(4096)
    if not chunk:
        break
    data += chunk
sys.stdout.write(data.decode())
PY
}
[ "$(echo_via_forward)" = via-forward ] || fail "echo through forward with the user token"
pass "forward with the user token: echo round trip"

# --- revoke ---
ctl user revoke alice >"$T/revoke.json" || fail "user revoke exited $?"
jq -e '.name == "alice" and .revoked_tokens == 1' "$T/revoke.json" >/dev/null ||
	fail "user revoke: $(cat "$T/revoke.json")"
expect_exit 1 as_alice connect --cluster "$cid_a" "127.0.0.1:$echo_port" </dev/null
assert_contains "$T/last.err" 401
ctl user list | jq -e --arg id "$alice_id" '.[] | select(.token_id == $id) | .revoked' \
	>/dev/null || fail "user list does not show the token revoked"
ctl user revoke alice | jq -e '.revoked_tokens == 0' >/dev/null ||
	fail "revoking again should revoke 0 tokens"
expect_exit 1 "$CTL" user revoke nobody
assert_contains "$T/last.err" 404
out=$(echo_via_forward 2>/dev/null) || true
[ -z "$out" ] || fail "a stream through the old forward after revoke: got '$out'"
wait_until 10 "forward to report the refusal" grep -q "unauthorized" "$T/forward.log"
assert_contains "$T/forward.log" "revoked"
kill -TERM "$fwd_pid"
wait "$fwd_pid" || fail "forward did not exit 0 on SIGTERM"
pass "revoke: 1 token; then connect gets 401, a forward opened before opens no more streams; again: 0; unknown user: 404"

# --- kubeconfig ---
"$CTL" -o json kubeconfig --cluster "$cid_a" --user alice >"$T/kc.yaml" ||
	fail "kubeconfig exited $?"
head -1 "$T/kc.yaml" | grep -q '^apiVersion: v1$' || fail "kubeconfig is not YAML: $(head -3 "$T/kc.yaml")"
"$KUBECTL" config view --kubeconfig "$T/kc.yaml" --raw -o json >"$T/kc.json" ||
	fail "kubectl cannot read the kubeconfig"
server=$(jq -er --arg c "$cid_a" '.clusters[] | select(.name == $c) | .cluster.server' "$T/kc.json")
[ "$server" = "$GW_URL/k8s/clusters/$cid_a" ] || fail "server is $server"
jq -er --arg c "$cid_a" '.clusters[] | select(.name == $c) | .cluster["certificate-authority-data"]' \
	"$T/kc.json" | base64 -d >"$T/kc-ca.crt" || fail "certificate-authority-data is not base64"
cmp -s "$T/kc-ca.crt" "$GW_DIR/ca.crt" || fail "certificate-authority-data is not ca.crt"
current=$(jq -er '."current-context"' "$T/kc.json")
jq -e --arg cur "$current" --arg c "$cid_a" '.contexts[] | select(.name == $cur) |
	.context.cluster == $c and .context.user == "alice"' "$T/kc.json" >/dev/null ||
	fail "current context $current does not join cluster $cid_a and user alice"
kc_token=$(jq -er '.users[] | select(.name == "alice") | .user.token' "$T/kc.json")
case $kc_token in ttu_*) ;; *) fail "the kubeconfig's token is not a user token" ;; esac
pass "kubectl reads it: server $server, CA data = ca.crt, context $current, a ttu_ token"

printf 'hello-kc' | env -u TETHER_TOKEN_FILE TETHER_TOKEN="$kc_token" "$CTL" connect \
	--cluster "$cid_a" "127.0.0.1:$echo_port" >"$T/kc.out" || fail "connect with the kubeconfig's token exited $?"
[ "$(cat "$T/kc.out")" = hello-kc ] || fail "echo with the kubeconfig's token: got '$(cat "$T/kc.out")'"
expect_exit 1 env -u TETHER_TOKEN_FILE TETHER_TOKEN="$kc_token" "$CTL" connect \
	--cluster "$cid_b" "127.0.0.1:$echo_port" </dev/null
assert_contains "$T/last.err" 403
kc_id=$(printf '%s' "$kc_token" | cut -c5-20)
grep -q "msg=\"kubeconfig issued\" cluster=$cid_a user=alice token=$kc_id" "$T/gateway.log" ||
	fail "no log line for the issued kubeconfig"
grep -qF -- "${kc_token#*.}" "$T/gateway.log" && fail "the kubeconfig's secret is in the gateway log"
pass "the kubeconfig's token is live and scoped to $cid_a only; the log names it without its secret"

"$CTL" kubeconfig --cluster "$cid_b" >"$T/kc2.yaml" || fail "kubeconfig without --user exited $?"
"$KUBECTL" config view --kubeconfig "$T/kc2.yaml" --raw -o json |
	jq -e '.users[0].name == "kubectl"' >/dev/null || fail "default user is not kubectl"
expect_exit 1 "$CTL" kubeconfig --cluster c-000000000000
assert_contains "$T/last.err" 404
expect_exit 2 "$CTL" kubeconfig --cluster "$cid_a" --user 'bad name'
expect_exit 2 "$CTL" kubeconfig
code=$(curl -s -o "$T/body" -w '%{http_code}' --cacert "$GW_DIR/ca.crt" \
	-H "Authorization: Bearer $kc_token" "$GW_URL/k8s/clusters/$cid_a/api")
# Served now (test_k8s.sh): node na has no kube-api service, so the agent
# refuses the stream and the answer is a 502 Kubernetes Status.
[ "$code" = 502 ] || fail "/k8s/clusters/$cid_a/api without a kube-api service: expected 502, got $code"
jq -e '.kind == "Status" and .reason == "BadGateway" and (.message | test("unknown_service"))' \
	"$T/body" >/dev/null || fail "502 body: $(cat "$T/body")"
pass "default user kubectl; unknown cluster 404; bad usage exit 2; /k8s/clusters without a kube-api service: 502 Status"

# Revoking the user ends the kubeconfig's token too.
ctl user revoke alice | jq -e '.revoked_tokens == 1' >/dev/null || fail "revoke after kubeconfig"
expect_exit 1 env -u TETHER_TOKEN_FILE TETHER_TOKEN="$kc_token" "$CTL" connect \
	--cluster "$cid_a" "127.0.0.1:$echo_port" </dev/null
assert_contains "$T/last.err" 401
pass "user revoke ends the kubeconfig's token (401)"

gateway_stop
