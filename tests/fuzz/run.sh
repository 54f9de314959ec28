#!/usr/bin/env bash
# run.sh BUILD_DIR SECONDS: runs every libFuzzer target BUILD_DIR/bin/fuzz_*
# for SECONDS seconds each and prints one result line per target.  Exits 1 if
# any target found a crash (or a leak, a timeout, an out-of-memory), or did
# not run at all; 2 on bad usage.  FUZZ_JOBS targets run at once (default:
# the CPUs this process may use), each for its whole SECONDS.
#
# Target NAME keeps its corpus in tests/fuzz/corpus-NAME/ (git-ignored), so
# coverage grows from run to run; tests/fuzz/seeds/NAME/ (committed, read
# only) seeds it and tests/fuzz/seeds/NAME.dict, if present, is passed as
# its dictionary.  Logs and crash reproducers go under BUILD_DIR, never into
# the source tree.
set -u

usage() {
	echo "usage: $0 BUILD_DIR SECONDS" >&2
	exit 2
}

[ $# -eq 2 ] || usage
build=$1
seconds=$2
# libFuzzer reads -max_total_time=0 as "forever".
case $seconds in '' | *[!0-9]* | 0) usage ;; esac

here=$(cd "$(dirname "$0")" && pwd)
shopt -s nullglob
targets=()
for t in "$build"/bin/fuzz_*; do
	[ -f "$t" ] && [ -x "$t" ] && targets+=("$t")
done
if [ ${#targets[@]} -eq 0 ]; then
	echo "fuzz: no fuzz_* targets in $build/bin (build with -DTETHER_FUZZ=ON)" >&2
	exit 1
fi

logdir="$build/fuzz-logs"
jobs=${FUZZ_JOBS:-$(nproc)}
case $jobs in '' | *[!0-9]* | 0) jobs=1 ;; esac

# fuzz_one TARGET: runs it, and writes its result line to its .result file;
# exits 0 if it passed.
fuzz_one() {
	local t=$1 name corpus artifacts log rc runs inputs what repro
	name=$(basename "$t")
	corpus="$here/corpus-$name"
	artifacts="$build/fuzz-artifacts/$name/"
	log="$logdir/$name.log"
	mkdir -p "$corpus" "$artifacts" "$logdir"

	args=(-max_total_time="$seconds" -timeout=10 -print_final_stats=1
	      -artifact_prefix="$artifacts")
	[ -f "$here/seeds/$name.dict" ] && args+=(-dict="$here/seeds/$name.dict")
	# The first directory receives new inputs; the seeds are only read.
	dirs=("$corpus")
	[ -d "$here/seeds/$name" ] && dirs+=("$here/seeds/$name")

	"$t" "${args[@]}" "${dirs[@]}" >"$log" 2>&1
	rc=$?

	runs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -n 1)
	inputs=$(find "$corpus" -type f | wc -l)
	if [ $rc -eq 0 ]; then
		echo "$name: ok, ${runs:-?} runs in ${seconds}s, corpus $inputs inputs" >"$logdir/$name.result"
		return 0
	fi
	what=$(grep -m 1 -oE 'ERROR: (AddressSanitizer|UndefinedBehaviorSanitizer|LeakSanitizer|libFuzzer): [A-Za-z -]+|deadly signal|runtime error: .*' "$log")
	repro=$(sed -n 's/.*Test unit written to \(.*\)$/\1/p' "$log" | tail -n 1)
	echo "$name: FAILED (exit $rc${what:+: $what})${repro:+, reproducer $repro}, log $log" >"$logdir/$name.result"
	return 1
}

mkdir -p "$logdir"
running=0
for t in "${targets[@]}"; do
	rm -f "$logdir/$(basename "$t").result"
	if [ $running -ge "$jobs" ]; then
		wait -n
		running=$((running - 1))
	fi
	fuzz_one "$t" &
	running=$((running + 1))
done
wait

failed=0
for t in "${targets[@]}"; do
	name=$(basename "$t")
	if [ -f "$logdir/$name.result" ]; then
		cat "$logdir/$name.result"
		grep -q ": ok," "$logdir/$name.result" || failed=1
	else
		echo "$name: FAILED (no result: the run did not finish)"
		failed=1
	fi
done
exit $failed
