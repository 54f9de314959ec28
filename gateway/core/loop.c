/*
 * loop.c: the gateway's event loops and their inboxes (see loop.h).  Each
 * event_base is used by its own thread only (made by loop 0's thread
 * before the loop's thread starts), so libevent needs no locking of its
 * own; an inbox's list and awake flag are the one thing two threads touch,
 * under its mutex (and the eventfd, written by any thread).
 *
 * The wake rule (calls from other threads; a loop's calls to itself go
 * to its own list, below).  A loop is awake (l->awake, under l->mu) from
 * the call that finds it asleep until a take finds its list empty.  A
 * call that finds it asleep sets awake and then wakes it, an eventfd
 * write; a call that finds it awake only queues.  A take is inbox_take, under l->mu: it takes
 * the list whole, and clears awake when it finds the list empty; the
 * loop's wake (the eventfd's event) and its pass event both run
 * inbox_pass, which, having taken a message, schedules l->pass before it
 * runs the list.  Activated (event_active), l->pass goes to the tail of
 * the loop's active queue (one priority: the gateway sets none), and
 * libevent 2.1 runs that queue until it is empty, so the take runs again
 * after the callbacks this pass already has, in this same pass, before
 * any poll.  So that a sender that keeps posting cannot keep the loop
 * from its sockets, only PASS_TAKES_MAX takes in a row go that way; the
 * next is a zero timeout instead (evtimer_add of l->pass), which libevent
 * runs after its next dispatch, whose poll does not block while the
 * timeout is pending: the sockets are polled, then the take comes.
 * No call is left waiting:
 *   INV: whenever l->mu is free and the list holds a message, awake is 1
 *   and a take will come before l's thread blocks in epoll_wait.
 * A call appends under l->mu.  If it found awake 0 the list was empty
 * (INV: awake 0 means empty), it sets awake and, after unlocking, writes
 * the eventfd: the edge is reported by an epoll_wait after the write,
 * which l cannot block in past it, and inbox_pass takes after that.  If
 * it found awake 1, INV held
 * before the call: a take comes, and since it takes under the same mutex
 * after this append (or took it already), it takes this message too.  A
 * take either finds messages (then inbox_pass schedules l->pass before
 * returning to libevent: the next take comes before l blocks, and INV
 * holds for whatever arrives meanwhile) or finds the list empty and
 * clears awake under l->mu: then nothing waits, and the next call finds
 * awake 0 and wakes l itself.  An eventfd write that lands after its
 * message was taken by a pass only wakes l for an empty take.  A closed
 * inbox takes no message (calls drop at once).
 * Cost: a loop that a wake found busy takes once more at its pass's end
 * (a lock, no system call); every call into it until then is a lock and a
 * malloc; a sender that keeps posting costs the loop a non-blocking poll
 * every PASS_TAKES_MAX takes.
 *
 * A loop's calls to itself.  They must run on a later pass (loop.h): loop
 * 0's base makes its epoll changes at its next dispatch (a changelist),
 * and server.c sends a socket on to another loop from a self-call only
 * once they are made (adopt_send).  The pass event may run later in this
 * very pass, so they do not go to the shared list: they go to the loop's
 * own (own_head, its thread's only, no lock) and a zero timeout
 * (l->later) runs it: libevent runs timeouts after the dispatch that
 * follows (its poll then does not block), never in the pass that added
 * them.
 */
#include "loop.h"

#include <errno.h>
#include <sched.h>
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


/* Takes of an inbox in one libevent pass before the sockets are polled
 * (the wake rule atop). */
#define PASS_TAKES_MAX 8

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

/* A call from l's own thread (atop, a loop's calls to itself): on its own
 * list, run by the zero timeout after its next dispatch.  closed is
 * written on this thread (inbox_close) or after it ended. */
static int
call_own(struct loop *l, struct loop_msg *m)
{
	static const struct timeval now = { 0, 0 };

	if (l->closed) {
		msg_drop(m);
		return -1;
	}
	if (l->own_head == NULL)
		l->own_head = m;
	else
		l->own_tail->next = m;
	l->own_tail = m;
	if (!evtimer_pending(l->later, NULL))
		(void)evtimer_add(l->later, &now);
	return 0;
}

