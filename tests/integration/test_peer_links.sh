#!/usr/bin/env bash
# Peer links between replicas (docs/0020): two tether-gateway replicas on one
# private PostgreSQL, each with --peer-listen.
# - the peer listener refuses at the TLS handshake a client without a
#   certificate (curl, openssl s_client) and one with a certificate that the
#   gateway's own CA signed for another key; it serves nothing but /v1/peer;
# - the main port still serves everyone (it asks for a certificate, needs
#   none), but its /v1/peer refuses a non-replica with 403;
# - a replica's certificate on the peer port: /v1/peer wants the WebSocket
#   upgrade, the subprotocol and the Tether-Replica header;
# - the holding replica's side of a link (peerprobe.py plays the asking
#   replica): an OPEN naming an agent held there carries bytes both ways,
#   SHA-256 equal; an agent not held there is refused (agent_not_here); the
#   audit line names the asking replica (via=);
# - credit end to end: a reader that grants a 64 KiB window and never more
#   receives at most 64 KiB while the agent's side has a source that writes
#   as fast as it may: the source stalls, the replica buffers no more.
source "$(dirname "$0")/lib.sh"

py=/usr/bin/python3
PING=(--ping-interval 300 --ping-timeout 1000)
$py "$TETHER_SRC/tests/integration/tcpserver.py" echo "$T/echo.port" &
PIDS+=($!)
$py "$TETHER_SRC/tests/integration/tcpserver.py" source "$T/source.port" "$T/source.count" &
PIDS+=($!)
wait_until 10 "echo and source servers" test -s "$T/echo.port" -a -s "$T/source.port"
echo_port=$(cat "$T/echo.port")
source_port=$(cat "$T/source.port")

pg_start
gateway_init --store "$PG_URL"

declare -a RPORT PPORT RPID
replica_start() { # replica_start N [serve flags]
	local d=$T/r$1
	mkdir -p -m 700 "$d"
	cp "$GW_DIR/ca.crt" "$GW_DIR/server.crt" "$GW_DIR/server.key" \
		"$GW_DIR/gateway.json" "$d/"
	RPORT[$1]=${RPORT[$1]:-$(free_port)}
	PPORT[$1]=${PPORT[$1]:-$(free_port)}
	"$GATEWAY" serve --data-dir "$d" --listen "127.0.0.1:${RPORT[$1]}" \
		--store "$PG_URL" --replica-id "r$1" \
		--peer-listen "127.0.0.1:${PPORT[$1]}" --peer-url "https://127.0.0.1:${PPORT[$1]}" \
		--audit-log "$T/audit$1.log" --drain-timeout 0 "${PING[@]}" "${@:2}" \
		>>"$T/replica$1.log" 2>&1 &
	RPID[$1]=$!
	PIDS+=("${RPID[$1]}")
}
replica_ready() {
	curl -sf --cacert "$GW_DIR/ca.crt" "https://127.0.0.1:${RPORT[$1]}/readyz"
}
replica_start 1
RPORT[2]=$GW_PORT   # the join documents' URL: agents dial replica 2
replica_start 2
for i in 1 2; do wait_until 30 "replica $i ready" replica_ready "$i"; done
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
pass "the peer port refuses curl at the TLS handshake without a certificate and with another CA-signed certificate"

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
grep -q '^HTTP/1.1 400' <<<"$out" || fail "openssl with the replicas' certificate: $out"
pass "openssl s_client: refused at the handshake without a certificate and with a foreign one; a replica's gets HTTP"

rcurl() { curl -s --cacert "$GW_DIR/ca.crt" --cert "$GW_DIR/server.crt" --key "$GW_DIR/server.key" "$@"; }
code=$(rcurl -o /dev/null -w '%{http_code}' "$PEER/readyz")
[ "$code" = 404 ] || fail "the peer port served /readyz (HTTP $code), want 404: it serves only /v1/peer"
ws_get() { # ws_get URL [curl args]: a WebSocket upgrade request, prints the status and body
	curl -s --cacert "$GW_DIR/ca.crt" --http1.1 -H 'Connection: Upgrade' -H 'Upgrade: websocket' \
		-H 'Sec-WebSocket-Version: 13' -H 'Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==' \
		-w '\n%{http_code}' "$@"
}
out=$(ws_get "$PEER/v1/peer" --cert "$GW_DIR/server.crt" --key "$GW_DIR/server.key" \
	-H 'Sec-WebSocket-Protocol: tether.peer.v1')
grep -q 'Tether-Replica' <<<"$out" && [ "$(tail -1 <<<"$out")" = 400 ] ||
	fail "a replica without Tether-Replica: $out"
out=$(ws_get "$PEER/v1/peer" --cert "$GW_DIR/server.crt" --key "$GW_DIR/server.key" \
	-H 'Tether-Replica: r1')
