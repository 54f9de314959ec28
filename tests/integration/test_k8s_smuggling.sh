#!/usr/bin/env bash
# Request smuggling through /k8s/clusters/ID: raw TLS clients send every
# framing trick (Content-Length or Transfer-Encoding named in Connection,
# Upgrade plus Connection, CL+TE, duplicate or non-numeric CL, TE other than
# chunked, Impersonate-* in any case and with suffixes, obs-fold, bare CR
# or LF, NUL) to upstreams that record every byte they receive.  Each client
# request is exactly one upstream request (for a --service-token service
# each with the node's token only, and the requests of one client
# connection on one upstream connection, the stream reused), carries no
# Impersonate-* the gateway did not add, ambiguous framing gets a 400 Status,
# and each request has one audit line.  Then a node that answers
# "100 Continue" forever to a client that never reads: the gateway's memory
# stays bounded (the heads count against the stream's window).
source "$(dirname "$0")/lib.sh"
py=/usr/bin/python3
NODE_TOKEN=node-secret-$RANDOM$RANDOM

start_upstream() { # start_upstream NAME [continue]: sets UP_PORT
	mkdir -p "$T/$1"
	$py "$TETHER_SRC/tests/integration/recording_upstream.py" "$T/$1.port" "$T/$1" "${@:2}" &
	PIDS+=($!)
	wait_until 10 "upstream $1" test -s "$T/$1.port"
	UP_PORT=$(cat "$T/$1.port")
}
start_upstream plain
plain_port=$UP_PORT
start_upstream tok keep      # ignores Connection: close
tok_port=$UP_PORT
start_upstream flood continue
flood_port=$UP_PORT

# The memory bound below is the gateway's live memory: ASan's quarantine
# of freed blocks (256 MiB by default) is kept small so that it is not
# counted.
export ASAN_OPTIONS="${ASAN_OPTIONS:-detect_leaks=1}:quarantine_size_mb=8"
gateway_init
gateway_start --impersonate
cid=$(cluster_create smuggle)
cid2=$(cluster_create smuggle-token)
cid3=$(cluster_create flood)
for c in "$cid" "$cid2" "$cid3"; do ctl token create --cluster "$c" >"$T/join-$c.json"; done
printf '%s\n' "$NODE_TOKEN" >"$T/node.token"
join_node plain "$T/join-$cid.json" --service "kube-api=http://127.0.0.1:$plain_port" >/dev/null
join_node tok "$T/join-$cid2.json" --service "kube-api=http://127.0.0.1:$tok_port" \
	--service-token "kube-api=$T/node.token" >/dev/null
join_node flood "$T/join-$cid3.json" --service "kube-api=http://127.0.0.1:$flood_port" >/dev/null
for n in plain tok flood; do client_start $n; done
for n in plain tok flood; do wait_until 20 "$n active" agent_is $n active; done
token=$(ctl user create mallory --cluster "$cid" --cluster "$cid2" --cluster "$cid3" | jq -er .token) ||
	fail "user create failed"

audits() { grep -c 'msg=audit event=k8s' "$T/gateway.log" || true; }
sent=0
# send CLUSTER CASE: one raw request; its answer's JSON line in $T/answer.
send() {
	$py "$TETHER_SRC/tests/integration/smuggle_client.py" "$GW_URL" "$GW_DIR/ca.crt" \
		"$token" "/k8s/clusters/$1" "$2" >"$T/answer" || fail "client for $2: $(cat "$T/answer")"
	sent=$((sent + 1))
}
# upstream_requests DIR: how many requests the upstream read.
upstream_requests() { if [ -f "$T/$1/requests.jsonl" ]; then wc -l <"$T/$1/requests.jsonl"; else echo 0; fi; }
# pass_each CLUSTER UPSTREAM CASE...: each is answered 200 and reaches
# UPSTREAM.  (A request smuggled in one case is read before the next case's
# own request, so the count after the last case is exact: it ends with a
# case that carries no body.)
pass_each() {
	local cluster=$1 up=$2 c before
	shift 2
	for c in "$@"; do
		before=$(upstream_requests "$up")
		send "$cluster" "$c"
		jq -e '.status == 200' "$T/answer" >/dev/null || fail "$c: $(cat "$T/answer")"
		wait_until 10 "$up read the $c request" bash -c "[ \$(wc -l <'$T/$up/requests.jsonl') -gt $before ]"
	done
}

