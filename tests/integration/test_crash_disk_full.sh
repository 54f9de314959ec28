#!/usr/bin/env bash
# The gateway's data directory fills up (a 3 MiB tmpfs): refusals say why,
# nothing is corrupted, and everything works again once space returns.
#
#   - the admin API answers 503 with a JSON reason naming the full storage,
#   - a registration is refused with a reason naming the full storage, and
#     the agent keeps retrying (and succeeds once there is space),
#   - a gateway killed with -9 while the disk is full starts again and an
#     agent registered before reconnects, active,
#   - afterwards PRAGMA integrity_check is ok and the token's uses match
#     the agents made with it.
# The tmpfs is mounted in a private mount namespace (unshare -m), so it goes
# away with the test whatever happens.  That needs root (as `make test` on
# the project's machines runs) or unprivileged user namespaces; without
# either the test fails, saying so: it does not pretend to pass.
if [ -z "${TETHER_MOUNT_NS:-}" ]; then
	export TETHER_MOUNT_NS=1
	if [ "$(id -u)" -eq 0 ]; then
		ns=(unshare -m --propagation private)
	else
		ns=(unshare -r -m --propagation private)
	fi
	if ! "${ns[@]}" true 2>/dev/null; then
		echo "[test_crash_disk_full] FAIL: cannot run: mounting a tmpfs needs root or" \
			"user namespaces, and '${ns[*]}' failed" >&2
		exit 1
	fi
	exec "${ns[@]}" bash "$0" "$@"
fi
source "$(dirname "$0")/lib.sh"

mkdir "$T/gw"
mount -t tmpfs -o size=3m,mode=0700 tmpfs "$T/gw" ||
	fail "cannot run: mount -t tmpfs failed"
on_cleanup 'umount -l "$T/gw"'

gateway_init
gateway_start
cid=$(cluster_create full)
ctl token create --cluster "$cid" --uses 3 >"$T/join.json"
tid=$(jq -er .token "$T/join.json" | sed 's/^tti_//; s/\..*//')
join_node n1 "$T/join.json" >/dev/null
client_start n1
n1=$CLIENT_PID
wait_until 30 "n1 active" agent_is n1 active

# Fill what is left; SQLite then fails as soon as its WAL must grow.
dd if=/dev/zero of="$GW_DIR/filler" bs=4096 2>/dev/null || true
[ "$(df --output=avail "$GW_DIR" | tail -1)" -eq 0 ] || fail "the tmpfs is not full"

# The admin API: each write is either stored or refused with 503 and a
# reason; within a few hundred writes the WAL has to grow.
created=0
refused=
for i in $(seq 1 400); do
	rc=0
	"$CTL" cluster create "fill$i" >/dev/null 2>"$T/last.err" || rc=$?
	if [ "$rc" -eq 0 ]; then
		created=$((created + 1))
		continue
	fi
	refused=$(cat "$T/last.err")
	break
done
[ -n "$refused" ] || fail "400 cluster creations on a full disk all succeeded"
case $refused in
*"(HTTP 503)"*) ;;
*) fail "a write on a full disk was answered: $refused (want HTTP 503)" ;;
esac
case $refused in
*"storage"* | *"space"* | *"full"*) ;;
*) fail "the refusal does not say the storage is full: $refused" ;;
esac
pass "admin API on a full disk: $refused"

# A registration is refused with the reason, and retried by the agent.
join_node n2 "$T/join.json" >/dev/null
client_start n2
n2=$CLIENT_PID
wait_until 30 "n2's registration refused for want of space" \
	grep -q "its storage is full" "$T/client-n2.log"
pass "registration on a full disk: $(grep -m1 "its storage is full" "$T/client-n2.log" | sed 's/^.*msg=/msg=/')"

# A crash while full: the gateway starts again and serves what needs no write.
kill -KILL "$GW_PID"
wait "$GW_PID" 2>/dev/null || true
gateway_start
wait_until 40 "n1 back and active while the disk is full" agent_is n1 active
pass "killed with -9 on a full disk, the gateway restarts; n1 reconnects, active"

# Space returns: the refused work goes through.
rm -f "$GW_DIR/filler"
wait_until 60 "n2 registered and active once space returned" agent_is n2 active
ctl cluster create after-full >/dev/null || fail "cluster create still fails once space returned"
pass "space returned: n2 registered and active, the admin API writes again"

client_stop "$n1"
client_stop "$n2"
gateway_stop
db=$GW_DIR/tether.db
q() { sqlite3 -batch -noheader "$db" "$1"; }
[ "$(q "PRAGMA integrity_check")" = ok ] || fail "integrity_check: $(q "PRAGMA integrity_check")"
[ "$(q "SELECT count(*) FROM agents")" -eq 2 ] || fail "$(q "SELECT count(*) FROM agents") agents, want 2"
[ "$(q "SELECT uses_left FROM tokens WHERE id = '$tid'")" -eq 1 ] ||
	fail "the token has $(q "SELECT uses_left FROM tokens WHERE id = '$tid'") uses left after 2 registrations of 3"
[ "$(q "SELECT count(*) FROM clusters WHERE name LIKE 'fill%'")" -eq "$created" ] ||
	fail "clusters stored differ from the $created creations that succeeded"
pass "after the full disk: integrity ok, 2 agents, token uses match, $created clusters stored as answered"
