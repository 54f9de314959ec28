#!/usr/bin/env bash
# throughput_profile.sh: where a forwarded stream's CPU goes, per relay.
#
# Sets up the Tether path of throughput.sh only (iperf3 server <- agent <-
# gateway <- tetherctl forward) and, for 1 stream and then 8 (-P 8), runs
# iperf3 up (operator -> node) while
#   - `perf record -g` samples the three relays (the report lists each
#     process's top symbols, self time, and libcrypto's share), and
#   - `perf stat` counts their syscalls on the syscall tracepoints (read,
#     write, readv, writev, sendto, recvfrom, epoll_wait, epoll_ctl), per GiB
# then prints CPU s per GiB of each relay from /proc/PID/stat.
# A benchmark, not a test: it reports and fails only if it cannot set up.
# Needs root (or perf_event_paranoid <= 1) and linux-perf (config/setup.sh).
#
# usage: tests/bench/throughput_profile.sh
#   TETHER_BIN     binaries (default build/release/bin)
#   BENCH_SECONDS  seconds per measured run (default 4)
#   BENCH_STREAMS  the stream counts to profile (default "1 8")
#   BENCH_TOP      symbols listed per process (default 14)
#   BENCH_CALLGRAPH  perf record --call-graph mode (default fp; dwarf shows
#                  who calls into libc and libcrypto, at a higher cost)
#   BENCH_KEEP=1   keep the work directory (perf.data files, logs)
#   BENCH_WORKERS  the gateway's --workers (default: its own, the CPUs)
set -euo pipefail

SRC=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
TETHER_BIN=${TETHER_BIN:-$SRC/build/release/bin}
SECS=${BENCH_SECONDS:-4}
STREAMS=${BENCH_STREAMS:-1 8}
TOP=${BENCH_TOP:-14}
CALLGRAPH=${BENCH_CALLGRAPH:-fp}   # perf record --call-graph: fp, or dwarf for callers through libc
KEEP=${BENCH_KEEP:-0}
WORKERS=${BENCH_WORKERS:-}
PY=/usr/bin/python3
TCPSERVER=$SRC/tests/integration/tcpserver.py

say() { printf '[profile] %s\n' "$*" >&2; }
die() { say "error: $*"; exit 1; }

for tool in perf iperf3 jq curl ss; do
	command -v "$tool" >/dev/null || die "$tool is required (config/setup.sh installs it)"
done
[[ $SECS =~ ^[1-9][0-9]*$ ]] || die "BENCH_SECONDS must be a positive integer"
[[ -z $WORKERS || $WORKERS =~ ^[1-9][0-9]*$ ]] || die "BENCH_WORKERS must be a positive integer"

