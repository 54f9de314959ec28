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
 *   POST /v1/agents/ID/approve|verify|revoke|rotate-key        -> agent
 *   POST /v1/users                     {"name","clusters"}     -> 201 user token (secret shown once)
 *   GET  /v1/users                                             -> [user token, no secret]
 *   POST /v1/users/NAME/revoke                                 -> {"name","revoked_tokens"}
 *   POST /v1/tokens/ID/revoke          (one user token)        -> user token
 *   POST /v1/clusters/ID/kubeconfig    {"user"}                -> 201 kubeconfig (YAML)
 *   GET  /v1/gateway/urls                                      -> {"urls"}
 *   POST /v1/gateway/urls              {"urls"}                -> {"urls","agents_told"}
 *        (the public URL list pushed to agents, docs/0031)
 *   GET  /v1/ca/status                                         -> {"phase","ca","new_ca",
 *        "old_ca","handed_out","agents","holding_new_ca","connected",
 *        "connected_holding_new_ca"} (CA rotation, docs/0033; the counts
 *        are the store's, every replica's agents; null in phase none)
 *
 * (/metrics, /v1/status and /ui/ are routes of their own: metrics_route.c,
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
#include "agentdir.h"
#include "agentkey.h"
#include "api_act.h"
#include "apibody.h"
#include "carotate.h"
#include "face.h"
#include "gateway.h"
#include "joindoc.h"
#include "livestreams.h"
#include "log.h"
#include "loop.h"
#include "metrics.h"
#include "notices.h"
#include "route.h"
#include "server.h"
#include "settings.h"
#include "store.h"
#include "answer_later.h"
#include "answer_there.h"
#include "token.h"

/* ---- one admin request, in two parts ---- */

struct api_job;

/*
 * One admin endpoint (docs/0022): its store part runs on the store thread
 * (answer_later.h: its own connection; it reads the job's inputs and
 * writes its results, nothing else), its effects part on the loop that
 * asked once the store part is done: agent directory lookups, the cache of
 * proven tokens, and the answer.  body: the kind of JSON body it takes
 * plus one, or 0 for none.  An endpoint whose effects must run on another
 * loop first (a session is told on its own loop, the URL list on loop 0:
 * docs/0040) has effects_later instead, which answers with api_job_finish
 * once they came back.
 */
struct api_handler {
	int body;
	void (*store)(struct store *st, struct api_job *j);
	void (*effects)(struct gateway *gw, struct api_job *j,
	    struct route_response *r);
	void (*effects_later)(struct gateway *gw, struct api_job *j);
};

/*
 * An admin request on its way: what the loop copied of the request (the
 * request itself lives only during the route's call), then what the store
 * part found.  Wiped when freed (for some endpoints it holds a new
 * secret).  Cost: ~6 KiB while it is out (a user token's
 * record holds 64 cluster ids), at most ANSWER_LATER_MAX of them.
 */
struct api_job {
	const struct api_handler *h;
	/* in */
	char method[16];
	char path[512];
	char id[128];                        /* the path's cluster, agent or user */
	char action[64];                     /* POST /v1/agents/ID/ACTION */
	char filter[STORE_ID_MAX + 1];       /* GET /v1/agents?cluster= ("": all) */
	int held;                            /* the agent's tunnel is here (agentdir) */
	struct api_body b;
	int refuse_status;                   /* a bad body or query (400, 413), */
	char refuse_why[256];                /* told after the admin check */
	/* out */
	int auth_status;                     /* access_admin's */
	char auth_err[192];
	int rc;                              /* the store part's result */
	char err[STORE_ERROR_MAX + 1];
	struct store_cluster c;
	struct store_agent a;
	struct store_agent approved;         /* approve: before the VERIFY */
	int verifying;                       /* approve: a VERIFY followed */
	struct { int from, to; } moves[3];   /* the agent's state changes, */
	size_t nmoves;                       /* for metrics_agent_moved */
	void *rows;                          /* a list read: clusters, agents, users */
	size_t n;
	struct store_presence *ps;           /* live presence, sorted by agent */
	size_t np;
	struct store_token rec;              /* a new token's record */
	struct token t;                      /* a new token's secret */
	struct store_user_token u;           /* a new user token */
	int64_t count;                       /* users revoke: tokens revoked */
	char urls[STORE_URLS_MAX + 1];       /* gateway urls: as stored */
	char ca_sum[CA_CHECKSUM_MAX];        /* ca status: the new CA ("": none) */
	struct store_ca_count ca_count;      /* ca status: who holds it */
	size_t told;                         /* gateway urls: agents told */
	struct reply *reply;                 /* the answer's ticket (server.h) */
};

static void
api_job_free(void *arg)
{
	struct api_job *j = arg;

	api_body_free(&j->b);
	free(j->rows);
	free(j->ps);
	token_clear(&j->t);
	OPENSSL_cleanse(j, sizeof(*j));
	free(j);
}

/* On the store thread: who asks, then the endpoint's own store part. */
static void
api_job_store(struct store *st, const char *authorization, void *arg)
{
	struct api_job *j = arg;
	char principal[64];

	j->auth_status = access_admin(st, authorization, principal,
	    sizeof(principal), j->auth_err, sizeof(j->auth_err));
	if (j->auth_status == 0 && j->refuse_status == 0 && j->h->store != NULL)
		j->h->store(st, j);
}

/* Sends r as j's answer and frees j; on the loop that asked.  j's
 * ticket is gone when that loop stopped meanwhile (api_job_visit): then
 * only frees. */
static void
api_job_finish(struct api_job *j, struct route_response *r)
{
	if (j->reply != NULL)
		reply_send(j->reply, r);
	else
		free(r->body);
	api_job_free(j);
}

/* On the loop that asked (answer_later_held): the agent counts moved by
 * what the store part changed, then refusals first, in the order the
 * checks were made, then the endpoint's effects and answer. */
static void
api_job_effects(struct gateway *gw, void *arg, struct reply *t)
{
	struct api_job *j = arg;
	struct route_response r = { 0 };

	j->reply = t;
	for (size_t i = 0; i < j->nmoves; i++)
		metrics_agent_moved(j->moves[i].from, j->moves[i].to);
	if (j->auth_status != 0)
		route_respond_error(&r, j->auth_status, "%s", j->auth_err);
	else if (j->refuse_status != 0)
		route_respond_error(&r, j->refuse_status, "%s", j->refuse_why);
	else if (j->h->effects_later != NULL) {
		j->h->effects_later(gw, j);
		return;
	} else
		j->h->effects(gw, j, &r);
	api_job_finish(j, &r);
}

/* A job on its way to another loop and back (api_job_visit). */
struct api_visit {
	struct gateway *gw;
	struct api_job *j;
	struct loop *home;
	void (*there)(struct gateway *gw, struct api_job *j);
	void (*back)(struct gateway *gw, struct api_job *j);
};

static void
visit_back(void *arg)
{
	struct api_visit *v = arg;

	v->back(v->gw, v->j);
	free(v);
}

/* The loop that asked stopped (shutdown): its connection went with it;
 * the job is freed, its ticket by answer_there_orphan. */
static void
visit_orphan(void *arg)
{
	struct api_visit *v = arg;

	answer_there_orphan(v->j->reply);
	v->j->reply = NULL;
	api_job_free(v->j);
	free(v);
}

static void
visit_there(void *arg)
{
	struct api_visit *v = arg;

	v->there(v->gw, v->j);
	(void)loop_call(v->home, visit_back, v, visit_orphan);
}

/* The far loop stopped (shutdown): there did not run; back still runs. */
static void
visit_dropped(void *arg)
{
	struct api_visit *v = arg;

	(void)loop_call(v->home, visit_back, v, visit_orphan);
}

/*
 * Runs there(gw, j) on loop `to` (what lives only there: loop 0's face
 * and hub), then back(gw, j) on the calling loop, which answers.  j
 * crosses as the message's arg: the far side reads and writes only j's
 * own fields, never its ticket.  Off any loop, or without gw->loops (unit
 * tests), both inline.  Out of memory: back only.
 */
static void
api_job_visit(struct gateway *gw, struct api_job *j, unsigned to,
    void (*there)(struct gateway *gw, struct api_job *j),
    void (*back)(struct gateway *gw, struct api_job *j))
{
	struct loop *home = loop_self();
	struct api_visit *v;

	if (home == NULL || gw->loops == NULL || to >= gw->nloops) {
		there(gw, j);
		back(gw, j);
		return;
	}
	if ((v = malloc(sizeof(*v))) == NULL) {
		warn("api: out of memory to reach another loop",
		    KV_S("path", j->path));
		back(gw, j);
		return;
	}
	*v = (struct api_visit){ .gw = gw, .j = j, .home = home,
	    .there = there, .back = back };
	(void)loop_call(&gw->loops[to], visit_there, v, visit_dropped);
}

/* A store failure: 503 when it was for want of space (the same request can
 * succeed once there is some), else 500; the JSON error says which. */
static void
respond_store_error(struct route_response *r, int rc, const char *err)
{
	route_respond_error(r, rc == STORE_FULL ? 503 : 500, "store: %s", err);
}

/* ---- records as JSON (on the loop: they read the agent directory) ---- */

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
	    "agents_connected", (json_int_t)agentdir_count_cluster(gw->agents, c->id),
	    "created_at", time_json(c->created_at));
}

