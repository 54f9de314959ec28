#!/usr/bin/env bash
# The open-files limit: the gateway raises its soft limit to the hard one at
# start and says so in one line with the tunnels it can hold; with a hard
# limit too low for the admission limits (--max-handshakes,
# --max-tls-handshakes, --max-tls-queue) it warns, naming them.
source "$(dirname "$0")/lib.sh"

gateway_init
hard=$(ulimit -Hn)
[ "$hard" = unlimited ] && hard=1048576
(ulimit -Sn 256 && gateway_start)
# shellcheck disable=SC2154  # GW_PID was set in the subshell: find it by port
GW_PID=$(ss -Hltnp "sport = :$GW_PORT" | grep -o 'pid=[0-9]*' | head -1 | cut -d= -f2)
[ -n "$GW_PID" ] || fail "cannot find the gateway's pid"
PIDS+=("$GW_PID")
soft=$(awk '/^Max open files/ { print $4 }' "/proc/$GW_PID/limits")
[ "$soft" = "$(ulimit -Hn)" ] || fail "the gateway's soft limit is $soft, not the hard $(ulimit -Hn)"
grep -q 'msg="open-files limit raised to the hard limit.*limit='"$soft"'.*soft_was=256 tunnels_at_most='"$((soft - 64))" \
	"$T/gateway.log" || fail "no line saying the limit was raised from 256 to $soft"
pass "soft limit 256 raised to the hard limit $soft, logged with the tunnels it holds"
kill -TERM "$GW_PID"
wait_until 20 "gateway stopped" bash -c "! kill -0 $GW_PID"

(ulimit -n 200 && gateway_start --max-handshakes 256)
GW_PID=$(ss -Hltnp "sport = :$GW_PORT" | grep -o 'pid=[0-9]*' | head -1 | cut -d= -f2)
PIDS+=("$GW_PID")
grep -q 'level=warn .*msg="open-files limit too low for --max-handshakes.*limit=200 .*max_handshakes=256 max_tls_handshakes=32 max_tls_queue=4096 tunnels_at_most=136' \
	"$T/gateway.log" || fail "no warning about a hard limit of 200"
pass "a hard limit of 200 is too low for --max-handshakes 256: warned"
kill -TERM "$GW_PID"
wait_until 20 "gateway stopped" bash -c "! kill -0 $GW_PID"
