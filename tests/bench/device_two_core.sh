#!/usr/bin/env bash
# device_two_core.sh: issue 23's "on this 2-core machine, 1 loop against 2
# loops", taken on a lent machine with more cores: the gateway is held to
# two of them (taskset -c 0,1) and the load generators run on the others,
# so that they take nothing from it (on a shared 2-core machine they did,
# and so did everything else running there).  One run that ends inside
# TWO_BUDGET_S, from a bundle of this build (tests/bench/bundle.sh: the
# binaries, their libraries, the loader, curl, jq, bc and taskset).
#
# From the repository root on that machine:
#     bash tests/bench/device_two_core.sh .devbundle
# Two parts, in this order, each with its own share of the time; a run
# that would not fit what is left is not started and the summary says
# "not run: budget":
#   joins  store_pool.sh with SQLite: JOIN_N agents started at once
#          (registrations per second, gateway CPU per agent), once per
#          TWO_JOINS entry: the gateway held to TWO_GW_CPUS at --workers 1
#          and 2, on any CPU at --workers 16 (the swarm on TWO_SWARM_CPUS
#          when the gateway is held, on any CPU when it is not);
#   storm  reconnect_storm.sh with BENCH_KILL=KILL: STORM_N agents
#          register with a gateway on any CPU (TWO_STORM_REG_WORKERS
#          loops), then per TWO_STORM_WORKERS value the gateway is killed
#          (SIGKILL) and started again held to TWO_GW_CPUS: seconds until
#          all are active, dials per agent, the gateway's CPU and each
#          loop's (tests/bench/loops.sh).
# First, a check that taskset holds here (dev_pin_check: a sandbox may take
# the call and ignore it); the summary says so if it does not.
#
# Into $OUT (8 files; summary.md, joins.md and storm.md written as each run
# ends, so a run cut short still leaves what was done):
#   summary.md   the figures: one table for the joins, the storm's rows
#   joins.md     store_pool.sh's output, each run's
#   storm.md     reconnect_storm.sh's report
#   progress.log the progress lines of the scripts and of this one
#   machine.txt  CPUs, memory, kernel, limits, the pinning check, commands
#   samples.txt  every 2 s: the load and each Tether process (threads, CPU
#                ticks, RSS, descriptors)
#   gateway.txt  the storm gateways' log lines counted by message, the last 200
#   logs.tar.gz  the storm's and the joins' logs
#
#   TWO_BUDGET_S       seconds the whole run may take (default 225)
#   TWO_GW_CPUS        the gateway's CPUs when held (default 0,1)
#   TWO_SWARM_CPUS     the load generators' (default 2 to the last CPU)
#   TWO_JOINS          the join runs, WORKERS:held or WORKERS:any (default
#                      "1:held 2:held 16:any")
#   TWO_JOIN_N         agents per join run (default 1000)
#   TWO_JOIN_SWARMS    tether-swarm processes sharing them (default 4: one
#                      swarm, one loop, took 1.4 s of CPU for 1,000 and set
#                      the pace of the first run here)
#   TWO_JOIN_LIMIT_S   the longest wait for one run's agents (default 20)
#   TWO_JOINS_BUDGET_S seconds for all the join runs (default 60)
#   TWO_STORM_N        agents in the storm (default 19800)
#   TWO_STORM_WORKERS  --workers of the storms, one each (default "1 2")
#   TWO_STORM_REG_WORKERS the registering gateway's --workers (default:
#                      the CPUs there are)
#   TWO_RATE           agents/s of the storm's first registration (1000)
#   TWO_PER_SWARM      agents per tether-swarm process (default 2475)
#   BENCH_GW_FLAGS     `serve` flags of every gateway (default
#                      "--landing any")
#   OUT                where the files go (default ./device-two-core-out)
set -uo pipefail

