#!/usr/bin/env bash
# reconnect_storm.sh: how long N agents take to be all back and active after
# a gateway restart, and an established tunnel's ping round trip meanwhile.
#
# A benchmark, not a test: it reports figures and fails only if it cannot
# take them.  One gateway on loopback; N agents in tether-swarm processes
# (tests/bench/swarm.c: the agent's own tunnel code, its backoff with
# jitter; at most 9,900 agents a process, for the open-files limit)
# register and become active; one more swarm runs one probe agent that
# pings the gateway every 100 ms over its tunnel (--probe).  Then the
# gateway is stopped and started again on the same port and data
# directory, once per --workers value asked for (BENCH_WORKERS="1 2": the
# same agents, a storm with one loop, then one with two), and the script
# reports for each, side by side:
#   - seconds from the new gateway's start (and from the stop) until the
#     swarms report every agent active again;
#   - the dials the agents made, those before the new gateway was ready
#     (they found no gateway: nothing could take them) apart;
#   - the probe tunnel's ping round trips (p50/p99/max) while the storm is
#     on, beside the same before the first restart and after the storm;
#   - the gateway's and the swarms' CPU during the storm, each loop's TLS
#     handshakes and CPU, the TLS admission's figures (tether_tls_*, those
#     closed at accept apart) and how many upgrades --max-handshakes
#     answered 503;
#   - the redial spread the agents were told before the stop (SETTINGS,
#     docs/0035) and how many first redials they drew in it;
#   - the load average when the storm was over (the machine may be shared);
#   - each loop's tunnels once all were back (tether_loop_tunnels) and the
#     streams and bytes its links carried (tether_loop_link_*_total).
# The report is printed on every exit once the first registration is done:
# a storm that was not all back in time (900 s, or BENCH_DEADLINE_S) is
# reported with how many were, the storms after it are not run, and the
# report ends "INCOMPLETE" (exit 1).
# The per-source caps are raised (every agent dials from 127.0.0.1; with
# them, most dials were closed at accept or answered 503 by
# --max-tls-per-source and --max-handshakes-per-source).
#
# The stop: BENCH_KILL=TERM (default) drains (agents hear "shutdown" and
# redial after 250-500 ms); BENCH_KILL=KILL is a kill -9, the crash of
# issue 23's storm: agents hear nothing, find their tunnel gone and redial
# on their backoff, and the new gateway is started at once.
#
# usage: tests/bench/reconnect_storm.sh [N]        (default 10000; run it
#        under flock(1) on a shared machine, one benchmark at a time)
#   TETHER_BIN       directory with the binaries (default build/release/bin)
#   BENCH_RATE       agents started per second for the first registration
#                    (default 400; the storm itself is all at once)
#   BENCH_GW_FLAGS   extra `serve` flags, e.g. "--max-tls-handshakes 8"
#   BENCH_WORKERS    the gateway's --workers, one storm per value (default:
#                    its own default, one storm); each loop's TLS
#                    handshakes and CPU seconds are reported
#   BENCH_REG_WORKERS the first gateway's --workers, the one the agents
#                    register with (default: the first BENCH_WORKERS value)
#   BENCH_KILL       TERM (default) or KILL: how the gateway is stopped
#   BENCH_PER_SWARM  agents per tether-swarm process (default 9900, the most
#                    the open-files limit of 20,000 allows with room; fewer
#                    where more cores can run more load generators)
#   BENCH_DEADLINE_S stop waiting this many seconds after the script's start
#                    (for a machine lent for a few minutes): the storm then
#                    on is reported as far as it got
#   BENCH_GW_CPUS    the CPUs the storms' gateways may run on (taskset -c
#                    LIST, e.g. "0,1": a 2-core gateway on a bigger
#                    machine); the registering gateway runs on any
#   BENCH_SWARM_CPUS the CPUs of the swarms and the probe (taskset -c LIST)
#   BENCH_KEEP=1     keep the work directory (BENCH_KEEP=DIR: keep it as DIR)
set -euo pipefail

