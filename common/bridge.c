/*
 * bridge.c: a tunnel stream joined to a TCP connection (see bridge.h).
 *
 * Life: stream calls can end the stream synchronously (a FIN that
 * completes both directions), so the bridge may finish inside any of its
 * entry points.  bridge_finish marks it BRIDGE_DONE, drops the stream and
 * the socket (so no callback reaches it again), reports on_done, and makes
 * the bridge's own event active; the loop runs it once every call on the
 * stack has returned, and it frees the bridge (docs/0015: an end is always
 * deferred to the loop).  No entry point counts itself.
 */
#include "bridge.h"

#include <assert.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/bufferevent_ssl.h>
#include <event2/event.h>

#include "mux.h"

#define BRIDGE_CHUNK     (128 * 1024)   /* largest DATA taken from the socket at once */
#define BRIDGE_READ_MAX  (256 * 1024)   /* bytes read from the socket per wakeup */
/* A bare socket's first read of a wakeup (sock_readable): a small answer's
 * whole, without asking the socket's size first. */
#define BRIDGE_FIRST_READ (16 * 1024)

enum bridge_state {
	BRIDGE_PENDING,   /* accepting: the caller is dialing */
	BRIDGE_OPENING,   /* opening: OPEN sent, waiting for the answer */
	BRIDGE_OPEN,      /* bytes flow */
	BRIDGE_DONE,      /* finished; reap frees it from the loop */
};

struct bridge {
	enum bridge_state state;
	struct mux_stream *s;        /* NULL once the stream has ended */
	struct bufferevent *bev;     /* owned */
	int sock_eof;                /* the socket will send no more */
	int fin_sent;                /* ...and we told the peer */
	int peer_fin;                /* the peer will send no more */
	int wr_shut;                 /* shutdown(SHUT_WR) done */
	struct event *reap;          /* active once DONE: frees the bridge */
	int plain;                   /* bev is a bare socket: bytes may go to it directly */
	evutil_socket_t fd;          /* bev's socket when plain, else -1 (bufferevent_getfd
	                              * takes the bufferevent's lock: ~65 instructions) */
	struct event *rd;            /* owned; a bare socket's reads (sock_readable), else NULL */
	int rd_on;                   /* rd is added (sock_want_read) */
	int bulk;                    /* the last wakeup read BRIDGE_FIRST_READ or
	                              * more (sock_fill): the next one starts
	                              * with a read of all the room */
	struct bridge_stats stats;
	char end[48];
	bridge_done_fn *on_done;
	bridge_opened_fn *on_opened;
	void *arg;
	/* head filter (bridge_set_head_filter) */
	bridge_head_fn *head_fn;
	bridge_tail_fn *tail_fn;
	void *head_arg;
	size_t head_max;
	struct evbuffer *head;       /* stream bytes held until a whole head */
	int head_done;               /* in a message's body (the tail filter's) */
	unsigned messages;           /* heads rewritten so far */
	/* Rewritten heads still in the output buffer, oldest first: each
	 * after `ahead` unchanged bytes, `skip` bytes long, standing for
	 * `credit` stream bytes that are credited once all of it has left.
	 * plain_tail: unchanged bytes written after the newest of them. */
	struct bridge_out_head {
		size_t ahead, skip, credit;
	} heads[BRIDGE_HEADS_MAX];
	unsigned nheads;
	size_t plain_tail;
};

static void bridge_finish(struct bridge *b, const char *end);
static void sock_event(struct bufferevent *bev, short what, void *arg);

/* Reading the socket on or off: through the bridge's own read event for a
 * bare socket (sock_readable), the bufferevent's otherwise.  The read event
 * is added or deleted only when that changes: every answer read turns it
 * on again (bridge_pump_in), and event_add of an added event still cost
 * ~90 instructions. */
static void
sock_want_read(struct bridge *b, int on)
{
	on = on != 0;
	if (b->rd == NULL && on)
		bufferevent_enable(b->bev, EV_READ);
	else if (b->rd == NULL)
		bufferevent_disable(b->bev, EV_READ);
	else if (on != b->rd_on && (on ? event_add(b->rd, NULL) : event_del(b->rd)) == 0)
		b->rd_on = on;
}

