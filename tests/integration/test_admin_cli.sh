#!/usr/bin/env bash
# The admin API's errors (JSON with a reason, the right status) seen with
# curl, and the CLIs' help, versions and exit codes as docs/interface.md lists them.
source "$(dirname "$0")/lib.sh"

for b in "$GATEWAY" "$CLIENT" "$CTL"; do
	"$b" --help >"$T/help.out" || fail "$b --help exited $?"
	grep -qi usage "$T/help.out" || fail "$b --help shows no usage"
	"$b" --version | grep -q '[0-9]\.[0-9]' || fail "$b --version"
done
expect_exit 2 "$GATEWAY" frobnicate
expect_exit 2 "$CLIENT" frobnicate
expect_exit 2 "$CTL" frobnicate
pass "--help, --version, and exit 2 for an unknown command"

gateway_init
cp -a "$GW_DIR" "$T/gw-copy"
expect_exit 1 "$GATEWAY" init --data-dir "$GW_DIR"
assert_contains "$T/last.err" "already initialised"
diff -r "$GW_DIR" "$T/gw-copy" >/dev/null || fail "a refused init changed $GW_DIR"
pass "init refuses an initialised directory and changes nothing"

gateway_start
cacert=(--cacert "$GW_DIR/ca.crt")
auth=(-H "Authorization: Bearer $(cat "$GW_DIR/admin.token")")

http() { # http EXPECTED_STATUS CURL_ARGS...: checks status and a JSON error body
	local want=$1
	shift
	local code
	code=$(curl -s -o "$T/body" -w '%{http_code}' "${cacert[@]}" "$@")
	[ "$code" = "$want" ] || fail "curl $*: HTTP $code, want $want: $(cat "$T/body")"
}

http 401 "$GW_URL/v1/clusters"
jq -e '.error | test("admin token")' "$T/body" >/dev/null || fail "401 body: $(cat "$T/body")"
http 401 -H "Authorization: Bearer tta_0123456789abcdef.AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA" "$GW_URL/v1/clusters"
http 401 -H "Authorization: Bearer nonsense" "$GW_URL/v1/clusters"
pass "missing, unknown and malformed admin tokens: 401 with a reason"

http 400 "${auth[@]}" -d '{"name":' "$GW_URL/v1/clusters"
jq -e '.error | test("invalid JSON")' "$T/body" >/dev/null || fail "400 body: $(cat "$T/body")"
http 400 "${auth[@]}" -d '{"name":"x","colour":"red"}' "$GW_URL/v1/clusters"
jq -e '.error | test("colour")' "$T/body" >/dev/null || fail "unknown field body: $(cat "$T/body")"
http 400 "${auth[@]}" -d '{"name":"bad name!"}' "$GW_URL/v1/clusters"
http 413 "${auth[@]}" -d "{\"name\":\"$(head -c 100000 /dev/zero | tr '\0' a)\"}" "$GW_URL/v1/clusters"
http 201 "${auth[@]}" -d '{"name":"api"}' "$GW_URL/v1/clusters"
cid=$(jq -r .id "$T/body")
http 409 "${auth[@]}" -d '{"name":"api"}' "$GW_URL/v1/clusters"
http 404 "${auth[@]}" "$GW_URL/v1/clusters/c-000000000000"
http 404 "${auth[@]}" -d '{}' "$GW_URL/v1/clusters/c-000000000000/tokens"
http 400 "${auth[@]}" -d '{"uses":0}' "$GW_URL/v1/clusters/$cid/tokens"
http 400 "${auth[@]}" -d '{"approval":"sometimes"}' "$GW_URL/v1/clusters/$cid/tokens"
http 404 "${auth[@]}" "$GW_URL/v1/nothing-here"
pass "bad JSON, unknown fields, bad names, big bodies, conflicts, unknown ids: each its status and reason"

curl -sf "${cacert[@]}" "$GW_URL/v1/ca" >"$T/ca.pem"
cmp -s "$T/ca.pem" "$GW_DIR/ca.crt" || fail "/v1/ca differs from ca.crt"
curl -sf "${cacert[@]}" "$GW_URL/healthz" >/dev/null && curl -sf "${cacert[@]}" "$GW_URL/readyz" >/dev/null ||
	fail "healthz/readyz"
pass "/v1/ca serves the CA without auth; healthz and readyz answer"

ctl cluster list | jq -e 'type == "array" and length == 1' >/dev/null || fail "cluster list json"
ctl agent list | jq -e 'type == "array"' >/dev/null || fail "agent list json"
expect_exit 1 "$CTL" token create --cluster c-000000000000
assert_contains "$T/last.err" "no cluster"
expect_exit 1 "$CTL" cluster create api
expect_exit 2 "$CTL" token create
expect_exit 2 "$CTL" token create --cluster "$cid" --ttl forever
expect_exit 2 "$CTL" cluster
pass "tetherctl: -o json prints one value; refusals exit 1; bad usage exits 2"

expect_exit 3 "$CTL" --server "https://127.0.0.1:$(free_port)" cluster list
expect_exit 3 "$CTL" --cacert /etc/ssl/certs/ca-certificates.crt cluster list
expect_exit 2 env -u TETHER_TOKEN_FILE "$CTL" cluster list
pass "tetherctl: unreachable or untrusted server exits 3; no token exits 2"

# --server goes through the one URL parser: an origin, https only.
expect_exit 2 "$CTL" --server "http://127.0.0.1:$GW_PORT" cluster list
assert_contains "$T/last.err" "unsupported scheme"
expect_exit 2 "$CTL" --server "https://127.0.0.1:$GW_PORT/v1" cluster list
assert_contains "$T/last.err" "path or query"
expect_exit 2 "$CTL" --server "https://127.0.0.1:99999" cluster list
assert_contains "$T/last.err" "bad port"
ctl --server "HTTPS://127.0.0.1:$GW_PORT/" cluster list | jq -e 'length == 1' >/dev/null ||
	fail "an upper-case scheme and a trailing / are the same server"
pass "tetherctl: --server refusals say why (scheme, path, port)"

gateway_stop
