#!/usr/bin/env bash
# --landing route (docs/0040 step 8): with two loops and two
# one-agent clusters, one agent's tunnel on each loop, kubectl requests
# through /k8s/clusters/ID and `tetherctl connect` raw dials (with and
# without --node) land on the loop of their cluster's agent, so none
# crosses the loop link (tether_loop_link_streams_total unchanged) while
# their TLS handshakes ran on both loops (tether_loop_tls_handshakes_total
# moved on each); every answer and echo intact.  A burst of 16 connections
# at once to one cluster does not crowd its agent's loop: past a slack the
# rest stay where their handshake ran (and cross).  With --landing any the
# same requests stay where their handshake ran and some cross.
source "$(dirname "$0")/lib.sh"
chmod 755 "$T"

KUBECTL=$(command -v kubectl) || fail "kubectl not found (run config/setup.sh)"
py=/usr/bin/python3
web_port=$(free_port)

# An nginx standing in for each node's kube-apiserver (test_k8s.sh's).
mkdir -p "$T/www"
printf '{"major":"1","minor":"28","gitVersion":"v1.28.0-tether-test"}\n' >"$T/www/version"
nginx_start nginx "
    access_log off;
    server { listen 127.0.0.1:$web_port; root $T/www; }"
$py "$TETHER_SRC/tests/integration/tcpserver.py" echo "$T/echo.port" &
PIDS+=($!)
wait_until 10 "echo server" test -s "$T/echo.port"
echo_port=$(cat "$T/echo.port")
wait_until 10 "nginx listening" bash -c "(exec 3<>/dev/tcp/127.0.0.1/$web_port)"

metrics() {
	curl -sf --cacert "$GW_DIR/ca.crt" -H "Authorization: Bearer $(cat "$GW_DIR/admin.token")" \
		"$GW_URL/metrics"
}
metric() { # metric FILE NAME: NAME's value in a scrape kept in FILE (0 if absent)
	awk -v l="$2" '$1 == l { v = $2 } END { print v + 0 }' "$1"
}
crossed() { # crossed FILE: streams over the loop links, every pair
	awk '$1 ~ /^tether_loop_link_streams_total[{]/ { n += $2 } END { print n + 0 }' "$1"
}
handshakes() { metric "$1" "tether_loop_tls_handshakes_total{loop=\"$2\"}"; }
tunnels() { metric "$1" "tether_loop_tunnels{loop=\"$2\"}"; }
one_each() {
	metrics >"$T/each.metrics" && [ "$(tunnels "$T/each.metrics" 0)" = 1 ] &&
		[ "$(tunnels "$T/each.metrics" 1)" = 1 ]
}
# two_agents FLAGS...: a gateway started with FLAGS (clusters a and b, one
# agent each, made on the first call), na's tunnel on one loop and nb's on
# the other.
declare -A cid
two_agents() {
	local c
	gateway_start --workers 2 --log-level debug "$@"
	for c in a b; do
		[ -n "${cid[$c]:-}" ] && continue
		cid[$c]=$(cluster_create "route-$c")
		ctl token create --cluster "${cid[$c]}" >"$T/join-$c.json"
		join_node "n$c" "$T/join-$c.json" --allow "127.0.0.1:$echo_port" \
			--service "kube-api=http://127.0.0.1:$web_port" >/dev/null
	done
	client_start na
	na_pid=$CLIENT_PID
	wait_until 30 "na active" agent_is na active
	start_beside nb
	nb_pid=$CLIENT_PID
}
# requests TAG: per cluster, 4 kubectl requests and 4 connects (2 naming
# the node), one after another (each its own connection, so their
# handshakes take turns on the loops); every answer checked.
head -c $((1 << 20)) /dev/urandom >"$T/blob"
requests() {
	local i c node
	for i in 1 2 3 4; do
		for c in a b; do
			# /k8s/clusters/ID/version (get --raw would ask the root path,
			# /version, whose cluster is the token's: it stays where its
			# handshake ran).
			"$KUBECTL" --kubeconfig "$T/kc-$c.yaml" version -o json >"$T/kv.json" 2>"$T/kv.err" ||
				fail "$1: kubectl version for cluster $c exited $?: $(cat "$T/kv.err")"
			jq -e '.serverVersion.gitVersion == "v1.28.0-tether-test"' "$T/kv.json" >/dev/null ||
				fail "$1: kubectl version for cluster $c: $(cat "$T/kv.json")"
			node=()
			[ $((i % 2)) = 0 ] && node=(--node "n$c")
			"$CTL" connect --cluster "${cid[$c]}" "${node[@]}" "127.0.0.1:$echo_port" \
				<"$T/blob" >"$T/echo.out" || fail "$1: connect to cluster $c exited $?"
			cmp -s "$T/echo.out" "$T/blob" || fail "$1: cluster $c's echo differs"
		done
	done
}

