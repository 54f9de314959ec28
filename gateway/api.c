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
 *        (an agent's "replica": the replica holding its tunnel, from the
 *        store's presence records (docs/0017); null when none does)
 *   GET  /v1/agents/ID                                         -> agent
 *   POST /v1/agents/ID/approve|verify|revoke                   -> agent
 *   POST /v1/users                     {"name","clusters"}     -> 201 user token (secret shown once)
 *   GET  /v1/users                                             -> [user token, no secret]
 *   POST /v1/users/NAME/revoke                                 -> {"name","revoked_tokens"}
 *   POST /v1/clusters/ID/kubeconfig    {"user"}                -> 201 kubeconfig (YAML)
 *
 * (/metrics, /v1/status and /ui/ are routes of their own: metrics_render.c,
 * ui.c; /v1/connect is the tunnel's, tunnel.c; dial is dial.c's.)
 *
 * Only admin tokens reach these routes; a user token gets 403.  User
 * tokens reach clusters they are scoped to, through the dial endpoint
 * (access.h).
 */
#include "api.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>
#include <openssl/crypto.h>

#include "access.h"
#include "agentkey.h"
#include "apibody.h"
#include "gateway.h"
#include "hub.h"
#include "joindoc.h"
#include "log.h"
#include "notices.h"
#include "route.h"
#include "session.h"
#include "store.h"
#include "token.h"

/* A store failure: 503 when it was for want of space (the same request can
 * succeed once there is some), else 500; the JSON error says which. */
static void
respond_store_error(struct route_response *r, int rc, const char *err)
{
	route_respond_error(r, rc == STORE_FULL ? 503 : 500, "store: %s", err);
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

static int
presence_cmp(const void *a, const void *b)
{
	return strcmp(((const struct store_presence *)a)->agent_id,
	    ((const struct store_presence *)b)->agent_id);
}

/* Every live presence record, sorted by agent id (one store query; caller
 * frees).  NULL and *n 0 when the store fails: replicas then show null. */
static struct store_presence *
presence_sorted(struct gateway *gw, size_t *n)
{
	struct store_presence *ps = NULL;
	char err[STORE_ERROR_MAX + 1];

	*n = 0;
	if (store_presence_list(gw->store, gateway_now_ms(), &ps, n, err,
	    sizeof(err)) != STORE_OK) {
		warn("api: cannot read presence", KV_S("err", err));
		*n = 0;
		return NULL;
	}
	qsort(ps, *n, sizeof(*ps), presence_cmp);
	return ps;
}

/* The replica holding agent_id's tunnel, or NULL. */
static const char *
presence_replica(const struct store_presence *ps, size_t n, const char *agent_id)
{
	struct store_presence key;
	const struct store_presence *p;

	snprintf(key.agent_id, sizeof(key.agent_id), "%s", agent_id);
	p = n > 0 ? bsearch(&key, ps, n, sizeof(*ps), presence_cmp) : NULL;
	return p != NULL ? p->replica : NULL;
}

/* replica: from presence_replica; this replica's own hub counts too. */
static json_t *
agent_json(struct gateway *gw, const struct store_agent *a, const char *replica)
{
	int here = hub_find(gw->hub, a->id) != NULL;

	if (here)
		replica = gw->replica_id;
	return json_pack("{s:s, s:s, s:s, s:s, s:s, s:b, s:o, s:o, s:o}",
	    "id", a->id, "cluster", a->cluster, "node", a->node,
	    "state", agent_state_name(a->state), "last_error", a->last_error,
	    "connected", here || replica != NULL,
	    "replica", replica != NULL ? json_string(replica) : json_null(),
	    "created_at", time_json(a->created_at),
	    "updated_at", time_json(a->updated_at));
}

/* agent_json with a presence lookup of its own (one agent). */
static json_t *
agent_json_one(struct gateway *gw, const struct store_agent *a)
{
	size_t n;
	struct store_presence *ps = presence_sorted(gw, &n);
	json_t *v = agent_json(gw, a, presence_replica(ps, n, a->id));

	free(ps);
	return v;
}

/* ---- request helpers ---- */

static int
admin_authorized(struct gateway *gw, const struct route_request *req,
    struct route_response *r)
{
	char principal[64], err[192];
	int status;

	status = access_admin(gw, req->authorization, principal,
	    sizeof(principal), err, sizeof(err));
	if (status == 0)
		return 1;
	route_respond_error(r, status, "%s", err);
	return 0;
}

/* Parses the request's body as kind wants (apibody.c).  1 with *b filled
 * (the caller frees it with api_body_free), or 0 after responding 400/413. */
static int
body_parsed(enum api_body_kind kind, const struct route_request *req,
    struct api_body *b, struct route_response *r)
{
	char why[256];
	int status = api_body_parse(kind, req->body, req->body_len,
	    req->body_too_large, b, why, sizeof(why));

	if (status == 0)
		return 1;
	route_respond_error(r, status, "%s", why);
	return 0;
}

/* ---- clusters ---- */

static void
clusters_create(struct gateway *gw, const struct route_request *req, struct route_response *r)
{
	struct store_cluster c;
	struct api_body b;
	char err[STORE_ERROR_MAX + 1] = "";
	const char *name;
	int rc;

	if (!body_parsed(API_BODY_CLUSTER, req, &b, r))
		return;
	name = b.name;
	rc = store_cluster_create(gw->store, name, gateway_now(), &c, err, sizeof(err));
	if (rc == STORE_CONFLICT)
		route_respond_error(r, 409, "cluster name \"%s\" is taken", name);
	else if (rc == STORE_REFUSED)
		route_respond_error(r, 400, "%s", err);
	else if (rc != STORE_OK)
		respond_store_error(r, rc, err);
	else {
		info("cluster created", KV_S("cluster", c.id), KV_S("name", c.name));
		route_respond_json(r, 201, cluster_json(gw, &c));
	}
	api_body_free(&b);
}

static void
clusters_list(struct gateway *gw, struct route_response *r)
{
	struct store_cluster *cs = NULL;
	size_t n = 0;
	json_t *arr;

	if (store_cluster_list(gw->store, &cs, &n) != STORE_OK) {
		route_respond_error(r, 500, "store: cannot list clusters");
		return;
	}
	arr = json_array();
	for (size_t i = 0; i < n; i++)
		json_array_append_new(arr, cluster_json(gw, &cs[i]));
	free(cs);
	route_respond_json(r, 200, arr);
}

static void
clusters_get(struct gateway *gw, const char *id, struct route_response *r)
{
	struct store_cluster c;

	if (store_cluster_get(gw->store, id, &c) != STORE_OK) {
		route_respond_error(r, 404, "no cluster %s", id);
		return;
	}
	route_respond_json(r, 200, cluster_json(gw, &c));
}

static void
tokens_create(struct gateway *gw, const char *cluster, const struct route_request *req,
    struct route_response *r)
{
	struct store_cluster c;
	struct store_token rec;
	struct token t;
	struct joindoc doc;
	struct api_body b;
	EVP_PKEY *key = NULL;
	char err[STORE_ERROR_MAX + 1] = "", *text = NULL;
	int rc;

	memset(&t, 0, sizeof(t));
	memset(&doc, 0, sizeof(doc));
	if (!body_parsed(API_BODY_TOKENS, req, &b, r))
		return;
	if (store_cluster_get(gw->store, cluster, &c) != STORE_OK) {
		route_respond_error(r, 404, "no cluster %s", cluster);
		goto out;
	}
	memset(&rec, 0, sizeof(rec));
	if (token_generate(TOKEN_IMPORT, &t) != 0 ||
	    (key = token_import_key(&t)) == NULL ||
	    agentkey_public(key, rec.verifier) != 0) {
		route_respond_error(r, 500, "cannot generate a token");
		goto out;
	}
	snprintf(rec.id, sizeof(rec.id), "%s", t.id);
	rec.kind = TOKEN_IMPORT;
	snprintf(rec.cluster, sizeof(rec.cluster), "%s", c.id);
	rec.created_at = gateway_now();
	rec.expires_at = rec.created_at + b.ttl_seconds;
	rec.uses_left = b.uses;
	rec.approval_manual = b.approval_manual;
	if ((rc = store_token_insert(gw->store, &rec, err, sizeof(err))) != STORE_OK) {
		respond_store_error(r, rc, err);
		goto out;
	}
	snprintf(doc.gateway_url, sizeof(doc.gateway_url), "%s", gw->url);
	snprintf(doc.ca_checksum, sizeof(doc.ca_checksum), "%s", gw->ca_checksum);
	snprintf(doc.cluster, sizeof(doc.cluster), "%s", c.id);
	token_format(&t, doc.token);
	doc.expires_at = rec.expires_at;
	text = joindoc_format(&doc);
	if (text == NULL) {
		route_respond_error(r, 500, "cannot format the join document");
		goto out;
	}
	info("import token created", KV_S("token", rec.id), KV_S("cluster", c.id),
	    KV_I("uses", b.uses), KV_I("ttl_s", b.ttl_seconds),
	    KV_S("approval", b.approval_manual ? "manual" : "auto"));
	{
		size_t n = strlen(text);
		char *withnl = malloc(n + 2);
		if (withnl != NULL) {
			memcpy(withnl, text, n);
			withnl[n] = '\n';
			route_respond_text(r, 201, "application/json", withnl, n + 1);
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
	api_body_free(&b);
}

/* ---- agents ---- */

static void
agents_list(struct gateway *gw, const struct route_request *req, struct route_response *r)
{
	struct store_agent *as = NULL;
	struct store_presence *ps;
	struct store_cluster c;
	char cluster[STORE_ID_MAX + 1];
	const char *filter = NULL;
	size_t n = 0, np;
	json_t *arr;

	switch (api_query_param(req->query, "cluster", cluster, sizeof(cluster))) {
	case -1:
		break;
	case -2:
		route_respond_error(r, 400, "query parameter cluster: given twice or too long");
		return;
	default:
		if (store_cluster_get(gw->store, cluster, &c) != STORE_OK) {
			route_respond_error(r, 404, "no cluster %s", cluster);
			return;
		}
		filter = cluster;
	}
	if (store_agent_list(gw->store, filter, &as, &n) != STORE_OK) {
		route_respond_error(r, 500, "store: cannot list agents");
		return;
	}
	ps = presence_sorted(gw, &np);
	arr = json_array();
	for (size_t i = 0; i < n; i++)
		json_array_append_new(arr, agent_json(gw, &as[i],
		    presence_replica(ps, np, as[i].id)));
	free(ps);
	free(as);
	route_respond_json(r, 200, arr);
}

static void
agents_get(struct gateway *gw, const char *id, struct route_response *r)
{
	struct store_agent a;

	if (store_agent_get(gw->store, id, &a) != STORE_OK) {
		route_respond_error(r, 404, "no agent %s", id);
		return;
	}
	route_respond_json(r, 200, agent_json_one(gw, &a));
}

/* Whether a live replica's lease holds agent_id's tunnel (one store read). */
static int
held_elsewhere(struct gateway *gw, const char *agent_id)
{
	size_t n;
	struct store_presence *ps = presence_sorted(gw, &n);
	int held = presence_replica(ps, n, agent_id) != NULL;

	free(ps);
	return held;
}

/* approve, verify, revoke: persist first, then tell the connected agent;
 * another replica holding it hears the change and acts (notices.h). */
static void
agents_action(struct gateway *gw, const char *id, const char *action,
    struct route_response *r)
{
	struct store_agent a;
	struct session *s = hub_find(gw->hub, id);
	char err[STORE_ERROR_MAX + 1] = "";
	int rc;

	if (store_agent_get(gw->store, id, &a) != STORE_OK) {
		route_respond_error(r, 404, "no agent %s", id);
		return;
	}
	if (strcmp(action, "approve") == 0) {
		rc = store_agent_transition(gw->store, id, AGENT_EV_APPROVE, NULL,
		    gateway_now(), &a, err, sizeof(err));
		if (rc == STORE_OK) {
			info("agent approved", KV_S("agent", id));
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
			/* Held by another replica: it hears the change and runs
			 * the round trip (docs/0021). */
			if (rc == STORE_OK && !held_elsewhere(gw, id))
				rc = store_agent_transition(gw->store, id,
				    AGENT_EV_VERIFY_FAIL, "agent is not connected",
				    gateway_now(), &a, err, sizeof(err));
		}
	} else if (strcmp(action, "revoke") == 0) {
		rc = store_agent_transition(gw->store, id, AGENT_EV_REVOKE, NULL,
		    gateway_now(), &a, err, sizeof(err));
		if (rc == STORE_OK) {
			info("agent revoked", KV_S("agent", id));
			if (s != NULL)
				session_kick(s, "revoked", "agent revoked by an operator");
		}
	} else {
		route_respond_error(r, 404, "no action \"%s\": use approve, verify or revoke", action);
		return;
	}
	if (rc == STORE_REFUSED)
		route_respond_error(r, 409, "%s", err);
	else if (rc != STORE_OK)
		respond_store_error(r, rc, err);
	else
		route_respond_json(r, 200, agent_json_one(gw, &a));
}

/* ---- users and kubeconfigs ---- */

static json_t *
user_clusters_json(const struct store_user_token *u)
{
	json_t *arr = json_array();

	for (size_t i = 0; arr != NULL && i < u->nclusters; i++) {
		if (json_array_append_new(arr, json_string(u->clusters[i])) != 0) {
			json_decref(arr);
			return NULL;
		}
	}
	return arr;
}

static json_t *
user_json(const struct store_user_token *u)
{
	return json_pack("{s:s, s:s, s:o, s:o, s:b}", "name", u->name,
	    "token_id", u->id, "clusters", user_clusters_json(u),
	    "created_at", time_json(u->created_at), "revoked", u->revoked);
}

/*
 * Issues a user token to name, scoped to clusters: *t holds the secret
 * (the caller clears it) and *u the stored record.  Returns 0, or -1 after
 * responding (400 bad name or list, 404 unknown cluster, 500).
 */
static int
user_issue(struct gateway *gw, const char *name, const char *const *clusters,
    size_t nclusters, struct token *t, struct store_user_token *u,
    struct route_response *r)
{
	struct store_token rec;
	char err[STORE_ERROR_MAX + 1] = "";
	int rc;

	if (!store_user_name_valid(name)) {
		route_respond_error(r, 400, "invalid user name: use 1 to %d characters of "
		    "A-Z a-z 0-9 . _ @ -", STORE_NAME_MAX);
		return -1;
	}
	memset(&rec, 0, sizeof(rec));
	if (token_generate(TOKEN_USER, t) != 0) {
		route_respond_error(r, 500, "cannot generate a token");
		return -1;
	}
	snprintf(rec.id, sizeof(rec.id), "%s", t->id);
	rec.kind = TOKEN_USER;
	snprintf(rec.name, sizeof(rec.name), "%s", name);
	token_hash(t, rec.verifier);
	rec.uses_left = -1;
	rec.created_at = gateway_now();
	rc = store_user_token_create(gw->store, &rec, clusters, nclusters, u,
	    err, sizeof(err));
	OPENSSL_cleanse(rec.verifier, sizeof(rec.verifier));
	switch (rc) {
	case STORE_OK:
		return 0;
	case STORE_REFUSED:
		route_respond_error(r, 400, "%s", err);
		break;
	case STORE_NOTFOUND:
		route_respond_error(r, 404, "%s", err);
		break;
	default:
		respond_store_error(r, rc, err);
		break;
	}
	token_clear(t);
	return -1;
}

/* Sends text that holds a secret, ending it with a newline as every
 * answer does, then wipes the caller's copy. */
static void
respond_secret(struct route_response *r, int status, const char *type, char *text)
{
	size_t n = strlen(text);
	int nl = n == 0 || text[n - 1] != '\n';

	r->status = status;
	r->content_type = type;
	r->body_len = 0;
	if ((r->body = malloc(n + 2)) != NULL) {
		memcpy(r->body, text, n);
		if (nl)
			r->body[n++] = '\n';
		r->body[n] = '\0';
		r->body_len = n;
	}
	OPENSSL_cleanse(text, strlen(text));
}

static void
users_create(struct gateway *gw, const struct route_request *req, struct route_response *r)
{
	struct store_user_token u;
	struct token t;
	struct api_body b;
	char tokstr[TOKEN_STR_MAX], *text = NULL;
	json_t *out;

	memset(&t, 0, sizeof(t));
	memset(tokstr, 0, sizeof(tokstr));
	if (!body_parsed(API_BODY_USER, req, &b, r))
		return;
	if (user_issue(gw, b.name, b.clusters, b.nclusters, &t, &u, r) != 0)
		goto out;
	token_format(&t, tokstr);
	out = json_pack("{s:s, s:s, s:s, s:o, s:o}", "name", u.name,
	    "token_id", u.id, "token", tokstr, "clusters", user_clusters_json(&u),
	    "created_at", time_json(u.created_at));
	text = out != NULL ? json_dumps(out, JSON_COMPACT) : NULL;
	json_decref(out);
	if (text == NULL) {
		route_respond_error(r, 500, "out of memory");
		goto out;
	}
	info("user token issued", KV_S("token", u.id), KV_S("user", u.name),
	    KV_U("clusters", u.nclusters));
	respond_secret(r, 201, "application/json", text);
out:
	free(text);
	OPENSSL_cleanse(tokstr, sizeof(tokstr));
	token_clear(&t);
	api_body_free(&b);
}

static void
users_list(struct gateway *gw, struct route_response *r)
{
	struct store_user_token *us = NULL;
	size_t n = 0;
	json_t *arr;

	if (store_user_token_list(gw->store, &us, &n) != STORE_OK) {
		route_respond_error(r, 500, "store: cannot list user tokens");
		return;
	}
	arr = json_array();
	for (size_t i = 0; arr != NULL && i < n; i++)
		json_array_append_new(arr, user_json(&us[i]));
	free(us);
	route_respond_json(r, 200, arr);
}

static void
users_revoke(struct gateway *gw, const char *name, struct route_response *r)
{
	char err[STORE_ERROR_MAX + 1] = "";
	int64_t count = 0;
	int rc;

	rc = store_user_revoke(gw->store, name, &count, err, sizeof(err));
	/* Whatever this user proved a moment ago no longer counts. */
	access_revoked();
	if (rc == STORE_REFUSED) {
		route_respond_error(r, 400, "%s", err);
		return;
	}
	if (rc == STORE_NOTFOUND) {
		route_respond_error(r, 404, "%s", err);
		return;
	}
	if (rc != STORE_OK) {
		respond_store_error(r, rc, err);
		return;
	}
	info("user tokens revoked", KV_S("user", name), KV_I("tokens", count));
	route_respond_json(r, 200, json_pack("{s:s, s:I}", "name", name,
	    "revoked_tokens", (json_int_t)count));
}

/*
 * s as a YAML double-quoted scalar in out, or -1 if it does not fit or
 * holds a control character.  Every value of a kubeconfig is quoted: a
 * plain scalar may not start with '@', and a URL holds ':'.
 */
static int
yaml_quote(const char *s, char *out, size_t outlen)
{
	size_t o = 0;

	if (outlen < 3)
		return -1;
	out[o++] = '"';
	for (; *s != '\0'; s++) {
		if ((unsigned char)*s < 0x20 || *s == 0x7f)
			return -1;
		if (o + 4 > outlen)
			return -1;
		if (*s == '"' || *s == '\\')
			out[o++] = '\\';
		out[o++] = *s;
	}
	out[o++] = '"';
	out[o] = '\0';
	return 0;
}

/* The gateway's CA certificate (PEM) in base64, as kubeconfigs carry it;
 * NULL when out of memory. */
static char *
ca_base64(const struct gateway *gw)
{
	char *b64;

	if (gw->ca_pem_len > (size_t)INT32_MAX / 2)
		return NULL;
	if ((b64 = malloc(4 * ((gw->ca_pem_len + 2) / 3) + 1)) == NULL)
		return NULL;
	EVP_EncodeBlock((unsigned char *)b64, (const unsigned char *)gw->ca_pem,
	    (int)gw->ca_pem_len);
	return b64;
}

/*
 * The kubeconfig: one cluster named by its id, one user, one context
 * "USER@CLUSTER", made current.  Returns a malloc'd string holding the
 * token (the caller wipes it), or NULL.
 */
static char *
kubeconfig_format(const struct gateway *gw, const char *cluster,
    const char *user, const char *token)
{
	static const char fmt[] =
	    "apiVersion: v1\n"
	    "kind: Config\n"
	    "clusters:\n"
	    "- name: %s\n"
	    "  cluster:\n"
	    "    server: %s\n"
	    "    certificate-authority-data: %s\n"
	    "users:\n"
	    "- name: %s\n"
	    "  user:\n"
	    "    token: %s\n"
	    "contexts:\n"
	    "- name: %s\n"
	    "  context:\n"
	    "    cluster: %s\n"
	    "    user: %s\n"
	    "current-context: %s\n"
	    "preferences: {}\n";
	char qcluster[2 * STORE_ID_MAX + 3], quser[2 * STORE_NAME_MAX + 3];
	char qserver[2 * sizeof(gw->url) + 64], qtoken[2 * TOKEN_STR_MAX + 3];
	char server[sizeof(gw->url) + 64], context[STORE_NAME_MAX + STORE_ID_MAX + 2];
	char qcontext[2 * sizeof(context) + 3];
	char *ca = NULL, *text = NULL;
	int n;

	snprintf(server, sizeof(server), "%s/k8s/clusters/%s", gw->url, cluster);
	snprintf(context, sizeof(context), "%s@%s", user, cluster);
	if (yaml_quote(cluster, qcluster, sizeof(qcluster)) != 0 ||
	    yaml_quote(user, quser, sizeof(quser)) != 0 ||
	    yaml_quote(server, qserver, sizeof(qserver)) != 0 ||
	    yaml_quote(token, qtoken, sizeof(qtoken)) != 0 ||
	    yaml_quote(context, qcontext, sizeof(qcontext)) != 0 ||
	    (ca = ca_base64(gw)) == NULL)
		goto out;
	n = snprintf(NULL, 0, fmt, qcluster, qserver, ca, quser, qtoken,
	    qcontext, qcluster, quser, qcontext);
	if (n < 0 || (text = malloc((size_t)n + 1)) == NULL)
		goto out;
	snprintf(text, (size_t)n + 1, fmt, qcluster, qserver, ca, quser, qtoken,
	    qcontext, qcluster, quser, qcontext);
out:
	OPENSSL_cleanse(qtoken, sizeof(qtoken));
	free(ca);
	return text;
}

static void
kubeconfig_create(struct gateway *gw, const char *cluster,
    const struct route_request *req, struct route_response *r)
{
	struct store_cluster c;
	struct store_user_token u;
	struct token t;
	struct api_body b;
	char tokstr[TOKEN_STR_MAX], *text = NULL;
	const char *ids[1];

	memset(&t, 0, sizeof(t));
	memset(tokstr, 0, sizeof(tokstr));
	if (!body_parsed(API_BODY_KUBECONFIG, req, &b, r))
		return;
	if (store_cluster_get(gw->store, cluster, &c) != STORE_OK) {
		route_respond_error(r, 404, "no cluster %s", cluster);
		goto out;
	}
	ids[0] = c.id;
	if (user_issue(gw, b.user, ids, 1, &t, &u, r) != 0)
		goto out;
	token_format(&t, tokstr);
	if ((text = kubeconfig_format(gw, c.id, u.name, tokstr)) == NULL) {
		/* The token exists but nobody holds it: harmless, and revoked
		 * with the user's others. */
		route_respond_error(r, 500, "cannot format the kubeconfig");
		goto out;
	}
	info("kubeconfig issued", KV_S("cluster", c.id), KV_S("user", u.name),
	    KV_S("token", u.id));
	respond_secret(r, 201, "application/yaml", text);
out:
	if (text != NULL) {
		OPENSSL_cleanse(text, strlen(text));
		free(text);
	}
	OPENSSL_cleanse(tokstr, sizeof(tokstr));
	token_clear(&t);
	api_body_free(&b);
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
admin_route(struct gateway *gw, const struct route_request *req, struct route_response *r)
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
		if (n == 4 && post && strcmp(seg[3], "kubeconfig") == 0)
			return kubeconfig_create(gw, seg[2], req, r);
	} else if (n >= 2 && strcmp(seg[1], "users") == 0) {
		if (n == 2 && post)
			return users_create(gw, req, r);
		if (n == 2 && get)
			return users_list(gw, r);
		if (n == 4 && post && strcmp(seg[3], "revoke") == 0)
			return users_revoke(gw, seg[2], r);
	} else if (n >= 2 && strcmp(seg[1], "agents") == 0) {
		if (n == 2 && get)
			return agents_list(gw, req, r);
		if (n == 3 && get)
			return agents_get(gw, seg[2], r);
		if (n == 4 && post)
			return agents_action(gw, seg[2], seg[3], r);
	}
	route_respond_error(r, 404, "no route %s %s", req->method, req->path);
}

/* 503 while draining or while the store is out of reach (docs/0021). */
static void
readyz(struct gateway *gw, struct route_response *r)
{
	char why[384], body[416];
	int n;

	if (gw->stopping) {
		route_respond_text(r, 503, "text/plain", "stopping\n", 9);
	} else if (notices_store_problem(gw, why, sizeof(why)) != NULL) {
		n = snprintf(body, sizeof(body), "store unreachable: %s\n", why);
		route_respond_text(r, 503, "text/plain", body,
		    n < (int)sizeof(body) ? (size_t)n : sizeof(body) - 1);
	} else {
		route_respond_text(r, 200, "text/plain", "ready\n", 6);
	}
}

static void
api_handle(struct gateway *gw, const struct route_request *req,
    struct route_response *r)
{
	memset(r, 0, sizeof(*r));
	if (strcmp(req->path, "/healthz") == 0) {
		route_respond_text(r, 200, "text/plain", "ok\n", 3);
	} else if (strcmp(req->path, "/readyz") == 0) {
		readyz(gw, r);
	} else if (strcmp(req->path, "/v1/ca") == 0 && strcmp(req->method, "GET") == 0) {
		route_respond_text(r, 200, "application/x-pem-file", gw->ca_pem,
		    gw->ca_pem_len);
	} else if (strncmp(req->path, "/v1/", 4) == 0) {
		if (admin_authorized(gw, req, r))
			admin_route(gw, req, r);
	} else {
		route_respond_error(r, 404, "no route %s %s", req->method, req->path);
	}
}

const struct route api_route = {
	.name = "api",
	.request = api_handle,
};
