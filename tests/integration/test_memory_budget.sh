#!/usr/bin/env bash
# The memory budget (docs/0036-memory-budget.md, issue 22 hole 6): one
# user's 100 dial connections that never read hold no more than the
# budget, another user and the agent are still served, and the memory
# comes back once they close.
#
#   1. 100 raw dial WebSockets send 2 MiB of PINGs each and never read.
#      Before: every PING queued a PONG (~200 MiB for the hundred).  Now a
#      PING that finds output queued is answered once it drains (the latest
#      only): the gateway's VmRSS stays below its baseline plus the budget.
#   2. Bob's connect and an admin's still echo, the agent stays active.
#   3. The flood closes: VmRSS falls back near the baseline (the freed
#      heap is trimmed).
#   4. With --memory-share 1 MiB the same flood passes alice's share:
#      her largest connections are dropped, with a line saying why, and
#      the others are still served.
#   5. Again with two loops and --landing any (docs/0040): the connections
#      land on both, and each loop drops only its own, only while what it
#      holds of alice's share is over its half (every drop line's
#      loop_held), on loop 0 and on loop 1; the others are still served.
#
# VmRSS is the release build's (build/release, built by `make test`
# before the sanitized one): ASan's allocator, quarantine and shadow are
# not what ships.
source "$(dirname "$0")/lib.sh"

GATEWAY=$TETHER_SRC/build/release/bin/tether-gateway
[ -x "$GATEWAY" ] || fail "$GATEWAY missing: run make build (make test builds it)"
BUDGET=$((64 << 20))
py=/usr/bin/python3

$py "$TETHER_SRC/tests/integration/tcpserver.py" echo "$T/echo.port" &
PIDS+=($!)
wait_until 10 "echo server" test -s "$T/echo.port"
echo_port=$(cat "$T/echo.port")

gateway_init
gateway_start --memory-budget "$BUDGET"
cid=$(cluster_create mem)
ctl token create --cluster "$cid" >"$T/join.json"
join_node n1 "$T/join.json" --allow "127.0.0.1:$echo_port" >/dev/null
client_start n1
wait_until 20 "n1 active" agent_is n1 active
alice=$(ctl user create alice --cluster "$cid" | jq -er .token)
bob=$(ctl user create bob --cluster "$cid" | jq -er .token)

rss_kib() { awk '/^VmRSS:/ { print $2 }' "/proc/$GW_PID/status"; }
# Warm the paths the floods take (one dial each way) before the baseline.
[ "$(printf warm | env -u TETHER_TOKEN_FILE TETHER_TOKEN="$bob" "$CTL" connect \
	--cluster "$cid" "127.0.0.1:$echo_port")" = warm ] || fail "bob's first connect failed"
base=$(rss_kib)
rss_limit=$((base + BUDGET / 1024))
log "baseline VmRSS ${base} KiB; the floods must stay below ${rss_limit} KiB"

PEAK=0
# unread_bytes: bytes on their way to the gateway that it has not read:
# the Recv-Q of its sockets on the main port plus the Send-Q of the
# clients' ends (ss(8), loopback).
unread_bytes() {
	ss -tnH state established "( sport = :$GW_PORT )" | awk '{ q += $1 } END { print q + 0 }'
	ss -tnH state established "( dport = :$GW_PORT )" | awk '{ q += $2 } END { print q + 0 }'
}
# flood_done STATUS: records the peak VmRSS; true once every connection
# sent all it had to (or was dropped) and the gateway read it all.
flood_done() {
	local r
	r=$(rss_kib)
	[ "$r" -le "$PEAK" ] || PEAK=$r
	[ "$r" -lt "$rss_limit" ] || return 0      # over: stop waiting, the assert says so
	jq -e '.finished + .dropped >= 100' "$1" >/dev/null 2>&1 || return 1
	[ "$(unread_bytes | awk '{ s += $1 } END { print s + 0 }')" -eq 0 ]
}
served() {
	[ "$(printf hello-bob | env -u TETHER_TOKEN_FILE TETHER_TOKEN="$bob" "$CTL" connect \
		--cluster "$cid" "127.0.0.1:$echo_port")" = hello-bob ] ||
		fail "bob's connect failed during alice's flood"
	[ "$(printf hello-admin | "$CTL" connect --cluster "$cid" "127.0.0.1:$echo_port")" = hello-admin ] ||
		fail "an admin's connect failed during alice's flood"
	agent_is n1 active || fail "the agent is not active during alice's flood"
}

# 1. Pings, never read.
$py "$TETHER_SRC/tests/integration/ping_flood.py" "$GW_URL" "$GW_DIR/ca.crt" "$alice" \
	"$cid" "127.0.0.1:$echo_port" 100 ping $((2 << 20)) "$T/ping" 2>>"$T/flood.log" &
