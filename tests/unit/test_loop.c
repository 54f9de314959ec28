/*
 * test_loop.c: the loops' inboxes (gateway/core/loop.h, docs/0040 step 2).
 * Messages from one sender run on the receiving loop's thread in the order
 * sent, whatever other senders do meanwhile; a call to a loop that stopped
 * (queued behind its stop, or made after) is dropped, its arg freed by its
 * drop and nothing run (ASan's leak check sees a lost one); a broadcast
 * runs once on every loop, the caller's own from its inbox, and its done
 * runs once after the last; a gather's rows are each filled by their own
 * loop and its done runs once on its home loop after them (its drop when
 * home stopped); a loop's audit lines wait for the end of its pass; a
 * loop sent one message at a time (each sent after the last ran) misses
 * no wake, its eventfd never read (its counter counts the wakes); the
 * wake rule: a call into a loop asleep writes its eventfd once, calls
 * into a loop running a pass write nothing and run at that pass's end,
 * and a call from a loop's own thread writes none and runs on a later
 * pass, after the loop's next poll (never in the pass that made it);
 * loops_free waits for a caller still writing the eventfd of a loop whose
 * message already ran; a sender that keeps posting (each message run
 * brings the next) does not keep a loop from polling its sockets for
 * more than 8 takes.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <event2/event.h>

#include "log.h"
#include "loop.h"

#define NLOOPS   3
#define SENDERS  3          /* two threads of their own and loop 0's */
#define PER      4000       /* messages per sender per receiving loop */

/* What each loop saw: written only by that loop's thread, read after the
 * loops were joined. */
struct seen {
	unsigned next[SENDERS];   /* the sequence number expected next */
	unsigned wrong_order;
	unsigned wrong_thread;
};

static struct seen seen[NLOOPS];

struct order_msg {
	unsigned sender, seq, to;
};

static void
order_run(void *arg)
{
	struct order_msg *m = arg;
	struct seen *s = &seen[m->to];

	if (loop_self() == NULL || loop_self()->index != m->to)
		s->wrong_thread++;
	if (m->seq != s->next[m->sender])
		s->wrong_order++;
	s->next[m->sender] = m->seq + 1;
	free(m);
}

static void
order_drop(void *arg)
{
	free(arg);
}

struct sender {
	struct loop *loops;
	unsigned id;
};

/* Sends PER numbered messages to every loop, interleaved. */
static void *
send_all(void *arg)
{
	struct sender *sd = arg;

	for (unsigned seq = 0; seq < PER; seq++)
		for (unsigned to = 0; to < NLOOPS; to++) {
			struct order_msg *m = malloc(sizeof(*m));

			assert_non_null(m);
			*m = (struct order_msg){ .sender = sd->id, .seq = seq, .to = to };
			assert_int_equal(loop_call(&sd->loops[to], order_run, m,
			    order_drop), 0);
		}
	return NULL;
}

static void
test_order_per_sender(void **state)
{
	struct event_base *base = event_base_new();
	char err[256];
	struct loop *loops = loops_new(base, NLOOPS, NULL, err, sizeof(err));
	pthread_t th[SENDERS - 1];
	struct sender sd[SENDERS];

	(void)state;
	assert_non_null(loops);
	assert_ptr_equal(loop_self(), &loops[0]);
	for (unsigned i = 0; i < SENDERS; i++)
		sd[i] = (struct sender){ .loops = loops, .id = i };
	for (unsigned i = 0; i < SENDERS - 1; i++)
		assert_int_equal(pthread_create(&th[i], NULL, send_all, &sd[i]), 0);
	send_all(&sd[SENDERS - 1]);          /* loop 0's thread sends too */
	for (unsigned i = 0; i < SENDERS - 1; i++)
		pthread_join(th[i], NULL);
	/* Every message was sent before the stops: each runs first; loop 0's
	 * own run in loops_stop's pass over its inbox. */
	loops_stop(loops, NLOOPS);
	for (unsigned to = 0; to < NLOOPS; to++) {
		assert_int_equal(seen[to].wrong_order, 0);
		assert_int_equal(seen[to].wrong_thread, 0);
		for (unsigned s = 0; s < SENDERS; s++)
			assert_int_equal(seen[to].next[s], PER);
	}
	loops_free(loops, NLOOPS);
	assert_null(loop_self());
	event_base_free(base);
}

