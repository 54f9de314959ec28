#!/usr/bin/env bash
# run.sh: `make test-fresh`.  Runs the README's two commands on a fresh
# Debian 12 root filesystem on this machine, from the current commit, and
# fails when anything they need is not installed by config/setup.sh.
#
#   1. Base: `debootstrap --variant=minbase bookworm` from the Debian mirror
#      in this machine's apt sources, plus git, make and ca-certificates and
#      nothing else; kept as a tarball in the cache, so later runs only
#      unpack it (a cold run builds it, a warm run reuses it).
#   2. A private mount namespace (unshare --mount): /proc, /sys, /dev,
#      /dev/pts, /run and the .deb cache are mounted for the chroot there,
#      and vanish with it.  The network is the host's (loopback works).
#   3. The chroot gets the host's Debian apt sources, a minimal /etc/hosts,
#      the host's resolv.conf; the .deb cache is bound to its
#      /var/cache/apt/archives and apt there keeps what it downloads, so a
#      warm run installs every package afresh without downloading it again.
#   4. `git clone` of this repository, HEAD checked out (only committed work
#      is tested), then as root in the chroot: `make test`; `make run` in
#      the background, until the gateway answers /readyz and the demo agent
#      is `active` (tetherctl -o json agent list); then Ctrl-C (SIGINT to
#      its process group) and it must stop cleanly.
#
# Needs root (debootstrap, chroot, mounts), unshare, git and curl on the
# host; installs debootstrap with apt-get if it is missing.  Exit 0 when the
# fresh machine passed, 1 when it failed, 2 when it could not run (says why).
#
# Environment:
#   TETHER_FRESH_CACHE    cache directory, outside the clone
#                         (default /var/cache/tether-fresh): base-*.tar.gz,
#                         debs/, runs/ (one root per run, removed after it),
#                         last/ (logs of the last run)
#   TETHER_FRESH_TIMEOUT  seconds `make test` may take (default 3600)
#   TETHER_FRESH_KEEP=1   keep the run's root filesystem (for debugging)
#   TETHER_FRESH_TMPFS_GB the run's root filesystem is a tmpfs of at most
#                         this size (default 12), in the namespace: no disk
#                         syncs, nothing to delete.  On disk (runs/) instead
#                         when memory is short (available < size + 4 GiB),
#                         with TETHER_FRESH_KEEP=1, or when set to 0.
#
# Internal: `run.sh --inside RUNDIR` is the part that runs in the namespace.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
self=$here/run.sh
top=$(cd "$here/../.." && pwd)
cache=$(realpath -m "${TETHER_FRESH_CACHE:-/var/cache/tether-fresh}")
make_timeout=${TETHER_FRESH_TIMEOUT:-3600}
keep=${TETHER_FRESH_KEEP:-0}
tmpfs_gb=${TETHER_FRESH_TMPFS_GB:-12}
suite=bookworm
arch=$(dpkg --print-architecture 2>/dev/null || echo amd64)
extra_packages=(git make ca-certificates)   # what a fresh machine needs (README)
chroot_path=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin

say() { printf '[fresh] %s\n' "$*" >&2; }
fail() { say "FAIL: $*"; exit 1; }
cannot() { say "cannot run: $*"; exit 2; }
elapsed() { printf '%dm%02ds' $(($1 / 60)) $(($1 % 60)); }

# --- apt sources -------------------------------------------------------------

