#!/usr/bin/env bash
# `tether-client join` does not give up on a transient fault (docs/0043):
# a gateway not listening yet is asked again until it is, and the node then
# runs; a gateway (here nginx in front of it) answering 503 with
# Retry-After is waited out as told, and so is a gateway closing
# connections at accept (--max-tls-per-source); a true refusal (a CA that does not
# match, an answer that is not a gateway's) ends join at once even with no
# bound on the retries; --timeout and the document's expiry bound them,
# join then exits non-zero saying why.  Nothing is written before the
# gateway has answered.
source "$(dirname "$0")/lib.sh"

gateway_init
gateway_start
cid=$(cluster_create retry)
ctl token create --cluster "$cid" --uses 4 >"$T/join.json"
gateway_stop

# nothing_written DIR: the state directory does not exist or is empty.
nothing_written() {
	[ ! -e "$1" ] || [ -z "$(ls -A "$1")" ] || fail "$1 was written: $(ls -A "$1")"
}
gone() { ! kill -0 "$1" 2>/dev/null; }
# join_bg NAME DOC [flags]: join in the background, stderr in $T/NAME.log;
# sets JOIN_PID.
join_bg() {
	local name=$1 doc=$2
	shift 2
	"$CLIENT" join --state-dir "$T/$name" --node-name "$name" "$@" <"$doc" \
		>"$T/$name.out" 2>"$T/$name.log" &
	JOIN_PID=$!
	PIDS+=("$JOIN_PID")
}
# join_wait PID: waits (bounded) for the background join; its status in rc.
join_wait() {
	wait_until 120 "join $1 to end" gone "$1"
	rc=0
	wait "$1" || rc=$?
}
tries() { grep -c "trying again" "$1" || true; }

# --- 1. the gateway is not listening yet: join waits for it ---
join_bg early "$T/join.json" --timeout 5m
wait_until 60 "join retrying a refused connection" grep -q "Connection refused; trying again" "$T/early.log"
nothing_written "$T/early"
gateway_start
join_wait "$JOIN_PID"
[ "$rc" -eq 0 ] || { cat "$T/early.log" >&2; fail "join exited $rc once the gateway started"; }
cmp -s "$T/early/ca.crt" "$GW_DIR/ca.crt" || fail "the CA pinned is not the gateway's"
assert_contains "$T/early.out" "joined cluster $cid"
client_start early
early_pid=$CLIENT_PID
wait_until 60 "the node joined late to be active" agent_is early active
pass "join started before the gateway retried ($(tries "$T/early.log") retries) and the node is active"

# --- nginx in front: 503 with Retry-After until $T/open exists, then the
# gateway; a second port answers 404 (not a gateway) ---
front=$(free_port)
other=$(free_port)
nginx_start nginx "
    log_format t '\$msec \$request_uri \$status';
    server {
        listen 127.0.0.1:$front ssl;
        access_log $T/front-access.log t;
        ssl_certificate $GW_DIR/server.crt;
        ssl_certificate_key $GW_DIR/server.key;
        location / {
            if (!-f $T/open) {
                add_header Retry-After 2 always;
                return 503 '{\"error\":\"busy\"}';
            }
            proxy_pass https://127.0.0.1:$GW_PORT;
        }
    }
    server {
        listen 127.0.0.1:$other ssl;
        access_log off;
        ssl_certificate $GW_DIR/server.crt;
        ssl_certificate_key $GW_DIR/server.key;
        location / { return 404 '{\"error\":\"no such thing\"}'; }
    }"
wait_until 20 "nginx on $front" curl -sk -o /dev/null "https://127.0.0.1:$front/"
wait_until 20 "nginx on $other" curl -sk -o /dev/null "https://127.0.0.1:$other/"

# --- 2. a true refusal is final at once, even with no bound (--timeout 0) ---
jq -c '.ca_checksum = "sha256:" + ("0" * 64)' "$T/join.json" >"$T/wrongca.json"
expect_exit 4 timeout 60 "$CLIENT" join --state-dir "$T/wrongca" --timeout 0 <"$T/wrongca.json"
assert_contains "$T/last.err" "CA checksum mismatch"
[ "$(tries "$T/last.err")" -eq 0 ] || fail "a CA mismatch was retried: $(cat "$T/last.err")"
nothing_written "$T/wrongca"
jq -c --arg u "https://127.0.0.1:$other" '.gateway_url = $u' "$T/join.json" >"$T/notgw.json"
expect_exit 4 timeout 60 "$CLIENT" join --state-dir "$T/notgw" --timeout 0 <"$T/notgw.json"
assert_contains "$T/last.err" "HTTP 404"
assert_contains "$T/last.err" "not retried"
[ "$(tries "$T/last.err")" -eq 0 ] || fail "a 404 was retried: $(cat "$T/last.err")"
nothing_written "$T/notgw"
jq -c '.expires_at = "2020-01-01T00:00:00Z"' "$T/join.json" >"$T/expired.json"
expect_exit 2 timeout 60 "$CLIENT" join --state-dir "$T/expired" --timeout 0 <"$T/expired.json"
assert_contains "$T/last.err" "expired"
nothing_written "$T/expired"
pass "a CA mismatch (exit 4), a 404 (exit 4), an expired document (exit 2): final at once, nothing written"

