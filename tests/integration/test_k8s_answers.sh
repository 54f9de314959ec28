#!/usr/bin/env bash
# Answers framed as RFC 9110 says, against a hostile node (issue 22, hole 5).
# Alice's cluster A has a node (hostile_node.py) that answers 204 and 304
# with bodies (a whole forged answer), an unsolicited 101 and bytes after a
# complete answer; Bob's cluster B has an honest one (recording_upstream.py).
# Both users go through nginx with an upstream keepalive pool of one
# connection in front of --plain-listen, so each of Bob's requests follows
# one of Alice's on the same gateway connection:
# - no byte of A's node reaches Bob: every Bob answer is B's own, for the
#   target he asked;
# - a 204 with a Content-Length is refused (502), a 304 with one is
#   complete at its head (no hang), a 101 to a request that asked for no
#   upgrade is refused (502), bytes after a complete answer are not relayed.
# Straight to the TLS port: after an unsolicited 101 the client's next bytes
# (Impersonate-User: system:admin) never reach the node; a malformed chunk
# or a duplicate Authorization trailer while an answer streams ends the
# connection without a second status line in it, and the gateway lives on.
source "$(dirname "$0")/lib.sh"
py=/usr/bin/python3

mkdir -p "$T/hostile" "$T/honest"
$py "$TETHER_SRC/tests/integration/hostile_node.py" "$T/hostile.port" "$T/hostile" &
PIDS+=($!)
$py "$TETHER_SRC/tests/integration/recording_upstream.py" "$T/honest.port" "$T/honest" &
PIDS+=($!)
wait_until 10 "the hostile node" test -s "$T/hostile.port"
wait_until 10 "the honest node" test -s "$T/honest.port"

PLAIN_PORT=$(free_port)
gateway_init
gateway_start --plain-listen "127.0.0.1:$PLAIN_PORT" --trusted-proxy 127.0.0.3
cid_a=$(cluster_create alice-cluster)
cid_b=$(cluster_create bob-cluster)
ctl token create --cluster "$cid_a" >"$T/join-a.json"
ctl token create --cluster "$cid_b" >"$T/join-b.json"
join_node nodea "$T/join-a.json" --service "kube-api=http://127.0.0.1:$(cat "$T/hostile.port")" >/dev/null
join_node nodeb "$T/join-b.json" --service "kube-api=http://127.0.0.1:$(cat "$T/honest.port")" >/dev/null
client_start nodea
client_start nodeb
wait_until 20 "nodea active" agent_is nodea active
wait_until 20 "nodeb active" agent_is nodeb active
alice=$(ctl user create alice --cluster "$cid_a" | jq -er .token) || fail "user create alice"
bob=$(ctl user create bob --cluster "$cid_b" | jq -er .token) || fail "user create bob"

# One pooled upstream connection: each request reuses the last one's.
# nginx writes its pid file once it is bound; a port taken meanwhile by
# another process makes it exit: another port, a few times.
nginx_up() { [ -s "$T/nginx.pid" ] || ! kill -0 "$NGINX_PID" 2>/dev/null; }
for try in 1 2 3 4; do
	NGINX_PORT=$(free_port)
	nginx_start nginx "
    log_format conn '\$request_uri \$status \$upstream_status';
    access_log $T/nginx-access.log conn;
    upstream gw { server 127.0.0.1:$PLAIN_PORT; keepalive 1; }
    server {
        listen 127.0.0.1:$NGINX_PORT;
        location / {
            proxy_pass http://gw;
            proxy_http_version 1.1;
            proxy_set_header Connection \"\";
            proxy_bind 127.0.0.3;
            proxy_read_timeout 30s;
        }
    }"
	NGINX_PID=${PIDS[-1]}
	wait_until 10 "nginx bound or gone" nginx_up
	[ -s "$T/nginx.pid" ] && break
	[ "$try" -lt 4 ] || fail "nginx did not start: $(cat "$T/nginx-error.log")"
done
LB=http://127.0.0.1:$NGINX_PORT

# get TOKEN PATH OUT: one request through nginx; prints its status (000
# when curl gave up after 8 s).
get() {
	curl -s -m 8 -o "$3" -w '%{http_code}' -H "Authorization: Bearer $1" "$LB$2" || true
}

