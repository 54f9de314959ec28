/*
 * access.h: who may do what on the gateway, and which agent they reach.
 *
 * The one owner of: bearer-token checks (admin and user tokens), a user
 * token's scope (its clusters), the cache of tokens proven for a cluster
 * moments ago, and the "pick an agent" step every path to an agent takes
 * (dial, tetherctl forward, the k8s proxy).  Routes call down into this
 * file and never decide access themselves; the replica work adds "the
 * agent is on a peer" here, in access_pick, and nowhere else.
 *
 * Every refusal is an HTTP status with a reason that never repeats a
 * secret: 401 (missing, malformed, unknown, revoked or expired token), 403
 * (a valid token that does not reach this), 404 (no such cluster or node,
 * told only to a token that may reach it), 500 (out of memory), 503 (no
 * connected active agent; the store cannot answer, "retry shortly").
 *
 * Cost: one store read of the token (by id), one of its scope and one of
 * the cluster per check, except when (token, cluster) was proven, cluster
 * found, within ACCESS_CACHE_TTL_MS (a 512-slot direct-mapped table of
 * token records): then none; the secret is hashed and
 * compared in constant time on every call either way.  No check of a
 * peer's request reads the store on the loop: the asynchronous forms
 * below run the reads on the store thread.  access_pick is
 * O(agents of the cluster) (agentdir.h, presence.h), with no store call.
 */
#ifndef TETHER_ACCESS_H
#define TETHER_ACCESS_H

#include <stddef.h>

#include "livestreams.h"
#include "store.h"
#include "token.h"

struct gateway;
struct reach;

/* How long a (token, cluster) pair proven once is taken on trust (the
 * secret is still compared): any revocation through this gateway clears
 * the cache at once, and on PostgreSQL every other replica's too, through
 * the store's notice (notices.c, docs/0021); this bounds how long a
 * revocation a replica missed (its listener down) can go unseen. */
#define ACCESS_CACHE_TTL_MS 2000

/* An id the store did not know (a made-up token) is refused without a
 * store read for this long (a 1024-slot table of ids, no secret); a user
 * token's one cluster (for /k8s root paths) is remembered as long. */
#define ACCESS_ID_TTL_MS 5000

/* At most this many checks wait for the store thread at once (cancelled
 * ones included, until their read returns); past it a check is answered
 * 503 at once, so that a flood of unknown tokens cannot fill the queue
 * agents' handshakes need, nor grow without bound while the store stalls. */
#define ACCESS_CHECKS_MAX 64

/* Who is asking for which cluster, once a cluster check said yes. */
struct access_grant {
	char principal[96];                /* "admin:<token id>" or "user:<name>" */
	char token_id[TOKEN_ID_LEN + 1];   /* public: may be logged and kept */
	char cluster[STORE_ID_MAX + 1];
	char node[STORE_NAME_MAX + 1];     /* "" = any agent of the cluster */
	/* How long this grant holds for the same bearer token without a
	 * check (access_memo): the proven pair's end in the loop's cache
	 * (runtime_monotonic_ms; 0: not reusable, e.g. a node was named), the
	 * revocation generation it was proven under, and the token's expiry
	 * (Unix seconds, 0: none). */
	int64_t reuse_until_ms;
	uint64_t reuse_generation;
	int64_t expires_at;
};

/*
 * The admin API: authorization ("Bearer ...") must be a live admin token.
 * Returns 0 and who it is ("admin:<token id>"), or 401 (a missing token:
 * "missing admin token: ..."), or 403 for a valid token of another kind
 * ("an admin token is required"), with a reason.  Reads only st (no
 * cache): made for the store thread (answer_later.h).
 */
int access_admin(struct store *st, const char *authorization,
    char *principal, size_t plen, char *err, size_t errlen);


