# shellcheck shell=bash
# loops.sh: a gateway's per-loop figures (--workers) from its /metrics, for
# the benchmarks to source (one reader, one format).
#
#   loops_read URL        one line of words: "L=handshakes/cpu_s/tunnels" per
#                         loop L (tether_loop_tls_handshakes_total,
#                         tether_loop_cpu_seconds_total, tether_loop_tunnels;
#                         "-" where a series is absent) and
#                         "F>T=streams/bytes" per link from loop F to loop T
#                         that carried a stream (tether_loop_link_*_total).
#                         Empty if the metrics cannot be read.
#   loops_delta A B       B - A for the counters (handshakes, CPU, streams,
#                         bytes); tunnels as in B.  Same format.
#   loops_cpu_line READ   "0: 1.2 s, 1: 0.4 s" (each loop's CPU) of a read.
#   loops_link_line READ  "0>1: 8 streams, 512.0 MiB; ..." or "none".
#   loops_rows READ LABEL Markdown rows "| LABEL | loop L | handshakes |
#                         CPU s | tunnels |", then "| LABEL | link F -> T |
#                         streams | MiB |" rows.
# Needs curl and awk.

loops_read() {
	curl -sf "$1" 2>/dev/null | awk '
		function lab(s, k,   a) { if (match(s, k "=\"[0-9]+\"")) { a = substr(s, RSTART, RLENGTH); gsub(/[^0-9]/, "", a); return a } return "" }
		/^tether_loop_tls_handshakes_total\{/ { h[lab($1, "loop")] = $2 }
		/^tether_loop_cpu_seconds_total\{/ { c[lab($1, "loop")] = $2; h[lab($1, "loop")] += 0 }
		/^tether_loop_tunnels\{/ { t[lab($1, "loop")] = $2 }
		/^tether_loop_link_streams_total\{/ { k = lab($1, "from") ">" lab($1, "to"); ls[k] = $2 }
		/^tether_loop_link_bytes_total\{/ { k = lab($1, "from") ">" lab($1, "to"); lb[k] = $2 }
		END {
			for (l in h) printf "%s=%d/%.3f/%s\n", l, h[l], c[l], (l in t ? t[l] : "-")
			for (k in ls) if (ls[k] > 0) printf "%s=%d/%d\n", k, ls[k], lb[k]
		}' | sort -n | tr '\n' ' '
}

loops_delta() {
	awk -v a="$1" -v b="$2" 'BEGIN {
		n = split(a, wa, " "); for (i = 1; i <= n; i++) { split(wa[i], kv, "="); A[kv[1]] = kv[2] }
		n = split(b, wb, " ")
		for (i = 1; i <= n; i++) {
			split(wb[i], kv, "="); split(kv[2], v, "/"); split((kv[1] in A) ? A[kv[1]] : "", u, "/")
			if (index(kv[1], ">")) printf "%s=%d/%d ", kv[1], v[1] - u[1], v[2] - u[2]
			else printf "%s=%d/%.3f/%s ", kv[1], v[1] - u[1], v[2] - u[2], v[3]
		}
	}'
}

loops_cpu_line() {
	tr ' ' '\n' <<<"$1" | awk -F'[=/]' '$1 ~ /^[0-9]+$/ { printf "%s%s: %.1f s", (n++ ? ", " : ""), $1, $3 } END { print (n ? "" : "-") }'
}

loops_link_line() {
	tr ' ' '\n' <<<"$1" | awk -F'[=/]' '$1 ~ />/ { printf "%s%s: %d streams, %.1f MiB", (n++ ? "; " : ""), $1, $2, $3 / 1048576 } END { print (n ? "" : "none") }'
}

loops_rows() {
	tr ' ' '\n' <<<"$1" | awk -F'[=/]' -v label="$2" '
		$1 ~ /^[0-9]+$/ { printf "| %s | loop %s | %d | %.2f | %s |\n", label, $1, $2, $3, $4 }
		$1 ~ />/ { split($1, ft, ">"); printf "| %s | link %s -> %s | %d streams | %.1f MiB |\n", label, ft[1], ft[2], $2, $3 / 1048576 }'
}
