#!/usr/bin/env bash
# Prometheus /metrics on the gateway (--metrics-listen without a token, the
# main port with an admin token) and on the agent (run --metrics-listen):
# the text passes `promtool check metrics`, the counters move with what
# happens (registration, handshakes, streams opened and refused, bytes,
# agent states after a revoke), and a real Prometheus scraping the gateway
# answers the PromQL query tether_agents{state="active"} with the number of
# active agents.
source "$(dirname "$0")/lib.sh"

py=/usr/bin/python3
$py "$TETHER_SRC/tests/integration/tcpserver.py" echo "$T/echo.port" &
PIDS+=($!)
wait_until 10 "echo server" test -s "$T/echo.port"
echo_port=$(cat "$T/echo.port")

MP=$(free_port)
gateway_init
gateway_start --metrics-listen "127.0.0.1:$MP"
scrape() { curl -sf "http://127.0.0.1:$MP/metrics"; }
# value FILE SERIES: the sample value of one series (exact name and labels)
value() { awk -v s="$2" '$1 == s { print $2; found = 1 } END { exit !found }' "$1"; }
# metric_is PORT SERIES VALUE: polls until the series has that value
metric_is() { curl -sf "http://127.0.0.1:$1/metrics" >"$T/poll.txt" && [ "$(value "$T/poll.txt" "$2")" = "$3" ]; }

# --- the text format -----------------------------------------------------
scrape >"$T/m0.txt" || fail "no /metrics on --metrics-listen"
promtool check metrics <"$T/m0.txt" || fail "promtool check metrics refuses the gateway's text"
for m in tether_agents tether_agents_offline tether_agents_by_version tether_tunnels_connected tether_handshakes_total \
	tether_registrations_total tether_streams_open tether_streams_opened_total \
	tether_stream_bytes_total tether_stream_blocked_seconds_total \
	tether_k8s_requests_total tether_k8s_request_duration_seconds \
	tether_store_duration_seconds tether_store_up \
	tether_certificate_expiry_timestamp_seconds tether_ca_rotation_phase \
	tether_agents_holding_new_ca process_cpu_seconds_total \
	process_resident_memory_bytes process_open_fds process_max_fds \
	process_start_time_seconds; do
	grep -q "^# TYPE $m " "$T/m0.txt" || fail "/metrics lacks $m"
done
[ "$(value "$T/m0.txt" 'tether_agents{state="active"}')" = 0 ] || fail "active agents before any joined"
[ "$(value "$T/m0.txt" tether_store_up)" = 1 ] || fail "tether_store_up is not 1 on a gateway that reaches its store"
curl -s -o /dev/null -w '%{http_code}' "http://127.0.0.1:$MP/other" | grep -qx 404 ||
	fail "--metrics-listen serves a path other than /metrics"
pass "gateway /metrics on --metrics-listen passes promtool"

# --- the main port wants an admin token ---------------------------------
code=$(curl -s -o /dev/null -w '%{http_code}' --cacert "$GW_DIR/ca.crt" "$GW_URL/metrics")
[ "$code" = 401 ] || fail "main-port /metrics without a token: $code, want 401"
curl -sf --cacert "$GW_DIR/ca.crt" -H "Authorization: Bearer $(cat "$GW_DIR/admin.token")" \
	"$GW_URL/metrics" >"$T/main.txt" || fail "main-port /metrics with the admin token"
promtool check metrics <"$T/main.txt" || fail "promtool refuses the main port's text"
cid=$(cluster_create metrics)
user_token=$(ctl user create alice --cluster "$cid" | jq -er .token)
code=$(curl -s -o /dev/null -w '%{http_code}' --cacert "$GW_DIR/ca.crt" \
	-H "Authorization: Bearer $user_token" "$GW_URL/metrics")
[ "$code" = 403 ] || fail "main-port /metrics with a user token: $code, want 403"
pass "main-port /metrics: 401 without a token, 403 for a user token, text for an admin"

# --- a real Prometheus scraping the gateway ------------------------------
PP=$(free_port)
mkdir -p "$T/prom"
cat >"$T/prom/prometheus.yml" <<YML
global:
  scrape_interval: 1s
  evaluation_interval: 1s
scrape_configs:
  - job_name: tether-gateway
    static_configs:
      - targets: ['127.0.0.1:$MP']
YML
prometheus --config.file="$T/prom/prometheus.yml" --storage.tsdb.path="$T/prom/data" \
	--web.listen-address="127.0.0.1:$PP" >"$T/prometheus.log" 2>&1 &
