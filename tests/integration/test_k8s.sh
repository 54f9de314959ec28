#!/usr/bin/env bash
# /k8s/clusters/ID/... through the tunnel: the real kubectl with the
# kubeconfig `tetherctl kubeconfig` issues reaches an nginx standing in for
# a kube-apiserver on the node (its "kube-api" service), byte for byte, and
# the gateway's token never reaches it; wrong, foreign and revoked tokens
# are refused with Kubernetes Status objects; an answer that streams is
# relayed as it comes; a 101 turns the exchange into raw bytes both ways;
# a cluster without an agent answers 503.  With two loops whose operator
# connections stay on the loop that ran their handshake (--landing any,
# docs/0040): requests reach the tunnel from both loops, some over the
# link between them.
source "$(dirname "$0")/lib.sh"
chmod 755 "$T"

KUBECTL=$(command -v kubectl) || fail "kubectl not found (run config/setup.sh)"
py=/usr/bin/python3
web_port=$(free_port)
tls_port=$(free_port)

# --- an nginx serving static JSON, logging the Authorization header ---
mkdir -p "$T/www/api/v1/namespaces/default"
printf '{"major":"1","minor":"28","gitVersion":"v1.28.0-tether-test"}\n' >"$T/www/version"
$py -c 'import json; print(json.dumps({"kind":"PodList","apiVersion":"v1","metadata":{},
  "items":[{"metadata":{"name":"pod-%d" % i,"namespace":"default"}} for i in range(200)]}))' \
	>"$T/www/api/v1/namespaces/default/pods"
nginx_start nginx "
    log_format auth '\$request_method \$request_uri \$status auth=\"\$http_authorization\" imp=\"\$http_impersonate_user\"';
    access_log $T/nginx-access.log auth;
    log_format conn '\$connection \$request_uri';
    access_log $T/nginx-conn.log conn;
    server { listen 127.0.0.1:$web_port; root $T/www; }"

# --- a python upstream: streaming answers, upgrades, request echo ---
$py "$TETHER_SRC/tests/integration/k8s_upstream.py" "$T/py.port" &
PIDS+=($!)
wait_until 10 "python upstream" test -s "$T/py.port"
py_port=$(cat "$T/py.port")

gateway_init
gateway_start --workers 2 --landing any
cid=$(cluster_create k8s)
cid2=$(cluster_create k8s-py)
cid3=$(cluster_create k8s-empty)
ctl token create --cluster "$cid" >"$T/join.json"
join_node node1 "$T/join.json" --service "kube-api=http://127.0.0.1:$web_port" >/dev/null
ctl token create --cluster "$cid2" >"$T/join2.json"
join_node node2 "$T/join2.json" --service "kube-api=http://127.0.0.1:$py_port" >/dev/null
client_start node1
node1_pid=$CLIENT_PID
client_start node2
wait_until 20 "node1 active" agent_is node1 active
wait_until 20 "node2 active" agent_is node2 active
wait_until 10 "nginx listening" bash -c "(exec 3<>/dev/tcp/127.0.0.1/$web_port)"

# --- kubectl with the issued kubeconfig ---
"$CTL" kubeconfig --cluster "$cid" --user alice >"$T/kc.yaml" || fail "kubeconfig exited $?"
token=$("$KUBECTL" config view --kubeconfig "$T/kc.yaml" --raw -o json | jq -er '.users[0].user.token')
for path in /version /api/v1/namespaces/default/pods; do
	"$KUBECTL" --kubeconfig "$T/kc.yaml" get --raw "$path" >"$T/via-gw" ||
		fail "kubectl get --raw $path exited $?"
	curl -sf "http://127.0.0.1:$web_port$path" >"$T/direct" || fail "curl direct $path"
	cmp -s "$T/via-gw" "$T/direct" || fail "kubectl get --raw $path differs from nginx's answer"
