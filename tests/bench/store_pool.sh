#!/usr/bin/env bash
# store_pool.sh: registrations per second for N agents at once, on SQLite,
# PostgreSQL on loopback and PostgreSQL 20 ms away, in one run (issue 23,
# docs/0035, docs/0038).
#
# A benchmark, not a test: it reports figures and fails only when it cannot
# take them.  A private PostgreSQL (lib.sh pg_start) and, for the far store,
# a TCP relay that delays every byte by BENCH_DELAY_MS (default 10) each way
# (tests/bench/delay_relay.py: a round trip costs 2x that, 20 ms by
# default).  For each store, a fresh gateway (the default --store-pool, or
# STORE_POOL) and N agents started at once (one tether-swarm, one token of N
# uses): seconds until the gateway has logged N registrations, and until
# the swarm reports all N active.  A run stops waiting after BENCH_LIMIT_S
# (default 300) and reports what it got by then ("640 in 300 s": the rate
# is still measured).
#
# With BASE_BIN (an earlier release's bin directory) each store runs on it
# first, then on TETHER_BIN, and the table holds both side by side with the
# ratio of their registrations per second: before and after in one run.
# Each row also gives the gateway's CPU (utime + stime, /proc) until all
# were active (or the limit), per agent: what one join costs it; and the
# swarm's, per agent: what the agents' side of a join costs the same
# cores (both together are the floor of a join's CPU on this machine).
#
# usage: bash tests/bench/store_pool.sh [N]   (default 1000)
#   TETHER_BIN      default build/release/bin
#   BASE_BIN        optional: the build to compare with
#   STORE_POOL      optional: --store-pool for every gateway
#   BENCH_DELAY_MS  the relay's delay each way (default 10)
#   BENCH_LIMIT_S   the longest wait for one gateway's agents (default 300)
#   BENCH_STORES    which stores, default "sqlite loopback far"
#   BENCH_KEEP      a directory the logs are copied to at the end
#   BENCH_WORKERS   the gateway's --workers, one row per value (default:
#                   the gateway's own default, one row), e.g. "1 2"
#   BENCH_GW_FLAGS  extra `serve` flags (default none)
#   BENCH_GW_CPUS   the CPUs the gateways may run on (taskset -c LIST, e.g.
#                   "0,1": a 2-core gateway on a bigger machine)
#   BENCH_SWARM_CPUS the CPUs of the swarms (taskset -c LIST)
#   BENCH_SWARMS    tether-swarm processes sharing the N agents (default 1:
#                   one swarm is one loop, about 1.4 ms of CPU per agent
#                   on a 16-core Xeon: 1,000 agents at once take it 1.4 s,
#                   the gateway's time included; more where cores allow)
# PostgreSQL and the relay are started only for the stores that use them
# (BENCH_STORES=sqlite needs neither: a machine with no PostgreSQL).
set -euo pipefail

SRC=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
export TETHER_BIN=${TETHER_BIN:-$SRC/build/release/bin}
export ASAN_OPTIONS=
# shellcheck source=../integration/lib.sh
source "$SRC/tests/integration/lib.sh"
TEST_NAME=store_pool
DELAY_MS=${BENCH_DELAY_MS:-10}
LIMIT_S=${BENCH_LIMIT_S:-300}
STORES=${BENCH_STORES:-sqlite loopback far}
N=${1:-1000}
read -r -a LOOPS <<<"${BENCH_WORKERS:-}"
[ "${#LOOPS[@]}" -gt 0 ] || LOOPS=("")
GW_PIN=() SW_PIN=()
[ -z "${BENCH_GW_CPUS:-}" ] || GW_PIN=(taskset -c "$BENCH_GW_CPUS")
[ -z "${BENCH_SWARM_CPUS:-}" ] || SW_PIN=(taskset -c "$BENCH_SWARM_CPUS")
SWARMS=${BENCH_SWARMS:-1}
[[ "$SWARMS" =~ ^[1-9][0-9]*$ ]] && [ "$SWARMS" -le "$N" ] ||
	fail "BENCH_SWARMS is $SWARMS: a count from 1 to N ($N)"
AFTER_BIN=$TETHER_BIN
ulimit -Sn "$(ulimit -Hn)"

