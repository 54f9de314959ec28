/*
 * mux.c: streams inside one tunnel (see mux.h).
 *
 * Streams live on one list per multiplexer and in a hash table by id (the
 * lookup every DATA, WINDOW, FIN and RESET frame makes).  A stream that
 * ends is unlinked from both at once (so no frame reaches it again), marked
 * STREAM_CLOSED and put on the closed list; the mux's own event, made
 * active then, frees the closed streams from the loop, once every call on
 * the stack has returned (docs/0015: an end is always deferred to the
 * loop).  So a handler may end a stream from inside a callback that still
 * holds it, and no call counts itself.
 */
#include "mux.h"

#include <assert.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <sys/queue.h>

#include <event2/buffer.h>
#include <event2/event.h>
#include <openssl/rand.h>

#include "budget.h"
#include "flow.h"
#include "mux_metrics.h"
#include "prom.h"

#define MUX_BUCKETS_MIN 16u

enum stream_state {
	STREAM_OPENING,     /* we sent OPEN, no answer yet */
	STREAM_ACCEPTING,   /* peer sent OPEN, we have not answered */
	STREAM_OPEN,        /* data may flow (subject to FIN) */
	STREAM_CLOSED,      /* ended; on the closed list until the loop frees it */
};

/* Why mux_stream_send could not take everything: on_writable follows. */
#define BLK_CREDIT    0x1  /* the peer's window is exhausted */
#define BLK_TRANSPORT 0x2  /* the transport holds tx_high_water bytes */

struct mux_stream {
	LIST_ENTRY(mux_stream) link;     /* on mux.streams while not closed */
	struct mux_stream *hnext;        /* its chain in mux.buckets */
	struct mux_stream *next;         /* on mux.closed once closed */
	TAILQ_ENTRY(mux_stream) waiting; /* on mux.waitq while BLK_TRANSPORT */
	struct mux *mux;
	uint32_t id;
	enum stream_state state;
	unsigned blocked;          /* BLK_* */
	double blocked_since;      /* prom_now() when blocked became non-zero */
	int fin_sent, fin_received;
	struct budget_charge charge; /* its receive window, in the budget */
	struct flow flow;
	uint32_t peer_window;      /* credit the peer granted in OPEN (accepting side) */
	const struct mux_stream_handlers *h;
	void *arg;
};

struct mux {
	struct mux_config cfg;
	struct budget *budget;     /* cfg.budget, or the process default */
	struct budget_account account; /* this tunnel's share of it */
	const char *refusal;       /* why the last open or accept was refused */
	const struct mux_io *io;
	void *io_arg;
	const struct mux_handlers *h;
	void *arg;
	/* Every stream not closed, to walk them all: O(1) link and unlink. */
	LIST_HEAD(, mux_stream) streams;
	/* The same streams by id: a chained hash table of nbuckets (a power of
	 * two, 16 at first, doubled when nstreams would pass it, never shrunk:
	 * 8 bytes a bucket, 8 KiB at 1024 streams).  Ids are mixed with a
	 * random seed, so a peer that picks its stream ids cannot pile them
	 * into one chain: a lookup is O(1) expected, O(nstreams) at worst. */
	struct mux_stream **buckets;
	uint32_t nbuckets;
	uint32_t seed;
	/* Ended streams not yet freed: reap (an event of the loop, active
	 * while the list is not empty) frees them, or mux_free does.  reap
	 * and buckets are made with the first stream (mux_ready): an idle
	 * tunnel that never carries one saves their ~300 bytes. */
	struct mux_stream *closed;
	struct event *reap;
	struct event_base *base;
	/* Streams blocked on the transport, in the order they blocked: room
	 * goes to them first come, first served, so that no stream starves. */
	TAILQ_HEAD(, mux_stream) waitq;
	size_t nstreams;
	uint32_t next_id;
};

/* The budget of multiplexers configured without one (the agent's,
 * tetherctl's): the whole process, no reserve, no shares. */
static struct budget process_budget = {
	.total = 256u << 20,
	.min_window = 16u << 10,
};

void
mux_set_process_budget(size_t bytes)
{
	process_budget.total = bytes;
}

