# lib.sh: helpers for integration tests that start the real binaries on
# loopback.  Source it; every process a test starts is stopped by the EXIT
# trap, on success and on failure alike.
#
#   TETHER_BIN  directory with tether-gateway, tether-client, tetherctl
#               (ctest sets it; default build/asan/bin)
set -euo pipefail

TETHER_SRC=${TETHER_SRC:-$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)}
TETHER_BIN=${TETHER_BIN:-$TETHER_SRC/build/asan/bin}
GATEWAY=$TETHER_BIN/tether-gateway
CLIENT=$TETHER_BIN/tether-client
CTL=$TETHER_BIN/tetherctl

T=$(mktemp -d "${TMPDIR:-/tmp}/tether-test.XXXXXX")
TEST_NAME=$(basename "$0" .sh)
PIDS=()
CLEANUP_HOOKS=()   # commands run first at exit (on_cleanup CMD)
GW_PID=
FAILED=0

# LeakSanitizer reports at exit make the process exit non-zero: tests stop
# the gateway with SIGTERM and check its status, so a leak fails the test.
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1}

log() { printf '[%s] %s\n' "$TEST_NAME" "$*" >&2; }

on_cleanup() { CLEANUP_HOOKS+=("$1"); }

cleanup() {
	local rc=$?
	for hook in "${CLEANUP_HOOKS[@]}"; do
		eval "$hook" || true
	done
	# CONT, then TERM: a process a test hook stopped (SIGSTOP) would hold
	# its TERM, and this wait, until the test's timeout.  Not the other
	# way round: a process that ends at once on TERM runs LeakSanitizer's
	# check at exit, which stops it (ptrace's SIGSTOP) and waits for the
	# stop; a CONT sent after the TERM can discard that pending stop, and
	# the check then waits for ever (seen: a replica spinning in it, its
	# tracer in wait4, until ctest's timeout).
	for pid in "${PIDS[@]}"; do
		kill -CONT "$pid" 2>/dev/null || true
		kill "$pid" 2>/dev/null || true
	done
	for pid in "${PIDS[@]}"; do
		wait "$pid" 2>/dev/null || true
	done
	if [ "$rc" -ne 0 ] || [ "$FAILED" -ne 0 ]; then
		log "FAILED; logs follow"
		for f in "$T"/*.log; do
			[ -f "$f" ] || continue
			echo "----- $f (last 40 lines)" >&2
			tail -40 "$f" >&2
		done
	fi
	release_ports
	rm -rf "$T"
	exit "$rc"
}
trap cleanup EXIT

fail() {
	FAILED=1
	log "FAIL: $*"
	exit 1
}

# A write of this shell to a pipe or FIFO whose reader has gone (`echo >&7`
# into a held connect's input) raises SIGPIPE here.  Untrapped, bash runs
# the EXIT trap with $? 0, so cleanup took it for a pass (no logs shown,
# $T removed), and then died of the signal (141).  Trapped, it is a
# failure with the logs like any other.  Subshells and the commands the
# test runs get the default back (bash resets caught signals there): a
# pipeline's writer still ends quietly when its reader is done (`... | head`).
trap 'fail "SIGPIPE: this shell wrote to a pipe or FIFO whose reader has gone (while running: $BASH_COMMAND)"' PIPE

pass() { log "ok: $*"; }

# A TCP port nothing listens on right now, below the kernel's ephemeral
# range (net.ipv4.ip_local_port_range, 32768-60999 by default) so that no
# outgoing connection (a test's own clients, a benchmark's thousands beside
# it) takes it between this pick and the bind it is for, and reserved for
# this test (a directory under /tmp/tether-ports, removed at its exit) so
# that a test running beside it (ctest -j) does not pick it too.
PORT_RESERVED=/tmp/tether-ports
free_port() {
	mkdir -p "$PORT_RESERVED" 2>/dev/null
	python3 - "$PORT_RESERVED" "$T/ports" <<'PY'
import os, random, socket, sys
held, mine = sys.argv[1], sys.argv[2]
lo = int(open("/proc/sys/net/ipv4/ip_local_port_range").read().split()[0])
for _ in range(500):
	p = random.randint(10000, max(10001, lo - 1))
	s = socket.socket()
	try:
		s.bind(("127.0.0.1", p))
	except OSError:
		continue
	finally:
		s.close()
	try:
		os.mkdir(os.path.join(held, str(p)))
	except OSError:
		continue
	with open(mine, "a") as f:
		f.write("%d\n" % p)
	print(p)
	sys.exit(0)
s = socket.socket()    # no reservable port: the kernel's pick
s.bind(("127.0.0.1", 0))
print(s.getsockname()[1])
PY
}

# free_port's reservations of this test, given back at its exit.
release_ports() {
	local p
	[ -f "$T/ports" ] || return 0
	while read -r p; do rmdir "$PORT_RESERVED/$p" 2>/dev/null; done <"$T/ports"
}

# wait_until SECONDS DESCRIPTION CMD...: polls CMD every 50 ms.
wait_until() {
	local limit=$1 what=$2
	shift 2
	local deadline=$((SECONDS + limit))
	until "$@" >/dev/null 2>&1; do
		if [ "$SECONDS" -ge "$deadline" ]; then
			fail "timed out after ${limit}s waiting for: $what"
		fi
		sleep 0.05
	done
}

# lines_match FILE PATTERN...: some line of FILE matches every PATTERN
# (grep's basic expressions).  For a line written after what the test saw
# end (an audit line is written at the end of its loop's pass, the
# client may see its stream end first): wait_until 10 "..." lines_match ...
lines_match() {
	local f=$1 p out
	shift
	out=$(cat "$f") || return 1
	for p in "$@"; do
		out=$(grep -- "$p" <<<"$out") || return 1
	done
}

# late: the gateway's request lines not read whole in the landing's wait
# so far (its debug line: docs/0040; the gateway started --log-level debug).
late() { grep -c 'msg="http: no whole request line' "$T/gateway.log" || true; }
# start_beside NAME [client flags]: starts agent NAME (CLIENT_PID) until it
# is active and the caller's one_each holds (each loop carries one tunnel
# of two): it lands there whichever loop runs its handshake.  Only a
# tunnel whose request line comes later than the landing waits for it
# (LAND_WAIT_MS, 250 ms: a loaded machine) lands on loop 0 whatever the
# counts; the gateway says so (late), and only then is it stopped and
# dialled again (at most 4 tries).
start_beside() {
	local name=$1 try seen
	shift
	for try in 1 2 3 4; do
		seen=$(late)
		client_start "$name" "$@"
		wait_until 30 "$name active" agent_is "$name" active
		one_each && return 0
		[ "$(late)" -gt "$seen" ] && [ "$try" -lt 4 ] ||
			fail "$name landed beside the other tunnel (try $try): $(grep tether_loop_tunnels "$T/each.metrics")"
		log "a request line came late (try $try): $name may have landed on loop 0; again"
		client_stop "$CLIENT_PID"
		wait_until 30 "$name gone" eval '! agent_is '"$name"' active'
	done
}

# stream_stalled WINDOW COUNTFILE: true once a stream whose reader never
# reads stands still because of it, every buffer on its way full: the
# gateway holds at least half a window of it that it cannot pass on, and
# that, its bytes_down and the source's count (COUNTFILE) are the same
# twice, 1 s apart.  The caller defines src_down (the stream's bytes_down)
# and gw_received (what the gateway received of it from the tunnel so
# far).  A source still for 0.5 s alone was not enough: a socket whose
# window reopened unannounced waits for TCP's probe (0.2 s, doubling), so
# a stream could sit still 2-3 s with nothing held, then move megabytes
# more (test_workers, test_streams).  Leaves the bytes held in $T/held.
stream_stalled() {
	local window=$1 count=$2 s1 d1 h1
	s1=$(cat "$count") && held_at_one_instant && d1=$(cat "$T/down0") &&
		h1=$(cat "$T/held") && [ "$h1" -ge $((window / 2)) ] || return 1
	sleep 1
	held_at_one_instant && [ "$(cat "$T/down0")" = "$d1" ] && [ "$(cat "$T/held")" = "$h1" ] &&
		[ "$(cat "$count")" = "$s1" ]
}
# held_at_one_instant: the bytes the gateway holds of the stream (received
# minus passed on) into $T/held, its bytes_down into $T/down0, read at one
# instant (bytes_down the same around the received read).
held_at_one_instant() {
	local down now again
	down=$(src_down) && now=$(gw_received) && again=$(src_down) && [ "$down" = "$again" ] ||
		return 1
	echo $((now - down)) >"$T/held"
	echo "$down" >"$T/down0"
}

# gateway_init [extra init flags]: a data dir at $T/gw for 127.0.0.1:$GW_PORT.
gateway_init() {
	GW_PORT=${GW_PORT:-$(free_port)}
	GW_URL=https://127.0.0.1:$GW_PORT
	GW_DIR=$T/gw
	"$GATEWAY" init --data-dir "$GW_DIR" --url "$GW_URL" "$@" >"$T/init.out"
	export TETHER_SERVER=$GW_URL TETHER_TOKEN_FILE=$GW_DIR/admin.token TETHER_CACERT=$GW_DIR/ca.crt
}

gateway_ready() {
	curl -sf --cacert "$GW_DIR/ca.crt" "$GW_URL/readyz"
}

# The TLS slot deadlines of the gateways tests start (gateway_start,
# replica_start): serve's defaults (--tls-hello-timeout 1 s,
# --tls-handshake-timeout 3 s) suit a gateway's own machine, but here every
# client shares two loaded cores with the suite at nice 10, and the static
# agents run under qemu-user: from connect to ClientHello the armhf agent
# took 0.35 s at load 16, over 1 s at times (test_agent_static's arm64
# join, test_drain_redial's tetherctl: closed unread, "unexpected eof" /
# SSL_ERROR_SYSCALL).  A test of the deadlines themselves names its own
# (a later flag wins).
TLS_DEADLINES=(--tls-hello-timeout 10000 --tls-handshake-timeout 30000)

# gateway_start [extra serve flags]: starts serve and waits for /readyz.
# SIGTERM closes at once (--drain-timeout $GW_DRAIN_TIMEOUT, default 0)
# unless the test gives its own --drain-timeout (test_drain).
gateway_start() {
	"$GATEWAY" serve --data-dir "$GW_DIR" --listen "127.0.0.1:$GW_PORT" \
		--drain-timeout "${GW_DRAIN_TIMEOUT:-0}" "${TLS_DEADLINES[@]}" "$@" \
		>>"$T/gateway.log" 2>&1 &
	GW_PID=$!
	PIDS+=("$GW_PID")
	wait_until 20 "gateway ready on $GW_URL" gateway_ready
}

# loop_crossings [URL]: how many streams the gateway at URL (default
# $GW_URL) opened over the links between its loops so far
# (tether_loop_link_streams_total, every pair, from its /metrics;
# docs/0040): nonzero once an operator connection on one loop reached a
# tunnel on another (--landing any).
loop_crossings() {
	curl -sf --cacert "$GW_DIR/ca.crt" -H "Authorization: Bearer $(cat "$GW_DIR/admin.token")" \
		"${1:-$GW_URL}/metrics" |
		awk '$1 ~ /^tether_loop_link_streams_total[{]/ { n += $2 } END { print n + 0 }'
}

# gateway_stop: SIGTERM, and the gateway must exit 0 (no leaks, no errors).
gateway_stop() {
	kill -TERM "$GW_PID"
	local rc=0
	wait "$GW_PID" || rc=$?
	[ "$rc" -eq 0 ] || fail "gateway exited $rc after SIGTERM (see gateway.log)"
	GW_PID=
}

ctl() { "$CTL" -o json "$@"; }

cluster_create() { ctl cluster create "$1" | jq -er .id; }

# join_node NAME DOCFILE [join flags]: joins $T/NAME from a join document.
join_node() {
	local name=$1 doc=$2
	shift 2
	"$CLIENT" join --state-dir "$T/$name" --node-name "$name" "$@" <"$doc"
}

# client_start NAME [run flags]: runs the agent of $T/NAME in the
# background; sets CLIENT_PID.
client_start() {
	"$CLIENT" run --state-dir "$T/$1" "${@:2}" >>"$T/client-$1.log" 2>&1 &
	CLIENT_PID=$!
	PIDS+=("$CLIENT_PID")
}

# client_stop PID: SIGTERM, the agent must exit 0.
client_stop() {
	kill -TERM "$1"
	local rc=0
	wait "$1" || rc=$?
	[ "$rc" -eq 0 ] || fail "tether-client exited $rc after SIGTERM"
}

agent_field() { # agent_field AGENT_ID FIELD
	ctl agent list | jq -er --arg id "$1" --arg f "$2" '.[] | select(.id == $id) | .[$f]'
}

agent_id_of() { # agent_id_of NODE
	jq -er .agent_id "$T/$1/state.json"
}

# held_connect CLUSTER NODE TARGET OUT [ERR]: `tetherctl connect` to TARGET
# through NODE, its input the FIFO $T/in held open on fd 7 (write with >&7,
# end the input with `exec 7>&-`), its output in OUT and its errors appended
# to ERR (default /dev/null).  Sets HELD_PID.
held_connect() {
	local cid=$1 node=$2 target=$3 out=$4 err=${5:-/dev/null}
	rm -f "$T/in"
	mkfifo "$T/in"
	"$CTL" connect --cluster "$cid" --node "$node" "$target" <"$T/in" >"$out" 2>>"$err" &
	HELD_PID=$!
	PIDS+=("$HELD_PID")
	exec 7>"$T/in"
}

# held_echo_dial NAME CLUSTER PORT: a `tetherctl connect --cluster CLUSTER
# 127.0.0.1:PORT` to an echo server, held open once a line came back through
# it (its stream is up), for as many at once as a test needs (held_connect
# holds one); its pid in $T/NAME.pid, it and its holder in PIDS.
held_echo_dial() {
	local name=$1 cid=$2 port=$3
	rm -f "$T/$name.ready"
	/usr/bin/python3 - "$CTL" "$cid" "$port" "$T/$name.pid" "$T/$name.ready" <<'PY' &
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
	wait_until 20 "dial $name's echo" test -s "$T/$name.ready"
	PIDS+=("$(cat "$T/$name.pid")")
}

agent_is() { # agent_is NODE STATE: registered, connected and in STATE
	local id
	id=$(jq -er '.agent_id | select(. != "")' "$T/$1/state.json") || return 1
	ctl agent list | jq -e --arg id "$id" --arg s "$2" \
		'.[] | select(.id == $id and .state == $s and .connected == true)' >/dev/null
}

# expect_exit CODE CMD...: runs CMD, checks its exit code, keeps its stderr in $T/last.err
expect_exit() {
	local want=$1
	shift
	local rc=0
	"$@" >"$T/last.out" 2>"$T/last.err" || rc=$?
	if [ "$rc" -ne "$want" ]; then
		cat "$T/last.err" >&2
		fail "expected exit $want, got $rc: $*"
	fi
}

assert_contains() { # assert_contains FILE TEXT
	grep -qF -- "$2" "$1" || { cat "$1" >&2; fail "$1 does not contain: $2"; }
}

assert_mode() { # assert_mode FILE MODE
	local m
	m=$(stat -c %a "$1")
	[ "$m" = "$2" ] || fail "$1 has mode $m, want $2"
}

# nginx_start NAME LINES: a private nginx (package nginx-light) in the
# foreground, every file it writes under $T, with LINES inside its http {}
# block (servers, log formats).  The PID joins PIDS; wait for its port.
nginx_start() {
	local name=$1 lines=$2
	cat >"$T/$name.conf" <<CONF
daemon off;
pid $T/$name.pid;
error_log $T/$name-error.log;
events { worker_connections 64; }
http {
    default_type application/json;
    client_body_temp_path $T/$name-body;
    proxy_temp_path $T/$name-proxy;
    fastcgi_temp_path $T/$name-fastcgi;
    uwsgi_temp_path $T/$name-uwsgi;
    scgi_temp_path $T/$name-scgi;
$lines
}
CONF
	chmod 755 "$T"   # nginx's workers do not run as root
	nginx -c "$T/$name.conf" -p "$T" &
	PIDS+=($!)
}

# pg_start: a private PostgreSQL (Debian's postgresql package) on a free
# loopback port, its cluster and socket under $T/pg, trust authentication on
# loopback only, an empty database "tether".  Sets PG_PORT and PG_URL
# (postgres://postgres@127.0.0.1:PORT/tether); stopped at exit.
# initdb and postgres refuse to run as root: as root they run as postgres.
pg_start() {
	local bin
	bin=$(ls -d /usr/lib/postgresql/*/bin | sort -V | tail -1)
	PG_BIN=$bin
	PG_PORT=$(free_port)
	PG_DIR=$T/pg
	PG_AS=()
	mkdir -p "$PG_DIR"
	if [ "$(id -u)" = 0 ]; then
		chmod 711 "$T"   # the postgres user reaches $T/pg, nothing else
		chown postgres "$PG_DIR"
		PG_AS=(runuser -u postgres --)
	fi
	"${PG_AS[@]}" "$bin/initdb" -D "$PG_DIR/db" -A trust -U postgres \
		>"$T/pg-initdb.log" 2>&1 || fail "initdb failed (see pg-initdb.log)"
	on_cleanup pg_stop
	# The free port can be taken before the server binds it (other tests
	# pick ports too): another port, a few times.
	local try
	for try in 1 2 3 4; do
		pg_ctl_start && break
		grep -q 'Address already in use' "$PG_DIR/log" || break
		[ "$try" -lt 4 ] || break
		PG_PORT=$(free_port)
	done
	[ -f "$PG_DIR/db/postmaster.pid" ] ||
		{ cat "$PG_DIR/log" >&2; fail "PostgreSQL did not start"; }
	psql -X -q -h 127.0.0.1 -p "$PG_PORT" -U postgres -d postgres \
		-c 'CREATE DATABASE tether' || fail "cannot create the database"
	PG_URL=postgres://postgres@127.0.0.1:$PG_PORT/tether
}

