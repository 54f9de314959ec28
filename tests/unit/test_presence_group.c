/*
 * test_presence_group.c: a tunnel's presence record (presence_tunnel_up,
 * presence_tunnel_down, gateway/agents/presence.c) shares the group commit
 * of the store calls queued beside it on SQLite (docs/0039)
 * instead of committing, and syncing, alone between them.  The store
 * thread is held while a grouped call, the record and another grouped
 * call are queued; the second call, run in the same transaction, finds
 * the record not yet committed (another connection does not see it), and
 * it is committed by the time that call is answered.  The same for the
 * record's removal.  A closing tunnel (a drain closes them all) queues
 * one job for its record's removal and its last_seen stamp; a tunnel
 * coming up (a reconnect storm brings them all) one for its agent's
 * last_seen stamp and release and its record.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <semaphore.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fake_tunnel.h"
#include "gateway.h"
#include "presence.h"
#include "session.h"
#include "store.h"
#include "store_worker.h"

#define AGENT "a-000000000001"
#define DRAINED 4     /* tunnels a drain closes (FT_TUNS_MAX at most) */
#define CAME_UP 4     /* tunnels a storm brings up (FT_TUNS_MAX at most) */
#define RELEASE "9.8.7-storm"   /* their agents' release */

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

/* The store thread's own job: it waits at the gate, so that what the test
 * submits meanwhile is queued together behind it. */
struct hold {
	sem_t started;
	sem_t gate;
};

static void
hold_work(struct store *s, void *arg)
{
	struct hold *h = arg;

	(void)s;
	sem_post(&h->started);
	sem_wait(&h->gate);
}

static void
nothing_done(void *arg)
{
	(void)arg;
}

/* A grouped call that only looks: the tunnel records another connection
 * (peek) sees committed while its work runs, and when it is answered. */
struct look {
	struct store *peek;
	size_t in_work;
	size_t at_done;
	bool answered;
};

static size_t
committed_records(struct store *peek)
{
	struct store_presence *p = NULL;
	char err[STORE_ERROR_MAX + 1];
	size_t n = 0;

	assert_int_equal(store_presence_list(peek, &p, &n, err, sizeof(err)), STORE_OK);
	free(p);
	return n;
}

static void
look_work(struct store *s, void *arg)
{
	struct look *l = arg;

	(void)s;
	l->in_work = committed_records(l->peek);
}

static void
look_done(void *arg)
{
	struct look *l = arg;

	l->at_done = committed_records(l->peek);
	l->answered = true;
}

/* The lease's end as the store thread kept it (gw.lease_mine_ms is the
 * store thread's: presence_start's renewal may be writing it there now). */
struct mine {
	struct gateway *gw;
	int64_t ms;
	bool answered;
};

static void
mine_work(struct store *s, void *arg)
{
	struct mine *m = arg;

	(void)s;
	m->ms = m->gw->lease_mine_ms;
}

static void
mine_done(void *arg)
{
	((struct mine *)arg)->answered = true;
}

static int64_t
lease_mine(struct ft *f)
{
	struct mine m = { .gw = &f->gw };

	assert_int_equal(store_worker_submit(f->gw.storew, mine_work, mine_done, &m), 0);
	while (!m.answered)
		ft_loop_once(f);
	return m.ms;
}

/* Queues, behind a held store thread: a grouped look, the record's change
 * (up or down), and the look *after; then lets the thread go and runs
 * the loop until after is answered. */
static void
queue_beside(struct ft *f, bool up, struct look *after)
{
	struct look before = { .peek = after->peek };
	struct hold h;

	sem_init(&h.started, 0, 0);
	sem_init(&h.gate, 0, 0);
	assert_int_equal(store_worker_submit(f->gw.storew, hold_work, nothing_done, &h), 0);
	sem_wait(&h.started);
	assert_int_equal(store_worker_submit_grouped(f->gw.storew, look_work, look_done,
	    &before), 0);
	if (up)
		presence_tunnel_up(&f->gw, AGENT);
	else
		presence_tunnel_down(&f->gw, AGENT);
	assert_int_equal(store_worker_submit_grouped(f->gw.storew, look_work, look_done,
	    after), 0);
	sem_post(&h.gate);
	while (!after->answered)
		ft_loop_once(f);
	assert_true(before.answered);
	sem_destroy(&h.started);
	sem_destroy(&h.gate);
}

