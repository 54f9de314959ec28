/*
 * test_store_worker.c: the store thread (gateway/store/store_worker.c) on a real
 * SQLite file: jobs run on another thread in the order they were queued,
 * their done callbacks run on the loop's thread, a full queue refuses, and
 * stopping runs what was queued before calling every done; a pool's threads
 * (store_worker_start_pool) run jobs at once, each on its own connection;
 * grouped jobs queued together share one commit, a failed one undone alone,
 * and are answered only once committed; jobs submitted from other loops
 * (core/loop.h) are answered on their submitting loop's thread, in the
 * order each loop asked, and a job whose loop has stopped is answered only
 * when the worker stops (docs/0040 step 3); keyed jobs run in their key's
 * order on the thread the key picks, other keys' beside them (docs/0041).
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <pthread.h>
#include <errno.h>
#include <semaphore.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <event2/event.h>

#include "log.h"
#include "loop.h"
#include "store.h"
#include "store_backend.h"   /* a group broken as SQLite breaks one */
#include "store_worker.h"

#define JOBS 20

struct fixture {
	char dir[64];
	char url[160];
	struct event_base *base;
	struct store_worker *w;
};

struct job {
	int seq;
	const char *name;        /* the cluster it creates */
	pthread_t worked_on;
	int rc;
	sem_t *started;          /* posted when the work starts, when set */
	sem_t *gate;             /* the work waits on it, when set */
};

/* A third connection, for gwork on the store thread: a connection serves
 * one thread at a time, and the loop reads peek (gdone) while the store
 * thread runs the next group.  Opened by group_store, closed by teardown. */
static struct store *work_peek;

static int done_order[JOBS + 4];
static int ndone;
static pthread_t loop_thread;

static int
setup(void **state)
{
	struct fixture *f = calloc(1, sizeof(*f));
	char err[STORE_ERROR_MAX + 1];
	struct store *s;

	snprintf(f->dir, sizeof(f->dir), "/tmp/tether-worker-XXXXXX");
	if (f == NULL || mkdtemp(f->dir) == NULL)
		return -1;
	snprintf(f->url, sizeof(f->url), "sqlite://%s/tether.db", f->dir);
	/* Migrated first, as the gateway's own connection does. */
	if (store_open(f->url, &s, err, sizeof(err)) != STORE_OK)
		return -1;
	store_close(s);
	f->base = event_base_new();
	ndone = 0;
	loop_thread = pthread_self();
	*state = f;
	return 0;
}

static int
teardown(void **state)
{
	struct fixture *f = *state;
	char p[256];

	store_worker_stop(f->w);
	store_close(work_peek);
	work_peek = NULL;
	event_base_free(f->base);
	snprintf(p, sizeof(p), "rm -rf %s", f->dir);
	if (system(p) != 0)
		return -1;
	free(f);
	return 0;
}

/* On a store thread: waits for the test to open gate, at most 30 s, so
 * that a test that failed before opening it still stops its worker. */
static void
gate_wait(sem_t *gate)
{
	struct timespec until;

	clock_gettime(CLOCK_REALTIME, &until);
	until.tv_sec += 30;
	while (sem_timedwait(gate, &until) != 0 && errno == EINTR)
		;
}

static void
work(struct store *s, void *arg)
{
	struct job *j = arg;
	char err[STORE_ERROR_MAX + 1];

	if (j->started != NULL)
		sem_post(j->started);
	if (j->gate != NULL)
		gate_wait(j->gate);
	j->worked_on = pthread_self();
	j->rc = store_cluster_create(s, j->name, 1700000000, NULL, err,
	    sizeof(err));
}

static void
done(void *arg)
{
	struct job *j = arg;

	assert_true(pthread_equal(pthread_self(), loop_thread));
	done_order[ndone++] = j->seq;
}

static void
start(struct fixture *f, size_t cap)
{
	char err[STORE_ERROR_MAX + 1];

	assert_int_equal(store_worker_start(f->base, f->url, cap, NULL, NULL, &f->w, err,
	    sizeof(err)), 0);
}

