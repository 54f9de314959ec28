/*
 * test_access.c: access.c's asynchronous checks (docs/0022) on a real
 * SQLite store and the real store thread: a first check of a token reads
 * the store on the thread and answers later; the same (token, cluster)
 * again answers at once from the cache; refusals keep their statuses
 * (401, 403, 404); a revocation while a check is out keeps its result out
 * of the cache; a cancelled check never calls back; a user token's sole
 * cluster; the recheck of a grant; an id the store does not know is
 * refused inside the call the second time (no store read), and a user
 * token's one cluster is remembered for root paths.  With two loops
 * (docs/0040 step 6): a check on loop 1 is answered on loop 1 and fills
 * loop 1's cache, not loop 0's; a revocation on loop 0 empties loop 1's.
 * A connection's memo of its last grant (access_memo) is taken again only
 * for the same bytes and cluster, within the pair's time, before any
 * revocation or expiry.  Where a connection lands (access_land_loop):
 * with --landing any by weight (each loop's connections 2 parts, the
 * tunnel sides it runs 1 part), with route on the agent's loop.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <event2/event.h>

#include "access.h"
#include "agentdir.h"
#include "gateway.h"
#include "loop.h"
#include "store.h"
#include "store_worker.h"
#include "token.h"

struct fixture {
	char dir[64];
	struct gateway gw;
	struct store *st;            /* the test's own connection */
	char cluster[STORE_ID_MAX + 1], other[STORE_ID_MAX + 1];
	char admin[TOKEN_STR_MAX + 8], alice[TOKEN_STR_MAX + 8];
};

/* What a done callback saw. */
struct seen {
	int calls;
	int status;
	struct access_grant g;
	char err[256];
};

static void
on_done(void *arg, int status, const struct access_grant *g, const char *err)
{
	struct seen *s = arg;

	s->calls++;
	s->status = status;
	s->g = *g;
	snprintf(s->err, sizeof(s->err), "%s", err);
}

/* "Bearer <a new token of kind>" into out; its record is inserted (admin)
 * or issued to name for cluster (user). */
static void
make_token(struct fixture *f, enum token_kind kind, const char *name,
    const char *cluster, char *out, size_t outlen)
{
	struct store_token rec = { 0 };
	struct store_user_token u;
	struct token t;
	char str[TOKEN_STR_MAX], err[STORE_ERROR_MAX + 1];
	const char *ids[1] = { cluster };

	assert_int_equal(token_generate(kind, &t), 0);
	snprintf(rec.id, sizeof(rec.id), "%s", t.id);
	rec.kind = kind;
	snprintf(rec.name, sizeof(rec.name), "%s", name);
	token_hash(&t, rec.verifier);
	rec.uses_left = -1;
	rec.created_at = gateway_now();
	if (kind == TOKEN_ADMIN)
		assert_int_equal(store_token_insert(f->st, &rec, err, sizeof(err)),
		    STORE_OK);
	else
		assert_int_equal(store_user_token_create(f->st, &rec, ids, 1, &u,
		    err, sizeof(err)), STORE_OK);
	token_format(&t, str);
	snprintf(out, outlen, "Bearer %s", str);
	token_clear(&t);
}

static int
setup(void **state)
{
	struct fixture *f = calloc(1, sizeof(*f));
	struct store_cluster c;
	char url[160], err[STORE_ERROR_MAX + 1];

	snprintf(f->dir, sizeof(f->dir), "/tmp/tether-access-XXXXXX");
	if (mkdtemp(f->dir) == NULL)
		return -1;
	snprintf(url, sizeof(url), "sqlite://%s/tether.db", f->dir);
	if (store_open(url, &f->st, err, sizeof(err)) != STORE_OK)
		return -1;
	f->gw.base = event_base_new();
	if ((f->gw.access_cache = access_cache_new()) == NULL)
		return -1;
	if (store_worker_start(f->gw.base, url, 16, NULL, NULL, &f->gw.storew, err,
	    sizeof(err)) != 0)
		return -1;
	if (store_cluster_create(f->st, "one", gateway_now(), &c, err,
	    sizeof(err)) != STORE_OK)
		return -1;
	snprintf(f->cluster, sizeof(f->cluster), "%s", c.id);
	if (store_cluster_create(f->st, "two", gateway_now(), &c, err,
	    sizeof(err)) != STORE_OK)
		return -1;
	snprintf(f->other, sizeof(f->other), "%s", c.id);
	make_token(f, TOKEN_ADMIN, "root", "", f->admin, sizeof(f->admin));
	make_token(f, TOKEN_USER, "alice", f->cluster, f->alice, sizeof(f->alice));
	*state = f;
	return 0;
}