grep -q 'subprotocol' <<<"$out" && [ "$(tail -1 <<<"$out")" = 400 ] ||
	fail "a replica without the subprotocol: $out"
pass "the peer port serves only /v1/peer, which wants the subprotocol and the Tether-Replica header"

# The main port: anyone connects (no certificate needed) ...
curl -sf --cacert "$GW_DIR/ca.crt" "$MAIN/readyz" >/dev/null || fail "main port: /readyz without a certificate"
curl -sf --cacert "$GW_DIR/ca.crt" --cert "$T/foreign.crt" --key "$T/foreign.key" "$MAIN/readyz" >/dev/null ||
	fail "main port: /readyz with a foreign certificate"
# ... but its /v1/peer takes only a replica.
for cert in none foreign; do
	args=(-H 'Sec-WebSocket-Protocol: tether.peer.v1' -H 'Tether-Replica: r1')
	[ $cert = foreign ] && args+=(--cert "$T/foreign.crt" --key "$T/foreign.key")
	out=$(ws_get "$MAIN/v1/peer" "${args[@]}")
	[ "$(tail -1 <<<"$out")" = 403 ] && grep -q "only the gateway's replicas" <<<"$out" ||
		fail "main port /v1/peer with certificate $cert: $out"
done
pass "the main port serves clients without a certificate; its /v1/peer refuses them and foreign certificates with 403 and a reason"

# --- the holding replica's side ---
export TETHER_SERVER=$MAIN
cid=$(cluster_create peers)
ctl token create --cluster "$cid" >"$T/join.json"
join_node n1 "$T/join.json" --allow "127.0.0.1:$echo_port" --allow "127.0.0.1:$source_port" >/dev/null
client_start n1 "${PING[@]}"
wait_until 30 "n1 active" agent_is n1 active
id=$(jq -r .agent_id "$T/n1/state.json")
[ "$(pg_query "SELECT replica_id FROM tunnels WHERE agent_id = '$id'")" = r2 ] ||
	fail "the agent's tunnel is not on r2: $(pg_query 'SELECT * FROM tunnels')"

probe() { $py "$TETHER_SRC/tests/integration/peerprobe.py" "wss://127.0.0.1:${PPORT[2]}/v1/peer" "$T/r1" "$@"; }
out=$(probe a-probe echo "$id" user:alice "127.0.0.1:$echo_port" $((4 << 20))) ||
	fail "a stream over the link to the agent: $out"
[ "$out" = "ok $((4 << 20))" ] || fail "a stream over the link: $out"
grep 'event=stream' "$T/audit2.log" | grep -q 'via=a-probe' ||
	fail "r2's audit line does not name the asking replica: $(cat "$T/audit2.log")"
grep 'event=stream' "$T/audit2.log" | grep 'via=a-probe' | grep -q 'who=user:alice' ||
	fail "r2's audit line does not name the principal: $(cat "$T/audit2.log")"
pass "over a link to r2, 4 MiB to the agent's echo server and back, SHA-256 equal; r2's audit line says via=a-probe who=user:alice"

out=$(probe a-probe refused a-nobody user:alice "127.0.0.1:$echo_port") || fail "unknown agent: $out"
grep -q '^refused agent_not_here agent a-nobody has no tunnel on replica r2' <<<"$out" ||
	fail "an agent r2 does not hold: $out"
pass "an OPEN for an agent r2 does not hold is refused: $out"

# Credit end to end: the probe grants 64 KiB and never more.
probe a-probe nocredit "$id" user:alice "127.0.0.1:$source_port" "$T/probe.count" \
	>"$T/probe.out" 2>&1 &
probe_pid=$!
PIDS+=($probe_pid)
wait_until 20 "the source to start sending" test -s "$T/source.count"
count_stable() {
	local a b
	a=$(cat "$T/source.count")
	sleep 0.5
	b=$(cat "$T/source.count")
	[ "$a" = "$b" ]
}
wait_until 60 "the source to stall" count_stable
got=$(cat "$T/probe.count" 2>/dev/null || echo 0)
[ "$got" -le 65536 ] || fail "the probe granted 64 KiB and received $got bytes"
[ "$got" -gt 0 ] || fail "the probe received nothing"
sent=$(cat "$T/source.count")
kill "$probe_pid" 2>/dev/null || true
pass "a reader that grants 64 KiB gets $got bytes; the source stalls after $sent bytes (windows and socket buffers), nothing piles up on r2"

for i in 1 2; do
	kill -TERM "${RPID[$i]}"
	rc=0
	wait "${RPID[$i]}" || rc=$?
	[ "$rc" -eq 0 ] || fail "replica $i exited $rc after SIGTERM (see replica$i.log)"
done
pass "both replicas stop cleanly"
