/* tlsread.c: drain ready TLS records into a bufferevent's input (see tlsread.h). */
#include "tlsread.h"

#include <errno.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/queue.h>
#include <time.h>
#include <unistd.h>

#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/bufferevent_ssl.h>
#include <event2/bufferevent_struct.h>
#include <event2/event.h>
#include <event2/event_struct.h>
#include <openssl/bio.h>
#include <openssl/err.h>
#include <openssl/ssl.h>

#include "tlswrite.h"

#define TLS_RECORD_MAX 16384
#define TLS_CHAIN_SIZE (512 * 1024)
/* Bytes taken from the socket per read(): one batch of the peer's write
 * BIO (tlswrite.h, two 128 KiB DATA frames sealed), so that a batch sent
 * whole is read whole, not as 256 KiB and a ~6 KB tail. */
#define TLS_READ_AHEAD TLS_WRITE_BATCH_MAX

/*
 * The read side: a BIO in place of OpenSSL's socket BIO as the SSL's read
 * BIO.  OpenSSL asks for a record's header, then its body; each ask is
 * served from one buffer that a single read(2) of up to TLS_READ_AHEAD
 * fills.  (OpenSSL's own read-ahead does the same but moves the unread
 * rest of its buffer to the front before every record: with a large
 * buffer that is many copies of each byte.)  A connection holds the
 * buffer only while it holds bytes; the last one freed on a thread is
 * kept there for the next read(2) of any of its connections (buf_get,
 * buf_put).  Bytes it holds raise no socket event: see tlsread.h.
 */
struct tls_rbatch {
	int fd;
	int eof;                 /* read(2) returned 0 */
	/* The last read(2) returned less than it asked for, or "would
	 * block": the socket had no more then.  A pull's ask (tls_read_
	 * available), once the buffer is used up, says "would block" without
	 * a read(2) that would only say so.  Bytes that come later raise a
	 * socket event (epoll is level-triggered, and the bufferevent reads
	 * only with its read event added), and the bufferevent's own read,
	 * which that event runs before any pull, reads the socket: an ask
	 * that is not a pull's ignores the mark, and sets it anew. */
	int drained;
	int pulling;             /* inside tls_read_available's SSL_read */
	int err;                 /* a read(2)'s errno, kept (rbatch_fill) */
	/* An SSL_read of ours met the end (close_notify, an alert, an error):
	 * OpenSSL keeps it, and every socket event from now on goes to
	 * libevent's read, which meets it again and reports it. */
	int ended;
	uint8_t *buf;            /* TLS_READ_AHEAD bytes, or NULL */
	size_t start, end;       /* buf[start..end) not yet given to OpenSSL */
	/* Busy or not (see "Busy connections" below). */
	SSL *ssl;                /* whose read BIO this is */
	struct event_base *base; /* its bufferevent's loop */
	LIST_ENTRY(tls_rbatch) warm_link;   /* in warm_list while warm */
	int warm;                /* OpenSSL keeps its record buffers */
	unsigned reads;          /* read(2)s with bytes: since since_ms while
	                          * cold, since the last sweep while warm */
	uint64_t since_ms;       /* the first of `reads` (cold), monotonic */
	/* libevent's callback of the bufferevent's read event, which
	 * sock_read_cb replaces and calls for all but data; or NULL. */
	event_callback_fn bev_read_cb;
};

/*
 * Busy connections.  With SSL_MODE_RELEASE_BUFFERS (tls_read_ahead)
 * OpenSSL mallocs and frees its read buffer for every record it reads and
 * its write buffer for every record it writes (~17 KiB each, ~1,000
 * instructions a record with glibc's malloc): the price of an idle
 * connection that holds neither.  A connection that reads from its socket
 * WARM_READS times within WARM_WINDOW_MS is busy ("warm"): the mode goes
 * off, and OpenSSL keeps both buffers from record to record.  A
 * per-thread timer sweeps the warm connections every WARM_SWEEP_MS: one
 * that read nothing since the last sweep is cold again, its buffers freed
 * (SSL_free_buffers) and the mode back on.  So an idle connection still
 * holds no buffer once a sweep or two have passed; a tunnel that only
 * answers keepalive pings (one read each, seconds apart) never gets warm,
 * nor does one that is joining (a few messages: with 4 reads in 250 ms
 * instead, tests/bench/idle_tunnels.sh 5000 peaked ~6 MB higher, agents
 * joining at 400/s).  A connection holds at most its two record buffers
 * (~34 KiB) more while warm; the list and the timer are per thread (one
 * loop per thread, as tlswrite's flush list), the timer added only while
 * the list is not empty.
 */