/* Runs the loop until want done callbacks have run. */
static void
run_until(struct fixture *f, int want)
{
	while (ndone < want)
		assert_int_equal(event_base_loop(f->base, EVLOOP_ONCE), 0);
}

/* Three jobs that each wait until all three have started can finish only on
 * three threads at once (docs/0035: a far store's registrations overlap). */
static void
test_pool_at_once(void **state)
{
	struct fixture *f = *state;
	char err[STORE_ERROR_MAX + 1], names[3][16];
	struct job jobs[3];
	sem_t started, gate;
	struct timespec until;

	assert_int_equal(store_worker_start_pool(f->base, f->url, 8, 3, NULL,
	    NULL, &f->w, err, sizeof(err)), 0);
	assert_int_equal(store_worker_threads(f->w), 3);
	sem_init(&started, 0, 0);
	sem_init(&gate, 0, 0);
	for (int i = 0; i < 3; i++) {
		snprintf(names[i], sizeof(names[i]), "p%d", i);
		jobs[i] = (struct job){ .seq = i, .name = names[i],
		    .started = &started, .gate = &gate };
		assert_int_equal(store_worker_submit(f->w, work, done, &jobs[i]), 0);
	}
	clock_gettime(CLOCK_REALTIME, &until);
	until.tv_sec += 30;
	for (int i = 0; i < 3; i++)
		assert_int_equal(sem_timedwait(&started, &until), 0);
	assert_int_equal(store_worker_pending(f->w), 3);
	for (int i = 0; i < 3; i++)
		sem_post(&gate);
	run_until(f, 3);
	for (int i = 0; i < 3; i++) {
		assert_int_equal(jobs[i].rc, STORE_OK);
		assert_false(pthread_equal(jobs[i].worked_on, loop_thread));
		for (int k = 0; k < i; k++)
			assert_false(pthread_equal(jobs[i].worked_on, jobs[k].worked_on));
	}
	sem_destroy(&started);
	sem_destroy(&gate);
}

static void
test_order_and_threads(void **state)
{
	struct fixture *f = *state;
	struct job jobs[JOBS];
	char names[JOBS][16];
	int i;

	start(f, JOBS);
	for (i = 0; i < JOBS; i++) {
		snprintf(names[i], sizeof(names[i]), "c%d", i);
		jobs[i] = (struct job){ .seq = i, .name = names[i] };
		assert_int_equal(store_worker_submit(f->w, work, done, &jobs[i]),
		    0);
	}
	run_until(f, JOBS);
	for (i = 0; i < JOBS; i++) {
		assert_int_equal(done_order[i], i);
		assert_int_equal(jobs[i].rc, STORE_OK);
		assert_false(pthread_equal(jobs[i].worked_on, loop_thread));
	}
	/* Same name twice: the store's rule holds on the thread too. */
	jobs[0].seq = JOBS;
	assert_int_equal(store_worker_submit(f->w, work, done, &jobs[0]), 0);
	run_until(f, JOBS + 1);
	assert_int_equal(jobs[0].rc, STORE_CONFLICT);
	assert_int_equal(store_worker_pending(f->w), 0);
}

static void
test_cap(void **state)
{
	struct fixture *f = *state;
	struct job a = { .seq = 0, .name = "a" }, b = { .seq = 1, .name = "b" },
	    c = { .seq = 2, .name = "c" }, d = { .seq = 3, .name = "d" };
	sem_t gate, started;

	sem_init(&gate, 0, 0);
	sem_init(&started, 0, 0);
	a.gate = &gate;
	a.started = &started;
	start(f, 2);
	assert_int_equal(store_worker_submit(f->w, work, done, &a), 0);
	/* a is off the queue once the thread runs it. */
	sem_wait(&started);
	assert_int_equal(store_worker_pending(f->w), 1);
	assert_int_equal(store_worker_submit(f->w, work, done, &b), 0);
	assert_int_equal(store_worker_submit(f->w, work, done, &c), 0);
	/* Two waiting: the third is refused, and its done never runs. */
	assert_int_equal(store_worker_submit(f->w, work, done, &d), -1);
	sem_post(&gate);
	run_until(f, 3);
	assert_int_equal(done_order[0], 0);
	assert_int_equal(done_order[2], 2);
	sem_destroy(&gate);
	sem_destroy(&started);
}

