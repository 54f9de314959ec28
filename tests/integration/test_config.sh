#!/usr/bin/env bash
# Config files (--config FILE, libinih): the example files list exactly the
# keys --help lists, with the defaults it shows; a file's values take
# effect; flags override them; errors name the file, the line and the key.
source "$(dirname "$0")/lib.sh"

for prog in "tether-gateway serve:gateway" "tether-client run:client"; do
	cmd=${prog%%:*} ex=$TETHER_SRC/config/${prog##*:}.conf.example
	# shellcheck disable=SC2086
	$TETHER_BIN/$cmd --help >"$T/help.out"
	n=$(python3 "$TETHER_SRC/tests/integration/conf_keys.py" "$T/help.out" "$ex") ||
		fail "$ex and '$cmd --help' differ: $n"
	pass "$ex lists the same $n keys as '$cmd --help', with its defaults"
done

gateway_init
conf=$T/gw.conf

# The example itself is a valid file; flags override its data-dir and listen.
gateway_start --config "$TETHER_SRC/config/gateway.conf.example"
gateway_stop
pass "config/gateway.conf.example is accepted as it is"

# A file's values take effect: listen and log-level come from the file.
p1=$(free_port) p2=$(free_port)
cat >"$conf" <<CONF
# comment
data-dir = $GW_DIR
listen = 127.0.0.1:$p1
log-level = warn
CONF
: >"$T/gateway.log"
"$GATEWAY" serve --config "$conf" >>"$T/gateway.log" 2>&1 &
GW_PID=$! PIDS+=("$GW_PID")
GW_URL=https://127.0.0.1:$p1
wait_until 20 "gateway listening on the file's port $p1" gateway_ready
gateway_stop
if grep -q 'msg="tether-gateway listening"' "$T/gateway.log"; then
	fail "log-level = warn in the file, but the info line 'tether-gateway listening' was logged"
fi
pass "listen and log-level from the file take effect"

# Flags override the file.
: >"$T/gateway.log"
"$GATEWAY" serve --config "$conf" --listen "127.0.0.1:$p2" --log-level info >>"$T/gateway.log" 2>&1 &
GW_PID=$! PIDS+=("$GW_PID")
GW_URL=https://127.0.0.1:$p2
wait_until 20 "gateway listening on the flag's port $p2" gateway_ready
assert_contains "$T/gateway.log" "msg=\"tether-gateway listening\" version=$(
	"$GATEWAY" --version | cut -d' ' -f2) host=127.0.0.1 port=$p2 "
if curl -s --cacert "$GW_DIR/ca.crt" "https://127.0.0.1:$p1/readyz" >/dev/null; then
	fail "the file's port $p1 answers although --listen overrode it"
fi
gateway_stop
pass "--listen and --log-level override the file's keys"

# The agent reads its file too, and becomes active.
GW_URL=https://127.0.0.1:$GW_PORT
gateway_start
cid=$(cluster_create conf)
ctl token create --cluster "$cid" >"$T/join.json"
join_node n1 "$T/join.json" >/dev/null
printf 'state-dir = %s\nmax-streams = 8\ndial-timeout = 2000\n' "$T/n1" >"$T/client.conf"
"$CLIENT" run --config "$T/client.conf" >>"$T/client-n1.log" 2>&1 &
cpid=$! PIDS+=("$cpid")
wait_until 20 "agent with state-dir from its file active" agent_is n1 active
client_stop "$cpid"
gateway_stop
pass "tether-client run takes state-dir from --config and becomes active"

# Errors name the file, the line and the key; exit 2, nothing started.
bad=$T/bad.conf
check_error() { # check_error WANT LINES...
	local want=$1
	shift
	printf '%s\n' "$@" >"$bad"
	expect_exit 2 "$GATEWAY" serve --config "$bad" --data-dir "$GW_DIR"
	assert_contains "$T/last.err" "$want"
}
check_error "$bad:3: unknown key \"max-queu\"" "# x" "listen = 127.0.0.1:0" "max-queu = 5"
check_error "$bad:2: max-queue: wants a number from 65536 to 1073741824, got \"5\"" \
	"listen = 127.0.0.1:0" "max-queue = 5"
check_error "$bad:1: listen: wants HOST:PORT, got \"nowhere\"" "listen = nowhere"
check_error "$bad:1: log-level: wants debug, info, warn or error, got \"loud\"" "log-level = loud"
check_error "$bad:1: impersonate: wants true or false, got \"maybe\"" "impersonate = maybe"
check_error "$bad:2: max-streams: key given twice" "max-streams = 5" "max-streams = 6"
check_error "$bad:2: max-streams: under section [gateway]" "[gateway]" "max-streams = 5"
check_error "$bad:2: not a \"key = value\" line" "max-streams = 5" "just words"
check_error "$bad:1: line longer than" "store = sqlite://$(head -c 400 /dev/zero | tr '\0' a)"
# A bad key is an error even when a flag overrides it.
printf 'max-queue = lots\n' >"$bad"
expect_exit 2 "$GATEWAY" serve --config "$bad" --data-dir "$GW_DIR" --max-queue 65536
assert_contains "$T/last.err" "$bad:1: max-queue: wants a number"
expect_exit 2 "$GATEWAY" serve --config "$T/missing.conf" --data-dir "$GW_DIR"
assert_contains "$T/last.err" "--config $T/missing.conf: No such file or directory"
printf 'listen = 127.0.0.1:0\n' >"$bad"
expect_exit 2 "$GATEWAY" serve --config "$bad"
assert_contains "$T/last.err" "--data-dir DIR is required"
printf 'bogus = 1\n' >"$T/badc.conf"
expect_exit 2 "$CLIENT" run --config "$T/badc.conf"
assert_contains "$T/last.err" "$T/badc.conf:1: unknown key \"bogus\""
pass "bad files are refused with FILE:LINE: KEY: reason, exit 2"