echo "# store_pool.sh $(date -u +%FT%TZ) $(nproc) CPUs, $(uname -r), load $(cut -d' ' -f1-3 /proc/loadavg)"
echo "# TETHER_BIN=$AFTER_BIN BASE_BIN=${BASE_BIN:-none} N=$N delay=${DELAY_MS}ms each way" \
	"store-pool=${STORE_POOL:-default} limit=${LIMIT_S}s workers=${BENCH_WORKERS:-default} swarms=$SWARMS" \
	"flags=${BENCH_GW_FLAGS:-none} gateway-cpus=${BENCH_GW_CPUS:-any} swarm-cpus=${BENCH_SWARM_CPUS:-any}"

# BENCH_KEEP=DIR: the gateways' logs and the swarms' reports are copied
# there at the end.
[ -z "${BENCH_KEEP:-}" ] ||
	on_cleanup 'mkdir -p "$BENCH_KEEP"; cp "$T"/*.log "$T"/*.out.* "${PG_DIR:-$T}/log" "$BENCH_KEEP"/ 2>/dev/null'
NEAR='' FAR=''
if [ "$STORES" != sqlite ]; then
	pg_start
	RELAY_PORT=$(free_port)
	python3 "$SRC/tests/bench/delay_relay.py" "$RELAY_PORT" "$PG_PORT" "$DELAY_MS" \
		>"$T/relay.log" 2>&1 &
	PIDS+=($!)
	wait_until 10 "the delay relay" grep -q '^ready' "$T/relay.log"
	FAR=postgres://postgres@127.0.0.1:$RELAY_PORT/tether
	NEAR=$PG_URL
fi
now_ms() { date +%s%3N; }
secs() { echo "scale=2; $1 / 1000" | bc; }
# cpu_ms PID: the process's user + system CPU so far, in ms.
cpu_ms() {
	local f
	read -r -a f <"/proc/$1/stat"
	# Fields 14 and 15 (utime, stime), counting from 1; comm has no space.
	echo $(((f[13] + f[14]) * 1000 / $(getconf CLK_TCK)))
}

# run BIN LABEL URL WORKERS: prints "registered reg_ms active act_ms cpu_ms
# swarm_cpu_ms" (the counts reached and when, the limit's ms when a count
# stopped short; the gateway's CPU from the swarm's start until then, and
# the swarm's own).
run() {
	local bin=$1 label=$2 url=$3 workers=$4 dir t0 now reg_ms= act_ms= regs=0 act=0 pool=() c0 c1 s1=0
	local i n sw=() outs=() p o a
	dir=$T/$label-$RANDOM
	[ "$label" != sqlite ] || url=sqlite://$dir/tether.db
	[ "$label" = sqlite ] || psql -X -q "$NEAR" -c 'DROP SCHEMA public CASCADE; CREATE SCHEMA public' 2>/dev/null
	[ -z "${STORE_POOL:-}" ] || pool=(--store-pool "$STORE_POOL")
	GATEWAY=$bin/tether-gateway CTL=$bin/tetherctl
	GW_PORT=$(free_port)
	GW_URL=https://127.0.0.1:$GW_PORT
	GW_DIR=$dir
	"$GATEWAY" init --data-dir "$dir" --url "$GW_URL" --store "$url" >"$dir.init" 2>&1
	export TETHER_SERVER=$GW_URL TETHER_TOKEN_FILE=$dir/admin.token TETHER_CACERT=$dir/ca.crt
	# shellcheck disable=SC2086  # BENCH_GW_FLAGS is a list of flags
	"${GW_PIN[@]}" "$GATEWAY" serve --data-dir "$dir" --listen "127.0.0.1:$GW_PORT" --store "$url" \
		"${pool[@]}" --max-handshakes 4096 --max-handshakes-per-source 100000 \
		--max-tls-per-source 100000 --max-connections-per-source 100000 \
		--handshake-timeout 600000 --hello-timeout 600000 \
		${workers:+--workers "$workers"} ${BENCH_GW_FLAGS:-} >"$dir.log" 2>&1 &
	GW_PID=$!
	PIDS+=("$GW_PID")
	wait_until 60 "gateway $label ready" gateway_ready
	ctl token create --cluster "$(cluster_create regs)" --uses "$N" >"$dir.json"
	c0=$(cpu_ms "$GW_PID")
	t0=$(now_ms)
	for ((i = 0; i < SWARMS; i++)); do
		n=$((N / SWARMS + (i < N % SWARMS ? 1 : 0)))
		outs+=("$dir.out.$i")
		"${SW_PIN[@]}" "$bin/tether-swarm" --join "$dir.json" --ca-file "$dir/ca.crt" --agents "$n" \
			--prefix "$label-$i" --report-ms 250 --log-level error >"$dir.out.$i" 2>&1 &
		sw+=($!)
		PIDS+=($!)
	done
	while :; do
		now=$(now_ms)
		if [ -z "$reg_ms" ]; then
			regs=$(grep -c 'msg="agent registered"' "$dir.log" || true)
			[ "$regs" -lt "$N" ] || reg_ms=$((now - t0))
		fi
		if [ "$(cat "${outs[@]}" | grep -c '^swarm all_active')" -ge "$SWARMS" ]; then
			act=$N act_ms=$((now - t0))
			break
		fi
		if [ $((now - t0)) -ge $((LIMIT_S * 1000)) ]; then
			act=0
			for o in "${outs[@]}"; do
				a=$(sed -n 's/^swarm ms=.* active=\([0-9]*\).*/\1/p' "$o" | tail -n 1)
				act=$((act + ${a:-0}))
			done
			act_ms=$((now - t0))
			break
		fi
		for i in "${!sw[@]}"; do
			kill -0 "${sw[i]}" 2>/dev/null || fail "swarm $i exited: $(tail -n 2 "${outs[i]}")"
		done
		sleep 0.1
	done
	[ -n "$reg_ms" ] || reg_ms=$act_ms
	c1=$(cpu_ms "$GW_PID")
	for p in "${sw[@]}"; do s1=$((s1 + $(cpu_ms "$p"))); done
	for p in "${sw[@]}"; do kill -TERM "$p"; wait "$p" || true; done
	kill -TERM "$GW_PID"; wait "$GW_PID" || true
	echo "$regs $reg_ms $act $act_ms $((c1 - c0)) $s1"
}

