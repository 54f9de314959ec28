#!/usr/bin/python3
"""newer_peer.py: a peer from a newer release that sends a frame type this
release does not know, in the middle of an established tunnel
(test_unknown_frames.sh).

usage: newer_peer.py gateway PORT CERT KEY OUTFILE ECHO_PORT
         a newer gateway on 127.0.0.1:PORT (TLS with CERT and KEY) for a real
         tether-client: handshake, WELCOME "active", an OPEN to ECHO_PORT,
         unknown frames before and between the stream's DATA, then a PING.
       newer_peer.py agent GATEWAY_URL CAFILE STATE_DIR OUTFILE
         a newer agent with the node's key (STATE_DIR) against a real
         gateway: handshake, unknown frames, then a PING.
       newer_peer.py dial PORT CERT KEY OUTFILE
         a newer gateway's dial endpoint on 127.0.0.1:PORT for a real
         `tetherctl forward`: answers its first OPEN with unknown frames
         around OPEN_OK, and echoes each DATA with unknown frames before it.
Writes one line per step to OUTFILE, the last "ok" when the tunnel carried
on after every unknown frame; exits non-zero otherwise.
"""
import asyncio
import json
import os
import ssl
import struct
import sys

import websockets
from cryptography.hazmat.primitives import serialization

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from hostile import Str, frame, pack, tls_context  # noqa: E402

# Frame types no release knows yet, with a map body or a stream id.
UNKNOWN = [pack([99, {"new": "field"}]), pack([27, 1, b"x"]), pack([28])]


def say(out, line):
    out.write(line + "\n")
    out.flush()


async def recv_type(ws, want, out):
    """The next frame of type want, answering PINGs and skipping WINDOWs."""
    while True:
        f = frame(await asyncio.wait_for(ws.recv(), 10))
        if f[0] == want:
            return f
        if f[0] == 11:
            await ws.send(pack([12, {"seq": f[1]["seq"]}]))
        elif f[0] != 24:
            say(out, "unexpected frame %r" % (f,))
            raise SystemExit(1)


async def as_gateway(port, cert, key, outfile, echo_port):
    out = open(outfile, "a")
    done = asyncio.get_running_loop().create_future()

    async def serve(ws):
        try:
            hello = frame(await ws.recv())
            assert hello[0] == 1, hello
            st = hello[1]
            await ws.send(pack([2, {"version": 1, "nonce": os.urandom(32)}]))
            auth = frame(await ws.recv())
            assert auth[0] == 3, auth
            await ws.send(pack([6, {"agent_id": Str(st["id"]), "cluster": "c-000000000000",
                                    "state": "active"}]))
            for u in UNKNOWN:
                await ws.send(u)
            say(out, "sent unknown frames after WELCOME")
            await ws.send(pack([20, 1, {"target": "127.0.0.1:%d" % echo_port, "window": 65536}]))
            ok = await recv_type(ws, 21, out)
            say(out, "stream opened: %r" % (ok,))
            await ws.send(pack([23, 1, b"one\n"]))
            for u in UNKNOWN:
                await ws.send(u)
            await ws.send(pack([23, 1, b"two\n"]))
            got = b""
            while got != b"one\ntwo\n":
                d = await recv_type(ws, 23, out)
                got += d[2]
            say(out, "the stream echoed across the unknown frames")
            await ws.send(pack([11, {"seq": 7}]))
            pong = await recv_type(ws, 12, out)
            assert pong[1]["seq"] == 7, pong
            # SETTINGS (docs/interface.md): a key the agent does not know
            # is skipped, the list kept and acknowledged; a list with a URL
            # it cannot dial is refused whole.
            urls = ["https://127.0.0.1:%d" % port, "https://gw-b.invalid:8443"]
            await ws.send(pack([14, {"x-future": {"a": 1}, "urls": urls}]))
            ack = await recv_type(ws, 15, out)
            assert ack[1]["urls"] == [u.encode() for u in urls], ack
            await ws.send(pack([14, {"urls": ["http://plain.invalid"]}]))
            ack = await recv_type(ws, 15, out)
            assert ack[1]["urls"] == [u.encode() for u in urls], ack
            say(out, "settings acknowledged")
            say(out, "ok")
            done.set_result(0)
        except Exception as e:  # the test reads the reason in OUTFILE
            say(out, "failed: %r" % (e,))
            done.set_result(1)
        await asyncio.sleep(3600)

    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.load_cert_chain(cert, key)
    async with websockets.serve(serve, "127.0.0.1", port, ssl=ctx,
                                subprotocols=["tether.v1"], ping_interval=None):
        say(out, "listening")
        rc = await done
        await asyncio.sleep(0.5)
        return rc


