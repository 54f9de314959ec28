#!/usr/bin/env bash
# old_build.sh: the release of an earlier commit, built from this
# repository's git history, for the version-skew test (test_skew.sh,
# docs/0037-version-skew.md).
#
#   bash tests/tools/old_build.sh [COMMIT]       (default: $TETHER_OLD_COMMIT
#                                                 or 692108b)
#
# Builds the agent, the gateway and tetherctl of COMMIT as a release build
# in build/old-COMMIT/ (the tree from `git archive`, configured there, only
# those three targets) and prints the directory holding the three binaries
# (build/old-COMMIT/build/bin).  Built once: a later call finds the stamp and
# returns at once.  Holds build/old-COMMIT.lock while it works, so `make
# test` and a test started by hand never build into the same directory.
# Exit 1 with a plain reason when the commit is not in the history (a
# shallow clone, an exported tarball): the skew test cannot run without it.
set -euo pipefail

top=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
commit=${1:-${TETHER_OLD_COMMIT:-692108b}}
git_() { git -c safe.directory='*' -C "$top" "$@"; }

fail() { printf 'old_build: %s\n' "$*" >&2; exit 1; }

command -v git >/dev/null || fail "git is not installed: the skew test builds commit $commit from git history"
git_ rev-parse --git-dir >/dev/null 2>&1 ||
	fail "$top is not a git checkout: the skew test builds commit $commit from git history (use a full git clone)"
full=$(git_ rev-parse --verify --quiet "$commit^{commit}") ||
	fail "commit $commit is not in this clone's history (shallow clone?): run 'git fetch --unshallow' or use a full 'git clone'"

dir=$top/build/old-$commit
bin=$dir/build/bin
mkdir -p "$top/build"
exec 9>"$top/build/old-$commit.lock"
flock 9

if [ -f "$dir/built" ] && [ "$(cat "$dir/built")" = "$full" ]; then
	echo "$bin"
	exit 0
fi

rm -rf "$dir"
mkdir -p "$dir/src"
git_ archive --format=tar "$full" | tar -x -C "$dir/src"
start=$(date +%s)
printf 'old_build: building %s (release) in %s\n' "${full:0:12}" "$dir" >&2
# -O2 as the release build; -w: a newer compiler's new warnings must not
# stop a fixed old tree (built with -Werror) from building.
cmake -S "$dir/src" -B "$dir/build" -DCMAKE_BUILD_TYPE=Release \
	-DCMAKE_C_FLAGS_RELEASE="-O2 -DNDEBUG" -DCMAKE_C_FLAGS="-w" >"$dir/configure.log" 2>&1 ||
	{ tail -20 "$dir/configure.log" >&2; fail "configuring $commit failed (log: $dir/configure.log)"; }
cmake --build "$dir/build" -j"${JOBS:-$(nproc)}" \
	--target tether-client tether-gateway tetherctl >"$dir/build.log" 2>&1 ||
	{ tail -30 "$dir/build.log" >&2; fail "building $commit failed (log: $dir/build.log)"; }
for b in tether-client tether-gateway tetherctl; do
	[ -x "$bin/$b" ] || fail "building $commit left no $bin/$b"
done
echo "$full" >"$dir/built"
printf 'old_build: built %s in %d s\n' "${full:0:12}" $(($(date +%s) - start)) >&2
echo "$bin"
