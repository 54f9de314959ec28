/*
 * access.c: who may do what, and which agent they reach (see access.h).
 *
 * Four parts, top down: the cache of proven (token, cluster) pairs (one
 * per loop: gw->access_cache is loop 0's, loop->access_cache loop k's), a
 * revocation's effects on every loop, the bearer and scope checks, and the
 * calls routes make.  Nothing here knows
 * a transport: routes pass an Authorization header in and get a status,
 * a reason and (for access_pick) a struct reach out.
 */
#include "access.h"

#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <openssl/crypto.h>

#include "agentdir.h"
#include "gateway.h"
#include "log.h"
#include "loop.h"
#include "presence.h"
#include "reach.h"
#include "runtime.h"
#include "session.h"
#include "store_worker.h"

/* ---- the cache of proven tokens ---- */

/*
 * Every /k8s request and every dial would otherwise cost two store queries
 * (the token's record, then its scope); under load that was a quarter of
 * the gateway's CPU.  An entry remembers that token ID was good for
 * CLUSTER, with the token's record.  Direct-mapped: a collision replaces
 * the older entry.
 */
#define CACHE_SLOTS 512

struct cache_entry {
	char token_id[TOKEN_ID_LEN + 1];
	char cluster[STORE_ID_MAX + 1];
	struct store_token rec;
	int64_t until_ms;            /* 0: empty */
};

/*
 * Token ids by themselves, for ACCESS_ID_TTL_MS: ids the store did not
 * know (made-up tokens: each would cost a store read, issue 22), and the
 * sole cluster of a user token (for /k8s root paths, which name none).
 * Direct-mapped like the cache; only public ids, no secret.
 */
#define ID_SLOTS 1024

struct id_entry {
	char token_id[TOKEN_ID_LEN + 1];
	char cluster[STORE_ID_MAX + 1];   /* "": the id is unknown */
	int64_t until_ms;                 /* 0: empty */
};

/* One loop's cache (gw->access_cache, loop->access_cache); that loop's
 * thread alone touches it. */
struct access_cache {
	struct cache_entry slots[CACHE_SLOTS];
	struct id_entry ids[ID_SLOTS];
	/* gw->access_revocations when the slots were last emptied: a
	 * revocation on any thread bumps that, and the cache empties itself
	 * before its next use (cache_here); a check that read the store
	 * before a revocation must not put what it read into it after. */
	uint64_t seen;
	/* Checks on the store thread or waiting for it, cancelled ones
	 * included (ACCESS_CHECKS_MAX). */
	int checks_out;
};

struct access_cache *
access_cache_new(void)
{
	return calloc(1, sizeof(struct access_cache));
}

void
access_cache_free(struct access_cache *c)
{
	if (c == NULL)
		return;
	OPENSSL_cleanse(c, sizeof(*c));
	free(c);
}

static struct cache_entry *
cache_slot(struct access_cache *c, const char *token_id, const char *cluster)
{
	uint32_t h = 2166136261u;  /* FNV-1a over "id\0cluster" */

	for (const char *p = token_id; *p != '\0'; p++)
		h = (h ^ (uint8_t)*p) * 16777619u;
	h = (h ^ 0) * 16777619u;
	for (const char *p = cluster; *p != '\0'; p++)
		h = (h ^ (uint8_t)*p) * 16777619u;
	return &c->slots[h % CACHE_SLOTS];
}

/* 1 and *rec if (token_id, cluster) was proven within the TTL, else 0
 * (always 0 without a cache: c NULL). */
static int
cache_get(struct access_cache *c, const char *token_id, const char *cluster,
    struct store_token *rec)
{
	struct cache_entry *e;

	if (c == NULL)
		return 0;
	e = cache_slot(c, token_id, cluster);
	if (e->until_ms == 0 || e->until_ms < runtime_monotonic_ms() ||
	    strcmp(e->token_id, token_id) != 0 || strcmp(e->cluster, cluster) != 0)
		return 0;
	*rec = e->rec;
	return 1;
}

/* Remembers (token_id, cluster) as proven, with its record (c NULL: no
 * cache, nothing kept). */
static void
cache_put(struct access_cache *c, const char *token_id, const char *cluster,
    const struct store_token *rec)
{
	struct cache_entry *e;

	if (c == NULL || strlen(token_id) > TOKEN_ID_LEN ||
	    strlen(cluster) > STORE_ID_MAX)
		return;
	e = cache_slot(c, token_id, cluster);
	snprintf(e->token_id, sizeof(e->token_id), "%s", token_id);
	snprintf(e->cluster, sizeof(e->cluster), "%s", cluster);
	e->rec = *rec;
	e->until_ms = runtime_monotonic_ms() + ACCESS_CACHE_TTL_MS;
}

static struct id_entry *
id_slot(struct access_cache *c, const char *token_id)
{
	uint32_t h = 2166136261u;

	for (const char *p = token_id; *p != '\0'; p++)
		h = (h ^ (uint8_t)*p) * 16777619u;
	return &c->ids[h % ID_SLOTS];
}

/* The entry of token_id within its TTL, or NULL (c NULL: none). */
static const struct id_entry *
id_get(struct access_cache *c, const char *token_id)
{
	struct id_entry *e;

	if (c == NULL)
		return NULL;
	e = id_slot(c, token_id);
	if (e->until_ms == 0 || e->until_ms < runtime_monotonic_ms() ||
	    strcmp(e->token_id, token_id) != 0)
		return NULL;
	return e;
}

/* Remembers token_id's one cluster, or (cluster "") that the store does
 * not know it (c NULL: nothing kept). */