done
"$KUBECTL" --kubeconfig "$T/kc.yaml" version -o json >"$T/kv.json" 2>/dev/null || true
jq -e '.serverVersion.gitVersion == "v1.28.0-tether-test"' "$T/kv.json" >/dev/null ||
	fail "kubectl version does not see the server version: $(cat "$T/kv.json")"
grep -q 'GET /version 200 auth="-"' "$T/nginx-access.log" ||
	fail "nginx did not see /version without Authorization: $(cat "$T/nginx-access.log")"
grep -q 'ttu_' "$T/nginx-access.log" && fail "a gateway token reached nginx"
grep -qi 'bearer' "$T/nginx-access.log" && fail "an Authorization header reached nginx"
wait_until 10 "the audit line for GET /version" lines_match "$T/gateway.log" \
	"msg=audit event=k8s who=user:alice cluster=$cid node=node1 method=GET path=/version status=200"
pass "kubectl get --raw /version and pods through the gateway = nginx byte for byte; no token reaches nginx; audit line"

# --- an audit line per request, every one, in order, after a burst ---
# Four keep-alive connections of 50 requests each at once: the gateway
# holds a loop pass's audit lines and writes them together (docs/0007,
# "Audit"); none may be lost, cut or reordered within a connection.
burst() { # burst CONN [CLUSTER [TOKEN]]: 50 requests on one connection, paths /burst/CONN/1..50
	local args=() i
	for i in $(seq 1 50); do
		args+=(-o /dev/null "$GW_URL/k8s/clusters/${2:-$cid}/burst/$1/$i")
	done
	curl -s --cacert "$GW_DIR/ca.crt" -H "Authorization: Bearer ${3:-$token}" \
		-w '%{http_code} %{num_connects}\n' "${args[@]}" >"$T/burst.$1" 2>&1 || true
}
burst_pids=()
for c in 1 2 3 4; do
	burst "$c" &
	burst_pids+=($!)
done
wait "${burst_pids[@]}"
audit_burst_lines() { grep -c 'msg=audit event=k8s .*path=/burst/' "$T/gateway.log" || true; }
all_burst_audited() { [ "$(audit_burst_lines)" -ge 200 ]; }
for c in 1 2 3 4; do
	[ "$(grep -c '^404 ' "$T/burst.$c")" = 50 ] || fail "burst $c: not 50 answers 404: $(sort "$T/burst.$c" | uniq -c)"
	[ "$(awk '$2 == 1' "$T/burst.$c" | wc -l)" = 1 ] || fail "burst $c did not reuse one connection: $(sort "$T/burst.$c" | uniq -c)"
done
wait_until 10 "200 audit lines of the burst" all_burst_audited
[ "$(audit_burst_lines)" = 200 ] || fail "$(audit_burst_lines) audit lines for 200 requests"
for c in 1 2 3 4; do
	grep 'msg=audit event=k8s .*path=/burst/' "$T/gateway.log" |
		sed -n "s|^time=[^ ]* level=info component=gateway msg=audit event=k8s who=user:alice cluster=$cid node=node1 method=GET path=/burst/$c/\([0-9]*\) status=404 bytes_up=[0-9]* bytes_down=[0-9]* duration_ms=[0-9]* replica=[^ ]* client=127\.0\.0\.1:[0-9]*\$|\1|p" \
		>"$T/burst-audit.$c"
	seq 1 50 | cmp -s - "$T/burst-audit.$c" ||
		fail "connection $c: audit lines not whole, or not 1..50 in order: $(tr '\n' ' ' <"$T/burst-audit.$c")"
done
pass "a burst of 200 requests on 4 connections: 200 whole audit lines, each connection's in order"

