#!/usr/bin/env bash
# Peer links between replicas (docs/0020): two tether-gateway replicas on one
# private PostgreSQL, each with --peer-listen.
# - the peer listener refuses at the TLS handshake a client without a
#   certificate (curl, openssl s_client), one with a certificate that the
#   gateway's own CA signed for another key, and one with the public server
#   certificate and server.key (docs/0030: not a replica's credential); it
#   serves nothing but /v1/peer;
# - the main port still serves everyone (it asks for a certificate, needs
#   none), but its /v1/peer refuses a non-replica with 403, server.key's
#   holder too;
# - a replica's certificate (peer.crt) on the peer port: /v1/peer wants the WebSocket
#   upgrade, the subprotocol and the Tether-Replica header;
# - the holding replica's side of a link (peerprobe.py plays the asking
#   replica): an OPEN naming an agent held there carries bytes both ways,
#   SHA-256 equal; an agent not held there is refused (agent_not_here); the
#   audit line names the asking replica (via=);
# - credit end to end: a reader that grants a 64 KiB window and never more
#   receives at most 64 KiB while the agent's side has a source that writes
#   as fast as it may: the source stalls, the replica buffers no more;
# - through replica 1 (reach, docs/0023) to the agent replica 2 holds:
#   tetherctl connect moves 32 MiB both ways, SHA-256 equal, over one link;
#   the audit lines name the other replica (replica=r2 on r1, via=r1 on r2);
# - a slow reader behind r1 (its tetherctl never reads): the source stalls
#   and r2 holds at most one window of the stream per hop inside r2 (what it
#   received from the agent, /metrics, minus what it passed on, /v1/status,
#   read at one instant: bytes_down the same before and after the count);
# - r2 stopped (SIGSTOP): r3, pinging fast, drops the silent link after its
#   ping timeout, and the stream on it ends;
# - kill -9 of r2: the stream through it ends (audit end=tunnel_lost on r1),
#   and the next connect is refused at once with a reason naming r2.
source "$(dirname "$0")/lib.sh"

py=/usr/bin/python3
$py "$TETHER_SRC/tests/integration/tcpserver.py" echo "$T/echo.port" &
PIDS+=($!)
$py "$TETHER_SRC/tests/integration/tcpserver.py" source "$T/source.port" "$T/source.count" &
PIDS+=($!)
wait_until 10 "echo and source servers" test -s "$T/echo.port" -a -s "$T/source.port"
echo_port=$(cat "$T/echo.port")
source_port=$(cat "$T/source.port")

pg_start
gateway_init --store "$PG_URL"

REPLICA_PEER_LISTEN=1
replica_start 1 --audit-log "$T/audit1.log"
RPORT[2]=$GW_PORT   # the join documents' URL: agents dial replica 2
replica_start 2 --audit-log "$T/audit2.log"
# r3 pings quiet connections fast: it notices a silent peer within 1.3 s.
replica_start 3 --ping-interval 300 --ping-timeout 1000
for i in 1 2 3; do wait_until 30 "replica $i ready" replica_ready "$i"; done
assert_contains "$T/replica2.log" "peer links listening"
PEER=https://127.0.0.1:${PPORT[2]}
MAIN=https://127.0.0.1:${RPORT[2]}

# --- who the peer port lets in ---
# A certificate the gateway's CA signed, for a key that is not the replicas'.
openssl req -new -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -subj /CN=intruder \
	-keyout "$T/foreign.key" -out "$T/foreign.csr" 2>/dev/null
openssl x509 -req -in "$T/foreign.csr" -CA "$GW_DIR/ca.crt" -CAkey "$GW_DIR/ca.key" \
	-CAcreateserial -days 1 -out "$T/foreign.crt" 2>/dev/null ||
	fail "cannot sign a certificate with the gateway's CA"
openssl verify -CAfile "$GW_DIR/ca.crt" "$T/foreign.crt" >/dev/null ||
	fail "the foreign certificate does not verify against ca.crt"

