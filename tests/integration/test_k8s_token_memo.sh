#!/usr/bin/env bash
# A kept-alive /k8s connection takes its last request's grant again for the
# same token bytes (access_memo, docs/performance.md): never for other bytes
# and never past a revocation.  On ONE TLS connection (two loops, the
# connection where its handshake ran, --landing any): alice's token twice,
# bob's (checked afresh: the audit line says user:bob), alice's id with a
# wrong secret (401), alice's again (200), then alice's token revoked
# (`tetherctl user revoke-token`) between two requests: her next request on
# the same connection is refused (401) while bob's still passes.
source "$(dirname "$0")/lib.sh"
py=/usr/bin/python3
web_port=$(free_port)

mkdir -p "$T/www"
printf '{"major":"1","minor":"28","gitVersion":"v1.28.0-tether-memo"}\n' >"$T/www/version"
nginx_start nginx "server { listen 127.0.0.1:$web_port; root $T/www; }"

gateway_init
gateway_start --workers 2 --landing any
cid=$(cluster_create k8s-memo)
ctl token create --cluster "$cid" >"$T/join.json"
join_node node1 "$T/join.json" --service "kube-api=http://127.0.0.1:$web_port" >/dev/null
client_start node1
wait_until 20 "node1 active" agent_is node1 active
wait_until 10 "nginx listening" bash -c "(exec 3<>/dev/tcp/127.0.0.1/$web_port)"
alice=$(ctl user create alice --cluster "$cid" | jq -er .token) || fail "user create alice"
bob=$(ctl user create bob --cluster "$cid" | jq -er .token) || fail "user create bob"
alice_id=${alice#ttu_}
alice_id=${alice_id%%.*}
# The same id, the secret's last character changed.
last=${alice: -1}
[ "$last" = A ] && other=B || other=A
forged=${alice%?}$other

audits() { grep -c "msg=audit event=k8s who=$1 cluster=$cid node=node1 method=GET path=/version status=$2" \
	"$T/gateway.log" || true; }

$py "$TETHER_SRC/tests/integration/keepalive_tokens.py" "$GW_URL/k8s/clusters/$cid/version" \
	"$GW_DIR/ca.crt" "get:$alice" "get:$alice" "get:$bob" "get:$alice" "get:$forged" \
	"get:$alice" "run:$CTL user revoke-token $alice_id" "get:$alice" "get:$bob" \
	>"$T/statuses" 2>"$T/client.err" || fail "the client: $(cat "$T/client.err") after $(tr '\n' ' ' <"$T/statuses")"
got=$(tr '\n' ' ' <"$T/statuses")
[ "$got" = "status=200 status=200 status=200 status=200 status=401 status=200 status=401 status=200 " ] ||
	fail "statuses on one connection: $got"
wait_until 5 "the audit lines" bash -c "[ \$(grep -c 'msg=audit event=k8s' '$T/gateway.log') -ge 8 ]"
[ "$(audits user:alice 200)" = 4 ] || fail "alice's 200s audited $(audits user:alice 200) times"
[ "$(audits user:bob 200)" = 2 ] || fail "bob's 200s audited $(audits user:bob 200) times"
pass "one connection: the same token again 200; another token checked afresh (audited as user:bob); a wrong secret for the same id 401"
pass "a token revoked between two requests of one kept-alive connection: the next is refused 401, the other user's passes"
