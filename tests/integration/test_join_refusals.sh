#!/usr/bin/env bash
# Every way a join can be refused: the right exit code, the reason, and
# nothing written to the state directory.
source "$(dirname "$0")/lib.sh"

gateway_init
gateway_start
cid=$(cluster_create refusals)
ctl token create --cluster "$cid" >"$T/join.json"

# nothing_written DIR: the state directory does not exist or is empty.
nothing_written() {
	[ ! -e "$1" ] || [ -z "$(ls -A "$1")" ] || fail "$1 was written: $(ls -A "$1")"
}

doc_with() { # doc_with JQ_FILTER > file
	jq -c "$1" "$T/join.json"
}

printf '{"gateway_url":' >"$T/bad.json"
expect_exit 2 "$CLIENT" join --state-dir "$T/bad1" <"$T/bad.json"
nothing_written "$T/bad1"
doc_with 'del(.cluster)' >"$T/bad.json"
expect_exit 2 "$CLIENT" join --state-dir "$T/bad2" <"$T/bad.json"
assert_contains "$T/last.err" cluster
nothing_written "$T/bad2"
doc_with '. + {"extra": 1}' >"$T/bad.json"
expect_exit 2 "$CLIENT" join --state-dir "$T/bad3" <"$T/bad.json"
nothing_written "$T/bad3"
expect_exit 2 "$CLIENT" join --state-dir "$T/bad4" </dev/null
nothing_written "$T/bad4"
expect_exit 2 "$CLIENT" join --state-dir "$T/bad5" --allow "no-port" <"$T/join.json"
nothing_written "$T/bad5"
pass "malformed documents and flags: exit 2, nothing written"

doc_with '.expires_at = "2020-01-01T00:00:00Z"' >"$T/expired.json"
expect_exit 2 "$CLIENT" join --state-dir "$T/exp" <"$T/expired.json"
assert_contains "$T/last.err" expired
nothing_written "$T/exp"
pass "an expired document: exit 2, nothing written"

doc_with '.ca_checksum = "sha256:" + ("0" * 64)' >"$T/wrongca.json"
expect_exit 4 "$CLIENT" join --state-dir "$T/wrongca" <"$T/wrongca.json"
assert_contains "$T/last.err" "checksum"
nothing_written "$T/wrongca"
pass "a wrong CA checksum: exit 4, nothing written"

jq -c --arg u "https://127.0.0.1:$(free_port)" ".gateway_url = \$u" "$T/join.json" >"$T/unreach.json"
# With the default --timeout (30 s): retried, then given up (docs/0043).
expect_exit 4 "$CLIENT" join --state-dir "$T/unreach" <"$T/unreach.json"
assert_contains "$T/last.err" "gave up after"
assert_contains "$T/last.err" "(--timeout 30s)"
nothing_written "$T/unreach"
pass "an unreachable gateway: retried for the default --timeout, then exit 4, nothing written"

# A node that belongs to one cluster refuses a document for another.
join_node node1 "$T/join.json" >/dev/null
cp "$T/node1/state.json" "$T/state-before.json"
other=$(cluster_create other)
ctl token create --cluster "$other" >"$T/other.json"
expect_exit 3 join_node node1 "$T/other.json"
assert_contains "$T/last.err" "$cid"
cmp -s "$T/state-before.json" "$T/node1/state.json" || fail "state.json changed"
pass "already joined to another cluster: exit 3, nothing changed"

# Registered once, the same state dir is not silently joined again.
client_start node1
wait_until 20 "node1 active" agent_is node1 active
ctl token create --cluster "$cid" >"$T/again.json"
expect_exit 3 join_node node1 "$T/again.json"
assert_contains "$T/last.err" "already joined"
pass "re-joining a registered node is refused (exit 3) with how to do it"

# Another state dir under the same node name is refused at registration.
join_node node1-copy "$T/again.json" >/dev/null
jq '.node = "node1"' "$T/node1-copy/state.json" >"$T/s.json" && cp "$T/s.json" "$T/node1-copy/state.json"
expect_exit 1 "$CLIENT" run --state-dir "$T/node1-copy"
assert_contains "$T/last.err" "already registered"
pass "a second node with the same name is refused, not duplicated"

# Unknown token: well-formed, never issued.
jq -c '.token = "tti_0123456789abcdef.AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA"' "$T/join.json" >"$T/unknown.json"
join_node ghost "$T/unknown.json" >/dev/null
expect_exit 1 "$CLIENT" run --state-dir "$T/ghost"
assert_contains "$T/last.err" "unknown import token"
pass "an unknown token: run exits 1 with the gateway's reason"

# Expired at the gateway: a token that lives 2 s, joined in time, run too late.
ctl token create --cluster "$cid" --ttl 2s >"$T/short.json"
join_node late "$T/short.json" >/dev/null
exp=$(date -d "$(jq -r .expires_at "$T/short.json")" +%s)
clock_past() { [ "$(date +%s)" -gt "$1" ]; }
wait_until 10 "the short token to expire" clock_past "$exp"
expect_exit 1 "$CLIENT" run --state-dir "$T/late"
assert_contains "$T/last.err" "expired"
pass "a token expired at the gateway: run exits 1 saying so"

expect_exit 1 "$CLIENT" run --state-dir "$T/never-joined"
assert_contains "$T/last.err" "not joined"
pass "run without joining exits 1 saying so"

gateway_stop
