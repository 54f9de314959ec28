#!/usr/bin/env bash
# reconnect_storm.sh: how long N agents take to be all back and active after
# a gateway restart, and an established tunnel's ping round trip meanwhile.
#
# A benchmark, not a test: it reports figures and fails only if it cannot
# take them.  One gateway on loopback; N agents in one tether-swarm process
# (tests/bench/swarm.c: the agent's own tunnel code, its backoff with
# jitter) register and become active; one more swarm runs one probe agent
# that pings the gateway every 100 ms over its tunnel (--probe).  Then the
# gateway is stopped (SIGTERM: agents hear "shutdown" and redial after
# 250-500 ms) and started again on the same port and data directory, and the
# script reports:
#   - seconds from the new gateway's start (and from the stop) until the
#     swarm reports every agent active again;
#   - the probe tunnel's ping round trips (p50/p99/max) while the storm is on
#     and once it is over, beside the same before the restart;
#   - the gateway's and the swarm's CPU during the storm, the dials the
#     agents made, the TLS admission's figures (tether_tls_*) and how many
#     upgrades --max-handshakes answered 503.
#
# usage: tests/bench/reconnect_storm.sh [N]        (default 10000; run it
#        under flock(1) on a shared machine, one benchmark at a time)
#   TETHER_BIN       directory with the binaries (default build/release/bin)
#   BENCH_RATE       agents started per second for the first registration
#                    (default 400; the storm itself is all at once)
#   BENCH_GW_FLAGS   extra `serve` flags, e.g. "--max-tls-handshakes 8"
#   BENCH_WORKERS    the gateway's --workers (default: its own default); the
#                    report gives each loop's TLS handshakes and CPU seconds
#   BENCH_KEEP=1     keep the work directory
set -euo pipefail

SRC=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
TETHER_BIN=${TETHER_BIN:-$SRC/build/release/bin}
RATE=${BENCH_RATE:-400}
GW_FLAGS="${BENCH_GW_FLAGS:-}${BENCH_WORKERS:+ --workers $BENCH_WORKERS}"
KEEP=${BENCH_KEEP:-0}
N=${1:-10000}
COMMAND_LINE=
for v in TETHER_BIN BENCH_RATE BENCH_GW_FLAGS BENCH_WORKERS; do
	[ -z "${!v:-}" ] || COMMAND_LINE+="$v='${!v}' "
done
COMMAND_LINE+="$0${*:+ $*}"

say() { printf '[bench] %s\n' "$*" >&2; }
die() { say "error: $*"; exit 1; }
[[ $N =~ ^[1-9][0-9]*$ ]] || die "N must be a positive integer, got '$N'"
for b in tether-gateway tether-swarm tetherctl; do
	[ -x "$TETHER_BIN/$b" ] || die "$TETHER_BIN/$b missing: run 'make build' or set TETHER_BIN"
done
for tool in jq curl python3 bc; do
	command -v "$tool" >/dev/null || die "$tool is required"
done
ulimit -Sn "$(ulimit -Hn)"
[ "$(ulimit -Hn)" = unlimited ] || [ $((N + 300)) -le "$(ulimit -Hn)" ] ||
	die "$N agents do not fit in the open-files limit $(ulimit -Hn) of one process"

W=$(mktemp -d "${TMPDIR:-/tmp}/tether-storm.XXXXXX")
mkdir -p "$W/bin" "$W/logs"
cp "$TETHER_BIN/tether-gateway" "$TETHER_BIN/tether-swarm" "$TETHER_BIN/tetherctl" "$W/bin/"
GATEWAY=$W/bin/tether-gateway SWARM=$W/bin/tether-swarm CTL=$W/bin/tetherctl
GW_PID= SW_PID= PROBE_PID=

cleanup() {
	local rc=$?
	trap - EXIT INT TERM
	set +e
	for p in $SW_PID $PROBE_PID; do kill -TERM "$p" 2>/dev/null; wait "$p" 2>/dev/null; done
	[ -z "$GW_PID" ] || { kill -TERM "$GW_PID" 2>/dev/null; wait "$GW_PID" 2>/dev/null; }
	if [ "$KEEP" = 1 ]; then say "work directory kept: $W"; else rm -rf "$W"; fi
	exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

now_ms() { echo $(($(date +%s%N) / 1000000)); }
cpu_ticks() { awk '{ print $14 + $15 }' "/proc/$1/stat"; }
TICKS=$(getconf CLK_TCK)
PORT=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1]); s.close()')
URL=https://127.0.0.1:$PORT
GW_DIR=$W/gw
MP=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1]); s.close()')

