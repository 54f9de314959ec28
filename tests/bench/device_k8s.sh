#!/usr/bin/env bash
# device_k8s.sh: issue 23's `/k8s` requests/s "with --workers 2 against
# nginx with worker_processes 2" as a 2-core proxy against a 2-core proxy,
# taken on a lent machine with more cores: the relays measured (the
# Tether gateways, the nginx proxies) are held to two CPUs (taskset -c
# 0,1) and everything else that runs during a measurement (wrk, the
# upstream nginx, the tether-client agents) to the others (not the
# hardware threads of the relays' cores), so that the
# load takes nothing from the proxies (on a shared 2-core machine it
# did).  One run of k8s_proxy.sh that ends inside K8S_BUDGET_S, from a
# bundle of this build (tests/bench/bundle.sh: the binaries, their
# libraries, the loader, curl, jq, taskset, wrk, nginx and openssl;
# nothing is installed there and python3 is not needed).
#
# From the repository root on that machine:
#     bash tests/bench/device_k8s.sh .devbundle
# First a check that taskset holds there (dev_pin_check: a sandbox may
# take the call and ignore it; the summary says so).  Then
#     BENCH_WORKERS="1 2" BENCH_NGINX_WORKERS="1 2" BENCH_GW_CPUS=0,1
#     BENCH_LOAD_CPUS=(the others) k8s_proxy.sh
# whose paths (tether-w1, tether-token-w1, tether-w2, nginx-w1, nginx-w2,
# direct) each take a warm-up and one wrk run.  Where they would not fit
# the budget, wrk's -d is cut first (to no less than 5 s), then the rows
# (only the last of K8S_WORKERS and K8S_NGINX_WORKERS); the summary says
# what was cut.
#
# Into $OUT (6 files):
#   summary.md   the figures: the paths' table, the ratios, the goal's
#                verdict, the CPUs each process was held to, the command
#   k8s.md       k8s_proxy.sh's report (stdout)
#   progress.log the progress lines of k8s_proxy.sh and of this script
#   machine.txt  CPUs, memory, kernel, limits, the pinning check, command
#   samples.txt  every 2 s: the load and each Tether process (threads, CPU
#                ticks, RSS, descriptors)
#   gateway.txt  the gateways' log lines counted by message, the last 200
#   logs.tar.gz  k8s_proxy.sh's logs and wrk outputs
#
#   K8S_BUDGET_S       seconds the whole run may take (default 150)
#   K8S_GW_CPUS        the relays' CPUs (default 0,1)
#   K8S_LOAD_CPUS      wrk's, the upstream's and the agents' (default: every
#                      other CPU but the hardware threads sharing a core
#                      with the relays', dev_cpus_beside)
#   K8S_WORKERS        the gateways' --workers, one each (default "1 2")
#   K8S_NGINX_WORKERS  the proxies' worker_processes (default "1 2")
#   K8S_WRK_ARGS       wrk's options but -d (default "-t2 -c16")
#   K8S_DURATION_S     wrk's -d per path, at most (default 10)
#   K8S_WARMUP_S       the warm-up per path (default 2)
#   BENCH_GW_FLAGS     `serve` flags of every gateway (default none: the
#                      gateway's own --landing)
#   OUT                where the files go (default ./device-k8s-out)
set -uo pipefail

