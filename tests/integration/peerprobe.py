#!/usr/bin/python3
"""peerprobe.py: plays a gateway replica on a peer link (docs/0020) to test
the far side (the replica that holds an agent's tunnel) on its own.

usage: peerprobe.py URL DATADIR REPLICA_ID MODE AGENT PRINCIPAL TARGET [ARG]
  URL      wss://HOST:PORT/v1/peer
  DATADIR  a replica's data directory: ca.crt, peer.crt, peer.key (the
           probe presents peer.crt like a replica does)
  MODE     echo N     open a stream to TARGET, send N random bytes, FIN,
                      read them back until FIN; prints "ok N" when equal
           refused    expect OPEN_FAIL; prints "refused CODE REASON"
           nocredit F open with a 64 KiB window and never return credit;
                      keeps the number of DATA bytes received in file F
           spread N   open N streams one after the other, the i-th for
                      principal PRINCIPALi, held open; prints "opened K
                      refused R window W" (W: the windows granted in
                      OPEN_OK together, what the far side charged)
Exit 0 when the mode's expectation held, 1 otherwise.

Frames are hand-built msgpack (frame.h); only what the link uses is decoded.
"""
import asyncio
import os
import ssl
import struct
import sys

import websockets


def mp_uint(n):
    if n < 128:
        return bytes([n])
    if n < 1 << 8:
        return bytes([0xCC, n])
    if n < 1 << 16:
        return b"\xcd" + struct.pack(">H", n)
    return b"\xce" + struct.pack(">I", n)


def mp_str(s):
    b = s.encode()
    if len(b) < 32:
        return bytes([0xA0 | len(b)]) + b
    return bytes([0xD9, len(b)]) + b


def mp_bin(b):
    if len(b) < 256:
        return bytes([0xC4, len(b)]) + b
    if len(b) < 65536:
        return b"\xc5" + struct.pack(">H", len(b)) + b
    return b"\xc6" + struct.pack(">I", len(b)) + b


def mp_map(d):
    out = bytes([0x80 | len(d)])
    for k, v in d.items():
        out += mp_str(k) + v
    return out


def decode(b, i=0):
    """One msgpack object at b[i:]: (value, next index)."""
    t = b[i]
    if t < 0x80:
        return t, i + 1
    if 0x80 <= t <= 0x8F:
        n, i, d = t & 0x0F, i + 1, {}
        for _ in range(n):
            k, i = decode(b, i)
            v, i = decode(b, i)
            d[k] = v
        return d, i
    if 0x90 <= t <= 0x9F:
        n, i, a = t & 0x0F, i + 1, []
        for _ in range(n):
            v, i = decode(b, i)
            a.append(v)
        return a, i
    if 0xA0 <= t <= 0xBF:
        n = t & 0x1F
        return b[i + 1:i + 1 + n].decode(), i + 1 + n
    sizes = {0xCC: 1, 0xCD: 2, 0xCE: 4, 0xCF: 8}
    if t in sizes:
        n = sizes[t]
        return int.from_bytes(b[i + 1:i + 1 + n], "big"), i + 1 + n
    strs = {0xD9: 1, 0xDA: 2, 0xC4: 1, 0xC5: 2, 0xC6: 4}
    if t in strs:
        n = strs[t]
        ln = int.from_bytes(b[i + 1:i + 1 + n], "big")
        v = b[i + 1 + n:i + 1 + n + ln]
        return (v.decode() if t in (0xD9, 0xDA) else v), i + 1 + n + ln
    if t == 0xC0:
        return None, i + 1
    raise ValueError("msgpack type 0x%02x not handled" % t)


OPEN, OPEN_OK, OPEN_FAIL, DATA, WINDOW, FIN, RESET = 20, 21, 22, 23, 24, 25, 26


async def spread(ws, n, agent, principal, target):
    """Opens n streams, a new principal each; prints what was granted."""
    opened = refused = granted = 0
    for i in range(n):
        sid = 1 + 2 * i
        await ws.send(bytes([0x93, OPEN, sid]) + mp_map({
            "target": mp_str(target), "service": mp_str(""),
            "window": mp_uint(1 << 20), "agent": mp_str(agent),
            "principal": mp_str("%s%d" % (principal, i))}))
        while True:
            f, _ = decode(await ws.recv())
            if f[0] in (OPEN_OK, OPEN_FAIL) and f[1] == sid:
                break
        if f[0] == OPEN_OK:
            opened += 1
            granted += f[2]["window"]
        else:
            refused += 1
    print("opened %d refused %d window %d" % (opened, refused, granted))
    return 0


async def main():
    url, datadir, replica, mode, agent, principal, target = sys.argv[1:8]
    arg = sys.argv[8] if len(sys.argv) > 8 else ""
    ctx = ssl.create_default_context(cafile=os.path.join(datadir, "ca.crt"))
    ctx.check_hostname = False
    ctx.load_cert_chain(os.path.join(datadir, "peer.crt"),
                        os.path.join(datadir, "peer.key"))
    window = 65536 if mode == "nocredit" else 1 << 20
    async with websockets.connect(url, ssl=ctx, subprotocols=["tether.peer.v1"],
                                  extra_headers={"Tether-Replica": replica},
                                  max_size=1 << 21) as ws:
        if mode == "spread":
            return await spread(ws, int(arg), agent, principal, target)
        sid = 1  # the probe's id sorts first in the tests: odd stream ids
        await ws.send(bytes([0x93, OPEN, sid]) + mp_map({
            "target": mp_str(target), "service": mp_str(""), "window": mp_uint(window),
            "agent": mp_str(agent), "principal": mp_str(principal)}))
        while True:
            f, _ = decode(await ws.recv())
            if f[0] in (OPEN_OK, OPEN_FAIL) and f[1] == sid:
                break
        if mode == "refused":
            if f[0] != OPEN_FAIL:
                print("opened, want a refusal")
                return 1
            print("refused", f[2]["code"], f[2]["reason"])
            return 0
        if f[0] != OPEN_OK:
            print("refused", f[2]["code"], f[2]["reason"])
            return 1
        credit = f[2]["window"]
        if mode == "nocredit":
            got = 0
            while True:
                f, _ = decode(await ws.recv())
                if f[0] == DATA and f[1] == sid:
                    got += len(f[2])
                    with open(arg + ".tmp", "w") as out:
                        out.write(str(got))
                    os.replace(arg + ".tmp", arg)
                elif f[0] in (RESET,):
                    print("reset", f[2])
                    return 1
        n = int(arg)
        data = os.urandom(n)
        back = bytearray()
        sent = 0
        fin_in = False
        while not fin_in:
            while sent < n and credit > 0:
                k = min(credit, n - sent, 65536)
                await ws.send(bytes([0x93, DATA, sid]) + mp_bin(data[sent:sent + k]))
                sent += k
                credit -= k
                if sent == n:
                    await ws.send(bytes([0x92, FIN, sid]))
            f, _ = decode(await ws.recv())
            if f[1] != sid:
                continue
            if f[0] == DATA:
                back += f[2]
                await ws.send(bytes([0x93, WINDOW, sid]) + mp_uint(len(f[2])))
            elif f[0] == WINDOW:
                credit += f[2]
            elif f[0] == FIN:
                fin_in = True
            elif f[0] == RESET:
                print("reset", f[2])
                return 1
        if bytes(back) != data:
            print("bytes differ: %d sent, %d back" % (n, len(back)))
            return 1
        print("ok", n)
        return 0


sys.exit(asyncio.run(main()))