# pg_ctl_start: (re)starts the cluster pg_start made on $PG_PORT; waits
# until it accepts.  Non-zero (the reason in $PG_DIR/log) if it did not.
pg_ctl_start() {
	rm -f "$PG_DIR/log"
	"${PG_AS[@]}" "$PG_BIN/pg_ctl" -D "$PG_DIR/db" -w -t 60 -l "$PG_DIR/log" \
		-o "-p $PG_PORT -k $PG_DIR -c listen_addresses=127.0.0.1" start \
		>/dev/null 2>&1
}

pg_stop() {
	[ -f "$PG_DIR/db/postmaster.pid" ] || return 0
	"${PG_AS[@]}" "$PG_BIN/pg_ctl" -D "$PG_DIR/db" -m fast -w stop >/dev/null
}

# pg_freeze: SIGSTOP to the PostgreSQL this test started (the postmaster
# and every backend: the gateways' open connections hang, none is refused);
# pg_thaw: SIGCONT to the same processes.  A frozen store is thawed at exit.
PG_FROZEN=()
pg_freeze() {
	local pm
	pm=$(head -1 "$PG_DIR/db/postmaster.pid")
	PG_FROZEN=("$pm" $(ps -o pid= --ppid "$pm"))
	[ "${#PG_FROZEN[@]}" -ge 2 ] || fail "no PostgreSQL backends under $pm to freeze"
	on_cleanup pg_thaw
	kill -STOP "${PG_FROZEN[@]}"
}
pg_thaw() {
	[ "${#PG_FROZEN[@]}" -eq 0 ] || kill -CONT "${PG_FROZEN[@]}" 2>/dev/null || true
	PG_FROZEN=()
}

