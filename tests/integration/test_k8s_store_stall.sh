#!/usr/bin/env bash
# The loop never waits on the store for a peer's request (issue 22, hole
# 4).  The gateway runs on a private PostgreSQL with an agent whose tunnel
# carries a `tetherctl connect` stream (pings every 200 ms, 1000 ms
# timeout).  Made-up, well-formed user tokens (a new id each time) hit
# /k8s/clusters/ID/version and /version on 8 connections while
# 1. another session holds the tokens table locked (ACCESS EXCLUSIVE), and
# 2. PostgreSQL is stopped (SIGSTOP, every process of it).
# In both: /healthz answers every time it is asked, the stream echoes, the
# agent misses no ping, and every made-up token is answered (401, or 503
# with a reason: the lock_timeout, or --http-timeout's bound on the check)
# — none waits without bound.  After SIGCONT the same token id is refused
# from the cache of unknown ids (no store read), and the gateway exits 0.
source "$(dirname "$0")/lib.sh"
py=/usr/bin/python3

echo_server_start
pg_start
gateway_init --store "$PG_URL"
gateway_start --store "$PG_URL" --http-timeout 3000 --ping-interval 200 --ping-timeout 1000 \
	--workers 2 --landing any
cid=$(cluster_create stall)
ctl token create --cluster "$cid" >"$T/join.json"
join_node n1 "$T/join.json" --allow "127.0.0.1:$echo_port" >/dev/null
client_start n1 --ping-interval 200 --ping-timeout 1000
wait_until 30 "n1 active" agent_is n1 active
held_connect "$cid" n1 "127.0.0.1:$echo_port" "$T/out" "$T/connect.log"

# put FD LINE: LINE written to FD, a FIFO that a process of this test reads
# (7: the held connect's input; 8: the locking psql's).  A reader that has
# gone fails the test with the logs shown (the connect's errors are in
# connect.log, psql's in lock.log).  A plain `echo >&7` into a FIFO nobody
# reads raises SIGPIPE in this shell, which lib.sh turns into a failure
# with the logs too, but naming only the command; here only the subshell
# dies of it, and the failure says which reader has gone.
put() {
	( echo "$2" >&"$1" ) 2>/dev/null ||
		fail "fd $1's reader has gone; \"$2\" not written (connect.log, lock.log)"
}
put 7 "before"
wait_until 20 "echo before" grep -q before "$T/out"

# probe SECONDS OUT: /healthz every 100 ms for SECONDS; OUT gets
# {"asked", "answered", "max_ms"} (each ask waits at most 10 s).  The
# prober is another source (127.0.0.2) than the made-up tokens: a health
# checker is not the client flooding, and one source's handshakes are
# capped (--max-tls-per-source, docs/0028).
probe() {
	$py - "$GW_PORT" "$GW_DIR/ca.crt" "$1" >"$2" <<'PY' &
import http.client, json, ssl, sys, time
port, ca, secs = int(sys.argv[1]), sys.argv[2], float(sys.argv[3])
ctx = ssl.create_default_context(cafile=ca)
ctx.check_hostname = False
asked = answered = worst = 0
end = time.monotonic() + secs
while time.monotonic() < end:
    t0 = time.monotonic()
    asked += 1
    try:
        c = http.client.HTTPSConnection("127.0.0.1", port, context=ctx, timeout=10,
                                        source_address=("127.0.0.2", 0))
        c.request("GET", "/healthz")
        if c.getresponse().read().strip() == b"ok":
            answered += 1
        c.close()
    except OSError:
        pass
    worst = max(worst, (time.monotonic() - t0) * 1000)
    time.sleep(0.1)
print(json.dumps({"asked": asked, "answered": answered, "max_ms": int(worst)}))
PY
	PROBE_PID=$!
}