gw_start() {
	# shellcheck disable=SC2086  # BENCH_GW_FLAGS is a list of flags
	"$GATEWAY" serve --data-dir "$GW_DIR" --listen "127.0.0.1:$PORT" \
		--metrics-listen "127.0.0.1:$MP" $GW_FLAGS >>"$W/logs/gateway.log" 2>&1 &
	GW_PID=$!
	local deadline=$((SECONDS + 30))
	until curl -sf --cacert "$GW_DIR/ca.crt" "$URL/readyz" >/dev/null 2>&1; do
		kill -0 "$GW_PID" 2>/dev/null || die "the gateway exited: $(tail -3 "$W/logs/gateway.log")"
		[ "$SECONDS" -lt "$deadline" ] || die "gateway not ready after 30 s"
		sleep 0.02
	done
}
# wait_line FILE AFTER_MS LIMIT_S: the ms of the first "swarm all_active"
# line of FILE later than AFTER_MS.
wait_line() {
	local deadline=$((SECONDS + $3)) ms
	while :; do
		ms=$(awk -v a="$2" '/^swarm all_active/ { sub("ms=", "", $3); if ($3 + 0 > a) { print $3; exit } }' "$1")
		[ -z "$ms" ] || { echo "$ms"; return 0; }
		[ "$SECONDS" -lt "$deadline" ] || return 1
		sleep 0.1
	done
}
# probe_stats FILE FROM_MS TO_MS: "n p50_max_ms p99_max_ms max_ms lost" of
# the probe lines in that window (per-interval p50/p99: the worst interval).
probe_stats() {
	awk -v a="$2" -v b="$3" '$1 == "swarm" && $2 ~ /^ms=/ {
		for (i = 2; i <= NF; i++) { split($i, kv, "="); f[kv[1]] = kv[2] }
		if (f["ms"] + 0 < a || f["ms"] + 0 > b) next
		n += f["probe_n"]; lost += f["probe_lost"]
		if (f["probe_p50_us"] > p50) p50 = f["probe_p50_us"]
		if (f["probe_p99_us"] > p99) p99 = f["probe_p99_us"]
		if (f["probe_max_us"] > mx) mx = f["probe_max_us"]
	} END { printf "%d %.1f %.1f %.1f %d\n", n, p50 / 1000, p99 / 1000, mx / 1000, lost }' "$1"
}
metric() { curl -sf "http://127.0.0.1:$MP/metrics" | awk -v m="$1" '$1 == m { print $2 }'; }

"$GATEWAY" init --data-dir "$GW_DIR" --url "$URL" >"$W/logs/init.out" 2>&1 || die "init failed"
export TETHER_SERVER=$URL TETHER_TOKEN_FILE=$GW_DIR/admin.token TETHER_CACERT=$GW_DIR/ca.crt
gw_start
CID=$("$CTL" -o json cluster create storm | jq -er .id)
"$CTL" -o json token create --cluster "$CID" --uses $((N + 1)) --ttl 1h >"$W/join.json"

say "registering $N agents at $RATE/s"
t0=$(now_ms)
"$SWARM" --join "$W/join.json" --ca-file "$GW_DIR/ca.crt" --agents "$N" --rate "$RATE" \
	--report-ms 500 >"$W/logs/swarm.out" 2>"$W/logs/swarm.log" &
SW_PID=$!
wait_line "$W/logs/swarm.out" 0 900 >/dev/null || die "not all active after 900 s: $(tail -1 "$W/logs/swarm.out")"
reg_s=$(echo "scale=1; ($(now_ms) - $t0) / 1000" | bc)
"$SWARM" --join "$W/join.json" --ca-file "$GW_DIR/ca.crt" --agents 1 --prefix probe --probe \
	--report-ms 500 >"$W/logs/probe.out" 2>"$W/logs/probe.log" &
PROBE_PID=$!
wait_line "$W/logs/probe.out" 0 60 >/dev/null || die "the probe agent is not active"
say "all $N active after ${reg_s}s; probing the idle gateway for 5 s"
idle_from=$(now_ms)
sleep 5
read -r idle_n idle_p50 idle_p99 idle_max idle_lost < <(probe_stats "$W/logs/probe.out" "$idle_from" "$(now_ms)")

