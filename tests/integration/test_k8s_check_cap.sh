#!/usr/bin/env bash
# A per-source cap on /k8s token checks waiting on the store (issue 22):
# with PostgreSQL stopped (SIGSTOP), 40 requests with made-up tokens from
# one address leave at most 16 checks queued for the store; the rest are
# answered at once with 503 and Retry-After, and another address still
# gets its check queued (its answer is the store's late 503, not the cap's).
# Once the store is back the first address is checked again (401).  The
# requests land on both loops (--workers 2 --landing any, docs/0040): the
# cap is the process's (the store thread is one), not each loop's.
source "$(dirname "$0")/lib.sh"

pg_start
gateway_init --store "$PG_URL"
gateway_start --store "$PG_URL" --http-timeout 8000 --workers 2 --landing any
cid=$(cluster_create capped)

pg_freeze
python3 - "$GW_URL" "$GW_DIR/ca.crt" "$cid" >"$T/cap.json" 2>"$T/cap.log" <<'PY'
import base64, http.client, json, os, ssl, sys, threading, time
from urllib.parse import urlparse

url, ca, cid = sys.argv[1:4]
u = urlparse(url)
ctx = ssl.create_default_context(cafile=ca)
ctx.check_hostname = False
lock = threading.Lock()
res = {"capped": [], "other": []}

def token():
    return "ttu_%s.%s" % (os.urandom(8).hex(),
                          base64.urlsafe_b64encode(os.urandom(32)).decode().rstrip("="))

def ask(kind, src):
    c = http.client.HTTPSConnection(u.hostname, u.port, context=ctx, timeout=30,
                                    source_address=(src, 0))
    try:
        c.request("GET", "/k8s/clusters/%s/version" % cid,
                  headers={"Authorization": "Bearer " + token()})
        r = c.getresponse()
        body = r.read().decode("utf-8", "replace")
        out = (r.status, r.getheader("Retry-After"), json.loads(body).get("message", ""))
    except Exception as e:
        out = (0, None, repr(e))
    with lock:
        res[kind].append(out)

ts = [threading.Thread(target=ask, args=("capped", "127.0.0.1")) for _ in range(40)]
for t in ts:
    t.start()
# Another address once the cap has answered the first address's surplus.
deadline = time.monotonic() + 20
while time.monotonic() < deadline:
    with lock:
        if sum(1 for s in res["capped"] if "too many token checks" in s[2]) >= 24:
            break
    time.sleep(0.05)
o = threading.Thread(target=ask, args=("other", "127.0.0.2"))
o.start()
for t in ts + [o]:
    t.join()
print(json.dumps(res))
PY
cat "$T/cap.json" >&2
capped=$(jq '[.capped[] | select(.[0] == 503 and .[1] == "1" and (.[2] | test("too many token checks")))] | length' "$T/cap.json")
late=$(jq '[.capped[] | select(.[0] == 503 and (.[2] | test("did not answer the token check")))] | length' "$T/cap.json")
[ "$capped" -eq 24 ] || fail "expected 24 of 40 refused at the per-source cap (503, Retry-After: 1), got $capped"
[ "$late" -eq 16 ] || fail "expected the 16 queued checks to end with the store's late 503, got $late"
jq -e '.other[0][0] == 503 and (.other[0][2] | test("did not answer the token check"))' "$T/cap.json" >/dev/null ||
	fail "another address's check was not queued: $(jq -c .other "$T/cap.json")"
pass "one address: 16 checks queued, 24 refused at once with Retry-After; another address still queued"

pg_thaw
code() {
	curl -s -o /dev/null -w '%{http_code}' --cacert "$GW_DIR/ca.crt" \
		-H "Authorization: Bearer ttu_0123456789abcdef.$(head -c 32 /dev/urandom | base64 | tr '+/' '-_' | tr -d '=\n' | cut -c1-43)" \
		"$GW_URL/k8s/clusters/$cid/version"
}
back() { [ "$(code)" = 401 ]; }
wait_until 30 "a made-up token answered 401 once the store is back" back
pass "after the store came back the address's checks run again (401)"
gateway_stop