static void
test_stop_drains(void **state)
{
	struct fixture *f = *state;
	struct job jobs[4];
	char names[4][16];
	int i;

	start(f, 8);
	for (i = 0; i < 4; i++) {
		snprintf(names[i], sizeof(names[i]), "s%d", i);
		jobs[i] = (struct job){ .seq = i, .name = names[i] };
		assert_int_equal(store_worker_submit(f->w, work, done, &jobs[i]),
		    0);
	}
	/* No loop runs: stop itself runs the jobs and their done calls. */
	store_worker_stop(f->w);
	f->w = NULL;
	assert_int_equal(ndone, 4);
	for (i = 0; i < 4; i++) {
		assert_int_equal(done_order[i], i);
		assert_int_equal(jobs[i].rc, STORE_OK);
	}
}

/* ---- groups (store_worker_submit_grouped) ---- */

#define GTOKEN "1111111111111111"

enum gkind { G_REGISTER, G_USER_TOKEN, G_BREAK };

/* A grouped job: a registration, or a user token scoped to a cluster that
 * exists and one that does not (it fails after writing its token row). */
struct gjob {
	int seq;
	enum gkind kind;
	const char *token;        /* G_REGISTER: the import token */
	const char *node;
	uint8_t key;              /* its pubkey: 32 bytes of this */
	struct store *peek;       /* another connection: what is committed,
	                           * read by done on the loop's thread */
	const char *cluster;
	int rc;
	char err[STORE_ERROR_MAX + 1];
	bool created;
	size_t seen_in_work;      /* agents committed when its work ended */
	size_t seen_at_done;      /* ... and when it was answered */
	int runs;                 /* its work ran this many times */
	int answers;              /* its done ran this many times */
};

static size_t
committed_agents(struct store *peek)
{
	struct store_agent *a = NULL;
	size_t n = 0;

	assert_int_equal(store_agent_list(peek, NULL, &a, &n), STORE_OK);
	free(a);
	return n;
}

static void
gwork(struct store *s, void *arg)
{
	struct gjob *j = arg;
	struct store_agent a;
	struct store_token t = { .id = "2222222222222222", .kind = TOKEN_USER,
	    .name = "ann", .uses_left = -1, .created_at = 1700000000 };
	const char *clusters[2] = { j->cluster, "c-000000000000" };
	uint8_t pub[32];

	memset(pub, j->key, sizeof(pub));
	j->runs++;
	if (j->kind == G_BREAK) {
		/* The first time, what SQLite does on a full disk: the whole
		 * transaction rolled back under the group. */
		if (j->runs == 1)
			s->be->rollback(s);
		j->rc = STORE_OK;
	} else if (j->kind == G_REGISTER)
		j->rc = store_agent_register(s, j->token, j->node, pub,
		    1700000000, &a, &j->created, j->err, sizeof(j->err));
	else
		j->rc = store_user_token_create(s, &t, clusters, 2, NULL, j->err,
		    sizeof(j->err));
	j->seen_in_work = committed_agents(work_peek);
}

static void
gdone(void *arg)
{
	struct gjob *j = arg;

	j->seen_at_done = committed_agents(j->peek);
	j->answers++;
	done_order[ndone++] = j->seq;
}

/* A connection beside the worker's with a cluster and an import token of
 * four uses: *cluster gets the cluster's id. */