static void
id_put(struct access_cache *c, const char *token_id, const char *cluster)
{
	struct id_entry *e;

	if (c == NULL || token_id[0] == '\0' || strlen(token_id) > TOKEN_ID_LEN ||
	    strlen(cluster) > STORE_ID_MAX)
		return;
	e = id_slot(c, token_id);
	snprintf(e->token_id, sizeof(e->token_id), "%s", token_id);
	snprintf(e->cluster, sizeof(e->cluster), "%s", cluster);
	e->until_ms = runtime_monotonic_ms() + ACCESS_ID_TTL_MS;
}

void
access_revoked(struct gateway *gw)
{
	atomic_fetch_add(&gw->access_revocations, 1);
}

/* How many revocations gw has seen (any thread). */
static uint64_t
cache_generation(struct gateway *gw)
{
	return atomic_load(&gw->access_revocations);
}

/*
 * The calling loop's cache (loop 0, or off every loop: gw->access_cache;
 * loop k: its own, made at its first check when gw has one), emptied if a
 * revocation came since it was last used; NULL: none (every check reads
 * the store).  One atomic load; ~100 KiB written after a revocation.
 */
static struct access_cache *
cache_here(struct gateway *gw)
{
	struct loop *l = loop_here(gw);
	struct access_cache *c = gw->access_cache;
	uint64_t now = cache_generation(gw);

	if (l != NULL && l->index > 0) {
		if (l->access_cache == NULL && c != NULL &&
		    (l->access_cache = access_cache_new()) != NULL)
			l->access_cache->seen = now;
		c = l->access_cache;
	}
	if (c != NULL && c->seen != now) {
		OPENSSL_cleanse(c->slots, sizeof(c->slots));
		memset(c->ids, 0, sizeof(c->ids));
		c->seen = now;
	}
	return c;
}

void
access_loops_free(struct gateway *gw)
{
	for (unsigned i = 1; gw->loops != NULL && i < gw->nloops; i++) {
		access_cache_free(gw->loops[i].access_cache);
		gw->loops[i].access_cache = NULL;
	}
}

/* ---- a revocation's effects on every loop ---- */

/* One revocation under way: what it names, and each loop's count. */
struct revoke_job {
	struct gateway *gw;
	enum live_credential by;
	char match[128];
	char what[16];
	char name[128];
	char reason[160];
	const char *log;
	access_revoke_done_fn *done;
	void (*drop)(void *arg);
	void *arg;
	unsigned nloops;
	size_t ended[];                 /* [nloops], each by its loop */
};

/* On each loop: its own streams that the revocation matches end. */
static void
revoke_fill(void *p)
{
	struct revoke_job *j = p;
	struct loop *l = loop_here(j->gw);
	unsigned i = l != NULL ? l->index : 0;

	if (i < j->nloops)
		j->ended[i] = live_stream_end_matching(live_streams_here(j->gw),
		    j->by, j->match, j->reason);
}

/* On the asking loop, once every loop ended its own. */
static void
revoke_done(void *p)
{
	struct revoke_job *j = p;
	size_t n = 0;

	for (unsigned i = 0; i < j->nloops; i++)
		n += j->ended[i];
	if (n > 0 && j->log != NULL)
		log_kv(LOG_LEVEL_INFO, j->log, (const struct log_field[]){
		    KV_S(j->what, j->name), KV_U("streams", n) }, 2);
	if (j->done != NULL)
		j->done(j->arg, n);
	free(j);
}

/* The asking loop stopped first (shutdown). */
static void
revoke_drop(void *p)
{
	struct revoke_job *j = p;

	if (j->drop != NULL)
		j->drop(j->arg);
	free(j);
}

int
access_revoke_broadcast(struct gateway *gw, const struct revoke_what *w,
    access_revoke_done_fn *done, void (*drop)(void *arg), void *arg)
{
	struct loop *home = loop_here(gw);
	unsigned n = home != NULL && gw->loops != NULL ? gw->nloops : 1;
	struct revoke_job *j;

	/* Every loop's cache first, at once: no check anywhere takes what was
	 * proven before this call for proven after it. */
	access_revoked(gw);
	if ((j = calloc(1, sizeof(*j) + n * sizeof(j->ended[0]))) == NULL) {
		warn("revocation: out of memory to end the streams it opened",
		    KV_S("what", w->what != NULL ? w->what : ""));
		if (drop != NULL)
			drop(arg);
		return -1;
	}
	j->gw = gw;
	j->by = w->by;
	snprintf(j->match, sizeof(j->match), "%s", w->match != NULL ? w->match : "");
	snprintf(j->what, sizeof(j->what), "%s", w->what != NULL ? w->what : "id");
	snprintf(j->name, sizeof(j->name), "%s", w->name != NULL ? w->name :
	    j->match);
	snprintf(j->reason, sizeof(j->reason), "%s %s revoked", j->what, j->name);
	j->log = w->log;
	j->done = done;
	j->drop = drop;
	j->arg = arg;
	j->nloops = n;
	if (home == NULL || gw->loops == NULL) {
		/* No loops (unit tests): gw's own list, here and now. */
		revoke_fill(j);
		revoke_done(j);
		return 0;
	}
	return loop_gather(gw->loops, gw->nloops, home, revoke_fill, revoke_done,
	    revoke_drop, j) == 0 ? 0 : -1;
}

/* ---- bearer tokens and their scope ---- */

/* A check that needs the store and was given none (the pass that only
 * asks the cache, on the loop): run it on the store thread. */
#define NEEDS_STORE (-1)

/* The reason of every refusal of an id the store does not know. */
#define INVALID_TOKEN "invalid token"

/* 0 if a verified token's record is live, else 401 with why.  Revoked and
 * expired are only said to whoever proved they hold the secret. */
