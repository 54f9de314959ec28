#!/usr/bin/env bash
# The status page at /ui/ in a real headless Chromium (Debian's chromium),
# trusting the gateway's CA through its NSS database: signed in through
# #token=... it shows every agent row and the live stream to an admin token,
# only its cluster's rows to a user token, the sign-in form without one; the
# token leaves the address bar for sessionStorage; a revoke shows up without
# a reload (DevTools: the page polls); the answers carry a strict
# Content-Security-Policy.  Screenshots (desktop and phone width) are
# written next to the binaries' build directory: ui-status.png and
# ui-status-phone.png.
source "$(dirname "$0")/lib.sh"

py=/usr/bin/python3
SHOTS=$(cd "$TETHER_BIN/.." && pwd)
$py "$TETHER_SRC/tests/integration/tcpserver.py" echo "$T/echo.port" &
PIDS+=($!)
$py "$TETHER_SRC/tests/integration/k8s_upstream.py" "$T/kube.port" &
PIDS+=($!)
wait_until 10 "echo server and kube-api upstream" test -s "$T/echo.port" -a -s "$T/kube.port"
echo_port=$(cat "$T/echo.port")

gateway_init
gateway_start
alpha=$(cluster_create alpha)
beta=$(cluster_create beta)
ctl token create --cluster "$alpha" --uses 2 >"$T/alpha.json"
ctl token create --cluster "$beta" >"$T/beta.json"
join_node n1 "$T/alpha.json" --allow "127.0.0.1:$echo_port" \
	--service "kube-api=http://127.0.0.1:$(cat "$T/kube.port")" >/dev/null
join_node n2 "$T/alpha.json" --service "kube-api=http://127.0.0.1:$(cat "$T/kube.port")" >/dev/null
join_node n3 "$T/beta.json" >/dev/null
client_start n1
client_start n2
client_start n3
wait_until 30 "three agents active" eval 'agent_is n1 active && agent_is n2 active && agent_is n3 active'
n1=$(agent_id_of n1) n2=$(agent_id_of n2) n3=$(agent_id_of n3)
admin_token=$(cat "$GW_DIR/admin.token")
user_token=$(ctl user create viewer --cluster "$alpha" | jq -er .token)

# A live stream: tetherctl connect held open by a FIFO nobody writes to yet.
held_connect "$alpha" n1 "127.0.0.1:$echo_port" /dev/null
on_cleanup 'exec 7>&-'
printf 'hello, tether' >&7
live_stream() {
	curl -sf --cacert "$GW_DIR/ca.crt" -H "Authorization: Bearer $admin_token" \
		"$GW_URL/v1/status" | jq -e '.streams | length == 1 and
		.[0].bytes_up == 13 and .[0].bytes_down == 13' >/dev/null
}
wait_until 10 "the stream and its bytes listed by /v1/status" live_stream

# A /k8s exchange is listed too while it lasts: an upgraded one (101, then
# bytes both ways) held open until $T/k8s.done exists.
$py - "$GW_URL/k8s/clusters/$alpha/exec" "$GW_DIR/ca.crt" "$admin_token" "$T/k8s.done" <<'PY' &
import os, socket, ssl, sys, time
from urllib.parse import urlsplit
url, ca, token, done = sys.argv[1:5]
u = urlsplit(url)
s = ssl.create_default_context(cafile=ca).wrap_socket(
    socket.create_connection((u.hostname, u.port), timeout=30), server_hostname=u.hostname)
s.sendall(("GET %s HTTP/1.1\r\nHost: %s\r\nAuthorization: Bearer %s\r\n"
           "Connection: Upgrade\r\nUpgrade: tether-echo\r\n\r\n" % (u.path, u.netloc, token)).encode())
head = s.recv(4096)
assert head.startswith(b"HTTP/1.1 101"), head
while not os.path.exists(done):
    time.sleep(0.05)