static void mux_reap(evutil_socket_t fd, short what, void *arg);

void
mux_set_io(struct mux *m, const struct mux_io *io, void *io_arg)
{
	m->io = io;
	m->io_arg = io_arg;
}

struct mux *
mux_new(struct event_base *base, const struct mux_config *cfg,
    const struct mux_io *io, void *io_arg, const struct mux_handlers *h,
    void *arg)
{
	struct mux *m = calloc(1, sizeof(*m));

	assert(base != NULL);
	if (m == NULL)
		return NULL;
	m->cfg = *cfg;
	m->budget = cfg->budget != NULL ? cfg->budget : &process_budget;
	m->account.limit = m->budget->tunnel_share;
	m->io = io;
	m->io_arg = io_arg;
	m->h = h;
	m->arg = arg;
	m->next_id = cfg->odd_ids ? 1 : 2;
	TAILQ_INIT(&m->waitq);
	LIST_INIT(&m->streams);
	m->base = base;
	/* Without a seed the table still works; it only loses its guard
	 * against chosen ids. */
	if (RAND_bytes((unsigned char *)&m->seed, sizeof(m->seed)) != 1)
		m->seed = 0x9e3779b9u;
	return m;
}

/* Makes what streams need (the id table, the reap event) before the
 * first one.  Returns 0, or -1 when out of memory (no stream then). */
static int
mux_ready(struct mux *m)
{
	if (m->buckets == NULL) {
		m->buckets = calloc(MUX_BUCKETS_MIN, sizeof(*m->buckets));
		if (m->buckets == NULL)
			return -1;
		m->nbuckets = MUX_BUCKETS_MIN;
	}
	if (m->reap == NULL && (m->reap = event_new(m->base, -1, 0, mux_reap, m)) == NULL)
		return -1;
	return 0;
}

/* Frees the closed streams. */
static void
mux_free_closed(struct mux *m)
{
	struct mux_stream *s;

	while ((s = m->closed) != NULL) {
		assert(s->state == STREAM_CLOSED);
		m->closed = s->next;
		free(s);
	}
}

/* The loop's callback: nothing of a closed stream is on the stack now. */
static void
mux_reap(evutil_socket_t fd, short what, void *arg)
{
	(void)fd;
	(void)what;
	mux_free_closed(arg);
}

/* The bucket of id: the seeded id through murmur3's 32-bit finaliser. */
static uint32_t
stream_bucket(const struct mux *m, uint32_t id)
{
	uint32_t h = id ^ m->seed;

	h ^= h >> 16;
	h *= 0x85ebca6bu;
	h ^= h >> 13;
	h *= 0xc2b2ae35u;
	h ^= h >> 16;
	return h & (m->nbuckets - 1);
}

static struct mux_stream *
stream_find(struct mux *m, uint32_t id)
{
	struct mux_stream *s;

	if (m->buckets == NULL)
		return NULL;            /* no stream yet */
	for (s = m->buckets[stream_bucket(m, id)]; s != NULL && s->id != id;
	    s = s->hnext)
		;
	assert(s == NULL || s->state != STREAM_CLOSED);
	return s;
}

/* Doubles the table.  On no memory the old one stays (chains get longer,
 * lookups stay right). */
static void
buckets_grow(struct mux *m)
{
	struct mux_stream **old = m->buckets, *s;
	uint32_t oldn = m->nbuckets;

	if (oldn > UINT32_MAX / 2 ||
	    (m->buckets = calloc((size_t)oldn * 2, sizeof(*m->buckets))) == NULL) {
		m->buckets = old;
		return;
	}
	m->nbuckets = oldn * 2;
	for (uint32_t i = 0; i < oldn; i++) {
		while ((s = old[i]) != NULL) {
			uint32_t b = stream_bucket(m, s->id);

			old[i] = s->hnext;
			s->hnext = m->buckets[b];
			m->buckets[b] = s;
		}
	}
	free(old);
}

/*
 * The next id of our parity for a stream we open.  After 2^31 streams the
 * numbering wraps (uint32_t arithmetic): it then skips 0, which no frame
 * may carry, and every id a stream still holds, so that a long-lived
 * stream's id is never given to another.  Terminates: fewer than
 * max_streams ids are held.  Cost: one lookup per open.
 */
