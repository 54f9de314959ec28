/*
 * tlswrite.c: TLS records gathered into large socket writes (see tlswrite.h).
 *
 * The BIO sits where OpenSSL's socket BIO was, as the SSL's write BIO only
 * (reads still go through the socket BIO).  A record OpenSSL writes is
 * copied to the end of the buffer; the first one of a batch puts the batch
 * on its thread's flush list and makes that thread's flush event active,
 * so every batch of a loop pass goes out in one send(2) each, in one
 * callback, once the loop has run the callbacks that are ready.  The flush
 * list and event are per thread (one event loop per thread, docs/0040): a
 * batch is written, flushed and freed on the thread of its bufferevent's
 * loop, never another.  A write that does not fit flushes first; if the
 * socket will not take the buffer, OpenSSL is told to retry (it keeps the
 * record and tries again when libevent sees the socket writable), and the
 * batch's own write event (made the first time a socket refuses bytes)
 * waits for the socket to be writable.  An idle connection thus holds no
 * event here.
 *
 * Small messages (tls_write_now) wait as plaintext in the batch until its
 * flush, which seals them into one record before it sends: the peer
 * decrypts one record per pass, not one per message.
 *
 * libevent closes the socket through the write BIO's fd (BIO_get_fd)
 * before SSL_free frees the BIO: the BIO answers with the fd and never
 * closes it itself.
 */
#include "tlswrite.h"

#include <errno.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/queue.h>
#include <sys/socket.h>

#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/bufferevent_ssl.h>
#include <event2/event.h>
#include <event2/event_struct.h>
#include <openssl/bio.h>
#include <openssl/err.h>
#include <openssl/ssl.h>

struct tls_batch {
	int fd;
	struct bufferevent *bev;   /* whose write callback hears "all written" */
	/* EV_WRITE|EV_PERSIST on fd, added (armed) only while the socket
	 * refuses bytes; NULL until it first does. */
	struct event *ev;
	LIST_ENTRY(tls_batch) flush_link;   /* in flush_list while scheduled */
	int armed;
	int scheduled;             /* on the flush list, not yet flushed */
	int failed;                /* errno of a failed send: the end */
	uint8_t *buf;              /* cap bytes; NULL while empty */
	size_t cap;                /* TLS_WRITE_BATCH_SMALL or TLS_WRITE_BATCH_MAX */
	size_t start, end;         /* buf[start..end) waits for the kernel */
	/* Small messages of this pass (tls_write_now), not yet sealed: one
	 * record for all of them at the flush.  NULL while none wait. */
	uint8_t *plain;
	size_t plain_len, plain_cap;
};

/* A batch's first buffer when its first record is small (a ping, a pong,
 * a window update): thousands of tunnels pinged in one loop pass then hold
 * that much each until the flush, not 264 KiB.  A batch that outgrows it
 * moves to TLS_WRITE_BATCH_MAX at once (one copy of at most this). */
#define TLS_WRITE_BATCH_SMALL 2048u

/* Made once for the process (batch_method_get), then only read. */
static pthread_once_t batch_once = PTHREAD_ONCE_INIT;
static BIO_METHOD *batch_method;
static int batch_type;            /* its BIO type, for BIO_method_type */

/* The batches waiting for the flush event, which is active while this is
 * not empty.  One per thread (each loop thread flushes its own): the event
 * is set up again on another base only while nothing waits (a test's next
 * base on the same thread). */
static _Thread_local LIST_HEAD(, tls_batch) flush_list =
    LIST_HEAD_INITIALIZER(flush_list);
static _Thread_local struct event flush_ev;
static _Thread_local struct event_base *flush_base;
static _Thread_local int flush_active; /* made active, its callback not yet run */
/* What runs after the flush (tls_write_after_flush), or NULL. */
static _Thread_local void (*after_flush)(void);

static void batch_cb(evutil_socket_t fd, short what, void *arg);

/*
 * Spare small buffers (TLS_WRITE_BATCH_SMALL bytes), per thread: a flush
 * gives its batch's small plaintext and record buffers back here and the
 * next batch to need one takes it, not malloc and free each time (2 KiB is
 * past glibc's per-thread cache, so each was ~300 instructions: the
 * agent's /k8s path saved ~600 a request, tests/bench/k8s_instructions.sh
 * BENCH_PROFILE=agent).  An idle batch still holds nothing; a thread holds
 * at most SMALL_SPARES, freed when it ends (small_key's destructor; the
 * main thread's stay reachable until exit).
 */
