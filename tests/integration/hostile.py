#!/usr/bin/python3
"""hostile.py: peers that put hostile bytes into every field that reaches
the gateway's log (test_log_hostile.sh).

usage: hostile.py GATEWAY_URL CAFILE CASE ARGS...
  dial TOKEN CLUSTER             dial endpoint: each hostile target
  forward TOKEN CLUSTER          tether.v1 forward connection: an OPEN per
                                 hostile target
  http ADMIN_TOKEN USER_TOKEN CLUSTER
                                 /k8s and admin API paths, bodies, a raw
                                 request line with a bare LF
  agent STATE_DIR READYFILE      a hostile agent with the node's key: every
                                 OPEN gets OPEN_FAIL with the next hostile
                                 code and reason; ERROR frames with hostile
                                 codes and reasons; a HELLO with a hostile
                                 node name.  Runs until killed.

Each case prints one JSON line per input: {"where", "input" (the bytes as
latin-1 text), "result"}, for the test's table.  msgpack is hand-built (the
frames are few and must carry invalid UTF-8 on purpose).
"""
import asyncio
import json
import socket
import ssl
import struct
import sys
import time
import urllib.parse

import websockets
from cryptography.hazmat.primitives import serialization

FORGED_LINE = (b"time=2026-01-01T00:00:00.000Z level=info component=gateway "
               b"msg=audit event=stream who=admin:FORGED cluster=c node=n "
               b"target=t bytes_up=0 bytes_down=0 duration_ms=0 end=done")

# Every hostile value: CR, LF, a whole forged line, quotes, key=value
# look-alikes, invalid UTF-8, control characters, backslashes, a bidi
# override, empty.
HOSTILE = [
    b"x:1\n" + FORGED_LINE,
    b"a\r\nb level=error msg=FORGED",
    b'q"uote" k="v"',
    b"k=v msg=FORGED level=error",
    b"\xff\xfe\xc0\xaf bad utf-8",
    b"\x1b[2J\x07esc",
    b"back\\slash\\n\\x41",
    b"\xe2\x80\xaetxt.exe",
    b"",
]
# Agent codes are at most 31 bytes.
HOSTILE_CODES = [b"x\nFORGED", b"a\r\nb", b'q"', b"k=v", b"\xff\xfe", b"\x1b[2J",
                 b"b\\s", b"\xe2\x80\xae"]


def report(where, value, result):
    print(json.dumps({"where": where, "input": value.decode("latin-1"),
                      "result": result}), flush=True)


# ---- msgpack, the subset tether.v1 uses ----

class Str(bytes):
    """bytes to be packed as a msgpack str (raw bytes, any values)."""


def pack(o):
    if o is None:
        return b"\xc0"
    if isinstance(o, bool):
        return b"\xc3" if o else b"\xc2"
    if isinstance(o, int):
        if 0 <= o < 128:
            return bytes([o])
        if 0 <= o < 1 << 32:
            return b"\xce" + struct.pack(">I", o)
        return b"\xcf" + struct.pack(">Q", o)
    if isinstance(o, str):
        o = Str(o.encode())
    if isinstance(o, Str):
        return (bytes([0xA0 | len(o)]) if len(o) < 32 else
                b"\xd9" + bytes([len(o)]) if len(o) < 256 else
                b"\xda" + struct.pack(">H", len(o))) + bytes(o)
    if isinstance(o, bytes):
        return b"\xc4" + bytes([len(o)]) + o
    if isinstance(o, list):
        return bytes([0x90 | len(o)]) + b"".join(pack(x) for x in o)
    if isinstance(o, dict):
        return bytes([0x80 | len(o)]) + b"".join(pack(k) + pack(v) for k, v in o.items())
    raise TypeError(o)


def unpack(b, i=0):
    t = b[i]
    if t < 0x80:
        return t, i + 1
    if 0x80 <= t <= 0x8F or t in (0xDE, 0xDF):
        if t <= 0x8F:
            n, i = t & 0x0F, i + 1
        elif t == 0xDE:
            n, i = struct.unpack(">H", b[i + 1:i + 3])[0], i + 3
        else:
            n, i = struct.unpack(">I", b[i + 1:i + 5])[0], i + 5
        d = {}
        for _ in range(n):
            k, i = unpack(b, i)
            v, i = unpack(b, i)
            d[k.decode() if isinstance(k, bytes) else k] = v
        return d, i
    if 0x90 <= t <= 0x9F or t == 0xDC:
        n, i = (t & 0x0F, i + 1) if t <= 0x9F else (struct.unpack(">H", b[i + 1:i + 3])[0], i + 3)
        out = []
        for _ in range(n):
            v, i = unpack(b, i)
            out.append(v)
        return out, i
    if 0xA0 <= t <= 0xBF:
        n = t & 0x1F
        return b[i + 1:i + 1 + n], i + 1 + n
    sizes = {0xD9: 1, 0xDA: 2, 0xDB: 4, 0xC4: 1, 0xC5: 2, 0xC6: 4}
    if t in sizes:
        w = sizes[t]
        n = int.from_bytes(b[i + 1:i + 1 + w], "big")
        return b[i + 1 + w:i + 1 + w + n], i + 1 + w + n
    ints = {0xCC: ">B", 0xCD: ">H", 0xCE: ">I", 0xCF: ">Q",
            0xD0: ">b", 0xD1: ">h", 0xD2: ">i", 0xD3: ">q"}
    if t in ints:
        w = struct.calcsize(ints[t])
        return struct.unpack(ints[t], b[i + 1:i + 1 + w])[0], i + 1 + w
    if t >= 0xE0:
        return t - 256, i + 1
    if t == 0xC0:
        return None, i + 1
    if t in (0xC2, 0xC3):
        return t == 0xC3, i + 1
    raise ValueError("msgpack type 0x%02x" % t)


