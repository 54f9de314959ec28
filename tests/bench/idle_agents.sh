#!/usr/bin/env bash
# idle_agents.sh: the gateway's resident memory with idle connected agents.
#
# A benchmark, not a test: it reports figures and fails only if it cannot
# take them.  One gateway on loopback, one cluster, one import token; the
# agents are added in steps (0 -> 1 -> 100 -> 1000 by default, the agents of
# a step kept running in the next) and after each step, once every agent is
# connected and `active` and the gateway's VmRSS has settled (two readings
# 1 s apart within 1 %), it reports
#     (VmRSS - baseline) / N    KiB per idle agent
# where the baseline is VmRSS with no agent, after the gateway has served
# the API calls that create the cluster and the token and the N joins.
#
# usage: tests/bench/idle_agents.sh [COUNTS...]     (default: 1 100 1000)
#   TETHER_BIN            directory with tether-gateway, tether-client and
#                         tetherctl (default: build/release/bin of this repo)
#   BENCH_ACTIVE_TIMEOUT  seconds a step may take to get all its agents
#                         active (default 180)
#   BENCH_JOIN_PARALLEL   concurrent `tether-client join`s (default 16)
#   BENCH_BATCH=K         start a step's agents K at a time, each batch
#                         active before the next (default: all at once)
#   BENCH_KEEP=1          keep the work directory (logs, state dirs)
# `make bench` runs it with the defaults.
set -euo pipefail

SRC=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
TETHER_BIN=${TETHER_BIN:-$SRC/build/release/bin}
GATEWAY=$TETHER_BIN/tether-gateway
CLIENT=$TETHER_BIN/tether-client
CTL=$TETHER_BIN/tetherctl
ACTIVE_TIMEOUT=${BENCH_ACTIVE_TIMEOUT:-180}
JOIN_PARALLEL=${BENCH_JOIN_PARALLEL:-16}
BATCH=${BENCH_BATCH:-}
KEEP=${BENCH_KEEP:-0}
COMMAND_LINE=
for v in TETHER_BIN BENCH_BATCH BENCH_ACTIVE_TIMEOUT BENCH_JOIN_PARALLEL; do
	[ -z "${!v:-}" ] || COMMAND_LINE+="$v=${!v} "
done
COMMAND_LINE+="$0${*:+ $*}"

say() { printf '[bench] %s\n' "$*" >&2; }
die() { say "error: $*"; exit 1; }

# --- arguments -------------------------------------------------------------