static uint32_t
mux_take_id(struct mux *m)
{
	uint32_t id;

	do {
		id = m->next_id;
		m->next_id += 2;
	} while (id == 0 || stream_find(m, id) != NULL);
	return id;
}

void
mux_test_set_next_id(struct mux *m, uint32_t id)
{
	m->next_id = id;
}

/* Puts a new stream on the list and in the table. */
static void
stream_link(struct mux *m, struct mux_stream *s)
{
	uint32_t b;

	/* mux.h: stream ids never collide. */
	assert(stream_find(m, s->id) == NULL);
	if (m->nstreams + 1 > m->nbuckets)
		buckets_grow(m);
	b = stream_bucket(m, s->id);
	s->hnext = m->buckets[b];
	m->buckets[b] = s;
	LIST_INSERT_HEAD(&m->streams, s, link);
	m->nstreams++;
}

/* Takes s off the list and out of the table. */
static void
stream_unlink(struct mux *m, struct mux_stream *s)
{
	struct mux_stream **pp;

	for (pp = &m->buckets[stream_bucket(m, s->id)]; *pp != NULL;
	    pp = &(*pp)->hnext) {
		if (*pp == s) {
			*pp = s->hnext;
			break;
		}
	}
	LIST_REMOVE(s, link);
	m->nstreams--;
}

/* ---- metrics (cfg.counted) ---- */

static void
stream_block(struct mux_stream *s, unsigned bit)
{
	if (s->blocked == 0 && s->mux->cfg.counted)
		s->blocked_since = prom_now();
	s->blocked |= bit;
}

static void
stream_unblock(struct mux_stream *s, unsigned bit)
{
	unsigned was = s->blocked;

	s->blocked &= ~bit;
	if (was != 0 && s->blocked == 0 && s->mux->cfg.counted)
		mux_metrics_blocked(prom_now() - s->blocked_since);
}

/* A stream became open (result NULL) or was refused with result. */
static void
count_opened(struct mux *m, const char *result)
{
	if (!m->cfg.counted)
		return;
	mux_metrics_opened(result != NULL ? result : "ok");
	if (result == NULL)
		mux_metrics_open_delta(1);
}

/* Unlinks s, returns its budget, marks it closed and has the loop free it
 * (the deferred end).  Once per stream. */
static void
stream_end(struct mux_stream *s)
{
	struct mux *m = s->mux;

	assert(s->state != STREAM_CLOSED);
	if (s->blocked & BLK_TRANSPORT)
		TAILQ_REMOVE(&m->waitq, s, waiting);
	stream_unblock(s, BLK_TRANSPORT | BLK_CREDIT);
	if (s->state == STREAM_OPEN && m->cfg.counted)
		mux_metrics_open_delta(-1);
	stream_unlink(m, s);
	budget_release(m->budget, &s->charge);
	s->state = STREAM_CLOSED;
	s->next = m->closed;
	m->closed = s;
	event_active(m->reap, EV_TIMEOUT, 1);
}

/* Ends s and makes its on_close: mux.h, exactly once per stream the peer
 * or the tunnel ends (stream_end asserts it was not ended before). */
static void
stream_close_notify(struct mux_stream *s, const char *code)
{
	const struct mux_stream_handlers *h = s->h;

	stream_end(s);
	if (h != NULL && h->on_close != NULL)
		h->on_close(s, code, s->arg);
}

/* ---- sending frames ---- */

static void send_reset(struct mux *m, uint32_t id, const char *code);

/* The peer broke the rules on this one stream (window overrun, DATA after
 * FIN, ...): RESET it, and tell our own handler too (on_close with the same
 * code) -- unlike mux_stream_reset, nobody on our side asked for this, and
 * its owner would otherwise keep a pointer to a freed stream.  Only called
 * on a stream mux_on_frame found, so not ended yet (stream_end asserts it). */
static void
stream_fail(struct mux_stream *s, const char *code)
{
	send_reset(s->mux, s->id, code);
	stream_close_notify(s, code);
}

