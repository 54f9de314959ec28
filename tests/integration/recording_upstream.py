#!/usr/bin/env python3
"""recording_upstream.py PORTFILE DIR [continue|keep]: an HTTP/1.1 upstream that
records every byte it receives, for test_k8s_smuggling.sh.

Each connection's bytes go to DIR/conn-N.bin, as they arrive.  The bytes are
also read as HTTP/1.1 requests, the way a keep-alive server reads them
(Content-Length or chunked bodies; bare LF line ends accepted, as lenient
servers do), and each request found is one JSON line in DIR/requests.jsonl:
{"conn": N, "method", "target", "headers": [[name, value], ...],
"body_len"}.  So a request smuggled inside another one's body shows up as a
line of its own.  Every request gets a 200 with a small JSON body; the
connection is kept unless the request said "Connection: close".

A request for /ambiguous-answer/NAME is answered with the head ANSWERS[NAME],
one whose framing could be read two ways (or a malformed 1xx before a good
answer), then the connection is closed.

With "keep": "Connection: close" is ignored (never answered, the connection
kept): an upstream that does not honour it.

With "continue": every request is answered with "HTTP/1.1 100 Continue"
heads, forever.  DIR/sent holds the bytes written so far (updated every
MiB); DIR/state becomes "blocked" when a write has waited 3 s (the peer
stopped taking them) or "done" after 128 MiB.

Writes the port it listens on to PORTFILE (atomically).
"""
import itertools
import json
import os
import socket
import socketserver
import sys
import threading

DIR = sys.argv[2]
CONTINUE = len(sys.argv) > 3 and sys.argv[3] == "continue"
KEEP = len(sys.argv) > 3 and sys.argv[3] == "keep"
CONTINUE_MAX = 128 << 20
counter = itertools.count(1)
lock = threading.Lock()


def write_atomic(name, text):
    tmp = os.path.join(DIR, name + ".tmp")
    with open(tmp, "w") as f:
        f.write(text)
    os.replace(tmp, os.path.join(DIR, name))


# Answer heads that frame a body in two ways: the gateway must refuse them.
ANSWERS = {
    "cl_and_te": b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n"
                 b"Transfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n",
    "two_cl": b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\nContent-Length: 5\r\n\r\nhello",
    "te_gzip": b"HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip, chunked\r\n\r\n0\r\n\r\n",
    "obs_fold": b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\nX-A: a\r\n b\r\n\r\nhello",
    "bare_lf": b"HTTP/1.1 200 OK\nContent-Length: 5\n\nhello",
    "bad_1xx": b"HTTP/1.1 100 Continue\r\nX: a\r\n b\r\n\r\n"
               b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhello",
}


class Recorder:
    """A file-like reader over the socket that copies every byte to a file."""

    def __init__(self, sock, path):
        self.sock = sock
        self.buf = b""
        self.out = open(path, "wb")

    def fill(self):
        data = self.sock.recv(65536)
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


class Handler(socketserver.BaseRequestHandler):
    def handle(self):
        conn = next(counter)
        rec = Recorder(self.request, os.path.join(DIR, "conn-%d.bin" % conn))
        while True:
            line = rec.line()
            if line is None:
                return
            if not line:
                continue
            headers = []
            while True:
                h = rec.line()
                if h is None:
                    return
                if not h:
                    break
                name, _, value = h.decode("latin-1").partition(":")
                headers.append([name, value.strip()])
            parts = line.decode("latin-1").split(" ")
            method, target = parts[0], parts[1] if len(parts) > 1 else ""
            hd = {k.lower(): v for k, v in headers}
            body_len = 0
            if hd.get("transfer-encoding", "").lower() == "chunked":
                while True:
                    size = rec.line()
                    if size is None:
                        return
                    n = int(size.split(b";")[0] or b"0", 16)
                    if n == 0:
                        while rec.line():
                            pass
                        break
                    if rec.read(n) is None or rec.line() is None:
                        return
                    body_len += n
            elif hd.get("content-length", "").isdigit():
                body_len = int(hd["content-length"])
                if rec.read(body_len) is None:
                    return
            with lock:
                with open(os.path.join(DIR, "requests.jsonl"), "a") as f:
                    f.write(json.dumps({"conn": conn, "method": method,
                                        "target": target, "headers": headers,
                                        "body_len": body_len}) + "\n")
            if CONTINUE:
                self.flood()
                return
            if target.startswith("/ambiguous-answer/"):
                self.request.sendall(ANSWERS[target.split("/")[2]])
                return
            body = json.dumps({"ok": True, "target": target}).encode()
            close = "close" in hd.get("connection", "").lower() and not KEEP
            self.request.sendall(
                b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
                b"Content-Length: %d\r\n%s\r\n" % (
                    len(body), b"Connection: close\r\n" if close else b"")
                + body)
            if close:
                return

    def flood(self):
        head = b"HTTP/1.1 100 Continue\r\n\r\n" * 2048
        sent = 0
        self.request.settimeout(3)
        state = "done"
        try:
            while sent < CONTINUE_MAX:
                self.request.sendall(head)
                sent += len(head)
                if sent % (1 << 20) < len(head):
                    write_atomic("sent", str(sent))
        except socket.timeout:
            state = "blocked"
        except OSError:
            state = "closed"
        write_atomic("sent", str(sent))
        write_atomic("state", state)


class Server(socketserver.ThreadingTCPServer):
    daemon_threads = True
    allow_reuse_address = True


srv = Server(("127.0.0.1", 0), Handler)
tmp = sys.argv[1] + ".tmp"
with open(tmp, "w") as f:
    f.write(str(srv.server_address[1]))
os.replace(tmp, sys.argv[1])
srv.serve_forever()