/* Calls to a stopped loop. */
static atomic_uint ran, dropped;
static pthread_mutex_t gate_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t gate_cv = PTHREAD_COND_INITIALIZER;
static int gate_in, gate_open;

/* Holds loop 1 until the test opens the gate, so that calls queue. */
static void
gate_run(void *arg)
{
	(void)arg;
	pthread_mutex_lock(&gate_mu);
	gate_in = 1;
	pthread_cond_broadcast(&gate_cv);
	while (!gate_open)
		pthread_cond_wait(&gate_cv, &gate_mu);
	pthread_mutex_unlock(&gate_mu);
}

static void
count_run(void *arg)
{
	atomic_fetch_add(&ran, 1);
	free(arg);
}

static void
count_drop(void *arg)
{
	atomic_fetch_add(&dropped, 1);
	free(arg);
}

static void
test_stopped_loop_drops(void **state)
{
	struct event_base *base = event_base_new();
	char err[256];
	struct loop *loops = loops_new(base, 2, NULL, err, sizeof(err));
	struct loop *l1;

	(void)state;
	assert_non_null(loops);
	l1 = &loops[1];
	assert_int_equal(loop_call(l1, gate_run, NULL, NULL), 0);
	pthread_mutex_lock(&gate_mu);
	while (!gate_in)
		pthread_cond_wait(&gate_cv, &gate_mu);
	pthread_mutex_unlock(&gate_mu);
	/* Before the stop: run.  Behind it: queued, then dropped. */
	for (int i = 0; i < 10; i++)
		assert_int_equal(loop_call(l1, count_run, malloc(64), count_drop), 0);
	loop_stop(l1);
	for (int i = 0; i < 10; i++)
		assert_int_equal(loop_call(l1, count_run, malloc(64), count_drop), 0);
	pthread_mutex_lock(&gate_mu);
	gate_open = 1;
	pthread_cond_broadcast(&gate_cv);
	pthread_mutex_unlock(&gate_mu);
	loops_stop(loops, 2);
	assert_int_equal(atomic_load(&ran), 10);
	assert_int_equal(atomic_load(&dropped), 10);
	/* After: dropped at once, on this thread. */
	for (int i = 0; i < 10; i++)
		assert_int_equal(loop_call(l1, count_run, malloc(64), count_drop), -1);
	assert_int_equal(atomic_load(&dropped), 20);
	/* Loop 0's inbox, closed by loops_free: what waits there is dropped. */
	assert_int_equal(loop_call(&loops[0], count_run, malloc(64), count_drop), 0);
	loops_free(loops, 2);
	assert_int_equal(atomic_load(&ran), 10);
	assert_int_equal(atomic_load(&dropped), 21);
	event_base_free(base);
}

/* Broadcasts. */
#define BLOOPS 4
static atomic_uint hits[BLOOPS], off_loop, done_calls;

static void
hit_run(void *arg)
{
	struct loop *l = loop_self();

	(void)arg;
	if (l == NULL || l->index >= BLOOPS)
		atomic_fetch_add(&off_loop, 1);
	else
		atomic_fetch_add(&hits[l->index], 1);
}

static void
hit_done(void *arg)
{
	atomic_fetch_add(&done_calls, 1);
	free(arg);
}

