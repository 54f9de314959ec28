#!/usr/bin/env bash
# The shipped Prometheus alerting rules (config/prometheus/): promtool
# accepts them, their unit tests (tether.test.yml: each alert fires on the
# series that should raise it, after its "for:", and not on the others)
# pass, and every tether_ metric a rule reads is one a real gateway serves
# at /metrics, so that a renamed metric cannot leave an alert that never
# fires.
source "$(dirname "$0")/lib.sh"

rules=$TETHER_SRC/config/prometheus/tether.rules.yml
[ -f "$rules" ] || fail "no $rules"
promtool check rules "$rules" >"$T/check.out" 2>&1 || { cat "$T/check.out" >&2; fail "promtool check rules"; }
for t in "$TETHER_SRC"/config/prometheus/*.test.yml; do
	(cd "$(dirname "$t")" && promtool test rules "$(basename "$t")") >"$T/test.out" 2>&1 ||
		{ cat "$T/test.out" >&2; fail "promtool test rules $(basename "$t")"; }
done
pass "promtool checks the rules and their tests pass"

MP=$(free_port)
gateway_init
gateway_start --metrics-listen "127.0.0.1:$MP"
curl -sf "http://127.0.0.1:$MP/metrics" >"$T/metrics.txt" || fail "no /metrics"
used=$(grep -E '^ *expr:' "$rules" | grep -oE 'tether_[a-z_]+' | sort -u)
[ -n "$used" ] || fail "the rules read no tether_ metric"
for m in $used; do
	grep -q "^# TYPE $m " "$T/metrics.txt" || fail "a rule reads $m, which /metrics does not serve"
done
pass "every metric the rules read is served: $(echo $used)"
gateway_stop
