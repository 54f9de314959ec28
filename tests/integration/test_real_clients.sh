#!/usr/bin/env bash
# Real clients through the tunnel: ssh with `tetherctl connect` as its
# ProxyCommand to a private sshd, psql through `tetherctl forward` to a
# PostgreSQL, and curl through `forward` to an nginx, all on loopback.
source "$(dirname "$0")/lib.sh"
chmod 755 "$T"

pg_port=$(free_port)
web_port=$(free_port)

# --- a private sshd (key auth only) ---
sshd_start
ssh_port=$SSH_PORT

# --- a private PostgreSQL ---
mkdir -p "$T/pg"
chown postgres "$T/pg"
pgbin=$(ls -d /usr/lib/postgresql/*/bin | sort -V | tail -1)
runuser -u postgres -- "$pgbin/initdb" -D "$T/pg/db" -A trust >"$T/initdb.log" 2>&1
runuser -u postgres -- "$pgbin/pg_ctl" -D "$T/pg/db" -l "$T/pg/log" -w \
	-o "-p $pg_port -k $T/pg -c listen_addresses=127.0.0.1" start >/dev/null
stop_pg() { runuser -u postgres -- "$pgbin/pg_ctl" -D "$T/pg/db" -m fast stop >/dev/null 2>&1 || true; }
on_cleanup stop_pg

# --- a private nginx with one static file ---
mkdir -p "$T/www"
head -c 300000 /dev/urandom | base64 >"$T/www/index.html"
nginx_start nginx "
    access_log $T/nginx-access.log;
    server { listen 127.0.0.1:$web_port; root $T/www; }"

gateway_init
gateway_start
cid=$(cluster_create real)
ctl token create --cluster "$cid" >"$T/join.json"
join_node node1 "$T/join.json" --allow "127.0.0.1:$ssh_port" --allow "127.0.0.1:$pg_port" \
	--allow "127.0.0.1:$web_port" >/dev/null
client_start node1
wait_until 20 "node1 active" agent_is node1 active
port_open() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }
wait_until 20 "sshd, postgres and nginx listening" \
	bash -c "(exec 3<>/dev/tcp/127.0.0.1/$ssh_port) && (exec 3<>/dev/tcp/127.0.0.1/$pg_port) && (exec 3<>/dev/tcp/127.0.0.1/$web_port)" 

out=$(ssh_via -o ProxyCommand="$CTL connect --cluster $cid --node node1 127.0.0.1:$ssh_port" \
	root@node1 'echo hello from $(hostname) via tether' 2>"$T/ssh.err") ||
	{ cat "$T/ssh.err" >&2; fail "ssh through tetherctl connect failed"; }
[[ "$out" == "hello from "*" via tether" ]] || fail "ssh said: $out"
pass "ssh with ProxyCommand='tetherctl connect ...' runs a command on the node"

pg_local=$(free_port)
"$CTL" forward --cluster "$cid" "127.0.0.1:$pg_local:127.0.0.1:$pg_port" 2>>"$T/fwd-pg.log" &
PIDS+=($!)
web_local=$(free_port)
"$CTL" forward --cluster "$cid" "$web_local:127.0.0.1:$web_port" 2>>"$T/fwd-web.log" &
PIDS+=($!)
wait_until 20 "forwards listening" bash -c "(exec 3<>/dev/tcp/127.0.0.1/$pg_local) && (exec 3<>/dev/tcp/127.0.0.1/$web_local)"

answer=$(psql -h 127.0.0.1 -p "$pg_local" -U postgres -tA -c 'select 6 * 7' 2>"$T/psql.err") ||
	{ cat "$T/psql.err" >&2; fail "psql through forward failed"; }
[ "$answer" = 42 ] || fail "psql answered '$answer'"
pass "psql through tetherctl forward queries PostgreSQL"

curl -sf "http://127.0.0.1:$web_local/index.html" -o "$T/fetched" || fail "curl through forward failed"
cmp -s "$T/fetched" "$T/www/index.html" || fail "curl through forward: content differs"
pass "curl through tetherctl forward fetches nginx's file byte for byte"

gateway_stop