# pg_query SQL: one value from the test's database (unaligned, no header).
pg_query() {
	psql -X -qAt -h 127.0.0.1 -p "$PG_PORT" -U postgres -d tether -c "$1"
}

# ---- replicas of one gateway on a shared store, behind haproxy ----
# (docs/0017, 0020, 0023)  Call gateway_init --store "$PG_URL" first.
#
# replica_start N [serve flags]: replica N serves a copy of $GW_DIR's
# certificates and gateway.json ($T/rN) on 127.0.0.1:${RPORT[N]}, --store
# $PG_URL, --replica-id rN unless the flags give one (or REPLICA_NO_ID=1:
# the default, the host name); its peers reach it on
# its main port (--peer-url), or, with REPLICA_PEER_LISTEN=1, on a peer port
# of its own ${PPORT[N]} (--peer-listen).  Ports are kept across restarts;
# --drain-timeout is REPLICA_DRAIN_MS (default 0).  Flags in the array
# REPLICA_FLAGS go to every replica.  Logs to $T/replicaN.log; sets RPID[N].
declare -a RPORT PPORT RPID
REPLICA_FLAGS=()
REPLICA_PEER_LISTEN=${REPLICA_PEER_LISTEN:-0}
replica_start() {
	local n=$1 d=$T/r$1 id=() peer
	shift
	mkdir -p -m 700 "$d"
	cp "$GW_DIR/ca.crt" "$GW_DIR/server.crt" "$GW_DIR/server.key" "$GW_DIR/peer.crt" "$GW_DIR/peer.key" \
		"$GW_DIR/gateway.json" "$d/"
	RPORT[$n]=${RPORT[$n]:-$(free_port)}
	peer=(--peer-url "https://127.0.0.1:${RPORT[$n]}")
	if [ "$REPLICA_PEER_LISTEN" = 1 ]; then
		PPORT[$n]=${PPORT[$n]:-$(free_port)}
		peer=(--peer-listen "127.0.0.1:${PPORT[$n]}"
			--peer-url "https://127.0.0.1:${PPORT[$n]}")
	fi
	[ -n "${REPLICA_NO_ID:-}" ] || [[ " $* " == *" --replica-id "* ]] ||
		id=(--replica-id "r$n")
	"$GATEWAY" serve --data-dir "$d" --listen "127.0.0.1:${RPORT[$n]}" \
		--store "$PG_URL" "${id[@]}" "${peer[@]}" \
		--drain-timeout "${REPLICA_DRAIN_MS:-0}" "${TLS_DEADLINES[@]}" \
		"${REPLICA_FLAGS[@]}" "$@" \
		>>"$T/replica$n.log" 2>&1 &
	RPID[$n]=$!
	PIDS+=("${RPID[$n]}")
}