static int
send_frame(struct mux *m, const struct frame *f)
{
	uint8_t *buf;
	size_t len;
	struct iovec iov;
	int r;

	if (m->io->sendframe != NULL)
		return m->io->sendframe(m->io_arg, f);
	if (frame_encode(f, 0, &buf, &len) != 0)
		return -1;
	iov.iov_base = buf;
	iov.iov_len = len;
	r = m->io->sendv(m->io_arg, &iov, 1);
	free(buf);
	return r;
}

/* A frame of type for stream id, to fill: only its head is set here, and
 * each caller sets (or zeroes) the one member of f->u its type encodes
 * (frame_encode reads no other): a whole struct frame is 10.6 KB, and
 * zeroing it for each OPEN, WINDOW or FIN cost more than the frame. */
static void
frame_head(struct frame *f, enum frame_type type, uint32_t id)
{
	f->type = type;
	f->stream_id = id;
}

static void
send_simple(struct mux *m, enum frame_type type, uint32_t id)
{
	struct frame f;

	frame_head(&f, type, id);
	send_frame(m, &f);
}

static void
send_reset(struct mux *m, uint32_t id, const char *code)
{
	struct frame f;

	frame_head(&f, FRAME_RESET, id);
	snprintf(f.u.reset_code, sizeof(f.u.reset_code), "%s", code);
	send_frame(m, &f);
}

static void
send_window(struct mux_stream *s)
{
	struct frame f;
	uint32_t grant = flow_rx_take_grant(&s->flow);

	if (grant == 0 || s->fin_received)
		return;
	frame_head(&f, FRAME_WINDOW, s->id);
	f.u.window_credit = grant;
	send_frame(s->mux, &f);
}

/* ---- the public stream calls ---- */

struct mux_stream *
mux_open(struct mux *m, struct budget_account *who, const struct frame_open *req,
    const struct mux_stream_handlers *h, void *arg)
{
	struct budget_charge charge;
	enum budget_refusal why;
	struct mux_stream *s;
	struct frame f;

	if (m->nstreams >= m->cfg.max_streams) {
		count_opened(m, "too_many_streams");
		m->refusal = "the tunnel is at its stream limit";
		return NULL;
	}
	if (budget_take(m->budget, &m->account, who, m->cfg.window, &charge, &why) == 0) {
		count_opened(m, "busy");
		m->refusal = budget_refusal_str(why);
		return NULL;
	}
	s = mux_ready(m) == 0 ? calloc(1, sizeof(*s)) : NULL;
	if (s == NULL) {
		budget_release(m->budget, &charge);
		m->refusal = "out of memory";
		return NULL;
	}
	s->mux = m;
	s->charge = charge;
	s->id = mux_take_id(m);
	s->state = STREAM_OPENING;
	s->h = h;
	s->arg = arg;
	flow_init(&s->flow, charge.bytes, 0);
	stream_link(m, s);

	frame_head(&f, FRAME_OPEN, s->id);
	f.u.open = *req;
	f.u.open.window = charge.bytes;
	if (send_frame(m, &f) != 0) {
		stream_end(s);
		m->refusal = "the tunnel is closing";
		return NULL;
	}
	return s;
}

const char *
mux_refusal(const struct mux *m)
{
	return m->refusal != NULL ? m->refusal : "not refused";
}

int
mux_stream_accept(struct mux_stream *s, struct budget_account *who,
    const struct mux_stream_handlers *h, void *arg)
{
	struct mux *m = s->mux;
	enum budget_refusal why;
	struct frame f;

	if (s->state != STREAM_ACCEPTING)
		return -1;
	if (budget_take(m->budget, &m->account, who, m->cfg.window, &s->charge,
	    &why) == 0) {
		m->refusal = budget_refusal_str(why);
		mux_stream_refuse(s, "busy", m->refusal);
		return -1;
	}
	if (h != NULL) {
		s->h = h;
		s->arg = arg;
	}
	s->state = STREAM_OPEN;
	count_opened(m, NULL);
	flow_init(&s->flow, s->charge.bytes, s->peer_window);
	frame_head(&f, FRAME_OPEN_OK, s->id);
	f.u.open_ok_window = s->charge.bytes;
	send_frame(m, &f);
	return 0;
}