PIDS+=($!)
# promql QUERY: the value of a one-sample instant vector, or nothing
promql() {
	curl -sf -G "http://127.0.0.1:$PP/api/v1/query" --data-urlencode "query=$1" |
		jq -er '.data.result[0].value[1]'
}
promql_is() { [ "$(promql "$1")" = "$2" ]; }
wait_until 60 "Prometheus sees tether_agents{state=\"active\"} = 0" \
	promql_is 'tether_agents{state="active"}' 0

# --- two agents, one with its own /metrics -------------------------------
AP=$(free_port)
ctl token create --cluster "$cid" --uses 2 >"$T/join.json"
join_node n1 "$T/join.json" --allow "127.0.0.1:$echo_port" >/dev/null
join_node n2 "$T/join.json" --allow "127.0.0.1:$echo_port" >/dev/null
"$CLIENT" run --state-dir "$T/n1" --metrics-listen "127.0.0.1:$AP" >>"$T/client-n1.log" 2>&1 &
n1_pid=$!
PIDS+=("$n1_pid")
client_start n2
wait_until 30 "n1 and n2 active" eval 'agent_is n1 active && agent_is n2 active'
wait_until 10 "gateway counts 2 active agents" metric_is "$MP" 'tether_agents{state="active"}' 2
wait_until 60 "PromQL tether_agents{state=\"active\"} = 2" \
	promql_is 'tether_agents{state="active"}' 2
pass "Prometheus answers tether_agents{state=\"active\"} with 2, the active agents"

scrape >"$T/m1.txt"
[ "$(value "$T/m1.txt" tether_tunnels_connected)" = 2 ] || fail "tunnels_connected is not 2"
[ "$(value "$T/m1.txt" 'tether_registrations_total{result="ok"}')" = 2 ] ||
	fail "registrations_total{ok} is not 2"
# Each node: one handshake with the import token, one with its own key.
[ "$(value "$T/m1.txt" 'tether_handshakes_total{result="ok"}')" = 4 ] ||
	fail "handshakes_total{ok} is not 4"

# --- streams: one carried, one refused by the node ------------------------
printf 'ping' | "$CTL" connect --cluster "$cid" --node n1 "127.0.0.1:$echo_port" >"$T/pong" ||
	fail "connect through n1"
[ "$(cat "$T/pong")" = ping ] || fail "the echo did not come back"
expect_exit 1 "$CTL" connect --cluster "$cid" --node n1 127.0.0.1:1 </dev/null
wait_until 10 "gateway counts the refused stream" \
	metric_is "$MP" 'tether_streams_opened_total{result="not_allowed"}' 1
scrape >"$T/m2.txt"
[ "$(value "$T/m2.txt" 'tether_streams_opened_total{result="ok"}')" = 1 ] ||
	fail "streams_opened_total{ok} is not 1"
[ "$(value "$T/m2.txt" 'tether_stream_bytes_total{direction="sent"}')" = 4 ] ||
	fail "4 bytes sent into the tunnel"
[ "$(value "$T/m2.txt" 'tether_stream_bytes_total{direction="received"}')" = 4 ] ||
	fail "4 bytes received from the tunnel"
[ "$(value "$T/m2.txt" tether_streams_open)" = 0 ] || fail "a stream is still counted open"
promtool check metrics <"$T/m2.txt" || fail "promtool refuses the text after streams"
pass "gateway counts streams by result and their bytes"

curl -sf "http://127.0.0.1:$AP/metrics" >"$T/agent.txt" || fail "no /metrics on the agent"
promtool check metrics <"$T/agent.txt" || fail "promtool refuses the agent's text"
[ "$(value "$T/agent.txt" tether_tunnels_connected)" = 1 ] || fail "agent: tunnel not counted"
[ "$(value "$T/agent.txt" 'tether_streams_opened_total{result="ok"}')" = 1 ] ||
	fail "agent: streams_opened_total{ok} is not 1"
[ "$(value "$T/agent.txt" 'tether_streams_opened_total{result="not_allowed"}')" = 1 ] ||
	fail "agent: streams_opened_total{not_allowed} is not 1"
pass "agent /metrics passes promtool and counts its streams"

# --- a revoke moves the agent between states -----------------------------
ctl agent revoke "$(agent_id_of n2)" >/dev/null
wait_until 10 "revoked agent counted" metric_is "$MP" 'tether_agents{state="revoked"}' 1
[ "$(value "$T/poll.txt" 'tether_agents{state="active"}')" = 1 ] || fail "active is not 1 after the revoke"
wait_until 60 "PromQL tether_agents{state=\"active\"} = 1" \
	promql_is 'tether_agents{state="active"}' 1
pass "a revoke: tether_agents moves from active to revoked, in Prometheus too"

client_stop "$n1_pid"
gateway_stop
pass "metrics"
