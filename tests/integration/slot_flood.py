#!/usr/bin/env python3
"""slot_flood.py: an attacker that holds the gateway's handshake slots
(docs/0028), from one source address, until killed.

  slot_flood.py stall HOST PORT SRC N STATUS
      N TCP connections from SRC that never send a ClientHello, each held
      until the gateway closes it or 20 s pass, then opened again (new ones
      at most 40 a second).
  slot_flood.py upgrade HOST PORT SRC N STATUS
      N TLS connections from SRC that ask for a tunnel upgrade on
      /v1/connect (subprotocol tether.v1) and then say nothing, each held
      until the gateway closes it, then opened again at once (so that the
      slot it held is taken again before anyone else's upgrade comes);
      after a refusal, again at most 40 a second.

STATUS is rewritten about every 0.2 s with one line of JSON: connections
opened, answered 101, refused (another answer), closed by the gateway.
"""
import asyncio
import json
import os
import ssl
import sys
import time

counts = {"opened": 0, "upgraded": 0, "refused": 0, "closed_by_gateway": 0}


async def pace(state):
    """At most 40 new connections a second, all workers together."""
    while True:
        now = time.monotonic()
        if now >= state["next"]:
            state["next"] = max(state["next"], now) + 1 / 40
            return
        await asyncio.sleep(state["next"] - now)


async def stall(host, port, src, state):
    while True:
        await pace(state)
        try:
            r, w = await asyncio.open_connection(host, port, local_addr=(src, 0))
        except OSError:
            await asyncio.sleep(0.1)
            continue
        counts["opened"] += 1
        try:
            data = await asyncio.wait_for(r.read(1), 20)
            if data == b"":
                counts["closed_by_gateway"] += 1
        except (asyncio.TimeoutError, OSError):
            pass
        w.close()


async def upgrade(host, port, src, state, ctx):
    head = (f"GET /v1/connect HTTP/1.1\r\nHost: {host}:{port}\r\n"
            "Upgrade: websocket\r\nConnection: Upgrade\r\n"
            "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n"
            "Sec-WebSocket-Version: 13\r\n"
            "Sec-WebSocket-Protocol: tether.v1\r\n\r\n").encode()
    again = False       # the gateway closed a held upgrade: retake it now
    while True:
        if not again:
            await pace(state)
        again = False
        try:
            r, w = await asyncio.wait_for(asyncio.open_connection(
                host, port, ssl=ctx, local_addr=(src, 0)), 10)
        except (OSError, asyncio.TimeoutError, ssl.SSLError):
            await asyncio.sleep(0.1)
            continue
        counts["opened"] += 1
        try:
            w.write(head)
            answer = await asyncio.wait_for(r.readuntil(b"\r\n\r\n"), 10)
            if answer.startswith(b"HTTP/1.1 101 "):
                counts["upgraded"] += 1
                # Silent until the gateway says anything (its ERROR and
                # close frames: the slot is free already) or closes.
                await r.read(4096)
                counts["closed_by_gateway"] += 1
                again = True
            else:
                counts["refused"] += 1
        except (OSError, asyncio.TimeoutError, ssl.SSLError,
                asyncio.IncompleteReadError, asyncio.LimitOverrunError):
            pass
        w.close()


async def report(path):
    while True:
        tmp = path + ".tmp"
        with open(tmp, "w") as f:
            f.write(json.dumps(counts) + "\n")
        os.replace(tmp, path)
        await asyncio.sleep(0.2)


async def main():
    mode, host, port, src, n, status = sys.argv[1:7]
    port, n = int(port), int(n)
    state = {"next": time.monotonic()}
    tasks = [asyncio.ensure_future(report(status))]
    if mode == "stall":
        tasks += [asyncio.ensure_future(stall(host, port, src, state))
                  for _ in range(n)]
    else:
        ctx = ssl.create_default_context()
        ctx.check_hostname = False
        ctx.verify_mode = ssl.CERT_NONE
        tasks += [asyncio.ensure_future(upgrade(host, port, src, state, ctx))
                  for _ in range(n)]
    await asyncio.gather(*tasks)


if __name__ == "__main__":
    asyncio.run(main())
