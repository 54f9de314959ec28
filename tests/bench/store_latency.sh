#!/usr/bin/env bash
# store_latency.sh: a remote store must not slow the tunnels (docs/0016).
#
# A benchmark, not a test: it reports figures and fails only when it cannot
# take them.  One run, everything on loopback:
#   - a private PostgreSQL (as in test_store_postgres) behind a TCP relay
#     that delays every byte by BENCH_DELAY_MS (default 20) each way
#     (tests/bench/delay_relay.py): each store round trip costs 2x that;
#   - one gateway on that store;
#   - two connected agents (tether-swarm --probe): probe-1 sends a tunnel
#     PING every 100 ms, probe-2's streams echo;
#   then, quiet and while BENCH_AGENTS (default 30) new agents register at
#   once through the same gateway (another tether-swarm, one multi-use
#   token), it measures the probe's ping round trips (p50 of the intervals'
#   p50s, the largest p99 and max; no stream meanwhile), and then, quiet
#   and while as many other agents register, the throughput of BENCH_MIB
#   (default 64) MiB echoed through probe-2 (tetherctl connect), repeated
#   while the registrations last.
# Then the same probes, quiet and while BENCH_ADMIN_LOOPS (default 2)
# loops call the admin API back to back (`tetherctl agent list`, `cluster
# create`, `cluster list`, GET /v1/status: docs/0022), for the gateway
# measured and, in the same run, for BENCH_BEFORE if set (another build).
# Then registrations per second (BENCH_REG_AGENTS agents, default 100, all
# at once, until every one is active) on SQLite, on PostgreSQL on loopback,
# and on PostgreSQL behind the delay.
#
# usage: bash tests/bench/store_latency.sh
#   TETHER_BIN     default build/release/bin (tether-gateway, tetherctl, tether-swarm)
#   BENCH_GATEWAY  another tether-gateway to measure (e.g. an older build)
#   BENCH_BEFORE   a tether-gateway to compare in the admin part (e.g. the
#                  build before docs/0022)
#   BENCH_ONLY=admin  the admin part only
#   BENCH_REGS=0   no registrations per second
set -euo pipefail

SRC=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
export TETHER_BIN=${TETHER_BIN:-$SRC/build/release/bin}
export ASAN_OPTIONS=
# shellcheck source=../integration/lib.sh
source "$SRC/tests/integration/lib.sh"
TEST_NAME=store_latency
SWARM=$TETHER_BIN/tether-swarm
# Another gateway build to compare (e.g. one whose store calls block).
GATEWAY=${BENCH_GATEWAY:-$GATEWAY}
DELAY_MS=${BENCH_DELAY_MS:-20}
AGENTS=${BENCH_AGENTS:-30}
REG_AGENTS=${BENCH_REG_AGENTS:-100}
MIB=${BENCH_MIB:-64}

echo "# store_latency.sh $(date -u +%FT%TZ) $(nproc) CPUs, $(uname -r)"
echo "# TETHER_BIN=$TETHER_BIN delay=${DELAY_MS}ms agents=$AGENTS reg_agents=$REG_AGENTS mib=$MIB"

pg_start
RELAY_PORT=$(free_port)
python3 "$SRC/tests/bench/delay_relay.py" "$RELAY_PORT" "$PG_PORT" "$DELAY_MS" \
	>"$T/relay.log" 2>&1 &
PIDS+=($!)
wait_until 10 "the delay relay" grep -q '^ready' "$T/relay.log"
SLOW=postgres://postgres@127.0.0.1:$RELAY_PORT/tether
FAST=$PG_URL

now_ms() { date +%s%3N; }

# A store round trip through the relay, as psql sees it.
t0=$(now_ms)
for _ in 1 2 3 4 5; do
	psql -X -qAt "$SLOW" -c 'SELECT 1' >/dev/null
done
echo "psql connect + SELECT 1 through the relay: $(( ($(now_ms) - t0) / 5 )) ms each"

# gw_start NAME STORE: init (on STORE) and serve; sets GW_* for ctl.
gw_start() {
	GW_PORT=$(free_port)
	GW_URL=https://127.0.0.1:$GW_PORT
	GW_DIR=$T/$1
	"$GATEWAY" init --data-dir "$GW_DIR" --url "$GW_URL" --store "$2" >"$T/$1-init.out" 2>&1
	export TETHER_SERVER=$GW_URL TETHER_TOKEN_FILE=$GW_DIR/admin.token TETHER_CACERT=$GW_DIR/ca.crt
	"$GATEWAY" serve --data-dir "$GW_DIR" --listen "127.0.0.1:$GW_PORT" --store "$2" \
		--max-handshakes 4096 --log-level warn >>"$T/$1.log" 2>&1 &
	GW_PID=$!
	PIDS+=("$GW_PID")
	wait_until 60 "gateway $1 ready" gateway_ready
}

