/*
 * test_gateways.c: two gateways in one process share nothing of what they
 * change while they run (gateway.h): each has its own cache of proven
 * tokens (a pair proven by one is not taken on trust by the other, and a
 * revocation clears only the gateway told), its own list of live streams
 * and its own count of requests waiting for the store thread.  Both run
 * on one real SQLite store, each with its own store thread.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <event2/event.h>

#include "access.h"
#include "answer_later.h"
#include "gateway.h"
#include "livestreams.h"
#include "route.h"
#include "store.h"
#include "store_worker.h"
#include "token.h"

struct fixture {
	char dir[64];
	struct gateway a, b;
	struct store *st;            /* the test's own connection */
	char cluster[STORE_ID_MAX + 1];
	char admin[TOKEN_STR_MAX + 8];
};

/* What a done callback saw. */
struct seen {
	int calls;
	int status;
};

static void
on_done(void *arg, int status, const struct access_grant *g, const char *err)
{
	struct seen *s = arg;

	(void)g;
	(void)err;
	s->calls++;
	s->status = status;
}

/* "Bearer <a new admin token>" into out, its record inserted. */
static void
make_admin(struct fixture *f, char *out, size_t outlen)
{
	struct store_token rec = { 0 };
	struct token t;
	char str[TOKEN_STR_MAX], err[STORE_ERROR_MAX + 1];

	assert_int_equal(token_generate(TOKEN_ADMIN, &t), 0);
	snprintf(rec.id, sizeof(rec.id), "%s", t.id);
	rec.kind = TOKEN_ADMIN;
	snprintf(rec.name, sizeof(rec.name), "root");
	token_hash(&t, rec.verifier);
	rec.uses_left = -1;
	rec.created_at = gateway_now();
	assert_int_equal(store_token_insert(f->st, &rec, err, sizeof(err)),
	    STORE_OK);
	token_format(&t, str);
	snprintf(out, outlen, "Bearer %s", str);
	token_clear(&t);
}

/* A gateway as main.c makes the parts these tests reach. */
static int
gateway_up(struct gateway *gw, const char *url)
{
	char err[STORE_ERROR_MAX + 1];

	gw->base = event_base_new();
	gw->access_cache = access_cache_new();
	if (gw->base == NULL || gw->access_cache == NULL)
		return -1;
	return store_worker_start(gw->base, url, 16, NULL, NULL, &gw->storew,
	    err, sizeof(err));
}

static void
gateway_down(struct gateway *gw)
{
	store_worker_stop(gw->storew);
	access_cache_free(gw->access_cache);
	if (gw->base != NULL)
		event_base_free(gw->base);
}

static int
setup(void **state)
{
	struct fixture *f = calloc(1, sizeof(*f));
	struct store_cluster c;
	char url[160], err[STORE_ERROR_MAX + 1];

	if (f == NULL)
		return -1;
	snprintf(f->dir, sizeof(f->dir), "/tmp/tether-gateways-XXXXXX");
	if (mkdtemp(f->dir) == NULL)
		return -1;
	snprintf(url, sizeof(url), "sqlite://%s/tether.db", f->dir);
	if (store_open(url, &f->st, err, sizeof(err)) != STORE_OK ||
	    gateway_up(&f->a, url) != 0 || gateway_up(&f->b, url) != 0)
		return -1;
	if (store_cluster_create(f->st, "one", gateway_now(), &c, err,
	    sizeof(err)) != STORE_OK)
		return -1;
	snprintf(f->cluster, sizeof(f->cluster), "%s", c.id);
	make_admin(f, f->admin, sizeof(f->admin));
	*state = f;
	return 0;
}

static int
teardown(void **state)
{
	struct fixture *f = *state;
	char p[256];

	gateway_down(&f->a);
	gateway_down(&f->b);
	store_close(f->st);
	snprintf(p, sizeof(p), "rm -rf %s", f->dir);
	free(f);
	return system(p) == 0 ? 0 : -1;
}

/* Runs gw's loop until s has been called back. */
static void
wait_done(struct gateway *gw, struct seen *s)
{
	while (s->calls == 0)
		assert_int_equal(event_base_loop(gw->base, EVLOOP_ONCE), 0);
}

/* Whether gw answers the admin's check for the cluster from its cache
 * (inside the call) rather than from its store thread. */
static int
answered_from_cache(struct fixture *f, struct gateway *gw)
{
	struct seen s = { 0 };
	struct access_check *c;

	c = access_cluster_async(gw, f->admin, f->cluster, NULL, on_done, &s);
	if (c == NULL) {
		assert_int_equal(s.calls, 1);
		assert_int_equal(s.status, 0);
		return 1;
	}
	wait_done(gw, &s);
	assert_int_equal(s.status, 0);
	return 0;
}

static void
test_token_caches_apart(void **state)
{
	struct fixture *f = *state;

	/* a proves the pair through its store thread, then trusts it. */
	assert_false(answered_from_cache(f, &f->a));
	assert_true(answered_from_cache(f, &f->a));
	/* b was told nothing of it: it reads the store itself. */
	assert_false(answered_from_cache(f, &f->b));
	assert_true(answered_from_cache(f, &f->b));
	/* A revocation b hears clears b's cache, not a's. */
	access_revoked(&f->b);
	assert_true(answered_from_cache(f, &f->a));
	assert_false(answered_from_cache(f, &f->b));
}

static void
count_one(const struct live_stream *ls, void *arg)
{
	(void)ls;
	(*(size_t *)arg)++;
}