#define WARM_READS 16
#define WARM_WINDOW_MS 1000
#define WARM_SWEEP_MS 250

static _Thread_local LIST_HEAD(, tls_rbatch) warm_list =
    LIST_HEAD_INITIALIZER(warm_list);
static _Thread_local struct event sweep_ev;
/* sweep_ev's loop while the list is not empty, else NULL */
static _Thread_local struct event_base *sweep_base;

/* The list is empty: the timer stops, and is set up afresh (on the loop
 * of the next warm connection) when a connection is warm again. */
static void
warm_list_check(void)
{
	if (!LIST_EMPTY(&warm_list) || sweep_base == NULL)
		return;
	event_del(&sweep_ev);
	sweep_base = NULL;
}

/* Cold again: OpenSSL's buffers go now if they hold nothing (else
 * OpenSSL frees them itself once used up, the mode being back on). */
static void
warm_end(struct tls_rbatch *t)
{
	LIST_REMOVE(t, warm_link);
	t->warm = 0;
	t->reads = 0;
	SSL_set_mode(t->ssl, SSL_MODE_RELEASE_BUFFERS);
	if (!SSL_has_pending(t->ssl))
		(void)SSL_free_buffers(t->ssl);
	warm_list_check();
}

/* The sweep (every WARM_SWEEP_MS while a connection is warm). */
static void
warm_sweep(evutil_socket_t fd, short what, void *arg)
{
	struct tls_rbatch *t, *next;

	(void)fd;
	(void)what;
	(void)arg;
	for (t = LIST_FIRST(&warm_list); t != NULL; t = next) {
		next = LIST_NEXT(t, warm_link);
		if (t->reads == 0)
			warm_end(t);
		else
			t->reads = 0;
	}
}

/* t read bytes from its socket: counts towards warm, or keeps it so. */
static void
warm_count(struct tls_rbatch *t)
{
	static const struct timeval every = {
		WARM_SWEEP_MS / 1000, (WARM_SWEEP_MS % 1000) * 1000
	};
	struct timespec now;
	uint64_t ms;

	if (t->warm) {
		t->reads++;
		return;
	}
	if (t->ssl == NULL || clock_gettime(CLOCK_MONOTONIC_COARSE, &now) != 0)
		return;
	ms = (uint64_t)now.tv_sec * 1000 + (uint64_t)now.tv_nsec / 1000000;
	if (t->reads == 0 || ms - t->since_ms > WARM_WINDOW_MS) {
		t->since_ms = ms;
		t->reads = 0;
	}
	if (++t->reads < WARM_READS)
		return;
	t->reads = 0;
	if (LIST_EMPTY(&warm_list)) {
		/* The timer goes to this loop (another base on this thread
		 * only while none is warm: a test's next base). */
		if (event_assign(&sweep_ev, t->base, -1, EV_PERSIST, warm_sweep,
		    NULL) != 0 || event_add(&sweep_ev, &every) != 0)
			return;
		sweep_base = t->base;
	} else if (sweep_base != t->base)
		return;          /* stays cold: the timer is another loop's */
	SSL_clear_mode(t->ssl, SSL_MODE_RELEASE_BUFFERS);
	LIST_INSERT_HEAD(&warm_list, t, warm_link);
	t->warm = 1;
}

/* Made once for the process (rbatch_method_get), then only read: every
 * loop thread shares it. */
