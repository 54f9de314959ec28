#!/usr/bin/env bash
# The static agents (make agent-static: build/static/ARCH/tether-client)
# where they will run, against a real gateway on loopback: arm64 and armhf
# under qemu-user (qemu-aarch64, qemu-arm invoked directly), amd64 chrooted
# into a directory that holds the binary, its state dir, /etc/hosts and
# /etc/resolv.conf and nothing else: no shared library, no NSS module, no
# loader.  Each joins through a name (gw.tether.test, in that root's
# /etc/hosts only: the agent resolves with libevent's evdns, not glibc's
# NSS), becomes active, carries a stream, gives back its start-up memory
# and still carries one, and comes back active after its own restart and
# after the gateway's.  qemu's -L ROOT serves the root's
# /etc files to the emulated agents the same way.
source "$(dirname "$0")/lib.sh"

STATIC=$TETHER_SRC/build/static
GW_NAME=gw.tether.test
for a in amd64 arm64 armhf; do
	bin=$STATIC/$a/tether-client
	[ -x "$bin" ] || fail "no $bin: run make agent-static (make test builds it)"
	# No program interpreter, no dynamic section: nothing to load.
	if readelf -lW "$bin" | grep -q 'Requesting program interpreter'; then
		fail "$bin asks for a program interpreter"
	fi
	readelf -dW "$bin" | grep -q 'There is no dynamic section' ||
		fail "$bin has a dynamic section: $(readelf -dW "$bin" | grep NEEDED)"
done
pass "build/static/{amd64,arm64,armhf}/tether-client: no interpreter, no dynamic section"

# The gateway answers to $GW_NAME (its certificate names it, and join
# documents carry it); tetherctl and curl here still use 127.0.0.1.
GW_PORT=$(free_port)
GW_URL=https://127.0.0.1:$GW_PORT
GW_DIR=$T/gw
"$GATEWAY" init --data-dir "$GW_DIR" --hostname "$GW_NAME" \
	--url "https://$GW_NAME:$GW_PORT" >"$T/init.out" 2>&1
export TETHER_SERVER=$GW_URL TETHER_TOKEN_FILE=$GW_DIR/admin.token TETHER_CACERT=$GW_DIR/ca.crt
gateway_start
cid=$(cluster_create static)
python3 "$TETHER_SRC/tests/integration/tcpserver.py" echo "$T/echo.port" &
PIDS+=($!)
wait_until 10 "echo server" test -s "$T/echo.port"
echo_port=$(cat "$T/echo.port")

# A root per architecture: /etc/hosts names the gateway, resolv.conf points
# at a closed port (a lookup that left /etc/hosts would fail, not hang).
make_root() { # make_root ARCH: $T/root-ARCH
	local r=$T/root-$1
	mkdir -p "$r/etc"
	printf '127.0.0.1 %s\n' "$GW_NAME" >"$r/etc/hosts"
	printf 'nameserver 127.0.0.1\noptions timeout:1 attempts:1\n' >"$r/etc/resolv.conf"
}

# run_agent ARCH CMD...: the agent of ARCH, its state dir /state in its root.
agent_cmd() { # agent_cmd ARCH: the command line's head for ARCH
	local r=$T/root-$1
	case $1 in
	amd64) echo chroot "$r" /tether-client ;;
	arm64) echo qemu-aarch64 -L "$r" "$r/tether-client" ;;
	armhf) echo qemu-arm -L "$r" "$r/tether-client" ;;
	esac
}
state_of() { # state_of ARCH: the state dir as the agent names it
	if [ "$1" = amd64 ]; then echo /state; else echo "$T/root-$1/state"; fi
}
agent_start() { # agent_start ARCH: sets CLIENT_PID
	# shellcheck disable=SC2046
	$(agent_cmd "$1") run --state-dir "$(state_of "$1")" --log-level debug >>"$T/client-$1.log" 2>&1 &
	CLIENT_PID=$!
	PIDS+=("$CLIENT_PID")
}
active() { # active ARCH
	local id
	id=$(jq -er '.agent_id | select(. != "")' "$T/root-$1/state/state.json") || return 1
	ctl agent list | jq -e --arg id "$id" \
		'.[] | select(.id == $id and .state == "active" and .connected == true)' >/dev/null
}
stream_ok() { # stream_ok ARCH WORD: a stream through the node echoes WORD
	local out
	out=$(printf '%s' "$2" | "$CTL" connect --cluster "$cid" --node "node-$1" "127.0.0.1:$echo_port") ||
		fail "$1: stream through the tunnel failed"
	[ "$out" = "$2" ] || fail "$1: stream echoed \"$out\", want \"$2\""
}