OUT=${OUT:-$PWD/device-k8s-out}
mkdir -p "$OUT" || exit 1
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
DEVICE_TAG=device_k8s
# shellcheck source=tests/bench/device_lib.sh
. "$HERE/device_lib.sh"
say() { dev_say "$@"; }
[ $# -eq 1 ] || { say "usage: $0 BUNDLE_DIR"; exit 2; }
BUDGET=${K8S_BUDGET_S:-150}
GW_CPUS=${K8S_GW_CPUS:-0,1}
WORKERS=${K8S_WORKERS:-1 2}
NGX_WORKERS=${K8S_NGINX_WORKERS:-1 2}
WRK_ARGS=${K8S_WRK_ARGS:--t2 -c16}
DURATION=${K8S_DURATION_S:-10}
WARMUP=${K8S_WARMUP_S:-2}
export BENCH_GW_FLAGS=${BENCH_GW_FLAGS:-}
SETUP_S=30     # k8s_proxy.sh's set-up (gateways, agents, proxies) and report
PATH_S=1       # per path besides wrk: the metrics and CPU readings
MIN_D=5        # wrk's -d is not cut below this

dev_setup "$1" "tether-client curl jq taskset wrk nginx openssl" "paste cksum id" || exit 1
NCPU=$(nproc)
if [ -n "${K8S_LOAD_CPUS:-}" ]; then
	LOAD_CPUS=$K8S_LOAD_CPUS
elif [ "$NCPU" -ge 4 ] && LOAD_CPUS=$(dev_cpus_beside "$GW_CPUS") && [ "$(dev_cpus_in "$LOAD_CPUS")" -ge 2 ]; then
	:
else
	say "$NCPU CPUs: set K8S_GW_CPUS and K8S_LOAD_CPUS (e.g. 0 and 1)"
	exit 2
fi
COMMAND="OUT=$OUT K8S_BUDGET_S=$BUDGET K8S_GW_CPUS=$GW_CPUS K8S_LOAD_CPUS=$LOAD_CPUS K8S_WORKERS='$WORKERS' K8S_NGINX_WORKERS='$NGX_WORKERS' K8S_WRK_ARGS='$WRK_ARGS' K8S_DURATION_S=$DURATION K8S_WARMUP_S=$WARMUP BENCH_GW_FLAGS='$BENCH_GW_FLAGS' bash $0 $1"

dev_pin_judge "$GW_CPUS"
PIN_HELD=$DEV_PIN_HELD PIN_LINE=$DEV_PIN_LINE
say "$PIN_LINE"
{
	echo "command: $COMMAND"
	echo "pinning: $PIN_LINE"
	dev_machine
} >"$OUT/machine.txt"

# rows W NGX: the paths k8s_proxy.sh measures (tether-wN each, one token
# path, nginx-wN each, direct).
rows() { echo $(($(wc -w <<<"$1") + 1 + $(wc -w <<<"$2") + 1)); }
# fit W NGX: wrk's -d that lets those rows end inside what is left.
fit() {
	local left r d
	left=$(($(dev_left "$BUDGET") - SETUP_S - 10))
	r=$(rows "$1" "$2")
	d=$((left / r - WARMUP - PATH_S))
	[ "$d" -le "$DURATION" ] || d=$DURATION
	echo "$d"
}
CUT=
D=$(fit "$WORKERS" "$NGX_WORKERS")
if [ "$D" -lt "$DURATION" ]; then
	CUT="wrk -d cut from ${DURATION}s to ${D}s"
fi
if [ "$D" -lt "$DURATION" ] && [ "$D" -lt "$MIN_D" ]; then
	WORKERS=${WORKERS##* } NGX_WORKERS=${NGX_WORKERS##* }
	D=$(fit "$WORKERS" "$NGX_WORKERS")
	CUT="rows cut to --workers $WORKERS and worker_processes $NGX_WORKERS, wrk -d ${D}s"
fi
[ -z "$CUT" ] || say "budget: $CUT"

WORK=$TMPDIR/tether-device-k8s.$$
mkdir -p "$WORK"
trap 'dev_sampler_stop; rm -rf "$WORK"' EXIT
STATE="not run"
# shellcheck disable=SC2016  # the quotes are the command's own
K8S_CMD="BENCH_WORKERS='$WORKERS' BENCH_NGINX_WORKERS='$NGX_WORKERS' BENCH_WRK_ARGS='$WRK_ARGS -d${D}s' BENCH_WARMUP=$WARMUP BENCH_GW_CPUS=$GW_CPUS BENCH_LOAD_CPUS=$LOAD_CPUS${BENCH_GW_FLAGS:+ BENCH_GW_FLAGS='$BENCH_GW_FLAGS'} bash tests/bench/k8s_proxy.sh"
echo "k8s:     $K8S_CMD" >>"$OUT/machine.txt"

# goal_lines: per --workers N with an nginx-wN, tether-wN / nginx-wN
# against the issue's goal (>= 0.8x requests/s, p99 <= 1.5x), from the
# report's Markdown table ("| path | requests/s | p50 | p99 | cpu |").
goal_lines() {
	local n
	for n in $WORKERS; do
		awk -F' *[|] *' -v t="tether-w$n" -v x="nginx-w$n" '
			$2 == t { tr = $3; tp = $5 } $2 == x { xr = $3; xp = $5 }
			END {
				if (tr == "" || xr == "" || xr + 0 == 0 || xp + 0 == 0) exit
				# judged as shown (x0.80 meets >= 0.8)
				r = sprintf("%.2f", tr / xr) + 0; p = sprintf("%.2f", tp / xp) + 0
				printf "- %s / %s: requests/s x%.2f (goal >= 0.8: %s), p99 x%.2f (goal <= 1.5: %s)\n",
					t, x, r, (r >= 0.8 ? "met" : "NOT met"), p, (p <= 1.5 ? "met" : "NOT met")
			}' "$OUT/k8s.md"
	done
}

summary() {
	{
		echo "# /k8s, a 2-core proxy against a 2-core proxy: gateways and nginx proxies on CPUs $GW_CPUS, wrk, upstream and agents on $LOAD_CPUS (of $NCPU)"
		echo
		echo "$(date -u +%FT%TZ), $("$B/bin/tether-gateway" --version | head -1), serve flags: ${BENCH_GW_FLAGS:-(defaults)}"
		echo "pinning: $PIN_LINE"
		echo "hardware threads sharing a core: $(dev_siblings)"
		[ "$PIN_HELD" = held ] || echo "**taskset did not hold the relays here: they ran on any CPU**"
		echo "run: $STATE${CUT:+ ($CUT)}"
		echo
		echo "command: \`$COMMAND\`"
		echo
		echo "k8s_proxy.sh: \`$K8S_CMD\`"
		if [ -s "$OUT/k8s.md" ]; then
			echo
			grep -E '^  (CPUs:|  *as the kernel held|TLS:|tools:|load:)' "$OUT/k8s.md"
			echo
			echo "## issue 23's goal"
			echo
			goal_lines
			# The report's Markdown part: the paths' table, the ratios.
			awk 'on; /^Markdown:$/ { on = 1 }' "$OUT/k8s.md"
			echo
			echo "the gateways' loops during each run:"
			echo
			grep -E '^    tether-[^ ]+ +CPU s per loop' "$OUT/k8s.md"
		fi
	} >"$OUT/summary.md"
}
summary

dev_sampler_start "$OUT/samples.txt"
left=$(dev_left "$BUDGET")
STATE=running
say "k8s_proxy.sh: --workers '$WORKERS', worker_processes '$NGX_WORKERS', wrk -d${D}s, $left s left"
BENCH_WORKERS=$WORKERS BENCH_NGINX_WORKERS=$NGX_WORKERS BENCH_WRK_ARGS="$WRK_ARGS -d${D}s" \
	BENCH_WARMUP=$WARMUP BENCH_GW_CPUS=$GW_CPUS BENCH_LOAD_CPUS=$LOAD_CPUS BENCH_KEEP=$WORK/k8s \
	timeout -k 5 $((left - 5)) bash "$HERE/k8s_proxy.sh" >"$OUT/k8s.md" 2>>"$OUT/progress.log"
rc=$?
STATE="k8s_proxy.sh exited $rc after $((SECONDS - DEV_T0)) s"
say "$STATE"
[ "$rc" = 0 ] || STATE+=" (see progress.log)"
dev_sampler_stop
summary
dev_logs "$WORK/k8s"
[ ! -d "$WORK/k8s/runs" ] || tar -C "$WORK/k8s" -czf "$OUT/logs.tar.gz" logs runs 2>/dev/null
say "done in $((SECONDS - DEV_T0)) s; files in $OUT: $(cd "$OUT" && echo *)"
cat "$OUT/summary.md"   # in the command's own output too
exit "$rc"