static int
record_usable(const struct store_token *rec, char *err, size_t errlen)
{
	const char *why;

	if (rec->revoked) {
		snprintf(err, errlen, "token %s is revoked", rec->id);
		return 401;
	}
	if ((why = token_unusable_reason(rec->expires_at, -1, gateway_now())) != NULL) {
		snprintf(err, errlen, "token %s is %s", rec->id, why);
		return 401;
	}
	return 0;
}

/*
 * Checks a bearer token (admin or user) against its record: the kinds
 * agree, the hash matches (in constant time), and it is neither revoked nor
 * expired.  Returns 0 with *rec filled, or 401 with a reason that never
 * repeats the secret, or 503 when the store cannot answer.  A 401 for an
 * id the store does not know leaves rec->id "" (check_done remembers it).
 *
 * cache and cluster: non-NULL when the caller asks for one cluster on the
 * loop; then a token proven for it moments ago is taken from the cache
 * (*cached set) instead of the store (the cache is the loop's).  With
 * either NULL it touches only st: any thread.  st NULL: the cache only
 * (NEEDS_STORE when it does not know the pair), and 401 at once for an id
 * the store did not know within ACCESS_ID_TTL_MS.  The hash is compared
 * either way.
 */
static int
bearer_check(struct store *st, struct access_cache *cache,
    const char *authorization, const char *cluster, struct store_token *rec,
    int *cached, char *err, size_t errlen)
{
	struct token t;
	uint8_t hash[TOKEN_HASH_LEN];
	const struct id_entry *e;
	char perr[128];
	int ok, rc;

	if (authorization == NULL || strncmp(authorization, "Bearer ", 7) != 0) {
		snprintf(err, errlen, "missing token: send 'Authorization: Bearer TOKEN'");
		return 401;
	}
	if (token_parse(authorization + 7, &t, perr, sizeof(perr)) != 0) {
		snprintf(err, errlen, "invalid token: %s", perr);
		return 401;
	}
	if (t.kind == TOKEN_IMPORT) {
		token_clear(&t);
		snprintf(err, errlen, "an import token only registers a node");
		return 401;
	}
	/* An id the store said it did not know moments ago (the loop's pass
	 * only: the table is the loop's). */
	if (st == NULL && (e = id_get(cache, t.id)) != NULL &&
	    e->cluster[0] == '\0') {
		token_clear(&t);
		snprintf(err, errlen, INVALID_TOKEN);
		return 401;
	}
	token_hash(&t, hash);
	*cached = cluster != NULL && cache_get(cache, t.id, cluster, rec);
	if (!*cached && st == NULL) {
		token_clear(&t);
		OPENSSL_cleanse(hash, sizeof(hash));
		return NEEDS_STORE;
	}
	rc = *cached ? STORE_OK : store_token_get(st, t.id, rec);
	ok = rc == STORE_OK && rec->kind == t.kind &&
	    token_hash_equal(hash, rec->verifier);
	token_clear(&t);
	OPENSSL_cleanse(hash, sizeof(hash));
	if (rc != STORE_OK && rc != STORE_NOTFOUND) {
		/* Not the token's fault: the store is down or stalled (docs/0021,
		 * a statement or lock timeout). */
		snprintf(err, errlen, "the store cannot answer (reading the token): "
		    "retry shortly");
		return 503;
	}
	if (rc == STORE_NOTFOUND)
		rec->id[0] = '\0';       /* unknown: said alike to the client */
	if (!ok) {
		snprintf(err, errlen, INVALID_TOKEN);
		return 401;
	}
	return record_usable(rec, err, errlen);
}

/* For a user token: whether it reaches cluster (0, 403 or 503). */
static int
scope_check(struct store *st, const struct store_token *rec,
    const char *cluster, char *err, size_t errlen)
{
	switch (store_token_in_cluster(st, rec->id, cluster)) {
	case STORE_OK:
		return 0;
	case STORE_NOTFOUND:
		snprintf(err, errlen, "the token of user %s (%s) is not scoped to "
		    "cluster %s", rec->name, rec->id, cluster);
		return 403;
	default:
		snprintf(err, errlen, "the store cannot answer (checking the "
		    "token's clusters): retry shortly");
		return 503;
	}
}

int
access_admin(struct store *st, const char *authorization, char *principal,
    size_t plen, char *err, size_t errlen)
{
	struct store_token rec;
	int status, cached;

	if ((status = bearer_check(st, NULL, authorization, NULL, &rec, &cached,
	    err, errlen)) != 0) {
		if (strncmp(err, "missing", 7) == 0)
			snprintf(err, errlen, "missing admin token: send "
			    "'Authorization: Bearer TOKEN'");
		return status;
	}
	if (rec.kind != TOKEN_ADMIN) {
		snprintf(err, errlen, "an admin token is required");
		return 403;
	}
	snprintf(principal, plen, "admin:%s", rec.id);
	return 0;
}

/* Whether authorization reaches cluster (the token and its scope, not
 * whether the cluster exists).  0 with g's principal and token id, *rec
 * and *cached (the pair came from the cache: the cluster existed when it
 * was put there), or 401/403/500.  cache: the loop's (NULL: none, as on
 * the store thread); st NULL: the cache only (NEEDS_STORE). */
static int
token_reaches(struct store *st, struct access_cache *cache,
    const char *authorization, const char *cluster, struct access_grant *g,
    struct store_token *rec, int *cached, char *err, size_t errlen)
{
	int status;

	*cached = 0;
	if ((status = bearer_check(st, cache, authorization, cluster, rec,
	    cached, err, errlen)) != 0)
		return status;
	snprintf(g->token_id, sizeof(g->token_id), "%s", rec->id);
	if (rec->kind == TOKEN_ADMIN) {
		snprintf(g->principal, sizeof(g->principal), "admin:%s", rec->id);
		return 0;
	}
	if (!*cached && (status = scope_check(st, rec, cluster, err, errlen)) != 0)
		return status;
	snprintf(g->principal, sizeof(g->principal), "user:%s", rec->name);
	return 0;
}