# --- passed on, and exactly one upstream request each ---
accepted="cl_in_connection te_in_connection upgrade_connection_cl host_in_connection impersonate_mixed_case impersonate_underscore"
pass_each "$cid" plain $accepted
want=$(echo $accepted | wc -w)
# A smuggled request would be a line of its own, after the one it hid in.
wait_until 10 "audit lines" bash -c "[ \$(grep -c 'msg=audit event=k8s' '$T/gateway.log') -ge $sent ]"
got=$(upstream_requests plain)
[ "$got" = "$want" ] || fail "$want client requests became $got upstream requests: $(cat "$T/plain/requests.jsonl")"
jq -e -s 'all(.[]; .target | startswith("/api/v1/secrets") | not)' "$T/plain/requests.jsonl" >/dev/null ||
	fail "a smuggled request reached the upstream: $(cat "$T/plain/requests.jsonl")"
jq -e -s --arg len "$(printf 'GET /api/v1/secrets HTTP/1.1\r\nHost: k\r\nImpersonate-User: system:admin\r\nImpersonate-Group: system:masters\r\n\r\n' | wc -c)" \
	'[.[] | select(.method == "POST")] | length == 3 and all(.[]; .body_len == ($len | tonumber))' \
	"$T/plain/requests.jsonl" >/dev/null ||
	fail "the smuggling bodies did not arrive as bodies: $(cat "$T/plain/requests.jsonl")"
# Only the gateway's own Impersonate-User (--impersonate: the user's name).
jq -e -s 'all(.[]; [.headers[] | select(.[0] | ascii_downcase | gsub("_"; "-") | startswith("impersonate-"))] ==
	[["Impersonate-User", "mallory"]])' "$T/plain/requests.jsonl" >/dev/null ||
	fail "an Impersonate-* header the gateway did not add reached the upstream: $(cat "$T/plain/requests.jsonl")"
jq -e -s 'all(.[]; ([.headers[] | select(.[0] | ascii_downcase == "host")] | length == 1) and
	([.headers[] | select(.[0] | ascii_downcase == "authorization")] | length == 0))' \
	"$T/plain/requests.jsonl" >/dev/null ||
	fail "Host missing, or an Authorization passed: $(cat "$T/plain/requests.jsonl")"
pass "$want requests with CL/TE/Host named in Connection, Upgrade+Connection+CL, mixed-case, suffixed and underscored Impersonate-* (Impersonate_User): $got upstream requests, bodies intact, only Impersonate-User: mallory, Host kept"

# --- ambiguous framing: 400 Status, nothing upstream ---
refused="cl_and_te duplicate_cl different_cl non_numeric_cl signed_cl te_gzip_chunked te_identity te_twice
	obs_fold obs_fold_tab bare_lf bare_lf_in_header bare_cr_in_header nul_in_header space_before_colon"
for c in $refused; do
	send "$cid" "$c"
	jq -e '.status == 400 and .kind == "Status" and .code == 400 and (.message | length > 0)' "$T/answer" >/dev/null ||
		fail "$c: want a 400 Status, got $(cat "$T/answer")"
done
wait_until 10 "audit lines" bash -c "[ \$(grep -c 'msg=audit event=k8s' '$T/gateway.log') -ge $sent ]"
got=$(upstream_requests plain)
[ "$got" = "$want" ] || fail "a refused request reached the upstream: $(tail -n +$((want + 1)) "$T/plain/requests.jsonl")"
pass "$(echo $refused | wc -w) ambiguous heads (CL+TE, 2 CLs, bad CL, TE not chunked, obs-fold, bare CR/LF, NUL, space before colon): 400 Status each, none reached the upstream"

# --- answer heads from the node: the same rules, 502 Status ---
answers="cl_and_te two_cl te_gzip obs_fold bare_lf bad_1xx"
for a in $answers; do
	send "$cid" "get:/ambiguous-answer/$a"
	jq -e '.status == 502 and .kind == "Status" and .code == 502 and
		(.message | test("ambiguous head|malformed HTTP"))' "$T/answer" >/dev/null ||
		fail "an ambiguous answer head ($a): want a 502 Status, got $(cat "$T/answer")"
done
pass "$(echo $answers | wc -w) ambiguous answer heads from the node (CL+TE, 2 CLs, TE not chunked, obs-fold, bare LF, a 1xx with an obs-fold): 502 Status each"

