#!/usr/bin/python3
"""rawws.py: a raw tether.v1 WebSocket client for bad-input tests.

usage: rawws.py URL CAFILE CASE
Sends what CASE names, prints every binary message received (hex) and how
the connection ended, one line each.  Exit 0 when the gateway answered with
an ERROR frame and closed; 1 otherwise.

Frames are hand-built msgpack so that they can be wrong on purpose.
"""
import asyncio
import ssl
import sys

import websockets


def mp_str(s):
    b = s.encode()
    assert len(b) < 32
    return bytes([0xA0 | len(b)]) + b


def mp_bin(b):
    return bytes([0xC4, len(b)]) + b


CASES = {
    # AUTH before HELLO: out of phase.
    "out-of-phase": [bytes([0x92, 0x03, 0x81]) + mp_str("sig") + mp_bin(b"\0" * 64)],
    # Not msgpack at all.
    "garbage": [b"\xff\xfe\x00garbage\xc1\xc1"],
    # An array with an unknown frame type.
    "unknown-type": [bytes([0x92, 0x63, 0x80])],
    # A text message.
    "text": ["hello"],
    # Bigger than the pre-authentication limit.
    "oversized": [b"\x00" * 10000],
    # Nothing at all: the handshake timeout must close it.
    "silent": [],
    # HELLO offering only a version the gateway does not speak.
    "bad-version": [bytes([0x92, 0x01, 0x84]) + mp_str("versions") + bytes([0x91, 0x63])
                    + mp_str("node") + mp_str("n1") + mp_str("cred") + mp_str("agent")
                    + mp_str("id") + mp_str("a-000000000000")],
}


async def run(url, cafile, case):
    ctx = ssl.create_default_context(cafile=cafile)
    got_error = False
    async with websockets.connect(url, ssl=ctx, subprotocols=["tether.v1"],
                                  max_size=None, open_timeout=10) as ws:
        for m in CASES[case]:
            await ws.send(m)
        try:
            while True:
                msg = await asyncio.wait_for(ws.recv(), timeout=20)
                if isinstance(msg, bytes):
                    print("recv", msg.hex(), msg.decode("latin-1"))
                    # ERROR is [10, {...}]: fixarray(2), positive fixint 10.
                    if msg[:2] == b"\x92\x0a":
                        got_error = True
        except websockets.ConnectionClosed as e:
            print("closed", e.code)
    return 0 if got_error else 1


if __name__ == "__main__":
    sys.exit(asyncio.run(run(sys.argv[1], sys.argv[2], sys.argv[3])))
