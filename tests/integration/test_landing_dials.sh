#!/usr/bin/env bash
# A dial's connection in the landing's counts (docs/0040 step 8, "Built:
# the counts follow the dial" and "Built: the dial lands on its agent's
# loop"): with --workers 2 --landing any and one agent whose tunnel is on
# loop T (O the other loop), a `tetherctl connect` held open stays counted
# on its loop (tether_loop_connections) and its tunnel side on T
# (tether_loop_tunnel_side_connections) until it ends, then both are back
# to 0; a lone dial whose handshake ran on O lands on T (nothing crosses
# the loop link); and a row of 12 dials held open, their handshakes on O
# and T in turn, does not all land on T: once T is clearly the busier
# loop the dials from O stay there and cross (3 to 6 of them), the rest
# on T, every tunnel side on T; all closed, the gauges are back to 0.
# With the counts given back at the 101 (as before) all 12 land on T.
source "$(dirname "$0")/lib.sh"

py=/usr/bin/python3
MP=$(free_port)
N=12
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
conns() { metric "$T/m.metrics" "tether_loop_connections{loop=\"$1\"}"; }
sides() { metric "$T/m.metrics" "tether_loop_tunnel_side_connections{loop=\"$1\"}"; }
crossed() { metric "$T/m.metrics" "tether_loop_link_streams_total{from=\"$ol\",to=\"$tl\"}"; }
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
	held_echo_dial "$1" "$cid" "$echo_port"
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

# 1. One dial, held open: counted on its loop, its tunnel side on T, past
# its 101 and until it ends.
next_on "$ol" 0
x0=$(crossed)
dial one
scrape
[ "$(sum "$T/m.metrics" tether_loop_connections)" = 1 ] ||
	fail "a dial held open is not counted once: $(grep '^tether_loop_connections' "$T/m.metrics")"
[ "$(sides "$tl")" = 1 ] && [ "$(sides "$ol")" = 0 ] ||
	fail "a dial's tunnel side is not counted on loop $tl: $(grep '^tether_loop_tunnel_side' "$T/m.metrics")"
pass "a dial held open is counted on its loop (tether_loop_connections) and its tunnel side on loop $tl"
# 2. A lone dial lands on its agent's loop: its handshake ran on O, and
# nothing crossed the loop link.
[ "$(conns "$tl")" = 1 ] && [ "$(crossed)" = "$x0" ] ||
	fail "a lone dial from loop $ol did not land on loop $tl: $(grep -E '^tether_loop_(connections|link_streams)' "$T/m.metrics")"
pass "a lone dial whose handshake ran on loop $ol landed on loop $tl: nothing crossed"
kill "$(cat "$T/one.pid")"
gone() { held 0 && [ "$(sum "$T/m.metrics" tether_loop_tunnel_side_connections)" = 0 ]; }
wait_until 20 "the dial's counts given back" gone
pass "the dial ended: tether_loop_connections and tether_loop_tunnel_side_connections back to 0"

# 3. A row of N dials held open, their handshakes on O and T in turn: T
# takes those from T (the agent is there) and those from O until it is
# clearly the busier loop (its load above O's by more than max(2
# connections, a quarter)); then those from O stay on O and cross.
scrape
x0=$(crossed)
for i in $(seq 1 $N); do
	if [ $((i % 2)) = 1 ]; then next_on "$ol" $((i - 1)); else next_on "$tl" $((i - 1)); fi
	dial "row$i"
	wait_until 10 "dial $i counted" held "$i"
done
scrape
on_o=$(conns "$ol") on_t=$(conns "$tl") x=$(($(crossed) - x0))
log "$N dials held: loop $tl (the agent's) $on_t, loop $ol $on_o; $x crossed $ol>$tl; tunnel sides $(sides "$tl") on loop $tl"
[ "$((on_o + on_t))" = "$N" ] || fail "$N dials held, counted $((on_o + on_t))"
[ "$on_o" -ge 3 ] && [ "$on_o" -le 6 ] ||
	fail "$N dials to one agent: $on_o stayed on loop $ol (want 3 to 6: the counts bound loop $tl's share)"
[ "$x" = "$on_o" ] || fail "$on_o dials on loop $ol but $x streams crossed $ol>$tl"
[ "$(sides "$tl")" = "$N" ] && [ "$(sides "$ol")" = 0 ] ||
	fail "tunnel sides: loop $tl $(sides "$tl"), loop $ol $(sides "$ol") (want $N and 0)"
pass "$N dials to one agent: $on_t on its loop, $on_o kept on loop $ol once it was the busier (they cross), every tunnel side on loop $tl"
for i in $(seq 1 $N); do kill "$(cat "$T/row$i.pid")"; done
wait_until 30 "every dial's counts given back" gone
pass "the $N dials ended: both gauges back to 0"

gateway_stop
pass "the gateway stops cleanly"
