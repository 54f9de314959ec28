#!/usr/bin/env python3
"""madeup_tokens.py GW_URL CAFILE CLUSTER SECONDS CONNS: made-up, well-formed
user tokens (ttu_<16 hex>.<43 base64url>, a new id each request) on /k8s,
for test_k8s_store_stall.sh.  CONNS keep-alive connections, each sending
GET /k8s/clusters/CLUSTER/version and GET /version (a root path: the
token names the cluster) in turn for SECONDS seconds, one at a time.
A request not answered within 30 s counts as "none".

Prints one JSON line: {"requests", "statuses": {"401": n, "503": n, ...},
"reasons": [distinct Status messages], "max_ms"}.
"""
import base64
import http.client
import json
import os
import ssl
import sys
import threading
import time
from urllib.parse import urlparse

url, cafile, cluster, seconds, conns = sys.argv[1:6]
u = urlparse(url)
end = time.monotonic() + float(seconds)
lock = threading.Lock()
statuses, reasons = {}, set()
stats = {"requests": 0, "max_ms": 0}


def token():
    secret = base64.urlsafe_b64encode(os.urandom(32)).rstrip(b"=").decode()
    return "ttu_%s.%s" % (os.urandom(8).hex(), secret)


def worker():
    ctx = ssl.create_default_context(cafile=cafile)
    ctx.check_hostname = False
    c = None
    i = 0
    while time.monotonic() < end:
        if c is None:
            c = http.client.HTTPSConnection(u.hostname, u.port, context=ctx, timeout=30)
        path = "/k8s/clusters/%s/version" % cluster if i % 2 == 0 else "/version"
        i += 1
        t0 = time.monotonic()
        try:
            c.request("GET", path, headers={"Authorization": "Bearer " + token()})
            r = c.getresponse()
            body = r.read()
            code = str(r.status)
            try:
                msg = json.loads(body).get("message", "")
            except ValueError:
                msg = ""
            if r.getheader("Connection", "").lower() == "close":
                c.close()
                c = None
        except (OSError, http.client.HTTPException):
            code, msg = "none", ""
            c.close()
            c = None
        ms = (time.monotonic() - t0) * 1000
        with lock:
            stats["requests"] += 1
            statuses[code] = statuses.get(code, 0) + 1
            if msg:
                reasons.add(msg)
            stats["max_ms"] = max(stats["max_ms"], int(ms))


threads = [threading.Thread(target=worker) for _ in range(int(conns))]
for t in threads:
    t.start()
for t in threads:
    t.join()
print(json.dumps({"requests": stats["requests"], "statuses": statuses,
                  "reasons": sorted(reasons), "max_ms": stats["max_ms"]}))
