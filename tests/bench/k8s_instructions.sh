#!/usr/bin/env bash
# k8s_instructions.sh: the gateway's instructions per /k8s request, counted
# by valgrind (callgrind), for builds side by side.
#
# A benchmark, not a test: it reports figures and fails only if it cannot
# take them.  CPU time per request on a shared machine moves with the
# load (the same build read 75-90 us per request within half an hour on
# this project's 2-core VM); an instruction count does not, so it is the
# figure to compare two builds of the request path by.  Per build given:
# an nginx standing in for a kube-apiserver, a gateway (--workers 1) under
# callgrind with instrumentation off, one agent (tether-client) with the
# kube-api service, a user token; one warm-up connection of 20 requests,
# then instrumentation on while BENCH_CONNS (default 4) curl connections
# send BENCH_REQS (default 400) keep-alive GETs of /version each, at once,
# then off.  Reported: the gateway's instructions (Ir) in that window per
# request, all of its threads, TLS and the kernel's share excluded
# (callgrind counts user-space instructions only; a rep-prefixed string
# instruction counts once per iteration: a large memset reads dearer
# than it runs).  BENCH_KEEP=DIR keeps each build's callgrind file as
# DIR/TAG.cg (callgrind_annotate --inclusive=yes DIR/TAG.cg).
#
# BENCH_WORKERS=2 measures the loop link (docs/0040 section 2 (ii)) instead:
# per build three runs, each with the gateway under callgrind with
# --separate-threads=yes and its client k8s_on_loop.py (Python http.client,
# BENCH_CONNS connections warmed with 5 requests each, then BENCH_REQS
# each at once inside the window):
#   1-loop  --workers 1: the request path as above, no link;
#   near    --workers 2 --landing any, every connection on the loop that
#           holds the agent's tunnel (tether_loop_tunnels): no request
#           crosses;
#   cross   the same, every connection on the other loop: every request
#           crosses the loop link (its stream is a link stream to the
#           tunnel's loop).
# A connection is placed by the gateway's own landing: it asks /metrics
# first (a root path stays on the loop that ran its handshake), the loop
# whose tether_loop_tls_handshakes_total grew by its one handshake is its
# loop, one elsewhere is closed and another opened (no bench-only knob in
# the gateway; k8s_on_loop.py says more).  Reported per run: Ir per
# request, all threads, and the share of loop 0, loop 1 and the other
# threads (the store's, valgrind's).  BENCH_KEEP keeps DIR/TAG-RUN.cg-NN.
# BENCH_WARM=0 (with BENCH_WORKERS=2; e.g. BENCH_CONNS=40 BENCH_REQS=1):
# the connections are not warmed (one more on the same loop is) and send
# one after another, so each one's first request, which opens its stream
# to the agent (and over the link), is in the window.
# BENCH_SYSCALLS=1 (with BENCH_WORKERS=2) runs the gateway without
# valgrind and counts, over the same window, its system calls and CPU
# (perf stat -e raw_syscalls:sys_enter,task-clock --per-thread): what the
# instruction counts leave out, the kernel's share (an eventfd write, a
# wake).  Its CPU moves with the machine's load; the calls do not.
#
# BENCH_PROFILE=agent (with BENCH_WORKERS=1) counts the agent's side of
# the same window instead: the gateway runs bare and the agent
# (tether-client: tunnel frames in over TLS, a stream to the local
# kube-apiserver, the answer back) runs under callgrind; reported: the
# agent's Ir per request, all its threads.  With BENCH_SYSCALLS=1 the
# agent runs bare and perf stat (raw_syscalls:sys_enter, task-clock)
# counts its system calls and CPU per request over the window.
# BENCH_SERVICE_TOKEN=1 joins the node with --service-token kube-api=FILE
# as well (k8s_proxy.sh's tether-token path, docs/0007): the agent puts
# the node's token on every request head (the head filter, dialer.c).
#
# usage: bash tests/bench/k8s_instructions.sh TAG=BINDIR [TAG=BINDIR...]
#   BINDIR holds tether-gateway, tether-client and tetherctl (a release
#   build: build/release/bin); e.g.
#   bash tests/bench/k8s_instructions.sh before=/tmp/old/bin after=build/release/bin
source "$(dirname "$0")/../integration/lib.sh"
chmod 755 "$T"
command -v valgrind >/dev/null || fail "valgrind is not installed (config/setup.sh)"
[ $# -ge 1 ] || fail "usage: k8s_instructions.sh TAG=BINDIR [TAG=BINDIR...]"
REQS=${BENCH_REQS:-400}
CONNS=${BENCH_CONNS:-4}
KEEP=${BENCH_KEEP:-}
WORKERS=${BENCH_WORKERS:-1}
[[ $WORKERS == 1 || $WORKERS == 2 ]] || fail "BENCH_WORKERS is 1 or 2"
SYSCALLS=${BENCH_SYSCALLS:-0}
PROFILE=${BENCH_PROFILE:-gateway}
SVC_TOKEN=${BENCH_SERVICE_TOKEN:-0}
[[ $SVC_TOKEN == 0 || $SVC_TOKEN == 1 ]] || fail "BENCH_SERVICE_TOKEN is 0 or 1"
[[ $SVC_TOKEN == 0 || $WORKERS == 1 ]] || fail "BENCH_SERVICE_TOKEN=1 needs BENCH_WORKERS=1"
[[ $PROFILE == gateway || $PROFILE == agent ]] || fail "BENCH_PROFILE is gateway or agent"
[[ $PROFILE == gateway || $WORKERS == 1 ]] || fail "BENCH_PROFILE=agent needs BENCH_WORKERS=1"
[[ $SYSCALLS == 0 || $WORKERS == 2 || $PROFILE == agent ]] ||
	fail "BENCH_SYSCALLS=1 needs BENCH_WORKERS=2 or BENCH_PROFILE=agent"
[[ $SYSCALLS == 0 ]] || command -v perf >/dev/null || fail "BENCH_SYSCALLS=1 needs perf"
[[ $REQS =~ ^[1-9][0-9]*$ && $CONNS =~ ^[1-9][0-9]*$ ]] ||
	fail "BENCH_REQS and BENCH_CONNS are counts"
[ -z "$KEEP" ] || mkdir -p "$KEEP"

web_port=$(free_port)
mkdir -p "$T/www"
printf '{"major":"1","minor":"28","gitVersion":"v1.28.0-tether-bench"}\n' >"$T/www/version"
nginx_start nginx "access_log off; server { listen 127.0.0.1:$web_port; root $T/www; }"
wait_until 10 "nginx listening" bash -c "(exec 3<>/dev/tcp/127.0.0.1/$web_port)"

# measure TAG BINDIR: prints "TAG Ir/request" and the totals.
measure() {
	local tag=$1 bin=$2 cg="$T/$1.cg" tok cid url ir p
	local -a curls=() svc=(--service "kube-api=http://127.0.0.1:$web_port")
	if [ "$SVC_TOKEN" = 1 ]; then
		printf 'bench-node-token-%s\n' "$RANDOM$RANDOM" >"$T/node-$tag.token"
		svc+=(--service-token "kube-api=$T/node-$tag.token")
	fi
	GATEWAY=$bin/tether-gateway CLIENT=$bin/tether-client CTL=$bin/tetherctl
	for f in "$GATEWAY" "$CLIENT" "$CTL"; do [ -x "$f" ] || fail "$tag: no $f"; done
	GW_PORT=$(free_port)
	rm -rf "$T/gw"
	gateway_init
	local -a gwtool=(valgrind --tool=callgrind --instr-atstart=no --callgrind-out-file="$cg") agtool=()
	if [ "$PROFILE" = agent ]; then
		agtool=("${gwtool[@]}")
		gwtool=()
		[ "$SYSCALLS" = 0 ] || agtool=()
	fi
	"${gwtool[@]}" "$GATEWAY" serve --data-dir "$GW_DIR" --listen "127.0.0.1:$GW_PORT" --workers 1 \
		"${TLS_DEADLINES[@]}" >"$T/gateway-$tag.log" 2>&1 &
	GW_PID=$!
	PIDS+=("$GW_PID")
	wait_until 120 "$tag: the gateway ready" gateway_ready
	cid=$(cluster_create "bench-$tag")
	ctl token create --cluster "$cid" >"$T/join-$tag.json"
	join_node "node-$tag" "$T/join-$tag.json" "${svc[@]}" >/dev/null
	# valgrind runs the agent in its own process: CLIENT_PID is the agent's.
	"${agtool[@]}" "$CLIENT" run --state-dir "$T/node-$tag" >>"$T/client-node-$tag.log" 2>&1 &
	CLIENT_PID=$!
	PIDS+=("$CLIENT_PID")
	wait_until 60 "$tag: the agent active" agent_is "node-$tag" active
	tok=$(ctl user create "u-$tag" --cluster "$cid" | jq -er .token)
	url="$GW_URL/k8s/clusters/$cid/version"
	get() { curl -sf --cacert "$GW_DIR/ca.crt" -H "Authorization: Bearer $tok" "$url?[1-$1]" -o /dev/null; }
	get 20 || fail "$tag: the warm-up requests failed"
	local who=$GW_PID perf_pid=
	[ "$PROFILE" = gateway ] || who=$CLIENT_PID
	if [ "$SYSCALLS" = 1 ]; then
		perf stat -e raw_syscalls:sys_enter,task-clock -p "$who" -o "$T/perf-$tag.txt" &
		perf_pid=$!
		sleep 0.5 # attached (perf says nothing until the end)
	else
		callgrind_control -i on "$who" >/dev/null || fail "$tag: callgrind_control"
	fi
	for _ in $(seq 1 "$CONNS"); do get "$REQS" & curls+=($!); done
	for p in "${curls[@]}"; do wait "$p" || fail "$tag: a connection's requests failed"; done
	if [ -n "$perf_pid" ]; then
		kill -INT "$perf_pid"
		wait "$perf_pid" || true # its status after SIGINT says nothing; its file does
	else
		callgrind_control -i off "$who" >/dev/null || fail "$tag: callgrind_control"
	fi
	client_stop "$CLIENT_PID"
	kill -TERM "$GW_PID"
	wait "$GW_PID" || true
	GW_PID=
	if [ "$SYSCALLS" = 1 ]; then
		awk -v n=$((REQS * CONNS)) -v tag="$tag" '
			$2 == "raw_syscalls:sys_enter" { v = $1; gsub(",", "", v); sc += v }
			$3 == "task-clock" { v = $1; gsub(",", "", v); cpu += v }
			END { if (sc == 0) exit 1
				printf "  %-12s %6.2f system calls/request   CPU %.1f us/request   (%d requests)\n",
				tag, sc / n, cpu * 1000 / n, n }' "$T/perf-$tag.txt" ||
			fail "$tag: no counts from perf: $(cat "$T/perf-$tag.txt")"
		return
	fi
	ir=$(callgrind_annotate "$cg" 2>/dev/null | awk '/PROGRAM TOTALS/ { gsub(",", "", $1); print $1 }')
	[[ $ir =~ ^[0-9]+$ ]] || fail "$tag: no instruction count in $cg"
	[ -z "$KEEP" ] || cp "$cg" "$KEEP/$tag.cg"
	printf '  %-12s %12d Ir/request   (%d Ir over %d requests, %d connections)\n' \
		"$tag" $((ir / (REQS * CONNS))) "$ir" $((REQS * CONNS)) "$CONNS"
}

# cg_ir FILE: the instructions (Ir) callgrind counted in FILE (0 for a
# thread that ran none in the window: no totals line, or ".").
cg_ir() {
	local ir
	ir=$(callgrind_annotate "$1" 2>/dev/null | awk '/PROGRAM TOTALS/ { gsub(",", "", $1); print $1; exit }')
	[ "$ir" != . ] || ir=0   # callgrind_annotate's zero
	[[ $ir =~ ^[0-9]*$ ]] || fail "no instruction count in $1: $ir"
	echo "${ir:-0}"
}

# measure_loops TAG BINDIR RUN: RUN is 1-loop, near or cross (see the
# header); prints "TAG RUN Ir/request" and each loop's share.
measure_loops() {
	local tag=$1 bin=$2 run=$3 cg="$T/$1-$3.cg" tok cid f ir n tl want x=0
	local -a serve=(--workers 1) tool=(valgrind --tool=callgrind --instr-atstart=no
		--separate-threads=yes --callgrind-out-file="$cg") perf=()
	local l0=0 l1=0 other=0 total=0
	GATEWAY=$bin/tether-gateway CLIENT=$bin/tether-client CTL=$bin/tetherctl
	for f in "$GATEWAY" "$CLIENT" "$CTL"; do [ -x "$f" ] || fail "$tag: no $f"; done
	[ "$run" = 1-loop ] || serve=(--workers 2 --landing any)
	GW_PORT=$(free_port)
	rm -rf "$T/gw" "$cg"-*
	gateway_init 2>"$T/init.err"
	if [ "$SYSCALLS" = 1 ]; then
		tool=()
		perf=("$T/perf-$tag-$run.txt")
	fi
	"${tool[@]}" "$GATEWAY" serve --data-dir "$GW_DIR" --listen "127.0.0.1:$GW_PORT" "${serve[@]}" \
		"${TLS_DEADLINES[@]}" >"$T/gateway-$tag-$run.log" 2>&1 &
	GW_PID=$!
	PIDS+=("$GW_PID")
	wait_until 120 "$tag $run: the gateway under callgrind ready" gateway_ready
	cid=$(cluster_create "bench-$tag-$run")
	ctl token create --cluster "$cid" >"$T/join-$tag-$run.json"
	join_node "node-$tag-$run" "$T/join-$tag-$run.json" \
		--service "kube-api=http://127.0.0.1:$web_port" >/dev/null
	client_start "node-$tag-$run"
	wait_until 60 "$tag $run: the agent active" agent_is "node-$tag-$run" active
	tok=$(ctl user create "u-$tag-$run" --cluster "$cid" | jq -er .token)
	want=any
	if [ "$run" != 1-loop ]; then
		curl -sf --cacert "$GW_DIR/ca.crt" -H "Authorization: Bearer $(cat "$GW_DIR/admin.token")" \
			"$GW_URL/metrics" >"$T/placed.metrics" || fail "$tag $run: /metrics"
		tl=$(awk '$1 == "tether_loop_tunnels{loop=\"1\"}" && $2 == 1 { print 1; exit }
			$1 == "tether_loop_tunnels{loop=\"0\"}" && $2 == 1 { print 0; exit }' "$T/placed.metrics")
		[[ $tl =~ ^[01]$ ]] || fail "$tag $run: the tunnel's loop is not shown: $(grep tether_loop_tunnels "$T/placed.metrics")"
		if [ "$run" = near ]; then want=$tl; else want=$((1 - tl)); fi
	fi
	python3 "$(dirname "$0")/k8s_on_loop.py" "$GW_PORT" "$GW_DIR/ca.crt" "$tok" \
		"$GW_DIR/admin.token" "$want" "$CONNS" "$REQS" \
		"/k8s/clusters/$cid/version" "$GW_PID" "${perf[@]}" || fail "$tag $run: the client failed"
	x=$(loop_crossings)
	case $run in
	near) [ "$x" = 0 ] || fail "$tag $run: $x streams crossed the loop link" ;;
	cross) [ "$x" -gt 0 ] || fail "$tag $run: no stream crossed the loop link" ;;
	esac
	client_stop "$CLIENT_PID"
	kill -TERM "$GW_PID"
	wait "$GW_PID" || true
	n=$((REQS * CONNS))
	if [ "$SYSCALLS" = 1 ]; then
		# perf's rows: COMM-TID COUNT [msec] EVENT; loop 0 is the main
		# thread (its tid is the pid).
		awk -v n="$n" -v pid="$GW_PID" -v tag="$tag" -v run="$run" '
			$3 == "raw_syscalls:sys_enter" || $4 == "task-clock" {
				tid = $1; sub(/.*-/, "", tid); v = $2; gsub(",", "", v)
				k = ($4 == "task-clock") ? "cpu" : "sc"
				if (tid == pid) l0[k] += v; else rest[k] += v
			}
			END { if (l0["sc"] == 0) exit 1
				printf "  %-10s %-7s %6.2f system calls/request (loop 0 %.2f, others %.2f)   CPU %.1f us/request (loop 0 %.1f, others %.1f)   (%d requests)\n",
				tag, run, (l0["sc"] + rest["sc"]) / n, l0["sc"] / n, rest["sc"] / n,
				(l0["cpu"] + rest["cpu"]) * 1000 / n, l0["cpu"] * 1000 / n, rest["cpu"] * 1000 / n, n }' \
			"${perf[0]}" || fail "$tag $run: no counts from perf: $(cat "${perf[0]}")"
		GW_PID=
		return
	fi
	GW_PID=
	for f in "$cg"-*; do
		ir=$(cg_ir "$f")
		total=$((total + ir))
		# Thread 1 runs loop 0; loop 1's thread is the other one that
		# runs an event loop (the store's threads do not).
		if [[ $f == *-01 ]]; then
			l0=$((l0 + ir))
		elif grep -qE '^c?fn=\([0-9]+\) event_base_loop$' "$f"; then
			l1=$((l1 + ir))
		else
			other=$((other + ir))
		fi
		[ -z "$KEEP" ] || cp "$f" "$KEEP/$tag-$run.${f##*.}"
	done
	[ "$total" -gt 0 ] || fail "$tag $run: no callgrind files"
	printf '  %-10s %-7s %9d Ir/request   loop 0 %7d   loop 1 %7d   other %6d   (%d requests, %d link streams)\n' \
		"$tag" "$run" $((total / n)) $((l0 / n)) $((l1 / n)) $((other / n)) "$n" "$x"
}

