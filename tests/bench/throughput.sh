#!/usr/bin/env bash
# throughput.sh: bulk throughput, stream set-up cost, CPU per GiB and memory
# of a stream through Tether, beside direct TCP and the OpenSSH equivalents.
#
# A benchmark, not a test: it reports figures and fails only if it cannot
# set the paths up.  Everything runs on loopback in ONE run, so the ratios
# between paths hold even where the absolute figures move between runs.
#
# Four paths to the same targets (an iperf3 server and an echo server):
#   direct  the client connects to the target itself
#   tether  tetherctl forward (one multiplexed WebSocket per forward) ->
#           tether-gateway -> tether-client run (allowlisting both targets)
#           -> target
#   chain   the OpenSSH way to reach a node behind NAT: the node runs
#           `ssh -N -R RPORT:127.0.0.1:TARGET bastion`, the operator runs
#           `ssh -N -L LPORT:127.0.0.1:RPORT bastion` through the same sshd
#           (a private one on loopback, key auth, aes128-gcm, GatewayPorts
#           no) and connects to LPORT: two encrypted hops, like Tether
#   ssh-R   single-hop reference: the operator connects straight to the
#           bastion's forwarded port RPORT (one encrypted hop)
#
# Measured for every path, interleaved (each measurement runs on all paths
# one after the other, so slow drift of the machine hits all of them):
#   - iperf3 throughput, 1 stream and 8 parallel streams (-P 8), both
#     directions: operator -> node (normal) and node -> operator (-R);
#     the figure is end.sum_received.bits_per_second of `iperf3 -J`
#   - stream set-up: N sequential connect / send 1 byte / read the echo /
#     close (tests/bench/echo_rtt.py), total seconds and p50/p90/p99
#   - CPU seconds (utime + stime from /proc/PID/stat) per GiB moved by the
#     iperf3 runs, for every relay process: tetherctl forward, the gateway
#     and the agent; ssh -L, sshd (all its processes) and ssh -R
#   - VmRSS / VmHWM of those processes after all the runs
#   - each of the gateway's loops' CPU during each Tether iperf3 run and the
#     streams that crossed between loops (its /metrics, tests/bench/loops.sh)
# The iperf3 and echo processes themselves are not counted anywhere.
#
# usage: tests/bench/throughput.sh
#   TETHER_BIN         directory with tether-gateway, tether-client and
#                      tetherctl (default: build/release/bin of this repo)
#   BENCH_SECONDS      seconds per iperf3 run (default 5)
#   BENCH_CONNECTIONS  sequential connections per set-up measurement
#                      (default 1000)
#   BENCH_WORKERS      the gateway's --workers (default: its own default)
#   BENCH_KEEP=1       keep the work directory (logs, iperf3 JSON)
#   BENCH_PRIVATE_NAMES=1  run the Tether copies as bench-gw, bench-agent and
#                      bench-ctl, out of reach of other sessions' pkill -f
# `make bench-throughput` runs it with the defaults (`make bench` runs it
# after idle_agents.sh).
set -euo pipefail

SRC=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
TETHER_BIN=${TETHER_BIN:-$SRC/build/release/bin}
GATEWAY=$TETHER_BIN/tether-gateway
CLIENT=$TETHER_BIN/tether-client
CTL=$TETHER_BIN/tetherctl
SECS=${BENCH_SECONDS:-5}
CONNS=${BENCH_CONNECTIONS:-1000}
KEEP=${BENCH_KEEP:-0}
PRIVATE_NAMES=${BENCH_PRIVATE_NAMES:-0}
PY=/usr/bin/python3
ECHO_RTT=$SRC/tests/bench/echo_rtt.py
TCPSERVER=$SRC/tests/integration/tcpserver.py
COMMAND_LINE=
for v in TETHER_BIN BENCH_SECONDS BENCH_CONNECTIONS BENCH_WORKERS BENCH_PRIVATE_NAMES; do
	[ -z "${!v:-}" ] || COMMAND_LINE+="$v=${!v} "
done
COMMAND_LINE+="$0${*:+ $*}"

say() { printf '[bench] %s\n' "$*" >&2; }
die() { say "error: $*"; exit 1; }