# --- pipelined requests while an exchange holds the connection ---
# 30 GETs of ~2 KiB each in one write: while one is answered the next
# ones wait in the connection's input, read up to 4 KiB and then not at
# all (server.c hconn_read_cb) until the exchange is done; every one is
# answered, in order, on the one connection.
pad=$(head -c 2000 /dev/zero | tr '\0' p)
{
	for i in $(seq 1 29); do
		printf 'GET /k8s/clusters/%s/pipe/%d HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer %s\r\nX-Pad: %s\r\n\r\n' \
			"$cid" "$i" "$token" "$pad"
	done
	printf 'GET /k8s/clusters/%s/version HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer %s\r\nConnection: close\r\n\r\n' \
		"$cid" "$token"
} >"$T/k8s-pipe.in"
$py - "$GW_PORT" "$GW_DIR/ca.crt" "$T/k8s-pipe.in" >"$T/k8s-pipe.out" <<'EOF'
import socket, ssl, sys
port, ca, path = int(sys.argv[1]), sys.argv[2], sys.argv[3]
ctx = ssl.create_default_context(cafile=ca)
s = ctx.wrap_socket(socket.create_connection(("127.0.0.1", port), timeout=10),
                    server_hostname="127.0.0.1")
s.sendall(open(path, "rb").read())
out = b""
while True:
    try:
        d = s.recv(65536)
    except (ssl.SSLError, ConnectionResetError, socket.timeout) as e:
        out += ("\n[%s]" % e).encode()
        break
    if not d:
        break
    out += d
sys.stdout.write(out.decode("latin-1"))
EOF
n404=$(grep -c '^HTTP/1.1 404' "$T/k8s-pipe.out" || true)
[ "$n404" = 29 ] && tail -n 1 "$T/k8s-pipe.out" | grep -q 'v1.28.0-tether-test' ||
	fail "30 pipelined /k8s requests: $n404 of 29 404s, then $(tail -n 2 "$T/k8s-pipe.out")"
[ "$(grep -c '^HTTP/1.1 ' "$T/k8s-pipe.out")" = 30 ] || fail "30 pipelined /k8s requests: not 30 answers"
pass "30 pipelined /k8s requests ($(($(wc -c <"$T/k8s-pipe.in") >> 10)) KiB) on one connection: all answered, in order"

# k8s_counted: /metrics counts the /k8s answers as the audit lines do, code
# by code (tether_k8s_requests_total) and in all (the duration histogram's
# _count): each answer writes one audit line and counts once, in the
# counts of the loop that served it, which a scrape folds in
# (metrics_k8s_request).
k8s_counted() {
	local audited
	grep 'msg=audit event=k8s ' "$T/gateway.log" |
		sed -n 's/.* status=\([0-9]*\) .*/\1/p' | sort | uniq -c |
		awk '{ print $2, $1 }' >"$T/k8s-audited"
	audited=$(grep -c 'msg=audit event=k8s ' "$T/gateway.log")
	curl -sf --cacert "$GW_DIR/ca.crt" -H "Authorization: Bearer $(cat "$GW_DIR/admin.token")" \
		"$GW_URL/metrics" >"$T/k8s.metrics" || return 1
	sed -n 's/^tether_k8s_requests_total{code="\([0-9]*\)"} \([0-9]*\)$/\1 \2/p' "$T/k8s.metrics" |
		awk '$2 > 0' | sort >"$T/k8s-counted"
	cmp -s "$T/k8s-audited" "$T/k8s-counted" &&
		grep -qx "tether_k8s_request_duration_seconds_count $audited" "$T/k8s.metrics"
}

wait_until 10 "/metrics counting the answers as the audit lines do" k8s_counted
pass "/metrics counts the answers code by code as the audit lines do ($(tr '\n' ' ' <"$T/k8s-counted"))"

# --- keep-alive: two requests on one connection, query passed on ---
curl -sf --cacert "$GW_DIR/ca.crt" -H "Authorization: Bearer $token" \
	"$GW_URL/k8s/clusters/$cid/version" "$GW_URL/k8s/clusters/$cid/version?x=1" \
	-o "$T/ka1" -o "$T/ka2" -w '%{num_connects}\n' >"$T/ka.out" 2>"$T/ka.err" || fail "two requests on one connection"