static int
teardown(void **state)
{
	struct fixture *f = *state;
	char p[256];

	if (f->gw.loops != NULL) {   /* test_cache_per_loop's, on any exit */
		loops_stop(f->gw.loops, f->gw.nloops);
		access_loops_free(&f->gw);
		loops_free(f->gw.loops, f->gw.nloops);
	}
	store_worker_stop(f->gw.storew);
	access_cache_free(f->gw.access_cache);
	event_base_free(f->gw.base);
	store_close(f->st);
	snprintf(p, sizeof(p), "rm -rf %s", f->dir);
	free(f);
	return system(p) == 0 ? 0 : -1;
}

/* Runs the loop until s has been called back. */
static void
wait_done(struct fixture *f, struct seen *s)
{
	while (s->calls == 0)
		assert_int_equal(event_base_loop(f->gw.base, EVLOOP_ONCE), 0);
}

static void
test_store_then_cache(void **state)
{
	struct fixture *f = *state;
	struct seen a = { 0 }, b = { 0 };

	/* First: the store thread reads; done comes from the loop later. */
	assert_non_null(access_cluster_async(&f->gw, f->alice, f->cluster, NULL,
	    on_done, &a));
	assert_int_equal(a.calls, 0);
	wait_done(f, &a);
	assert_int_equal(a.status, 0);
	assert_string_equal(a.g.principal, "user:alice");
	assert_string_equal(a.g.cluster, f->cluster);
	/* Again: from the cache, inside the call. */
	assert_null(access_cluster_async(&f->gw, f->alice, f->cluster, NULL,
	    on_done, &b));
	assert_int_equal(b.calls, 1);
	assert_int_equal(b.status, 0);
	assert_string_equal(b.g.principal, "user:alice");
}

/*
 * access_memo: a grant taken again only for the very bytes and cluster it
 * was proven for, within the pair's time in the cache, and never after a
 * revocation or the token's expiry.
 */
