#!/usr/bin/env python3
"""hello_stall.py PORT GATEWAY_PID STOP_S N: N tunnel upgrades
(/v1/connect, subprotocol tether.v1), one after the other; after each 101
the gateway is stopped (SIGSTOP), one WebSocket frame is sent while it is
(a binary frame whose payload is no HELLO), and the gateway is resumed
STOP_S seconds later.  The frame is in the gateway's socket within a
millisecond of the 101: a gateway that reads what arrived before judging
its HELLO deadline (--hello-timeout) answers it as a malformed HELLO; one
that judges the deadline first logs "no HELLO within".  tests/bench/
hello_stall.sh counts which."""
import base64
import os
import signal
import socket
import ssl
import sys
import time


def main():
    port, gw, stop, n = int(sys.argv[1]), int(sys.argv[2]), float(sys.argv[3]), int(sys.argv[4])
    ctx = ssl.create_default_context()
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE
    for _ in range(n):
        s = ctx.wrap_socket(socket.create_connection(("127.0.0.1", port), timeout=10),
                            server_hostname="127.0.0.1")
        key = base64.b64encode(os.urandom(16)).decode()
        s.sendall(("GET /v1/connect HTTP/1.1\r\nHost: 127.0.0.1\r\nUpgrade: websocket\r\n"
                   "Connection: Upgrade\r\nSec-WebSocket-Key: %s\r\nSec-WebSocket-Version: 13\r\n"
                   "Sec-WebSocket-Protocol: tether.v1\r\n\r\n" % key).encode())
        head = b""
        while b"\r\n\r\n" not in head:
            chunk = s.recv(4096)
            if not chunk:
                sys.exit("the gateway closed before its 101")
            head += chunk
        if not head.startswith(b"HTTP/1.1 101"):
            sys.exit("no 101: " + head[:80].decode(errors="replace"))
        os.kill(gw, signal.SIGSTOP)
        try:
            payload = os.urandom(32)
            s.sendall(bytes([0x82, 0x80 | len(payload)]) + os.urandom(4) + payload)
            time.sleep(stop)
        finally:
            os.kill(gw, signal.SIGCONT)
        s.settimeout(5)
        try:
            while s.recv(4096):
                pass
        except OSError:
            pass
        s.close()
    print("done", n)


if __name__ == "__main__":
    main()
