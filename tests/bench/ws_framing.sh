#!/usr/bin/env bash
# ws_framing.sh: builds and runs ws_framing.c (WebSocket framing speed on
# one core: byte-at-a-time, wslay, Tether).  Needs libwslay-dev.
set -euo pipefail
top=$(cd "$(dirname "$0")/../.." && pwd)
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
dpkg-query -W libwslay-dev >/dev/null 2>&1 || { echo "install libwslay-dev first" >&2; exit 1; }
gcc -std=c11 -O2 -D_GNU_SOURCE -I"$top/common" "$top/tests/bench/ws_framing.c" \
	"$top/common/wsframe.c" -lwslay -o "$out/ws_framing"
echo "command: tests/bench/ws_framing.sh   ($(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | xargs))"
"$out/ws_framing"
