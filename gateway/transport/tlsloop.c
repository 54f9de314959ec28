/*
 * tlsloop.c: TLS handshakes on the handshake loops (see tlsloop.h).  Each
 * handshake loop keeps the jobs it drives in a list of its own (touched
 * on its thread only); a job arrives and leaves as an inbox message
 * (core/loop.h), so nothing here takes a lock of its own.
 */
#include "tlsloop.h"

#include <stdio.h>
#include <stdlib.h>

#include <event2/event.h>
#include <openssl/err.h>

#include "log.h"
#include "loop.h"
#include "runtime.h"

/* A handshake loop's part: its running jobs (its thread's only). */
struct tlsloop_worker {
	struct tlsloops *set;
	struct loop *loop;
	struct tlsloop_job *running;
	int stopped;                  /* tlsloops_stop ran here: no new job */
};

struct tlsloops {
	unsigned n;                   /* handshake loops */
	struct loop *home;            /* loop 0: where jobs go back */
	struct tlsloop_worker *w;     /* [n]: w[i - 1] is loop i's */
	void (*done)(struct tlsloop_job *, void *);
	void *arg;
};

/* On home's thread: the server takes the job back. */
static void
job_back(void *arg)
{
	struct tlsloop_job *j = arg;
	struct tlsloops *t = j->worker->set;

	j->next = j->prev = NULL;
	j->worker = NULL;
	t->done(j, t->arg);
}

/* The job ends: it goes back to the home loop, whichever thread ends it
 * (its handshake loop's, or the caller's of a call its loop dropped).  The
 * home loop outlives the handshake loops (loops_stop), so the call back is
 * never dropped: job_back is its drop too, run then on home's thread. */
static void
job_end(struct tlsloop_job *j, enum tlsloop_result result)
{
	ERR_clear_error();
	j->result = result;
	j->loop = j->worker->loop->index;
	(void)loop_call(j->worker->set->home, job_back, j, job_back);
}

/* The job leaves its loop's running list and goes back (loop's thread). */
static void
job_finish(struct tlsloop_worker *w, struct tlsloop_job *j,
    enum tlsloop_result result)
{
	if (j->ev != NULL)
		event_free(j->ev);
	j->ev = NULL;
	if (j->prev != NULL)
		j->prev->next = j->next;
	else
		w->running = j->next;
	if (j->next != NULL)
		j->next->prev = j->prev;
	j->next = j->prev = NULL;
	job_end(j, result);
}

static void job_cb(evutil_socket_t fd, short what, void *arg);

/* Waits for what the handshake needs, until the deadline that applies:
 * the ClientHello's while none came, else the whole handshake's. */
static void
job_wait(struct tlsloop_worker *w, struct tlsloop_job *j, short what)
{
	int64_t limit = SSL_get_state(j->ssl) == TLS_ST_BEFORE ? j->hello_ms :
	    j->handshake_ms;
	int64_t left = j->since_ms + limit - runtime_monotonic_ms();
	struct timeval tv = runtime_ms_timeval(left > 0 ? (uint32_t)left : 0);

	if (event_assign(j->ev, w->loop->base, j->fd, what, job_cb, j) != 0 ||
	    event_add(j->ev, &tv) != 0)
		job_finish(w, j, TLSLOOP_FAILED);
}

/* One step of the handshake: done, failed, or waiting again. */
static void
job_step(struct tlsloop_worker *w, struct tlsloop_job *j)
{
	int r = SSL_do_handshake(j->ssl);

	if (r == 1) {
		job_finish(w, j, TLSLOOP_OK);
		return;
	}
	switch (SSL_get_error(j->ssl, r)) {
	case SSL_ERROR_WANT_READ:
		job_wait(w, j, EV_READ);
		break;
	case SSL_ERROR_WANT_WRITE:
		job_wait(w, j, EV_WRITE);
		break;
	default:
		job_finish(w, j, TLSLOOP_FAILED);
		break;
	}
}

