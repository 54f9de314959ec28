#!/usr/bin/env python3
"""fakeproxy.py MODE PORTFILE: a hostile HTTP proxy on 127.0.0.1 for the
agent's CONNECT reader.  Binds port 0, writes the port to PORTFILE, then
for every connection reads the request and:
  bighead   answers "HTTP/1.1 200 OK" followed by header lines that never
            end (64 KiB), then holds the connection open
  trailing  answers a 200 and, in the same write, bytes the server never
            sent (a proxy must not speak for the server)
"""
import socket
import sys
import threading

mode, portfile = sys.argv[1], sys.argv[2]


def serve(conn):
    try:
        conn.recv(65536)
        if mode == 'bighead':
            conn.sendall(b'HTTP/1.1 200 OK\r\n' + b'X-Pad: ' + b'a' * 65536)
        else:
            conn.sendall(b'HTTP/1.1 200 Connection established\r\n\r\nHELLO')
        conn.recv(65536)
    except OSError:
        pass
    finally:
        conn.close()


s = socket.socket()
s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(('127.0.0.1', 0))
s.listen(16)
with open(portfile + '.tmp', 'w') as f:
    f.write(str(s.getsockname()[1]))
import os
os.rename(portfile + '.tmp', portfile)
while True:
    c, _ = s.accept()
    threading.Thread(target=serve, args=(c,), daemon=True).start()