OUT=${OUT:-$PWD/device-two-core-out}
mkdir -p "$OUT" || exit 1
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
DEVICE_TAG=device_two_core
# shellcheck source=tests/bench/device_lib.sh
. "$HERE/device_lib.sh"
say() { dev_say "$@"; }
[ $# -eq 1 ] || { say "usage: $0 BUNDLE_DIR"; exit 2; }
BUDGET=${TWO_BUDGET_S:-225}
GW_CPUS=${TWO_GW_CPUS:-0,1}
JOINS=${TWO_JOINS:-1:held 2:held 16:any}
JOIN_N=${TWO_JOIN_N:-1000}
JOIN_SWARMS=${TWO_JOIN_SWARMS:-4}
JOIN_LIMIT=${TWO_JOIN_LIMIT_S:-20}
JOINS_BUDGET=${TWO_JOINS_BUDGET_S:-60}
N=${TWO_STORM_N:-19800}
STORM_WORKERS=${TWO_STORM_WORKERS:-1 2}
RATE=${TWO_RATE:-1000}
PER_SWARM=${TWO_PER_SWARM:-2475}
export BENCH_GW_FLAGS=${BENCH_GW_FLAGS---landing any}
STORM_MIN_S=60   # a storm part given less is not started
JOIN_MIN_S=15    # nor a join run

dev_setup "$1" "curl jq bc taskset" || exit 1
NCPU=$(nproc)
REG=${TWO_STORM_REG_WORKERS:-$NCPU}
if [ -n "${TWO_SWARM_CPUS:-}" ]; then
	SWARM_CPUS=$TWO_SWARM_CPUS
elif [ "$NCPU" -ge 4 ]; then
	SWARM_CPUS=2-$((NCPU - 1))
else
	say "$NCPU CPUs: set TWO_GW_CPUS and TWO_SWARM_CPUS (e.g. 0 and 1)"
	exit 2
fi
hard=$(ulimit -Hn)
if [ "$hard" != unlimited ] && [ "$hard" -lt $((N + 200)) ]; then
	say "the open-files limit is $hard: $N agents do not fit; the storm runs $((hard - 200))"
	N=$((hard - 200))
fi

dev_pin_judge "$GW_CPUS"
PIN_HELD=$DEV_PIN_HELD PIN_LINE=$DEV_PIN_LINE
say "$PIN_LINE"

{
	echo "command: OUT=$OUT TWO_BUDGET_S=$BUDGET TWO_GW_CPUS=$GW_CPUS TWO_SWARM_CPUS=$SWARM_CPUS TWO_JOINS='$JOINS' TWO_JOIN_N=$JOIN_N TWO_JOIN_SWARMS=$JOIN_SWARMS TWO_JOIN_LIMIT_S=$JOIN_LIMIT TWO_JOINS_BUDGET_S=$JOINS_BUDGET TWO_STORM_N=${TWO_STORM_N:-} TWO_STORM_WORKERS='$STORM_WORKERS' TWO_STORM_REG_WORKERS=$REG TWO_RATE=$RATE TWO_PER_SWARM=$PER_SWARM BENCH_GW_FLAGS='$BENCH_GW_FLAGS' bash $0 $1"
	echo "pinning: $PIN_LINE"
	dev_machine
} >"$OUT/machine.txt"

dev_sampler_start "$OUT/samples.txt"
WORK=$TMPDIR/tether-device-two-core.$$
mkdir -p "$WORK/logs"
trap 'dev_sampler_stop; rm -rf "$WORK"' EXIT
JOIN_ROWS=$WORK/join-rows
: >"$JOIN_ROWS"
: >"$OUT/joins.md"
STORM_STATE="not run yet"

# summary: $OUT/summary.md from what is done so far.
summary() {
	{
		echo "# Two cores of $NCPU: the gateway on CPUs $GW_CPUS, the load generators on $SWARM_CPUS"
		echo
		echo "$(date -u +%FT%TZ), $("$B/bin/tether-gateway" --version | head -1), serve flags: ${BENCH_GW_FLAGS:-(defaults)}"
		echo "pinning: $PIN_LINE"
		echo "hardware threads sharing a core: $(dev_siblings)"
		[ "$PIN_HELD" = held ] || echo "**taskset did not hold the gateway here: the 'held' rows are of a gateway on any CPU**"
		echo
		echo "## $JOIN_N agents joining at once, SQLite (store_pool.sh; goal >= 1,000 registrations/s)"
		echo
		echo "| gateway CPUs | store | workers | agents | registered (s) | all active (s) | registrations/s | gateway CPU per agent (ms) | swarm CPU per agent (ms) |"
		echo "|---|---|---:|---:|---:|---:|---:|---:|---:|"
		cat "$JOIN_ROWS"
		echo
		echo "## kill -9 storm, $N agents (reconnect_storm.sh; goal <= 15 s and <= 1.3 dials per agent): $STORM_STATE"
		echo
		if [ -s "$OUT/storm.md" ]; then
			grep -E '^  (first registration|CPUs )' "$OUT/storm.md"
			echo
			# The first table's rows that answer the issue.
			awk '/^\| figure/ { on = 1 } on && /^$/ { exit } on' "$OUT/storm.md" |
				grep -E '^(\|---|\| (figure|agents|the gateway.s CPUs|all active again|dials during|of them before|upgrades answered|gateway CPU during|swarms. CPU during|load average|loop [0-9]+:))'
			grep '^INCOMPLETE' "$OUT/storm.md"
		fi
	} >"$OUT/summary.md"
}
summary

# Part 1: the joins.
jt0=$SECONDS
jbudget=$(($(dev_left "$BUDGET") - STORM_MIN_S - 10))
[ "$jbudget" -le "$JOINS_BUDGET" ] || jbudget=$JOINS_BUDGET
for spec in $JOINS; do
	w=${spec%%:*} how=${spec#*:}
	case $how in
	held) gcpus=$GW_CPUS scpus=$SWARM_CPUS ;;
	any) gcpus='' scpus='' ;;
	*) say "TWO_JOINS: '$spec' is not WORKERS:held or WORKERS:any"; exit 2 ;;
	esac
	jleft=$((jbudget - (SECONDS - jt0)))
	if [ "$jleft" -lt "$JOIN_MIN_S" ]; then
		say "joins at --workers $w ($how): not run: budget ($jleft s left of $jbudget)"
		echo "| ${gcpus:-any} | sqlite | $w | $JOIN_N | not run: budget | | | | |" >>"$JOIN_ROWS"
		continue
	fi
	lim=$((jleft - 10 < JOIN_LIMIT ? jleft - 10 : JOIN_LIMIT))
	say "joins: $JOIN_N agents at once, --workers $w, gateway on ${gcpus:-any CPU}, limit $lim s"
	echo "## --workers $w, gateway CPUs ${gcpus:-any}, swarm CPUs ${scpus:-any}" >>"$OUT/joins.md"
	BENCH_STORES=sqlite BENCH_WORKERS=$w BENCH_SWARMS=$JOIN_SWARMS BENCH_LIMIT_S=$lim BENCH_GW_CPUS=$gcpus BENCH_SWARM_CPUS=$scpus \
		BENCH_KEEP=$WORK/logs/joins-$w-$how \
		timeout -k 5 $((jleft - 5)) bash "$HERE/store_pool.sh" "$JOIN_N" >"$WORK/join.out" 2>>"$OUT/progress.log"
	rc=$?
	cat "$WORK/join.out" >>"$OUT/joins.md"
	row=$(grep '^| sqlite |' "$WORK/join.out" | tail -n 1)
	if [ "$rc" = 0 ] && [ -n "$row" ]; then
		echo "| ${gcpus:-any} $row" >>"$JOIN_ROWS"
	else
		echo "| ${gcpus:-any} | sqlite | $w | $JOIN_N | no figure: store_pool.sh exited $rc (see progress.log) | | | | |" >>"$JOIN_ROWS"
	fi
	echo >>"$OUT/joins.md"
	summary