SRC=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
TETHER_BIN=${TETHER_BIN:-$SRC/build/release/bin}
RATE=${BENCH_RATE:-400}
GW_FLAGS=${BENCH_GW_FLAGS:-}
read -r -a LOOPS <<<"${BENCH_WORKERS:-}"
[ "${#LOOPS[@]}" -gt 0 ] || LOOPS=("")
REG_LOOPS=${BENCH_REG_WORKERS:-${LOOPS[0]}}
KILL=${BENCH_KILL:-TERM}
KEEP=${BENCH_KEEP:-0}
N=${1:-10000}
DEADLINE_S=${BENCH_DEADLINE_S:-}
PER_SWARM=${BENCH_PER_SWARM:-9900}
GW_PIN=() SW_PIN=()
[ -z "${BENCH_GW_CPUS:-}" ] || GW_PIN=(taskset -c "$BENCH_GW_CPUS")
[ -z "${BENCH_SWARM_CPUS:-}" ] || SW_PIN=(taskset -c "$BENCH_SWARM_CPUS")
COMMAND_LINE=
for v in TETHER_BIN BENCH_RATE BENCH_GW_FLAGS BENCH_WORKERS BENCH_REG_WORKERS BENCH_PER_SWARM BENCH_KILL BENCH_DEADLINE_S BENCH_GW_CPUS BENCH_SWARM_CPUS; do
	[ -z "${!v:-}" ] || COMMAND_LINE+="$v='${!v}' "
done
COMMAND_LINE+="$0${*:+ $*}"

say() { printf '[bench] %s\n' "$*" >&2; }
die() { say "error: $*"; exit 1; }
[[ $N =~ ^[1-9][0-9]*$ ]] || die "N must be a positive integer, got '$N'"
[[ $PER_SWARM =~ ^[1-9][0-9]*$ ]] || die "BENCH_PER_SWARM must be a positive integer, got '$PER_SWARM'"
[ "$KILL" = TERM ] || [ "$KILL" = KILL ] || die "BENCH_KILL is TERM or KILL, got '$KILL'"
[ -z "$DEADLINE_S" ] || [[ $DEADLINE_S =~ ^[1-9][0-9]*$ ]] || die "BENCH_DEADLINE_S: seconds, got '$DEADLINE_S'"
for w in "${LOOPS[@]}" "$REG_LOOPS"; do
	[ -z "$w" ] || [[ $w =~ ^[1-9][0-9]*$ ]] || die "BENCH_WORKERS: numbers, got '$w'"
done
for b in tether-gateway tether-swarm tetherctl; do
	[ -x "$TETHER_BIN/$b" ] || die "$TETHER_BIN/$b missing: run 'make build' or set TETHER_BIN"
done
for tool in jq curl python3 bc; do
	command -v "$tool" >/dev/null || die "$tool is required"
done
[ -z "${BENCH_GW_CPUS:-}${BENCH_SWARM_CPUS:-}" ] || command -v taskset >/dev/null ||
	die "taskset (util-linux) is required for BENCH_GW_CPUS and BENCH_SWARM_CPUS"
ulimit -Sn "$(ulimit -Hn)"
# The gateway holds every tunnel in one process; the agents are split.
[ "$(ulimit -Hn)" = unlimited ] || [ $((N + 100)) -le "$(ulimit -Hn)" ] ||
	die "$N tunnels do not fit in the open-files limit $(ulimit -Hn) of the gateway's process"

if [ "$KEEP" != 0 ] && [ "$KEEP" != 1 ]; then W=$KEEP; mkdir -p "$W"; KEEP=1; else W=$(mktemp -d "${TMPDIR:-/tmp}/tether-storm.XXXXXX"); fi
mkdir -p "$W/bin" "$W/logs"
cp "$TETHER_BIN/tether-gateway" "$TETHER_BIN/tether-swarm" "$TETHER_BIN/tetherctl" "$W/bin/"
GATEWAY=$W/bin/tether-gateway SWARM=$W/bin/tether-swarm CTL=$W/bin/tetherctl
GW_PID='' PROBE_PID=''
SW_PIDS=() OUTS=()