# echo_server_start: a line echo server on loopback (tcpserver.py echo);
# sets echo_port.
echo_server_start() {
	/usr/bin/python3 "$TETHER_SRC/tests/integration/tcpserver.py" echo "$T/echo.port" &
	PIDS+=($!)
	wait_until 10 "echo server" test -s "$T/echo.port"
	echo_port=$(cat "$T/echo.port")
}

# two_replicas_on_pg [serve flags]: a private PostgreSQL, a data dir whose
# --url names replica 2, an echo server (echo_port), and replicas 1 and 2
# started with the flags and ready.
two_replicas_on_pg() {
	pg_start
	RPORT[1]=$(free_port)
	RPORT[2]=$(free_port)
	gateway_init --store "$PG_URL" --url "https://127.0.0.1:${RPORT[2]}"
	echo_server_start
	replica_start 1 "$@"
	replica_start 2 "$@"
	local i
	for i in 1 2; do wait_until 30 "replica $i ready" replica_ready "$i"; done
}

replica_ready() { # replica_ready N: its /readyz answers 200
	curl -sf --cacert "$GW_DIR/ca.crt" "https://127.0.0.1:${RPORT[$1]}/readyz"
}

# replica_readyz N: its /readyz status code (000: no answer), the body in
# $T/readyzN.body.
replica_readyz() {
	curl -s -o "$T/readyz$1.body" -w '%{http_code}' --max-time 5 \
		--cacert "$GW_DIR/ca.crt" "https://127.0.0.1:${RPORT[$1]}/readyz" || true
}