static void
test_broadcast_once(void **state)
{
	struct event_base *base = event_base_new();
	char err[256];
	struct loop *loops = loops_new(base, BLOOPS, NULL, err, sizeof(err));

	(void)state;
	assert_non_null(loops);
	assert_int_equal(loop_broadcast(loops, BLOOPS, hit_run, malloc(16),
	    hit_done), BLOOPS);
	/* Loop 0's part waits in its inbox: never inline. */
	assert_int_equal(atomic_load(&hits[0]), 0);
	assert_int_equal(event_base_loop(base, EVLOOP_ONCE), 0);
	assert_int_equal(atomic_load(&hits[0]), 1);
	loops_stop(loops, BLOOPS);
	for (unsigned i = 0; i < BLOOPS; i++)
		assert_int_equal(atomic_load(&hits[i]), 1);
	assert_int_equal(atomic_load(&off_loop), 0);
	assert_int_equal(atomic_load(&done_calls), 1);
	/* With 1..3 stopped only loop 0 runs it; done still runs once. */
	assert_int_equal(loop_broadcast(loops, BLOOPS, hit_run, malloc(16),
	    hit_done), 1);
	assert_int_equal(atomic_load(&done_calls), 1);
	assert_int_equal(event_base_loop(base, EVLOOP_ONCE), 0);
	assert_int_equal(atomic_load(&hits[0]), 2);
	for (unsigned i = 1; i < BLOOPS; i++)
		assert_int_equal(atomic_load(&hits[i]), 1);
	assert_int_equal(atomic_load(&done_calls), 2);
	loops_free(loops, BLOOPS);
	event_base_free(base);
}

/* Gathers: each loop fills its own row, done runs once on home. */
struct rows {
	unsigned row[BLOOPS];         /* row[i] written by loop i only */
	unsigned wrong_row;
	int done_on;                  /* home's index as done saw it, -1 */
};
static atomic_uint gathers_done, gathers_dropped;

static void
row_fill(void *arg)
{
	struct rows *r = arg;
	struct loop *l = loop_self();

	if (l == NULL || l->index >= BLOOPS)
		r->wrong_row++;
	else
		r->row[l->index] = l->index + 1;
}

static void
rows_done(void *arg)
{
	struct rows *r = arg;

	r->done_on = loop_self() != NULL ? (int)loop_self()->index : -2;
	atomic_fetch_add(&gathers_done, 1);
}

static void
rows_drop(void *arg)
{
	(void)arg;
	atomic_fetch_add(&gathers_dropped, 1);
}

/* Runs loop 0 until n gathers are done. */
static void
until_gathered(struct event_base *base, unsigned n)
{
	for (int i = 0; i < 100000 && atomic_load(&gathers_done) < n; i++)
		(void)event_base_loop(base, EVLOOP_NONBLOCK);
	assert_int_equal(atomic_load(&gathers_done), n);
}

static void
test_gather(void **state)
{
	struct event_base *base = event_base_new();
	char err[256];
	struct loop *loops = loops_new(base, BLOOPS, NULL, err, sizeof(err));
	struct rows a = { .done_on = -1 }, b = { .done_on = -1 }, c = { .done_on = -1 };

	(void)state;
	assert_non_null(loops);
	/* Home loop 0 (the caller's): never inline. */
	assert_int_equal(loop_gather(loops, BLOOPS, &loops[0], row_fill,
	    rows_done, rows_drop, &a), 0);
	assert_int_equal(a.row[0], 0);
	until_gathered(base, 1);
	assert_int_equal(a.done_on, 0);
	/* Home loop 2: done runs there, after every row. */
	assert_int_equal(loop_gather(loops, BLOOPS, &loops[2], row_fill,
	    rows_done, rows_drop, &b), 0);
	until_gathered(base, 2);
	loops_stop(loops, BLOOPS);    /* the joins order b's rows before reads */
	for (unsigned i = 0; i < BLOOPS; i++) {
		assert_int_equal(a.row[i], i + 1);
		assert_int_equal(b.row[i], i + 1);
	}
	assert_int_equal(b.done_on, 2);
	assert_int_equal(a.wrong_row + b.wrong_row, 0);
	/* Home stopped: loop 0 still fills, then drop, not done. */
	assert_int_equal(loop_gather(loops, BLOOPS, &loops[2], row_fill,
	    rows_done, rows_drop, &c), 0);
	(void)event_base_loop(base, EVLOOP_ONCE);
	assert_int_equal(c.row[0], 1);
	assert_int_equal(c.row[1], 0);
	assert_int_equal(atomic_load(&gathers_dropped), 1);
	assert_int_equal(atomic_load(&gathers_done), 2);
	assert_int_equal(c.done_on, -1);
	loops_free(loops, BLOOPS);
	event_base_free(base);
}

