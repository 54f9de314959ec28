#!/usr/bin/env bash
# Version skew (docs/interface.md, "Compatibility"; docs/0037): the agent
# and the gateway of an earlier commit, built from this repository's git
# history (tests/tools/old_build.sh, commit $TETHER_OLD_COMMIT, default
# 692108b: the tree as issue 20 started, before HELLO's "version" and before
# agents skipped unknown frames), against this tree's, both ways:
#
#   A. old agent -> new gateway     B. new agent -> old gateway
#
# Each: the old or new agent joins, its tunnel comes up and turns active, a
# `tetherctl connect` stream echoes through it; SIGTERM drains the gateway,
# the agent gets RECONNECT, tries a new tunnel (refused: the gateway is
# draining), the stream keeps echoing and ends cleanly, the gateway exits 0;
# a gateway of the same build restarted on the same port gets the agent back
# by itself and a new stream echoes.  In A, `gateway urls set` (SETTINGS)
# and `agent rotate-key` (KEY_ROTATE), frames the old agent does not know,
# never reach it, and the stream carries on.  Neither side ever logs a protocol
# error: a newer gateway sends an old agent nothing it does not know (it
# cannot skip unknown frames), and an old gateway skips the newer agent's
# HELLO key.  tetherctl is this tree's against both gateways.
#
# Without git history (a shallow clone, a tarball) the test fails and says
# so: it cannot be skipped.
source "$(dirname "$0")/lib.sh"

OLD_COMMIT=${TETHER_OLD_COMMIT:-692108b}
OLD=$(bash "$TETHER_SRC/tests/tools/old_build.sh" "$OLD_COMMIT") ||
	fail "cannot build the old release $OLD_COMMIT from git (see above)"
NEW=$TETHER_BIN
log "old release: $OLD_COMMIT ($OLD); new: $NEW"

echo_server_start

readyz_code() {
	curl -s -o /dev/null -w '%{http_code}' --cacert "$GW_DIR/ca.crt" "$GW_URL/readyz"
}

# no_protocol_error LABEL FILE...: nobody dropped a tunnel over a frame.
no_protocol_error() {
	local label=$1 f
	shift
	for f in "$@"; do
		if grep -E 'protocol error|malformed frame|unknown frame' "$f" |
			grep -v 'frame of an unknown type skipped' >"$T/proto.err"; then
			fail "$label: $(basename "$f") names a protocol error: $(head -3 "$T/proto.err")"
		fi
	done
}

