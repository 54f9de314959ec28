#!/usr/bin/env bash
# --landing any weighs the tunnel side (docs/0040 step 8, "the tunnel side
# weighed"): with --workers 2 and a one-agent cluster, the agent's tunnel
# on loop T does the tunnel side of every request, so a /k8s connection
# lands where the loops stay most even, each connection weighing 2 parts
# (its client side) on the loop it lands on and 1 part (its tunnel side)
# on T, a tie going where nothing crosses (T).  Eight keep-alive connections (openssl s_client, one after
# another, each answered before the next opens; one whose request line
# came too late for the landing is opened again) land 2 on T and 6 on the
# other loop (tether_loop_connections{loop}); the tunnel sides stand 8 on T
# (tether_loop_tunnel_side_connections{loop}); a second request on each
# connection is answered from both loops; once they close, both gauges
# are back to 0 (the weight given back).  Without the weighing the
# handshakes alternate and 4 land on each loop.
source "$(dirname "$0")/lib.sh"

py=/usr/bin/python3
web_port=$(free_port)
MP=$(free_port)
N=8

# An nginx standing in for the node's kube-apiserver (test_k8s.sh's).
mkdir -p "$T/www"
printf '{"major":"1","minor":"28","gitVersion":"v1.28.0-tether-test"}\n' >"$T/www/version"
nginx_start nginx "
    access_log off;
    server { listen 127.0.0.1:$web_port; root $T/www; }"
wait_until 10 "nginx listening" bash -c "(exec 3<>/dev/tcp/127.0.0.1/$web_port)"

# The scrapes go to the plain metrics port: they are no HTTP connection of
# any loop, so they do not move the counts they read.
metrics() { curl -sf "http://127.0.0.1:$MP/metrics"; }
metric() { # metric FILE NAME: NAME's value in a scrape kept in FILE (0 if absent)
	awk -v l="$2" '$1 == l { v = $2 } END { print v + 0 }' "$1"
}
sum() { # sum FILE FAMILY: FAMILY's values over every loop
	awk -v f="$2" 'index($1, f "{") == 1 { n += $2 } END { print n + 0 }' "$1"
}
scrape() { metrics >"$T/m.metrics"; }
conns() { metric "$T/m.metrics" "tether_loop_connections{loop=\"$1\"}"; }
sides() { metric "$T/m.metrics" "tether_loop_tunnel_side_connections{loop=\"$1\"}"; }
# held N: the gateway holds N HTTP connections and N tunnel sides, all told.
held() {
	scrape && [ "$(sum "$T/m.metrics" tether_loop_connections)" = "$1" ] &&
		[ "$(sum "$T/m.metrics" tether_loop_tunnel_side_connections)" = "$1" ]
}

gateway_init
gateway_start --workers 2 --landing any --log-level debug --metrics-listen "127.0.0.1:$MP"
cid=$(cluster_create weighed)
ctl token create --cluster "$cid" >"$T/join.json"
join_node n1 "$T/join.json" --service "kube-api=http://127.0.0.1:$web_port" >/dev/null
client_start n1
wait_until 30 "n1 active" agent_is n1 active
scrape
if [ "$(metric "$T/m.metrics" 'tether_loop_tunnels{loop="0"}')" = 1 ]; then
	tl=0 ol=1
else
	tl=1 ol=0
fi
[ "$(metric "$T/m.metrics" "tether_loop_tunnels{loop=\"$tl\"}")" = 1 ] ||
	fail "n1's tunnel on neither loop: $(grep '^tether_loop_tunnels' "$T/m.metrics")"
# The API calls above (agent list) end asynchronously: start from none.
wait_until 20 "no HTTP connection left" held 0
pass "n1's tunnel on loop $tl; no HTTP connection held"

token=$(cat "$GW_DIR/admin.token")
ask() { # ask FD: one /k8s request, kept alive, written to connection FD
	printf 'GET /k8s/clusters/%s/version HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer %s\r\n\r\n' \
		"$cid" "$token" >&"$1"
}
answers() { # answers I: the answers connection I got so far
	grep -c 'v1.28.0-tether-test' "$T/out.$1" || true
}
answered() { [ "$(answers "$1")" -ge "$2" ]; }

# open_conn I: connection I (openssl s_client, its input the FIFO
# $T/in.I held open on fds[I]), its first request sent.
declare -a fds
open_conn() {
	local i=$1 fd
	rm -f "$T/in.$i"
	mkfifo "$T/in.$i"
	openssl s_client -quiet -no_ign_eof -connect "127.0.0.1:$GW_PORT" \
		-CAfile "$GW_DIR/ca.crt" <"$T/in.$i" >"$T/out.$i" 2>"$T/err.$i" &
	PIDS+=($!)
	exec {fd}>"$T/in.$i"
	fds[i]=$fd
	ask "$fd"
}

# N connections, one after another: each landed and answered before the
# next opens, so each landing sees the ones before it.  Only a request
# line later than the landing's wait (250 ms: a loaded machine) lands on
# loop 0 unweighed; the gateway says so (late), and only then is that
# connection closed and opened again (at most 4 tries).
for i in $(seq 1 $N); do
	for try in 1 2 3 4; do
		seen=$(late)
		open_conn "$i"
		wait_until 30 "connection $i answered" answered "$i" 1
		[ "$(late)" -gt "$seen" ] || break
		[ "$try" -lt 4 ] || fail "connection $i: its request line came late 4 times"
		log "connection $i: its request line came late (try $try): again"
		eval "exec ${fds[i]}>&-"
		wait_until 20 "the late connection $i gone" held $((i - 1))
	done
	wait_until 20 "connection $i counted" held "$i"
	log "connection $i: loop $tl holds $(conns $tl), loop $ol $(conns $ol)"
done
scrape
# The rule (access.c): land where load + what lands there is least, load
# = 2 x connections + tunnel sides, a tie on T; one after another they go
# O T O O O T O O, T 2 and the other 6 (12 parts each).
[ "$(conns "$tl")" = 2 ] && [ "$(conns "$ol")" = 6 ] ||
	fail "$N connections: loop $tl (the tunnel's) holds $(conns "$tl"), loop $ol $(conns "$ol") (want 2 and 6)"
[ "$(sides "$tl")" = "$N" ] && [ "$(sides "$ol")" = 0 ] ||
	fail "tunnel sides: loop $tl $(sides "$tl"), loop $ol $(sides "$ol") (want $N and 0)"
pass "$N keep-alive /k8s connections one after another: 2 on the tunnel's loop, 6 on the other; $N tunnel sides on loop $tl"

# A second request on each, from both loops: all answered, those on the
# other loop through the loop link (a kept-alive connection keeps its
# stream: its bytes move, not the stream count).
crossed_before=$(sum "$T/m.metrics" tether_loop_link_bytes_total)
for i in $(seq 1 $N); do
	ask "${fds[i]}"
done
for i in $(seq 1 $N); do
	wait_until 30 "connection $i's second answer" answered "$i" 2
done
scrape
[ "$(sum "$T/m.metrics" tether_loop_link_bytes_total)" -gt "$crossed_before" ] ||
	fail "no byte crossed the loop link for the second requests"
pass "a second request on each of the $N connections answered (those on loop $ol cross to the tunnel)"

# Closed: every connection's weight is given back.
for i in $(seq 1 $N); do
	eval "exec ${fds[i]}>&-"
done
wait_until 30 "connections and tunnel sides back to 0" held 0
pass "the $N connections closed: tether_loop_connections and tether_loop_tunnel_side_connections back to 0"

client_stop "$CLIENT_PID"
gateway_stop
pass "the gateway stops cleanly"
