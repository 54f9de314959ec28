#!/usr/bin/env bash
# --workers (docs/0032, 0040): with two loops, a burst of TLS handshakes at once is
# shared by both (tether_loop_tls_handshakes_total counts each loop's), the
# tunnel's loop is shown (tether_loop_tunnels), the connections handed over from the handshake loop carry tunnels, operator
# streams and admin calls as before, a stalled reader holds only its own
# stream, and a clean stop joins every thread (exit 0, no leak).  With
# --landing any, tunnels land on the loop with the fewest (two agents, one
# per loop), an agent that redials while its old tunnel stands on another
# loop has that one closed there, and the stop tells the agents of both
# loops; a dial whose handshake ran on one loop lands on the loop of its
# agent's tunnel, both ways: no stream crosses the loop link, every echo
# intact.  Issue 23's case: a dial from the loop without the tunnel, while
# the tunnel's loop is the busier (two dials held there), stays where its
# handshake ran and its stream crosses the loop link; its reader stalls,
# the gateway holds at most a window per hop of it, and streams beside it
# finish.  With --workers 1 there is one loop, as before the flag.
source "$(dirname "$0")/lib.sh"

py=/usr/bin/python3
$py "$TETHER_SRC/tests/integration/tcpserver.py" echo "$T/echo.port" &
PIDS+=($!)
$py "$TETHER_SRC/tests/integration/tcpserver.py" source "$T/source.port" "$T/source.count" &
PIDS+=($!)
wait_until 10 "echo and source servers" test -s "$T/echo.port" -a -s "$T/source.port"
echo_port=$(cat "$T/echo.port")
source_port=$(cat "$T/source.port")

metrics() {
	curl -sf --cacert "$GW_DIR/ca.crt" -H "Authorization: Bearer $(cat "$GW_DIR/admin.token")" \
		"$GW_URL/metrics"
}
# loop_handshakes FILE N: loop N's tether_loop_tls_handshakes_total in a
# scrape kept in FILE (0 if absent).  A scrape's own handshake counts in it.
loop_handshakes() {
	awk -v l="tether_loop_tls_handshakes_total{loop=\"$2\"}" \
		'$1 == l { v = $2 } END { print v + 0 }' "$1"
}

gateway_init
# The deadlines are serve's defaults here (lib.sh raises them): the silent
# connections below are closed at 1 s.
gateway_start --workers 2 --landing zero --stream-window 262144 \
	--tls-hello-timeout 1000 --tls-handshake-timeout 3000
grep -q 'msg="tether-gateway listening".* workers=2' "$T/gateway.log" ||
	fail "the listening line does not say workers=2"
cid=$(cluster_create workers)
ctl token create --cluster "$cid" >"$T/join.json"
join_node n1 "$T/join.json" --allow "127.0.0.1:$echo_port" \
	--allow "127.0.0.1:$source_port" >/dev/null
client_start n1 --stream-window 262144
agent_pid=$CLIENT_PID
wait_until 30 "n1 active" agent_is n1 active
pass "an agent's tunnel through a gateway with two loops is active"

# Where the tunnel lives (docs/0040): every tunnel on loop 0 until tunnels
# land on every loop (step 7); the loops are linked from the start.
metrics >"$T/placed.metrics"
grep -q '^tether_loop_tunnels{loop="0"} 1$' "$T/placed.metrics" ||
	fail "tether_loop_tunnels: loop 0 does not carry the one tunnel: $(grep tether_loop_tunnels "$T/placed.metrics")"
grep -q '^tether_loop_tunnels{loop="1"} 0$' "$T/placed.metrics" ||
	fail "tether_loop_tunnels: loop 1 is not shown carrying none"
grep -q '^# TYPE tether_loop_link_streams_total counter$' "$T/placed.metrics" ||
	fail "no tether_loop_link_streams_total family"
grep -q '^# TYPE tether_loop_link_bytes_total counter$' "$T/placed.metrics" ||
	fail "no tether_loop_link_bytes_total family"
pass "tether_loop_tunnels shows the tunnel on loop 0; the loop link families are served"