REPORTED=1   # no report until the first registration is done
cleanup() {
	local rc=$?
	trap - EXIT INT TERM
	set +e
	if [ "$REPORTED" = 0 ]; then
		[ -n "$STOPPED" ] || STOPPED="the script ended (exit $rc) after $((SECONDS - T_START)) s, before every storm was over"
		report
		rc=1
	fi
	for p in "${SW_PIDS[@]}" $PROBE_PID; do kill -TERM "$p" 2>/dev/null; wait "$p" 2>/dev/null; done
	[ -z "$GW_PID" ] || { kill -TERM "$GW_PID" 2>/dev/null; wait "$GW_PID" 2>/dev/null; }
	if [ "$KEEP" = 1 ]; then say "work directory kept: $W"; else rm -rf "$W"; fi
	exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

now_ms() { echo $(($(date +%s%N) / 1000000)); }
cpu_ticks() { awk '{ print $14 + $15 }' "/proc/$1/stat"; }
swarm_ticks() { local p t=0; for p in "${SW_PIDS[@]}"; do t=$((t + $(cpu_ticks "$p"))); done; echo "$t"; }
TICKS=$(getconf CLK_TCK 2>/dev/null || python3 -c 'import os; print(os.sysconf("SC_CLK_TCK"))')
PORT=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1]); s.close()')
URL=https://127.0.0.1:$PORT
GW_DIR=$W/gw
MP=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1]); s.close()')
GW_LOG=$W/logs/gateway.log
# Every agent dials from 127.0.0.1: the per-source caps, which in the field
# hold one address's share, would shut most of them out here.
CAPS="--max-handshakes-per-source 1000000 --max-tls-per-source 1000000 --max-connections-per-source 1000000"

