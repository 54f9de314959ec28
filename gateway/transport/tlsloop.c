/*
 * tlsloop.c: the handshake loops (see tlsloop.h).  Each is a thread with
 * its own event_base, an inbox (a locked list and an eventfd) and the jobs
 * it drives; every job ends on the shared done list, whose eventfd the
 * home loop watches.  Nothing else is shared: each event_base is used by
 * its own thread only (made by the home thread before the loop's thread
 * starts), so libevent needs no locking of its own.
 */
#include "tlsloop.h"

#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <time.h>
#include <unistd.h>

#include <event2/event.h>
#include <openssl/err.h>

#include "log.h"
#include "runtime.h"

struct tlsloop_worker {
	struct tlsloops *set;
	unsigned index;               /* 1..n */
	pthread_t thread;
	int started;
	struct event_base *base;
	int efd;                      /* eventfd: the inbox has jobs, or stop */
	struct event *wake;
	pthread_mutex_t mu;           /* guards inbox and stop */
	struct tlsloop_job *inbox;
	int stop;
	struct tlsloop_job *running;  /* the loop's jobs (the loop's own) */
};

struct tlsloops {
	unsigned n;
	struct tlsloop_worker *w;     /* [n] */
	void (*done)(struct tlsloop_job *, void *);
	void *arg;
	int efd;                      /* eventfd: done has jobs */
	struct event *done_ev;        /* on home */
	pthread_mutex_t mu;           /* guards done */
	struct tlsloop_job *done_list;
};

static void
efd_signal(int fd)
{
	uint64_t one = 1;

	/* Fails only if the counter would overflow: it is woken anyway. */
	if (write(fd, &one, sizeof(one)) < 0 && errno != EAGAIN)
		warn("handshake loops: eventfd write failed",
		    KV_S("err", strerror(errno)));
}

static void
efd_clear(int fd)
{
	uint64_t n;

	if (read(fd, &n, sizeof(n)) < 0 && errno != EAGAIN)
		warn("handshake loops: eventfd read failed",
		    KV_S("err", strerror(errno)));
}

/* The job leaves its loop for the done list (on the loop's thread). */
static void
job_finish(struct tlsloop_worker *w, struct tlsloop_job *j,
    enum tlsloop_result result)
{
	struct tlsloops *t = w->set;

	if (j->ev != NULL)
		event_free(j->ev);
	j->ev = NULL;
	if (j->prev != NULL)
		j->prev->next = j->next;
	else
		w->running = j->next;
	if (j->next != NULL)
		j->next->prev = j->prev;
	ERR_clear_error();
	j->result = result;
	j->loop = w->index;
	pthread_mutex_lock(&t->mu);
	j->prev = NULL;
	j->next = t->done_list;
	t->done_list = j;
	pthread_mutex_unlock(&t->mu);
	efd_signal(t->efd);
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

	if (event_assign(j->ev, w->base, j->fd, what, job_cb, j) != 0 ||
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
	if (!(what & EV_TIMEOUT)) {
		job_step(w, j);
		return;
	}
	if (SSL_get_state(j->ssl) == TLS_ST_BEFORE) {
		debug("http: no ClientHello within --tls-hello-timeout: closed",
		    KV_U("loop", w->index), KV_U("ms", j->hello_ms));
		job_finish(w, j, TLSLOOP_NO_HELLO);
	} else if (held >= (int64_t)j->handshake_ms) {
		debug("http: TLS handshake not finished within "
		    "--tls-handshake-timeout: closed", KV_U("loop", w->index),
		    KV_U("ms", j->handshake_ms));
		job_finish(w, j, TLSLOOP_TOO_SLOW);
	} else {
		job_step(w, j);          /* past the hello deadline, moving */
	}
}

/* Takes what the home loop queued; ends the loop when asked to stop. */
static void
worker_wake(evutil_socket_t fd, short what, void *arg)
{
	struct tlsloop_worker *w = arg;
	struct tlsloop_job *in, *j;
	int stop;

	(void)what;
	efd_clear(fd);
	pthread_mutex_lock(&w->mu);
	in = w->inbox;
	w->inbox = NULL;
	stop = w->stop;
	pthread_mutex_unlock(&w->mu);
	while ((j = in) != NULL) {
		in = j->next;
		j->prev = NULL;
		j->next = w->running;
		if (w->running != NULL)
			w->running->prev = j;
		w->running = j;
		j->worker = w;
		j->ev = event_new(w->base, -1, 0, job_cb, j);
		if (j->ev == NULL || SSL_set_fd(j->ssl, j->fd) != 1) {
			job_finish(w, j, TLSLOOP_FAILED);
			continue;
		}
		SSL_set_accept_state(j->ssl);
		job_step(w, j);
	}
	if (stop)
		event_base_loopbreak(w->base);
}

/* A handshake loop's thread: its loop until stopped, then every job it
 * still holds goes back, unfinished. */
static void *
worker_main(void *arg)
{
	struct tlsloop_worker *w = arg;

	debug("handshake loop running", KV_U("loop", w->index));
	event_base_dispatch(w->base);
	while (w->running != NULL)
		job_finish(w, w->running, TLSLOOP_STOPPED);
	pthread_mutex_lock(&w->mu);
	while (w->inbox != NULL) {
		struct tlsloop_job *j = w->inbox;

		w->inbox = j->next;
		j->prev = j->next = NULL;
		w->running = j;
		j->worker = w;
		job_finish(w, j, TLSLOOP_STOPPED);
	}
	pthread_mutex_unlock(&w->mu);
	return NULL;
}

/* Gives back, on home's thread, every job the loops finished. */
static void
home_collect(struct tlsloops *t)
{
	struct tlsloop_job *list, *j;

	pthread_mutex_lock(&t->mu);
	list = t->done_list;
	t->done_list = NULL;
	pthread_mutex_unlock(&t->mu);
	while ((j = list) != NULL) {
		list = j->next;
		j->next = j->prev = NULL;
		j->worker = NULL;
		t->done(j, t->arg);
	}
}

static void
home_wake(evutil_socket_t fd, short what, void *arg)
{
	(void)what;
	efd_clear(fd);
	home_collect(arg);
}

/* Makes loop i's base, eventfd and wake event (not its thread). */
static int
worker_init(struct tlsloops *t, struct tlsloop_worker *w, unsigned index)
{
	w->set = t;
	w->index = index;
	w->efd = -1;
	pthread_mutex_init(&w->mu, NULL);
	if ((w->base = event_base_new()) == NULL ||
	    (w->efd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC)) == -1 ||
	    (w->wake = event_new(w->base, w->efd, EV_READ | EV_PERSIST,
	    worker_wake, w)) == NULL || event_add(w->wake, NULL) != 0)
		return -1;
	return 0;
}