static pthread_once_t rbatch_once = PTHREAD_ONCE_INIT;
static BIO_METHOD *rbatch_method;
static int rbatch_type;            /* its BIO type, for BIO_method_type */

static BIO_METHOD *rbatch_method_get(void);
static void sock_read_install(struct bufferevent *bev, struct tls_rbatch *t);

/*
 * The bufferevent whose read callback sock_read_cb runs right now, after
 * a read that decrypted the socket's last record (rbatch_settled), and its
 * BIO's t; else NULL.  A pull in that callback (tls_read_available: every
 * reader drains after its read) would find nothing: it says so without
 * asking OpenSSL (~130 instructions a pull).  Any read of t's BIO ends it
 * (rbatch_read: the answer may change), and so does the callback's return.
 * This thread's only; bev is alive meanwhile (sock_read_cb holds it).
 */
static _Thread_local const struct bufferevent *settled_bev;
static _Thread_local const struct tls_rbatch *settled_t;

/*
 * One spare read buffer per thread: a connection's buffer goes when the
 * socket is used up and the next read(2) on the thread (its own, or
 * another connection's) takes it back, not free and malloc each time
 * (~400 instructions a read(2); 264 KiB is past every cache of glibc's
 * malloc).  A thread holds at most one spare, freed when it ends
 * (spare_key's destructor; the main thread's stays reachable until exit).
 */
static pthread_once_t spare_once = PTHREAD_ONCE_INIT;
static pthread_key_t spare_key;
static int spare_key_ok;
static _Thread_local uint8_t *spare;
static _Thread_local int spare_registered;  /* spare_key set on this thread */

static void
spare_free(void *arg)
{
	(void)arg;
	free(spare);
	spare = NULL;
	spare_registered = 0;
}

static void
spare_key_make(void)
{
	spare_key_ok = pthread_key_create(&spare_key, spare_free) == 0;
}

/* A buffer of TLS_READ_AHEAD bytes (NULL: out of memory). */
static uint8_t *
buf_get(void)
{
	uint8_t *b = spare;

	if (b != NULL) {
		spare = NULL;
		return b;
	}
	return malloc(TLS_READ_AHEAD);
}

/* Gives back b (from buf_get; NULL: nothing): the thread's spare if it
 * has none, freed otherwise. */
static void
buf_put(uint8_t *b)
{
	if (b == NULL)
		return;
	if (spare == NULL && !spare_registered &&
	    pthread_once(&spare_once, spare_key_make) == 0 && spare_key_ok &&
	    pthread_setspecific(spare_key, &spare) == 0)
		spare_registered = 1;
	if (spare == NULL && spare_registered) {
		spare = b;
		return;
	}
	free(b);
}

/* What rbatch_fill found. */
enum { FILL_BYTES, FILL_EOF, FILL_WAIT, FILL_ERROR };

/*
 * Bytes for OpenSSL: t's buffer holds some, or gets them from one read(2)
 * of the socket.  Returns FILL_BYTES (the buffer holds bytes), FILL_EOF
 * (read(2) said 0, now or before), FILL_WAIT (would block; no read(2) when
 * a pull finds the socket used up, see `drained`) or FILL_ERROR (errno
 * says why; a socket's error is kept, and said again by every later
 * call, as libevent's read meets it after a socket event's read did:
 * sock_read_cb).
 */
static int
rbatch_fill(struct tls_rbatch *t)
{
	ssize_t r;

	if (t->start < t->end)
		return FILL_BYTES;
	if (t->eof)
		return FILL_EOF;
	if (t->err != 0) {
		errno = t->err;
		return FILL_ERROR;
	}
	if (t->drained && t->pulling) {
		/* The socket was empty and no event has said otherwise
		 * since.  (The buffer went with its last byte.) */
		return FILL_WAIT;
	}
	if (t->buf == NULL && (t->buf = buf_get()) == NULL) {
		errno = ENOMEM;
		return FILL_ERROR;
	}
	t->start = t->end = 0;
	do
		r = read(t->fd, t->buf, TLS_READ_AHEAD);
	while (r < 0 && errno == EINTR);
	if (r == 0) {
		t->eof = 1;
		return FILL_EOF;
	}
	if (r < 0) {
		if (errno == EAGAIN || errno == EWOULDBLOCK) {
			t->drained = 1;
			buf_put(t->buf);    /* idle: hold no buffer */
			t->buf = NULL;
			return FILL_WAIT;
		}
		t->err = errno;
		return FILL_ERROR;
	}
	t->end = (size_t)r;
	t->drained = (size_t)r < TLS_READ_AHEAD;
	warm_count(t);
	return FILL_BYTES;
}