static void
test_record_in_the_group(void **state)
{
	struct ft *f = *state;
	char url[160], err[STORE_ERROR_MAX + 1];
	struct look up = { 0 }, down = { 0 };
	struct store *peek;

	snprintf(url, sizeof(url), "sqlite://%s/tether.db", f->dir);
	assert_int_equal(store_open(url, &peek, err, sizeof(err)), STORE_OK);
	assert_int_equal(presence_start(&f->gw, err, sizeof(err)), 0);
	assert_true(lease_mine(f) != 0);   /* records are written */
	/* One group whatever the machine's speed. */
	store_worker_set_group(f->gw.storew, 64, 600000);

	up.peek = peek;
	queue_beside(f, true, &up);
	assert_int_equal(up.in_work, 0);    /* in the group, not yet committed */
	assert_int_equal(up.at_done, 1);    /* committed with the group */

	down.peek = peek;
	queue_beside(f, false, &down);
	assert_int_equal(down.in_work, 1);  /* its removal not yet committed */
	assert_int_equal(down.at_done, 0);
	store_close(peek);
}

/* A drain: every tunnel closes, each its presence record's removal and
 * its last_seen stamp.  Each closing tunnel queues one store job for both
 * (presence_tunnel_down_with; it queued two: a drain of 4,000 tunnels went
 * past the queue's cap, docs/0016), and what is written is as before: the
 * records gone, the stamps at the close's time. */
static void
test_drain_one_job_per_tunnel(void **state)
{
	struct ft *f = *state;
	char url[160], err[STORE_ERROR_MAX + 1];
	struct store_agent a[DRAINED], now;
	struct ft_tun *t[DRAINED];
	EVP_PKEY *key[DRAINED];
	struct look after = { 0 };
	struct hold h;
	struct store *peek;
	size_t queued;
	int64_t closed;
	int seen;

	snprintf(url, sizeof(url), "sqlite://%s/tether.db", f->dir);
	assert_int_equal(store_open(url, &peek, err, sizeof(err)), STORE_OK);
	assert_int_equal(presence_start(&f->gw, err, sizeof(err)), 0);
	assert_true(lease_mine(f) != 0);   /* records are written */
	for (int i = 0; i < DRAINED; i++) {
		char node[16];

		snprintf(node, sizeof(node), "node-%d", i);
		ft_make_agent(f, node, &key[i], &a[i]);
		ft_make_active(f, &a[i]);    /* no verification under way */
		t[i] = ft_agent_connect(f, &a[i], key[i]);
	}
	/* Their records and stamps written, the store thread held. */
	after.peek = peek;
	assert_int_equal(store_worker_submit_grouped(f->gw.storew, look_work,
	    look_done, &after), 0);
	while (!after.answered)
		ft_loop_once(f);
	assert_int_equal(after.at_done, DRAINED);
	/* Stamps of long ago: the close's are seen written. */
	for (int i = 0; i < DRAINED; i++)
		assert_int_equal(store_agent_seen(peek, a[i].id, NULL, 1, err,
		    sizeof(err)), STORE_OK);
	seen = ft_store_calls(f, "agent_seen");
	sem_init(&h.started, 0, 0);
	sem_init(&h.gate, 0, 0);
	assert_int_equal(store_worker_submit(f->gw.storew, hold_work, nothing_done, &h), 0);
	sem_wait(&h.started);

	f->gw.stopping = 1;
	queued = store_worker_pending(f->gw.storew);
	closed = gateway_now();
	for (int i = 0; i < DRAINED; i++) {
		session_drain(t[i]->s, "gateway draining", 0);
		ft_tun_gone(t[i]);
	}
	queued = store_worker_pending(f->gw.storew) - queued;
	sem_post(&h.gate);
	assert_int_equal(queued, DRAINED);
	memset(&after, 0, sizeof(after));
	after.peek = peek;
	assert_int_equal(store_worker_submit_grouped(f->gw.storew, look_work,
	    look_done, &after), 0);
	while (!after.answered)
		ft_loop_once(f);
	assert_int_equal(after.at_done, 0);
	assert_int_equal(ft_store_calls(f, "agent_seen") - seen, DRAINED);
	for (int i = 0; i < DRAINED; i++) {
		assert_int_equal(store_agent_get(peek, a[i].id, &now), STORE_OK);
		assert_true(now.last_seen >= closed && now.last_seen <= gateway_now());
		EVP_PKEY_free(key[i]);
	}
	sem_destroy(&h.started);
	sem_destroy(&h.gate);
	store_close(peek);
}

/* On the store thread: the lease claims made so far (one per renewal of
 * presence's, which may be queued while the thread is held). */
struct claims {
	struct ft *f;
	int n;
	bool answered;
};

static void
claims_work(struct store *s, void *arg)
{
	struct claims *c = arg;

	(void)s;
	c->n = ft_store_calls(c->f, "replica_claim");
}

