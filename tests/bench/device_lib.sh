# shellcheck shell=bash
# device_lib.sh: what the scripts run on a machine lent for one short run
# share (device_storm.sh, device_two_core.sh): the bundle made ready and
# checked, the machine described, a sampler of the Tether processes, the
# logs summed up.  Source it after setting OUT (the folder the files go to)
# and DEVICE_TAG (the prefix of progress lines).
#
#   dev_say TEXT...        a progress line, to stderr and $OUT/progress.log
#   dev_left BUDGET        seconds left of BUDGET since the script's start
#   dev_setup BUNDLE TOOLS [HOST]
#                          checks the machine's own tools (bash, coreutils,
#                          awk... and HOST, words: default python3; "" for
#                          none), rewrites the bundle's wrappers
#                          for where it is, puts its bin/ first in PATH and
#                          sets TETHER_BIN and B (the bundle, absolute);
#                          checks that each of TOOLS (words) and the Tether
#                          binaries resolve to the bundle; raises the
#                          open-files limit as far as the machine lets it;
#                          sets TMPDIR to a folder that allows exec.
#                          Non-zero (said why) if any of it fails.
#   dev_machine            the machine's CPUs, memory, kernel, limits and
#                          the bundled gateway's version, on stdout
#   dev_siblings           the first CPUs' SMT siblings, one line
#   dev_pin_check LIST     whether taskset -c LIST holds: four busy shells
#                          under it for about 1 s; prints "CPU_S WALL_S"
#                          (CPU_S about the CPUs in LIST when it holds)
#   dev_cpus_in LIST       how many CPUs a taskset list names ("0,1" 2,
#                          "2-15" 14)
#   dev_cpus_beside LIST   the CPUs 0..nproc-1 outside LIST and outside
#                          the hardware threads sharing a core with one
#                          of LIST (thread_siblings_list), as a taskset
#                          list; empty if none is left
#   dev_pin_judge LIST     dev_pin_check LIST judged: sets DEV_PIN_HELD
#                          ("held" or "NOT HELD") and DEV_PIN_LINE (what
#                          was seen, one line for a summary)
#   dev_sampler_start FILE every 2 s into FILE: the load, and each Tether
#                          process of the bundle (threads, CPU ticks, RSS,
#                          descriptors); dev_sampler_stop ends it
#   dev_logs DIR           DIR/logs (a benchmark's kept work directory)
#                          summed up into $OUT/gateway.txt and archived as
#                          $OUT/logs.tar.gz (the gateway's logs left out
#                          past 15 MiB)

DEV_T0=$SECONDS
DEV_SAMPLER=

dev_say() { printf '[%s] %s\n' "${DEVICE_TAG:-device}" "$*" | tee -a "$OUT/progress.log" >&2; }

dev_left() { echo $(($1 - (SECONDS - DEV_T0))); }

dev_setup() {
	local t p n hard T
	for t in awk sed grep sort uniq cut tr find stat timeout mktemp tar gzip getconf nproc ${3-python3}; do
		command -v "$t" >/dev/null || { dev_say "$t is missing on this machine"; return 1; }
	done
	B=$(cd "$1" && pwd) || { dev_say "no bundle at $1"; return 1; }
	bash "$(dirname "${BASH_SOURCE[0]}")/bundle.sh" --rewrap "$B" || { dev_say "cannot rewrap $B"; return 1; }
	export PATH="$B/bin:$PATH" TETHER_BIN="$B/bin"
	for t in $2 tether-gateway tether-swarm tetherctl; do
		p=$(command -v "$t") || { dev_say "$t missing from the bundle (tests/bench/bundle.sh BUNDLE_TOOLS)"; return 1; }
		[ "$p" = "$B/bin/$t" ] || { dev_say "$t resolves to $p, not the bundle"; return 1; }
	done
	"$B/bin/tether-gateway" --version >/dev/null || { dev_say "the bundled gateway does not run here"; return 1; }
	# A gateway holds every tunnel in one process: N + ~100 descriptors.
	for n in 1048576 524288 262144 131072 65536 40000; do ulimit -Hn "$n" 2>/dev/null && break; done
	ulimit -Sn "$(ulimit -Hn)"
	hard=$(ulimit -Hn)
	dev_say "open files: $hard"
	# The benchmarks run copies of the wrappers from their work
	# directories: they must allow exec (a noexec /tmp does not; then one
	# inside the bundle).
	T=${TMPDIR:-/tmp}
	if ! { printf '#!/bin/sh\nexit 0\n' >"$T/.exec-probe.$$" && chmod +x "$T/.exec-probe.$$" &&
		"$T/.exec-probe.$$"; } 2>/dev/null; then
		T=$B/tmp
		mkdir -p "$T"
		dev_say "no exec in ${TMPDIR:-/tmp}: work in $T"
	fi
	rm -f "${TMPDIR:-/tmp}/.exec-probe.$$"
	export TMPDIR=$T
}

dev_machine() {
	local f
	echo "date:    $(date -u)"
	echo "gateway: $("$B/bin/tether-gateway" --version | head -1)"
	echo "uname:   $(uname -a)"
	echo "cpus:    $(nproc) ($(awk -F': ' '/^model name/ { print $2; exit }' /proc/cpuinfo))"
	echo "smt:     $(dev_siblings)"
	echo "memory:  $(awk '/^MemTotal|^MemAvailable/ { printf "%s %s kB  ", $1, $2 }' /proc/meminfo)"
	echo "nofile:  soft $(ulimit -Sn) hard $(ulimit -Hn)"
	echo "nproc:   $(ulimit -u)"
	for f in /proc/sys/net/ipv4/ip_local_port_range /proc/sys/net/core/somaxconn \
		/proc/sys/net/ipv4/tcp_max_syn_backlog /proc/sys/net/ipv4/tcp_tw_reuse /proc/sys/fs/nr_open; do
		echo "$f: $(tr '\t' ' ' 2>/dev/null <"$f" || echo '?')"
	done
	echo "load:    $(cut -d' ' -f1-3 /proc/loadavg)"
}

