#!/usr/bin/env python3
"""keepalive_tokens.py URL CAFILE STEP...: requests on ONE kept-alive TLS
connection, for test_k8s_token_memo.sh.

Each STEP is "get:TOKEN" (GET URL with Authorization: Bearer TOKEN; prints
the answer's status, one line each) or "run:COMMAND" (runs COMMAND through
the shell between two requests, and waits for it: a revocation).  Exits 1
if the connection ends before the last step (the steps must share it), or
a COMMAND fails.
"""
import socket
import ssl
import subprocess
import sys
from urllib.parse import urlsplit

url, cafile = sys.argv[1:3]
u = urlsplit(url)
ctx = ssl.create_default_context(cafile=cafile)
s = ctx.wrap_socket(socket.create_connection((u.hostname, u.port), timeout=10),
                    server_hostname=u.hostname)
target = u.path + ("?" + u.query if u.query else "")
buf = b""


def answer():
    """One answer (Content-Length framed, or chunked): its status."""
    global buf
    while b"\r\n\r\n" not in buf:
        data = s.recv(65536)
        if not data:
            sys.exit("closed: the connection ended before an answer")
        buf += data
    head, _, buf = buf.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    status = int(lines[0].split(" ")[1])
    headers = {l.split(":", 1)[0].strip().lower(): l.split(":", 1)[1].strip()
               for l in lines[1:] if ":" in l}
    if "content-length" in headers:
        n = int(headers["content-length"])
        while len(buf) < n:
            data = s.recv(65536)
            if not data:
                sys.exit("closed inside a body")
            buf += data
        buf = buf[n:]
    elif headers.get("transfer-encoding", "").lower() == "chunked":
        while not buf.endswith(b"0\r\n\r\n"):
            data = s.recv(65536)
            if not data:
                sys.exit("closed inside a chunked body")
            buf += data
        buf = b""
    if headers.get("connection", "").lower() == "close":
        sys.exit("closed: the answer with status %d said Connection: close" % status)
    return status


for step in sys.argv[3:]:
    kind, _, arg = step.partition(":")
    if kind == "get":
        s.sendall(("GET %s HTTP/1.1\r\nHost: %s\r\nAuthorization: Bearer %s\r\n\r\n"
                   % (target, u.netloc, arg)).encode())
        print("status=%d" % answer(), flush=True)
    elif kind == "run":
        if subprocess.run(arg, shell=True, stdout=subprocess.DEVNULL).returncode != 0:
            sys.exit("the command failed: %s" % arg)
    else:
        sys.exit("unknown step %r" % step)
