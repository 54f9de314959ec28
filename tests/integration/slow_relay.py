#!/usr/bin/env python3
"""slow_relay.py: a TCP relay whose answers come slowly, as over a slow link:
the bytes from the target to the client at most RATE bytes a second, in
small pieces (one every 20 ms), the client's bytes at full speed.

    slow_relay.py PORT_FILE TARGET_PORT RATE

Listens on 127.0.0.1 (a port of its own, written to PORT_FILE once
listening); each connection is relayed to 127.0.0.1:TARGET_PORT.  It reads
from the target only as fast as it writes (a small receive buffer), so the
target's socket fills as it would behind a slow link.
"""
import socket
import sys
import threading
import time

TICK = 0.02


def up(src, dst):
    try:
        while True:
            data = src.recv(65536)
            if not data:
                dst.shutdown(socket.SHUT_WR)
                return
            dst.sendall(data)
    except OSError:
        pass


def down(src, dst, rate):
    piece = max(1, int(rate * TICK))
    due = time.monotonic()
    try:
        while True:
            data = src.recv(piece)
            if not data:
                dst.shutdown(socket.SHUT_WR)
                return
            dst.sendall(data)
            due += len(data) / rate
            wait = due - time.monotonic()
            if wait > 0:
                time.sleep(wait)
            else:
                due = time.monotonic()
    except OSError:
        pass
    finally:
        try:
            dst.close()
            src.close()
        except OSError:
            pass


def serve(conn, target_port, rate):
    t = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    t.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    try:
        t.connect(("127.0.0.1", target_port))
    except OSError:
        conn.close()
        return
    conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    threading.Thread(target=up, args=(conn, t), daemon=True).start()
    threading.Thread(target=down, args=(t, conn, rate), daemon=True).start()


def main():
    port_file, target_port, rate = sys.argv[1], int(sys.argv[2]), float(sys.argv[3])
    lis = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    lis.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    lis.bind(("127.0.0.1", 0))
    lis.listen(16)
    with open(port_file + ".tmp", "w") as f:
        f.write("%d\n" % lis.getsockname()[1])
    import os
    os.rename(port_file + ".tmp", port_file)
    while True:
        conn, _ = lis.accept()
        serve(conn, target_port, rate)


if __name__ == "__main__":
    main()