#define SMALL_SPARES 4

struct small_spares {
	int n;
	uint8_t *b[SMALL_SPARES];
};

static pthread_once_t small_once = PTHREAD_ONCE_INIT;
static pthread_key_t small_key;
static int small_key_ok;
static _Thread_local struct small_spares *small;

static void
small_free_all(void *arg)
{
	struct small_spares *sp = arg;

	while (sp->n > 0)
		free(sp->b[--sp->n]);
	free(sp);
	small = NULL;
}

static void
small_key_make(void)
{
	small_key_ok = pthread_key_create(&small_key, small_free_all) == 0;
}

/* A buffer of TLS_WRITE_BATCH_SMALL bytes (NULL: out of memory). */
static uint8_t *
small_get(void)
{
	if (small != NULL && small->n > 0)
		return small->b[--small->n];
	return malloc(TLS_WRITE_BATCH_SMALL);
}

/* Gives back p (cap bytes, from malloc; NULL: nothing): kept as a spare
 * if it is a small one and there is room, freed otherwise. */
static void
small_put(uint8_t *p, size_t cap)
{
	if (p == NULL)
		return;
	if (cap == TLS_WRITE_BATCH_SMALL && small == NULL &&
	    pthread_once(&small_once, small_key_make) == 0 && small_key_ok &&
	    (small = calloc(1, sizeof(*small))) != NULL &&
	    pthread_setspecific(small_key, small) != 0) {
		free(small);
		small = NULL;
	}
	if (cap == TLS_WRITE_BATCH_SMALL && small != NULL && small->n < SMALL_SPARES) {
		small->b[small->n++] = p;
		return;
	}
	free(p);
}

/*
 * Seals the small messages staged this pass (tls_write_now) into one
 * record, into the batch (which has room: tls_write_now checked).  Called
 * while t is still scheduled or armed, so batch_write does not schedule it
 * again.  Returns 0, or -1 if the TLS connection failed: it is shut down,
 * and its next read reports the end.
 */
static int
batch_seal(struct tls_batch *t)
{
	SSL *ssl;
	int r, len = (int)t->plain_len;

	if (len == 0)
		return 0;
	ssl = bufferevent_openssl_get_ssl(t->bev);
	/* No ERR_clear_error first (~840 instructions in OpenSSL 3): the
	 * result is judged by its value, never by SSL_get_error, and a write
	 * that succeeds queues no error. */
	r = ssl != NULL ? SSL_write(ssl, t->plain, len) : -1;
	small_put(t->plain, t->plain_cap);
	t->plain = NULL;
	t->plain_len = t->plain_cap = 0;
	if (r == len)
		return 0;
	/* What the failed write queued goes: a later SSL_get_error on this
	 * thread must not read it as its own. */
	ERR_clear_error();
	shutdown(t->fd, SHUT_RDWR);
	return -1;
}

/* Writes what the socket takes.  Returns 0, or -1 on an error other than
 * would-block (kept in failed; what was held is dropped). */
static int
batch_send(struct tls_batch *t)
{
	ssize_t n;

	while (t->start < t->end) {
		n = send(t->fd, t->buf + t->start, t->end - t->start, MSG_NOSIGNAL);
		if (n > 0) {
			t->start += (size_t)n;
			continue;
		}
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
			return 0;
		t->failed = n < 0 ? errno : EPIPE;
		t->start = t->end;
	}
	t->start = t->end = 0;
	return t->failed != 0 ? -1 : 0;
}

/* Waits for the socket to be writable (on), or stops waiting.  Returns
 * -1 if the event cannot be made (out of memory): the owner fails the
 * connection, or the batch would wait for ever. */
static int
batch_arm(struct tls_batch *t, int on)
{
	if (on && !t->armed) {
		if (t->ev == NULL && (t->ev = event_new(bufferevent_get_base(t->bev),
		    t->fd, EV_WRITE | EV_PERSIST, batch_cb, t)) == NULL)
			return -1;
		if (event_add(t->ev, NULL) != 0)
			return -1;
		t->armed = 1;
	} else if (!on && t->armed) {
		event_del(t->ev);
		t->armed = 0;
	}
	return 0;
}

/* Takes t off the flush list. */
static void
batch_unschedule(struct tls_batch *t)
{
	if (!t->scheduled)
		return;
	LIST_REMOVE(t, flush_link);
	t->scheduled = 0;
}

