# store_outage.sh: the scenario of test_store_down_agents.sh and
# test_store_frozen_agents.sh (sourced after lib.sh; not a test itself).
#
# store_outage DOWN UP TRIES: two replicas on a private PostgreSQL and three
# nodes: n1 and n2 active, n3 joined but never run.  DOWN takes the store
# away; meanwhile n1 is restarted, n3 runs for the first time (import token)
# and n2 keeps its tunnel.  Each of n1 and n3 must be refused TRIES times
# and keep trying: a store that cannot answer is `unavailable` (or the
# handshake times out), never a final refusal, so no agent exits.  UP
# brings the store back: every agent is active again, each one's delay
# logged (the goal is 15 s; the deadline asserted is a generous 90 s).

# tries NAME FROM: the tunnel attempts refused since line FROM of its log.
tries() { tail -n +"$2" "$T/client-$1.log" | grep -c 'msg=reconnecting' || true; }
# tried_or_gone NAME PID FROM N: N refusals seen, or the agent exited.
tried_or_gone() { ! kill -0 "$2" 2>/dev/null || [ "$(tries "$1" "$3")" -ge "$4" ]; }
log_lines() { [ -f "$T/client-$1.log" ] && wc -l <"$T/client-$1.log" || echo 0; }

store_outage() {
	local down=$1 up=$2 want=$3 n pid from back
	declare -A agent_pid agent_from

	two_replicas_on_pg
	export TETHER_SERVER=https://127.0.0.1:${RPORT[2]}
	cid=$(on 1 cluster create outage | jq -er .id)
	for n in n1 n2 n3; do
		on 1 token create --cluster "$cid" >"$T/$n.json"
		join_node "$n" "$T/$n.json" >/dev/null
	done
	for n in n1 n2; do
		client_start "$n"
		agent_pid[$n]=$CLIENT_PID
	done
	for n in n1 n2; do wait_until 30 "$n active" agent_is "$n" active; done
	pass "n1 and n2 active; n3 joined, not yet run"

	$down
	log "store taken away ($down)"
	client_stop "${agent_pid[n1]}"
	for n in n1 n3; do
		agent_from[$n]=$(($(log_lines "$n") + 1))
		client_start "$n"
		agent_pid[$n]=$CLIENT_PID
	done
	for n in n1 n3; do
		wait_until 90 "$n refused $want times or gone" \
			tried_or_gone "$n" "${agent_pid[$n]}" "${agent_from[$n]}" "$want"
	done
	for n in n1 n2 n3; do
		kill -0 "${agent_pid[$n]}" 2>/dev/null ||
			fail "$n exited while the store was away: $(grep 'gateway refused' "$T/client-$n.log" | tail -1)"
	done
	for n in n1 n3; do
		log "$n while the store is away: $(tries "$n" "${agent_from[$n]}") attempts refused, last: $(grep -E 'gateway (closed the tunnel|refused)' "$T/client-$n.log" | tail -1 | sed 's/.*code=/code=/')"
	done
	pass "while the store is away, the restarted agent and the new node keep retrying; none exits"

	$up
	back=$SECONDS
	log "store back ($up)"
	for n in n1 n2 n3; do
		wait_until 90 "$n active after the store's return" agent_is "$n" active
		log "$n active $((SECONDS - back)) s after the store's return (goal: 15 s)"
	done
	for n in n1 n2 n3; do
		kill -0 "${agent_pid[$n]}" 2>/dev/null || fail "$n exited"
		client_stop "${agent_pid[$n]}"
	done
	for n in 1 2; do replica_stop "$n"; done
	pass "the store is back: every agent is active; none exited; all stop cleanly"
}