say "restarting the gateway"
t_stop=$(now_ms)
kill -TERM "$GW_PID"
wait "$GW_PID" || true
t_down=$(now_ms)
dials0=$(tail -1 "$W/logs/swarm.out" | grep -o 'dials=[0-9]*' | cut -d= -f2)
s0=$(cpu_ticks "$SW_PID")
gw_start
t_up=$(now_ms)
g0=$(cpu_ticks "$GW_PID")
back_ms=$(wait_line "$W/logs/swarm.out" "$t_stop" 600) || die "not all back after 600 s: $(tail -1 "$W/logs/swarm.out")"
g1=$(cpu_ticks "$GW_PID") s1=$(cpu_ticks "$SW_PID")
dials1=$(tail -1 "$W/logs/swarm.out" | grep -o 'dials=[0-9]*' | cut -d= -f2)
probe_back=$(wait_line "$W/logs/probe.out" "$t_stop" 60) || probe_back=never
sleep 5
read -r st_n st_p50 st_p99 st_max st_lost < <(probe_stats "$W/logs/probe.out" "$t_up" "$back_ms")
read -r af_n af_p50 af_p99 af_max af_lost < <(probe_stats "$W/logs/probe.out" "$((back_ms + 500))" "$(now_ms)")
shed=$(metric tether_tls_shed_total) || shed=?
# Per loop (--workers), since the new start: "loop handshakes cpu_s" lines.
curl -sf "http://127.0.0.1:$MP/metrics" | awk '
	match($1, /^tether_loop_tls_handshakes_total\{loop="[0-9]+"\}$/) { split($1, a, "\""); h[a[2]] = $2 }
	match($1, /^tether_loop_cpu_seconds_total\{loop="[0-9]+"\}$/) { split($1, a, "\""); c[a[2]] = $2 }
	END { for (l in h) printf "%s %d %.1f\n", l, h[l], c[l] }' | sort -n >"$W/loops.txt" || true
refused=$(grep -c 'refusing a tunnel: too many handshakes' "$W/logs/gateway.log" || true)
storm_s=$(echo "scale=1; ($back_ms - $t_up) / 1000" | bc)
total_s=$(echo "scale=1; ($back_ms - $t_stop) / 1000" | bc)
gw_cpu=$(echo "scale=1; ($g1 - $g0) / $TICKS" | bc)
sw_cpu=$(echo "scale=1; ($s1 - $s0) / $TICKS" | bc)

{
	echo
	echo "Tether reconnect storm: $N agents (tether-swarm) after a gateway restart"
	echo "  command:  $COMMAND_LINE"
	echo "  binaries: $TETHER_BIN ($("$GATEWAY" --version | head -1))"
	echo "  machine:  $(nproc) CPUs, $(uname -sr), load average $(cut -d' ' -f1-3 /proc/loadavg)"
	echo "  serve flags: ${GW_FLAGS:-(defaults)}"
	echo
	echo "| figure | value |"
	echo "|---|---:|"
	echo "| agents | $N |"
	echo "| first registration at $RATE/s: all active after (s) | $reg_s |"
	echo "| gateway stop (SIGTERM until exit) (s) | $(echo "scale=1; ($t_down - $t_stop) / 1000" | bc) |"
	echo "| all active again, from the new gateway's start (s) | $storm_s |"
	echo "| all active again, from the stop (s) | $total_s |"
	echo "| probe tunnel back at (s after the new start) | $( [ "$probe_back" = never ] && echo never || echo "scale=1; ($probe_back - $t_up) / 1000" | bc) |"
	echo "| dials during the storm (per agent) | $((dials1 - dials0)) ($(echo "scale=2; ($dials1 - $dials0) / $N" | bc)) |"
	echo "| upgrades answered 503 (--max-handshakes) | $refused |"
	echo "| connections shed by the TLS queue (tether_tls_shed_total) | $shed |"
	echo "| gateway CPU during the storm (s) | $gw_cpu |"
	echo "| swarm CPU during the storm (s) | $sw_cpu |"
	while read -r l h c; do
		echo "| loop $l: TLS handshakes / CPU s since the new start | $h / $c |"
	done <"$W/loops.txt"
	echo
	echo "| probe tunnel ping round trip | pings | worst p50 (ms) | worst p99 (ms) | max (ms) | lost |"
	echo "|---|---:|---:|---:|---:|---:|"
	echo "| before the restart, idle | $idle_n | $idle_p50 | $idle_p99 | $idle_max | $idle_lost |"
	echo "| during the storm (probe back .. all active) | $st_n | $st_p50 | $st_p99 | $st_max | $st_lost |"
	echo "| after the storm | $af_n | $af_p50 | $af_p99 | $af_max | $af_lost |"
	echo
	echo "worst p50/p99: the highest of the per-500 ms figures in that window; lost: pings"
	echo "unanswered within 1 s."
}