s.close()
PY
PIDS+=($!)
k8s_listed() {
	curl -sf --cacert "$GW_DIR/ca.crt" -H "Authorization: Bearer $admin_token" \
		"$GW_URL/v1/status" | jq -e '[.streams[] | select(.kind == "k8s" and
		.target == "/exec" and (.node == "n1" or .node == "n2"))] | length == 1' >/dev/null
}
wait_until 20 "the /k8s exchange listed by /v1/status" k8s_listed
touch "$T/k8s.done"
k8s_gone() {
	curl -sf --cacert "$GW_DIR/ca.crt" -H "Authorization: Bearer $admin_token" \
		"$GW_URL/v1/status" | jq -e '[.streams[] | select(.kind == "k8s")] | length == 0' >/dev/null
}
wait_until 20 "the /k8s exchange gone from /v1/status" k8s_gone
pass "a /k8s exchange is listed while it lasts"

# --- the answers: strict CSP, no inline script or style ------------------
curl -sfD "$T/ui.headers" --cacert "$GW_DIR/ca.crt" "$GW_URL/ui/" >"$T/index.html"
assert_contains "$T/ui.headers" "Content-Security-Policy: default-src 'self'; script-src 'self'; style-src 'self'"
assert_contains "$T/ui.headers" "frame-ancestors 'none'"
grep -qi "unsafe-inline\|unsafe-eval" "$T/ui.headers" && fail "the CSP allows inline code"
grep -qiE '<script>|<script [^>]*>[^<]|<style|style=|onclick=|onload=|https?://' "$T/index.html" &&
	fail "index.html has inline script, inline style or an external URL"
curl -sfD "$T/js.headers" --cacert "$GW_DIR/ca.crt" "$GW_URL/ui/ui.js" -o /dev/null
assert_contains "$T/js.headers" "Content-Type: text/javascript"
code=$(curl -s -o /dev/null -w '%{http_code}' --cacert "$GW_DIR/ca.crt" "$GW_URL/ui/nothing.js")
[ "$code" = 404 ] || fail "/ui/nothing.js: $code, want 404"
code=$(curl -s -o /dev/null -w '%{http_code} %{redirect_url}' --cacert "$GW_DIR/ca.crt" "$GW_URL/ui")
[ "$code" = "301 $GW_URL/ui/" ] || fail "/ui: $code, want 301 to /ui/"
pass "/ui/ is served from the binary with a strict Content-Security-Policy"

# /v1/status itself: scoped by the token.
curl -sf --cacert "$GW_DIR/ca.crt" -H "Authorization: Bearer $user_token" \
	"$GW_URL/v1/status" >"$T/user.json" || fail "/v1/status with a user token"
jq -e --arg a "$alpha" '[.clusters[].id] == [$a] and (.agents | length) == 2 and .admin == false' \
	"$T/user.json" >/dev/null || fail "a user token sees more than its cluster: $(cat "$T/user.json")"
code=$(curl -s -o /dev/null -w '%{http_code}' --cacert "$GW_DIR/ca.crt" "$GW_URL/v1/status")
[ "$code" = 401 ] || fail "/v1/status without a token: $code, want 401"

# --- Chromium, trusting the gateway CA ------------------------------------
export HOME=$T/home
mkdir -p "$HOME/.pki/nssdb"
certutil -d "sql:$HOME/.pki/nssdb" -N --empty-password
certutil -d "sql:$HOME/.pki/nssdb" -A -t "C,," -n tether-test-ca -i "$GW_DIR/ca.crt"
chrome() { # chrome PROFILE FLAGS... URL
	local profile=$1
	shift
	timeout 60 chromium --headless --no-sandbox --disable-gpu --disable-quic --no-first-run \
		--disable-background-networking --disable-component-update --disable-sync \
		--user-data-dir="$T/chrome-$profile" "$@" 2>>"$T/chromium.log"
}
page="$GW_URL/ui/"

chrome shot --window-size=1280,900 --virtual-time-budget=5000 \
	--screenshot="$SHOTS/ui-status.png" "$page#token=$admin_token" >/dev/null
chrome phone --window-size=390,844 --virtual-time-budget=5000 \
	--screenshot="$SHOTS/ui-status-phone.png" "$page#token=$admin_token" >/dev/null
for f in ui-status.png ui-status-phone.png; do
	[ "$(head -c 8 "$SHOTS/$f" | od -An -tx1 | tr -d ' ')" = 89504e470d0a1a0a ] ||
		fail "$SHOTS/$f is not a PNG"
	[ "$(stat -c %s "$SHOTS/$f")" -gt 10000 ] || fail "$SHOTS/$f is nearly empty"
done
log "screenshots: $SHOTS/ui-status.png $SHOTS/ui-status-phone.png"

