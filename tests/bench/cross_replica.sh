#!/usr/bin/env bash
# cross_replica.sh: stream throughput and set-up time to an agent through
# the replica that holds its tunnel ("direct") against through another
# replica and the peer link between the two ("cross"; docs/0020, issue 9's
# benchmark: goal cross >= 0.8x direct).
#
# A benchmark, not a test: it reports figures and fails only if it cannot
# take them.  Everything on loopback, in ONE run, so the ratios hold even
# where the absolute figures move between runs:
#   - a private PostgreSQL (lib.sh pg_start), replicas r1 and r2 on it, each
#     with --peer-listen; one agent (tether-client run) connected to r2,
#     allowlisting an iperf3 server and an echo server;
#   - two `tetherctl forward`s per target: one through r2 (direct), one
#     through r1 (cross: r1 -> peer link -> r2 -> agent);
#   - interleaved (direct, cross, direct, cross, ...: slow drift of the
#     machine hits both): iperf3 -J, one stream, both directions
#     (operator -> node, and -R), BENCH_ROUNDS rounds of BENCH_SECONDS each;
#     then BENCH_CONNECTIONS sequential connect / 1 byte / echo / close
#     (echo_rtt.py) per path.
# Reported: the median of the rounds in Gbit/s per path and direction, set-up
# p50/p90 per path, and the ratios cross/direct (throughput) and
# direct/cross (set-up time), so that >= 0.8 is the goal for each.
#
# usage: bash tests/bench/cross_replica.sh
#   TETHER_BIN         the binaries (default build/release/bin)
#   BENCH_SECONDS      seconds per iperf3 run (default 5)
#   BENCH_ROUNDS       rounds per path and direction (default 3)
#   BENCH_CONNECTIONS  sequential connections per set-up figure (default 500)
set -euo pipefail

SRC=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
export TETHER_BIN=${TETHER_BIN:-$SRC/build/release/bin}
export ASAN_OPTIONS=
SECS=${BENCH_SECONDS:-5}
ROUNDS=${BENCH_ROUNDS:-3}
CONNS=${BENCH_CONNECTIONS:-500}
# shellcheck source=../integration/lib.sh
source "$SRC/tests/integration/lib.sh"
TEST_NAME=cross_replica
py=/usr/bin/python3
for tool in iperf3 jq psql; do
	command -v "$tool" >/dev/null || fail "$tool is required (config/setup.sh)"
done

IPERF_PORT=$(free_port)
iperf3 -s -B 127.0.0.1 -p "$IPERF_PORT" >"$T/iperf3-server.log" 2>&1 &
PIDS+=($!)
$py "$SRC/tests/integration/tcpserver.py" echo "$T/echo.port" &
PIDS+=($!)
wait_until 10 "echo server" test -s "$T/echo.port"
ECHO_PORT=$(cat "$T/echo.port")

pg_start
gateway_init --store "$PG_URL"
declare -a RPORT PPORT RPID
replica_start() { # replica_start N
	local d=$T/r$1
	mkdir -p -m 700 "$d"
	cp "$GW_DIR/ca.crt" "$GW_DIR/server.crt" "$GW_DIR/server.key" "$GW_DIR/peer.crt" "$GW_DIR/peer.key" \
		"$GW_DIR/gateway.json" "$d/"
	PPORT[$1]=$(free_port)
	"$GATEWAY" serve --data-dir "$d" --listen "127.0.0.1:${RPORT[$1]}" \
		--store "$PG_URL" --replica-id "r$1" --peer-listen "127.0.0.1:${PPORT[$1]}" \
		--peer-url "https://127.0.0.1:${PPORT[$1]}" --drain-timeout 0 \
		--log-level warn >>"$T/replica$1.log" 2>&1 &
	RPID[$1]=$!
	PIDS+=("${RPID[$1]}")
	wait_until 60 "replica r$1 ready" curl -sf --cacert "$GW_DIR/ca.crt" \
		"https://127.0.0.1:${RPORT[$1]}/readyz"
}
RPORT[1]=$(free_port)
RPORT[2]=$GW_PORT    # the join document's URL: the agent dials r2
replica_start 1
replica_start 2

