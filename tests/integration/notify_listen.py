#!/usr/bin/env python3
"""notify_listen.py SOCKET OUTFILE [PORT]: plays systemd's side of
sd_notify: binds a unix datagram socket at SOCKET (a path, or @NAME for an
abstract socket, as NOTIFY_SOCKET may name either) and appends every
variable of every message it receives to OUTFILE, one per line.  With PORT,
when READY=1 arrives it at once tries to connect to 127.0.0.1:PORT and
writes "port-open" or "port-closed" on the next line, so a test can tell
whether the daemon said READY before it was listening."""
import os
import socket
import sys

path, out = sys.argv[1], sys.argv[2]
port = int(sys.argv[3]) if len(sys.argv) > 3 else 0
s = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
if path.startswith('@'):
    s.bind('\0' + path[1:])
else:
    s.bind(path)
    os.chmod(path, 0o666)
with open(out, 'a', buffering=1) as f:
    f.write('listening\n')
    while True:
        data = s.recv(4096).decode('utf-8', 'replace')
        for line in data.split('\n'):
            if not line:
                continue
            f.write(line + '\n')
            if line == 'READY=1' and port:
                c = socket.socket()
                try:
                    c.connect(('127.0.0.1', port))
                    f.write('port-open\n')
                except OSError:
                    f.write('port-closed\n')
                finally:
                    c.close()