static int
presence_cmp(const void *a, const void *b)
{
	return strcmp(((const struct store_presence *)a)->agent_id,
	    ((const struct store_presence *)b)->agent_id);
}

/* Store part: every live presence record into j->ps, sorted by agent id.
 * None when the store fails: replicas then show null. */
static void
presence_read(struct store *st, struct api_job *j)
{
	char err[STORE_ERROR_MAX + 1];

	j->np = 0;
	if (store_presence_list(st, &j->ps, &j->np, err,
	    sizeof(err)) != STORE_OK) {
		warn("api: cannot read presence", KV_S("err", err));
		free(j->ps);
		j->ps = NULL;
		j->np = 0;
		return;
	}
	qsort(j->ps, j->np, sizeof(*j->ps), presence_cmp);
}

/* The record of the replica holding agent_id's tunnel, or NULL. */
static const struct store_presence *
presence_of(const struct api_job *j, const char *agent_id)
{
	struct store_presence key;

	snprintf(key.agent_id, sizeof(key.agent_id), "%s", agent_id);
	return j->np > 0 ? bsearch(&key, j->ps, j->np, sizeof(*j->ps),
	    presence_cmp) : NULL;
}

static json_t *
time_or_null(int64_t t)
{
	return t != 0 ? time_json(t) : json_null();
}

/* An agent's key: since when it holds it, and its rotation: "none",
 * "requested" (by an operator, not begun) or "staged" (a new key proven,
 * not yet the only one). */
static json_t *
key_json(const struct store_agent *a)
{
	return json_pack("{s:o, s:s}", "since",
	    time_json(a->key_since != 0 ? a->key_since : a->created_at),
	    "rotation", a->has_next ? "staged" : a->key_rotate ? "requested" : "none");
}

/* A URL list as the store keeps it ("https://a https://b") as an array. */
static json_t *
urls_json(const char *urls)
{
	json_t *arr = json_array();

	for (const char *p = urls; arr != NULL && *p != '\0'; ) {
		size_t len = strcspn(p, " ");

		if (len > 0)
			json_array_append_new(arr, json_stringn(p, len));
		p += len;
		p += strspn(p, " ");
	}
	return arr;
}

/*
 * An agent, its replica from j's presence; this replica's own agents
 * (agentdir.h) count too.  last_seen is now while it is connected, else when its last tunnel
 * came up or ended (the store's; null if it never connected);
 * connected_since is when the tunnel it has now came up (null if none).
 */
