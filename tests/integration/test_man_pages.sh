#!/usr/bin/env bash
# The man pages (man/): they render without a warning (groff -wall, mandoc
# -Tlint, man -l), and they stay in step with the programs: every flag a
# program's --help texts name is an option entry (.TP) of its page, and every
# option entry of the page is a flag of the program; docs/interface.md names
# every flag as well.  tether.conf(5) lists
# exactly the keys of config/gateway.conf.example and client.conf.example.
source "$(dirname "$0")/lib.sh"

MAN=$TETHER_SRC/man
pages=(tether-gateway.8 tether-client.8 tetherctl.1 tether.conf.5)

for p in "${pages[@]}"; do
	f=$MAN/$p
	[ -f "$f" ] || fail "missing man page $f"
	groff -man -wall -z "$f" 2>"$T/groff.err" || true
	[ ! -s "$T/groff.err" ] || { cat "$T/groff.err" >&2; fail "$p: groff warnings"; }
	mandoc -Tlint -W warning "$f" >"$T/mandoc.err" 2>&1 || true
	[ ! -s "$T/mandoc.err" ] || { cat "$T/mandoc.err" >&2; fail "$p: mandoc -Tlint warnings"; }
	LC_ALL=C.UTF-8 MANWIDTH=80 man --warnings -l "$f" >"$T/page.txt" 2>"$T/man.err" || true
	[ ! -s "$T/man.err" ] || { cat "$T/man.err" >&2; fail "$p: man -l warnings"; }
	grep -q '^NAME' "$T/page.txt" || fail "$p: man -l rendered no NAME section"
done
pass "the four man pages render without warnings (groff -wall, mandoc -Tlint, man -l)"

# help_flags OTHER_PROGRAM_RE CMD... : the --flags in the --help texts of
# CMD (each invocation one line "ARGS..."), one per line, sorted; lines that
# name another program (examples of it) are left out.
help_flags() {
	local other=$1 inv
	shift
	for inv in "$@"; do
		# shellcheck disable=SC2086
		$inv
	done | grep -vE "$other" |
		grep -oE -- '(^|[^a-zA-Z0-9-])--[a-z][a-z0-9-]*' |
		sed 's/^[^-]*//' | sort -u
}

# man_flags PAGE: the --flags on the tag lines of the page's .TP entries.
man_flags() {
	sed -n '/^\.TP/{n;p;}' "$1" | sed 's/\\-/-/g' |
		grep -oE -- '--[a-z][a-z0-9-]*' | sort -u
}

# same_flags NAME PAGE HELP_FILE: both ways, with a message saying what to fix.
same_flags() {
	local name=$1 page=$2 help=$3
	man_flags "$MAN/$page" >"$T/man.flags"
	[ -s "$help" ] || fail "$name: no flags found in its --help output"
	local missing extra
	missing=$(comm -23 "$help" "$T/man.flags" | tr '\n' ' ')
	extra=$(comm -13 "$help" "$T/man.flags" | tr '\n' ' ')
	[ -z "$missing" ] || fail "$name --help has $missing but man/$page has no .TP entry for it: document it there"
	[ -z "$extra" ] || fail "man/$page documents $extra but $name --help does not list it"
}

help_flags 'tetherctl|tether-client' \
	"$GATEWAY --help" "$GATEWAY init --help" "$GATEWAY serve --help" \
	"$GATEWAY cert --help" "$GATEWAY ca --help" >"$T/gw.flags"
same_flags tether-gateway tether-gateway.8 "$T/gw.flags"
help_flags 'tetherctl|tether-gateway' \
	"$CLIENT --help" "$CLIENT join --help" "$CLIENT run --help" \
	"$CLIENT status --help" >"$T/client.flags"
same_flags tether-client tether-client.8 "$T/client.flags"
help_flags 'tether-client|tether-gateway|kubectl' \
	"$CTL --help" "$CTL cluster --help" "$CTL token --help" "$CTL agent --help" \
	"$CTL user --help" "$CTL kubeconfig --help" "$CTL connect --help" \
	"$CTL forward --help" "$CTL status --help" >"$T/ctl.flags"
same_flags tetherctl tetherctl.1 "$T/ctl.flags"
pass "each man page documents exactly the flags its program's --help lists ($(wc -l <"$T/gw.flags"), $(wc -l <"$T/client.flags"), $(wc -l <"$T/ctl.flags"))"

# docs/interface.md names every flag of every program too.
grep -oE -- '--[a-z][a-z0-9-]*' "$TETHER_SRC/docs/interface.md" | sort -u >"$T/doc.flags"
sort -u "$T/gw.flags" "$T/client.flags" "$T/ctl.flags" | grep -vxE -- '--help|--version' >"$T/all.flags"
missing=$(comm -23 "$T/all.flags" "$T/doc.flags" | tr '\n' ' ')
[ -z "$missing" ] || fail "docs/interface.md does not name $missing (a flag in some --help)"
pass "docs/interface.md names every flag the programs' --help lists"

# man_keys SECTION: the keys of tether.conf(5)'s .TP entries in SECTION.
man_keys() {
	sed -n "/^\.SH $1/,/^\.SH /p" "$MAN/tether.conf.5" |
		sed -n '/^\.TP/{n;p;}' | sed 's/\\-/-/g; s/^\.B //' | sort -u
}

# example_keys FILE: the keys an example file sets (key = value lines).
example_keys() {
	grep -oE '^[a-z][a-z0-9-]*[[:space:]]*=' "$1" |
		sed -E 's/[[:space:]]*=$//' | sort -u
}

checked=0
for pair in "gateway:GATEWAY KEYS" "client:CLIENT KEYS"; do
	ex=$TETHER_SRC/config/${pair%%:*}.conf.example
	[ -f "$ex" ] || continue
	man_keys "${pair#*:}" >"$T/man.keys"
	example_keys "$ex" >"$T/ex.keys"
	[ -s "$T/man.keys" ] || fail "tether.conf.5 has no entries under ${pair#*:}"
	missing=$(comm -23 "$T/ex.keys" "$T/man.keys" | tr '\n' ' ')
	extra=$(comm -13 "$T/ex.keys" "$T/man.keys" | tr '\n' ' ')
	[ -z "$missing" ] || fail "$ex has keys $missing that man/tether.conf.5 (${pair#*:}) does not document"
	[ -z "$extra" ] || fail "man/tether.conf.5 (${pair#*:}) documents $extra, not in $ex"
	checked=$((checked + 1))
done
if [ "$checked" -gt 0 ]; then
	pass "tether.conf(5) documents exactly the keys of the $checked example file(s)"
else
	log "no config/*.conf.example yet: tether.conf(5) keys not compared"
fi
