#!/usr/bin/env bash
# agent_footprint.sh: what one tether-client build costs a node, for several
# builds side by side against one gateway on loopback (docs/0025): file
# size, shared libraries, VmRSS and private memory (Private_Clean +
# Private_Dirty of /proc/PID/smaps_rollup) and anonymous memory of an idle
# connected agent, what
# an open idle stream adds (BENCH_STREAMS of them, default 100), and the
# stream throughput of two of them.  BENCH_SMAPS=DIR copies each agent's
# /proc/PID/smaps there when idle.
#
# A benchmark, not a test: it prints figures and fails only if it cannot set
# them up.  All builds run in ONE run, at the same time, so they compare.
#
# usage: tests/bench/agent_footprint.sh NAME=[RUNNER:]BIN...
#   NAME     a label (letters, digits, -) that is also the node's name
#   RUNNER   qemu-aarch64 or qemu-arm for a foreign binary (its figures
#            are then qemu's process, emulator included)
#   BENCH_THROUGHPUT="A B"  two NAMEs whose throughput is compared: iperf3,
#            1 stream each way, through `tetherctl forward` to each node,
#            BENCH_ROUNDS rounds (default 3) of BENCH_SECONDS (default 5)
#            alternating A and B; the median of each is reported
#   TETHER_BIN  the gateway and tetherctl (default build/release/bin)
#   BENCH_KEEP=1  keep the work directory
# example (the figures of docs/0025):
#   tests/bench/agent_footprint.sh before=/tmp/main-at-start/tether-client \
#     dynamic=build/release/bin/tether-client \
#     static=build/static/amd64/tether-client \
#     arm64=qemu-aarch64:build/static/arm64/tether-client \
#     armhf=qemu-arm:build/static/armhf/tether-client
set -euo pipefail

SRC=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
TETHER_BIN=${TETHER_BIN:-$SRC/build/release/bin}
GATEWAY=$TETHER_BIN/tether-gateway
CTL=$TETHER_BIN/tetherctl
SECS=${BENCH_SECONDS:-5}
ROUNDS=${BENCH_ROUNDS:-3}
KEEP=${BENCH_KEEP:-0}

say() { printf '[bench] %s\n' "$*" >&2; }
die() { say "error: $*"; exit 1; }