connects=$(($(paste -sd+ "$T/ka.out")))   # curl prints one count per request
[ "$connects" = 1 ] || fail "two requests used $connects connections"
cmp -s "$T/ka1" "$T/www/version" && cmp -s "$T/ka2" "$T/www/version" || fail "keep-alive answers differ"
grep -q 'GET /version?x=1 200' "$T/nginx-access.log" || fail "the query did not reach nginx"
pass "keep-alive carries the next request; the query is passed on"

# --- the upstream connection is reused across one client connection ---
curl -sf --cacert "$GW_DIR/ca.crt" -H "Authorization: Bearer $token" \
	"$GW_URL/k8s/clusters/$cid/version?reuse=1" "$GW_URL/k8s/clusters/$cid/version?reuse=2" \
	-o /dev/null -o /dev/null || fail "two requests for reuse"
wait_until 5 "nginx logged both" grep -q 'reuse=2' "$T/nginx-conn.log"
c1=$(awk '$2 ~ /reuse=1$/ { print $1 }' "$T/nginx-conn.log")
c2=$(awk '$2 ~ /reuse=2$/ { print $1 }' "$T/nginx-conn.log")
[ -n "$c1" ] && [ "$c1" = "$c2" ] ||
	fail "two requests on one client connection used upstream connections '$c1' and '$c2'"
pass "two requests on one client connection share one stream and upstream connection ($c1)"

# --- a client cannot choose who the node's API server thinks it is ---
curl -sf --cacert "$GW_DIR/ca.crt" -H "Authorization: Bearer $token" \
	-H "Impersonate-User: system:admin" "$GW_URL/k8s/clusters/$cid/version?imp=1" >/dev/null ||
	fail "request with Impersonate-User failed"
grep -q 'GET /version?imp=1 200 auth="-" imp="-"' "$T/nginx-access.log" ||
	fail "a client's Impersonate-User reached nginx: $(grep imp=1 "$T/nginx-access.log")"
pass "a client's Impersonate-* headers never reach the node; none is added by default"

# --- refusals: Kubernetes Status objects ---
cp "$T/kc.yaml" "$T/kc-bad.yaml"
"$KUBECTL" --kubeconfig "$T/kc-bad.yaml" config set-credentials alice \
	--token="${token%%.*}.AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA" >/dev/null
expect_exit 1 "$KUBECTL" --kubeconfig "$T/kc-bad.yaml" get --raw /version
code=$(curl -s -o "$T/body" -w '%{http_code}' --cacert "$GW_DIR/ca.crt" \
	-H "Authorization: Bearer ttu_AAAAAAAAAAAAAAAA.bad" "$GW_URL/k8s/clusters/$cid/version")
[ "$code" = 401 ] || fail "a wrong token got $code"
jq -e '.kind == "Status" and .apiVersion == "v1" and .status == "Failure" and
	.reason == "Unauthorized" and .code == 401' "$T/body" >/dev/null || fail "401 body: $(cat "$T/body")"
code=$(curl -s -o "$T/body" -w '%{http_code}' --cacert "$GW_DIR/ca.crt" \
	-H "Authorization: Bearer $token" "$GW_URL/k8s/clusters/$cid2/version")
[ "$code" = 403 ] || fail "a token of another cluster got $code"
jq -e '.reason == "Forbidden" and .code == 403' "$T/body" >/dev/null || fail "403 body: $(cat "$T/body")"
code=$(curl -s -o "$T/body" -w '%{http_code}' --cacert "$GW_DIR/ca.crt" "$GW_URL/k8s/clusters/$cid/version")
[ "$code" = 401 ] || fail "no token got $code"
grep -q 'ttu_' "$T/nginx-access.log" && fail "a gateway token reached nginx"
pass "wrong token: kubectl fails, 401 Status; another cluster's token: 403 Status; none: 401"

# --- a streaming answer is relayed as it comes ---
admin=$(cat "$GW_DIR/admin.token")
out=$($py "$TETHER_SRC/tests/integration/k8s_client.py" stream \
	"$GW_URL/k8s/clusters/$cid2/stream" "$GW_DIR/ca.crt" "$admin") || fail "stream client: $out"