on() { # on N CTL-ARGS...: tetherctl -o json against replica N directly
	TETHER_SERVER=https://127.0.0.1:${RPORT[$1]} ctl "${@:2}"
}

# replica_stop N: SIGTERM; the replica must exit 0.
replica_stop() {
	kill -TERM "${RPID[$1]}"
	local rc=0
	wait "${RPID[$1]}" || rc=$?
	[ "$rc" -eq 0 ] || fail "replica $1 exited $rc after SIGTERM (see replica$1.log)"
}

# haproxy_pool PORT BALANCE N...: a haproxy frontend on 127.0.0.1:PORT and
# its backend over replicas N... (TCP: TLS passes through to them), BALANCE
# roundrobin, leastconn or source, each replica checked on /readyz with the
# server options HAPROXY_CHECK.  Prints the lines for haproxy_start.
# With `timeout check` set, haproxy bounds a check's connect, its TLS
# handshake included, by min(timeout connect, the interval): at 300 ms, a
# handshake slowed by a loaded machine failed the check ("Layer6 timeout,
# check duration: 301ms") and fall 1 took a live replica out (test_ha:
# two of three at once; a backend left with none closes new connections
# at once).  So the default checks a live replica every 2 s (its handshake
# has 2 s) and one that is out every 300 ms (downinter: back as soon as it
# answers 200); out at the first failure.  A replica that stops answering
# (503 while draining, refused, hung) is out within about 2 s plus the
# check's time, up to 4 s when hung (the handshake's 2 s): a test that
# SIGTERMs a replica with a drain while traffic goes through haproxy
# gives it a --drain-grace longer than that (test_ha: 3000; with
# REPLICA_DRAIN_MS 0, the default, the grace is 0 too, capped by
# --drain-timeout: the replica closes at once, and a connect haproxy sends
# it meanwhile is refused, retried and redispatched), and a test that
# needs a replica out before it goes on waits for haproxy's line
# ("rN is DOWN": haproxy_downs), not a sleep.
HAPROXY_CHECK=${HAPROXY_CHECK:-inter 2s downinter 300 fall 1 rise 1}
haproxy_pool() {
	local port=$1 balance=$2 n
	shift 2
	printf 'frontend fe%s\n\tbind 127.0.0.1:%s\n\tdefault_backend be%s\n' "$port" "$port" "$port"
	printf 'backend be%s\n\tbalance %s\n\toption httpchk GET /readyz\n' "$port" "$balance"
	for n in "$@"; do
		printf '\tserver r%s 127.0.0.1:%s check check-ssl verify none %s\n' \
			"$n" "${RPORT[$n]}" "$HAPROXY_CHECK"
	done
}

