#!/usr/bin/env bash
# Any replica reaches any agent (docs/0023): three tether-gateway replicas,
# each with --peer-listen, on one private PostgreSQL behind Debian's haproxy
# (TCP, TLS passed through, /readyz checks), three agents joined through it.
# - every replica, asked directly, reaches every agent: ssh with
#   `tetherctl connect` as its ProxyCommand to a real sshd; the asking
#   replica's audit line names the replica holding the tunnel (replica=),
#   the holder's names the one that asked (via=);
# - behind haproxy in each of roundrobin, leastconn and source balancing
#   (three frontends of one haproxy, the agents on the round-robin one):
#   ssh to every node, `tetherctl forward`, and kubectl with the gateway's
#   kubeconfig (a request, a watch, an upgrade answered 101 with bytes both
#   ways), whichever replica takes the request;
# - a rolling restart (SIGTERM each replica in turn, start it again, wait
#   until it is ready and holds a lease) while a loop of ssh through
#   `tetherctl connect` and kubectl runs: no request fails;
# - kill -9 of the replica holding the most agents: they are active and
#   connected on the others within 10 s, every node answers again, and the
#   store lost nothing (agents, states, tokens, users).
source "$(dirname "$0")/lib.sh"
chmod 755 "$T"

KUBECTL=$(command -v kubectl) || fail "kubectl not found (run config/setup.sh)"
py=/usr/bin/python3
NODES=(n1 n2 n3)

sshd_start
$py "$TETHER_SRC/tests/integration/k8s_upstream.py" "$T/py.port" &
PIDS+=($!)
wait_until 10 "python upstream" test -s "$T/py.port"
py_port=$(cat "$T/py.port")

pg_start
declare -A LB=([roundrobin]=$(free_port) [leastconn]=$(free_port) [source]=$(free_port))
LB_URL=https://127.0.0.1:${LB[roundrobin]}
gateway_init --store "$PG_URL" --url "$LB_URL"
REPLICA_PEER_LISTEN=1
REPLICA_DRAIN_MS=20000
# haproxy checks with lib.sh's default (haproxy_pool: a live replica every
# 2 s, one that is out every 300 ms, out at the first failure).  A draining
# replica is out by its first check after SIGTERM (2 s and the check's
# time): its new connections are served for --drain-grace 3 s, and after
# its listeners close haproxy's connects are refused and redispatched.
REPLICA_FLAGS=(--drain-grace 3000)
for r in 1 2 3; do replica_start "$r"; done
for r in 1 2 3; do wait_until 30 "replica r$r ready" replica_ready "$r"; done
haproxy_start haproxy "$(for mode in roundrobin leastconn source; do
	haproxy_pool "${LB[$mode]}" "$mode" 1 2 3; done)"
export TETHER_SERVER=$LB_URL
wait_until 20 "haproxy in front of the replicas" \
	curl -sf --cacert "$GW_DIR/ca.crt" "$LB_URL/readyz"

cid=$(cluster_create ha)
ctl token create --cluster "$cid" --uses 3 >"$T/join.json"
declare -A APID=()
for n in "${NODES[@]}"; do
	join_node "$n" "$T/join.json" --allow "127.0.0.1:$SSH_PORT" \
		--service "kube-api=http://127.0.0.1:$py_port" >/dev/null
	client_start "$n"
	APID[$n]=$CLIENT_PID
done
for n in "${NODES[@]}"; do wait_until 30 "$n active" agent_is "$n" active; done
wait_until 10 "sshd listening" bash -c "(exec 3<>/dev/tcp/127.0.0.1/$SSH_PORT)"

holder() { # holder NODE: the replica the store records the node's tunnel against
	pg_query "SELECT replica_id FROM tunnels WHERE agent_id = '$(agent_id_of "$1")'"
}
# ssh_through URL NODE: ssh to the node's sshd with `tetherctl connect`
# against URL as its ProxyCommand; the remote command's output.
ssh_through() {
	ssh_via -o ProxyCommand="env TETHER_SERVER=$1 $CTL connect --cluster $cid --node $2 127.0.0.1:$SSH_PORT" \
		"root@$2" "echo ssh-ok $2" 2>>"$T/ssh.err"
}
ssh_ok() { [ "$(ssh_through "$1" "$2")" = "ssh-ok $2" ]; }
# banner URL NODE: a bare `tetherctl connect` to the node's sshd reads its banner
banner() {
	[ "$(TETHER_SERVER=$1 timeout 10 "$CTL" connect --cluster "$cid" --node "$2" \
		"127.0.0.1:$SSH_PORT" </dev/null 2>/dev/null | head -c 8)" = "SSH-2.0-" ]
}
crossed() { cat "$T"/replica?.log | grep -c 'event=stream .*via=r' || true; }

