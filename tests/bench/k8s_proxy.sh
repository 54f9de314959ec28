#!/usr/bin/env bash
# k8s_proxy.sh: HTTP requests/s and latency of the Kubernetes API path
# through Tether, beside nginx as a TLS reverse proxy and the upstream itself.
#
# A benchmark, not a test: it reports figures and fails only if it cannot
# set the paths up.  Everything runs on loopback in ONE run, so the ratios
# between paths hold even where the absolute figures move between runs.
#
# One upstream, an nginx serving a small static JSON (/version), reached
# these ways by the same wrk command (keep-alive, wrk's default):
#   tether-wN  wrk -> https://127.0.0.1:GW/k8s/clusters/ID/version with a
#           user token (tetherctl kubeconfig) -> tether-gateway serve
#           --workers N -> a tunnel stream per client connection, reused
#           across its requests -> tether-client run (--service
#           kube-api=http://127.0.0.1:UP) -> upstream; one gateway (and
#           agent) per N of BENCH_WORKERS, all up for the whole run
#   tether-token-wN  the same through a second node of the first gateway,
#           joined with --service-token kube-api=FILE: the agent puts the
#           node's token on every request (docs/0007)
#   nginx-wN  wrk -> https://127.0.0.1:PX/version -> nginx TLS reverse
#           proxy with worker_processes N (self-signed P-256 certificate
#           made by openssl req now; proxy_pass to an upstream block with
#           keepalive) -> upstream; one per N of BENCH_NGINX_WORKERS
#   direct  wrk -> http://127.0.0.1:UP/version
# The upstream nginx runs one worker.  With --workers N the gateway runs N
# loops (docs/0040): with BENCH_GW_FLAGS="--landing route" a client
# connection lands on the loop of its cluster's agent and its requests
# cross nothing; with --landing any, the default, each loop keeps the
# client connections whose TLS handshake it ran and serves their
# requests, and a request whose agent's tunnel is on another loop crosses
# the in-process link (counted below), as nginx's second worker serves
# requests.  Reported per path: requests/s,
# p50/p90/p99 latency, errors (non-2xx, socket errors), and the relays'
# CPU ms per 1000 requests; then the ratios tether-wN/nginx-wN (same
# count; for scale_speed.sh the first pair also as "tether/nginx") and
# tether-token/nginx for requests/s and p99, and each side's second value
# against its first (w2/w1); and per Tether path each gateway loop's CPU
# during its run and the streams that crossed between loops (/metrics,
# tests/bench/loops.sh).
#
# usage: tests/bench/k8s_proxy.sh
#   TETHER_BIN          tether-gateway, tether-client, tetherctl
#                       (default: build/release/bin of this repo)
#   BENCH_WRK_ARGS      wrk's load options (default "-t2 -c16 -d10s")
#   BENCH_WARMUP        seconds of unreported wrk per path first (default 2)
#   BENCH_WORKERS       the gateways' --workers values, one gateway each
#                       (default "1 2")
#   BENCH_NGINX_WORKERS the proxies' worker_processes values, one nginx
#                       each (default "1 2")
#   BENCH_GW_FLAGS      more serve flags for every gateway (default none;
#                       "--landing route" lands a cluster's requests on
#                       its agent's loop, docs/0040 step 8)
#   BENCH_KEEP=1        keep the work directory (logs, wrk output)
#   BENCH_PRIVATE_NAMES=1  run the Tether copies as bench-gw, bench-agent,
#                       bench-ctl, out of reach of other sessions' pkill -f
#   BENCH_GW_CPUS       the CPUs of the relays measured: the gateways and
#                       the nginx proxies (taskset -c LIST, e.g. "0,1": a
#                       2-core proxy on a bigger machine; default any)
#   BENCH_LOAD_CPUS     the CPUs of everything else that runs during a
#                       measurement: wrk, the upstream nginx, the agents
#                       (taskset -c LIST; default any).  The report gives
#                       each process's CPUs as the kernel holds them
#                       (Cpus_allowed_list); the set-up's curl, tetherctl
#                       and openssl run on any
#   BENCH_KEEP=DIR      keep the work directory as DIR
# Needs bash, coreutils, awk and sed of the machine, and wrk, nginx,
# openssl, jq, curl (taskset where CPUs are set) on PATH: the bundle of
# tests/bench/bundle.sh has them all (device_k8s.sh).
set -euo pipefail

