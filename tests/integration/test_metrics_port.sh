#!/usr/bin/env bash
# The plain metrics port (--metrics-listen, common/prom_http.c) gives a
# request head 5 s from the accept and holds at most 64 connections: 100
# connections that drip a head a byte every 300 ms are closed (those past
# 64 at accept, the rest at the head deadline, though bytes keep coming),
# while scrapes go on meanwhile, each answered once with Connection: close;
# HEAD, a wrong path and a wrong method get their answers.  Before, evhttp
# kept every dripped head open for as long as bytes came (1000 of 1000
# open after 40 s).
source "$(dirname "$0")/lib.sh"

MP=$(free_port)
gateway_init
gateway_start --metrics-listen "127.0.0.1:$MP"
url="http://127.0.0.1:$MP"

# The answers, one request per connection.
curl -sfi "$url/metrics" >"$T/scrape" || fail "a scrape failed"
assert_contains "$T/scrape" "tether_tunnels_connected"
assert_contains "$T/scrape" "Connection: close"
assert_contains "$T/scrape" "X-Content-Type-Options: nosniff"
[ "$(curl -s -o /dev/null -w '%{http_code}' -I "$url/metrics")" = 200 ] || fail "HEAD /metrics is not 200"
[ "$(curl -s -o /dev/null -w '%{http_code}' "$url/other")" = 404 ] || fail "GET /other is not 404"
[ "$(curl -s -o /dev/null -w '%{http_code}' -X POST "$url/metrics")" = 405 ] || fail "POST /metrics is not 405"
pass "scrapes answered once each with Connection: close; HEAD 200, /other 404, POST 405"

# 100 dripped heads.  drip.py reports, per connection, when the server
# closed it, as JSON once all are closed or 30 s have passed.
python3 - "$MP" >"$T/drip.json" <<'PY' &
import json, select, socket, sys, time
port = int(sys.argv[1])
start = time.monotonic()
conns, closed = [], {}
for i in range(100):
    s = socket.create_connection(("127.0.0.1", port))
    s.setblocking(False)
    conns.append(s)
head = b"GET /metrics HTTP/1.1\r\nHost: x\r\nX-Drip: " + b"a" * 4000
pos = 0
while len(closed) < len(conns) and time.monotonic() - start < 30:
    for i, s in enumerate(conns):
        if i in closed:
            continue
        try:
            r, _, _ = select.select([s], [], [], 0)
            if r and s.recv(4096) == b"":
                closed[i] = time.monotonic() - start
                continue
            s.send(head[pos:pos + 1])
        except OSError:
            closed[i] = time.monotonic() - start
    pos = (pos + 1) % len(head)
    time.sleep(0.3)
print(json.dumps({"open": len(conns) - len(closed), "early": sum(1 for t in closed.values() if t < 2), "closed": sorted(closed.values())}))
PY
drip=$!
PIDS+=("$drip")
# Scrapes while the heads drip: the 64 places are taken, so a scrape is
# let in as soon as a dripped connection has been closed at its deadline.
wait_until 20 "a scrape answered while heads drip" curl -sf --max-time 2 -o /dev/null "$url/metrics"
wait "$drip" || fail "the dripping client failed"
jq -e '.open == 0' "$T/drip.json" >/dev/null || fail "dripped heads still open after 30 s: $(cat "$T/drip.json")"
jq -e '.early >= 36' "$T/drip.json" >/dev/null || fail "fewer than 36 connections closed at accept (the cap of 64): $(cat "$T/drip.json")"
last=$(jq '.closed[-1]' "$T/drip.json")
pass "100 dripped heads: $(jq .early "$T/drip.json") closed at accept, the rest by the head deadline, the last at ${last} s"