/* Audit lines on a loop of its own (1..n-1) are held to the end of its
 * pass, as loop 0's are (runtime_audit_per_pass): the gateway writes one
 * per proxied request, and a write(2) each was one syscall per request on
 * every loop but 0.  The loop's stop writes what it holds. */
struct audit_probe {
	const char *path;
	long size_between;   /* the file's size after the first line: held, 0 */
};

static long
file_size(const char *path)
{
	struct stat st;

	return stat(path, &st) == 0 ? (long)st.st_size : -1;
}

static void
audit_two(void *arg)
{
	struct audit_probe *p = arg;
	const struct log_field f[] = { KV_S("n", "first") };
	const struct log_field g[] = { KV_S("n", "second") };

	log_audit_kv("test", NULL, f, 1);
	p->size_between = file_size(p->path);
	log_audit_kv("test", NULL, g, 1);
}

static void
test_audit_held_per_pass(void **state)
{
	char path[] = "/tmp/tether-test-loop-audit.XXXXXX", err[256], buf[1024];
	struct audit_probe p = { .size_between = -1 };
	struct event_base *base = event_base_new();
	struct loop *loops;
	int fd = mkstemp(path);
	ssize_t n;

	(void)state;
	assert_true(fd >= 0);
	close(fd);
	p.path = path;
	assert_int_equal(log_set_audit_file(path, err, sizeof(err)), 0);
	assert_non_null(loops = loops_new(base, 2, NULL, err, sizeof(err)));
	assert_int_equal(loop_call(&loops[1], audit_two, &p, NULL), 0);
	loops_stop(loops, 2);        /* the join orders p's write before reads */
	assert_int_equal(p.size_between, 0);
	assert_int_equal(log_set_audit_file(NULL, err, sizeof(err)), 0);
	assert_true((fd = open(path, O_RDONLY)) >= 0);
	n = read(fd, buf, sizeof(buf) - 1);
	close(fd);
	assert_true(n > 0);
	buf[n] = '\0';
	assert_non_null(strstr(buf, "n=first"));
	assert_non_null(strstr(buf, "n=second"));
	assert_true(strstr(buf, "n=first") < strstr(buf, "n=second"));
	loops_free(loops, 2);
	event_base_free(base);
	unlink(path);
}

/* One message at a time to loop 1, each sent once the one before ran, so
 * each finds the inbox empty and needs a wake of its own. */
#define PINGS 2000
static pthread_mutex_t ping_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t ping_cv = PTHREAD_COND_INITIALIZER;
static unsigned pings_ran;

static void
ping_run(void *arg)
{
	(void)arg;
	pthread_mutex_lock(&ping_mu);
	pings_ran++;
	pthread_cond_broadcast(&ping_cv);
	pthread_mutex_unlock(&ping_mu);
}

static void
test_every_wake_taken_eventfd_never_read(void **state)
{
	struct event_base *base = event_base_new();
	char err[256];
	struct loop *loops = loops_new(base, 2, NULL, err, sizeof(err));
	uint64_t count = 0;
	struct timespec until;

	(void)state;
	assert_non_null(loops);
	for (unsigned i = 0; i < PINGS; i++) {
		assert_int_equal(loop_call(&loops[1], ping_run, NULL, NULL), 0);
		clock_gettime(CLOCK_REALTIME, &until);
		until.tv_sec += 10;
		pthread_mutex_lock(&ping_mu);
		/* A lost wake would leave it waiting here: failed at 10 s. */
		while (pings_ran <= i)
			assert_int_not_equal(pthread_cond_timedwait(&ping_cv,
			    &ping_mu, &until), ETIMEDOUT);
		pthread_mutex_unlock(&ping_mu);
	}
	loops_stop(loops, 2);
	assert_int_equal(pings_ran, PINGS);
	/* A ping wrote the eventfd when it found loop 1 asleep (the first one
	 * did), none when loop 1 was still in the pass that ran the last one,
	 * and no wake read it back: the counter holds the wakes (and the
	 * stop's, if it found loop 1 asleep). */
	assert_int_equal(read(loops[1].efd, &count, sizeof(count)),
	    (ssize_t)sizeof(count));
	assert_true(count >= 1 && count <= PINGS + 1);
	loops_free(loops, 2);
	event_base_free(base);
}

