#!/usr/bin/python3
"""cdp.py: a minimal Chrome DevTools Protocol client for the status-page
test (python3-websockets), talking to the first page of a headless
Chromium started with --remote-debugging-port=PORT.

usage: cdp.py PORT eval EXPR              prints the value of EXPR as JSON
       cdp.py PORT wait EXPR JSON SECONDS polls EXPR every 100 ms until its
                                          value, as JSON, is JSON; exit 1 and
                                          the last value on timeout
       cdp.py PORT shot PATH              writes a PNG screenshot of the page
       cdp.py PORT print EXPR             prints EXPR's value as JSON with the
                                          page rendered for print media
"""
import asyncio
import base64
import json
import sys
import time
import urllib.request

import websockets


def page_ws_url(port):
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/json/list", timeout=5) as r:
        targets = json.load(r)
    for t in targets:
        if t.get("type") == "page":
            return t["webSocketDebuggerUrl"]
    raise SystemExit("no page target")


class Client:
    def __init__(self, ws):
        self.ws = ws
        self.next_id = 0

    async def call(self, method, **params):
        self.next_id += 1
        mid = self.next_id
        await self.ws.send(json.dumps({"id": mid, "method": method, "params": params}))
        while True:
            msg = json.loads(await self.ws.recv())
            if msg.get("id") == mid:
                if "error" in msg:
                    raise SystemExit(f"{method}: {msg['error']}")
                return msg["result"]

    async def evaluate(self, expr):
        r = await self.call("Runtime.evaluate", expression=expr, returnByValue=True)
        if "exceptionDetails" in r:
            return {"exception": r["exceptionDetails"].get("text", "")}
        return r["result"].get("value")


async def main():
    port, cmd = sys.argv[1], sys.argv[2]
    async with websockets.connect(page_ws_url(port), max_size=64 << 20) as ws:
        c = Client(ws)
        if cmd == "eval":
            print(json.dumps(await c.evaluate(sys.argv[3])))
        elif cmd == "wait":
            expr, want, limit = sys.argv[3], json.loads(sys.argv[4]), float(sys.argv[5])
            deadline = time.monotonic() + limit
            while True:
                got = await c.evaluate(expr)
                if got == want:
                    return
                if time.monotonic() > deadline:
                    print(json.dumps(got))
                    sys.exit(1)
                await asyncio.sleep(0.1)
        elif cmd == "print":
            await c.call("Emulation.setEmulatedMedia", media="print")
            print(json.dumps(await c.evaluate(sys.argv[3])))
        elif cmd == "shot":
            r = await c.call("Page.captureScreenshot", format="png")
            with open(sys.argv[3], "wb") as f:
                f.write(base64.b64decode(r["data"]))
        else:
            raise SystemExit(__doc__)


asyncio.run(main())