# debian_sources: one line "URI<TAB>SUITE<TAB>COMPONENTS<TAB>SIGNED-BY|-" per
# enabled binary (deb) entry of this machine's apt sources, one-line
# (sources.list, *.list) and deb822 (*.sources) alike.
debian_sources() {
	local f
	for f in /etc/apt/sources.list /etc/apt/sources.list.d/*.list; do
		[ -f "$f" ] || continue
		awk '
		{ sub(/#.*/, "") }
		$1 != "deb" { next }
		{
			line = $0; sb = "-"
			if (match(line, /\[[^]]*\]/)) {
				n = split(substr(line, RSTART + 1, RLENGTH - 2), o, " ")
				for (i = 1; i <= n; i++)
					if (o[i] ~ /^signed-by=/) sb = substr(o[i], 11)
				line = substr(line, 1, RSTART - 1) " " substr(line, RSTART + RLENGTH)
			}
			$0 = line; comps = ""
			for (i = 4; i <= NF; i++) comps = comps (comps == "" ? "" : " ") $i
			if (NF >= 4) print $2 "\t" $3 "\t" comps "\t" sb
		}' "$f"
	done
	for f in /etc/apt/sources.list.d/*.sources; do
		[ -f "$f" ] || continue
		awk '
		function flush(   n, m, i, j, u, s) {
			if (types ~ /(^| )deb( |$)/ && tolower(enabled) != "no") {
				n = split(uris, u, " "); m = split(suites, s, " ")
				for (i = 1; i <= n; i++)
					for (j = 1; j <= m; j++)
						print u[i] "\t" s[j] "\t" comps "\t" (sb == "" ? "-" : sb)
			}
			types = uris = suites = comps = sb = enabled = ""
		}
		/^#/ { next }
		/^[ \t]*$/ { flush(); next }
		/^[ \t]/ { next }   # a continuation line (an inline key)
		{
			k = tolower(substr($0, 1, index($0, ":") - 1))
			v = substr($0, index($0, ":") + 1)
			gsub(/^[ \t]+|[ \t]+$/, "", v)
			if (k == "types") types = v
			else if (k == "uris") uris = v
			else if (k == "suites") suites = v
			else if (k == "components") comps = v
			else if (k == "signed-by") sb = (v ~ /^\//) ? v : ""
			else if (k == "enabled") enabled = v
		}
		END { flush() }' "$f"
	done
}

# chroot_sources ROOT: the host's Debian entries (bookworm, -updates,
# -security) as the chroot's only apt sources.  Third-party entries are left
# out: their keys are not on a fresh system.
chroot_sources() {
	local root=$1 uri s comps sb
	rm -f "$root/etc/apt/sources.list" "$root"/etc/apt/sources.list.d/*
	while IFS=$'\t' read -r uri s comps sb; do
		case $s in "$suite" | "$suite-updates" | "$suite-security") ;; *) continue ;; esac
		printf 'Types: deb\nURIs: %s\nSuites: %s\nComponents: %s\n' "$uri" "$s" "$comps"
		[ "$sb" != - ] && [ -f "$root$sb" ] && printf 'Signed-By: %s\n' "$sb"
		printf '\n'
	done < <(debian_sources) >"$root/etc/apt/sources.list.d/debian.sources"
}

# --- inside the mount namespace ----------------------------------------------

# mount_chroot ROOT: what a booted system has, for this namespace only.
mount_chroot() {
	local root=$1
	mount -t proc proc "$root/proc"
	mount --rbind /sys "$root/sys"
	mount --rbind /dev "$root/dev"        # with /dev/pts and /dev/shm
	mount -t tmpfs -o mode=755,nosuid,nodev tmpfs "$root/run"
	mkdir -p "$root/run/lock" "$root/var/cache/apt/archives"
	mount --bind "$cache/debs" "$root/var/cache/apt/archives"
}

# configure_chroot ROOT: apt keeps what it downloads; no daemon a package
# installs is started (the network is the host's; nothing may outlive the
# run); the host's name server, a minimal /etc/hosts.
configure_chroot() {
	local root=$1
	cat >"$root/etc/apt/apt.conf.d/99tether-fresh" <<'CONF'
// tests/fresh/run.sh: the .deb cache is shared between runs.
Binary::apt::APT::Keep-Downloaded-Packages "true";
APT::Keep-Downloaded-Packages "true";
APT::Clean-Installed "false";
CONF
	printf '#!/bin/sh\n# tests/fresh/run.sh: no daemon starts in this chroot\nexit 101\n' \
		>"$root/usr/sbin/policy-rc.d"
	chmod 755 "$root/usr/sbin/policy-rc.d"
	# A second name for 127.0.0.1, as an installed machine has its own
	# name: test_wsclient's hostname-mismatch case needs one, and would
	# otherwise be skipped here.
	printf '127.0.0.1\tlocalhost\n127.0.0.1\ttether-fresh\n::1\t\tlocalhost ip6-localhost ip6-loopback\n' >"$root/etc/hosts"
	cp -L /etc/resolv.conf "$root/etc/resolv.conf"
	chroot_sources "$root"
}

in_chroot() { # in_chroot ROOT CMD...: as root's login environment would be
	local root=$1
	shift
	chroot "$root" /usr/bin/env -i HOME=/root USER=root LOGNAME=root SHELL=/bin/bash \
		TERM=dumb PATH="$chroot_path" "$@"
}

# build_base TARBALL: the cold part.  debootstrap, then git, make and
# ca-certificates with apt, then a tarball (apt's lists left out).
build_base() {
	local tarball=$1 root="$cache/base.tmp"
	if [ -e "$root" ]; then
		no_mounts_under "$root" || cannot "$root is left from an earlier run and has mounts under it"
		rm -rf "$root"
	fi
	mkdir -p "$root"
	local t0=$SECONDS
	say "cold: debootstrap --variant=minbase $suite from $mirror (takes minutes)"
	debootstrap --variant=minbase --arch="$arch" --components="$components" \
		"$suite" "$root" "$mirror" >"$cache/last/debootstrap.log" 2>&1 ||
		{ tail -20 "$cache/last/debootstrap.log" >&2; fail "debootstrap failed (log: $cache/last/debootstrap.log)"; }
	mount_chroot "$root"
	configure_chroot "$root"
	say "cold: adding ${extra_packages[*]}"
	{
		in_chroot "$root" apt-get update -qq &&
			DEBIAN_FRONTEND=noninteractive in_chroot "$root" \
				apt-get install -y -qq --no-install-recommends "${extra_packages[@]}"
	} >"$cache/last/base-apt.log" 2>&1 ||
		{ tail -20 "$cache/last/base-apt.log" >&2; fail "installing ${extra_packages[*]} failed"; }
	umount -R "$root/var/cache/apt/archives" "$root/run" "$root/dev" "$root/sys" "$root/proc"
	no_mounts_under "$root" || fail "mounts left under $root"
	rm -f "$root/etc/apt/apt.conf.d/99tether-fresh" "$root/usr/sbin/policy-rc.d"
	find "$root/var/lib/apt/lists" -maxdepth 1 -type f -delete
	tar -C "$root" --numeric-owner -czf "$tarball.tmp" .
	mv "$tarball.tmp" "$tarball"
	rm -rf "$root"
	say "cold: base ready in $(elapsed $((SECONDS - t0))): $tarball ($(du -h "$tarball" | cut -f1))"
}

# no_mounts_under DIR: true when nothing is mounted at or below DIR in this
# mount namespace.
no_mounts_under() {
	local d
	d=$(realpath "$1")
	! awk -v d="$d" '$5 == d || index($5, d "/") == 1 { found = 1 } END { exit !found }' \
		/proc/self/mountinfo
}

# demo_check ROOT: `make run` in the background, /readyz, an active agent,
# then Ctrl-C; it must stop cleanly.
demo_check() {
	local root=$1 src=/root/tether log=$cache/last/make-run.log
	local ports gw_port kube_port url pgid state=
	ports=$(in_chroot "$root" python3 -c '
import socket
ss = [socket.socket() for _ in range(2)]
for s in ss: s.bind(("127.0.0.1", 0))
print(*[s.getsockname()[1] for s in ss])')
	read -r gw_port kube_port <<<"$ports"
	url=https://127.0.0.1:$gw_port
	say "make run (gateway on $url), in the background"
	# A background job starts with SIGINT ignored; a terminal's would not.
	setsid env --default-signal=INT,QUIT chroot "$root" /usr/bin/env -i HOME=/root USER=root LOGNAME=root SHELL=/bin/bash \
		TERM=dumb PATH="$chroot_path" TETHER_DEMO_URL="$url" \
		TETHER_DEMO_LISTEN="127.0.0.1:$gw_port" TETHER_DEMO_KUBE_PORT="$kube_port" \
		bash -c "cd $src && exec make run" >"$log" 2>&1 </dev/null &
	pgid=$!
	local deadline=$((SECONDS + 300)) ready=0
	while [ $SECONDS -lt $deadline ] && kill -0 "$pgid" 2>/dev/null; do
		if [ $ready -eq 0 ]; then
			in_chroot "$root" curl -sf --cacert "$src/var/gateway/ca.crt" "$url/readyz" \
				>/dev/null 2>&1 && ready=1 && say "ok: the gateway answers $url/readyz"
		else
			state=$(in_chroot "$root" env TETHER_SERVER="$url" \
				TETHER_TOKEN_FILE="$src/var/gateway/admin.token" \
				TETHER_CACERT="$src/var/gateway/ca.crt" \
				"$src/build/bin/tetherctl" -o json agent list 2>/dev/null |
				in_chroot "$root" jq -r '.[] | select(.node == "demo-node") | .state' 2>/dev/null) || true
			[ "$state" = active ] && break
		fi
		sleep 0.2
	done
	if [ "$state" != active ]; then
		kill -INT -- "-$pgid" 2>/dev/null || true
		wait "$pgid" 2>/dev/null || true
		tail -40 "$log" >&2
		[ $ready -eq 1 ] || fail "make run: the gateway never answered /readyz (log: $log)"
		fail "make run: the demo agent did not become active (last state '${state:-none}'; log: $log)"
	fi
	say "ok: tetherctl agent list shows demo-node active"
	kill -INT -- "-$pgid"                   # Ctrl-C, as a user stops it
	deadline=$((SECONDS + 30))
	while kill -0 -- "-$pgid" 2>/dev/null; do
		[ $SECONDS -lt $deadline ] || { kill -KILL -- "-$pgid"; fail "make run did not stop within 30 s of Ctrl-C"; }
		sleep 0.1
	done
	wait "$pgid" 2>/dev/null || true
	grep -q '^gateway | .*stopped' "$log" || { tail -20 "$log" >&2; fail "make run: the gateway did not log a clean stop"; }
	say "ok: make run stopped cleanly on Ctrl-C"
}

inside() {
	local run=$1 root=$1/root
	local base="$cache/base-$suite-$arch-minbase.tar.gz"
	[ -f "$base" ] || build_base "$base"
	local t0=$SECONDS
	mkdir -p "$root"
	if [ "$on_tmpfs" = 1 ]; then
		mount -t tmpfs -o "size=${tmpfs_gb}g,mode=755" tmpfs "$root"
	fi
	tar -C "$root" --numeric-owner -xzf "$base"
	mount_chroot "$root"
	configure_chroot "$root"
	say "unpacked the base in $(elapsed $((SECONDS - t0)))"

	git -c safe.directory='*' clone --quiet "$top" "$root/root/tether"
	git -c safe.directory='*' -C "$root/root/tether" checkout --quiet --detach "$head"
	say "cloned $head into /root/tether"

	t0=$SECONDS
	say "make test (as root in the chroot; all output below)"
	local rc=0
	timeout "$make_timeout" chroot "$root" /usr/bin/env -i HOME=/root USER=root LOGNAME=root \
		SHELL=/bin/bash TERM=dumb PATH="$chroot_path" bash -c 'cd /root/tether && make test' \
		</dev/null 2>&1 | tee "$cache/last/make-test.log" || rc=$?   # pipefail: timeout's status
	[ "$rc" -ne 124 ] || fail "make test did not finish within ${make_timeout}s"
	[ "$rc" -eq 0 ] || fail "make test failed on the fresh machine (exit $rc; log: $cache/last/make-test.log)"
	say "ok: make test passed in $(elapsed $((SECONDS - t0)))"

	t0=$SECONDS
	demo_check "$root"
	say "make run checked in $(elapsed $((SECONDS - t0)))"
	# Busy only if a process still runs in the chroot: the caller reports it,
	# and the mounts go with the namespace when its last process ends.
	{
		umount -R "$root/var/cache/apt/archives" "$root/run" "$root/dev" "$root/sys" "$root/proc" &&
			{ [ "$on_tmpfs" = 0 ] || umount "$root"; }
	} || say "could not unmount everything under $root (still in use)"
}

# --- outside: checks, then the namespace, then the clean-up ------------------

# leftovers ROOT: PIDs of processes whose root directory is ROOT.
leftovers() {
	local p r
	for p in /proc/[0-9]*; do
		r=$(readlink "$p/root" 2>/dev/null) || continue
		[ "$r" = "$1" ] && echo "${p#/proc/}"
	done
	return 0
}

# remove_run RUN: removes a run's directory, only when nothing is mounted
# under it and no process lives in it.
remove_run() {
	local run=$1 pids
	pids=$(leftovers "$run/root")
	if [ -n "$pids" ]; then
		say "processes still running in $run/root: $(echo $pids)"
		return 1
	fi
	if ! no_mounts_under "$run"; then
		say "not removing $run: something is mounted under it"
		return 1
	fi
	rm -rf "$run"
}

preflight() {
	[ "$(id -u)" -eq 0 ] || cannot "needs root (debootstrap, chroot and mounts): run it as root, or with sudo"
	local c missing=()
	for c in unshare chroot setsid flock git curl tar timeout; do
		command -v "$c" >/dev/null || missing+=("$c")
	done
	[ ${#missing[@]} -eq 0 ] || cannot "missing on this machine: ${missing[*]} (run 'make setup' first)"
	if ! command -v debootstrap >/dev/null; then
		say "installing debootstrap on this machine (apt-get)"
		DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends debootstrap \
			>/dev/null || cannot "debootstrap is missing and apt-get could not install it"
	fi
	case $cache/ in "$top"/*) cannot "TETHER_FRESH_CACHE ($cache) must be outside the clone ($top)" ;; esac
	[[ $make_timeout =~ ^[0-9]+$ ]] || cannot "TETHER_FRESH_TIMEOUT must be whole seconds, got '$make_timeout'"
	[[ $tmpfs_gb =~ ^[0-9]+$ ]] || cannot "TETHER_FRESH_TMPFS_GB must be whole GiB, got '$tmpfs_gb'"

	head=$(git -c safe.directory='*' -C "$top" rev-parse --verify HEAD) ||
		cannot "$top is not a git clone with a commit"
	[ -z "$(git -c safe.directory='*' -C "$top" status --porcelain --untracked-files=no)" ] ||
		say "note: uncommitted changes are not tested, only HEAD ($head)"

	local line
	line=$(debian_sources | awk -F'\t' -v s="$suite" '$2 == s && $1 ~ /^(https?|ftp):/ { print; exit }')
	[ -n "$line" ] || cannot "no '$suite' entry in this machine's apt sources (/etc/apt/sources.list, /etc/apt/sources.list.d/*.list, *.sources)"
	mirror=$(cut -f1 <<<"$line")
	components=$(cut -f3 <<<"$line" | tr ' ' ,)
	curl -sfI --max-time 20 "${mirror%/}/dists/$suite/Release" >/dev/null ||
		cannot "the Debian mirror $mirror (from this machine's apt sources) is unreachable"
	say "mirror $mirror ($suite, $components); cache $cache"
}

# choose_root_fs: on_tmpfs=1 when the run's root can be a tmpfs (see the
# header), else 0.
choose_root_fs() {
	local avail_gb
	avail_gb=$(awk '/^MemAvailable:/ { print int($2 / 1048576) }' /proc/meminfo)
	on_tmpfs=0
	if [ "$tmpfs_gb" -gt 0 ] && [ "$keep" != 1 ] && [ "$avail_gb" -ge $((tmpfs_gb + 4)) ]; then
		on_tmpfs=1
		say "root filesystem: a tmpfs of at most $tmpfs_gb GiB ($avail_gb GiB of memory available)"
	else
		say "root filesystem: on disk under $cache/runs ($avail_gb GiB of memory available)"
	fi
}

main() {
	preflight
	mkdir -p "$cache/debs" "$cache/runs" "$cache/last"
	# One run at a time on this machine: runs share the base, the .deb
	# cache (apt would refuse a second user of it) and last/.
	exec 8>"$cache/run.lock"
	if ! flock -n 8; then
		say "waiting for another make test-fresh on this machine to finish"
		flock 8
	fi
	choose_root_fs
	local r
	for r in "$cache"/runs/run.*; do     # roots left by interrupted runs
		[ -d "$r" ] || continue
		remove_run "$r" && say "removed $r, left by an earlier run" || true
	done
	local run t0=$SECONDS rc=0
	run=$(realpath "$(mktemp -d "$cache/runs/run.XXXXXX")")
	export head mirror components on_tmpfs
	unshare --mount --propagation private -- bash "$self" --inside "$run" || rc=$?
	local pids
	pids=$(leftovers "$run/root")
	if [ -n "$pids" ]; then
		say "FAIL: the run left processes behind in the chroot; stopping them:"
		for p in $pids; do
			say "  $p $(tr '\0' ' ' <"/proc/$p/cmdline" 2>/dev/null)"
			kill -KILL "$p" 2>/dev/null || true
		done
		rc=1
	fi
	if [ "$keep" = 1 ]; then
		say "kept $run/root (TETHER_FRESH_KEEP=1); remove it with: rm -rf $run"
	else
		for _ in 1 2 3 4 5 6 7 8 9 10; do
			[ -z "$(leftovers "$run/root")" ] && break
			sleep 0.5
		done
		remove_run "$run" || say "left $run in place; the next run removes it"
	fi
	if [ "$rc" -eq 0 ]; then
		say "PASS: the two commands work on a fresh Debian 12 ($(elapsed $((SECONDS - t0))) in all)"
	else
		say "FAILED after $(elapsed $((SECONDS - t0))); logs in $cache/last/"
	fi
	exit "$rc"
}

# One compound command, parsed whole before it runs, that always exits: bash
# reads a script as it goes, so nothing after it is read from a file that may
# have changed meanwhile (a `git checkout` during a long run).
if [ "${1:-}" = --inside ]; then
	[ $# -eq 2 ] || cannot "usage: $0 --inside RUNDIR (internal)"
	inside "$2"
	exit 0
else
	[ $# -eq 0 ] || { echo "usage: $0 (no arguments; see the header for the environment)" >&2; exit 2; }
	main
	exit
fi