/* The eventfd writes made to l since the last look (its counter, read and
 * so reset; never read by the loop itself). */
static uint64_t
wakes(const struct loop *l)
{
	uint64_t count = 0;

	if (read(l->efd, &count, sizeof(count)) != (ssize_t)sizeof(count)) {
		assert_int_equal(errno, EAGAIN);     /* nonblocking: 0 */
		return 0;
	}
	return count;
}

/* Whether l is asleep: its next call will wake it (the wake rule). */
static int
asleep(struct loop *l)
{
	int awake;

	pthread_mutex_lock(&l->mu);
	awake = l->awake;
	pthread_mutex_unlock(&l->mu);
	return !awake;
}

static void
wait_pings(unsigned n)
{
	struct timespec until;

	clock_gettime(CLOCK_REALTIME, &until);
	until.tv_sec += 10;
	pthread_mutex_lock(&ping_mu);
	while (pings_ran < n)
		assert_int_not_equal(pthread_cond_timedwait(&ping_cv, &ping_mu,
		    &until), ETIMEDOUT);
	pthread_mutex_unlock(&ping_mu);
}

/* A call of loop 0 to itself (test_wake_rule): own_caller, a callback of
 * loop 0's pass, writes a byte its next poll will see (own_read) and
 * calls own_run, which notes whether that poll came first. */
static int own_pipe[2], polled, own_saw_poll, own_ran;

static void
own_read(evutil_socket_t fd, short what, void *arg)
{
	char c;

	(void)what;
	(void)arg;
	if (read(fd, &c, 1) == 1)
		polled = 1;
}

static void
own_run(void *arg)
{
	(void)arg;
	own_saw_poll = polled;
	own_ran = 1;
}

static void
own_caller(evutil_socket_t fd, short what, void *arg)
{
	(void)fd;
	(void)what;
	assert_int_equal(write(own_pipe[1], "x", 1), 1);
	assert_int_equal(loop_call(arg, own_run, NULL, NULL), 0);
	assert_int_equal(own_ran, 0);                   /* never inline */
}

