#!/usr/bin/env bash
# systemd: both units pass `systemd-analyze verify`, and the daemons speak
# sd_notify for real (a unix datagram socket this test listens on plays
# systemd): READY=1 only once the gateway's port is open, WATCHDOG=1 at half
# WATCHDOG_USEC, STATUS= with the agent's state, STOPPING=1 on SIGTERM.
# The gateway's NOTIFY_SOCKET is a path, the agent's an abstract socket
# (@NAME): both forms sd_notify(3) defines.
source "$(dirname "$0")/lib.sh"

# -- the unit files.  ExecStart must name an existing binary: a copy of each
# unit in $T differs only in /usr/bin/ -> this build's bin directory (and
# the test checks that nothing else differs).  --man=no: the man pages are
# installed by the package, not present in a build tree.
units=$TETHER_SRC/config/systemd
mkdir -p "$T/units"
for u in tether-gateway tether-client; do
	sed "s#/usr/bin/#$TETHER_BIN/#g" "$units/$u.service" >"$T/units/$u.service"
	ndiff=$(diff "$units/$u.service" "$T/units/$u.service" | grep -c '^>' || true)
	[ "$ndiff" -eq 1 ] || fail "$u.service: expected only ExecStart to change, $ndiff lines did"
	grep -q "^ExecStart=$TETHER_BIN/$u " "$T/units/$u.service" || fail "$u.service: ExecStart not rewritten"
	grep -q '^Type=notify$' "$T/units/$u.service" || fail "$u.service is not Type=notify"
done
mkdir -p "$T/units/tether-gateway.service.d"
cp "$units/tether-gateway-port443.conf" "$T/units/tether-gateway.service.d/port443.conf"
systemd-analyze verify --man=no "$T/units/tether-gateway.service" "$T/units/tether-client.service" \
	>"$T/verify.log" 2>&1 || { cat "$T/verify.log" >&2; fail "systemd-analyze verify failed"; }
[ ! -s "$T/verify.log" ] || { cat "$T/verify.log" >&2; fail "systemd-analyze verify printed warnings"; }
pass "systemd-analyze verify passes on both units (and the port-443 drop-in), no warnings"
# The agent is restarted after any exit but an operator's revocation (77).
grep -qx 'Restart=always' "$units/tether-client.service" ||
	fail "tether-client.service: not Restart=always"
[ "$(grep '^RestartPreventExitStatus=' "$units/tether-client.service")" = RestartPreventExitStatus=77 ] ||
	fail "tether-client.service: RestartPreventExitStatus is not 77 alone"
pass "tether-client.service restarts the agent after any exit but 77 (revoked)"

# -- sd_notify from the gateway.
notify_start() { # notify_start NAME [PORT] [SOCKET]: sets NOTIFY_SOCKET, waits for the listener
	local sock=${3:-$T/$1.sock}
	python3 "$TETHER_SRC/tests/integration/notify_listen.py" "$sock" "$T/$1.notify" ${2:-} &
	PIDS+=($!)
	wait_until 10 "notify listener $1" grep -q listening "$T/$1.notify"
	export NOTIFY_SOCKET=$sock
}
count() { grep -c "^$2\$" "$1" || true; }
at_least() { [ "$(count "$1" "$2")" -ge "$3" ]; }

gateway_init
notify_start gw "$GW_PORT"
# 600 ms: WATCHDOG=1 every 300 ms.
WATCHDOG_USEC=600000 gateway_start
wait_until 10 "READY=1 from the gateway" grep -q '^READY=1$' "$T/gw.notify"
[ "$(sed -n '/^READY=1$/{n;p;q}' "$T/gw.notify")" = port-open ] ||
	fail "READY=1 arrived before the port was open: $(cat "$T/gw.notify")"
pass "the gateway sends READY=1 once its port accepts connections"
wait_until 10 "three WATCHDOG=1 from the gateway" at_least "$T/gw.notify" WATCHDOG=1 3
assert_contains "$T/gateway.log" "msg=\"systemd watchdog\" interval_ms=300"
pass "WATCHDOG=1 arrives from the gateway's loop at half WATCHDOG_USEC"

# -- and from the agent, which reports its state in STATUS=.
cid=$(cluster_create sd)
ctl token create --cluster "$cid" >"$T/join.json"
join_node n1 "$T/join.json" >/dev/null
notify_start client "" "@tether-test-$$-client"
WATCHDOG_USEC=600000 client_start n1
unset NOTIFY_SOCKET
wait_until 20 "n1 active" agent_is n1 active
wait_until 10 "READY=1 from the agent" grep -q '^READY=1$' "$T/client.notify"
wait_until 10 "STATUS= with the active state" grep -q '^STATUS=agent active, tunnel up$' "$T/client.notify"
wait_until 10 "three WATCHDOG=1 from the agent" at_least "$T/client.notify" WATCHDOG=1 3
[ "$(count "$T/client.notify" STOPPING=1)" -eq 0 ] || fail "STOPPING=1 before any signal"
client_stop "$CLIENT_PID"
assert_contains "$T/client.notify" "STOPPING=1"
pass "the agent (abstract NOTIFY_SOCKET): READY=1, STATUS=agent active, tunnel up, WATCHDOG=1, STOPPING=1 on SIGTERM"