static void
test_memo(void **state)
{
	struct fixture *f = *state;
	struct access_memo m = { 0 }, node = { 0 };
	struct access_grant g;
	struct seen a = { 0 }, b = { 0 }, n = { 0 };
	char forged[sizeof(f->alice)];
	size_t len = strlen(f->alice);

	/* Empty, and a check that is not reusable: nothing taken. */
	assert_int_equal(access_memo_take(&f->gw, &m, f->alice, f->cluster, &g), 0);
	access_memo_begin(&node, f->admin, f->cluster);
	access_cluster_async(&f->gw, f->admin, f->cluster, "ghost", on_done, &n);
	wait_done(f, &n);
	access_memo_grant(&node, &n.g);
	assert_int_equal(access_memo_take(&f->gw, &node, f->admin, f->cluster, &g), 0);

	/* Proven through the store: taken for the same bytes and cluster. */
	access_memo_begin(&m, f->alice, f->cluster);
	assert_non_null(access_cluster_async(&f->gw, f->alice, f->cluster, NULL,
	    on_done, &a));
	wait_done(f, &a);
	assert_int_equal(a.status, 0);
	assert_true(a.g.reuse_until_ms > 0);
	access_memo_grant(&m, &a.g);
	memset(&g, 0, sizeof(g));
	assert_int_equal(access_memo_take(&f->gw, &m, f->alice, f->cluster, &g), 1);
	assert_string_equal(g.principal, "user:alice");
	assert_string_equal(g.cluster, f->cluster);
	/* Another cluster, a root path, another token, the same id with
	 * another secret, a prefix: not taken. */
	assert_int_equal(access_memo_take(&f->gw, &m, f->alice, f->other, &g), 0);
	assert_int_equal(access_memo_take(&f->gw, &m, f->alice, NULL, &g), 0);
	assert_int_equal(access_memo_take(&f->gw, &m, f->admin, f->cluster, &g), 0);
	memcpy(forged, f->alice, len + 1);
	forged[len - 1] = forged[len - 1] == 'A' ? 'B' : 'A';
	assert_int_equal(access_memo_take(&f->gw, &m, forged, f->cluster, &g), 0);
	forged[len - 1] = '\0';
	assert_int_equal(access_memo_take(&f->gw, &m, forged, f->cluster, &g), 0);
	assert_int_equal(access_memo_take(&f->gw, &m, NULL, f->cluster, &g), 0);

	/* Proven from the cache: reusable too, until the same end. */
	assert_null(access_cluster_async(&f->gw, f->alice, f->cluster, NULL,
	    on_done, &b));
	assert_int_equal(b.status, 0);
	assert_int_equal(b.g.reuse_until_ms, a.g.reuse_until_ms);

	/* An expired token, the pair's time over: not taken. */
	m.g.expires_at = gateway_now() - 1;
	assert_int_equal(access_memo_take(&f->gw, &m, f->alice, f->cluster, &g), 0);
	m.g.expires_at = 0;
	m.g.reuse_until_ms = 1;
	assert_int_equal(access_memo_take(&f->gw, &m, f->alice, f->cluster, &g), 0);
	m.g.reuse_until_ms = a.g.reuse_until_ms;
	assert_int_equal(access_memo_take(&f->gw, &m, f->alice, f->cluster, &g), 1);

	/* A revocation: never again. */
	access_revoked(&f->gw);
	assert_int_equal(access_memo_take(&f->gw, &m, f->alice, f->cluster, &g), 0);
	access_memo_clear(&m);
	assert_int_equal(m.authorization[0], 0);
	access_memo_clear(&node);
}

static void
test_refusals(void **state)
{
	struct fixture *f = *state;
	struct seen bad = { 0 }, scope = { 0 }, none = { 0 }, node = { 0 };

	/* A malformed token needs no store: at once. */
	assert_null(access_cluster_async(&f->gw, "Bearer nope", f->cluster, NULL,
	    on_done, &bad));
	assert_int_equal(bad.status, 401);
	access_cluster_async(&f->gw, f->alice, f->other, NULL, on_done, &scope);
	wait_done(f, &scope);
	assert_int_equal(scope.status, 403);
	access_cluster_async(&f->gw, f->admin, "c-000000000000", NULL, on_done, &none);
	wait_done(f, &none);
	assert_int_equal(none.status, 404);
	assert_non_null(strstr(none.err, "no cluster"));
	access_cluster_async(&f->gw, f->admin, f->cluster, "ghost", on_done, &node);
	wait_done(f, &node);
	assert_int_equal(node.status, 404);
	assert_non_null(strstr(node.err, "no node ghost"));
}

static void
test_revoked_while_out(void **state)
{
	struct fixture *f = *state;
	struct seen a = { 0 }, b = { 0 };

	assert_non_null(access_cluster_async(&f->gw, f->admin, f->cluster, NULL,
	    on_done, &a));
	access_revoked(&f->gw);        /* a revocation lands while the check is out */
	wait_done(f, &a);
	assert_int_equal(a.status, 0);
	/* What it read is not cached: the next check reads the store again. */
	assert_non_null(access_cluster_async(&f->gw, f->admin, f->cluster, NULL,
	    on_done, &b));
	wait_done(f, &b);
}

static void
test_cancel(void **state)
{
	struct fixture *f = *state;
	struct seen a = { 0 }, b = { 0 };
	struct access_check *c;

	c = access_cluster_async(&f->gw, f->admin, f->cluster, NULL, on_done, &a);
	assert_non_null(c);
	access_cancel(c);
	/* b is queued after a: once it is answered, a's job has run too. */
	access_cluster_async(&f->gw, f->admin, f->other, NULL, on_done, &b);
	wait_done(f, &b);
	assert_int_equal(a.calls, 0);
	/* The cancelled check still proved the pair: cached. */
	assert_null(access_cluster_async(&f->gw, f->admin, f->cluster, NULL,
	    on_done, &a));
	assert_int_equal(a.calls, 1);
}