/* ---- socket -> stream ---- */

static void
bridge_maybe_fin(struct bridge *b)
{
	if (!b->sock_eof || b->fin_sent || b->s == NULL ||
	    evbuffer_get_length(bufferevent_get_input(b->bev)) > 0)
		return;
	b->fin_sent = 1;
	mux_stream_fin(b->s);   /* may end the stream: on_close runs */
}

static void
bridge_pump_in(struct bridge *b)
{
	struct evbuffer *in;
	size_t len, chunk, n;
	uint8_t *p;

	if (b->state != BRIDGE_OPEN || b->s == NULL)
		return;
	in = bufferevent_get_input(b->bev);
	while ((len = evbuffer_get_length(in)) > 0) {
		chunk = len < BRIDGE_CHUNK ? len : BRIDGE_CHUNK;
		p = evbuffer_pullup(in, (ssize_t)chunk);
		n = mux_stream_send(b->s, p, chunk);
		evbuffer_drain(in, n);
		b->stats.bytes_in += n;
		if (n < chunk) {
			/* Out of credit or transport room: stop reading until
			 * on_writable, so the socket's peer feels the backpressure. */
			sock_want_read(b, 0);
			return;
		}
	}
	if (!b->sock_eof)
		sock_want_read(b, 1);
	bridge_maybe_fin(b);
}

/* ---- stream -> socket ---- */

static void
bridge_maybe_shutdown(struct bridge *b)
{
	if (!b->peer_fin || b->wr_shut ||
	    evbuffer_get_length(bufferevent_get_output(b->bev)) > 0)
		return;
	b->wr_shut = 1;
	shutdown(bufferevent_getfd(b->bev), SHUT_WR);
	if (b->s == NULL)
		bridge_finish(b, "done");
}

static void
bridge_output_drained(struct evbuffer *buf, const struct evbuffer_cb_info *info, void *arg)
{
	struct bridge *b = arg;
	size_t n = info->n_deleted, credit = 0, k;
	struct bridge_out_head *h;

	if (n == 0 || b->state == BRIDGE_DONE)
		return;
	/* FIFO: unchanged bytes are credited as they leave, a rewritten head
	 * once the whole of it has left, for the stream bytes it stood for. */
	while (n > 0 && b->nheads > 0) {
		h = &b->heads[0];
		k = n < h->ahead ? n : h->ahead;
		h->ahead -= k;
		credit += k;
		n -= k;
		k = n < h->skip ? n : h->skip;
		h->skip -= k;
		n -= k;
		if (h->ahead > 0 || h->skip > 0)
			break;
		credit += h->credit;
		memmove(&b->heads[0], &b->heads[1], --b->nheads * sizeof(b->heads[0]));
		if (b->nheads == 0)
			b->plain_tail = 0;   /* now ordinary bytes, as they leave */
	}
	credit += n;
	if (credit == 0)
		return;
	b->stats.bytes_out += credit;
	if (b->s != NULL)
		mux_stream_drained(b->s, credit);
}

/* The head filter refused the stream: reset it with code. */
static void
bridge_reject(struct bridge *b, const char *code)
{
	char end[48];

	if (b->s != NULL) {
		mux_stream_reset(b->s, code);
		b->s = NULL;
	}
	snprintf(end, sizeof(end), "rejected:%s", code);
	bridge_finish(b, end);
}

/* Writes n unchanged stream bytes to the output buffer, behind any
 * rewritten head still waiting there. */
static void
bridge_out_plain(struct bridge *b, const uint8_t *data, size_t n)
{
	if (n == 0)
		return;
	if (b->nheads > 0)
		b->plain_tail += n;
	bufferevent_write(b->bev, data, n);
}

/* Writes a rewritten head (outlen bytes standing for used stream bytes) to
 * the output buffer.  Returns 0, or -1 if too many heads wait there
 * already. */
