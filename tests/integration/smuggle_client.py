#!/usr/bin/env python3
"""smuggle_client.py GW_URL CAFILE TOKEN PREFIX CASE: a raw TLS client for
test_k8s_smuggling.sh.  Sends one hand-made request (CASE, below) for the
path PREFIX/api/v1/... and prints its answer as one JSON line:
{"status": N, "kind": ..., "code": ..., "message": ...} (the last three from
a Kubernetes Status body, else null).

smuggle_client.py GW_URL CAFILE TOKEN PREFIX noread: sends a GET with a
small receive buffer, prints "sent", then never reads (until killed).
"""
import json
import socket
import ssl
import sys
import time
from urllib.parse import urlparse

url, cafile, token, prefix, case = sys.argv[1:6]   # case: a name below, get:/REST, twice:/REST
u = urlparse(url)
P = prefix.encode()
AUTH = b"Authorization: Bearer " + token.encode() + b"\r\n"
HOST = b"Host: " + u.netloc.encode() + b"\r\n"

# What a smuggler hides in a body: a second request that acts as an admin.
SMUGGLED = (b"GET /api/v1/secrets HTTP/1.1\r\nHost: k\r\n"
            b"Impersonate-User: system:admin\r\n"
            b"Impersonate-Group: system:masters\r\n\r\n")


def req(method, rest, headers, body=b"", eol=b"\r\n"):
    head = method + b" " + P + rest + b" HTTP/1.1" + eol
    for h in [HOST.rstrip(b"\r\n"), AUTH.rstrip(b"\r\n")] + headers:
        head += h + eol
    return head + eol + body


def chunked(data):
    return b"%x\r\n%s\r\n0\r\n\r\n" % (len(data), data)


CL = b"Content-Length: %d" % len(SMUGGLED)
CASES = {
    # Accepted, passed on as one request whose body is the smuggled bytes.
    "cl_in_connection": req(b"POST", b"/api/v1/namespaces/default/configmaps",
                            [b"Connection: keep-alive, Content-Length", CL], SMUGGLED),
    "te_in_connection": req(b"POST", b"/api/v1/namespaces/default/configmaps",
                            [b"Connection: Transfer-Encoding",
                             b"Transfer-Encoding: chunked"], chunked(SMUGGLED)),
    "upgrade_connection_cl": req(b"POST", b"/api/v1/namespaces/default/pods/p/exec",
                                 [b"Upgrade: x", b"Connection: Upgrade, Content-Length",
                                  CL], SMUGGLED),
    "host_in_connection": req(b"GET", b"/api/v1/namespaces",
                              [b"Connection: Host, Content-Length, Transfer-Encoding"]),
    # Names that servers mapping headers to variables read as Impersonate-*.
    "impersonate_underscore": req(b"GET", b"/api/v1/pods",
                                  [b"Impersonate_User: system:admin",
                                   b"IMPERSONATE_GROUP: system:masters",
                                   b"impersonate_uid: 0",
                                   b"Impersonate_Extra_Scopes: all",
                                   b"Impersonate-Extra_acme: root"]),
    "impersonate_mixed_case": req(b"GET", b"/api/v1/pods",
                                  [b"iMpErSoNaTe-UsEr: system:admin",
                                   b"IMPERSONATE-GROUP: system:masters",
                                   b"impersonate-uid: 0",
                                   b"Impersonate-Extra-Scopes: all",
                                   b"Impersonate-Extra-acme.io%2fteam: root",
                                   b"Connection: Impersonate-User, Authorization"]),
    # Refused with 400: the framing is ambiguous.
    "cl_and_te": req(b"POST", b"/api/v1/x", [CL, b"Transfer-Encoding: chunked"],
                     chunked(SMUGGLED)),
    "duplicate_cl": req(b"POST", b"/api/v1/x", [CL, CL], SMUGGLED),
    "different_cl": req(b"POST", b"/api/v1/x", [CL, b"Content-Length: 0"], SMUGGLED),
    "non_numeric_cl": req(b"POST", b"/api/v1/x", [b"Content-Length: 0x10"], SMUGGLED),
    "signed_cl": req(b"POST", b"/api/v1/x", [b"Content-Length: +%d" % len(SMUGGLED)],
                     SMUGGLED),
    "te_gzip_chunked": req(b"POST", b"/api/v1/x", [b"Transfer-Encoding: gzip, chunked"],
                           chunked(SMUGGLED)),
    "te_identity": req(b"POST", b"/api/v1/x", [b"Transfer-Encoding: identity", CL],
                       SMUGGLED),
    "te_twice": req(b"POST", b"/api/v1/x", [b"Transfer-Encoding: chunked",
                                            b"Transfer-Encoding: chunked"],
                    chunked(SMUGGLED)),
    "obs_fold": req(b"GET", b"/api/v1/x", [b"X-Note: a",
                                           b" Impersonate-User: system:admin"]),
    "obs_fold_tab": req(b"GET", b"/api/v1/x", [b"X-Note: a",
                                               b"\tImpersonate-Group: system:masters"]),
    "bare_lf": req(b"GET", b"/api/v1/x", [b"X-Note: a"], eol=b"\n"),
    "bare_lf_in_header": req(b"GET", b"/api/v1/x",
                             [b"X-Note: a\nImpersonate-User: system:admin"]),
    "bare_cr_in_header": req(b"GET", b"/api/v1/x",
                             [b"X-Note: a\rImpersonate-User: system:admin"]),
    "nul_in_header": req(b"GET", b"/api/v1/x", [b"X-Note: a\0b"]),
    "space_before_colon": req(b"GET", b"/api/v1/x", [b"Impersonate-User : system:admin"]),
}