ping_pid=$!
PIDS+=("$ping_pid")
PEAK=0
wait_until 240 "100 pinging connections sent 2 MiB each" flood_done "$T/ping"
log "pings: $(cat "$T/ping"); peak VmRSS ${PEAK} KiB"
[ "$PEAK" -lt "$rss_limit" ] ||
	fail "pinging connections that never read took the gateway to ${PEAK} KiB (baseline ${base}, budget ${BUDGET})"
served
pass "100 pinging connections that never read: peak VmRSS ${PEAK} KiB < ${rss_limit} KiB; bob, an admin and the agent served"

# 3. They close: the memory comes back (the heap is trimmed).
kill "$ping_pid"
wait "$ping_pid" 2>/dev/null || true
back() { last_rss=$(rss_kib); [ "$last_rss" -lt $((base + 16384)) ]; }
back_by=$((SECONDS + 30))
until back; do
	[ "$SECONDS" -lt "$back_by" ] || fail "VmRSS not back within 16 MiB of the" \
		"baseline after 30 s: ${last_rss} KiB, baseline ${base} KiB"
	sleep 0.05
done
pass "after the flood closed VmRSS is $(rss_kib) KiB (baseline ${base})"

# 4. The same flood against a share of 1 MiB: what the connections hold
# (answers queued, the TLS batch, input) passes it, and the largest go.
gateway_stop
# The log goes on across restarts: step 4 reads only its own gateway's lines.
mark=$(wc -l <"$T/gateway.log")
gateway_start --memory-budget "$BUDGET" --memory-share $((1 << 20))
wait_until 20 "n1 active again" agent_is n1 active
$py "$TETHER_SRC/tests/integration/ping_flood.py" "$GW_URL" "$GW_DIR/ca.crt" "$alice" \
	"$cid" "127.0.0.1:$echo_port" 100 ping $((2 << 20)) "$T/ping2" 2>>"$T/flood.log" &
PIDS+=($!)
dropped() {
	awk -v from="$mark" 'NR > from && /memory budget: dropping a connection/ {
		found = 1; exit } END { exit !found }' "$T/gateway.log"
}
wait_until 240 "a connection dropped at alice's share" dropped
# The first drop lines, read into a file without a pipe: under pipefail
# `grep | head -1` fails when head exits before grep has written all its
# lines (SIGPIPE), which a loaded machine makes happen now and then.
awk -v from="$mark" 'NR > from && /memory budget: dropping a connection/ {
	print; if (++n == 3) exit }' "$T/gateway.log" >"$T/drops"
first=$(sed -n 1p "$T/drops")
[[ $first == *' who=user:alice '* && $first == *' pool=principal'* ]] ||
	{ cat "$T/drops" >&2; fail "the first drop line does not name alice and her share"; }
grep -q 'reason="memory budget: the largest holder of its principal' "$T/gateway.log" ||
	fail "no line says which holder went and why"
served
pass "past alice's share her largest connections are dropped ($(grep -c "memory budget: dropping" "$T/gateway.log") lines); bob, an admin and the agent served"

# 5. Two loops, connections landed on both: per-loop eviction.
gateway_stop
mark=$(wc -l <"$T/gateway.log")
SHARE=$((1 << 20))
gateway_start --workers 2 --landing any --memory-budget "$BUDGET" --memory-share "$SHARE"
wait_until 20 "n1 active again" agent_is n1 active
$py "$TETHER_SRC/tests/integration/ping_flood.py" "$GW_URL" "$GW_DIR/ca.crt" "$alice" \
	"$cid" "127.0.0.1:$echo_port" 100 ping $((2 << 20)) "$T/ping3" 2>>"$T/flood.log" &
PIDS+=($!)
# dropped_on LOOP: a drop line of this gateway from that loop.
dropped_on() {
	awk -v from="$mark" -v l=" loop=$1 " 'NR > from &&
		/memory budget: dropping a connection/ && index($0, l) { found = 1; exit }
		END { exit !found }' "$T/gateway.log"
}
wait_until 240 "alice's connections dropped on loop 0 and on loop 1" \
	eval 'dropped_on 0 && dropped_on 1'
awk -v from="$mark" 'NR > from && /memory budget: dropping a connection/' \
	"$T/gateway.log" >"$T/drops5"
# Every drop: alice's share, judged by a loop holding more than half of it.
awk -v half=$((SHARE / 2)) '{
	if (!match($0, / loop_held=[0-9]+/) || index($0, " who=user:alice ") == 0 ||
	    index($0, " pool=principal") == 0) { bad = 1; print; next }
	if (substr($0, RSTART + 11, RLENGTH - 11) + 0 <= half) { bad = 1; print }
} END { exit bad }' "$T/drops5" ||
	fail "a loop dropped a connection without holding more than its half of alice's share (lines above)"
served
pass "two loops: alice's connections dropped on loop 0 and loop 1 ($(wc -l <"$T/drops5") lines), each by a loop over its half of her share; bob, an admin and the agent served"

gateway_stop
