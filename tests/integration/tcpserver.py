#!/usr/bin/python3
"""tcpserver.py: small TCP servers for stream tests, on 127.0.0.1.

usage: tcpserver.py MODE PORTFILE [COUNTFILE]
  echo    echoes every byte; on EOF from the client, shuts down its write side
          after echoing everything (so half-close is observable)
  source  writes zeros as fast as the client takes them, forever, and keeps
          the number of bytes sent so far in COUNTFILE
Binds port 0 and writes the port to PORTFILE once listening.
"""
import os
import socket
import sys
import threading


def echo(conn):
    try:
        while True:
            data = conn.recv(262144)
            if not data:
                break
            conn.sendall(data)
        conn.shutdown(socket.SHUT_WR)
    except OSError:
        pass
    finally:
        conn.close()


def source(conn, countfile):
    chunk = b"\0" * 65536
    sent = 0
    try:
        while True:
            sent += conn.send(chunk)
            tmp = countfile + ".tmp"
            with open(tmp, "w") as f:
                f.write(str(sent))
            os.replace(tmp, countfile)
    except OSError:
        pass
    finally:
        conn.close()


def main():
    mode, portfile = sys.argv[1], sys.argv[2]
    countfile = sys.argv[3] if len(sys.argv) > 3 else None
    srv = socket.socket()
    srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    srv.bind(("127.0.0.1", 0))
    srv.listen(256)
    tmp = portfile + ".tmp"
    with open(tmp, "w") as f:
        f.write(str(srv.getsockname()[1]))
    os.replace(tmp, portfile)
    while True:
        conn, _ = srv.accept()
        conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        target = echo if mode == "echo" else (lambda c: source(c, countfile))
        threading.Thread(target=target, args=(conn,), daemon=True).start()


if __name__ == "__main__":
    main()
