#!/usr/bin/env bash
# Moving the gateway (issue 20, docs/0031): two replicas on one PostgreSQL,
# reached through haproxy frontend A, the URL every node joined with.
# - A second frontend, B, serves the same replicas; `tetherctl gateway urls
#   set B A`, given to the replica that does not hold n1: every connected
#   agent learns the list over its tunnel (the other replica through the
#   store's notice), keeps it in state.json, and `agent list` shows it;
# - n3, joined but offline during the change, comes up through A (still
#   answering) and learns the list too; then it goes offline again;
# - frontend A closes (haproxy A stopped): n1 and n2 are active again
#   through B, with no command on the node; n3, started again after A is
#   gone, is active through B at once.
source "$(dirname "$0")/lib.sh"

NODES=(n1 n2 n3)
pg_start
RPORT[1]=$(free_port)
RPORT[2]=$(free_port)
PORT_A=$(free_port)
PORT_B=$(free_port)
URL_A=https://127.0.0.1:$PORT_A
URL_B=https://127.0.0.1:$PORT_B
gateway_init --store "$PG_URL" --url "$URL_A"
replica_start 1
replica_start 2
for i in 1 2; do wait_until 30 "replica $i ready" replica_ready "$i"; done
haproxy_start haproxy-a "$(haproxy_pool "$PORT_A" roundrobin 1 2)"
PID_A=$HAPROXY_PID
haproxy_start haproxy-b "$(haproxy_pool "$PORT_B" roundrobin 1 2)"
PID_B=$HAPROXY_PID
for u in "$URL_A" "$URL_B"; do
	wait_until 20 "haproxy on $u" curl -sf --cacert "$GW_DIR/ca.crt" "$u/readyz"
done
export TETHER_SERVER=https://127.0.0.1:${RPORT[1]}

cid=$(cluster_create moving)
ctl token create --cluster "$cid" --uses ${#NODES[@]} >"$T/join.json"
jq -e --arg u "$URL_A" '.gateway_url == $u' "$T/join.json" >/dev/null ||
	fail "the join document does not name frontend A"
declare -A APID=()
for n in "${NODES[@]}"; do join_node "$n" "$T/join.json" >/dev/null; done
for n in n1 n2; do
	client_start "$n"
	APID[$n]=$CLIENT_PID
done
for n in n1 n2; do wait_until 30 "$n active" agent_is "$n" active; done

urls_of() { # urls_of NODE: the list `agent list` says NODE holds (compact JSON)
	ctl agent list | jq -c --arg id "$(agent_id_of "$1")" \
		'.[] | select(.id == $id) | .urls'
}
holds() { [ "$(urls_of "$1")" = "$2" ]; }
replica_of() { agent_field "$(agent_id_of "$1")" replica; }
current_url() { "$CLIENT" status --state-dir "$T/$1" | jq -r .current_gateway_url; }

# No list set yet: the agents said so ([]), and dial their join URL.
for n in n1 n2; do wait_until 20 "$n reports no list" holds "$n" '[]'; done
[ "$(ctl gateway urls | jq -c .urls)" = '[]' ] || fail "a list is set before any was"
pass "no list set: n1 and n2 hold none (agent list: urls [])"

# --- the operator adds B, first in the list, on the replica n1 is not on ---
r1=$(replica_of n1)
other=1
[ "$r1" != r1 ] || other=2
log "n1 on $r1, n2 on $(replica_of n2); the list is set on r$other"
want="[\"$URL_B\",\"$URL_A\"]"
on "$other" gateway urls set "$URL_B" "$URL_A" >"$T/set.json"
[ "$(jq -c .urls "$T/set.json")" = "$want" ] || fail "set answered $(cat "$T/set.json")"
[ "$(ctl gateway urls | jq -c .urls)" = "$want" ] || fail "the other replica reads another list"
for n in n1 n2; do wait_until 20 "$n holds B A" holds "$n" "$want"; done
for n in n1 n2; do
	[ "$(jq -c .gateway_urls "$T/$n/state.json")" = "$want" ] ||
		fail "$n's state.json: $(jq -c .gateway_urls "$T/$n/state.json")"
	assert_mode "$T/$n/state.json" 600
	[ "$(current_url "$n")" = "$URL_A" ] || fail "$n moved before A went away"
done
pass "set on r$other: n1 (on $r1) and n2 hold [B, A] (agent list, state.json 0600); still on A"

# Invalid lists are refused by the gateway and change nothing.
expect_exit 1 ctl gateway urls set "https://127.0.0.1:$PORT_B/path"
assert_contains "$T/last.err" 'want https://HOST[:PORT]'
expect_exit 2 ctl gateway urls set "http://127.0.0.1:$PORT_B"
[ "$(ctl gateway urls | jq -c .urls)" = "$want" ] || fail "a refused list changed the list"
pass "a URL with a path refused (400), an http:// one refused by tetherctl; the list unchanged"

# --- n3 was offline during the change: it comes up through A and learns ---
client_start n3
APID[n3]=$CLIENT_PID
wait_until 30 "n3 active" agent_is n3 active
wait_until 20 "n3 holds B A" holds n3 "$want"
[ "$(jq -c .gateway_urls "$T/n3/state.json")" = "$want" ] || fail "n3's state.json lacks the list"
client_stop "${APID[n3]}"
pass "n3, offline during the change, came up through A and holds [B, A]; stopped again"

# --- A closes: no command on any node ---
kill -TERM "$PID_A"
wait "$PID_A" 2>/dev/null || true
curl -sf --max-time 2 --cacert "$GW_DIR/ca.crt" "$URL_A/readyz" >/dev/null &&
	fail "frontend A still answers"
t0=$SECONDS
on_b() { agent_is "$1" active && [ "$(current_url "$1")" = "$URL_B" ]; }
for n in n1 n2; do wait_until 60 "$n active through B" on_b "$n"; done
log "n1 and n2 active through B $((SECONDS - t0)) s after A closed"
for n in n1 n2; do
	kill -0 "${APID[$n]}" || fail "$n exited"
	assert_contains "$T/client-$n.log" "msg=\"next gateway URL\" gateway=$URL_B"
done
pass "A closed: n1 and n2 active again through B, moved by themselves"

# --- n3, started again once A is gone, dials B first ---
client_start n3
APID[n3]=$CLIENT_PID
wait_until 30 "n3 active through B" on_b n3
[ "$(grep -c 'msg="next gateway URL"' "$T/client-n3.log" || true)" = 0 ] ||
	fail "n3 dialled A first: $(grep 'next gateway URL' "$T/client-n3.log")"
pass "n3, started after A closed, active through B (its list from state.json)"

for n in "${NODES[@]}"; do client_stop "${APID[$n]}"; done
kill -TERM "$PID_B"
wait "$PID_B" 2>/dev/null || true
replica_stop 1
replica_stop 2