def frame(b):
    return unpack(b)[0]


# ---- plumbing ----

def tls_context(cafile):
    ctx = ssl.create_default_context(cafile=cafile)
    ctx.check_hostname = False
    return ctx


def raw_request(url, cafile, data):
    """Sends bytes as they are and returns the status line's code."""
    u = urllib.parse.urlsplit(url)
    with socket.create_connection((u.hostname, u.port), timeout=10) as s:
        with tls_context(cafile).wrap_socket(s) as t:
            t.sendall(data)
            got = b""
            while b"\r\n" not in got:
                chunk = t.recv(4096)
                if not chunk:
                    break
                got += chunk
    parts = got.split(b" ", 2)
    return int(parts[1]) if len(parts) > 1 and parts[1].isdigit() else 0


def request(url, cafile, method, path, token=None, body=b"", upgrade=False):
    u = urllib.parse.urlsplit(url)
    head = [b"%s %s HTTP/1.1" % (method.encode(), path), b"Host: %s" % u.netloc.encode(),
            b"Connection: %s" % (b"Upgrade" if upgrade else b"close")]
    if upgrade:
        head += [b"Upgrade: websocket", b"Sec-WebSocket-Version: 13",
                 b"Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ=="]
    if token:
        head.append(b"Authorization: Bearer " + token.encode())
    if body:
        head += [b"Content-Type: application/json", b"Content-Length: %d" % len(body)]
    return raw_request(url, cafile, b"\r\n".join(head) + b"\r\n\r\n" + body)


def q(b):
    return urllib.parse.quote_from_bytes(b, safe="").encode()


# ---- cases ----

def case_dial(url, cafile, token, cluster):
    for h in HOSTILE:
        for target in (h + b":22", b"h:" + h, h):
            path = b"/v1/clusters/%s/dial?target=%s" % (cluster.encode(), q(target))
            report("dial target", target, request(url, cafile, "GET", path, token, upgrade=True))
    for target in (b"h:0", b"h:65536", b"h:+22"):
        path = b"/v1/clusters/%s/dial?target=%s" % (cluster.encode(), q(target))
        report("dial target", target, request(url, cafile, "GET", path, token, upgrade=True))
    path = b"/v1/clusters/%s/dial?target=h:22&target=%s" % (cluster.encode(), q(HOSTILE[0]))
    report("dial target twice", b"h:22 & " + HOSTILE[0],
           request(url, cafile, "GET", path, token, upgrade=True))
    for h in HOSTILE[:5]:
        path = b"/v1/clusters/%s/dial?target=127.0.0.1:22&node=%s" % (cluster.encode(), q(h))
        report("dial node", h, request(url, cafile, "GET", path, token, upgrade=True))


async def forward(url, cafile, token, cluster):
    ws_url = url.replace("https://", "wss://") + "/v1/clusters/%s/dial" % cluster
    async with websockets.connect(ws_url, ssl=tls_context(cafile),
                                  subprotocols=["tether.v1"],
                                  extra_headers={"Authorization": "Bearer " + token}) as ws:
        sid = 2
        # (An empty target is not a target at all: a malformed frame.)
        for h in [h for h in HOSTILE if h] + [h + b":22" for h in HOSTILE]:
            await ws.send(pack([20, sid, {"target": Str(h), "window": 65536}]))
            while True:
                f = frame(await asyncio.wait_for(ws.recv(), 10))
                if f[0] in (21, 22, 26) and f[1] == sid:
                    break
            if f[0] == 22:
                result = "OPEN_FAIL %s: %s" % (f[2]["code"].decode("latin-1"),
                                              f[2]["reason"].decode("latin-1"))
            else:
                result = "frame %d" % f[0]
            report("forward OPEN target", h, result)
            sid += 2