static void
test_sole_cluster(void **state)
{
	struct fixture *f = *state;
	struct seen a = { 0 }, b = { 0 };

	access_cluster_async(&f->gw, f->alice, NULL, NULL, on_done, &a);
	wait_done(f, &a);
	assert_int_equal(a.status, 0);
	assert_string_equal(a.g.cluster, f->cluster);
	access_cluster_async(&f->gw, f->admin, NULL, NULL, on_done, &b);
	wait_done(f, &b);
	assert_int_equal(b.status, 404);
	assert_string_equal(b.g.cluster, "");
}

/* A well-formed user token the store has never seen: "Bearer ..." */
static void
made_up(char *out, size_t outlen)
{
	struct token t;
	char str[TOKEN_STR_MAX];

	assert_int_equal(token_generate(TOKEN_USER, &t), 0);
	token_format(&t, str);
	snprintf(out, outlen, "Bearer %s", str);
	token_clear(&t);
}

static void
test_unknown_id_remembered(void **state)
{
	struct fixture *f = *state;
	struct seen a = { 0 }, b = { 0 }, c = { 0 }, d = { 0 };
	char tok[TOKEN_STR_MAX + 8];

	made_up(tok, sizeof(tok));
	/* First: the store thread says it does not know the id. */
	assert_non_null(access_cluster_async(&f->gw, tok, f->cluster, NULL,
	    on_done, &a));
	wait_done(f, &a);
	assert_int_equal(a.status, 401);
	/* Again, for any cluster: refused inside the call, no store read. */
	assert_null(access_cluster_async(&f->gw, tok, f->other, NULL, on_done, &b));
	assert_int_equal(b.calls, 1);
	assert_int_equal(b.status, 401);
	assert_string_equal(b.err, a.err);
	/* A root path (no cluster): the same, 404 as for any token that is not
	 * one cluster's. */
	made_up(tok, sizeof(tok));
	assert_non_null(access_cluster_async(&f->gw, tok, NULL, NULL, on_done, &c));
	wait_done(f, &c);
	assert_int_equal(c.status, 404);
	assert_null(access_cluster_async(&f->gw, tok, NULL, NULL, on_done, &d));
	assert_int_equal(d.calls, 1);
	assert_int_equal(d.status, 404);
	/* A revocation forgets them (nothing else to forget them by). */
	access_revoked(&f->gw);
	memset(&d, 0, sizeof(d));
	assert_non_null(access_cluster_async(&f->gw, tok, NULL, NULL, on_done, &d));
	wait_done(f, &d);
	assert_int_equal(d.status, 404);
}

static void
test_sole_cluster_remembered(void **state)
{
	struct fixture *f = *state;
	struct seen a = { 0 }, b = { 0 };

	assert_non_null(access_cluster_async(&f->gw, f->alice, NULL, NULL,
	    on_done, &a));
	wait_done(f, &a);
	assert_int_equal(a.status, 0);
	/* The token's one cluster and the pair are remembered: no store read. */
	assert_null(access_cluster_async(&f->gw, f->alice, NULL, NULL, on_done, &b));
	assert_int_equal(b.calls, 1);
	assert_int_equal(b.status, 0);
	assert_string_equal(b.g.cluster, f->cluster);
	assert_string_equal(b.g.principal, "user:alice");
}