static struct store *
group_store(struct fixture *f, char cluster[STORE_ID_MAX + 1])
{
	char err[STORE_ERROR_MAX + 1];
	struct store_cluster c;
	struct store_token t = { .id = GTOKEN, .kind = TOKEN_IMPORT,
	    .uses_left = 4, .created_at = 1700000000 };
	struct store *peek;

	assert_int_equal(store_open(f->url, &peek, err, sizeof(err)), STORE_OK);
	assert_int_equal(store_open(f->url, &work_peek, err, sizeof(err)),
	    STORE_OK);
	assert_int_equal(store_cluster_create(peek, "prod", 1700000000, &c, err,
	    sizeof(err)), STORE_OK);
	snprintf(cluster, STORE_ID_MAX + 1, "%s", c.id);
	snprintf(t.cluster, sizeof(t.cluster), "%s", c.id);
	assert_int_equal(store_token_insert(peek, &t, err, sizeof(err)),
	    STORE_OK);
	return peek;
}

/* Holds the store thread on a job of its own until the gate opens, so
 * that what is submitted meanwhile is queued together. */
static void
hold_thread(struct fixture *f, struct job *hold, sem_t *started, sem_t *gate)
{
	sem_init(started, 0, 0);
	sem_init(gate, 0, 0);
	*hold = (struct job){ .seq = 0, .name = "hold", .started = started,
	    .gate = gate };
	assert_int_equal(store_worker_submit(f->w, work, done, hold), 0);
	sem_wait(started);
}

/*
 * Five registrations and a user token queued together run as one group:
 * none is committed while the group runs (another connection sees no
 * agent), each is answered once all are, and the ones that failed were
 * undone alone: the taken node and the unknown token spent no use, the
 * user token whose second cluster does not exist left no row, and the two
 * good registrations spent two of the four uses.
 */
static void
test_group_one_commit(void **state)
{
	struct fixture *f = *state;
	char cluster[STORE_ID_MAX + 1];
	struct store *peek = NULL;
	struct store_token t;
	struct job hold;
	sem_t started, gate;
	struct gjob g[5];

	start(f, 16);
	peek = group_store(f, cluster);
	/* One group whatever the machine's speed. */
	store_worker_set_group(f->w, 64, 600000);
	hold_thread(f, &hold, &started, &gate);
	g[0] = (struct gjob){ .kind = G_REGISTER, .token = GTOKEN, .node = "n1",
	    .key = 1 };
	g[1] = (struct gjob){ .kind = G_USER_TOKEN, .cluster = cluster };
	g[2] = (struct gjob){ .kind = G_REGISTER, .token = GTOKEN, .node = "n1",
	    .key = 2 };
	g[3] = (struct gjob){ .kind = G_REGISTER, .token = "3333333333333333",
	    .node = "n2", .key = 3 };
	g[4] = (struct gjob){ .kind = G_REGISTER, .token = GTOKEN, .node = "n3",
	    .key = 4 };
	for (int i = 0; i < 5; i++) {
		g[i].seq = i + 1;
		g[i].peek = peek;
		assert_int_equal(store_worker_submit_grouped(f->w, gwork, gdone,
		    &g[i]), 0);
	}
	sem_post(&gate);
	run_until(f, 6);

	assert_int_equal(g[0].rc, STORE_OK);
	assert_true(g[0].created);
	assert_int_equal(g[1].rc, STORE_NOTFOUND);
	/* The group sees its own writes: n1 is taken already. */
	assert_int_equal(g[2].rc, STORE_REFUSED);
	assert_non_null(strstr(g[2].err, "already registered"));
	assert_int_equal(g[3].rc, STORE_REFUSED);
	assert_string_equal(g[3].err, "unknown import token");
	assert_int_equal(g[4].rc, STORE_OK);
	assert_true(g[4].created);
	for (int i = 0; i < 5; i++) {
		assert_int_equal(done_order[i + 1], i + 1);
		assert_int_equal(g[i].seen_in_work, 0);   /* one transaction */
		assert_int_equal(g[i].seen_at_done, 2);   /* answered committed */
	}
	assert_int_equal(store_token_get(peek, GTOKEN, &t), STORE_OK);
	assert_int_equal(t.uses_left, 2);
	assert_int_equal(store_token_get(peek, "2222222222222222", &t),
	    STORE_NOTFOUND);
	store_close(peek);
	sem_destroy(&started);
	sem_destroy(&gate);
}