/*
 * The agent g reaches, into *out (reach.h): a connected, active agent of
 * g->cluster (of g->node, if set) whose tunnel this replica holds, rotating
 * among several (on this loop: out->local; on another loop of this
 * process: out->loop, reached over the link between the two, docs/0040);
 * else one whose tunnel another live replica holds (the presence
 * directory, presence.h: no store call).  Returns 0, or 503 with a reason
 * when there is none ("node N of cluster C is not connected to any
 * replica").  out->local is valid until the loop runs again.
 */
int access_pick(struct gateway *gw, const struct access_grant *g,
    struct reach *out, char *err, size_t errlen);

/*
 * The loop (0..gw->nloops-1) a new operator connection for cluster (node,
 * when non-NULL) lands on, its handshake having run on loop here
 * (docs/0040 step 8, a route's land_loop).
 * With --landing route (gw->landing_route): here when an active agent of
 * it has its tunnel on here, else the loop of the agent access_pick would
 * take from here, unless that loop holds more HTTP connections than here
 * by more than max(2, a quarter of here's) (loop->nconns: one busy
 * cluster's connections would all crowd one loop while here idles; this
 * one stays and its streams cross); *tunnel untouched.
 * With --landing any: the loop that leaves the loops most even, weighing
 * each loop's connections (loop->nconns, the client side, 1 each) and the
 * operator connections whose agent's tunnel it holds (loop->tunnel_side,
 * 1/2 each: access.c's LAND_* figures), this one counted where it would
 * land and where its tunnel side would run (on its own loop when that
 * holds an agent of the cluster, else on one that does), a tie going to
 * a loop where nothing crosses, then to here; *tunnel is set
 * to that loop, which the caller counts in loop->tunnel_side from now
 * until the connection ends (its owner gives it back: core/loop.h,
 * nconns); tunnel NULL stays here (a dial lands by access_land_dial).
 * Either way here, *tunnel untouched, when this process holds no active
 * agent of it (unknown cluster, none active, or only on other replicas)
 * or with one loop.  A hint only: the agent may leave meanwhile (its
 * streams then cross or go elsewhere, never refused for it).  Nothing is
 * checked of who asks: the route checks that on the landed loop.  Any
 * thread.  O(agents of the cluster) under the agent directory's mutex
 * (agentdir_land, agentdir_loops), and O(loops) relaxed atomic loads; no
 * store call.
 */
unsigned access_land_loop(struct gateway *gw, const char *cluster,
    const char *node, unsigned here, unsigned *tunnel);

/*
 * The loop a new dial (tetherctl connect, tetherctl forward: a connection
 * that becomes a raw stream or a multiplexer to cluster's agents, node's
 * when non-NULL) lands on, its handshake having run on loop here (docs/0040
 * step 8, "Built: the dial lands on its agent's loop").
 * With --landing route: access_land_loop's (*tunnel untouched).
 * With --landing any: the loop of the agent a pick from here would take
 * (here when an active agent of it is on here: agentdir_land), so its
 * streams cross no loop link, unless that loop is clearly more loaded
 * than here: its load (2 per connection living there, dials included
 * until they end, 1 per operator connection whose tunnel side it runs:
 * access_land_loop's weights) above here's by more than max(2
 * connections, a quarter of here's); then it stays here and its streams
 * cross.  Either way *tunnel is set to the agent's loop, which the caller
 * counts in loop->tunnel_side until the dial ends (its owner gives it
 * back: core/loop.h, nconns): a row of dials to one agent fills its loop
 * until the guard keeps the rest where their handshakes ran.
 * Here, *tunnel untouched, when this process holds no active agent of it
 * or with one loop.  A hint only, as access_land_loop's.  Any thread.
 * O(agents of the cluster) under the agent directory's mutex
 * (agentdir_land) and four relaxed atomic loads; no store call.
 */
unsigned access_land_dial(struct gateway *gw, const char *cluster,
    const char *node, unsigned here, unsigned *tunnel);

