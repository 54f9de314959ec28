#!/usr/bin/env bash
# State survives a gateway restart: agents reconnect by themselves, stay
# active and are not duplicated.
source "$(dirname "$0")/lib.sh"

gateway_init
gateway_start
cid=$(cluster_create restart)
ctl token create --cluster "$cid" --uses 2 >"$T/join.json"
for n in n1 n2; do
	join_node "$n" "$T/join.json" >/dev/null
	client_start "$n"
done
for n in n1 n2; do wait_until 20 "$n active" agent_is "$n" active; done
ids_before=$(ctl agent list | jq -c '[.[].id] | sort')

gateway_stop
wait_until 10 "agents notice the gateway is gone" \
	jq -e '.connected == false' "$T/n1/status.json"
gateway_start
for n in n1 n2; do wait_until 40 "$n reconnected and active" agent_is "$n" active; done
ids_after=$(ctl agent list | jq -c '[.[].id] | sort')
[ "$ids_before" = "$ids_after" ] || fail "agents before $ids_before, after $ids_after"
pass "after a restart the same two agents are back, active, no duplicates"

gateway_stop
