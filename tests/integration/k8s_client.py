#!/usr/bin/env python3
"""k8s_client.py MODE URL CAFILE TOKEN: raw HTTP/1.1 over TLS for test_k8s.sh.

stream   GET URL; prints "first=<s> total=<s> lines=<n>": seconds until the
         first body line arrived and until the answer ended
upgrade  GET URL with Upgrade: tether-echo; expects 101, sends bytes,
         prints what is echoed back
"""
import socket
import ssl
import sys
import time
from urllib.parse import urlsplit

mode, url, cafile, token = sys.argv[1:5]
u = urlsplit(url)
ctx = ssl.create_default_context(cafile=cafile)
raw = socket.create_connection((u.hostname, u.port), timeout=10)
s = ctx.wrap_socket(raw, server_hostname=u.hostname)
target = u.path + ("?" + u.query if u.query else "")
start = time.monotonic()
if mode == "stream":
    s.sendall(("GET %s HTTP/1.1\r\nHost: %s\r\nAuthorization: Bearer %s\r\n\r\n"
               % (target, u.netloc, token)).encode())
    buf = b""
    first = None
    while True:
        data = s.recv(65536)
        if not data:
            break
        buf += data
        if first is None and b"line 0" in buf:
            first = time.monotonic() - start
        if buf.endswith(b"0\r\n\r\n"):
            break
    total = time.monotonic() - start
    print("first=%.3f total=%.3f lines=%d" % (first if first is not None else -1,
                                               total, buf.count(b"line ")))
elif mode == "upgrade":
    s.sendall(("GET %s HTTP/1.1\r\nHost: %s\r\nAuthorization: Bearer %s\r\n"
               "Connection: Upgrade\r\nUpgrade: tether-echo\r\n\r\n"
               % (target, u.netloc, token)).encode())
    buf = b""
    while b"\r\n\r\n" not in buf:
        data = s.recv(65536)
        if not data:
            sys.exit("closed before the head: %r" % buf)
        buf += data
    head, _, rest = buf.partition(b"\r\n\r\n")
    status = head.split(b"\r\n")[0].decode()
    if " 101 " not in status + " ":
        sys.exit("not a 101: %s" % head.decode())
    msg = b"ping-through-the-tunnel" * 100
    s.sendall(msg)
    got = rest
    while len(got) < len(msg):
        data = s.recv(65536)
        if not data:
            break
        got += data
    print("status=%s echo_ok=%s" % (status.split(" ")[1], got == msg))
