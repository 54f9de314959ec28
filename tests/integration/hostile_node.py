#!/usr/bin/env python3
"""hostile_node.py PORTFILE DIR: a tenant's node whose kube-api answers are
framed against RFC 9110, for test_k8s_answers.sh.  Keep-alive HTTP/1.1;
every byte each connection receives is copied to DIR/conn-N.bin as it
arrives.

GET /204-cl        204 with a Content-Length, and 0.5 s later that many
                   bytes: a whole forged answer (FORGED)
GET /204-trailing  204, FORGED right behind it in the same write
GET /304-cl        304 with FORGED's length, and FORGED 0.5 s later
GET /304-nobody    304 with Content-Length: 1000 and no body
GET /101           101 Switching Protocols (to a request that asked for no
                   upgrade), FORGED 0.5 s later, then reads until EOF
GET /late          200 with a 2-byte body, FORGED 0.5 s later
POST /stream       200 at once without reading the body: 20 chunks, 100 ms
                   apart, then the connection is closed
GET /bad-body      200, chunked, and a malformed chunk size, in the same
                   write as the head
GET /folded-bad-body  the same with an obs-fold in the head (http-parser
                   takes it, the gateway's head check does not)
anything else      200 {"node": "hostile", "target": ...}

Writes the port it listens on to PORTFILE (atomically).
"""
import itertools
import json
import os
import socketserver
import sys
import time

DIR = sys.argv[2]
counter = itertools.count(1)
FORGED_BODY = b'{"forged": true, "kind": "Secret", "data": {"token": "FORGED"}}'
FORGED = (b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
          b"Content-Length: %d\r\n\r\n" % len(FORGED_BODY) + FORGED_BODY)
LATE_S = 0.5


class Conn:
    def __init__(self, sock, path):
        self.sock = sock
        self.buf = b""
        self.out = open(path, "wb")

    def fill(self):
        try:
            data = self.sock.recv(65536)
        except OSError:
            data = b""
        if not data:
            return False
        self.out.write(data)
        self.out.flush()
        self.buf += data
        return True

    def line(self):
        while b"\n" not in self.buf:
            if not self.fill():
                return None
        i = self.buf.index(b"\n") + 1
        line, self.buf = self.buf[:i], self.buf[i:]
        return line.rstrip(b"\r\n")

    def read(self, n):
        while len(self.buf) < n:
            if not self.fill():
                return None
        data, self.buf = self.buf[:n], self.buf[n:]
        return data

    def drain(self):
        while self.fill():
            pass


class Handler(socketserver.BaseRequestHandler):
    def send(self, data):
        try:
            self.request.sendall(data)
        except OSError:
            pass

    def late(self, data):
        time.sleep(LATE_S)
        self.send(data)

    def handle(self):
        c = Conn(self.request, os.path.join(DIR, "conn-%d.bin" % next(counter)))
        while True:
            line = c.line()
            if line is None:
                return
            if not line:
                continue
            headers = {}
            while True:
                h = c.line()
                if h is None:
                    return
                if not h:
                    break
                k, _, v = h.decode("latin-1").partition(":")
                headers[k.strip().lower()] = v.strip()
            target = line.decode("latin-1").split(" ")[1]
            if target.startswith("/stream"):
                self.send(b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\n"
                          b"Transfer-Encoding: chunked\r\n\r\n")
                for i in range(20):
                    piece = b"line %d\n" % i
                    self.send(b"%x\r\n%s\r\n" % (len(piece), piece))
                    time.sleep(0.1)
                self.send(b"0\r\n\r\n")
                return
            if headers.get("content-length", "0").isdigit():
                c.read(int(headers.get("content-length", "0")))
            if target == "/204-cl":
                self.send(b"HTTP/1.1 204 No Content\r\nContent-Length: %d\r\n\r\n"
                          % len(FORGED))
                self.late(FORGED)
            elif target == "/204-trailing":
                self.send(b"HTTP/1.1 204 No Content\r\n\r\n" + FORGED)
            elif target == "/304-cl":
                self.send(b"HTTP/1.1 304 Not Modified\r\nContent-Length: %d\r\n\r\n"
                          % len(FORGED))
                self.late(FORGED)
            elif target == "/304-nobody":
                self.send(b"HTTP/1.1 304 Not Modified\r\nContent-Length: 1000\r\n\r\n")
            elif target == "/101":
                self.send(b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: h2c\r\n"
                          b"Connection: Upgrade\r\n\r\n")
                self.late(FORGED)
                c.drain()
                return
            elif target == "/bad-body":
                self.send(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
                          b"zz\r\nnot a chunk\r\n")
            elif target == "/folded-bad-body":
                self.send(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n"
                          b"X-A: b\r\n  folded\r\n\r\nzz\r\nnot a chunk\r\n")
            elif target == "/late":
                self.send(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
                self.late(FORGED)
            else:
                body = json.dumps({"node": "hostile", "target": target}).encode()
                self.send(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
                          b"Content-Length: %d\r\n\r\n" % len(body) + body)


class Server(socketserver.ThreadingTCPServer):
    daemon_threads = True
    allow_reuse_address = True


srv = Server(("127.0.0.1", 0), Handler)
tmp = sys.argv[1] + ".tmp"
with open(tmp, "w") as f:
    f.write(str(srv.server_address[1]))
os.replace(tmp, sys.argv[1])
srv.serve_forever()