# --- 3. 503 with Retry-After: 2 is waited out as told ---
jq -c --arg u "https://127.0.0.1:$front" '.gateway_url = $u' "$T/join.json" >"$T/front.json"
join_bg told "$T/front.json" --timeout 5m
told_twice() {
	[ "$(grep -c 'HTTP 503, and asks to come back in 2.0s; trying again in 2' "$T/told.log")" -ge 2 ]
}
wait_until 60 "two 503s told to come back" told_twice
nothing_written "$T/told"
touch "$T/open"
join_wait "$JOIN_PID"
[ "$rc" -eq 0 ] || { cat "$T/told.log" >&2; fail "join exited $rc once nginx let it through"; }
cmp -s "$T/told/ca.crt" "$GW_DIR/ca.crt" || fail "the CA pinned through nginx is not the gateway's"
# Each /v1/ca came at least the 2 s told after the 503 before it.
awk '$2 == "/v1/ca" { print $1, $3 }' "$T/front-access.log" >"$T/ca-requests"
n503=$(awk '$2 == 503' "$T/ca-requests" | wc -l)
[ "$n503" -eq "$(tries "$T/told.log")" ] ||
	fail "$n503 answers 503 but $(tries "$T/told.log") retries: $(cat "$T/ca-requests")"
awk 'NR > 1 && prev_status == 503 && $1 - prev < 2.0 { bad = 1; print "too soon:", prev, $1 }
	{ prev = $1; prev_status = $2 } END { exit bad }' "$T/ca-requests" ||
	fail "a retry came before the Retry-After: $(cat "$T/ca-requests")"
pass "503 with Retry-After: $n503 answers, each waited out (>= 2 s), then joined"

# --- 4. the bounds: --timeout, and the document's expiry ---
jq -c --arg u "https://127.0.0.1:$(free_port)" '.gateway_url = $u' "$T/join.json" >"$T/unreach.json"
expect_exit 4 timeout 60 "$CLIENT" join --state-dir "$T/unreach" --timeout 2s <"$T/unreach.json"
assert_contains "$T/last.err" "gave up after"
assert_contains "$T/last.err" "(--timeout 2s)"
assert_contains "$T/last.err" "Connection refused"
[ "$(tries "$T/last.err")" -ge 1 ] || fail "gave up without a retry: $(cat "$T/last.err")"
nothing_written "$T/unreach"
jq -c '.expires_at = (now + 6 | floor | todate)' "$T/unreach.json" >"$T/soon.json"
expect_exit 2 timeout 60 "$CLIENT" join --state-dir "$T/soon" --timeout 0 <"$T/soon.json"
assert_contains "$T/last.err" "the join document expires at"
[ "$(tries "$T/last.err")" -ge 1 ] || fail "gave up without a retry: $(cat "$T/last.err")"
nothing_written "$T/soon"
pass "--timeout 2s: exit 4 saying it gave up; --timeout 0 stops at the document's expiry (exit 2)"

# --- 5. the gateway closes connections at accept (their source holds its
# TLS share: --max-tls-per-source 1, the slot held by a socket that sends
# no ClientHello): join tries again until the share is free ---
client_stop "$early_pid"
gateway_stop
gateway_start --max-tls-per-source 1 --tls-hello-timeout 120000
python3 - "$GW_PORT" "$T/hold.ready" <<'PY' &
import socket, sys, time
s = socket.create_connection(("127.0.0.1", int(sys.argv[1])))
open(sys.argv[2], "w").close()
time.sleep(600)
PY
hold_pid=$!
PIDS+=("$hold_pid")
wait_until 20 "the slot held" test -f "$T/hold.ready"
shed() { ! curl -s --cacert "$GW_DIR/ca.crt" -o /dev/null "$GW_URL/healthz"; }
wait_until 20 "the held slot to shed new connections" shed
join_bg shed "$T/join.json" --timeout 5m
wait_until 60 "join retrying a connection closed at accept" grep -q "trying again" "$T/shed.log"
nothing_written "$T/shed"
kill "$hold_pid"
join_wait "$JOIN_PID"
[ "$rc" -eq 0 ] || { cat "$T/shed.log" >&2; fail "join exited $rc once the slot was free"; }
cmp -s "$T/shed/ca.crt" "$GW_DIR/ca.crt" || fail "the CA pinned is not the gateway's"
pass "connections closed at accept (--max-tls-per-source): $(tries "$T/shed.log") retries, then joined"
gateway_stop