# --- every replica reaches every agent, asked directly ---
for r in 1 2 3; do
	url=https://127.0.0.1:${RPORT[$r]}
	for n in "${NODES[@]}"; do
		# The replica learns where remote agents are within a renewal.
		wait_until 10 "r$r reaches $n" banner "$url" "$n"
		ssh_ok "$url" "$n" || fail "ssh through r$r to $n: $(tail -3 "$T/ssh.err")"
		h=$(holder "$n")
		[ "$h" = "r$r" ] && continue
		wait_until 10 "r$r's audit line naming $h, which holds $n" lines_match "$T/replica$r.log" \
			"event=stream .*node=$n target=127.0.0.1:$SSH_PORT replica=$h"
		wait_until 10 "$h's audit line naming r$r, which asked for $n" lines_match "$T/replica${h#r}.log" \
			"event=stream .*node=$n target=127.0.0.1:$SSH_PORT replica=$h via=r$r"
	done
done
declare -A HOLDS=()
for n in "${NODES[@]}"; do HOLDS[$n]=$(holder "$n"); done
pass "each of r1, r2, r3 reaches n1, n2, n3 (held by ${HOLDS[n1]}, ${HOLDS[n2]}, ${HOLDS[n3]}): ssh works, audit lines name replica= and via="

# --- behind haproxy, in each balancing mode ---
"$CTL" kubeconfig --cluster "$cid" --user alice >"$T/kc.yaml" || fail "kubeconfig exited $?"
token=$("$KUBECTL" config view --kubeconfig "$T/kc.yaml" --raw -o json | jq -er '.users[0].user.token')
for mode in roundrobin leastconn source; do
	url=https://127.0.0.1:${LB[$mode]}
	before=$(crossed)
	for n in "${NODES[@]}"; do
		for try in 1 2; do
			ssh_ok "$url" "$n" || fail "$mode: ssh to $n: $(tail -3 "$T/ssh.err")"
		done
	done
	fwd=$(free_port)
	TETHER_SERVER=$url "$CTL" forward --cluster "$cid" --node n2 \
		"127.0.0.1:$fwd:127.0.0.1:$SSH_PORT" 2>>"$T/forward.log" &
	fwd_pid=$!
	PIDS+=("$fwd_pid")
	wait_until 20 "$mode: forward listening" bash -c "(exec 3<>/dev/tcp/127.0.0.1/$fwd)"
	for try in 1 2 3; do
		[ "$(ssh_via -p "$fwd" root@127.0.0.1 'echo fwd-ok' 2>>"$T/ssh.err")" = fwd-ok ] ||
			fail "$mode: ssh through tetherctl forward: $(tail -3 "$T/ssh.err")"
	done
	kill "$fwd_pid"
	wait "$fwd_pid" 2>/dev/null || true
	kc=(--kubeconfig "$T/kc.yaml" --server "$url/k8s/clusters/$cid")
	for try in 1 2 3; do
		"$KUBECTL" "${kc[@]}" get --raw /version >"$T/kv.json" ||
			fail "$mode: kubectl get --raw /version exited $?"
		jq -e '.method == "GET" and .target == "/version"' "$T/kv.json" >/dev/null ||
			fail "$mode: kubectl /version: $(cat "$T/kv.json")"
	done
	"$KUBECTL" "${kc[@]}" get --raw '/api/v1/namespaces/default/pods?watch=1' >"$T/watch.out" ||
		fail "$mode: kubectl watch exited $?"
	[ "$(jq -r .object.metadata.name "$T/watch.out" | tr '\n' ' ')" = "watch-0 watch-1 watch-2 " ] ||
		fail "$mode: the watch said: $(cat "$T/watch.out")"
	out=$($py "$TETHER_SRC/tests/integration/k8s_client.py" upgrade \
		"$url/k8s/clusters/$cid/api/v1/namespaces/default/pods/p/exec" "$GW_DIR/ca.crt" "$token") ||
		fail "$mode: upgrade client: $out"
	[ "$out" = "status=101 echo_ok=True" ] || fail "$mode: upgrade: $out"
	pass "$mode: ssh to n1..n3 (twice each), ssh through forward, kubectl (3 requests, a watch, an upgrade 101) all work; $(($(crossed) - before)) streams crossed a peer link"
done