static void
claims_done(void *arg)
{
	((struct claims *)arg)->answered = true;
}

/* A reconnect storm: tunnels come up, each with its agent's last_seen
 * stamp and release and its presence record.  Each queues one store job
 * for both (presence_tunnel_up_with; it queued two: 19,800 agents coming
 * back at once are 39,600 jobs on a queue of 4,096), and what is written
 * is as before: the records, the stamps at the welcome's time, the
 * release the agent's HELLO gave. */
static void
test_up_one_job_per_tunnel(void **state)
{
	struct ft *f = *state;
	char url[160], err[STORE_ERROR_MAX + 1];
	struct store_agent a[CAME_UP], now;
	struct ft_tun *t[CAME_UP];
	EVP_PKEY *key[CAME_UP];
	struct claims c = { .f = f };
	struct hold h;
	struct store *peek;
	size_t queued;
	int64_t began;
	int claims, seen;

	snprintf(url, sizeof(url), "sqlite://%s/tether.db", f->dir);
	assert_int_equal(store_open(url, &peek, err, sizeof(err)), STORE_OK);
	assert_int_equal(presence_start(&f->gw, err, sizeof(err)), 0);
	assert_true(lease_mine(f) != 0);   /* records are written */
	for (int i = 0; i < CAME_UP; i++) {
		char node[16];

		snprintf(node, sizeof(node), "node-%d", i);
		ft_make_agent(f, node, &key[i], &a[i]);
		ft_make_active(f, &a[i]);    /* no verification to start */
		/* Seen long ago, an older release: the welcome's are seen
		 * written. */
		assert_int_equal(store_agent_seen(peek, a[i].id, "0.0.1-old", 1,
		    err, sizeof(err)), STORE_OK);
	}
	seen = ft_store_calls(f, "agent_seen");
	began = gateway_now();
	/* Each HELLO is answered at once, each AUTH queues the agent's
	 * lookup; its answer welcomes the tunnel. */
	for (int i = 0; i < CAME_UP; i++) {
		struct frame hello;

		t[i] = ft_tun_open(f);
		ft_make_hello(&hello, FRAME_CRED_AGENT, a[i].id, a[i].node);
		snprintf(hello.u.hello.version, sizeof(hello.u.hello.version),
		    "%s", RELEASE);
		ft_deliver(t[i], &hello);
		assert_int_equal(t[i]->nsent, 1);
		assert_int_equal(t[i]->sent[0].type, FRAME_CHALLENGE);
		ft_auth(t[i], key[i], FRAME_CRED_AGENT, a[i].id, a[i].node,
		    t[i]->sent[0].u.challenge.nonce);
	}
	/* The lookups run, then the store thread is held: what the welcomes
	 * queue waits behind it. */
	sem_init(&h.started, 0, 0);
	sem_init(&h.gate, 0, 0);
	assert_int_equal(store_worker_submit(f->gw.storew, hold_work, nothing_done, &h), 0);
	sem_wait(&h.started);
	claims = ft_store_calls(f, "replica_claim");
	for (int i = 0; i < CAME_UP; i++) {
		ft_wait_sent(t[i], 2);
		assert_int_equal(t[i]->closed, 0);
		assert_int_equal(t[i]->sent[1].type, FRAME_WELCOME);
	}
	queued = store_worker_pending(f->gw.storew) - 1;   /* but the hold */
	/* Behind them: how many of them were renewals. */
	assert_int_equal(store_worker_submit(f->gw.storew, claims_work,
	    claims_done, &c), 0);
	sem_post(&h.gate);
	while (!c.answered)
		ft_loop_once(f);
	assert_int_equal(queued - (size_t)(c.n - claims), CAME_UP);
	/* Answered in order, each once its group committed: all written. */
	assert_int_equal(committed_records(peek), CAME_UP);
	assert_int_equal(ft_store_calls(f, "agent_seen") - seen, CAME_UP);
	for (int i = 0; i < CAME_UP; i++) {
		assert_int_equal(store_agent_get(peek, a[i].id, &now), STORE_OK);
		assert_true(now.last_seen >= began && now.last_seen <= gateway_now());
		assert_string_equal(now.version, RELEASE);
		EVP_PKEY_free(key[i]);
	}
	sem_destroy(&h.started);
	sem_destroy(&h.gate);
	store_close(peek);
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_record_in_the_group, setup, teardown),
		cmocka_unit_test_setup_teardown(test_drain_one_job_per_tunnel, setup,
		    teardown),
		cmocka_unit_test_setup_teardown(test_up_one_job_per_tunnel, setup,
		    teardown),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