gw_stop() {
	kill -TERM "$GW_PID"
	wait "$GW_PID" || true
}

# swarm_start NAME COUNT EXTRA...: agents from a COUNT-use token; sets SW_PID.
swarm_start() {
	local name=$1 n=$2
	shift 2
	ctl token create --cluster "$CID" --uses "$n" >"$T/$name.json"
	"$SWARM" --join "$T/$name.json" --ca-file "$GW_DIR/ca.crt" --agents "$n" \
		--prefix "$name" --report-ms 500 --log-level error "$@" \
		>"$T/$name.out" 2>>"$T/$name.log" &
	SW_PID=$!
	PIDS+=("$SW_PID")
}

# echo_mibs: MiB/s of $MIB MiB echoed through probe-2 (both ways at once;
# the tetherctl connection's set-up included).
echo_mibs() {
	local t0 t1 got
	t0=$(now_ms)
	got=$(head -c "${MIB}M" /dev/zero |
		"$CTL" connect --cluster "$CID" --node probe-2 127.0.0.1:7 | wc -c)
	t1=$(now_ms)
	[ "$got" -eq $((MIB * 1048576)) ] || fail "echoed $got bytes, want $((MIB * 1048576))"
	echo "scale=1; $MIB * 1000 / ($t1 - $t0)" | bc
}

# probe_stats FROM_LINE: the probe's intervals after line FROM_LINE of
# probe.out: "p50_us=median-of-p50s p99_us=max-of-p99s max_us=max lost=sum n=sum".
probe_stats() {
	local lines med
	lines=$(tail -n +"$(( $1 + 1 ))" "$T/probe.out" |
		grep -o 'probe_n=[1-9][0-9]* probe_p50_us=[0-9]* probe_p99_us=[0-9]* probe_max_us=[0-9]* probe_lost=[0-9]*' |
		sed -E 's/[a-z0-9_]+=//g') || true
	[ -n "$lines" ] || { echo "no probe answers"; return; }
	med=$(awk '{ print $2 }' <<<"$lines" | sort -n | awk '{ v[NR] = $1 } END { print v[int((NR + 1) / 2)] }')
	awk -v med="$med" '{ n += $1; if ($3 > p99) p99 = $3; if ($4 > mx) mx = $4; lost += $5 }
		END { printf "p50_us=%d p99_us=%d max_us=%d lost=%d n=%d", med, p99, mx, lost, n }' <<<"$lines"
}

# admin_loop N: calls the admin API back to back until killed, counting
# the calls in $T/admin-N.count.
admin_loop() {
	local i=0
	while :; do
		ctl agent list >/dev/null || true
		ctl cluster create "load-$1-$i" >/dev/null || true
		ctl cluster list >/dev/null || true
		curl -sf --cacert "$GW_DIR/ca.crt" -H "Authorization: Bearer $(cat "$GW_DIR/admin.token")" \
			"$GW_URL/v1/status" >/dev/null || true
		i=$((i + 1))
		echo $((i * 4)) >"$T/admin-$1.count"
	done
}

# admin_part LABEL GATEWAY: a gateway of that build on the slow store, its
# probes quiet and while the admin loops run; prints one table row.
admin_part() {
	local label=$1 gwbin=$2 quiet load t0 ms calls=0 pids=() qm=() lm=()
	local keep=$GATEWAY
	GATEWAY=$gwbin
	psql -X -q "$FAST" -c 'DROP SCHEMA public CASCADE; CREATE SCHEMA public' 2>/dev/null
	gw_start "admin-$label" "$SLOW"
	CID=$(cluster_create bench)
	swarm_start probe 2 --probe
	wait_until 60 "the probe agents active" grep -q '^swarm all_active' "$T/probe.out"
	sleep 2
	mark=$(wc -l <"$T/probe.out")
	sleep 5
	quiet=$(probe_stats "$mark")
	for _ in 1 2 3; do qm+=("$(echo_mibs)"); done
	for n in $(seq 1 "${BENCH_ADMIN_LOOPS:-2}"); do
		admin_loop "$n" &
		pids+=($!)
	done
	t0=$(now_ms)
	mark=$(wc -l <"$T/probe.out")
	sleep 5
	load=$(probe_stats "$mark")
	for _ in 1 2 3; do lm+=("$(echo_mibs)"); done
	ms=$(( $(now_ms) - t0 ))
	kill "${pids[@]}"
	wait "${pids[@]}" 2>/dev/null || true
	for n in $(seq 1 "${BENCH_ADMIN_LOOPS:-2}"); do
		calls=$((calls + $(cat "$T/admin-$n.count" 2>/dev/null || echo 0)))
	done
	echo "| $label: ping | $quiet | $load ($(echo "scale=1; $calls * 1000 / $ms" | bc) admin calls/s) |"
	echo "| $label: ${MIB} MiB echoed, MiB/s | $(mean "${qm[@]}") | $(mean "${lm[@]}") |"
	kill -TERM "$SW_PID"; wait "$SW_PID" || true
	gw_stop
	GATEWAY=$keep
}
mean() { printf '%s\n' "$@" | awk '{ s += $1 } END { printf "%.1f", s / NR }'; }