static json_t *
agent_json(struct gateway *gw, const struct api_job *j, const struct store_agent *a)
{
	int64_t since = agentdir_since(gw->agents, a->id);
	const struct store_presence *p = since != 0 ? NULL : presence_of(j, a->id);
	const char *replica = since != 0 ? gw->replica_id :
	    p != NULL ? p->replica : NULL;

	if (p != NULL)
		since = p->since_ms / 1000;
	return json_pack("{s:s, s:s, s:s, s:s, s:s, s:b, s:o, s:o, s:o, s:o, s:o, s:o, s:o, s:o, s:o}",
	    "id", a->id, "cluster", a->cluster, "node", a->node,
	    "state", agent_state_name(a->state), "last_error", a->last_error,
	    "connected", since != 0,
	    "replica", replica != NULL ? json_string(replica) : json_null(),
	    "created_at", time_json(a->created_at),
	    "updated_at", time_json(a->updated_at),
	    "version", a->version[0] != '\0' ? json_string(a->version) : json_null(),
	    "last_seen", time_or_null(since != 0 ? gateway_now() : a->last_seen),
	    "connected_since", time_or_null(since),
	    "key", key_json(a),
	    "urls", a->urls_known ? urls_json(a->urls) : json_null(),
	    "cas", a->cas_known ? urls_json(a->cas) : json_null());
}

/* ---- clusters ---- */

static void
clusters_create_store(struct store *st, struct api_job *j)
{
	j->rc = store_cluster_create(st, j->b.name, gateway_now(), &j->c,
	    j->err, sizeof(j->err));
}

static void
clusters_create_effects(struct gateway *gw, struct api_job *j,
    struct route_response *r)
{
	if (j->rc == STORE_CONFLICT)
		route_respond_error(r, 409, "cluster name \"%s\" is taken", j->b.name);
	else if (j->rc == STORE_REFUSED)
		route_respond_error(r, 400, "%s", j->err);
	else if (j->rc != STORE_OK)
		respond_store_error(r, j->rc, j->err);
	else {
		info("cluster created", KV_S("cluster", j->c.id),
		    KV_S("name", j->c.name));
		route_respond_json(r, 201, cluster_json(gw, &j->c));
	}
}

static void
clusters_list_store(struct store *st, struct api_job *j)
{
	struct store_cluster *cs = NULL;

	j->rc = store_cluster_list(st, &cs, &j->n);
	j->rows = cs;
}

static void
clusters_list_effects(struct gateway *gw, struct api_job *j,
    struct route_response *r)
{
	const struct store_cluster *cs = j->rows;
	json_t *arr;

	if (j->rc != STORE_OK) {
		route_respond_error(r, 500, "store: cannot list clusters");
		return;
	}
	arr = json_array();
	for (size_t i = 0; i < j->n; i++)
		json_array_append_new(arr, cluster_json(gw, &cs[i]));
	route_respond_json(r, 200, arr);
}

static void
cluster_get_store(struct store *st, struct api_job *j)
{
	j->rc = store_cluster_get(st, j->id, &j->c);
}

static void
cluster_get_effects(struct gateway *gw, struct api_job *j,
    struct route_response *r)
{
	if (j->rc != STORE_OK)
		route_respond_error(r, 404, "no cluster %s", j->id);
	else
		route_respond_json(r, 200, cluster_json(gw, &j->c));
}

/* A new import token for cluster j->c, its secret in j->t. */
static void
tokens_create_store(struct store *st, struct api_job *j)
{
	EVP_PKEY *key = NULL;

	if ((j->rc = store_cluster_get(st, j->id, &j->c)) != STORE_OK)
		return;
	memset(&j->rec, 0, sizeof(j->rec));
	if (token_generate(TOKEN_IMPORT, &j->t) != 0 ||
	    (key = token_import_key(&j->t)) == NULL ||
	    agentkey_public(key, j->rec.verifier) != 0) {
		EVP_PKEY_free(key);
		j->rc = STORE_ERR;
		snprintf(j->err, sizeof(j->err), "cannot generate a token");
		return;
	}
	EVP_PKEY_free(key);
	snprintf(j->rec.id, sizeof(j->rec.id), "%s", j->t.id);
	j->rec.kind = TOKEN_IMPORT;
	snprintf(j->rec.cluster, sizeof(j->rec.cluster), "%s", j->c.id);
	j->rec.created_at = gateway_now();
	j->rec.expires_at = j->rec.created_at + j->b.ttl_seconds;
	j->rec.uses_left = j->b.uses;
	j->rec.approval_manual = j->b.approval_manual;
	j->rc = store_token_insert(st, &j->rec, j->err, sizeof(j->err));
}

static void respond_secret(struct route_response *r, int status, const char *type,
    char *text);

static void
tokens_create_effects(struct gateway *gw, struct api_job *j,
    struct route_response *r)
{
	const struct gw_face *face;
	struct joindoc doc;
	char *text;

	if (j->rc == STORE_NOTFOUND) {
		route_respond_error(r, 404, "no cluster %s", j->id);
		return;
	}
	if (j->rc != STORE_OK) {
		respond_store_error(r, j->rc, j->err);
		return;
	}
	memset(&doc, 0, sizeof(doc));
	snprintf(doc.gateway_url, sizeof(doc.gateway_url), "%s", gw->url);
	face = gw_face_get(gw);
	snprintf(doc.ca_checksum, sizeof(doc.ca_checksum), "%s", face->ca_checksum);
	gw_face_put(face);
	snprintf(doc.cluster, sizeof(doc.cluster), "%s", j->c.id);
	token_format(&j->t, doc.token);
	doc.expires_at = j->rec.expires_at;
	text = joindoc_format(&doc);
	joindoc_clear(&doc);
	if (text == NULL) {
		route_respond_error(r, 500, "cannot format the join document");
		return;
	}
	info("import token created", KV_S("token", j->rec.id),
	    KV_S("cluster", j->c.id), KV_I("uses", j->b.uses),
	    KV_I("ttl_s", j->b.ttl_seconds),
	    KV_S("approval", j->b.approval_manual ? "manual" : "auto"));
	respond_secret(r, 201, "application/json", text);
	free(text);
}

/* ---- agents ---- */

static void
agents_list_store(struct store *st, struct api_job *j)
{
	struct store_agent *as = NULL;

	if (j->filter[0] != '\0' &&
	    (j->rc = store_cluster_get(st, j->filter, &j->c)) != STORE_OK)
		return;
	j->rc = store_agent_list(st, j->filter[0] != '\0' ? j->filter : NULL,
	    &as, &j->n);
	j->rows = as;
	if (j->rc == STORE_OK)
		presence_read(st, j);
}