/* A group takes at most its cap of jobs: with two, four registrations
 * queued together commit in two groups, the second after the first. */
static void
test_group_cap(void **state)
{
	struct fixture *f = *state;
	char cluster[STORE_ID_MAX + 1];
	struct store *peek;
	struct job hold;
	sem_t started, gate;
	struct gjob g[4];
	const char *nodes[4] = { "m1", "m2", "m3", "m4" };

	start(f, 16);
	peek = group_store(f, cluster);
	store_worker_set_group(f->w, 2, 600000);
	hold_thread(f, &hold, &started, &gate);
	for (int i = 0; i < 4; i++) {
		g[i] = (struct gjob){ .seq = i + 1, .kind = G_REGISTER,
		    .token = GTOKEN, .node = nodes[i], .key = (uint8_t)(i + 1),
		    .peek = peek };
		assert_int_equal(store_worker_submit_grouped(f->w, gwork, gdone,
		    &g[i]), 0);
	}
	sem_post(&gate);
	run_until(f, 5);
	for (int i = 0; i < 4; i++)
		assert_int_equal(g[i].rc, STORE_OK);
	assert_int_equal(g[1].seen_in_work, 0);
	assert_int_equal(g[2].seen_in_work, 2);
	assert_int_equal(g[3].seen_in_work, 2);
	/* The first two may be answered after the second group committed. */
	assert_true(g[1].seen_at_done >= 2);
	assert_int_equal(g[3].seen_at_done, 4);
	store_close(peek);
	sem_destroy(&started);
	sem_destroy(&gate);
}

/*
 * A group SQLite rolled back under it (a full disk) commits nothing, so
 * its jobs run again, alone: the registration made before the break is
 * made again and answered once, as committed, and the job queued behind
 * runs after; two uses spent, two agents, no answer before its commit.
 */
static void
test_group_broken_runs_again(void **state)
{
	struct fixture *f = *state;
	char cluster[STORE_ID_MAX + 1];
	struct store *peek;
	struct store_token t;
	struct job hold;
	sem_t started, gate;
	struct gjob g[3];

	start(f, 16);
	peek = group_store(f, cluster);
	store_worker_set_group(f->w, 64, 600000);
	hold_thread(f, &hold, &started, &gate);
	g[0] = (struct gjob){ .kind = G_REGISTER, .token = GTOKEN, .node = "b1",
	    .key = 1 };
	g[1] = (struct gjob){ .kind = G_BREAK };
	g[2] = (struct gjob){ .kind = G_REGISTER, .token = GTOKEN, .node = "b2",
	    .key = 2 };
	for (int i = 0; i < 3; i++) {
		g[i].seq = i + 1;
		g[i].peek = peek;
		assert_int_equal(store_worker_submit_grouped(f->w, gwork, gdone,
		    &g[i]), 0);
	}
	sem_post(&gate);
	run_until(f, 4);
	assert_int_equal(g[0].rc, STORE_OK);
	assert_true(g[0].created);
	assert_int_equal(g[0].runs, 2);
	assert_int_equal(g[1].runs, 2);
	assert_int_equal(g[2].runs, 1);
	assert_int_equal(g[2].rc, STORE_OK);
	for (int i = 0; i < 3; i++) {
		assert_int_equal(g[i].answers, 1);
		assert_int_equal(done_order[i + 1], i + 1);
	}
	assert_true(g[0].seen_at_done >= 1);
	assert_int_equal(committed_agents(peek), 2);
	assert_int_equal(store_token_get(peek, GTOKEN, &t), STORE_OK);
	assert_int_equal(t.uses_left, 2);
	store_close(peek);
	sem_destroy(&started);
	sem_destroy(&gate);
}

/* Jobs of loops 1 and 2 (docs/0040 step 3): each is answered on the loop
 * that submitted it, in its own order.  Written only on that loop's
 * thread; read by the test's once the loops are joined. */
#define HOME_JOBS 16

struct home_job {
	int loop;                /* 1 or 2 */
	int seq;                 /* per loop */
	char name[32];
	pthread_t done_on;
	int rc;
	sem_t *started;          /* posted when the work starts, when set */
	sem_t *gate;             /* the work waits on it, when set */
};