/*
 * Everything is written: the owner's write callback runs if its output is
 * empty too, called from here (we are in the loop, not inside the owner).
 * Not through bufferevent_trigger: between bufferevent_free and the
 * bufferevent's destruction (which frees this BIO) a deferred callback
 * would take a reference to a bufferevent already being finalised and
 * finalise it twice.  bufferevent_free clears the callbacks, so a freed
 * bufferevent's owner is not called.
 */
static void
batch_tell_owner(struct tls_batch *t)
{
	bufferevent_data_cb writecb = NULL;
	void *arg = NULL;

	if (evbuffer_get_length(bufferevent_get_output(t->bev)) > 0)
		return;
	bufferevent_getcb(t->bev, NULL, &writecb, NULL, &arg);
	if (writecb != NULL)
		writecb(t->bev, arg);
}

/* The flush of one batch: from the flush list, or its socket writable
 * again. */
static void
batch_cb(evutil_socket_t fd, short what, void *arg)
{
	struct tls_batch *t = arg;

	(void)fd;
	(void)what;
	if (batch_seal(t) != 0) {
		batch_unschedule(t);
		batch_arm(t, 0);
		return;
	}
	batch_unschedule(t);
	if (batch_send(t) != 0 || (t->start < t->end && batch_arm(t, 1) != 0)) {
		batch_arm(t, 0);
		/* No SSL_write may come to see the error: let the read side
		 * end the connection. */
		shutdown(t->fd, SHUT_RDWR);
		return;
	}
	if (t->start < t->end)
		return;
	batch_arm(t, 0);
	small_put(t->buf, t->cap);
	t->buf = NULL;
	t->cap = 0;
	batch_tell_owner(t);
}

/* What waits for the flush (tls_write_after_flush) runs now, once. */
static void
after_flush_run(void)
{
	void (*fn)(void) = after_flush;

	after_flush = NULL;
	if (fn != NULL)
		fn();
}

/* The flush event: every batch scheduled before it ran goes out; those
 * scheduled meanwhile (a write callback that writes) wait for its next
 * run; then what waits for it (tls_write_after_flush).  A batch freed
 * meanwhile has left the list (batch_destroy). */
static void
flush_cb(evutil_socket_t fd, short what, void *arg)
{
	struct tls_batch *work = LIST_FIRST(&flush_list), *t;

	(void)arg;
	flush_active = 0;
	LIST_INIT(&flush_list);
	if (work != NULL)
		work->flush_link.le_prev = &work;
	while ((t = work) != NULL)
		batch_cb(fd, what, t);     /* takes t off `work` first */
	after_flush_run();
}

int
tls_write_after_flush(struct event_base *base, void (*fn)(void))
{
	if (!flush_active || flush_base != base ||
	    (after_flush != NULL && after_flush != fn))
		return 0;
	after_flush = fn;
	return 1;
}

/* Puts t on the flush list.  Returns -1 if it cannot wait for the flush
 * event (another event loop holds it): the caller sends at once. */
static int
batch_schedule(struct tls_batch *t)
{
	struct event_base *base = bufferevent_get_base(t->bev);

	if (LIST_EMPTY(&flush_list)) {
		if (flush_base != base) {
			/* Not active: it ran, or batch_destroy took it back. */
			if (event_assign(&flush_ev, base, -1, 0, flush_cb, NULL) != 0)
				return -1;
			flush_base = base;
		}
		event_active(&flush_ev, EV_WRITE, 1);
		flush_active = 1;
	} else if (flush_base != base)
		return -1;
	LIST_INSERT_HEAD(&flush_list, t, flush_link);
	t->scheduled = 1;
	return 0;
}

/* Makes room for n more bytes (n <= TLS_WRITE_BATCH_MAX - end). */
static int
batch_reserve(struct tls_batch *t, size_t n)
{
	size_t cap = t->end + n <= TLS_WRITE_BATCH_SMALL ? TLS_WRITE_BATCH_SMALL :
	    TLS_WRITE_BATCH_MAX;
	uint8_t *b;

	if (t->buf != NULL && t->cap >= cap)
		return 0;
	if (t->buf == NULL && cap == TLS_WRITE_BATCH_SMALL)
		b = small_get();
	else
		b = realloc(t->buf, cap);
	if (b == NULL)
		return -1;
	t->buf = b;
	t->cap = cap;
	return 0;
}

