#!/usr/bin/env python3
"""ping_flood.py: dial connections that send and never read (issue 22,
hole 6; docs/0036-memory-budget.md).

  ping_flood.py URL CAFILE TOKEN CLUSTER TARGET N MODE BYTES STATUS

Opens N raw dial WebSockets (GET /v1/clusters/CLUSTER/dial?target=TARGET,
Bearer TOKEN) with a 4 KiB receive buffer, then, never reading a byte,
sends BYTES on each:
  ping   WebSocket PINGs with 125-byte payloads (each asks for a PONG)
  data   binary messages of 16 KiB (to an echo TARGET: the echo is queued
         back toward a client that does not read)
  hold   nothing (to a TARGET that sends: tcpserver.py source)
STATUS is rewritten about every 0.2 s with one line of JSON: connections
upgraded, finished (sent all BYTES), dropped (the gateway ended them), and
bytes sent.  Holds every connection open until killed.
"""
import json
import os
import select
import socket
import ssl
import struct
import sys
import time
import urllib.parse


def frame(opcode, payload):
    """A masked client frame (RFC 6455 5.2); the zero mask keeps it cheap."""
    n = len(payload)
    if n < 126:
        head = struct.pack("!BB", 0x80 | opcode, 0x80 | n)
    elif n < 65536:
        head = struct.pack("!BBH", 0x80 | opcode, 0x80 | 126, n)
    else:
        head = struct.pack("!BBQ", 0x80 | opcode, 0x80 | 127, n)
    return head + b"\0\0\0\0" + payload


def upgrade(url, ctx, token, cluster, target):
    u = urllib.parse.urlsplit(url)
    raw = socket.socket()
    raw.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    raw.settimeout(20)
    raw.connect((u.hostname, u.port))
    s = ctx.wrap_socket(raw, server_hostname=u.hostname)
    path = "/v1/clusters/%s/dial?target=%s" % (cluster, urllib.parse.quote(target))
    s.sendall(("GET %s HTTP/1.1\r\nHost: %s\r\nConnection: Upgrade\r\n"
               "Upgrade: websocket\r\nSec-WebSocket-Version: 13\r\n"
               "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n"
               "Authorization: Bearer %s\r\n\r\n" % (path, u.netloc, token)).encode())
    head = b""
    while not head.endswith(b"\r\n\r\n"):
        b = s.recv(1)
        if not b:
            raise OSError("closed before the answer")
        head += b
    if not head.startswith(b"HTTP/1.1 101"):
        raise OSError("no upgrade: " + head.split(b"\r\n")[0].decode("latin-1"))
    s.setblocking(False)
    return s


def main():
    url, cafile, token, cluster, target, n, mode, nbytes, status = sys.argv[1:10]
    n, nbytes = int(n), int(nbytes)
    ctx = ssl.create_default_context(cafile=cafile)
    ctx.check_hostname = False
    if mode == "hold":
        nbytes = 0
    unit = frame(0x9, b"p" * 125) if mode == "ping" else frame(0x2, b"d" * 16384)
    chunk = unit * max(1, 65536 // len(unit))
    conns, counts = {}, {"upgraded": 0, "finished": 0, "dropped": 0, "sent": 0}
    last = 0.0

    def report(force=False):
        nonlocal last
        if not force and time.monotonic() - last < 0.2:
            return
        last = time.monotonic()
        with open(status + ".tmp", "w") as f:
            f.write(json.dumps(counts) + "\n")
        os.replace(status + ".tmp", status)

    for _ in range(n):
        s = upgrade(url, ctx, token, cluster, target)
        conns[s] = [0, b""]            # bytes sent, the rest of a partial send
        counts["upgraded"] += 1
        counts["finished"] += nbytes == 0
        report()
    report(True)
    while any(v[0] < nbytes for v in conns.values()):
        busy = [s for s, v in conns.items() if v[0] < nbytes]
        _, writable, _ = select.select([], busy, [], 0.5)
        for s in writable:
            v = conns[s]
            buf = v[1] or chunk[: max(len(unit), min(len(chunk), nbytes - v[0]))]
            try:
                sent = s.send(buf)
            except (ssl.SSLWantWriteError, ssl.SSLWantReadError, BlockingIOError):
                continue
            except OSError:
                counts["dropped"] += 1
                v[0] = nbytes
                continue
            v[0] += sent
            counts["sent"] += sent
            v[1] = buf[sent:]
            if v[0] >= nbytes:
                counts["finished"] += 1
        report()
    report(True)
    while True:
        time.sleep(3600)


if __name__ == "__main__":
    main()
