#!/usr/bin/env bash
# Renewing the server certificate of three replicas on PostgreSQL behind
# haproxy (docs/0030, docs/operations.md "Renewing the server
# certificate"): `cert renew` where ca.key is, the new server.crt and peer
# credential copied into each replica's data directory (rename within it),
# SIGHUP to each.
# Each replica then serves the new serial (openssl s_client on its own
# port, and through haproxy); no tunnel is dropped (the agent keeps its
# replica and connected_since); a stream opened before through another
# replica than the agent's (so across a peer link) keeps echoing, and a new
# one opens through every replica.
source "$(dirname "$0")/lib.sh"

REPLICAS=(1 2 3)
pg_start
LB_PORT=$(free_port)
LB_URL=https://127.0.0.1:$LB_PORT
gateway_init --store "$PG_URL" --url "$LB_URL"
echo_server_start
for r in "${REPLICAS[@]}"; do replica_start "$r"; done
for r in "${REPLICAS[@]}"; do wait_until 30 "replica r$r ready" replica_ready "$r"; done
haproxy_start haproxy "$(haproxy_pool "$LB_PORT" roundrobin "${REPLICAS[@]}")"
export TETHER_SERVER=https://127.0.0.1:${RPORT[1]}
wait_until 20 "haproxy in front of the replicas" \
	curl -sf --cacert "$GW_DIR/ca.crt" "$LB_URL/readyz"
[ ! -e "$T/r1/ca.key" ] || fail "a replica holds ca.key"

cid=$(cluster_create renew)
ctl token create --cluster "$cid" >"$T/join.json"
join_node n1 "$T/join.json" --allow "127.0.0.1:$echo_port" >/dev/null
client_start n1
wait_until 30 "n1 active" agent_is n1 active
aid=$(agent_id_of n1)
holder() { pg_query "SELECT replica_id FROM tunnels WHERE agent_id = '$aid'"; }
wait_until 10 "n1's tunnel recorded" test -n "$(holder)"
held_by=$(holder)
since=$(agent_field "$aid" connected_since)
h=${held_by#r}
away=$((h % 3 + 1))   # a replica that does not hold the agent
log "n1 is held by $held_by; the stream goes through r$away"

serial_at() { # serial_at PORT: the serial a new TLS handshake there gets
	openssl s_client -connect "127.0.0.1:$1" -servername localhost \
		</dev/null 2>/dev/null | openssl x509 -noout -serial | sed 's/^serial=//'
}
serves() { [ "$(serial_at "$1")" = "$2" ]; }
old=$(openssl x509 -in "$GW_DIR/server.crt" -noout -serial | sed 's/^serial=//')
for r in "${REPLICAS[@]}"; do serves "${RPORT[$r]}" "$old" || fail "r$r does not serve $old"; done

TETHER_SERVER=https://127.0.0.1:${RPORT[$away]} \
	held_connect "$cid" n1 "127.0.0.1:$echo_port" "$T/connect.out" "$T/connect.log"
printf 'before\n' >&7
wait_until 20 "the stream through r$away echoed" grep -q before "$T/connect.out"

# The procedure of docs/operations.md.
"$GATEWAY" cert renew --data-dir "$GW_DIR" >"$T/renew.out" || fail "cert renew failed"
new=$(openssl x509 -in "$GW_DIR/server.crt" -noout -serial | sed 's/^serial=//')
[ "$new" != "$old" ] || fail "cert renew kept the serial"
for r in "${REPLICAS[@]}"; do
	for f in server.crt peer.key peer.crt; do
		cp -p "$GW_DIR/$f" "$T/r$r/$f.new"
		mv "$T/r$r/$f.new" "$T/r$r/$f"
	done
	kill -HUP "${RPID[$r]}"
done
for r in "${REPLICAS[@]}"; do
	wait_until 20 "r$r serves $new" serves "${RPORT[$r]}" "$new"
	wait_until 10 "r$r logged it" grep -q "now serving the data directory's server certificate.*serial=$new" "$T/replica$r.log"
	on "$r" status | jq -e --arg s "$new" --arg r "r$r" '.serial == $s and .replica == $r' >/dev/null ||
		fail "tetherctl status against r$r: $(on "$r" status)"
done
for i in 1 2 3 4 5 6; do   # roundrobin: every replica answers in turn
	serves "$LB_PORT" "$new" || fail "haproxy handed a handshake to a replica serving the old certificate"
done
pass "renewed: r1, r2, r3 and haproxy serve $new"

[ "$(holder)" = "$held_by" ] || fail "n1 moved from $held_by to $(holder)"
[ "$(agent_field "$aid" connected_since)" = "$since" ] || fail "n1's tunnel was dropped (connected_since changed)"
agent_is n1 active || fail "n1 is not active"
grep -c 'msg=connected ' "$T/client-n1.log" | grep -qx 1 || fail "n1 connected more than once"
printf 'after\n' >&7
wait_until 20 "the stream opened before the renewal still echoes" grep -q after "$T/connect.out"
kill -0 "$HELD_PID" || fail "the stream's tetherctl connect ended"
for r in "${REPLICAS[@]}"; do
	out=$(echo "new via r$r" | TETHER_SERVER=https://127.0.0.1:${RPORT[$r]} \
		timeout 20 "$CTL" connect --cluster "$cid" --node n1 "127.0.0.1:$echo_port" 2>>"$T/connect.log") || true
	[ "$out" = "new via r$r" ] || fail "a new stream through r$r: '$out'"
done
pass "no tunnel dropped (n1 on $held_by since $since), the stream across the peer link kept echoing, new streams through each replica"
exec 7>&-
wait "$HELD_PID" 2>/dev/null || true
for r in "${REPLICAS[@]}"; do replica_stop "$r"; done
