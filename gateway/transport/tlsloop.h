/*
 * tlsloop.h: TLS handshakes as jobs on the gateway's loops (--workers,
 * docs/0032; the loops themselves are core/loop.h's): the CPU-heavy part
 * of a connection's life runs on the loop the server picked, and the
 * established connection goes back to loop 0 (the home loop), or, once
 * its request line was read there (a job with read_line, docs/0040
 * section 2 (i-a)), may stay on its handshake loop or be sent on to
 * another: the land callback decides, and only the job's slot goes home.
 * Every loop 0..n-1 runs jobs, loop 0 included (its jobs reach it through
 * its own inbox), so that a connection lands by its route whichever loop
 * ran its handshake.
 *
 * The home loop keeps every count and cap (admission, docs/0028): a job is
 * given to a handshake loop only once it holds its slot.  A job travels as
 * an inbox message (loop_call) both ways: to its handshake loop, and back,
 * done or failed, to the home loop.  A handshake loop touches nothing but
 * its jobs: no route, no metric, no state of the gateway.  A job belongs
 * to whoever holds it: the server until tlsloop_submit, then its handshake
 * loop, then the server again in the done callback.
 */
#ifndef TETHER_TLSLOOP_H
#define TETHER_TLSLOOP_H

#include <stddef.h>
#include <stdint.h>

#include <event2/util.h>
#include <openssl/ssl.h>

struct event;
struct loop;
struct tlsloop_worker;

/* How a handshake ended. */
enum tlsloop_result {
	TLSLOOP_OK,           /* established: ssl is ready for application data */
	TLSLOOP_FAILED,       /* a TLS error or the client went away */
	TLSLOOP_NO_HELLO,     /* no ClientHello within hello_ms */
	TLSLOOP_TOO_SLOW,     /* not finished within handshake_ms */
	TLSLOOP_STOPPED,      /* the handshake loops stopped first */
	TLSLOOP_LANDED,       /* established, and the land callback took the
	                         connection on its handshake loop: fd, ssl and
	                         head are no longer the job's */
};

/* Landing (docs/0040 section 2 (i-a)): the request line is read within
 * LAND_WAIT_MS of the handshake's end (or by its slot's deadline, if
 * sooner), at most LAND_LINE_MAX bytes; what the TLS record holding its
 * end carries beyond it is read too (SSL_pending), so no plaintext stays
 * inside the SSL where no socket event would wake the loop it lands on. */
#define LAND_LINE_MAX 8192
#define LAND_WAIT_MS  250

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
	int read_line;                /* once established, read the request line
	                                 (then the land callback decides) */
	/* Filled by the handshake loop, read in the done callback. */
	unsigned loop;                /* 0..n-1: the loop that ran it (set
	                                 before the land callback too) */
	enum tlsloop_result result;
	char *head;                   /* read_line: the application bytes read
	                                 after the handshake (malloc'd, possibly
	                                 NULL): the first of the connection's
	                                 input; the server's (or the land
	                                 callback's) to wipe and free */
	size_t head_len;
	int64_t line_since_ms;        /* monotonic: when the line's wait began */
	/* The handshake loop's own. */
	struct tlsloop_worker *worker;
	struct event *ev;
	struct tlsloop_job *next;
	struct tlsloop_job *prev;
};

struct tlsloops;

/*
 * Runs handshakes on loops[0..n-1] (n >= 2) and gives them back on
 * loops[0]: done(job, arg) runs on loop 0's thread for every job
 * submitted, exactly once, once its handshake ended (or at the stop:
 * tlsloops_stop, then loops_stop).  A job with read_line, established,
 * first has its request line read and then land(job, arg) run on its
 * handshake loop's thread (job->loop, head and head_len set): it returns
 * 1 when it took the connection (fd, ssl and head become its own; done
 * then sees TLSLOOP_LANDED: only the slot is left to release), or 0 to
 * send it home as TLSLOOP_OK with its head (land NULL: always home).  The
 * loops are the caller's and outlive the set.  Returns the set (nothing
 * started: its state is made on each loop on first use), or NULL with
 * err.  Cost: one small allocation per loop.
 */
struct tlsloops *tlsloops_new(struct loop *loops, unsigned n,
    void (*done)(struct tlsloop_job *job, void *arg),
    int (*land)(struct tlsloop_job *job, void *arg), void *arg, char *err,
    size_t errlen);

/* Hands job to loop i (0..n-1) to run; it is the loop's until done.  From
 * loop 0's thread only.  Loop 0's job, too, starts on a later pass of its
 * loop (its inbox), never inside this call, so done never runs inside it.
 * Cost: one loop_call (a malloc, a lock, an eventfd write when the loop
 * is asleep; none for loop 0's own: loop.h). */
void tlsloop_submit(struct tlsloops *t, unsigned i, struct tlsloop_job *job);

/*
 * Asks every loop to give back the jobs it holds (done, TLSLOOP_STOPPED),
 * and to give back at once what comes later.  The jobs come back through
 * loop 0's inbox: loops_stop, called next, joins loops 1..n-1 and runs it
 * (loop 0's own stop message runs there too, and the jobs it gives back
 * after it).  From loop 0's thread.  NULL: nothing.
 */
void tlsloops_stop(struct tlsloops *t);

/* Frees the set, after tlsloops_stop and loops_stop (no job is out then).
 * NULL: nothing. */
void tlsloops_free(struct tlsloops *t);

#endif