void
mux_stream_hold(struct mux_stream *s, const struct mux_stream_handlers *h, void *arg)
{
	if (s->state != STREAM_ACCEPTING)
		return;
	s->h = h;
	s->arg = arg;
}

void
mux_stream_refuse(struct mux_stream *s, const char *code, const char *reason)
{
	struct mux *m = s->mux;
	struct frame f;

	if (s->state != STREAM_ACCEPTING)
		return;
	frame_head(&f, FRAME_OPEN_FAIL, s->id);
	memset(&f.u.open_fail, 0, sizeof(f.u.open_fail));
	snprintf(f.u.open_fail.code, sizeof(f.u.open_fail.code), "%s", code);
	snprintf(f.u.open_fail.reason, sizeof(f.u.open_fail.reason), "%s", reason);
	send_frame(m, &f);
	count_opened(m, code);
	s->h = NULL;
	stream_end(s);
}

/* How much of len (> 0) s may send as its next frame; 0 when the
 * transport is full or the credit spent (s is then marked blocked). */
static size_t
stream_tx_room(struct mux_stream *s, size_t len)
{
	struct mux *m = s->mux;
	size_t n;

	if (m->io->pending(m->io_arg) >= m->cfg.tx_high_water) {
		if (!(s->blocked & BLK_TRANSPORT))
			TAILQ_INSERT_TAIL(&m->waitq, s, waiting);
		stream_block(s, BLK_TRANSPORT);
		return 0;
	}
	n = flow_tx_allowed(&s->flow, len);
	if (n == 0) {
		stream_block(s, BLK_CREDIT);
		return 0;
	}
	return n > m->cfg.max_payload ? m->cfg.max_payload : n;
}

size_t
mux_stream_send(struct mux_stream *s, const uint8_t *data, size_t len)
{
	struct mux *m = s->mux;
	uint8_t hdr[FRAME_DATA_HEADER_MAX];
	struct iovec iov[2];
	size_t total = 0, n;

	if (s->state != STREAM_OPEN || s->fin_sent)
		return 0;
	while (total < len) {
		if ((n = stream_tx_room(s, len - total)) == 0)
			break;
		if (m->io->senddata != NULL) {
			if (m->io->senddata(m->io_arg, s->id, data + total, NULL,
			    n) != 0)
				break;
		} else {
			iov[0].iov_base = hdr;
			iov[0].iov_len = frame_data_header(hdr, s->id, n);
			iov[1].iov_base = (void *)(data + total);
			iov[1].iov_len = n;
			if (m->io->sendv(m->io_arg, iov, 2) != 0)
				break;
		}
		flow_tx_sent(&s->flow, n);
		total += n;
	}
	if (total > 0 && m->cfg.counted)
		mux_metrics_bytes(1, total);
	return total;
}

size_t
mux_stream_send_buffer(struct mux_stream *s, struct evbuffer *src)
{
	struct mux *m = s->mux;
	uint8_t hdr[FRAME_DATA_HEADER_MAX];
	struct evbuffer_iovec v;
	size_t total = 0, n;

	while (evbuffer_peek(src, -1, NULL, &v, 1) > 0 && v.iov_len > 0) {
		if (m->io->sendbuf == NULL && m->io->senddata == NULL) {
			n = mux_stream_send(s, v.iov_base, v.iov_len);
			evbuffer_drain(src, n);
			total += n;
			if (n < v.iov_len)
				return total;
			continue;
		}
		if (s->state != STREAM_OPEN || s->fin_sent ||
		    (n = stream_tx_room(s, v.iov_len)) == 0)
			break;
		if (m->io->senddata != NULL ?
		    m->io->senddata(m->io_arg, s->id, NULL, src, n) != 0 :
		    m->io->sendbuf(m->io_arg, hdr, frame_data_header(hdr, s->id, n),
		    src, n) != 0)
			break;
		flow_tx_sent(&s->flow, n);
		total += n;
		if (m->cfg.counted)
			mux_metrics_bytes(1, n);
	}
	return total;
}

