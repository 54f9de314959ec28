/*
 * state.c: the node's state directory (see state.h): state.json and
 * status.json as JSON via jansson, and the validators for node names,
 * allowlist entries and service URLs that join and run share.
 */
#include "state.h"
#include "url.h"
#include "hostname.h"

#include <arpa/inet.h>
#include <ctype.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include <jansson.h>

#include "fileio.h"
#include "httphead.h"

#define STATE_FILE   "state.json"
#define STATUS_FILE  "status.json"
#define STATE_MAX_BYTES (256 * 1024)

int
client_path(const char *dir, const char *name, char *out, size_t outlen)
{
	int n = snprintf(out, outlen, "%s/%s", dir, name);

	return n < 0 || (size_t)n >= outlen ? -1 : 0;
}

/* --- validators --- */

/* Splits "HOST:PORT" at the last ':' (IPv6 hosts are bracketed). */
static const char *
split_host_port(const char *s)
{
	const char *colon = strrchr(s, ':');

	if (colon == NULL || colon == s)
		return NULL;
	/* "[::1]:22": the colon must follow the closing bracket. */
	if (s[0] == '[' && colon[-1] != ']')
		return NULL;
	return colon;
}

int
client_allow_valid(const char *entry)
{
	const char *colon;
	size_t len = strlen(entry);

	if (len == 0 || len >= sizeof(((struct client_state *)0)->allow[0]))
		return 0;
	if ((colon = split_host_port(entry)) == NULL)
		return 0;
	if (!host_valid(entry, (size_t)(colon - entry)))
		return 0;
	if (strcmp(colon + 1, "*") == 0)
		return 1;
	return port_parse(colon + 1, strlen(colon + 1)) != 0;
}

static const char *const service_url_schemes[] = { "http", "https", NULL };

int
client_service_url(const char *url, char *target, size_t targetlen, int *tls)
{
	char why[160];
	struct url u;
	int r = -1;

	if (strlen(url) < sizeof(((struct client_service *)0)->url) &&
	    url_parse(url, service_url_schemes, &u, why, sizeof(why)) == 0 &&
	    !u.has_userinfo && url_is_origin(&u) && u.port_given &&
	    url_authority(&u, target, targetlen) > 0) {
		*tls = strcmp(u.scheme, "https") == 0;
		r = 0;
	}
	url_clear(&u);
	return r;
}

static const char *const gateway_url_schemes[] = { "https", NULL };

int
client_gateway_url_valid(const char *url)
{
	char why[160];
	struct url u;
	int ok;

	if (strlen(url) >= sizeof(((struct client_state *)0)->gateway_url) ||
	    url_parse(url, gateway_url_schemes, &u, why, sizeof(why)) != 0)
		return 0;
	ok = !u.has_userinfo && url_is_origin(&u);
	url_clear(&u);
	return ok;
}

int
client_service_valid(const char *name, const char *url)
{
	char target[URL_HOST_MAX + 16];
	size_t n = strlen(name);
	int tls;

	if (n == 0 || n > 31)
		return 0;
	for (size_t i = 0; i < n; i++) {
		if (!islower((unsigned char)name[i]) &&
		    !isdigit((unsigned char)name[i]) && name[i] != '-')
			return 0;
	}
	return client_service_url(url, target, sizeof(target), &tls) == 0;
}

int
client_node_name_valid(const char *name)
{
	size_t n = strlen(name);

	if (n == 0 || n > 63 || name[0] == '-' || name[0] == '.')
		return 0;
	for (size_t i = 0; i < n; i++) {
		if (!isalnum((unsigned char)name[i]) && name[i] != '.' &&
		    name[i] != '_' && name[i] != '-')
			return 0;
	}
	return 1;
}

/* Host equality: IPv6 by address, names case-insensitively. */
static int
host_equal(const char *a, size_t alen, const char *b, size_t blen)
{
	struct in6_addr a6, b6;

	if (alen > 0 && a[0] == '[' && blen > 0 && b[0] == '[') {
		if (!host_ipv6_bracketed(a, alen, &a6) || !host_ipv6_bracketed(b, blen, &b6))
			return 0;
		return memcmp(&a6, &b6, sizeof(a6)) == 0;
	}
	return alen == blen && strncasecmp(a, b, alen) == 0;
}