static int
bridge_out_head(struct bridge *b, const char *out, size_t outlen, size_t used)
{
	struct bridge_out_head *h;

	if (outlen == 0) {
		/* Nothing to wait for: the bytes it stood for are drained. */
		b->stats.bytes_out += used;
		if (used > 0 && b->s != NULL)
			mux_stream_drained(b->s, used);
		return 0;
	}
	if (b->nheads == BRIDGE_HEADS_MAX)
		return -1;
	h = &b->heads[b->nheads];
	h->ahead = b->nheads == 0 ?
	    evbuffer_get_length(bufferevent_get_output(b->bev)) : b->plain_tail;
	h->skip = outlen;
	h->credit = used;
	b->nheads++;
	b->plain_tail = 0;
	bufferevent_write(b->bev, out, outlen);
	return 0;
}

/*
 * What one pass of the head filter (bridge_filter) writes, in order:
 * rewritten heads (owned: wiped and freed once written) and unchanged body
 * bytes (pointing into the DATA being filtered), each standing for
 * `credit` stream bytes.  Gathered so that a bare socket with nothing
 * queued gets them with one sendmsg(2) and their credit goes back at once,
 * as bridge_write does for a stream without the filter; through the
 * output buffer instead, each head cost two epoll_ctl(2), a loop pass and
 * a writev(2) (9.0 -> 6.0 system calls per /k8s request,
 * tests/bench/k8s_instructions.sh BENCH_PROFILE=agent BENCH_SYSCALLS=1
 * BENCH_SERVICE_TOKEN=1).
 */
#define BRIDGE_OUT_SEGS 8
struct bridge_gather {
	struct bridge_seg {
		const uint8_t *p;
		size_t len, credit;
		char *owned;             /* a rewritten head's buffer */
	} seg[BRIDGE_OUT_SEGS];
	int n;
	const char *reject;          /* a code: the stream is reset after the flush */
};

/* Writes what g holds: as much as a bare socket with nothing queued takes
 * at once, the rest into the output buffer (bridge_out_head,
 * bridge_out_plain: credited as it leaves).  Bytes the socket took are
 * credited now; a head only once all of it is taken.  Too many heads
 * waiting sets g->reject ("too_many_requests_waiting") and writes nothing
 * after them.  Frees the heads in every case (g empty after). */
static void
bridge_gather_flush(struct bridge *b, struct bridge_gather *g)
{
	struct iovec iov[BRIDGE_OUT_SEGS];
	struct msghdr mh;
	size_t sent = 0, credit = 0, k;
	ssize_t r;
	int i, io = b->state != BRIDGE_DONE && b->bev != NULL;

	if (io && b->fd >= 0 && b->nheads == 0 &&
	    evbuffer_get_length(bufferevent_get_output(b->bev)) == 0) {
		memset(&mh, 0, sizeof(mh));
		for (i = 0; i < g->n; i++) {
			iov[i].iov_base = (void *)g->seg[i].p;
			iov[i].iov_len = g->seg[i].len;
		}
		mh.msg_iov = iov;
		mh.msg_iovlen = (size_t)g->n;
		r = g->n > 0 ? sendmsg(b->fd, &mh, MSG_DONTWAIT | MSG_NOSIGNAL) : 0;
		if (r > 0)
			sent = (size_t)r;
	}
	for (i = 0; i < g->n; i++) {
		struct bridge_seg *sg = &g->seg[i];

		if (io && g->reject == NULL) {
			k = sent < sg->len ? sent : sg->len;
			sent -= k;
			if (k == sg->len)
				credit += sg->credit;
			else if (sg->owned == NULL) {
				credit += k;
				bridge_out_plain(b, sg->p + k, sg->len - k);
			} else if (bridge_out_head(b, (const char *)sg->p + k,
			    sg->len - k, sg->credit) != 0)
				g->reject = "too_many_requests_waiting";
		}
		if (sg->owned != NULL) {
			explicit_bzero(sg->owned, sg->len);
			free(sg->owned);
		}
	}
	g->n = 0;
	if (credit > 0 && io) {
		b->stats.bytes_out += credit;
		if (b->s != NULL)
			mux_stream_drained(b->s, credit);
	}
}

/* Adds a segment to g (flushing it first when full). */
static void
bridge_gather_add(struct bridge *b, struct bridge_gather *g, const void *p,
    size_t len, size_t credit, char *owned)
{
	if (g->n == BRIDGE_OUT_SEGS)
		bridge_gather_flush(b, g);
	g->seg[g->n].p = p;
	g->seg[g->n].len = len;
	g->seg[g->n].credit = credit;
	g->seg[g->n].owned = owned;
	g->n++;
}