static void
test_recheck(void **state)
{
	struct fixture *f = *state;
	struct seen a = { 0 }, b = { 0 }, c = { 0 };
	char err[STORE_ERROR_MAX + 1];
	int64_t n;

	access_cluster_async(&f->gw, f->alice, f->cluster, NULL, on_done, &a);
	wait_done(f, &a);
	assert_int_equal(a.status, 0);
	/* Proven moments ago: at once. */
	assert_null(access_recheck_async(&f->gw, &a.g, on_done, &b));
	assert_int_equal(b.status, 0);
	/* Revoked since (as the admin API does: the store, then the cache). */
	assert_int_equal(store_user_revoke(f->st, "alice", &n, err, sizeof(err)),
	    STORE_OK);
	access_revoked(&f->gw);
	assert_non_null(access_recheck_async(&f->gw, &a.g, on_done, &c));
	wait_done(f, &c);
	assert_int_equal(c.status, 401);
	assert_non_null(strstr(c.err, "revoked"));
}

/* ---- two loops ---- */

/* One check run on loop 1 (step_run), reported to loop 0 once answered. */
struct step {
	struct fixture *f;
	struct loop *loops;
	const char *auth;
	int in_call;                 /* loop 1: inside access_cluster_async */
	int inside;                  /* it answered inside the call */
	struct seen seen;
	pthread_t answered_on;
	atomic_int reported;
};

static void
step_report(void *arg)
{
	struct step *st = arg;

	atomic_store(&st->reported, 1);
}

static void
step_done(void *arg, int status, const struct access_grant *g, const char *err)
{
	struct step *st = arg;

	on_done(&st->seen, status, g, err);
	st->answered_on = pthread_self();
	if (!st->in_call)
		assert_int_equal(loop_call(&st->loops[0], step_report, st, NULL), 0);
}

static void
step_run(void *arg)
{
	struct step *st = arg;

	st->seen.calls = 0;
	st->in_call = 1;
	(void)access_cluster_async(&st->f->gw, st->auth, st->f->cluster, NULL,
	    step_done, st);
	st->in_call = 0;
	st->inside = st->seen.calls == 1;
	if (st->inside)
		assert_int_equal(loop_call(&st->loops[0], step_report, st, NULL), 0);
}

/* Runs st's check on loop 1; loop 0 (this thread) runs until it answered. */
static void
on_loop1(struct fixture *f, struct step *st)
{
	atomic_store(&st->reported, 0);
	assert_int_equal(loop_call(&st->loops[1], step_run, st, NULL), 0);
	while (!atomic_load(&st->reported))
		assert_int_equal(event_base_loop(f->gw.base, EVLOOP_ONCE), 0);
	assert_int_equal(st->seen.calls, 1);
	assert_int_equal(st->seen.status, st->auth == st->f->admin ? 0 : 401);
}

static void
test_cache_per_loop(void **state)
{
	struct fixture *f = *state;
	struct seen a = { 0 }, b = { 0 }, c = { 0 };
	struct step st = { .f = f, .auth = f->admin };
	char err[128], tok[TOKEN_STR_MAX + 8];

	st.loops = loops_new(f->gw.base, 2, &f->gw, err, sizeof(err));
	assert_non_null(st.loops);
	f->gw.loops = st.loops;
	f->gw.nloops = 2;
	/* Loop 1's first check reads the store; its answer comes on loop 1;
	 * its second is answered from loop 1's cache, inside the call. */
	on_loop1(f, &st);
	assert_false(st.inside);
	assert_true(pthread_equal(st.answered_on, st.loops[1].thread));
	on_loop1(f, &st);
	assert_true(st.inside);
	assert_non_null(st.loops[1].access_cache);
	/* Loop 0's cache did not see it: the store again, then cached. */
	assert_non_null(access_cluster_async(&f->gw, f->admin, f->cluster, NULL,
	    on_done, &a));
	assert_int_equal(a.calls, 0);
	wait_done(f, &a);
	assert_int_equal(a.status, 0);
	assert_null(access_cluster_async(&f->gw, f->admin, f->cluster, NULL,
	    on_done, &b));
	assert_int_equal(b.calls, 1);
	/* A revocation on loop 0: loop 1 forgets what it proved too. */
	access_revoked(&f->gw);
	on_loop1(f, &st);
	assert_false(st.inside);
	on_loop1(f, &st);
	assert_true(st.inside);
	/* An id the store does not know, found on loop 1: every loop's
	 * cache remembers it (loop 0 ran the news before loop 1's report):
	 * refused on loop 0 inside the call, with no store read. */
	made_up(tok, sizeof(tok));
	st.auth = tok;
	on_loop1(f, &st);
	assert_false(st.inside);
	assert_null(access_cluster_async(&f->gw, tok, f->cluster, NULL, on_done, &c));
	assert_int_equal(c.calls, 1);
	assert_int_equal(c.status, 401);
}

