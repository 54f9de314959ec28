#!/usr/bin/env bash
# tls_churn.sh: does a gateway keep anything of connections that end
# before, during or right after their TLS handshake?  One gateway on
# loopback (--workers W, default 2: the handshakes run on loop 1 as well),
# then N connections (default 1000) of each kind of tests/bench/tls_churn.py
# (silent, reset, half a ClientHello, a ClientHello then close, a whole
# handshake then close), one kind after the other.  After each kind, once
# the gateway's gauges are back at rest (polled, 30 s at most), it prints
# the gateway's descriptors and its TLS gauges and counters from /metrics;
# at the end whether descriptors and TLS slots are back where they started
# ("kept nothing") or not ("KEPT": exit 1).
#
# A benchmark's check, not a test: it reports and says what it saw.
# usage: tests/bench/tls_churn.sh [N]
#   TETHER_BIN     directory with tether-gateway (default build/release/bin)
#   BENCH_WORKERS  the gateway's --workers (default 2)
set -euo pipefail

SRC=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
TETHER_BIN=${TETHER_BIN:-$SRC/build/release/bin}
N=${1:-1000}
WORKERS=${BENCH_WORKERS:-2}
say() { printf '[tls_churn] %s\n' "$*" >&2; }
die() { say "error: $*"; exit 1; }
[[ $N =~ ^[1-9][0-9]*$ ]] || die "N must be a positive integer, got '$N'"
[ -x "$TETHER_BIN/tether-gateway" ] || die "$TETHER_BIN/tether-gateway missing: run 'make build'"
for tool in curl python3; do command -v "$tool" >/dev/null || die "$tool is required"; done

W=$(mktemp -d "${TMPDIR:-/tmp}/tether-churn.XXXXXX")
GW_PID=
cleanup() {
	local rc=$?
	[ -z "$GW_PID" ] || { kill -TERM "$GW_PID" 2>/dev/null; wait "$GW_PID" 2>/dev/null; }
	rm -rf "$W"
	exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
PORT=$(free_port) MP=$(free_port)
cp "$TETHER_BIN/tether-gateway" "$W/"
"$W/tether-gateway" init --data-dir "$W/gw" --url "https://127.0.0.1:$PORT" >"$W/init.log" 2>&1 || die "init failed"
"$W/tether-gateway" serve --data-dir "$W/gw" --listen "127.0.0.1:$PORT" --metrics-listen "127.0.0.1:$MP" \
	--workers "$WORKERS" --max-handshakes-per-source 1000000 --max-tls-per-source 1000000 \
	--max-connections-per-source 1000000 >"$W/gateway.log" 2>&1 &
GW_PID=$!
deadline=$((SECONDS + 20))
until curl -sf --cacert "$W/gw/ca.crt" "https://127.0.0.1:$PORT/readyz" >/dev/null 2>&1; do
	kill -0 "$GW_PID" 2>/dev/null || die "the gateway exited: $(tail -3 "$W/gateway.log")"
	[ "$SECONDS" -lt "$deadline" ] || die "gateway not ready after 20 s"
	sleep 0.05
done

fds() { find "/proc/$GW_PID/fd" -mindepth 1 -maxdepth 1 | wc -l; }
metric() { curl -sf "http://127.0.0.1:$MP/metrics" | awk -v m="$1" '$1 == m { print $2 }'; }
# at_rest: no TLS handshake under way and none waiting.
at_rest() { [ "$(metric tether_tls_handshakes_in_progress)" = 0 ] && [ "$(metric tether_tls_waiting)" = 0 ]; }
line() {
	printf '  %-12s %6s %10s %12s %10s\n' "$1" "$(fds)" "$(metric tether_tls_handshakes_in_progress)" \
		"$(metric tether_tls_waiting)" "$(metric tether_tls_shed_total)"
}
FD0=$(fds)
echo "tls_churn: $N connections of each kind to tether-gateway serve --workers $WORKERS ($("$W/tether-gateway" --version | head -1))"
printf '  %-12s %6s %10s %12s %10s\n' after fds "TLS slots" "TLS waiting" "TLS shed"
line start
for mode in silent reset half hello_close tls_ok; do
	python3 "$SRC/tests/bench/tls_churn.py" "$PORT" "$N" "$mode" >/dev/null
	deadline=$((SECONDS + 30))
	until at_rest && [ "$(fds)" -le "$FD0" ]; do
		[ "$SECONDS" -lt "$deadline" ] || break
		sleep 0.2
	done
	line "$mode"
done
if [ "$(fds)" -le "$FD0" ] && at_rest; then
	echo "kept nothing: descriptors $(fds) (at the start $FD0), no TLS slot held, none waiting"
else
	echo "KEPT: descriptors $(fds) (at the start $FD0), TLS slots $(metric tether_tls_handshakes_in_progress), waiting $(metric tether_tls_waiting)"
	exit 1
fi