static void
agents_list_effects(struct gateway *gw, struct api_job *j,
    struct route_response *r)
{
	const struct store_agent *as = j->rows;
	json_t *arr;

	if (j->rc == STORE_NOTFOUND && j->filter[0] != '\0') {
		route_respond_error(r, 404, "no cluster %s", j->filter);
		return;
	}
	if (j->rc != STORE_OK) {
		route_respond_error(r, 500, "store: cannot list agents");
		return;
	}
	arr = json_array();
	for (size_t i = 0; i < j->n; i++)
		json_array_append_new(arr, agent_json(gw, j, &as[i]));
	route_respond_json(r, 200, arr);
}

static void
agent_get_store(struct store *st, struct api_job *j)
{
	if ((j->rc = store_agent_get(st, j->id, &j->a)) == STORE_OK)
		presence_read(st, j);
}

static void
agent_get_effects(struct gateway *gw, struct api_job *j,
    struct route_response *r)
{
	if (j->rc != STORE_OK)
		route_respond_error(r, 404, "no agent %s", j->id);
	else
		route_respond_json(r, 200, agent_json(gw, j, &j->a));
}

/* j->a through event ev (reason: VERIFY_FAIL's, or NULL), the change
 * kept in j->moves. */
static int
agent_transition(struct store *st, struct api_job *j, enum agent_event ev,
    const char *reason)
{
	enum agent_state was;

	j->rc = store_agent_transition(st, j->id, ev, reason, gateway_now(),
	    &j->a, &was, j->err, sizeof(j->err));
	if (j->rc == STORE_OK &&
	    j->nmoves < sizeof(j->moves) / sizeof(j->moves[0])) {
		j->moves[j->nmoves].from = (int)was;
		j->moves[j->nmoves].to = (int)j->a.state;
		j->nmoves++;
	}
	return j->rc;
}

/* A revocation's effects on every loop on their way (revoked_everywhere). */
struct api_revoke {
	struct gateway *gw;
	struct api_job *j;
	void (*next)(struct gateway *gw, struct api_job *j);
	int calling;                     /* inside access_revoke_broadcast */
	int over;                        /* ... and it ended or failed there */
};

/* On this loop once every loop ended its own streams. */
static void
api_revoke_done(void *arg, size_t ended)
{
	struct api_revoke *v = arg;

	(void)ended;                     /* logged by access_revoke_broadcast */
	if (v->calling) {
		v->over = 1;             /* no loops: ran inside the call */
		return;
	}
	v->next(v->gw, v->j);
	free(v);
}

/* Out of memory inside the call (v->calling), or this loop stopped before
 * the end came back (shutdown: nobody waits; its ticket is that loop's). */
static void
api_revoke_drop(void *arg)
{
	struct api_revoke *v = arg;

	if (v->calling) {
		v->over = 1;
		return;
	}
	answer_there_orphan(v->j->reply);
	v->j->reply = NULL;
	api_job_free(v->j);
	free(v);
}

/*
 * Ends the streams open on every loop here that a revocation of `what` id
 * (an agent, a user, a token) took the right from, and forgets every
 * proven token (access_revoke_broadcast: the count logged once all loops
 * ended theirs); then next(gw, j) on this loop, once every loop ended its
 * own, so an answer made there means they are ended.  Other replicas end
 * theirs on the store's notice (notices.c).  Out of memory: next at once
 * (the caches are forgotten all the same).
 */
static void
revoked_everywhere(struct gateway *gw, struct api_job *j,
    enum live_credential by, const char *match, const char *what,
    const char *id, void (*next)(struct gateway *gw, struct api_job *j))
{
	const struct revoke_what w = { .by = by, .match = match, .what = what,
	    .name = id, .log = "revocation: ending the streams it opened here" };
	struct api_revoke *v = calloc(1, sizeof(*v));

	if (v == NULL) {
		(void)access_revoke_broadcast(gw, &w, NULL, NULL, NULL);
		next(gw, j);
		return;
	}
	*v = (struct api_revoke){ .gw = gw, .j = j, .next = next, .calling = 1 };
	(void)access_revoke_broadcast(gw, &w, api_revoke_done, api_revoke_drop, v);
	/* This loop cannot stop while it runs this: a later drop or done
	 * comes after, from its inbox. */
	v->calling = 0;
	if (v->over) {
		free(v);
		next(gw, j);
	}
}

/* Whether a live replica's lease holds j->id's tunnel (from j's presence). */
static int
held_elsewhere(const struct api_job *j)
{
	return presence_of(j, j->id) != NULL;
}

/*
 * approve, verify, revoke: persist first (here), then tell the connected
 * agent (agents_action_effects); another replica holding it hears the
 * change and acts (notices.h).  j->held: the agent's tunnel was here when
 * the request came, so its VERIFY round trip runs here.
 */
static void
agents_action_store(struct store *st, struct api_job *j)
{
	if ((j->rc = store_agent_get(st, j->id, &j->a)) != STORE_OK) {
		j->rc = STORE_NOTFOUND;
		return;
	}
	if (strcmp(j->action, "approve") == 0) {
		if (agent_transition(st, j, AGENT_EV_APPROVE, NULL) == STORE_OK &&
		    j->held) {
			j->approved = j->a;
			j->verifying = 1;
			agent_transition(st, j, AGENT_EV_VERIFY, NULL);
		}
	} else if (strcmp(j->action, "verify") == 0) {
		if (agent_transition(st, j, AGENT_EV_VERIFY, NULL) == STORE_OK &&
		    !j->held) {
			/* Held by another replica: it hears the change and runs
			 * the round trip (docs/0021). */
			presence_read(st, j);
			if (!held_elsewhere(j))
				agent_transition(st, j, AGENT_EV_VERIFY_FAIL,
				    "agent is not connected");
		}
	} else if (strcmp(j->action, "revoke") == 0) {
		agent_transition(st, j, AGENT_EV_REVOKE, NULL);
	} else if (strcmp(j->action, "rotate-key") == 0) {
		j->rc = store_agent_key_request(st, j->id, gateway_now(), &j->a,
		    j->err, sizeof(j->err));
	} else {
		return;
	}
	free(j->ps);
	j->ps = NULL;
	presence_read(st, j);
}