async def as_agent(url, cafile, state_dir, outfile):
    out = open(outfile, "a")
    st = json.load(open(state_dir + "/state.json"))
    key = serialization.load_pem_private_key(open(state_dir + "/agent.key", "rb").read(), None)
    ws_url = url.replace("https://", "wss://") + "/v1/connect"
    async with websockets.connect(ws_url, ssl=tls_context(cafile), subprotocols=["tether.v1"],
                                  ping_interval=None) as ws:
        node, aid = st["node"].encode(), st["agent_id"].encode()
        await ws.send(pack([1, {"versions": [1], "node": Str(node), "cred": "agent",
                                "id": Str(aid), "version": "99.0.0"}]))
        ch = frame(await ws.recv())
        assert ch[0] == 2, ch
        v, nonce = ch[1]["version"], ch[1]["nonce"]
        msg = (b"tether-auth-v1\0" + struct.pack(">I", v) + bytes([2]) + aid + b"\0" +
               node + b"\0" + nonce)
        await ws.send(pack([3, {"sig": key.sign(msg)}]))
        welcome = frame(await ws.recv())
        assert welcome[0] == 6, welcome
        for u in UNKNOWN:
            await ws.send(u)
        say(out, "sent unknown frames after WELCOME")
        await ws.send(pack([11, {"seq": 5}]))
        while True:
            f = frame(await asyncio.wait_for(ws.recv(), 10))
            if f[0] == 8:   # VERIFY
                await ws.send(pack([9, {"nonce": f[1]["nonce"], "time_ms": 0, "version": 1}]))
            elif f[0] == 12 and f[1]["seq"] == 5:
                break
            elif f[0] == 10:
                say(out, "failed: the gateway sent ERROR %r" % (f[1],))
                return 1
        say(out, "ok")
        return 0


async def as_dial(port, cert, key, outfile):
    """A newer gateway's /v1/clusters/ID/dial for tetherctl forward."""
    out = open(outfile, "a")

    async def serve(ws):
        try:
            while True:
                f = frame(await ws.recv())
                if f[0] == 20:      # OPEN: unknown frames around the answer
                    for u in UNKNOWN:
                        await ws.send(u)
                    await ws.send(pack([21, f[1], {"window": 65536}]))
                    for u in UNKNOWN:
                        await ws.send(u)
                    say(out, "stream %d opened between unknown frames" % f[1])
                elif f[0] == 23:    # DATA: echoed after unknown frames
                    for u in UNKNOWN:
                        await ws.send(u)
                    await ws.send(pack([23, f[1], bytes(f[2])]))
                    say(out, "echoed %d bytes" % len(f[2]))
        except websockets.ConnectionClosed as e:
            say(out, "closed: %r" % (e,))

    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.load_cert_chain(cert, key)
    async with websockets.serve(serve, "127.0.0.1", port, ssl=ctx,
                                subprotocols=["tether.v1"], ping_interval=None):
        say(out, "listening")
        await asyncio.sleep(3600)


def main(argv):
    if argv[0] == "dial":
        return asyncio.run(as_dial(int(argv[1]), argv[2], argv[3], argv[4]))
    if argv[0] == "gateway":
        return asyncio.run(as_gateway(int(argv[1]), argv[2], argv[3], argv[4], int(argv[5])))
    return asyncio.run(as_agent(*argv[1:5]))


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