/* In a message's body: what the tail filter lets pass is gathered for the
 * socket; when it says the message ended, the next bytes are a new head.
 * Returns how many of data it took, or (size_t)-1 if it refused the rest
 * (g->reject says why). */
static size_t
bridge_body(struct bridge *b, struct bridge_gather *g, const uint8_t *data,
    size_t len)
{
	const char *code = "rejected";
	size_t n = len;
	int done = 0;

	if (b->tail_fn != NULL)
		n = b->tail_fn(data, len, &done, &code, b->head_arg);
	if (n > len)
		n = len;
	if (n > 0)
		bridge_gather_add(b, g, data, n, n, NULL);
	if (done) {
		b->head_done = 0;
		return n;
	}
	if (n < len) {
		g->reject = code;
		return (size_t)-1;
	}
	return n;
}

/* Waiting for a whole head: once one is there, its rewrite is gathered for
 * the socket.  While no bytes are held the filter reads data where it is;
 * an incomplete head is held (b->head) until the rest arrives.  Returns
 * how many of data it took (the bytes after the head are given back), or
 * (size_t)-1 if the stream must be reset (g->reject says why). */
static size_t
bridge_head(struct bridge *b, struct bridge_gather *g, const uint8_t *data,
    size_t len)
{
	const char *code = "bad_request_head";
	size_t have, used = 0, outlen = 0, rest;
	const uint8_t *buf = data;
	char *out = NULL;
	int held = b->head != NULL && evbuffer_get_length(b->head) > 0, r;

	have = len;
	if (held) {
		if (evbuffer_add(b->head, data, len) != 0) {
			g->reject = "internal";
			return (size_t)-1;
		}
		have = evbuffer_get_length(b->head);
		buf = evbuffer_pullup(b->head, -1);
	}
	r = b->head_fn(buf, have, &used, &out, &outlen, &code, b->head_arg);
	if ((r == 0 && have >= b->head_max) || (r > 0 && used > b->head_max)) {
		r = -1;
		code = "head_too_large";
	}
	if (r == 1 && (used == 0 || used > have)) {
		r = -1;
		code = "internal";
	}
	if (r != 1 && out != NULL) {
		explicit_bzero(out, outlen);
		free(out);
		out = NULL;
	}
	if (r != 0 && r != 1) {
		g->reject = code;
		return (size_t)-1;
	}
	if (r == 0) {
		/* Not whole yet: hold what came (held: added already). */
		if (!held && ((b->head == NULL && (b->head = evbuffer_new()) == NULL) ||
		    evbuffer_add(b->head, data, len) != 0)) {
			g->reject = "internal";
			return (size_t)-1;
		}
		return len;
	}
	/* out (outlen bytes; NULL when empty) stands for the head's used
	 * stream bytes. */
	bridge_gather_add(b, g, out, outlen, used, out);
	b->head_done = 1;
	b->messages++;
	if (!held)
		return used;
	/* The head ended within data (it was not whole before): what follows
	 * it is not held but handed back. */
	rest = have - used;
	evbuffer_drain(b->head, have);
	if (rest > len) {
		/* Held bytes held a whole head already: cannot be (head_fn
		 * saw them); refuse rather than lose bytes. */
		g->reject = "internal";
		return (size_t)-1;
	}
	return len - rest;
}

/* Stream bytes through the head filter: heads rewritten, bodies passed,
 * for as many messages as they hold, then written together
 * (bridge_gather_flush); a refusal resets the stream after what came
 * before it is written. */
static void
bridge_filter(struct bridge *b, const uint8_t *data, size_t len)
{
	struct bridge_gather g;
	size_t n;

	g.n = 0;
	g.reject = NULL;
	while (len > 0 && b->state == BRIDGE_OPEN && b->s != NULL &&
	    g.reject == NULL) {
		n = b->head_done ? bridge_body(b, &g, data, len) :
		    bridge_head(b, &g, data, len);
		if (n == (size_t)-1)
			break;
		data += n;
		len -= n;
	}
	bridge_gather_flush(b, &g);
	if (g.reject != NULL && b->state != BRIDGE_DONE)
		bridge_reject(b, g.reject);
}

