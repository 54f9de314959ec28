#!/usr/bin/env bash
# A slow store holds no tunnel up (docs/0022).  The gateway runs on a
# private PostgreSQL; another session locks the clusters table, so that an
# admin request (`tetherctl cluster list`) waits on the database for as
# long as the test holds the lock (it is seen waiting in pg_stat_activity).
# While it waits:
# - a `tetherctl connect` stream opened before keeps echoing bytes,
# - a new dial whose token must be checked in the store waits for it,
# - the gateway answers /healthz, and /metrics and /v1/status wait like the
#   admin request, on the store thread, not on the loop,
# - the agent, pinging every 200 ms with a 1000 ms timeout, never misses
#   an answer (its log says so when it does);
# then the lock is released and the admin request is answered.  Also: an
# answer that takes longer than --http-timeout is a 504 with a reason, and
# a client that leaves before its answer costs nothing (the late answers
# are dropped; the gateway exits clean under ASan).
source "$(dirname "$0")/lib.sh"

py=$(command -v python3)
$py "$TETHER_SRC/tests/integration/tcpserver.py" echo "$T/echo.port" &
PIDS+=($!)
wait_until 10 "echo server" test -s "$T/echo.port"
echo_port=$(cat "$T/echo.port")

pg_start
# A store that holds its callers for as long as the lock lasts: the URL's
# own options replace the gateway's statement and lock timeouts (2 s for a
# lock: test_k8s_store_stall).
PG_URL="$PG_URL?options=-c%20statement_timeout%3D0%20-c%20lock_timeout%3D0"
gateway_init --store "$PG_URL"
gateway_start --store "$PG_URL" --http-timeout 10000 --ping-interval 200 --ping-timeout 1000

cid=$(cluster_create slow)
ctl token create --cluster "$cid" >"$T/join.json"
join_node n1 "$T/join.json" --allow "127.0.0.1:$echo_port" >/dev/null
client_start n1 --ping-interval 200 --ping-timeout 1000
wait_until 30 "n1 active" agent_is n1 active

held_connect "$cid" n1 "127.0.0.1:$echo_port" "$T/out" "$T/connect.err"
echo "before the lock" >&7
wait_until 20 "echo before the lock" grep -q "before the lock" "$T/out"

# lock_hold: another session takes the clusters table and keeps it until
# lock_release; its input is the FIFO $T/lockin on fd 8.
lock_hold() {
	rm -f "$T/lockin" "$T/lock.out"   # the last hold's "locked" is not this one's
	mkfifo "$T/lockin"
	psql -X -q -h 127.0.0.1 -p "$PG_PORT" -U postgres -d tether \
		<"$T/lockin" >"$T/lock.out" 2>&1 &
	LOCK_PID=$!
	PIDS+=("$LOCK_PID")
	exec 8>"$T/lockin"
	echo "BEGIN; LOCK TABLE clusters IN ACCESS EXCLUSIVE MODE; SELECT 'locked';" >&8
	wait_until 10 "the clusters table locked" grep -q locked "$T/lock.out"
}
lock_release() {
	echo "COMMIT;" >&8
	exec 8>&-
	wait "$LOCK_PID" || true
}
waiting_on_lock() { # waiting_on_lock N: N sessions of the gateway wait for it
	[ "$(pg_query "SELECT count(*) FROM pg_stat_activity WHERE datname = 'tether'
		AND wait_event_type = 'Lock'")" -ge "$1" ]
}
healthz() {
	curl -sf -m 5 --cacert "$GW_DIR/ca.crt" "$GW_URL/healthz"
}

bob=$(ctl user create bob --cluster "$cid" | jq -er .token)

# --- 1. an admin request waits on the database; tunnels do not ---
lock_hold
ctl cluster list >"$T/list.json" 2>"$T/list.err" &
list_pid=$!
wait_until 10 "the admin request waits on the lock" waiting_on_lock 1
[ "$(healthz)" = ok ] || fail "/healthz did not answer while the store was held"
echo "while the store is held" >&7
wait_until 10 "echo while the store is held" grep -q "while the store is held" "$T/out"
kill -0 "$list_pid" || fail "the admin request did not wait for the store"
# The status page's data waits too (its own request, on the store thread).
curl -s -m 30 --cacert "$GW_DIR/ca.crt" -H "Authorization: Bearer $(cat "$GW_DIR/admin.token")" \
	"$GW_URL/v1/status" >"$T/status.json" &
