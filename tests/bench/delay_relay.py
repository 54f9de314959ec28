#!/usr/bin/env python3
"""delay_relay.py: a TCP relay that delays every byte by a fixed time in
each direction, to put a remote database's latency between a gateway and a
PostgreSQL on loopback (tests/bench/store_latency.sh).

    delay_relay.py LISTEN_PORT TARGET_PORT DELAY_MS

Listens on 127.0.0.1:LISTEN_PORT; each connection is relayed to
127.0.0.1:TARGET_PORT.  A chunk read at time t is written at t + DELAY_MS,
in order, so a request/answer round trip costs 2 * DELAY_MS more, as across
a network, whatever the sizes.  Prints "ready PORT" once listening.
"""
import asyncio
import sys
import time


async def pipe(reader, writer, delay):
    queue = asyncio.Queue()

    async def pump_in():
        while True:
            data = await reader.read(65536)
            queue.put_nowait((time.monotonic() + delay, data))
            if not data:
                return

    async def pump_out():
        while True:
            due, data = await queue.get()
            wait = due - time.monotonic()
            if wait > 0:
                await asyncio.sleep(wait)
            if not data:
                try:
                    writer.write_eof()
                except OSError:
                    pass
                return
            writer.write(data)
            await writer.drain()

    try:
        await asyncio.gather(pump_in(), pump_out())
    except (ConnectionError, OSError):
        pass
    finally:
        writer.close()


async def main():
    listen, target, delay = int(sys.argv[1]), int(sys.argv[2]), \
        float(sys.argv[3]) / 1000.0

    async def handle(creader, cwriter):
        try:
            sreader, swriter = await asyncio.open_connection("127.0.0.1",
                                                             target)
        except OSError:
            cwriter.close()
            return
        await asyncio.gather(pipe(creader, swriter, delay),
                             pipe(sreader, cwriter, delay))

    server = await asyncio.start_server(handle, "127.0.0.1", listen)
    print("ready", listen, flush=True)
    async with server:
        await server.serve_forever()


if __name__ == "__main__":
    asyncio.run(main())