if [ "$WORKERS" = 2 ]; then
	if [ "$SYSCALLS" = 1 ]; then
		echo "The gateway's system calls and CPU per /k8s request across loops (perf stat; $CONNS keep-alive connections x $REQS requests;"
	else
		echo "The gateway's instructions per /k8s request across loops (callgrind; $CONNS keep-alive connections x $REQS requests;"
	fi
	echo "near: every connection on the tunnel's loop, cross: every one on the other loop, each request crossing the loop link)"
	for arg in "$@"; do
		[[ $arg == *=* ]] || fail "not TAG=BINDIR: $arg"
		for run in 1-loop near cross; do
			measure_loops "${arg%%=*}" "${arg#*=}" "$run"
		done
	done
	exit 0
fi

if [ "$SYSCALLS" = 1 ]; then
	echo "The $PROFILE's system calls and CPU per /k8s request (perf stat; --workers 1, $CONNS keep-alive connections x $REQS requests)"
else
	echo "The $PROFILE's instructions per /k8s request (callgrind; --workers 1, $CONNS keep-alive connections x $REQS requests)"
fi
[ "$SVC_TOKEN" = 0 ] || echo "(the node joined with --service-token kube-api=FILE: the node's token on every request)"

for arg in "$@"; do
	[[ $arg == *=* ]] || fail "not TAG=BINDIR: $arg"
	measure "${arg%%=*}" "${arg#*=}"
done