def case_http(url, cafile, admin, user, cluster):
    c = cluster.encode()
    for h in HOSTILE:
        report("k8s path", h, request(url, cafile, "GET", b"/k8s/clusters/%s/api/%s" % (c, q(h)), user))
        report("k8s path (no token)", h, request(url, cafile, "GET", b"/k8s/clusters/%s/%s" % (q(h), q(h))))
        report("k8s root path", h, request(url, cafile, "GET", b"/api/" + q(h), user))
        report("admin path", h, request(url, cafile, "GET", b"/v1/clusters/" + q(h), admin))
        report("admin path", h, request(url, cafile, "POST", b"/v1/users/%s/revoke" % q(h), admin))
        report("admin query", h, request(url, cafile, "GET", b"/v1/agents?cluster=" + q(h), admin))
        body = json.dumps({"name": h.decode("latin-1")}).encode()
        report("cluster name", h, request(url, cafile, "POST", b"/v1/clusters", admin, body))
        body = json.dumps({"name": h.decode("latin-1"), "clusters": [cluster]}).encode()
        report("user name", h, request(url, cafile, "POST", b"/v1/users", admin, body))
        body = json.dumps({"user": h.decode("latin-1")}).encode()
        report("kubeconfig user", h, request(url, cafile, "POST", b"/v1/clusters/%s/kubeconfig" % c, admin, body))
    # Unencoded bytes in a proxied path: passed on as sent, logged escaped.
    for h in (b'q"uote', b"\xff\xfe", b"k=v&msg=FORGED", b"back\\slash"):
        raw = (b"GET /k8s/clusters/%s/api/%s HTTP/1.1\r\nHost: g\r\nAuthorization: Bearer %s\r\n"
               b"Connection: close\r\n\r\n" % (c, h, user.encode()))
        report("k8s raw path", h, raw_request(url, cafile, raw))
    # Bytes the HTTP parser must refuse: a bare LF and a raw 0xff in the
    # request line, a header value with a CR.
    for raw in (b"GET /k8s/x\nFORGED level=error HTTP/1.1\r\nHost: g\r\n\r\n",
                b"GET /v1/\xff\x1b[2J HTTP/1.1\r\nHost: g\r\n\r\n",
                b"GET /healthz HTTP/1.1\r\nHost: g\rFORGED\r\n\r\n"):
        report("raw request line", raw, raw_request(url, cafile, raw))


# ---- the hostile agent ----

async def agent(url, cafile, state_dir, readyfile):
    st = json.load(open(state_dir + "/state.json"))
    key = serialization.load_pem_private_key(open(state_dir + "/agent.key", "rb").read(), None)
    ws_url = url.replace("https://", "wss://") + "/v1/connect"
    ctx = tls_context(cafile)

    # A HELLO whose node name is hostile: refused before anything is logged
    # but the refusal.
    for h in HOSTILE[:5]:
        async with websockets.connect(ws_url, ssl=ctx, subprotocols=["tether.v1"]) as ws:
            await ws.send(pack([1, {"versions": [1], "node": Str(h), "cred": "agent",
                                    "id": st["agent_id"]}]))
            try:
                f = frame(await asyncio.wait_for(ws.recv(), 10))
                result = "frame %d %s" % (f[0], f[1].get("code", b"").decode("latin-1"))
            except websockets.ConnectionClosed as e:
                result = "closed %s" % e.code
        report("HELLO node name", h, result)

    async with websockets.connect(ws_url, ssl=ctx, subprotocols=["tether.v1"],
                                  ping_interval=None) as ws:
        node, aid = st["node"].encode(), st["agent_id"].encode()
        await ws.send(pack([1, {"versions": [1], "node": Str(node), "cred": "agent",
                                "id": Str(aid)}]))
        ch = frame(await ws.recv())
        assert ch[0] == 2, ch
        v, nonce = ch[1]["version"], ch[1]["nonce"]
        msg = b"tether-auth-v1\0" + struct.pack(">I", v) + bytes([2]) + aid + b"\0" + node + b"\0" + nonce
        await ws.send(pack([3, {"sig": key.sign(msg)}]))
        welcome = frame(await ws.recv())
        assert welcome[0] == 6, welcome
        for i, c in enumerate(HOSTILE_CODES):
            await ws.send(pack([10, {"code": Str(c), "reason": Str(HOSTILE[i % len(HOSTILE)])}]))
            report("agent ERROR code+reason", c + b" / " + HOSTILE[i % len(HOSTILE)], "sent")
        open(readyfile, "w").write("ready\n")
        n = 0
        while True:
            f = frame(await ws.recv())
            if f[0] == 8:
                await ws.send(pack([9, {"nonce": f[1]["nonce"], "time_ms": int(time.time() * 1000),
                                        "version": 1}]))
            elif f[0] == 11:
                await ws.send(pack([12, {"seq": f[1]["seq"]}]))
            elif f[0] == 20:
                code = HOSTILE_CODES[n % len(HOSTILE_CODES)]
                reason = HOSTILE[n % len(HOSTILE)]
                await ws.send(pack([22, f[1], {"code": Str(code), "reason": Str(reason)}]))
                report("agent OPEN_FAIL code+reason", code + b" / " + reason, "sent")
                n += 1


def main(argv):
    url, cafile, case, args = argv[0], argv[1], argv[2], argv[3:]
    if case == "dial":
        case_dial(url, cafile, *args)
    elif case == "forward":
        asyncio.run(forward(url, cafile, *args))
    elif case == "http":
        case_http(url, cafile, *args)
    elif case == "agent":
        asyncio.run(agent(url, cafile, *args))
    else:
        sys.exit("unknown case " + case)


if __name__ == "__main__":
    main(sys.argv[1:])
