#!/usr/bin/env bash
# Node key rotation (docs/interface.md, "Node key rotation"):
#   - `tetherctl agent rotate-key` rotates a connected agent's key: the
#     agent stays active, its agent.key is new (0600), the old key is
#     refused from then on, and the new one connects after a restart;
#   - `run --max-key-age` makes an agent whose key file is older ask for a
#     rotation by itself;
#   - kill -9 of the agent, then of the gateway, at each step of a rotation
#     (each process stopped there by its test hook, TETHER_TEST_STOP_AT,
#     then killed): the node always comes back active, the rotation ends,
#     and of every key the node held along the way exactly one is accepted.
source "$(dirname "$0")/lib.sh"

# pub_of FILE: the raw Ed25519 public key of a PEM private key, in hex.
pub_of() { openssl pkey -in "$1" -pubout -outform DER | tail -c 32 | od -An -tx1 | tr -d ' \n'; }

# key_accepted FILE: 0 if the gateway accepts the key in FILE for n1.  A
# copy of n1's state directory with that key runs once: a refused key
# exits 1 at once (auth_refused); an accepted one connects, and is stopped.
key_accepted() {
	local d=$T/probe rc=0
	rm -rf "$d"
	mkdir -p "$d"
	cp "$T/n1/state.json" "$T/n1/ca.crt" "$d/"
	install -m 600 "$1" "$d/agent.key"
	rm -f "$T/probe.err"   # not the last probe's lines: it opens its own later
	timeout 20 "$CLIENT" run --state-dir "$d" --max-key-age 0 >"$T/probe.out" 2>"$T/probe.err" &
	local pid=$!
	until grep -Eq 'msg="?connected"? |gateway refused' "$T/probe.err" 2>/dev/null; do
		kill -0 "$pid" 2>/dev/null || break
		sleep 0.05
	done
	if grep -Eq 'msg="?connected"? ' "$T/probe.err"; then
		kill -TERM "$pid"
		wait "$pid" || true
		return 0
	fi
	wait "$pid" || rc=$?
	[ "$rc" -eq 1 ] || fail "probe with $1 exited $rc, not 1: $(cat "$T/probe.err")"
	grep -Eq 'code="?auth_refused' "$T/probe.err" || fail "probe with $1: refused, but not auth_refused: $(cat "$T/probe.err")"
	return 1
}

rotation() { agent_field "$id" key | jq -er .rotation; }
settled() { [ "$(rotation)" = none ] && [ ! -e "$T/n1/agent.key.pending" ] && agent_is n1 active; }

# exactly_one_valid KEYFILE...: of the distinct keys given and the one in
# n1/agent.key, only the latter is accepted.  (The probe connecting as n1 replaces n1's
# tunnel for a moment; n1 redials.)
exactly_one_valid() {
	local now k seen=" "
	now=$(pub_of "$T/n1/agent.key")
	cp "$T/n1/agent.key" "$T/now.key"
	for k in "$T/now.key" "$@"; do
		local p
		p=$(pub_of "$k")
		case "$seen" in *" $p "*) continue ;; esac
		seen="$seen$p "
		if [ "$p" = "$now" ]; then
			key_accepted "$k" || fail "the node's key $k is refused"
		else
			if key_accepted "$k"; then fail "a key the node gave up ($k) is still accepted"; fi
		fi
	done
}

gateway_init
gateway_start
cid=$(cluster_create rotate)
ctl token create --cluster "$cid" >"$T/n1.json"
join_node n1 "$T/n1.json" >/dev/null
client_start n1
agent_pid=$CLIENT_PID
wait_until 30 "n1 active" agent_is n1 active
id=$(agent_id_of n1)

# --- an operator's rotation ---
cp "$T/n1/agent.key" "$T/key0"
[ "$(rotation)" = none ] || fail "a fresh agent's rotation is $(rotation)"
ctl agent rotate-key "$id" >"$T/rotate.json"
jq -e '.key.rotation == "requested" or .key.rotation == "staged" or .key.rotation == "none"' \
	"$T/rotate.json" >/dev/null || fail "rotate-key answered $(cat "$T/rotate.json")"
