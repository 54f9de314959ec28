/*
 * test_reach.c: access_pick (gateway/access/access.c) and the struct reach
 * it fills (gateway/access/reach.c), with real sessions in the hub and the
 * presence directory read from a real SQLite store by the store thread: an
 * active agent whose tunnel is here is picked before any on another
 * replica; an agent only another live replica holds is picked with that
 * replica's id and peer URL; a replica whose lease ran out is not used;
 * refusals (503) say whether the agent is connected but not active or not
 * connected anywhere; the directory's agent-id index finds an agent held
 * elsewhere; and a thread reading the directory while loop 0 swaps tables
 * always finds it and never reads a freed table.  With two loops
 * (docs/0040): from loop 1 an agent on another replica is reached through
 * loop 0, which holds the peer links; from loop 0 directly.
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

#include <event2/event.h>

#include "access.h"
#include "budget.h"
#include "fake_tunnel.h"
#include "gateway.h"
#include "loop.h"
#include "looplink.h"
#include "peer_route.h"
#include "presence.h"
#include "reach.h"
#include "session.h"
#include "store.h"

#define FAR_URL "https://far.example:8443"

static int
setup(void **state)
{
	*state = ft_new(16);
	return 0;
}

static int
teardown(void **state)
{
	struct ft *f = *state;

	presence_stop(&f->gw);
	ft_free(f);
	return 0;
}

static struct access_grant
grant(struct ft *f, const char *node)
{
	struct access_grant g;

	memset(&g, 0, sizeof(g));
	snprintf(g.principal, sizeof(g.principal), "user:alice");
	snprintf(g.cluster, sizeof(g.cluster), "%s", f->cluster);
	snprintf(g.node, sizeof(g.node), "%s", node != NULL ? node : "");
	return g;
}

/* An active agent here, its tunnel up; *key freed by the caller. */
static struct ft_tun *
active_here(struct ft *f, const char *node, struct store_agent *a, EVP_PKEY **key)
{
	ft_make_agent(f, node, key, a);
	ft_make_active(f, a);
	return ft_agent_connect(f, a, *key);
}

/* An agent (active or not) whose tunnel replica holds; the replica's lease,
 * taken if no other runs, runs for lease_ms more (<= 0: has ended). */
static void
held_elsewhere(struct ft *f, const char *node, bool active, const char *replica,
    int64_t lease_ms, struct store_agent *a)
{
	char err[STORE_ERROR_MAX + 1];
	EVP_PKEY *key;
	int64_t mine = 0;
	int rc;

	ft_make_agent(f, node, &key, a);
	EVP_PKEY_free(key);
	if (active)
		ft_make_active(f, a);
	rc = store_replica_claim(f->st, replica, FAR_URL, lease_ms, &mine, NULL,
	    err, sizeof(err));
	assert_true(rc == STORE_OK || rc == STORE_REFUSED);   /* held already */
	assert_int_equal(store_tunnel_record(f->st, a->id, replica, gateway_now_ms(),
	    err, sizeof(err)), STORE_OK);
}

/* Starts presence and runs the loop until its first directory read is in:
 * the sentinel agent (active, on replica r-far) is seen. */
static void
read_directory(struct ft *f)
{
	struct store_remote_agent ra;
	char err[128];

	assert_int_equal(presence_start(&f->gw, err, sizeof(err)), 0);
	while (!presence_remote_pick(&f->gw, f->cluster, "sentinel", &ra, NULL))
		ft_loop_once(f);
}

static void
test_local(void **state)
{
	struct ft *f = *state;
	struct store_agent a1, a2;
	EVP_PKEY *k1, *k2;
	struct ft_tun *t1 = active_here(f, "node-1", &a1, &k1);
	struct ft_tun *t2 = active_here(f, "node-2", &a2, &k2);
	struct access_grant g = grant(f, "node-2");
	struct reach r;
	char err[256] = "";
	int seen1 = 0, seen2 = 0;

	assert_int_equal(access_pick(&f->gw, &g, &r, err, sizeof(err)), 0);
	assert_ptr_equal(r.local, t2->s);
	assert_string_equal(r.agent_id, a2.id);
	assert_string_equal(r.node, "node-2");
	assert_string_equal(r.replica, "r-here");
	assert_string_equal(r.peer_url, "");
	/* Any node: both take turns. */
	g = grant(f, NULL);
	for (int i = 0; i < 4; i++) {
		assert_int_equal(access_pick(&f->gw, &g, &r, err, sizeof(err)), 0);
		seen1 += r.local == t1->s;
		seen2 += r.local == t2->s;
		assert_string_equal(r.node, r.local == t1->s ? "node-1" : "node-2");
	}
	assert_int_equal(seen1, 2);
	assert_int_equal(seen2, 2);
	EVP_PKEY_free(k1);
	EVP_PKEY_free(k2);
}