SRC=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
TETHER_BIN=${TETHER_BIN:-$SRC/build/release/bin}
GATEWAY=$TETHER_BIN/tether-gateway
CLIENT=$TETHER_BIN/tether-client
CTL=$TETHER_BIN/tetherctl
WRK_ARGS=${BENCH_WRK_ARGS:--t2 -c16 -d10s}
WARMUP=${BENCH_WARMUP:-2}
KEEP=${BENCH_KEEP:-0}
PRIVATE_NAMES=${BENCH_PRIVATE_NAMES:-0}
COMMAND_LINE=
GW_WORKERS=${BENCH_WORKERS:-1 2}
read -r -a GW_FLAGS <<<"${BENCH_GW_FLAGS:-}"
NGX_WORKERS=${BENCH_NGINX_WORKERS:-1 2}
GW_PIN=() LOAD_PIN=()
[ -z "${BENCH_GW_CPUS:-}" ] || GW_PIN=(taskset -c "$BENCH_GW_CPUS")
[ -z "${BENCH_LOAD_CPUS:-}" ] || LOAD_PIN=(taskset -c "$BENCH_LOAD_CPUS")
for v in TETHER_BIN BENCH_WRK_ARGS BENCH_WARMUP BENCH_WORKERS BENCH_NGINX_WORKERS BENCH_GW_FLAGS BENCH_PRIVATE_NAMES BENCH_GW_CPUS BENCH_LOAD_CPUS; do
	[ -z "${!v:-}" ] || COMMAND_LINE+="$v='${!v}' "
done
COMMAND_LINE+="$0${*:+ $*}"

say() { printf '[bench] %s\n' "$*" >&2; }
die() { say "error: $*"; exit 1; }