[ $# -gt 0 ] || die "usage: $0 NAME=[RUNNER:]BIN... (see the header)"
for tool in iperf3 jq curl readelf ss awk; do
	command -v "$tool" >/dev/null || die "$tool is required"
done

declare -A BIN RUNNER PID
NAMES=()
for arg in "$@"; do
	name=${arg%%=*} spec=${arg#*=}
	[[ $name =~ ^[a-z0-9-]+$ ]] || die "bad NAME in $arg"
	case $spec in
	qemu-aarch64:* | qemu-arm:*) RUNNER[$name]=${spec%%:*} BIN[$name]=${spec#*:} ;;
	*) RUNNER[$name]= BIN[$name]=$spec ;;
	esac
	[ -x "${BIN[$name]}" ] || die "${BIN[$name]} is not an executable"
	NAMES+=("$name")
done

W=$(mktemp -d "${TMPDIR:-/tmp}/tether-bench-footprint.XXXXXX")
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
		for f in "$W"/*.log; do
			[ -s "$f" ] && { echo "----- $f" >&2; tail -15 "$f" >&2; }
		done
	fi
	[ "$KEEP" = 1 ] && say "work directory kept: $W" || rm -rf "$W"
	exit "$rc"
}
trap cleanup EXIT INT TERM

free_port() {
	python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1]); s.close()'
}
wait_until() { # wait_until SECONDS WHAT CMD...
	local deadline=$((SECONDS + $1)) what=$2
	shift 2
	until "$@" >/dev/null 2>&1; do
		[ "$SECONDS" -lt "$deadline" ] || die "timed out waiting for: $what"
		sleep 0.1
	done
}
listening() { ss -Hltn "sport = :$1" | grep -q .; }
ctl() { "$CTL" -o json "$@"; }

# --- the gateway, an echo server, an iperf3 server --------------------------
GW_PORT=$(free_port)
"$GATEWAY" init --data-dir "$W/gw" --url "https://127.0.0.1:$GW_PORT" >"$W/init.log" 2>&1
# Budgets large enough for every build's streams at once (one admin token).
"$GATEWAY" serve --data-dir "$W/gw" --listen "127.0.0.1:$GW_PORT" \
	--stream-budget 4293918720 --admin-reserve 1048576 --principal-share 4290772992 \
	--tunnel-share 2147483648 >"$W/gateway.log" 2>&1 &
PIDS+=($!)
export TETHER_SERVER=https://127.0.0.1:$GW_PORT TETHER_TOKEN_FILE=$W/gw/admin.token \
	TETHER_CACERT=$W/gw/ca.crt
wait_until 20 "gateway" curl -sf --cacert "$W/gw/ca.crt" "$TETHER_SERVER/readyz"
cid=$(ctl cluster create footprint | jq -er .id)
python3 "$SRC/tests/integration/tcpserver.py" echo "$W/echo.port" >"$W/echo.log" 2>&1 &
PIDS+=($!)
wait_until 10 "echo server" test -s "$W/echo.port"
ECHO_PORT=$(cat "$W/echo.port")
IPERF_PORT=$(free_port)
iperf3 -s -B 127.0.0.1 -p "$IPERF_PORT" >"$W/iperf3-server.log" 2>&1 &
PIDS+=($!)
wait_until 10 "iperf3 server" listening "$IPERF_PORT"

# --- one node per build -------------------------------------------------------
# Each binary read from disk as at a node's boot: its clean pages dropped
# from the page cache first.  How a file got into the cache decides the
# size of its folios there (a file just written by strip or a compiler
# sits in large ones), and the kernel maps a whole folio where a fault
# hits one: the same binary measured 2,720 or 4,900 KiB idle (docs/0025).
for n in "${NAMES[@]}"; do
	python3 -c 'import os, sys
fd = os.open(sys.argv[1], os.O_RDONLY)
os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)' "${BIN[$n]}"
done
agent() { # agent NAME ARGS...: the build NAME, through its runner
	local n=$1
	shift
	${RUNNER[$n]:+"${RUNNER[$n]}"} "${BIN[$n]}" "$@"
}
for n in "${NAMES[@]}"; do
	ctl token create --cluster "$cid" >"$W/join-$n.json"
	agent "$n" join --state-dir "$W/n-$n" --node-name "$n" --allow "127.0.0.1:$ECHO_PORT" \
		--allow "127.0.0.1:$IPERF_PORT" <"$W/join-$n.json" >"$W/join-$n.log" 2>&1
	# A simple command, not the function: $! is then the agent (or qemu).
	${RUNNER[$n]:+"${RUNNER[$n]}"} "${BIN[$n]}" run --state-dir "$W/n-$n" \
		>"$W/agent-$n.log" 2>&1 &
	PID[$n]=$!
	PIDS+=($!)
done
active() {
	local id
	id=$(jq -er '.agent_id | select(. != "")' "$W/n-$1/state.json") || return 1
	ctl agent list | jq -e --arg id "$id" \
		'.[] | select(.id == $id and .state == "active" and .connected == true)' >/dev/null
}
for n in "${NAMES[@]}"; do
	wait_until 60 "$n active" active "$n"
done
# Idle: registration done, start-up memory released (2 s after active)
# and two rounds of pings (6 s apart) run since: what a ping touches is
# part of what an idle agent keeps.
sleep 15
if [ -n "${BENCH_SMAPS:-}" ]; then
	for n in "${NAMES[@]}"; do
		cp "/proc/${PID[$n]}/smaps" "$W/smaps-$n.txt"
	done
	cp "$W"/smaps-*.txt "$BENCH_SMAPS"/
fi

kib() { awk -v k="$2" '$1 == k":" { print $2 }' "$1"; }
rss() { kib "/proc/$1/status" VmRSS; }
private() { awk '/^Private_(Clean|Dirty):/ { s += $2 } END { print s }' "/proc/$1/smaps_rollup"; }
# Anonymous: what the process cannot give back to the page cache (heap,
# stack, written data); private minus this is clean pages of its files.
anon() { kib "/proc/$1/smaps_rollup" Anonymous; }
libs() { # the shared libraries the loader maps (ldd; for a foreign or static binary, NEEDED)
	local b=$1
	if ! readelf -dW "$b" | grep -q NEEDED; then
		echo 0
	elif [ -n "$2" ]; then
		readelf -dW "$b" | grep -c NEEDED
	else
		ldd "$b" | grep -c '=> /'
	fi
}
declare -A RSS0 PRIV0 ANON0
echo
echo "tether-client builds, idle and connected (one gateway, $(date -u +%FT%TZ), $(nproc) cores)"
printf '%-9s %10s %6s %10s %12s %9s  %s\n' build bytes libs "VmRSS KiB" "private KiB" "anon KiB" binary
for n in "${NAMES[@]}"; do
	RSS0[$n]=$(rss "${PID[$n]}") PRIV0[$n]=$(private "${PID[$n]}") ANON0[$n]=$(anon "${PID[$n]}")
	printf '%-9s %10s %6s %10s %12s %9s  %s%s\n' "$n" "$(stat -c %s "${BIN[$n]}")" \
		"$(libs "${BIN[$n]}" "${RUNNER[$n]}")" "${RSS0[$n]}" "${PRIV0[$n]}" "${ANON0[$n]}" \
		"${RUNNER[$n]:+${RUNNER[$n]} }" "${BIN[$n]}"
done

# --- open idle streams ---------------------------------------------------------
# BENCH_STREAMS (default 100) connections per node through one `tetherctl
# forward` to the echo server, each with 4 bytes echoed, then held open: the
# figure is the growth divided by the count (one stream alone is below the
# 4 KiB page that RSS counts in), from the anonymous growth: the code the
# streams run is mapped back once (runtime_release_startup), not per stream.
NSTREAMS=${BENCH_STREAMS:-100}
declare -A HOLD
for n in "${NAMES[@]}"; do
	port=$(free_port)
	"$CTL" forward --cluster "$cid" --node "$n" "127.0.0.1:$port:127.0.0.1:$ECHO_PORT" \
		>"$W/forward-echo-$n.log" 2>&1 &
	PIDS+=($!)
	wait_until 20 "forward to $n's echo" listening "$port"
	mkfifo "$W/hold-$n"
	python3 -c '
import socket, sys
port, n, ready = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
socks = []
for _ in range(n):
    s = socket.create_connection(("127.0.0.1", port), 10)
    s.sendall(b"ping")
    got = b""
    while len(got) < 4:
        got += s.recv(4 - len(got))
    socks.append(s)
open(ready, "w").write("held\n")
sys.stdin.read()
' "$port" "$NSTREAMS" "$W/held-$n" <"$W/hold-$n" >"$W/hold-$n.log" 2>&1 &
	PIDS+=($!)
	exec {fd}>"$W/hold-$n"
	HOLD[$n]=$fd
	wait_until 60 "$NSTREAMS streams through $n" test -s "$W/held-$n"
done
sleep 3
echo
echo "$NSTREAMS open idle streams per node (tetherctl forward to an echo server, 4 bytes each way)"
printf '%-9s %14s %16s %14s %18s\n' build "VmRSS +KiB" "private +KiB" "anon +KiB" "per stream, KiB"
for n in "${NAMES[@]}"; do
	dr=$(($(rss "${PID[$n]}") - RSS0[$n])) dp=$(($(private "${PID[$n]}") - PRIV0[$n]))
	da=$(($(anon "${PID[$n]}") - ANON0[$n]))
	printf '%-9s %14s %16s %14s %18s\n' "$n" "$dr" "$dp" "$da" "$(awk -v a="$da" -v n="$NSTREAMS" 'BEGIN { printf "%.1f", a / n }')"
done

# --- throughput of two builds -------------------------------------------------
[ -n "${BENCH_THROUGHPUT:-}" ] || exit 0
read -r A B <<<"$BENCH_THROUGHPUT"
declare -A FWD
for n in "$A" "$B"; do
	[ -n "${PID[$n]:-}" ] || die "BENCH_THROUGHPUT names $n, not a build here"
	FWD[$n]=$(free_port)
	"$CTL" forward --cluster "$cid" --node "$n" "127.0.0.1:${FWD[$n]}:127.0.0.1:$IPERF_PORT" \
		>"$W/forward-$n.log" 2>&1 &
	PIDS+=($!)
	wait_until 20 "forward to $n" listening "${FWD[$n]}"
done
declare -A RES
for ((r = 1; r <= ROUNDS; r++)); do
	for dir in up down; do
		rev=()
		[ "$dir" = down ] && rev=(-R)
		for n in "$A" "$B"; do
			iperf3 -c 127.0.0.1 -p "${FWD[$n]}" -t "$SECS" -J "${rev[@]}" \
				>"$W/iperf-$n-$dir-$r.json" || die "iperf3 through $n failed"
			RES[$n-$dir]+="$(jq -r '.end.sum_received.bits_per_second' "$W/iperf-$n-$dir-$r.json") "
		done
	done
done
median() { tr ' ' '\n' | grep . | sort -g | awk '{ v[NR] = $1 } END { print v[int((NR + 1) / 2)] }'; }
echo
echo "stream throughput, iperf3 1 stream, ${SECS}s x $ROUNDS rounds alternating (median, Gbit/s)"
printf '%-28s %10s %10s %8s\n' direction "$A" "$B" "$B/$A"
for dir in up down; do
	a=$(median <<<"${RES[$A-$dir]}") b=$(median <<<"${RES[$B-$dir]}")
	awk -v d="$([ $dir = up ] && echo 'operator -> node' || echo 'node -> operator (-R)')" \
		-v a="$a" -v b="$b" 'BEGIN { printf "%-28s %10.2f %10.2f %8.3f\n", d, a / 1e9, b / 1e9, b / a }'
done