# vector NAME WANT: Alice's request to /NAME gets WANT, then Bob's next
# request (same pooled connection) must be answered by his own node.
forged=0
bob_ok=0
declare -A got
vector() {
	local name=$1 want=$2 i code
	for i in 1 2 3; do
		code=$(get "$alice" "/k8s/clusters/$cid_a/$name" "$T/alice-$name.out")
		got[$name]="${got[$name]:-} $code"
		code=$(get "$bob" "/k8s/clusters/$cid_b/api/v1/namespaces/bob/secrets?n=$name-$i" "$T/bob.out")
		if grep -q FORGED "$T/bob.out"; then
			forged=$((forged + 1))
			log "$name #$i: Bob got the forged answer: $(head -c 200 "$T/bob.out")"
		elif [ "$code" = 200 ] && jq -e --arg t "/api/v1/namespaces/bob/secrets?n=$name-$i" \
			'.ok == true and .target == $t' "$T/bob.out" >/dev/null 2>&1; then
			bob_ok=$((bob_ok + 1))
		else
			log "$name #$i: Bob got $code: $(head -c 200 "$T/bob.out")"
		fi
	done
	log "$name: Alice got${got[$name]} (want $want each)"
}
vector 204-cl 502
vector 204-trailing 204
vector 304-cl 304
vector 304-nobody 304
vector 101 502
vector late 200
[ "$forged" = 0 ] || fail "$forged of Bob's 18 answers were forged by Alice's node"
[ "$bob_ok" = 18 ] || fail "only $bob_ok of Bob's 18 requests got his own node's answer"
pass "18 of Bob's requests, each right after one of Alice's hostile answers on nginx's pooled connection: 0 forged, 18 his node's own"
for v in "204-cl 502" "204-trailing 204" "304-cl 304" "304-nobody 304" "101 502" "late 200"; do
	set -- $v
	[ "${got[$1]}" = " $2 $2 $2" ] || fail "Alice's /$1 got${got[$1]}, want $2 each"
done
jq -e '.code == 502 and (.message | test("answered a head it may not send: a 204 answer with Content-Length"))' \
	"$T/alice-204-cl.out" >/dev/null || fail "the 204's refusal does not say why: $(cat "$T/alice-204-cl.out")"
jq -e '.code == 502 and (.message | test("a 101 Switching Protocols to a request that asked for no upgrade"))' \
	"$T/alice-101.out" >/dev/null || fail "the 101's refusal does not say why: $(cat "$T/alice-101.out")"
pass "a 204 with Content-Length and an unasked 101 are 502, a 304 with Content-Length (with or without bytes after it) and a 204 with bytes behind it are answered at their head, bytes after an answer are dropped"

# --- straight to the TLS port ---
client() { # client CASE: answer_client.py's JSON line in $T/answer
	$py "$TETHER_SRC/tests/integration/answer_client.py" "$GW_URL" "$GW_DIR/ca.crt" \
		"$alice" "/k8s/clusters/$cid_a" "$1" >"$T/answer" || fail "client $1: $(cat "$T/answer")"
}
client unasked_101
jq -e '.status == 502' "$T/answer" >/dev/null || fail "an unasked 101: $(cat "$T/answer")"
wait_until 10 "the audit line of the request after the 101" bash -c \
	"grep 'msg=audit event=k8s' '$T/gateway.log' | grep -q 'status=404'"
if grep -l 'system:admin' "$T"/hostile/conn-*.bin >/dev/null 2>&1; then
	fail "the client's Impersonate-User reached the node after an unasked 101"
fi
pass "an unasked 101 is a 502 on the TLS port too; the client's next request (Impersonate-User: system:admin) never reaches the node"

for c in bad_chunk dup_auth_trailer; do
	client "$c"
	jq -e '.status == 200 and .heads == 1 and .closed == true' "$T/answer" >/dev/null ||
		fail "$c while the answer streams: $(cat "$T/answer") (want the answer's one head, then the connection closed)"
	kill -0 "$GW_PID" 2>/dev/null || fail "the gateway died on $c"
	gateway_ready >/dev/null || fail "the gateway stopped answering after $c"
done
pass "a malformed chunk and a duplicate Authorization trailer while an answer streams end the connection, nothing written into the answer; the gateway lives on"

# The node's head and a malformed body in one write (parsed in one run):
# the head is written, then the connection ends; behind an ambiguous head,
# the head's refusal (502) comes first, as when they came apart.
client bad_answer_body
jq -e '.status == 200 and .heads == 1 and .closed == true' "$T/answer" >/dev/null ||
	fail "a malformed body behind its head: $(cat "$T/answer") (want the head, then the connection closed)"
client folded_bad_body
jq -e '.status == 502 and .heads == 1 and (.message | test("an ambiguous head: an obs-fold"))' \
	"$T/answer" >/dev/null || fail "a malformed body behind an ambiguous head: $(cat "$T/answer")"
pass "a malformed answer body in the head's write: the head, then the end; behind an obs-fold head, the head's 502"

gateway_stop
pass "the gateway stops cleanly"