W=$(mktemp -d "${TMPDIR:-/tmp}/tether-profile.XXXXXX")
PIDS=()
cleanup() {
	local rc=$? i
	trap - EXIT INT TERM
	set +e
	for ((i = ${#PIDS[@]} - 1; i >= 0; i--)); do
		kill -TERM "${PIDS[$i]}" 2>/dev/null
	done
	wait 2>/dev/null
	if [ "$rc" -ne 0 ]; then
		for f in "$W"/logs/*.log; do
			[ -s "$f" ] && { echo "----- $f" >&2; tail -15 "$f" >&2; }
		done
	fi
	if [ "$KEEP" = 1 ]; then say "work directory kept: $W"; else rm -rf "$W"; fi
	exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM
mkdir -p "$W/logs" "$W/bin"
# Copies under private names: a rebuild, or another session's pkill by
# name, does not touch them.
cp "$TETHER_BIN/tether-gateway" "$W/bin/prof-gw"
cp "$TETHER_BIN/tether-client" "$W/bin/prof-agent"
cp "$TETHER_BIN/tetherctl" "$W/bin/prof-ctl"
GATEWAY=$W/bin/prof-gw CLIENT=$W/bin/prof-agent CTL=$W/bin/prof-ctl

free_port() {
	"$PY" -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1]); s.close()'
}
listening() { [ -n "$(ss -Hltn "sport = :$1")" ]; }
wait_until() {
	local limit=$1 what=$2
	shift 2
	local deadline=$((SECONDS + limit))
	until "$@" >/dev/null 2>&1; do
		[ "$SECONDS" -lt "$deadline" ] || die "timed out waiting for: $what"
		sleep 0.05
	done
}
start() {
	local log=$1
	shift
	"$@" >>"$W/logs/$log" 2>&1 &
	LAST_PID=$!
	PIDS+=("$LAST_PID")
}

IPERF_PORT=$(free_port)
start iperf3.log iperf3 -s -B 127.0.0.1 -p "$IPERF_PORT"
wait_until 10 "iperf3 server" listening "$IPERF_PORT"

GW_PORT=$(free_port)
GW_URL=https://127.0.0.1:$GW_PORT
"$GATEWAY" init --data-dir "$W/gw" --url "$GW_URL" >"$W/logs/init.log" 2>&1 || die "gateway init failed"
export TETHER_SERVER=$GW_URL TETHER_TOKEN_FILE=$W/gw/admin.token TETHER_CACERT=$W/gw/ca.crt
start gateway.log "$GATEWAY" serve --data-dir "$W/gw" --listen "127.0.0.1:$GW_PORT" \
	${WORKERS:+--workers "$WORKERS"}
GW_PID=$LAST_PID
wait_until 20 "gateway ready" curl -sf --cacert "$W/gw/ca.crt" "$GW_URL/readyz"
CID=$("$CTL" -o json cluster create prof | jq -er .id) || die "cluster create failed"
"$CTL" -o json token create --cluster "$CID" >"$W/join.json" || die "token create failed"
"$CLIENT" join --state-dir "$W/node" --node-name node --allow "127.0.0.1:$IPERF_PORT" \
	<"$W/join.json" >"$W/logs/join.log" 2>&1 || die "join failed"
start agent.log "$CLIENT" run --state-dir "$W/node"
AGENT_PID=$LAST_PID
agent_active() {
	local id
	id=$(jq -er '.agent_id | select(. != "")' "$W/node/state.json") || return 1
	"$CTL" -o json agent list | jq -e --arg id "$id" \
		'.[] | select(.id == $id and .state == "active" and .connected == true)' >/dev/null
}
wait_until 30 "agent active" agent_active
FWD_PORT=$(free_port)
start forward.log "$CTL" forward --cluster "$CID" --node node "127.0.0.1:$FWD_PORT:127.0.0.1:$IPERF_PORT"
FWD_PID=$LAST_PID
wait_until 20 "forward listening" listening "$FWD_PORT"
# One short unmeasured run: the tunnel and the forward's WebSocket are up.
iperf3 -c 127.0.0.1 -p "$FWD_PORT" -t 1 >/dev/null 2>&1 || die "iperf3 through the forward failed"

# Counted, not traced: perf stat on the syscall tracepoints costs little,
# where perf trace's per-event records would dwarf what they measure.
SYSCALLS="read write readv writev sendto recvfrom epoll_wait epoll_ctl"
SYSCALL_EVENTS=$(for s in $SYSCALLS; do printf 'syscalls:sys_enter_%s,' "$s"; done)
SYSCALL_EVENTS=${SYSCALL_EVENTS%,}
declare -A ROLE=([$FWD_PID]="tetherctl forward" [$GW_PID]="tether-gateway" [$AGENT_PID]="tether-client run")
RELAYS=("$FWD_PID" "$GW_PID" "$AGENT_PID")
ticks() { awk '{ sub(/^.*\) /, ""); print $12 + $13 }' "/proc/$1/stat"; }
HZ=$(getconf CLK_TCK)

echo "Where the CPU goes: iperf3 up through tetherctl forward -> gateway -> agent (loopback)"
echo "  binaries: $TETHER_BIN ($("$GATEWAY" --version 2>/dev/null | head -1))"
echo "  machine:  $(nproc) CPUs, $(uname -sr), load $(cut -d' ' -f1-3 /proc/loadavg)"
echo "  gateway:  --workers ${WORKERS:-(its default)}"
for n in $STREAMS; do
	declare -A T0=()
	for p in "${RELAYS[@]}"; do T0[$p]=$(ticks "$p"); done
	pr=()
	for p in "${RELAYS[@]}"; do
		perf record -q --call-graph "$CALLGRAPH" -o "$W/perf.$n.$p" -p "$p" -- sleep "$SECS" >"$W/logs/perf.$n.$p.log" 2>&1 &
		pr+=($!)
		perf stat -x, -o "$W/stat.$n.$p" -e "$SYSCALL_EVENTS" -p "$p" -- sleep "$SECS" >/dev/null 2>&1 &
		pr+=($!)
	done
	iperf3 -c 127.0.0.1 -p "$FWD_PORT" -P "$n" -t "$SECS" -J >"$W/iperf.$n.json" 2>"$W/iperf.$n.err" ||
		die "iperf3 -P $n failed: $(cat "$W/iperf.$n.err")"
	wait "${pr[@]}" 2>/dev/null || true
	bytes=$(jq '.end.sum_received.bytes' "$W/iperf.$n.json")
	gbps=$(jq '.end.sum_received.bits_per_second / 1e9' "$W/iperf.$n.json")
	echo
	echo "== $n stream(s): $(printf '%.2f' "$gbps") Gbit/s, $(awk -v b="$bytes" 'BEGIN { printf "%.2f", b / 2^30 }') GiB in ${SECS}s (iperf3 -c -P $n -t $SECS)"
	for p in "${RELAYS[@]}"; do
		t=$(( $(ticks "$p") - ${T0[$p]} ))
		echo
		echo "-- ${ROLE[$p]}: $(awk -v t="$t" -v hz="$HZ" -v b="$bytes" 'BEGIN { printf "%.2f", t / hz / (b / 2^30) }') CPU s/GiB"
		echo "   top symbols (self %, perf report --no-children):"
		perf report -i "$W/perf.$n.$p" --no-children --sort dso,sym --stdio 2>/dev/null |
			grep -E '^ +[0-9.]+%' | sed 's/^/   /' | head -"$TOP" || true
		echo "   by library (self %):"
		perf report -i "$W/perf.$n.$p" --no-children --sort dso --stdio 2>/dev/null |
			grep -E '^ +[0-9.]+%' | sed 's/^/   /' | head -6 || true
		echo "   syscalls (perf stat): calls, and calls per GiB moved"
		awk -F, -v b="$bytes" '$3 ~ /sys_enter_/ { n = $3; sub(/.*sys_enter_/, "", n)
			printf "   %-11s %8d  %8.0f /GiB\n", n, $1, $1 / (b / 2^30) }' "$W/stat.$n.$p"
	done
done