static void
test_refusals(void **state)
{
	struct ft *f = *state;
	struct store_agent a;
	EVP_PKEY *k;
	struct ft_tun *t;
	struct access_grant g = grant(f, NULL);
	struct reach r;
	char err[256], want[256];

	/* Nobody connected. */
	assert_int_equal(access_pick(&f->gw, &g, &r, err, sizeof(err)), 503);
	snprintf(want, sizeof(want), "no agent of cluster %s is connected to any "
	    "replica", f->cluster);
	assert_string_equal(err, want);
	g = grant(f, "ghost");
	assert_int_equal(access_pick(&f->gw, &g, &r, err, sizeof(err)), 503);
	snprintf(want, sizeof(want), "node ghost of cluster %s is not connected to "
	    "any replica", f->cluster);
	assert_string_equal(err, want);
	/* Connected here, but enroll (its verification under way): not active. */
	ft_make_agent(f, "node-1", &k, &a);
	t = ft_agent_connect(f, &a, k);
	assert_false(session_is_active(t->s));
	g = grant(f, "node-1");
	assert_int_equal(access_pick(&f->gw, &g, &r, err, sizeof(err)), 503);
	snprintf(want, sizeof(want), "node node-1 of cluster %s is connected but not "
	    "active", f->cluster);
	assert_string_equal(err, want);
	g = grant(f, NULL);
	assert_int_equal(access_pick(&f->gw, &g, &r, err, sizeof(err)), 503);
	snprintf(want, sizeof(want), "no active agent of cluster %s is connected to "
	    "any replica", f->cluster);
	assert_string_equal(err, want);
	EVP_PKEY_free(k);
}

static void
test_remote(void **state)
{
	struct ft *f = *state;
	struct store_agent sentinel, far, idle, dead;
	struct store_remote_agent ra;
	struct access_grant g;
	struct reach r;
	char err[256], want[256];

	held_elsewhere(f, "sentinel", true, "r-far", 60000, &sentinel);
	held_elsewhere(f, "node-far", true, "r-far", 60000, &far);
	held_elsewhere(f, "node-idle", false, "r-far", 60000, &idle);
	held_elsewhere(f, "node-dead", true, "r-dead", -60000, &dead);
	read_directory(f);
	/* Only another replica holds it: picked there, with its URL. */
	g = grant(f, "node-far");
	assert_int_equal(access_pick(&f->gw, &g, &r, err, sizeof(err)), 0);
	assert_null(r.local);
	assert_string_equal(r.agent_id, far.id);
	assert_string_equal(r.node, "node-far");
	assert_string_equal(r.replica, "r-far");
	assert_string_equal(r.peer_url, FAR_URL);
	/* Held elsewhere, not active. */
	g = grant(f, "node-idle");
	assert_int_equal(access_pick(&f->gw, &g, &r, err, sizeof(err)), 503);
	snprintf(want, sizeof(want), "node node-idle of cluster %s is connected but "
	    "not active", f->cluster);
	assert_string_equal(err, want);
	/* Its replica's lease ran out: gone. */
	g = grant(f, "node-dead");
	assert_int_equal(access_pick(&f->gw, &g, &r, err, sizeof(err)), 503);
	assert_non_null(strstr(err, "not connected to any replica"));
	/* By agent id (the index beside the table): held elsewhere, active or
	 * not, with its replica; not the dead replica's, not an unknown id. */
	assert_int_equal(presence_remote_find(&f->gw, far.id, &ra), 1);
	assert_string_equal(ra.agent_id, far.id);
	assert_string_equal(ra.node, "node-far");
	assert_string_equal(ra.replica, "r-far");
	assert_string_equal(ra.peer_url, FAR_URL);
	assert_int_equal(presence_remote_find(&f->gw, idle.id, &ra), 1);
	assert_string_equal(ra.node, "node-idle");
	assert_int_equal(ra.state, AGENT_ENROLL);
	assert_int_equal(presence_remote_find(&f->gw, sentinel.id, NULL), 1);
	assert_int_equal(presence_remote_find(&f->gw, dead.id, NULL), 0);
	assert_int_equal(presence_remote_find(&f->gw, "no-such-agent", NULL), 0);
	/* Stopped: nothing is published any more. */
	presence_stop(&f->gw);
	assert_int_equal(presence_remote_find(&f->gw, far.id, NULL), 0);
	g = grant(f, "node-far");
	assert_int_equal(access_pick(&f->gw, &g, &r, err, sizeof(err)), 503);
}

