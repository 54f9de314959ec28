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
	local -a curls=()
	GATEWAY=$bin/tether-gateway CLIENT=$bin/tether-client CTL=$bin/tetherctl
	for f in "$GATEWAY" "$CLIENT" "$CTL"; do [ -x "$f" ] || fail "$tag: no $f"; done
	GW_PORT=$(free_port)
	rm -rf "$T/gw"
	gateway_init
	valgrind --tool=callgrind --instr-atstart=no --callgrind-out-file="$cg" \
		"$GATEWAY" serve --data-dir "$GW_DIR" --listen "127.0.0.1:$GW_PORT" --workers 1 \
		"${TLS_DEADLINES[@]}" >"$T/gateway-$tag.log" 2>&1 &
	GW_PID=$!
	PIDS+=("$GW_PID")
	wait_until 120 "$tag: the gateway under callgrind ready" gateway_ready
	cid=$(cluster_create "bench-$tag")
	ctl token create --cluster "$cid" >"$T/join-$tag.json"
	join_node "node-$tag" "$T/join-$tag.json" --service "kube-api=http://127.0.0.1:$web_port" >/dev/null
	client_start "node-$tag"
	wait_until 60 "$tag: the agent active" agent_is "node-$tag" active
	tok=$(ctl user create "u-$tag" --cluster "$cid" | jq -er .token)
	url="$GW_URL/k8s/clusters/$cid/version"
	get() { curl -sf --cacert "$GW_DIR/ca.crt" -H "Authorization: Bearer $tok" "$url?[1-$1]" -o /dev/null; }
	get 20 || fail "$tag: the warm-up requests failed"
	callgrind_control -i on "$GW_PID" >/dev/null || fail "$tag: callgrind_control"
	for _ in $(seq 1 "$CONNS"); do get "$REQS" & curls+=($!); done
	for p in "${curls[@]}"; do wait "$p" || fail "$tag: a connection's requests failed"; done
	callgrind_control -i off "$GW_PID" >/dev/null || fail "$tag: callgrind_control"
	client_stop "$CLIENT_PID"
	kill -TERM "$GW_PID"
	wait "$GW_PID" || true
	GW_PID=
	ir=$(callgrind_annotate "$cg" 2>/dev/null | awk '/PROGRAM TOTALS/ { gsub(",", "", $1); print $1 }')
	[[ $ir =~ ^[0-9]+$ ]] || fail "$tag: no instruction count in $cg"
	[ -z "$KEEP" ] || cp "$cg" "$KEEP/$tag.cg"
	printf '  %-12s %12d Ir/request   (%d Ir over %d requests, %d connections)\n' \
		"$tag" $((ir / (REQS * CONNS))) "$ir" $((REQS * CONNS)) "$CONNS"
}

echo "The gateway's instructions per /k8s request (callgrind; --workers 1, $CONNS keep-alive connections x $REQS requests)"
for arg in "$@"; do
	[[ $arg == *=* ]] || fail "not TAG=BINDIR: $arg"
	measure "${arg%%=*}" "${arg#*=}"
done
