#!/usr/bin/env bash
# PostgreSQL stopped (pg_ctl stop) while an agent restarts and a new node
# runs its first `run`: both are answered `unavailable` and retry with
# backoff, none exits; once PostgreSQL is started again every agent is
# active (store_outage.sh).  Before: `auth_refused: unknown agent` and
# `token_unknown`, final, and both agents exited 1 for good.
source "$(dirname "$0")/lib.sh"
source "$(dirname "$0")/store_outage.sh"

store_down() {
	pg_stop
	for i in 1 2; do
		wait_until 20 "replica $i's /readyz 503" test "$(replica_readyz "$i")" = 503
	done
}
store_up() {
	pg_ctl_start || { cat "$PG_DIR/log" >&2; fail "PostgreSQL did not start again"; }
}
store_outage store_down store_up 4