wait_until 20 "rotation done" settled
[ "$(pub_of "$T/n1/agent.key")" != "$(pub_of "$T/key0")" ] || fail "agent.key did not change"
assert_mode "$T/n1/agent.key" 600
assert_contains "$T/gateway.log" 'msg="agent key rotated"'
assert_contains "$T/client-n1.log" 'msg="key rotated: the node uses its new key"'
cp "$T/n1/agent.key" "$T/key1"
if key_accepted "$T/key0"; then fail "the old key is still accepted after the rotation"; fi
wait_until 30 "n1 back after the probe" agent_is n1 active
client_stop "$agent_pid"
client_start n1
agent_pid=$CLIENT_PID
wait_until 30 "n1 active with its new key" agent_is n1 active
pass "rotate-key: new key in agent.key (0600), agent active throughout, old key refused, new key connects after a restart"

# --- the agent's own maximum key age ---
client_stop "$agent_pid"
touch -d '400 days ago' "$T/n1/agent.key"
cp "$T/n1/agent.key" "$T/key2"
client_start n1 --max-key-age 365
agent_pid=$CLIENT_PID
wait_until 30 "rotation asked by the agent" grep -q 'key older than --max-key-age' "$T/client-n1.log"
wait_until 20 "rotation done" settled
[ "$(pub_of "$T/n1/agent.key")" != "$(pub_of "$T/key2")" ] || fail "agent.key did not change"
pass "--max-key-age 365 with a 400-day-old key: the agent asked and its key was rotated"

# --- kill -9 at each step ---
# kill_at WHO STEP: WHO (agent or gateway) runs with the hook at STEP; a
# rotation is asked for; once WHO has stopped there it is killed -9 and
# started again without the hook.
kill_at() {
	local who=$1 step=$2 log pid ctl_pid=
	cp "$T/n1/agent.key" "$T/before-$step"
	if [ "$who" = agent ]; then
		client_stop "$agent_pid"
		TETHER_TEST_STOP_AT=$step client_start n1
		agent_pid=$CLIENT_PID
		pid=$agent_pid
		log=$T/client-n1.log
	else
		gateway_stop
		TETHER_TEST_STOP_AT=$step gateway_start
		pid=$GW_PID
		log=$T/gateway.log
	fi
	wait_until 30 "n1 active before $step" agent_is n1 active
	# The hook stops the whole gateway process (SIGSTOP), its other loop
	# too: the API's answer to rotate-key can be caught unsent (the
	# agent's proof came first; a fresh machine's make test-fresh saw
	# tetherctl time out), so a gateway step's request is not waited for.
	if [ "$who" = agent ]; then
		ctl agent rotate-key "$id" >/dev/null
	else
		ctl agent rotate-key "$id" >"$T/rotate-$step.json" 2>&1 &
		ctl_pid=$!
		PIDS+=("$ctl_pid")
	fi
	wait_until 20 "$who stopped at $step" grep -Eq "step=\"?$step\"?( |$)" "$log"
	kill -KILL "$pid"
	wait "$pid" 2>/dev/null || true
	# Its answer or its cut connection, either is fine: the gateway died.
	if [ "$who" = gateway ]; then wait "$ctl_pid" 2>/dev/null || true; fi
	cp "$T/n1/agent.key" "$T/cur-$step"
	if [ -e "$T/n1/agent.key.pending" ]; then cp "$T/n1/agent.key.pending" "$T/pend-$step"; fi
	if [ "$who" = agent ]; then
		client_start n1
		agent_pid=$CLIENT_PID
	else
		# The hook's line is counted once: a fresh log for the next step.
		mv "$T/gateway.log" "$T/gateway-$step.log"
		gateway_start
	fi
	wait_until 40 "n1 active and the rotation settled after a kill at $step" settled
	local keys=("$T/before-$step" "$T/cur-$step")
	if [ -e "$T/pend-$step" ]; then keys+=("$T/pend-$step"); fi
	exactly_one_valid "${keys[@]}"
	wait_until 30 "n1 back after the probes" agent_is n1 active
	# The stop must have come where it says: mid-rotation, not before.
	[ "$(pub_of "$T/n1/agent.key")" != "$(pub_of "$T/before-$step")" ] ||
		fail "after a kill at $step the node's key is still the one before"
}

for step in agent-pending agent-proof-sent agent-rotated agent-switched; do
	kill_at agent "$step"
	log "agent killed at $step: node active, rotation settled, one key valid"
done
pass "kill -9 of the agent at each step: the node comes back active, exactly one key valid"

for step in gateway-proof gateway-staged gateway-switched gateway-committed; do
	kill_at gateway "$step"
	log "gateway killed at $step: node active, rotation settled, one key valid"
done
pass "kill -9 of the gateway at each step: the node comes back active, exactly one key valid"

client_stop "$agent_pid"
gateway_stop