log "stream: $out"
first=$(sed -n 's/.*first=\([0-9.-]*\).*/\1/p' <<<"$out")
total=$(sed -n 's/.*total=\([0-9.]*\).*/\1/p' <<<"$out")
lines=$(sed -n 's/.*lines=\([0-9]*\).*/\1/p' <<<"$out")
[ "$lines" = 20 ] || fail "stream: $lines lines, want 20"
awk -v f="$first" -v t="$total" 'BEGIN { exit !(f >= 0 && f < 1.0 && t >= 1.8) }' ||
	fail "stream not relayed as it came: first line after ${first}s, whole after ${total}s"
pass "a chunked answer streams: first line after ${first}s, all 20 after ${total}s"

# --- an answer head is written again as http-parser reads it ---
# The reason as sent, "NAME: VALUE" with the value from its first byte that
# is not a blank to the line's end, no hop-by-hop header (the client's
# connection is the gateway's to keep or close).
curl -sf --cacert "$GW_DIR/ca.crt" -H "Authorization: Bearer $admin" -D "$T/odd.head" \
	-o "$T/odd.body" "$GW_URL/k8s/clusters/$cid2/odd-head" || fail "GET /odd-head"
printf 'HTTP/1.1 200  Fine  Thanks\r\nX-Tight: value\r\nX-Tabbed: v1\t \r\nX-Empty: \r\nX-Blank: \r\nX-Last: z\r\nContent-Length: 2\r\n\r\n' >"$T/odd.want"
cmp -s "$T/odd.head" "$T/odd.want" || fail "the odd answer head came as: $(od -c "$T/odd.head" | head -20)"
[ "$(cat "$T/odd.body")" = ok ] || fail "the odd answer's body: $(cat "$T/odd.body")"
pass "an oddly written answer head reaches the client as http-parser reads it, without its hop-by-hop headers"

# The same, for heads that arrive a few bytes at a time, a 1xx first: each
# reason phrase as sent, however its bytes were split.
curl -sf --cacert "$GW_DIR/ca.crt" -H "Authorization: Bearer $admin" -D "$T/drip.head" \
	-o "$T/drip.body" "$GW_URL/k8s/clusters/$cid2/odd-drip" || fail "GET /odd-drip"
printf 'HTTP/1.1 103  Early  Hints\r\nLink: </a>; rel=preload\r\n\r\nHTTP/1.1 200  Fine  Thanks\r\nX-Tight: value\r\nContent-Length: 2\r\n\r\n' >"$T/drip.want"
cmp -s "$T/drip.head" "$T/drip.want" || fail "the dripped answer heads came as: $(od -c "$T/drip.head" | head -20)"
[ "$(cat "$T/drip.body")" = ok ] || fail "the dripped answer's body: $(cat "$T/drip.body")"
pass "answer heads that arrive three bytes at a time, a 103 first, reach the client with their reasons as sent"

# A GET sent over the stream the connection's last request left parked,
# whose upstream closes without answering (it timed the idle connection
# out meanwhile), is sent again, once, on a new stream: the same bytes.
curl -sf --cacert "$GW_DIR/ca.crt" -H "Authorization: Bearer $admin" \
	-o "$T/drop1.body" "$GW_URL/k8s/clusters/$cid2/once-then-drop?first" \
	-o "$T/drop2.body" "$GW_URL/k8s/clusters/$cid2/once-then-drop?second" ||
	fail "GET /once-then-drop twice on one connection"
[ "$(cat "$T/drop1.body")" = "/once-then-drop?first" ] ||
	fail "the first answer: $(cat "$T/drop1.body")"
[ "$(cat "$T/drop2.body")" = "/once-then-drop?second" ] ||
	fail "the retried request's answer: $(cat "$T/drop2.body")"
pass "a GET on a parked stream whose upstream closed under it is sent again on a new stream, the same request"