/* The answer to an action: what the store part left. */
static void
agents_action_answer(struct gateway *gw, struct api_job *j,
    struct route_response *r)
{
	if (j->rc == STORE_REFUSED)
		route_respond_error(r, 409, "%s", j->err);
	else if (j->rc != STORE_OK)
		respond_store_error(r, j->rc, j->err);
	else
		route_respond_json(r, 200, agent_json(gw, j, &j->a));
}

/* Back on the loop that asked, the session told or not (act->told):
 * answers. */
static void
agents_action_told(struct api_act *act)
{
	struct api_job *j = act->ctx;
	struct gateway *gw = act->gw;
	struct route_response r = { 0 };

	if (act->orphan) {
		/* The loop that asked stopped: nobody waits. */
		answer_there_orphan(j->reply);
		j->reply = NULL;
		api_job_free(j);
		free(act);
		return;
	}
	if (act->kind == API_ACT_ROTATE_KEY)
		info("agent key rotation requested", KV_S("agent", j->id),
		    KV_S("held", act->told ? "here" : "elsewhere or offline"));
	free(act);
	agents_action_answer(gw, j, &r);
	api_job_finish(j, &r);
}

/*
 * Tells the agent's session, if it is still held here: on its own loop
 * (api_act.h), found there by agent id and generation.  A session that
 * left meanwhile is told nothing (a verifying agent runs its round trip
 * when it connects again); elsewhere: that replica hears the change;
 * offline: at its next handshake.  Then answers, on this loop.
 */
static void
agents_action_send(struct gateway *gw, struct api_job *j)
{
	struct api_act *act = calloc(1, sizeof(*act));
	struct route_response r = { 0 };
	int held;

	if (act == NULL) {
		route_respond_error(&r, 500, "out of memory");
		api_job_finish(j, &r);
		return;
	}
	held = agentdir_find(gw->agents, j->id, &act->at);
	if (strcmp(j->action, "approve") == 0) {
		act->kind = API_ACT_APPROVE;
		act->verifying = j->verifying;
		act->verified = j->verifying && j->rc == STORE_OK;
		act->approved = j->approved;
		held = held && j->verifying;
	} else if (strcmp(j->action, "verify") == 0) {
		act->kind = API_ACT_VERIFY;
		/* Held elsewhere when asked: that replica runs the round trip. */
		held = held && j->held;
	} else if (strcmp(j->action, "revoke") == 0) {
		act->kind = API_ACT_REVOKE;
	} else {
		act->kind = API_ACT_ROTATE_KEY;
	}
	act->a = j->a;
	if (!held) {
		act->gw = gw;
		act->ctx = j;
		agents_action_told(act);
		return;
	}
	api_act_run(gw, act, agents_action_told, j);
}

/* What an action does here once stored: a revoke ends the agent's
 * streams on every loop first (they end "revoked", before the tunnel's
 * kick could cut them), then the session is told. */
static void
agents_action_tell(struct gateway *gw, struct api_job *j)
{
	if (strcmp(j->action, "approve") == 0)
		info("agent approved", KV_S("agent", j->id));
	if (strcmp(j->action, "revoke") != 0) {
		agents_action_send(gw, j);
		return;
	}
	info("agent revoked", KV_S("agent", j->id));
	revoked_everywhere(gw, j, LIVE_BY_AGENT, j->id, "agent", j->id,
	    agents_action_send);
}