# haproxy_start NAME POOLS: Debian's haproxy in the foreground with the
# frontends and backends POOLS (haproxy_pool's lines); its PID in HAPROXY_PID.
# A check waits up to 2 s for its answer once connected (timeout check): a
# replica's 503 is still heard at once, but on a loaded machine a slow 200
# no longer counts as a failure (the default, inter's 300 ms, took every
# replica out at once under a load average of 20: the test's next request
# then failed).  Its connect and TLS handshake are still bounded by the
# interval (haproxy_pool).
# Its log ($T/NAME.log) has a line per connection when it ends (tcplog:
# accepted at [date:time], frontend, backend/server, times, bytes, and the
# termination state, "--" when normal) and each server's state changes.
haproxy_start() {
	command -v haproxy >/dev/null || fail "haproxy is not installed (config/setup.sh)"
	cat >"$T/$1.cfg" <<CFG
global
	maxconn 512
	log stderr format short local0 info
defaults
	mode tcp
	log global
	option tcplog
	timeout connect 2s
	timeout client 60s
	timeout server 60s
	timeout check 2s
	retries 3
	option redispatch
$2
CFG
	TZ=UTC haproxy -db -f "$T/$1.cfg" >>"$T/$1.log" 2>&1 &
	HAPROXY_PID=$!
	PIDS+=("$HAPROXY_PID")
}