# --- request bodies: Content-Length and chunked, passed on ---
head -c 3000000 /dev/urandom >"$T/big"
curl -sf --cacert "$GW_DIR/ca.crt" -H "Authorization: Bearer $admin" -H 'Content-Type: application/octet-stream' \
	--data-binary @"$T/big" "$GW_URL/k8s/clusters/$cid2/api/v1/things?a=b" >"$T/echo1" || fail "POST with a length"
jq -e '.method == "POST" and .target == "/api/v1/things?a=b" and .body_len == 3000000 and
	([.headers[] | select(.[0] | ascii_downcase == "authorization")] | length == 0) and
	([.headers[] | select(.[0] | ascii_downcase == "connection")] | length == 0)' "$T/echo1" >/dev/null ||
	fail "POST with a length: $(head -c 600 "$T/echo1")"
curl -sf --cacert "$GW_DIR/ca.crt" -H "Authorization: Bearer $admin" -H 'Transfer-Encoding: chunked' \
	--data-binary @"$T/big" "$GW_URL/k8s/clusters/$cid2/apis/x" >"$T/echo2" || fail "POST chunked"
jq -e '.body_len == 3000000 and ([.headers[] | select(.[0] == "Transfer-Encoding")][0][1] == "chunked")' \
	"$T/echo2" >/dev/null || fail "POST chunked: $(head -c 600 "$T/echo2")"
pass "request bodies of 3 MB (a length; chunks) reach the upstream whole, without Authorization"

# --- an upgrade: 101, then raw bytes both ways ---
out=$($py "$TETHER_SRC/tests/integration/k8s_client.py" upgrade \
	"$GW_URL/k8s/clusters/$cid2/api/v1/namespaces/default/pods/p/exec" "$GW_DIR/ca.crt" "$admin") ||
	fail "upgrade client: $out"
[ "$out" = "status=101 echo_ok=True" ] || fail "upgrade: $out"
pass "an upgrade answered 101 carries raw bytes both ways"

# --- an https upstream, verified against the CA given at join ---
openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 1 \
	-keyout "$T/upca.key" -out "$T/upca.crt" -subj /CN=tether-test-upstream-ca 2>/dev/null
openssl req -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes \
	-keyout "$T/up.key" -out "$T/up.csr" -subj /CN=127.0.0.1 2>/dev/null
printf 'subjectAltName=IP:127.0.0.1\n' >"$T/up.ext"
openssl x509 -req -in "$T/up.csr" -CA "$T/upca.crt" -CAkey "$T/upca.key" -CAcreateserial \
	-days 1 -extfile "$T/up.ext" -out "$T/up.crt" 2>/dev/null
nginx_start nginx-tls "
    log_format auth '\$request_method \$request_uri \$status auth=\"\$http_authorization\"';
    access_log $T/nginx-access.log auth;
    server { listen 127.0.0.1:$tls_port ssl; ssl_certificate $T/up.crt;
             ssl_certificate_key $T/up.key; root $T/www; }"
cid4=$(cluster_create k8s-tls)
cid5=$(cluster_create k8s-tls-untrusted)
ctl token create --cluster "$cid4" >"$T/join4.json"
ctl token create --cluster "$cid5" >"$T/join5.json"
expect_exit 2 join_node node9 "$T/join4.json" --service "kube-api=http://127.0.0.1:$web_port" \
	--service-ca "kube-api=$T/upca.crt"
[ -e "$T/node9" ] && fail "a refused join wrote its state dir"
join_node node4 "$T/join4.json" --service "kube-api=https://127.0.0.1:$tls_port" \
	--service-ca "kube-api=$T/upca.crt" >/dev/null
cmp -s "$T/node4/service-kube-api-ca.crt" "$T/upca.crt" || fail "the service CA was not copied"
assert_mode "$T/node4/service-kube-api-ca.crt" 644
join_node node5 "$T/join5.json" --service "kube-api=https://127.0.0.1:$tls_port" >/dev/null
client_start node4
node4_pid=$CLIENT_PID
client_start node5
wait_until 20 "node4 active" agent_is node4 active
wait_until 20 "node5 active" agent_is node5 active
wait_until 10 "nginx tls listening" bash -c "(exec 3<>/dev/tcp/127.0.0.1/$tls_port)"
curl -sf --cacert "$GW_DIR/ca.crt" -H "Authorization: Bearer $admin" \
	"$GW_URL/k8s/clusters/$cid4/api/v1/namespaces/default/pods" >"$T/via-tls" || fail "https upstream"