# gw_start LOOPS [PIN...]: a gateway on the port and data, ready, run under
# PIN (a taskset command) if given; its log is $GW_LOG (the previous one's
# appended to gateway.all.log).
gw_start() {
	local loops=$1
	shift
	[ ! -f "$GW_LOG" ] || { cat "$GW_LOG" >>"$W/logs/gateway.all.log"; : >"$GW_LOG"; }
	# shellcheck disable=SC2086  # BENCH_GW_FLAGS is a list of flags
	"$@" "$GATEWAY" serve --data-dir "$GW_DIR" --listen "127.0.0.1:$PORT" \
		--metrics-listen "127.0.0.1:$MP" $CAPS $GW_FLAGS ${loops:+--workers $loops} >>"$GW_LOG" 2>&1 &
	GW_PID=$!
	local deadline=$((SECONDS + 30))
	until curl -sf --cacert "$GW_DIR/ca.crt" "$URL/readyz" >/dev/null 2>&1; do
		kill -0 "$GW_PID" 2>/dev/null || die "the gateway exited: $(tail -3 "$GW_LOG")"
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
# all_back AFTER_MS LIMIT_S: the ms when the last swarm had all its agents
# active again after AFTER_MS.
all_back() {
	local f ms last=0
	for f in "${OUTS[@]}"; do
		ms=$(wait_line "$f" "$1" "$2") || return 1
		[ "$ms" -le "$last" ] || last=$ms
	done
	echo "$last"
}
# swarm_sum NAME: NAME's value on each swarm's last report line, summed.
swarm_sum() {
	local f t=0 v
	for f in "${OUTS[@]}"; do
		v=$(grep '^swarm ms=' "$f" | tail -n 1 | grep -o " $1=[0-9]*" | cut -d= -f2)
		t=$((t + ${v:-0}))
	done
	echo "$t"
}
# swarm_max NAME: the largest of NAME's values on each swarm's last line.
swarm_max() {
	local f m=0 v
	for f in "${OUTS[@]}"; do
		v=$(grep '^swarm ms=' "$f" | tail -n 1 | grep -o " $1=[0-9]*" | cut -d= -f2)
		[ "${v:-0}" -le "$m" ] || m=$v
	done
	echo "$m"
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
s1() { echo "scale=1; $1" | bc; }
# limit S: S, or the seconds left before BENCH_DEADLINE_S if fewer (>= 0).
T_START=$SECONDS
limit() {
	local left
	[ -n "$DEADLINE_S" ] || { echo "$1"; return; }
	left=$((T_START + DEADLINE_S - SECONDS))
	[ "$left" -ge 0 ] || left=0
	echo $((left < $1 ? left : $1))
}

"$GATEWAY" init --data-dir "$GW_DIR" --url "$URL" >"$W/logs/init.out" 2>&1 || die "init failed"
export TETHER_SERVER=$URL TETHER_TOKEN_FILE=$GW_DIR/admin.token TETHER_CACERT=$GW_DIR/ca.crt
gw_start "$REG_LOOPS"
CID=$("$CTL" -o json cluster create storm | jq -er .id)
"$CTL" -o json token create --cluster "$CID" --uses $((N + 1)) --ttl 2h >"$W/join.json"

NSW=$(((N + PER_SWARM - 1) / PER_SWARM))
# Thousands of agents share one swarm's loop, which lags seconds behind
# while it makes their TLS handshakes and keys: with the agent's own 4 s
# ping timeout they would drop tunnels that are fine (one agent is one
# process in the field); the gateway's keepalive (20 s / 30 s) instead.
SWARM_KEEPALIVE=(--ping-interval 20000 --ping-timeout 30000)
say "registering $N agents at $RATE/s ($NSW swarm process(es))"
t0=$(now_ms)
for ((i = 0; i < NSW; i++)); do
	first=$((i * PER_SWARM + 1))
	n=$((N - i * PER_SWARM < PER_SWARM ? N - i * PER_SWARM : PER_SWARM))
	OUTS+=("$W/logs/swarm.$i.out")
	"${SW_PIN[@]}" "$SWARM" --join "$W/join.json" --ca-file "$GW_DIR/ca.crt" --agents "$n" --first "$first" \
		--rate $(((RATE + NSW - 1) / NSW)) --report-ms 250 "${SWARM_KEEPALIVE[@]}" \
		>"$W/logs/swarm.$i.out" 2>"$W/logs/swarm.$i.log" &
	SW_PIDS+=($!)
done
all_back 0 "$(limit 1800)" >/dev/null || die "not all active after $((SECONDS - T_START)) s: $(swarm_sum active) of $N"
reg_s=$(s1 "($(now_ms) - $t0) / 1000")
reg_gcpu=$(s1 "$(cpu_ticks "$GW_PID") / $TICKS") reg_scpu=$(s1 "$(swarm_ticks) / $TICKS")
"${SW_PIN[@]}" "$SWARM" --join "$W/join.json" --ca-file "$GW_DIR/ca.crt" --agents 1 --prefix probe --probe \
	--report-ms 500 >"$W/logs/probe.out" 2>"$W/logs/probe.log" &
PROBE_PID=$!
wait_line "$W/logs/probe.out" 0 60 >/dev/null || die "the probe agent is not active"
say "all $N active after ${reg_s}s; probing the idle gateway for 5 s"
idle_from=$(now_ms)
sleep 5
read -r idle_n idle_p50 idle_p99 idle_max idle_lost < <(probe_stats "$W/logs/probe.out" "$idle_from" "$(now_ms)")

# shellcheck source=tests/bench/loops.sh
. "$SRC/tests/bench/loops.sh"

# storm K LOOPS: stop the gateway (SIGTERM or SIGKILL), start one with
# LOOPS loops, wait until all are back (900 s, or BENCH_DEADLINE_S); the
# figures go to R_*[K].  Returns 1 if they were not all back in time.
declare -a R_stop R_back R_total R_probe R_dials R_nogw R_refused R_shed R_gcpu R_scpu R_loops R_load R_st R_af R_spread R_draws R_accept R_cpus
DONE=() STOPPED=''
# shellcheck disable=SC2034  # the R_* arrays are read by name (cols)
storm() {
	local k=$1 loops=$2 t_stop t_down t_up d0 d_up d1 s0 s1_ g0 g1 back_ms probe_back late=''
	say "storm $((k + 1)): kill -$KILL, then a gateway with ${loops:-its default} loop(s)"
	t_stop=$(now_ms)
	d0=$(swarm_sum dials)
	s0=$(swarm_ticks)
	R_spread[k]=$(swarm_max spread_ms)
	local w0
	w0=$(swarm_sum draws)
	kill "-$KILL" "$GW_PID"
	wait "$GW_PID" 2>/dev/null || true
	t_down=$(now_ms)
	R_stop[k]=$(s1 "($t_down - $t_stop) / 1000")
	gw_start "$loops" "${GW_PIN[@]}"
	t_up=$(now_ms)
	R_cpus[k]=$(awk '/^Cpus_allowed_list:/ { print $2 }' "/proc/$GW_PID/status")
	DONE+=("$k")
	g0=$(cpu_ticks "$GW_PID")
	sleep 0.3   # a report line (every 250 ms) since the gateway is ready
	d_up=$(swarm_sum dials)
	if ! back_ms=$(all_back "$t_stop" "$(limit 900)"); then
		back_ms=$(now_ms)
		late="$(swarm_sum active) of $N active"
		STOPPED="storm $((k + 1))${loops:+ (--workers $loops)}: not all back $(s1 "($back_ms - $t_up) / 1000") s after the new start ($late); the storms after it were not run"
	fi
	g1=$(cpu_ticks "$GW_PID") s1_=$(swarm_ticks)
	d1=$(swarm_sum dials)
	R_draws[k]=$(($(swarm_sum draws) - w0))
	probe_back=$(wait_line "$W/logs/probe.out" "$t_stop" "$([ -z "$late" ] && echo 60 || echo 0)") || probe_back=never
	R_load[k]=$(cut -d' ' -f1 /proc/loadavg)
	R_back[k]=$(s1 "($back_ms - $t_up) / 1000")
	R_total[k]=$(s1 "($back_ms - $t_stop) / 1000")
	[ -z "$late" ] || { R_back[k]="> ${R_back[k]} ($late)"; R_total[k]="> ${R_total[k]}"; }
	R_gcpu[k]=$(s1 "($g1 - $g0) / $TICKS")
	R_scpu[k]=$(s1 "($s1_ - $s0) / $TICKS")
	if [ "$probe_back" = never ]; then R_probe[k]=never; else R_probe[k]=$(s1 "($probe_back - $t_up) / 1000"); fi
	R_dials[k]="$((d1 - d0)) ($(echo "scale=2; ($d1 - $d0) / $N" | bc))"
	R_nogw[k]="$((d_up - d0)) / $((d1 - d_up)) ($(echo "scale=2; ($d1 - $d_up) / $N" | bc))"
	R_refused[k]=$(grep -c 'refusing a tunnel: too many handshakes' "$GW_LOG" || true)
	R_shed[k]=$(metric tether_tls_shed_total) || R_shed[k]='?'
	R_accept[k]=$(metric tether_tls_shed_at_accept_total) || R_accept[k]='?'
	R_loops[k]=$(loops_read "http://127.0.0.1:$MP/metrics")
	R_st[k]=$(probe_stats "$W/logs/probe.out" "$t_up" "$back_ms")
	if [ -z "$late" ]; then
		# Two of the gateway's spread checks (every 5 s, docs/0035) see
		# every tunnel back before the next kill: the agents then hold
		# the spread this gateway tells for all of them.
		sleep 10
		R_af[k]=$(probe_stats "$W/logs/probe.out" "$((back_ms + 500))" "$(now_ms)")
	else
		R_af[k]="- - - - -"
	fi
	say "storm $((k + 1)): all back ${R_back[k]} s after the new start, dials ${R_dials[k]}, load ${R_load[k]}"
	[ -z "$late" ]
}

# row FIGURE VALUES...: one table row.
row() { local line="| $1 |"; shift; for v in "$@"; do line+=" $v |"; done; echo "$line"; }
# cols ARRAY: the values of R_ARRAY for the storms that ran ("-" if unset).
cols() { local -n a=$1; local k; for k in "${DONE[@]}"; do echo "${a[k]:--}"; done; }
# report: the table of the storms that ran; "INCOMPLETE: why" if they were not all.
report() {
	REPORTED=1
	local hdr="| figure |" sep="|---|" k w v l nl ns=() vals=() fig
	echo
	echo "Tether reconnect storm: $N agents (tether-swarm, $NSW process(es)) after a gateway $([ "$KILL" = KILL ] && echo "kill -9" || echo "stop (SIGTERM)") and restart"
	echo "  command:  $COMMAND_LINE"
	echo "  binaries: $TETHER_BIN ($("$GATEWAY" --version | head -1))"
	echo "  machine:  $(nproc) CPUs, $(uname -sr), load average $(cut -d' ' -f1-3 /proc/loadavg)"
	echo "  serve flags: ${GW_FLAGS:-(defaults)} (and the per-source caps raised: every agent dials from 127.0.0.1)"
	[ -z "${BENCH_GW_CPUS:-}${BENCH_SWARM_CPUS:-}" ] ||
		echo "  CPUs (taskset -c): the storms' gateways on ${BENCH_GW_CPUS:-any}, the registering one on any, the swarms on ${BENCH_SWARM_CPUS:-any}"
	echo "  first registration at $RATE/s, ${REG_LOOPS:-the default} loop(s): all $N active after $reg_s s (CPU: gateway $reg_gcpu s, swarms $reg_scpu s)"
	echo
	for k in "${DONE[@]}"; do w=${LOOPS[k]}; hdr+=" ${w:+--workers $w}"; [ -n "$w" ] || hdr+=" value"; hdr+=" |"; sep+="---:|"; ns+=("$N"); done
	echo "$hdr"
	echo "$sep"
	row "agents" "${ns[@]}"
	mapfile -t vals < <(cols R_cpus); row "the gateway's CPUs (Cpus_allowed_list)" "${vals[@]}"
	mapfile -t vals < <(cols R_stop); row "gateway stop (SIG$KILL until exit) (s)" "${vals[@]}"
	mapfile -t vals < <(cols R_back); row "all active again, from the new gateway's start (s)" "${vals[@]}"
	mapfile -t vals < <(cols R_total); row "all active again, from the stop (s)" "${vals[@]}"
	mapfile -t vals < <(cols R_load); row "load average (1 min) when all were back" "${vals[@]}"
	mapfile -t vals < <(cols R_probe); row "probe tunnel back at (s after the new start)" "${vals[@]}"
	mapfile -t vals < <(cols R_spread); row "redial spread told before the stop (ms, SETTINGS)" "${vals[@]}"
	mapfile -t vals < <(cols R_draws); row "first redials drawn in that spread" "${vals[@]}"
	mapfile -t vals < <(cols R_dials); row "dials during the storm (per agent)" "${vals[@]}"
	mapfile -t vals < <(cols R_nogw); row "of them before / after the new gateway was ready (after, per agent)" "${vals[@]}"
	mapfile -t vals < <(cols R_refused); row "upgrades answered 503 (--max-handshakes, after --handshake-wait)" "${vals[@]}"
	mapfile -t vals < <(cols R_shed); row "connections shed by the TLS queue (tether_tls_shed_total)" "${vals[@]}"
	mapfile -t vals < <(cols R_accept); row "of them closed at accept (the queue held what it finishes in time)" "${vals[@]}"
	mapfile -t vals < <(cols R_gcpu); row "gateway CPU during the storm (s)" "${vals[@]}"
	mapfile -t vals < <(cols R_scpu); row "swarms' CPU during the storm (s)" "${vals[@]}"
	# Per loop: "handshakes / CPU s / tunnels" since the new start; per link
	# between loops: "streams / MiB".
	nl=$(for k in "${DONE[@]}"; do tr ' ' '\n' <<<"${R_loops[k]:-}" | grep -c '^[0-9]*='; done | sort -n | tail -n 1)
	for ((l = 0; l < ${nl:-0}; l++)); do
		vals=()
		for k in "${DONE[@]}"; do
			v=$(tr ' ' '\n' <<<"${R_loops[k]:-}" | awk -F'[=/]' -v l="$l" '$1 == l { printf "%d / %.1f / %s\n", $2, $3, $4 }')
			vals+=("${v:--}")
		done
		row "loop $l: TLS handshakes / CPU s / tunnels, since the new start" "${vals[@]}"
	done
	for fig in $(for k in "${DONE[@]}"; do tr ' ' '\n' <<<"${R_loops[k]:-}" | grep -o '^[0-9]*>[0-9]*'; done | sort -u); do
		vals=()
		for k in "${DONE[@]}"; do
			v=$(tr ' ' '\n' <<<"${R_loops[k]:-}" | awk -F'[=/]' -v f="$fig" '$1 == f { printf "%d / %.1f\n", $2, $3 / 1048576 }')
			vals+=("${v:--}")
		done
		row "link loop ${fig/>/ -> loop }: streams / MiB" "${vals[@]}"
	done
	echo
	echo "| probe tunnel ping round trip | pings | worst p50 (ms) | worst p99 (ms) | max (ms) | lost |"
	echo "|---|---:|---:|---:|---:|---:|"
	echo "| before the restart, idle | $idle_n | $idle_p50 | $idle_p99 | $idle_max | $idle_lost |"
	local a b c d e
	for k in "${DONE[@]}"; do
		read -r a b c d e <<<"${R_st[k]:-- - - - -}"
		echo "| storm $((k + 1))${LOOPS[k]:+ (--workers ${LOOPS[k]})}: during (probe back .. all active) | $a | $b | $c | $d | $e |"
		read -r a b c d e <<<"${R_af[k]:-- - - - -}"
		echo "| storm $((k + 1)): after | $a | $b | $c | $d | $e |"
	done
	echo
	echo "Dials before the new gateway was ready found none (refused at TCP); those after"
	echo "are what the gateway had to take.  worst p50/p99: the highest of the per-500 ms"
	echo "figures in that window; lost: pings unanswered within 1 s."
	[ -z "$STOPPED" ] || { echo; echo "INCOMPLETE: $STOPPED"; }
}

REPORTED=0
for k in "${!LOOPS[@]}"; do storm "$k" "${LOOPS[$k]}" || break; done
report
[ -z "$STOPPED" ]
