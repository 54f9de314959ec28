#!/usr/bin/env bash
# The Debian package: built from the release build with CPack (as `make deb`
# does; or TETHER_DEB=FILE takes a built one), lintian-clean (no error, no
# warning), installed with `dpkg -i`: the binaries run from /usr/bin, the
# man pages, the users tether and tether-client and their state directories
# are there, and tether can initialise a gateway data dir; then `dpkg
# --purge` leaves none of it.  This installs into the real /usr, so runs are serialised by a
# lock and the package is purged however the test ends.
source "$(dirname "$0")/lib.sh"

as_root=()
[ "$(id -u)" -eq 0 ] || as_root=(sudo -n)

release=$TETHER_SRC/build/release
deb=${TETHER_DEB:-}
if [ -z "$deb" ]; then
	[ -f "$release/CPackConfig.cmake" ] ||
		fail "no release build in $release: run 'make build' (make test does)"
	(cd "$release" && cpack -G DEB -B "$T/deb") >"$T/cpack.log" 2>&1 ||
		{ cat "$T/cpack.log" >&2; fail "cpack -G DEB failed"; }
	deb=$(ls "$T"/deb/tether_*.deb)
fi
[ -f "$deb" ] || fail "no package at $deb"
if [ -z "${TETHER_DEB:-}" ]; then
	# cmake --install with the same rules, staged: the usual places (prefix /usr,
	# as the Makefile configures build/release).
	DESTDIR=$T/stage cmake --install "$release" >"$T/install.log" 2>&1 ||
		{ cat "$T/install.log" >&2; fail "cmake --install failed"; }
	for f in usr/bin/tether-gateway usr/bin/tether-client usr/bin/tetherctl \
		usr/share/man/man1/tetherctl.1.gz usr/share/man/man5/tether.conf.5.gz \
		usr/share/man/man8/tether-gateway.8.gz usr/share/man/man8/tether-client.8.gz \
		usr/share/doc/tether/interface.md etc/tether/prometheus/tether.rules.yml \
		var/lib/tether var/lib/tether-client; do
		[ -e "$T/stage/$f" ] || fail "cmake --install did not install /$f"
	done
	for p in gateway client; do
		[ ! -f "$TETHER_SRC/config/$p.conf.example" ] || [ -f "$T/stage/etc/tether/$p.conf" ] ||
			fail "cmake --install did not install /etc/tether/$p.conf"
	done
	for f in "$TETHER_SRC"/config/systemd/*.service; do
		[ -f "$f" ] || continue
		[ -f "$T/stage/usr/lib/systemd/system/$(basename "$f")" ] ||
			fail "cmake --install did not install /usr/lib/systemd/system/$(basename "$f")"
	done
	pass "cmake --install (DESTDIR): /usr/bin, /usr/share/man, /etc/tether, /usr/lib/systemd/system, /var/lib"
fi
pass "package: $(basename "$deb") ($(stat -c %s "$deb") bytes)"

# lintian prints nothing for a clean package (overrides are shown as O:).
lintian --pedantic -I --show-overrides "$deb" >"$T/lintian.txt" 2>"$T/lintian.err" || true
grep -E '^[EW]: ' "$T/lintian.txt" && fail "lintian reports errors or warnings (above)"
log "lintian: $(grep -cE '^[EWIPXO]: ' "$T/lintian.txt" || true) tag(s), overrides included"
sed 's/^/    /' "$T/lintian.txt" >&2
pass "lintian: no error, no warning"

# One run at a time on this machine: the package goes into the real /usr.
exec 9>/tmp/tether-deb-test.lock
flock 9

# dpkg refuses at once while apt or another dpkg holds its lock: wait for
# that (the lock is a resource, not the thing under test).
dpkg_run() {
	local tries=0
	until "${as_root[@]}" dpkg "$@" >"$T/dpkg.log" 2>&1; do
		grep -q 'lock' "$T/dpkg.log" || { cat "$T/dpkg.log" >&2; return 1; }
		tries=$((tries + 1))
		[ "$tries" -lt 600 ] || { cat "$T/dpkg.log" >&2; return 1; }
		sleep 0.2
	done
}
on_cleanup 'dpkg-query -W tether >/dev/null 2>&1 && dpkg_run --purge tether'

dpkg_run -i "$deb" || fail "dpkg -i $deb"
[ "$(dpkg-query -W -f='${Status}' tether)" = "install ok installed" ] ||
	fail "tether is not installed after dpkg -i"
out=$(/usr/bin/tether-gateway --version)
[[ "$out" == *"$(dpkg-query -W -f='${Version}' tether | cut -d- -f1)"* ]] ||
	fail "/usr/bin/tether-gateway --version says: $out"
/usr/bin/tether-client --version >/dev/null || fail "/usr/bin/tether-client --version"
/usr/bin/tetherctl --version >/dev/null || fail "/usr/bin/tetherctl --version"
pass "dpkg -i: /usr/bin/tether-gateway --version: $out"

for page in tether-gateway.8 tether-client.8 tetherctl.1 tether.conf.5; do
	man -w "${page%.*}" 2>/dev/null | grep -q "/usr/share/man/man${page##*.}/$page.gz" ||
		fail "man page $page is not installed"
done
for u in tether:/var/lib/tether tether-client:/var/lib/tether-client; do
	user=${u%%:*} dir=${u#*:}
	getent passwd "$user" >/dev/null || fail "no $user user after install"
	[ "$(stat -c '%U:%G %a' "$dir")" = "$user:$user 700" ] ||
		fail "$dir: $(stat -c '%U:%G %a' "$dir"), want $user:$user 700"
done
for f in "$TETHER_SRC"/config/systemd/*.service; do
	[ -f "$f" ] || continue
	cmp -s "$f" "/usr/lib/systemd/system/$(basename "$f")" ||
		fail "$(basename "$f") is not installed in /usr/lib/systemd/system"
done
for p in gateway client; do
	[ -f "$TETHER_SRC/config/$p.conf.example" ] || continue
	dpkg-query -W -f='${Conffiles}\n' tether | grep -q "/etc/tether/$p.conf " ||
		fail "/etc/tether/$p.conf is not a conffile"
done
dpkg-query -W -f='${Conffiles}\n' tether | grep -q "/etc/tether/prometheus/tether.rules.yml " ||
	fail "/etc/tether/prometheus/tether.rules.yml (the alerting rules) is not a conffile"
if [ -f "$TETHER_SRC/config/systemd/tether.sysusers.conf" ]; then
	cmp -s "$TETHER_SRC/config/systemd/tether.sysusers.conf" /usr/lib/sysusers.d/tether.conf ||
		fail "/usr/lib/sysusers.d/tether.conf is not installed"
fi
pass "man pages, users tether and tether-client, their state directories (0700), units and conffiles"

port=$(free_port)
runuser -u tether -- /usr/bin/tether-gateway init --data-dir /var/lib/tether \
	--url "https://127.0.0.1:$port" >"$T/init.out" 2>&1 ||
	{ cat "$T/init.out" >&2; fail "the tether user cannot init /var/lib/tether"; }
[ "$(stat -c %U /var/lib/tether/admin.token)" = tether ] ||
	fail "admin.token is not the tether user's"
pass "the tether user initialises the gateway's data dir"

# Installing over it (postinst configure with the old version, as an
# upgrade does) keeps the state and its owner.
sum=$(sha256sum /var/lib/tether/admin.token)
dpkg_run -i "$deb" || fail "dpkg -i over the installed package"
[ "$(sha256sum /var/lib/tether/admin.token)" = "$sum" ] ||
	fail "reinstalling changed /var/lib/tether/admin.token"
[ "$(stat -c '%U %a' /var/lib/tether)" = "tether 700" ] ||
	fail "reinstalling changed /var/lib/tether: $(stat -c '%U %a' /var/lib/tether)"
pass "installing over it keeps the gateway's data dir"

dpkg_run --purge tether || fail "dpkg --purge tether"
dpkg-query -W -f='${Status}' tether 2>/dev/null | grep -q installed &&
	fail "tether still installed after purge"
for f in /usr/bin/tether-gateway /usr/bin/tether-client /usr/bin/tetherctl \
	/usr/share/man/man8/tether-gateway.8.gz /var/lib/tether /var/lib/tether-client /etc/tether \
	/usr/share/doc/tether; do
	[ ! -e "$f" ] || fail "$f is still there after dpkg --purge"
done
pass "dpkg --purge: binaries, man pages, state and configuration are gone"