# curl: its exit status says how far it got; 35 (handshake), 55 or 56 (the
# server's alert, read after the client's half of a TLS 1.3 handshake, when
# sending or receiving) mean TLS refused it, and no HTTP status came back.
tls_refused() { # tls_refused WHAT CURL-ARGS...
	local what=$1 rc=0 code
	shift
	code=$(curl -s -o /dev/null -w '%{http_code}' --cacert "$GW_DIR/ca.crt" "$@" \
		"$PEER/v1/peer") || rc=$?
	[ "$code" = 000 ] || fail "$what: the peer port answered HTTP $code"
	case $rc in 35 | 55 | 56) ;; *) fail "$what: curl exited $rc, want a TLS failure (35, 55 or 56)" ;; esac
}
tls_refused "curl without a certificate"
tls_refused "curl with a foreign CA-signed certificate" --cert "$T/foreign.crt" --key "$T/foreign.key"
tls_refused "curl with only server.key (the server certificate)" --cert "$GW_DIR/server.crt" --key "$GW_DIR/server.key"
pass "the peer port refuses curl at the TLS handshake without a certificate, with another CA-signed certificate and with the server's"

s_client() { # s_client [openssl args]: sends a request, prints what came back
	printf 'GET /v1/peer HTTP/1.1\r\nHost: x\r\n\r\n' |
		timeout 20 openssl s_client -connect "127.0.0.1:${PPORT[2]}" -CAfile "$GW_DIR/ca.crt" \
		-brief -ign_eof "$@" 2>&1 || true
}
out=$(s_client)
if grep -q '^HTTP/' <<<"$out"; then fail "openssl without a certificate got an answer: $out"; fi
grep -q 'alert' <<<"$out" || fail "openssl without a certificate: no TLS alert: $out"
out=$(s_client -cert "$T/foreign.crt" -key "$T/foreign.key")
if grep -q '^HTTP/' <<<"$out"; then fail "openssl with a foreign certificate got an answer: $out"; fi
grep -q 'alert' <<<"$out" || fail "openssl with a foreign certificate: no TLS alert: $out"
out=$(s_client -cert "$GW_DIR/server.crt" -key "$GW_DIR/server.key")
if grep -q '^HTTP/' <<<"$out"; then fail "openssl with only server.key got an answer: $out"; fi
grep -q 'alert' <<<"$out" || fail "openssl with only server.key: no TLS alert: $out"
out=$(s_client -cert "$GW_DIR/peer.crt" -key "$GW_DIR/peer.key")
grep -q '^HTTP/1.1 400' <<<"$out" || fail "openssl with the replicas' peer credential: $out"
pass "openssl s_client: refused at the handshake without a certificate, with a foreign one and with server.key alone; a replica's peer.crt gets HTTP"

rcurl() { curl -s --cacert "$GW_DIR/ca.crt" --cert "$GW_DIR/peer.crt" --key "$GW_DIR/peer.key" "$@"; }
code=$(rcurl -o /dev/null -w '%{http_code}' "$PEER/readyz")
[ "$code" = 404 ] || fail "the peer port served /readyz (HTTP $code), want 404: it serves only /v1/peer"
ws_get() { # ws_get URL [curl args]: a WebSocket upgrade request, prints the status and body
	curl -s --cacert "$GW_DIR/ca.crt" --http1.1 -H 'Connection: Upgrade' -H 'Upgrade: websocket' \
		-H 'Sec-WebSocket-Version: 13' -H 'Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==' \
		-w '\n%{http_code}' "$@"
}
out=$(ws_get "$PEER/v1/peer" --cert "$GW_DIR/peer.crt" --key "$GW_DIR/peer.key" \
	-H 'Sec-WebSocket-Protocol: tether.peer.v1')
grep -q 'Tether-Replica' <<<"$out" && [ "$(tail -1 <<<"$out")" = 400 ] ||
	fail "a replica without Tether-Replica: $out"
out=$(ws_get "$PEER/v1/peer" --cert "$GW_DIR/peer.crt" --key "$GW_DIR/peer.key" \
	-H 'Tether-Replica: r1')
grep -q 'subprotocol' <<<"$out" && [ "$(tail -1 <<<"$out")" = 400 ] ||
	fail "a replica without the subprotocol: $out"