# --- a --service-token service: the node's token on every request, streams reused ---
tok_cases="cl_in_connection te_in_connection upgrade_connection_cl impersonate_mixed_case impersonate_underscore"
pass_each "$cid2" tok $tok_cases
# Two requests on one client connection: the gateway sends the second on
# the same stream (this upstream keeps its connection), and the agent
# rewrites its head too.
send "$cid2" "twice:/api/v1/namespaces"
jq -e '.status == 200' "$T/answer" >/dev/null || fail "token service, two requests: $(cat "$T/answer")"
tok_sent=$(($(echo $tok_cases | wc -w) + 2))
sent=$((sent + 1))
wait_until 10 "the token upstream read $tok_sent requests" bash -c "[ \$(wc -l <'$T/tok/requests.jsonl') -ge $tok_sent ]"
wait_until 10 "audit lines" bash -c "[ \$(grep -c 'msg=audit event=k8s' '$T/gateway.log') -ge $sent ]"
got=$(upstream_requests tok)
[ "$got" = "$tok_sent" ] || fail "$tok_sent requests became $got on the token service: $(cat "$T/tok/requests.jsonl")"
jq -e -s '[.[] | select(.target | test("[?](first|second)=1$")) | .conn] | length == 2 and (unique | length) == 1' \
	"$T/tok/requests.jsonl" >/dev/null ||
	fail "the two requests of one client connection did not share an upstream connection: $(cat "$T/tok/requests.jsonl")"
jq -e -s 'length - 1 == ([.[].conn] | unique | length)' "$T/tok/requests.jsonl" >/dev/null ||
	fail "requests of different client connections shared an upstream connection: $(cat "$T/tok/requests.jsonl")"
jq -e -s --arg want "Bearer $NODE_TOKEN" 'all(.[]; [.headers[] | select(.[0] | ascii_downcase == "authorization") | .[1]] == [$want])' \
	"$T/tok/requests.jsonl" >/dev/null || fail "a request without exactly the node's token: $(cat "$T/tok/requests.jsonl")"
jq -e -s 'all(.[]; ([.headers[] | select(.[0] | ascii_downcase == "upgrade")] | length > 0) as $up |
	[.headers[] | select(.[0] | ascii_downcase == "connection") | .[1] | ascii_downcase | gsub(" "; "")] |
	if $up then . == ["upgrade,close"] else length == 0 end)' \
	"$T/tok/requests.jsonl" >/dev/null ||
	fail "a token request whose Connection is not the agent's (none; Upgrade, close for an upgrade): $(cat "$T/tok/requests.jsonl")"
conns=$(jq -s '[.[].conn] | unique | length' "$T/tok/requests.jsonl")
pass "--service-token: $tok_sent requests (smuggling attempts, two on one client connection) are $got requests on $conns upstream connections (the two on one), each with only the node's token and the agent's Connection"

# --- one audit line per request ---
wait_until 10 "audit lines" bash -c "[ \$(grep -c 'msg=audit event=k8s' '$T/gateway.log') -ge $sent ]"
n=$(audits)
[ "$n" = "$sent" ] || fail "$sent requests, $n audit lines: $(grep 'msg=audit event=k8s' "$T/gateway.log")"
[ "$(grep 'msg=audit event=k8s' "$T/gateway.log" | grep -c 'status=400')" = "$(echo $refused | wc -w)" ] ||
	fail "the 400s are not audited each: $(grep 'msg=audit event=k8s' "$T/gateway.log")"
pass "$sent requests, $n audit lines (the 400s included)"

# --- 100 Continue forever to a client that never reads: bounded ---
rss_kb() { awk '/^VmRSS:/ {print $2}' "/proc/$GW_PID/status"; }
before=$(rss_kb)
$py "$TETHER_SRC/tests/integration/smuggle_client.py" "$GW_URL" "$GW_DIR/ca.crt" "$token" \
	"/k8s/clusters/$cid3" noread >"$T/noread.out" 2>&1 &
PIDS+=($!)
wait_until 120 "the flood upstream to stall or finish" test -s "$T/flood/state"
after=$(rss_kb)
flooded=$(cat "$T/flood/sent")
grow=$(((after - before) / 1024))
log "100 Continue flood: the node wrote $((flooded >> 20)) MiB ($(cat "$T/flood/state")), gateway VmRSS ${before} kB -> ${after} kB (+${grow} MiB)"
[ "$grow" -lt 48 ] || fail "the gateway grew by $grow MiB (bound 48) while the node wrote $((flooded >> 20)) MiB of 100 Continue"
[ "$(cat "$T/flood/state")" = blocked ] || fail "the node was never stopped: it wrote $((flooded >> 20)) MiB"
"$CTL" -o json agent list >/dev/null || fail "the gateway stopped answering"
pass "100 Continue forever to a client that never reads: the node is stopped after $((flooded >> 20)) MiB, the gateway grows by $grow MiB (< 48)"

gateway_stop
pass "the gateway stops cleanly"
