#!/usr/bin/env bash
# scale_speed.sh: every figure of the scale-and-speed goals in ONE run, for
# one or more builds side by side (e.g. the previous release and this one).
#
# A benchmark, not a test: it reports figures and fails only if one of the
# benchmarks it runs cannot take its measurements.  For each build, one
# after the other, it runs:
#   throughput.sh       stream throughput beside the OpenSSH chain (1 and 8
#                       streams, up and down) and CPU s per GiB of the relays
#   k8s_proxy.sh        requests/s and p99 through /k8s/clusters/ID beside
#                       nginx, plain and --service-token
#   idle_tunnels.sh     the gateway's KiB and CPU per idle tunnel (tether-swarm)
#   reconnect_storm.sh  N agents back and active after a gateway restart, and
#                       an established tunnel's ping round trip meanwhile
# then prints one table: each headline figure, its goal, and every build's
# value.  Each benchmark's whole report is kept in the output directory.
#
# usage: tests/bench/scale_speed.sh [NAME=BINDIR ...]
#        (default: this=build/release/bin; run it under flock(1) on a
#        shared machine, one benchmark at a time)
#   BENCH_OUT        directory for the reports (default: a new mktemp -d,
#                    kept and printed at the end)
#   BENCH_ONLY       a subset of "throughput k8s idle storm" (default all)
#   BENCH_TUNNELS    idle_tunnels.sh's counts (default "5000 19800", capped
#                    by the open-files limit as idle_tunnels.sh does)
#   BENCH_STORM      reconnect_storm.sh's agents (default 10000)
#   BENCH_RATE       registration rate of the swarms (default 250/s)
#   BENCH_LOOPS      the gateway's --workers values to run each build at
#                    (default "1 N", N the CPUs here: 1 loop against N in
#                    one run; one column each, NAME@Nl)
#   BENCH_SECONDS, BENCH_CONNECTIONS, BENCH_WRK_ARGS, BENCH_PING_WINDOW are
#   passed on to the benchmarks (see tests/bench/README.md).
set -u -o pipefail

HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
say() { printf '[scale_speed] %s\n' "$*" >&2; }
die() { say "$*"; exit 1; }

