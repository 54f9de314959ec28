#!/usr/bin/env bash
# bundle.sh: the release binaries a benchmark needs, with every shared
# library they load and the loader, in one directory that runs on another
# x86-64 Linux machine without installing anything there (a machine lent
# for one short run: no network, no packages, its own libc).
#
#   DIR/real/NAME    the binaries, copied as they are
#   DIR/lib/         every library `ldd` names for them, under its soname,
#                    and ld-linux-x86-64.so.2
#   DIR/etc/         this machine's openssl.cnf (OPENSSL_CONF points at it:
#                    the TLS settings measured are this machine's)
#   DIR/bin/NAME     a wrapper: exec DIR/lib/ld-linux-x86-64.so.2
#                    --library-path DIR/lib DIR/real/NAME "$@"
#
# so that TETHER_BIN=DIR/bin, and PATH=DIR/bin:$PATH for curl, jq, bc,
# taskset, wrk, nginx and openssl, run nothing of the other machine's but
# the kernel, bash, coreutils, awk, sed (and python3 for the storm
# scripts; k8s_proxy.sh needs none).  nginx runs from the bundle with -p
# and -c of the benchmark's own conf (no /etc/nginx, no modules).  The wrappers name DIR by its absolute path (a benchmark
# copies them elsewhere); on the other machine `bundle.sh --rewrap DIR`
# writes them again for where DIR is there (device_storm.sh does).
#
# usage: tests/bench/bundle.sh DIR            (make build first)
#        tests/bench/bundle.sh --rewrap DIR
#   TETHER_BIN     where the release binaries are (default build/release/bin)
#   BUNDLE_TOOLS   the other programs to take (default "curl jq bc taskset
#                  wrk nginx openssl": what the benchmarks device_*.sh run
#                  call besides python3 and coreutils; taskset for
#                  device_two_core.sh and device_k8s.sh, wrk, nginx and
#                  openssl for k8s_proxy.sh)
#   BUNDLE_MAX_MIB refuse a bundle larger than this (default 60)
set -euo pipefail

SRC=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
TETHER_BIN=${TETHER_BIN:-$SRC/build/release/bin}
TOOLS=${BUNDLE_TOOLS:-curl jq bc taskset wrk nginx openssl}
MAX_MIB=${BUNDLE_MAX_MIB:-60}
LOADER=ld-linux-x86-64.so.2

say() { printf '[bundle] %s\n' "$*" >&2; }
die() { say "error: $*"; exit 1; }

# rewrap DIR: DIR/bin/NAME for every DIR/real/NAME, naming DIR absolutely.
rewrap() {
	local dir name
	dir=$(cd "$1" && pwd)
	[ -x "$dir/lib/$LOADER" ] || chmod +x "$dir/lib/$LOADER" 2>/dev/null || true
	[ -f "$dir/lib/$LOADER" ] || die "$dir/lib/$LOADER missing: not a bundle"
	mkdir -p "$dir/bin"
	for f in "$dir/real/"*; do
		name=$(basename "$f")
		chmod +x "$f"
		cat >"$dir/bin/$name" <<-EOF
			#!/bin/sh
			# $name from the bundle $dir (tests/bench/bundle.sh)
			OPENSSL_CONF=$dir/etc/openssl.cnf
			export OPENSSL_CONF
			exec $dir/lib/$LOADER --library-path $dir/lib $dir/real/$name "\$@"
		EOF
		chmod +x "$dir/bin/$name"
	done
	chmod +x "$dir/lib/$LOADER"
}

if [ "${1:-}" = --rewrap ]; then
	[ $# -eq 2 ] || die "usage: $0 --rewrap DIR"
	rewrap "$2"
	say "wrappers in $(cd "$2" && pwd)/bin rewritten"
	exit 0
fi
[ $# -eq 1 ] || die "usage: $0 DIR (or --rewrap DIR)"
[ "$(uname -m)" = x86_64 ] || die "this machine is $(uname -m); the bundle is for x86-64"
command -v ldd >/dev/null || die "ldd is required"

PROGS=()
for b in tether-gateway tether-swarm tetherctl tether-client; do
	[ -x "$TETHER_BIN/$b" ] || die "$TETHER_BIN/$b missing: run 'make build' or set TETHER_BIN"
	PROGS+=("$TETHER_BIN/$b")
done
for t in $TOOLS; do
	p=$(command -v "$t") || die "$t is not installed here (bash config/setup.sh)"
	PROGS+=("$(readlink -f "$p")")
done

DIR=$1
rm -rf "$DIR"
mkdir -p "$DIR/real" "$DIR/lib" "$DIR/etc" "$DIR/bin"
DIR=$(cd "$DIR" && pwd)   # the check below compares absolute paths
for p in "${PROGS[@]}"; do
	name=$(basename "$p")
	# The tools are named as called (jq, not jq's real file name).
	for t in $TOOLS; do [ "$(readlink -f "$(command -v "$t")")" != "$p" ] || name=$t; done
	cp "$p" "$DIR/real/$name"
	# "soname => /path (addr)" and the loader's "/lib64/ld-linux... (addr)"
	while read -r soname path; do
		[ -n "$path" ] || continue
		cp -L "$path" "$DIR/lib/$soname"
	done < <(ldd "$p" | awk '
		$2 == "=>" && $3 ~ /^\// { print $1, $3; next }
		$2 == "=>" { print "missing:" $1 > "/dev/stderr"; next }
		$1 ~ /ld-linux-x86-64\.so\.2$/ { print "ld-linux-x86-64.so.2", $1 }')
done
[ -f "$DIR/lib/$LOADER" ] || die "ldd named no $LOADER"
if [ -f /usr/lib/ssl/openssl.cnf ]; then cp -L /usr/lib/ssl/openssl.cnf "$DIR/etc/openssl.cnf"; else : >"$DIR/etc/openssl.cnf"; fi
rewrap "$DIR"

# Every library each program needs must resolve inside the bundle.
for f in "$DIR/real/"*; do
	out=$("$DIR/lib/$LOADER" --list --library-path "$DIR/lib" "$f")
	bad=$(awk '$2 == "=>" && ($3 == "not" || index($3, "'"$(cd "$DIR" && pwd)"'/lib/") != 1) { print $1 }' <<<"$out")
	[ -z "$bad" ] || die "$(basename "$f") would load from outside the bundle: $bad"
done
"$DIR/bin/tether-gateway" --version >/dev/null || die "the bundled tether-gateway does not start"

bytes=$(du -sb "$DIR" | cut -f1)
mib=$(((bytes + 1048575) / 1048576))
[ "$mib" -lt "$MAX_MIB" ] || die "the bundle is $mib MiB, over $MAX_MIB MiB"
say "$(cd "$DIR" && pwd): $(find "$DIR/real" -type f | wc -l) programs, $(find "$DIR/lib" -type f | wc -l) libraries, $mib MiB"
