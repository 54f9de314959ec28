#!/usr/bin/env bash
# device_storm.sh: issue 23's kill -9 reconnect storm at 1, 2, 4, 8 and 16
# loops, in one short run on a lent machine with more cores, from a bundle
# of this build (tests/bench/bundle.sh: the binaries, their libraries and
# the loader; nothing is installed there).
#
# From the repository root on that machine:
#     bash tests/bench/device_storm.sh .devbundle
# It rewrites the bundle's wrappers for where it is, raises the open-files
# limit as far as the machine lets it, checks that curl, jq, bc and the
# Tether binaries all come from the bundle, and runs
#     BENCH_KILL=KILL BENCH_WORKERS="1 2 4 8 16" reconnect_storm.sh N
# with BENCH_DEADLINE_S set so that it ends, report written, inside
# STORM_BUDGET_S (a storm not over by then is reported as far as it got,
# and the storms after it are not run).  Into $OUT (at most 8 files):
#   report.md     reconnect_storm.sh's report (stdout)
#   calibration.md the same for 1,000 agents and one storm at
#                 STORM_REG_WORKERS loops, run first: N is cut if its
#                 registration would take over a quarter of what is left
#   progress.log  its progress lines, then this script's own lines
#   machine.txt   CPUs, memory, kernel, limits, the exact command
#   samples.txt   every 2 s: load, and each Tether process's threads, CPU
#                 ticks, RSS and descriptors
#   gateway.txt   the gateway logs' lines counted by message, and the last 200
#   logs.tar.gz   the work directory's logs (the gateway's left out if the
#                 archive would pass 15 MiB)
#
#   STORM_N          agents (default 19800: two swarms of 9,900)
#   STORM_WORKERS    the --workers values, one storm each (default "1 2 4 8 16")
#   STORM_BUDGET_S   seconds the whole run may take (default 450)
#   STORM_RATE       first registration, agents/s (default 1000)
#   STORM_REG_WORKERS the first gateway's --workers, the agents register
#                    with it (default: the largest of STORM_WORKERS)
#   STORM_PER_SWARM  agents per tether-swarm process (default 2475: 8 load
#                    generators for 19,800 where cores allow)
#   STORM_CALIBRATE  0: no calibration run (default 1)
#   OUT              where the files go (default ./device-storm-out)
set -uo pipefail

OUT=${OUT:-$PWD/device-storm-out}
mkdir -p "$OUT" || exit 1
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
DEVICE_TAG=device_storm
# shellcheck source=tests/bench/device_lib.sh
. "$HERE/device_lib.sh"
T0=$DEV_T0
say() { dev_say "$@"; }
[ $# -eq 1 ] || { say "usage: $0 BUNDLE_DIR"; exit 2; }
N=${STORM_N:-19800}
WORKERS=${STORM_WORKERS:-1 2 4 8 16}
BUDGET=${STORM_BUDGET_S:-450}
RATE=${STORM_RATE:-1000}
REG=${STORM_REG_WORKERS:-$(tr ' ' '\n' <<<"$WORKERS" | sort -n | tail -n 1)}
PER_SWARM=${STORM_PER_SWARM:-2475}

dev_setup "$1" "curl jq bc" || exit 1
hard=$(ulimit -Hn)
if [ "$hard" != unlimited ] && [ "$hard" -lt $((N + 200)) ]; then
	say "the open-files limit is $hard: $N agents do not fit; running $((hard - 200))"
	N=$((hard - 200))
fi

{
	echo "command: OUT=$OUT STORM_N=${STORM_N:-} STORM_WORKERS='$WORKERS' STORM_BUDGET_S=$BUDGET STORM_RATE=$RATE STORM_REG_WORKERS=$REG STORM_PER_SWARM=$PER_SWARM bash $0 $1"
	echo "storm:   BENCH_KILL=KILL BENCH_WORKERS='$WORKERS' BENCH_REG_WORKERS=$REG BENCH_PER_SWARM=$PER_SWARM BENCH_RATE=$RATE bash tests/bench/reconnect_storm.sh $N"
	dev_machine
} >"$OUT/machine.txt"

# samples: every 2 s, the load and each Tether process.
dev_sampler_start "$OUT/samples.txt"
trap dev_sampler_stop EXIT
WORK=$TMPDIR/tether-device-storm.$$

# Calibration: 1,000 agents registered and one storm at REG loops, to see
# whether N's first registration fits; N is cut so that it takes about a
# quarter of what is left (the storms need the rest), and says so.
if [ "${STORM_CALIBRATE:-1}" = 1 ] && [ "$N" -gt 1000 ]; then
	say "calibration: 1000 agents, one storm at $REG loop(s)"
	BENCH_KILL=KILL BENCH_WORKERS="$REG" BENCH_RATE=$RATE BENCH_REG_WORKERS=$REG \
		BENCH_PER_SWARM=$PER_SWARM BENCH_DEADLINE_S=60 \
		timeout -k 5 70 bash "$HERE/reconnect_storm.sh" 1000 >"$OUT/calibration.md" 2>>"$OUT/progress.log"
	reg=$(awk '/first registration at/ { for (i = 1; i < NF; i++) if ($i == "after") { print $(i + 1); exit } }' "$OUT/calibration.md")
	left=$((BUDGET - (SECONDS - T0)))
	if [ -n "$reg" ]; then
		fit=$(awk -v r="$reg" -v l="$left" 'BEGIN { n = int(1000 / r * l / 4 / 100) * 100; print (n < 1000 ? 1000 : n) }')
		say "calibration: 1000 registered in $reg s; ${left} s left: $fit agents register in about a quarter of it"
		if [ "$fit" -lt "$N" ]; then
			say "N cut from $N to $fit so that the storms fit the budget"
			N=$fit
		fi
	else
		say "calibration gave no registration time (see calibration.md); N stays $N"
	fi
	echo "calibration: 1000 agents registered in ${reg:-?} s; N=$N" >>"$OUT/machine.txt"
fi
left=$((BUDGET - (SECONDS - T0)))
say "$N agents, workers '$WORKERS', $left s left of $BUDGET; work directory $WORK"
# The storm script's own deadline leaves ~40 s for its report and this
# script's collection; timeout(1) is the backstop.
BENCH_KILL=KILL BENCH_WORKERS="$WORKERS" BENCH_RATE=$RATE BENCH_KEEP=$WORK \
	BENCH_REG_WORKERS=$REG BENCH_PER_SWARM=$PER_SWARM \
	BENCH_DEADLINE_S=$((left - 40)) \
	timeout -k 10 $((left - 15)) bash "$HERE/reconnect_storm.sh" "$N" \
	>"$OUT/report.md" 2>>"$OUT/progress.log"
rc=$?
say "reconnect_storm.sh exited $rc after $((SECONDS - T0)) s"
dev_sampler_stop
dev_logs "$WORK"
rm -rf "$WORK"
say "done in $((SECONDS - T0)) s; files in $OUT: $(cd "$OUT" && echo *)"
exit "$rc"