BUILDS=("$@")
[ ${#BUILDS[@]} -gt 0 ] || BUILDS=("this=$ROOT/build/release/bin")
ONLY=${BENCH_ONLY:-throughput k8s idle storm}
TUNNELS=${BENCH_TUNNELS:-5000 19800}
STORM=${BENCH_STORM:-10000}
export BENCH_RATE=${BENCH_RATE:-250}
export BENCH_PRIVATE_NAMES=1
export BENCH_SECONDS=${BENCH_SECONDS:-5}
export BENCH_CONNECTIONS=${BENCH_CONNECTIONS:-200}
export BENCH_PING_WINDOW=${BENCH_PING_WINDOW:-40}
OUT=${BENCH_OUT:-$(mktemp -d -t tether-scale-speed.XXXXXX)}
mkdir -p "$OUT" || die "cannot make $OUT"

LOOPS=${BENCH_LOOPS:-$( [ "$(nproc)" -gt 1 ] && echo "1 $(nproc)" || echo 1)}
NAMES=()
declare -A BIN WORKERS
for b in "${BUILDS[@]}"; do
	case $b in
	*=*) name=${b%%=*} dir=${b#*=} ;;
	*) die "usage: $0 [NAME=BINDIR ...] (got '$b')" ;;
	esac
	[ -x "$dir/tether-gateway" ] && [ -x "$dir/tether-swarm" ] ||
		die "$dir has no tether-gateway and tether-swarm: build it first (make build)"
	for l in $LOOPS; do
		[[ $l =~ ^[1-9][0-9]*$ ]] || die "BENCH_LOOPS: not a number: '$l'"
		NAMES+=("$name@${l}l")
		BIN[$name@${l}l]=$(cd "$dir" && pwd)
		WORKERS[$name@${l}l]=$l
	done
done

wants() { [[ " $ONLY " == *" $1 "* ]]; }

# run NAME BENCH ARGS...: one benchmark for one build; the report is kept.
FAILED=()
run() {
	local name=$1 bench=$2 log
	shift 2
	log="$OUT/$name.$bench.txt"
	say "$name: $bench $* -> $log"
	if ! TETHER_BIN=${BIN[$name]} BENCH_WORKERS=${WORKERS[$name]} \
	    bash "$HERE/$bench.sh" "$@" >"$log" 2>"$log.err"; then
		FAILED+=("$name $bench (see $log.err)")
	fi
}

T0=$(date +%s)
for name in "${NAMES[@]}"; do
	wants throughput && run "$name" throughput
	wants k8s && run "$name" k8s_proxy
	# shellcheck disable=SC2086 # the counts are words
	wants idle && run "$name" idle_tunnels $TUNNELS
	wants storm && run "$name" reconnect_storm "$STORM"
done
ELAPSED=$(($(date +%s) - T0))

# --- the headline figures, read back from the reports -------------------
# tput NAME COLUMN: throughput.sh's ratio to the OpenSSH chain (columns 1-4:
# 1 up, 1 down, 8 up, 8 down) or "cpu": CPU s/GiB of all relays (vs chain).
tput() {
	local f="$OUT/$1.throughput.txt"
	[ -f "$f" ] || { echo "-"; return; }
	if [ "$2" = cpu ]; then
		awk -F'|' '/^\| Tether/ && /s\/GiB \(/ { gsub(/^ +| +$/, "", $6); print $6; exit }' "$f"
	else
		awk -F'|' -v c="$2" '/^\| Tether/ && /x \/ / { v = $(c + 2); sub(/ \/.*/, "", v); gsub(/ /, "", v); print v; exit }' "$f"
	fi
}
# k8s NAME WHICH: "tether" or "tether-token": requests/s and p99 vs nginx
k8s() {
	local f="$OUT/$1.k8s_proxy.txt"
	[ -f "$f" ] || { echo "-"; return; }
	awk -v w="$2/nginx:" '$1 == w { r = $3; p = $5; sub(/,$/, "", r); print r " / p99 " p; exit }' "$f"
}
# idle NAME FIELD: the largest step's KiB per idle tunnel (5) or gateway
# CPU % of a core (8), or "per50k": that CPU extrapolated to 50,000 tunnels
idle() {
	local f="$OUT/$1.idle_tunnels.txt"
	[ -f "$f" ] || { echo "-"; return; }
	awk -F'|' -v k="$2" '/^\| [0-9]+ \|/ { n = $2 + 0; kib = $6 + 0; cpu = $9 + 0 }
		END { if (!n) { print "-"; exit }
		      if (k == "per50k") printf "%.2f %% (%.2f %% at %d)\n", cpu * 50000 / n, cpu, n
		      else if (k == "kib") printf "%.1f (at %d)\n", kib, n
		      else print n }' "$f"
}
# storm NAME WHAT: "back": seconds until all active from the new start;
# "ping": the probe's worst p50 / max during the storm
storm() {
	local f="$OUT/$1.reconnect_storm.txt"
	[ -f "$f" ] || { echo "-"; return; }
	case $2 in
	back) awk -F'|' '/from the new gateway.s start/ { gsub(/^ +| +$/, "", $3); print $3 " s"; exit }' "$f" ;;
	loops) awk -F'|' '/^\| loop [0-9]+: TLS handshakes/ { split($2, a, " "); sub(/:$/, "", a[2]); sub(/ \/.*/, "", $3); gsub(/ /, "", $3)
		printf "%s%s: %s", (n++ ? ", " : ""), a[2], $3 } END { print (n ? "" : "-") }' "$f" ;;
	ping) awk -F'|' '/: during \(probe back/ { gsub(/ /, "", $4); gsub(/ /, "", $6); gsub(/ /, "", $7)
		print "p50 " $4 " / max " $6 " ms, lost " $7; exit }' "$f" ;;
	tunnels) awk -F'|' '/^\| loop [0-9]+: TLS handshakes/ { split($2, a, " "); sub(/:$/, "", a[2]); n3 = split($3, v, "/"); t = v[n3]; gsub(/ /, "", t)
		printf "%s%s: %s", (n++ ? ", " : ""), a[2], t } END { print (n ? "" : "-") }' "$f" ;;
	esac
}
# loops NAME BENCH: each loop's CPU seconds during the benchmark's headline
# run (throughput: 8 streams up; k8s: the tether-wN path), and the streams
# that crossed between loops.
loops() {
	local f="$OUT/$1.$2.txt" line
	[ -f "$f" ] || { echo "-"; return; }
	case $2 in
	throughput) line=$(grep -m1 '^  up8 *CPU s per loop:' "$f") ;;
	k8s_proxy) line=$(grep -m1 "^    tether-w${WORKERS[$1]} *CPU s per loop:" "$f") ;;
	esac
	[ -n "$line" ] || { echo "-"; return; }
	sed -E 's/.*CPU s per loop: *//; s/ +crossings: */; crossings: /' <<<"$line"
}