pass "the peer port serves only /v1/peer, which wants the subprotocol and the Tether-Replica header"

# The main port: anyone connects (no certificate needed) ...
curl -sf --cacert "$GW_DIR/ca.crt" "$MAIN/readyz" >/dev/null || fail "main port: /readyz without a certificate"
curl -sf --cacert "$GW_DIR/ca.crt" --cert "$T/foreign.crt" --key "$T/foreign.key" "$MAIN/readyz" >/dev/null ||
	fail "main port: /readyz with a foreign certificate"
# ... but its /v1/peer takes only a replica.
for cert in none foreign server; do
	args=(-H 'Sec-WebSocket-Protocol: tether.peer.v1' -H 'Tether-Replica: r1')
	[ $cert = foreign ] && args+=(--cert "$T/foreign.crt" --key "$T/foreign.key")
	[ $cert = server ] && args+=(--cert "$GW_DIR/server.crt" --key "$GW_DIR/server.key")
	out=$(ws_get "$MAIN/v1/peer" "${args[@]}")
	[ "$(tail -1 <<<"$out")" = 403 ] && grep -q "only the gateway's replicas" <<<"$out" ||
		fail "main port /v1/peer with certificate $cert: $out"
done
pass "the main port serves clients without a certificate; its /v1/peer refuses them, foreign certificates and server.key alone with 403 and a reason"

# --- the holding replica's side ---
export TETHER_SERVER=$MAIN
cid=$(cluster_create peers)
ctl token create --cluster "$cid" >"$T/join.json"
join_node n1 "$T/join.json" --allow "127.0.0.1:$echo_port" --allow "127.0.0.1:$source_port" >/dev/null
client_start n1
wait_until 30 "n1 active" agent_is n1 active
id=$(jq -r .agent_id "$T/n1/state.json")
[ "$(pg_query "SELECT replica_id FROM tunnels WHERE agent_id = '$id'")" = r2 ] ||
	fail "the agent's tunnel is not on r2: $(pg_query 'SELECT * FROM tunnels')"

probe() { exec $py "$TETHER_SRC/tests/integration/peerprobe.py" "wss://127.0.0.1:${PPORT[2]}/v1/peer" "$T/r1" "$@"; }
out=$(probe a-probe echo "$id" user:alice "127.0.0.1:$echo_port" $((4 << 20))) ||
	fail "a stream over the link to the agent: $out"
[ "$out" = "ok $((4 << 20))" ] || fail "a stream over the link: $out"
wait_until 10 "r2's audit line naming the asking replica (via=a-probe) and the principal (who=user:alice)" \
	lines_match "$T/audit2.log" event=stream via=a-probe who=user:alice
pass "over a link to r2, 4 MiB to the agent's echo server and back, SHA-256 equal; r2's audit line says via=a-probe who=user:alice"

out=$(probe a-probe refused a-nobody user:alice "127.0.0.1:$echo_port") || fail "unknown agent: $out"
grep -q '^refused agent_not_here agent a-nobody has no tunnel on replica r2' <<<"$out" ||
	fail "an agent r2 does not hold: $out"
pass "an OPEN for an agent r2 does not hold is refused: $out"

# Credit end to end: the probe grants 64 KiB and never more.
count_stable() {
	local a b
	a=$(cat "$T/source.count")
	sleep 0.5
	b=$(cat "$T/source.count")
	[ "$a" = "$b" ]
}
probe a-probe nocredit "$id" user:alice "127.0.0.1:$source_port" "$T/probe.count" \
	>"$T/probe.out" 2>&1 &
probe_pid=$!
PIDS+=($probe_pid)
wait_until 20 "the source to start sending" test -s "$T/source.count"
wait_until 60 "the source to stall" count_stable
got=$(cat "$T/probe.count" 2>/dev/null || echo 0)
[ "$got" -le 65536 ] || fail "the probe granted 64 KiB and received $got bytes"
[ "$got" -gt 0 ] || fail "the probe received nothing"
sent=$(cat "$T/source.count")
kill "$probe_pid" 2>/dev/null || true
pass "a reader that grants 64 KiB gets $got bytes; the source stalls after $sent bytes (windows and socket buffers), nothing piles up on r2"