gateway_init
two_agents --landing route
for c in a b; do
	"$CTL" kubeconfig --cluster "${cid[$c]}" --user "user-$c" >"$T/kc-$c.yaml" ||
		fail "kubeconfig for cluster $c exited $?"
done
pass "na's tunnel on one loop, nb's on the other (--landing route)"

metrics >"$T/before.metrics"
requests route
metrics >"$T/after.metrics"
for l in 0 1; do
	moved=$(($(handshakes "$T/after.metrics" $l) - $(handshakes "$T/before.metrics" $l)))
	# The after scrape's own handshake may be one of them.
	[ "$moved" -ge 2 ] || fail "loop $l ran $moved handshakes of the 16 requests' connections"
	log "loop $l: $moved handshakes"
done
[ "$(crossed "$T/after.metrics")" = "$(crossed "$T/before.metrics")" ] ||
	fail "streams crossed the loop link with --landing route: $(grep '^tether_loop_link_streams_total' "$T/after.metrics")"
pass "16 kubectl requests and 16 connects (8 naming the node), handshakes on both loops: none crossed between the loops"

# A burst (docs/0040 step 8's guard): 16 connections at once to cluster
# a, each holding its connection open until all were answered.  Landing
# all of them on na's loop would crowd it while the other idles: once na's
# loop holds more than the other's connections plus max(2, a quarter),
# the rest stay where their handshake ran and cross.  Both loops serve
# some (without the guard all 16 land on na's loop: nothing crosses).
metrics >"$T/before.metrics"
$py - "$GW_PORT" "$GW_DIR/ca.crt" "$GW_DIR/admin.token" "/k8s/clusters/${cid[a]}/version" 16 \
	>"$T/burst.out" <<'PY' || fail "burst: $(cat "$T/burst.out")"
import http.client, ssl, sys, threading
port, ca, token_file, path, n = sys.argv[1:6]
n = int(n)
token = open(token_file).read().strip()
ctx = ssl.create_default_context(cafile=ca)
go, done = threading.Barrier(n), threading.Barrier(n)
bad = []
def one():
    go.wait()
    c = http.client.HTTPSConnection("127.0.0.1", int(port), context=ctx, timeout=60)
    try:
        c.request("GET", path, headers={"Authorization": "Bearer " + token})
        r = c.getresponse()
        body = r.read()
        if r.status != 200 or b"v1.28.0-tether-test" not in body:
            bad.append("%d %r" % (r.status, body[:200]))
    except Exception as e:
        bad.append(repr(e))
    done.wait()   # every connection stays open until all were answered
    c.close()
ts = [threading.Thread(target=one) for _ in range(n)]
for t in ts: t.start()
for t in ts: t.join()
if bad:
    sys.exit("; ".join(bad))
PY
metrics >"$T/after.metrics"
n=$(($(crossed "$T/after.metrics") - $(crossed "$T/before.metrics")))
[ "$n" -ge 3 ] && [ "$n" -le 13 ] ||
	fail "a burst of 16 connections to one cluster: $n crossed (want both loops serving 3 or more)"
pass "a burst of 16 connections to one cluster spreads over both loops: $n stayed on the handshake loop and crossed"

# The same with --landing any: each connection stays on its handshake
# loop, and those of a cluster whose agent is on the other loop cross.
client_stop "$na_pid"
client_stop "$nb_pid"
gateway_stop
two_agents --landing any
metrics >"$T/before.metrics"
requests any
metrics >"$T/after.metrics"
n=$(($(crossed "$T/after.metrics") - $(crossed "$T/before.metrics")))
[ "$n" -gt 0 ] || fail "no stream crossed between the loops with --landing any"
pass "with --landing any the same requests cross between the loops ($n streams)"
client_stop "$na_pid"
client_stop "$nb_pid"
gateway_stop
pass "the gateway stops cleanly"