static int
batch_write(BIO *bio, const char *data, int len)
{
	struct tls_batch *t = BIO_get_data(bio);
	size_t n, room;

	BIO_clear_retry_flags(bio);
	if (len <= 0)
		return 0;
	if (t->failed != 0) {
		errno = t->failed;
		return -1;
	}
	n = (size_t)len;
	if (t->end + n > TLS_WRITE_BATCH_MAX) {
		if (batch_send(t) != 0) {
			errno = t->failed;
			return -1;
		}
		if (t->start > 0) {
			memmove(t->buf, t->buf + t->start, t->end - t->start);
			t->end -= t->start;
			t->start = 0;
		}
	}
	room = TLS_WRITE_BATCH_MAX - t->end;
	if (room == 0) {
		/* The socket is full: OpenSSL keeps the record and retries. */
		if (batch_arm(t, 1) != 0) {
			errno = ENOMEM;
			return -1;
		}
		BIO_set_retry_write(bio);
		return -1;
	}
	if (batch_reserve(t, n > room ? room : n) != 0) {
		errno = ENOMEM;
		return -1;
	}
	if (n > room)
		n = room;     /* OpenSSL writes the rest of the record later */
	memcpy(t->buf + t->end, data, n);
	t->end += n;
	if (!t->scheduled && !t->armed && batch_schedule(t) != 0) {
		/* Out now; what the socket does not take waits for it. */
		if (batch_send(t) != 0 || (t->start < t->end && batch_arm(t, 1) != 0)) {
			errno = t->failed != 0 ? t->failed : ENOMEM;
			return -1;
		}
	}
	return (int)n;
}

static long
batch_ctrl(BIO *bio, int cmd, long num, void *ptr)
{
	struct tls_batch *t;

	/* OpenSSL asks ~8 times per SSL_write, mostly what falls to the
	 * default (kTLS queries): the BIO's data only where a case needs it. */
	switch (cmd) {
	case BIO_C_GET_FD:
		t = BIO_get_data(bio);
		if (ptr != NULL)
			*(int *)ptr = t->fd;
		return t->fd;
	case BIO_CTRL_GET_CLOSE:
		return BIO_get_shutdown(bio);
	case BIO_CTRL_SET_CLOSE:
		BIO_set_shutdown(bio, (int)num);
		return 1;
	case BIO_CTRL_WPENDING:
		t = BIO_get_data(bio);
		return (long)(t->end - t->start + t->plain_len);
	case BIO_CTRL_FLUSH:
		/* OpenSSL flushes after an alert (close_notify): out now, as
		 * far as the socket takes it. */
		t = BIO_get_data(bio);
		if (batch_send(t) != 0)
			return 0;
		if (t->start < t->end && batch_arm(t, 1) != 0)
			return 0;
		return 1;
	default:
		return 0;
	}
}

static int
batch_destroy(BIO *bio)
{
	struct tls_batch *t = BIO_get_data(bio);

	if (t != NULL) {
		batch_unschedule(t);
		/* Nothing left to flush: the event must not run on (its loop
		 * may be about to go, and another loop may take it). */
		if (LIST_EMPTY(&flush_list) && flush_active) {
			event_del(&flush_ev);
			flush_active = 0;
			after_flush_run();
		}
		if (t->ev != NULL)
			event_free(t->ev);
		small_put(t->buf, t->cap);
		small_put(t->plain, t->plain_cap);
		free(t);
		BIO_set_data(bio, NULL);
	}
	return 1;
}

/* Makes the method (pthread_once: loop threads may ask at once). */
static void
batch_method_make(void)
{
	int type = BIO_get_new_index() | BIO_TYPE_SOURCE_SINK | BIO_TYPE_DESCRIPTOR;
	BIO_METHOD *m = BIO_meth_new(type, "tether batched socket writes");

	if (m == NULL || BIO_meth_set_write(m, batch_write) != 1 ||
	    BIO_meth_set_ctrl(m, batch_ctrl) != 1 ||
	    BIO_meth_set_destroy(m, batch_destroy) != 1) {
		BIO_meth_free(m);
		return;
	}
	batch_type = type;
	batch_method = m;
}

/* The method, made once for the process; NULL if it could not be (out of
 * memory then: batching stays off). */
static BIO_METHOD *
batch_method_get(void)
{
	/* This thread's copy once pthread_once has returned here (it is
	 * then visible to it for good): pthread_once's call was ~20
	 * instructions of each of a request's half dozen asks. */
	static _Thread_local BIO_METHOD *seen;

	if (seen != NULL)
		return seen;
	if (pthread_once(&batch_once, batch_method_make) != 0)
		return NULL;
	return seen = batch_method;
}

