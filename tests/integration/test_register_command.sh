#!/usr/bin/env bash
# The registration one-liner (`tetherctl token create --format command`):
# pasted into a POSIX shell on the node it joins with the carried document,
# checks the carried CA checksum, and enables the agent's unit; a tampered
# checksum is refused before anything is written or enabled.  systemctl is a
# stub on PATH that records its arguments (no systemd in tests); the state
# directory comes from TETHER_STATE_DIR, which the command honours.
source "$(dirname "$0")/lib.sh"

gateway_init
gateway_start
cid=$(cluster_create oneliner)
sum=$(awk '/^ca_checksum/ {print $2}' "$T/init.out")
[ -n "$sum" ] || fail "no ca_checksum in the output of init"

mkdir "$T/stub"
cat >"$T/stub/systemctl" <<STUB
#!/bin/sh
printf '%s\n' "\$*" >>"$T/systemctl.args"
STUB
chmod +x "$T/stub/systemctl"
: >"$T/systemctl.args"
# The command calls tether-client and systemctl by name, as on a node.
node_path="$T/stub:$TETHER_BIN:$PATH"

# Values are carried literally, quotes and $ included: join sees exactly
# what the operator gave (and refuses this one, before reading anything).
"$CTL" token create --cluster "$cid" --format command \
	--allow "it's\$HOME:1" >"$T/cmdq"
rc=0
PATH=$node_path TETHER_STATE_DIR=$T/nodeq sh -c "$(cat "$T/cmdq")" \
	>"$T/runq.out" 2>"$T/runq.err" || rc=$?
[ "$rc" -eq 2 ] || { cat "$T/runq.err" >&2; fail "bad --allow: exit $rc, want 2"; }
assert_contains "$T/runq.err" "it's\$HOME:1"
[ ! -s "$T/systemctl.args" ] || fail "systemctl ran after a refused join"
pass "flags for join are shell-quoted: a quote and a \$ arrive unchanged"

"$CTL" token create --cluster "$cid" --format command --node-name node1 \
	--allow "127.0.0.1:22" >"$T/cmd"
[ "$(wc -l <"$T/cmd")" -eq 1 ] || fail "the command is not one line: $(cat "$T/cmd")"
assert_contains "$T/cmd" "--ca-checksum '$sum'"
assert_contains "$T/cmd" "&& systemctl enable --now tether-client"
pass "token create --format command prints one line carrying the CA checksum"

rc=0
PATH=$node_path TETHER_STATE_DIR=$T/node1 sh -c "$(cat "$T/cmd")" \
	>"$T/run1.out" 2>"$T/run1.err" || rc=$?
[ "$rc" -eq 0 ] || { cat "$T/run1.err" >&2; fail "the command exited $rc"; }
[ "$(cat "$T/systemctl.args")" = "enable --now tether-client" ] ||
	fail "systemctl got: $(cat "$T/systemctl.args")"
jq -e --arg c "$cid" '.cluster == $c and .node == "node1" and
	(.allow | index("127.0.0.1:22"))' "$T/node1/state.json" >/dev/null ||
	fail "state.json: $(cat "$T/node1/state.json")"
# What the unit would start:
client_start node1
wait_until 20 "node1 active" agent_is node1 active
client_stop "$CLIENT_PID"
pass "the command joins under TETHER_STATE_DIR, enables the unit, and the agent becomes active"

# A tampered checksum on the command line: refused, nothing written, the
# unit not enabled.
"$CTL" token create --cluster "$cid" --format command --node-name node2 >"$T/cmd2"
bad=sha256:$(printf '%064d' 0)
sed "s/--ca-checksum '$sum'/--ca-checksum '$bad'/" "$T/cmd2" >"$T/cmd2.bad"
grep -qF "$bad" "$T/cmd2.bad" || fail "could not tamper with the checksum"
rc=0
PATH=$node_path TETHER_STATE_DIR=$T/node2 sh -c "$(cat "$T/cmd2.bad")" \
	>"$T/run2.out" 2>"$T/run2.err" || rc=$?
[ "$rc" -eq 4 ] || { cat "$T/run2.err" >&2; fail "tampered checksum: exit $rc, want 4"; }
assert_contains "$T/run2.err" "CA checksum mismatch"
[ ! -e "$T/node2" ] || fail "a refused join wrote $T/node2"
[ "$(wc -l <"$T/systemctl.args")" -eq 1 ] || fail "systemctl ran after a refused join"
pass "a tampered checksum: exit 4, nothing written, the unit not enabled"

# The checksum tampered in both places (the document and the flag agree):
# the gateway's CA does not match it, so join still refuses.
b64=$(sed "s/^printf %s '\([^']*\)'.*/\1/" "$T/cmd2")
doc=$(printf %s "$b64" | base64 -d | jq -c --arg s "$bad" '.ca_checksum = $s')
b64bad=$(printf %s "$doc" | base64 -w0)
sed -e "s|^printf %s '[^']*'|printf %s '$b64bad'|" \
	-e "s/--ca-checksum '$sum'/--ca-checksum '$bad'/" "$T/cmd2" >"$T/cmd3.bad"
rc=0
PATH=$node_path TETHER_STATE_DIR=$T/node3 sh -c "$(cat "$T/cmd3.bad")" \
	>"$T/run3.out" 2>"$T/run3.err" || rc=$?
[ "$rc" -eq 4 ] || { cat "$T/run3.err" >&2; fail "forged document: exit $rc, want 4"; }
assert_contains "$T/run3.err" "gateway presents $sum"
[ ! -e "$T/node3" ] || fail "a refused join wrote $T/node3"
[ "$(wc -l <"$T/systemctl.args")" -eq 1 ] || fail "systemctl ran after a refused join"
pass "a checksum forged in the document and the flag: the gateway's CA does not match, exit 4"

gateway_stop