int
client_allow_match(const struct client_state *st, const char *host_port)
{
	unsigned int port;
	size_t hlen;
	char why[128];

	if (target_parse(host_port, strlen(host_port), &hlen, &port, why,
	    sizeof(why)) != 0)
		return 0;
	for (size_t i = 0; i < st->nallow; i++) {
		const char *e = st->allow[i], *ec = split_host_port(e);

		if (ec == NULL)
			continue;
		if (!host_equal(e, (size_t)(ec - e), host_port, hlen))
			continue;
		if (strcmp(ec + 1, "*") == 0 ||
		    port_parse(ec + 1, strlen(ec + 1)) == port)
			return 1;
	}
	return 0;
}

/* --- state.json --- */

/* Copies the string at key into out; "" if absent and optional. */
static int
copy_string(json_t *root, const char *key, int required, char *out,
    size_t outlen, char *err, size_t errlen)
{
	json_t *v = json_object_get(root, key);
	const char *s;

	if (v == NULL && !required) {
		out[0] = '\0';
		return 0;
	}
	if (v == NULL || !json_is_string(v)) {
		snprintf(err, errlen, "%s: %s", key,
		    v == NULL ? "missing" : "must be a string");
		return -1;
	}
	s = json_string_value(v);
	if (strlen(s) >= outlen) {
		snprintf(err, errlen, "%s: too long", key);
		return -1;
	}
	snprintf(out, outlen, "%s", s);
	return 0;
}

static int
load_allow(json_t *root, struct client_state *st, char *err, size_t errlen)
{
	json_t *arr = json_object_get(root, "allow"), *v;
	size_t i;

	if (arr == NULL)
		return 0;
	if (!json_is_array(arr) || json_array_size(arr) > CLIENT_MAX_ALLOW) {
		snprintf(err, errlen, "allow: must be a list of at most %d entries",
		    CLIENT_MAX_ALLOW);
		return -1;
	}
	json_array_foreach(arr, i, v) {
		if (!json_is_string(v) || !client_allow_valid(json_string_value(v))) {
			snprintf(err, errlen, "allow: entry %zu is not HOST:PORT or "
			    "HOST:*", i + 1);
			return -1;
		}
		snprintf(st->allow[st->nallow++], sizeof(st->allow[0]), "%s",
		    json_string_value(v));
	}
	return 0;
}

static int
load_services(json_t *root, struct client_state *st, char *err, size_t errlen)
{
	json_t *obj = json_object_get(root, "services"), *v;
	const char *name;

	if (obj == NULL)
		return 0;
	if (!json_is_object(obj) || json_object_size(obj) > CLIENT_MAX_SERVICES) {
		snprintf(err, errlen, "services: must be an object of at most %d "
		    "entries", CLIENT_MAX_SERVICES);
		return -1;
	}
	json_object_foreach(obj, name, v) {
		if (!json_is_string(v) ||
		    !client_service_valid(name, json_string_value(v))) {
			snprintf(err, errlen, "services: entry %zu is not "
			    "NAME: http(s)://HOST:PORT", st->nservices + 1);
			return -1;
		}
		snprintf(st->services[st->nservices].name,
		    sizeof(st->services[0].name), "%s", name);
		snprintf(st->services[st->nservices].url,
		    sizeof(st->services[0].url), "%s", json_string_value(v));
		st->nservices++;
	}
	return 0;
}

/* "service_tokens": ["NAME", ...]: services that have a token file. */
static int
load_service_tokens(json_t *root, struct client_state *st, char *err,
    size_t errlen)
{
	json_t *arr = json_object_get(root, "service_tokens"), *v;
	size_t i, j;

	if (arr == NULL)
		return 0;
	if (!json_is_array(arr) || json_array_size(arr) > CLIENT_MAX_SERVICES) {
		snprintf(err, errlen, "service_tokens: must be a list of at most %d "
		    "service names", CLIENT_MAX_SERVICES);
		return -1;
	}
	json_array_foreach(arr, i, v) {
		for (j = 0; j < st->nservices; j++)
			if (json_is_string(v) &&
			    strcmp(st->services[j].name, json_string_value(v)) == 0)
				break;
		if (j == st->nservices) {
			snprintf(err, errlen, "service_tokens: entry %zu does not name "
			    "a service", i + 1);
			return -1;
		}
		st->services[j].token = true;
	}
	return 0;
}

