#!/usr/bin/env bash
# setup.sh: install everything Tether needs to build and test, on Debian 12.
#
# Idempotent: Debian packages are installed only when missing (apt-get update
# runs only then).  Uses sudo when not root.  Every library is Debian's own:
# Tether no longer builds libwebsockets (docs/0005: its client path was too
# slow for the tunnel, and its server could not hold an upgrade open).
set -euo pipefail

sudo_cmd=()
if [ "$(id -u)" -ne 0 ]; then
	sudo_cmd=(sudo)
fi

log() { printf 'setup: %s\n' "$*" >&2; }

# libsodium-dev: the gateway's Ed25519 verification (auth/agentkey_verify.c,
# docs/0046; the agent does not link it).
# libpq-dev: the PostgreSQL store (gateway/store/store_pg.c); postgresql: the
# private PostgreSQL that test_store_postgres starts (initdb, pg_ctl, psql).
# linux-perf: tests/bench/throughput_profile.sh (perf record, perf stat).
# valgrind: tests/bench/k8s_instructions.sh (callgrind's instruction counts).
# tinyproxy, squid: the proxies of test_proxy*.sh; krb5-kdc, krb5-admin-server
# (kadmin.local), krb5-user (kinit, klist): the private KDC of
# test_proxy_negotiate (the agent loads libgssapi-krb5-2 only at run time).
# gcc-*-linux-gnu*, libc6-dev-*-cross, qemu-user: the static agents for
# arm64 and armhf (make agent-static, config/agent-static.sh) and running
# them in test_agent_static; binutils' readelf checks they load nothing.
# faketime: libfaketime, a replica's clock set back in test_replica_skew.
# libcurl4-openssl-dev, libsystemd-dev: the release of commit 692108b that
# test_skew builds from git (tests/tools/old_build.sh) links them.
packages=(
	build-essential cmake pkg-config
	gcc-aarch64-linux-gnu gcc-arm-linux-gnueabihf
	libc6-dev-arm64-cross libc6-dev-armhf-cross qemu-user
	libssl-dev libevent-dev libmsgpack-dev libjansson-dev
	libsqlite3-dev libpq-dev libcmocka-dev libwslay-dev libsodium-dev
	libcurl4-openssl-dev libsystemd-dev libhttp-parser-dev clang libclang-rt-14-dev
	libinih-dev systemd strace tinyproxy
	squid krb5-kdc krb5-admin-server krb5-user libgssapi-krb5-2
	openssl curl jq sqlite3 procps iproute2 bc
	python3 python3-websockets python3-cryptography
	openssh-server openssh-client postgresql nginx-light iperf3 socat wrk
	linux-perf haproxy faketime valgrind
	prometheus chromium libnss3-tools
	man-db groff-base mandoc lintian adduser dpkg-dev file
)

missing=()
for p in "${packages[@]}"; do
	# A package whose triggers are pending (man-db's while another dpkg
	# run installs man pages, e.g. the package test) is installed too.
	if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null |
		grep -qE 'install ok (installed|triggers-pending|triggers-awaited)'; then
		missing+=("$p")
	fi
done

apt_updated=0
apt_update() {
	if [ "$apt_updated" -eq 0 ]; then
		log "apt-get update"
		# A mirror caught mid-sync fails one index (seen: bookworm-security's
		# armhf Packages); apt keeps the old one, and an install that
		# really needs the missing index still fails below.
		"${sudo_cmd[@]}" apt-get -o DPkg::Lock::Timeout=600 update -qq ||
			log "apt-get update reported errors (see above); going on with the indexes it has"
		apt_updated=1
	fi
}

if [ ${#missing[@]} -gt 0 ]; then
	apt_update
	log "installing: ${missing[*]}"
	DEBIAN_FRONTEND=noninteractive "${sudo_cmd[@]}" apt-get install -o DPkg::Lock::Timeout=600 -y -qq \
		--no-install-recommends "${missing[@]}" >/dev/null
fi

# kubectl: the tests read issued kubeconfigs with the real one.  Any kubectl
# already on PATH will do (an upstream or cloud SDK one conflicts with
# Debian's package); only when there is none, Debian's kubernetes-client.
if ! command -v kubectl >/dev/null 2>&1; then
	apt_update
	log "installing: kubernetes-client (kubectl)"
	DEBIAN_FRONTEND=noninteractive "${sudo_cmd[@]}" apt-get install -o DPkg::Lock::Timeout=600 -y -qq \
		--no-install-recommends kubernetes-client >/dev/null
fi

log "ready"
