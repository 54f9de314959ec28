#!/usr/bin/env bash
# storm_retry.sh: a kill -9 reconnect storm, before and after the agents
# honour the gateway's retry-after and the gateway lets a burst wait for a
# handshake slot (docs/0035-no-stampede.md), in one run.
#
# A benchmark, not a test: it reports figures and fails only if it cannot
# take them.  One gateway on loopback with a low --max-handshakes (the
# per-source caps raised: every agent dials from 127.0.0.1).  Twice, with
# the same gateway flags: N swarm agents (tests/bench/swarm.c: the agent's
# own tunnel code) register and become active, the gateway is killed
# (SIGKILL) and started again on the same port and data, and the script
# times how long until the swarm reports every agent active, and counts the
# dials the agents made meanwhile.  Three storms: "before": the gateway
# answers 503 at once past --max-handshakes (--handshake-wait 0) and the
# swarm runs with --ignore-retry-after (the agents count the gateway's
# retry-after but redial on their own backoff, as agents before it did);
# "told": the same gateway, the agents wait as told; "after": the agents
# wait as told and the upgrades past the slots wait for one (the default
# --handshake-wait).  Also reported: the upgrades --max-handshakes answered 503, the
# connections the TLS queue shed unread (nothing can be told to those), and
# how many dials came earlier than the gateway said (0 after).
#
# usage: tests/bench/storm_retry.sh [N]        (default 2000; run it under
#        flock(1) on a shared machine, one benchmark at a time)
#   TETHER_BIN       directory with the binaries (default build/release/bin)
#   BENCH_GW_FLAGS   `serve` flags (default "--max-handshakes 32")
#   BENCH_RATE       agents started per second to register (default 50)
#   BENCH_WORKERS    the gateway's --workers (default: its own default)
#   BENCH_KEEP=1     keep the work directory
set -euo pipefail

SRC=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
TETHER_BIN=${TETHER_BIN:-$SRC/build/release/bin}
GW_FLAGS="${BENCH_GW_FLAGS:---max-handshakes 32}${BENCH_WORKERS:+ --workers $BENCH_WORKERS}"
RATE=${BENCH_RATE:-50}
KEEP=${BENCH_KEEP:-0}
N=${1:-2000}
COMMAND_LINE=
for v in TETHER_BIN BENCH_GW_FLAGS BENCH_RATE BENCH_WORKERS; do
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

W=$(mktemp -d "${TMPDIR:-/tmp}/tether-stormra.XXXXXX")
mkdir -p "$W/bin" "$W/logs"
cp "$TETHER_BIN/tether-gateway" "$TETHER_BIN/tether-swarm" "$TETHER_BIN/tetherctl" "$W/bin/"
GATEWAY=$W/bin/tether-gateway SWARM=$W/bin/tether-swarm CTL=$W/bin/tetherctl
GW_PID='' SW_PID='' STORM_FLAGS=''

cleanup() {
	local rc=$?
	trap - EXIT INT TERM
	set +e
	[ -z "$SW_PID" ] || { kill -TERM "$SW_PID" 2>/dev/null; wait "$SW_PID" 2>/dev/null; }
	[ -z "$GW_PID" ] || { kill -TERM "$GW_PID" 2>/dev/null; wait "$GW_PID" 2>/dev/null; }
	if [ "$KEEP" = 1 ]; then say "work directory kept: $W"; else rm -rf "$W"; fi
	exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

now_ms() { echo $(($(date +%s%N) / 1000000)); }
PORT=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1]); s.close()')
MP=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1]); s.close()')
URL=https://127.0.0.1:$PORT
GW_DIR=$W/gw
CAPS="--max-handshakes-per-source 1000000 --max-tls-per-source 1000000 --max-connections-per-source 1000000"

