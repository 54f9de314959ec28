#!/usr/bin/python3
"""blackhole.py: a listening port whose connects hang (for dial timeouts).

usage: blackhole.py PORTFILE
Listens with a backlog of 0 and never accepts; it fills its own accept
queue first, after which the kernel drops further SYNs to it, so a connect
waits until the caller gives up.  Writes the port to PORTFILE when ready.
"""
import os
import socket
import sys
import time

srv = socket.socket()
srv.bind(("127.0.0.1", 0))
srv.listen(0)
port = srv.getsockname()[1]
fillers = []
for _ in range(4):
    c = socket.socket()
    c.setblocking(False)
    try:
        c.connect(("127.0.0.1", port))
    except BlockingIOError:
        pass
    fillers.append(c)
time.sleep(0.2)
tmp = sys.argv[1] + ".tmp"
with open(tmp, "w") as f:
    f.write(str(port))
os.replace(tmp, sys.argv[1])
while True:
    time.sleep(3600)
