/*
 * tlsloop.h: the gateway's handshake loops (--workers, docs/0032): threads
 * of their own, each with its own libevent loop, that run the CPU-heavy
 * part of a connection's life, its TLS handshake, and hand the
 * established connection back to the home loop (the process's loop, where
 * every connection, tunnel, stream and route lives).
 *
 * The home loop keeps every count and cap (admission, docs/0028): a job is
 * given to a handshake loop only once it holds its slot, and comes back,
 * done or failed, through one locked list and an eventfd watched on the
 * home loop.  A handshake loop touches nothing but its jobs: no route, no
 * metric, no state of the gateway.  A job belongs to whoever holds it: the
 * server until tlsloop_submit, then its handshake loop, then the server
 * again in the done callback.
 */
#ifndef TETHER_TLSLOOP_H
#define TETHER_TLSLOOP_H

#include <stddef.h>
#include <stdint.h>

#include <event2/util.h>
#include <openssl/ssl.h>

struct event;
struct event_base;
struct tlsloop_worker;

/* How a handshake ended. */
enum tlsloop_result {
	TLSLOOP_OK,           /* established: ssl is ready for application data */
	TLSLOOP_FAILED,       /* a TLS error or the client went away */
	TLSLOOP_NO_HELLO,     /* no ClientHello within hello_ms */
	TLSLOOP_TOO_SLOW,     /* not finished within handshake_ms */
	TLSLOOP_STOPPED,      /* the loops stopped first */
};

/* One connection's handshake.  The server embeds it in its own record and
 * fills the first part; the handshake loop fills the rest. */
struct tlsloop_job {
	/* Filled by the server before tlsloop_submit. */
	evutil_socket_t fd;           /* accepted, non-blocking */
	SSL *ssl;                     /* made by the server (SSL_new: it holds its
	                                 SSL_CTX, so a certificate reload may swap
	                                 the server's meanwhile); back in done,
	                                 the server's to free */
	int64_t since_ms;             /* monotonic: when the slot was taken */
	uint32_t hello_ms;            /* deadlines from since_ms */
	uint32_t handshake_ms;
	/* Filled by the handshake loop, read in the done callback. */
	unsigned loop;                /* 1..n: the loop that ran it */
	enum tlsloop_result result;
	/* The handshake loop's own. */
	struct tlsloop_worker *worker;
	struct event *ev;
	struct tlsloop_job *next;
	struct tlsloop_job *prev;
};

struct tlsloops;

/*
 * Starts n handshake loops (threads, signals blocked in them) and watches
 * their answers on home: done(job, arg) runs on home's loop for every job
 * submitted, exactly once, once its handshake ended (or at tlsloops_free).
 * Returns the set, or NULL with err (nothing left running).
 */
struct tlsloops *tlsloops_new(struct event_base *home, unsigned n,
    void (*done)(struct tlsloop_job *job, void *arg), void *arg, char *err,
    size_t errlen);

/* The number of handshake loops (n of tlsloops_new). */
unsigned tlsloops_count(const struct tlsloops *t);

/* Hands job to loop i (1..n); it is the loop's until done.  From home's
 * thread only.  Cost: one lock and one eventfd write. */
void tlsloop_submit(struct tlsloops *t, unsigned i, struct tlsloop_job *job);

/* CPU seconds loop i's thread (1..n) used since it started; any thread. */
double tlsloop_cpu_seconds(const struct tlsloops *t, unsigned i);

/*
 * Stops every handshake loop and joins its thread; every job not yet
 * given back is given back (done, TLSLOOP_STOPPED) before it returns, on
 * the calling (home's) thread.  NULL: nothing.
 */
void tlsloops_free(struct tlsloops *t);

#endif
