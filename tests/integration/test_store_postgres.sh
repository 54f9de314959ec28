#!/usr/bin/env bash
# The PostgreSQL store, on a private PostgreSQL started here (Debian's
# postgresql package): the store's unit tests run against it; `init --store`
# prepares the database; three gateway replicas starting at once on an empty
# database migrate it once; and one import token with five uses, spent by
# twelve agents registering at once through three replicas, makes exactly
# five agents and refuses the other seven as used up.
source "$(dirname "$0")/lib.sh"

pg_start

# --- the store's unit tests, on PostgreSQL ----------------------------------
psql -X -q -h 127.0.0.1 -p "$PG_PORT" -U postgres -d postgres \
	-c 'CREATE DATABASE unit' || fail "cannot create database unit"
TETHER_TEST_PG_URL=postgres://postgres@127.0.0.1:$PG_PORT/unit \
	"$TETHER_BIN/../tests/test_store" >"$T/unit.log" 2>&1 ||
	{ cat "$T/unit.log" >&2; fail "test_store on PostgreSQL failed"; }
grep -q '^\[  PASSED  \]' "$T/unit.log" || fail "test_store printed no PASSED line"
skipped=$(sed -n 's/^\[  SKIPPED \] \([0-9]*\) test.*/\1/p' "$T/unit.log")
pass "test_store passes on PostgreSQL ($(grep -c '^\[       OK \]' "$T/unit.log") tests; ${skipped:-0} SQLite-only ones skipped)"

# --- init on PostgreSQL -----------------------------------------------------
gateway_init --store "$PG_URL"
[ ! -e "$GW_DIR/tether.db" ] || fail "init --store postgres:// still made tether.db"
[ "$(pg_query "SELECT count(*) FROM tokens WHERE kind = 'admin'")" = 1 ] ||
	fail "init did not write the admin token into PostgreSQL"
[ "$(pg_query "SELECT max(version) FROM schema_version")" -ge 2 ] ||
	fail "init did not migrate PostgreSQL"
pass "init --store postgres:// migrates the database and writes the admin token there"

# replica_dir N: what a replica needs, copied from the init directory.
replica_dir() {
	local d=$T/r$1
	mkdir -m 700 "$d"
	cp "$GW_DIR/ca.crt" "$GW_DIR/server.crt" "$GW_DIR/server.key" "$GW_DIR/peer.crt" "$GW_DIR/peer.key" \
		"$GW_DIR/gateway.json" "$d/"
}

declare -a RPORT RPID
# replica_start N STORE_URL: serve from $T/rN on a free port.
replica_start() {
	RPORT[$1]=$(free_port)
	"$GATEWAY" serve --data-dir "$T/r$1" --listen "127.0.0.1:${RPORT[$1]}" \
		--store "$2" >>"$T/replica$1.log" 2>&1 &
	RPID[$1]=$!
	PIDS+=("${RPID[$1]}")
}

replica_ready() {
	curl -sf --cacert "$GW_DIR/ca.crt" "https://127.0.0.1:${RPORT[$1]}/readyz"
}

replica_stop() {
	local rc=0
	kill -TERM "${RPID[$1]}"
	wait "${RPID[$1]}" || rc=$?
	[ "$rc" -eq 0 ] || fail "replica $1 exited $rc after SIGTERM"
}

for i in 1 2 3; do replica_dir "$i"; done

# --- three replicas starting at once on an empty database -------------------
psql -X -q -h 127.0.0.1 -p "$PG_PORT" -U postgres -d postgres \
	-c 'CREATE DATABASE fresh' || fail "cannot create database fresh"
fresh=postgres://postgres@127.0.0.1:$PG_PORT/fresh
for i in 1 2 3; do replica_start "$i" "$fresh"; done
for i in 1 2 3; do wait_until 30 "replica $i ready" replica_ready "$i"; done
versions=$(psql -X -qAt -h 127.0.0.1 -p "$PG_PORT" -U postgres -d fresh \
	-c "SELECT string_agg(version::text, ',' ORDER BY version) FROM schema_version")
