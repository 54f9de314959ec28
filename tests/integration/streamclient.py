#!/usr/bin/python3
"""streamclient.py: concurrent integrity checks through a forwarded port.

usage: streamclient.py PORT CONNECTIONS BYTES
Opens CONNECTIONS connections to 127.0.0.1:PORT at once; each sends BYTES
random bytes, half-closes, reads the echo until EOF and compares SHA-256.
Prints "ok N" and exits 0 when every connection matched; else prints what
differed and exits 1.
"""
import hashlib
import os
import socket
import sys
import threading


def one(port, nbytes, results, i):
    data = os.urandom(nbytes)
    try:
        s = socket.create_connection(("127.0.0.1", port), timeout=60)
        def send():
            s.sendall(data)
            s.shutdown(socket.SHUT_WR)
        t = threading.Thread(target=send)
        t.start()
        h = hashlib.sha256()
        got = 0
        while True:
            b = s.recv(262144)
            if not b:
                break
            h.update(b)
            got += len(b)
        t.join()
        s.close()
        results[i] = (got == nbytes and h.digest() == hashlib.sha256(data).digest(),
                      "connection %d: got %d of %d bytes" % (i, got, nbytes))
    except OSError as e:
        results[i] = (False, "connection %d: %s" % (i, e))


def main():
    port, conns, nbytes = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
    results = [None] * conns
    threads = [threading.Thread(target=one, args=(port, nbytes, results, i))
               for i in range(conns)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    bad = [msg for ok, msg in results if not ok]
    if bad:
        print("\n".join(bad[:10]))
        sys.exit(1)
    print("ok", conns)


if __name__ == "__main__":
    main()
