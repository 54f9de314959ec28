#!/usr/bin/env bash
# ws_throughput.sh: raw WebSocket throughput of common/wsclient.c on
# loopback, sending (masking) and receiving (parsing), over ws:// and wss://
# (TLS 1.3, P-256 certificate), for a few message sizes.  The other end is
# tests/tools/wsbench's minimal server, so the figures are the client's.
#
#   tests/bench/ws_throughput.sh [BIN_DIR] [BYTES] [RUNS]
#
# BIN_DIR holds wsbench (default build/release/bin: measure an optimised
# build, never the sanitizer one); BYTES per run (default 2 GiB); RUNS per
# case (default 3), all printed, since loopback figures on a shared machine
# vary by tens of percent.  MB/cpu-s (bytes per second of the client's own
# CPU time, user + system) varies much less than wall-clock MB/s and is the
# figure to compare.  Set WSBENCH_ENV (e.g. GLIBC_TUNABLES=...) to
# run the client under extra environment.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
bin=${1:-$here/../../build/release/bin}
bytes=${2:-2147483648}
runs=${3:-3}
wsbench=$bin/wsbench
[ -x "$wsbench" ] || { echo "no wsbench in $bin (build the wsbench target)" >&2; exit 2; }

T=$(mktemp -d "${TMPDIR:-/tmp}/ws-bench.XXXXXX")
server_pid=
cleanup() {
	[ -n "$server_pid" ] && kill "$server_pid" 2>/dev/null || true
	rm -rf "$T"
}
trap cleanup EXIT

openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 1 \
	-subj /CN=127.0.0.1 -addext subjectAltName=IP:127.0.0.1 \
	-keyout "$T/key.pem" -out "$T/cert.pem" 2>/dev/null

# one SCHEME SERVER_MODE CLIENT_MODE SIZE: prints the client's result line.
one() {
	local scheme=$1 smode=$2 cmode=$3 size=$4 port= tls=()
	[ "$scheme" = wss ] && tls=(--cert "$T/cert.pem" --key "$T/key.pem")
	rm -f "$T/server.out" # not a previous run's port
	"$wsbench" server --port 0 "${tls[@]}" --mode "$smode" --size "$size" \
		--bytes "$bytes" >"$T/server.out" 2>"$T/server.err" &
	server_pid=$!
	for _ in $(seq 100); do
		port=$(sed -n 's/^listening //p' "$T/server.out" 2>/dev/null)
		[ -n "$port" ] && break
		sleep 0.05
	done
	[ -n "$port" ] || { cat "$T/server.err" >&2; echo "server did not start" >&2; exit 1; }
	env ${WSBENCH_ENV:-} "$wsbench" client "$scheme://127.0.0.1:$port/" \
		--cacert "$T/cert.pem" --mode "$cmode" --size "$size" --bytes "$bytes"
	wait "$server_pid" || true
	server_pid=
}

row() { printf '%-6s %-5s %8s %12s %8s %8s %8s %9s\n' "$@"; }
row scheme mode size bytes seconds MB/s cpu-s MB/cpu-s
for scheme in ws wss; do
	for size in 16384 65536 262144; do
		for _ in $(seq "$runs"); do
			row "$scheme" $(one "$scheme" sink send "$size")
			row "$scheme" $(one "$scheme" source recv "$size")
		done
	done
done
