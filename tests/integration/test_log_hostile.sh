#!/usr/bin/env bash
# Hostile bytes in every field that reaches the gateway's log (docs/0008):
# CR, LF, a whole forged log line, quotes, key=value look-alikes, invalid
# UTF-8, control characters, backslashes and a bidi override, sent as dial
# targets, forward OPEN targets, node names (at join and in HELLO), /k8s
# and admin API paths, query values, JSON body names, raw request lines,
# and by a hostile agent (holding a real node's key) as ERROR and OPEN_FAIL
# codes and reasons.  Every line of the gateway's log and of its audit log
# parses back (tests/tools/logparse.py, logfmt then JSON), no forged line
# appears, and the hostile values the audit records come back exactly.
# Targets that are not HOST:PORT are refused where they enter.  The audit
# file (--audit-log, 0640) is reopened on SIGHUP.
source "$(dirname "$0")/lib.sh"

py=/usr/bin/python3
HOSTILE="$TETHER_SRC/tests/integration/hostile.py"
LOGPARSE="$TETHER_SRC/tests/tools/logparse.py"

gateway_init
gateway_start --log-level debug --audit-log "$T/audit.log"
assert_mode "$T/audit.log" 640
cid=$(cluster_create hostile)
ctl token create --cluster "$cid" --uses 2 >"$T/join.json"

# A node name with a LF (or any byte outside [A-Za-z0-9._-]) is refused at
# join, before anything is written or sent.
expect_exit 2 "$CLIENT" join --state-dir "$T/bad" --node-name $'n1\nFORGED level=error' <"$T/join.json"
[ ! -e "$T/bad/state.json" ] || fail "a refused join wrote a state directory"
pass "join refuses a node name with a LF"

join_node n1 "$T/join.json" --allow "127.0.0.1:22" >/dev/null
client_start n1
wait_until 20 "n1 active" agent_is n1 active
client_stop "$CLIENT_PID"
ctl user create alice --cluster "$cid" >"$T/alice.json"
alice=$(jq -r .token "$T/alice.json")
admin=$(cat "$GW_DIR/admin.token")

# The hostile agent: n1's own key, hostile ERROR and OPEN_FAIL frames.
$py "$HOSTILE" "$GW_URL" "$GW_DIR/ca.crt" agent "$T/n1" "$T/agent.ready" \
	>"$T/report-agent.jsonl" 2>"$T/hostile-agent.log" &
PIDS+=($!)
wait_until 20 "the hostile agent is connected" test -s "$T/agent.ready"
wait_until 20 "n1 active again" agent_is n1 active

$py "$HOSTILE" "$GW_URL" "$GW_DIR/ca.crt" dial "$admin" "$cid" >"$T/report-dial.jsonl"
$py "$HOSTILE" "$GW_URL" "$GW_DIR/ca.crt" forward "$admin" "$cid" >"$T/report-forward.jsonl"
$py "$HOSTILE" "$GW_URL" "$GW_DIR/ca.crt" http "$admin" "$alice" "$cid" >"$T/report-http.jsonl"
# Streams to a valid target: the agent answers each with a hostile OPEN_FAIL.
for i in 1 2 3 4 5 6 7 8 9; do
	expect_exit 1 "$CTL" connect --cluster "$cid" 127.0.0.1:22 </dev/null
done

jq -e -s 'map(select(.where == "dial target" or .where == "dial target twice")) |
	length > 20 and all(.result == 400)' "$T/report-dial.jsonl" >/dev/null ||
	fail "a hostile dial target was not refused with 400: $(cat "$T/report-dial.jsonl")"
jq -e -s 'length > 10 and all(.result | startswith("OPEN_FAIL bad_target: bad target:"))' \
	"$T/report-forward.jsonl" >/dev/null ||
	fail "a hostile forward target was not refused: $(cat "$T/report-forward.jsonl")"
pass "targets that are not HOST:PORT: 400 on the dial endpoint, OPEN_FAIL bad_target on forward"
jq -e -s 'all(.result != 500 and .result != 0)' "$T/report-http.jsonl" >/dev/null ||
	fail "a hostile path or body got a 500 or no answer: $(jq -c 'select(.result == 500 or .result == 0)' "$T/report-http.jsonl")"
pass "hostile paths, queries and bodies: each a 4xx (or the proxied 502), never a 500"

gateway_stop
mv "$T/gateway.log" "$T/gateway-logfmt.log"
mv "$T/audit.log" "$T/audit-logfmt.log"

