#!/usr/bin/env python3
"""inspectproxy.py PORTFILE CERT KEY LOG: a TLS-inspecting HTTP CONNECT proxy
on 127.0.0.1, like the ones corporate networks run.  Binds port 0 and writes
the port to PORTFILE.  For every CONNECT host:port it answers 200, then
terminates the client's TLS itself with CERT/KEY (a certificate for the
gateway's name issued by its own CA), opens its own TLS connection to
host:port without verifying it, and relays the plaintext both ways (one
thread per session).  Each
CONNECT and each intercepted session is a line in LOG.
"""
import os
import select
import socket
import ssl
import sys
import threading

portfile, cert, key, logpath = sys.argv[1:5]
log_lock = threading.Lock()


def log(line):
    with log_lock, open(logpath, 'a') as f:
        f.write(line + '\n')


def relay(a, b, target):
    """Relays a <-> b on this one thread until either side ends.  One
    thread per pair: OpenSSL's SSL objects must not be read on one thread
    while written on another (two pump threads did that, and a tunnel
    through this proxy was cut now and then)."""
    why = 'closed'
    try:
        while True:
            ready = [s for s in (a, b) if s.pending()]
            if not ready:
                ready, _, _ = select.select([a, b], [], [])
            for src in ready:
                data = src.recv(65536)
                if not data:
                    return
                (b if src is a else a).sendall(data)
    except OSError as e:
        why = str(e)
    finally:
        log('ended %s: %s' % (target, why))
        for s in (a, b):
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass


def read_head(conn):
    head = b''
    while b'\r\n\r\n' not in head:
        chunk = conn.recv(1)
        if not chunk or len(head) > 8192:
            return None
        head += chunk
    return head.decode('latin-1')


def serve(conn, server_ctx, client_ctx):
    try:
        head = read_head(conn)
        if head is None or not head.startswith('CONNECT '):
            conn.close()
            return
        target = head.split()[1]
        host, port = target.rsplit(':', 1)
        host = host.strip('[]')
        log('CONNECT ' + target)
        up = socket.create_connection((host, int(port)), 10)
        conn.sendall(b'HTTP/1.1 200 Connection established\r\n\r\n')
        log('intercepting ' + target)
        tls_in = server_ctx.wrap_socket(conn, server_side=True)
        tls_up = client_ctx.wrap_socket(up, server_hostname=host)
        log('intercepted ' + target)
        relay(tls_in, tls_up, target)
    except (OSError, ssl.SSLError) as e:
        log('ended: %s' % e)
        conn.close()


def main():
    server_ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    server_ctx.load_cert_chain(cert, key)
    client_ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    client_ctx.check_hostname = False
    client_ctx.verify_mode = ssl.CERT_NONE
    s = socket.socket()
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.bind(('127.0.0.1', 0))
    s.listen(16)
    with open(portfile + '.tmp', 'w') as f:
        f.write(str(s.getsockname()[1]))
    os.rename(portfile + '.tmp', portfile)
    while True:
        c, _ = s.accept()
        threading.Thread(target=serve, args=(c, server_ctx, client_ctx),
                         daemon=True).start()


main()
