/*
 * loop.c: the gateway's event loops and their inboxes (see loop.h).  Each
 * event_base is used by its own thread only (made by loop 0's thread
 * before the loop's thread starts), so libevent needs no locking of its
 * own; an inbox's list is the one thing two threads touch, under its mutex.
 */
#include "loop.h"

#include <errno.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <time.h>
#include <unistd.h>

#include <event2/event.h>

#include "gateway.h"
#include "log.h"
#include "runtime.h"

/* One call waiting in an inbox: the receiver's once queued. */
struct loop_msg {
	void (*fn)(void *arg);
	void *arg;
	void (*drop)(void *arg);
	struct loop_msg *next;
};

/* A broadcast's shared part: done runs when left reaches 0. */
struct loop_bcast {
	void (*fn)(void *arg);
	void *arg;
	void (*done)(void *arg);
	atomic_uint left;
};

static _Thread_local struct loop *self;

struct loop *
loop_self(void)
{
	return self;
}

struct loop *
loop_here(const struct gateway *gw)
{
	return self != NULL && gw != NULL && self->gw == gw ? self : NULL;
}

struct event_base *
loop_base_here(struct gateway *gw)
{
	struct loop *l = loop_here(gw);

	return l != NULL ? l->base : gw->base;
}

static void
efd_signal(int fd)
{
	uint64_t one = 1;

	/* Fails only if the counter would overflow: it is woken anyway. */
	if (write(fd, &one, sizeof(one)) < 0 && errno != EAGAIN)
		warn("loop inbox: eventfd write failed", KV_S("err", strerror(errno)));
}

/* A message that will not run: its drop frees the arg. */
static void
msg_drop(struct loop_msg *m)
{
	if (m->drop != NULL)
		m->drop(m->arg);
	free(m);
}

int
loop_call(struct loop *to, void (*fn)(void *arg), void *arg,
    void (*drop)(void *arg))
{
	struct loop_msg *m = malloc(sizeof(*m));
	int was_empty;

	if (m == NULL) {
		warn("loop inbox: out of memory: a call is dropped",
		    KV_U("loop", to->index));
		if (drop != NULL)
			drop(arg);
		return -1;
	}
	*m = (struct loop_msg){ .fn = fn, .arg = arg, .drop = drop };
	pthread_mutex_lock(&to->mu);
	if (to->closed) {
		pthread_mutex_unlock(&to->mu);
		msg_drop(m);
		return -1;
	}
	was_empty = to->head == NULL;
	if (was_empty)
		to->head = m;
	else
		to->tail->next = m;
	to->tail = m;
	/* Signalled under the lock: once inbox_close has taken it, no caller
	 * is still about to write, so loops_free may close the eventfd and
	 * free the loop (signalled after the unlock, the loop could run the
	 * message, and the test or gateway free it, before the write). */
	if (was_empty)
		efd_signal(to->efd);
	pthread_mutex_unlock(&to->mu);
	return 0;
}

/* Takes the waiting list whole (NULL when empty). */
static struct loop_msg *
inbox_take(struct loop *l)
{
	struct loop_msg *list;

	pthread_mutex_lock(&l->mu);
	list = l->head;
	l->head = l->tail = NULL;
	pthread_mutex_unlock(&l->mu);
	return list;
}

/* Runs a taken list in order, on l's thread; once l closed (a stop in the
 * list), the rest is dropped.  Returns how many messages it took. */
static size_t
inbox_run(struct loop *l, struct loop_msg *list)
{
	struct loop_msg *m;
	size_t n = 0;

	for (; (m = list) != NULL; n++) {
		list = m->next;
		/* Set on l's thread, or after it was joined: no lock to read. */
		if (l->closed) {
			msg_drop(m);
			continue;
		}
		m->fn(m->arg);
		free(m);
	}
	return n;
}

/* The inbox's eventfd: runs what was sent since the last wake.  The
 * eventfd is watched edge-triggered and never read: each write makes epoll
 * report it again, readable or not, so a wake costs the sender's write
 * only (its counter, +1 per wake, would take 2^64 wakes to fill). */
static void
inbox_wake(evutil_socket_t fd, short what, void *arg)
{
	struct loop *l = arg;

	(void)fd;
	(void)what;
	(void)inbox_run(l, inbox_take(l));
}