static void
job_cb(evutil_socket_t fd, short what, void *arg)
{
	struct tlsloop_job *j = arg;
	struct tlsloop_worker *w = j->worker;
	int64_t held = runtime_monotonic_ms() - j->since_ms;

	(void)fd;
	/* Ready and timed out at once (a loop that stalled past the deadline
	 * sees both): what arrived is read first; a handshake that then still
	 * waits does so with no time left (job_wait), so the deadline holds. */
	if (what & (EV_READ | EV_WRITE)) {
		job_step(w, j);
		return;
	}
	if (SSL_get_state(j->ssl) == TLS_ST_BEFORE) {
		debug("http: no ClientHello within --tls-hello-timeout: closed",
		    KV_U("loop", w->loop->index), KV_U("ms", j->hello_ms));
		job_finish(w, j, TLSLOOP_NO_HELLO);
	} else if (held >= (int64_t)j->handshake_ms) {
		debug("http: TLS handshake not finished within "
		    "--tls-handshake-timeout: closed", KV_U("loop", w->loop->index),
		    KV_U("ms", j->handshake_ms));
		job_finish(w, j, TLSLOOP_TOO_SLOW);
	} else {
		job_step(w, j);          /* past the hello deadline, moving */
	}
}

/* A job arrives on its handshake loop (a message): it starts there. */
static void
job_start(void *arg)
{
	struct tlsloop_job *j = arg;
	struct tlsloop_worker *w = j->worker;

	if (w->stopped) {
		job_end(j, TLSLOOP_STOPPED);
		return;
	}
	j->prev = NULL;
	j->next = w->running;
	if (w->running != NULL)
		w->running->prev = j;
	w->running = j;
	j->ev = event_new(w->loop->base, -1, 0, job_cb, j);
	if (j->ev == NULL || SSL_set_fd(j->ssl, j->fd) != 1) {
		job_finish(w, j, TLSLOOP_FAILED);
		return;
	}
	SSL_set_accept_state(j->ssl);
	job_step(w, j);
}

/* Its handshake loop stopped before the job arrived: it goes back. */
static void
job_start_dropped(void *arg)
{
	job_end(arg, TLSLOOP_STOPPED);
}

/* On a handshake loop: every job it holds goes back, unfinished, and so
 * will every job that comes later. */
static void
worker_stop(void *arg)
{
	struct tlsloop_worker *w = arg;

	w->stopped = 1;
	while (w->running != NULL)
		job_finish(w, w->running, TLSLOOP_STOPPED);
}

struct tlsloops *
tlsloops_new(struct loop *loops, unsigned n,
    void (*done)(struct tlsloop_job *job, void *arg), void *arg, char *err,
    size_t errlen)
{
	struct tlsloops *t = calloc(1, sizeof(*t));

	if (t == NULL || n < 2 ||
	    (t->w = calloc(n - 1, sizeof(*t->w))) == NULL) {
		free(t);
		snprintf(err, errlen, n < 2 ? "no handshake loop" : "out of memory");
		return NULL;
	}
	t->n = n - 1;
	t->home = &loops[0];
	t->done = done;
	t->arg = arg;
	for (unsigned i = 0; i < t->n; i++) {
		t->w[i].set = t;
		t->w[i].loop = &loops[i + 1];
	}
	return t;
}

unsigned
tlsloops_count(const struct tlsloops *t)
{
	return t != NULL ? t->n : 0;
}

void
tlsloop_submit(struct tlsloops *t, unsigned i, struct tlsloop_job *job)
{
	struct tlsloop_worker *w = &t->w[i - 1];

	job->ev = NULL;
	job->worker = w;
	job->next = job->prev = NULL;
	(void)loop_call(w->loop, job_start, job, job_start_dropped);
}

void
tlsloops_stop(struct tlsloops *t)
{
	if (t == NULL)
		return;
	for (unsigned i = 0; i < t->n; i++)
		(void)loop_call(t->w[i].loop, worker_stop, &t->w[i], worker_stop);
}

void
tlsloops_free(struct tlsloops *t)
{
	if (t == NULL)
		return;
	free(t->w);
	free(t);
}
