#!/usr/bin/env bash
# k8s_proxy.sh: HTTP requests/s and latency of the Kubernetes API path
# through Tether, beside nginx as a TLS reverse proxy and the upstream itself.
#
# A benchmark, not a test: it reports figures and fails only if it cannot
# set the paths up.  Everything runs on loopback in ONE run, so the ratios
# between paths hold even where the absolute figures move between runs.
#
# One upstream, an nginx serving a small static JSON (/version), reached
# four ways by the same wrk command (keep-alive, wrk's default):
#   tether  wrk -> https://127.0.0.1:GW/k8s/clusters/ID/version with a
#           user token (tetherctl kubeconfig) -> tether-gateway serve ->
#           a tunnel stream per client connection, reused across its
#           requests -> tether-client run (--service
#           kube-api=http://127.0.0.1:UP) -> upstream
#   tether-token  the same through a second node joined with
#           --service-token kube-api=FILE: the agent puts the node's token
#           on every request (docs/0007)
#   nginx   wrk -> https://127.0.0.1:PX/version -> nginx TLS reverse proxy
#           (self-signed P-256 certificate made by openssl req now;
#           proxy_pass to an upstream block with keepalive) -> upstream
#   direct  wrk -> http://127.0.0.1:UP/version
# The two nginx run one worker each, as the gateway and the agent are one
# event loop each.  Reported per path: requests/s, p50/p90/p99 latency,
# errors (non-2xx, socket errors), and the relays' CPU ms per 1000
# requests; then the ratios tether/nginx and tether-token/nginx for
# requests/s and p99.
#
# usage: tests/bench/k8s_proxy.sh
#   TETHER_BIN          tether-gateway, tether-client, tetherctl
#                       (default: build/release/bin of this repo)
#   BENCH_WRK_ARGS      wrk's load options (default "-t2 -c16 -d10s")
#   BENCH_WARMUP        seconds of unreported wrk per path first (default 2)
#   BENCH_WORKERS       the gateway's --workers (default: its own default)
#   BENCH_KEEP=1        keep the work directory (logs, wrk output)
#   BENCH_PRIVATE_NAMES=1  run the Tether copies as bench-gw, bench-agent,
#                       bench-ctl, out of reach of other sessions' pkill -f
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
PY=/usr/bin/python3
COMMAND_LINE=
for v in TETHER_BIN BENCH_WRK_ARGS BENCH_WARMUP BENCH_PRIVATE_NAMES; do
	[ -z "${!v:-}" ] || COMMAND_LINE+="$v='${!v}' "
done
COMMAND_LINE+="$0${*:+ $*}"

say() { printf '[bench] %s\n' "$*" >&2; }
die() { say "error: $*"; exit 1; }

[ $# -eq 0 ] || die "no arguments (usage: $0; see the header for the environment)"
[[ $WARMUP =~ ^[0-9]+$ ]] || die "BENCH_WARMUP must be a whole number of seconds, got '$WARMUP'"
for b in "$GATEWAY" "$CLIENT" "$CTL"; do
	[ -x "$b" ] || die "$b missing: run 'make build' or set TETHER_BIN"
done
for tool in wrk nginx openssl jq curl awk; do
	command -v "$tool" >/dev/null || die "$tool is required (config/setup.sh installs it)"
done
[ -x "$PY" ] || die "$PY is required"

W=$(mktemp -d "${TMPDIR:-/tmp}/tether-bench-k8s.XXXXXX")
chmod 755 "$W"
PIDS=()       # every long-running process this script started, in start order
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

mkdir -p "$W/logs" "$W/runs" "$W/bin" "$W/www" "$W/nginx-up" "$W/nginx-px"

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

free_port() {
	"$PY" -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1]); s.close()'
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

