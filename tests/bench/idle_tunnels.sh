#!/usr/bin/env bash
# idle_tunnels.sh: the gateway's resident memory and CPU per idle tunnel,
# with thousands of real agents from tether-swarm (tests/bench/swarm.c).
#
# A benchmark, not a test: it reports figures and fails only if it cannot
# take them.  One gateway on loopback, one cluster, one multi-use import
# token.  Agents are added in steps (default 1000 -> 5000 -> as many as the
# open-files limit lets one gateway hold), each step one more tether-swarm
# process (a process holds at most the hard limit of descriptors).  After a
# step, once every agent is active and the gateway's VmRSS has settled, it
# reports the gateway's RSS over the baseline (no agent) per tunnel, then
# measures the gateway's and the swarms' CPU for BENCH_PING_WINDOW seconds
# while the tunnels sit idle and are pinged (with the defaults, the agents
# ping a tunnel silent for 6 s, the gateway one silent for 20 s: the
# agents' pings keep it from ever being that silent; docs/0026).
# Per loop (--workers): its tunnels and its CPU over that window (the
# gateway's /metrics, tests/bench/loops.sh).
#
# usage: tests/bench/idle_tunnels.sh [COUNTS...]   (run it under
#        flock(1) on a shared machine, one benchmark at a time)
#   TETHER_BIN          directory with the binaries (default build/release/bin)
#   BENCH_RATE          agents each swarm starts per second (default 400)
#   BENCH_PING_WINDOW   seconds of the idle CPU window (default 20)
#   BENCH_GW_FLAGS      extra `serve` flags (default none)
#   BENCH_WORKERS       the gateway's --workers (default: its own default)
#   BENCH_SWARM_FLAGS   extra tether-swarm flags (default none; the keepalive
#                       before docs/0026: --ping-interval 20000 --ping-timeout 30000)
#   BENCH_KEEP=1        keep the work directory
set -euo pipefail

SRC=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
TETHER_BIN=${TETHER_BIN:-$SRC/build/release/bin}
RATE=${BENCH_RATE:-400}
WINDOW=${BENCH_PING_WINDOW:-20}
GW_FLAGS="${BENCH_GW_FLAGS:-}${BENCH_WORKERS:+ --workers $BENCH_WORKERS}"
SWARM_FLAGS=${BENCH_SWARM_FLAGS:-}
KEEP=${BENCH_KEEP:-0}
COMMAND_LINE=
for v in TETHER_BIN BENCH_RATE BENCH_PING_WINDOW BENCH_GW_FLAGS BENCH_WORKERS BENCH_SWARM_FLAGS; do
	[ -z "${!v:-}" ] || COMMAND_LINE+="$v='${!v}' "
done
COMMAND_LINE+="$0${*:+ $*}"

say() { printf '[bench] %s\n' "$*" >&2; }
die() { say "error: $*"; exit 1; }

for b in tether-gateway tether-swarm tetherctl; do
	[ -x "$TETHER_BIN/$b" ] || die "$TETHER_BIN/$b missing: run 'make build' or set TETHER_BIN"
done
for tool in jq curl python3 bc; do
	command -v "$tool" >/dev/null || die "$tool is required"
done