done

# Part 2: the storm.  Its own deadline leaves ~25 s for its report;
# timeout(1) is the backstop (reconnect_storm.sh reports on SIGTERM too).
sleft=$(($(dev_left "$BUDGET") - 10))
if [ "$sleft" -lt "$STORM_MIN_S" ]; then
	STORM_STATE="not run: budget ($sleft s left)"
	say "storm: $STORM_STATE"
else
	STORM_STATE="running"
	summary
	say "storm: $N agents, --workers '$STORM_WORKERS' on CPUs $GW_CPUS, $sleft s"
	BENCH_KILL=KILL BENCH_WORKERS="$STORM_WORKERS" BENCH_REG_WORKERS=$REG BENCH_RATE=$RATE \
		BENCH_PER_SWARM=$PER_SWARM BENCH_GW_CPUS=$GW_CPUS BENCH_SWARM_CPUS=$SWARM_CPUS \
		BENCH_KEEP=$WORK/storm BENCH_DEADLINE_S=$((sleft - 25)) \
		timeout -k 5 $((sleft - 5)) bash "$HERE/reconnect_storm.sh" "$N" \
		>"$OUT/storm.md" 2>>"$OUT/progress.log"
	rc=$?
	STORM_STATE="reconnect_storm.sh exited $rc after $((SECONDS - DEV_T0)) s"
	say "storm: $STORM_STATE"
	[ -s "$OUT/storm.md" ] || STORM_STATE+=", no report (the first registration was not over: see progress.log)"
fi
dev_sampler_stop
summary
[ ! -d "$WORK/storm/logs" ] || mv "$WORK/storm/logs"/* "$WORK/logs/"
dev_logs "$WORK"
say "done in $((SECONDS - DEV_T0)) s; files in $OUT: $(cd "$OUT" && echo *)"
cat "$OUT/summary.md"   # in the command's own output too
