#!/usr/bin/env bash
# rehome.sh: seconds for N agents to re-home after a replica's kill -9
# (issue 9's benchmark; docs/0018, "Re-homing after a replica dies").
#
# A benchmark, not a test: it reports figures and fails only if it cannot
# take them.  Everything on loopback:
#   - a private PostgreSQL (lib.sh pg_start) and BENCH_REPLICAS (default 3)
#     gateway replicas on it, each with --replica-id rN and --peer-url;
#   - Debian's haproxy in front (TCP, TLS passed through, roundrobin,
#     health checks every 300 ms, redispatch), as in test_presence;
#   - N agents (one tether-swarm: the agent's own tunnel code, its backoff
#     with jitter) registered through haproxy from one multi-use token;
#     with BENCH_HOLD_ALL=1 the other replicas start only once every agent
#     is active on r1, so the killed replica holds all N;
#   then kill -9 of the replica whose tunnels the store records most of,
#   and it reports, in ms after the kill, from one poll every 100 ms of the
#   store (the tunnels table joined with the leases, which is what
#   `tetherctl agent list -o json` shows as replica/connected) and the
#   swarm's own lines:
#   - when the swarm saw the tunnels go (its established count dropped);
#   - when the first and the last of the dead replica's agents were
#     recorded on a live replica (re-homed), and the swarm's all_active;
#   - when the dead replica's lease ended (it was last renewed before the
#     kill; PRESENCE_LEASE_MS 6 s): until then the store still counts the
#     agents that have not re-homed as held by the dead replica.
#   At the end, `tetherctl agent list -o json` through haproxy must show
#   every agent connected on a live replica.
#
# usage: bash tests/bench/rehome.sh [N]      (default 1000; run it under
#        flock(1) on a shared machine, one benchmark at a time)
#   TETHER_BIN      directory with the binaries (default build/release/bin)
#   BENCH_REPLICAS  replicas (default 3, at least 2)
#   BENCH_HOLD_ALL  1: the killed replica holds every agent (see above)
#   BENCH_RATE      agents started per second at registration (default 200)
set -euo pipefail

SRC=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
export TETHER_BIN=${TETHER_BIN:-$SRC/build/release/bin}
export ASAN_OPTIONS=
N=${1:-1000}
REPLICAS=${BENCH_REPLICAS:-3}
HOLD_ALL=${BENCH_HOLD_ALL:-0}
RATE=${BENCH_RATE:-200}
COMMAND_LINE=
for v in TETHER_BIN BENCH_REPLICAS BENCH_HOLD_ALL BENCH_RATE; do
	[ -z "${!v:-}" ] || [ "$v" = TETHER_BIN ] || COMMAND_LINE+="$v=${!v} "
done
COMMAND_LINE+="bash tests/bench/rehome.sh${*:+ $*}"
# shellcheck source=../integration/lib.sh
source "$SRC/tests/integration/lib.sh"
TEST_NAME=rehome
SWARM=$TETHER_BIN/tether-swarm

[[ $N =~ ^[1-9][0-9]*$ ]] || fail "N must be a positive integer, got '$N'"
[[ $REPLICAS =~ ^[2-9]$ ]] || fail "BENCH_REPLICAS must be 2 to 9"
for tool in haproxy jq psql bc; do
	command -v "$tool" >/dev/null || fail "$tool is required (config/setup.sh)"
done
[ -x "$SWARM" ] || fail "$SWARM missing: make build"
ulimit -Sn "$(ulimit -Hn)"
[ "$(ulimit -Hn)" = unlimited ] || [ $((2 * N + 300)) -le "$(ulimit -Hn)" ] ||
	fail "haproxy needs two descriptors per agent: $N do not fit in $(ulimit -Hn)"

now_ms() { date +%s%3N; }

pg_start
LB_PORT=$(free_port)
LB_URL=https://127.0.0.1:$LB_PORT
gateway_init --store "$PG_URL" --url "$LB_URL"

declare -a RPORT RPID
replica_start() { # replica_start I
	local d=$T/r$1
	mkdir -p -m 700 "$d"
	cp "$GW_DIR/ca.crt" "$GW_DIR/server.crt" "$GW_DIR/server.key" "$GW_DIR/peer.crt" "$GW_DIR/peer.key" \
		"$GW_DIR/gateway.json" "$d/"
	RPORT[$1]=${RPORT[$1]:-$(free_port)}
	"$GATEWAY" serve --data-dir "$d" --listen "127.0.0.1:${RPORT[$1]}" \
		--store "$PG_URL" --replica-id "r$1" \
		--peer-url "https://127.0.0.1:${RPORT[$1]}" --drain-timeout 0 \
		--max-handshakes 1024 --log-level warn >>"$T/replica$1.log" 2>&1 &
	RPID[$1]=$!
	PIDS+=("${RPID[$1]}")
	wait_until 60 "replica r$1 ready" curl -sf --cacert "$GW_DIR/ca.crt" \
		"https://127.0.0.1:${RPORT[$1]}/readyz"
}
for i in $(seq 1 "$REPLICAS"); do RPORT[i]=$(free_port); done

