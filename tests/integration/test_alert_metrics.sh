#!/usr/bin/env bash
# The metrics the alerting rules (config/prometheus/tether.rules.yml) read
# that a gateway sets from its own state, on a replica on PostgreSQL with
# --metrics-listen (no token: the admin check would need the store):
# - tether_store_up is 1 while the replica reaches PostgreSQL, 0 once
#   PostgreSQL is stopped (as /readyz turns 503), 1 again once it is back;
# - tether_certificate_expiry_timestamp_seconds{cert="server"|"ca"} is the
#   notAfter openssl reads in the replica's server.crt and ca.crt;
# - tether_agents_offline{over="5m"|"1h"|"1d"} counts an agent whose tunnel
#   is gone by its last contact (last_seen, set back in PostgreSQL by the
#   test: two hours, then two days), and not once it is connected again.
#   The replica takes that census every 2 s (--census-interval 2000, the
#   least: every lease renewal) rather than every 30 s, the default.
source "$(dirname "$0")/lib.sh"

pg_start
RPORT[1]=$(free_port)
gateway_init --store "$PG_URL" --url "https://127.0.0.1:${RPORT[1]}"
export TETHER_SERVER=https://127.0.0.1:${RPORT[1]}
MP=$(free_port)
replica_start 1 --metrics-listen "127.0.0.1:$MP" --census-interval 2000
wait_until 30 "replica ready" replica_ready 1
# value SERIES: the sample value of one series (exact name and labels) in
# a fresh scrape; metric_is SERIES VALUE polls for it.
value() {
	curl -sf "http://127.0.0.1:$MP/metrics" >"$T/m.txt" || return 1
	awk -v s="$1" '$1 == s { print $2; found = 1 } END { exit !found }' "$T/m.txt"
}
metric_is() { [ "$(value "$1")" = "$2" ]; }

# --- tether_store_up -----------------------------------------------------
wait_until 10 "tether_store_up 1" metric_is tether_store_up 1
grep -q '^# HELP tether_store_up ' "$T/m.txt" || fail "tether_store_up has no HELP"
pg_stop
wait_until 30 "tether_store_up 0 with PostgreSQL stopped" metric_is tether_store_up 0
[ "$(replica_readyz 1)" = 503 ] || fail "tether_store_up is 0 but /readyz is not 503"
pg_ctl_start || { cat "$PG_DIR/log" >&2; fail "PostgreSQL did not start again"; }
wait_until 30 "tether_store_up 1 with PostgreSQL back" metric_is tether_store_up 1
pass "tether_store_up: 1, 0 while PostgreSQL is stopped, 1 again once it is back"

# --- tether_certificate_expiry_timestamp_seconds -------------------------
not_after() { date -u -d "$(openssl x509 -noout -enddate -in "$1" | cut -d= -f2)" +%s; }
for c in server ca; do
	want=$(not_after "$T/r1/$c.crt")
	got=$(value "tether_certificate_expiry_timestamp_seconds{cert=\"$c\"}") ||
		fail "no tether_certificate_expiry_timestamp_seconds{cert=\"$c\"}"
	# The text writes a double: 1.7e+09 style or plain digits.
	[ "$(printf '%.0f' "$got")" = "$want" ] || fail "$c certificate expiry: /metrics says $got, openssl $want"
	log "$c certificate: notAfter $want ($(date -u -d "@$want"))"
done
pass "tether_certificate_expiry_timestamp_seconds: the notAfter of server.crt and ca.crt"

# --- tether_agents_offline -----------------------------------------------
offline_is() { # offline_is 5M 1H 1D: the three counts in one scrape
	metric_is 'tether_agents_offline{over="5m"}' "$1" &&
		[ "$(value_in 'tether_agents_offline{over="1h"}')" = "$2" ] &&
		[ "$(value_in 'tether_agents_offline{over="1d"}')" = "$3" ]
}
value_in() { awk -v s="$1" '$1 == s { print $2 }' "$T/m.txt"; }
cid=$(ctl cluster create offline | jq -er .id)
ctl token create --cluster "$cid" >"$T/join.json"
join_node n1 "$T/join.json" >/dev/null
client_start n1
wait_until 30 "n1 active" agent_is n1 active
id1=$(agent_id_of n1)
client_stop "$CLIENT_PID"
wait_until 20 "n1's tunnel record gone" \
	test "$(pg_query "SELECT count(*) FROM tunnels WHERE agent_id = '$id1'")" = 0
seen_ago() { pg_query "UPDATE agents SET last_seen = extract(epoch FROM now())::bigint - $1 WHERE id = '$id1'" >/dev/null; }
seen_ago 7200
# Counted at every lease renewal (--census-interval 2000).
wait_until 45 "n1 offline over 5m and 1h, not 1d" offline_is 1 1 0
seen_ago 172800
wait_until 45 "n1 offline over 1d" offline_is 1 1 1
pass "tether_agents_offline counts an agent gone for 2 h in over=5m and 1h, for 2 days in 1d too"
client_start n1
wait_until 30 "n1 active again" agent_is n1 active
wait_until 45 "n1 not counted once connected" offline_is 0 0 0
pass "tether_agents_offline: an agent connected again is not counted"
client_stop "$CLIENT_PID"

replica_stop 1