# --- through replica 1 to the agent replica 2 holds (reach, docs/0023) ---
export TETHER_SERVER=https://127.0.0.1:${RPORT[1]}
# r1 learns where the agent is with its next lease renewal (every 2 s).
reachable() { echo hi | "$CTL" connect --cluster "$cid" --node n1 "127.0.0.1:$echo_port" | grep -qx hi; }
wait_until 30 "r1 reaching n1 on r2" reachable
head -c $((32 << 20)) /dev/urandom >"$T/big"
"$CTL" connect --cluster "$cid" --node n1 "127.0.0.1:$echo_port" <"$T/big" >"$T/big.echo" ||
	fail "connect via r1 exited $?"
[ "$(sha256sum <"$T/big")" = "$(sha256sum <"$T/big.echo")" ] ||
	fail "32 MiB via r1: $(stat -c %s "$T/big.echo") bytes came back, or they differ"
wait_until 10 "r1's audit line of the 32 MiB stream naming r2" \
	lines_match "$T/audit1.log" event=stream bytes_up=33554432 replica=r2
wait_until 10 "r2's audit line of the 32 MiB stream naming r1" \
	lines_match "$T/audit2.log" event=stream bytes_up=33554432 via=r1
grep -q 'peer link up.*replica=r2' "$T/replica1.log" || fail "r1 logged no link to r2"
pass "tetherctl connect via r1 to n1 (held by r2): 32 MiB both ways, SHA-256 equal; audit replica=r2 on r1, via=r1 on r2"

# A slow reader behind r1: tetherctl connect to the source, its output never
# read.  r2 holds at most one window of the stream per hop inside r2 (the
# agent's stream; a loop link's too if the stream crosses loops there): what
# it received from the agent (/metrics) minus what it passed on to the link
# (/v1/status's bytes_down), both at one instant.  The source's count
# standing still says little of the hops after it (the agent still reads
# what the kernel holds for it), so a /metrics read after /v1/status's may
# count bytes passed on since: the two agree only when bytes_down is the
# same before and after the count (under ThreadSanitizer the stream still
# moved between two reads: 1.25 MiB "held" against a 1 MiB window).
r2_get() { # r2_get PATH: an admin GET on r2 into $T/r2.out
	curl -sf --cacert "$GW_DIR/ca.crt" -H "Authorization: Bearer $(cat "$GW_DIR/admin.token")" \
		-o "$T/r2.out" "https://127.0.0.1:${RPORT[2]}$1"
}
received() { # bytes r2 received from agent tunnels, all streams: one /metrics read
	r2_get /metrics &&
		awk '/^tether_stream_bytes_total\{direction="received"\}/ { print $2 }' "$T/r2.out" | grep .
}
link_streams() { # streams r2 opened over its loop links, every pair: one /metrics read
	r2_get /metrics &&
		awk '/^tether_loop_link_streams_total\{/ { n += $2 } END { print n + 0 }' "$T/r2.out"
}
stream_down() { # the stream to the source on r2: its bytes_down, one /v1/status read
	r2_get /v1/status &&
		jq -er --arg t "127.0.0.1:$source_port" '[.streams[] | select(.target == $t)] |
			if length == 1 then .[0].bytes_down else error("want one stream to the source, got \(length)") end' \
			"$T/r2.out"
}
held_at_one_instant() { # writes r2's held bytes of the stream to $T/held
	local down now again
	down=$(stream_down) && now=$(received) && again=$(stream_down) && [ "$down" = "$again" ] ||
		return 1
	echo $((now - before - down)) >"$T/held"
}
wait_until 20 "r2's /metrics" received
before=$(received) || fail "no tether_stream_bytes_total in r2's /metrics"
links0=$(link_streams) || fail "r2's /metrics: $(cat "$T/r2.out")"
src0=$(cat "$T/source.count")
$py - "$CTL" "$cid" "$source_port" <<'PY' &
import subprocess, sys, time
held = subprocess.Popen([sys.argv[1], "connect", "--cluster", sys.argv[2], "--node", "n1",
                         "127.0.0.1:" + sys.argv[3]], stdin=subprocess.PIPE, stdout=subprocess.PIPE)
