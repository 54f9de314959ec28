#!/usr/bin/env bash
# Node key rotation across replicas on PostgreSQL (docs/interface.md, "Node
# key rotation"): `rotate-key` asked of replica 1 reaches the agent whose
# tunnel replica 2 holds (the store's notice, docs/0021), which rotates at
# once; an agent offline when asked rotates when it next connects.
source "$(dirname "$0")/lib.sh"

pub_of() { openssl pkey -in "$1" -pubout -outform DER | tail -c 32 | od -An -tx1 | tr -d ' \n'; }

two_replicas_on_pg   # agents join through replica 2's URL
cid=$(on 1 cluster create rot | jq -er .id)
on 1 token create --cluster "$cid" >"$T/n1.json"
join_node n1 "$T/n1.json" >/dev/null
client_start n1
agent_pid=$CLIENT_PID
id_active() { on 1 agent list | jq -e --arg r r2 '.[] | select(.node == "n1" and .state == "active" and .connected and .replica == $r)' >/dev/null; }
wait_until 30 "n1 active on replica 2" id_active
id=$(agent_id_of n1)
rotation() { on 1 agent list | jq -er --arg id "$id" '.[] | select(.id == $id) | .key.rotation'; }
offline() { on 1 agent list | jq -e --arg id "$id" '.[] | select(.id == $id and .connected == false)' >/dev/null; }
settled() { [ "$(rotation)" = none ] && [ ! -e "$T/n1/agent.key.pending" ] && id_active; }

# --- asked of replica 1, carried out on replica 2 ---
cp "$T/n1/agent.key" "$T/key0"
on 1 agent rotate-key "$id" >"$T/rotate.json"
jq -e '.key.rotation == "requested"' "$T/rotate.json" >/dev/null ||
	fail "rotate-key on replica 1 answered $(cat "$T/rotate.json")"
assert_contains "$T/replica1.log" 'held="elsewhere or offline"'
wait_until 20 "the rotation done on replica 2" settled
assert_contains "$T/replica2.log" 'msg="agent key rotated"'
[ "$(pub_of "$T/n1/agent.key")" != "$(pub_of "$T/key0")" ] || fail "agent.key did not change"
pass "rotate-key asked of replica 1: replica 2, which holds the tunnel, rotated the key at once"

# --- asked while the agent is offline ---
client_stop "$agent_pid"
wait_until 20 "n1 offline" offline
cp "$T/n1/agent.key" "$T/key1"
on 1 agent rotate-key "$id" | jq -e '.key.rotation == "requested"' >/dev/null ||
	fail "rotate-key of an offline agent is not requested"
client_start n1
agent_pid=$CLIENT_PID
wait_until 30 "the rotation done at the next connection" settled
[ "$(pub_of "$T/n1/agent.key")" != "$(pub_of "$T/key1")" ] || fail "agent.key did not change"
pass "rotate-key of an offline agent: rotated when it next connected"

client_stop "$agent_pid"
replica_stop 1
replica_stop 2
