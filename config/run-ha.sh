#!/usr/bin/env bash
# run-ha.sh: what `make run-ha` does (docs/0023).  Starts, on loopback, a
# private PostgreSQL, three gateway replicas sharing it (each with a peer
# listener), Debian's haproxy in front of them (TCP, TLS passed through,
# round robin, /readyz checks) and one tunnel client on this machine joined
# through haproxy; prints how to kill a replica and watch the agent move.
# Everything lives in a fresh temporary directory; Ctrl-C stops it all
# cleanly and removes it.  Ports: TETHER_HA_PORT (haproxy, default 8444) and
# the nine after it (three replicas, their peer ports, PostgreSQL).
set -euo pipefail

top=$(cd "$(dirname "$0")/.." && pwd)
bin=$top/build/bin
base=${TETHER_HA_PORT:-8444}
lb_port=$base
url=https://127.0.0.1:$lb_port
pg_port=$((base + 7))
kube_port=$((base + 8))

say() { printf '\033[1m%s\033[0m\n' "$*"; }
command -v haproxy >/dev/null || { echo "haproxy is not installed: run config/setup.sh" >&2; exit 1; }
pg_bin=$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -1)
[ -n "$pg_bin" ] || { echo "PostgreSQL is not installed: run config/setup.sh" >&2; exit 1; }

dir=$(mktemp -d "${TMPDIR:-/tmp}/tether-ha.XXXXXX")
# initdb and postgres refuse to run as root: as root they run as postgres.
pg_as=()
mkdir -p "$dir/pg"
if [ "$(id -u)" = 0 ]; then
	chmod 711 "$dir"
	chown postgres "$dir/pg"
	pg_as=(runuser -u postgres --)
fi
gw_dir=$dir/gateway
export TETHER_SERVER=$url TETHER_TOKEN_FILE=$gw_dir/admin.token TETHER_CACERT=$gw_dir/ca.crt
ctl() { "$bin/tetherctl" -o json "$@"; }

# label NAME: prefixes each line with NAME; ignores Ctrl-C and ends with its writer.
label() { trap '' INT TERM; exec sed -u "s/^/$1 | /"; }