UP_PORT=$(free_port)
printf '{"major":"1","minor":"28","gitVersion":"v1.28.0-tether-bench","platform":"linux/amd64"}\n' >"$W/www/version"
nginx_common() { # nginx_common DIR: the directives both nginx share
	cat <<CONF
daemon off;
master_process on;
worker_processes 1;
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
	nginx_common "$W/nginx-up"
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
start nginx-up.log nginx -c "$W/nginx-up/nginx.conf" -p "$W/nginx-up"
UP_PID=$LAST_PID
wait_until 10 "upstream nginx on $UP_PORT" curl -sf "http://127.0.0.1:$UP_PORT/version"

# --- nginx as a TLS reverse proxy in front of it ------------------------------

PX_PORT=$(free_port)
openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 1 \
	-keyout "$W/nginx-px/proxy.key" -out "$W/nginx-px/proxy.crt" -subj /CN=127.0.0.1 \
	-addext subjectAltName=IP:127.0.0.1 2>"$W/logs/openssl.log" || die "openssl req failed"
{
	nginx_common "$W/nginx-px"
	cat <<CONF
http {
    access_log off;
    keepalive_requests 1000000;
$(temp_paths "$W/nginx-px")
    upstream kube { server 127.0.0.1:$UP_PORT; keepalive 32; }
    server {
        listen 127.0.0.1:$PX_PORT ssl;
        ssl_certificate $W/nginx-px/proxy.crt;
        ssl_certificate_key $W/nginx-px/proxy.key;
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
} >"$W/nginx-px/nginx.conf"
start nginx-px.log nginx -c "$W/nginx-px/nginx.conf" -p "$W/nginx-px"
PX_PID=$LAST_PID
wait_until 10 "nginx proxy on $PX_PORT" curl -sf --cacert "$W/nginx-px/proxy.crt" "https://127.0.0.1:$PX_PORT/version"

# --- Tether: gateway, agent with the kube-api service, a user token -----------

GW_PORT=$(free_port)
GW_URL=https://127.0.0.1:$GW_PORT
GW_DIR=$W/gw
"$GATEWAY" init --data-dir "$GW_DIR" --url "$GW_URL" >"$W/logs/init.log" 2>&1 ||
	die "gateway init failed: $(cat "$W/logs/init.log")"
export TETHER_SERVER=$GW_URL TETHER_TOKEN_FILE=$GW_DIR/admin.token TETHER_CACERT=$GW_DIR/ca.crt
GW_CMD="tether-gateway serve --data-dir DIR --listen 127.0.0.1:$GW_PORT${BENCH_WORKERS:+ --workers $BENCH_WORKERS}"
start gateway.log "$GATEWAY" serve --data-dir "$GW_DIR" --listen "127.0.0.1:$GW_PORT" ${BENCH_WORKERS:+--workers "$BENCH_WORKERS"}
GW_PID=$LAST_PID
wait_until 20 "gateway ready on $GW_URL" curl -sf --cacert "$GW_DIR/ca.crt" "$GW_URL/readyz"

ctl() { "$CTL" -o json "$@"; }
CID=$(ctl cluster create bench-k8s | jq -er .id) || die "cluster create failed"
ctl token create --cluster "$CID" >"$W/join.json" || die "token create failed"
"$CLIENT" join --state-dir "$W/node" --node-name node \
	--service "kube-api=http://127.0.0.1:$UP_PORT" \
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
"$CTL" kubeconfig --cluster "$CID" --user bench >"$W/kc.yaml" || die "tetherctl kubeconfig failed"
USER_TOKEN=$(awk '$1 == "token:" { print $2; exit }' "$W/kc.yaml" | tr -d '"')
[ -n "$USER_TOKEN" ] || die "no token in the issued kubeconfig"
TETHER_URL=$GW_URL/k8s/clusters/$CID/version
wait_until 20 "GET /version through the gateway" \
	curl -sf --cacert "$GW_DIR/ca.crt" -H "Authorization: Bearer $USER_TOKEN" "$TETHER_URL"

# The same service on a second node joined with --service-token: the agent
# puts the node's token on every request (docs/0007).
CID2=$(ctl cluster create bench-k8s-token | jq -er .id) || die "cluster create failed"
ctl token create --cluster "$CID2" >"$W/join2.json" || die "token create failed"
printf 'bench-node-token-%s\n' "$RANDOM$RANDOM" >"$W/node.token"
"$CLIENT" join --state-dir "$W/node2" --node-name node2 \
	--service "kube-api=http://127.0.0.1:$UP_PORT" --service-token "kube-api=$W/node.token" \
	<"$W/join2.json" >"$W/logs/join2.log" 2>&1 || die "join with --service-token failed: $(cat "$W/logs/join2.log")"
start agent2.log "$CLIENT" run --state-dir "$W/node2"
AGENT2_PID=$LAST_PID
agent2_active() {
	local id
	id=$(jq -er '.agent_id | select(. != "")' "$W/node2/state.json") || return 1
	ctl agent list | jq -e --arg id "$id" \
		'.[] | select(.id == $id and .state == "active" and .connected == true)' >/dev/null
}
wait_until 30 "the --service-token agent connected and active" agent2_active
"$CTL" kubeconfig --cluster "$CID2" --user bench2 >"$W/kc2.yaml" || die "tetherctl kubeconfig failed"
USER_TOKEN2=$(awk '$1 == "token:" { print $2; exit }' "$W/kc2.yaml" | tr -d '"')
[ -n "$USER_TOKEN2" ] || die "no token in the second kubeconfig"
TOKEN_URL=$GW_URL/k8s/clusters/$CID2/version
wait_until 20 "GET /version through the --service-token node" \
	curl -sf --cacert "$GW_DIR/ca.crt" -H "Authorization: Bearer $USER_TOKEN2" "$TOKEN_URL"

# Every path answers the same body.
curl -sf "http://127.0.0.1:$UP_PORT/version" >"$W/want"
curl -sf --cacert "$GW_DIR/ca.crt" -H "Authorization: Bearer $USER_TOKEN" "$TETHER_URL" >"$W/got-tether"
curl -sf --cacert "$W/nginx-px/proxy.crt" "https://127.0.0.1:$PX_PORT/version" >"$W/got-nginx"
cmp -s "$W/want" "$W/got-tether" || die "the gateway's answer differs from the upstream's"
curl -sf --cacert "$GW_DIR/ca.crt" -H "Authorization: Bearer $USER_TOKEN2" "$TOKEN_URL" >"$W/got-token"
cmp -s "$W/want" "$W/got-token" || die "the --service-token node's answer differs from the upstream's"
cmp -s "$W/want" "$W/got-nginx" || die "the nginx proxy's answer differs from the upstream's"

# --- measurements --------------------------------------------------------------

PATHS=(tether tether-token nginx direct)
declare -A URL HDR RELAYS CMDS RPS P50 P90 P99 ERRS CPU REQS AUTH
URL[tether]=$TETHER_URL
URL[tether-token]=$TOKEN_URL
AUTH[tether]=$USER_TOKEN
AUTH[tether-token]=$USER_TOKEN2
URL[nginx]=https://127.0.0.1:$PX_PORT/version
URL[direct]=http://127.0.0.1:$UP_PORT/version
RELAYS[tether]="$GW_PID $AGENT_PID"
RELAYS[tether-token]="$GW_PID $AGENT2_PID"
RELAYS[nginx]=$PX_PID
RELAYS[direct]=
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
		fg_run "$out" wrk "$@" -H "Authorization: Bearer ${AUTH[$p]}" "${URL[$p]}"
	else
		fg_run "$out" wrk "$@" "${URL[$p]}"
	fi
}

for p in "${PATHS[@]}"; do
	if [ -n "${AUTH[$p]:-}" ]; then
		CMDS[$p]="${WRK[*]} -H \"Authorization: Bearer <user token>\" ${URL[$p]}"
	else
		CMDS[$p]="${WRK[*]} ${URL[$p]}"
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
	run_wrk "$p" "$W/runs/$p.out" $WRK_ARGS --latency || die "wrk on $p failed: $(cat "$W/runs/$p.out.err")"
	# shellcheck disable=SC2086
	c1=$(cpu_ticks ${RELAYS[$p]})
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
	else
		CPU[$p]=-
	fi
	for q in "${PIDS[@]}"; do
		kill -0 "$q" 2>/dev/null || die "process $q ($(tr '\0' ' ' <"$W/cmd.$q")) exited during the $p run"
	done
done

ratio() { awk -v a="$1" -v b="$2" 'BEGIN { if (b + 0 == 0) print "n/a"; else printf "%.2f", a / b }'; }
RPS_RATIO=$(ratio "${RPS[tether]}" "${RPS[nginx]}")
P99_RATIO=$(ratio "${P99[tether]}" "${P99[nginx]}")
RPS_RATIO_DIRECT=$(ratio "${RPS[tether]}" "${RPS[direct]}")
RPS_RATIO_TOKEN=$(ratio "${RPS[tether-token]}" "${RPS[nginx]}")
P99_RATIO_TOKEN=$(ratio "${P99[tether-token]}" "${P99[nginx]}")

kernel=$(uname -sr)
cpus=$(nproc)
cpu_model=$(awk -F': ' '/^model name/ { print $2; exit }' /proc/cpuinfo)
mem_total=$(awk '/^MemTotal/ { printf "%.1f GiB", $2 / 1048576 }' /proc/meminfo)
version=$("$GATEWAY" --version 2>/dev/null | head -1 || echo unknown)
# (wrk -v exits 1; s_client may too: these only describe the run)
nginx_version=$(nginx -v 2>&1 | sed 's/^nginx version: //' || true)
wrk_version=$( (wrk -v 2>&1 || true) | head -1 | awk '{ print $1, $2 }')
tls_of() { (echo | openssl s_client -connect "127.0.0.1:$1" 2>/dev/null || true) | awk '/^New,/ { print; exit }'; }
tls_tether=$(tls_of "$GW_PORT")
tls_nginx=$(tls_of "$PX_PORT")
elapsed=$((SECONDS - T_START))

{
	echo
	echo "Kubernetes API path: requests/s and latency through Tether, an nginx TLS proxy, and direct (loopback, one run)"
	echo "  command:  $COMMAND_LINE   (took ${elapsed}s)"
	echo "  binaries: $TETHER_BIN ($version; copies run)"
	echo "  machine:  $cpus CPUs (${cpu_model:-unknown}), $mem_total, $kernel"
	echo "  load:     $LOAD_START at the start, $(cut -d' ' -f1-3 /proc/loadavg) at the end (1/5/15 min)"
	echo "  tools:    $wrk_version, $nginx_version, $(openssl version)"
	echo "  TLS:      gateway: ${tls_tether:-?}; nginx proxy: ${tls_nginx:-?}"
	echo "  upstream: nginx (1 worker, access_log off) serving $(wc -c <"$W/www/version")-byte /version"
	echo "  paths:"
	echo "    tether  wrk -> $GW_CMD -> tether-client run (--service kube-api=http://127.0.0.1:$UP_PORT) -> upstream"
	echo "    tether-token  the same through a second node joined with --service-token kube-api=FILE (the node's token on every request)"
	echo "    nginx   wrk -> nginx (1 worker) listen ssl, proxy_pass to upstream{keepalive 32}, HTTP/1.1 -> upstream"
	echo "    direct  wrk -> upstream"
	echo "  commands (after a ${WARMUP}s warm-up each, one after the other):"
	for p in "${PATHS[@]}"; do
		printf '    %-12s %s\n' "$p" "${CMDS[$p]}"
	done
	echo
	printf '  %-12s %12s %10s %10s %10s %10s %14s  %s\n' path requests/s p50_ms p90_ms p99_ms requests "relay_cpu_ms/1k" errors
	for p in "${PATHS[@]}"; do
		printf '  %-12s %12s %10s %10s %10s %10s %14s  %s\n' "$p" "${RPS[$p]}" "${P50[$p]}" \
			"${P90[$p]}" "${P99[$p]}" "${REQS[$p]}" "${CPU[$p]}" "${ERRS[$p]}"
	done
	echo
	echo "  tether/nginx: requests/s x$RPS_RATIO, p99 x$P99_RATIO   (tether/direct requests/s x$RPS_RATIO_DIRECT)"
	echo "  tether-token/nginx: requests/s x$RPS_RATIO_TOKEN, p99 x$P99_RATIO_TOKEN"
	echo "  relay CPU: tether = gateway + agent; nginx = the proxy's master + worker (CPU ms per 1000 requests)"
	echo
	echo "Markdown:"
	echo
	echo "| path | requests/s | p50 ms | p99 ms | relay CPU ms / 1000 req |"
	echo "|---|---:|---:|---:|---:|"
	for p in "${PATHS[@]}"; do
		echo "| $p | ${RPS[$p]} | ${P50[$p]} | ${P99[$p]} | ${CPU[$p]} |"
	done
	echo "| **tether / nginx** | **x$RPS_RATIO** | | **x$P99_RATIO** | |"
	echo "| **tether-token / nginx** | **x$RPS_RATIO_TOKEN** | | **x$P99_RATIO_TOKEN** | |"
	echo
	echo "($cpus CPUs, ${cpu_model:-unknown}, $kernel; \`${WRK[*]}\`, keep-alive; one run)"
}