# A burst: 48 TLS handshakes at once (threads of one client), each then
# asks /healthz on its connection.
metrics >"$T/before.metrics"
$py - "$GW_PORT" "$GW_DIR/ca.crt" 48 >"$T/burst.out" <<'PY' || fail "burst: $(cat "$T/burst.out")"
import socket, ssl, sys, threading
port, ca, n = int(sys.argv[1]), sys.argv[2], int(sys.argv[3])
ctx = ssl.create_default_context(cafile=ca)
ok = []
go = threading.Barrier(n)
def one():
    go.wait()
    with socket.create_connection(("127.0.0.1", port), timeout=60) as s:
        with ctx.wrap_socket(s, server_hostname="127.0.0.1") as t:
            t.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
            data = b""
            while True:
                b = t.recv(4096)
                if not b:
                    break
                data += b
            if data.startswith(b"HTTP/1.1 200"):
                ok.append(1)
ts = [threading.Thread(target=one) for _ in range(n)]
for t in ts: t.start()
for t in ts: t.join()
print(len(ok))
sys.exit(0 if len(ok) == n else 1)
PY
metrics >"$T/after.metrics"
d0=$(($(loop_handshakes "$T/after.metrics" 0) - $(loop_handshakes "$T/before.metrics" 0)))
d1=$(($(loop_handshakes "$T/after.metrics" 1) - $(loop_handshakes "$T/before.metrics" 1)))
log "handshakes during the burst (and one scrape): loop 0 $d0, loop 1 $d1"
# The second scrape's own handshake is one of them: each loop did more.
[ "$d0" -ge 2 ] || fail "loop 0 finished no TLS handshake of the burst"
[ "$d1" -ge 2 ] || fail "loop 1 finished no TLS handshake of the burst"
grep -q '^tether_loop_cpu_seconds_total{loop="1"} ' "$T/after.metrics" ||
	fail "no tether_loop_cpu_seconds_total for loop 1"
pass "48 handshakes at once all answered, shared by both loops (per-loop metric)"

# The slot deadlines hold on every loop (docs/0028): connections that never
# send a ClientHello are closed at --tls-hello-timeout (1 s),
# whichever loop holds them, and counted as shed.
shed0=$(awk '$1 == "tether_tls_shed_total" { print $2 + 0 }' "$T/after.metrics")
$py - "$GW_PORT" 6 >"$T/silent.out" <<'PY' || fail "silent connections: $(cat "$T/silent.out")"
import socket, sys, time
port, n = int(sys.argv[1]), int(sys.argv[2])
socks = [socket.create_connection(("127.0.0.1", port)) for _ in range(n)]
closed = 0
for s in socks:
    s.settimeout(30)
    try:
        closed += s.recv(1) == b""
    except TimeoutError:
        pass                 # still open after 30 s: not closed
    except OSError:
        closed += 1          # reset: closed too
print(closed)
sys.exit(0 if closed == n else 1)
PY
metrics >"$T/after.metrics"
shed1=$(awk '$1 == "tether_tls_shed_total" { print $2 + 0 }' "$T/after.metrics")
[ "$((shed1 - shed0))" -ge 6 ] || fail "6 silent connections closed but shed went from $shed0 to $shed1"
pass "6 connections without a ClientHello closed at --tls-hello-timeout on both loops, counted as shed"

# A stalled reader on one stream; operator streams opened after it (their
# connections handed over by either loop) still move, each intact.
fwd_port=$(free_port)
"$CTL" forward --cluster "$cid" "127.0.0.1:$fwd_port:127.0.0.1:$source_port" \
	2>>"$T/forward.log" &
PIDS+=($!)
port_open() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }
wait_until 20 "forward listening" port_open "$fwd_port"
$py - "$fwd_port" <<'PY' &
import socket, sys, time
s = socket.create_connection(("127.0.0.1", int(sys.argv[1])))
time.sleep(3600)   # connects to the source and never reads
PY
PIDS+=($!)
wait_until 20 "the source to start sending" test -s "$T/source.count"
# count_stable: the source sent nothing more for 2 s (four looks 0.5 s
# apart).  (The streams beside it must finish whether it moves on later or
# not; issue 23's case below waits for more: stalled.)
count_stable() {
	local a b i
	a=$(cat "$T/source.count")
	for i in 1 2 3 4; do
		sleep 0.5
		b=$(cat "$T/source.count")
		[ "$a" = "$b" ] || return 1
	done
}
wait_until 30 "the stalled stream to stop absorbing bytes" count_stable
head -c $((4 << 20)) /dev/urandom >"$T/blob"
want=$(sha256sum <"$T/blob")
metrics >"$T/before.metrics"
pids=()
for i in 1 2 3 4; do
	"$CTL" connect --cluster "$cid" "127.0.0.1:$echo_port" <"$T/blob" >"$T/echo.$i" &
	pids+=($!)
