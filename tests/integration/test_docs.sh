#!/usr/bin/env bash
# The documents keep their shape (issue 18): README.md is a short front
# page (at most 300 lines, the two commands in view) whose index links every
# decision note docs/00NN-*.md; every link in README.md and docs/*.md to a
# file of this repository resolves, and none leaves it; and README, docs/
# and the man pages point at nothing outside the repository (../shared).
# Starts nothing: it reads the tree.
source "$(dirname "$0")/lib.sh"

SRC=$(cd "$TETHER_SRC" && pwd -P)
README=$SRC/README.md
[ -f "$README" ] || fail "no README.md in $SRC"

# At most 300 lines: long material lives in docs/ and is linked from it.
lines=$(wc -l <"$README")
[ "$lines" -le 300 ] || fail "README.md has $lines lines; at most 300 (move the material to docs/ and link it)"
pass "README.md has $lines lines (at most 300)"

# The two commands stay in view.
for cmd in 'make run' 'make test'; do
	grep -qE "$cmd([^-[:alnum:]]|\$)" "$README" || fail "README.md no longer shows \`$cmd\`"
done
pass "README.md shows make run and make test"

# links FILE: the targets of the Markdown links [text](target) in FILE,
# one per line (fenced code blocks left out).
links() {
	awk '/^[[:space:]]*```/ { code = !code; next } !code { print }' "$1" |
		grep -oE '\]\([^)[:space:]]+\)' | sed -E 's/^\]\((.*)\)$/\1/' || true
}

# Every decision note is in the README's index.
missing=()
n=0
for note in "$SRC"/docs/00[0-9][0-9]-*.md; do
	[ -f "$note" ] || continue
	n=$((n + 1))
	rel=docs/$(basename "$note")
	links "$README" | grep -qxF "$rel" || missing+=("$rel")
done
[ "$n" -gt 0 ] || fail "no decision notes docs/00NN-*.md found"
[ "${#missing[@]}" -eq 0 ] || fail "README.md's index of decision notes lacks: ${missing[*]}"
pass "README.md links all $n decision notes"

# Every link to a file of the repository resolves, inside the repository.
bad=()
checked=0
for doc in "$README" "$SRC"/docs/*.md; do
	dir=$(dirname "$doc")
	while IFS= read -r target; do
		case $target in
		http://* | https://* | mailto:* | '#'*) continue ;;
		esac
		path=${target%%#*}
		[ -n "$path" ] || continue
		checked=$((checked + 1))
		full=$(realpath -m "$dir/$path")
		case $full in
		"$SRC" | "$SRC"/*) ;;
		*) bad+=("${doc#"$SRC"/}: $target (outside the repository)"); continue ;;
		esac
		[ -e "$full" ] || bad+=("${doc#"$SRC"/}: $target (no such file)")
	done < <(links "$doc")
done
if [ "${#bad[@]}" -gt 0 ]; then
	printf '  %s\n' "${bad[@]}" >&2
	fail "${#bad[@]} broken link(s) in README.md or docs/ (above)"
fi
pass "all $checked links to repository files in README.md and docs/ resolve inside it"

# The product documents itself: nothing names the workspace around it.
if grep -rnE '\.\./shared' "$README" "$SRC/docs" "$SRC/man" >"$T/outside.txt"; then
	cat "$T/outside.txt" >&2
	fail "README, docs/ or man/ point at ../shared (above)"
fi
pass "README, docs/ and man/ point at nothing outside the repository"