struct home_run {
	struct store_worker *w;
	struct home_job jobs[2][HOME_JOBS];
	int order[3][2 * HOME_JOBS]; /* by loop index: seqs answered */
	int nanswered[3];
	sem_t answered;          /* posted once per done */
	atomic_int refused;
};

static struct home_run *home_run;

static void
home_work(struct store *s, void *arg)
{
	struct home_job *j = arg;
	char err[STORE_ERROR_MAX + 1];

	if (j->started != NULL)
		sem_post(j->started);
	if (j->gate != NULL)
		sem_wait(j->gate);
	j->rc = store_cluster_create(s, j->name, 1700000000, NULL, err,
	    sizeof(err));
}

static void
home_done(void *arg)
{
	struct home_job *j = arg;
	struct loop *l = loop_self();
	unsigned at = l != NULL ? l->index : 0;

	j->done_on = pthread_self();
	home_run->order[at][home_run->nanswered[at]++] = j->seq;
	sem_post(&home_run->answered);
}

/* On loop 1 or 2: submits its jobs, grouped and alone in turn. */
static void
home_submit(void *arg)
{
	struct home_job *jobs = arg;

	for (int i = 0; i < HOME_JOBS; i++) {
		int rc = (i % 3 == 0) ?
		    store_worker_submit(home_run->w, home_work, home_done,
			&jobs[i]) :
		    store_worker_submit_grouped(home_run->w, home_work,
			home_done, &jobs[i]);

		if (rc != 0)
			atomic_fetch_add(&home_run->refused, 1);
	}
}

/* Waits for one answer; fails rather than hangs when none comes. */
static void
wait_answer(sem_t *sem)
{
	struct timespec until;

	clock_gettime(CLOCK_REALTIME, &until);
	until.tv_sec += 30;
	assert_int_equal(sem_timedwait(sem, &until), 0);
}

static void
test_home_loops(void **state)
{
	struct fixture *f = *state;
	struct home_run *r = calloc(1, sizeof(*r));
	char err[256];
	struct loop *loops;

	assert_non_null(r);
	home_run = r;
	start(f, 2 * HOME_JOBS);
	r->w = f->w;
	sem_init(&r->answered, 0, 0);
	loops = loops_new(f->base, 3, NULL, err, sizeof(err));
	assert_non_null(loops);
	for (int l = 1; l <= 2; l++)
		for (int i = 0; i < HOME_JOBS; i++) {
			struct home_job *j = &r->jobs[l - 1][i];

			j->loop = l;
			j->seq = i;
			snprintf(j->name, sizeof(j->name), "home-%d-%d", l, i);
		}
	assert_int_equal(loop_call(&loops[1], home_submit, r->jobs[0], NULL), 0);
	assert_int_equal(loop_call(&loops[2], home_submit, r->jobs[1], NULL), 0);
	for (int i = 0; i < 2 * HOME_JOBS; i++)
		wait_answer(&r->answered);
	loops_stop(loops, 3);
	assert_int_equal(atomic_load(&r->refused), 0);
	assert_int_equal(r->nanswered[0], 0);
	for (int l = 1; l <= 2; l++) {
		assert_int_equal(r->nanswered[l], HOME_JOBS);
		for (int i = 0; i < HOME_JOBS; i++) {
			struct home_job *j = &r->jobs[l - 1][i];

			assert_int_equal(j->rc, STORE_OK);
			assert_true(pthread_equal(j->done_on, loops[l].thread));
			assert_int_equal(r->order[l][i], i);
		}
	}
	loops_free(loops, 3);
	sem_destroy(&r->answered);
	free(r);
	home_run = NULL;
}

/* A job whose loop stopped while it ran: not answered on that loop (whose
 * inbox is closed) nor lost: its done runs in store_worker_stop, on the
 * stopping thread, and the worker's node for it is freed (ASan finds a
 * leak else). */