int
access_viewer(struct store *st, const char *authorization, char *principal,
    size_t plen, int *admin, char (*clusters)[STORE_ID_MAX + 1], size_t *nclusters,
    char *err, size_t errlen)
{
	struct store_token rec;
	struct store_user_token *u;
	int status, cached = 0;

	*admin = 0;
	*nclusters = 0;
	if ((status = bearer_check(st, NULL, authorization, NULL, &rec, &cached,
	    err, errlen)) != 0)
		return status;
	if (rec.kind == TOKEN_ADMIN) {
		snprintf(principal, plen, "admin:%s", rec.id);
		*admin = 1;
		return 0;
	}
	snprintf(principal, plen, "user:%s", rec.name);
	/* One indexed lookup; the record is large (64 cluster ids). */
	if ((u = malloc(sizeof(*u))) == NULL ||
	    store_user_token_get(st, rec.id, u) != STORE_OK) {
		free(u);
		snprintf(err, errlen, "store: cannot read the token's clusters");
		return 500;
	}
	for (size_t j = 0; j < u->nclusters && j < STORE_TOKEN_CLUSTERS_MAX; j++)
		memcpy(clusters[(*nclusters)++], u->clusters[j], STORE_ID_MAX + 1);
	free(u);
	return 0;
}

/* The id of the bearer token in authorization, or -1 if there is none. */
static int
bearer_id(const char *authorization, char id[TOKEN_ID_LEN + 1])
{
	struct token t;
	char perr[128];

	id[0] = '\0';
	if (authorization == NULL || strncmp(authorization, "Bearer ", 7) != 0 ||
	    token_parse(authorization + 7, &t, perr, sizeof(perr)) != 0)
		return -1;
	snprintf(id, TOKEN_ID_LEN + 1, "%s", t.id);
	token_clear(&t);
	return 0;
}

/* What sole_cluster found besides a cluster. */
#define SOLE_NONE (-2)       /* not a user token scoped to exactly one */
#define SOLE_UNKNOWN (-3)    /* an id the store does not know */
#define SOLE_STORE (-4)      /* the store cannot answer */

/* A root path's cluster: 0 with it, or SOLE_*.  st NULL: cache's table of
 * ids only, on the loop (NEEDS_STORE when it does not know the id). */
static int
sole_cluster(struct store *st, struct access_cache *cache,
    const char *authorization, char *cluster, size_t clen)
{
	char id[TOKEN_ID_LEN + 1];
	struct store_user_token u;
	const struct id_entry *e;
	int rc;

	/* Only the presented token's record is read (by id): the secret is
	 * checked afterwards, by cluster_check. */
	if (bearer_id(authorization, id) != 0 ||
	    strncmp(authorization + 7, "ttu_", 4) != 0)
		return SOLE_NONE;
	if (st == NULL) {
		if ((e = id_get(cache, id)) == NULL)
			return NEEDS_STORE;
		if (e->cluster[0] == '\0')
			return SOLE_UNKNOWN;
		snprintf(cluster, clen, "%s", e->cluster);
		return 0;
	}
	rc = store_user_token_get(st, id, &u);
	if (rc == STORE_NOTFOUND)
		return SOLE_UNKNOWN;
	if (rc != STORE_OK)
		return SOLE_STORE;
	if (u.nclusters != 1)
		return SOLE_NONE;
	snprintf(cluster, clen, "%s", u.clusters[0]);
	return 0;
}

/* access_recheck_async's check: from cache (st NULL; NEEDS_STORE when it
 * does not know the pair or is NULL), else from st with *rec filled. */
static int
recheck(struct store *st, struct access_cache *cache,
    const struct access_grant *g, struct store_token *rec, char *err,
    size_t errlen)
{
	int status;

	if (st == NULL)
		return cache_get(cache, g->token_id, g->cluster, rec) ?
		    record_usable(rec, err, errlen) : NEEDS_STORE;
	if (store_token_get(st, g->token_id, rec) != STORE_OK ||
	    rec->kind == TOKEN_IMPORT) {
		snprintf(err, errlen, "invalid token");
		return 401;
	}
	if ((status = record_usable(rec, err, errlen)) != 0)
		return status;
	return rec->kind == TOKEN_ADMIN ? 0 :
	    scope_check(st, rec, g->cluster, err, errlen);
}

/* ---- the calls routes make ---- */

/* 1 if node names a registered, unrevoked agent of cluster. */
static int
node_known(struct store *st, const char *cluster, const char *node)
{
	struct store_agent *as = NULL;
	size_t n = 0;
	int found = 0;

	if (store_agent_list(st, cluster, &as, &n) != STORE_OK)
		return 0;
	for (size_t i = 0; i < n && !found; i++)
		found = strcmp(as[i].node, node) == 0 && as[i].state != AGENT_REVOKED;
	free(as);
	return found;
}

/*
 * A cluster check on st (NULL: the cache only, NEEDS_STORE when it
 * is not enough; cache: the loop's, NULL on the store thread).  *put: the
 * token and the cluster were proven through the store: the loop may cache
 * (rec, cluster).
 */
static int
cluster_check(struct store *st, struct access_cache *cache,
    const char *authorization,
    const char *cluster, const char *node, struct access_grant *g,
    struct store_token *rec, int *put, char *err, size_t errlen)
{
	struct store_cluster c;
	int status, cached;