/*
 * Read-only views open to any token holder (GET /v1/status): an admin
 * token sees every cluster (*admin 1); a user token the clusters it is
 * scoped to, copied into clusters (*nclusters of them, at most
 * STORE_TOKEN_CLUSTERS_MAX).  Returns 0 and the principal, or 401 or 500,
 * with a reason.  Reads only st (no cache): made for the store thread.
 */
int access_viewer(struct store *st, const char *authorization,
    char *principal, size_t plen, int *admin,
    char (*clusters)[STORE_ID_MAX + 1], size_t *nclusters,
    char *err, size_t errlen);

/*
 * The cache of (token, cluster) pairs proven within ACCESS_CACHE_TTL_MS,
 * one per loop: loop 0's is gw->access_cache (made by main.c before it
 * serves), loop k's is made at its first check (loop->access_cache, when
 * gw has one: without it (NULL) every check on every loop reads the
 * store).  ~100 KiB (512 token records) each.  Each loop's is touched by
 * its thread only.  Returns NULL when out of memory.
 */
struct access_cache;
struct access_cache *access_cache_new(void);
/* Wipes (it holds token records) and frees c.  NULL is allowed. */
void access_cache_free(struct access_cache *c);
/* Frees loops 1..n-1's caches (gw->access_cache stays the caller's):
 * after their threads were joined and the store threads stopped (their
 * orphaned checks' answers count out of them), before loops_free. */
void access_loops_free(struct gateway *gw);

/* Tokens were revoked: nothing any loop of gw proved before counts any
 * more (each loop's cache empties itself before its next use; checks
 * under way on the store thread do not put what they read into it).
 * Any thread.  Cost: one atomic add; each loop then wipes ~100 KiB. */
void access_revoked(struct gateway *gw);

/* What a revocation names (access_revoke_broadcast). */
struct revoke_what {
	enum live_credential by;    /* what the streams' match field is */
	const char *match;          /* a token id, "user:<name>", an agent id */
	const char *what;           /* "token", "user", "agent": the reason's
	                               word and the log line's key */
	const char *name;           /* the id shown (NULL: match) */
	const char *log;            /* a string literal: the info line written
	                               once when streams ended; NULL: none */
};

/*
 * A revocation's effects in this process (docs/0027, docs/0040): every
 * loop's cache forgets what it proved (access_revoked, at once: no check
 * started after this call returns uses it), and on every loop the live
 * streams w matches end (live_stream_end_matching, reason "WHAT NAME
 * revoked", each by its own loop from its inbox).  Once every loop ended
 * its own, one info line w->log (WHAT=NAME streams=N) when N > 0, then
 * done(arg, N) on the calling loop (may be NULL); if that loop stopped
 * first (shutdown), drop(arg) instead, on another thread (may be NULL).
 * Off every loop of gw (unit tests without loops): gw's own streams, and
 * done before it returns.  Returns 0, or -1 out of memory (caches still
 * forgotten; drop(arg) ran).  From a loop of gw.  Cost: one allocation,
 * n + 1 loop calls, O(live streams) on each loop.
 */
typedef void access_revoke_done_fn(void *arg, size_t ended);
int access_revoke_broadcast(struct gateway *gw, const struct revoke_what *w,
    access_revoke_done_fn *done, void (*drop)(void *arg), void *arg);

