#!/usr/bin/env bash
# A dial's connection in the landing's counts (docs/0040 step 8, "Built:
# the counts follow the dial"): with --workers 2 --landing any and one
# agent, a `tetherctl connect` held open stays counted on its loop
# (tether_loop_connections) past its 101 and until it ends, then the
# count is back to 0.  With the count given back at the 101 (as before)
# the dial held open is counted nowhere.
source "$(dirname "$0")/lib.sh"

py=/usr/bin/python3
MP=$(free_port)
$py "$TETHER_SRC/tests/integration/tcpserver.py" echo "$T/echo.port" &
PIDS+=($!)
wait_until 10 "echo server" test -s "$T/echo.port"
echo_port=$(cat "$T/echo.port")

# The scrapes go to the plain metrics port: no HTTP connection of any
# loop, so they do not move the counts they read.
metrics() { curl -sf "http://127.0.0.1:$MP/metrics"; }
metric() { # metric FILE NAME: NAME's value in a scrape kept in FILE (0 if absent)
	awk -v l="$2" '$1 == l { v = $2 } END { print v + 0 }' "$1"
}
sum() { # sum FILE FAMILY: FAMILY's values over every loop
	awk -v f="$2" 'index($1, f "{") == 1 { n += $2 } END { print n + 0 }' "$1"
}
scrape() { metrics >"$T/m.metrics"; }
# held N: the gateway counts N connections, all told.
held() { scrape && [ "$(sum "$T/m.metrics" tether_loop_connections)" = "$1" ]; }
# next_on H: the next TLS handshake runs on loop H (on_loop.py keeps a
# connection on the other loop just before; handshakes go round the loops
# while none is under way); then that connection's count is gone.
next_on() {
	$py "$TETHER_SRC/tests/integration/on_loop.py" "$GW_PORT" "$GW_DIR/ca.crt" \
		"$GW_DIR/admin.token" "$T/gateway.log" $((1 - $1)) GET /healthz >"$T/on.out" ||
		fail "no connection kept by loop $((1 - $1)): $(cat "$T/on.out")"
	wait_until 10 "on_loop.py's connection gone" held "$2"
}
# dial NAME: a tetherctl connect to the echo server, held open once a line
# came back through it (its stream is up); its pid in $T/NAME.pid.
dial() {
	rm -f "$T/$1.ready"
	$py - "$CTL" "$cid" "$echo_port" "$T/$1.pid" "$T/$1.ready" <<'PY' &
import subprocess, sys, time
p = subprocess.Popen([sys.argv[1], "connect", "--cluster", sys.argv[2],
                      "127.0.0.1:" + sys.argv[3]], stdin=subprocess.PIPE, stdout=subprocess.PIPE)
open(sys.argv[4], "w").write("%d\n" % p.pid)
p.stdin.write(b"through\n")
p.stdin.flush()
if p.stdout.readline() != b"through\n":
    sys.exit("no echo")
open(sys.argv[5], "w").write("ready\n")
time.sleep(3600)   # holds the pipes: the dial stays open
PY
	PIDS+=($!)
	wait_until 20 "dial $1's echo" test -s "$T/$1.ready"
	PIDS+=("$(cat "$T/$1.pid")")
}

gateway_init
gateway_start --workers 2 --landing any --log-level debug --metrics-listen "127.0.0.1:$MP"
cid=$(cluster_create dials)
ctl token create --cluster "$cid" >"$T/join.json"
join_node n1 "$T/join.json" --allow "127.0.0.1:$echo_port" >/dev/null
client_start n1
wait_until 30 "n1 active" agent_is n1 active
scrape
if [ "$(metric "$T/m.metrics" 'tether_loop_tunnels{loop="0"}')" = 1 ]; then
	tl=0 ol=1
else
	tl=1 ol=0
fi
[ "$(metric "$T/m.metrics" "tether_loop_tunnels{loop=\"$tl\"}")" = 1 ] ||
	fail "n1's tunnel on no loop: $(grep tether_loop_tunnels "$T/m.metrics")"
log "n1's tunnel on loop $tl"
wait_until 10 "no connection counted" held 0

# 1. One dial, held open: counted on its loop past its 101, until it ends.
next_on "$ol" 0
dial one
scrape
[ "$(sum "$T/m.metrics" tether_loop_connections)" = 1 ] ||
	fail "a dial held open is not counted once: $(grep '^tether_loop_connections' "$T/m.metrics")"
pass "a dial held open is counted on its loop (tether_loop_connections)"
kill "$(cat "$T/one.pid")"
gone() { held 0 && [ "$(sum "$T/m.metrics" tether_loop_tunnel_side_connections)" = 0 ]; }
wait_until 20 "the dial's count given back" gone
pass "the dial ended: tether_loop_connections back to 0"

gateway_stop
pass "the gateway stops cleanly"