	*put = 0;
	memset(g, 0, sizeof(*g));
	snprintf(g->cluster, sizeof(g->cluster), "%s", cluster);
	if (node != NULL)
		snprintf(g->node, sizeof(g->node), "%s", node);
	/* Who first: whether a cluster exists is only told to a token that
	 * may reach it (an admin's, or a user's scoped to it). */
	if ((status = token_reaches(st, cache, authorization, g->cluster, g,
	    rec, &cached, err, errlen)) != 0)
		return status;
	/* A pair is cached only once its cluster was found, and clusters are
	 * never deleted: a cached pair needs no store read at all. */
	if (!cached) {
		switch (store_cluster_get(st, g->cluster, &c)) {
		case STORE_OK:
			break;
		case STORE_NOTFOUND:
			snprintf(err, errlen, "no cluster %s", g->cluster);
			return 404;
		default:
			snprintf(err, errlen, "the store cannot answer (reading the "
			    "cluster): retry shortly");
			return 503;
		}
		*put = 1;
	}
	if (g->node[0] == '\0')
		return 0;
	if (st == NULL)
		return NEEDS_STORE;
	if (!node_known(st, g->cluster, g->node)) {
		snprintf(err, errlen, "no node %s in cluster %s", g->node, g->cluster);
		return 404;
	}
	return 0;
}

int
access_pick(struct gateway *gw, const struct access_grant *g,
    struct reach *out, char *err, size_t errlen)
{
	const char *node = g->node[0] != '\0' ? g->node : NULL;
	struct store_remote_agent ra;
	struct agentdir_entry e;
	struct session *s;
	struct loop *self = loop_here(gw);
	int here, elsewhere;

	/* This process first: on this loop no extra hop; on another loop
	 * (docs/0040 step 6: tunnels on loop 0, operators on every loop) over
	 * the link between the two, whose far side checks the agent is still
	 * there (a stale entry costs a crossing and that side's refusal, never
	 * a refusal here).  An entry of this loop whose session is gone
	 * (replaced meanwhile) is looked for on other replicas.  An agent on
	 * this loop is preferred (docs/0040 step 8: nothing crosses). */
	if (agentdir_pick(gw->agents, g->cluster, node,
	    self != NULL ? self->index : AGENTDIR_NO_LOOP, &e, &here)) {
		if ((s = session_here(gw, &e)) != NULL) {
			reach_local(out, gw, s);
			return 0;
		}
		if (self != NULL && e.at.loop != self->index &&
		    e.at.loop < gw->nloops && gw->looplinks != NULL) {
			reach_on_loop(out, gw, &gw->loops[e.at.loop], e.agent_id,
			    e.node);
			return 0;
		}
	}
	if (presence_remote_pick(gw, g->cluster, node, &ra, &elsewhere)) {
		reach_remote(out, &ra);
		/* The peer links are loop 0's (class d, docs/0040): from
		 * another loop the stream goes over the link to loop 0, whose
		 * far side (peer_route.c) opens it on the peer link. */
		if (self != NULL && self->index != 0 && gw->looplinks != NULL)
			out->loop = &gw->loops[0];
		return 0;
	}
	if (node != NULL)
		snprintf(err, errlen, "node %s of cluster %s is %s", node, g->cluster,
		    here || elsewhere ? "connected but not active" :
		    "not connected to any replica");
	else
		snprintf(err, errlen, "no %sagent of cluster %s is connected to any "
		    "replica", here || elsewhere ? "active " : "", g->cluster);
	return 503;
}

/* Whether loop `to` holds more HTTP connections than loop `here` by more
 * than the slack, max(2, a quarter of here's): then a connection landing
 * there would crowd one loop while here idles (one busy cluster whose
 * agents are all on `to`), and it stays here and crosses instead. */
static int
land_crowded(const struct gateway *gw, unsigned to, unsigned here)
{
	unsigned n_to = atomic_load_explicit(&gw->loops[to].nconns,
	    memory_order_relaxed);
	unsigned n_here = atomic_load_explicit(&gw->loops[here].nconns,
	    memory_order_relaxed);
	unsigned slack = n_here / 4 > 2 ? n_here / 4 : 2;

	return n_to > n_here + slack;
}

/*
 * --landing any's weights (docs/0040 step 8, "Built: the tunnel side
 * weighed"): a connection for a cluster weighs LAND_CLIENT_PARTS on the
 * loop it lives on (its TLS, HTTP and route: the client side) and
 * LAND_TUNNEL_PARTS on the loop of its agent's tunnel (its requests'
 * frames to and from the agent, the tunnel's TLS: the tunnel side), so
 * w = 1/2 of a client side.  Measured, a request whose connection is on
 * the other loop than its agent's tunnel (docs/performance.md, 2026-11-28):
 * callgrind, per thread, with the link's DATA unencoded (a1084de): 38,210
 * instructions on the tunnel's loop against 81,904 on the connection's,
 * w = 0.47; CPU, this 2-core machine, k8s_proxy.sh at --workers 2 with w
 * = 1/3 (5 of 16 connections on the tunnel's loop T): T 1.8 and 1.7 s,
 * the other 1.5 and 1.3 s, still T the busier, which w = 0.54 and 0.61
 * would have evened (connections served alike); the first estimate from
 * the held cores' run (2026-11-27: 24 us per request, the tunnel side
 * ~22 %, a crossing ~10 %, half each side) gave w = 0.33, too low.  With
 * every connection of one cluster on loop T the loops are even when
 * n (1 - w) / 2 of them live on T: a quarter (at --workers 2 `any`'s old
 * half on T left T busy 9.7 s of 10 and the other loop 7.8 s).
 */
#define LAND_CLIENT_PARTS 2u
#define LAND_TUNNEL_PARTS 1u
/* Loops the weighing looks at (agentdir_loops' mask; --workers <= 64). */
#define LAND_LOOPS_MAX 64u