/*
 * The cluster checks (docs/0022), with their store reads on the store
 * thread (its own connection), so that a slow database never holds the
 * loop.  Something done in one cluster (dial, forward, /k8s): an admin
 * token reaches every cluster, a user token only the clusters it is
 * scoped to; then the cluster must exist (404, said only to a token that
 * may reach it, so an unknown cluster and one out of scope look the same
 * to a user token: 403) and, if node is non-empty, name a registered,
 * unrevoked agent of it (404).  cluster is taken as given: a name too
 * long for an id is simply unknown.
 *
 * done(arg, status, g, err) is called exactly once, on the loop, unless
 * the check is cancelled first: with status 0 and the grant, or
 * 401/403/404/500/503 and a reason.  It is called inside the starting
 * call when no store read is needed: a token proven for the cluster
 * within ACCESS_CACHE_TTL_MS (and no node named), a malformed token, an
 * id the store did not know within ACCESS_ID_TTL_MS, or 503 when
 * ACCESS_CHECKS_MAX checks are out or the store thread's queue is full;
 * then the call returns NULL.  Otherwise it returns the check, which the
 * caller may cancel (access_cancel: done is not called; the store read
 * still completes, and what it proved is still cached).  g and err are
 * valid during done only.  Loop only.
 */
struct access_check;
typedef void access_done_fn(void *arg, int status,
    const struct access_grant *g, const char *err);

/* A cluster check.  cluster NULL (the Kubernetes API's root paths,
 * /version, /api..., which name none): the cluster a user token is scoped
 * to alone, found by the token's id (the secret is then checked as for a
 * named cluster); else 404, with g->cluster "". */
struct access_check *access_cluster_async(struct gateway *gw,
    const char *authorization, const char *cluster, const char *node,
    access_done_fn *done, void *arg);
/* For a connection that outlives its request (tetherctl forward): whether
 * g's token, by id, still reaches g's cluster (not revoked or expired
 * since, still scoped): 0, or 401/403/500 with a reason.  A pair proven
 * within the TTL answers at once. */
struct access_check *access_recheck_async(struct gateway *gw,
    const struct access_grant *g, access_done_fn *done, void *arg);
/* done will not be called.  NULL is allowed. */
void access_cancel(struct access_check *c);

/*
 * A connection's memo of its last granted cluster check: a keep-alive
 * client sends the same bearer token on every request, and checking it
 * again (parse, SHA-256, the cache's lookup, an allocation) was most of a
 * /k8s request's start.  The memo holds a copy of the Authorization bytes
 * (a secret: access_memo_clear wipes it) and the grant; a later request
 * whose bytes are equal (compared in constant time) for the same cluster
 * takes the grant without a check for as long as the loop's cache would
 * have answered it (the pair's ACCESS_CACHE_TTL_MS, never longer), unless
 * a revocation came since (access_revoked: the generation) or the token
 * expired.  Anything else (other bytes, another cluster, a later time)
 * is checked afresh.  Owned by whoever embeds it; zero-initialized: empty.
 */
#define ACCESS_MEMO_AUTH_MAX 127

struct access_memo {
	char authorization[ACCESS_MEMO_AUTH_MAX + 1];
	size_t len;                        /* 0: empty */
	int root;                          /* asked with cluster NULL */
	char asked[STORE_ID_MAX + 1];      /* the cluster asked for */
	struct access_grant g;             /* g.reuse_until_ms 0: no grant yet */
};

/* Starts m for a check of authorization for cluster (NULL: a root path's,
 * as access_cluster_async): the bytes kept, no grant yet.  Longer than
 * ACCESS_MEMO_AUTH_MAX or NULL: m stays empty (never taken).  O(bytes). */
void access_memo_begin(struct access_memo *m, const char *authorization,
    const char *cluster);
/* The check m was begun for granted g: kept when g says it may be
 * reused (g->reuse_until_ms), else m is emptied. */
void access_memo_grant(struct access_memo *m, const struct access_grant *g);
/* 1 and *g when m holds a grant for exactly these authorization bytes
 * and cluster (NULL: a root path) that still holds (see above), else 0.
 * Loop only.  Cost: a constant-time compare, an atomic load, two clock
 * reads. */
int access_memo_take(struct gateway *gw, const struct access_memo *m,
    const char *authorization, const char *cluster, struct access_grant *g);
/* Wipes m (the token's bytes) and leaves it empty. */
void access_memo_clear(struct access_memo *m);

#endif