pids=()
declare -A rpid=()
stop() {
	trap - INT TERM EXIT
	say "== stopping"
	# The agent first, then haproxy, then the replicas: none waits on a drain.
	local i
	for ((i = ${#pids[@]} - 1; i >= 0; i--)); do
		kill -TERM "${pids[$i]}" 2>/dev/null || true
		wait "${pids[$i]}" 2>/dev/null || true
	done
	"${pg_as[@]}" "$pg_bin/pg_ctl" -D "$dir/pg/db" -m fast -w stop >/dev/null 2>&1 || true
	rm -rf "$dir"
}
trap stop INT TERM EXIT

wait_for() { # wait_for WHAT CMD...: up to 30 s
	local what=$1
	shift
	for _ in $(seq 1 600); do
		"$@" >/dev/null 2>&1 && return 0
		sleep 0.05
	done
	echo "timed out waiting for $what" >&2
	exit 1
}

say "== a private PostgreSQL on 127.0.0.1:$pg_port (data in $dir/pg)"
"${pg_as[@]}" "$pg_bin/initdb" -D "$dir/pg/db" -A trust -U postgres >"$dir/pg-initdb.log" 2>&1
"${pg_as[@]}" "$pg_bin/pg_ctl" -D "$dir/pg/db" -w -l "$dir/pg/log" \
	-o "-p $pg_port -k $dir/pg -c listen_addresses=127.0.0.1" start >/dev/null
psql -X -q -h 127.0.0.1 -p "$pg_port" -U postgres -d postgres -c 'CREATE DATABASE tether'
store=postgres://postgres@127.0.0.1:$pg_port/tether

say "== tether-gateway init --store $store"
"$bin/tether-gateway" init --data-dir "$gw_dir" --store "$store" --url "$url" >/dev/null

replica_start() { # replica_start N: the replica's own copy of the CA and certificate
	local n=$1 d=$dir/r$1 port=$((base + $1)) peer=$((base + 3 + $1))
	mkdir -p -m 700 "$d"
	cp "$gw_dir/ca.crt" "$gw_dir/server.crt" "$gw_dir/server.key" "$gw_dir/peer.crt" "$gw_dir/peer.key" "$gw_dir/gateway.json" "$d/"
	"$bin/tether-gateway" serve --data-dir "$d" --listen "127.0.0.1:$port" --store "$store" \
		--replica-id "r$n" --peer-listen "127.0.0.1:$peer" --peer-url "https://127.0.0.1:$peer" \
		--drain-timeout 5000 > >(label "r$n") 2>&1 &
	rpid[$n]=$!
	pids+=("${rpid[$n]}")
}
for n in 1 2 3; do replica_start "$n"; done
for n in 1 2 3; do
	wait_for "replica r$n" curl -sf --cacert "$gw_dir/ca.crt" "https://127.0.0.1:$((base + n))/readyz"
done

cat >"$dir/haproxy.cfg" <<CFG
global
	maxconn 512
defaults
	mode tcp
	timeout connect 2s
	timeout client 60s
	timeout server 60s
	retries 3
	option redispatch
frontend gateway
	bind 127.0.0.1:$lb_port
	default_backend replicas
backend replicas
	balance roundrobin
	option httpchk GET /readyz
	server r1 127.0.0.1:$((base + 1)) check check-ssl verify none inter 500 fall 1 rise 2
	server r2 127.0.0.1:$((base + 2)) check check-ssl verify none inter 500 fall 1 rise 2
	server r3 127.0.0.1:$((base + 3)) check check-ssl verify none inter 500 fall 1 rise 2
CFG
haproxy -db -f "$dir/haproxy.cfg" > >(label 'haproxy') 2>&1 &
pids+=($!)
wait_for "haproxy" curl -sf --cacert "$gw_dir/ca.crt" "$url/readyz"

# The node's "kube-api": a tiny HTTP upstream, so the kubeconfig answers.
mkdir -p "$dir/kube-api"
printf '{"major":"1","minor":"0","gitVersion":"v1.0.0-tether-ha-demo"}\n' >"$dir/kube-api/version"
/usr/bin/python3 -m http.server --bind 127.0.0.1 --directory "$dir/kube-api" "$kube_port" \
	>"$dir/kube-api.log" 2>&1 &
pids+=($!)

cluster=$(ctl cluster create ha-demo | jq -r .id)
ctl token create --cluster "$cluster" --ttl 1h |
	"$bin/tether-client" join --state-dir "$dir/node" --node-name ha-node \
		--allow 127.0.0.1:22 --service "kube-api=http://127.0.0.1:$kube_port" >/dev/null
(umask 077 && ctl kubeconfig --cluster "$cluster" --user demo >"$dir/kubeconfig")
"$bin/tether-client" run --state-dir "$dir/node" > >(label 'client') 2>&1 &
pids+=($!)
holder() { ctl agent list --cluster "$cluster" | jq -r '.[] | select(.node == "ha-node" and .state == "active" and .connected) | .replica // empty'; }
held() { [ -n "$(holder)" ]; }
wait_for "the agent active" held
h=$(holder)

cat <<MSG

$(say "== Tether HA is running: three replicas behind haproxy")
  haproxy       $url   (round robin over r1..r3, /readyz checks)
  replicas      r1 https://127.0.0.1:$((base + 1)) (pid ${rpid[1]}), r2 https://127.0.0.1:$((base + 2)) (pid ${rpid[2]}),
                r3 https://127.0.0.1:$((base + 3)) (pid ${rpid[3]}); peer ports $((base + 4))-$((base + 6))
  store         $store
  cluster       ha-demo ($cluster), node ha-node: its tunnel is held by $h now

  In another shell:
    export TETHER_SERVER=$url TETHER_TOKEN_FILE=$gw_dir/admin.token TETHER_CACERT=$gw_dir/ca.crt
    watch -n 0.5 $bin/tetherctl -o json agent list     # its "replica"
    $bin/tetherctl connect --cluster $cluster --node ha-node 127.0.0.1:22    # whichever replica takes it
    kubectl --kubeconfig $dir/kubeconfig get --raw /version

  Kill the replica that holds the agent and watch it move (within a second or two):
    kill -9 ${rpid[${h#r}]}      # $h

  Ctrl-C stops everything and removes $dir.
MSG
wait "${pids[@]}"