done
for p in "${pids[@]}"; do
	wait "$p" || fail "a connect beside the stalled reader exited $?"
done
for i in 1 2 3 4; do
	[ "$(sha256sum <"$T/echo.$i")" = "$want" ] || fail "stream $i: SHA-256 differs"
done
metrics >"$T/after.metrics"
log "handshakes of the four connects (and one scrape): loop 0" \
	"$(($(loop_handshakes "$T/after.metrics" 0) - $(loop_handshakes "$T/before.metrics" 0))), loop 1" \
	"$(($(loop_handshakes "$T/after.metrics" 1) - $(loop_handshakes "$T/before.metrics" 1)))"
# With --landing zero operator connections live on loop 0,
# where the tunnel is: no stream crossed a loop link.
! grep -q '^tether_loop_link_streams_total{' "$T/after.metrics" ||
	fail "streams crossed a loop link: $(grep '^tether_loop_link' "$T/after.metrics")"
pass "4 streams of 4 MiB beside a stalled reader, all SHA-256 equal, none crossing a loop link"

client_stop "$agent_pid"
gateway_stop
pass "SIGTERM: the gateway and its handshake loop stopped, exit 0"

# Tunnels on every loop (docs/0040 step 7): with --landing any a tunnel
# lands on the loop with the fewest tunnels plus tunnel handshakes.  n1,
# then n2 (of another cluster) once n1 is active: one tunnel per loop.
# tunnel_loop FILE N: loop N's tether_loop_tunnels in a scrape in FILE.
tunnel_loop() {
	awk -v l="tether_loop_tunnels{loop=\"$2\"}" '$1 == l { v = $2 } END { print v + 0 }' "$1"
}
stopped=()
on_cleanup 'for p in "${stopped[@]}"; do kill -KILL "$p"; kill -CONT "$p"; done 2>/dev/null'
one_each() {
	metrics >"$T/each.metrics" && [ "$(tunnel_loop "$T/each.metrics" 0)" = 1 ] &&
		[ "$(tunnel_loop "$T/each.metrics" 1)" = 1 ]
}
# next_on H: the next TLS handshake runs on loop H (--landing any, debug
# log): a connection kept by the other loop just before (on_loop.py), and
# handshakes go round the loops while none is under way.  An operator's
# dial (tetherctl connect) lands on its agent's loop unless that loop is
# clearly the busier (docs/0040 step 8).
next_on() {
	$py "$TETHER_SRC/tests/integration/on_loop.py" "$GW_PORT" "$GW_DIR/ca.crt" \
		"$GW_DIR/admin.token" "$T/gateway.log" $((1 - $1)) GET /healthz >"$T/on.out" ||
		fail "no connection kept by loop $((1 - $1)): $(cat "$T/on.out")"
}
gateway_start --workers 2 --landing any --log-level debug --stream-window 262144 --drain-timeout 2000
client_start n1 --stream-window 262144
n1_pid=$CLIENT_PID
wait_until 30 "n1 active" agent_is n1 active
metrics >"$T/one.metrics"
[ "$(($(tunnel_loop "$T/one.metrics" 0) + $(tunnel_loop "$T/one.metrics" 1)))" = 1 ] ||
	fail "n1's one tunnel is not on one loop: $(grep tether_loop_tunnels "$T/one.metrics")"
if [ "$(tunnel_loop "$T/one.metrics" 0)" = 1 ]; then l1=0; else l1=1; fi
cid2=$(cluster_create workers2)
ctl token create --cluster "$cid2" >"$T/join2.json"
join_node n2 "$T/join2.json" --allow "127.0.0.1:$echo_port" >/dev/null
start_beside n2 --stream-window 262144
n2_pid=$CLIENT_PID
pass "n1's tunnel on one loop, n2's on the other: a new tunnel lands on the loop with the fewest"