# Every line parses back, in both files; nothing forged.
check_logs() { # check_logs FORMAT GATEWAY_LOG AUDIT_LOG
	$py "$LOGPARSE" --format "$1" "$2" >"$T/parsed-gw.jsonl" ||
		fail "a line of the gateway's $1 log does not parse (see above)"
	$py "$LOGPARSE" --format "$1" "$3" >"$T/parsed-audit.jsonl" ||
		fail "a line of the $1 audit log does not parse (see above)"
	[ "$(wc -l <"$2")" -eq "$(wc -l <"$T/parsed-gw.jsonl")" ] || fail "line count differs"
	jq -e -s 'any(.[]; (.msg | contains("FORGED")) or .who == "admin:FORGED" or
		(keys | any(test("FORGED")))) | not' "$T/parsed-gw.jsonl" "$T/parsed-audit.jsonl" \
		>/dev/null || fail "a forged line or field in the $1 logs"
	jq -e -s 'all(.msg == "audit")' "$T/parsed-audit.jsonl" >/dev/null ||
		fail "the audit log holds other lines"
	jq -e -s 'all(.msg != "audit")' "$T/parsed-gw.jsonl" >/dev/null ||
		fail "audit lines in the gateway log despite --audit-log"
}
check_logs logfmt "$T/gateway-logfmt.log" "$T/audit-logfmt.log"
# The values come back exactly: each hostile k8s path and agent reason is
# one field of one audit line, byte for byte (logfmt keeps invalid UTF-8).
$py - "$T/parsed-audit.jsonl" "$T/parsed-gw.jsonl" "$TETHER_SRC" <<'EOF' ||
import json, sys
audit = [json.loads(l) for l in open(sys.argv[1])]
gw = [json.loads(l) for l in open(sys.argv[2])]
sys.path.insert(0, sys.argv[3] + "/tests/integration")
from hostile import HOSTILE, HOSTILE_CODES
def text(b):
    return b.decode("utf-8", "surrogateescape")
paths = {a["path"] for a in audit if a["event"] == "k8s"}
reasons = {a["reason"] for a in audit if a["event"] == "stream"}
ends = {a["end"] for a in audit if a["event"] == "stream"}
agent_errors = {(g["code"], g["reason"]) for g in gw if g["msg"] == "agent reports an error"}
missing = []
for i, h in enumerate(HOSTILE):
    # Refused before a cluster is known: the decoded path is logged.
    if "/k8s/clusters/%s/%s" % (text(h), text(h)) not in paths:
        missing.append(("k8s path", h))
    if text(h) not in reasons:
        missing.append(("OPEN_FAIL reason", h))
for i, c in enumerate(HOSTILE_CODES):
    if "refused:" + text(c) not in ends:
        missing.append(("OPEN_FAIL code", c))
    if (text(c), text(HOSTILE[i % len(HOSTILE)])) not in agent_errors:
        missing.append(("ERROR code+reason", c))
# Proxied paths are logged as the client sent them (not decoded).
for h in (b'q"uote', b"\xff\xfe", b"k=v&msg=FORGED", b"back\\slash"):
    if "/api/" + text(h) not in paths:
        missing.append(("k8s raw path", h))
if missing:
    sys.exit("not found: %r" % missing)
EOF
	fail "a hostile value did not come back exactly"
pass "logfmt: every line of the log and the audit log parses back, no forged line, hostile values exact"

# The same in JSON lines, and the audit file reopened on SIGHUP.
: >"$T/gateway.log"
gateway_start --log-format json --audit-log "$T/audit.log"
rm -f "$T/agent.ready"
$py "$HOSTILE" "$GW_URL" "$GW_DIR/ca.crt" agent "$T/n1" "$T/agent.ready" \
	>>"$T/report-agent.jsonl" 2>>"$T/hostile-agent.log" &
PIDS+=($!)
wait_until 20 "the hostile agent is connected" test -s "$T/agent.ready"
mv "$T/audit.log" "$T/audit.log.1"
kill -HUP "$GW_PID"
wait_until 10 "a new audit.log after SIGHUP" test -e "$T/audit.log"
assert_mode "$T/audit.log" 640
$py "$HOSTILE" "$GW_URL" "$GW_DIR/ca.crt" http "$admin" "$alice" "$cid" >/dev/null
for i in 1 2 3; do
	expect_exit 1 "$CTL" connect --cluster "$cid" 127.0.0.1:22 </dev/null
done
gateway_stop
grep -q '"msg":"SIGHUP: audit log reopened"' "$T/gateway.log" || fail "no line for the reopen"
[ -s "$T/audit.log" ] || fail "nothing written to the reopened audit.log"
check_logs json "$T/gateway.log" "$T/audit.log.1"
check_logs json "$T/gateway.log" "$T/audit.log"
jq -e -s --arg p '/k8s/clusters/q"uote" k="v"/q"uote" k="v"' 'any(.event == "k8s" and .path == $p)' \
	"$T/parsed-audit.jsonl" >/dev/null || fail "the quoted k8s path is not in the JSON audit"
jq -e -s 'any(.event == "k8s" and (.path | contains("\ufffd")))' "$T/parsed-audit.jsonl" \
	>/dev/null || fail "invalid UTF-8 did not become U+FFFD in JSON"
pass "JSON lines: every line parses, nothing forged; SIGHUP reopens the audit file (0640)"

cat "$T"/report-*.jsonl >"${HOSTILE_REPORT:-/dev/null}"