int
tls_write_batch(struct bufferevent *bev)
{
	SSL *ssl = bufferevent_openssl_get_ssl(bev);
	BIO_METHOD *m = batch_method_get();
	struct tls_batch *t;
	BIO *old, *bio;
	int fd;

	if (ssl == NULL || m == NULL)
		return 0;
	old = SSL_get_wbio(ssl);
	if (old == NULL || BIO_method_type(old) != BIO_TYPE_SOCKET ||
	    (fd = (int)BIO_get_fd(old, NULL)) < 0)
		return 0;
	if ((t = calloc(1, sizeof(*t))) == NULL)
		return 0;
	t->fd = fd;
	t->bev = bev;
	if ((bio = BIO_new(m)) == NULL) {
		free(t);
		return 0;
	}
	BIO_set_data(bio, t);
	BIO_set_shutdown(bio, 0);
	BIO_set_init(bio, 1);
	/* Drops the socket BIO's write reference; it stays the read BIO. */
	SSL_set0_wbio(ssl, bio);
	return 1;
}

/* A record's bytes beyond its plaintext: header, content type, AEAD tag
 * (TLS 1.3), with room to spare for TLS 1.2's explicit nonce. */
#define TLS_RECORD_OVERHEAD 64

/* Plaintext of one record: the most small messages one flush seals. */
#define TLS_PLAIN_RECORD 16384u

/* Makes room in t->plain for n more bytes (plain_len + n <= TLS_PLAIN_RECORD):
 * TLS_WRITE_BATCH_SMALL first (a ping, a window update: thousands of
 * tunnels pinged in one pass hold that much each), then a record's. */
static int
plain_reserve(struct tls_batch *t, size_t n)
{
	size_t cap = t->plain_len + n <= TLS_WRITE_BATCH_SMALL ?
	    TLS_WRITE_BATCH_SMALL : TLS_PLAIN_RECORD;
	uint8_t *b;

	if (t->plain != NULL && t->plain_cap >= cap)
		return 0;
	if (t->plain == NULL && cap == TLS_WRITE_BATCH_SMALL)
		b = small_get();
	else
		b = realloc(t->plain, cap);
	if (b == NULL)
		return -1;
	t->plain = b;
	t->plain_cap = cap;
	return 0;
}

int
tls_write_now(struct bufferevent *bev, const void *data, size_t len)
{
	SSL *ssl = bufferevent_openssl_get_ssl(bev);
	BIO *bio = ssl != NULL ? SSL_get_wbio(ssl) : NULL;
	struct tls_batch *t;

	if (bio == NULL || batch_method_get() == NULL || BIO_method_type(bio) != batch_type ||
	    len == 0 || len > TLS_WRITE_NOW_MAX ||
	    evbuffer_get_length(bufferevent_get_output(bev)) > 0)
		return 0;
	t = BIO_get_data(bio);
	/* A socket that refuses bytes: the bufferevent's own writes may run
	 * before the batch's event, so nothing is staged behind it. */
	if (t->failed != 0 || t->armed)
		return 0;
	/* One record per flush: what would overflow it is sealed first. */
	if (t->plain_len + len > TLS_PLAIN_RECORD && batch_seal(t) != 0)
		return -1;
	/* The records must fit whole: OpenSSL may then never be left holding
	 * a record to retry, which only the bufferevent's own writes do. */
	if (TLS_WRITE_BATCH_MAX - t->end < t->plain_len + len + TLS_RECORD_OVERHEAD)
		return 0;
	if (plain_reserve(t, len) != 0)
		return 0;
	memcpy(t->plain + t->plain_len, data, len);
	t->plain_len += len;
	if (!t->scheduled && batch_schedule(t) != 0)
		/* No flush event to wait for: sealed and sent now. */
		return batch_seal(t) == 0 ? 1 : -1;
	return 1;
}

size_t
tls_write_pending(struct bufferevent *bev)
{
	SSL *ssl = bufferevent_openssl_get_ssl(bev);
	BIO *bio = ssl != NULL ? SSL_get_wbio(ssl) : NULL;

	const struct tls_batch *t;

	if (bio == NULL || batch_method_get() == NULL || BIO_method_type(bio) != batch_type)
		return 0;
	/* What BIO_wpending would answer, without BIO_ctrl's way round. */
	t = BIO_get_data(bio);
	return t->end - t->start + t->plain_len;
}