/* Stream bytes for the socket (no head filter).  On a bare socket (not
 * TLS, not a filter), while nothing waits in the output buffer they go
 * straight to it: no copy into the
 * buffer, no loop iteration before they leave, and their credit goes back
 * at once.  What the socket does not take waits in the output buffer; an
 * error is left for the bufferevent's own write to find. */
static void
bridge_write(struct bridge *b, const uint8_t *data, size_t len)
{
	ssize_t n = 0;

	if (b->fd >= 0 && evbuffer_get_length(bufferevent_get_output(b->bev)) == 0) {
		n = send(b->fd, data, len, MSG_DONTWAIT | MSG_NOSIGNAL);
		if (n < 0)
			n = 0;
	}
	if ((size_t)n < len)
		bufferevent_write(b->bev, data + n, len - (size_t)n);
	if (n > 0) {
		b->stats.bytes_out += (uint64_t)n;
		if (b->s != NULL)
			mux_stream_drained(b->s, (size_t)n);
	}
}

/* ---- stream handlers ---- */

static void
st_opened(struct mux_stream *s, int ok, const char *code, const char *reason, void *arg)
{
	struct bridge *b = arg;
	char end[48];

	if (b->on_opened != NULL)
		b->on_opened(b, ok, code, reason, b->arg);
	if (b->state == BRIDGE_DONE)
		return;  /* on_opened aborted it */
	if (ok) {
		b->state = BRIDGE_OPEN;
		bridge_pump_in(b);
	} else {
		b->s = NULL;
		snprintf(end, sizeof(end), "refused:%s", code);
		bridge_finish(b, end);
	}
}

static void
st_data(struct mux_stream *s, const uint8_t *data, size_t len, void *arg)
{
	struct bridge *b = arg;

	if (b->state != BRIDGE_OPEN || b->wr_shut)
		return;
	if (b->head_fn != NULL) {
		bridge_filter(b, data, len);
		return;
	}
	bridge_write(b, data, len);
}

static void
st_writable(struct mux_stream *s, void *arg)
{
	bridge_pump_in(arg);
}

static void
st_fin(struct mux_stream *s, void *arg)
{
	struct bridge *b = arg;

	b->peer_fin = 1;
	/* The end of the stream must not cut a head (nor come before the
	 * first); after a whole message it is the end of the requests. */
	if (b->head_fn != NULL && !b->head_done && b->state == BRIDGE_OPEN &&
	    (b->messages == 0 || (b->head != NULL && evbuffer_get_length(b->head) > 0)))
		bridge_reject(b, "head_incomplete");
	else if (b->bev != NULL)
		bridge_maybe_shutdown(b);
}

static void
st_close(struct mux_stream *s, const char *code, void *arg)
{
	struct bridge *b = arg;
	char end[48];

	b->s = NULL;
	if (strcmp(code, "done") == 0 && b->bev != NULL && !b->wr_shut) {
		/* Both FINs are exchanged but our output may still be flushing:
		 * finish once it is written and shut down. */
		bridge_maybe_shutdown(b);
	} else if (strcmp(code, "done") == 0) {
		bridge_finish(b, "done");
	} else {
		snprintf(end, sizeof(end), "%s%s", strcmp(code, "tunnel_lost") == 0 ?
		    "" : "reset:", code);
		bridge_finish(b, end);
	}
}

static const struct mux_stream_handlers bridge_stream_handlers = {
	.on_opened = st_opened,
	.on_data = st_data,
	.on_writable = st_writable,
	.on_fin = st_fin,
	.on_close = st_close,
};

/* ---- socket events ---- */

/*
 * Reads what the socket holds into the input buffer, up to the read limit
 * (BRIDGE_READ_MAX): one read(2) into a reserved chunk of at most
 * BRIDGE_FIRST_READ (of all the room when b->bulk), and while the socket
 * filled what it was given, more straight after.  `before` bytes were read
 * in this wakeup already (sock_read_direct); b->bulk is set to whether the
 * wakeup read BRIDGE_FIRST_READ or more.  Returns the last read's result
 * (0: end of file, -1 with errno) or 1 once the socket is emptied or the
 * limit reached.
 * A socket bufferevent keeps its input's end frozen outside its own reads;
 * we add to it as such a read would, then freeze it again.
 */