/* "gateway_urls": ["https://HOST[:PORT]", ...]: the gateway's pushed list. */
static int
load_gateway_urls(json_t *root, struct client_state *st, char *err,
    size_t errlen)
{
	json_t *arr = json_object_get(root, "gateway_urls"), *v;
	size_t i;

	if (arr == NULL)
		return 0;
	if (!json_is_array(arr) || json_array_size(arr) > CLIENT_MAX_URLS) {
		snprintf(err, errlen, "gateway_urls: must be a list of at most %d "
		    "URLs", CLIENT_MAX_URLS);
		return -1;
	}
	json_array_foreach(arr, i, v) {
		if (!json_is_string(v) ||
		    !client_gateway_url_valid(json_string_value(v))) {
			snprintf(err, errlen, "gateway_urls: entry %zu is not "
			    "https://HOST[:PORT]", i + 1);
			return -1;
		}
		snprintf(st->gateway_urls[st->ngateway_urls++],
		    sizeof(st->gateway_urls[0]), "%s", json_string_value(v));
	}
	return 0;
}

static int
state_from_json(json_t *root, struct client_state *st, char *err,
    size_t errlen)
{
	if (!json_is_object(root)) {
		snprintf(err, errlen, "not a JSON object");
		return -1;
	}
	if (copy_string(root, "gateway_url", 1, st->gateway_url,
	    sizeof(st->gateway_url), err, errlen) == -1 ||
	    copy_string(root, "ca_checksum", 1, st->ca_checksum,
	    sizeof(st->ca_checksum), err, errlen) == -1 ||
	    copy_string(root, "cluster", 1, st->cluster, sizeof(st->cluster),
	    err, errlen) == -1 ||
	    copy_string(root, "node", 1, st->node, sizeof(st->node),
	    err, errlen) == -1 ||
	    copy_string(root, "agent_id", 0, st->agent_id, sizeof(st->agent_id),
	    err, errlen) == -1)
		return -1;
	if (!client_node_name_valid(st->node)) {
		snprintf(err, errlen, "node: invalid node name");
		return -1;
	}
	if (load_allow(root, st, err, errlen) == -1 ||
	    load_services(root, st, err, errlen) == -1 ||
	    load_service_tokens(root, st, err, errlen) == -1 ||
	    load_gateway_urls(root, st, err, errlen) == -1)
		return -1;
	return 0;
}

int
client_state_load(const char *dir, struct client_state *st, char *err,
    size_t errlen)
{
	char path[PATH_MAX], why[256];
	char *buf = NULL;
	size_t len;
	json_error_t jerr;
	json_t *root = NULL;
	int r = -1;

	memset(st, 0, sizeof(*st));
	if (client_path(dir, STATE_FILE, path, sizeof(path)) == -1) {
		snprintf(err, errlen, "%s: path too long", dir);
		return -1;
	}
	if (!file_exists(path))
		return 1;
	if (file_read_all(path, STATE_MAX_BYTES, &buf, &len, err, errlen) == -1)
		goto out;
	if ((root = json_loadb(buf, len, JSON_REJECT_DUPLICATES, &jerr)) == NULL) {
		snprintf(err, errlen, "%s: not valid JSON (line %d)", path, jerr.line);
		goto out;
	}
	if (state_from_json(root, st, why, sizeof(why)) == -1) {
		snprintf(err, errlen, "%s: %s", path, why);
		goto out;
	}
	r = 0;
out:
	json_decref(root);
	free(buf);
	if (r != 0)
		memset(st, 0, sizeof(*st));
	return r;
}

static json_t *
state_to_json(const struct client_state *st)
{
	json_t *root, *allow = NULL, *services = NULL, *tokens = NULL, *urls = NULL;

	root = json_pack("{s:s, s:s, s:s, s:s, s:s}",
	    "gateway_url", st->gateway_url,
	    "ca_checksum", st->ca_checksum,
	    "cluster", st->cluster,
	    "node", st->node,
	    "agent_id", st->agent_id);
	if (root == NULL || (allow = json_array()) == NULL ||
	    (services = json_object()) == NULL)
		goto fail;
	for (size_t i = 0; i < st->nallow; i++) {
		if (json_array_append_new(allow, json_string(st->allow[i])) == -1)
			goto fail;
	}
	for (size_t i = 0; i < st->nservices; i++) {
		if (json_object_set_new(services, st->services[i].name,
		    json_string(st->services[i].url)) == -1)
			goto fail;
	}
	if (json_object_set_new(root, "allow", allow) == -1) {
		allow = NULL;
		goto fail;
	}
	allow = NULL;
	if (json_object_set_new(root, "services", services) == -1) {
		services = NULL;
		goto fail;
	}
	services = NULL;
	for (size_t i = 0; i < st->nservices; i++) {
		if (!st->services[i].token)
			continue;
		if ((tokens == NULL && (tokens = json_array()) == NULL) ||
		    json_array_append_new(tokens, json_string(st->services[i].name)) == -1)
			goto fail;
	}
	if (tokens != NULL && json_object_set_new(root, "service_tokens", tokens) == -1) {
		tokens = NULL;
		goto fail;
	}
	tokens = NULL;
	/* Absent until the gateway pushed a list (a node that never moved
	 * keeps the file join wrote). */
	for (size_t i = 0; i < st->ngateway_urls; i++) {
		if ((urls == NULL && (urls = json_array()) == NULL) ||
		    json_array_append_new(urls, json_string(st->gateway_urls[i])) == -1)
			goto fail;
	}
	if (urls != NULL && json_object_set_new(root, "gateway_urls", urls) == -1) {
		urls = NULL;
		goto fail;
	}
	return root;
fail:
	json_decref(allow);
	json_decref(services);
	json_decref(tokens);
	json_decref(urls);
	json_decref(root);
	return NULL;
}