/* Loop i's weight now: its connections' client sides and the tunnel
 * sides run there.  Two relaxed atomic loads. */
static uint64_t
land_load(const struct gateway *gw, unsigned i)
{
	return (uint64_t)LAND_CLIENT_PARTS * atomic_load_explicit(
	    &gw->loops[i].nconns, memory_order_relaxed) +
	    (uint64_t)LAND_TUNNEL_PARTS * atomic_load_explicit(
	    &gw->loops[i].tunnel_side, memory_order_relaxed);
}

/*
 * --landing any: the loop that leaves the loops most even once this
 * connection weighs on them, its agents' tunnels on the loops of mask
 * (not 0).  Landing on loop i adds the client side there and the tunnel
 * side on i itself when i holds an agent of it (nothing crosses), else on
 * the least loaded loop of mask (its streams cross to an agent there);
 * the loop whose load plus what lands on it is least wins; on a tie a
 * loop of mask (nothing crosses: less CPU in all), then here (no
 * hand-over), then the lowest index.  With one agent's loop T that
 * is: T's load plus the tunnel side against each other loop's (the
 * tunnel side goes to T wherever the connection lands).  *tunnel: the
 * loop the tunnel side was weighed on.  O(loops).
 */
static unsigned
land_weighed(const struct gateway *gw, uint64_t mask, unsigned here,
    unsigned *tunnel)
{
	uint64_t load[LAND_LOOPS_MAX], best_cost;
	unsigned n = gw->nloops, t = AGENTDIR_NO_LOOP, best = here;

	for (unsigned i = 0; i < n; i++) {
		load[i] = land_load(gw, i);
		if ((mask >> i & 1) && (t == AGENTDIR_NO_LOOP || load[i] < load[t]))
			t = i;
	}
	best_cost = load[here] + LAND_CLIENT_PARTS +
	    ((mask >> here & 1) ? LAND_TUNNEL_PARTS : 0);
	for (unsigned i = 0; i < n; i++) {
		uint64_t cost = load[i] + LAND_CLIENT_PARTS +
		    ((mask >> i & 1) ? LAND_TUNNEL_PARTS : 0);

		if (cost < best_cost || (cost == best_cost && (mask >> i & 1) &&
		    !(mask >> best & 1))) {
			best = i;
			best_cost = cost;
		}
	}
	*tunnel = (mask >> best & 1) ? best : t;
	return best;
}

unsigned
access_land_loop(struct gateway *gw, const char *cluster, const char *node,
    unsigned here, unsigned *tunnel)
{
	uint64_t mask;
	unsigned to;

	if (gw->agents == NULL || gw->loops == NULL || cluster[0] == '\0' ||
	    here >= gw->nloops)
		return here;
	if (!gw->landing_route) {
		if (tunnel == NULL || gw->nloops < 2 || gw->nloops > LAND_LOOPS_MAX ||
		    agentdir_loops(gw->agents, cluster, node, &mask) == 0)
			return here;
		if (gw->nloops < 64)
			mask &= (UINT64_C(1) << gw->nloops) - 1;
		if (mask == 0)
			return here;
		return land_weighed(gw, mask, here, tunnel);
	}
	if (!agentdir_land(gw->agents, cluster, node, here, &to) ||
	    to >= gw->nloops || (to != here && land_crowded(gw, to, here)))
		return here;
	return to;
}

/* --landing any's guard for a dial (access_land_dial): whether loop `to`,
 * its agent's, is clearly more loaded than `here`, by land_load's weights:
 * by more than max(2 connections' client sides, a quarter of here's load).
 * A dial's stream that crosses costs the gateway 3-27 % more CPU per byte
 * than one that does not (throughput_profile.sh at --workers 2: 1.59-1.95
 * against 1.48-1.57 CPU s/GiB, docs/0040 "Built: the dial lands on its
 * agent's loop"), where a /k8s request's crossing costs ~8 %: so a dial
 * goes to its agent unless the loops are clearly uneven, where a /k8s
 * connection is weighed to even them (which would put a lone dial off
 * its agent's loop: 2 + 1 there against 2 elsewhere). */
static int
land_heavier(const struct gateway *gw, unsigned to, unsigned here)
{
	uint64_t l_to = land_load(gw, to), l_here = land_load(gw, here);
	uint64_t slack = l_here / 4 > 2 * LAND_CLIENT_PARTS ? l_here / 4 :
	    2 * LAND_CLIENT_PARTS;

	return l_to > l_here + slack;
}

unsigned
access_land_dial(struct gateway *gw, const char *cluster, const char *node,
    unsigned here, unsigned *tunnel)
{
	unsigned to;

	if (gw->landing_route)
		return access_land_loop(gw, cluster, node, here, NULL);
	if (gw->agents == NULL || gw->loops == NULL || cluster[0] == '\0' ||
	    here >= gw->nloops || gw->nloops < 2 ||
	    !agentdir_land(gw->agents, cluster, node, here, &to) ||
	    to >= gw->nloops)
		return here;
	*tunnel = to;
	return to != here && land_heavier(gw, to, here) ? here : to;
}

/* ---- the same checks, their store reads on the store thread ---- */

enum check_kind { CHECK_CLUSTER, CHECK_SOLE, CHECK_RECHECK };

/*
 * A check under way (access.h).  The store thread reads authorization (a
 * copy, wiped once read) and g's inputs and writes the results; the loop
 * caches what was proven and calls done, unless the caller cancelled it.
 * ~1 KiB while it is out.
 */