# Dials land on their agent's loop (docs/0040 step 8, "Built: the dial
# lands on its agent's loop"): n1's tunnel is on loop L1, n2's on the
# other, L2.  A connect to n1's cluster whose handshake ran on L2 lands on
# L1, and one to n2's cluster from L1 lands on L2: no stream crosses the
# loop link either way (tether_loop_link_streams_total unchanged), each
# stream's 1 MiB intact.  (A request line later than the landing's wait
# lands on loop 0: only when the gateway says so is a connect made again,
# at most 3 times.)
link_streams() {  # link_streams FILE FROM TO
	awk -v l="tether_loop_link_streams_total{from=\"$2\",to=\"$3\"}" \
		'$1 == l { v = $2 } END { print v + 0 }' "$1"
}
all_link_streams() {  # all_link_streams FILE: every pair's, summed
	awk 'index($1, "tether_loop_link_streams_total{") == 1 { n += $2 } END { print n + 0 }' "$1"
}
l2=$((1 - l1))
head -c $((1 << 20)) /dev/urandom >"$T/blob1"
want1=$(sha256sum <"$T/blob1")
for c in "$cid:$l2:$l1" "$cid2:$l1:$l2"; do
	IFS=: read -r cl from to <<<"$c"
	for try in 1 2 3; do
		metrics >"$T/cross0.metrics"
		seen=$(late)
		next_on "$from"
		"$CTL" connect --cluster "$cl" "127.0.0.1:$echo_port" <"$T/blob1" >"$T/cross.out" ||
			fail "a connect to cluster $cl from loop $from exited $?"
		[ "$(sha256sum <"$T/cross.out")" = "$want1" ] || fail "cluster $cl's echo (from loop $from) differs"
		metrics >"$T/cross.metrics"
		[ "$(all_link_streams "$T/cross.metrics")" = "$(all_link_streams "$T/cross0.metrics")" ] &&
			break
		[ "$(late)" -gt "$seen" ] && [ "$try" -lt 3 ] ||
			fail "a connect to cluster $cl (its agent on loop $to) from loop $from crossed the loop link: $(grep '^tether_loop_link_streams_total' "$T/cross0.metrics" "$T/cross.metrics")"
		log "a request line came late (try $try): the connect from loop $from may be on loop 0; again"
	done
done
pass "dials land on their agent's loop (n1 on loop $l1, n2 on loop $l2; one from the other loop each way): none crossed, every echo intact"

# Rehome across loops: n1 stopped (its tunnel stays), n2 gone (its loop
# empty); n1 dials again from a second process: the new tunnel lands on
# the empty loop and the old one's loop closes it when the new loop says
# so.  (Only a late request line, which the gateway says, lands it on loop
# 0, beside the old one if that is there, which closes the old one
# itself: then that process is stopped too and n1 dials again, at most 4
# times.)
kill -STOP "$n1_pid"
stopped+=("$n1_pid")
client_stop "$n2_pid"
n2_gone() {
	metrics >"$T/n2gone.metrics" &&
		[ "$(($(tunnel_loop "$T/n2gone.metrics" 0) + $(tunnel_loop "$T/n2gone.metrics" 1)))" = 1 ]
}
wait_until 30 "n2's tunnel gone" n2_gone
replaced() { grep -c 'msg="agent reconnected' "$T/gateway.log" || true; }
rehomed() { grep -q 'msg="agent reconnected on another loop: closing its previous tunnel"' "$T/gateway.log"; }
for try in 1 2 3 4; do
	seen=$(replaced) seen_late=$(late)
	client_start n1 --stream-window 262144
	n1b_pid=$CLIENT_PID
	wait_until 30 "n1's new tunnel to replace the old ($try)" eval '[ "$(replaced)" -gt '"$seen"' ]'
	rehomed && break
	[ "$(late)" -gt "$seen_late" ] && [ "$try" -lt 4 ] ||
		fail "n1's new tunnel landed beside its old one (try $try)"
	log "a request line came late (try $try): n1's new tunnel landed beside its old one; again"
	kill -STOP "$n1b_pid"
	stopped+=("$n1b_pid")
done
placed() {
	metrics >"$T/rehome.metrics" &&
		[ "$(($(tunnel_loop "$T/rehome.metrics" 0) + $(tunnel_loop "$T/rehome.metrics" 1)))" = 1 ]
}
wait_until 30 "n1's old tunnel closed: one tunnel left" placed
wait_until 30 "n1 active again" agent_is n1 active
for p in "${stopped[@]}"; do kill -KILL "$p"; kill -CONT "$p" 2>/dev/null || true; done
stopped=()
pass "n1 redialled while its old tunnel stood: the new one on the other loop, the old one closed by its own loop"

