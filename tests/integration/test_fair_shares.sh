#!/usr/bin/env bash
# Fair shares of the stream budget (docs/0006, "Fair shares"): one user
# holding hundreds of idle streams through `tetherctl forward` into one
# cluster is held to its share (--principal-share), and another user's
# connect to another cluster, and an admin's to the same cluster, still go
# through.  Before the shares, the first user took the whole process budget
# and every other connect was refused with "busy".
source "$(dirname "$0")/lib.sh"

py=/usr/bin/python3
$py "$TETHER_SRC/tests/integration/tcpserver.py" echo "$T/echo.port" &
PIDS+=($!)
wait_until 10 "echo server" test -s "$T/echo.port"
echo_port=$(cat "$T/echo.port")

gateway_init
gateway_start
cid_a=$(cluster_create shares-a)
cid_b=$(cluster_create shares-b)
for c in a b; do
	cid_var=cid_$c
	ctl token create --cluster "${!cid_var}" >"$T/join-$c.json"
	join_node "n$c" "$T/join-$c.json" --allow "127.0.0.1:$echo_port" >/dev/null
	client_start "n$c"
done
wait_until 20 "na active" agent_is na active
wait_until 20 "nb active" agent_is nb active
alice=$(ctl user create alice --cluster "$cid_a" | jq -er .token)
bob=$(ctl user create bob --cluster "$cid_b" | jq -er .token)

# Alice forwards a port into cluster A and opens 300 connections through
# it, each proven live by an echoed byte, and holds them all, idle.
fwd_port=$(free_port)
env -u TETHER_TOKEN_FILE TETHER_TOKEN="$alice" "$CTL" forward --cluster "$cid_a" \
	"127.0.0.1:$fwd_port:127.0.0.1:$echo_port" 2>>"$T/forward.log" &
PIDS+=($!)
port_open() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }
wait_until 20 "forward listening" port_open "$fwd_port"
$py - "$fwd_port" 300 "$T/held" <<'PY' &
import socket, sys, time
port, want, out = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
held = []
for i in range(want):
    s = socket.create_connection(("127.0.0.1", port), timeout=10)
    try:
        s.sendall(b"x")
        if s.recv(1) == b"x":
            held.append(s)
            continue
    except OSError:
        pass
    s.close()
with open(out + ".tmp", "w") as f:
    f.write("%d\n" % len(held))
import os
os.rename(out + ".tmp", out)
time.sleep(600)
PY
PIDS+=($!)
wait_until 120 "alice's 300 connection attempts" test -s "$T/held"
held=$(cat "$T/held")
log "alice holds $held idle streams of 300 tried"
[ "$held" -ge 50 ] || fail "alice got only $held streams: her share should allow about 100"
[ "$held" -lt 300 ] || fail "alice holds all 300 streams: no share held her back"
assert_contains "$T/forward.log" "share of the stream memory budget of this user or token is spent"
pass "alice holds $held idle streams; the rest were refused at her share"

[ "$(printf 'hello-bob' | env -u TETHER_TOKEN_FILE TETHER_TOKEN="$bob" "$CTL" connect \
	--cluster "$cid_b" "127.0.0.1:$echo_port")" = hello-bob ] ||
	fail "bob's connect to cluster B failed while alice holds her streams"
pass "bob's connect to another cluster goes through"
[ "$(printf 'hello-admin' | "$CTL" connect --cluster "$cid_a" "127.0.0.1:$echo_port")" = hello-admin ] ||
	fail "an admin's connect to cluster A failed while alice holds her streams"
pass "an admin's connect to alice's cluster goes through"

gateway_stop
