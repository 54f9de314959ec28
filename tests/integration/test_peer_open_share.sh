#!/usr/bin/env bash
# A peer link's OPENs are charged to the link's share (issue 22 hole 7,
# docs/0034): peerprobe.py plays a replica on --peer-listen and opens 40
# streams to an agent here, each for a new principal ("user:p0", "user:p1",
# ...), holding them open.  The windows the gateway grants them on the link
# (OPEN_OK's window: what it charged) must stay within one --principal-share
# (4 MiB here), however many principals the link names; the first streams
# still open.  Before the change each named principal had a share of its
# own: 40 of 40 opened with a full 1 MiB window, 40 MiB against 4 MiB.
source "$(dirname "$0")/lib.sh"

SHARE=$((4 << 20))
echo_server_start
gateway_init
PEER_PORT=$(free_port)
gateway_start --peer-listen "127.0.0.1:$PEER_PORT" --principal-share "$SHARE"
cid=$(cluster_create links)
ctl token create --cluster "$cid" >"$T/join.json"
join_node n1 "$T/join.json" --allow "127.0.0.1:$echo_port" >/dev/null
client_start n1
agent=$CLIENT_PID
wait_until 30 "n1 active" agent_is n1 active
id=$(agent_id_of n1)

/usr/bin/python3 "$TETHER_SRC/tests/integration/peerprobe.py" \
	"wss://127.0.0.1:$PEER_PORT/v1/peer" "$GW_DIR" rogue spread "$id" user:p \
	"127.0.0.1:$echo_port" 40 >"$T/probe.out" 2>"$T/probe.err" ||
	fail "the probe failed: $(cat "$T/probe.out" "$T/probe.err")"
read -r _ opened _ refused _ window <"$T/probe.out"
log "40 OPENs, a new principal each: opened $opened, refused $refused, windows granted $window bytes (share $SHARE)"
[ "$opened" -ge 1 ] || fail "no stream opened over the link: $(cat "$T/probe.out")"
[ "$window" -le "$SHARE" ] ||
	fail "the link was granted $window bytes of windows for $opened streams, over one share of $SHARE"
pass "a link naming 40 principals gets $window bytes of windows ($opened streams), within one share of $SHARE"
client_stop "$agent"
gateway_stop
