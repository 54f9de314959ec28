#!/usr/bin/env python3
"""k8s_on_loop.py PORT CAFILE TOKEN ADMIN_TOKEN LOOP CONNS REQS PATH GW_PID [PERF_OUT]

k8s_instructions.sh's client for a gateway under callgrind (docs/0040's
loops): opens CONNS keep-alive connections that live on event loop LOOP
("any": wherever they land), warms each with BENCH_WARM (default 5) GETs
of PATH (TOKEN's), then turns callgrind's instrumentation on in GW_PID,
sends REQS GETs of PATH on every connection at once (a thread each), and
turns it off.  BENCH_WARM=0: one more connection on LOOP takes the 5
warm-up requests instead (the loop's token check and link are warm) and
the connections send their REQS one connection after another, so that
each one's first request, in the window, opens its stream to the agent
(a kept stream serves its later ones: docs/0007).  With
PERF_OUT the window is `perf stat` on GW_PID instead (system calls and
task-clock per thread, written to PERF_OUT).

A connection is placed by the gateway's own landing, no bench-only knob:
under --landing any a connection whose first request is a root path
(/metrics) stays on the loop that ran its TLS handshake.  Each new
connection asks GET /metrics first (ADMIN_TOKEN's), and the one loop whose
tether_loop_tls_handshakes_total grew by one since the scrape before (made
on the previous connection, after its own handshake) is its loop; one on
another loop is closed and another opened.  Nothing else may handshake
meanwhile (the agent's tunnel is up): a scrape that saw more than one new
handshake is not used.  The debug line 'http: landed' would name the loop
too, but debug logging adds lines to every request.  Exits 1 when the
connections could not be placed in 40 tries each, or a request failed.
"""
import http.client
import os
import re
import ssl
import subprocess
import sys
import signal
import threading
import time

WARM = int(os.environ.get("BENCH_WARM", "5"))
HS = re.compile(r'^tether_loop_tls_handshakes_total\{loop="([0-9]+)"\} ([0-9]+)$', re.M)


def get(conn, path, headers):
    conn.request("GET", path, headers=headers)
    r = conn.getresponse()
    body = r.read()
    if r.status != 200:
        raise RuntimeError("GET %s: %d" % (path, r.status))
    return body


def handshakes(conn, admin):
    """Each loop's TLS handshakes so far, from /metrics on conn."""
    text = get(conn, "/metrics", {"Authorization": "Bearer " + admin}).decode()
    return {m.group(1): int(m.group(2)) for m in HS.finditer(text)}


def place(port, ctx, admin, loop, n):
    """n connections living on loop (any loop for "any")."""
    def connect():
        return http.client.HTTPSConnection("127.0.0.1", port, context=ctx, timeout=120)

    first = connect()
    seen = handshakes(first, admin)
    first.close()
    conns = []
    for _ in range(40 * n):
        if len(conns) == n:
            break
        conn = connect()
        now = handshakes(conn, admin)
        grew = [k for k in now if now[k] != seen.get(k, 0)]
        on = grew[0] if len(grew) == 1 and now[grew[0]] == seen.get(grew[0], 0) + 1 else None
        seen = now
        if on is not None and (loop == "any" or on == loop):
            conns.append(conn)
        else:
            conn.close()
    if len(conns) < n:
        sys.exit("only %d of %d connections on loop %s in %d tries" % (len(conns), n, loop, 40 * n))
    return conns


class Window:
    """Counting in the gateway on (callgrind's instrumentation, or perf stat
    into perf_out) while the requests run."""

    def __init__(self, pid, perf_out):
        self.pid, self.perf_out, self.perf = pid, perf_out, None

    def on(self):
        if self.perf_out is None:
            self.callgrind("on")
            return
        self.perf = subprocess.Popen(
            ["perf", "stat", "-e", "raw_syscalls:sys_enter,task-clock", "--per-thread",
             "-p", self.pid, "-o", self.perf_out])
        time.sleep(0.5)   # attached (it says nothing until the end)

    def off(self):
        if self.perf is None:
            self.callgrind("off")
            return
        self.perf.send_signal(signal.SIGINT)
        self.perf.wait()   # its status after SIGINT says nothing; its file does

    def callgrind(self, what):
        subprocess.run(["callgrind_control", "-i", what, self.pid], check=True,
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def main():
    port, ca, token, admin, loop, nconns, reqs, path, pid = sys.argv[1:10]
    window = Window(pid, sys.argv[10] if len(sys.argv) > 10 else None)
    headers = {"Authorization": "Bearer " + token}
    ctx = ssl.create_default_context(cafile=ca)
    conns = place(int(port), ctx, open(admin).read().strip(), loop, int(nconns))
    for c in conns if WARM > 0 else place(int(port), ctx, open(admin).read().strip(), loop, 1):
        for _ in range(WARM if WARM > 0 else 5):
            get(c, path, headers)
    failed = []

    def run(c):
        try:
            for _ in range(int(reqs)):
                get(c, path, headers)
        except Exception as e:  # reported below, after the window closes
            failed.append(str(e))

    window.on()
    if WARM == 0:
        for c in conns:
            run(c)
    else:
        threads = [threading.Thread(target=run, args=(c,)) for c in conns]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    window.off()
    for c in conns:
        c.close()
    if failed:
        sys.exit("requests failed: " + failed[0])


if __name__ == "__main__":
    main()
