#!/usr/bin/env bash
# A deadline is judged after what came in time was read.
#
# A gateway whose loop stalls past a deadline (a busy machine) sees the
# expired timer in the pass whose read callbacks are deferred to the next:
# what arrived in time must be read before the deadline is judged.  The
# gateway is stopped (SIGSTOP) for 1.5 s right after the answer reaches its
# socket (deadline_stall.py): a HELLO sent after the 101 (--hello-timeout
# 500) must be answered CHALLENGE, and a PONG to its ping (--ping-timeout
# 700) must keep the tunnel.  With one loop, and with two (--landing any).
source "$(dirname "$0")/lib.sh"

DEADLINES=(--hello-timeout 500 --handshake-timeout 30000 --ping-interval 300 --ping-timeout 700)
on_cleanup '[ -z "$GW_PID" ] || kill -CONT "$GW_PID" 2>/dev/null'

gateway_init
for loops in "--workers 1" "--workers 2 --landing any"; do
	: >"$T/gateway.log"
	# shellcheck disable=SC2086
	gateway_start "${DEADLINES[@]}" $loops
	for case in hello ping; do
		out=$(python3 "$TETHER_SRC/tests/integration/deadline_stall.py" "$GW_PORT" \
			"$GW_DIR/ca.crt" "$GW_PID" 1.5 "$case") ||
			fail "$loops, $case: $out ($(grep -E 'no HELLO within|no answer to a ping' \
				"$T/gateway.log" | tail -1))"
		pass "$loops, $case: $out"
	done
	! grep -E 'no HELLO within|no answer to a ping' "$T/gateway.log" ||
		fail "$loops: a deadline was judged before what came in time was read"
	gateway_stop
done