/* Closes l's inbox (later calls drop at once) and drops what waits. */
static void
inbox_close(struct loop *l)
{
	struct loop_msg *list;

	pthread_mutex_lock(&l->mu);
	l->closed = 1;
	list = l->head;
	l->head = l->tail = NULL;
	pthread_mutex_unlock(&l->mu);
	(void)inbox_run(l, list);
}

/* The stop message, on l's thread: what came after it is dropped. */
static void
loop_stop_here(void *arg)
{
	struct loop *l = arg;

	inbox_close(l);
	event_base_loopbreak(l->base);
}

void
loop_stop(struct loop *l)
{
	(void)loop_call(l, loop_stop_here, l, NULL);
}

static void
bcast_end(struct loop_bcast *b)
{
	if (atomic_fetch_sub(&b->left, 1) != 1)
		return;
	if (b->done != NULL)
		b->done(b->arg);
	free(b);
}

static void
bcast_run(void *arg)
{
	struct loop_bcast *b = arg;

	b->fn(b->arg);
	bcast_end(b);
}

static void
bcast_drop(void *arg)
{
	bcast_end(arg);
}

unsigned
loop_broadcast(struct loop *loops, unsigned n, void (*fn)(void *arg),
    void *arg, void (*done)(void *arg))
{
	struct loop_bcast *b = malloc(sizeof(*b));
	unsigned ran = 0;

	if (b == NULL) {
		warn("loop inbox: out of memory: a broadcast is dropped");
		if (done != NULL)
			done(arg);
		return 0;
	}
	*b = (struct loop_bcast){ .fn = fn, .arg = arg, .done = done };
	/* One more than the loops, so that done cannot run before the last
	 * call is made; given back below. */
	atomic_init(&b->left, n + 1);
	for (unsigned i = 0; i < n; i++)
		if (loop_call(&loops[i], bcast_run, b, bcast_drop) == 0)
			ran++;
	bcast_end(b);
	return ran;
}

/* A gather: a broadcast whose end goes home. */
struct loop_gather {
	void (*fill)(void *arg);
	void (*done)(void *arg);
	void (*drop)(void *arg);
	void *arg;
	struct loop *home;
};

static void
gather_done(void *p)
{
	struct loop_gather *g = p;

	g->done(g->arg);
	free(g);
}

static void
gather_drop(void *p)
{
	struct loop_gather *g = p;

	if (g->drop != NULL)
		g->drop(g->arg);
	free(g);
}

static void
gather_fill(void *p)
{
	struct loop_gather *g = p;

	g->fill(g->arg);
}

/* Every loop ran its fill or dropped it: the answer goes home. */
static void
gather_end(void *p)
{
	struct loop_gather *g = p;

	(void)loop_call(g->home, gather_done, g, gather_drop);
}

int
loop_gather(struct loop *loops, unsigned n, struct loop *home,
    void (*fill)(void *arg), void (*done)(void *arg), void (*drop)(void *arg),
    void *arg)
{
	struct loop_gather *g = malloc(sizeof(*g));

	if (g == NULL) {
		warn("loop inbox: out of memory: a gather is dropped");
		if (drop != NULL)
			drop(arg);
		return -1;
	}
	*g = (struct loop_gather){ .fill = fill, .done = done, .drop = drop,
	    .arg = arg, .home = home };
	(void)loop_broadcast(loops, n, gather_fill, g, gather_end);
	return 0;
}