# dom TOKEN: the rendered page, signed in with TOKEN through the fragment.
dom() { chrome dom --virtual-time-budget=5000 --dump-dom "$page${1:+#token=$1}"; }
dom "$admin_token" >"$T/admin.dom"
assert_contains "$T/admin.dom" 'data-view="status"'
for id in "$n1" "$n2" "$n3"; do
	grep -q "data-agent-id=\"$id\" data-state=\"active\" data-connected=\"yes\"" "$T/admin.dom" ||
		fail "admin view: no active row for agent $id"
done
assert_contains "$T/admin.dom" "127.0.0.1:$echo_port"
release=$("$CLIENT" --version | awk '{print $2}')
grep -q "data-label=\"Version\">$release<" "$T/admin.dom" ||
	fail "admin view: no Version cell with $release"
grep -q 'data-label="Last seen">[^<]' "$T/admin.dom" || fail "admin view: no Last seen cell"
pass "admin token: every agent row, active and connected, with its version and last seen, and the live stream"

dom "$user_token" >"$T/user.dom"
[ "$(grep -o 'data-agent-id="' "$T/user.dom" | wc -l)" = 2 ] || fail "user view: not 2 agent rows"
grep -q "$n1" "$T/user.dom" && grep -q "$n2" "$T/user.dom" || fail "user view lacks alpha's agents"
grep -q "$n3\|$beta" "$T/user.dom" && fail "user view shows cluster beta"
pass "user token: only its cluster's agents"

dom "" >"$T/none.dom"
assert_contains "$T/none.dom" 'data-view="signin"'
dom "ttu_0000000000000000.bad" >"$T/bad.dom"
assert_contains "$T/bad.dom" 'data-view="signin"'
assert_contains "$T/bad.dom" "Token refused"
pass "no token or a bad one: the sign-in form, with the gateway's reason"

# --- live: a revoke shows up without a reload (DevTools) ------------------
DP=$(free_port)
# In its own process group, so that the cleanup ends Chromium and all its
# helper processes, and waits for them, before the profile is removed.
setsid chromium --headless --no-sandbox --disable-gpu --disable-quic --no-first-run \
	--disable-background-networking --disable-component-update --disable-sync \
	--user-data-dir="$T/chrome-live" --remote-debugging-port="$DP" --window-size=1280,900 \
	"$page#token=$admin_token" >/dev/null 2>>"$T/chromium.log" &
live_pgid=$!
on_cleanup 'kill -- -$live_pgid 2>/dev/null; for _ in $(seq 100); do pgrep -g $live_pgid >/dev/null || break; sleep 0.1; done'
wait_until 30 "Chromium DevTools on $DP" curl -sf "http://127.0.0.1:$DP/json/list"
cdp() { $py "$TETHER_SRC/tests/integration/cdp.py" "$DP" "$@"; }
row_state="document.querySelector('tr[data-agent-id=\"$n2\"]')?.dataset.state ?? null"
cdp wait "$row_state" '"active"' 20 || fail "the page never showed n2 active"
cdp wait "location.href" "\"$page\"" 5 || fail "the token is still in the address bar"
cdp wait "sessionStorage.getItem('tether.token') === '$admin_token'" true 5 ||
	fail "the token is not in sessionStorage"
cdp eval "window.notReloaded = true" >/dev/null
ctl agent revoke "$n2" >/dev/null
cdp wait "$row_state" '"revoked"' 20 || fail "the revoke did not show up"
cdp wait "window.notReloaded === true" true 1 || fail "the page was reloaded"
cdp shot "$SHOTS/ui-status-revoked.png"
pass "a revoke shows up in the open page without a reload"

# Printable: in print media the buttons go, the tables stay.
cdp print "getComputedStyle(document.getElementById('signout')).display + ' ' +
	getComputedStyle(document.getElementById('agents')).display" >"$T/print.out"
[ "$(cat "$T/print.out")" = '"none table"' ] || fail "print media: $(cat "$T/print.out")"
pass "print media hides the controls and keeps the tables"

# The gateway stops with the stream still open: it must exit 0, which the
# sanitizer build's leak check makes "nothing leaked" (docs/0015, Shutdown).
live_stream || fail "the held stream is not open when the gateway stops"
gateway_stop
pass "status page"