{
	cat <<CFG
global
	maxconn $((N + 200))
defaults
	mode tcp
	timeout connect 2s
	timeout client 120s
	timeout server 120s
	retries 3
	option redispatch
frontend fe
	bind 127.0.0.1:$LB_PORT
	default_backend replicas
backend replicas
	balance roundrobin
CFG
	for i in $(seq 1 "$REPLICAS"); do
		echo "	server r$i 127.0.0.1:${RPORT[$i]} check inter 300 fall 1 rise 1"
	done
} >"$T/haproxy.cfg"

replica_start 1
[ "$HOLD_ALL" = 1 ] || for i in $(seq 2 "$REPLICAS"); do replica_start "$i"; done
haproxy -db -f "$T/haproxy.cfg" >>"$T/haproxy.log" 2>&1 &
PIDS+=($!)
wait_until 20 "haproxy in front of the replicas" curl -sf --cacert "$GW_DIR/ca.crt" "$LB_URL/readyz"
export TETHER_SERVER=$LB_URL

cid=$(cluster_create rehome)
ctl token create --cluster "$cid" --uses "$N" --ttl 1h >"$T/join.json"
log "registering $N agents through haproxy at $RATE/s"
"$SWARM" --join "$T/join.json" --ca-file "$GW_DIR/ca.crt" --agents "$N" \
	--rate "$RATE" --report-ms 100 >"$T/swarm.out" 2>"$T/swarm.log" &
SW_PID=$!
PIDS+=("$SW_PID")
wait_until 600 "all $N agents active" grep -q '^swarm all_active' "$T/swarm.out"
if [ "$HOLD_ALL" = 1 ]; then
	for i in $(seq 2 "$REPLICAS"); do replica_start "$i"; done
fi

