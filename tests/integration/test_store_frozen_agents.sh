#!/usr/bin/env bash
# PostgreSQL SIGSTOPped (every process of it: connections hang, none is
# refused) while an agent restarts and a new node runs its first `run`:
# their handshakes wait for the store and end in `timeout` or
# `unavailable`, never a final refusal, and they retry; after SIGCONT every
# agent is active (store_outage.sh).
source "$(dirname "$0")/lib.sh"
source "$(dirname "$0")/store_outage.sh"

store_outage pg_freeze pg_thaw 2
