#!/usr/bin/env bash
# kill -9 of the node's side during join and during registration: running
# the same command again completes, the state directory is never left half
# written, and no orphaned agent record blocks the node name.
#
# The kills are placed exactly with strace's fault injection: SIGKILL on
# entry to the Nth rename(2), i.e. after a file's temporary copy is written
# and synced but before it takes its name.  join renames agent.key, ca.crt,
# import.token, state.json in that order; the first `run` renames
# status.json, then state.json once the gateway has answered REGISTERED
# (the agent record is committed by then: the worst moment to die).
source "$(dirname "$0")/lib.sh"

# kill_at_rename N CMD...: runs CMD under strace, SIGKILLed as it enters its
# Nth rename.  LeakSanitizer cannot run under ptrace: leaks are checked on
# the runs that follow, not on the killed one.
kill_at_rename() {
	local n=$1 rc=0
	shift
	ASAN_OPTIONS=detect_leaks=0 strace -f -qq -o /dev/null -e trace=rename \
		-e inject=rename:signal=KILL:when="$n" "$@" || rc=$?
	[ "$rc" -eq 137 ] || fail "expected SIGKILL at rename $n, got exit $rc: $*"
}

no_temps() { # no_temps DIR: nothing half written is left
	if ls "$1" | grep -q '\.tmp\.'; then fail "$1 holds temporary files: $(ls "$1")"; fi
}

gateway_init
gateway_start
cid=$(cluster_create crashnode)
ctl token create --cluster "$cid" --uses 4 >"$T/join.json"

# --- join, killed before each of its four renames ---
for k in 1 2 3 4; do
	n=j$k
	kill_at_rename "$k" "$CLIENT" join --state-dir "$T/$n" --node-name "$n" <"$T/join.json"
	[ -e "$T/$n/state.json" ] && fail "$n: state.json exists after a join killed at rename $k"
	ls "$T/$n" | grep -q '\.tmp\.' || fail "$n: the kill at rename $k left no temporary file (not where it was meant to be)"
	expect_exit 1 "$CLIENT" run --state-dir "$T/$n"
	assert_contains "$T/last.err" "not joined"
	join_node "$n" "$T/join.json" >/dev/null || fail "$n: join again after the kill failed"
	no_temps "$T/$n"
	client_start "$n"
done
for k in 1 2 3 4; do wait_until 30 "j$k active" agent_is "j$k" active; done
pass "join killed before each of its renames: not joined, nothing half written; join again completes and the agent becomes active"

# records_of NODE: agent records of NODE in the cluster
records_of() { ctl agent list | jq --arg n "$1" '[.[] | select(.node == $n)] | length'; }

# --- the first run, killed once the gateway committed the registration ---
# r1 runs again; r2 is joined again with the same document, then run.  A
# one-use token each: a second registration that spent a use would fail.
for n in r1 r2; do
	ctl token create --cluster "$cid" >"$T/$n.json"
	join_node "$n" "$T/$n.json" >/dev/null
	kill_at_rename 2 "$CLIENT" run --state-dir "$T/$n"
	wait_until 10 "$n's registration committed" \
		test "$(records_of "$n")" -eq 1
	[ "$(jq -r .agent_id "$T/$n/state.json")" = "" ] ||
		fail "$n: state.json names an agent although the kill came before it was saved"
done
client_start r1
r1_pid=$CLIENT_PID
join_node r2 "$T/r2.json" >/dev/null || fail "r2: join again after the killed run failed"
no_temps "$T/r2"
client_start r2
r2_pid=$CLIENT_PID
for n in r1 r2; do
	wait_until 30 "$n active" agent_is "$n" active
	[ "$(records_of "$n")" -eq 1 ] || fail "$n has $(records_of "$n") agent records"
done
# Stopped first: a running agent may be writing status.json at that moment.
client_stop "$r1_pid"
client_stop "$r2_pid"
for n in r1 r2; do no_temps "$T/$n"; done
assert_contains "$T/gateway.log" "retried=true"
pass "a first run killed after the gateway registered it: run again, or join again and run, gets the same agent; one record per node"

gateway_stop