static void
test_wake_rule(void **state)
{
	struct event_base *base = event_base_new();
	char err[256];
	struct loop *loops = loops_new(base, 2, NULL, err, sizeof(err));
	struct loop *l1;
	struct timespec until, now;
	struct event *rd, *caller;

	(void)state;
	assert_non_null(loops);
	l1 = &loops[1];
	pthread_mutex_lock(&ping_mu);
	pings_ran = 0;
	pthread_mutex_unlock(&ping_mu);
	gate_in = gate_open = 0;
	/* A new loop sleeps: the first call wakes it, one eventfd write. */
	assert_true(asleep(l1));
	assert_int_equal(wakes(l1), 0);
	assert_int_equal(loop_call(l1, gate_run, NULL, NULL), 0);
	pthread_mutex_lock(&gate_mu);
	while (!gate_in)
		pthread_cond_wait(&gate_cv, &gate_mu);
	pthread_mutex_unlock(&gate_mu);
	assert_int_equal(wakes(l1), 1);
	/* Loop 1 is in its pass (held in gate_run): calls only queue. */
	for (unsigned i = 0; i < 10; i++)
		assert_int_equal(loop_call(l1, ping_run, NULL, NULL), 0);
	assert_int_equal(wakes(l1), 0);
	pthread_mutex_lock(&gate_mu);
	gate_open = 1;
	pthread_cond_broadcast(&gate_cv);
	pthread_mutex_unlock(&gate_mu);
	/* They run at that pass's end, with no wake of their own. */
	wait_pings(10);
	/* Its pass over, it sleeps: the end-of-pass take found nothing. */
	clock_gettime(CLOCK_MONOTONIC, &until);
	until.tv_sec += 10;
	while (!asleep(l1)) {
		clock_gettime(CLOCK_MONOTONIC, &now);
		assert_true(now.tv_sec < until.tv_sec ||
		    (now.tv_sec == until.tv_sec && now.tv_nsec < until.tv_nsec));
		sched_yield();
	}
	assert_int_equal(wakes(l1), 0);
	/* Asleep: a call wakes it again. */
	assert_int_equal(loop_call(l1, ping_run, NULL, NULL), 0);
	wait_pings(11);
	assert_int_equal(wakes(l1), 1);
	/* A call from loop 0's own thread (this one), from a callback of its
	 * pass: no eventfd write, and it runs on a later pass, after the
	 * loop's next poll: the byte written to the pipe before the call is
	 * read first. */
	assert_int_equal(pipe(own_pipe), 0);
	polled = own_saw_poll = 0;
	rd = event_new(base, own_pipe[0], EV_READ | EV_PERSIST, own_read, NULL);
	caller = event_new(base, -1, 0, own_caller, &loops[0]);
	assert_non_null(rd);
	assert_non_null(caller);
	assert_int_equal(event_add(rd, NULL), 0);
	event_active(caller, EV_TIMEOUT, 0);
	while (!own_ran)
		assert_int_not_equal(event_base_loop(base, EVLOOP_ONCE), -1);
	assert_true(own_saw_poll);
	assert_int_equal(wakes(&loops[0]), 0);
	assert_true(asleep(&loops[0]));
	event_free(caller);
	event_free(rd);
	close(own_pipe[0]);
	close(own_pipe[1]);
	loops_stop(loops, 2);
	loops_free(loops, 2);
	event_base_free(base);
}

/* A sender that keeps posting (test_takes_bounded): each chain_run, on
 * loop 0, has the poster thread send the next one and waits until it is
 * in the inbox, so a take always finds one more; the first also writes a
 * byte to a pipe, which loop 0's next poll sees (chain_read). */
#define CHAIN_MAX 100
static pthread_mutex_t chain_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t chain_cv = PTHREAD_COND_INITIALIZER;
static int chain_pipe[2], chain_ask, chain_quit;
static unsigned chain_runs, chain_runs_at_poll;
static struct loop *chain_to;

static void chain_run(void *arg);

static void *
chain_poster(void *arg)
{
	(void)arg;
	pthread_mutex_lock(&chain_mu);
	for (;;) {
		while (!chain_ask && !chain_quit)
			pthread_cond_wait(&chain_cv, &chain_mu);
		if (chain_quit)
			break;
		assert_int_equal(loop_call(chain_to, chain_run, NULL, NULL), 0);
		chain_ask = 0;
		pthread_cond_broadcast(&chain_cv);
	}
	pthread_mutex_unlock(&chain_mu);
	return NULL;
}

/* Has the poster send one more chain_run and waits until it is sent. */
static void
chain_next(void)
{
	pthread_mutex_lock(&chain_mu);
	chain_ask = 1;
	pthread_cond_broadcast(&chain_cv);
	while (chain_ask)
		pthread_cond_wait(&chain_cv, &chain_mu);
	pthread_mutex_unlock(&chain_mu);
}

static void
chain_run(void *arg)
{
	(void)arg;
	if (++chain_runs == 1)
		assert_int_equal(write(chain_pipe[1], "x", 1), 1);
	if (chain_runs < CHAIN_MAX)
		chain_next();
}

