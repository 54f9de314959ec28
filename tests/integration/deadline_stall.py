#!/usr/bin/python3
"""deadline_stall.py PORT CAFILE GATEWAY_PID STOP_S CASE: a raw tether.v1
tunnel whose answer reaches the gateway's socket in time, while the gateway
is stopped (SIGSTOP) for STOP_S seconds, longer than the deadline that
answer meets.  A gateway that reads what arrived before it judges the
deadline goes on; one that judges first drops the tunnel.

CASE hello: after the 101, the gateway is stopped and a HELLO sent; once it
  is resumed (its PINGs are answered), the gateway must answer CHALLENGE (not "no HELLO within").
CASE ping: a HELLO (answered CHALLENGE, so that only --handshake-timeout
  runs); once the gateway pings (--ping-interval), it is stopped and the
  PONG sent; once it is resumed, it must ping again (not drop the tunnel as
  "no answer to a ping").

Prints one line saying what happened; exit 0 when the gateway went on, 1
when it dropped the tunnel or answered otherwise.
"""
import base64
import os
import signal
import socket
import ssl
import sys
import time

OP_BINARY, OP_CLOSE, OP_PING, OP_PONG = 0x2, 0x8, 0x9, 0xA


def mp_str(s):
    b = s.encode()
    assert len(b) < 32
    return bytes([0xA0 | len(b)]) + b


# [1, {"versions":[1], "node":"n1", "cred":"agent", "id":"a-000000000000"}]
HELLO = (bytes([0x92, 0x01, 0x84]) + mp_str("versions") + bytes([0x91, 0x01])
         + mp_str("node") + mp_str("n1") + mp_str("cred") + mp_str("agent")
         + mp_str("id") + mp_str("a-000000000000"))


def frame(op, payload):
    """One masked frame (a client's), payload under 126 bytes."""
    assert len(payload) < 126
    mask = os.urandom(4)
    body = bytes(b ^ mask[i % 4] for i, b in enumerate(payload))
    return bytes([0x80 | op, 0x80 | len(payload)]) + mask + body


class Conn:
    def __init__(self, port, cafile):
        ctx = ssl.create_default_context(cafile=cafile)
        ctx.check_hostname = False
        self.s = ctx.wrap_socket(socket.create_connection(("127.0.0.1", port), timeout=10),
                                 server_hostname="127.0.0.1")
        key = base64.b64encode(os.urandom(16)).decode()
        self.s.sendall(("GET /v1/connect HTTP/1.1\r\nHost: 127.0.0.1\r\nUpgrade: websocket\r\n"
                        "Connection: Upgrade\r\nSec-WebSocket-Key: %s\r\n"
                        "Sec-WebSocket-Version: 13\r\nSec-WebSocket-Protocol: tether.v1\r\n\r\n"
                        % key).encode())
        self.buf = b""
        while b"\r\n\r\n" not in self.buf:
            self.more()
        head, self.buf = self.buf.split(b"\r\n\r\n", 1)
        if not head.startswith(b"HTTP/1.1 101"):
            sys.exit("no 101: " + head[:80].decode(errors="replace"))

    def more(self):
        chunk = self.s.recv(65536)
        if not chunk:
            raise EOFError
        self.buf += chunk

    def need(self, n):
        while len(self.buf) < n:
            self.more()
        out, self.buf = self.buf[:n], self.buf[n:]
        return out

    def recv(self, answer_pings=False):
        """(opcode, payload) of the next frame (the server's: unmasked);
        with answer_pings, a PING is answered and skipped."""
        while True:
            op, payload = self.frame()
            if not (answer_pings and op == OP_PING):
                return op, payload
            self.s.sendall(frame(OP_PONG, payload))

    def frame(self):
        h = self.need(2)
        n = h[1] & 0x7F
        if n == 126:
            n = int.from_bytes(self.need(2), "big")
        elif n == 127:
            n = int.from_bytes(self.need(8), "big")
        return h[0] & 0x0F, self.need(n)


def stalled(gw, stop, send):
    """send() while the gateway is stopped for stop seconds."""
    os.kill(gw, signal.SIGSTOP)
    try:
        send()
        time.sleep(stop)
    finally:
        os.kill(gw, signal.SIGCONT)


def ended(op, payload):
    return "closed by the gateway: %s" % payload[2:].decode(errors="replace") \
        if op == OP_CLOSE else None


def case_hello(c, gw, stop):
    stalled(gw, stop, lambda: c.s.sendall(frame(OP_BINARY, HELLO)))
    op, payload = c.recv(answer_pings=True)
    if op == OP_BINARY and payload[:2] == b"\x92\x02":
        return "CHALLENGE after the stall", 0
    return ended(op, payload) or "answered %r" % payload[:80], 1


def case_ping(c, gw, stop):
    c.s.sendall(frame(OP_BINARY, HELLO))
    op, payload = c.recv(answer_pings=True)
    if op != OP_BINARY or payload[:2] != b"\x92\x02":
        return ended(op, payload) or "no CHALLENGE before the stall", 1
    while True:
        op, payload = c.recv()
        if op == OP_PING:
            break
        if op == OP_CLOSE:
            return ended(op, payload), 1
    stalled(gw, stop, lambda: c.s.sendall(frame(OP_PONG, payload)))
    while True:
        op, payload = c.recv()
        if op == OP_PING:
            c.s.sendall(frame(OP_PONG, payload))
            return "pinged again after the stall", 0
        if op == OP_CLOSE:
            return ended(op, payload), 1


def main():
    port, cafile, gw = int(sys.argv[1]), sys.argv[2], int(sys.argv[3])
    stop, case = float(sys.argv[4]), sys.argv[5]
    c = Conn(port, cafile)
    try:
        what, rc = {"hello": case_hello, "ping": case_ping}[case](c, gw, stop)
    except (EOFError, OSError) as e:
        what, rc = "the connection ended: %s" % (str(e) or "EOF"), 1
    print(case + ":", what)
    return rc


if __name__ == "__main__":
    sys.exit(main())
