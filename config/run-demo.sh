#!/usr/bin/env bash
# run-demo.sh: what `make run` does.  Initialises ./var/ on first use, starts
# the gateway on https://127.0.0.1:8443 with the embedded SQLite store and one
# tunnel client on this machine joined through a fresh import token, and
# waits; Ctrl-C stops both cleanly.  State in ./var/ survives between runs.
set -euo pipefail

top=$(cd "$(dirname "$0")/.." && pwd)
bin=$top/build/bin
var=$top/var
gw_dir=$var/gateway
node_dir=$var/node
url=${TETHER_DEMO_URL:-https://127.0.0.1:8443}
listen=${TETHER_DEMO_LISTEN:-127.0.0.1:8443}
# The demo node's "kube-api": a tiny HTTP upstream on this machine, so that
# the printed kubeconfig answers `kubectl get --raw /version` end to end.
kube_port=${TETHER_DEMO_KUBE_PORT:-18001}

export TETHER_SERVER=$url TETHER_TOKEN_FILE=$gw_dir/admin.token TETHER_CACERT=$gw_dir/ca.crt
ctl() { "$bin/tetherctl" -o json "$@"; }
say() { printf '\033[1m%s\033[0m\n' "$*"; }

mkdir -p "$var"
if [ ! -f "$gw_dir/gateway.json" ]; then
	say "== first run: initialising $gw_dir"
	"$bin/tether-gateway" init --data-dir "$gw_dir" --url "$url"
fi

# label NAME: prefixes each line with NAME.  It ignores Ctrl-C and ends when
# its writer does, so the gateway's and the agent's last lines still show.
label() { trap '' INT TERM; exec sed -u "s/^/$1 | /"; }

pids=()
stop() {
	trap - INT TERM EXIT
	say "== stopping"
	for p in "${pids[@]}"; do kill -TERM "$p" 2>/dev/null || true; done
	for p in "${pids[@]}"; do wait "$p" 2>/dev/null || true; done
}
trap stop INT TERM EXIT

"$bin/tether-gateway" serve --data-dir "$gw_dir" --listen "$listen" > >(label 'gateway') 2>&1 &
pids+=($!)
for _ in $(seq 1 200); do
	curl -sf --cacert "$gw_dir/ca.crt" "$url/readyz" >/dev/null 2>&1 && break
	if ! kill -0 "${pids[0]}" 2>/dev/null; then
		echo "the gateway did not start (is $listen in use?)" >&2
		exit 1
	fi
	sleep 0.05
done

mkdir -p "$var/kube-api"
printf '{"major":"1","minor":"0","gitVersion":"v1.0.0-tether-demo","platform":"demo"}\n' \
	>"$var/kube-api/version"
/usr/bin/python3 -m http.server --bind 127.0.0.1 --directory "$var/kube-api" "$kube_port" \
	>"$var/kube-api.log" 2>&1 &
pids+=($!)

cluster=$(ctl cluster list | jq -r '.[] | select(.name == "demo") | .id')
if [ -z "$cluster" ]; then
	cluster=$(ctl cluster create demo | jq -r .id)
fi
if [ ! -f "$node_dir/state.json" ]; then
	say "== joining this machine as node 'demo-node' with a fresh import token"
	ctl token create --cluster "$cluster" --ttl 1h |
		"$bin/tether-client" join --state-dir "$node_dir" --node-name demo-node \
			--allow 127.0.0.1:22 --service "kube-api=http://127.0.0.1:$kube_port"
fi
if [ ! -s "$var/kubeconfig" ]; then
	(umask 077 && ctl kubeconfig --cluster "$cluster" --user demo >"$var/kubeconfig.tmp" &&
		mv "$var/kubeconfig.tmp" "$var/kubeconfig")
fi
"$bin/tether-client" run --state-dir "$node_dir" > >(label 'client ') 2>&1 &
pids+=($!)

for _ in $(seq 1 200); do
	[ "$(ctl agent list --cluster "$cluster" | jq -r '.[] | select(.node == "demo-node") | .state')" = active ] && break
	sleep 0.05
done

cat <<MSG

$(say "== Tether is running")
  gateway       $url   (data in $gw_dir)
  admin token   $gw_dir/admin.token
  CA            $gw_dir/ca.crt
  kubeconfig    $var/kubeconfig   (user "demo", scoped to cluster demo)
  kube-api      http://127.0.0.1:$kube_port on the node (a demo upstream)
  cluster       demo ($cluster), node demo-node (state in $node_dir)

  Try:
    export TETHER_SERVER=$url TETHER_TOKEN_FILE=$gw_dir/admin.token TETHER_CACERT=$gw_dir/ca.crt
    $bin/tetherctl agent list
    $bin/tetherctl connect --cluster $cluster --node demo-node 127.0.0.1:22
    kubectl --kubeconfig $var/kubeconfig get --raw /version

  Ctrl-C stops both.
MSG
wait "${pids[@]}"