void
mux_stream_fin(struct mux_stream *s)
{
	struct mux *m = s->mux;

	if (s->state != STREAM_OPEN || s->fin_sent)
		return;
	s->fin_sent = 1;
	send_simple(m, FRAME_FIN, s->id);
	if (s->fin_received)
		stream_close_notify(s, "done");
}

void
mux_stream_reset(struct mux_stream *s, const char *code)
{
	struct mux *m = s->mux;

	if (s->state == STREAM_CLOSED)
		return;  /* ended earlier in this call stack: a no-op (mux.h) */
	send_reset(m, s->id, code);
	stream_end(s);
}

void
mux_stream_drained(struct mux_stream *s, size_t n)
{
	if (s->state != STREAM_OPEN)
		return;
	flow_rx_drained(&s->flow, n);
	send_window(s);
}

uint32_t
mux_stream_id(const struct mux_stream *s)
{
	return s->id;
}

struct event_base *
mux_stream_base(const struct mux_stream *s)
{
	return event_get_base(s->mux->reap);
}

size_t
mux_stream_count(const struct mux *m)
{
	return m->nstreams;
}

size_t
mux_stream_buffered(const struct mux_stream *s)
{
	return (size_t)s->flow.rx_buffered;
}

/* ---- frames from the peer ---- */

static int
id_is_peers(const struct mux *m, uint32_t id)
{
	return (id % 2 == 1) != (m->cfg.odd_ids != 0);
}

static int
on_open(struct mux *m, const struct frame *f, char *err, size_t errlen)
{
	struct mux_stream *s;

	if (!id_is_peers(m, f->stream_id) || stream_find(m, f->stream_id) != NULL) {
		snprintf(err, errlen, "OPEN with stream id %u, which the peer may not use now",
		    f->stream_id);
		return -1;
	}
	if (m->nstreams >= m->cfg.max_streams) {
		struct frame out;

		frame_head(&out, FRAME_OPEN_FAIL, f->stream_id);
		memset(&out.u.open_fail, 0, sizeof(out.u.open_fail));
		snprintf(out.u.open_fail.code, sizeof(out.u.open_fail.code), "too_many_streams");
		snprintf(out.u.open_fail.reason, sizeof(out.u.open_fail.reason),
		    "the tunnel already carries %u streams", m->cfg.max_streams);
		send_frame(m, &out);
		count_opened(m, "too_many_streams");
		return 0;
	}
	s = mux_ready(m) == 0 ? calloc(1, sizeof(*s)) : NULL;
	if (s == NULL) {
		send_reset(m, f->stream_id, "internal");
		return 0;
	}
	s->mux = m;
	s->id = f->stream_id;
	s->state = STREAM_ACCEPTING;
	s->peer_window = f->u.open.window;
	stream_link(m, s);
	m->h->on_open(m, s, &f->u.open, m->arg);
	return 0;
}

static void
on_open_answer(struct mux_stream *s, const struct frame *f)
{
	if (s->state != STREAM_OPENING) {
		stream_fail(s, "protocol");
		return;
	}
	if (f->type == FRAME_OPEN_OK) {
		s->state = STREAM_OPEN;
		count_opened(s->mux, NULL);
		s->flow.tx_credit = f->u.open_ok_window;
		s->h->on_opened(s, 1, NULL, NULL, s->arg);
		return;
	}
	/* Refused: the stream is over before it began; no on_close. */
	const struct mux_stream_handlers *h = s->h;
	void *arg = s->arg;
	s->h = NULL;
	stream_end(s);
	count_opened(s->mux, f->u.open_fail.code);
	h->on_opened(s, 0, f->u.open_fail.code, f->u.open_fail.reason, arg);
}

static void
on_data(struct mux_stream *s, const uint8_t *data, size_t len)
{
	if (s->state != STREAM_OPEN || s->fin_received) {
		stream_fail(s, "protocol");
		return;
	}
	if (flow_rx_received(&s->flow, len) != 0) {
		/* The peer ignored its window: this stream only pays for it. */
		stream_fail(s, "flow_control");
		return;
	}
	if (len > 0 && s->mux->cfg.counted)
		mux_metrics_bytes(0, len);
	if (len > 0)
		s->h->on_data(s, data, len, s->arg);
}