static int
rbatch_read(BIO *bio, char *out, int outl)
{
	struct tls_rbatch *t = BIO_get_data(bio);
	size_t n;

	BIO_clear_retry_flags(bio);
	if (t == settled_t)
		settled_bev = NULL, settled_t = NULL;
	if (outl <= 0)
		return 0;
	switch (rbatch_fill(t)) {
	case FILL_EOF:
		return 0;
	case FILL_WAIT:
		BIO_set_retry_read(bio);
		return -1;
	case FILL_ERROR:
		return -1;
	default:
		break;
	}
	n = t->end - t->start;
	if (n > (size_t)outl)
		n = (size_t)outl;
	memcpy(out, t->buf + t->start, n);
	t->start += n;
	if (t->start == t->end && t->drained) {
		/* All the socket had is OpenSSL's now: no buffer until the next
		 * read(2) (pings of thousands of tunnels in one loop pass would
		 * otherwise hold as many buffers at once). */
		buf_put(t->buf);
		t->buf = NULL;
		t->start = t->end = 0;
	}
	return (int)n;
}

/*
 * At most the plaintext that OpenSSL holds decrypted and that the records
 * held whole in t's buffer carry (a record's body is at least as long as
 * its plaintext: AEAD tags, no compression).  0: neither.  Read from the
 * records' headers; the bytes are taken as records from the buffer's
 * start (if OpenSSL holds the start of a record, the figure is only less
 * apt: a reservation, not a bound that anything relies on).
 */
static size_t
rbatch_plain_max(const struct tls_rbatch *t, SSL *ssl)
{
	const uint8_t *p, *end;
	size_t sum = (size_t)SSL_pending(ssl), n;

	if (t->buf == NULL)
		return sum;
	p = t->buf + t->start;
	end = t->buf + t->end;
	while (end - p >= 5) {
		n = (size_t)p[3] << 8 | p[4];
		if ((size_t)(end - p) - 5 < n)
			break;
		sum += n;
		p += 5 + n;
	}
	return sum;
}

/*
 * ssl's read BIO if it is ours, else NULL.  Cost: a few calls, no system
 * call.
 */
static struct tls_rbatch *
rbatch_of(SSL *ssl)
{
	BIO *bio = SSL_get_rbio(ssl);

	if (bio == NULL || rbatch_method_get() == NULL ||
	    BIO_method_type(bio) != rbatch_type)
		return NULL;
	return BIO_get_data(bio);
}

/*
 * Whether an SSL_read on ssl would find nothing without a read(2) that we
 * know would say "would block": no plaintext or record bytes held, and the
 * socket was empty at the last read (drained; the bufferevent's own read,
 * which a socket event runs first, ends that).  A reader is then done
 * until the socket wakes the loop again.  (A partial record in OpenSSL
 * waits for its rest, which only the socket brings.)  No side effect: a
 * pull may ask again in the same loop pass, or in a later one that no
 * socket event began (a resume), and hears the same.
 */
static int
rbatch_settled(SSL *ssl, const struct tls_rbatch *t)
{
	return t != NULL && t->start == t->end && t->drained &&
	    SSL_pending(ssl) == 0;
}