if [ "${BENCH_ONLY:-}" != admin ]; then
# ---- 1. connected agents while others register ------------------------------
gw_start slow "$SLOW"
CID=$(cluster_create bench)
swarm_start probe 2 --probe
wait_until 60 "the probe agents active" grep -q '^swarm all_active' "$T/probe.out"
sleep 2

# register NAME: $AGENTS agents register at once; returns when all are
# active; with "echo", echoes through probe-2 meanwhile (into load_mibs).
register() {
	local name=$1 t0
	t0=$(now_ms)
	swarm_start "$name" "$AGENTS"
	while ! grep -q '^swarm all_active' "$T/$name.out"; do
		if [ "${2:-}" = echo ]; then load_mibs+=("$(echo_mibs)"); else sleep 0.2; fi
		[ $(( $(now_ms) - t0 )) -le 600000 ] || fail "registrations did not finish in 600 s"
		kill -0 "$SW_PID" 2>/dev/null || fail "the registering swarm exited (see $name.log)"
	done
	reg_ms=$(( $(now_ms) - t0 ))
	kill -TERM "$SW_PID"; wait "$SW_PID" || true
}

# Pings alone (no stream), quiet then while agents register.
mark=$(wc -l <"$T/probe.out")
sleep 5
ping_quiet=$(probe_stats "$mark")
mark=$(wc -l <"$T/probe.out")
register rega
ping_load=$(probe_stats "$mark")
rate_ping="$(echo "scale=1; $AGENTS * 1000 / $reg_ms" | bc)/s"

# Streams, quiet then while other agents register.
quiet_mibs=()
for _ in 1 2 3 4 5; do quiet_mibs+=("$(echo_mibs)"); done
load_mibs=()
register regb echo
rate_echo="$(echo "scale=1; $AGENTS * 1000 / $reg_ms" | bc)/s"

echo
echo "## connected agents, store ${DELAY_MS} ms away (each way), gateway $GATEWAY"
echo "| | quiet | while $AGENTS agents register |"
echo "|---|---|---|"
echo "| probe-1 tunnel ping round trip | $ping_quiet | $ping_load ($rate_ping) |"
echo "| ${MIB} MiB echoed through probe-2, MiB/s (runs) | $(mean "${quiet_mibs[@]}") (${#quiet_mibs[@]}) | $(mean "${load_mibs[@]}") (${#load_mibs[@]}; $rate_echo) |"
gw_stop
fi

# ---- 1b. connected agents while the admin API is busy (docs/0022) -----------
echo
echo "## connected agents while ${BENCH_ADMIN_LOOPS:-2} loops call the admin API, store ${DELAY_MS} ms away"
echo "| gateway | quiet | admin API busy |"
echo "|---|---|---|"
[ -z "${BENCH_BEFORE:-}" ] || admin_part before "$BENCH_BEFORE"
admin_part after "$GATEWAY"
[ "${BENCH_ONLY:-}" != admin ] || exit 0
[ "${BENCH_REGS:-1}" = 1 ] || exit 0

# ---- 2. registrations per second --------------------------------------------
echo
echo "## registrations: $REG_AGENTS agents at once, until all active"
echo "| store | seconds | agents/s |"
echo "|---|---|---|"
for cfg in "sqlite:" "postgres-loopback:$FAST" "postgres-${DELAY_MS}ms:$SLOW"; do
	label=${cfg%%:*}
	url=${cfg#*:}
	if [ "$label" = sqlite ]; then url=sqlite://$T/$label-gw/tether.db; fi
	if [ "$label" != sqlite ]; then
		psql -X -q "$FAST" -c 'DROP SCHEMA public CASCADE; CREATE SCHEMA public' 2>/dev/null
	fi
	gw_start "$label-gw" "$url"
	CID=$(cluster_create regs)
	t0=$(now_ms)
	swarm_start "regs-$label" "$REG_AGENTS"
	wait_until 600 "$REG_AGENTS agents active on $label" grep -q '^swarm all_active' "$T/regs-$label.out"
	ms=$(( $(now_ms) - t0 ))
	echo "| $label | $(echo "scale=2; $ms / 1000" | bc) | $(echo "scale=1; $REG_AGENTS * 1000 / $ms" | bc) |"
	kill -TERM "$SW_PID"; wait "$SW_PID" || true
	gw_stop
done
