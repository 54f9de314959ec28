#!/usr/bin/env bash
# hello_stall.sh: does the gateway judge a tunnel's HELLO deadline before
# reading what already arrived?  A loop that stalls (a busy machine, a long
# pass) past --hello-timeout sees the deadline and the bytes at once; the
# bytes came in time.  tlsloop.c reads first since 1abd91b for the TLS
# handshake's deadlines; this checks the tunnel's HELLO (agents/session.c).
#
# One gateway on loopback (--workers BENCH_WORKERS, default 2), then for
# each stall in BENCH_STALLS (default "1.0 2.5" seconds; --hello-timeout is
# 2 s), N upgrades (default 10) by tests/bench/hello_stall.py: the 101
# read, the gateway stopped (SIGSTOP), one frame sent (no HELLO: the
# gateway must call it malformed), the gateway resumed after the stall.
# Prints per stall how the gateway ended the N tunnels (its log): "read"
# (malformed, the frame was read) or "deadline first" (no HELLO within).
# Exit 1 if any stall gave "deadline first".
#
# A benchmark's check, not a test (it stops the gateway with signals).
# usage: tests/bench/hello_stall.sh [N]
#   TETHER_BIN     directory with tether-gateway (default build/release/bin)
set -euo pipefail

SRC=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
TETHER_BIN=${TETHER_BIN:-$SRC/build/release/bin}
N=${1:-10}
WORKERS=${BENCH_WORKERS:-2}
STALLS=${BENCH_STALLS:-1.0 2.5}
say() { printf '[hello_stall] %s\n' "$*" >&2; }
die() { say "error: $*"; exit 1; }
[[ $N =~ ^[1-9][0-9]*$ ]] || die "N must be a positive integer, got '$N'"
[ -x "$TETHER_BIN/tether-gateway" ] || die "$TETHER_BIN/tether-gateway missing: run 'make build'"
for tool in curl python3; do command -v "$tool" >/dev/null || die "$tool is required"; done

W=$(mktemp -d "${TMPDIR:-/tmp}/tether-hello-stall.XXXXXX")
GW_PID=
cleanup() {
	local rc=$?
	if [ -n "$GW_PID" ]; then
		kill -CONT "$GW_PID" 2>/dev/null
		kill -TERM "$GW_PID" 2>/dev/null
		wait "$GW_PID" 2>/dev/null
	fi
	rm -rf "$W"
	exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

PORT=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
cp "$TETHER_BIN/tether-gateway" "$W/"
"$W/tether-gateway" init --data-dir "$W/gw" --url "https://127.0.0.1:$PORT" >"$W/init.log" 2>&1 || die "init failed"
"$W/tether-gateway" serve --data-dir "$W/gw" --listen "127.0.0.1:$PORT" --workers "$WORKERS" >"$W/gateway.log" 2>&1 &
GW_PID=$!
deadline=$((SECONDS + 20))
until curl -sf --cacert "$W/gw/ca.crt" "https://127.0.0.1:$PORT/readyz" >/dev/null 2>&1; do
	kill -0 "$GW_PID" 2>/dev/null || die "the gateway exited: $(tail -3 "$W/gateway.log")"
	[ "$SECONDS" -lt "$deadline" ] || die "gateway not ready after 20 s"
	sleep 0.05
done

echo "hello_stall: $N tunnel upgrades per stall, one frame sent while the gateway is stopped"
echo "  gateway: tether-gateway serve --workers $WORKERS ($("$W/tether-gateway" --version | head -1)), --hello-timeout default"
bad=0
for stall in $STALLS; do
	before=$(wc -l <"$W/gateway.log")
	python3 "$SRC/tests/bench/hello_stall.py" "$PORT" "$GW_PID" "$stall" "$N" >/dev/null
	sleep 0.3
	read_n=$(tail -n +$((before + 1)) "$W/gateway.log" | grep -c 'phase=await-hello code=malformed' || true)
	late_n=$(tail -n +$((before + 1)) "$W/gateway.log" | grep -c 'no HELLO within' || true)
	echo "  stalled ${stall} s: read $read_n, deadline first $late_n (of $N)"
	[ "$late_n" -eq 0 ] || bad=1
done
if [ "$bad" = 0 ]; then
	echo "the frame was read before the deadline was judged at every stall"
else
	echo "DEADLINE FIRST: a frame in the socket before the HELLO deadline was not read before it was judged"
	exit 1
fi
