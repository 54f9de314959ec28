#!/usr/bin/env bash
# memory_flood.sh: the gateway's resident memory while one user's dial
# connections send and never read (issue 22, hole 6; docs/0036).
#
# A benchmark, not a test: it reports figures and fails only if it cannot
# take them.  For each count N, a fresh gateway, one agent, an echo target
# and a user token; N raw dial WebSockets (tests/integration/ping_flood.py)
# each send BENCH_BYTES of MODE (ping: PINGs, data: binary messages to the
# echo) and never read.  Reports the gateway's VmRSS before, its peak while
# they send and hold, and 5 s after they close.
#
# usage: tests/bench/memory_flood.sh [COUNTS...]   (default 20 50 100)
#   TETHER_BIN      directory with the binaries (default build/release/bin)
#   BENCH_MODE      ping or data (default ping)
#   BENCH_BYTES     bytes each connection sends (default 8388608)
#   BENCH_GW_FLAGS  extra `serve` flags (default none)
TETHER_BIN=${TETHER_BIN:-$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)/build/release/bin}
export TETHER_BIN
MODE=${BENCH_MODE:-ping}
BYTES=${BENCH_BYTES:-8388608}
read -r -a GW_FLAGS <<<"${BENCH_GW_FLAGS:-}"
source "$(dirname "${BASH_SOURCE[0]}")/../integration/lib.sh"
TEST_NAME=bench
[ $# -gt 0 ] || set -- 20 50 100

rss_kib() { awk '/^VmRSS:/ { print $2 }' "/proc/$GW_PID/status"; }

python3 "$TETHER_SRC/tests/integration/tcpserver.py" echo "$T/echo.port" &
PIDS+=($!)
wait_until 10 "echo server" test -s "$T/echo.port"
echo_port=$(cat "$T/echo.port")

for n in "$@"; do
	rm -rf "$T/gw" "$T/n1"
	gateway_init
	gateway_start "${GW_FLAGS[@]}"
	cid=$(cluster_create "flood-$n")
	ctl token create --cluster "$cid" >"$T/join.json"
	join_node n1 "$T/join.json" --allow "127.0.0.1:$echo_port" >/dev/null
	client_start n1
	agent_pid=$CLIENT_PID
	wait_until 20 "n1 active" agent_is n1 active
	alice=$(ctl user create "alice$n" --cluster "$cid" | jq -er .token)
	before=$(rss_kib)
	python3 "$TETHER_SRC/tests/integration/ping_flood.py" "$GW_URL" "$GW_DIR/ca.crt" \
		"$alice" "$cid" "127.0.0.1:$echo_port" "$n" "$MODE" "$BYTES" "$T/flood" \
		2>>"$T/flood.log" &
	flood=$!
	peak=$before
	done_sending() { jq -e ".finished + .dropped >= $n" "$T/flood" >/dev/null 2>&1; }
	start=$SECONDS
	until done_sending && [ $((SECONDS - start)) -ge 3 ]; do
		kill -0 "$flood" 2>/dev/null || die_early=1
		[ -z "${die_early:-}" ] || fail "ping_flood.py exited (see flood.log)"
		r=$(rss_kib)
		[ "$r" -le "$peak" ] || peak=$r
		[ $((SECONDS - start)) -lt 300 ] || fail "the flood did not finish in 300 s"
		sleep 0.2
	done
	status=$(cat "$T/flood")
	kill "$flood"
	wait "$flood" 2>/dev/null || true
	sleep 5
	after=$(rss_kib)
	printf 'connections=%d mode=%s bytes_each=%d rss_before_mib=%d rss_peak_mib=%d rss_after_close_mib=%d flood=%s\n' \
		"$n" "$MODE" "$BYTES" $((before / 1024)) $((peak / 1024)) $((after / 1024)) "$status"
	client_stop "$agent_pid"
	gateway_stop
done