static void
test_live_streams_apart(void **state)
{
	struct fixture *f = *state;
	struct live_stream s1 = { .kind = "connect" }, s2 = { .kind = "k8s" };
	size_t seen_a = 0, seen_b = 0;

	live_stream_add(&f->a.live_streams, &s1);
	live_stream_add(&f->a.live_streams, &s2);
	assert_int_equal(live_stream_count(&f->a.live_streams), 2);
	assert_int_equal(live_stream_count(&f->b.live_streams), 0);
	live_stream_foreach(&f->a.live_streams, count_one, &seen_a);
	live_stream_foreach(&f->b.live_streams, count_one, &seen_b);
	assert_int_equal(seen_a, 2);
	assert_int_equal(seen_b, 0);
	/* A stream leaves the list it is in. */
	live_stream_remove(&s1);
	live_stream_remove(&s1);
	assert_int_equal(live_stream_count(&f->a.live_streams), 1);
	live_stream_remove(&s2);
	assert_int_equal(live_stream_count(&f->a.live_streams), 0);
}

/* A revocation's end (livestreams.h): counts the calls, keeps the reason. */
static size_t ended_calls;
static char ended_reason[64];

static void
end_one(struct live_stream *ls, const char *reason)
{
	(void)ls;
	ended_calls++;
	snprintf(ended_reason, sizeof(ended_reason), "%s", reason);
}

static void
test_live_streams_end_matching(void **state)
{
	struct fixture *f = *state;
	struct live_stream t1 = { .kind = "connect", .principal = "user:alice",
	    .token_id = "aaaa", .agent_id = "a-1", .end = end_one };
	struct live_stream t2 = { .kind = "k8s", .principal = "user:alice",
	    .token_id = "bbbb", .agent_id = "a-2", .end = end_one };
	/* The far side of a peer link: no token known. */
	struct live_stream far = { .kind = "forward", .principal = "user:alice",
	    .token_id = "", .agent_id = "a-1", .end = end_one };
	struct live_stream mute = { .kind = "connect", .token_id = "aaaa" };
	struct live_stream other = { .kind = "connect", .principal = "user:alice",
	    .token_id = "aaaa", .agent_id = "a-1", .end = end_one };

	live_stream_add(&f->a.live_streams, &t1);
	live_stream_add(&f->a.live_streams, &t2);
	live_stream_add(&f->a.live_streams, &far);
	live_stream_add(&f->a.live_streams, &mute);
	live_stream_add(&f->b.live_streams, &other);
	ended_calls = 0;
	/* Nothing matches an empty id, not even the far side's empty token. */
	assert_int_equal(live_stream_end_matching(&f->a.live_streams,
	    LIVE_BY_TOKEN, "", "x"), 0);
	/* One token: its stream of this gateway only; one without an end is
	 * skipped. */
	assert_int_equal(live_stream_end_matching(&f->a.live_streams,
	    LIVE_BY_TOKEN, "aaaa", "token aaaa revoked"), 1);
	assert_int_equal(ended_calls, 1);
	assert_string_equal(ended_reason, "token aaaa revoked");
	/* Told once: a second notice for the same stream calls nothing. */
	assert_int_equal(live_stream_end_matching(&f->a.live_streams,
	    LIVE_BY_TOKEN, "aaaa", "again"), 0);
	/* The user: the rest of hers, the far side included. */
	assert_int_equal(live_stream_end_matching(&f->a.live_streams,
	    LIVE_BY_PRINCIPAL, "user:alice", "user alice revoked"), 2);
	assert_int_equal(ended_calls, 3);
	/* The agent: all of its streams here are ending already. */
	assert_int_equal(live_stream_end_matching(&f->a.live_streams,
	    LIVE_BY_AGENT, "a-1", "agent a-1 revoked"), 0);
	/* The other gateway's stream was never touched; an agent ends it. */
	assert_false(other.ending);
	assert_int_equal(live_stream_end_matching(&f->b.live_streams,
	    LIVE_BY_AGENT, "a-1", "agent a-1 revoked"), 1);
	/* Ending leaves the list to the owner. */
	assert_int_equal(live_stream_count(&f->a.live_streams), 4);
	live_stream_remove(&t1);
	live_stream_remove(&t2);
	live_stream_remove(&far);
	live_stream_remove(&mute);
	live_stream_remove(&other);
}

static void
never(struct store *st, const char *authorization, void *arg)
{
	(void)st;
	(void)authorization;
	(void)arg;
	fail_msg("a refused request's store part ran");
}

static void
never_answer(struct gateway *gw, void *arg, struct route_response *r)
{
	(void)gw;
	(void)arg;
	(void)r;
	fail_msg("a refused request's answer part ran");
}

static void
count_free(void *arg)
{
	(*(int *)arg)++;
}

static void
test_answer_later_caps_apart(void **state)
{
	struct fixture *f = *state;
	struct route_request req = { .method = "GET", .path = "/v1/clusters",
	    .query = "", .authorization = "", .replica = "" };
	struct route_response r = { 0 };
	int freed = 0;

	/* a has as many requests out as it takes: it refuses the next one. */
	f->a.answers_later = ANSWER_LATER_MAX;
	answer_later(&f->a, &req, &r, never, never_answer, count_free, &freed);
	assert_int_equal(r.status, 503);
	assert_int_equal(freed, 1);
	free(r.body);
	/* b has none out. */
	assert_int_equal(answer_later_pending(&f->a), ANSWER_LATER_MAX);
	assert_int_equal(answer_later_pending(&f->b), 0);
	f->a.answers_later = 0;
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_token_caches_apart, setup, teardown),
		cmocka_unit_test_setup_teardown(test_live_streams_apart, setup, teardown),
		cmocka_unit_test_setup_teardown(test_live_streams_end_matching, setup,
		    teardown),
		cmocka_unit_test_setup_teardown(test_answer_later_caps_apart, setup,
		    teardown),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