double
loop_cpu_seconds(const struct loop *l)
{
	clockid_t cid;
	struct timespec ts;

	if (l == NULL || (l->index > 0 && !l->started) ||
	    pthread_getcpuclockid(l->thread, &cid) != 0 ||
	    clock_gettime(cid, &ts) != 0)
		return 0;
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* A loop's thread (1..n-1): its base until a stop message breaks it. */
static void *
loop_main(void *arg)
{
	struct loop *l = arg;

	self = l;
	debug("loop running", KV_U("loop", l->index));
	/* An audit line per proxied request: a pass's lines leave together,
	 * as loop 0's do (gateway/main.c). */
	if (runtime_audit_per_pass(l->base) != 0)
		warn("audit lines leave one write each (out of memory)",
		    KV_U("loop", l->index));
	event_base_dispatch(l->base);
	/* Stopped: what its last callbacks deferred (the frees of the
	 * connections it closed, docs/0015) runs on this thread before it
	 * returns (docs/0040 section 4, stop step 3). */
	runtime_drain(l->base);
	/* Every held audit line is written before the thread goes. */
	(void)runtime_audit_per_pass(NULL);
	return NULL;
}

/* Makes l's inbox (and, for 1..n-1, its base); not its thread. */
static int
loop_init(struct loop *l, unsigned index, struct event_base *base,
    struct gateway *gw)
{
	l->index = index;
	l->gw = gw;
	l->efd = -1;
	pthread_mutex_init(&l->mu, NULL);
	if (base == NULL) {
		l->owns_base = 1;
		if ((base = event_base_new()) == NULL)
			return -1;
	}
	l->base = base;
	if ((l->efd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC)) == -1 ||
	    (l->wake = event_new(base, l->efd, EV_READ | EV_PERSIST | EV_ET,
	    inbox_wake, l)) == NULL || event_add(l->wake, NULL) != 0)
		return -1;
	return 0;
}

/* Starts loops 1..n-1's threads, signals blocked in them.  Returns how
 * many of the n loops have a base and run; err says why one did not. */
static unsigned
loops_start(struct loop *loops, unsigned n, struct gateway *gw, char *err,
    size_t errlen)
{
	sigset_t all, old;
	unsigned i;
	int rc;

	sigfillset(&all);
	pthread_sigmask(SIG_SETMASK, &all, &old);
	for (i = 1; i < n; i++) {
		struct loop *l = &loops[i];

		if (loop_init(l, i, NULL, gw) != 0) {
			snprintf(err, errlen, "cannot make loop %u: %s", i,
			    strerror(errno));
			i++;               /* its parts are freed with the rest */
			break;
		}
		if ((rc = pthread_create(&l->thread, NULL, loop_main, l)) != 0) {
			snprintf(err, errlen, "cannot start loop %u: %s", i,
			    strerror(rc));
			i++;
			break;
		}
		l->started = 1;
	}
	pthread_sigmask(SIG_SETMASK, &old, NULL);
	return i;
}

struct loop *
loops_new(struct event_base *home, unsigned n, struct gateway *gw, char *err,
    size_t errlen)
{
	struct loop *loops = calloc(n > 0 ? n : 1, sizeof(*loops));
	unsigned made;

	if (loops == NULL) {
		snprintf(err, errlen, "out of memory");
		return NULL;
	}
	if (loop_init(&loops[0], 0, home, gw) != 0) {
		snprintf(err, errlen, "cannot watch loop 0's inbox: %s",
		    strerror(errno));
		loops_free(loops, 1);
		return NULL;
	}
	loops[0].thread = pthread_self();
	self = &loops[0];
	made = loops_start(loops, n, gw, err, errlen);
	if (made < n || (n > 1 && !loops[n - 1].started)) {
		loops_free(loops, made);
		return NULL;
	}
	return loops;
}

/* Stops loops 1..n-1 and joins their threads (those still running). */
static void
loops_join(struct loop *loops, unsigned n)
{
	for (unsigned i = 1; i < n; i++)
		if (loops[i].started)
			loop_stop(&loops[i]);
	for (unsigned i = 1; i < n; i++) {
		if (!loops[i].started)
			continue;
		pthread_join(loops[i].thread, NULL);
		loops[i].started = 0;
		inbox_close(&loops[i]);    /* closed already: a no-op but sure */
	}
}

void
loops_stop(struct loop *loops, unsigned n)
{
	if (loops == NULL)
		return;
	loops_join(loops, n);
	/* What they sent back before returning. */
	while (inbox_run(&loops[0], inbox_take(&loops[0])) > 0)
		;
}

void
loops_free(struct loop *loops, unsigned n)
{
	if (loops == NULL)
		return;
	loops_join(loops, n);
	for (unsigned i = 0; i < n; i++) {
		struct loop *l = &loops[i];

		inbox_close(l);
		if (l->wake != NULL)
			event_free(l->wake);
		if (l->owns_base && l->base != NULL)
			event_base_free(l->base);
		if (l->efd >= 0)
			close(l->efd);
		pthread_mutex_destroy(&l->mu);
	}
	for (unsigned i = 0; i < n; i++)
		if (self == &loops[i])
			self = NULL;
	free(loops);
}