def connect():
    ctx = ssl.create_default_context(cafile=cafile)
    ctx.check_hostname = False
    raw = socket.create_connection((u.hostname, u.port))
    return raw, ctx.wrap_socket(raw, server_hostname=u.hostname)


def read_answer(s):
    """One HTTP answer: (status, body)."""
    buf = b""
    while b"\r\n\r\n" not in buf:
        data = s.recv(65536)
        if not data:
            raise SystemExit("connection closed before an answer: %r" % buf[:200])
        buf += data
    head, _, body = buf.partition(b"\r\n\r\n")
    lines = head.split(b"\r\n")
    status = int(lines[0].split(b" ")[1])
    hd = {}
    for line in lines[1:]:
        k, _, v = line.partition(b":")
        hd[k.strip().lower()] = v.strip()
    if b"content-length" in hd:
        n = int(hd[b"content-length"])
        while len(body) < n:
            data = s.recv(65536)
            if not data:
                break
            body += data
        body = body[:n]
    elif hd.get(b"transfer-encoding", b"").lower() == b"chunked":
        while not body.endswith(b"0\r\n\r\n"):
            data = s.recv(65536)
            if not data:
                break
            body += data
    return status, body


if case == "noread":
    raw, s = None, None
    ctx = ssl.create_default_context(cafile=cafile)
    ctx.check_hostname = False
    raw = socket.socket()
    raw.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    raw.connect((u.hostname, u.port))
    s = ctx.wrap_socket(raw, server_hostname=u.hostname)
    s.sendall(req(b"POST", b"/api/v1/namespaces/default/pods",
                  [b"Expect: 100-continue", b"Content-Length: 0"]))
    print("sent", flush=True)
    while True:
        time.sleep(3600)

raw, s = connect()
if case.startswith("twice:"):
    # Two GETs on one keep-alive connection; the first answer is checked.
    s.sendall(req(b"GET", case[6:].encode() + b"?first=1", []))
    status, body = read_answer(s)
    if status != 200:
        raise SystemExit("first request: %d %r" % (status, body[:200]))
    case = "get:" + case[6:] + "?second=1"
if case.startswith("get:"):
    s.sendall(req(b"GET", case[4:].encode(), []))
else:
    s.sendall(CASES[case])
status, body = read_answer(s)
s.close()
out = {"status": status, "kind": None, "code": None, "message": None}
try:
    st = json.loads(body)
    out.update(kind=st.get("kind"), code=st.get("code"), message=st.get("message"))
except ValueError:
    pass
print(json.dumps(out))