# haproxy_downs NAME N: how many times haproxy NAME (haproxy_start's) has
# taken replica N out of a backend: its log lines "<1>Server beP/rN is
# DOWN, reason: ..." (the same change is also on a [WARNING] line).
haproxy_downs() {
	grep -c ">Server be[0-9]*/r$2 is DOWN" "$T/$1.log" || true
}

# sshd_start: a private sshd on 127.0.0.1:$SSH_PORT (key authentication
# only), its files under $T/ssh; the client's key is $T/ssh/user_key.
# ssh_via ARGS...: ssh to it with that key, no host key checks.
sshd_start() {
	SSH_PORT=$(free_port)
	mkdir -p "$T/ssh" /run/sshd
	ssh-keygen -q -t ed25519 -N '' -f "$T/ssh/host_key"
	ssh-keygen -q -t ed25519 -N '' -f "$T/ssh/user_key"
	cp "$T/ssh/user_key.pub" "$T/ssh/authorized_keys"
	cat >"$T/ssh/sshd_config" <<CONF
Port $SSH_PORT
ListenAddress 127.0.0.1
HostKey $T/ssh/host_key
AuthorizedKeysFile $T/ssh/authorized_keys
PidFile $T/ssh/sshd.pid
UsePAM no
StrictModes no
PasswordAuthentication no
PermitRootLogin prohibit-password
CONF
	/usr/sbin/sshd -D -e -f "$T/ssh/sshd_config" 2>>"$T/sshd.log" &
	PIDS+=($!)
}
ssh_via() {
	ssh -F /dev/null -i "$T/ssh/user_key" -o StrictHostKeyChecking=no \
		-o UserKnownHostsFile=/dev/null -o BatchMode=yes -o LogLevel=ERROR "$@"
}