# cell COUNT MS: "12.34" when COUNT is N, else "640 in 300.00".
cell() {
	if [ "$1" -ge "$N" ]; then secs "$2"; else echo "$1 in $(secs "$2")"; fi
}
rate() { echo "scale=1; $1 * 1000 / $2" | bc; }
# per_agent CPU_MS: a process's CPU per agent, ms.
per_agent() { echo "scale=2; $1 / $N" | bc; }

echo
if [ -n "${BASE_BIN:-}" ]; then
	echo "| store | workers | agents | before: registered (s) | all active (s) | registrations/s | gateway CPU per agent (ms) | swarm CPU per agent (ms) | after: registered (s) | all active (s) | registrations/s | gateway CPU per agent (ms) | swarm CPU per agent (ms) | ratio |"
	echo "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"
else
	echo "| store | workers | agents | registered (s) | all active (s) | registrations/s | gateway CPU per agent (ms) | swarm CPU per agent (ms) |"
	echo "|---|---:|---:|---:|---:|---:|---:|---:|"
fi
for store in $STORES; do
for workers in "${LOOPS[@]}"; do
	case $store in
	sqlite) label=sqlite url= ;;
	loopback) label=postgres-loopback url=$NEAR ;;
	far) label=postgres-$((2 * DELAY_MS))ms url=$FAR ;;
	*) fail "unknown store $store (sqlite, loopback, far)" ;;
	esac
	if [ -n "${BASE_BIN:-}" ]; then
		run "$BASE_BIN" "$label" "$url" "$workers" >"$T/result"
		read -r b_regs b_reg b_act b_actms b_cpu b_sw < <(tail -n 1 "$T/result")
		b_rate=$(rate "$b_regs" "$b_reg")
		before="$(cell "$b_regs" "$b_reg") | $(cell "$b_act" "$b_actms") | $b_rate | $(per_agent "$b_cpu") | $(per_agent "$b_sw")"
	fi
	# Not in a subshell: the gateway and swarm it starts stay in PIDS,
	# which lib.sh's trap stops on any exit.
	run "$AFTER_BIN" "$label" "$url" "$workers" >"$T/result"
	read -r a_regs a_reg a_act a_actms a_cpu a_sw < <(tail -n 1 "$T/result")
	a_rate=$(rate "$a_regs" "$a_reg")
	after="$(cell "$a_regs" "$a_reg") | $(cell "$a_act" "$a_actms") | $a_rate | $(per_agent "$a_cpu") | $(per_agent "$a_sw")"
	if [ -z "${BASE_BIN:-}" ]; then
		echo "| $label | ${workers:-default} | $N | $after |"
	else
		echo "| $label | ${workers:-default} | $N | $before | $after | $(echo "scale=2; $a_rate / $b_rate" | bc) |"
	fi
	echo "# load $(cut -d' ' -f1-3 /proc/loadavg)"
done
done
echo "# load at the end $(cut -d' ' -f1-3 /proc/loadavg)"
