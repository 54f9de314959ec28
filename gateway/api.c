/*
 * api.c: health, CA and admin endpoints (see api.h).
 *
 * Admin API (all JSON, `Authorization: Bearer <admin token>`; errors are
 * {"error":"reason"} with a 4xx/5xx status):
 *   POST /v1/clusters                  {"name"}                -> 201 cluster
 *   GET  /v1/clusters                                          -> [cluster + agents_connected]
 *   GET  /v1/clusters/ID                                       -> cluster
 *   POST /v1/clusters/ID/tokens        {"ttl_seconds","uses","approval"} -> 201 join document
 *   GET  /v1/agents[?cluster=ID]                               -> [agent]
 *   GET  /v1/agents/ID                                         -> agent
 *   POST /v1/agents/ID/approve|verify|revoke                   -> agent
 */
#include "api.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>
#include <openssl/crypto.h>

#include "agentkey.h"
#include "dial.h"
#include "gateway.h"
#include "hub.h"
#include "joindoc.h"
#include "log.h"
#include "server.h"
#include "session.h"
#include "store.h"
#include "token.h"

#define TTL_DEFAULT  (24 * 3600)
#define TTL_MIN      1
#define TTL_MAX      (366 * 24 * 3600)
#define USES_MAX     1000000

static void
respond_text(struct api_response *r, int status, const char *type, const char *text,
    size_t len)
{
	r->status = status;
	r->content_type = type;
	r->body = malloc(len + 1);
	if (r->body == NULL) {
		r->body_len = 0;
		return;
	}
	memcpy(r->body, text, len);
	r->body[len] = '\0';
	r->body_len = len;
}

/* Takes ownership of v. */
static void
respond_json(struct api_response *r, int status, json_t *v)
{
	char *s = v != NULL ? json_dumps(v, JSON_COMPACT | JSON_ENCODE_ANY) : NULL;

	json_decref(v);
	if (s == NULL) {
		respond_text(r, 500, "application/json", "{\"error\":\"out of memory\"}\n", 26);
		return;
	}
	/* One line per response: the JSON and a newline, as curl users expect. */
	respond_text(r, status, "application/json", s, strlen(s));
	free(s);
	if (r->body != NULL) {
		char *p = realloc(r->body, r->body_len + 2);
		if (p != NULL) {
			p[r->body_len++] = '\n';
			p[r->body_len] = '\0';
			r->body = p;
		}
	}
}