int
client_service_token_name(const char *name, char *out, size_t outlen)
{
	int n = snprintf(out, outlen, "service-%s.token", name);

	return n < 0 || (size_t)n >= outlen ? -1 : 0;
}

int
client_service_token_read(const char *path, char **token, char *err,
    size_t errlen)
{
	char *buf = NULL;
	size_t len = 0, full;

	*token = NULL;
	if (file_read_all(path, HTTP_TOKEN_MAX + 2, &buf, &len, err, errlen) == -1)
		return -1;
	full = len;
	if (len > 0 && buf[len - 1] == '\n')
		len--;
	if (len > 0 && buf[len - 1] == '\r')
		len--;
	if (len == 0)
		snprintf(err, errlen, "%s: empty (want the token on one line)", path);
	else if (memchr(buf, '\n', len) != NULL)
		snprintf(err, errlen, "%s: more than one line (want the token on one "
		    "line)", path);
	else if (len > HTTP_TOKEN_MAX)
		snprintf(err, errlen, "%s: longer than %d bytes", path, HTTP_TOKEN_MAX);
	else if (!http_token_valid(buf, len))
		snprintf(err, errlen, "%s: not printable (want visible ASCII, no "
		    "spaces)", path);
	else {
		buf[len] = '\0';
		*token = buf;
		return 0;
	}
	explicit_bzero(buf, full);
	free(buf);
	return -1;
}

/* Serialises root and writes it atomically to DIR/name. */
static int
write_json(const char *dir, const char *name, json_t *root, mode_t mode,
    char *err, size_t errlen)
{
	char path[PATH_MAX];
	char *text = NULL;
	int r = -1;

	if (client_path(dir, name, path, sizeof(path)) == -1) {
		snprintf(err, errlen, "%s: path too long", dir);
		goto out;
	}
	if ((text = json_dumps(root, JSON_INDENT(2) | JSON_PRESERVE_ORDER)) == NULL) {
		snprintf(err, errlen, "%s: cannot serialise", path);
		goto out;
	}
	/* A trailing newline keeps the file friendly to cat and editors. */
	{
		size_t n = strlen(text);
		char *nl = realloc(text, n + 2);

		if (nl == NULL) {
			snprintf(err, errlen, "%s: out of memory", path);
			goto out;
		}
		text = nl;
		text[n] = '\n';
		text[n + 1] = '\0';
	}
	if (file_write_atomic(path, text, strlen(text), mode, err, errlen) == -1)
		goto out;
	r = 0;
out:
	free(text);
	return r;
}

int
client_state_save(const char *dir, const struct client_state *st, char *err,
    size_t errlen)
{
	json_t *root;
	int r;

	if ((root = state_to_json(st)) == NULL) {
		snprintf(err, errlen, "cannot build state.json (invalid UTF-8?)");
		return -1;
	}
	r = write_json(dir, STATE_FILE, root, 0600, err, errlen);
	json_decref(root);
	return r;
}

int
client_status_write(const char *dir, const char *state, bool connected,
    const char *last_error, const char *gateway)
{
	char err[256];
	json_t *root;
	int r;

	root = json_pack("{s:I, s:s, s:b, s:s, s:s}",
	    "pid", (json_int_t)getpid(),
	    "state", state != NULL ? state : "",
	    "connected", connected,
	    "last_error", last_error != NULL ? last_error : "",
	    "gateway", gateway != NULL ? gateway : "");
	if (root == NULL)
		return -1;
	r = write_json(dir, STATUS_FILE, root, 0644, err, sizeof(err));
	json_decref(root);
	return r;
}