static long
rbatch_ctrl(BIO *bio, int cmd, long num, void *ptr)
{
	struct tls_rbatch *t;

	/* Most asks fall to the default (kTLS queries): the BIO's data only
	 * where a case needs it. */
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
	case BIO_CTRL_EOF:
		t = BIO_get_data(bio);
		return t->eof && t->start == t->end;
	case BIO_CTRL_PENDING:
		t = BIO_get_data(bio);
		return (long)(t->end - t->start);
	case BIO_CTRL_FLUSH:
		return 1;
	default:
		return 0;
	}
}

static int
rbatch_destroy(BIO *bio)
{
	struct tls_rbatch *t = BIO_get_data(bio);

	if (t != NULL) {
		if (t->warm) {
			/* The SSL is being freed with its buffers: only the
			 * list and the timer are ours to settle. */
			LIST_REMOVE(t, warm_link);
			warm_list_check();
		}
		buf_put(t->buf);
		free(t);
		BIO_set_data(bio, NULL);
	}
	return 1;
}

/* Makes the method (pthread_once: loop threads may ask at once). */
static void
rbatch_method_make(void)
{
	int type = BIO_get_new_index() | BIO_TYPE_SOURCE_SINK | BIO_TYPE_DESCRIPTOR;
	BIO_METHOD *m = BIO_meth_new(type, "tether batched socket reads");

	if (m == NULL || BIO_meth_set_read(m, rbatch_read) != 1 ||
	    BIO_meth_set_ctrl(m, rbatch_ctrl) != 1 ||
	    BIO_meth_set_destroy(m, rbatch_destroy) != 1) {
		BIO_meth_free(m);
		return;
	}
	rbatch_type = type;
	rbatch_method = m;
}

/* The method, made once for the process; NULL if it could not be (out of
 * memory then: OpenSSL's own read-ahead instead). */
static BIO_METHOD *
rbatch_method_get(void)
{
	/* This thread's copy once pthread_once has returned here (it is
	 * then visible to it for good): pthread_once's call was ~20
	 * instructions of each of a request's half dozen asks. */
	static _Thread_local BIO_METHOD *seen;

	if (seen != NULL)
		return seen;
	if (pthread_once(&rbatch_once, rbatch_method_make) != 0)
		return NULL;
	return seen = rbatch_method;
}

void
tls_read_ahead(struct bufferevent *bev)
{
	SSL *ssl = bufferevent_openssl_get_ssl(bev);
	BIO_METHOD *m = rbatch_method_get();
	struct tls_rbatch *t;
	BIO *old, *bio;
	int fd;

	if (ssl == NULL)
		return;
	old = SSL_get_rbio(ssl);
	if (m != NULL && old != NULL && BIO_method_type(old) == rbatch_type)
		return;        /* has it already (a gateway client connection
		                * that became a WebSocket; warm or not) */
	/* OpenSSL's buffers exist only while they hold bytes (unless the
	 * connection is busy: warm_count): an idle connection holds
	 * neither. */
	SSL_set_mode(ssl, SSL_MODE_RELEASE_BUFFERS);
	if (m == NULL || old == NULL || BIO_method_type(old) != BIO_TYPE_SOCKET ||
	    (fd = (int)BIO_get_fd(old, NULL)) < 0) {
		/* Not on a socket (an https proxy's filter): OpenSSL's own
		 * read-ahead, one record's buffer. */
		SSL_set_read_ahead(ssl, 1);
		return;
	}
	if ((t = calloc(1, sizeof(*t))) == NULL)
		return;
	if ((bio = BIO_new(m)) == NULL) {
		free(t);
		return;
	}
	t->fd = fd;
	t->ssl = ssl;
	t->base = bufferevent_get_base(bev);
	BIO_set_data(bio, t);
	BIO_set_shutdown(bio, 0);
	BIO_set_init(bio, 1);
	/* Drops the socket BIO's read reference (it never closes the fd). */
	SSL_set0_rbio(ssl, bio);
	sock_read_install(bev, t);
}

void
tls_tune_input(struct bufferevent *bev, size_t max_buffered)
{
	/* With a high-water mark the OpenSSL bufferevent reserves room for
	 * up to that much at once instead of 4 KiB pieces. */
	bufferevent_setwatermark(bev, EV_READ, 0, max_buffered);
}

