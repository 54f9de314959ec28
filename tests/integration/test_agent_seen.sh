#!/usr/bin/env bash
# Every agent's release and last contact are known, and kept (issue 20), on
# SQLite and on PostgreSQL (schema version 6):
# - connected: `tetherctl agent list` shows `version` (the agent's release,
#   from its HELLO), `connected_since` and `last_seen`;
# - the agent stopped: `connected_since` is null, `last_seen` is when its
#   tunnel ended, the agent is not forgotten;
# - the gateway restarted: `last_seen` and `version` are as before;
# - the gateway killed with -9 while the agent is connected (no tunnel end
#   is written): the store's last_seen of a connected agent is renewed every
#   --census-interval (presence.c; 30 s by default, 2 s here), so after the
#   restart `last_seen` is no older than that and the lease (6 s) before
#   the kill (16 s allowed), and later than the tunnel came up.
source "$(dirname "$0")/lib.sh"

release=$("$CLIENT" --version | awk '{print $2}')
field() { ctl agent list | jq -r --arg id "$id" ".[] | select(.id == \$id) | .$1"; }
gone() { [ "$(field connected)" = false ]; }

# stored_seen BACKEND: the store's last_seen of $id (Unix s), read directly
# (agent list says "now" while the agent is connected).
stored_seen() {
	if [ "$1" = sqlite ]; then
		sqlite3 -batch -noheader "file:$GW_DIR/tether.db?mode=ro" \
			"SELECT last_seen FROM agents WHERE id = '$id'"
	else
		pg_query "SELECT last_seen FROM agents WHERE id = '$id'"
	fi
}
# by_version_is N: /metrics says N agents of this release.
by_version_is() {
	curl -sf "http://127.0.0.1:$MP/metrics" >"$T/m.txt" &&
		[ "$(awk -v s="tether_agents_by_version{version=\"$release\"}" \
			'$1 == s { print $2 }' "$T/m.txt")" = "$1" ]
}
seen_after() { [ "$(stored_seen "$1")" -gt "$2" ]; }   # seen_after BACKEND S
unix() { date -d "$1" +%s; }
census=(--census-interval 2000)   # the periodic job at every lease renewal

scenario() { # scenario BACKEND [gateway_init flags]
	local backend=$1 since seen up killed
	shift
	rm -rf "$T/gw" "$T/n1"
	gateway_init "$@"
	gateway_start "$@" "${census[@]}"
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
	MP=$(free_port)
	gateway_start "$@" "${census[@]}" --metrics-listen "127.0.0.1:$MP"
	[ "$(field last_seen)" = "$seen" ] || fail "$backend: last_seen $(field last_seen) after a restart, was $seen"
	[ "$(field version)" = "$release" ] || fail "$backend: version $(field version) after a restart"
	[ "$(field connected)" = false ] || fail "$backend: connected after a restart"
	pass "$backend: the gateway restarted: last_seen and version as before"

	# kill -9 with the agent connected: no tunnel end is ever written.
	client_start n1
	wait_until 30 "n1 active again" agent_is n1 active
	up=$(stored_seen "$backend")
	wait_until 45 "the periodic last_seen of the connected agent (every 2 s)" \
		seen_after "$backend" "$up"
	# The same job (the census) counts the agents by release.
	wait_until 10 "tether_agents_by_version{version=\"$release\"} 1" by_version_is 1
	promtool check metrics <"$T/m.txt" || fail "$backend: promtool check metrics refuses /metrics"
	pass "$backend: tether_agents_by_version{version=\"$release\"} 1, counted in the store"
	kill -9 "$GW_PID"
	wait "$GW_PID" 2>/dev/null || true
	killed=$(date +%s)
	client_stop "$CLIENT_PID"
	# Another replica id: the killed one's tunnel rows end with its lease
	# (6 s) whatever a restart under the same id does with them.
	gateway_start "$@" "${census[@]}" --replica-id "after-kill-$backend" \
		--metrics-listen "127.0.0.1:$MP"
	wait_until 20 "n1 not connected after the restart" gone
	seen=$(unix "$(field last_seen)")
	# The census stamps now minus the lease (6 s), every 2 s here: 8 s
	# old at most, and as much again for a loaded machine.
	[ "$seen" -gt "$up" ] && [ "$seen" -ge $((killed - 16)) ] ||
		fail "$backend: last_seen $(field last_seen) after kill -9 at $killed (tunnel up at $up)"
	pass "$backend: kill -9: last_seen $(field last_seen), $((killed - seen)) s before the kill"
	gateway_stop
}

scenario sqlite
pg_start
scenario postgres --store "$PG_URL"