# The swarms and the gateway raise their own soft limits to the hard one.
ulimit -Sn "$(ulimit -Hn)"
FDS=$(ulimit -Hn)
[ "$FDS" != unlimited ] || FDS=1048576
HOLD=$((FDS - 200))   # what one gateway holds: its hard limit less a reserve
[ $# -gt 0 ] || set -- 1000 5000 "$HOLD"
for n in "$@"; do
	[[ $n =~ ^[1-9][0-9]*$ ]] || die "counts must be positive integers, got '$n'"
	[ "$n" -le "$HOLD" ] || die "$n tunnels do not fit in one gateway's open-files limit ($FDS): at most $HOLD"
done
mapfile -t COUNTS < <(printf '%s\n' "$@" | sort -n -u)
MAX=${COUNTS[-1]}

W=$(mktemp -d "${TMPDIR:-/tmp}/tether-idle.XXXXXX")
mkdir -p "$W/bin" "$W/logs"
cp "$TETHER_BIN/tether-gateway" "$TETHER_BIN/tether-swarm" "$TETHER_BIN/tetherctl" "$W/bin/"
GATEWAY=$W/bin/tether-gateway SWARM=$W/bin/tether-swarm CTL=$W/bin/tetherctl
GW_PID=
SWARM_PIDS=()

cleanup() {
	local rc=$?
	trap - EXIT INT TERM
	set +e
	[ ${#SWARM_PIDS[@]} -eq 0 ] || kill -TERM "${SWARM_PIDS[@]}" 2>/dev/null
	for p in "${SWARM_PIDS[@]}"; do wait "$p" 2>/dev/null; done
	[ -z "$GW_PID" ] || { kill -TERM "$GW_PID" 2>/dev/null; wait "$GW_PID" 2>/dev/null; }
	if [ "$KEEP" = 1 ]; then say "work directory kept: $W"; else rm -rf "$W"; fi
	exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

free_port() {
	python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1]); s.close()'
}
status_kib() { awk -v f="$2:" '$1 == f { print $2 }' "/proc/$1/status"; }
# utime + stime of a process, in clock ticks.
cpu_ticks() { awk '{ print $14 + $15 }' "/proc/$1/stat"; }
TICKS=$(getconf CLK_TCK)
gw_alive() {
	kill -0 "$GW_PID" 2>/dev/null || die "the gateway exited: $(tail -5 "$W/logs/gateway.log")"
}

# Two VmRSS readings 1 s apart within 1 % (at most 60 s); prints the RSS.
settle() {
	local prev cur t0=$SECONDS
	prev=$(status_kib "$GW_PID" VmRSS)
	while sleep 1; do
		gw_alive
		cur=$(status_kib "$GW_PID" VmRSS)
		if [ $(((cur > prev ? cur - prev : prev - cur) * 100)) -lt "$cur" ] ||
			[ $((SECONDS - t0)) -ge 60 ]; then
			echo "$cur"
			return
		fi
		prev=$cur
	done
}

PORT=$(free_port)
URL=https://127.0.0.1:$PORT
GW_DIR=$W/gw
"$GATEWAY" init --data-dir "$GW_DIR" --url "$URL" >"$W/logs/init.out" 2>&1 || die "init failed"
export TETHER_SERVER=$URL TETHER_TOKEN_FILE=$GW_DIR/admin.token TETHER_CACERT=$GW_DIR/ca.crt
MP=$(free_port)
GW_METRICS=http://127.0.0.1:$MP/metrics
# shellcheck source=tests/bench/loops.sh
. "$(dirname "${BASH_SOURCE[0]}")/loops.sh"
# shellcheck disable=SC2086  # BENCH_GW_FLAGS is a list of flags
"$GATEWAY" serve --data-dir "$GW_DIR" --listen "127.0.0.1:$PORT" --metrics-listen "127.0.0.1:$MP" $GW_FLAGS \
	>>"$W/logs/gateway.log" 2>&1 &
GW_PID=$!
deadline=$((SECONDS + 20))
until curl -sf --cacert "$GW_DIR/ca.crt" "$URL/readyz" >/dev/null 2>&1; do
	gw_alive
	[ "$SECONDS" -lt "$deadline" ] || die "gateway not ready after 20 s"
	sleep 0.05
done
CID=$("$CTL" -o json cluster create idle | jq -er .id)
"$CTL" -o json token create --cluster "$CID" --uses "$MAX" --ttl 1h >"$W/join.json"
BASE=$(settle)
say "baseline: gateway VmRSS $BASE KiB"

ROWS=() LOOP_ROWS=()
prev_n=0 prev_rss=$BASE
for n in "${COUNTS[@]}"; do
	add=$((n - prev_n))
	out=$W/logs/swarm-$n.out
	say "step $n: one more swarm of $add agents at $RATE/s"
	t0=$(date +%s.%N)
	# shellcheck disable=SC2086  # BENCH_SWARM_FLAGS is a list of flags
	"$SWARM" --join "$W/join.json" --ca-file "$GW_DIR/ca.crt" --agents "$add" \
		--first $((prev_n + 1)) --rate "$RATE" $SWARM_FLAGS \
		>"$out" 2>"$W/logs/swarm-$n.log" &
	SWARM_PIDS+=("$!")
	deadline=$((SECONDS + 300))
	until grep -q '^swarm all_active' "$out"; do
		gw_alive
		kill -0 "${SWARM_PIDS[-1]}" 2>/dev/null || die "the swarm exited: $(tail -3 "$W/logs/swarm-$n.log")"
		[ "$SECONDS" -lt "$deadline" ] || die "not all active after 300 s: $(tail -1 "$out")"
		sleep 0.2
	done
	active_s=$(echo "$(date +%s.%N) - $t0" | bc)
	# The gateway gives the heap back 2 to 4 s after the last handshake
	# (GATEWAY_TRIM_DELAY_MS, checked every GATEWAY_TRIM_EVERY_MS):
	# measure after that.
	sleep 5
	rss=$(settle)
	fds=$(find "/proc/$GW_PID/fd" -mindepth 1 | wc -l)
	# Idle CPU: the gateway's and the swarms' while the tunnels are pinged.
	g0=$(cpu_ticks "$GW_PID") s0=0
	for p in "${SWARM_PIDS[@]}"; do s0=$((s0 + $(cpu_ticks "$p"))); done
	l0=$(loops_read "$GW_METRICS")
	sleep "$WINDOW"
	l1=$(loops_read "$GW_METRICS")
	g1=$(cpu_ticks "$GW_PID") s1=0
	for p in "${SWARM_PIDS[@]}"; do s1=$((s1 + $(cpu_ticks "$p"))); done
	gw_pct=$(echo "scale=2; ($g1 - $g0) * 100 / $TICKS / $WINDOW" | bc)
	sw_pct=$(echo "scale=2; ($s1 - $s0) * 100 / $TICKS / $WINDOW" | bc)
	per=$(echo "scale=1; ($rss - $BASE) / $n" | bc)
	step=$(echo "scale=1; ($rss - $prev_rss) / $add" | bc)
	hwm=$(status_kib "$GW_PID" VmHWM)
	ROWS+=("$n $rss $hwm $fds $per $step $(printf '%.1f' "$active_s") $gw_pct $sw_pct")
	# Per loop: its tunnels, and its CPU over the window in % of a core.
	LOOP_ROWS+=("$n: $(tr ' ' '\n' <<<"$(loops_delta "$l0" "$l1")" | awk -F'[=/]' -v w="$WINDOW" \
		'$1 ~ /^[0-9]+$/ { printf "%sloop %s %s tunnels, %.2f %%", (n++ ? "; " : ""), $1, $4, $3 * 100 / w } END { print (n ? "" : "-") }')")
	say "step $n: RSS $rss KiB, $per KiB/tunnel, gateway ${gw_pct}% of a core idle"
	prev_n=$n prev_rss=$rss
done

version=$("$GATEWAY" --version | head -1)
{
	echo
	echo "Tether gateway: memory and CPU per idle tunnel (tether-swarm agents)"
	echo "  command:  $COMMAND_LINE"
	echo "  binaries: $TETHER_BIN ($version)"
	echo "  machine:  $(nproc) CPUs, $(awk '/^MemTotal/ { printf "%.1f GiB", $2 / 1048576 }' /proc/meminfo), $(uname -sr), open files hard limit $FDS"
	echo "  baseline: gateway VmRSS $BASE KiB (no agent)"
	echo "  gateway log: $(grep -ciE 'level=(warn|error)' "$W/logs/gateway.log" || true) warning/error line(s)"
	echo
	echo "| tunnels | gateway RSS (KiB) | HWM (KiB) | fds | KiB per idle tunnel | KiB per tunnel added in the step | all active after (s) | gateway CPU idle, % of a core | swarms' CPU, % of a core |"
	echo "|---:|---:|---:|---:|---:|---:|---:|---:|---:|"
	for r in "${ROWS[@]}"; do
		# shellcheck disable=SC2086
		printf '| %s | %s | %s | %s | %s | %s | %s | %s | %s |\n' $r
	done
	echo
	echo "KiB per idle tunnel: (RSS - baseline) / tunnels, after every agent is active and"
	echo "RSS settled; CPU: utime+stime over ${WINDOW} s of idle tunnels (pinged by the agents"
	echo "after their --ping-interval of silence, by the gateway after its own${SWARM_FLAGS:+; swarm flags: $SWARM_FLAGS})."
	echo
	echo "Per loop (--workers ${BENCH_WORKERS:-default}; tether_loop_tunnels, and tether_loop_cpu_seconds_total over the"
	echo "window in % of a core), by step:"
	for r in "${LOOP_ROWS[@]}"; do echo "  $r"; done
}