# squid_start AUTH_LINES [FILE...]: Debian's squid on 127.0.0.1:$SQUID_PORT (no cache,
# no daemon), allowing only authenticated clients; AUTH_LINES are its
# auth_param lines (@DIR@ in them becomes $SQUID_DIR).  Each FILE (a helper
# script) is copied into $SQUID_DIR first: squid runs its helpers as its
# own user, who may not reach the checkout (a clone under /root, 0700).  Its config, pid file and logs live in $SQUID_DIR, a
# directory of its own that squid's user (proxy, when started as root) can
# write; access.log shows each CONNECT with its user.
squid_start() {
	SQUID_PORT=$(free_port)
	SQUID_DIR=$(mktemp -d "${TMPDIR:-/tmp}/tether-squid.XXXXXX")
	on_cleanup "rm -rf '$SQUID_DIR'"
	chmod 755 "$SQUID_DIR"
	local auth=$1 f
	shift
	for f in "$@"; do
		install -m 0755 "$f" "$SQUID_DIR/"
	done
	if [ "$(id -u)" -eq 0 ]; then chown -R proxy "$SQUID_DIR"; fi
	cat >"$SQUID_DIR/squid.conf" <<CONF
http_port 127.0.0.1:$SQUID_PORT
pid_filename $SQUID_DIR/squid.pid
cache_log $SQUID_DIR/cache.log
access_log stdio:$SQUID_DIR/access.log squid
netdb_filename none
coredump_dir $SQUID_DIR
cache deny all
cache_mem 4 MB
icp_port 0
htcp_port 0
pinger_enable off
shutdown_lifetime 0 seconds
${auth//@DIR@/$SQUID_DIR}
acl authed proxy_auth REQUIRED
http_access allow authed
http_access deny all
CONF
	squid -N -f "$SQUID_DIR/squid.conf" >>"$T/squid.log" 2>&1 &
	SQUID_PID=$!
	PIDS+=("$SQUID_PID")
	wait_until 30 "squid on $SQUID_PORT" python3 -c \
		'import socket,sys; socket.create_connection(("127.0.0.1", int(sys.argv[1])), 1)' "$SQUID_PORT"
}