[ $# -eq 0 ] || die "no arguments (usage: $0; see the header for the environment)"
[[ $WARMUP =~ ^[0-9]+$ ]] || die "BENCH_WARMUP must be a whole number of seconds, got '$WARMUP'"
for n in $GW_WORKERS $NGX_WORKERS; do
	[[ $n =~ ^[1-9][0-9]*$ ]] || die "BENCH_WORKERS and BENCH_NGINX_WORKERS are lists of counts, got '$n'"
done
if [ -z "${GW_WORKERS// /}" ] || [ -z "${NGX_WORKERS// /}" ]; then
	die "BENCH_WORKERS and BENCH_NGINX_WORKERS may not be empty"
fi
FIRST_W=${GW_WORKERS%% *}
for b in "$GATEWAY" "$CLIENT" "$CTL"; do
	[ -x "$b" ] || die "$b missing: run 'make build' or set TETHER_BIN"
done
for tool in wrk nginx openssl jq curl awk; do
	command -v "$tool" >/dev/null || die "$tool is required (config/setup.sh installs it)"
done
[ -z "${BENCH_GW_CPUS:-}${BENCH_LOAD_CPUS:-}" ] || command -v taskset >/dev/null ||
	die "taskset (util-linux) is required for BENCH_GW_CPUS and BENCH_LOAD_CPUS"

if [ "$KEEP" != 0 ] && [ "$KEEP" != 1 ]; then
	W=$KEEP
	mkdir -p "$W"
	KEEP=1
else
	W=$(mktemp -d "${TMPDIR:-/tmp}/tether-bench-k8s.XXXXXX")
fi
chmod 755 "$W"
PIDS=()       # every long-running process this script started, in start order
ROLE_PIDS=()  # "name:PID" of the relays, the upstream and the agents
CUR_PID=      # the wrk or curl running right now
T_START=$SECONDS
LOAD_START=$(cut -d' ' -f1-3 /proc/loadavg)

cleanup() {
	local rc=$?
	trap - EXIT INT TERM
	set +e
	[ -z "$CUR_PID" ] || kill -TERM "$CUR_PID" 2>/dev/null
	local i p
	for ((i = ${#PIDS[@]} - 1; i >= 0; i--)); do
		kill -TERM "${PIDS[$i]}" 2>/dev/null
	done
	local deadline=$((SECONDS + 5)) alive
	while :; do
		alive=()
		for p in "${PIDS[@]}" $CUR_PID; do
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

mkdir -p "$W/logs" "$W/runs" "$W/bin" "$W/www" "$W/nginx-up"

# Run copies: a rebuild during the run must not change the binaries.
if [ "$PRIVATE_NAMES" = 1 ]; then
	cp "$GATEWAY" "$W/bin/bench-gw"
	cp "$CLIENT" "$W/bin/bench-agent"
	cp "$CTL" "$W/bin/bench-ctl"
	GATEWAY=$W/bin/bench-gw CLIENT=$W/bin/bench-agent CTL=$W/bin/bench-ctl
else
	cp "$GATEWAY" "$CLIENT" "$CTL" "$W/bin/"
	GATEWAY=$W/bin/tether-gateway CLIENT=$W/bin/tether-client CTL=$W/bin/tetherctl
fi

# free_port VAR: sets VAR (an array element too) to a port below the
# ephemeral range that no TCP socket of this machine holds now
# (/proc/net/tcp, tcp6) and that this run has not handed out already.
declare -A PORT_GIVEN
PORT_LO=10000 PORT_HI=$(($(awk '{ print $1 }' /proc/sys/net/ipv4/ip_local_port_range) - 1))
[ "$PORT_HI" -ge $((PORT_LO + 1000)) ] ||
	read -r PORT_LO PORT_HI < <(awk '{ print $2 + 1, 65535 }' /proc/sys/net/ipv4/ip_local_port_range)
PORT_TABLES=()
for f in /proc/net/tcp /proc/net/tcp6; do [ ! -r "$f" ] || PORT_TABLES+=("$f"); done
[ ${#PORT_TABLES[@]} -gt 0 ] || die "/proc/net/tcp is not readable"
free_port() {
	local p i
	for ((i = 0; i < 200; i++)); do
		p=$((PORT_LO + (RANDOM * 32768 + RANDOM) % (PORT_HI - PORT_LO + 1)))
		[ -z "${PORT_GIVEN[$p]:-}" ] || continue
		awk -v h="$(printf ':%04X' "$p")" 'FNR > 1 && substr($2, length($2) - 4) == h { found = 1; exit }
			END { exit !found }' "${PORT_TABLES[@]}" && continue
		PORT_GIVEN[$p]=1
		printf -v "$1" '%s' "$p"
		return 0
	done
	die "no free port in $PORT_LO-$PORT_HI after 200 tries"
}

# wait_until SECONDS WHAT CMD...: polls CMD every 50 ms; dies after SECONDS
# or at once if a process started so far has exited.
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
start() {
	local log=$1
	shift
	"$@" >>"$W/logs/$log" 2>&1 &
	LAST_PID=$!
	PIDS+=("$LAST_PID")
	printf '%s\0' "$@" >"$W/cmd.$LAST_PID"
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

# cpu_ticks PID...: utime + stime of the processes and their children
# (an nginx master's workers), in clock ticks.
cpu_ticks() {
	local p c t=0
	for p in "$@"; do
		for c in $p $(cat /proc/"$p"/task/*/children 2>/dev/null); do
			[ -r "/proc/$c/stat" ] || continue
			t=$((t + $(awk '{ sub(/^.*\) /, ""); print $12 + $13 }' "/proc/$c/stat")))
		done
	done
	echo "$t"
}
CLK_TCK=$(getconf CLK_TCK)

# --- the upstream: nginx serving a small static JSON --------------------------

free_port UP_PORT
printf '{"major":"1","minor":"28","gitVersion":"v1.28.0-tether-bench","platform":"linux/amd64"}\n' >"$W/www/version"
# Run as root, nginx's workers would switch to its built-in user (nobody,
# nogroup on Debian) that another machine may lack: they stay root there
# (glibc reads root from the machine's /etc/passwd and /etc/group).
NGX_USER=
[ "$(id -u)" != 0 ] || NGX_USER='user root;'
nginx_common() { # nginx_common DIR WORKERS: the directives every nginx shares
	cat <<CONF
daemon off;
$NGX_USER
master_process on;
worker_processes $2;
pid $1/nginx.pid;
error_log $1/error.log warn;
events { worker_connections 1024; }
CONF
}
temp_paths() {
	local d=$1
	echo "    client_body_temp_path $d/body; proxy_temp_path $d/proxy; fastcgi_temp_path $d/fastcgi;"
	echo "    uwsgi_temp_path $d/uwsgi; scgi_temp_path $d/scgi;"
}
{
	nginx_common "$W/nginx-up" 1
	cat <<CONF
http {
    access_log off;
    default_type application/json;
    keepalive_requests 1000000;
$(temp_paths "$W/nginx-up")
    server { listen 127.0.0.1:$UP_PORT; root $W/www; }
}
CONF
} >"$W/nginx-up/nginx.conf"
start nginx-up.log "${LOAD_PIN[@]}" nginx -c "$W/nginx-up/nginx.conf" -p "$W/nginx-up"
UP_PID=$LAST_PID
ROLE_PIDS+=("upstream:$UP_PID")
wait_until 10 "upstream nginx on $UP_PORT" curl -sf "http://127.0.0.1:$UP_PORT/version"

# --- nginx as a TLS reverse proxy in front of it, one per worker count --------

mkdir -p "$W/tls"
openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 1 \
	-keyout "$W/tls/proxy.key" -out "$W/tls/proxy.crt" -subj /CN=127.0.0.1 \
	-addext subjectAltName=IP:127.0.0.1 2>"$W/logs/openssl.log" || die "openssl req failed"
declare -A PX_PORT PX_PID
for n in $NGX_WORKERS; do
	d=$W/nginx-px$n
	mkdir -p "$d"
	free_port "PX_PORT[$n]"
	{
		nginx_common "$d" "$n"
		cat <<CONF
http {
    access_log off;
    keepalive_requests 1000000;
$(temp_paths "$d")
    upstream kube { server 127.0.0.1:$UP_PORT; keepalive 32; }
    server {
        listen 127.0.0.1:${PX_PORT[$n]} ssl;
        ssl_certificate $W/tls/proxy.crt;
        ssl_certificate_key $W/tls/proxy.key;
        ssl_protocols TLSv1.2 TLSv1.3;
        location / {
            proxy_pass http://kube;
            proxy_http_version 1.1;
            proxy_set_header Connection "";
            proxy_set_header Authorization "";
        }
    }
}
CONF
	} >"$d/nginx.conf"
	start "nginx-px$n.log" "${GW_PIN[@]}" nginx -c "$d/nginx.conf" -p "$d"
	PX_PID[$n]=$LAST_PID
	ROLE_PIDS+=("nginx-w$n:$LAST_PID")
	wait_until 10 "nginx proxy ($n workers) on ${PX_PORT[$n]}" \
		curl -sf --cacert "$W/tls/proxy.crt" "https://127.0.0.1:${PX_PORT[$n]}/version"
done

# --- Tether: per --workers value a gateway, an agent with the kube-api service,
#     a user token; the first gateway also a --service-token node ------------

declare -A URL AUTH CACERT RELAYS PROXY GW_CMDS
ctl() { "$CTL" -o json "$@"; }
# node_active DIR: the agent of state dir DIR is connected and active.
node_active() {
	local id
	id=$(jq -er '.agent_id | select(. != "")' "$1/state.json") || return 1
	ctl agent list | jq -e --arg id "$id" \
		'.[] | select(.id == $id and .state == "active" and .connected == true)' >/dev/null
}
# tether_node G NODE PATH [join flags]: joins NODE to gateway G's new
# cluster, runs its agent, issues a user token; PATH's URL, token and relays.
tether_node() {
	local g=$1 node=$2 path=$3 cid token
	shift 3
	cid=$(ctl cluster create "bench-$node" | jq -er .id) || die "cluster create failed"
	ctl token create --cluster "$cid" >"$W/$node.join.json" || die "token create failed"
	"$CLIENT" join --state-dir "$W/$node" --node-name "$node" \
		--service "kube-api=http://127.0.0.1:$UP_PORT" "$@" \
		<"$W/$node.join.json" >"$W/logs/join-$node.log" 2>&1 ||
		die "join of $node failed: $(cat "$W/logs/join-$node.log")"
	start "agent-$node.log" "${LOAD_PIN[@]}" "$CLIENT" run --state-dir "$W/$node"
	RELAYS[$path]="${GW_PID[$g]} $LAST_PID"
	PROXY[$path]=${GW_PID[$g]}
	ROLE_PIDS+=("agent-$node:$LAST_PID")
	METRICS_OF[$path]=${GW_METRICS[$g]}
	wait_until 30 "the agent $node connected and active" node_active "$W/$node"
	"$CTL" kubeconfig --cluster "$cid" --user "bench-$node" >"$W/$node.kc.yaml" ||
		die "tetherctl kubeconfig failed"
	token=$(awk '$1 == "token:" { print $2; exit }' "$W/$node.kc.yaml" | tr -d '"')
	[ -n "$token" ] || die "no token in the kubeconfig for $node"
	URL[$path]=$GW_URL/k8s/clusters/$cid/version
	AUTH[$path]=$token
	CACERT[$path]=$GW_DIR/ca.crt
	wait_until 20 "GET /version through $node" \
		curl -sf --cacert "$GW_DIR/ca.crt" -H "Authorization: Bearer $token" "${URL[$path]}"
}
declare -A GW_PID GW_PORTS GW_METRICS METRICS_OF
TETHER_PATHS=()
for g in $GW_WORKERS; do
	free_port GW_PORT
	# shellcheck disable=SC2153  # free_port set it
	GW_PORTS[$g]=$GW_PORT
	GW_URL=https://127.0.0.1:$GW_PORT
	GW_DIR=$W/gw$g
	"$GATEWAY" init --data-dir "$GW_DIR" --url "$GW_URL" >"$W/logs/init-gw$g.log" 2>&1 ||
		die "gateway init failed: $(cat "$W/logs/init-gw$g.log")"
	export TETHER_SERVER=$GW_URL TETHER_TOKEN_FILE=$GW_DIR/admin.token TETHER_CACERT=$GW_DIR/ca.crt
	free_port GW_MP
	GW_METRICS[$g]=http://127.0.0.1:$GW_MP/metrics
	GW_CMDS[$g]="tether-gateway serve --data-dir DIR --listen 127.0.0.1:$GW_PORT --metrics-listen 127.0.0.1:MPORT --workers $g${GW_FLAGS[*]:+ ${GW_FLAGS[*]}}"
	start "gateway-w$g.log" "${GW_PIN[@]}" "$GATEWAY" serve --data-dir "$GW_DIR" --listen "127.0.0.1:$GW_PORT" \
		--metrics-listen "127.0.0.1:$GW_MP" --workers "$g" "${GW_FLAGS[@]}"
	GW_PID[$g]=$LAST_PID
	ROLE_PIDS+=("gateway-w$g:$LAST_PID")
	wait_until 20 "gateway (--workers $g) ready on $GW_URL" curl -sf --cacert "$GW_DIR/ca.crt" "$GW_URL/readyz"
	tether_node "$g" "node-w$g" "tether-w$g"
	TETHER_PATHS+=("tether-w$g")
	if [ "$g" = "$FIRST_W" ]; then
		# The agent puts the node's token on every request (docs/0007).
		printf 'bench-node-token-%s\n' "$RANDOM$RANDOM" >"$W/node.token"
		tether_node "$g" "node-token-w$g" "tether-token-w$g" \
			--service-token "kube-api=$W/node.token"
		TETHER_PATHS+=("tether-token-w$g")
	fi
done

# Every path answers the same body.
for n in $NGX_WORKERS; do
	URL[nginx-w$n]=https://127.0.0.1:${PX_PORT[$n]}/version
	CACERT[nginx-w$n]=$W/tls/proxy.crt
	RELAYS[nginx-w$n]=${PX_PID[$n]}
	PROXY[nginx-w$n]=${PX_PID[$n]}
done
URL[direct]=http://127.0.0.1:$UP_PORT/version
RELAYS[direct]=
PROXY[direct]=
PATHS=("${TETHER_PATHS[@]}")
for n in $NGX_WORKERS; do PATHS+=("nginx-w$n"); done
PATHS+=(direct)
curl -sf "http://127.0.0.1:$UP_PORT/version" >"$W/want"
for p in "${PATHS[@]}"; do
	curl -sf ${CACERT[$p]:+--cacert "${CACERT[$p]}"} \
		${AUTH[$p]:+-H "Authorization: Bearer ${AUTH[$p]}"} "${URL[$p]}" >"$W/got-$p" ||
		die "GET ${URL[$p]} failed"
	[ "$(cksum <"$W/want")" = "$(cksum <"$W/got-$p")" ] || die "$p's answer differs from the upstream's"
done

# cpus_of PID: the CPUs the kernel lets PID run on (Cpus_allowed_list),
# then its children's (an nginx's workers) after a / where they differ.
cpus_of() {
	local c
	for c in $1 $(cat /proc/"$1"/task/*/children 2>/dev/null); do
		awk '$1 == "Cpus_allowed_list:" { print $2 }' "/proc/$c/status" 2>/dev/null
	done | awk '!seen[$0]++' | paste -sd/ -
}
CPUS_HELD=
for rp in "${ROLE_PIDS[@]}"; do
	CPUS_HELD+="${CPUS_HELD:+, }${rp%%:*} $(cpus_of "${rp#*:}")"
done
say "CPUs (Cpus_allowed_list): $CPUS_HELD"

# --- measurements --------------------------------------------------------------

declare -A CMDS RPS P50 P90 P99 ERRS CPU PCPU REQS LOOPS_RUN
# shellcheck source=tests/bench/loops.sh
. "$SRC/tests/bench/loops.sh"
# shellcheck disable=SC2206
WRK=(wrk $WRK_ARGS --latency)

# to_ms VALUE: wrk's "812.00us" / "1.23ms" / "1.05s" in milliseconds.
to_ms() {
	awk -v v="$1" 'BEGIN {
		if (v ~ /us$/) { sub(/us$/, "", v); printf "%.3f", v / 1000 }
		else if (v ~ /ms$/) { sub(/ms$/, "", v); printf "%.3f", v }
		else if (v ~ /m$/) { sub(/m$/, "", v); printf "%.3f", v * 60000 }
		else if (v ~ /s$/) { sub(/s$/, "", v); printf "%.3f", v * 1000 }
		else print "n/a" }'
}

run_wrk() { # run_wrk PATH OUT [wrk options...]: wrk on PATH's URL
	local p=$1 out=$2
	shift 2
	if [ -n "${AUTH[$p]:-}" ]; then
		fg_run "$out" "${LOAD_PIN[@]}" wrk "$@" -H "Authorization: Bearer ${AUTH[$p]}" "${URL[$p]}"
	else
		fg_run "$out" "${LOAD_PIN[@]}" wrk "$@" "${URL[$p]}"
	fi
}

for p in "${PATHS[@]}"; do
	if [ -n "${AUTH[$p]:-}" ]; then
		CMDS[$p]="${LOAD_PIN[*]:+${LOAD_PIN[*]} }${WRK[*]} -H \"Authorization: Bearer <user token>\" ${URL[$p]}"
	else
		CMDS[$p]="${LOAD_PIN[*]:+${LOAD_PIN[*]} }${WRK[*]} ${URL[$p]}"
	fi
	if [ "$WARMUP" -gt 0 ]; then
		say "$p: ${WARMUP}s warm-up"
		# shellcheck disable=SC2086
		run_wrk "$p" "$W/runs/$p.warmup" -t2 -c16 -d"${WARMUP}s" || die "wrk warm-up on $p failed: $(cat "$W/runs/$p.warmup.err")"
	fi
	say "$p: ${CMDS[$p]}"
	# shellcheck disable=SC2086
	c0=$(cpu_ticks ${RELAYS[$p]})
	# shellcheck disable=SC2086
	p0=$(cpu_ticks ${PROXY[$p]})
	l0=$([ -z "${METRICS_OF[$p]:-}" ] || loops_read "${METRICS_OF[$p]}")
	# shellcheck disable=SC2086
	run_wrk "$p" "$W/runs/$p.out" $WRK_ARGS --latency || die "wrk on $p failed: $(cat "$W/runs/$p.out.err")"
	# shellcheck disable=SC2086
	c1=$(cpu_ticks ${RELAYS[$p]})
	# shellcheck disable=SC2086
	p1=$(cpu_ticks ${PROXY[$p]})
	[ -z "${METRICS_OF[$p]:-}" ] || LOOPS_RUN[$p]=$(loops_delta "$l0" "$(loops_read "${METRICS_OF[$p]}")")
	out=$W/runs/$p.out
	RPS[$p]=$(awk '/^Requests\/sec:/ { print $2 }' "$out")
	REQS[$p]=$(awk '/requests in/ { print $1; exit }' "$out")
	P50[$p]=$(to_ms "$(awk '$1 == "50%" { print $2 }' "$out")")
	P90[$p]=$(to_ms "$(awk '$1 == "90%" { print $2 }' "$out")")
	P99[$p]=$(to_ms "$(awk '$1 == "99%" { print $2 }' "$out")")
	non2xx=$(awk '/Non-2xx or 3xx responses:/ { print $NF }' "$out")
	sock=$(awk '/Socket errors:/ { sub(/.*Socket errors: /, ""); print }' "$out")
	ERRS[$p]="non-2xx ${non2xx:-0}${sock:+; socket errors: $sock}"
	if [ -n "${RELAYS[$p]}" ] && [ "${REQS[$p]:-0}" -gt 0 ]; then
		CPU[$p]=$(awk -v t=$((c1 - c0)) -v hz="$CLK_TCK" -v n="${REQS[$p]}" \
			'BEGIN { printf "%.1f", t / hz * 1000 / n * 1000 }')
		PCPU[$p]=$(awk -v t=$((p1 - p0)) -v hz="$CLK_TCK" -v n="${REQS[$p]}" \
			'BEGIN { printf "%.1f", t / hz * 1000 / n * 1000 }')
	else
		CPU[$p]=-
		PCPU[$p]=-
	fi
	for q in "${PIDS[@]}"; do
		kill -0 "$q" 2>/dev/null || die "process $q ($(tr '\0' ' ' <"$W/cmd.$q")) exited during the $p run"
	done
done

ratio() { awk -v a="$1" -v b="$2" 'BEGIN { if (b + 0 == 0) print "n/a"; else printf "%.2f", a / b }'; }
FIRST_N=${NGX_WORKERS%% *}
# nginx_for N: the proxy with N workers, else the first one.
nginx_for() { [[ " $NGX_WORKERS " == *" $1 "* ]] && echo "nginx-w$1" || echo "nginx-w$FIRST_N"; }
# RATIOS: "A/B: requests/s xR, p99 xP" lines, the first as scale_speed.sh reads it.
RATIOS=()
ratio_line() { # ratio_line LABEL A B
	RATIOS+=("$1: requests/s x$(ratio "${RPS[$2]}" "${RPS[$3]}"), p99 x$(ratio "${P99[$2]}" "${P99[$3]}")   ($2 / $3)")
}
ratio_line tether/nginx "tether-w$FIRST_W" "$(nginx_for "$FIRST_W")"
ratio_line tether-token/nginx "tether-token-w$FIRST_W" "$(nginx_for "$FIRST_W")"
for g in $GW_WORKERS; do
	[ "$g" = "$FIRST_W" ] || ratio_line "tether-w$g/$(nginx_for "$g")" "tether-w$g" "$(nginx_for "$g")"
done
for g in $GW_WORKERS; do
	[ "$g" = "$FIRST_W" ] || ratio_line "tether-w$g/tether-w$FIRST_W" "tether-w$g" "tether-w$FIRST_W"
done
for n in $NGX_WORKERS; do
	[ "$n" = "$FIRST_N" ] || ratio_line "nginx-w$n/nginx-w$FIRST_N" "nginx-w$n" "nginx-w$FIRST_N"
done
RPS_RATIO_DIRECT=$(ratio "${RPS[tether-w$FIRST_W]}" "${RPS[direct]}")
# CPU_RATIOS: the proxy's CPU per request, nginx-wN's over tether-wN's
# gateway's: the requests/s ratio two cores held for each proxy would give
# if both were CPU-bound with their workers or loops even (an estimate,
# not a measurement of held cores: see the report's note).
CPU_RATIOS=()
for g in $GW_WORKERS; do
	CPU_RATIOS+=("$(nginx_for "$g")/tether-w$g proxy CPU per request: x$(ratio "${PCPU[$(nginx_for "$g")]}" "${PCPU[tether-w$g]}")")
done

kernel=$(uname -sr)
cpus=$(nproc)
cpu_model=$(awk -F': ' '/^model name/ { print $2; exit }' /proc/cpuinfo)
mem_total=$(awk '/^MemTotal/ { printf "%.1f GiB", $2 / 1048576 }' /proc/meminfo)
version=$("$GATEWAY" --version 2>/dev/null | head -1 || echo unknown)
# (wrk -v exits 1; s_client may too: these only describe the run)
nginx_version=$(nginx -v 2>&1 | sed 's/^nginx version: //' || true)
wrk_version=$( (wrk -v 2>&1 || true) | head -1 | awk '{ print $1, $2 }')
tls_of() { (echo | openssl s_client -connect "127.0.0.1:$1" 2>/dev/null || true) | awk '/^New,/ { print; exit }'; }
tls_tether=$(tls_of "${GW_PORTS[$FIRST_W]}")
tls_nginx=$(tls_of "${PX_PORT[$FIRST_N]}")
elapsed=$((SECONDS - T_START))

{
	echo
	echo "Kubernetes API path: requests/s and latency through Tether, an nginx TLS proxy, and direct (loopback, one run)"
	echo "  command:  $COMMAND_LINE   (took ${elapsed}s)"
	echo "  binaries: $TETHER_BIN ($version; copies run)"
	echo "  machine:  $cpus CPUs (${cpu_model:-unknown}), $mem_total, $kernel"
	echo "  load:     $LOAD_START at the start, $(cut -d' ' -f1-3 /proc/loadavg) at the end (1/5/15 min)"
	echo "  CPUs:     gateways and nginx proxies: ${GW_PIN[*]:-any}; wrk, upstream, agents: ${LOAD_PIN[*]:-any}"
	echo "            as the kernel held them (Cpus_allowed_list; an nginx's workers after a / where theirs differ): $CPUS_HELD"
	echo "  tools:    $wrk_version, $nginx_version, $(openssl version)"
	echo "  TLS:      gateway: ${tls_tether:-?}; nginx proxy: ${tls_nginx:-?}"
	echo "  upstream: nginx (1 worker, access_log off) serving $(wc -c <"$W/www/version")-byte /version"
	echo "  paths:"
	for g in $GW_WORKERS; do
		echo "    tether-w$g  wrk -> ${GW_CMDS[$g]} -> tether-client run (--service kube-api=http://127.0.0.1:$UP_PORT) -> upstream"
	done
	echo "    tether-token-w$FIRST_W  the same through a second node joined with --service-token kube-api=FILE (the node's token on every request)"
	for n in $NGX_WORKERS; do
		echo "    nginx-w$n  wrk -> nginx (worker_processes $n) listen ssl, proxy_pass to upstream{keepalive 32}, HTTP/1.1 -> upstream"
	done
	echo "    direct  wrk -> upstream"
	echo "  (every gateway, agent and nginx is up for the whole run; one path is measured at a time)"
	echo "  commands (after a ${WARMUP}s warm-up each, one after the other):"
	for p in "${PATHS[@]}"; do
		printf '    %-16s %s\n' "$p" "${CMDS[$p]}"
	done
	echo
	printf '  %-16s %12s %10s %10s %10s %10s %14s %14s  %s\n' path requests/s p50_ms p90_ms p99_ms requests \
		"relay_cpu_ms/1k" "proxy_cpu_ms/1k" errors
	for p in "${PATHS[@]}"; do
		printf '  %-16s %12s %10s %10s %10s %10s %14s %14s  %s\n' "$p" "${RPS[$p]}" "${P50[$p]}" \
			"${P90[$p]}" "${P99[$p]}" "${REQS[$p]}" "${CPU[$p]}" "${PCPU[$p]}" "${ERRS[$p]}"
	done
	echo
	for r in "${RATIOS[@]}"; do echo "  $r"; done
	echo "  tether-w$FIRST_W/direct: requests/s x$RPS_RATIO_DIRECT"
	echo "  relay CPU: tether = gateway + agent; nginx = the proxy's master + workers (CPU ms per 1000 requests)"
	echo "  proxy CPU: tether = the gateway alone; nginx = as relay CPU"
	for r in "${CPU_RATIOS[@]}"; do echo "  $r"; done
	echo "  (proxy CPU ratio: the requests/s ratio two cores held for each proxy would give were both"
	echo "  CPU-bound with even loops; an estimate from this run, not a held-core measurement)"
	echo
	echo "  the gateways' loops during each run (/metrics: tether_loop_cpu_seconds_total; streams and MiB"
	echo "  crossing from one loop to another, tether_loop_link_*_total):"
	for p in "${PATHS[@]}"; do
		[ -n "${METRICS_OF[$p]:-}" ] || continue
		printf '    %-16s CPU s per loop: %-30s crossings: %s\n' "$p" "$(loops_cpu_line "${LOOPS_RUN[$p]:-}")" \
			"$(loops_link_line "${LOOPS_RUN[$p]:-}")"
	done
	echo
	echo "Markdown:"
	echo
	echo "| path | requests/s | p50 ms | p99 ms | relay CPU ms / 1000 req | proxy CPU ms / 1000 req |"
	echo "|---|---:|---:|---:|---:|---:|"
	for p in "${PATHS[@]}"; do
		echo "| $p | ${RPS[$p]} | ${P50[$p]} | ${P99[$p]} | ${CPU[$p]} | ${PCPU[$p]} |"
	done
	echo
	echo "| ratio | requests/s | p99 |"
	echo "|---|---:|---:|"
	for r in "${RATIOS[@]}"; do
		awk -v r="$r" 'BEGIN { split(r, a, ": requests/s "); split(a[2], b, ", p99 "); sub(/ .*/, "", b[2])
			sub(/,$/, "", b[1]); printf "| %s | %s | %s |\n", a[1], b[1], b[2] }'
	done
	echo
	echo "($cpus CPUs, ${cpu_model:-unknown}, $kernel; proxies on CPUs ${BENCH_GW_CPUS:-any}, wrk, upstream and agents on ${BENCH_LOAD_CPUS:-any}; \`${WRK[*]}\`, keep-alive; one run)"
}