# --- a rolling restart under load ---
held=$(pg_query "SELECT count(*) FROM tunnels")
store_snapshot() {
	pg_query "SELECT string_agg(id || ':' || state, ',' ORDER BY id) FROM agents"
	pg_query "SELECT string_agg(id || ':' || uses_left || ':' || revoked, ',' ORDER BY id) FROM tokens"
	pg_query "SELECT count(*) FROM clusters"
}
utc_now() { date -u +%H:%M:%S.%3N; }  # the logs' time= clock
# window_logs FROM TO: the lines of every replica's and agent's log whose
# time= (UTC, HH:MM:SS.mmm) falls in [FROM, TO], each prefixed with its
# file: what a failed request's moment looked like on every side.
window_logs() {
	local f
	for f in "$T"/replica?.log "$T"/client-*.log; do
		awk -v from="$1" -v to="$2" -v name="${f##*/}" \
			'match($0, /time=[0-9-]+T[0-9:.]+/) {
				t = substr($0, RSTART + 16, 12)
				if (t >= from && t <= to) print name ": " $0 }' "$f"
	done
	# haproxy's: a connection's line when it ended, by when it was
	# accepted ([28/Nov/2026:05:26:47.972], UTC: haproxy_start)
	awk -v from="$1" -v to="$2" \
		'match($0, /\[[0-9]+\/[A-Za-z]+\/[0-9]+:[0-9:.]+\]/) {
			t = substr($0, RSTART + RLENGTH - 13, 12)
			if (t >= from && t <= to) print "haproxy.log: " $0 }
		!/\[[0-9]+\/[A-Za-z]+\// { print "haproxy.log: " $0 }' "$T/haproxy.log"
}
# shift_time HH:MM:SS.mmm SECONDS: the same clock time moved by SECONDS
shift_time() { date -u -d "today $1 UTC $2 seconds" +%H:%M:%S.%3N; }
load_loop() { # until $T/stop: ssh via connect and kubectl, one line per request
	local i=0 n t0
	while [ ! -e "$T/stop" ]; do
		n=${NODES[$((i % 3))]}
		t0=$(utc_now)
		if ssh_ok "$LB_URL" "$n"; then echo "ok ssh $n"; else echo "FAIL ssh $n from $t0 $(utc_now)"; fi
		t0=$(utc_now)
		if "$KUBECTL" --kubeconfig "$T/kc.yaml" get --raw /version >/dev/null 2>>"$T/kubectl.err"; then
			echo "ok kubectl"
		else
			echo "FAIL kubectl from $t0 $(utc_now)"
		fi
		i=$((i + 1))
	done >>"$T/load.out"
}
all_held() { # every agent active, connected, held by a live replica
	for n in "${NODES[@]}"; do
		agent_is "$n" active || return 1
		[ -n "$(holder "$n")" ] || return 1
	done
}
load_ran() { [ "$(grep -c . "$T/load.out" 2>/dev/null || echo 0)" -ge "$1" ]; }
touch "$T/load.out"
load_loop &
load_pid=$!
PIDS+=("$load_pid")
wait_until 30 "the load loop runs" load_ran 4
for r in 1 2 3; do
	replica_stop "$r"
	mark=$(grep -c . "$T/load.out")
	replica_start "$r"
	wait_until 30 "r$r ready again" replica_ready "$r"
	wait_until 30 "every agent held again" all_held
	wait_until 60 "requests after r$r restarted" load_ran $((mark + 4))
done
touch "$T/stop"
wait "$load_pid" || true
total=$(grep -c . "$T/load.out")
failed=$(grep -c FAIL "$T/load.out" || true)
if [ "$failed" != 0 ]; then
	# a failed request's line: FAIL WHAT [NODE] from START END
	first=$(grep -m1 FAIL "$T/load.out" | awk '{print $(NF - 1)}')
	last=$(grep FAIL "$T/load.out" | tail -n 1 | awk '{print $NF}')
	log "the logs from 3 s before the first failed request began to 1 s after the last ended:"
	window_logs "$(shift_time "$first" -3)" "$(shift_time "$last" 1)" >&2
	fail "$failed of $total requests failed during the rolling restart: $(grep FAIL "$T/load.out" | head -n 5) $(tail -n 5 "$T/ssh.err" "$T/kubectl.err")"
fi
pass "rolling restart of r1, r2, r3 (SIGTERM, drain, start): $total requests (ssh through connect, kubectl), none failed"

# --- kill -9 of the replica holding the most agents ---
victim=$(pg_query "SELECT replica_id FROM tunnels GROUP BY replica_id ORDER BY count(*) DESC, replica_id LIMIT 1")
moved=$(pg_query "SELECT count(*) FROM tunnels WHERE replica_id = '$victim'")
before=$(store_snapshot)
v=${victim#r}
kill -KILL "${RPID[$v]}"
wait "${RPID[$v]}" 2>/dev/null || true
killed_at=$SECONDS
rehomed() {
	for n in "${NODES[@]}"; do
		agent_is "$n" active || return 1
		h=$(holder "$n")
		[ -n "$h" ] && [ "$h" != "$victim" ] || return 1
	done
}
wait_until 10 "the agents of $victim active on the others" rehomed
took=$((SECONDS - killed_at))
for n in "${NODES[@]}"; do
	wait_until 10 "$n reachable after the kill" banner "$LB_URL" "$n"
	for try in 1 2; do ssh_ok "$LB_URL" "$n" || fail "ssh to $n after the kill: $(tail -3 "$T/ssh.err")"; done
done
"$KUBECTL" --kubeconfig "$T/kc.yaml" get --raw /version >/dev/null || fail "kubectl after the kill"
after=$(store_snapshot)
[ "$before" = "$after" ] || fail "the store changed across the kill: before $before, after $after"
pass "kill -9 of $victim (held $moved of $held agents): all active on the others within ${took} s; ssh and kubectl work; agents, tokens and clusters unchanged"

for n in "${NODES[@]}"; do client_stop "${APID[$n]}"; done
for r in 1 2 3; do [ "$r" = "$v" ] || replica_stop "$r"; done
pass "the replicas left stop cleanly"