[ "$versions" = "1,2,3,4,5,6,7,8,9,10,11" ] || fail "schema_version holds $versions, want 1,2,3,4,5,6,7,8,9,10,11"
migrated=$(cat "$T"/replica[123].log | grep -c 'store schema migrated' || true)
[ "$migrated" = 11 ] || fail "the migrations were applied $migrated times, want 11 (one per version)"
logs_with=$(grep -l 'store schema migrated' "$T"/replica[123].log | wc -l)
[ "$logs_with" = 1 ] || fail "$logs_with replicas migrated, want 1"
for i in 1 2 3; do replica_stop "$i"; done
pass "three replicas started at once on an empty database: all ready, one migrated it, once"

# --- one import token, twelve agents at once through three replicas ---------
for i in 1 2 3; do
	: >"$T/replica$i.log"
	replica_start "$i" "$PG_URL"
done
for i in 1 2 3; do wait_until 30 "replica $i ready" replica_ready "$i"; done
export TETHER_SERVER=https://127.0.0.1:${RPORT[1]}
cid=$(cluster_create shared)
ctl token create --cluster "$cid" --uses 5 >"$T/join.json"
[ "$(jq -r .gateway_url "$T/join.json")" = "$GW_URL" ] ||
	fail "join document: $(cat "$T/join.json")"

nodes=()
for n in $(seq 1 12); do
	i=$(( (n - 1) % 3 + 1 ))
	jq --arg u "https://127.0.0.1:${RPORT[$i]}" '.gateway_url = $u' \
		"$T/join.json" >"$T/join$i.json"
	join_node "node$n" "$T/join$i.json" >/dev/null || fail "join node$n exited $?"
	nodes+=("node$n")
done

declare -A CPID
for n in "${nodes[@]}"; do
	client_start "$n"
	CPID[$n]=$CLIENT_PID
done

# A client is done when it registered (its state has an agent id) or exited.
settled() {
	local n
	for n in "${nodes[@]}"; do
		if ! jq -e '.agent_id | select(. != "")' "$T/$n/state.json" >/dev/null 2>&1 &&
			kill -0 "${CPID[$n]}" 2>/dev/null; then
			return 1
		fi
	done
}
wait_until 90 "every agent registered or refused" settled

registered=0 refused=0
for n in "${nodes[@]}"; do
	if jq -e '.agent_id | select(. != "")' "$T/$n/state.json" >/dev/null 2>&1; then
		registered=$((registered + 1))
	else
		rc=0
		wait "${CPID[$n]}" || rc=$?
		[ "$rc" -eq 1 ] || fail "$n exited $rc, want 1 (refused)"
		grep -q "used up" "$T/client-$n.log" || fail "$n was refused, but not as used up"
		refused=$((refused + 1))
	fi
done
[ "$registered" = 5 ] || fail "$registered agents registered, want exactly 5"
[ "$refused" = 7 ] || fail "$refused agents refused, want 7"
[ "$(pg_query "SELECT count(*) FROM agents WHERE cluster_id = '$cid'")" = 5 ] ||
	fail "the database holds $(pg_query "SELECT count(*) FROM agents") agents, want 5"
[ "$(pg_query "SELECT uses_left FROM tokens WHERE kind = 'import'")" = 0 ] ||
	fail "the token has $(pg_query "SELECT uses_left FROM tokens WHERE kind = 'import'") uses left, want 0"
for i in 1 2 3; do
	c=$(grep -c 'agent registered' "$T/replica$i.log" || true)
	log "replica $i registered $c"
done
pass "one token with 5 uses, 12 agents at once through 3 replicas: exactly 5 registered, 7 refused as used up"

for n in "${nodes[@]}"; do
	if kill -0 "${CPID[$n]}" 2>/dev/null; then client_stop "${CPID[$n]}"; fi
done
for i in 1 2 3; do replica_stop "$i"; done
pass "replicas and agents stop cleanly"