struct access_check {
	struct gateway *gw;
	struct access_cache *cache;        /* the starting loop's: it fills it */
	access_done_fn *done;              /* NULL once cancelled */
	void *arg;
	enum check_kind kind;
	char *authorization;               /* CLUSTER, SOLE */
	char cluster[STORE_ID_MAX + 1];    /* CLUSTER: asked for */
	char node[STORE_NAME_MAX + 1];     /* CLUSTER, SOLE: asked for ("": any) */
	uint64_t generation;               /* the cache's generation when asked */
	char token_id[TOKEN_ID_LEN + 1];   /* CLUSTER, SOLE: the id presented */
	int unknown;                       /* the store does not know the id */
	int sole_put;                      /* SOLE: the id's one cluster found */
	int counted;                       /* in the cache's checks_out */
	struct access_grant g;
	struct store_token rec;
	int put;                           /* (rec, g.cluster) proven: cache it */
	int status;
	char err[256];
};

static void
check_free(struct access_check *c)
{
	if (c->authorization != NULL) {
		OPENSSL_cleanse(c->authorization, strlen(c->authorization));
		free(c->authorization);
	}
	OPENSSL_cleanse(c, sizeof(*c));
	free(c);
}

/* A /k8s root path's token is not one user token's of one cluster (or
 * the store cannot say). */
static void
sole_refused(struct access_check *c, int why)
{
	if (why == SOLE_STORE) {
		c->status = 503;
		snprintf(c->err, sizeof(c->err), "the store cannot answer (reading "
		    "the token's clusters): retry shortly");
		return;
	}
	c->unknown = why == SOLE_UNKNOWN;
	c->status = 404;
	snprintf(c->err, sizeof(c->err), "no cluster: the token is not a "
	    "user token scoped to exactly one cluster");
}

static void
check_work(struct store *st, void *arg)
{
	struct access_check *c = arg;
	int sole;

	c->rec.id[0] = '\0';
	if (c->kind == CHECK_RECHECK) {
		c->status = recheck(st, NULL, &c->g, &c->rec, c->err,
		    sizeof(c->err));
		c->put = c->status == 0;
	} else if (c->kind == CHECK_SOLE && c->cluster[0] == '\0' &&
	    (sole = sole_cluster(st, NULL, c->authorization, c->cluster,
	    sizeof(c->cluster))) != 0) {
		sole_refused(c, sole);
	} else {
		c->sole_put = c->kind == CHECK_SOLE;
		c->status = cluster_check(st, NULL, c->authorization, c->cluster,
		    c->node, &c->g, &c->rec, &c->put, c->err, sizeof(c->err));
		c->unknown = c->status == 401 && c->rec.id[0] == '\0';
	}
	if (c->authorization != NULL)
		OPENSSL_cleanse(c->authorization, strlen(c->authorization));
}

/* An id the store does not know, told to every loop's cache. */
struct id_note {
	struct gateway *gw;
	char id[TOKEN_ID_LEN + 1];
};

static void
id_note_run(void *arg)
{
	struct id_note *n = arg;

	id_put(cache_here(n->gw), n->id, "");
}

/*
 * The store did not know id: cache (the asking loop's) remembers it now,
 * and every other loop of gw from its inbox, so that a flood of one
 * made-up token costs one store read per ACCESS_ID_TTL_MS for the whole
 * process, whichever loop its connections land on (issue 22, docs/0040).
 * Cost: one allocation and a loop_call per loop.
 */
static void
unknown_everywhere(struct gateway *gw, struct access_cache *cache,
    const char *id)
{
	struct loop *self = loop_here(gw);
	struct id_note *n;

	id_put(cache, id, "");
	if (self == NULL || gw->loops == NULL || gw->nloops < 2 || id[0] == '\0' ||
	    (n = malloc(sizeof(*n))) == NULL)
		return;
	n->gw = gw;
	snprintf(n->id, sizeof(n->id), "%s", id);
	(void)loop_broadcast(gw->loops, gw->nloops, id_note_run, n, free);
}

/*
 * c granted its pair and (token, cluster) is in the loop's cache, proven
 * under c's generation: g says how long it may be taken again without a
 * check (access_memo): as long as that entry, never longer.  A node
 * named, another generation, or an entry gone: not reusable.
 */
static void
grant_reusable(struct access_check *c, struct access_cache *cache)
{
	struct cache_entry *e;

	c->g.reuse_until_ms = 0;
	if (c->status != 0 || c->kind == CHECK_RECHECK || cache == NULL ||
	    c->g.node[0] != '\0' || c->generation != cache_generation(c->gw) ||
	    c->generation != cache->seen)
		return;
	e = cache_slot(cache, c->g.token_id, c->g.cluster);
	if (e->until_ms == 0 || e->until_ms < runtime_monotonic_ms() ||
	    strcmp(e->token_id, c->g.token_id) != 0 ||
	    strcmp(e->cluster, c->g.cluster) != 0)
		return;
	c->g.reuse_until_ms = e->until_ms;
	c->g.reuse_generation = c->generation;
	c->g.expires_at = e->rec.expires_at;
}

static void
check_done(void *arg)
{
	struct access_check *c = arg;

	/* The cache of the loop that started c: this one (the store thread
	 * answers there), or, at shutdown, one whose thread was joined. */
	struct access_cache *cache = c->cache;

	if (c->counted && cache != NULL)
		cache->checks_out--;
	/* Nothing proven before a revocation goes into the cache after it. */
	if (c->put && c->generation == cache_generation(c->gw))
		cache_put(cache, c->rec.id, c->g.cluster, &c->rec);
	if (c->unknown)
		unknown_everywhere(c->gw, cache, c->token_id);
	else if (c->sole_put && c->generation == cache_generation(c->gw))
		id_put(cache, c->token_id, c->cluster);
	grant_reusable(c, cache);
	if (c->done != NULL)
		c->done(c->arg, c->status, &c->g, c->err);
	check_free(c);
}