# A drain with tunnels on both loops: every loop's agents are told to
# reconnect elsewhere (RECONNECT, from their own loop); with nowhere else
# to go and no stream, each closes its tunnel, and the gateway exits 0
# before --drain-timeout.
start_beside n2 --stream-window 262144
n2_pid=$CLIENT_PID
gateway_stop
drained() { grep -q 'msg="gateway asks to reconnect elsewhere"' "$T/client-$1.log"; }
for n in n1 n2; do
	wait_until 20 "$n told to reconnect elsewhere" drained $n
done
! grep -q 'msg="drain over: closing the tunnels left"' "$T/gateway.log" ||
	fail "the drain ran to its end: a loop's agent was not told"
pass "SIGTERM with a tunnel on each loop: both agents told to reconnect elsewhere by their own loop; exit 0"
client_stop "$n1b_pid"
client_stop "$n2_pid"

# Issue 23's case (docs/0040 step 6): n1's one tunnel is on loop T, and
# a dial whose handshake ran on the other loop O stays there while T is
# clearly the busier loop (two dials held open on T: docs/0040 step 8's
# guard), so its stream crosses the loop link O>T.  A reader that never
# reads (its connection on O) stalls its stream only: the gateway holds at
# most a window per hop of it (the tunnel's stream on T, the link's) while
# four streams beside it finish, SHA-256 equal, and it moves not a byte
# meanwhile.
gw_get() { # gw_get PATH: an admin GET into $T/get.out
	curl -sf --cacert "$GW_DIR/ca.crt" -H "Authorization: Bearer $(cat "$GW_DIR/admin.token")" \
		-o "$T/get.out" "$GW_URL$1"
}
scrape() { # scrape NAME: /metrics into $T/NAME.metrics
	metrics >"$T/$1.metrics"
}
family() { # family FILE SERIES: its value (0 if absent)
	awk -v s="$2" '$1 == s { v = $2 } END { print v + 0 }' "$1"
}
# Its own debug log (next_on reads "http: landed" lines by client port: an
# earlier gateway's may name the same port).
cat "$T/gateway.log" >>"$T/gateway-earlier.log"
: >"$T/gateway.log"
gateway_start --workers 2 --landing any --log-level debug --stream-window 262144
client_start n1 --stream-window 262144
n1_pid=$CLIENT_PID
wait_until 30 "n1 active" agent_is n1 active
scrape t
if [ "$(tunnel_loop "$T/t.metrics" 0)" = 1 ]; then tl=0 ol=1; else tl=1 ol=0; fi
[ "$(tunnel_loop "$T/t.metrics" $tl)" = 1 ] || fail "n1's tunnel on no loop: $(grep tether_loop_tunnels "$T/t.metrics")"
xs="tether_loop_link_streams_total{from=\"$ol\",to=\"$tl\"}"
xb="tether_loop_link_bytes_total{from=\"$tl\",to=\"$ol\"}"
recv='tether_stream_bytes_total{direction="received"}'
# The stalled stream: a connect to the source whose output is never read,
# its handshake run on loop O (next_on), where it stays: its stream
# crosses the link.  (Only a late request line, which the gateway says,
# lands it on loop 0: then it is made again, at most 3 times.)
src_down() { # the stream to the source: its bytes_down in /v1/status
	gw_get /v1/status && jq -er --arg t "127.0.0.1:$source_port" \
		'[.streams[] | select(.target == $t)] | if length == 1 then .[0].bytes_down
		 else error("want one stream to the source, got \(length)") end' "$T/get.out"
}
to_source() { # streams to the source in /v1/status
	gw_get /v1/status && jq -er --arg t "127.0.0.1:$source_port" \
		'[.streams[] | select(.target == $t)] | length' "$T/get.out"
}
no_source_stream() { [ "$(to_source)" = 0 ]; }
# hold_dial NAME: a tetherctl connect to the echo server from a handshake
# on loop T (where it lands: its agent is there), held open once a line
# came back through it; counted on T until it ends.
hold_dial() {
	next_on "$tl"
	held_echo_dial "$1" "$cid" "$echo_port"
}
hold_dial weight1
hold_dial weight2
scrape w
[ "$(family "$T/w.metrics" "tether_loop_connections{loop=\"$tl\"}")" -ge 2 ] ||
	fail "two dials held from loop $tl are not counted there: $(grep '^tether_loop_connections' "$T/w.metrics")"
for try in 1 2 3; do
	scrape r                           # from the tunnel before this stream
	received0=$(family "$T/r.metrics" "$recv")
	seen=$(late)
	rm -f "$T/held.pid" "$T/source.count"
	next_on "$ol"
	$py - "$CTL" "$cid" "$source_port" "$T/held.pid" <<'PY' &
import subprocess, sys, time
held = subprocess.Popen([sys.argv[1], "connect", "--cluster", sys.argv[2],
                         "127.0.0.1:" + sys.argv[3]], stdin=subprocess.PIPE, stdout=subprocess.PIPE)
open(sys.argv[4], "w").write("%d\n" % held.pid)
time.sleep(3600)   # holds the pipes; never reads
PY
	PIDS+=($!)
	wait_until 10 "the stalled connect's pid ($try)" test -s "$T/held.pid"
	PIDS+=("$(cat "$T/held.pid")")
	# No connection of ours before the connect's own (src_down makes one).
	wait_until 20 "the source to start sending ($try)" test -s "$T/source.count"
	wait_until 20 "the stream to the source in /v1/status ($try)" src_down
	scrape x
	[ "$(family "$T/x.metrics" "$xs")" -ge 1 ] && break
	[ "$(late)" -gt "$seen" ] && [ "$try" -lt 3 ] ||
		fail "the stalled connect (its handshake on loop $ol) did not cross $ol>$tl: $(grep '^tether_loop_link_streams_total' "$T/x.metrics")"
	log "a request line came late (try $try): the stalled connect may be on loop 0; again"
	kill "$(cat "$T/held.pid")"
	wait_until 20 "the uncrossed stream gone ($try)" no_source_stream
done
# What the gateway received of the stalled stream from the tunnel so far.
gw_received() { scrape h && echo $(($(family "$T/h.metrics" "$recv") - received0)); }
window=262144
wait_until 60 "the stalled stream held in the gateway, still" \
	stream_stalled "$window" "$T/source.count"
held=$(cat "$T/held")
[ "$held" -ge 0 ] && [ "$held" -le $((2 * window)) ] ||
	fail "the gateway holds $held bytes of the stalled stream, more than two windows of $window"
# Four streams beside it, from connections on either loop.
scrape b
pids=()
for i in 1 2 3 4; do
	"$CTL" connect --cluster "$cid" "127.0.0.1:$echo_port" <"$T/blob" >"$T/echo.$i" &
	pids+=($!)
done
for p in "${pids[@]}"; do
	wait "$p" || fail "a connect beside the stalled reader exited $?"
done
for i in 1 2 3 4; do
	[ "$(sha256sum <"$T/echo.$i")" = "$want" ] || fail "stream $i: SHA-256 differs"
done
scrape a
n=$(($(family "$T/a.metrics" "$xs") - $(family "$T/b.metrics" "$xs")))
moved=$(($(family "$T/a.metrics" "$xb") - $(family "$T/b.metrics" "$xb")))
log "streams crossing $ol>$tl beside the stalled one: $n; bytes $tl>$ol meanwhile: $moved"
[ "$moved" -eq $((n * (4 << 20))) ] ||
	fail "$tl>$ol carried $moved bytes for $n crossing echo streams of 4 MiB: the stalled stream moved"
[ "$(src_down)" = "$(cat "$T/down0")" ] || fail "the stalled stream's bytes_down moved"
pass "n1's tunnel on loop $tl, a stalled stream from loop $ol across the link held $held bytes (at most two windows of $window), 4 streams beside it ($n crossing $ol>$tl) intact"
kill "$(cat "$T/held.pid")" "$(cat "$T/weight1.pid")" "$(cat "$T/weight2.pid")"
client_stop "$n1_pid"
gateway_stop

# One loop: as before the flag.
gateway_start --workers 1
metrics >"$T/one.metrics"
grep -q '^tether_loop_tls_handshakes_total{loop="0"} [1-9]' "$T/one.metrics" ||
	fail "--workers 1: loop 0 counted no handshake"
! grep -q 'loop="1"' "$T/one.metrics" || fail "--workers 1: a second loop in /metrics"
gateway_stop
pass "--workers 1: one loop, every handshake on it"