# Every agent recorded in the store (the swarm says active before the
# replica's record job has run), then the holder of most.
recorded() { [ "$(pg_query "SELECT count(*) FROM tunnels")" = "$N" ]; }
wait_until 60 "all $N tunnels recorded" recorded
spread=$(pg_query "SELECT replica_id || '=' || count(*) FROM tunnels GROUP BY replica_id ORDER BY count(*) DESC, replica_id" | tr '\n' ' ')
dead=$(pg_query "SELECT replica_id FROM tunnels GROUP BY replica_id ORDER BY count(*) DESC, replica_id LIMIT 1")
held=$(pg_query "SELECT count(*) FROM tunnels WHERE replica_id = '$dead'")
di=${dead#r}
sleep 2   # a quiet moment: the registration's tail is over
log "tunnels per replica: $spread; kill -9 of $dead ($held agents)"

# poll: "ms live_all on_dead lease_until" every 100 ms: tunnels on a live
# replica other than the dead one, tunnels still recorded on the dead one,
# the dead replica's lease end (ms, the store's clock = the wall clock).
POLL_SQL="SELECT (extract(epoch FROM clock_timestamp()) * 1000)::bigint,
 (SELECT count(*) FROM tunnels t JOIN replicas r ON r.id = t.replica_id
   WHERE r.id <> '$dead' AND r.lease_until > (extract(epoch FROM clock_timestamp()) * 1000)::bigint),
 (SELECT count(*) FROM tunnels WHERE replica_id = '$dead'),
 (SELECT coalesce(max(lease_until), 0) FROM replicas WHERE id = '$dead')"
est_before=$(tail -1 "$T/swarm.out" | grep -o 'established=[0-9]*' | cut -d= -f2)
cpu_ticks() { awk '{ print $14 + $15 }' "/proc/$1/stat"; }
survivors_ticks() { # the live replicas' CPU ticks, summed
	local i sum=0
	for i in $(seq 1 "$REPLICAS"); do
		[ "$i" = "$di" ] || sum=$((sum + $(cpu_ticks "${RPID[$i]}")))
	done
	echo "$sum"
}
cpu0=$(cpu_ticks "$SW_PID") gw0=$(survivors_ticks)

t_kill=$(now_ms)
kill -KILL "${RPID[$di]}"
wait "${RPID[$di]}" 2>/dev/null || true
deadline=$((SECONDS + 120))
first_ms='' all_ms='' lease_end=''
: >"$T/poll.out"
while :; do
	row=$(psql -X -qAt -F' ' -h 127.0.0.1 -p "$PG_PORT" -U postgres -d tether -c "$POLL_SQL")
	echo "$row" >>"$T/poll.out"
	read -r ms live on_dead lease <<<"$row"
	lease_end=${lease_end:-$lease}
	[ -n "$first_ms" ] || [ "$on_dead" -ge "$held" ] || first_ms=$ms
	if [ "$live" -ge "$N" ] && [ -z "$all_ms" ]; then all_ms=$ms; fi
	[ -z "$all_ms" ] || [ "$ms" -le "$lease_end" ] || break
	[ "$SECONDS" -lt "$deadline" ] || fail "not re-homed after 120 s: $(tail -1 "$T/poll.out")"
	sleep 0.1
done
# The swarm's view: when it lost the tunnels and when all were active again.
lost_ms=$(awk -v a="$t_kill" -v e="$est_before" '$1 == "swarm" && $2 ~ /^ms=/ {
	split($2, m, "="); if (m[2] + 0 < a) next
	for (i = 3; i <= NF; i++) { split($i, kv, "="); if (kv[1] == "established" && kv[2] + 0 < e) { print m[2]; exit } } }' "$T/swarm.out")
sw_all_ms=$(awk -v a="$t_kill" '/^swarm all_active/ { sub("ms=", "", $3); if ($3 + 0 > a) { print $3; exit } }' "$T/swarm.out")
dials=$(awk -v a="$t_kill" '$1 == "swarm" && $2 ~ /^ms=/ { split($2, m, "="); if (m[2] + 0 < a) { for (i = 3; i <= NF; i++) { split($i, kv, "="); if (kv[1] == "dials") d0 = kv[2] } } else { for (i = 3; i <= NF; i++) { split($i, kv, "="); if (kv[1] == "dials") d1 = kv[2] } } } END { print d1 - d0 }' "$T/swarm.out")
cpu1=$(cpu_ticks "$SW_PID") gw1=$(survivors_ticks)

# What tetherctl shows through haproxy: every agent connected, on a live replica.
ctl agent list >"$T/agents.json"
bad=$(jq --arg d "$dead" '[.[] | select(.connected != true or .replica == null or .replica == $d)] | length' "$T/agents.json")
total=$(jq length "$T/agents.json")
[ "$total" = "$N" ] && [ "$bad" = 0 ] ||
	fail "agent list: $total agents, $bad not connected on a live replica"
after=$(jq -r '[.[] | .replica] | group_by(.) | map("\(.[0])=\(length)") | join(" ")' "$T/agents.json")

s() { if [ -n "$1" ]; then printf '%.2f' "$(echo "scale=3; ($1 - $t_kill) / 1000" | bc)"; else echo -; fi; }
TICKS=$(getconf CLK_TCK)
echo
echo "Re-homing after a replica's kill -9: $N agents (tether-swarm) through haproxy, $REPLICAS replicas on PostgreSQL"
echo "  command:  $COMMAND_LINE"
echo "  binaries: $TETHER_BIN ($("$GATEWAY" --version | head -1))"
echo "  machine:  $(nproc) CPUs, $(uname -sr), load average $(cut -d' ' -f1-3 /proc/loadavg); $(haproxy -v | head -1)"
echo "  tunnels per replica before: $spread; killed: $dead ($held agents); after: $after"
echo
echo "| after the kill -9 of $dead | s |"
echo "|---|---:|"
echo "| the swarm sees its tunnels closed (haproxy closes the client side) | $(s "$lost_ms") |"
echo "| first of the $held agents recorded on a live replica | $(s "$first_ms") |"
echo "| all $N agents recorded on a live replica (store; agent list) | $(s "$all_ms") |"
echo "| all $N agents active (the swarm's all_active) | $(s "$sw_all_ms") |"
echo "| the dead replica's lease ends (store) | $(s "$lease_end") |"
echo
echo "dials during the re-homing: $dials ($(echo "scale=2; $dials / $held" | bc) per agent moved);"
echo "CPU from the kill to the lease's end: the live replicas $(printf '%.2f' "$(echo "scale=3; ($gw1 - $gw0) / $TICKS" | bc)") s,"
echo "the swarm $(printf '%.2f' "$(echo "scale=3; ($cpu1 - $cpu0) / $TICKS" | bc)") s."
echo "Re-homing does not wait for the lease: a new tunnel's record replaces the"
echo "dead replica's at once; the lease only ends the records of agents that"
echo "have not come back (shown as not connected until then)."