/* Runs c: from the caches at once when they are enough (c freed, NULL
 * returned), else on the store thread (at most ACCESS_CHECKS_MAX out). */
static struct access_check *
check_start(struct gateway *gw, struct access_check *c)
{
	uint64_t generation = cache_generation(gw);
	struct access_cache *cache = cache_here(gw);
	int sole = 0;

	c->gw = gw;
	c->cache = cache;
	c->generation = generation;
	if (c->kind != CHECK_RECHECK)
		(void)bearer_id(c->authorization, c->token_id);
	if (c->kind == CHECK_SOLE) {
		sole = sole_cluster(NULL, cache, c->authorization, c->cluster,
		    sizeof(c->cluster));
		if (sole != 0 && sole != NEEDS_STORE)
			sole_refused(c, sole);
	}
	if (c->kind == CHECK_RECHECK)
		c->status = recheck(NULL, cache, &c->g, &c->rec, c->err,
		    sizeof(c->err));
	else if (c->kind == CHECK_CLUSTER || (c->kind == CHECK_SOLE && sole == 0))
		c->status = cluster_check(NULL, cache, c->authorization,
		    c->cluster, c->node, &c->g, &c->rec, &c->put, c->err,
		    sizeof(c->err));
	else if (sole == NEEDS_STORE)
		c->status = NEEDS_STORE;
	if (c->status == NEEDS_STORE && cache != NULL &&
	    cache->checks_out >= ACCESS_CHECKS_MAX) {
		c->status = 503;
		snprintf(c->err, sizeof(c->err), "the store is busy: %d token "
		    "checks wait for it already; retry shortly", ACCESS_CHECKS_MAX);
	} else if (c->status == NEEDS_STORE &&
	    store_worker_submit(gw->storew, check_work, check_done, c) == 0) {
		if (cache != NULL) {
			cache->checks_out++;
			c->counted = 1;
		}
		return c;
	} else if (c->status == NEEDS_STORE) {
		c->status = 503;
		snprintf(c->err, sizeof(c->err), "the store's queue is full: "
		    "retry shortly");
	}
	grant_reusable(c, cache);
	c->done(c->arg, c->status, &c->g, c->err);
	check_free(c);
	return NULL;
}

struct access_check *
access_cluster_async(struct gateway *gw, const char *authorization,
    const char *cluster, const char *node, access_done_fn *done, void *arg)
{
	struct access_check *c = calloc(1, sizeof(*c));
	static const struct access_grant none;

	if (c == NULL || (c->authorization = strdup(authorization != NULL ?
	    authorization : "")) == NULL) {
		free(c);
		done(arg, 500, &none, "out of memory");
		return NULL;
	}
	c->done = done;
	c->arg = arg;
	c->kind = cluster != NULL ? CHECK_CLUSTER : CHECK_SOLE;
	snprintf(c->cluster, sizeof(c->cluster), "%s", cluster != NULL ? cluster : "");
	snprintf(c->node, sizeof(c->node), "%s", node != NULL ? node : "");
	return check_start(gw, c);
}

struct access_check *
access_recheck_async(struct gateway *gw, const struct access_grant *g,
    access_done_fn *done, void *arg)
{
	struct access_check *c = calloc(1, sizeof(*c));

	if (c == NULL) {
		done(arg, 500, g, "out of memory");
		return NULL;
	}
	c->done = done;
	c->arg = arg;
	c->kind = CHECK_RECHECK;
	c->g = *g;
	return check_start(gw, c);
}

void
access_cancel(struct access_check *c)
{
	if (c != NULL)
		c->done = NULL;
}

/* ---- a connection's memo of its last grant ---- */

void
access_memo_clear(struct access_memo *m)
{
	OPENSSL_cleanse(m->authorization, sizeof(m->authorization));
	m->len = 0;
	m->g.reuse_until_ms = 0;
}

void
access_memo_begin(struct access_memo *m, const char *authorization,
    const char *cluster)
{
	size_t n = authorization != NULL ?
	    strnlen(authorization, ACCESS_MEMO_AUTH_MAX + 1) : 0;

	access_memo_clear(m);
	if (n == 0 || n > ACCESS_MEMO_AUTH_MAX)
		return;
	memcpy(m->authorization, authorization, n);
	m->len = n;
	m->root = cluster == NULL;
	snprintf(m->asked, sizeof(m->asked), "%s", cluster != NULL ? cluster : "");
}

void
access_memo_grant(struct access_memo *m, const struct access_grant *g)
{
	if (m->len == 0 || g->reuse_until_ms == 0) {
		access_memo_clear(m);
		return;
	}
	m->g = *g;
}

int
access_memo_take(struct gateway *gw, const struct access_memo *m,
    const char *authorization, const char *cluster, struct access_grant *g)
{
	size_t n;

	if (m->len == 0 || m->g.reuse_until_ms == 0 || authorization == NULL ||
	    m->root != (cluster == NULL) ||
	    (cluster != NULL && strcmp(m->asked, cluster) != 0) ||
	    m->g.reuse_generation != cache_generation(gw) ||
	    m->g.reuse_until_ms < runtime_monotonic_ms() ||
	    token_unusable_reason(m->g.expires_at, -1, gateway_now()) != NULL)
		return 0;
	/* The length first (a token's is public: its format's), then every
	 * byte, in constant time. */
	n = strnlen(authorization, ACCESS_MEMO_AUTH_MAX + 1);
	if (n != m->len || CRYPTO_memcmp(authorization, m->authorization, n) != 0)
		return 0;
	*g = m->g;
	return 1;
}
