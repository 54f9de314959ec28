#!/usr/bin/env python3
"""held_streams.py SPEC...: opens streams through the gateway, proves each
carries bytes (one echoed line), holds them open, and says when each ends
(test_revocation_ends_streams.sh).

Each SPEC is KIND:NAME:WHERE
  dial:NAME:SERVER_URL   `$CTL connect --cluster $CLUSTER --node $NODE
                         127.0.0.1:$ECHO_PORT` against SERVER_URL, token $TOKEN
  tcp:NAME:PORT          a TCP connection to 127.0.0.1:PORT (a tetherctl
                         forward's local port)
  k8s:NAME:URL           GET URL with Upgrade: tether-echo and Bearer $TOKEN,
                         CA $CAFILE; after the 101, raw bytes both ways

Prints "ready NAME" once a stream echoed its first line, then
"ended NAME MS" (Unix milliseconds) when the gateway ends it (EOF), or
"broken NAME WHY"; exits when every stream ended or after 120 s.
"""
import os
import socket
import ssl
import subprocess
import sys
import threading
import time
from urllib.parse import urlsplit

lock = threading.Lock()


def say(*words):
    with lock:
        print(*words, flush=True)


def now_ms():
    return int(time.time() * 1000)


def dial(name, server):
    env = dict(os.environ, TETHER_SERVER=server, TETHER_TOKEN=os.environ["TOKEN"])
    env.pop("TETHER_TOKEN_FILE", None)
    p = subprocess.Popen([os.environ["CTL"], "connect", "--cluster",
                          os.environ["CLUSTER"], "--node", os.environ["NODE"],
                          "127.0.0.1:" + os.environ["ECHO_PORT"]],
                         stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=env)
    line = ("hello " + name + "\n").encode()
    p.stdin.write(line)
    p.stdin.flush()
    if p.stdout.readline() != line:
        say("broken", name, "no echo")
        return
    say("ready", name)
    while p.stdout.readline():
        pass
    say("ended", name, now_ms())
    p.stdin.close()
    p.wait()


def hold(name, s, rest=b""):
    line = ("hello " + name + "\n").encode()
    s.sendall(line)
    got = rest
    while not got.endswith(b"\n"):
        data = s.recv(4096)
        if not data:
            say("broken", name, "closed before the echo")
            return
        got += data
    if got != line:
        say("broken", name, "echo differs: %r" % got)
        return
    say("ready", name)
    s.settimeout(None)
    try:
        while s.recv(4096):
            pass
    except OSError:
        pass
    say("ended", name, now_ms())


def tcp(name, port):
    hold(name, socket.create_connection(("127.0.0.1", int(port)), timeout=20))


def k8s(name, url):
    u = urlsplit(url)
    ctx = ssl.create_default_context(cafile=os.environ["CAFILE"])
    s = ctx.wrap_socket(socket.create_connection((u.hostname, u.port), timeout=20),
                        server_hostname=u.hostname)
    s.sendall(("GET %s HTTP/1.1\r\nHost: %s\r\nAuthorization: Bearer %s\r\n"
               "Connection: Upgrade\r\nUpgrade: tether-echo\r\n\r\n"
               % (u.path, u.netloc, os.environ["TOKEN"])).encode())
    buf = b""
    while b"\r\n\r\n" not in buf:
        data = s.recv(4096)
        if not data:
            say("broken", name, "closed before the head")
            return
        buf += data
    head, _, rest = buf.partition(b"\r\n\r\n")
    if b" 101 " not in head.split(b"\r\n")[0] + b" ":
        say("broken", name, head.split(b"\r\n")[0].decode())
        return
    hold(name, s, rest)


def run(spec):
    kind, name, where = spec.split(":", 2)
    try:
        {"dial": dial, "tcp": tcp, "k8s": k8s}[kind](name, where)
    except Exception as e:  # noqa: BLE001 - any failure is reported
        say("broken", name, repr(e))


threads = [threading.Thread(target=run, args=(a,), daemon=True) for a in sys.argv[1:]]
for t in threads:
    t.start()
deadline = time.monotonic() + 120
for t in threads:
    t.join(max(0, deadline - time.monotonic()))