status_pid=$!
# Several agent pings' worth of holding: each one is answered.
for i in 1 2 3 4 5 6; do
	healthz >/dev/null || fail "/healthz did not answer while the store was held"
	echo "ping $i" >&7
	wait_until 10 "echo $i" grep -q "ping $i" "$T/out"
	sleep 0.2   # the agent's pings run meanwhile (--ping-interval 200)
done
kill -0 "$list_pid" || fail "the admin request did not wait for the store"
pass "while an admin request waited on the store, a stream kept echoing and /healthz answered"
# A new dial whose token is not in the cache of proven tokens (a user's,
# never used): its check waits on the store thread, not on the loop.
printf 'dialled\n' | env -u TETHER_TOKEN_FILE TETHER_TOKEN="$bob" "$CTL" connect \
	--cluster "$cid" "127.0.0.1:$echo_port" >"$T/dial.out" 2>"$T/dial.err" &
dial_pid=$!
[ "$(healthz)" = ok ] || fail "/healthz did not answer while a dial's check waited"
echo "while a dial waits" >&7
wait_until 10 "echo while a dial waits" grep -q "while a dial waits" "$T/out"
kill -0 "$dial_pid" || fail "the dial did not wait for its check: $(cat "$T/dial.err")"
lock_release
wait "$dial_pid" || fail "the dial failed after the store answered: $(cat "$T/dial.err")"
grep -q dialled "$T/dial.out" || fail "the dial's stream did not echo"
pass "a dial whose token check waited on the store held no tunnel up, and went through once it answered"
wait "$list_pid" || fail "the admin request failed after the store answered: $(cat "$T/list.err")"
jq -e --arg id "$cid" '.[] | select(.id == $id)' "$T/list.json" >/dev/null ||
	fail "the admin request's answer lacks the cluster"
wait "$status_pid" || fail "GET /v1/status failed after the store answered"
jq -e --arg id "$cid" '.clusters[] | select(.id == $id and .agents_connected == 1)' \
	"$T/status.json" >/dev/null || fail "/v1/status lacks the cluster: $(cat "$T/status.json")"
pass "once the store answered, the admin request and /v1/status were answered"
grep -q 'no answer to a ping' "$T/client-n1.log" &&
	fail "the agent missed a ping answer while the store was held"
pass "the agent (ping every 200 ms, 1000 ms timeout) got every ping answered"

# --- 2. longer than --http-timeout: 504 with a reason; a client that left ---
lock_hold
code=$(curl -s -m 30 -o "$T/late.json" -w '%{http_code}' --cacert "$GW_DIR/ca.crt" \
	-H "Authorization: Bearer $(cat "$GW_DIR/admin.token")" "$GW_URL/v1/clusters")
[ "$code" = 504 ] || fail "a request held past --http-timeout got $code, not 504"
jq -e '.error | test("no answer within 10000 ms")' "$T/late.json" >/dev/null ||
	fail "the 504 says no reason: $(cat "$T/late.json")"
curl -s -m 20 --cacert "$GW_DIR/ca.crt" -H "Authorization: Bearer $(cat "$GW_DIR/admin.token")" \
	"$GW_URL/v1/agents" >/dev/null &
gone_pid=$!
wait_until 10 "two admin requests wait on the lock" waiting_on_lock 1
kill "$gone_pid"
wait "$gone_pid" || true
# A dial that leaves while its check waits behind them (a node named: the
# store is always read).
mkfifo "$T/in2"
exec 9<>"$T/in2"
"$CTL" connect --cluster "$cid" --node n1 "127.0.0.1:$echo_port" <&9 \
	>/dev/null 2>&1 &
gone_dial=$!
echo "while a dial is abandoned" >&7
wait_until 10 "echo while a dial is abandoned" grep -q "while a dial is abandoned" "$T/out"
kill "$gone_dial"
wait "$gone_dial" || true
exec 9>&-
lock_release
[ "$(ctl cluster list | jq length)" = 1 ] || fail "the admin API does not answer after the lock"
echo "after the lock" >&7
wait_until 10 "echo after the lock" grep -q "after the lock" "$T/out"
pass "an answer later than --http-timeout is a 504 with a reason; late answers and checks of gone clients are dropped"

exec 7>&-
gateway_stop
pass "the gateway stops cleanly"
