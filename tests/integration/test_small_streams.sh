#!/usr/bin/env bash
# Streams of a few TLS records (32 KiB, 64 KiB, 64 KiB + 1, 128 KiB) through
# `tetherctl connect` to an echo server (stdin a file, or a pipe) come back
# whole, each without waiting for an unrelated event on its connections.  Each end reads a
# socket's records in one read(2) (common/tlsread.c) and decrypts one turn's
# worth (common/wsturn.c); records still held there raise no socket event.
# A read that found its input full already ended its turn without coming
# back for them: the gateway sat on the operator's 32 KiB until its own
# keepalive ping woke that connection 20 s later, then on the echo until
# the agent's next ping came in on the tunnel.
#
# No timing goal: the keepalive pings of the gateway and the agent are
# made rare (--ping-interval 600000, ten minutes; tetherctl sends none),
# so a stream that waits for an unrelated event waits past the bounded
# wait_until below (60 s, far under the ping interval, far over a
# stream's normal 0.1 s): a hang, reported as one.  Once with one loop,
# once with two under --landing any (the operator's connection and the
# tunnel may then be on different loops, the bytes crossing the link).
source "$(dirname "$0")/lib.sh"

RARE_PINGS=(--ping-interval 600000 --ping-timeout 600000)
SIZES=(32768 65536 65537 131072)

echo_server_start
gateway_init

# start_pair [serve flags]: the gateway with rare pings and the flags, and
# agent n1 with rare pings (joined the first time), its tunnel up.
start_pair() {
	gateway_start "${RARE_PINGS[@]}" "$@"
	if [ -z "${cid:-}" ]; then
		cid=$(cluster_create small)
		ctl token create --cluster "$cid" >"$T/join.json"
		join_node n1 "$T/join.json" --allow "127.0.0.1:$echo_port" >/dev/null
	fi
	client_start n1 "${RARE_PINGS[@]}"
	wait_until 60 "n1 active" agent_is n1 active
}

stop_pair() {
	client_stop "$CLIENT_PID"
	gateway_stop
}

gone() { ! kill -0 "$1" 2>/dev/null; }

# stream SIZE TAG [pipe]: SIZE random bytes through `tetherctl connect` to
# the echo server, its stdin the file (one message) or, with "pipe", a pipe
# (messages of what each read gives, 64 KiB at most); the answer must be
# those bytes, within the bounded wait.
stream() {
	local size=$1 tag=$2 how=${3:-file} pid rc=0
	head -c "$size" /dev/urandom >"$T/blob.$tag"
	if [ "$how" = pipe ]; then
		cat "$T/blob.$tag" | "$CTL" connect --cluster "$cid" "127.0.0.1:$echo_port" \
			>"$T/out.$tag" 2>"$T/err.$tag" &
	else
		"$CTL" connect --cluster "$cid" "127.0.0.1:$echo_port" <"$T/blob.$tag" \
			>"$T/out.$tag" 2>"$T/err.$tag" &
	fi
	pid=$!
	PIDS+=("$pid")
	wait_until 60 "the $size-byte stream $tag to end (held until an unrelated event?)" \
		gone "$pid"
	wait "$pid" || rc=$?
	[ "$rc" = 0 ] || fail "stream $tag: tetherctl connect exited $rc: $(cat "$T/err.$tag")"
	cmp -s "$T/blob.$tag" "$T/out.$tag" ||
		fail "stream $tag: $size bytes sent, $(wc -c <"$T/out.$tag") other bytes back"
}

start_pair --workers 1
for size in "${SIZES[@]}"; do
	stream "$size" "w1-$size-1"
	stream "$size" "w1-$size-2"
	stream "$size" "w1-$size-3" pipe
done
pass "--workers 1: ${#SIZES[@]} sizes x 3 streams (one from a pipe) came back whole, none held"
stop_pair

start_pair --workers 2 --landing any
for size in "${SIZES[@]}"; do
	stream "$size" "w2-$size-1"
	stream "$size" "w2-$size-2"
	stream "$size" "w2-$size-3" pipe
done
pass "--workers 2 --landing any: ${#SIZES[@]} sizes x 3 streams (one from a pipe) came back whole, none held"
stop_pair
