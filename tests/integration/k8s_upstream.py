#!/usr/bin/env python3
"""k8s_upstream.py PORTFILE: a small HTTP/1.1 upstream for test_k8s.sh.

GET /stream        a chunked answer: one line every 100 ms for 2 s
GET ...?watch=1    a watch: three chunked watch events (ADDED watch-0..2),
                   100 ms apart, then the end
GET with Upgrade   101 Switching Protocols, then echoes every byte back
GET /odd-head      200 with a head that is valid but written oddly (a
                   reason with spaces, no space or tabs after a colon,
                   trailing blanks, an empty value, hop-by-hop headers)
GET /once-then-drop  200 with the target as its body, the connection kept;
                   the next request on it gets no answer: the connection
                   closes once its head is read (an upstream that timed
                   the idle connection out as the request came)
GET /odd-drip      a 103 with a reason with spaces, then a 200 with
                   another, written three bytes at a time (each head, its
                   reason too, arrives in many reads)
anything else      200 with a JSON echo of the request (method, path,
                   headers, body length), Connection: close
Writes the port it listens on to PORTFILE.
"""
import json
import socket
import socketserver
import sys
import time


class Handler(socketserver.StreamRequestHandler):
    def read_head(self):
        line = self.rfile.readline().decode("latin-1").rstrip("\r\n")
        headers = []
        while True:
            h = self.rfile.readline().decode("latin-1").rstrip("\r\n")
            if not h:
                break
            name, _, value = h.partition(":")
            headers.append((name.strip(), value.strip()))
        return line, headers

    def read_body(self, headers):
        hd = {k.lower(): v for k, v in headers}
        if hd.get("transfer-encoding", "").lower() == "chunked":
            body = b""
            while True:
                size = int(self.rfile.readline().strip(), 16)
                if size == 0:
                    self.rfile.readline()
                    return body
                body += self.rfile.read(size)
                self.rfile.readline()
        n = int(hd.get("content-length", "0"))
        return self.rfile.read(n) if n else b""

    def handle(self):
        line, headers = self.read_head()
        if not line:
            return
        method, target, _ = line.split(" ", 2)
        hd = {k.lower(): v for k, v in headers}
        w = self.wfile
        if "upgrade" in hd:
            w.write(b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: "
                    + hd["upgrade"].encode() + b"\r\nConnection: Upgrade\r\n\r\n")
            w.flush()
            while True:
                data = self.connection.recv(65536)
                if not data:
                    return
                self.connection.sendall(data)
        if target.startswith("/odd-head"):
            w.write(b"HTTP/1.1 200  Fine  Thanks\r\nX-Tight:value\r\n"
                    b"Keep-Alive: timeout=5\r\nX-Tabbed:\t\tv1\t \r\n"
                    b"Proxy-Connection: keep-alive\r\nX-Empty:\r\n"
                    b"Connection: close\r\nX-Blank: \t\r\nX-Last: z\r\n"
                    b"Content-Length: 2\r\n\r\nok")
            w.flush()
            return
        if target.startswith("/once-then-drop"):
            body = target.encode()
            w.write(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n%s"
                    % (len(body), body))
            w.flush()
            self.read_head()
            return
        if target.startswith("/odd-drip"):
            head = (b"HTTP/1.1 103  Early  Hints\r\nLink: </a>; rel=preload\r\n\r\n"
                    b"HTTP/1.1 200  Fine  Thanks\r\nX-Tight:value\r\n"
                    b"Content-Length: 2\r\n\r\nok")
            for i in range(0, len(head), 3):
                w.write(head[i:i + 3])
                w.flush()
                time.sleep(0.005)
            return
        if target.startswith("/stream"):
            w.write(b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\n"
                    b"Transfer-Encoding: chunked\r\nConnection: close\r\n\r\n")
            w.flush()
            for i in range(20):
                piece = ("line %d %.3f\n" % (i, time.time())).encode()
                w.write(b"%x\r\n%s\r\n" % (len(piece), piece))
                w.flush()
                time.sleep(0.1)
            w.write(b"0\r\n\r\n")
            w.flush()
            return
        if "watch=1" in target or "watch=true" in target:
            w.write(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
                    b"Transfer-Encoding: chunked\r\nConnection: close\r\n\r\n")
            w.flush()
            for i in range(3):
                ev = json.dumps({"type": "ADDED", "object": {
                    "kind": "Pod", "apiVersion": "v1",
                    "metadata": {"name": "watch-%d" % i, "namespace": "default"}}})
                piece = (ev + "\n").encode()
                w.write(b"%x\r\n%s\r\n" % (len(piece), piece))
                w.flush()
                time.sleep(0.1)
            w.write(b"0\r\n\r\n")
            w.flush()
            return
        body = self.read_body(headers)
        out = json.dumps({"method": method, "target": target, "headers": headers,
                          "body_len": len(body),
                          "body_head": body[:32].decode("latin-1")}).encode() + b"\n"
        w.write(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
                b"Content-Length: %d\r\nConnection: close\r\n\r\n" % len(out) + out)
        w.flush()


class Server(socketserver.ThreadingTCPServer):
    daemon_threads = True
    allow_reuse_address = True


srv = Server(("127.0.0.1", 0), Handler)
with open(sys.argv[1] + ".tmp", "w") as f:
    f.write(str(srv.server_address[1]))
import os
os.rename(sys.argv[1] + ".tmp", sys.argv[1])
srv.serve_forever()
