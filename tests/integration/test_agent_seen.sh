#!/usr/bin/env bash
# Every agent's release and last contact are known, and kept (issue 20), on
# SQLite and on PostgreSQL (schema version 6):
# - connected: `tetherctl agent list` shows `version` (the agent's release,
#   from its HELLO), `connected_since` and `last_seen`;
# - the agent stopped: `connected_since` is null, `last_seen` is when its
#   tunnel ended, the agent is not forgotten;
# - the gateway restarted: `last_seen` and `version` are as before.
source "$(dirname "$0")/lib.sh"

release=$("$CLIENT" --version | awk '{print $2}')
field() { ctl agent list | jq -r --arg id "$id" ".[] | select(.id == \$id) | .$1"; }
gone() { [ "$(field connected)" = false ]; }

scenario() { # scenario BACKEND [gateway_init flags]
	local backend=$1 since seen
	shift
	rm -rf "$T/gw" "$T/n1"
	gateway_init "$@"
	gateway_start "$@"
	cid=$(cluster_create "seen-$backend")
	ctl token create --cluster "$cid" >"$T/join.json"
	join_node n1 "$T/join.json" >/dev/null
	client_start n1
	wait_until 30 "n1 active" agent_is n1 active
	id=$(agent_id_of n1)
	[ "$(field version)" = "$release" ] || fail "$backend: version $(field version), want $release"
	since=$(field connected_since)
	[ "$since" != null ] || fail "$backend: no connected_since while connected"
	[ "$(field last_seen)" != null ] || fail "$backend: no last_seen while connected"
	pass "$backend: connected: version $release, connected_since $since, last_seen $(field last_seen)"

	client_stop "$CLIENT_PID"
	wait_until 10 "n1 disconnected" gone
	wait_until 10 "n1's last_seen recorded at its tunnel's end" \
		test "$(field last_seen)" != null
	seen=$(field last_seen)
	[ "$(field connected_since)" = null ] || fail "$backend: connected_since $(field connected_since) while not connected"
	[[ ! "$seen" < "$since" ]] || fail "$backend: last_seen $seen before connected_since $since"
	pass "$backend: stopped: last_seen $seen, connected_since null, still listed"

	gateway_stop
	gateway_start "$@"
	[ "$(field last_seen)" = "$seen" ] || fail "$backend: last_seen $(field last_seen) after a restart, was $seen"
	[ "$(field version)" = "$release" ] || fail "$backend: version $(field version) after a restart"
	[ "$(field connected)" = false ] || fail "$backend: connected after a restart"
	pass "$backend: the gateway restarted: last_seen and version as before"
	gateway_stop
}

scenario sqlite
pg_start
scenario postgres --store "$PG_URL"