cid=$(cluster_create bench)
ctl token create --cluster "$cid" >"$T/join.json"
join_node node "$T/join.json" --allow "127.0.0.1:$IPERF_PORT" --allow "127.0.0.1:$ECHO_PORT" >/dev/null
client_start node --log-level warn
wait_until 30 "the agent active on r2" agent_is node active

declare -A FWD
port_open() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }
forward() { # forward PATH REPLICA TARGET_PORT NAME
	local p
	p=$(free_port)
	TETHER_SERVER=https://127.0.0.1:${RPORT[$2]} "$CTL" forward --cluster "$cid" --node node \
		"127.0.0.1:$p:127.0.0.1:$3" >>"$T/forward-$1-$4.log" 2>&1 &
	PIDS+=($!)
	wait_until 20 "forward $1 $4" port_open "$p"
	FWD[$1-$4]=$p
}
forward direct 2 "$IPERF_PORT" iperf
forward direct 2 "$ECHO_PORT" echo
forward cross 1 "$IPERF_PORT" iperf
forward cross 1 "$ECHO_PORT" echo
# r1 learns where the agent is with its next lease renewal (every 2 s).
echo_through() { timeout 5 "$py" -c '
import socket, sys
s = socket.create_connection(("127.0.0.1", int(sys.argv[1])))
s.sendall(b"x"); assert s.recv(1) == b"x"' "$1"; }
wait_until 30 "an echo through r1 and the peer link" echo_through "${FWD[cross-echo]}"
wait_until 30 "an echo through r2" echo_through "${FWD[direct-echo]}"

declare -A GBPS
iperf() { # iperf PATH DIR(up|down)
	local rev=() out
	[ "$2" = down ] && rev=(-R)
	out=$(iperf3 -c 127.0.0.1 -p "${FWD[$1-iperf]}" -t "$SECS" -J "${rev[@]}") ||
		fail "iperf3 $1 $2: $(jq -r .error <<<"$out" 2>/dev/null)"
	GBPS[$1-$2]+="$(jq -r '.end.sum_received.bits_per_second / 1e7 | round / 100' <<<"$out") "
}
for r in $(seq 1 "$ROUNDS"); do
	for dir in up down; do
		for path in direct cross; do iperf "$path" "$dir"; done
	done
done
median() { tr ' ' '\n' <<<"$1" | grep . | sort -g | awk '{ v[NR] = $1 } END { print v[int((NR + 1) / 2)] }'; }

declare -A RTT
for path in direct cross; do
	RTT[$path]=$("$py" "$SRC/tests/bench/echo_rtt.py" "${FWD[$path-echo]}" "$CONNS")
	[ "$(jq -r .ok <<<"${RTT[$path]}")" = "$CONNS" ] ||
		fail "set-up through $path: $(jq -c . <<<"${RTT[$path]}")"
done

echo
printf 'cross_replica: %s rounds of %s s, %s connections; direct = through r2 (holds the tunnel), cross = through r1 and the peer link\n' \
	"$ROUNDS" "$SECS" "$CONNS"
for dir in up down; do
	d=$(median "${GBPS[direct-$dir]}")
	c=$(median "${GBPS[cross-$dir]}")
	printf '  throughput %-4s  direct %6.2f Gbit/s  cross %6.2f Gbit/s  cross/direct %.2fx   (rounds: direct %s| cross %s)\n' \
		"$dir" "$d" "$c" "$(echo "$c / $d" | bc -l)" "${GBPS[direct-$dir]}" "${GBPS[cross-$dir]}"
done
dp50=$(jq -r .p50_ms <<<"${RTT[direct]}") cp50=$(jq -r .p50_ms <<<"${RTT[cross]}")
printf '  set-up p50      direct %6.3f ms  cross %6.3f ms  direct/cross %.2fx   (p90 %s | %s ms; total %s | %s s)\n' \
	"$dp50" "$cp50" "$(echo "$dp50 / $cp50" | bc -l)" \
	"$(jq -r .p90_ms <<<"${RTT[direct]}")" "$(jq -r .p90_ms <<<"${RTT[cross]}")" \
	"$(jq -r .total_s <<<"${RTT[direct]}")" "$(jq -r .total_s <<<"${RTT[cross]}")"