/* What loop 1's pick gave (written there, read on loop 0 after done). */
static struct {
	struct ft *f;
	struct loop *loops;
	int status, loop;
	char replica[64], agent[STORE_ID_MAX + 1];
	atomic_int done;
} from1;

static void
pick_report(void *arg)
{
	(void)arg;
	atomic_store(&from1.done, 1);
}

static void
pick_on_1(void *arg)
{
	struct access_grant g = grant(from1.f, "node-far");
	struct reach r;
	char err[256];

	(void)arg;
	from1.status = access_pick(&from1.f->gw, &g, &r, err, sizeof(err));
	from1.loop = r.loop != NULL ? (int)r.loop->index : -1;
	snprintf(from1.replica, sizeof(from1.replica), "%s", r.replica);
	snprintf(from1.agent, sizeof(from1.agent), "%s", r.agent_id);
	assert_int_equal(loop_call(&from1.loops[0], pick_report, NULL, NULL), 0);
}

static void
close_links_here(void *arg)
{
	looplink_close(arg);
}

static void
test_remote_from_loop(void **state)
{
	static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
	struct ft *f = *state;
	struct gateway *gw = &f->gw;
	struct mux_config cfg = MUX_DEFAULT_CONFIG;
	struct store_agent sentinel, far;
	struct access_grant g;
	struct reach r;
	char err[256];

	held_elsewhere(f, "sentinel", true, "r-far", 60000, &sentinel);
	held_elsewhere(f, "node-far", true, "r-far", 60000, &far);
	read_directory(f);
	from1.f = f;
	from1.loops = loops_new(gw->base, 2, gw, err, sizeof(err));
	assert_non_null(from1.loops);
	gw->loops = from1.loops;
	gw->nloops = 2;
	gw->budget = (struct budget)BUDGET_DEFAULT;
	gw->budget.mu = &mu;
	cfg.budget = &gw->budget;
	gw->looplinks = looplinks_new(gw->loops, 2, &cfg, peer_route_loop_open, gw,
	    err, sizeof(err));
	assert_non_null(gw->looplinks);
	/* Loop 0 (this thread): the peer link, from here. */
	g = grant(f, "node-far");
	assert_int_equal(access_pick(gw, &g, &r, err, sizeof(err)), 0);
	assert_null(r.local);
	assert_null(r.loop);
	assert_string_equal(r.replica, "r-far");
	/* Loop 1: through loop 0, still naming the replica that holds it. */
	assert_int_equal(loop_call(&gw->loops[1], pick_on_1, NULL, NULL), 0);
	while (!atomic_load(&from1.done))
		assert_int_equal(event_base_loop(gw->base, EVLOOP_ONCE), 0);
	assert_int_equal(from1.status, 0);
	assert_int_equal(from1.loop, 0);
	assert_string_equal(from1.replica, "r-far");
	assert_string_equal(from1.agent, far.id);

	assert_int_equal(loop_call(&gw->loops[1], close_links_here, gw->looplinks,
	    NULL), 0);
	looplink_close(gw->looplinks);
	loops_stop(gw->loops, 2);
	looplinks_free(gw->looplinks);
	gw->looplinks = NULL;
	loops_free(gw->loops, 2);
	gw->loops = NULL;
	gw->nloops = 0;
	gw->budget.mu = NULL;
}

