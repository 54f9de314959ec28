#!/usr/bin/env bash
# store_pool.sh: registrations per second with and without the PostgreSQL
# store pool (--store-pool, docs/0035), in one run.
#
# A benchmark, not a test: it reports figures and fails only when it cannot
# take them.  A private PostgreSQL (lib.sh pg_start) and, for the far store,
# a TCP relay that delays every byte by BENCH_DELAY_MS (default 10) each way
# (tests/bench/delay_relay.py: a round trip costs 2x that, 20 ms by
# default).  For each store (SQLite, PostgreSQL on loopback, PostgreSQL
# behind the relay) and each --store-pool (0: every store call on the one
# store thread, as before; then 4), a fresh gateway and N agents started at
# once (one tether-swarm, one multi-use token): seconds until the gateway
# has logged N registrations, and until the swarm reports all N active.
# SQLite has no pool (one writer whatever the threads): its row is the
# same gateway twice.
#
# usage: bash tests/bench/store_pool.sh [N [N_FAR]]   (defaults 1000, 200:
#        the far store without the pool registers a few agents a second)
#   TETHER_BIN      default build/release/bin
#   BENCH_DELAY_MS  the relay's delay each way (default 10)
set -euo pipefail

SRC=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
export TETHER_BIN=${TETHER_BIN:-$SRC/build/release/bin}
export ASAN_OPTIONS=
# shellcheck source=../integration/lib.sh
source "$SRC/tests/integration/lib.sh"
TEST_NAME=store_pool
SWARM=$TETHER_BIN/tether-swarm
DELAY_MS=${BENCH_DELAY_MS:-10}
N=${1:-1000}
N_FAR=${2:-200}
ulimit -Sn "$(ulimit -Hn)"

echo "# store_pool.sh $(date -u +%FT%TZ) $(nproc) CPUs, $(uname -r), load $(cut -d' ' -f1-3 /proc/loadavg)"
echo "# TETHER_BIN=$TETHER_BIN N=$N N_FAR=$N_FAR delay=${DELAY_MS}ms each way"

pg_start
RELAY_PORT=$(free_port)
python3 "$SRC/tests/bench/delay_relay.py" "$RELAY_PORT" "$PG_PORT" "$DELAY_MS" \
	>"$T/relay.log" 2>&1 &
PIDS+=($!)
wait_until 10 "the delay relay" grep -q '^ready' "$T/relay.log"
FAR=postgres://postgres@127.0.0.1:$RELAY_PORT/tether
NEAR=$PG_URL
now_ms() { date +%s%3N; }

# run LABEL URL POOL COUNT: prints "registered_s active_s".
run() {
	local label=$1 url=$2 pool=$3 n=$4 dir t0 reg=
	dir=$T/$label-$pool
	[ "$label" != sqlite ] || url=sqlite://$dir/tether.db
	[ "$label" = sqlite ] || psql -X -q "$NEAR" -c 'DROP SCHEMA public CASCADE; CREATE SCHEMA public' 2>/dev/null
	GW_PORT=$(free_port)
	GW_URL=https://127.0.0.1:$GW_PORT
	GW_DIR=$dir
	"$GATEWAY" init --data-dir "$dir" --url "$GW_URL" --store "$url" >"$dir.init" 2>&1
	export TETHER_SERVER=$GW_URL TETHER_TOKEN_FILE=$dir/admin.token TETHER_CACERT=$dir/ca.crt
	"$GATEWAY" serve --data-dir "$dir" --listen "127.0.0.1:$GW_PORT" --store "$url" \
		--store-pool "$pool" --max-handshakes 4096 --max-handshakes-per-source 100000 \
		--max-tls-per-source 100000 --max-connections-per-source 100000 \
		--handshake-timeout 600000 --hello-timeout 600000 >"$dir.log" 2>&1 &
	GW_PID=$!
	PIDS+=("$GW_PID")
	wait_until 60 "gateway $label ready" gateway_ready
	ctl token create --cluster "$(cluster_create regs)" --uses "$n" >"$dir.json"
	t0=$(now_ms)
	"$SWARM" --join "$dir.json" --ca-file "$dir/ca.crt" --agents "$n" \
		--prefix "$label" --report-ms 250 --log-level error >"$dir.out" 2>&1 &
	SW_PID=$!
	PIDS+=("$SW_PID")
	while ! grep -q '^swarm all_active' "$dir.out"; do
		if [ -z "$reg" ] && [ "$(grep -c 'msg="agent registered"' "$dir.log")" -ge "$n" ]; then
			reg=$(( $(now_ms) - t0 ))
		fi
		kill -0 "$SW_PID" 2>/dev/null || fail "the swarm exited: $(tail -n 2 "$dir.out")"
		sleep 0.1
	done
	local act=$(( $(now_ms) - t0 ))
	[ -n "$reg" ] || reg=$act
	kill -TERM "$SW_PID"; wait "$SW_PID" || true
	kill -TERM "$GW_PID"; wait "$GW_PID" || true
	echo "$(echo "scale=2; $reg / 1000" | bc) $(echo "scale=2; $act / 1000" | bc)"
}

echo
echo "| store | agents | --store-pool 0: registered (s) | all active (s) | registrations/s | --store-pool 4: registered (s) | all active (s) | registrations/s | ratio |"
echo "|---|---:|---:|---:|---:|---:|---:|---:|---:|"
for cfg in "sqlite::$N" "postgres-loopback:$NEAR:$N" "postgres-$((2 * DELAY_MS))ms:$FAR:$N_FAR"; do
	label=${cfg%%:*}; rest=${cfg#*:}
	count=${rest##*:}; url=${rest%:*}
	read -r b_reg b_act < <(run "$label" "$url" 0 "$count")
	read -r a_reg a_act < <(run "$label" "$url" 4 "$count")
	b_rate=$(echo "scale=1; $count / $b_reg" | bc)
	a_rate=$(echo "scale=1; $count / $a_reg" | bc)
	echo "| $label | $count | $b_reg | $b_act | $b_rate | $a_reg | $a_act | $a_rate | $(echo "scale=2; $a_rate / $b_rate" | bc) |"
done