# phase NAME: made-up tokens for 6 s with /healthz probed and the stream
# echoing meanwhile; checks and logs what each got.
phase() {
	local name=$1
	probe 6 "$T/probe-$name.json"
	$py "$TETHER_SRC/tests/integration/madeup_tokens.py" "$GW_URL" "$GW_DIR/ca.crt" \
		"$cid" 6 8 >"$T/flood-$name.json" &
	local flood=$!
	for i in 1 2 3; do
		put 7 "$name $i"
		wait_until 10 "echo $name $i" grep -q "$name $i" "$T/out"
		sleep 1   # the flood runs meanwhile
	done
	wait "$flood" || fail "the made-up token client failed"
	wait "$PROBE_PID" || fail "the /healthz prober failed"
	log "$name: made-up tokens $(cat "$T/flood-$name.json"); /healthz $(cat "$T/probe-$name.json")"
	jq -e '.asked > 0 and .answered == .asked' "$T/probe-$name.json" >/dev/null ||
		fail "$name: /healthz did not answer every time: $(cat "$T/probe-$name.json")"
	jq -e '.requests > 0 and (.statuses | keys - ["401", "503"] | length == 0)' \
		"$T/flood-$name.json" >/dev/null ||
		fail "$name: a made-up token got something else than 401 or 503: $(cat "$T/flood-$name.json")"
	jq -e '.statuses["503"] > 0' "$T/flood-$name.json" >/dev/null ||
		fail "$name: no made-up token was told the store is stalled: $(cat "$T/flood-$name.json")"
	jq -e '[.reasons[] | select(test("store"))] | all(test("retry shortly"))' \
		"$T/flood-$name.json" >/dev/null || fail "$name: a 503 without a clear reason: $(cat "$T/flood-$name.json")"
	grep -q 'no answer to a ping' "$T/client-n1.log" &&
		fail "$name: the agent missed a ping answer"
	return 0
}

# --- 1. the tokens table locked by another session ---
rm -f "$T/lockin"
mkfifo "$T/lockin"
psql -X -q -h 127.0.0.1 -p "$PG_PORT" -U postgres -d tether <"$T/lockin" >"$T/lock.log" 2>&1 &
LOCK_PID=$!
PIDS+=("$LOCK_PID")
exec 8>"$T/lockin"
put 8 "BEGIN; LOCK TABLE tokens IN ACCESS EXCLUSIVE MODE; SELECT 'locked';"
wait_until 10 "the tokens table locked" grep -q locked "$T/lock.log"
phase lock
put 8 "COMMIT;"
exec 8>&-
wait "$LOCK_PID" || true
pass "tokens table locked: /healthz answered every time, the stream echoed, no ping missed; made-up tokens got 401/503 ($(jq -c .statuses "$T/flood-lock.json"), slowest $(jq .max_ms "$T/flood-lock.json") ms)"

# --- 2. PostgreSQL stopped ---
pg_freeze
phase frozen
jq -e '.reasons | any(test("did not answer the token check within 3000 ms|the store is busy"))' \
	"$T/flood-frozen.json" >/dev/null || fail "no 503 names the bound: $(cat "$T/flood-frozen.json")"
pg_thaw
pass "PostgreSQL stopped: /healthz answered every time, the stream echoed, no ping missed; made-up tokens got 401/503 ($(jq -c .statuses "$T/flood-frozen.json"), slowest $(jq .max_ms "$T/flood-frozen.json") ms)"

# --- 3. after: an unknown id is remembered ---
madeup="ttu_0123456789abcdef.$(head -c 32 /dev/urandom | base64 | tr '+/' '-_' | tr -d '=\n' | cut -c1-43)"
kurl() { curl -s -o "$T/k.json" -w '%{http_code}' --cacert "$GW_DIR/ca.crt" \
	-H "Authorization: Bearer $madeup" "$GW_URL/k8s/clusters/$cid/version"; }
kurl_401() { [ "$(kurl)" = 401 ]; }
wait_until 30 "the store answers again (a made-up token is a 401)" kurl_401
rm -f "$T/lockin" "$T/lock.log"   # the first lock's "locked" is not this one's
mkfifo "$T/lockin"
psql -X -q -h 127.0.0.1 -p "$PG_PORT" -U postgres -d tether <"$T/lockin" >"$T/lock.log" 2>&1 &
LOCK_PID=$!
PIDS+=("$LOCK_PID")
exec 8>"$T/lockin"
put 8 "BEGIN; LOCK TABLE tokens IN ACCESS EXCLUSIVE MODE; SELECT 'locked';"
wait_until 10 "the tokens table locked again" grep -q locked "$T/lock.log"
code=$(kurl)
[ "$code" = 401 ] || fail "the same made-up id, the tokens table locked: $code $(cat "$T/k.json")"
put 8 "COMMIT;"
exec 8>&-
wait "$LOCK_PID" || true
pass "a made-up id the store did not know is refused (401) from the cache while the tokens table is locked"

put 7 "after"
wait_until 10 "echo after" grep -q after "$T/out"
exec 7>&-
gateway_stop
pass "the gateway stops cleanly"