static ssize_t
sock_fill(struct bridge *b, evutil_socket_t fd, size_t before)
{
	struct evbuffer *in = bufferevent_get_input(b->bev);
	struct evbuffer_iovec v;
	size_t len, want, first = b->bulk ? BRIDGE_READ_MAX : BRIDGE_FIRST_READ;
	ssize_t n = 1;

	evbuffer_unfreeze(in, 0);
	while ((len = evbuffer_get_length(in)) < BRIDGE_READ_MAX) {
		want = BRIDGE_READ_MAX - len;
		if (want > first)
			want = first;
		first = BRIDGE_READ_MAX;   /* a full first read: take the rest at once */
		if (evbuffer_reserve_space(in, (ev_ssize_t)want, &v, 1) < 1) {
			n = -1;
			errno = ENOMEM;
			break;
		}
		if (v.iov_len > want)
			v.iov_len = want;
		n = read(fd, v.iov_base, v.iov_len);
		if (n <= 0)
			break;   /* nothing committed */
		v.iov_len = (size_t)n;
		evbuffer_commit_space(in, &v, 1);
		before += (size_t)n;
		if ((size_t)n < want) {
			n = 1;
			break;
		}
	}
	evbuffer_freeze(in, 0);
	b->bulk = before >= BRIDGE_FIRST_READ;
	return n;
}

/*
 * The first read of a wakeup when nothing waits in the input and the
 * stream is open: into a stack buffer and from there into the stream, as
 * bridge_pump_in would send it, so a small answer costs no input chunk
 * (reserve, commit, pullup, drain: ~0.8k instructions per /k8s request,
 * tests/bench/k8s_instructions.sh BENCH_PROFILE=agent).  What the stream
 * does not take waits in the input.  Returns as sock_fill, and reads on
 * with it after a full buffer (which makes the bridge bulk: its next
 * wakeups read with sock_fill alone, one read(2) of up to BRIDGE_READ_MAX
 * for what a bulk sender has ready, instead of a 16 KiB read and then the
 * rest: ~5,000 reads per GiB fewer in a tetherctl forward's upload,
 * tests/bench/throughput_profile.sh).
 */
static ssize_t
sock_read_direct(struct bridge *b, evutil_socket_t fd)
{
	struct evbuffer *in = bufferevent_get_input(b->bev);
	uint8_t buf[BRIDGE_FIRST_READ];
	ssize_t n = read(fd, buf, sizeof(buf));
	size_t sent;

	if (n <= 0)
		return n;
	sent = mux_stream_send(b->s, buf, (size_t)n);
	b->stats.bytes_in += sent;
	if (sent < (size_t)n) {
		evbuffer_unfreeze(in, 0);
		n = evbuffer_add(in, buf + sent, (size_t)n - sent) == 0 ? 1 : -1;
		evbuffer_freeze(in, 0);
		if (n < 0)
			errno = ENOMEM;
		return n;
	}
	if ((size_t)n < sizeof(buf) || b->state != BRIDGE_OPEN || b->s == NULL)
		return 1;
	return sock_fill(b, fd, (size_t)n);
}

/*
 * A bare socket is readable.  Its reads are the bridge's own, not the
 * bufferevent's: libevent 2.1's evbuffer_read asks the socket's size
 * (ioctl FIONREAD) before every read, and then reads at most 4 KiB
 * (EVBUFFER_MAX_READ).  Cost: one system call fewer per upstream answer
 * on the agent's /k8s path (7.0 -> 6.0 per request, tests/bench/
 * k8s_instructions.sh BENCH_PROFILE=agent BENCH_SYSCALLS=1).  End of file
 * and errors are this callback's to see, as sock_event sees them for a
 * bufferevent's read.
 */
