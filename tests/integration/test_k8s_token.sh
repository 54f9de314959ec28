#!/usr/bin/env bash
# join --service-token kube-api=FILE: the agent puts the node's own bearer
# token on each request it passes to its kube-api service, in place of any
# Authorization, so the upstream sees exactly the node's token and never the
# gateway's; the token file is checked before join writes anything, copied
# 0600 and recorded in state.json; bodies and upgrades pass through after
# the rewritten head; the token appears in no log; an agent whose token
# file is gone refuses to start.
source "$(dirname "$0")/lib.sh"
chmod 755 "$T"

KUBECTL=$(command -v kubectl) || fail "kubectl not found (run config/setup.sh)"
py=/usr/bin/python3
web_port=$(free_port)
NODE_TOKEN=node-secret-123

# --- an nginx serving /version, logging the Authorization header ---
mkdir -p "$T/www"
printf '{"major":"1","minor":"28","gitVersion":"v1.28.0-tether-token"}\n' >"$T/www/version"
nginx_start nginx "
    log_format auth '\$request_method \$request_uri \$status auth=\"\$http_authorization\"';
    access_log $T/nginx-access.log auth;
    server { listen 127.0.0.1:$web_port; root $T/www; }"

# --- a python upstream that echoes the request (headers, body length) ---
$py "$TETHER_SRC/tests/integration/k8s_upstream.py" "$T/py.port" &
PIDS+=($!)
wait_until 10 "python upstream" test -s "$T/py.port"
py_port=$(cat "$T/py.port")

gateway_init
gateway_start
cid=$(cluster_create k8s-token)
cid2=$(cluster_create k8s-token-py)
cid3=$(cluster_create k8s-token-gone)
ctl token create --cluster "$cid" >"$T/join.json"
ctl token create --cluster "$cid2" >"$T/join2.json"
ctl token create --cluster "$cid3" >"$T/join3.json"
printf '%s\n' "$NODE_TOKEN" >"$T/node.token"

# --- bad token files: refused before anything is written ---
svc="kube-api=http://127.0.0.1:$web_port"
printf 'one\ntwo\n' >"$T/two-lines.token"
printf 'has space\n' >"$T/space.token"
printf 'tab\there\n' >"$T/tab.token"
: >"$T/empty.token"
head -c 8193 /dev/zero | tr '\0' a >"$T/big.token"
head -c 8192 /dev/zero | tr '\0' a >"$T/max.token"
for bad in missing two-lines space tab empty big; do
	expect_exit 2 join_node nodex "$T/join.json" --service "$svc" \
		--service-token "kube-api=$T/$bad.token"
	[ -e "$T/nodex" ] && fail "a join refused for a $bad token file wrote its state dir"
	grep -q 'has space' "$T/last.err" && fail "the error quotes the token file: $(cat "$T/last.err")"
done
assert_contains "$T/last.err" "longer than 8192 bytes"
expect_exit 2 join_node nodex "$T/join.json" --service "$svc" --service-token "other=$T/node.token"
assert_contains "$T/last.err" "--service-token other: no --service of that name"
expect_exit 2 join_node nodex "$T/join.json" --service "$svc" --service-token "kube-api=$T/node.token" \
	--service-token "kube-api=$T/node.token"
[ -e "$T/nodex" ] && fail "a refused join wrote its state dir"
pass "token files that are missing, two lines, not printable, empty or over 8 KiB, and unknown services: exit 2, nothing written"

# --- join with a token: copied 0600, recorded in state.json ---
join_node node1 "$T/join.json" --service "$svc" --service-token "kube-api=$T/node.token" >/dev/null
cmp -s "$T/node1/service-kube-api.token" "$T/node.token" || fail "the token was not copied"
assert_mode "$T/node1/service-kube-api.token" 600
jq -e '.service_tokens == ["kube-api"]' "$T/node1/state.json" >/dev/null ||
	fail "state.json does not record the token: $(cat "$T/node1/state.json")"
join_node node2 "$T/join2.json" --service "kube-api=http://127.0.0.1:$py_port" \
	--service-token "kube-api=$T/max.token" >/dev/null
assert_mode "$T/node2/service-kube-api.token" 600
pass "join --service-token: DIR/service-kube-api.token 0600, service_tokens in state.json; 8192 bytes accepted"

client_start node1
client_start node2
wait_until 20 "node1 active" agent_is node1 active
wait_until 20 "node2 active" agent_is node2 active
wait_until 10 "nginx listening" bash -c "(exec 3<>/dev/tcp/127.0.0.1/$web_port)"

