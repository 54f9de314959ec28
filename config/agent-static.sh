#!/usr/bin/env bash
# agent-static.sh ARCH: builds build/static/ARCH/tether-client (ARCH amd64,
# arm64 or armhf), linked statically against glibc and the libraries'
# Debian archives (docs/0025-lean-static-agent.md); `make agent-static` runs it
# for each.  amd64 uses the host's own -dev packages; arm64 and armhf use
# Debian's packages of that architecture, fetched with `apt-get download`
# and unpacked into build/sysroot/ARCH by an apt of its own (config/setup.sh
# installs the cross compilers; the host's dpkg gets no foreign architecture).  Incremental:
# a second run rebuilds only what changed.
set -euo pipefail

arch=${1:?usage: agent-static.sh amd64|arm64|armhf}
src=$(cd "$(dirname "$0")/.." && pwd)
case $arch in
amd64) triplet=x86_64-linux-gnu cc=gcc strip=strip ;;
arm64) triplet=aarch64-linux-gnu cc=$triplet-gcc strip=$triplet-strip ;;
armhf) triplet=arm-linux-gnueabihf cc=$triplet-gcc strip=$triplet-strip ;;
*) echo "agent-static.sh: unknown architecture $arch (amd64, arm64, armhf)" >&2; exit 2 ;;
esac
dev_packages=(libssl-dev libevent-dev libmsgpack-dev libjansson-dev libinih-dev)

# apt for ARCH alone, in a private directory (build/sysroot/apt-ARCH):
# its own package lists and cache, an empty dpkg status, the host's
# sources.  The host's apt never learns of ARCH, so a mirror caught
# mid-sync on ARCH's index cannot break the host's own installs (seen: a
# bad bookworm-security armhf index hid every security update from the
# host once armhf was among dpkg's architectures).
apt_for() {
	local dir=$src/build/sysroot/apt-$arch
	mkdir -p "$dir/lists/partial" "$dir/cache/archives/partial"
	: >>"$dir/status"
	apt_opts=(-o "APT::Architecture=$arch" -o "APT::Architectures=$arch"
		-o "Dir::State::Lists=$dir/lists" -o "Dir::State::status=$dir/status"
		-o "Dir::Cache=$dir/cache" -o "Debug::NoLocking=1"
		-o "APT::Sandbox::User=root")
	if [ ! -f "$dir/.updated" ]; then
		# One index failing (a mirror mid-sync) leaves the others usable.
		apt-get "${apt_opts[@]}" update -qq >"$dir/update.log" 2>&1 ||
			echo "agent-static.sh: apt-get update for $arch reported errors;" \
				"going on with the indexes it has" >&2
		touch "$dir/.updated"
	fi
}

# The -dev packages of ARCH, unpacked (not installed: they need not match
# the host's versions of the same libraries).
sysroot_for() {
	local root=$src/build/sysroot/$arch
	if [ ! -f "$root/.complete" ]; then
		rm -rf "$root" "$root.debs"
		mkdir -p "$root" "$root.debs"
		apt_for
		(cd "$root.debs" && apt-get "${apt_opts[@]}" download "${dev_packages[@]}" \
			>/dev/null 2>"$root.apt.log") || {
			cat "$root.apt.log" >&2
			echo "agent-static.sh: cannot download ${dev_packages[*]} for $arch" \
				"(build/sysroot/apt-$arch/update.log has apt's update)" >&2
			exit 1
		}
		for deb in "$root.debs"/*.deb; do
			dpkg-deb -x "$deb" "$root"
		done
		rm -rf "$root.debs" "$root.apt.log"
		touch "$root/.complete"
	fi
	echo "$root"
}

sysroot=
[ "$arch" = amd64 ] || sysroot=$(sysroot_for)
command -v "$cc" >/dev/null || {
	echo "agent-static.sh: no $cc; run config/setup.sh" >&2
	exit 1
}
bdir=$src/build/static-build/$arch
if [ ! -f "$bdir/Makefile" ]; then
	processor=$(case $arch in amd64) echo x86_64 ;; arm64) echo aarch64 ;; armhf) echo arm ;; esac)
	CC=$cc cmake -S "$src" -B "$bdir" -DCMAKE_BUILD_TYPE=RelWithDebInfo \
		-DTETHER_AGENT_STATIC=ON -DTETHER_ARCH="$arch" \
		-DTETHER_STATIC_SYSROOT="$sysroot" -DCMAKE_SYSTEM_NAME=Linux \
		-DCMAKE_SYSTEM_PROCESSOR="$processor" >/dev/null
fi
# The link warns that glibc's NSS functions (getaddrinfo and friends, in
# libcrypto's and libevent's unused paths) need shared libraries at run
# time: the agent resolves with libevent's evdns instead (docs/0024).
if ! cmake --build "$bdir" --target tether-client -j"${JOBS:-$(nproc)}" >"$bdir/build.log" 2>&1; then
	grep -v -e "in statically linked applications requires at runtime" \
		-e "): in function \`" "$bdir/build.log" >&2
	echo "agent-static.sh: the $arch build failed" >&2
	exit 1
fi
mkdir -p "$src/build/static/$arch"
"$strip" -o "$src/build/static/$arch/tether-client" "$bdir/bin/tether-client"
echo "build/static/$arch/tether-client: $(stat -c %s "$src/build/static/$arch/tether-client") bytes"