static void
sock_readable(evutil_socket_t fd, short what, void *arg)
{
	struct bridge *b = arg;
	ssize_t n;

	if (!b->bulk && b->state == BRIDGE_OPEN && b->s != NULL &&
	    evbuffer_get_length(bufferevent_get_input(b->bev)) == 0)
		n = sock_read_direct(b, fd);
	else
		n = sock_fill(b, fd, 0);
	if (b->bev == NULL)
		return;   /* the stream's send ended the bridge */
	if (n == 0) {
		sock_event(b->bev, BEV_EVENT_READING | BEV_EVENT_EOF, b);
		return;
	}
	if (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) {
		sock_event(b->bev, BEV_EVENT_READING | BEV_EVENT_ERROR, b);
		return;
	}
	bridge_pump_in(b);
	/* Input at the limit that the stream did not take (no stream, an
	 * opening one): stop reading, as the bufferevent's high-water mark
	 * would; bridge_pump_in reads again once it drains. */
	if (b->bev != NULL &&
	    evbuffer_get_length(bufferevent_get_input(b->bev)) >= BRIDGE_READ_MAX)
		sock_want_read(b, 0);
}

/* Under TLS (an https upstream's filter) the fd carries records, which only
 * the TLS layer may read: the bufferevent's read delivers them. */
static void
sock_read(struct bufferevent *bev, void *arg)
{
	bridge_pump_in(arg);
}

static void
sock_write(struct bufferevent *bev, void *arg)
{
	bridge_maybe_shutdown(arg);
}

static void
sock_event(struct bufferevent *bev, short what, void *arg)
{
	struct bridge *b = arg;

	if (what & BEV_EVENT_EOF) {
		b->sock_eof = 1;
		sock_want_read(b, 0);
		bridge_pump_in(b);
	} else if (what & BEV_EVENT_ERROR) {
		if (b->s != NULL) {
			mux_stream_reset(b->s, "socket_error");
			b->s = NULL;
		}
		bridge_finish(b, "socket_error");
	}
}

static void
bridge_setup_socket(struct bridge *b, struct bufferevent *bev)
{
	evutil_socket_t fd = bufferevent_getfd(bev);

	b->bev = bev;
	b->plain = bufferevent_get_underlying(bev) == NULL &&
	    bufferevent_openssl_get_ssl(bev) == NULL;
	b->fd = b->plain ? fd : -1;
	/* Without its own read event (none made) the bridge reads through
	 * the bufferevent, as under TLS. */
	if (b->plain && fd >= 0)
		b->rd = event_new(bufferevent_get_base(bev), fd, EV_READ | EV_PERSIST,
		    sock_readable, b);
	if (b->rd != NULL)
		bufferevent_disable(bev, EV_READ);   /* its read would ask FIONREAD */
	bufferevent_set_max_single_read(bev, BRIDGE_READ_MAX);
	bufferevent_set_max_single_write(bev, BRIDGE_READ_MAX);
	/* Bound what is read ahead of the stream's credit. */
	bufferevent_setwatermark(bev, EV_READ, 0, BRIDGE_READ_MAX);
	bufferevent_setcb(bev, sock_read, sock_write, sock_event, b);
	evbuffer_add_cb(bufferevent_get_output(bev), bridge_output_drained, b);
}

/* ---- life cycle ---- */

/* The loop's callback: nothing of the bridge is on the stack any more. */
static void
bridge_reap(evutil_socket_t fd, short what, void *arg)
{
	struct bridge *b = arg;

	(void)fd;
	(void)what;
	assert(b->state == BRIDGE_DONE && b->s == NULL && b->bev == NULL);
	event_free(b->reap);
	free(b);
}

/* A bridge in its first state, its reap event on base.  NULL on no memory. */
static struct bridge *
bridge_new(struct event_base *base, enum bridge_state state)
{
	struct bridge *b = calloc(1, sizeof(*b));

	if (b == NULL)
		return NULL;
	if ((b->reap = event_new(base, -1, 0, bridge_reap, b)) == NULL) {
		free(b);
		return NULL;
	}
	b->state = state;
	b->fd = -1;
	return b;
}

/* Ends the bridge once: drops the stream and the socket, reports on_done,
 * and leaves the freeing to the loop (bridge_reap). */
