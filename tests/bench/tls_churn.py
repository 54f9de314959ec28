#!/usr/bin/env python3
"""tls_churn.py PORT N MODE: N connections to a gateway's TLS port, each
ending as MODE says (tests/bench/tls_churn.sh runs every mode):

  silent       connect, send nothing, close after 4 s (the ClientHello
               deadline passes first)
  reset        connect and close at once with a reset (SO_LINGER 0)
  half         send the first bytes of a ClientHello, close after 4 s
  hello_close  send a whole ClientHello, close before the handshake ends
  tls_ok       finish the TLS handshake, close before any HTTP

Prints "MODE N connected" on success; a connection refused is counted, not
fatal (the gateway may close some at accept)."""
import socket
import ssl
import struct
import sys
import threading
import time


def connect(port):
    s = socket.socket()
    s.settimeout(10)
    try:
        s.connect(("127.0.0.1", port))
    except OSError:
        s.close()
        return None
    return s


def main():
    port, n, mode = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
    done = 0
    if mode in ("silent", "reset", "half"):
        held = []
        for _ in range(n):
            s = connect(port)
            if s is None:
                continue
            done += 1
            if mode == "reset":
                s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
                s.close()
                continue
            if mode == "half":
                s.send(b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03")
            held.append(s)
        time.sleep(4)
        for s in held:
            s.close()
    elif mode in ("hello_close", "tls_ok"):
        ctx = ssl.create_default_context()
        ctx.check_hostname = False
        ctx.verify_mode = ssl.CERT_NONE
        lock = threading.Lock()

        def one():
            nonlocal done
            s = connect(port)
            if s is None:
                return
            try:
                if mode == "tls_ok":
                    ctx.wrap_socket(s, server_hostname="127.0.0.1").close()
                else:
                    inb, outb = ssl.MemoryBIO(), ssl.MemoryBIO()
                    obj = ctx.wrap_bio(inb, outb, server_hostname="127.0.0.1")
                    try:
                        obj.do_handshake()
                    except ssl.SSLWantReadError:
                        pass
                    s.send(outb.read())
                    s.close()
                with lock:
                    done += 1
            except (OSError, ssl.SSLError):
                s.close()

        threads = [threading.Thread(target=one) for _ in range(n)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    else:
        sys.exit("unknown mode " + mode)
    print(mode, done, "connected")


if __name__ == "__main__":
    main()