/* ---- where a connection lands (access_land_loop) ---- */

/* A gateway of n loops (no threads: the landing reads only the loops'
 * counts and the agent directory) with agents added by the caller. */
static struct gateway *
land_gw(unsigned n, int route)
{
	struct gateway *gw = calloc(1, sizeof(*gw));

	assert_non_null(gw);
	gw->loops = calloc(n, sizeof(*gw->loops));
	assert_non_null(gw->loops);
	gw->nloops = n;
	gw->agents = agentdir_new();
	assert_non_null(gw->agents);
	gw->landing_any = 1;
	gw->landing_route = route;
	for (unsigned i = 0; i < n; i++)
		gw->loops[i].index = i;
	return gw;
}

static void
land_gw_free(struct gateway *gw)
{
	agentdir_free(gw->agents);
	free(gw->loops);
	free(gw);
}

/* One landing from here as server.c counts it: the connection on the loop
 * it lands on, its tunnel side on the loop named.  Returns where. */
static unsigned
land_one(struct gateway *gw, const char *cluster, const char *node,
    unsigned here, unsigned want_tunnel)
{
	unsigned tunnel = 99;
	unsigned to = access_land_loop(gw, cluster, node, here, &tunnel);

	assert_true(to < gw->nloops);
	assert_int_equal(tunnel, want_tunnel);
	atomic_fetch_add(&gw->loops[to].nconns, 1);
	atomic_fetch_add(&gw->loops[tunnel].tunnel_side, 1);
	return to;
}

/* --landing any, one agent on loop 0 of two: connections one after
 * another (handshakes alternating) land where the loops stay most even,
 * 2 parts each on their loop, 1 part each on the agent's, a tie on the
 * agent's loop (nothing crosses) even from loop 1: 1 0 1 1 1 0 1 1 (loop 0
 * ends 2 x 2 + 8 = 12, loop 1 6 x 2 = 12); an unknown cluster, an agent
 * not active, or a landing without a tunnel to weigh stays. */
static void
test_land_weighed(void **state)
{
	struct gateway *gw = land_gw(2, 0);
	const unsigned want[8] = { 1, 0, 1, 1, 1, 0, 1, 1 };
	unsigned tunnel = 99;

	(void)state;
	assert_int_equal(access_land_loop(gw, "c", NULL, 1, &tunnel), 1);
	(void)agentdir_add(gw->agents, "a0", "c", "n0", false, 0, NULL);
	assert_int_equal(access_land_loop(gw, "c", NULL, 1, &tunnel), 1);
	assert_int_equal(tunnel, 99);
	(void)agentdir_add(gw->agents, "a0", "c", "n0", true, 0, NULL);
	for (unsigned i = 0; i < 8; i++)
		assert_int_equal(land_one(gw, "c", NULL, i % 2, 0), want[i]);
	assert_int_equal(atomic_load(&gw->loops[0].nconns), 2);
	assert_int_equal(atomic_load(&gw->loops[1].nconns), 6);
	/* Without a tunnel to weigh (tunnel NULL) it stays where its
	 * handshake ran (a dial lands by access_land_dial: test_land_dial). */
	assert_int_equal(access_land_loop(gw, "c", NULL, 0, NULL), 0);
	assert_int_equal(access_land_loop(gw, "c", NULL, 1, NULL), 1);
	/* Another cluster, unknown here: stays, nothing weighed. */
	assert_int_equal(access_land_loop(gw, "nope", NULL, 0, &tunnel), 0);
	assert_int_equal(tunnel, 99);
	/* Connections of other work on loop 1 move the balance: 6 more there
	 * (loop 1 at 24 + 2 against loop 0's 12 + 3): the next lands on 0. */
	atomic_fetch_add(&gw->loops[1].nconns, 6);
	assert_int_equal(land_one(gw, "c", NULL, 1, 0), 0);
	land_gw_free(gw);
}