cmp -s "$T/via-tls" "$T/www/api/v1/namespaces/default/pods" || fail "https upstream: body differs"
code=$(curl -s -o "$T/body" -w '%{http_code}' --cacert "$GW_DIR/ca.crt" \
	-H "Authorization: Bearer $admin" "$GW_URL/k8s/clusters/$cid5/version")
[ "$code" = 502 ] || fail "an untrusted https upstream got $code"
jq -e '.reason == "BadGateway" and (.message | test("certificate")) and (.message | test("\\(tls\\)"))' \
	"$T/body" >/dev/null || fail "untrusted upstream body: $(cat "$T/body")"
pass "https upstream: verified with --service-ca (copied 0644); without it (system CAs) 502 naming the certificate"

# --- revoked token: 401 ---
ctl user revoke alice >/dev/null || fail "user revoke"
expect_exit 1 "$KUBECTL" --kubeconfig "$T/kc.yaml" get --raw /version
code=$(curl -s -o "$T/body" -w '%{http_code}' --cacert "$GW_DIR/ca.crt" \
	-H "Authorization: Bearer $token" "$GW_URL/k8s/clusters/$cid/version")
[ "$code" = 401 ] || fail "a revoked token got $code"
pass "revoked token: kubectl fails, 401"

# --- no agent: 503 Status that kubectl prints ---
"$CTL" kubeconfig --cluster "$cid" --user bob >"$T/kc-bob.yaml" || fail "kubeconfig bob"
client_stop "$node1_pid"
node1_gone() { ! agent_is node1 active; }
wait_until 10 "node1 disconnected" node1_gone
expect_exit 1 "$KUBECTL" --kubeconfig "$T/kc-bob.yaml" get --raw /version
assert_contains "$T/last.err" "no agent of cluster $cid is connected"
code=$(curl -s -o "$T/body" -w '%{http_code}' --cacert "$GW_DIR/ca.crt" \
	-H "Authorization: Bearer $admin" "$GW_URL/k8s/clusters/$cid3/version")
[ "$code" = 503 ] || fail "a cluster without agents got $code"
jq -e '.reason == "ServiceUnavailable" and .code == 503' "$T/body" >/dev/null || fail "503 body: $(cat "$T/body")"
pass "no agent: kubectl prints the 503 Status message"
wait_until 10 "/metrics counting the answers as the audit lines do, again" k8s_counted
pass "a second scrape still counts each answer once ($(tr '\n' ' ' <"$T/k8s-counted"))"

grep -q 'ttu_' "$T/nginx-access.log" && fail "a gateway token reached nginx"
client_stop "$node4_pid"
# Requests just before SIGTERM (node2's upstream closes after each): their
# audit lines are written at exit, if not before.
burst 5 "$cid2" "$admin"
crossings=$(loop_crossings)
[ "$crossings" -gt 0 ] || fail "no request crossed between the loops (--landing any)"
log "$crossings streams crossed between the loops"
gateway_stop
[ "$(grep -c 'msg=audit event=k8s .*path=/burst/5/[0-9]* status=200 ' "$T/gateway.log")" = 50 ] ||
	fail "SIGTERM right after 50 requests: $(grep -c 'path=/burst/5/' "$T/gateway.log") audit lines"
# Whole: each starts a line, and no line holds two (a cut write would).
bad=$(awk '/msg=audit/ && (!/^time=/ || gsub(/ msg=/, "&") != 1)' "$T/gateway.log" | wc -l)
[ "$bad" = 0 ] || fail "$bad audit lines are not whole"
pass "the gateway stops cleanly; the audit lines of the requests just before SIGTERM are all written"