# skew_case LABEL GATEWAY_DIR AGENT_DIR: the whole scenario above, with the
# gateway and the agent from those build directories.
skew_case() {
	local label=$1 gw_bin=$2 agent_bin=$3 cid agent cpid rc node=n-$1
	local clog=$T/client-$node.log
	GATEWAY=$gw_bin/tether-gateway
	CLIENT=$agent_bin/tether-client
	# lib.sh's TLS slot deadlines are flags the old release may not have:
	# its gateway runs on its own defaults.
	[ "$gw_bin" = "$NEW" ] || local -a TLS_DEADLINES=()
	unset GW_PORT
	rm -rf "$T/gw" "$T/gateway.log"
	gateway_init
	gateway_start --drain-timeout 60000
	cid=$(cluster_create "skew-$label")
	ctl token create --cluster "$cid" >"$T/join-$label.json"
	join_node "$node" "$T/join-$label.json" --allow "127.0.0.1:$echo_port" >/dev/null
	client_start "$node"
	agent=$CLIENT_PID
	wait_until 30 "$label: agent active" agent_is "$node" active
	pass "$label: joined, tunnel up, verified and active"
	if [ "$gw_bin" = "$NEW" ]; then
		# The new gateway shows what the agent said of its release: an
		# old agent sends none (version null), and it is seen now.
		ctl agent list | jq -e --arg id "$(agent_id_of "$node")" \
			'.[] | select(.id == $id and .version == null and .last_seen != null
			and .connected_since != null)' >/dev/null ||
			fail "$label: agent list: $(ctl agent list)"
		pass "$label: agent list shows no release for it, and its last_seen"
	fi

	held_connect "$cid" "$node" "127.0.0.1:$echo_port" "$T/out-$label" "$T/connect-$label.err"
	cpid=$HELD_PID
	echo "before the drain" >&7
	wait_until 20 "$label: echo before the drain" grep -q "before the drain" "$T/out-$label"
	pass "$label: a stream echoes through the tunnel"
	if [ "$gw_bin" = "$NEW" ] && [ "$agent_bin" = "$OLD" ]; then
		# The gateway's URL list set (SETTINGS, pushed to the agents that
		# know it): nothing reaches the old agent; the stream goes on.
		ctl gateway urls set "$GW_URL" >/dev/null
		echo "after urls set" >&7
		wait_until 20 "$label: echo after urls set" grep -q "after urls set" "$T/out-$label"
		pass "$label: gateway urls set with an old agent connected: the stream carries on"
		# A key rotation asked of an agent too old for KEY_ROTATE: the
		# gateway says so and sends it nothing; the stream goes on.
		ctl agent rotate-key "$(agent_id_of "$node")" >/dev/null
		wait_until 10 "$label: the gateway declines to rotate an old agent's key" \
			grep -q "msg=\"agent key rotation: this agent's release cannot rotate" "$T/gateway.log"
		echo "after rotate-key" >&7
		wait_until 20 "$label: echo after rotate-key" grep -q "after rotate-key" "$T/out-$label"
		pass "$label: rotate-key on an old agent: declined, the tunnel and its stream carry on"
	fi

	kill -TERM "$GW_PID"
	wait_until 5 "$label: /readyz 503 during the drain" test "$(readyz_code)" = 503
	wait_until 20 "$label: the agent gets RECONNECT" \
		grep -q 'msg="gateway asks to reconnect elsewhere" reason="gateway draining"' "$clog"
	wait_until 20 "$label: the draining gateway refuses the agent's new tunnel" \
		grep -q 'msg="cannot open the tunnel".*http_status=503' "$clog"
	echo "during the drain" >&7
	wait_until 20 "$label: echo during the drain" grep -q "during the drain" "$T/out-$label"
	exec 7>&-
	rc=0
	wait "$cpid" || rc=$?
	[ "$rc" -eq 0 ] || fail "$label: tetherctl connect exited $rc: $(cat "$T/connect-$label.err")"
	rc=0
	wait "$GW_PID" || rc=$?
	[ "$rc" -eq 0 ] || fail "$label: the gateway exited $rc after its drain"
	GW_PID=
	pass "$label: RECONNECT followed; the stream in flight kept echoing and ended cleanly"

	mv "$T/gateway.log" "$T/gateway-$label-1.log"
	gateway_start --drain-timeout 1500
	wait_until 40 "$label: the agent back on the restarted gateway" agent_is "$node" active
	held_connect "$cid" "$node" "127.0.0.1:$echo_port" "$T/out2-$label" "$T/connect-$label.err"
	cpid=$HELD_PID
	echo "after the restart" >&7
	wait_until 20 "$label: echo after the restart" grep -q "after the restart" "$T/out2-$label"
	exec 7>&-
	rc=0
	wait "$cpid" || rc=$?
	[ "$rc" -eq 0 ] || fail "$label: tetherctl connect exited $rc after the restart"
	pass "$label: the agent reconnected by itself; a new stream echoes"

	no_protocol_error "$label" "$clog" "$T/gateway-$label-1.log" "$T/gateway.log"
	client_stop "$agent"
	gateway_stop
	mv "$T/gateway.log" "$T/gateway-$label-2.log"
	pass "$label: no protocol error on either side"
}

skew_case old-agent "$NEW" "$OLD"
skew_case new-agent "$OLD" "$NEW"