# --- kubectl: nginx sees the node's token, never the gateway's ---
"$CTL" kubeconfig --cluster "$cid" --user alice >"$T/kc.yaml" || fail "kubeconfig exited $?"
token=$("$KUBECTL" config view --kubeconfig "$T/kc.yaml" --raw -o json | jq -er '.users[0].user.token')
"$KUBECTL" --kubeconfig "$T/kc.yaml" get --raw /version >"$T/via-gw" || fail "kubectl get --raw /version exited $?"
cmp -s "$T/via-gw" "$T/www/version" || fail "kubectl get --raw /version differs from nginx's answer"
curl -sf --cacert "$GW_DIR/ca.crt" -H "Authorization: Bearer $token" \
	"$GW_URL/k8s/clusters/$cid/version?twice=1" "$GW_URL/k8s/clusters/$cid/version?twice=2" \
	-o /dev/null -o /dev/null || fail "two requests on one connection"
wait_until 5 "nginx logged 3 requests" bash -c "[ \$(wc -l <'$T/nginx-access.log') -ge 3 ]"
lines=$(wc -l <"$T/nginx-access.log")
good=$(grep -c "^GET /version[^ ]* 200 auth=\"Bearer $NODE_TOKEN\"\$" "$T/nginx-access.log" || true)
[ "$lines" -ge 3 ] && [ "$good" = "$lines" ] ||
	fail "nginx did not see exactly the node's token on every request: $(cat "$T/nginx-access.log")"
grep -q 'ttu_' "$T/nginx-access.log" && fail "a gateway token reached nginx"
pass "kubectl get --raw /version and keep-alive requests: nginx sees exactly \"Bearer $NODE_TOKEN\" ($lines requests), never ttu_"

# --- bodies and upgrades pass through after the rewritten head ---
admin=$(cat "$GW_DIR/admin.token")
max=$(cat "$T/max.token")
head -c 3000000 /dev/urandom >"$T/big"
curl -sf --cacert "$GW_DIR/ca.crt" -H "Authorization: Bearer $admin" -H 'Content-Type: application/octet-stream' \
	--data-binary @"$T/big" "$GW_URL/k8s/clusters/$cid2/api/v1/things?a=b" >"$T/echo1" || fail "POST with a length"
jq -e --arg want "Bearer $max" '.method == "POST" and .target == "/api/v1/things?a=b" and .body_len == 3000000 and
	([.headers[] | select(.[0] | ascii_downcase == "authorization")] | length == 1) and
	([.headers[] | select(.[0] == "Authorization")][0][1] == $want)' "$T/echo1" >/dev/null ||
	fail "POST through a token service: $(head -c 600 "$T/echo1")"
curl -sf --cacert "$GW_DIR/ca.crt" -H "Authorization: Bearer $admin" -H 'Transfer-Encoding: chunked' \
	--data-binary @"$T/big" "$GW_URL/k8s/clusters/$cid2/apis/x" >"$T/echo2" || fail "POST chunked"
jq -e --arg want "Bearer $max" '.body_len == 3000000 and
	([.headers[] | select(.[0] | ascii_downcase == "authorization") | .[1]] == [$want])' \
	"$T/echo2" >/dev/null || fail "POST chunked through a token service: $(head -c 600 "$T/echo2")"
out=$($py "$TETHER_SRC/tests/integration/k8s_client.py" upgrade \
	"$GW_URL/k8s/clusters/$cid2/api/v1/namespaces/default/pods/p/exec" "$GW_DIR/ca.crt" "$admin") ||
	fail "upgrade client: $out"
[ "$out" = "status=101 echo_ok=True" ] || fail "upgrade through a token service: $out"
pass "3 MB bodies (a length; chunks) arrive whole with one Authorization (an 8 KiB token); an upgrade carries raw bytes both ways"

# --- the token is in no log ---
for f in "$T"/client-*.log "$T/gateway.log"; do
	grep -q "$NODE_TOKEN" "$f" && fail "the node's token appears in $f"
	grep -q "$max" "$f" && fail "the 8 KiB token appears in $f"
done
pass "the node's token appears in no agent or gateway log"

# --- a token file that is gone: the agent refuses to start ---
join_node node3 "$T/join3.json" --service "$svc" --service-token "kube-api=$T/node.token" >/dev/null
rm "$T/node3/service-kube-api.token"
expect_exit 1 timeout 20 "$CLIENT" run --state-dir "$T/node3"
assert_contains "$T/last.err" "service-kube-api.token"
printf 'zq-first\nzq-second\n' >"$T/node3/service-kube-api.token"
expect_exit 1 timeout 20 "$CLIENT" run --state-dir "$T/node3"
assert_contains "$T/last.err" "more than one line"
grep -q "zq-" "$T/last.err" && fail "the agent quotes the token file"
pass "an agent whose token file is missing or malformed exits 1 naming the file"

gateway_stop
pass "the gateway stops cleanly"