int
tls_read_held(struct bufferevent *bev)
{
	SSL *ssl = bufferevent_openssl_get_ssl(bev);
	BIO *rbio;

	if (ssl == NULL)
		return 0;
	if (SSL_has_pending(ssl))
		return 1;
	rbio = SSL_get_rbio(ssl);
	return rbio != NULL && BIO_ctrl_pending(rbio) > 0;
}

/*
 * SSL_reads into bev's input until it holds `limit` bytes, the socket's
 * last record is decrypted (rbatch_settled) or a read gives nothing.
 * pull: its first read is a drain's that no socket event began
 * (rbatch_read's "drained" rule); the reads after the first always are.
 * sized: room reserved for the records at hand (rbatch_plain_max), not a
 * large chain.  A read that meets something other than "would block"
 * (close_notify, an alert, an error) sets t->ended.  Returns the bytes
 * added; *settled (if not NULL) says whether it stopped at the socket's
 * last record decrypted.
 */
static size_t
read_records(struct bufferevent *bev, SSL *ssl, struct tls_rbatch *t,
    size_t limit, int pull, int sized, int *settled)
{
	struct evbuffer *in = bufferevent_get_input(bev);
	struct evbuffer_iovec v;
	size_t added = 0, chain, want;
	int r;

	/* A small limit (a connection not yet authenticated) gets a chain to
	 * match, not 512 KiB of memory it may never fill. */
	chain = limit + TLS_RECORD_MAX;
	if (chain > TLS_CHAIN_SIZE)
		chain = TLS_CHAIN_SIZE;
	if (chain < 2 * TLS_RECORD_MAX)
		chain = 2 * TLS_RECORD_MAX;
	while (evbuffer_get_length(in) < limit) {
		if (sized && t != NULL && (want = rbatch_plain_max(t, ssl)) > 0) {
			/* Room for the records at hand, no more: a small
			 * message's chain is a small allocation (a 32 KiB
			 * chain and a 64 KiB one were ~1,000 instructions of
			 * a /k8s request's every message).  Nor more than
			 * this read takes (up to the limit, and the record
			 * that crosses it): the records read ahead are not
			 * all this read's (a read of 4 KiB with 128 KiB of
			 * records ahead made a 256 KiB chain for 16 KiB). */
			if (want > limit - evbuffer_get_length(in) + TLS_RECORD_MAX)
				want = limit - evbuffer_get_length(in) + TLS_RECORD_MAX;
			if (evbuffer_reserve_space(in, (ev_ssize_t)want, &v, 1) < 1)
				break;
		} else if (evbuffer_reserve_space(in, TLS_RECORD_MAX, &v, 1) < 1)
			/* Records land back to back in big chains, so that a
			 * whole message is usually contiguous and needs no
			 * pullup copy. */
			break;
		else if (v.iov_len < 2 * TLS_RECORD_MAX &&
		    evbuffer_reserve_space(in, (ev_ssize_t)chain, &v, 1) < 1)
			break;
		if (v.iov_len > 4 * TLS_RECORD_MAX)
			v.iov_len = 4 * TLS_RECORD_MAX;
		/* No ERR_clear_error first (~840 instructions in OpenSSL 3):
		 * a call that succeeds adds nothing to the error queue, and
		 * every failure below leaves the queue empty again, so that
		 * SSL_get_error reads this call's own outcome. */
		if (t != NULL)
			t->pulling = pull;
		r = SSL_read(ssl, v.iov_base, (int)v.iov_len);
		if (t != NULL)
			t->pulling = 0;
		if (r <= 0) {
			/* Nothing committed: would-block is the socket's to
			 * end; close_notify, alerts and errors are seen again
			 * by the bufferevent's own SSL_read.  What this call
			 * queued goes: a later SSL_get_error on this thread
			 * must not read it as its own. */
			if (t != NULL && SSL_get_error(ssl, r) != SSL_ERROR_WANT_READ)
				t->ended = 1;
			if (ERR_peek_error() != 0)
				ERR_clear_error();
			break;
		}
		v.iov_len = (size_t)r;
		evbuffer_commit_space(in, &v, 1);
		added += (size_t)r;
		pull = 1;
		/* The socket's last bytes are decrypted: another SSL_read
		 * could only say "would block". */
		if (rbatch_settled(ssl, t)) {
			if (settled != NULL)
				*settled = 1;
			break;
		}
	}
	return added;
}