/* --landing any with agents on several loops: a loop holding one weighs
 * the tunnel side on itself (nothing crosses), one that holds none on the
 * least loaded loop that does; a node counts only its own agent's loop;
 * ties go to a loop where nothing crosses, then stay on the handshake
 * loop, then the lowest index.  --landing route: on the agent's loop,
 * nothing weighed. */
static void
test_land_several(void **state)
{
	struct gateway *gw = land_gw(3, 0);
	unsigned tunnel = 99;

	(void)state;
	(void)agentdir_add(gw->agents, "a0", "c", "n0", true, 0, NULL);
	(void)agentdir_add(gw->agents, "a1", "c", "n1", true, 1, NULL);
	/* All idle: loops 0 and 1 cost 3, loop 2 costs 2 (its tunnel side on
	 * loop 0, the lower of two equal loads). */
	assert_int_equal(land_one(gw, "c", NULL, 0, 0), 2);
	/* Loads 1 0 2; from 0: loop 1 costs 3, 0 costs 4, 2 costs 4. */
	assert_int_equal(land_one(gw, "c", NULL, 0, 1), 1);
	/* 1 3 2, from 2: loop 0 costs 4, 2 costs 4, 1 costs 6: the tie goes
	 * to loop 0, where nothing crosses, not to here. */
	assert_int_equal(land_one(gw, "c", NULL, 2, 0), 0);
	/* 4 3 2: a node's agent on loop 1: loop 2 (4) against 1 (6) and 0
	 * (6); its tunnel side on loop 1. */
	assert_int_equal(land_one(gw, "c", "n1", 0, 1), 2);
	/* 4 4 4, from 1: loops 0 and 1 cost 7 and 2 costs 6: loop 2. */
	assert_int_equal(land_one(gw, "c", NULL, 1, 0), 2);
	/* 5 4 6, from 2: loop 1 costs 7, 0 costs 8, 2 costs 8: loop 1. */
	assert_int_equal(land_one(gw, "c", NULL, 2, 1), 1);
	/* 5 7 6, then 2 more on loop 0 (7 7 6): from 1, loops 0 and 1 cost 10
	 * and 2 costs 8: loop 2, its tunnel side on loop 0 (the lower of two
	 * equal loads); then 8 7 8, 1 more on loop 1 and 4 on loop 2 (8 8
	 * 12): from 1, loops 0 and 1 tie at 11, both without a crossing: it
	 * stays on 1; from 2, on loop 0, the lower index. */
	atomic_fetch_add(&gw->loops[0].tunnel_side, 2);
	assert_int_equal(land_one(gw, "c", NULL, 1, 0), 2);
	atomic_fetch_add(&gw->loops[1].tunnel_side, 1);
	atomic_fetch_add(&gw->loops[2].nconns, 2);
	tunnel = 99;
	assert_int_equal(access_land_loop(gw, "c", NULL, 1, &tunnel), 1);
	assert_int_equal(tunnel, 1);
	assert_int_equal(access_land_loop(gw, "c", NULL, 2, &tunnel), 0);
	assert_int_equal(tunnel, 0);
	land_gw_free(gw);

	gw = land_gw(2, 1);
	(void)agentdir_add(gw->agents, "a0", "c", "n0", true, 0, NULL);
	for (unsigned i = 0; i < 4; i++) {
		tunnel = 99;
		assert_int_equal(access_land_loop(gw, "c", NULL, i % 2, &tunnel), 0);
		assert_int_equal(tunnel, 99);
	}
	land_gw_free(gw);
}

/* One dial's landing from here as server.c counts it (access_land_dial):
 * the connection on the loop it lands on, its tunnel side on the loop
 * named.  Returns where. */
