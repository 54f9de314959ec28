#!/usr/bin/env bash
# lib.sh's own promise for a test shell killed by SIGPIPE: a test that
# writes to a FIFO whose reader has gone (as `echo >&7` into a held
# connect's input whose tetherctl ended) fails, non-zero, with its logs
# shown.  Before lib.sh trapped PIPE, such a test died of the signal (141)
# after an EXIT trap that saw $? 0: no log shown, its $T removed.
# The test shell here runs a child test (a script sourcing lib.sh) and
# reads what it printed; nothing else is started.
source "$(dirname "$0")/lib.sh"

cat >"$T/test_child.sh" <<'CHILD'
source "$TETHER_SRC/tests/integration/lib.sh"
echo "the child's own log line" >"$T/child.log"
mkfifo "$T/fifo"
( exec 3<"$T/fifo" ) &      # a reader that opens the FIFO and goes
exec 7>"$T/fifo"
wait
echo "to nobody" >&7
pass "still running after the write"
CHILD
rc=0
TETHER_SRC=$TETHER_SRC bash "$T/test_child.sh" 2>"$T/child.err" || rc=$?
[ "$rc" -ne 0 ] || fail "the child exited 0 after SIGPIPE: $(cat "$T/child.err")"
grep -q 'FAIL: SIGPIPE' "$T/child.err" ||
	fail "the child (exit $rc) did not say SIGPIPE: $(cat "$T/child.err")"
grep -q 'FAILED; logs follow' "$T/child.err" && grep -q "the child's own log line" "$T/child.err" ||
	fail "the child (exit $rc) did not show its logs: $(cat "$T/child.err")"
! grep -q 'still running after the write' "$T/child.err" ||
	fail "the child went on after SIGPIPE: $(cat "$T/child.err")"
pass "a test shell's write to a FIFO whose reader has gone: exit $rc, FAIL: SIGPIPE, its logs shown"
