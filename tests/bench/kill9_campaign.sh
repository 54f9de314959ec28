#!/usr/bin/env bash
# kill9_campaign.sh [N]: the kill -9 campaign of
# tests/integration/test_crash_gateway_kill9.sh, longer: N kills of the
# gateway (default 50) at random moments while 2N nodes register (two per
# round, two import tokens of N uses each) and two clients stream 1 MiB
# echoes through an agent without pause.  Prints the counts and the same
# consistency checks as the test (token uses, one agent per node, all
# active, PRAGMA integrity_check, no stream cut short silently); exits 1 if
# any of them fails.
#
#   bash tests/bench/kill9_campaign.sh 100        # on build/release/bin
set -euo pipefail
N=${1:-50}
SRC=$(cd "$(dirname "$0")/../.." && pwd)
export TETHER_SRC=$SRC
export TETHER_BIN=${TETHER_BIN:-$SRC/build/release/bin}
[ -x "$TETHER_BIN/tether-gateway" ] || { echo "no $TETHER_BIN/tether-gateway: run make build" >&2; exit 1; }

echo "kill9_campaign: $N kills, $((2 * N)) registrations; $(nproc) CPUs, $(uname -sr)"
echo "command: bash tests/bench/kill9_campaign.sh $N  (TETHER_BIN=$TETHER_BIN)"
start=$SECONDS
rc=0
KILLS=$N NODES_PER_TOKEN=$N bash "$SRC/tests/integration/test_crash_gateway_kill9.sh" \
	>"${TMPDIR:-/tmp}/kill9_campaign.$$.log" 2>&1 || rc=$?
grep -E '^counts:|ok:|FAIL' "${TMPDIR:-/tmp}/kill9_campaign.$$.log" || true
[ "$rc" -eq 0 ] || tail -60 "${TMPDIR:-/tmp}/kill9_campaign.$$.log"
rm -f "${TMPDIR:-/tmp}/kill9_campaign.$$.log"
echo "elapsed: $((SECONDS - start)) s; result: $([ "$rc" -eq 0 ] && echo consistent || echo FAILED)"
exit "$rc"