/*
 * The read event of a TLS bufferevent with our read BIO (sock_read_install),
 * in place of libevent's own callback.  A socket event that brings records
 * decrypts them into the input here and runs the read callback (once the
 * input reaches its low-water mark) at once, as libevent's read runs it
 * for a bufferevent that does not defer its callbacks (one that does
 * defers it to a later callback of the same loop pass: ~350 instructions
 * a read for nothing, since this is the loop's own callback, not a caller
 * that queued bytes), without what libevent's read adds to every wake: an ERR_clear_error before its SSL_read (~840 instructions in
 * OpenSSL 3), room for the whole high-water mark (a 32 KiB chain and a
 * 64 KiB one: room is sized to the records read, rbatch_plain_max), and
 * its bookkeeping.  Everything else is libevent's own callback's, called
 * here: a timeout, a read not enabled, an input at its high-water mark, a
 * handshake in progress (a TLS 1.2 renegotiation, while libevent may hold
 * a write that waits for a read: it keeps that state to itself), the
 * socket's EOF or error (kept by rbatch_fill), and an end met by an
 * SSL_read of ours (t->ended: close_notify, an alert, an error), which
 * libevent's read meets again at once (OpenSSL keeps it) and reports
 * through the event callback.  (An alert's or a decryption error's reason
 * is in the error queue of our read only: libevent then reports the end
 * as OpenSSL's second answer says, an EOF; an end met by a drain,
 * tls_read_available, always was.)  Reads what libevent's read would:
 * whole records up to the high-water mark (else 4 KiB), at most the
 * bufferevent's max_single_read.  Cost: ~150 instructions besides SSL_read and the
 * input's reserve and commit.
 */
static void
sock_read_cb(evutil_socket_t fd, short what, void *arg)
{
	/* The event's argument stays libevent's, the bufferevent (see
	 * sock_read_install); t is its SSL's read BIO's. */
	struct bufferevent *bev = arg;
	SSL *ssl = bufferevent_openssl_get_ssl(bev);
	struct tls_rbatch *t = ssl != NULL ? rbatch_of(ssl) : NULL;
	size_t low = 0, high = 0, len, most, added;
	ev_ssize_t single;
	int settled = 0;
	bufferevent_data_cb readcb = NULL;
	void *cbarg = NULL;

	if (t == NULL || t->bev_read_cb == NULL) {
		/* Cannot be (the BIO is ours while the SSL lives, and the
		 * callback is installed with it): nothing to call. */
		return;
	}
	if (what == EV_TIMEOUT || t->ended || SSL_in_init(ssl) ||
	    !(bufferevent_get_enabled(bev) & EV_READ) ||
	    bufferevent_getwatermark(bev, EV_READ, &low, &high) != 0 ||
	    ((len = evbuffer_get_length(bufferevent_get_input(bev))) >= high &&
	    high != 0)) {
		t->bev_read_cb(fd, what, arg);
		return;
	}
	/* The socket's bytes first: what they hold sizes the input's room.
	 * An end (EOF, an error) is libevent's read's to meet and report;
	 * nothing new and nothing decrypted held: nothing to do (as
	 * libevent's read, whose SSL_read would say "would block"). */
	switch (rbatch_fill(t)) {
	case FILL_EOF:
	case FILL_ERROR:
		t->bev_read_cb(fd, what, arg);
		return;
	case FILL_WAIT:
		if (SSL_pending(ssl) == 0)
			return;
		break;
	default:
		break;
	}
	bufferevent_incref(bev);
	bufferevent_lock(bev);
	/* What libevent's read would take: up to the mark (else 4 KiB), at
	 * most the bufferevent's max_single_read (wsturn.h's turns size
	 * reads with it), whole records. */
	most = high != 0 ? high - len : 4096;
	single = bufferevent_get_max_single_read(bev);
	if (single > 0 && (size_t)single < most)
		most = (size_t)single;
	added = read_records(bev, ssl, t, len + most, 0, 1, &settled);
	if (t->ended) {
		/* The data first (deferred, as libevent's read runs it), then
		 * libevent's read meets the end and reports it.  t lives as
		 * long as the SSL, which bev's reference keeps. */
		if (added > 0)
			bufferevent_trigger(bev, EV_READ, 0);
		t->bev_read_cb(fd, EV_READ, arg);
	} else if (added > 0 && len + added >= low) {
		/* The read callback now, as a bufferevent that does not defer
		 * runs it from its read: we are the loop's own callback, not
		 * inside a caller that queued bytes (BEV_OPT_DEFER_CALLBACKS'
		 * reason), and bev's reference is held until it returns (it
		 * may free bev).  Deferred, it cost a schedule and a dispatch
		 * of the deferred callback (~350 instructions a read). */
		bufferevent_getcb(bev, &readcb, NULL, NULL, &cbarg);
		if (readcb != NULL) {
			if (settled)
				settled_bev = bev, settled_t = t;
			readcb(bev, cbarg);
			settled_bev = NULL;
			settled_t = NULL;
		}
	}
	bufferevent_unlock(bev);
	bufferevent_decref(bev);
}