declare -A pid_of
for a in amd64 arm64 armhf; do
	make_root "$a"
	cp "$STATIC/$a/tether-client" "$T/root-$a/tether-client"
	ctl token create --cluster "$cid" >"$T/join-$a.json"
	# shellcheck disable=SC2046
	$(agent_cmd "$a") join --state-dir "$(state_of "$a")" --node-name "node-$a" \
		--allow "127.0.0.1:$echo_port" <"$T/join-$a.json" >"$T/join-$a.out" 2>&1 ||
		{ cat "$T/join-$a.out" >&2; fail "$a: join failed"; }
	# shellcheck disable=SC2046
	$(agent_cmd "$a") --version | grep -q "($a, static)" ||
		fail "$a: --version does not say ($a, static)"
	agent_start "$a"
	pid_of[$a]=$CLIENT_PID
done
# The agents ran only from their roots: the host has no gw.tether.test.
if getent hosts "$GW_NAME" >/dev/null; then
	fail "this host resolves $GW_NAME itself: the test would not show the agents' own resolution"
fi
for a in amd64 arm64 armhf; do
	wait_until 60 "$a active" active "$a"
	stream_ok "$a" "hello-$a"
done
pass "joined by name, active and carrying a stream: amd64 from an empty chroot, arm64 and armhf under qemu-user"

# 2 s after its tunnel came up an agent gives back its start-up memory
# (docs/0025), dropping pages of its writable data that hold the file's
# bytes: under qemu-user the pagemap it reads is the host's, and trusting it
# alone dropped written pages (glibc's stack guard: "stack smashing
# detected").  Each agent released and still runs and carries a stream.
released() { # released ARCH: it logged its release, or it is gone
	grep -q 'start-up memory released' "$T/client-$1.log" || ! kill -0 "${pid_of[$1]}" 2>/dev/null
}
for a in amd64 arm64 armhf; do
	wait_until 60 "$a to release its start-up memory" released "$a"
done
kib=
for a in amd64 arm64 armhf; do
	kill -0 "${pid_of[$a]}" 2>/dev/null || fail "$a exited after its release: $(tail -3 "$T/client-$a.log")"
	stream_ok "$a" "released-$a"
	kib+=" $a $(grep -o 'memory released" kib=[0-9]*' "$T/client-$a.log" | head -1 | cut -d= -f2) KiB"
done
pass "each agent gave back its start-up memory (${kib# }) and carries a stream after"

for a in amd64 arm64 armhf; do
	client_stop "${pid_of[$a]}"
	agent_start "$a"
	pid_of[$a]=$CLIENT_PID
done
for a in amd64 arm64 armhf; do
	wait_until 60 "$a active after its restart" active "$a"
	stream_ok "$a" "again-$a"
done
pass "each agent restarted (SIGTERM: exit 0): active again, a stream through it"

gateway_stop
gateway_start
for a in amd64 arm64 armhf; do
	wait_until 60 "$a reconnected after the gateway's restart" active "$a"
	stream_ok "$a" "back-$a"
done
for a in amd64 arm64 armhf; do
	client_stop "${pid_of[$a]}"
done
gateway_stop
pass "after the gateway's restart every static agent reconnected by itself and carries a stream"
