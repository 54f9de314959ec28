#!/usr/bin/env python3
"""on_loop.py PORT CAFILE TOKENFILE GATEWAY_LOG LOOP METHOD PATH [BODY]

One admin request served on event loop LOOP of a gateway started with
--landing any --log-level debug (docs/0040): opens connections until one
lives on LOOP, asking GET /healthz on each first.  A connection kept by
the loop that ran its handshake, or sent to another, is named by the
gateway's debug line 'http: landed' (its peer, i.e. this client's port,
and the loop), written before the connection reads its first request, so
in the log once the answer came; one with no such line went to loop 0
(its handshake ran there, or it was sent home).  Then sends the request
on that same connection (keep-alive) and prints its status on the first
line and its body after.  Exits 1 when no connection lived there in 40
tries.
"""
import http.client
import re
import ssl
import sys


def loop_of(log, port):
    """The loop the connection from port lives on (0 unless it landed)."""
    pat = re.compile(r'msg="?http: landed"? .*peer="?127\.0\.0\.1:%d"?( |$).*loop="?([0-9]+)"?( |$)'
                     % port)
    with open(log, errors="replace") as f:
        for line in f:
            m = pat.search(line)
            if m:
                return m.group(2)
    return "0"


def main():
    port, ca, token_file, log, loop, method, path = sys.argv[1:8]
    body = sys.argv[8] if len(sys.argv) > 8 else None
    token = open(token_file).read().strip()
    ctx = ssl.create_default_context(cafile=ca)
    for _ in range(40):
        conn = http.client.HTTPSConnection("127.0.0.1", int(port), context=ctx, timeout=30)
        conn.request("GET", "/healthz")
        r = conn.getresponse()
        r.read()
        if r.status != 200:
            sys.exit("GET /healthz: %d" % r.status)
        if loop_of(log, conn.sock.getsockname()[1]) != loop:
            conn.close()
            continue
        headers = {"Authorization": "Bearer " + token}
        if body is not None:
            headers["Content-Type"] = "application/json"
        conn.request(method, path, body=body, headers=headers)
        r = conn.getresponse()
        data = r.read()
        conn.close()
        print(r.status)
        sys.stdout.write(data.decode(errors="replace"))
        return
    sys.exit("no connection landed on loop %s in 40 tries" % loop)


if __name__ == "__main__":
    main()
