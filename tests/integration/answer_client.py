#!/usr/bin/env python3
"""answer_client.py GW_URL CAFILE TOKEN PREFIX CASE: a raw TLS client for
test_k8s_answers.sh, against a hostile_node.py node behind PREFIX
(/k8s/clusters/ID).  Prints one JSON line.

unasked_101        GET PREFIX/101 without Upgrade; after the answer's head,
                   writes a request that acts as an admin
                   (Impersonate-User: system:admin) on the same connection.
                   {"status": the first answer's status}
bad_chunk          POST PREFIX/stream, chunked; once the answer's head is
                   read, a malformed chunk size.
dup_auth_trailer   the same, ending the body with two Authorization trailers.
                   Both: {"status": the answer's status, "heads": how many
                   "HTTP/1.1 " status lines came in all, "closed": whether
                   the gateway ended the connection within 10 s}
bad_answer_body    GET PREFIX/bad-body (a head, then a malformed chunk
                   size in the node's same write): {"status", "heads",
                   "closed"} as above
folded_bad_body    GET PREFIX/folded-bad-body (the same behind a head with
                   an obs-fold): {"status", "heads", "message": the JSON
                   body's message}
"""
import json
import socket
import ssl
import sys
import time
from urllib.parse import urlparse

url, cafile, token, prefix, case = sys.argv[1:6]
u = urlparse(url)
HEAD_END = b"\r\n\r\n"


def connect():
    ctx = ssl.create_default_context(cafile=cafile)
    ctx.check_hostname = False
    raw = socket.create_connection((u.hostname, u.port))
    return ctx.wrap_socket(raw, server_hostname=u.hostname)


def head(method, path, extra=b""):
    return (method + b" " + prefix.encode() + path + b" HTTP/1.1\r\nHost: "
            + u.netloc.encode() + b"\r\nAuthorization: Bearer " + token.encode()
            + b"\r\n" + extra + b"\r\n")


def read_head(s):
    buf = b""
    while HEAD_END not in buf:
        data = s.recv(65536)
        if not data:
            raise SystemExit("closed before an answer head: %r" % buf[:200])
        buf += data
    return int(buf.split(b" ", 2)[1]), buf


def read_rest(s, buf, seconds):
    """Reads until EOF or seconds pass: (all bytes, closed)."""
    s.settimeout(0.2)
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        try:
            data = s.recv(65536)
        except socket.timeout:
            continue
        except (ssl.SSLError, OSError):
            return buf, True
        if not data:
            return buf, True
        buf += data
    return buf, False


s = connect()
if case == "unasked_101":
    s.sendall(head(b"GET", b"/101"))
    status, _ = read_head(s)
    s.sendall(b"GET /api/v1/namespaces/kube-system/secrets HTTP/1.1\r\nHost: k\r\n"
              b"Impersonate-User: system:admin\r\n"
              b"Impersonate-Group: system:masters\r\n\r\n")
    read_rest(s, b"", 2)
    print(json.dumps({"status": status}))
elif case in ("bad_chunk", "dup_auth_trailer"):
    s.sendall(head(b"POST", b"/stream", b"Transfer-Encoding: chunked\r\n")
              + b"5\r\nhello\r\n")
    status, buf = read_head(s)
    if case == "bad_chunk":
        s.sendall(b"zz\r\nnot a chunk\r\n")
    else:
        s.sendall(b"0\r\nAuthorization: Bearer a\r\nAuthorization: Bearer b\r\n\r\n")
    buf, closed = read_rest(s, buf, 10)
    print(json.dumps({"status": status, "heads": buf.count(b"HTTP/1.1 "),
                      "closed": closed}))
elif case == "bad_answer_body":
    s.sendall(head(b"GET", b"/bad-body"))
    status, buf = read_head(s)
    buf, closed = read_rest(s, buf, 10)
    print(json.dumps({"status": status, "heads": buf.count(b"HTTP/1.1 "),
                      "closed": closed}))
elif case == "folded_bad_body":
    s.sendall(head(b"GET", b"/folded-bad-body"))
    status, buf = read_head(s)
    buf, _ = read_rest(s, buf, 2)
    body = buf.split(HEAD_END, 1)[1]
    print(json.dumps({"status": status, "heads": buf.count(b"HTTP/1.1 "),
                      "message": json.loads(body).get("message", "")}))
else:
    raise SystemExit("unknown case " + case)
