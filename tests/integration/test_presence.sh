#!/usr/bin/env bash
# Presence (docs/0017): two gateway replicas on one private PostgreSQL behind
# Debian's haproxy (TCP, TLS passed through, round robin, health checks).
# - each replica takes a lease (its --replica-id, by default HOST-PID: the
#   host name and the process id, and its --peer-url); the agent's tunnel is recorded against the replica
#   that holds it, and `tetherctl agent list -o json` shows it as "replica";
# - kill -9 of that replica, the agent held stopped: the other replica
#   reports the agent gone (replica null, not connected) once the dead
#   replica's lease has ended, within seconds;
# - the agent, let go, reconnects through haproxy to the live replica, which
#   then holds it;
# - SIGTERM gives the lease and the tunnel records up at once.
source "$(dirname "$0")/lib.sh"

command -v haproxy >/dev/null || fail "haproxy is not installed (config/setup.sh)"
PING=(--ping-interval 300 --ping-timeout 1000)
pg_start
LB_PORT=$(free_port)
LB_URL=https://127.0.0.1:$LB_PORT
gateway_init --store "$PG_URL" --url "$LB_URL"

REPLICA_FLAGS=("${PING[@]}")
on() { # on N CTL-ARGS...: tetherctl -o json against replica N directly
	TETHER_SERVER=https://127.0.0.1:${RPORT[$1]} ctl "${@:2}"
}

replica_start 1 --replica-id r1
REPLICA_NO_ID=1 replica_start 2
for i in 1 2; do wait_until 30 "replica $i ready" replica_ready "$i"; done
host=$(hostname | cut -c1-48)-${RPID[2]}
assert_contains "$T/replica2.log" "replica=$host"
declare -A NAME=([1]=r1 [2]=$host)
[ "$(pg_query "SELECT count(*) FROM replicas WHERE (id = 'r1' AND peer_url = 'https://127.0.0.1:${RPORT[1]}') OR (id = '$host' AND peer_url = 'https://127.0.0.1:${RPORT[2]}')")" = 2 ] ||
	fail "the replicas' leases are not in the store: $(pg_query 'SELECT id, peer_url FROM replicas')"
pass "each replica holds a lease: r1 (--replica-id) and $host (HOST-PID by default)"

haproxy_start haproxy "$(haproxy_pool "$LB_PORT" roundrobin 1 2)"
lb_ready() { curl -sf --cacert "$GW_DIR/ca.crt" "$LB_URL/readyz"; }
wait_until 20 "haproxy in front of the replicas" lb_ready
export TETHER_SERVER=$LB_URL

cid=$(cluster_create presence)
ctl token create --cluster "$cid" >"$T/join.json"
join_node n1 "$T/join.json" >/dev/null
client_start n1 "${PING[@]}"
agent=$CLIENT_PID
wait_until 30 "n1 active" agent_is n1 active
id=$(jq -r .agent_id "$T/n1/state.json")
holder_name() { on "$1" agent list | jq -r --arg id "$id" '.[] | select(.id == $id) | .replica'; }
holder=
for i in 1 2; do
	[ "$(pg_query "SELECT replica_id FROM tunnels WHERE agent_id = '$id'")" = "${NAME[$i]}" ] && holder=$i
done
[ -n "$holder" ] || fail "the tunnel is not recorded against a replica: $(pg_query 'SELECT * FROM tunnels')"
other=$((3 - holder))
# Both replicas say the same, whichever is asked.
for i in 1 2; do
	[ "$(holder_name "$i")" = "${NAME[$holder]}" ] ||
		fail "replica $i says replica=$(holder_name "$i"), want ${NAME[$holder]}"
done
on "$other" agent list | jq -e --arg id "$id" '.[] | select(.id == $id) | .connected == true' >/dev/null ||
	fail "the other replica does not list the agent as connected"
pass "the agent's tunnel is recorded against ${NAME[$holder]}; agent list -o json on either replica shows replica=${NAME[$holder]}"

# --- kill -9 the holder, the agent held still ---
kill -STOP "$agent"
on_cleanup "kill -CONT $agent 2>/dev/null"
kill -KILL "${RPID[$holder]}"
wait "${RPID[$holder]}" 2>/dev/null || true
killed_at=$SECONDS
gone() { on "$other" agent list | jq -e --arg id "$id" '.[] | select(.id == $id) | .replica == null and .connected == false' >/dev/null; }
wait_until 30 "the dead replica's lease ends" gone
pass "kill -9 of ${NAME[$holder]}: its lease ended and the agent shows as gone after $((SECONDS - killed_at)) s (lease 6 s)"

kill -CONT "$agent"
rehomed() { [ "$(holder_name "$other")" = "${NAME[$other]}" ]; }
wait_until 40 "the agent re-homed on ${NAME[$other]}" rehomed
on "$other" agent list | jq -e --arg id "$id" '.[] | select(.id == $id) | .state == "active" and .connected == true' >/dev/null ||
	fail "the re-homed agent is not active and connected"
pass "the agent reconnected through haproxy to ${NAME[$other]}, which holds it now"

# --- a clean stop gives the lease up at once ---
replica_stop "$other"
[ "$(pg_query "SELECT count(*) FROM replicas WHERE id = '${NAME[$other]}'")" = 0 ] &&
	[ "$(pg_query "SELECT count(*) FROM tunnels WHERE replica_id = '${NAME[$other]}'")" = 0 ] ||
	fail "SIGTERM left the lease or the tunnel records of ${NAME[$other]}"
pass "SIGTERM gives the replica's lease and tunnel records up"
client_stop "$agent"
