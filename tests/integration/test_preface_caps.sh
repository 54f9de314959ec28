#!/usr/bin/env bash
# The PROXY preface stage (--trusted-proxy set, docs/0028) is under the
# admission caps and deadlines: 400 idle sockets (no PROXY header, no first
# byte), 200 from a trusted balancer's address and 200 from another, give
# their descriptors back within --tls-hello-timeout (1 s) and the
# untrusted source holds at most --max-tls-per-source of them meanwhile.
# Before, each held a descriptor for --http-timeout (20 s): 400 sockets, 400
# descriptors.
source "$(dirname "$0")/lib.sh"

gateway_init
# serve's default deadline (lib.sh raises it for other tests).
gateway_start --trusted-proxy 127.0.0.1/32 --tls-hello-timeout 1000
fds() { find "/proc/$GW_PID/fd" -mindepth 1 -maxdepth 1 | wc -l; }
base=$(fds)
python3 - "$GW_PORT" "$T/idle.ready" <<'PY' &
import socket, sys, time
port, ready = int(sys.argv[1]), sys.argv[2]
socks = []
for src in ("127.0.0.1", "127.0.0.2"):
    for _ in range(200):
        s = socket.socket()
        s.bind((src, 0))
        s.connect(("127.0.0.1", port))
        socks.append(s)
open(ready, "w").close()
time.sleep(300)
PY
PIDS+=($!)
wait_until 20 "400 idle sockets connected" test -f "$T/idle.ready"
fewer() { [ "$(fds)" -le $((base + 20)) ]; }
wait_until 10 "the gateway holds no more than 20 descriptors over its $base" fewer
pass "400 idle sockets in the PROXY preface stage: back to $(fds) descriptors (from $base) within the wait"
gateway_stop
