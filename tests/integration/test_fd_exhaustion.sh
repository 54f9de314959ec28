#!/usr/bin/env bash
# Descriptors are a budget (docs/0028).  The gateway runs with 400
# descriptors; one source (127.0.0.2) keeps up to 600 idle keep-alive
# connections open (each answered once, reopened as soon as one is closed)
# and scrapes of --metrics-listen go on meanwhile.  --max-connections-per-
# source (256 by default) keeps that source well below the limit: an
# operator on 127.0.0.1 is answered 4 of 4, a restarted agent comes back,
# the metrics port answers, and the log says nothing at a spinning rate
# (accept errors pause the listener and are logged once per interval with
# a count).  Before, the source took every descriptor: the operator and the
# agent were shut out and the metrics port spun on "Error from accept()".
source "$(dirname "$0")/lib.sh"

DEADLINE=25
MP=$(free_port)
gateway_init
(ulimit -n 400 && gateway_start --metrics-listen "127.0.0.1:$MP")
# shellcheck disable=SC2154  # GW_PID was set in the subshell: find it by port
GW_PID=$(ss -Hltnp "sport = :$GW_PORT" | grep -o 'pid=[0-9]*' | head -1 | cut -d= -f2)
[ -n "$GW_PID" ] || fail "cannot find the gateway's pid"
PIDS+=("$GW_PID")
cid=$(cluster_create fds)
ctl token create --cluster "$cid" >"$T/join.json"
join_node n1 "$T/join.json" >/dev/null
client_start n1
wait_until 30 "n1 active" agent_is n1 active

python3 "$TETHER_SRC/tests/integration/idle_flood.py" 127.0.0.1 "$GW_PORT" 127.0.0.2 600 \
	"$T/flood.json" &
PIDS+=($!)
tried_at_least() { [ -f "$T/flood.json" ] && jq -e ".tried >= $1" "$T/flood.json"; }
wait_until 60 "the flooding source has tried 800 connections" tried_at_least 800
# Scrapes during the flood: each must be answered.
for _ in 1 2 3 4 5; do
	curl -sf --max-time "$DEADLINE" "http://127.0.0.1:$MP/metrics" >/dev/null ||
		fail "a scrape of the metrics port failed during the flood"
done
ok=0
for _ in 1 2 3 4; do
	timeout "$DEADLINE" "$CTL" -o json cluster list >/dev/null 2>&1 && ok=$((ok + 1))
done
[ "$ok" -eq 4 ] || fail "the operator got $ok of 4 requests through during the flood"
client_stop "$CLIENT_PID"
client_start n1
wait_until "$DEADLINE" "the restarted agent active again during the flood" agent_is n1 active
held=$(jq .most_held "$T/flood.json")
tried=$(jq .tried "$T/flood.json")
lines=$(wc -l <"$T/gateway.log")
[ "$lines" -lt 2000 ] || fail "the gateway wrote $lines log lines during the flood"
! grep -q 'Error from accept() call' "$T/gateway.log" ||
	fail "libevent's own accept error line: a listener without an accept-error callback"
pass "one source with 600 idle keep-alive connections ($tried tried, at most $held held): 5 of 5 scrapes, 4 of 4 operator requests, the agent back, $lines log lines"
kill -TERM "$GW_PID"
wait_until 20 "gateway stopped" bash -c "! kill -0 $GW_PID"