static unsigned
dial_one(struct gateway *gw, const char *cluster, unsigned here,
    unsigned want_tunnel)
{
	unsigned tunnel = 99;
	unsigned to = access_land_dial(gw, cluster, NULL, here, &tunnel);

	assert_true(to < gw->nloops);
	assert_int_equal(tunnel, want_tunnel);
	atomic_fetch_add(&gw->loops[to].nconns, 1);
	atomic_fetch_add(&gw->loops[tunnel].tunnel_side, 1);
	return to;
}

/* --landing any, dials to one agent on loop 1 of two, handshakes
 * alternating from loop 0 (every dial held, so counted): each lands on
 * the agent's loop (3 parts there: its client side and its tunnel side)
 * until that loop's load is above loop 0's by more than max(4, a
 * quarter of loop 0's); then one from loop 0 stays there (2 parts there,
 * its tunnel side 1 on loop 1).  One from loop 1 always stays on loop 1
 * (the agent is there): 12 dials land 1 1 0 1 0 1 0 1 0 1 0 1 (loop 1 7,
 * loop 0 5, every tunnel side on loop 1).  A lone dial to an idle
 * gateway lands on the agent's loop even from loop 0 (a /k8s connection
 * would land off it: test_land_weighed).  Unknown cluster: stays,
 * nothing weighed; --landing route: the agent's loop, nothing weighed. */
static void
test_land_dial(void **state)
{
	struct gateway *gw = land_gw(2, 0);
	const unsigned want[12] = { 1, 1, 0, 1, 0, 1, 0, 1, 0, 1, 0, 1 };
	unsigned tunnel = 99;

	(void)state;
	assert_int_equal(access_land_dial(gw, "c", NULL, 0, &tunnel), 0);
	assert_int_equal(tunnel, 99);
	(void)agentdir_add(gw->agents, "a1", "c", "n1", true, 1, NULL);
	for (unsigned i = 0; i < 12; i++)
		assert_int_equal(dial_one(gw, "c", i % 2, 1), want[i]);
	assert_int_equal(atomic_load(&gw->loops[1].nconns), 7);
	assert_int_equal(atomic_load(&gw->loops[0].nconns), 5);
	assert_int_equal(atomic_load(&gw->loops[1].tunnel_side), 12);
	/* The dials end (their owners give the places back): the next one
	 * from loop 0 lands on the agent's loop again. */
	for (unsigned i = 0; i < 12; i++)
		loop_counts_put(&gw->loops[want[i]], &gw->loops[1]);
	assert_int_equal(atomic_load(&gw->loops[0].nconns), 0);
	assert_int_equal(atomic_load(&gw->loops[1].tunnel_side), 0);
	assert_int_equal(dial_one(gw, "c", 0, 1), 1);
	tunnel = 99;
	assert_int_equal(access_land_dial(gw, "nope", NULL, 0, &tunnel), 0);
	assert_int_equal(tunnel, 99);
	land_gw_free(gw);

	gw = land_gw(2, 1);
	(void)agentdir_add(gw->agents, "a1", "c", "n1", true, 1, NULL);
	tunnel = 99;
	assert_int_equal(access_land_dial(gw, "c", NULL, 0, &tunnel), 1);
	assert_int_equal(tunnel, 99);
	land_gw_free(gw);
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_store_then_cache, setup, teardown),
		cmocka_unit_test_setup_teardown(test_cache_per_loop, setup, teardown),
		cmocka_unit_test_setup_teardown(test_memo, setup, teardown),
		cmocka_unit_test_setup_teardown(test_refusals, setup, teardown),
		cmocka_unit_test_setup_teardown(test_revoked_while_out, setup, teardown),
		cmocka_unit_test_setup_teardown(test_cancel, setup, teardown),
		cmocka_unit_test_setup_teardown(test_sole_cluster, setup, teardown),
		cmocka_unit_test_setup_teardown(test_recheck, setup, teardown),
		cmocka_unit_test_setup_teardown(test_unknown_id_remembered, setup,
		    teardown),
		cmocka_unit_test_setup_teardown(test_sole_cluster_remembered, setup,
		    teardown),
		cmocka_unit_test(test_land_weighed),
		cmocka_unit_test(test_land_several),
		cmocka_unit_test(test_land_dial),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