static void
orphan_submit(void *arg)
{
	if (store_worker_submit_grouped(home_run->w, home_work, home_done,
	    arg) != 0)
		atomic_fetch_add(&home_run->refused, 1);
}

static void
test_home_stopped(void **state)
{
	struct fixture *f = *state;
	struct home_run *r = calloc(1, sizeof(*r));
	struct home_job *j = &r->jobs[0][0];
	sem_t started, gate;
	char err[256];
	struct loop *loops;

	assert_non_null(r);
	home_run = r;
	start(f, 4);
	r->w = f->w;
	sem_init(&r->answered, 0, 0);
	sem_init(&started, 0, 0);
	sem_init(&gate, 0, 0);
	*j = (struct home_job){ .loop = 1, .seq = 0, .name = "orphan",
	    .started = &started, .gate = &gate };
	loops = loops_new(f->base, 2, NULL, err, sizeof(err));
	assert_non_null(loops);
	assert_int_equal(loop_call(&loops[1], orphan_submit, j, NULL), 0);
	wait_answer(&started);
	loops_stop(loops, 2);      /* loop 1 joined, its inbox closed */
	sem_post(&gate);
	/* Drains the job: it ran, its home dropped it back to the worker. */
	store_worker_stop(f->w);
	f->w = NULL;
	assert_int_equal(atomic_load(&r->refused), 0);
	assert_int_equal(j->rc, STORE_OK);
	assert_int_equal(r->nanswered[1], 0);
	assert_int_equal(r->nanswered[0], 1);
	assert_true(pthread_equal(j->done_on, pthread_self()));
	loops_free(loops, 2);
	sem_destroy(&r->answered);
	sem_destroy(&started);
	sem_destroy(&gate);
	free(r);
	home_run = NULL;
}

/* The sharding rule (docs/0041): a key always picks the same thread, one
 * of nthreads, and agent ids spread evenly; one thread or none: 0. */
static void
test_shard_rule(void **state)
{
	size_t count[8] = { 0 };
	char id[40];

	(void)state;
	assert_int_equal(store_worker_shard("ag_1", 0), 0);
	assert_int_equal(store_worker_shard("ag_1", 1), 0);
	assert_int_equal(store_worker_shard("", 8),
	    store_worker_shard("", 8));
	for (int i = 0; i < 4000; i++) {
		size_t k;

		/* As agent ids look: a prefix and random hex. */
		snprintf(id, sizeof(id), "ag_%08x%08x", (unsigned)i * 2654435761u,
		    (unsigned)i ^ 0x5bd1e995u);
		k = store_worker_shard(id, 8);
		assert_true(k < 8);
		assert_int_equal(store_worker_shard(id, 8), k);
		count[k]++;
	}
	/* 500 each on average: none under 400 nor over 600. */
	for (int k = 0; k < 8; k++) {
		assert_true(count[k] > 400);
		assert_true(count[k] < 600);
	}
}

/* Two keys that pick different threads of n. */
static void
two_keys(size_t n, char a[16], char b[16])
{
	snprintf(a, 16, "agent-a");
	for (int i = 0; i < 100; i++) {
		snprintf(b, 16, "agent-b%d", i);
		if (store_worker_shard(b, n) != store_worker_shard(a, n))
			return;
	}
	fail_msg("no key picks another thread than %s", a);
}

/*
 * Keyed jobs in a pool of three: while the first job of key A is held, the
 * four A queued behind it do not start (on a shared queue the two free
 * threads would take them), and the jobs of key B, on another thread, run
 * and are answered meanwhile; once released, A's run in the order
 * submitted, on one thread.
 */
