#!/usr/bin/env bash
# CA rotation across replicas (docs/0033, docs/operations.md "Rotating the
# CA"): two replicas on PostgreSQL whose files move through the rotation
# one at a time, as an operator copying them would leave them.  At every
# mix a stream opened through replica 1 reaches the agent replica 2 holds
# (so over a peer link freshly dialed by a restarted r1): old r1 and
# overlap r2, overlap r1 and old r2, both overlap, overlap r1 and final
# r2, both final.  After the finish a replica still holding the old CA's
# peer credential is refused by one that finished.
source "$(dirname "$0")/lib.sh"

two_replicas_on_pg
export TETHER_SERVER=https://127.0.0.1:${RPORT[2]}
cid=$(cluster_create ha)
ctl token create --cluster "$cid" >"$T/join.json"
join_node n1 "$T/join.json" --allow "127.0.0.1:$echo_port" >/dev/null
client_start n1
wait_until 30 "n1 active" agent_is n1 active
aid=$(agent_id_of n1)
[ "$(pg_query "SELECT replica_id FROM tunnels WHERE agent_id = '$aid'")" = r2 ] ||
	fail "n1 is not held by r2 (its join URL)"

FILES=(ca.crt ca.next.crt ca.cross.crt ca.old.crt server.crt peer.crt peer.key)
snapshot() { # snapshot NAME: GW_DIR's files as they are now, in $T/ph-NAME
	mkdir -p -m 700 "$T/ph-$1"
	cp "$GW_DIR/server.key" "$GW_DIR/gateway.json" "$T/ph-$1/"
	local f
	for f in "${FILES[@]}"; do
		[ ! -e "$GW_DIR/$f" ] || cp -p "$GW_DIR/$f" "$T/ph-$1/"
	done
}
files_to() { # files_to N NAME: replica N's directory gets phase NAME's files
	local f
	for f in "${FILES[@]}"; do
		if [ -e "$T/ph-$2/$f" ]; then cp -p "$T/ph-$2/$f" "$T/r$1/"; else rm -f "$T/r$1/$f"; fi
	done
}
phase_logged() { # phase_logged N PHASE COUNT: replica N logged the phase COUNT times
	[ "$(grep -c "msg=\"CA rotation\" phase=$2" "$T/replica$1.log")" -ge "$3" ]
}
restart_r1() { # restart_r1 NAME: replica 1 again, on phase NAME's files (a fresh peer link)
	replica_stop 1
	files_to 1 "$2"
	GW_DIR=$T/ph-$1 replica_start 1
	wait_until 30 "r1 ready" curl -sf --cacert "$T/ph-$1/ca.crt" "https://127.0.0.1:${RPORT[1]}/readyz"
}
via_r1() { # via_r1 CAFILE: a stream through r1 to n1 (on r2) echoes
	echo hi | TETHER_SERVER=https://127.0.0.1:${RPORT[1]} TETHER_CACERT=$1 \
		timeout 20 "$CTL" connect --cluster "$cid" --node n1 "127.0.0.1:$echo_port" 2>>"$T/via.err" |
		grep -qx hi
}

snapshot old
wait_until 30 "r1 reaching n1 on r2 before the rotation" via_r1 "$T/ph-old/ca.crt"
"$GATEWAY" ca rotate start --data-dir "$GW_DIR" >"$T/start.out" || fail "ca rotate start failed"
snapshot overlap
[ -e "$T/ph-overlap/ca.next.crt" ] && [ -e "$T/ph-overlap/ca.cross.crt" ] || fail "start wrote no ca.next.crt/ca.cross.crt"

# Overlap r1 (new peer credential, chained to the cross-certificate) to
# r2 still on the old files.
restart_r1 overlap overlap
phase_logged 1 overlap 1 || fail "r1 did not start in the overlap"
wait_until 30 "overlap r1 -> old r2" via_r1 "$T/ph-old/ca.crt"
pass "overlap r1 dials old r2: the new peer credential verifies through the cross-certificate"

# Old r1 to r2 in the overlap (SIGHUP).
files_to 2 overlap
kill -HUP "${RPID[2]}"
wait_until 20 "r2 in the overlap" phase_logged 2 overlap 1
restart_r1 old old
wait_until 30 "old r1 -> overlap r2" via_r1 "$T/ph-old/ca.crt"
pass "old r1 dials overlap r2: the old peer credential is still trusted in the overlap"

restart_r1 overlap overlap
wait_until 30 "overlap r1 -> overlap r2" via_r1 "$T/ph-overlap/ca.next.crt"
pass "both in the overlap"

# The finish: r2 first (SIGHUP), r1 still in the overlap, then both.
"$GATEWAY" ca rotate finish --data-dir "$GW_DIR" >"$T/finish.out" || fail "ca rotate finish failed"
snapshot final
[ ! -e "$T/ph-final/ca.next.crt" ] || fail "finish left ca.next.crt"
files_to 2 final
kill -HUP "${RPID[2]}"
wait_until 20 "r2 final" phase_logged 2 final 1
restart_r1 overlap overlap
wait_until 30 "overlap r1 -> final r2" via_r1 "$T/ph-final/ca.crt"
pass "overlap r1 dials final r2 (the new CA's credential)"

# r1 finished but with the old CA's peer credential: r2 refuses it.
snapshot mixed
cp -p "$T/ph-old/peer.crt" "$T/ph-old/peer.key" "$T/ph-mixed/"
restart_r1 mixed mixed
: >"$T/via.err"
! via_r1 "$T/ph-final/ca.crt" || fail "r2 accepted r1's peer credential from the old CA after the finish"
pass "after the finish the old CA's peer credential opens no link: $(tr '\n' ' ' <"$T/via.err" | cut -c1-160)"

restart_r1 final final
phase_logged 1 final 1 || fail "r1 did not start final"
wait_until 30 "final r1 -> final r2" via_r1 "$T/ph-final/ca.crt"
pass "both final: r1 reaches n1 on r2"
