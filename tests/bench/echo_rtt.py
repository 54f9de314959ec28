#!/usr/bin/python3
"""echo_rtt.py: stream set-up cost through a path to an echo server.

usage: echo_rtt.py PORT [COUNT]            (COUNT default 1000)
Runs COUNT times, one after the other: connect to 127.0.0.1:PORT, send one
byte, read the echoed byte, close.  Each iteration is timed with
time.perf_counter from before connect() to after close().  Prints one JSON
object: count, ok, errors (first error text), total_s and, in milliseconds
over the successful iterations, p50_ms, p90_ms, p99_ms, max_ms, mean_ms.
An iteration whose connect fails, or whose read returns EOF or times out
(a tunnel that accepted locally but could not reach the target), counts as
an error, not as a sample.  Always exits 0 once it has printed its figures.
"""
import json
import socket
import sys
import time


def percentile(sorted_ms, p):
    if not sorted_ms:
        return None
    # nearest-rank: the smallest value with at least p % of samples <= it
    k = max(0, min(len(sorted_ms) - 1, -(-len(sorted_ms) * p // 100) - 1))
    return round(sorted_ms[k], 3)


def main():
    port = int(sys.argv[1])
    count = int(sys.argv[2]) if len(sys.argv) > 2 else 1000
    samples = []
    errors = 0
    first_error = None
    t_start = time.perf_counter()
    for _ in range(count):
        t0 = time.perf_counter()
        s = None
        try:
            s = socket.create_connection(("127.0.0.1", port), timeout=10)
            s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            s.sendall(b"x")
            if s.recv(1) != b"x":
                raise OSError("EOF before the echo")
            s.close()
            s = None
            samples.append((time.perf_counter() - t0) * 1000.0)
        except OSError as e:
            errors += 1
            if first_error is None:
                first_error = str(e) or type(e).__name__
        finally:
            if s is not None:
                s.close()
    total = time.perf_counter() - t_start
    samples.sort()
    print(json.dumps({
        "count": count,
        "ok": len(samples),
        "errors": errors,
        "first_error": first_error,
        "total_s": round(total, 3),
        "p50_ms": percentile(samples, 50),
        "p90_ms": percentile(samples, 90),
        "p99_ms": percentile(samples, 99),
        "max_ms": round(samples[-1], 3) if samples else None,
        "mean_ms": round(sum(samples) / len(samples), 3) if samples else None,
    }))


if __name__ == "__main__":
    main()