static void
agents_action_effects(struct gateway *gw, struct api_job *j)
{
	int known = strcmp(j->action, "approve") == 0 ||
	    strcmp(j->action, "verify") == 0 || strcmp(j->action, "revoke") == 0 ||
	    strcmp(j->action, "rotate-key") == 0;
	struct route_response r = { 0 };

	if (j->rc == STORE_NOTFOUND)
		route_respond_error(&r, 404, "no agent %s", j->id);
	else if (!known)
		route_respond_error(&r, 404, "no action \"%s\": use approve, verify, "
		    "revoke or rotate-key", j->action);
	else if (j->rc == STORE_OK || j->verifying) {
		/* An approve whose VERIFY failed still approved: tell it. */
		agents_action_tell(gw, j);
		return;
	} else
		agents_action_answer(gw, j, &r);
	api_job_finish(j, &r);
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
 * Store part: issues a user token to name, scoped to clusters: j->t holds
 * the secret and j->u the stored record.  j->rc: STORE_OK, or
 * STORE_REFUSED (a bad name or list), STORE_NOTFOUND (an unknown cluster)
 * or another failure, with j->err.
 */
static void
user_issue(struct store *st, struct api_job *j, const char *name,
    const char *const *clusters, size_t nclusters)
{
	struct store_token rec;

	if (!store_user_name_valid(name)) {
		j->rc = STORE_REFUSED;
		snprintf(j->err, sizeof(j->err), "invalid user name: use 1 to %d "
		    "characters of A-Z a-z 0-9 . _ @ -", STORE_NAME_MAX);
		return;
	}
	memset(&rec, 0, sizeof(rec));
	if (token_generate(TOKEN_USER, &j->t) != 0) {
		j->rc = STORE_ERR;
		snprintf(j->err, sizeof(j->err), "cannot generate a token");
		return;
	}
	snprintf(rec.id, sizeof(rec.id), "%s", j->t.id);
	rec.kind = TOKEN_USER;
	snprintf(rec.name, sizeof(rec.name), "%s", name);
	token_hash(&j->t, rec.verifier);
	rec.uses_left = -1;
	rec.created_at = gateway_now();
	j->rc = store_user_token_create(st, &rec, clusters, nclusters, &j->u,
	    j->err, sizeof(j->err));
	OPENSSL_cleanse(rec.verifier, sizeof(rec.verifier));
	if (j->rc != STORE_OK)
		token_clear(&j->t);
}

/* Answers user_issue's failure: 1 if it failed, else 0. */
static int
user_issue_failed(const struct api_job *j, struct route_response *r)
{
	switch (j->rc) {
	case STORE_OK:
		return 0;
	case STORE_REFUSED:
		route_respond_error(r, 400, "%s", j->err);
		break;
	case STORE_NOTFOUND:
		route_respond_error(r, 404, "%s", j->err);
		break;
	default:
		respond_store_error(r, j->rc, j->err);
		break;
	}
	return 1;
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
users_create_store(struct store *st, struct api_job *j)
{
	user_issue(st, j, j->b.name, j->b.clusters, j->b.nclusters);
}

static void
users_create_effects(struct gateway *gw, struct api_job *j,
    struct route_response *r)
{
	char tokstr[TOKEN_STR_MAX], *text;
	json_t *out;

	(void)gw;
	if (user_issue_failed(j, r))
		return;
	token_format(&j->t, tokstr);
	out = json_pack("{s:s, s:s, s:s, s:o, s:o}", "name", j->u.name,
	    "token_id", j->u.id, "token", tokstr, "clusters",
	    user_clusters_json(&j->u), "created_at", time_json(j->u.created_at));
	OPENSSL_cleanse(tokstr, sizeof(tokstr));
	text = out != NULL ? json_dumps(out, JSON_COMPACT) : NULL;
	json_decref(out);
	if (text == NULL) {
		route_respond_error(r, 500, "out of memory");
		return;
	}
	info("user token issued", KV_S("token", j->u.id), KV_S("user", j->u.name),
	    KV_U("clusters", j->u.nclusters));
	respond_secret(r, 201, "application/json", text);
	free(text);
}

static void
users_list_store(struct store *st, struct api_job *j)
{
	struct store_user_token *us = NULL;

	j->rc = store_user_token_list(st, &us, &j->n);
	j->rows = us;
}

static void
users_list_effects(struct gateway *gw, struct api_job *j,
    struct route_response *r)
{
	const struct store_user_token *us = j->rows;
	json_t *arr;

	(void)gw;
	if (j->rc != STORE_OK) {
		route_respond_error(r, 500, "store: cannot list user tokens");
		return;
	}
	arr = json_array();
	for (size_t i = 0; arr != NULL && i < j->n; i++)
		json_array_append_new(arr, user_json(&us[i]));
	route_respond_json(r, 200, arr);
}

static void
users_revoke_store(struct store *st, struct api_job *j)
{
	j->rc = store_user_revoke(st, j->id, &j->count, j->err, sizeof(j->err));
}

static void
users_revoked(struct gateway *gw, struct api_job *j)
{
	struct route_response r = { 0 };

	(void)gw;
	route_respond_json(&r, 200, json_pack("{s:s, s:I}", "name", j->id,
	    "revoked_tokens", (json_int_t)j->count));
	api_job_finish(j, &r);
}

/* Answered once every loop ended the user's streams. */
static void
users_revoke_effects(struct gateway *gw, struct api_job *j)
{
	struct route_response r = { 0 };
	char principal[96];

	/* Whatever this user proved a moment ago no longer counts. */
	access_revoked(gw);
	if (j->rc == STORE_OK) {
		info("user tokens revoked", KV_S("user", j->id),
		    KV_I("tokens", j->count));
		snprintf(principal, sizeof(principal), "user:%s", j->id);
		revoked_everywhere(gw, j, LIVE_BY_PRINCIPAL, principal, "user",
		    j->id, users_revoked);
		return;
	}
	if (j->rc == STORE_REFUSED)
		route_respond_error(&r, 400, "%s", j->err);
	else if (j->rc == STORE_NOTFOUND)
		route_respond_error(&r, 404, "%s", j->err);
	else
		respond_store_error(&r, j->rc, j->err);
	api_job_finish(j, &r);
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
ca_base64(struct gateway *gw)
{
	const struct gw_face *face = gw_face_get(gw);
	char *b64 = NULL;

	if (face->ca_pem_len <= (size_t)INT32_MAX / 2 &&
	    (b64 = malloc(4 * ((face->ca_pem_len + 2) / 3) + 1)) != NULL)
		EVP_EncodeBlock((unsigned char *)b64,
		    (const unsigned char *)(face->ca_pem != NULL ? face->ca_pem : ""),
		    (int)face->ca_pem_len);
	gw_face_put(face);
	return b64;
}

/*
 * The kubeconfig: one cluster named by its id, one user, one context
 * "USER@CLUSTER", made current.  Returns a malloc'd string holding the
 * token (the caller wipes it), or NULL.
 */
static char *
kubeconfig_format(struct gateway *gw, const char *cluster,
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
kubeconfig_create_store(struct store *st, struct api_job *j)
{
	const char *ids[1];

	if (store_cluster_get(st, j->id, &j->c) != STORE_OK) {
		j->rc = STORE_NOTFOUND;
		snprintf(j->err, sizeof(j->err), "no cluster %s", j->id);
		return;
	}
	ids[0] = j->c.id;
	user_issue(st, j, j->b.user, ids, 1);
}

static void
kubeconfig_create_effects(struct gateway *gw, struct api_job *j,
    struct route_response *r)
{
	char tokstr[TOKEN_STR_MAX], *text;

	if (user_issue_failed(j, r))
		return;
	token_format(&j->t, tokstr);
	text = kubeconfig_format(gw, j->c.id, j->u.name, tokstr);
	OPENSSL_cleanse(tokstr, sizeof(tokstr));
	if (text == NULL) {
		/* The token exists but nobody holds it: harmless, and revoked
		 * with the user's others. */
		route_respond_error(r, 500, "cannot format the kubeconfig");
		return;
	}
	info("kubeconfig issued", KV_S("cluster", j->c.id), KV_S("user", j->u.name),
	    KV_S("token", j->u.id));
	respond_secret(r, 201, "application/yaml", text);
	free(text);
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
no_route_effects(struct gateway *gw, struct api_job *j, struct route_response *r)
{
	(void)gw;
	route_respond_error(r, 404, "no route %s %s", j->method, j->path);
}

static void
token_revoke_store(struct store *st, struct api_job *j)
{
	j->rc = store_user_token_revoke(st, j->id, &j->u, j->err, sizeof(j->err));
}

static void
token_revoked(struct gateway *gw, struct api_job *j)
{
	struct route_response r = { 0 };

	(void)gw;
	route_respond_json(&r, 200, user_json(&j->u));
	api_job_finish(j, &r);
}

/* Answered once every loop ended the token's streams. */
static void
token_revoke_effects(struct gateway *gw, struct api_job *j)
{
	struct route_response r = { 0 };

	access_revoked(gw);
	if (j->rc == STORE_OK) {
		info("user token revoked", KV_S("user", j->u.name),
		    KV_S("token", j->u.id));
		revoked_everywhere(gw, j, LIVE_BY_TOKEN, j->u.id, "token",
		    j->u.id, token_revoked);
		return;
	}
	if (j->rc == STORE_NOTFOUND)
		route_respond_error(&r, 404, "%s", j->err);
	else
		respond_store_error(&r, j->rc, j->err);
	api_job_finish(j, &r);
}

/* ---- the gateway's public URL list (docs/0031) ---- */

static void
urls_get_store(struct store *st, struct api_job *j)
{
	j->rc = store_setting_get(st, STORE_SETTING_URLS, j->urls, sizeof(j->urls),
	    j->err, sizeof(j->err));
	if (j->rc == STORE_NOTFOUND) {
		j->urls[0] = '\0';
		j->rc = STORE_OK;
	}
}

static void
urls_get_effects(struct gateway *gw, struct api_job *j,
    struct route_response *r)
{
	(void)gw;
	if (j->rc != STORE_OK)
		respond_store_error(r, j->rc, j->err);
	else
		route_respond_json(r, 200, json_pack("{s:o}", "urls",
		    urls_json(j->urls)));
}

static void
urls_set_store(struct store *st, struct api_job *j)
{
	j->rc = store_setting_set(st, STORE_SETTING_URLS, j->b.urls, gateway_now(),
	    j->err, sizeof(j->err));
}

/* On loop 0, which publishes the face and holds the tunnels (docs/0040
 * step 7 makes this every loop's): every agent held here is told now. */
static void
urls_tell(struct gateway *gw, struct api_job *j)
{
	j->told = settings_urls_changed(gw, j->b.urls);
}

static void
urls_told(struct gateway *gw, struct api_job *j)
{
	struct route_response r = { 0 };

	info("gateway URL list set", KV_S("urls", j->b.urls),
	    KV_U("agents_told", j->told));
	route_respond_json(&r, 200, json_pack("{s:o, s:I}", "urls",
	    urls_json(j->b.urls), "agents_told", (json_int_t)j->told));
	api_job_finish(j, &r);
}

/* Stored: the agents held here are told (on loop 0), then the answer;
 * other replicas hear the store's notice and tell theirs. */
static void
urls_set_effects(struct gateway *gw, struct api_job *j)
{
	struct route_response r = { 0 };

	if (j->rc != STORE_OK) {
		respond_store_error(&r, j->rc, j->err);
		api_job_finish(j, &r);
		return;
	}
	api_job_visit(gw, j, 0, urls_tell, urls_told);
}

/* ---- the CA rotation (docs/0033) ---- */

static void
ca_status_store(struct store *st, struct api_job *j)
{
	j->rc = STORE_OK;
	if (j->ca_sum[0] != '\0')
		j->rc = store_agents_holding_ca(st, j->ca_sum, &j->ca_count, j->err,
		    sizeof(j->err));
}

static json_t *
sum_or_null(const char *sum)
{
	return sum[0] != '\0' ? json_string(sum) : json_null();
}

static json_t *
count_or_null(const struct api_job *j, int64_t n)
{
	return j->ca_sum[0] != '\0' ? json_integer((json_int_t)n) : json_null();
}

static void
ca_status_effects(struct gateway *gw, struct api_job *j,
    struct route_response *r)
{
	static const struct ca_rotation none;
	const struct gw_face *face;
	const struct ca_rotation *rot;

	if (j->rc != STORE_OK) {
		respond_store_error(r, j->rc, j->err);
		return;
	}
	face = gw_face_get(gw);
	rot = face->ca_rotation != NULL ? face->ca_rotation : &none;
	route_respond_json(r, 200, json_pack("{s:s, s:o, s:o, s:o, s:s, s:o, s:o, "
	    "s:o, s:o}", "phase", ca_phase_name(rot->phase),
	    "ca", sum_or_null(rot->current_checksum),
	    "new_ca", sum_or_null(rot->next_checksum),
	    "old_ca", sum_or_null(rot->old_checksum),
	    "handed_out", face->ca_checksum,
	    "agents", count_or_null(j, j->ca_count.agents),
	    "holding_new_ca", count_or_null(j, j->ca_count.holding),
	    "connected", count_or_null(j, j->ca_count.connected),
	    "connected_holding_new_ca", count_or_null(j,
	    j->ca_count.connected_holding)));
	gw_face_put(face);
}

static const struct api_handler
    h_none = { 0, NULL, no_route_effects, NULL },
    h_ca_status = { 0, ca_status_store, ca_status_effects, NULL },
    h_urls_get = { 0, urls_get_store, urls_get_effects, NULL },
    h_urls_set = { API_BODY_URLS + 1, urls_set_store, NULL, urls_set_effects },
    h_clusters_create = { API_BODY_CLUSTER + 1, clusters_create_store,
	clusters_create_effects, NULL },
    h_clusters_list = { 0, clusters_list_store, clusters_list_effects, NULL },
    h_cluster_get = { 0, cluster_get_store, cluster_get_effects, NULL },
    h_tokens_create = { API_BODY_TOKENS + 1, tokens_create_store,
	tokens_create_effects, NULL },
    h_kubeconfig_create = { API_BODY_KUBECONFIG + 1, kubeconfig_create_store,
	kubeconfig_create_effects, NULL },
    h_users_create = { API_BODY_USER + 1, users_create_store,
	users_create_effects, NULL },
    h_users_list = { 0, users_list_store, users_list_effects, NULL },
    h_users_revoke = { 0, users_revoke_store, NULL, users_revoke_effects },
    h_token_revoke = { 0, token_revoke_store, NULL, token_revoke_effects },
    h_agents_list = { 0, agents_list_store, agents_list_effects, NULL },
    h_agent_get = { 0, agent_get_store, agent_get_effects, NULL },
    h_agents_action = { 0, agents_action_store, NULL, agents_action_effects };

/* The endpoint for method and the path's segments (seg[0] is "v1"), with
 * the path's id and action copied into j; &h_none if there is none. */
static const struct api_handler *
admin_handler(struct api_job *j, char **seg, size_t n, int get, int post)
{
	if (n >= 3)
		snprintf(j->id, sizeof(j->id), "%s", seg[2]);
	if (n >= 4)
		snprintf(j->action, sizeof(j->action), "%s", seg[3]);
	if (n >= 2 && strcmp(seg[1], "clusters") == 0) {
		if (n == 2)
			return post ? &h_clusters_create : get ? &h_clusters_list : &h_none;
		if (n == 3 && get)
			return &h_cluster_get;
		if (n == 4 && post && strcmp(seg[3], "tokens") == 0)
			return &h_tokens_create;
		if (n == 4 && post && strcmp(seg[3], "kubeconfig") == 0)
			return &h_kubeconfig_create;
	} else if (n >= 2 && strcmp(seg[1], "users") == 0) {
		if (n == 2)
			return post ? &h_users_create : get ? &h_users_list : &h_none;
		if (n == 4 && post && strcmp(seg[3], "revoke") == 0)
			return &h_users_revoke;
	} else if (n == 4 && strcmp(seg[1], "tokens") == 0) {
		if (post && strcmp(seg[3], "revoke") == 0)
			return &h_token_revoke;
	} else if (n == 3 && get && strcmp(seg[1], "ca") == 0 &&
	    strcmp(seg[2], "status") == 0) {
		return &h_ca_status;
	} else if (n == 3 && strcmp(seg[1], "gateway") == 0 &&
	    strcmp(seg[2], "urls") == 0) {
		return post ? &h_urls_set : get ? &h_urls_get : &h_none;
	} else if (n >= 2 && strcmp(seg[1], "agents") == 0) {
		if (n == 2 && get)
			return &h_agents_list;
		if (n == 3 && get)
			return &h_agent_get;
		if (n == 4 && post)
			return &h_agents_action;
	}
	return &h_none;
}

/* What the loop reads of the request before the store: the body, the
 * query, and whether an agent acted on is held here. */
static void
admin_prepare(struct gateway *gw, struct api_job *j,
    const struct route_request *req)
{
	if (j->h->body != 0) {
		j->refuse_status = api_body_parse((enum api_body_kind)(j->h->body - 1),
		    req->body, req->body_len, req->body_too_large, &j->b,
		    j->refuse_why, sizeof(j->refuse_why));
	} else if (j->h == &h_agents_list && api_query_param(req->query,
	    "cluster", j->filter, sizeof(j->filter)) == -2) {
		j->refuse_status = 400;
		snprintf(j->refuse_why, sizeof(j->refuse_why),
		    "query parameter cluster: given twice or too long");
	} else if (j->h == &h_agents_action) {
		j->held = agentdir_find(gw->agents, j->id, NULL);
	} else if (j->h == &h_ca_status) {
		gw_face_rotating_ca(gw, j->ca_sum, sizeof(j->ca_sum));
	}
}

/* An admin request: copied into a job whose store part runs on the store
 * thread (the admin check first), and answered from its effects part. */
static void
admin_request(struct gateway *gw, const struct route_request *req,
    struct route_response *r)
{
	struct api_job *j = calloc(1, sizeof(*j));
	char buf[512];
	char *seg[6];
	size_t n;

	if (j == NULL) {
		route_respond_error(r, 500, "out of memory");
		return;
	}
	snprintf(j->method, sizeof(j->method), "%s", req->method);
	snprintf(j->path, sizeof(j->path), "%s", req->path);
	snprintf(buf, sizeof(buf), "%s", req->path);
	n = split_path(buf, seg, 5);
	j->h = admin_handler(j, seg, n, strcmp(req->method, "GET") == 0,
	    strcmp(req->method, "POST") == 0);
	admin_prepare(gw, j, req);
	answer_later_held(gw, req, r, api_job_store, api_job_effects,
	    api_job_free, j);
}

/* 503 while draining or while the store is out of reach (docs/0021).  A
 * second line says which server certificate new handshakes get and when
 * it expires (docs/0030).  On loop 0 (answer_there.h): the store
 * listener's and the lease's health are its own. */
static void
readyz(struct gateway *gw, void *arg, struct route_response *r)
{
	char why[384], body[600], after[32];
	const struct gw_face *face;
	int n, status = 200;

	(void)arg;
	if (gw->stopping) {
		n = snprintf(body, sizeof(body), "stopping\n");
		status = 503;
	} else if (notices_store_problem(gw, why, sizeof(why)) != NULL) {
		n = snprintf(body, sizeof(body), "store unreachable: %s\n", why);
		status = 503;
	} else {
		n = snprintf(body, sizeof(body), "ready\n");
	}
	face = gw_face_get(gw);
	rfc3339_format((int64_t)face->cert.not_after, after);
	if (n < (int)sizeof(body))
		n += snprintf(body + n, sizeof(body) - (size_t)n,
		    "certificate serial %s not_after %s\n", face->cert.serial, after);
	gw_face_put(face);
	route_respond_text(r, status, "text/plain", body,
	    n < (int)sizeof(body) ? (size_t)n : sizeof(body) - 1);
}

static void
nothing_to_free(void *arg)
{
	(void)arg;
}

static void
api_handle(struct gateway *gw, const struct route_request *req,
    struct route_response *r)
{
	memset(r, 0, sizeof(*r));
	if (strcmp(req->path, "/healthz") == 0) {
		route_respond_text(r, 200, "text/plain", "ok\n", 3);
	} else if (strcmp(req->path, "/readyz") == 0) {
		answer_there(gw, req, r, 0, readyz, nothing_to_free, NULL);
	} else if (strcmp(req->path, "/v1/ca") == 0 && strcmp(req->method, "GET") == 0) {
		const struct gw_face *face = gw_face_get(gw);

		route_respond_text(r, 200, "application/x-pem-file",
		    face->ca_pem != NULL ? face->ca_pem : "", face->ca_pem_len);
		gw_face_put(face);
	} else if (strncmp(req->path, "/v1/", 4) == 0) {
		admin_request(gw, req, r);
	} else {
		route_respond_error(r, 404, "no route %s %s", req->method, req->path);
	}
}

const struct route api_route = {
	.name = "api",
	.request = api_handle,
};