int
loop_call(struct loop *to, void (*fn)(void *arg), void *arg,
    void (*drop)(void *arg))
{
	struct loop_msg *m = malloc(sizeof(*m));
	int wake = 0;

	if (m == NULL) {
		warn("loop inbox: out of memory: a call is dropped",
		    KV_U("loop", to->index));
		if (drop != NULL)
			drop(arg);
		return -1;
	}
	*m = (struct loop_msg){ .fn = fn, .arg = arg, .drop = drop };
	if (to == self)
		return call_own(to, m);
	pthread_mutex_lock(&to->mu);
	if (to->closed) {
		pthread_mutex_unlock(&to->mu);
		msg_drop(m);
		return -1;
	}
	if (to->head == NULL)
		to->head = m;
	else
		to->tail->next = m;
	to->tail = m;
	/* The wake rule (atop): asleep, so this call wakes it. */
	if (!to->awake) {
		to->awake = 1;
		wake = 1;
		atomic_fetch_add_explicit(&to->signalling, 1,
		    memory_order_relaxed);
	}
	pthread_mutex_unlock(&to->mu);
	if (!wake)
		return 0;
	/* Written after the unlock, so that the woken loop does not wait for
	 * this thread's mutex; signalling tells loops_free that the eventfd
	 * is still to be written (the message may run, and the test or
	 * gateway free the loops, before the write). */
	efd_signal(to->efd);
	atomic_fetch_sub_explicit(&to->signalling, 1, memory_order_release);
	return 0;
}

/* Takes the waiting list whole (NULL when empty: then the loop is asleep,
 * the next call wakes it; the wake rule atop). */
static struct loop_msg *
inbox_take(struct loop *l)
{
	struct loop_msg *list;

	pthread_mutex_lock(&l->mu);
	list = l->head;
	l->head = l->tail = NULL;
	if (list == NULL)
		l->awake = 0;
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

/* The inbox's eventfd (a wake) and its pass event (the take at a pass's
 * end): runs what was sent since the last take; having taken something,
 * takes again at the end of this pass (the wake rule atop).  The eventfd
 * is watched edge-triggered and never read: each write makes epoll report
 * it again, readable or not, so a wake costs the sender's write only (its
 * counter, +1 per wake, would take 2^64 wakes to fill). */
static void
inbox_pass(evutil_socket_t fd, short what, void *arg)
{
	static const struct timeval now = { 0, 0 };
	struct loop *l = arg;
	struct loop_msg *list;

	(void)fd;
	(void)what;
	if ((list = inbox_take(l)) == NULL) {
		l->takes = 0;
		return;
	}
	/* Before running the list: what others send meanwhile is taken by
	 * this pass's end, or (PASS_TAKES_MAX in a row) once the next
	 * dispatch has polled the sockets. */
	if (++l->takes < PASS_TAKES_MAX)
		event_active(l->pass, EV_TIMEOUT, 0);
	else {
		l->takes = 0;
		(void)evtimer_add(l->pass, &now);
	}
	(void)inbox_run(l, list);
}

/* Takes l's own list whole (its calls to itself); on l's thread, or
 * after it ended. */
static struct loop_msg *
own_take(struct loop *l)
{
	struct loop_msg *list = l->own_head;

	l->own_head = l->own_tail = NULL;
	return list;
}

/* The zero timeout after a call to itself: runs l's own list. */
static void
own_pass(evutil_socket_t fd, short what, void *arg)
{
	struct loop *l = arg;

	(void)fd;
	(void)what;
	(void)inbox_run(l, own_take(l));
}

/* Closes l's inbox (later calls drop at once) and drops what waits, its
 * own list's too.  On l's thread, or after it ended. */
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
	(void)inbox_run(l, own_take(l));
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

void
loop_counts_put(struct loop *conns, struct loop *tunnel)
{
	if (conns != NULL)
		atomic_fetch_sub_explicit(&conns->nconns, 1, memory_order_relaxed);
	if (tunnel != NULL)
		atomic_fetch_sub_explicit(&tunnel->tunnel_side, 1,
		    memory_order_relaxed);
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
	    inbox_pass, l)) == NULL || event_add(l->wake, NULL) != 0 ||
	    (l->pass = event_new(base, -1, 0, inbox_pass, l)) == NULL ||
	    (l->later = evtimer_new(base, own_pass, l)) == NULL)
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
	/* What they sent back before returning, and loop 0's own calls. */
	while (inbox_run(&loops[0], inbox_take(&loops[0])) +
	    inbox_run(&loops[0], own_take(&loops[0])) > 0)
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
		/* A caller that woke it before the close may still be writing
		 * its eventfd (loop_call): one write(2) at most. */
		while (atomic_load_explicit(&l->signalling,
		    memory_order_acquire) != 0)
			sched_yield();
		if (l->wake != NULL)
			event_free(l->wake);
		if (l->pass != NULL)
			event_free(l->pass);
		if (l->later != NULL)
			event_free(l->later);
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
