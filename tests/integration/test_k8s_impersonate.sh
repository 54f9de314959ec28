#!/usr/bin/env bash
# `serve --impersonate`: requests through /k8s/clusters carry
# Impersonate-User with the gateway user's name (never the client's own
# Impersonate-* headers); admin tokens add none.
source "$(dirname "$0")/lib.sh"
KUBECTL=$(command -v kubectl) || fail "kubectl is not installed (config/setup.sh installs it)"

web_port=$(free_port)
mkdir -p "$T/www"
printf '{"major":"1","minor":"28","gitVersion":"v1.28.0-tether-test"}\n' >"$T/www/version"
nginx_start nginx "
    log_format imp '\$request_method \$request_uri \$status imp=\"\$http_impersonate_user\" grp=\"\$http_impersonate_group\"';
    access_log $T/nginx-access.log imp;
    server { listen 127.0.0.1:$web_port; root $T/www; }"

gateway_init
gateway_start --impersonate
cid=$(cluster_create imp)
ctl token create --cluster "$cid" >"$T/join.json"
join_node node1 "$T/join.json" --service "kube-api=http://127.0.0.1:$web_port" >/dev/null
client_start node1
wait_until 20 "node1 active" agent_is node1 active
wait_until 10 "nginx listening" bash -c "(exec 3<>/dev/tcp/127.0.0.1/$web_port)"

"$CTL" kubeconfig --cluster "$cid" --user carol >"$T/kc.yaml" || fail "kubeconfig exited $?"
"$KUBECTL" --kubeconfig "$T/kc.yaml" get --raw /version >"$T/out" || fail "kubectl exited $?"
cmp -s "$T/out" "$T/www/version" || fail "kubectl got: $(cat "$T/out")"
grep -q 'GET /version 200 imp="carol"' "$T/nginx-access.log" ||
	fail "nginx did not see Impersonate-User: carol: $(cat "$T/nginx-access.log")"
pass "with --impersonate the node sees Impersonate-User: <gateway user>"

token=$("$KUBECTL" config view --kubeconfig "$T/kc.yaml" --raw -o json | jq -er '.users[0].user.token')
curl -sf --cacert "$GW_DIR/ca.crt" -H "Authorization: Bearer $token" \
	-H "Impersonate-User: system:admin" -H "Impersonate-Group: system:masters" \
	"$GW_URL/k8s/clusters/$cid/version?try=1" >/dev/null || fail "curl through the gateway failed"
grep -q 'GET /version?try=1 200 imp="carol" grp="-"' "$T/nginx-access.log" ||
	fail "a client's Impersonate-* got through: $(grep try=1 "$T/nginx-access.log")"
pass "a client's own Impersonate-User and Impersonate-Group are replaced and dropped"

curl -sf --cacert "$GW_DIR/ca.crt" -H "Authorization: Bearer $(cat "$GW_DIR/admin.token")" \
	"$GW_URL/k8s/clusters/$cid/version?admin=1" >/dev/null || fail "admin request failed"
grep -q 'GET /version?admin=1 200 imp="-"' "$T/nginx-access.log" ||
	fail "an admin request carried Impersonate-User: $(grep admin=1 "$T/nginx-access.log")"
pass "admin tokens add no Impersonate-User"

gateway_stop