gw_start() {
	# shellcheck disable=SC2086  # flag lists
	"$GATEWAY" serve --data-dir "$GW_DIR" --listen "127.0.0.1:$PORT" \
		--metrics-listen "127.0.0.1:$MP" $CAPS $GW_FLAGS $STORM_FLAGS >>"$W/logs/gateway.log" 2>&1 &
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
# field FILE NAME: NAME's value on the last report line of FILE.
field() { grep '^swarm ms=' "$1" | tail -n 1 | grep -o " $2=[0-9]*" | cut -d= -f2; }
metric() { curl -sf "http://127.0.0.1:$MP/metrics" | awk -v m="$1" '$1 == m { print $2 }'; }

"$GATEWAY" init --data-dir "$GW_DIR" --url "$URL" >"$W/logs/init.out" 2>&1 || die "init failed"
export TETHER_SERVER=$URL TETHER_TOKEN_FILE=$GW_DIR/admin.token TETHER_CACERT=$GW_DIR/ca.crt
gw_start
CID=$("$CTL" -o json cluster create storm | jq -er .id)
"$CTL" -o json token create --cluster "$CID" --uses $((2 * N + 2)) --ttl 2h >"$W/join.json"

# storm NAME [swarm flags]: one swarm registers, the gateway is killed and
# restarted under it; sets R_<figure> for the table.
storm() {
	local name=$1 out=$W/logs/$1.out
	shift
	say "$name: registering $N agents at $RATE/s"
	"$SWARM" --join "$W/join.json" --ca-file "$GW_DIR/ca.crt" --agents "$N" \
		--prefix "$name" --rate "$RATE" --report-ms 250 "$@" >"$out" 2>"$W/logs/$name.log" &
	SW_PID=$!
	wait_line "$out" 0 900 >/dev/null || die "$name: not all active after 900 s: $(tail -n 1 "$out")"
	say "$name: all active; kill -9 and restart"
	local d0 t0 e0 s0 shed0 back
	d0=$(field "$out" dials) t0=$(field "$out" told) e0=$(field "$out" early)
	shed0=$(metric tether_tls_shed_total || echo 0)
	local r0
	r0=$(grep -c 'refusing a tunnel: too many handshakes' "$W/logs/gateway.log" || true)
	s0=$(now_ms)
	kill -KILL "$GW_PID"
	wait "$GW_PID" 2>/dev/null || true
	gw_start
	back=$(wait_line "$out" "$s0" 900) || die "$name: not all back after 900 s: $(tail -n 1 "$out")"
	R_secs=$(echo "scale=1; ($back - $s0) / 1000" | bc)
	R_dials=$(( $(field "$out" dials) - d0 ))
	R_per=$(echo "scale=2; $R_dials / $N" | bc)
	R_told=$(( $(field "$out" told) - t0 ))
	R_early=$(( $(field "$out" early) - e0 ))
	R_refused=$(( $(grep -c 'refusing a tunnel: too many handshakes' "$W/logs/gateway.log" || true) - r0 ))
	R_shed=$(metric tether_tls_shed_total || echo "?")
	kill -TERM "$SW_PID"
	wait "$SW_PID" 2>/dev/null || true
	SW_PID=
	# the killed gateway left its agents' presence: a fresh start for the next
	kill -TERM "$GW_PID"
	wait "$GW_PID" 2>/dev/null || true
	gw_start
}

STORM_FLAGS="--handshake-wait 0"
storm before --ignore-retry-after
B=("$R_secs" "$R_dials" "$R_per" "$R_told" "$R_early" "$R_refused" "$R_shed")
storm told
T=("$R_secs" "$R_dials" "$R_per" "$R_told" "$R_early" "$R_refused" "$R_shed")
STORM_FLAGS=
storm after
A=("$R_secs" "$R_dials" "$R_per" "$R_told" "$R_early" "$R_refused" "$R_shed")
ratio() { echo "scale=2; $1 / $2" | bc 2>/dev/null || echo "-"; }

{
	echo
	echo "Tether kill -9 storm: $N agents (tether-swarm), before/after retry-after and the wait for a slot"
	echo "  command:  $COMMAND_LINE"
	echo "  binaries: $TETHER_BIN ($("$GATEWAY" --version | head -1))"
	echo "  machine:  $(nproc) CPUs, $(uname -sr), load average $(cut -d' ' -f1-3 /proc/loadavg)"
	echo "  serve flags: $GW_FLAGS (and the per-source caps raised)"
	echo
	echo "| figure | before (503 at once, own backoff) | told (503 at once, retry-after) | after (wait for a slot, retry-after) | after/before |"
	echo "|---|---:|---:|---:|---:|"
	echo "| all active again, from the kill (s) | ${B[0]} | ${T[0]} | ${A[0]} | $(ratio "${A[0]}" "${B[0]}") |"
	echo "| dials in the storm | ${B[1]} | ${T[1]} | ${A[1]} | $(ratio "${A[1]}" "${B[1]}") |"
	echo "| dials per agent | ${B[2]} | ${T[2]} | ${A[2]} | $(ratio "${A[2]}" "${B[2]}") |"
	echo "| refusals that said when to come back | ${B[3]} | ${T[3]} | ${A[3]} | |"
	echo "| dials earlier than told | ${B[4]} | ${T[4]} | ${A[4]} | |"
	echo "| upgrades answered 503 (--max-handshakes) | ${B[5]} | ${T[5]} | ${A[5]} | |"
	echo "| connections shed by the TLS queue (since the restart) | ${B[6]} | ${T[6]} | ${A[6]} | |"
	echo
	echo "Dials include those that found no gateway between the kill and the restart."
}
