#!/usr/bin/env bash
# test_layers.sh: every symbol a layer of the gateway uses is defined in
# that layer, in a layer below it (gateway/CMakeLists.txt, tether_layer),
# or outside the gateway (common/, auth/, the libraries): never in a layer
# above it or beside it.  The include path already refuses an upward
# #include; this catches a prototype written by hand, or a call that
# reaches up through a name no header declares.
#
# Arguments: one NAME=ARCHIVE=BELOW,BELOW... per layer (CMake passes them).
# Exit 0 when every layer keeps to its floor; 1 with each offending
# (layer, symbol, defining layer) printed.
set -euo pipefail

declare -A archive below
for arg in "$@"; do
	IFS='=' read -r name path allowed <<<"$arg"
	archive[$name]=$path
	below[$name]=${allowed//,/ }
done
[ ${#archive[@]} -ge 2 ] || { echo "test_layers: no layers given" >&2; exit 1; }

# The layers a layer may use: those it names and, through them, theirs.
closure() {
	local todo=("$1") seen=" " l b
	while [ ${#todo[@]} -gt 0 ]; do
		l=${todo[0]}; todo=("${todo[@]:1}")
		for b in ${below[$l]}; do
			case "$seen" in *" $b "*) ;; *) seen="$seen$b "; todo+=("$b") ;; esac
		done
	done
	printf '%s' "$seen"
}

defs=$(mktemp); trap 'rm -f "$defs"' EXIT
for name in "${!archive[@]}"; do
	nm --defined-only -g "${archive[$name]}" 2>/dev/null |
		awk -v l="$name" 'NF == 3 && $2 ~ /[TDBRC]/ { print $3, l }'
done | sort >"$defs"

bad=0
for name in "${!archive[@]}"; do
	ok=" $name$(closure "$name")"
	while read -r sym; do
		owner=$(awk -v s="$sym" '$1 == s { print $2; exit }' "$defs")
		[ -n "$owner" ] || continue            # outside the gateway
		case "$ok" in *" $owner "*) ;; *)
			echo "layer $name uses $sym, defined in layer $owner (not below it)"
			bad=1 ;;
		esac
	done < <(nm -u "${archive[$name]}" 2>/dev/null | awk '$1 == "U" { print $2 }' | sort -u)
done
[ $bad -eq 0 ] && echo "test_layers: ${#archive[@]} layers, every symbol used from the same layer or below"
exit $bad