[ $# -gt 0 ] || set -- 1 100 1000
for n in "$@"; do
	[[ $n =~ ^[1-9][0-9]*$ ]] || die "counts must be positive integers, got '$n' (usage: $0 [COUNTS...])"
done
[ -z "$BATCH" ] || [[ $BATCH =~ ^[1-9][0-9]*$ ]] || die "BENCH_BATCH must be a positive integer, got '$BATCH'"
mapfile -t COUNTS < <(printf '%s\n' "$@" | sort -n -u)
MAX=${COUNTS[-1]}
for b in "$GATEWAY" "$CLIENT" "$CTL"; do
	[ -x "$b" ] || die "$b missing: run 'make build' or set TETHER_BIN"
done
for tool in jq python3 curl bc; do
	command -v "$tool" >/dev/null || die "$tool is required"
done

# Every agent is one TLS connection into the gateway; the gateway, and this
# shell's children, need a descriptor limit well above MAX.
want_fds=65536
hard=$(ulimit -Hn)
if [ "$hard" != unlimited ] && [ "$hard" -lt "$want_fds" ]; then
	ulimit -Hn "$want_fds" 2>/dev/null || true
	hard=$(ulimit -Hn)
fi
if [ "$hard" = unlimited ] || [ "$hard" -ge "$want_fds" ]; then
	ulimit -Sn "$want_fds"
else
	ulimit -Sn "$hard"
fi
[ "$(ulimit -Sn)" -ge $((MAX + 256)) ] ||
	die "open files limit $(ulimit -Sn) is too low for $MAX agents (hard limit $(ulimit -Hn))"
nproc_limit=$(ulimit -u)
if [ "$nproc_limit" != unlimited ] && [ "$nproc_limit" -lt $((MAX + 256)) ]; then
	ulimit -u $((MAX + 256)) 2>/dev/null ||
		die "process limit $nproc_limit is too low for $MAX agents"
fi

# --- processes and clean-up ------------------------------------------------

W=$(mktemp -d "${TMPDIR:-/tmp}/tether-bench.XXXXXX")
mkdir -p "$W/agents" "$W/logs" "$W/bin"
GW_PID=
CLIENT_PIDS=()
BG_PID=   # a background xargs (joins), if one is running

# stop_all PID...: SIGTERM, up to 5 s to exit, then SIGKILL for the rest.
stop_all() {
	local deadline=$((SECONDS + 5)) alive p
	[ $# -gt 0 ] || return 0
	kill -TERM "$@" 2>/dev/null
	while :; do
		alive=()
		for p in "$@"; do
			kill -0 "$p" 2>/dev/null && alive+=("$p")
		done
		[ ${#alive[@]} -eq 0 ] && return 0
		if [ "$SECONDS" -ge "$deadline" ]; then
			say "SIGKILL to ${#alive[@]} process(es) still running 5 s after SIGTERM"
			kill -KILL "${alive[@]}" 2>/dev/null
			return 0
		fi
		sleep 0.1
	done
}

cleanup() {
	local rc=$?
	trap - EXIT INT TERM
	set +e
	if [ -n "$BG_PID" ]; then
		pkill -TERM -P "$BG_PID" 2>/dev/null
		stop_all "$BG_PID"
	fi
	# A signal can land between starting an agent and recording its PID:
	# stop every child still running the client, recorded or not.
	local kids=() gws=() k exe
	for k in $(pgrep -P $$); do
		exe=$(readlink "/proc/$k/exe" 2>/dev/null) || continue
		[ "$exe" != "$(readlink -f "$CLIENT")" ] || kids+=("$k")
		[ "$exe" != "$(readlink -f "$GATEWAY")" ] || gws+=("$k")
	done
	# The agents first, so that the gateway sees them leave, then the gateway.
	stop_all "${CLIENT_PIDS[@]}" "${kids[@]}"
	stop_all $GW_PID "${gws[@]}"
	wait 2>/dev/null
	if [ "$KEEP" = 1 ]; then
		say "work directory kept: $W"
	else
		rm -rf "$W"
	fi
	exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# Run copies: a `make build` during the run must not change the binaries
# under the agents still being started.
cp "$GATEWAY" "$CLIENT" "$CTL" "$W/bin/"
GATEWAY=$W/bin/tether-gateway CLIENT=$W/bin/tether-client CTL=$W/bin/tetherctl

free_port() {
	python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1]); s.close()'
}

ctl() { "$CTL" -o json "$@"; }

status_field() { # status_field PID FIELD: a /proc/PID/status value in kB
	awk -v f="$2:" '$1 == f { print $2 }' "/proc/$1/status"
}

gw_alive() {
	kill -0 "$GW_PID" 2>/dev/null || die "the gateway exited; last lines of its log:
$(tail -20 "$W/logs/gateway.log")"
}

# Waits until two VmRSS readings 1 s apart differ by < 1 %; prints
# "RSS SECONDS" (SECONDS the settling took, suffixed ! if it never settled).
settle() {
	local prev cur t0=$SECONDS
	prev=$(status_field "$GW_PID" VmRSS)
	while :; do
		sleep 1
		gw_alive
		cur=$(status_field "$GW_PID" VmRSS)
		if [ $(( (cur > prev ? cur - prev : prev - cur) * 100 )) -lt "$cur" ]; then
			echo "$cur $((SECONDS - t0))"
			return
		fi
		if [ $((SECONDS - t0)) -ge 60 ]; then
			echo "$cur $((SECONDS - t0))!"
			return
		fi
		prev=$cur
	done
}

# Agents of this cluster that are connected and active.
count_active() {
	ctl agent list --cluster "$CID" |
		jq '[.[] | select(.state == "active" and .connected == true)] | length'
}

dead_clients() { # prints the node numbers whose `run` has exited
	local i
	for i in "${!CLIENT_PIDS[@]}"; do
		kill -0 "${CLIENT_PIDS[$i]}" 2>/dev/null || echo $((i + 1))
	done
}

# Explains why not every agent became active: states, exited clients, logs.
diagnose() {
	local want=$1 dead
	say "only $2 of $want agents active after ${ACTIVE_TIMEOUT}s"
	say "agent states (state connected count):"
	ctl agent list --cluster "$CID" |
		jq -r 'group_by([.state, .connected])[] | "  \(.[0].state) connected=\(.[0].connected) \(length)"' >&2 || true
	say "registered agents: $(ctl agent list --cluster "$CID" | jq length) of $want"
	mapfile -t dead < <(dead_clients)
	if [ ${#dead[@]} -gt 0 ]; then
		say "${#dead[@]} tether-client run process(es) exited; first ones' logs:"
		for i in "${dead[@]:0:3}"; do
			echo "----- node$i" >&2
			tail -5 "$W/logs/client-node$i.log" >&2
		done
	fi
	# A client whose log has nothing after its start-up line never reported a
	# connection result: no error, no retry scheduled.
	local silent=0 f
	for ((i = 1; i <= want; i++)); do
		f=$W/logs/client-node$i.log
		[ "$(wc -l <"$f")" -gt 1 ] || silent=$((silent + 1))
	done
	say "$silent agent(s) logged nothing after start-up (no connection result, no retry)"
	say "status.json of the agents: $(cat "$W"/agents/node*/status.json 2>/dev/null |
		jq -sc 'group_by([.state, .connected]) | map({state: .[0].state, connected: .[0].connected, n: length})')"
	say "most frequent client log lines (timestamps and ids stripped):"
	cat "$W"/logs/client-node*.log 2>/dev/null | normalise | sort | uniq -c | sort -rn | head -10 >&2
	say "gateway warnings and errors:"
	grep -iE 'warn|error|refus|fail' "$W/logs/gateway.log" | normalise | sort | uniq -c | sort -rn | head -10 >&2 || true
}

# Strips timestamps, numbers and ids so repeated log lines group together.
normalise() {
	sed -E 's/^[0-9TZ:.+ -]+//; s/[0-9a-f]{8,}/<id>/g; s/[0-9]+/N/g'
}

# wait_active TARGET DEADLINE: polls until TARGET agents are active (sets
# $active); 1 if DEADLINE (in $SECONDS) passes first.
wait_active() {
	while :; do
		gw_alive
		active=$(count_active) || active=0
		[ "$active" -ge "$1" ] && return 0
		[ "$SECONDS" -lt "$2" ] || return 1
		sleep 0.5
	done
}

# --- the gateway, the cluster and the join document -----------------------

PORT=$(free_port)
URL=https://127.0.0.1:$PORT
GW_DIR=$W/gw
"$GATEWAY" init --data-dir "$GW_DIR" --url "$URL" >"$W/logs/init.out" 2>&1 ||
	die "gateway init failed: $(cat "$W/logs/init.out")"
export TETHER_SERVER=$URL TETHER_TOKEN_FILE=$GW_DIR/admin.token TETHER_CACERT=$GW_DIR/ca.crt
"$GATEWAY" serve --data-dir "$GW_DIR" --listen "127.0.0.1:$PORT" \
	--max-handshakes $((MAX + 1000)) >>"$W/logs/gateway.log" 2>&1 &
GW_PID=$!
deadline=$((SECONDS + 20))
until curl -sf --cacert "$GW_DIR/ca.crt" "$URL/readyz" >/dev/null 2>&1; do
	gw_alive
	[ "$SECONDS" -lt "$deadline" ] || die "gateway not ready on $URL after 20s"
	sleep 0.05
done

CID=$(ctl cluster create bench | jq -er .id)
ctl token create --cluster "$CID" --uses "$MAX" --ttl 1h >"$W/join.json"
ctl cluster list >/dev/null
ctl agent list >/dev/null

say "joining $MAX state dirs ($JOIN_PARALLEL at a time)"
t0=$(date +%s.%N)
# shellcheck disable=SC2016  # expanded by sh -c, not here
seq 1 "$MAX" | xargs -P "$JOIN_PARALLEL" -I{} sh -c \
	'exec "$0" join --state-dir "$1/agents/node$2" --node-name "node$2" <"$1/join.json" >"$1/logs/join-node$2.log" 2>&1' \
	"$CLIENT" "$W" {} &
BG_PID=$!
rc=0
wait "$BG_PID" || rc=$?
BG_PID=
if [ "$rc" -ne 0 ]; then
	failed=0
	for ((i = 1; i <= MAX; i++)); do
		[ -f "$W/agents/node$i/state.json" ] && continue
		failed=$((failed + 1))
		[ "$failed" -gt 1 ] || { say "join node$i failed:"; cat "$W/logs/join-node$i.log" >&2; }
	done
	die "$failed of $MAX joins failed (xargs exit $rc)"
fi
joined=$(find "$W/agents" -mindepth 2 -maxdepth 2 -name state.json | wc -l)
[ "$joined" -eq "$MAX" ] || die "only $joined of $MAX state dirs joined"
join_s=$(printf '%.1f' "$(echo "$(date +%s.%N) - $t0" | bc)")
say "joined $MAX in ${join_s}s"

# --- baseline and the steps -------------------------------------------------

read -r BASE_RSS base_settle < <(settle)
BASE_HWM=$(status_field "$GW_PID" VmHWM)
BASE_FDS=$(find "/proc/$GW_PID/fd" -mindepth 1 | wc -l)
say "baseline: VmRSS ${BASE_RSS} KiB (settled in ${base_settle}s)"

ROWS=()   # "agents rss hwm fds delta per_agent step_per_agent active_s settle_s client_rss"
prev_rss=$BASE_RSS prev_active=0
running=0
incomplete=
for n in "${COUNTS[@]}"; do
	say "starting agents $((running + 1))..$n${BATCH:+ in batches of $BATCH}"
	t0=$(date +%s.%N)
	deadline=$((SECONDS + ACTIVE_TIMEOUT))
	active=0
	while [ "$running" -lt "$n" ] && [ -z "$incomplete" ]; do
		upto=$n
		[ -z "$BATCH" ] || [ $((running + BATCH)) -ge "$n" ] || upto=$((running + BATCH))
		for ((i = running + 1; i <= upto; i++)); do
			"$CLIENT" run --state-dir "$W/agents/node$i" >>"$W/logs/client-node$i.log" 2>&1 &
			CLIENT_PIDS+=("$!")
		done
		running=$upto
		wait_active "$running" "$deadline" ||
			incomplete="only $active of $running agents active after ${ACTIVE_TIMEOUT}s"
	done
	[ -z "$incomplete" ] || diagnose "$running" "$active"
	active_s=$(printf '%.1f' "$(echo "$(date +%s.%N) - $t0" | bc)")
	[ -z "$incomplete" ] || active_s=">$ACTIVE_TIMEOUT"
	say "$active agents active in ${active_s}s; letting the gateway settle"
	read -r rss settle_s < <(settle)
	hwm=$(status_field "$GW_PID" VmHWM)
	fds=$(find "/proc/$GW_PID/fd" -mindepth 1 | wc -l)
	# Per agent over the agents actually active (all N unless incomplete).
	per=$( [ "$active" -gt 0 ] && echo "scale=1; ($rss - $BASE_RSS) / $active" | bc || echo n/a)
	client_kib=0
	for p in "${CLIENT_PIDS[@]}"; do
		v=$(status_field "$p" VmRSS 2>/dev/null) || v=0
		client_kib=$((client_kib + ${v:-0}))
	done
	# Per agent added by this step, over the previous step's RSS.
	step=$(echo "scale=1; ($rss - $prev_rss) / ($active - $prev_active)" | bc 2>/dev/null || echo n/a)
	[ "$active" -gt "$prev_active" ] || step=n/a
	prev_rss=$rss prev_active=$active
	ROWS+=("$active $rss $hwm $fds $((rss - BASE_RSS)) $per $step $active_s $settle_s $((client_kib / n))")
	[ -z "$incomplete" ] || break
done

# --- the report ------------------------------------------------------------

gw_warn=$(grep -ciE '\b(warn|warning|error)\b' "$W/logs/gateway.log" || true)
kernel=$(uname -sr)
cpus=$(nproc)
cpu_model=$(awk -F': ' '/^model name/ { print $2; exit }' /proc/cpuinfo)
mem_total=$(awk '/^MemTotal/ { printf "%.1f GiB", $2 / 1048576 }' /proc/meminfo)
if [ -n "$BATCH" ]; then
	start_mode="$BATCH at a time, each batch active before the next"
else
	start_mode="all at once per step"
fi
version=$("$GATEWAY" --version 2>/dev/null | head -1 || echo unknown)

{
	echo
	echo "Tether gateway memory with idle agents"
	echo "  command:  $COMMAND_LINE"
	echo "  binaries: $TETHER_BIN ($version)"
	echo "  machine:  $cpus CPUs (${cpu_model:-unknown}), $mem_total, $kernel"
	echo "  agents:   started $start_mode"
	echo "  baseline: gateway VmRSS $BASE_RSS KiB, VmHWM $BASE_HWM KiB, $BASE_FDS fds (0 agents; joins took ${join_s}s)"
	echo
	printf '%7s %10s %10s %6s %10s %10s %10s %9s %8s %11s\n' agents "RSS KiB" "HWM KiB" fds \
		"+RSS KiB" KiB/agent "step KiB/a" "active s" "settle s" "client KiB"
	for r in "${ROWS[@]}"; do
		# shellcheck disable=SC2086
		printf '%7s %10s %10s %6s %10s %10s %10s %9s %8s %11s\n' $r
	done
	echo
	echo "  RSS/HWM: gateway VmRSS/VmHWM once settled; +RSS: over the baseline;"
	echo "  KiB/agent: +RSS / agents; step KiB/a: RSS added per agent added since the"
	echo "  previous row; active s: from starting the step's agents to all active;"
	echo "  client KiB: mean VmRSS of one tether-client run (shared pages included)."
	echo "  gateway log: $gw_warn warning/error line(s)"
	if [ "$gw_warn" -gt 0 ]; then
		grep -iE '\b(warn|warning|error)\b' "$W/logs/gateway.log" | normalise |
			sort | uniq -c | sort -rn | head -10 | sed 's/^/    /'
	fi
	[ -z "$incomplete" ] || echo "  INCOMPLETE: $incomplete"
	echo
	echo "Markdown (for the README):"
	echo
	echo "Machine: $cpus CPUs (${cpu_model:-unknown}), $mem_total, Linux $(uname -r). Command: \`$COMMAND_LINE\`."
	echo "Baseline (0 agents): $BASE_RSS KiB; agents started $start_mode."
	echo
	echo "| agents | gateway RSS (KiB) | RSS over baseline (KiB) | KiB per idle agent | KiB per agent added in the step | time to all active (s) |"
	echo "|-------:|------------------:|------------------------:|-------------------:|--------------------------------:|-----------------------:|"
	for r in "${ROWS[@]}"; do
		read -r a rss _ _ d per step act _ _ <<<"$r"
		echo "| $a | $rss | $d | $per | $step | $act |"
	done
}

[ -z "$incomplete" ] || exit 1