static void
respond_error(struct api_response *r, int status, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static void
respond_error(struct api_response *r, int status, const char *fmt, ...)
{
	char reason[512];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(reason, sizeof(reason), fmt, ap);
	va_end(ap);
	respond_json(r, status, json_pack("{s:s}", "error", reason));
}

/* ---- records as JSON ---- */

static json_t *
time_json(int64_t t)
{
	char buf[32];

	rfc3339_format(t, buf);
	return json_string(buf);
}

static json_t *
cluster_json(struct gateway *gw, const struct store_cluster *c)
{
	return json_pack("{s:s, s:s, s:I, s:o}", "id", c->id, "name", c->name,
	    "agents_connected", (json_int_t)hub_count_cluster(gw->hub, c->id),
	    "created_at", time_json(c->created_at));
}

static json_t *
agent_json(struct gateway *gw, const struct store_agent *a)
{
	return json_pack("{s:s, s:s, s:s, s:s, s:s, s:b, s:o, s:o}",
	    "id", a->id, "cluster", a->cluster, "node", a->node,
	    "state", agent_state_name(a->state), "last_error", a->last_error,
	    "connected", hub_find(gw->hub, a->id) != NULL,
	    "created_at", time_json(a->created_at),
	    "updated_at", time_json(a->updated_at));
}

/* ---- request helpers ---- */

int
api_authenticate(struct gateway *gw, const char *authorization, char *principal,
    size_t plen, char *err, size_t errlen)
{
	struct token t;
	struct store_token rec;
	uint8_t hash[TOKEN_HASH_LEN];
	char perr[128];
	int ok;

	if (strncmp(authorization, "Bearer ", 7) != 0) {
		snprintf(err, errlen, "missing token: send 'Authorization: Bearer TOKEN'");
		return -1;
	}
	if (token_parse(authorization + 7, &t, perr, sizeof(perr)) != 0) {
		snprintf(err, errlen, "invalid token: %s", perr);
		return -1;
	}
	token_hash(&t, hash);
	ok = t.kind == TOKEN_ADMIN &&
	    store_token_get(gw->store, t.id, &rec) == STORE_OK &&
	    rec.kind == TOKEN_ADMIN && !rec.revoked &&
	    token_hash_equal(hash, rec.verifier);
	if (ok)
		snprintf(principal, plen, "admin:%s", t.id);
	token_clear(&t);
	if (!ok) {
		snprintf(err, errlen, "invalid admin token");
		return -1;
	}
	return 0;
}

static int
admin_authorized(struct gateway *gw, const struct api_request *req,
    struct api_response *r)
{
	char principal[64], err[192];

	if (api_authenticate(gw, req->authorization, principal, sizeof(principal),
	    err, sizeof(err)) != 0) {
		respond_error(r, 401, "%s", strncmp(err, "missing", 7) == 0 ?
		    "missing admin token: send 'Authorization: Bearer TOKEN'" : err);
		return 0;
	}
	return 1;
}

/*
 * Parses the body as a JSON object whose keys are all in `allowed`
 * (NULL-terminated).  Returns the object or NULL after responding 400/413.
 */
static json_t *
body_object(const struct api_request *req, const char *const *allowed,
    struct api_response *r)
{
	json_error_t jerr;
	json_t *v;
	const char *key;
	json_t *val;

	if (req->body_too_large) {
		respond_error(r, 413, "request body too large");
		return NULL;
	}
	if (req->body_len == 0)
		return json_object();
	v = json_loadb(req->body, req->body_len, JSON_REJECT_DUPLICATES, &jerr);
	if (v == NULL) {
		respond_error(r, 400, "invalid JSON body: %s (line %d, column %d)",
		    jerr.text, jerr.line, jerr.column);
		return NULL;
	}
	if (!json_is_object(v)) {
		json_decref(v);
		respond_error(r, 400, "request body must be a JSON object");
		return NULL;
	}
	json_object_foreach(v, key, val) {
		size_t i;
		for (i = 0; allowed[i] != NULL; i++)
			if (strcmp(allowed[i], key) == 0)
				break;
		if (allowed[i] == NULL) {
			respond_error(r, 400, "unknown field \"%s\"", key);
			json_decref(v);
			return NULL;
		}
	}
	return v;
}

/* Value of key in "a=b&c=d", copied into out; 0 if found. */
static int
query_get(const char *query, const char *key, char *out, size_t outlen)
{
	size_t klen = strlen(key);
	const char *p = query;

	while (p != NULL && *p != '\0') {
		const char *end = strchr(p, '&');
		size_t n = end != NULL ? (size_t)(end - p) : strlen(p);
		if (n > klen && strncmp(p, key, klen) == 0 && p[klen] == '=') {
			snprintf(out, outlen, "%.*s", (int)(n - klen - 1), p + klen + 1);
			return 0;
		}
		p = end != NULL ? end + 1 : NULL;
	}
	return -1;
}

/* ---- clusters ---- */

static void
clusters_create(struct gateway *gw, const struct api_request *req, struct api_response *r)
{
	static const char *const allowed[] = { "name", NULL };
	struct store_cluster c;
	char err[STORE_ERROR_MAX + 1] = "";
	json_t *body = body_object(req, allowed, r);
	const char *name;
	int rc;

	if (body == NULL)
		return;
	name = json_string_value(json_object_get(body, "name"));
	if (name == NULL) {
		respond_error(r, 400, "field \"name\" (a string) is required");
		goto out;
	}
	rc = store_cluster_create(gw->store, name, gateway_now(), &c, err, sizeof(err));
	if (rc == STORE_CONFLICT)
		respond_error(r, 409, "cluster name \"%s\" is taken", name);
	else if (rc == STORE_REFUSED)
		respond_error(r, 400, "%s", err);
	else if (rc != STORE_OK)
		respond_error(r, 500, "store: %s", err);
	else {
		info("cluster %s created: %s", c.id, c.name);
		respond_json(r, 201, cluster_json(gw, &c));
	}
out:
	json_decref(body);
}

static void
clusters_list(struct gateway *gw, struct api_response *r)
{
	struct store_cluster *cs = NULL;
	size_t n = 0;
	json_t *arr;

	if (store_cluster_list(gw->store, &cs, &n) != STORE_OK) {
		respond_error(r, 500, "store: cannot list clusters");
		return;
	}
	arr = json_array();
	for (size_t i = 0; i < n; i++)
		json_array_append_new(arr, cluster_json(gw, &cs[i]));
	free(cs);
	respond_json(r, 200, arr);
}

static void
clusters_get(struct gateway *gw, const char *id, struct api_response *r)
{
	struct store_cluster c;

	if (store_cluster_get(gw->store, id, &c) != STORE_OK) {
		respond_error(r, 404, "no cluster %s", id);
		return;
	}
	respond_json(r, 200, cluster_json(gw, &c));
}

/* Reads an optional integer field within [min, max]; 0 on success. */
static int
int_field(json_t *body, const char *key, json_int_t def, json_int_t min,
    json_int_t max, json_int_t *out, struct api_response *r)
{
	json_t *v = json_object_get(body, key);

	if (v == NULL) {
		*out = def;
		return 0;
	}
	if (!json_is_integer(v) || json_integer_value(v) < min ||
	    json_integer_value(v) > max) {
		respond_error(r, 400, "field \"%s\" must be an integer from %lld to %lld",
		    key, (long long)min, (long long)max);
		return -1;
	}
	*out = json_integer_value(v);
	return 0;
}

static void
tokens_create(struct gateway *gw, const char *cluster, const struct api_request *req,
    struct api_response *r)
{
	static const char *const allowed[] = { "ttl_seconds", "uses", "approval", NULL };
	struct store_cluster c;
	struct store_token rec;
	struct token t;
	struct joindoc doc;
	EVP_PKEY *key = NULL;
	json_int_t ttl, uses;
	const char *approval = "auto";
	char err[STORE_ERROR_MAX + 1] = "", *text = NULL;
	json_t *body = body_object(req, allowed, r), *v;

	memset(&t, 0, sizeof(t));
	memset(&doc, 0, sizeof(doc));
	if (body == NULL)
		return;
	if (store_cluster_get(gw->store, cluster, &c) != STORE_OK) {
		respond_error(r, 404, "no cluster %s", cluster);
		goto out;
	}
	if (int_field(body, "ttl_seconds", TTL_DEFAULT, TTL_MIN, TTL_MAX, &ttl, r) != 0 ||
	    int_field(body, "uses", 1, 1, USES_MAX, &uses, r) != 0)
		goto out;
	if ((v = json_object_get(body, "approval")) != NULL) {
		approval = json_string_value(v);
		if (approval == NULL || (strcmp(approval, "auto") != 0 &&
		    strcmp(approval, "manual") != 0)) {
			respond_error(r, 400, "field \"approval\" must be \"auto\" or \"manual\"");
			goto out;
		}
	}
	memset(&rec, 0, sizeof(rec));
	if (token_generate(TOKEN_IMPORT, &t) != 0 ||
	    (key = token_import_key(&t)) == NULL ||
	    agentkey_public(key, rec.verifier) != 0) {
		respond_error(r, 500, "cannot generate a token");
		goto out;
	}
	snprintf(rec.id, sizeof(rec.id), "%s", t.id);
	rec.kind = TOKEN_IMPORT;
	snprintf(rec.cluster, sizeof(rec.cluster), "%s", c.id);
	rec.created_at = gateway_now();
	rec.expires_at = rec.created_at + ttl;
	rec.uses_left = uses;
	rec.approval_manual = strcmp(approval, "manual") == 0;
	if (store_token_insert(gw->store, &rec, err, sizeof(err)) != STORE_OK) {
		respond_error(r, 500, "store: %s", err);
		goto out;
	}
	snprintf(doc.gateway_url, sizeof(doc.gateway_url), "%s", gw->url);
	snprintf(doc.ca_checksum, sizeof(doc.ca_checksum), "%s", gw->ca_checksum);
	snprintf(doc.cluster, sizeof(doc.cluster), "%s", c.id);
	token_format(&t, doc.token);
	doc.expires_at = rec.expires_at;
	text = joindoc_format(&doc);
	if (text == NULL) {
		respond_error(r, 500, "cannot format the join document");
		goto out;
	}
	info("import token %s created for cluster %s: %lld use(s), ttl %lld s, approval %s",
	    rec.id, c.id, (long long)uses, (long long)ttl, approval);
	{
		size_t n = strlen(text);
		char *withnl = malloc(n + 2);
		if (withnl != NULL) {
			memcpy(withnl, text, n);
			withnl[n] = '\n';
			respond_text(r, 201, "application/json", withnl, n + 1);
			OPENSSL_cleanse(withnl, n + 1);
			free(withnl);
		}
	}
out:
	if (text != NULL) {
		OPENSSL_cleanse(text, strlen(text));
		free(text);
	}
	EVP_PKEY_free(key);
	token_clear(&t);
	joindoc_clear(&doc);
	json_decref(body);
}

/* ---- agents ---- */

static void
agents_list(struct gateway *gw, const struct api_request *req, struct api_response *r)
{
	struct store_agent *as = NULL;
	struct store_cluster c;
	char cluster[STORE_ID_MAX + 1];
	const char *filter = NULL;
	size_t n = 0;
	json_t *arr;

	if (query_get(req->query, "cluster", cluster, sizeof(cluster)) == 0) {
		if (store_cluster_get(gw->store, cluster, &c) != STORE_OK) {
			respond_error(r, 404, "no cluster %s", cluster);
			return;
		}
		filter = cluster;
	}
	if (store_agent_list(gw->store, filter, &as, &n) != STORE_OK) {
		respond_error(r, 500, "store: cannot list agents");
		return;
	}
	arr = json_array();
	for (size_t i = 0; i < n; i++)
		json_array_append_new(arr, agent_json(gw, &as[i]));
	free(as);
	respond_json(r, 200, arr);
}

static void
agents_get(struct gateway *gw, const char *id, struct api_response *r)
{
	struct store_agent a;

	if (store_agent_get(gw->store, id, &a) != STORE_OK) {
		respond_error(r, 404, "no agent %s", id);
		return;
	}
	respond_json(r, 200, agent_json(gw, &a));
}

/* approve, verify, revoke: persist first, then tell the connected agent. */
static void
agents_action(struct gateway *gw, const char *id, const char *action,
    struct api_response *r)
{
	struct store_agent a;
	struct session *s = hub_find(gw->hub, id);
	char err[STORE_ERROR_MAX + 1] = "";
	int rc;

	if (store_agent_get(gw->store, id, &a) != STORE_OK) {
		respond_error(r, 404, "no agent %s", id);
		return;
	}
	if (strcmp(action, "approve") == 0) {
		rc = store_agent_transition(gw->store, id, AGENT_EV_APPROVE, NULL,
		    gateway_now(), &a, err, sizeof(err));
		if (rc == STORE_OK) {
			info("agent %s approved", id);
			if (s != NULL) {
				session_agent_changed(s, &a);
				rc = session_verify(s, &a, err, sizeof(err));
			}
		}
	} else if (strcmp(action, "verify") == 0) {
		if (s != NULL)
			rc = session_verify(s, &a, err, sizeof(err));
		else {
			rc = store_agent_transition(gw->store, id, AGENT_EV_VERIFY, NULL,
			    gateway_now(), &a, err, sizeof(err));
			if (rc == STORE_OK)
				rc = store_agent_transition(gw->store, id,
				    AGENT_EV_VERIFY_FAIL, "agent is not connected",
				    gateway_now(), &a, err, sizeof(err));
		}
	} else if (strcmp(action, "revoke") == 0) {
		rc = store_agent_transition(gw->store, id, AGENT_EV_REVOKE, NULL,
		    gateway_now(), &a, err, sizeof(err));
		if (rc == STORE_OK) {
			info("agent %s revoked", id);
			if (s != NULL)
				session_kick(s, "revoked", "agent revoked by an operator");
		}
	} else {
		respond_error(r, 404, "no action \"%s\": use approve, verify or revoke", action);
		return;
	}
	if (rc == STORE_REFUSED)
		respond_error(r, 409, "%s", err);
	else if (rc != STORE_OK)
		respond_error(r, 500, "store: %s", err);
	else
		respond_json(r, 200, agent_json(gw, &a));
}

/* ---- routing ---- */

/* Splits "/v1/a/b/c" into at most max segments (pointers into buf). */
static size_t
split_path(char *buf, char **seg, size_t max)
{
	size_t n = 0;
	char *save = NULL;

	for (char *p = strtok_r(buf, "/", &save); p != NULL; p = strtok_r(NULL, "/", &save)) {
		if (n == max)
			return max + 1;
		seg[n++] = p;
	}
	return n;
}

static void
admin_route(struct gateway *gw, const struct api_request *req, struct api_response *r)
{
	char buf[512];
	char *seg[6];
	size_t n;
	int get = strcmp(req->method, "GET") == 0, post = strcmp(req->method, "POST") == 0;

	snprintf(buf, sizeof(buf), "%s", req->path);
	n = split_path(buf, seg, 5);
	/* seg[0] is "v1" */
	if (n >= 2 && strcmp(seg[1], "clusters") == 0) {
		if (n == 2 && post)
			return clusters_create(gw, req, r);
		if (n == 2 && get)
			return clusters_list(gw, r);
		if (n == 3 && get)
			return clusters_get(gw, seg[2], r);
		if (n == 4 && post && strcmp(seg[3], "tokens") == 0)
			return tokens_create(gw, seg[2], req, r);
	} else if (n >= 2 && strcmp(seg[1], "agents") == 0) {
		if (n == 2 && get)
			return agents_list(gw, req, r);
		if (n == 3 && get)
			return agents_get(gw, seg[2], r);
		if (n == 4 && post)
			return agents_action(gw, seg[2], seg[3], r);
	}
	respond_error(r, 404, "no route %s %s", req->method, req->path);
}

void
api_handle(struct gateway *gw, const struct api_request *req, struct api_response *r)
{
	memset(r, 0, sizeof(*r));
	if (strcmp(req->path, "/healthz") == 0) {
		respond_text(r, 200, "text/plain", "ok\n", 3);
	} else if (strcmp(req->path, "/readyz") == 0) {
		if (gw->stopping)
			respond_text(r, 503, "text/plain", "stopping\n", 9);
		else
			respond_text(r, 200, "text/plain", "ready\n", 6);
	} else if (strcmp(req->path, "/v1/ca") == 0 && strcmp(req->method, "GET") == 0) {
		respond_text(r, 200, "application/x-pem-file", gw->ca_pem, gw->ca_pem_len);
	} else if (strcmp(req->path, "/v1/connect") == 0) {
		respond_error(r, 400, "/v1/connect takes a WebSocket upgrade with "
		    "subprotocol %s", "tether.v1");
	} else if (strncmp(req->path, "/v1/", 4) == 0) {
		if (admin_authorized(gw, req, r))
			admin_route(gw, req, r);
	} else {
		respond_error(r, 404, "no route %s %s", req->method, req->path);
	}
	if (r->body == NULL)
		respond_text(r, 500, "text/plain", "out of memory\n", 14);
}

void
api_upgrade(struct gateway *gw, const struct api_request *req, struct upgrade *u)
{
	char reason[600];

	if (dial_matches(req->path)) {
		dial_upgrade(gw, req, u);
		return;
	}
	snprintf(reason, sizeof(reason), "no WebSocket endpoint at %s", req->path);
	upgrade_refuse(u, 404, reason);
}