static void
test_keyed_order(void **state)
{
	struct fixture *f = *state;
	char err[STORE_ERROR_MAX + 1], names[10][16], ka[16], kb[16];
	struct job jobs[10];
	sem_t started, gate;

	assert_int_equal(store_worker_start_pool(f->base, f->url, 10, 3, NULL,
	    NULL, &f->w, err, sizeof(err)), 0);
	two_keys(3, ka, kb);
	sem_init(&started, 0, 0);
	sem_init(&gate, 0, 0);
	for (int i = 0; i < 10; i++) {
		snprintf(names[i], sizeof(names[i]), "k%d", i);
		jobs[i] = (struct job){ .seq = i, .name = names[i], .rc = 0xdead };
	}
	jobs[0].started = &started;
	jobs[0].gate = &gate;
	/* A: 0..4, B: 5..9. */
	for (int i = 0; i < 10; i++)
		assert_int_equal(store_worker_submit_keyed(f->w, i < 5 ? ka : kb,
		    true, work, done, &jobs[i]), 0);
	wait_answer(&started);
	run_until(f, 5);
	for (int i = 0; i < 5; i++)
		assert_int_equal(done_order[i], 5 + i);
	for (int i = 1; i < 5; i++)
		assert_int_equal(jobs[i].rc, 0xdead);
	sem_post(&gate);
	run_until(f, 10);
	for (int i = 0; i < 5; i++) {
		assert_int_equal(done_order[5 + i], i);
		assert_int_equal(jobs[i].rc, STORE_OK);
		assert_true(pthread_equal(jobs[i].worked_on, jobs[0].worked_on));
	}
	assert_false(pthread_equal(jobs[5].worked_on, jobs[0].worked_on));
	sem_destroy(&started);
	sem_destroy(&gate);
}

/* The cap counts keyed jobs waiting: with A's first job running and two
 * more of A waiting (their thread is busy), a third is refused, keyed or
 * not, and its done never runs. */
static void
test_keyed_cap(void **state)
{
	struct fixture *f = *state;
	char err[STORE_ERROR_MAX + 1];
	struct job a = { .seq = 0, .name = "a" }, b = { .seq = 1, .name = "b" },
	    c = { .seq = 2, .name = "c" }, d = { .seq = 3, .name = "d" };
	sem_t started, gate;

	sem_init(&started, 0, 0);
	sem_init(&gate, 0, 0);
	a.started = &started;
	a.gate = &gate;
	assert_int_equal(store_worker_start_pool(f->base, f->url, 2, 2, NULL,
	    NULL, &f->w, err, sizeof(err)), 0);
	assert_int_equal(store_worker_submit_keyed(f->w, "A", true, work, done,
	    &a), 0);
	wait_answer(&started);
	assert_int_equal(store_worker_submit_keyed(f->w, "A", true, work, done,
	    &b), 0);
	assert_int_equal(store_worker_submit_keyed(f->w, "A", false, work, done,
	    &c), 0);
	assert_int_equal(store_worker_submit_keyed(f->w, "B", true, work, done,
	    &d), -1);
	assert_int_equal(store_worker_submit(f->w, work, done, &d), -1);
	sem_post(&gate);
	run_until(f, 3);
	for (int i = 0; i < 3; i++)
		assert_int_equal(done_order[i], i);
	assert_int_equal(store_worker_pending(f->w), 0);
	sem_destroy(&started);
	sem_destroy(&gate);
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_order_and_threads, setup,
		    teardown),
		cmocka_unit_test_setup_teardown(test_cap, setup, teardown),
		cmocka_unit_test_setup_teardown(test_home_loops, setup, teardown),
		cmocka_unit_test_setup_teardown(test_home_stopped, setup,
		    teardown),
		cmocka_unit_test_setup_teardown(test_pool_at_once, setup, teardown),
		cmocka_unit_test(test_shard_rule),
		cmocka_unit_test_setup_teardown(test_keyed_order, setup, teardown),
		cmocka_unit_test_setup_teardown(test_keyed_cap, setup, teardown),
		cmocka_unit_test_setup_teardown(test_stop_drains, setup,
		    teardown),
		cmocka_unit_test_setup_teardown(test_group_one_commit, setup,
		    teardown),
		cmocka_unit_test_setup_teardown(test_group_cap, setup, teardown),
		cmocka_unit_test_setup_teardown(test_group_broken_runs_again,
		    setup, teardown),
	};

	log_init("test", LOG_LEVEL_WARN);
	return cmocka_run_group_tests(tests, NULL, NULL);
}
