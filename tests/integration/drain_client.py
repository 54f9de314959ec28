#!/usr/bin/python3
"""drain_client.py: connections that reach a gateway as it drains (docs/0017).

usage: drain_client.py PORT CAFILE GATEWAY_LOG
Before the gateway's SIGTERM: opens a TCP connection A (no TLS yet) and a
TLS connection B with a request started (its head not ended).  Then waits
for the log line of the drain's start: A does its TLS handshake and asks
/readyz, and a new connection C does the same.  Then waits for the line
saying the gateway stopped accepting (the drain's end): B ends its request.
Each must get an HTTP answer (a status line), never an EOF or a reset.
Prints one line per connection; exit 0 when all three were answered.
"""
import socket
import ssl
import sys
import time

port, cafile, log = int(sys.argv[1]), sys.argv[2], sys.argv[3]
ctx = ssl.create_default_context(cafile=cafile)
ctx.check_hostname = False
REQ = b"GET /readyz HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n"


def wait_log(text, secs=30):
    end = time.monotonic() + secs
    while time.monotonic() < end:
        with open(log, errors="replace") as f:
            if text in f.read():
                return
        time.sleep(0.005)
    sys.exit(f"drain_client: no {text!r} in the log within {secs} s")


def answer(name, s):
    got = b""
    try:
        while b"\r\n" not in got:
            b = s.recv(4096)
            if not b:
                break
            got += b
    except OSError as e:
        print(f"{name}: no answer: {e}")
        return False
    line = got.split(b"\r\n")[0].decode(errors="replace")
    print(f"{name}: {line or 'EOF without an answer'}")
    return line.startswith("HTTP/1.1 ")


def tls(name, raw):
    try:
        if raw is None:
            raw = socket.create_connection(("127.0.0.1", port), timeout=20)
        s = ctx.wrap_socket(raw, server_hostname="127.0.0.1")
    except OSError as e:
        print(f"{name}: connection or TLS handshake failed: {e}")
        return None
    return s


a = socket.create_connection(("127.0.0.1", port), timeout=20)
b = tls("B", None)
if b is None:
    sys.exit(1)
b.sendall(REQ)
print("held", flush=True)

wait_log('msg="stopping: draining"')
ok = True
sa = tls("A", a)
if sa is None:
    ok = False
else:
    sa.sendall(REQ + b"\r\n")
    ok = answer("A (accepted before SIGTERM)", sa) and ok
c = tls("C", None)
if c is None:
    ok = False
else:
    c.sendall(REQ + b"\r\n")
    ok = answer("C (new during the drain)", c) and ok

wait_log('msg="stopped accepting connections')
try:
    b.sendall(b"\r\n")
    ok = answer("B (request in flight at the drain's end)", b) and ok
except OSError as e:
    print(f"B: cannot end the request: {e}")
    ok = False
sys.exit(0 if ok else 1)
