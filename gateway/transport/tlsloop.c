/*
 * tlsloop.c: TLS handshakes as jobs on the gateway's loops (see
 * tlsloop.h).  Each loop keeps the jobs it drives in a list of its own
 * (touched on its thread only); a job arrives and leaves as an inbox
 * message (core/loop.h), loop 0's own included, so nothing here takes a
 * lock of its own.
 */
#include "tlsloop.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <event2/event.h>
#include <openssl/err.h>

#include "log.h"
#include "loop.h"
#include "runtime.h"

/* A loop's part: its running jobs (its thread's only). */
struct tlsloop_worker {
	struct tlsloops *set;
	struct loop *loop;
	struct tlsloop_job *running;
	int stopped;                  /* tlsloops_stop ran here: no new job */
};

struct tlsloops {
	unsigned n;                   /* loops */
	struct loop *home;            /* loop 0: where jobs go back */
	struct tlsloop_worker *w;     /* [n]: w[i] is loop i's */
	void (*done)(struct tlsloop_job *, void *);
	int (*land)(struct tlsloop_job *, void *);
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
 * (its handshake loop's, or the caller's of a call its loop dropped), as a
 * message even from loop 0 itself (done never runs inside a job's step).
 * The home loop outlives the other loops (loops_stop), so the call back
 * is never dropped: job_back is its drop too, run then on home's thread. */
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

/* The monotonic time the job waits until: while its request line is read,
 * LAND_WAIT_MS after the handshake or the slot's deadline, whichever is
 * first; before, the ClientHello's while none came, else the whole
 * handshake's. */
static int64_t
job_deadline(const struct tlsloop_job *j)
{
	int64_t slot = j->since_ms + j->handshake_ms;

	if (j->line_since_ms != 0)
		return j->line_since_ms + LAND_WAIT_MS < slot ?
		    j->line_since_ms + LAND_WAIT_MS : slot;
	return j->since_ms + (SSL_get_state(j->ssl) == TLS_ST_BEFORE ?
	    j->hello_ms : j->handshake_ms);
}

/* Waits for what the job needs, until its deadline. */
static void
job_wait(struct tlsloop_worker *w, struct tlsloop_job *j, short what)
{
	int64_t left = job_deadline(j) - runtime_monotonic_ms();
	struct timeval tv = runtime_ms_timeval(left > 0 ? (uint32_t)left : 0);

	if (event_assign(j->ev, w->loop->base, j->fd, what, job_cb, j) != 0 ||
	    event_add(j->ev, &tv) != 0)
		job_finish(w, j, TLSLOOP_FAILED);
}

/* The line's wait is over (read, or not in time, or the client closed or
 * failed: its connection will see that again on its first read): the
 * server decides where the connection lives. */
static void
line_done(struct tlsloop_worker *w, struct tlsloop_job *j)
{
	struct tlsloops *t = w->set;

	ERR_clear_error();
	j->loop = w->loop->index;
	if (j->ev != NULL)
		event_free(j->ev);
	j->ev = NULL;
	job_finish(w, j, t->land != NULL && t->land(j, t->arg) ? TLSLOOP_LANDED :
	    TLSLOOP_OK);
}

/* Whether the head holds a whole line (its LF). */
static int
line_whole(const struct tlsloop_job *j)
{
	return j->head != NULL && memchr(j->head, '\n', j->head_len) != NULL;
}

/* Reads the request line: until its LF or LAND_LINE_MAX bytes, then what
 * the SSL still holds decrypted (SSL_pending: the rest of that record).
 * Waits for the socket when it needs more; at the deadline (late) it
 * takes what is there.  The head grows by at most a record past the cap. */
static void
line_step(struct tlsloop_worker *w, struct tlsloop_job *j, int late)
{
	for (;;) {
		int enough = line_whole(j) || j->head_len >= LAND_LINE_MAX;
		size_t want = enough ? (size_t)SSL_pending(j->ssl) :
		    LAND_LINE_MAX - j->head_len;
		char *grown;
		int r;

		if (want == 0) {
			line_done(w, j);
			return;
		}
		if ((grown = realloc(j->head, j->head_len + want)) == NULL) {
			job_finish(w, j, TLSLOOP_FAILED);
			return;
		}
		j->head = grown;
		r = SSL_read(j->ssl, j->head + j->head_len, (int)want);
		if (r > 0) {
			j->head_len += (size_t)r;
			continue;
		}
		switch (SSL_get_error(j->ssl, r)) {
		case SSL_ERROR_WANT_READ:
			if (late || enough)
				line_done(w, j);
			else
				job_wait(w, j, EV_READ);
			return;
		case SSL_ERROR_WANT_WRITE:
			if (late)
				line_done(w, j);
			else
				job_wait(w, j, EV_WRITE);
			return;
		default:                 /* closed or failed: it will say so */
			line_done(w, j);
			return;
		}
	}
}

/* One step of the handshake: done, failed, or waiting again. */
static void
job_step(struct tlsloop_worker *w, struct tlsloop_job *j)
{
	int r = SSL_do_handshake(j->ssl);

	if (r == 1 && j->read_line) {
		j->line_since_ms = runtime_monotonic_ms();
		line_step(w, j, 0);
		return;
	}
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
	if (j->line_since_ms != 0) {     /* reading the request line */
		line_step(w, j, (what & EV_TIMEOUT) != 0);
		return;
	}
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

/* Its loop stopped before the job arrived: it goes back. */
static void
job_start_dropped(void *arg)
{
	job_end(arg, TLSLOOP_STOPPED);
}

/* On a loop: every job it holds goes back, unfinished, and so will every
 * job that comes later. */
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
    void (*done)(struct tlsloop_job *job, void *arg),
    int (*land)(struct tlsloop_job *job, void *arg), void *arg, char *err,
    size_t errlen)
{
	struct tlsloops *t = calloc(1, sizeof(*t));

	if (t == NULL || n < 2 || (t->w = calloc(n, sizeof(*t->w))) == NULL) {
		free(t);
		snprintf(err, errlen, n < 2 ? "one loop: no set" : "out of memory");
		return NULL;
	}
	t->n = n;
	t->home = &loops[0];
	t->done = done;
	t->land = land;
	t->arg = arg;
	for (unsigned i = 0; i < t->n; i++) {
		t->w[i].set = t;
		t->w[i].loop = &loops[i];
	}
	return t;
}

void
tlsloop_submit(struct tlsloops *t, unsigned i, struct tlsloop_job *job)
{
	struct tlsloop_worker *w = &t->w[i];

	job->ev = NULL;
	job->head = NULL;
	job->head_len = 0;
	job->line_since_ms = 0;
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