/*
 * Puts sock_read_cb in place of the callback of bev's read event
 * (bufferevent_struct.h's ev_read: libevent has no call for it), keeping
 * that callback in t.  The event's argument is left as it is: it is the
 * bufferevent (libevent's finalizer, bufferevent_finalize_cb_, reads the
 * read event's argument as the bufferevent, and its OpenSSL read callback
 * takes the same pointer).  Only on an open connection (libevent assigns
 * that event anew when a handshake ends), on t's socket, once.
 */
static void
sock_read_install(struct bufferevent *bev, struct tls_rbatch *t)
{
	struct event *ev = &bev->ev_read;
	int pending;

	if (SSL_in_init(t->ssl) || !event_initialized(ev) ||
	    event_get_fd(ev) != t->fd || event_get_callback(ev) == sock_read_cb ||
	    event_get_callback(ev) == NULL || event_get_callback_arg(ev) != bev)
		return;
	t->bev_read_cb = event_get_callback(ev);
	pending = event_pending(ev, EV_READ, NULL);
	event_del(ev);
	if (event_assign(ev, event_get_base(ev), t->fd, event_get_events(ev),
	    sock_read_cb, bev) != 0) {
		/* Cannot fail with these arguments; libevent's own then. */
		(void)event_assign(ev, event_get_base(ev), t->fd,
		    event_get_events(ev), t->bev_read_cb, bev);
	}
	/* As libevent adds it: with the read timeout, if there is one. */
	if (pending)
		(void)event_add(ev, evutil_timerisset(&bev->timeout_read) ?
		    &bev->timeout_read : NULL);
}

size_t
tls_read_available(struct bufferevent *bev, size_t limit)
{
	SSL *ssl;
	struct tls_rbatch *t;
	size_t added;

	if (bev == settled_bev)
		return 0;        /* the socket's last record is in the input */
	if ((ssl = bufferevent_openssl_get_ssl(bev)) == NULL)
		return 0;
	t = rbatch_of(ssl);
	if (rbatch_settled(ssl, t))
		return 0;
	added = read_records(bev, ssl, t, limit, 1, 0, NULL);
	/* The end, met here: libevent's read is to report it, now (no socket
	 * event may come: close_notify with the connection left open). */
	if (t != NULL && t->ended && t->bev_read_cb != NULL)
		event_active(&bev->ev_read, EV_READ, 1);
	return added;
}