# dev_siblings: "cpu0 0-1, cpu1 0-1, ..." (each of the first four CPUs'
# hardware threads sharing its core; "?" where the kernel does not say).
dev_siblings() {
	local c f out=''
	for c in 0 1 2 3; do
		f=/sys/devices/system/cpu/cpu$c/topology/thread_siblings_list
		out+="${out:+, }cpu$c $(cat "$f" 2>/dev/null || echo '?')"
	done
	echo "$out"
}

# Four shells spin for 1 s of wall time each under taskset -c LIST: they
# burn about as many CPU seconds as LIST has CPUs if the kernel holds them
# to it, about 4 if it does not (a sandbox that takes the call and ignores
# it).
dev_pin_check() {
	local TIMEFORMAT='%R %U %S' r u s
	# shellcheck disable=SC2016  # the inner script expands its own
	read -r r u s < <({ time taskset -c "$1" bash -c '
		for i in 1 2 3 4; do
			(e=$((${EPOCHREALTIME/./} + 1000000)); while [ "${EPOCHREALTIME/./}" -lt "$e" ]; do :; done) &
		done
		wait'; } 2>&1 >/dev/null | tail -n 1)
	awk -v r="$r" -v u="$u" -v s="$s" 'BEGIN { printf "%.2f %.2f\n", u + s, r }'
}

dev_cpus_in() {
	tr ',' '\n' <<<"$1" | awk -F- '{ n += (NF == 2 ? $2 - $1 + 1 : 1) } END { print n + 0 }'
}

dev_cpus_beside() {
	local c f taken
	taken=$1
	for c in $(tr ',' '\n' <<<"$1" | awk -F- '{ for (i = $1; i <= (NF == 2 ? $2 : $1); i++) print i }'); do
		f=/sys/devices/system/cpu/cpu$c/topology/thread_siblings_list
		[ ! -r "$f" ] || taken+=,$(cat "$f")
	done
	tr ',' '\n' <<<"$taken" | awk -F- -v n="$(nproc)" '
		{ for (i = $1; i <= (NF == 2 ? $2 : $1); i++) t[i] = 1 }
		END { for (i = 0; i < n; i++) if (!(i in t)) printf "%s%d", (k++ ? "," : ""), i; print "" }'
}

dev_pin_judge() {
	local cpu wall n
	read -r cpu wall < <(dev_pin_check "$1")
	n=$(dev_cpus_in "$1")
	DEV_PIN_HELD=$(awk -v c="$cpu" -v w="$wall" -v n="$n" 'BEGIN { print (w > 0 && c / w <= n + 0.5 ? "held" : "NOT HELD") }')
	# shellcheck disable=SC2034  # for the scripts that source this
	DEV_PIN_LINE="taskset -c $1: four busy shells burned $cpu CPU s in $wall s ($n CPUs): $DEV_PIN_HELD"
}

dev_sampler_start() {
	local out=$1
	(
		local p cmd
		while :; do
			printf 'T+%ds load %s\n' $((SECONDS - DEV_T0)) "$(cut -d' ' -f1-3 /proc/loadavg)"
			for p in /proc/[0-9]*; do
				cmd=$(tr '\0' ' ' 2>/dev/null <"$p/cmdline") || continue
				case $cmd in
				*"$B/real/tether-"*) ;;
				*) continue ;;
				esac
				awk -v fds="$(find "$p/fd" -mindepth 1 -maxdepth 1 2>/dev/null | wc -l)" \
					-v what="$(awk '{ print $4, $5 }' <<<"$cmd")" \
					'{ printf "  pid %s %s threads %s ticks %d rss_kib %d fds %s\n", $1, what, $20, $14 + $15, $24 * 4, fds }' \
					"$p/stat" 2>/dev/null
			done
			sleep 2
		done
	) >"$out" 2>&1 &
	DEV_SAMPLER=$!
}

dev_sampler_stop() {
	[ -z "$DEV_SAMPLER" ] || kill "$DEV_SAMPLER" 2>/dev/null
	DEV_SAMPLER=
}

dev_logs() {
	local w=$1 last logs
	[ -d "$w/logs" ] || return 0
	# gateway.log and gateway.all.log (reconnect_storm.sh), or one
	# gateway-NAME.log per gateway (k8s_proxy.sh).
	last=$w/logs/gateway.log
	logs=("$w"/logs/gateway*.log)
	[ -f "$last" ] || last=${logs[-1]}
	{
		echo "== gateway log lines by message (level and text, numbers and ids folded)"
		cat "${logs[@]}" 2>/dev/null |
			sed -E 's/^[^ ]+ //; s/[0-9a-f]{8,}/X/g; s/[0-9]+/N/g' | cut -c1-160 |
			sort | uniq -c | sort -rn | head -60
		echo
		echo "== the last gateway's last 200 lines ($(basename "$last"))"
		tail -n 200 "$last"
	} >"$OUT/gateway.txt" 2>&1
	tar -C "$w" -czf "$OUT/logs.tar.gz" logs 2>/dev/null
	if [ "$(stat -c %s "$OUT/logs.tar.gz" 2>/dev/null || echo 0)" -gt $((15 * 1048576)) ]; then
		tar -C "$w" -czf "$OUT/logs.tar.gz" --exclude 'logs/gateway*' logs 2>/dev/null
		dev_say "logs.tar.gz: the gateway's logs left out (over 15 MiB); gateway.txt has their summary"
	fi
}