# Revoked: exit 77, and STATUS= says it stays stopped and why.
notify_start revoked
client_start n1
unset NOTIFY_SOCKET
wait_until 20 "n1 active again" agent_is n1 active
ctl agent revoke "$(agent_id_of n1)" >/dev/null
rc=0
wait "$CLIENT_PID" || rc=$?
[ "$rc" -eq 77 ] || fail "the revoked agent exited $rc, want 77"
wait_until 10 "STATUS= saying why it stopped" grep -qx \
	'STATUS=stopped for good: revoked by an operator (exit 77, not restarted): agent revoked by an operator' \
	"$T/revoked.notify"
pass "a revoked agent exits 77 with STATUS=stopped for good: revoked by an operator ..."

[ "$(count "$T/gw.notify" STOPPING=1)" -eq 0 ] || fail "gateway sent STOPPING=1 before any signal"
gateway_stop
assert_contains "$T/gw.notify" "STOPPING=1"
pass "the gateway sends STOPPING=1 on SIGTERM and exits 0"

# Without WATCHDOG_USEC there is no watchdog.
: >"$T/gateway.log"
notify_start gw2
gateway_start
unset NOTIFY_SOCKET
wait_until 10 "READY=1" grep -q '^READY=1$' "$T/gw2.notify"
gateway_stop
[ "$(count "$T/gw2.notify" WATCHDOG=1)" -eq 0 ] || fail "WATCHDOG=1 without WATCHDOG_USEC"
pass "no WATCHDOG_USEC, no watchdog"

# -- the units' SystemCallFilter (@system-service, then ~@privileged) would
# refuse any other system call: trace both daemons through a whole run
# (start, registration, a stream, stop) and check every call.  They run as
# an unprivileged user, as under the units' User= (SQLite, for one, fchowns
# its journal files only when run as root).
echo_port_file=$T/echo.port
python3 "$TETHER_SRC/tests/integration/tcpserver.py" echo "$echo_port_file" &
PIDS+=($!)
wait_until 10 "echo server" test -s "$echo_port_file"
echo_port=$(cat "$echo_port_file")
traced() { # traced NAME CMD...: CMD under strace -f, in the background; sets TRACED_PID
	local name=$1
	shift
	# LeakSanitizer stops the world with ptrace, which strace holds:
	# leaks are checked by the untraced runs above.
	ASAN_OPTIONS=detect_leaks=0 strace -f -qq -u "$TRACE_USER" -o "$T/$name.strace" \
		"$@" >>"$T/$name.log" 2>&1 &
	TRACED_PID=$!
	PIDS+=("$TRACED_PID")
}
stop_traced() { # stop_traced STRACE_PID: SIGTERM to the daemon, its exit status must be 0
	local child rc=0
	child=$(pgrep -P "$1")
	kill -TERM "$child"
	wait "$1" || rc=$?
	[ "$rc" -eq 0 ] || fail "traced daemon exited $rc"
}
TRACE_USER=nobody
chmod 711 "$T"
# The unprivileged user runs copies: the build tree may sit under a
# directory it cannot enter (a clone in /root, as on a fresh machine).
mkdir -m 755 "$T/traced-bin"
install -m 755 "$GATEWAY" "$CLIENT" "$T/traced-bin/"
chown -R "$TRACE_USER" "$GW_DIR"
traced gateway-traced "$T/traced-bin/tether-gateway" serve --data-dir "$GW_DIR" --listen "127.0.0.1:$GW_PORT"
gw_traced=$TRACED_PID
wait_until 30 "traced gateway ready" gateway_ready
ctl token create --cluster "$cid" >"$T/join2.json"
join_node n2 "$T/join2.json" --allow "127.0.0.1:$echo_port" >/dev/null
chown -R "$TRACE_USER" "$T/n2"
traced client-traced "$T/traced-bin/tether-client" run --state-dir "$T/n2"
client_traced=$TRACED_PID
wait_until 30 "traced agent active" agent_is n2 active
out=$(printf 'ping' | "$CTL" connect --cluster "$cid" --node n2 "127.0.0.1:$echo_port") ||
	fail "stream through the traced daemons failed"
[ "$out" = ping ] || fail "stream echoed \"$out\""
stop_traced "$client_traced"
stop_traced "$gw_traced"
for d in gateway client; do
	res=$(python3 "$TETHER_SRC/tests/integration/syscall_check.py" "$T/$d-traced.strace") ||
		fail "$d: $res"
	log "$d: $res"
done
pass "every system call of both daemons (start, register, a stream, stop) passes the units' SystemCallFilter"
