#!/usr/bin/env bash
# A hung replica is left quickly (docs/0026): two replicas on a private
# PostgreSQL behind haproxy (TCP, TLS passed through, /readyz checks), four
# agents joined through it, every process with its default keepalive.  The
# replica holding the most agents is SIGSTOPped: its kernel still holds
# the connections open, so nothing but the agents' own pings can tell.
# Each of its agents must be active again, held by the other replica,
# within a generous 30 s (the goal is 15 s, each agent's time is logged;
# with the keepalive before docs/0026, 20 s + 30 s, it took 50 s or more).
# Their redials go through haproxy, which must have taken the hung replica
# out by then (its kernel accepts the connection; the TLS handshake is
# never answered): the test waits for haproxy's line saying so, within
# 10 s (lib.sh's checks: every 2 s, the handshake bounded by 2 s, so about
# 4 s at most; the agents' keepalive takes 10 s), and logs when it came.
# Then the stopped replica is continued and every process stops cleanly.
source "$(dirname "$0")/lib.sh"

NODES=(n1 n2 n3 n4)
pg_start
LB_PORT=$(free_port)
LB_URL=https://127.0.0.1:$LB_PORT
gateway_init --store "$PG_URL" --url "$LB_URL"
for r in 1 2; do replica_start "$r"; done
for r in 1 2; do wait_until 30 "replica r$r ready" replica_ready "$r"; done
haproxy_start haproxy "$(haproxy_pool "$LB_PORT" roundrobin 1 2)"
export TETHER_SERVER=https://127.0.0.1:${RPORT[1]}
wait_until 20 "haproxy in front of the replicas" \
	curl -sf --cacert "$GW_DIR/ca.crt" "$LB_URL/readyz"

cid=$(cluster_create hung)
ctl token create --cluster "$cid" --uses ${#NODES[@]} >"$T/join.json"
declare -A APID=()
for n in "${NODES[@]}"; do
	join_node "$n" "$T/join.json" >/dev/null
	client_start "$n"       # the default --ping-interval and --ping-timeout
	APID[$n]=$CLIENT_PID
done
for n in "${NODES[@]}"; do wait_until 30 "$n active" agent_is "$n" active; done

holder() { # holder NODE: the replica the store records the node's tunnel against
	pg_query "SELECT replica_id FROM tunnels WHERE agent_id = '$(agent_id_of "$1")'"
}
rehomed() { agent_is "$1" active && [ "$(holder "$1")" = "$other" ]; }
for n in "${NODES[@]}"; do wait_until 10 "$n's tunnel recorded" test -n "$(holder "$n")"; done
victim=$(pg_query "SELECT replica_id FROM tunnels GROUP BY replica_id ORDER BY count(*) DESC, replica_id LIMIT 1")
v=${victim#r}
other=r$((3 - v))
export TETHER_SERVER=https://127.0.0.1:${RPORT[$((3 - v))]}
moving=()
for n in "${NODES[@]}"; do [ "$(holder "$n")" != "$victim" ] || moving+=("$n"); done
log "${#moving[@]} of ${#NODES[@]} agents on $victim: ${moving[*]}"

# --- the replica hangs ---
on_cleanup "kill -CONT ${RPID[$v]} 2>/dev/null"
downs=$(haproxy_downs haproxy "$v")
taken_out() { [ "$(haproxy_downs haproxy "$v")" -gt "$downs" ]; }
kill -STOP "${RPID[$v]}"
stopped_at=$SECONDS
wait_until 10 "haproxy takes the hung $victim out" taken_out
log "haproxy took $victim out $((SECONDS - stopped_at)) s after it stopped: $(grep "/r$v is DOWN" "$T/haproxy.log" | tail -n 1)"
for n in "${moving[@]}"; do
	wait_until 30 "$n active again, held by $other" rehomed "$n"
	log "$n active on $other $((SECONDS - stopped_at)) s after $victim stopped (goal: 15 s)"
done
for n in "${moving[@]}"; do
	assert_contains "$T/client-$n.log" 'msg="tunnel: no answer to a ping: dropping it and reconnecting"'
done
for n in "${NODES[@]}"; do agent_is "$n" active || fail "$n is not active"; done
pass "$victim SIGSTOPped: its agents (${moving[*]}) are active on $other within 30 s, with the default keepalive; the others stayed"

# --- it comes back, and everything stops cleanly ---
kill -CONT "${RPID[$v]}"
wait_until 30 "$victim ready again" replica_ready "$v"
for n in "${NODES[@]}"; do client_stop "${APID[$n]}"; done
for r in 1 2; do replica_stop "$r"; done
pass "$victim continued: every agent and replica stops cleanly"