/* Here first: an agent here wins over agents elsewhere, every time. */
static void
test_here_first(void **state)
{
	struct ft *f = *state;
	struct store_agent sentinel, far, here;
	EVP_PKEY *k;
	struct ft_tun *t;
	struct access_grant g = grant(f, NULL);
	struct reach r;
	char err[256];

	held_elsewhere(f, "sentinel", true, "r-far", 60000, &sentinel);
	held_elsewhere(f, "node-far", true, "r-far", 60000, &far);
	read_directory(f);
	t = active_here(f, "node-here", &here, &k);
	for (int i = 0; i < 4; i++) {
		assert_int_equal(access_pick(&f->gw, &g, &r, err, sizeof(err)), 0);
		assert_ptr_equal(r.local, t->s);
		assert_string_equal(r.replica, "r-here");
	}
	/* Its tunnel gone, the others are reached through r-far. */
	ft_tun_gone(t);
	assert_int_equal(access_pick(&f->gw, &g, &r, err, sizeof(err)), 0);
	assert_null(r.local);
	assert_string_equal(r.replica, "r-far");
	EVP_PKEY_free(k);
}

/* reach_open_stream on a local agent is session_open_stream's answer. */
static void
test_open_local_inactive(void **state)
{
	struct ft *f = *state;
	struct store_agent a;
	EVP_PKEY *k;
	struct ft_tun *t;
	struct reach r;
	char err[256] = "";

	ft_make_agent(f, "node-1", &k, &a);
	t = ft_agent_connect(f, &a, k);
	reach_local(&r, &f->gw, t->s);
	assert_string_equal(r.agent_id, a.id);
	assert_string_equal(r.replica, "r-here");
	assert_null(reach_open_stream(&f->gw, &r, "user:alice", "127.0.0.1:22", NULL,
	    NULL, NULL, err, sizeof(err)));
	assert_non_null(strstr(err, "is not active"));
	EVP_PKEY_free(k);
}

/* Another loop's thread reads the directory by cluster and by id while
 * loop 0 swaps in 30 new tables: every read finds the agent, and no read
 * touches a table freed under it (ASan). */
struct dir_reader {
	struct gateway *gw;
	const char *cluster, *id;
	atomic_int stop;
	long reads, misses;
};

static void *
read_dir(void *arg)
{
	struct dir_reader *r = arg;
	struct store_remote_agent ra;

	while (!atomic_load(&r->stop) || r->reads < 100) {
		if (!presence_remote_pick(r->gw, r->cluster, "node-far", &ra, NULL) ||
		    strcmp(ra.agent_id, r->id) != 0 ||
		    !presence_remote_find(r->gw, r->id, &ra))
			r->misses++;
		r->reads++;
	}
	return NULL;
}

static void
test_readers_during_swaps(void **state)
{
	struct ft *f = *state;
	struct store_agent sentinel, far;
	struct dir_reader r = { .gw = &f->gw };
	pthread_t t;

	held_elsewhere(f, "sentinel", true, "r-far", 60000, &sentinel);
	held_elsewhere(f, "node-far", true, "r-far", 60000, &far);
	read_directory(f);
	r.cluster = f->cluster;
	r.id = far.id;
	assert_int_equal(pthread_create(&t, NULL, read_dir, &r), 0);
	for (int i = 0; i < 30; i++) {
		struct presence_table *was = f->gw.remote_agents;

		presence_refresh(&f->gw);
		while (f->gw.remote_agents == was)
			ft_loop_once(f);
	}
	atomic_store(&r.stop, 1);
	assert_int_equal(pthread_join(t, NULL), 0);
	assert_int_equal(r.misses, 0);
	assert_true(r.reads >= 100);
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_local, setup, teardown),
		cmocka_unit_test_setup_teardown(test_refusals, setup, teardown),
		cmocka_unit_test_setup_teardown(test_remote, setup, teardown),
		cmocka_unit_test_setup_teardown(test_remote_from_loop, setup, teardown),
		cmocka_unit_test_setup_teardown(test_here_first, setup, teardown),
		cmocka_unit_test_setup_teardown(test_open_local_inactive, setup, teardown),
		cmocka_unit_test_setup_teardown(test_readers_during_swaps, setup, teardown),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