static void
on_window(struct mux_stream *s, const struct frame *f)
{
	if (s->state != STREAM_OPEN)
		return;
	if (flow_tx_grant(&s->flow, f->u.window_credit) != 0) {
		stream_fail(s, "flow_control");
		return;
	}
	if (s->blocked & BLK_CREDIT) {
		stream_unblock(s, BLK_CREDIT);
		if (s->h->on_writable != NULL)
			s->h->on_writable(s, s->arg);
	}
}

static void
on_fin(struct mux_stream *s)
{
	if (s->state != STREAM_OPEN || s->fin_received) {
		stream_fail(s, "protocol");
		return;
	}
	s->fin_received = 1;
	if (s->h->on_fin != NULL)
		s->h->on_fin(s, s->arg);
	if (s->state == STREAM_OPEN && s->fin_sent)
		stream_close_notify(s, "done");
}

int
mux_on_frame(struct mux *m, const struct frame *f, char *err, size_t errlen)
{
	struct mux_stream *s;
	int r = 0;

	if (f->type == FRAME_OPEN)
		return on_open(m, f, err, errlen);
	s = stream_find(m, f->stream_id);
	if (s == NULL)
		return 0; /* a frame in flight for a stream already reset: harmless */
	switch (f->type) {
	case FRAME_OPEN_OK:
	case FRAME_OPEN_FAIL:
		on_open_answer(s, f);
		break;
	case FRAME_DATA:
		on_data(s, f->u.data.payload, f->u.data.len);
		break;
	case FRAME_WINDOW:
		on_window(s, f);
		break;
	case FRAME_FIN:
		on_fin(s);
		break;
	case FRAME_RESET:
		stream_close_notify(s, f->u.reset_code);
		break;
	default:
		snprintf(err, errlen, "%s is not a stream frame", frame_type_name(f->type));
		r = -1;
	}
	return r;
}

int
mux_on_data(struct mux *m, uint32_t stream_id, const uint8_t *data, size_t len)
{
	struct mux_stream *s = stream_find(m, stream_id);

	if (s != NULL)  /* else in flight for a stream already reset */
		on_data(s, data, len);
	return 0;
}

void
mux_on_drain(struct mux *m)
{
	struct mux_stream *s;

	/* Each woken stream leaves the queue first; if it blocks again it
	 * joins the tail, behind the others: round robin. */
	while ((s = TAILQ_FIRST(&m->waitq)) != NULL &&
	    m->io->pending(m->io_arg) < m->cfg.tx_high_water) {
		TAILQ_REMOVE(&m->waitq, s, waiting);
		stream_unblock(s, BLK_TRANSPORT);
		if (s->state == STREAM_OPEN && s->h->on_writable != NULL)
			s->h->on_writable(s, s->arg);
	}
}

void
mux_free(struct mux *m)
{
	mux_free_as(m, "tunnel_lost", "the tunnel closed");
}

void
mux_free_as(struct mux *m, const char *code, const char *reason)
{
	if (m == NULL)
		return;
	while (!LIST_EMPTY(&m->streams)) {
		struct mux_stream *s = LIST_FIRST(&m->streams);
		if (s->state == STREAM_ACCEPTING && s->h == NULL) {
			stream_end(s);
			continue;
		}
		/* ACCEPTING with held handlers falls through to on_close. */
		if (s->state == STREAM_OPENING) {
			const struct mux_stream_handlers *h = s->h;
			void *arg = s->arg;
			s->h = NULL;
			stream_end(s);
			count_opened(m, "tunnel_lost");
			h->on_opened(s, 0, code, reason, arg);
			continue;
		}
		stream_close_notify(s, "tunnel_lost");
	}
	/* The owner ends the tunnel from a callback of its own transport, not
	 * from inside a mux call: the closed streams may go now. */
	mux_free_closed(m);
	if (m->reap != NULL)
		event_free(m->reap);
	free(m->buckets);
	free(m);
}