static void
bridge_finish(struct bridge *b, const char *end)
{
	if (b->state == BRIDGE_DONE)
		return;
	b->state = BRIDGE_DONE;
	snprintf(b->end, sizeof(b->end), "%s", end);
	b->stats.end = b->end;
	if (b->s != NULL) {
		mux_stream_reset(b->s, "cancelled");
		b->s = NULL;
	}
	if (b->bev != NULL) {
		/* The output buffer may outlive the bufferevent for a while:
		 * its drain callback must not reach the freed bridge. */
		evbuffer_remove_cb(bufferevent_get_output(b->bev),
		    bridge_output_drained, b);
		if (b->rd != NULL) {
			event_free(b->rd);
			b->rd = NULL;
			b->rd_on = 0;
		}
		bufferevent_free(b->bev);
		b->bev = NULL;
		b->fd = -1;
	}
	if (b->head != NULL) {
		evbuffer_free(b->head);
		b->head = NULL;
	}
	event_active(b->reap, EV_TIMEOUT, 1);
	if (b->on_done != NULL)
		b->on_done(b, &b->stats, b->arg);
}

struct bridge *
bridge_accepting(struct mux_stream *s, bridge_done_fn *on_done, void *arg)
{
	struct bridge *b = bridge_new(mux_stream_base(s), BRIDGE_PENDING);

	if (b == NULL)
		return NULL;
	b->s = s;
	b->on_done = on_done;
	b->arg = arg;
	mux_stream_hold(s, &bridge_stream_handlers, b);
	return b;
}

void
bridge_set_head_filter(struct bridge *b, size_t max, bridge_head_fn *fn,
    bridge_tail_fn *tail, void *arg)
{
	/* bridge.h: set before bridge_attach. */
	assert(b->state == BRIDGE_PENDING && b->bev == NULL);
	b->tail_fn = tail;
	b->head_fn = fn;
	b->head_arg = arg;
	b->head_max = max;
}

int
bridge_pending(const struct bridge *b)
{
	return b->state == BRIDGE_PENDING && b->s != NULL;
}

int
bridge_attach(struct bridge *b, struct bufferevent *bev)
{
	/* bridge.h: not used after on_done. */
	assert(b->state != BRIDGE_DONE);
	if (b->state != BRIDGE_PENDING || b->s == NULL) {
		bufferevent_free(bev);
		return -1;
	}
	bridge_setup_socket(b, bev);
	if (mux_stream_accept(b->s, NULL, NULL, NULL) != 0) {
		b->s = NULL;
		bridge_finish(b, "refused:busy");
		return -1;
	}
	b->state = BRIDGE_OPEN;
	bufferevent_enable(bev, EV_WRITE);
	sock_want_read(b, 1);
	return 0;
}

void
bridge_refuse(struct bridge *b, const char *code, const char *reason)
{
	char end[48];

	assert(b->state != BRIDGE_DONE);   /* bridge.h: not used after on_done */
	if (b->state == BRIDGE_PENDING && b->s != NULL) {
		mux_stream_refuse(b->s, code, reason);
		b->s = NULL;
	}
	snprintf(end, sizeof(end), "refused:%s", code);
	bridge_finish(b, end);
}

struct bridge *
bridge_open(struct mux *m, const char *target, struct bufferevent *bev,
    bridge_opened_fn *on_opened, bridge_done_fn *on_done, void *arg)
{
	struct bridge *b = bridge_new(bufferevent_get_base(bev), BRIDGE_OPENING);
	struct frame_open req;

	if (b == NULL)
		return NULL;
	frame_open_init(&req, target, NULL);
	b->on_done = on_done;
	b->on_opened = on_opened;
	b->arg = arg;
	b->s = mux_open(m, NULL, &req, &bridge_stream_handlers, b);
	if (b->s == NULL) {
		event_free(b->reap);
		free(b);
		return NULL;
	}
	bridge_setup_socket(b, bev);
	sock_want_read(b, 0);
	bufferevent_enable(bev, EV_WRITE);
	return b;
}

void
bridge_abort(struct bridge *b, const char *code)
{
	assert(b->state != BRIDGE_DONE);   /* bridge.h: not used after on_done */
	if (b->s != NULL) {
		if (b->state == BRIDGE_PENDING)
			mux_stream_refuse(b->s, code, "cancelled");
		else
			mux_stream_reset(b->s, code);
		b->s = NULL;
	}
	bridge_finish(b, code);
}