static void
chain_read(evutil_socket_t fd, short what, void *arg)
{
	char c;

	(void)what;
	(void)arg;
	if (read(fd, &c, 1) == 1 && chain_runs_at_poll == 0)
		chain_runs_at_poll = chain_runs;
}

static void
test_takes_bounded(void **state)
{
	struct event_base *base = event_base_new();
	char err[256];
	struct loop *loops = loops_new(base, 2, NULL, err, sizeof(err));
	struct event *rd;
	pthread_t poster;

	(void)state;
	assert_non_null(loops);
	assert_int_equal(pipe(chain_pipe), 0);
	chain_to = &loops[0];
	chain_runs = chain_runs_at_poll = 0;
	chain_ask = chain_quit = 0;
	rd = event_new(base, chain_pipe[0], EV_READ | EV_PERSIST, chain_read, NULL);
	assert_non_null(rd);
	assert_int_equal(event_add(rd, NULL), 0);
	assert_int_equal(pthread_create(&poster, NULL, chain_poster, NULL), 0);
	chain_next();                  /* the first: a wake of loop 0 */
	while (chain_runs < CHAIN_MAX || chain_runs_at_poll == 0)
		assert_int_not_equal(event_base_loop(base, EVLOOP_ONCE), -1);
	/* The byte came with the first run; the pipe was polled within the
	 * takes' bound (8), not after the chain ended (CHAIN_MAX). */
	assert_true(chain_runs_at_poll >= 1);
	assert_true(chain_runs_at_poll <= 9);
	pthread_mutex_lock(&chain_mu);
	chain_quit = 1;
	pthread_cond_broadcast(&chain_cv);
	pthread_mutex_unlock(&chain_mu);
	assert_int_equal(pthread_join(poster, NULL), 0);
	event_free(rd);
	close(chain_pipe[0]);
	close(chain_pipe[1]);
	loops_stop(loops, 2);
	loops_free(loops, 2);
	event_base_free(base);
}

/* A caller still writing the eventfd of a loop whose message already ran
 * (loop_call writes after its unlock): loops_free waits for it before it
 * closes the eventfd and frees the loops (ASan and TSan see the race if
 * it does not). */
#define FREE_ROUNDS 200
static pthread_mutex_t fr_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t fr_cv = PTHREAD_COND_INITIALIZER;
static int fr_ran;

static void
fr_run(void *arg)
{
	(void)arg;
	pthread_mutex_lock(&fr_mu);
	fr_ran = 1;
	pthread_cond_broadcast(&fr_cv);
	pthread_mutex_unlock(&fr_mu);
}

static void *
fr_send(void *arg)
{
	assert_int_equal(loop_call(arg, fr_run, NULL, NULL), 0);
	return NULL;
}

static void
test_free_waits_for_writer(void **state)
{
	char err[256];

	(void)state;
	for (int round = 0; round < FREE_ROUNDS; round++) {
		struct event_base *base = event_base_new();
		struct loop *loops = loops_new(base, 2, NULL, err, sizeof(err));
		pthread_t th;

		assert_non_null(loops);
		fr_ran = 0;
		/* Loop 1 is new, asleep: this call writes its eventfd. */
		assert_int_equal(pthread_create(&th, NULL, fr_send, &loops[1]), 0);
		pthread_mutex_lock(&fr_mu);
		while (!fr_ran)
			pthread_cond_wait(&fr_cv, &fr_mu);
		pthread_mutex_unlock(&fr_mu);
		/* The message ran; the caller may not have written yet. */
		loops_free(loops, 2);
		event_base_free(base);
		pthread_join(th, NULL);
	}
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_order_per_sender),
		cmocka_unit_test(test_stopped_loop_drops),
		cmocka_unit_test(test_broadcast_once),
		cmocka_unit_test(test_gather),
		cmocka_unit_test(test_audit_held_per_pass),
		cmocka_unit_test(test_every_wake_taken_eventfd_never_read),
		cmocka_unit_test(test_wake_rule),
		cmocka_unit_test(test_free_waits_for_writer),
		cmocka_unit_test(test_takes_bounded),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
