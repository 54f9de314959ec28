#!/usr/bin/env bash
# setup.sh: install everything Tether needs to build and test, on Debian 12.
#
# Idempotent and cached: Debian packages are installed only when missing, and
# libwebsockets is built once from Debian's own source package into
# third_party/lws (git-ignored).  Debian's binary libwebsockets lacks libevent
# support, which Tether needs to run lws as a guest on its libevent loop.
set -euo pipefail

top=$(cd "$(dirname "$0")/.." && pwd)
prefix="$top/third_party/lws"
lws_version=4.1.6

sudo_cmd=()
if [ "$(id -u)" -ne 0 ]; then
	sudo_cmd=(sudo)
fi

log() { printf 'setup: %s\n' "$*" >&2; }

packages=(
	build-essential cmake pkg-config dpkg-dev
	libssl-dev libevent-dev libmsgpack-dev libjansson-dev
	libsqlite3-dev libpq-dev libcmocka-dev libcap-dev
	libcurl4-openssl-dev libhttp-parser-dev clang libclang-rt-14-dev
	openssl curl jq sqlite3 procps iproute2
	python3 python3-websockets
	openssh-server openssh-client postgresql nginx-light iperf3 socat
)

missing=()
for p in "${packages[@]}"; do
	if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed'; then
		missing+=("$p")
	fi
done

apt_updated=0
apt_update() {
	if [ "$apt_updated" -eq 0 ]; then
		log "apt-get update"
		"${sudo_cmd[@]}" apt-get update -qq
		apt_updated=1
	fi
}

if [ ${#missing[@]} -gt 0 ]; then
	apt_update
	log "installing: ${missing[*]}"
	DEBIAN_FRONTEND=noninteractive "${sudo_cmd[@]}" apt-get install -y -qq \
		--no-install-recommends "${missing[@]}" >/dev/null
fi

# The configured Debian mirror, for the deb-src entry apt-get source needs.
mirror_uri() {
	local f uri
	for f in /etc/apt/sources.list.d/*.sources; do
		[ -f "$f" ] || continue
		uri=$(awk '/^URIs:/ && $2 !~ /security/ {print $2; exit}' "$f")
		[ -n "$uri" ] && { echo "$uri"; return; }
	done
	if [ -f /etc/apt/sources.list ]; then
		uri=$(awk '$1 == "deb" && $0 !~ /security/ {for (i = 2; i <= NF; i++) if ($i ~ /^https?:/) {print $i; exit}}' /etc/apt/sources.list)
		[ -n "$uri" ] && { echo "$uri"; return; }
	fi
	echo http://deb.debian.org/debian
}

build_lws() {
	local src_list=/etc/apt/sources.list.d/tether-deb-src.sources
	local work
	if ! grep -rqs '^Types:.*deb-src\|^deb-src' /etc/apt/sources.list /etc/apt/sources.list.d/; then
		log "adding a deb-src entry for $(mirror_uri)"
		printf 'Types: deb-src\nURIs: %s\nSuites: bookworm\nComponents: main\nSigned-By: /usr/share/keyrings/debian-archive-keyring.gpg\n' \
			"$(mirror_uri)" | "${sudo_cmd[@]}" tee "$src_list" >/dev/null
		apt_updated=0
	fi
	apt_update
	work=$(mktemp -d)
	trap 'rm -rf "$work"' RETURN
	log "fetching libwebsockets $lws_version source"
	(cd "$work" && apt-get source -qq "libwebsockets=$lws_version-3" >/dev/null 2>&1 ||
		apt-get source -qq libwebsockets >/dev/null)
	local dir
	dir=$(find "$work" -maxdepth 1 -type d -name 'libwebsockets-*' | head -1)
	[ -n "$dir" ] || { log "apt-get source libwebsockets produced no source tree"; exit 1; }
	log "building libwebsockets with libevent support into $prefix"
	cmake -S "$dir" -B "$work/build" -DCMAKE_BUILD_TYPE=Release \
		-DCMAKE_INSTALL_PREFIX="$prefix" \
		-DLWS_WITH_LIBEVENT=ON -DDISABLE_WERROR=ON \
		-DLWS_WITH_EVLIB_PLUGINS=OFF -DLWS_WITH_STATIC=ON -DLWS_WITH_SHARED=OFF \
		-DLWS_WITHOUT_TESTAPPS=ON -DLWS_WITHOUT_TEST_SERVER=ON \
		-DLWS_WITHOUT_TEST_CLIENT=ON -DLWS_WITH_MINIMAL_EXAMPLES=OFF \
		-DLWS_IPV6=ON >"$work/cmake.log" 2>&1 || { cat "$work/cmake.log"; exit 1; }
	cmake --build "$work/build" -j"$(nproc)" >"$work/build.log" 2>&1 || { tail -50 "$work/build.log"; exit 1; }
	cmake --install "$work/build" >/dev/null
	echo "$lws_version" >"$prefix/.tether-built"
}

if [ "$(cat "$prefix/.tether-built" 2>/dev/null)" != "$lws_version" ]; then
	build_lws
fi
log "ready (libwebsockets $lws_version with libevent in $prefix)"