row() { # row FIGURE GOAL FUNC ARGS...
	local figure=$1 goal=$2 line name
	shift 2
	line="| $figure | $goal |"
	for name in "${NAMES[@]}"; do line+=" $("$1" "$name" "${@:2}") |"; done
	echo "$line"
}

{
	echo "Tether scale and speed: one run of tests/bench/scale_speed.sh ($((ELAPSED / 60)) min)"
	echo "  machine: $(nproc) CPUs ($(awk -F': ' '/^model name/ { print $2; exit }' /proc/cpuinfo)), $(uname -sr), load at the end $(cut -d' ' -f1-3 /proc/loadavg)"
	for name in "${NAMES[@]}"; do
		echo "  $name: ${BIN[$name]} ($("${BIN[$name]}/tether-gateway" --version 2>/dev/null | head -1))"
	done
	echo "  settings: BENCH_SECONDS=$BENCH_SECONDS BENCH_CONNECTIONS=$BENCH_CONNECTIONS BENCH_RATE=$BENCH_RATE BENCH_PING_WINDOW=$BENCH_PING_WINDOW tunnels '$TUNNELS' storm $STORM"
	echo "  reports: $OUT"
	echo
	hdr="| figure | goal |"
	sep="|---|---|"
	for name in "${NAMES[@]}"; do hdr+=" $name |"; sep+="---:|"; done
	echo "$hdr"
	echo "$sep"
	if wants throughput; then
		row "1 stream up, x the OpenSSH chain" ">= 1.5x" tput 1
		row "1 stream down" ">= 1.5x" tput 2
		row "8 streams up" ">= 1.5x" tput 3
		row "8 streams down" ">= 1.5x" tput 4
		row "CPU s per GiB, all relays (x the chain's)" "half" tput cpu
		row "the gateway's loops, 8 streams up: CPU s per loop" "(reported)" loops throughput
	fi
	if wants k8s; then
		row "k8s proxy requests/s, x nginx (p99 x nginx's)" ">= 0.7x (p99 <= 1.5x)" k8s tether
		row "the same, --service-token" ">= 0.7x (p99 <= 1.5x)" k8s tether-token
		row "the gateway's loops during the k8s run: CPU s per loop" "(reported)" loops k8s_proxy
	fi
	if wants idle; then
		row "KiB per idle tunnel" "<= 16" idle kib
		row "gateway CPU pinging idle tunnels, % of a core at 50,000 (linear)" "< 5 %" idle per50k
	fi
	if wants storm; then
		row "$STORM agents all active after a restart" "<= 30 s" storm back
		row "an established tunnel's ping during the storm" "(reported)" storm ping
		row "TLS handshakes per loop during the storm" "(reported)" storm loops
		row "tunnels per loop once all were back" "(reported)" storm tunnels
	fi
	if [ ${#FAILED[@]} -gt 0 ]; then
		echo
		for f in "${FAILED[@]}"; do echo "INCOMPLETE: $f"; done
	fi
} | tee "$OUT/summary.md"

[ ${#FAILED[@]} -eq 0 ]