time.sleep(3600)   # holds the pipes (held keeps them open); never reads
PY
PIDS+=($!)
source_moved() { [ "$(cat "$T/source.count")" -gt "$src0" ]; }
wait_until 20 "the source to start sending" source_moved
wait_until 60 "the source to stall behind the slow reader" count_stable
sent=$(($(cat "$T/source.count") - src0))
wait_until 60 "r2's bytes_down of the stream, equal before and after a /metrics read" held_at_one_instant
held=$(cat "$T/held")
links=$(link_streams) || fail "r2's /metrics: $(cat "$T/r2.out")"
hops=1
[ "$links" -eq "$links0" ] || hops=2
window=$((1 << 20))   # --stream-window's default
[ "$held" -ge 0 ] && [ "$held" -le $((hops * window)) ] ||
	fail "r2 holds $held bytes of the stalled stream, more than $hops window(s) of $window"
pass "a reader behind r1 that does not read: the source stalls after $sent bytes; r2 holds $held bytes of it (at most $hops window(s) of $window: $((links - links0)) loop link crossings on r2)"

# A link that goes silent (r2 stopped, SIGSTOP): the dialing replica, r3,
# pings it and drops it after its ping timeout, ending the stream on it.
wait_until 30 "r3 reaching n1 on r2" env TETHER_SERVER=https://127.0.0.1:${RPORT[3]} bash -c \
	'echo hi | "$0" connect --cluster "$1" --node n1 "$2" | grep -qx hi' "$CTL" "$cid" "127.0.0.1:$echo_port"
TETHER_SERVER=https://127.0.0.1:${RPORT[3]} held_connect "$cid" n1 "127.0.0.1:$echo_port" "$T/held3.out" "$T/held3.err"
printf 'ping\n' >&7
wait_until 20 "the held stream's echo through r3" grep -qx ping "$T/held3.out"
kill -STOP "${RPID[2]}"
on_cleanup "kill -CONT ${RPID[2]} 2>/dev/null"
rc=0
wait "$HELD_PID" || rc=$?
exec 7>&-
kill -CONT "${RPID[2]}"
[ "$rc" -ne 0 ] || fail "the stream over a silent link ended with exit 0"
grep -q 'peer link down.*replica=r2.*said nothing for' "$T/replica3.log" ||
	fail "r3 did not drop the silent link: $(grep 'peer link' "$T/replica3.log")"
pass "r2 stopped (SIGSTOP): r3 dropped its silent link after its ping timeout and the stream on it ended (exit $rc)"

# The link ends with r2: r1's streams on it end, and r1 refuses at once
# (backoff) instead of hanging.
held_connect "$cid" n1 "127.0.0.1:$echo_port" "$T/held.out" "$T/held.err"
printf 'ping\n' >&7
wait_until 20 "the held stream's echo" grep -qx ping "$T/held.out"
kill -KILL "${RPID[2]}"
wait "${RPID[2]}" 2>/dev/null || true
rc=0
wait "$HELD_PID" || rc=$?
exec 7>&-
[ "$rc" -ne 0 ] || fail "the stream through a killed replica ended with exit 0"
wait_until 10 "r1's audit line of a stream ended by the lost link" \
	lines_match "$T/audit1.log" event=stream replica=r2 end=tunnel_lost
out=$(echo x | "$CTL" connect --cluster "$cid" --node n1 "127.0.0.1:$echo_port" 2>&1) &&
	fail "a connect via r1 to the dead r2's agent succeeded: $out"
grep -q 'replica r2' <<<"$out" || fail "the refusal does not name r2: $out"
pass "kill -9 of r2: the stream through it ends (exit $rc, audit end=tunnel_lost), a new one is refused with: $out"

replica_stop 1
replica_stop 3
pass "r1 and r3 stop cleanly with their links gone"