[ $# -eq 0 ] || die "no arguments (usage: $0; see the header for the environment)"
[[ $SECS =~ ^[1-9][0-9]*$ ]] || die "BENCH_SECONDS must be a positive integer, got '$SECS'"
[[ $CONNS =~ ^[1-9][0-9]*$ ]] || die "BENCH_CONNECTIONS must be a positive integer, got '$CONNS'"
for b in "$GATEWAY" "$CLIENT" "$CTL"; do
	[ -x "$b" ] || die "$b missing: run 'make build' or set TETHER_BIN"
done
for tool in iperf3 jq curl ssh ssh-keygen ss awk timeout; do
	command -v "$tool" >/dev/null || die "$tool is required"
done
[ -x /usr/sbin/sshd ] || die "/usr/sbin/sshd is required (package openssh-server)"
[ -x "$PY" ] || die "$PY is required"

# --- processes and clean-up ------------------------------------------------

W=$(mktemp -d "${TMPDIR:-/tmp}/tether-bench-tput.XXXXXX")
chmod 755 "$W"
PIDS=()       # every long-running process this script started, in start order
EXTRA_PIDS=() # sshd's per-connection processes (not our children)
CUR_PID=      # the iperf3 client or echo client running right now
IPERF_PID=
T_START=$SECONDS
LOAD_START=$(cut -d' ' -f1-3 /proc/loadavg)

cleanup() {
	local rc=$?
	trap - EXIT INT TERM
	set +e
	[ -z "$CUR_PID" ] || kill -TERM "$CUR_PID" 2>/dev/null
	# Reverse start order: forwards and clients before what they talk to.
	local i p
	for ((i = ${#PIDS[@]} - 1; i >= 0; i--)); do
		kill -TERM "${PIDS[$i]}" 2>/dev/null
	done
	for p in "${EXTRA_PIDS[@]}"; do
		kill -TERM "$p" 2>/dev/null
	done
	local deadline=$((SECONDS + 5)) alive
	while :; do
		alive=()
		for p in "${PIDS[@]}" "${EXTRA_PIDS[@]}" $CUR_PID; do
			kill -0 "$p" 2>/dev/null && alive+=("$p")
		done
		[ ${#alive[@]} -eq 0 ] && break
		if [ "$SECONDS" -ge "$deadline" ]; then
			say "SIGKILL to ${#alive[@]} process(es) still running after SIGTERM"
			kill -KILL "${alive[@]}" 2>/dev/null
			break
		fi
		sleep 0.1
	done
	wait 2>/dev/null
	if [ "$rc" -ne 0 ]; then
		for f in "$W"/logs/*.log; do
			[ -s "$f" ] || continue
			echo "----- $f (last 15 lines)" >&2
			tail -15 "$f" >&2
		done
	fi
	if [ "$KEEP" = 1 ]; then
		say "work directory kept: $W"
	else
		rm -rf "$W"
	fi
	exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

mkdir -p "$W/logs" "$W/runs" "$W/ssh" "$W/bin"

# Run copies: a `make build` during the run must not change the binaries.
# With BENCH_PRIVATE_NAMES=1 the copies get names without "tether" in them,
# so another session's `pkill -f tetherctl` on a shared machine misses them.
if [ "$PRIVATE_NAMES" = 1 ]; then
	cp "$GATEWAY" "$W/bin/bench-gw"
	cp "$CLIENT" "$W/bin/bench-agent"
	cp "$CTL" "$W/bin/bench-ctl"
	GATEWAY=$W/bin/bench-gw CLIENT=$W/bin/bench-agent CTL=$W/bin/bench-ctl
else
	cp "$GATEWAY" "$CLIENT" "$CTL" "$W/bin/"
	GATEWAY=$W/bin/tether-gateway CLIENT=$W/bin/tether-client CTL=$W/bin/tetherctl
fi

free_port() {
	"$PY" -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1]); s.close()'
}

# listening PORT: something listens on 127.0.0.1:PORT (no connection made).
listening() {
	[ -n "$(ss -Hltn "sport = :$1")" ]
}

# echo_ok PORT: one byte goes to PORT and comes back (the path works end to end).
echo_ok() {
	"$PY" -c '
import socket, sys
s = socket.create_connection(("127.0.0.1", int(sys.argv[1])), timeout=5)
s.sendall(b"x")
sys.exit(0 if s.recv(1) == b"x" else 1)' "$1"
}

# wait_until SECONDS WHAT CMD...: polls CMD every 50 ms; dies after SECONDS.
# Also dies at once if one of the processes started so far has exited.
wait_until() {
	local limit=$1 what=$2
	shift 2
	local deadline=$((SECONDS + limit)) p
	until "$@" >/dev/null 2>&1; do
		for p in "${PIDS[@]}"; do
			kill -0 "$p" 2>/dev/null || die "process $p ($(tr '\0' ' ' <"$W/cmd.$p" 2>/dev/null)) exited while waiting for: $what"
		done
		[ "$SECONDS" -lt "$deadline" ] || die "timed out after ${limit}s waiting for: $what"
		sleep 0.05
	done
}

# start LOG CMD...: runs CMD in the background, output to logs/LOG; sets LAST_PID.
declare -A PNAME   # pid -> its log's name, for reports
start() {
	local log=$1
	shift
	"$@" >>"$W/logs/$log" 2>&1 &
	LAST_PID=$!
	PIDS+=("$LAST_PID")
	PNAME[$LAST_PID]=${log%.log}
	printf '%s\0' "$@" >"$W/cmd.$LAST_PID"
}

# check_alive STAGE: notes every process that has exited since the last
# check, with its exit status and the stage after which it was found gone.
DEATHS=()
declare -A DEAD
check_alive() {
	local p rc
	for p in "${PIDS[@]}"; do
		[ -z "${DEAD[$p]:-}" ] || continue
		kill -0 "$p" 2>/dev/null && continue
		rc=0
		wait "$p" 2>/dev/null || rc=$?
		DEAD[$p]=1
		DEATHS+=("${PNAME[$p]:-pid $p} (pid $p) exited with status $rc, found after: $1 (+$((SECONDS - T_START))s)")
		say "warning: ${DEATHS[-1]}"
	done
}

# fg_run OUT CMD...: runs CMD in the background (so signals reach our trap),
# stdout to OUT, stderr to OUT.err; returns its status.
fg_run() {
	local out=$1 rc=0
	shift
	"$@" >"$out" 2>"$out.err" &
	CUR_PID=$!
	wait "$CUR_PID" || rc=$?
	CUR_PID=
	return "$rc"
}

# --- targets -----------------------------------------------------------------

start echo.log "$PY" "$TCPSERVER" echo "$W/echo.port"
wait_until 10 "echo server" test -s "$W/echo.port"
ECHO_PORT=$(cat "$W/echo.port")

IPERF_PORT=$(free_port)
start_iperf() {
	start iperf3-server.log iperf3 -s -B 127.0.0.1 -p "$IPERF_PORT"
	IPERF_PID=$LAST_PID
	wait_until 10 "iperf3 server on $IPERF_PORT" listening "$IPERF_PORT"
}
# An iperf3 server whose test failed half-way may stay busy: replace it.
restart_iperf() {
	local i
	kill -TERM "$IPERF_PID" 2>/dev/null || true
	wait "$IPERF_PID" 2>/dev/null || true
	for i in "${!PIDS[@]}"; do
		[ "${PIDS[$i]}" != "$IPERF_PID" ] || unset 'PIDS[i]'
	done
	PIDS=("${PIDS[@]}")
	wait_until 10 "iperf3 port $IPERF_PORT free" bash -c "! ss -Hltn 'sport = :$IPERF_PORT' | grep -q ."
	IPERF_RESTARTS=$((IPERF_RESTARTS + 1))
	start_iperf
}
IPERF_RESTARTS=0
start_iperf
wait_until 10 "echo server answers" echo_ok "$ECHO_PORT"

# --- Tether: gateway, agent, two forwards ------------------------------------

GW_PORT=$(free_port)
GW_URL=https://127.0.0.1:$GW_PORT
GW_DIR=$W/gw
"$GATEWAY" init --data-dir "$GW_DIR" --url "$GW_URL" >"$W/logs/init.log" 2>&1 ||
	die "gateway init failed: $(cat "$W/logs/init.log")"
export TETHER_SERVER=$GW_URL TETHER_TOKEN_FILE=$GW_DIR/admin.token TETHER_CACERT=$GW_DIR/ca.crt
GW_MP=$(free_port)
GW_CMD="tether-gateway serve --data-dir DIR --listen 127.0.0.1:$GW_PORT --metrics-listen 127.0.0.1:MPORT${BENCH_WORKERS:+ --workers $BENCH_WORKERS}"
start gateway.log "$GATEWAY" serve --data-dir "$GW_DIR" --listen "127.0.0.1:$GW_PORT" \
	--metrics-listen "127.0.0.1:$GW_MP" ${BENCH_WORKERS:+--workers "$BENCH_WORKERS"}
GW_PID=$LAST_PID
wait_until 20 "gateway ready on $GW_URL" curl -sf --cacert "$GW_DIR/ca.crt" "$GW_URL/readyz"

ctl() { "$CTL" -o json "$@"; }
CID=$(ctl cluster create bench | jq -er .id) || die "cluster create failed"
ctl token create --cluster "$CID" >"$W/join.json" || die "token create failed"
"$CLIENT" join --state-dir "$W/node" --node-name node \
	--allow "127.0.0.1:$IPERF_PORT" --allow "127.0.0.1:$ECHO_PORT" \
	<"$W/join.json" >"$W/logs/join.log" 2>&1 || die "join failed: $(cat "$W/logs/join.log")"
start agent.log "$CLIENT" run --state-dir "$W/node"
AGENT_PID=$LAST_PID
agent_active() {
	local id
	id=$(jq -er '.agent_id | select(. != "")' "$W/node/state.json") || return 1
	ctl agent list | jq -e --arg id "$id" \
		'.[] | select(.id == $id and .state == "active" and .connected == true)' >/dev/null
}
wait_until 30 "the agent connected and active" agent_active

T_IPERF=$(free_port)
T_ECHO=$(free_port)
start fwd-iperf.log "$CTL" forward --cluster "$CID" --node node "127.0.0.1:$T_IPERF:127.0.0.1:$IPERF_PORT"
FWD_PID=$LAST_PID
start fwd-echo.log "$CTL" forward --cluster "$CID" --node node "127.0.0.1:$T_ECHO:127.0.0.1:$ECHO_PORT"
FWD_ECHO_PID=$LAST_PID
wait_until 20 "tetherctl forward listening on $T_IPERF" listening "$T_IPERF"
wait_until 20 "an echo through tetherctl forward on $T_ECHO" echo_ok "$T_ECHO"

# --- OpenSSH: a private sshd (the bastion), the node's -R, the operator's -L --

mkdir -p /run/sshd 2>/dev/null || true
ssh-keygen -q -t ed25519 -N '' -f "$W/ssh/host_key"
ssh-keygen -q -t ed25519 -N '' -f "$W/ssh/user_key"
cp "$W/ssh/user_key.pub" "$W/ssh/authorized_keys"
SSH_PORT=$(free_port)
SSH_USER=$(id -un)
cat >"$W/ssh/sshd_config" <<CONF
Port $SSH_PORT
ListenAddress 127.0.0.1
HostKey $W/ssh/host_key
AuthorizedKeysFile $W/ssh/authorized_keys
PidFile $W/ssh/sshd.pid
UsePAM no
StrictModes no
PasswordAuthentication no
KbdInteractiveAuthentication no
PermitRootLogin prohibit-password
Ciphers aes128-gcm@openssh.com
Compression no
AllowTcpForwarding yes
GatewayPorts no
CONF
start sshd.log /usr/sbin/sshd -D -e -f "$W/ssh/sshd_config"
SSHD_PID=$LAST_PID
wait_until 10 "sshd listening on $SSH_PORT" listening "$SSH_PORT"

SSH_OPTS=(-F /dev/null -i "$W/ssh/user_key" -o IdentitiesOnly=yes -o IdentityAgent=none
	-o StrictHostKeyChecking=no -o UserKnownHostsFile=/dev/null -o BatchMode=yes
	-o ExitOnForwardFailure=yes -o Ciphers=aes128-gcm@openssh.com -o Compression=no
	-o LogLevel=ERROR -p "$SSH_PORT")
SSH_OPTS_SHOWN="-F /dev/null -i KEY -o IdentitiesOnly=yes -o IdentityAgent=none -o StrictHostKeyChecking=no -o UserKnownHostsFile=/dev/null -o BatchMode=yes -o ExitOnForwardFailure=yes -o Ciphers=aes128-gcm@openssh.com -o Compression=no -o LogLevel=ERROR -p $SSH_PORT"

R_IPERF=$(free_port)
R_ECHO=$(free_port)
start ssh-node.log ssh "${SSH_OPTS[@]}" -N \
	-R "127.0.0.1:$R_IPERF:127.0.0.1:$IPERF_PORT" -R "127.0.0.1:$R_ECHO:127.0.0.1:$ECHO_PORT" \
	"$SSH_USER@127.0.0.1"
SSH_R_PID=$LAST_PID
wait_until 20 "the bastion's forwarded port $R_IPERF" listening "$R_IPERF"
wait_until 20 "an echo through ssh -R on $R_ECHO" echo_ok "$R_ECHO"

L_IPERF=$(free_port)
L_ECHO=$(free_port)
start ssh-operator.log ssh "${SSH_OPTS[@]}" -N \
	-L "127.0.0.1:$L_IPERF:127.0.0.1:$R_IPERF" -L "127.0.0.1:$L_ECHO:127.0.0.1:$R_ECHO" \
	"$SSH_USER@127.0.0.1"
SSH_L_PID=$LAST_PID
wait_until 20 "ssh -L listening on $L_IPERF" listening "$L_IPERF"
wait_until 20 "an echo through ssh -L -> sshd -> ssh -R on $L_ECHO" echo_ok "$L_ECHO"

# sshd's processes: the listener and, per connection, its [priv] monitor and
# the session process (both connections are up now and stay up).
descendants() {
	local c
	for c in $(pgrep -P "$1" || true); do
		echo "$c"
		descendants "$c"
	done
}
mapfile -t EXTRA_PIDS < <(descendants "$SSHD_PID")
SSHD_PIDS="$SSHD_PID ${EXTRA_PIDS[*]}"

say "all paths up after $((SECONDS - T_START))s: direct, tether, chain, ssh-R"
check_alive "set-up"

# --- what each path is made of -------------------------------------------------

PATHS=(direct tether chain sshR)
declare -A LABEL=(
	[direct]="direct TCP"
	[tether]="Tether (forward>gw>agent)"
	[chain]="OpenSSH -L>sshd>-R"
	[sshR]="OpenSSH -R (1 hop)"
)
declare -A IPERF_AT=([direct]=$IPERF_PORT [tether]=$T_IPERF [chain]=$L_IPERF [sshR]=$R_IPERF)
declare -A ECHO_AT=([direct]=$ECHO_PORT [tether]=$T_ECHO [chain]=$L_ECHO [sshR]=$R_ECHO)
# Relay processes per path, as "operator bastion node" groups.
declare -A GROUPS_OF=([direct]="" [tether]="fwd gw agent" [chain]="sshL sshd sshR" [sshR]="sshd sshR")
declare -A GROUP_PIDS=([fwd]=$FWD_PID [gw]=$GW_PID [agent]=$AGENT_PID
	[sshL]=$SSH_L_PID [sshd]=$SSHD_PIDS [sshR]=$SSH_R_PID [fwdecho]=$FWD_ECHO_PID)
declare -A GROUP_NAME=([fwd]="tetherctl forward" [gw]="tether-gateway" [agent]="tether-client run"
	[sshL]="ssh -L" [sshd]="sshd (all procs)" [sshR]="ssh -R" [fwdecho]="tetherctl forward")
declare -A GROUP_ROLE=([fwd]=operator [gw]=bastion [agent]=node
	[sshL]=operator [sshd]=bastion [sshR]=node [fwdecho]=operator)

CLK_TCK=$(getconf CLK_TCK)
# ticks PID...: utime + stime of the processes, in clock ticks.
ticks() {
	local p s t=0 fields
	for p in "$@"; do
		s=$(cat "/proc/$p/stat" 2>/dev/null) || { say "warning: process $p is gone"; continue; }
		s=${s##*) }   # after "pid (comm) ": state is field 1, utime 12, stime 13
		read -ra fields <<<"$s"
		t=$((t + fields[11] + fields[12]))
	done
	echo "$t"
}
group_ticks() { # group_ticks GROUP
	# shellcheck disable=SC2086
	ticks ${GROUP_PIDS[$1]}
}

# --- measurements --------------------------------------------------------------

MODES=(up1 down1 up8 down8)
declare -A MODE_ARGS=([up1]="" [down1]="-R" [up8]="-P 8" [down8]="-P 8 -R")
declare -A MODE_TITLE=(
	[up1]="1 stream, operator -> node (iperf3 sends from the operator side)"
	[down1]="1 stream, node -> operator (iperf3 -R)"
	[up8]="8 parallel streams, operator -> node (iperf3 -P 8)"
	[down8]="8 parallel streams, node -> operator (iperf3 -P 8 -R)"
)
declare -A BPS BYTES ERR CMD TICKS ECHO_JSON ECHO_TICKS SPREAD LOOPS_RUN
# shellcheck source=tests/bench/loops.sh
. "$SRC/tests/bench/loops.sh"
GW_METRICS=http://127.0.0.1:$GW_MP/metrics

iperf_cmd() { # iperf_cmd PATH MODE: the command line, as run
	echo "iperf3 -c 127.0.0.1 -p ${IPERF_AT[$1]} -t $SECS -J --connect-timeout 10000${MODE_ARGS[$2]:+ ${MODE_ARGS[$2]}}"
}

run_iperf() { # run_iperf PATH MODE
	local path=$1 mode=$2 out=$W/runs/iperf-$1-$2.json g rc=0
	local -A before
	CMD[$path,$mode]=$(iperf_cmd "$path" "$mode")
	for g in ${GROUPS_OF[$path]}; do before[$g]=$(group_ticks "$g"); done
	[ "$path" != tether ] || before[loops]=$(loops_read "$GW_METRICS")
	# shellcheck disable=SC2086  # the command line splits into its words
	fg_run "$out" timeout $((SECS + 40)) ${CMD[$path,$mode]} || rc=$?
	check_alive "iperf3 $path $mode"
	[ "$path" != tether ] || LOOPS_RUN[$mode]=$(loops_delta "${before[loops]}" "$(loops_read "$GW_METRICS")")
	for g in ${GROUPS_OF[$path]}; do
		TICKS[$path,$g,$mode]=$(($(group_ticks "$g") - before[$g]))
	done
	BPS[$path,$mode]=$(jq -r '.end.sum_received.bits_per_second // empty' "$out" 2>/dev/null || true)
	BYTES[$path,$mode]=$(jq -r '.end.sum_received.bytes // empty' "$out" 2>/dev/null || true)
	# Per-stream share (8 streams): the slowest and fastest stream, MiB.
	SPREAD[$path,$mode]=$(jq -r '[.end.streams[].receiver.bytes] | select(length > 1) |
		"\(min / 1048576 | floor)/\(max / 1048576 | floor)"' "$out" 2>/dev/null || true)
	if [ "$rc" -ne 0 ] || [ -z "${BPS[$path,$mode]}" ] || [ "${BYTES[$path,$mode]:-0}" = 0 ]; then
		ERR[$path,$mode]="exit $rc: $( (jq -r '.error // empty' "$out" 2>/dev/null; head -c 300 "$out.err") | tr '\n' ' ' | head -c 300)"
		BPS[$path,$mode]=
		BYTES[$path,$mode]=
		say "  $path $mode FAILED: ${ERR[$path,$mode]}"
		restart_iperf
	else
		say "  $path $mode: $(awk -v b="${BPS[$path,$mode]}" 'BEGIN { printf "%.2f Gbit/s", b / 1e9 }')"
	fi
}

for mode in "${MODES[@]}"; do
	say "iperf3 ${MODE_TITLE[$mode]}, ${SECS}s per path"
	for path in "${PATHS[@]}"; do
		run_iperf "$path" "$mode"
	done
done

status_kib() { # status_kib FIELD PID...: sum of a /proc/PID/status field, kB
	local f=$1 p v t=0
	shift
	for p in "$@"; do
		v=$(awk -v f="$f:" '$1 == f { print $2 }' "/proc/$p/status" 2>/dev/null || true)
		t=$((t + ${v:-0}))
	done
	echo "$t"
}
MEM_GROUPS=(fwd fwdecho gw agent sshL sshd sshR)
declare -A RSS HWM RSS_END HWM_END
for g in "${MEM_GROUPS[@]}"; do
	# shellcheck disable=SC2086
	RSS[$g]=$(status_kib VmRSS ${GROUP_PIDS[$g]})
	# shellcheck disable=SC2086
	HWM[$g]=$(status_kib VmHWM ${GROUP_PIDS[$g]})
done

ECHO_CMD_OF() { echo "$PY tests/bench/echo_rtt.py ${ECHO_AT[$1]} $CONNS"; }
say "stream set-up: $CONNS sequential connect/1 byte/echo/close per path"
for path in "${PATHS[@]}"; do
	out=$W/runs/echo-$path.json
	declare -A eb=()
	for g in ${GROUPS_OF[$path]}; do
		[ "$g" = fwd ] && g=fwdecho
		eb[$g]=$(group_ticks "$g")
	done
	fg_run "$out" timeout 600 "$PY" "$ECHO_RTT" "${ECHO_AT[$path]}" "$CONNS" || true
	check_alive "set-up loop $path"
	for g in ${GROUPS_OF[$path]}; do
		[ "$g" = fwd ] && g=fwdecho
		ECHO_TICKS[$path,$g]=$(($(group_ticks "$g") - eb[$g]))
	done
	ECHO_JSON[$path]=$(cat "$out")
	[ -n "${ECHO_JSON[$path]}" ] || ECHO_JSON[$path]='{"ok":0,"errors":'"$CONNS"',"first_error":"no output"}'
	say "  $path: $(jq -r '"\(.total_s)s, p50 \(.p50_ms) ms, p99 \(.p99_ms) ms, \(.errors) errors"' <<<"${ECHO_JSON[$path]}")"
done

# --- figures -------------------------------------------------------------------

for g in "${MEM_GROUPS[@]}"; do
	# shellcheck disable=SC2086
	RSS_END[$g]=$(status_kib VmRSS ${GROUP_PIDS[$g]})
	# shellcheck disable=SC2086
	HWM_END[$g]=$(status_kib VmHWM ${GROUP_PIDS[$g]})
done
check_alive "the end of the measurements"

# ratio A B: A/B to 2 decimals, n/a if either is missing or B is 0.
ratio() {
	awk -v a="$1" -v b="$2" 'BEGIN {
		num = "^[0-9.]+([eE][-+]?[0-9]+)?$"
		if (a !~ num || b !~ num || b + 0 == 0) print "n/a"; else printf "%.2fx\n", a / b }'
}
gbit() { awk -v b="$1" 'BEGIN { if (b == "") print "ERR"; else printf "%.2f\n", b / 1e9 }'; }
# s_per_gib TICKS BYTES
s_per_gib() {
	awk -v t="$1" -v b="$2" -v hz="$CLK_TCK" 'BEGIN { if (t == "" || b == "" || b + 0 == 0) print "n/a"; else printf "%.2f\n", (t / hz) / (b / 1073741824) }'
}
sum() { local t=0 v; for v in "$@"; do t=$((t + ${v:-0})); done; echo "$t"; }

# CPU per GiB for a path and group over a set of modes (bytes of failed runs
# and the CPU they spent are left out together).
cpu_per_gib() { # cpu_per_gib PATH GROUP MODES...
	local path=$1 g=$2 m t=0 b=0
	shift 2
	for m in "$@"; do
		[ -n "${BYTES[$path,$m]}" ] || continue
		t=$((t + ${TICKS[$path,$g,$m]:-0}))
		b=$((b + BYTES[$path,$m]))
	done
	s_per_gib "$t" "$b"
}
cpu_per_gib_total() { # cpu_per_gib_total PATH MODES...: all groups of the path
	local path=$1 m g t=0 b=0
	shift
	for m in "$@"; do
		[ -n "${BYTES[$path,$m]}" ] || continue
		for g in ${GROUPS_OF[$path]}; do t=$((t + ${TICKS[$path,$g,$m]:-0})); done
		b=$((b + BYTES[$path,$m]))
	done
	s_per_gib "$t" "$b"
}
gib_moved() { # gib_moved PATH
	local m b=0
	for m in "${MODES[@]}"; do b=$((b + ${BYTES[$1,$m]:-0})); done
	awk -v b="$b" 'BEGIN { printf "%.1f\n", b / 1073741824 }'
}
ej() { jq -r "$2 // \"n/a\"" <<<"${ECHO_JSON[$1]}"; }
echo_cpu_ms() { # echo_cpu_ms PATH: relay CPU ms per connection during set-up
	local g t=0 ok
	for g in ${GROUPS_OF[$1]}; do
		[ "$g" = fwd ] && g=fwdecho
		t=$((t + ${ECHO_TICKS[$1,$g]:-0}))
	done
	ok=$(ej "$1" .ok)
	[ -n "${GROUPS_OF[$1]}" ] || { echo "-"; return; }
	awk -v t="$t" -v hz="$CLK_TCK" -v n="$ok" 'BEGIN { if (n + 0 == 0) print "n/a"; else printf "%.3f\n", t / hz * 1000 / n }'
}

kernel=$(uname -sr)
cpus=$(nproc)
cpu_model=$(awk -F': ' '/^model name/ { print $2; exit }' /proc/cpuinfo)
mem_total=$(awk '/^MemTotal/ { printf "%.1f GiB", $2 / 1048576 }' /proc/meminfo)
version=$("$GATEWAY" --version 2>/dev/null | head -1 || echo unknown)
bin_date=$(date -u -r "$TETHER_BIN/tether-gateway" +%Y-%m-%dT%H:%MZ 2>/dev/null || echo unknown)
elapsed=$((SECONDS - T_START))

log_issues() { # log_issues FILE: count and most frequent warning/error lines
	local f=$W/logs/$1 n
	n=$(grep -ciE '\b(warn|warning|error|fail|failed|refused|lost|abort)' "$f" 2>/dev/null || true)
	echo "  $1: ${n:-0} warning/error line(s)"
	if [ "${n:-0}" -gt 0 ]; then
		grep -iE '\b(warn|warning|error|fail|failed|refused|lost|abort)' "$f" |
			sed -E 's/^[0-9TZ:.+ -]+//; s/[0-9a-f]{8,}/<id>/g; s/[0-9]+/N/g' |
			sort | uniq -c | sort -rn | head -5 | sed 's/^/      /'
	fi
}

{
	echo
	echo "Tether stream throughput beside direct TCP and OpenSSH (loopback, one run)"
	echo "  command:  $COMMAND_LINE   (took ${elapsed}s)"
	echo "  binaries: $TETHER_BIN ($version, gateway built $bin_date; copies run)"
	echo "  machine:  $cpus CPUs (${cpu_model:-unknown}), $mem_total, $kernel"
	echo "  load:     $LOAD_START at the start, $(cut -d' ' -f1-3 /proc/loadavg) at the end (1/5/15 min)"
	echo "  tools:    $(iperf3 --version | head -1), $(ssh -V 2>&1), $($PY --version)"
	echo "  paths:"
	echo "    direct  iperf3/echo client -> target"
	echo "    tether  client -> tetherctl forward --cluster ID --node node 127.0.0.1:LPORT:127.0.0.1:TARGET"
	echo "            -> $GW_CMD -> tether-client run (--allow both targets) -> target"
	echo "    chain   client -> ssh -N -L LPORT:127.0.0.1:RPORT -> sshd -> ssh -N -R RPORT:127.0.0.1:TARGET -> target"
	echo "    sshR    client -> sshd's forwarded RPORT -> ssh -N -R RPORT:127.0.0.1:TARGET -> target"
	echo "    ssh options: $SSH_OPTS_SHOWN; sshd: key auth, Ciphers aes128-gcm@openssh.com, GatewayPorts no"
	echo "  ports:    iperf3 server $IPERF_PORT, echo $ECHO_PORT; tether $T_IPERF/$T_ECHO;"
	echo "            chain (ssh -L) $L_IPERF/$L_ECHO; sshR (bastion) $R_IPERF/$R_ECHO; gateway $GW_PORT; sshd $SSH_PORT"
	echo "  ratios:   'vs chain' = path / OpenSSH chain, 'vs direct' = path / direct TCP"
	echo "            (throughput: higher is better; set-up time: lower is better)"

	for mode in "${MODES[@]}"; do
		echo
		echo "Throughput: ${MODE_TITLE[$mode]}, ${SECS}s (end.sum_received.bits_per_second)"
		printf '  %-27s %8s %9s %10s %13s   %s\n' path Gbit/s "vs chain" "vs direct" "min/max MiB" command
		for path in "${PATHS[@]}"; do
			printf '  %-27s %8s %9s %10s %13s   %s\n' "${LABEL[$path]}" "$(gbit "${BPS[$path,$mode]}")" \
				"$(ratio "${BPS[$path,$mode]}" "${BPS[chain,$mode]}")" \
				"$(ratio "${BPS[$path,$mode]}" "${BPS[direct,$mode]}")" "${SPREAD[$path,$mode]:--}" \
				"${CMD[$path,$mode]}"
			[ -z "${ERR[$path,$mode]:-}" ] || echo "      error: ${ERR[$path,$mode]}"
		done
		[[ $mode != *8 ]] || echo "  min/max MiB: what the slowest and the fastest of the 8 streams delivered (fairness)"
	done

	echo
	echo "Stream set-up: $CONNS x (connect, send 1 byte, read the echo, close), one after the other"
	printf '  %-27s %8s %9s %10s %7s %7s %7s %8s %7s %11s   %s\n' path "total s" "vs chain" "vs direct" \
		"p50 ms" "p90 ms" "p99 ms" "max ms" errors "relay ms/c" command
	for path in "${PATHS[@]}"; do
		printf '  %-27s %8s %9s %10s %7s %7s %7s %8s %7s %11s   %s\n' "${LABEL[$path]}" "$(ej "$path" .total_s)" \
			"$(ratio "$(ej "$path" .total_s)" "$(ej chain .total_s)")" \
			"$(ratio "$(ej "$path" .total_s)" "$(ej direct .total_s)")" \
			"$(ej "$path" .p50_ms)" "$(ej "$path" .p90_ms)" "$(ej "$path" .p99_ms)" "$(ej "$path" .max_ms)" \
			"$(ej "$path" .errors)" "$(echo_cpu_ms "$path")" "$(ECHO_CMD_OF "$path")"
		fe=$(ej "$path" .first_error)
		[ "$fe" = n/a ] || [ "$fe" = null ] || echo "      first error: $fe"
	done
	echo "  relay ms/c: CPU ms per connection of the path's relay processes during this loop"

	echo
	echo "CPU seconds per GiB moved by the iperf3 runs (utime+stime from /proc/PID/stat)"
	echo "  up = operator -> node (1 + 8 streams), down = node -> operator (-R, 1 + 8 streams)"
	printf '  %-27s %-18s %-9s %8s %8s %8s %9s\n' path process role "up" "down" "all" "vs chain"
	for path in tether chain sshR; do
		for g in ${GROUPS_OF[$path]}; do
			other=
			for o in ${GROUPS_OF[chain]}; do [ "${GROUP_ROLE[$o]}" = "${GROUP_ROLE[$g]}" ] && other=$o; done
			printf '  %-27s %-18s %-9s %8s %8s %8s %9s\n' "${LABEL[$path]}" "${GROUP_NAME[$g]}" "${GROUP_ROLE[$g]}" \
				"$(cpu_per_gib "$path" "$g" up1 up8)" "$(cpu_per_gib "$path" "$g" down1 down8)" \
				"$(cpu_per_gib "$path" "$g" "${MODES[@]}")" \
				"$(ratio "$(cpu_per_gib "$path" "$g" "${MODES[@]}")" "$(cpu_per_gib chain "$other" "${MODES[@]}")")"
		done
		printf '  %-27s %-18s %-9s %8s %8s %8s %9s\n' "${LABEL[$path]}" "all relays" "" \
			"$(cpu_per_gib_total "$path" up1 up8)" "$(cpu_per_gib_total "$path" down1 down8)" \
			"$(cpu_per_gib_total "$path" "${MODES[@]}")" \
			"$(ratio "$(cpu_per_gib_total "$path" "${MODES[@]}")" "$(cpu_per_gib_total chain "${MODES[@]}")")"
	done
	echo "  GiB moved: tether $(gib_moved tether), chain $(gib_moved chain), sshR $(gib_moved sshR), direct $(gib_moved direct)"
	echo
	echo "The gateway's loops (--workers ${BENCH_WORKERS:-default}) during each Tether iperf3 run (/metrics:"
	echo "tether_loop_cpu_seconds_total; streams and MiB that crossed from one loop to another, tether_loop_link_*_total)"
	for mode in "${MODES[@]}"; do
		printf '  %-6s CPU s per loop: %-36s crossings: %s\n' "$mode" "$(loops_cpu_line "${LOOPS_RUN[$mode]:-}")" \
			"$(loops_link_line "${LOOPS_RUN[$mode]:-}")"
	done
	echo "  per run (CPU s/GiB of each relay process):"
	for path in tether chain sshR; do
		for mode in "${MODES[@]}"; do
			line="    $path $mode:"
			for g in ${GROUPS_OF[$path]}; do
				line+=" ${GROUP_NAME[$g]} $(cpu_per_gib "$path" "$g" "$mode");"
			done
			echo "$line"
		done
	done

	echo
	echo "Memory (KiB): right after the iperf3 runs, and at the end (after the set-up loops)"
	printf '  %-34s %-9s %9s %9s %11s %11s\n' process role VmRSS VmHWM "RSS at end" "HWM at end"
	for g in "${MEM_GROUPS[@]}"; do
		name=${GROUP_NAME[$g]}
		[ "$g" = fwd ] && name+=" (iperf3)"
		[ "$g" = fwdecho ] && name+=" (echo)"
		[ "$g" = sshd ] && name+=" ($(wc -w <<<"${GROUP_PIDS[sshd]}") processes)"
		printf '  %-34s %-9s %9s %9s %11s %11s\n' "$name" "${GROUP_ROLE[$g]}" "${RSS[$g]}" "${HWM[$g]}" \
			"${RSS_END[$g]}" "${HWM_END[$g]}"
	done
	echo "  (0 = the process had exited; see Processes below)"

	echo
	echo "Logs"
	for f in gateway.log agent.log fwd-iperf.log fwd-echo.log sshd.log ssh-node.log ssh-operator.log; do
		log_issues "$f"
	done
	audit=$(grep -c 'audit stream' "$W/logs/gateway.log" || true)
	echo "  gateway audit stream lines: ${audit:-0}"
	echo
	echo "Processes"
	if [ ${#DEATHS[@]} -gt 0 ]; then
		for a in "${DEATHS[@]}"; do echo "  EXITED: $a"; done
		echo "  (tetherctl forward, tether-client, ssh and sshd also exit 0 on SIGTERM: on a shared"
		echo "  machine, another session's pkill by name looks like this; see BENCH_PRIVATE_NAMES)"
	else
		echo "  every process started was still running at the end"
	fi
	[ "$IPERF_RESTARTS" -eq 0 ] || echo "  the iperf3 server was restarted $IPERF_RESTARTS time(s) after failed runs"

	echo
	echo "Markdown (for the README):"
	echo
	echo "Loopback, one run of \`$COMMAND_LINE\` (${SECS} s per iperf3 run); $cpus CPUs (${cpu_model:-unknown}), $mem_total, Linux $(uname -r); $(iperf3 --version | head -1 | cut -d' ' -f1-2), $(ssh -V 2>&1 | cut -d, -f1). Up = operator to node, down = node to operator (\`iperf3 -R\`); Gbit/s from \`iperf3 -J\` end.sum_received. The OpenSSH chain is \`ssh -L\` -> sshd -> \`ssh -R\` (aes128-gcm), two encrypted hops like Tether."
	echo
	echo "| path | 1 stream up | 1 stream down | 8 streams up | 8 streams down | $CONNS connects (s) | connect p50 / p99 (ms) |"
	echo "|------|------------:|--------------:|-------------:|---------------:|------------------:|-----------------------:|"
	for path in "${PATHS[@]}"; do
		row="| ${LABEL[$path]//>/→} |"
		for mode in "${MODES[@]}"; do row+=" $(gbit "${BPS[$path,$mode]}") |"; done
		row+=" $(ej "$path" .total_s) | $(ej "$path" .p50_ms) / $(ej "$path" .p99_ms) |"
		echo "$row"
	done
	echo
	echo "Ratios: path / OpenSSH chain, path / direct TCP (throughput higher is better, connect time lower is better)."
	echo
	echo "| path | 1 stream up | 1 stream down | 8 streams up | 8 streams down | $CONNS connects |"
	echo "|------|------------:|--------------:|-------------:|---------------:|------------------:|"
	for path in "${PATHS[@]}"; do
		row="| ${LABEL[$path]//>/→} |"
		for mode in "${MODES[@]}"; do
			row+=" $(ratio "${BPS[$path,$mode]}" "${BPS[chain,$mode]}") / $(ratio "${BPS[$path,$mode]}" "${BPS[direct,$mode]}") |"
		done
		row+=" $(ratio "$(ej "$path" .total_s)" "$(ej chain .total_s)") / $(ratio "$(ej "$path" .total_s)" "$(ej direct .total_s)") |"
		echo "$row"
	done
	echo
	echo "CPU seconds per GiB moved (all four iperf3 runs) and resident memory after the runs:"
	echo
	echo "| path | operator side | bastion / gateway | node side | all relays (vs chain) |"
	echo "|------|--------------:|------------------:|----------:|----------------------:|"
	for path in tether chain sshR; do
		row="| ${LABEL[$path]//>/→} |"
		for role in operator bastion node; do
			cell="—"
			for g in ${GROUPS_OF[$path]}; do
				[ "${GROUP_ROLE[$g]}" = "$role" ] || continue
				cell="${GROUP_NAME[$g]}: $(cpu_per_gib "$path" "$g" "${MODES[@]}") s/GiB, $(awk -v k="${RSS[$g]}" 'BEGIN { printf "%.1f", k / 1024 }') MiB"
			done
			row+=" $cell |"
		done
		row+=" $(cpu_per_gib_total "$path" "${MODES[@]}") s/GiB ($(ratio "$(cpu_per_gib_total "$path" "${MODES[@]}")" "$(cpu_per_gib_total chain "${MODES[@]}")")) |"
		echo "$row"
	done
	echo
	echo "(sshd's memory is the sum over its $(wc -w <<<"${GROUP_PIDS[sshd]}") processes: listener and, per connection, monitor and session.)"
}