struct tlsloops *
tlsloops_new(struct event_base *home, unsigned n,
    void (*done)(struct tlsloop_job *job, void *arg), void *arg, char *err,
    size_t errlen)
{
	struct tlsloops *t = calloc(1, sizeof(*t));
	sigset_t all, old;
	int rc;

	if (t == NULL || (t->w = calloc(n, sizeof(*t->w))) == NULL) {
		free(t);
		snprintf(err, errlen, "out of memory");
		return NULL;
	}
	t->done = done;
	t->arg = arg;
	t->efd = -1;
	pthread_mutex_init(&t->mu, NULL);
	if ((t->efd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC)) == -1 ||
	    (t->done_ev = event_new(home, t->efd, EV_READ | EV_PERSIST,
	    home_wake, t)) == NULL || event_add(t->done_ev, NULL) != 0) {
		snprintf(err, errlen, "cannot watch the handshake loops: %s",
		    strerror(errno));
		tlsloops_free(t);
		return NULL;
	}
	/* Signals stay the home loop's: the threads block them all. */
	sigfillset(&all);
	pthread_sigmask(SIG_SETMASK, &all, &old);
	for (t->n = 0; t->n < n; t->n++) {
		struct tlsloop_worker *w = &t->w[t->n];

		if (worker_init(t, w, t->n + 1) != 0) {
			snprintf(err, errlen, "cannot make handshake loop %u: %s",
			    t->n + 1, strerror(errno));
			t->n++;
			break;
		}
		if ((rc = pthread_create(&w->thread, NULL, worker_main, w)) != 0) {
			snprintf(err, errlen, "cannot start handshake loop %u: %s",
			    t->n + 1, strerror(rc));
			t->n++;
			break;
		}
		w->started = 1;
	}
	pthread_sigmask(SIG_SETMASK, &old, NULL);
	if (t->n < n || !t->w[n - 1].started) {
		tlsloops_free(t);
		return NULL;
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
	job->worker = NULL;
	job->prev = NULL;
	pthread_mutex_lock(&w->mu);
	job->next = w->inbox;
	w->inbox = job;
	pthread_mutex_unlock(&w->mu);
	efd_signal(w->efd);
}

double
tlsloop_cpu_seconds(const struct tlsloops *t, unsigned i)
{
	clockid_t cid;
	struct timespec ts;

	if (t == NULL || i < 1 || i > t->n || !t->w[i - 1].started ||
	    pthread_getcpuclockid(t->w[i - 1].thread, &cid) != 0 ||
	    clock_gettime(cid, &ts) != 0)
		return 0;
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

void
tlsloops_free(struct tlsloops *t)
{
	if (t == NULL)
		return;
	for (unsigned i = 0; i < t->n; i++) {
		struct tlsloop_worker *w = &t->w[i];

		if (!w->started)
			continue;
		pthread_mutex_lock(&w->mu);
		w->stop = 1;
		pthread_mutex_unlock(&w->mu);
		efd_signal(w->efd);
		pthread_join(w->thread, NULL);
		w->started = 0;
	}
	/* Every job is on the done list now: each goes back. */
	home_collect(t);
	for (unsigned i = 0; i < t->n; i++) {
		struct tlsloop_worker *w = &t->w[i];

		if (w->wake != NULL)
			event_free(w->wake);
		if (w->base != NULL)
			event_base_free(w->base);
		if (w->efd >= 0)
			close(w->efd);
		pthread_mutex_destroy(&w->mu);
	}
	if (t->done_ev != NULL)
		event_free(t->done_ev);
	if (t->efd >= 0)
		close(t->efd);
	pthread_mutex_destroy(&t->mu);
	free(t->w);
	free(t);
}
