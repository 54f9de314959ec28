/*
 * looplink.c: the stream links between the gateway's loops (see
 * looplink.h and docs/0040 section 2 (ii)).
 *
 * A half carries one direction, A>B: its writer is loop A's end toward B,
 * its reader loop B's end toward A.  Its queue holds the frames' bytes
 * and, beside it, a record per frame (struct link_rec): a DATA frame is
 * its stream id and its payload's bytes, never encoded (the multiplexer's
 * senddata; its far end is mux_on_data, no frame_decode), any other frame
 * its type, stream id and struct member (sendframe; made again on the far
 * side for mux_on_frame).  Under the half's
 * mutex the writer copies a frame's bytes straight into the queue, in one
 * piece (evbuffer_reserve_space: all or nothing), or moves a payload sent
 * by reference, whose chains it first took into a staging evbuffer of its
 * own (no lock; a failure leaves no half frame behind), and adds the
 * record.  The reader takes the queue whole,
 * and the records by swapping arrays, under the mutex, then hands the
 * frames on with no lock held.
 *
 *   posted   a LINK message to the reader is due or on its way (set by
 *            the first frame into an empty queue, cleared when the reader
 *            takes it): the writer's end marks it due (post_due) and
 *            sends it at the end of the writer's pass (link_flush), so a
 *            pass's frames to one loop cost that loop one wake, one take
 *   blocked  the writer's multiplexer found queued >= tx_high_water; the
 *            reader, taking the queue, sends DRAINED back
 *   closed   the reader's end is gone: frames are dropped, not queued
 *
 * Messages name an end by pointer: ends and halves live in the set, which
 * outlives every loop thread (looplinks_free after the joins), so a
 * dropped message (its loop stopped) frees nothing.
 */
#include "looplink.h"

#include <assert.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>

#include <event2/buffer.h>
#include <event2/event.h>

#include "budget.h"
#include "frame.h"
#include "log.h"
#include "loop.h"
#include "mux.h"

/* One frame in a half's queue, its len bytes there: DATA (type
 * FRAME_DATA) for stream id, its payload; another stream frame of type
 * for stream id, the bytes of its struct frame member (mux.h, sendframe:
 * no encoding); or (type 0) an encoded frame. */
struct link_rec {
	uint32_t id;
	uint32_t len;
	uint8_t type;
};

/* A growing array of records (the writer's in the half; the reader's own,
 * swapped with it when it takes the half). */
struct link_recs {
	struct link_rec *v;
	size_t n, cap;
};

struct looplink_half {
	pthread_mutex_t mu;
	struct evbuffer *q;     /* the frames' bytes, in order */
	struct link_recs recs;  /* a record per frame in q */
	/* Bytes in q and a record's size per frame: written under mu, read
	 * without it by the writer (link_pending: its own adds are exact, the
	 * reader's reset to 0 shows late, which only holds DATA back). */
	_Atomic size_t queued;
	bool closed;
	bool posted;
	bool blocked;
	/* Written by the writer's loop only, read by any thread (/metrics):
	 * streams opened from the writer's end, DATA payload bytes sent. */
	_Atomic uint64_t streams;
	_Atomic uint64_t bytes;
};

/* Loop `from`'s end toward loop `to`; touched on loop `from` only. */
struct looplink_end {
	struct looplinks *set;
	unsigned from, to;
	struct mux *mux;                /* NULL once closed */
	struct looplink_half *out;      /* from>to: this end writes it */
	struct looplink_half *in;       /* to>from: this end reads it */
	struct evbuffer *stage;         /* one frame being built */
	struct evbuffer *rx;            /* frames taken from `in`, decoding */
	struct link_recs rxrecs;        /* their records */
	bool post_due;                  /* out's LINK is to be sent at the end
	                                   of this pass (link_flush) */
	char name[40];                  /* "loop-link:A>B", its account's name */
};

/* A loop's LINK messages due at the end of its pass: ev, activated by the
 * pass's first frame into an empty half, runs after the callbacks the
 * pass already has (libevent's active queue, one priority) and sends
 * them (link_flush).  Touched on that loop only. */
struct link_flush {
	struct looplinks *set;
	unsigned from;
	struct event *ev;
};

/* A frame split over chains, copied whole to decode it: one per
 * receiving loop (it decodes one frame at a time), grown to the largest
 * frame it saw (a DATA frame: max_payload and a few bytes). */
struct scratch {
	uint8_t *p;
	size_t len;
};

struct looplinks {
	struct loop *loops;
	unsigned n;
	struct mux_config cfg;
	looplink_open_fn *on_open;
	void *ctx;
	struct looplink_half *halves;   /* [from * n + to] */
	struct looplink_end *ends;      /* [from * n + to] */
	struct scratch *scratch;        /* [n]: each loop's, to decode */
	struct link_flush *flush;       /* [n]: each loop's, on its base */
};

static struct looplink_end *
end_at(const struct looplinks *ls, unsigned from, unsigned to)
{
	return &ls->ends[from * ls->n + to];
}

/* The far loop's end of the same pair. */
static struct looplink_end *
end_far(struct looplink_end *e)
{
	return end_at(e->set, e->to, e->from);
}

/* ---- the multiplexer's transport (mux_io) ---- */

static void link_take(void *arg);

/* Room for one more record in r.  0 or -1 (out of memory). */
static int
recs_room(struct link_recs *r)
{
	struct link_rec *v;
	size_t cap;

	if (r->n < r->cap)
		return 0;
	cap = r->cap != 0 ? 2 * r->cap : 16;
	if ((v = realloc(r->v, cap * sizeof(*v))) == NULL)
		return -1;
	r->v = v;
	r->cap = cap;
	return 0;
}

/* Sends the LINK messages due on loop `from` (its ends' post_due). */
static void
flush_due(struct looplinks *ls, unsigned from)
{
	for (unsigned to = 0; to < ls->n; to++) {
		struct looplink_end *e = end_at(ls, from, to);

		if (to == from || !e->post_due)
			continue;
		e->post_due = false;
		(void)loop_call(&ls->loops[to], link_take, end_far(e), NULL);
	}
}

/* The end of a pass of the loop that wrote frames: each half it made
 * non-empty gets its one LINK (a wake of the reader only if asleep). */
static void
link_flush(evutil_socket_t fd, short what, void *arg)
{
	struct link_flush *f = arg;

	(void)fd;
	(void)what;
	flush_due(f->set, f->from);
}

/* Puts one frame of len bytes into the half with its record (type and
 * id: struct link_rec): data[0..len) copied straight into the queue, in one
 * piece (the reader reads it in place), or, data NULL, the staged bytes'
 * chains moved.  When no LINK is on its way to the reader, one is due at
 * the end of this loop's pass.  Returns 0, or -1 (the reader's end
 * closed, or out of memory: the frame is dropped, nothing of it
 * queued). */
static int
half_put(struct looplink_end *e, uint8_t type, uint32_t id, const void *data,
    size_t len)
{
	struct looplink_half *h = e->out;
	struct evbuffer_iovec v;
	bool post = false;
	int r = -1;

	assert(len <= UINT32_MAX && (len > 0 || data != NULL));
	assert(data != NULL || evbuffer_get_length(e->stage) == len);
	pthread_mutex_lock(&h->mu);
	if (h->closed || recs_room(&h->recs) != 0)
		goto out;
	if (data == NULL) {
		if (evbuffer_add_buffer(h->q, e->stage) != 0)
			goto out;
	} else if (len > 0) {
		if (evbuffer_reserve_space(h->q, (ev_ssize_t)len, &v, 1) != 1)
			goto out;
		memcpy(v.iov_base, data, len);
		v.iov_len = len;
		if (evbuffer_commit_space(h->q, &v, 1) != 0)
			goto out;
	}
	/* Only the writer's loop sends while the reader's end is open (after
	 * the joins, looplinks_free closed every half first). */
	assert(loop_self() == &e->set->loops[e->from]);
	h->recs.v[h->recs.n++] = (struct link_rec){ .id = id, .len = (uint32_t)len,
	    .type = type };
	atomic_store_explicit(&h->queued, atomic_load_explicit(&h->queued,
	    memory_order_relaxed) + len + sizeof(struct link_rec),
	    memory_order_relaxed);
	if (!h->posted)
		post = h->posted = true;
	r = 0;
out:
	pthread_mutex_unlock(&h->mu);
	if (r != 0 && data == NULL)
		evbuffer_drain(e->stage, len);
	if (post) {
		e->post_due = true;
		event_active(e->set->flush[e->from].ev, EV_TIMEOUT, 0);
	}
	return r;
}

/* Any frame but DATA: its encoded bytes (one piece, as the multiplexer
 * sends them, copied straight in; several gathered first), decoded on the
 * far side. */
static int
link_sendv(void *io, const struct iovec *iov, int iovcnt)
{
	struct looplink_end *e = io;
	size_t len = 0;

	for (int i = 0; i < iovcnt; i++)
		len += iov[i].iov_len;
	if (len == 0 || len > UINT32_MAX)
		return -1;
	if (iovcnt == 1)
		return half_put(e, 0, 0, iov[0].iov_base, len);
	for (int i = 0; i < iovcnt; i++)
		if (evbuffer_add(e->stage, iov[i].iov_base, iov[i].iov_len) != 0) {
			evbuffer_drain(e->stage, evbuffer_get_length(e->stage));
			return -1;
		}
	return half_put(e, 0, 0, NULL, len);
}

/* DATA: the stream id in its record, no header (mux.h, senddata); the
 * payload's chains moved through the stage, or its bytes copied straight
 * into the queue. */
static int
link_senddata(void *io, uint32_t stream_id, const uint8_t *data,
    struct evbuffer *src, size_t n)
{
	struct looplink_end *e = io;

	if (n == 0 || n > UINT32_MAX)
		return -1;
	if (src != NULL && evbuffer_remove_buffer(src, e->stage, n) != (int)n) {
		evbuffer_drain(e->stage, evbuffer_get_length(e->stage));
		return -1;
	}
	if (half_put(e, FRAME_DATA, stream_id, src != NULL ? NULL : data, n) != 0)
		return -1;
	atomic_fetch_add_explicit(&e->out->bytes, n, memory_order_relaxed);
	return 0;
}

/* The bytes of f's member of the union that its type sends (frame_encode
 * reads no other), or -1 for a frame the multiplexer never sends. */
static ssize_t
member_len(const struct frame *f)
{
	switch (f->type) {
	case FRAME_OPEN:
		return (ssize_t)sizeof(f->u.open);
	case FRAME_OPEN_OK:
		return (ssize_t)sizeof(f->u.open_ok_window);
	case FRAME_OPEN_FAIL:
		return (ssize_t)sizeof(f->u.open_fail);
	case FRAME_WINDOW:
		return (ssize_t)sizeof(f->u.window_credit);
	case FRAME_FIN:
		return 0;
	case FRAME_RESET:
		return (ssize_t)strnlen(f->u.reset_code, sizeof(f->u.reset_code) - 1) + 1;
	default:
		return -1;
	}
}

/* Any stream frame but DATA: its type, stream id and member, never
 * encoded (mux.h, sendframe); rx_run makes the frame again. */
static int
link_sendframe(void *io, const struct frame *f)
{
	struct looplink_end *e = io;
	ssize_t len = member_len(f);

	if (len < 0)
		return -1;
	return half_put(e, (uint8_t)f->type, f->stream_id, &f->u, (size_t)len);
}

/* The half's bytes; at or past tx_high_water the reader is asked to say
 * when it took them (the multiplexer blocks its DATA until then).  The
 * lock only then. */
static size_t
link_pending(void *io)
{
	struct looplink_end *e = io;
	struct looplink_half *h = e->out;
	size_t q = atomic_load_explicit(&h->queued, memory_order_relaxed);

	if (q < e->set->cfg.tx_high_water)
		return q;
	pthread_mutex_lock(&h->mu);
	q = atomic_load_explicit(&h->queued, memory_order_relaxed);
	if (q >= e->set->cfg.tx_high_water)
		h->blocked = true;
	pthread_mutex_unlock(&h->mu);
	return q;
}

static const struct mux_io link_io = {
	.sendv = link_sendv,
	.pending = link_pending,
	.senddata = link_senddata,
	.sendframe = link_sendframe,
};

/* ---- the reading side ---- */

/* DRAINED, on the writer's loop: its blocked streams go on. */
static void
link_drained(void *arg)
{
	struct looplink_end *e = arg;

	assert(loop_self() == &e->set->loops[e->from]);
	if (e->mux != NULL)
		mux_on_drain(e->mux);
}

/* The first len bytes of e->rx in one piece: in place when one chain
 * holds them (nearly always: a frame's bytes are one chain, a DATA
 * payload moved by reference too), else copied into the loop's scratch
 * (evbuffer_pullup would allocate a chain per frame).  NULL when out of
 * memory. */
static const uint8_t *
rx_frame(struct looplink_end *e, size_t len)
{
	struct scratch *s = &e->set->scratch[e->from];
	struct evbuffer_iovec v;
	uint8_t *grown;

	if (evbuffer_peek(e->rx, (ev_ssize_t)len, NULL, &v, 1) == 1 &&
	    v.iov_len >= len)
		return v.iov_base;
	if (len > s->len) {
		if ((grown = realloc(s->p, len)) == NULL)
			return NULL;
		s->p = grown;
		s->len = len;
	}
	evbuffer_copyout(e->rx, s->p, len);
	return s->p;
}

/* Hands each frame taken (e->rxrecs, its bytes in e->rx) to e's
 * multiplexer, DATA as it is and the others decoded (dropped once e
 * closed).  A frame that does not decode is a bug of this process, not
 * hostile input: logged and skipped. */
static void
rx_run(struct looplink_end *e)
{
	struct frame f;
	char err[200];
	const uint8_t *p;

	for (size_t i = 0; i < e->rxrecs.n; i++) {
		struct link_rec r = e->rxrecs.v[i];

		assert(evbuffer_get_length(e->rx) >= r.len);
		if (e->mux == NULL) {
			evbuffer_drain(e->rx, r.len);
			continue;
		}
		p = r.len > 0 ? rx_frame(e, r.len) : (const uint8_t *)"";
		if (p != NULL && r.type == FRAME_DATA) {
			(void)mux_on_data(e->mux, r.id, p, r.len);
		} else if (p != NULL && r.type != 0) {
			/* A frame as sendframe gave it: its head and member. */
			f.type = (enum frame_type)r.type;
			f.stream_id = r.id;
			memcpy(&f.u, p, r.len);
			if (mux_on_frame(e->mux, &f, err, sizeof(err)) != 0)
				warn("loop link: a frame broke the stream protocol",
				    KV_S("link", e->name), KV_S("err", err));
		} else if (p == NULL || frame_decode(p, r.len, &f, err,
		    sizeof(err)) != 0 || f.type < FRAME_OPEN) {
			warn("loop link: a frame did not decode", KV_S("link", e->name),
			    KV_S("err", p == NULL ? "out of memory" : err));
		} else if (mux_on_frame(e->mux, &f, err, sizeof(err)) != 0) {
			warn("loop link: a frame broke the stream protocol",
			    KV_S("link", e->name), KV_S("err", err));
		}
		evbuffer_drain(e->rx, r.len);
	}
	e->rxrecs.n = 0;
}

/* LINK, on the reader's loop: takes the half whole, then decodes it. */
static void
link_take(void *arg)
{
	struct looplink_end *e = arg;
	struct looplink_half *h = e->in;
	struct link_recs recs;
	bool drained;

	assert(loop_self() == &e->set->loops[e->from]);
	assert(e->rxrecs.n == 0);
	pthread_mutex_lock(&h->mu);
	(void)evbuffer_add_buffer(e->rx, h->q);
	recs = h->recs;         /* the reader's are empty: rx_run ran them all */
	h->recs = e->rxrecs;
	e->rxrecs = recs;
	atomic_store_explicit(&h->queued, 0, memory_order_relaxed);
	h->posted = false;
	drained = h->blocked;
	h->blocked = false;
	pthread_mutex_unlock(&h->mu);
	if (drained)
		(void)loop_call(&e->set->loops[e->to], link_drained, end_far(e), NULL);
	rx_run(e);
}

/* Marks h closed and drops what it holds (on the reader's loop, or after
 * the joins). */
static void
half_close(struct looplink_half *h)
{
	pthread_mutex_lock(&h->mu);
	h->closed = true;
	evbuffer_drain(h->q, evbuffer_get_length(h->q));
	h->recs.n = 0;
	atomic_store_explicit(&h->queued, 0, memory_order_relaxed);
	pthread_mutex_unlock(&h->mu);
}

/* Ends e: what came before is decoded first, then its half in is closed
 * and its multiplexer freed (its streams end "tunnel_lost"). */
static void
end_close(struct looplink_end *e)
{
	struct mux *m = e->mux;

	if (m == NULL)
		return;
	link_take(e);
	half_close(e->in);
	e->mux = NULL;
	mux_free_as(m, "tunnel_lost", "the loop at the other end stopped");
}

/* CLOSED, on the far loop: the loop at the other end closed its end. */
static void
link_far_closed(void *arg)
{
	end_close(arg);
}

void
looplink_close(struct looplinks *ls)
{
	struct loop *self = loop_self();
	unsigned me;

	assert(self != NULL && self >= ls->loops && self < ls->loops + ls->n);
	me = self->index;
	/* What this loop wrote before goes before its CLOSED. */
	flush_due(ls, me);
	for (unsigned to = 0; to < ls->n; to++) {
		struct looplink_end *e = end_at(ls, me, to);

		if (to == me || e->mux == NULL)
			continue;
		end_close(e);
		flush_due(ls, me);      /* what its streams' ends sent */
		(void)loop_call(&ls->loops[to], link_far_closed, end_far(e), NULL);
	}
}

/* ---- streams ---- */

static void
link_on_open(struct mux *m, struct mux_stream *s, const struct frame_open *req,
    void *arg)
{
	struct looplink_end *e = arg;

	(void)m;
	e->set->on_open(e->set->ctx, e->to, s, req);
}

static const struct mux_handlers link_handlers = {
	.on_open = link_on_open,
};

struct mux_stream *
looplink_open(struct looplinks *ls, unsigned to, const struct frame_open *req,
    const struct mux_stream_handlers *h, void *arg, char *err, size_t errlen)
{
	struct loop *self = loop_self();
	struct looplink_end *e;
	struct mux_stream *s;

	if (self == NULL || self < ls->loops || self >= ls->loops + ls->n ||
	    to >= ls->n || to == self->index) {
		snprintf(err, errlen, "no link from this thread to loop %u", to);
		return NULL;
	}
	e = end_at(ls, self->index, to);
	if (e->mux == NULL) {
		snprintf(err, errlen, "%s: the link is closed", e->name);
		return NULL;
	}
	/* No principal: the link's own account (its multiplexer's share). */
	if ((s = mux_open(e->mux, NULL, req, h, arg)) == NULL)
		snprintf(err, errlen, "%s: %s", e->name, mux_refusal(e->mux));
	else
		atomic_fetch_add_explicit(&e->out->streams, 1, memory_order_relaxed);
	return s;
}

size_t
looplink_streams(const struct looplinks *ls, unsigned from, unsigned to)
{
	const struct looplink_end *e = end_at(ls, from, to);

	return from != to && e->mux != NULL ? mux_stream_count(e->mux) : 0;
}

void
looplink_counts(const struct looplinks *ls, unsigned from, unsigned to,
    uint64_t *streams, uint64_t *bytes)
{
	struct looplink_half *h;

	*streams = *bytes = 0;
	if (ls == NULL || from >= ls->n || to >= ls->n || from == to)
		return;
	h = &ls->halves[from * ls->n + to];
	*streams = atomic_load_explicit(&h->streams, memory_order_relaxed);
	*bytes = atomic_load_explicit(&h->bytes, memory_order_relaxed);
}

unsigned
looplinks_loops(const struct looplinks *ls)
{
	return ls != NULL ? ls->n : 0;
}

/* ---- the set ---- */

static int
end_init(struct looplinks *ls, unsigned from, unsigned to)
{
	struct looplink_end *e = end_at(ls, from, to);
	struct mux_config cfg = ls->cfg;

	e->set = ls;
	e->from = from;
	e->to = to;
	e->out = &ls->halves[from * ls->n + to];
	e->in = &ls->halves[to * ls->n + from];
	snprintf(e->name, sizeof(e->name), "loop-link:%u>%u", from, to);
	cfg.odd_ids = from < to;
	cfg.counted = 0;
	if ((e->stage = evbuffer_new()) == NULL || (e->rx = evbuffer_new()) == NULL)
		return -1;
	e->mux = mux_new(ls->loops[from].base, &cfg, &link_io, e, &link_handlers, e);
	return e->mux != NULL ? 0 : -1;
}

struct looplinks *
looplinks_new(struct loop *loops, unsigned n, const struct mux_config *cfg,
    looplink_open_fn *on_open, void *ctx, char *err, size_t errlen)
{
	struct looplinks *ls;

	if (cfg->budget == NULL || cfg->budget->mu == NULL) {
		snprintf(err, errlen, "loop links need a budget with its mutex");
		return NULL;
	}
	ls = calloc(1, sizeof(*ls));
	if (ls == NULL || n < 2 || (ls->halves = calloc((size_t)n * n,
	    sizeof(*ls->halves))) == NULL || (ls->ends = calloc((size_t)n * n,
	    sizeof(*ls->ends))) == NULL || (ls->scratch = calloc(n,
	    sizeof(*ls->scratch))) == NULL || (ls->flush = calloc(n,
	    sizeof(*ls->flush))) == NULL) {
		snprintf(err, errlen, n < 2 ? "a link needs two loops" : "out of memory");
		if (ls != NULL) {
			free(ls->scratch);
			free(ls->ends);
			free(ls->halves);
			free(ls);
		}
		return NULL;
	}
	ls->loops = loops;
	ls->n = n;
	ls->cfg = *cfg;
	ls->on_open = on_open;
	ls->ctx = ctx;
	for (unsigned i = 0; i < n * n; i++) {
		pthread_mutex_init(&ls->halves[i].mu, NULL);
		if (i / n != i % n && (ls->halves[i].q = evbuffer_new()) == NULL)
			goto fail;
	}
	for (unsigned i = 0; i < n * n; i++)
		if (i / n != i % n && end_init(ls, i / n, i % n) != 0)
			goto fail;
	for (unsigned i = 0; i < n; i++) {
		ls->flush[i] = (struct link_flush){ .set = ls, .from = i };
		if ((ls->flush[i].ev = event_new(loops[i].base, -1, 0, link_flush,
		    &ls->flush[i])) == NULL)
			goto fail;
	}
	return ls;
fail:
	snprintf(err, errlen, "out of memory");
	looplinks_free(ls);
	return NULL;
}

void
looplinks_free(struct looplinks *ls)
{
	unsigned nn;

	if (ls == NULL)
		return;
	nn = ls->n * ls->n;
	/* Closed first: what the streams' on_close sends now is dropped. */
	for (unsigned i = 0; i < nn; i++)
		if (ls->halves[i].q != NULL)
			half_close(&ls->halves[i]);
	for (unsigned i = 0; i < nn; i++) {
		struct looplink_end *e = &ls->ends[i];

		if (e->mux != NULL) {
			mux_free_as(e->mux, "tunnel_lost", "the loops stopped");
			e->mux = NULL;
		}
	}
	for (unsigned i = 0; i < nn; i++) {
		struct looplink_end *e = &ls->ends[i];
		struct looplink_half *h = &ls->halves[i];

		if (e->stage != NULL)
			evbuffer_free(e->stage);
		if (e->rx != NULL)
			evbuffer_free(e->rx);
		free(e->rxrecs.v);
		if (h->q != NULL)
			evbuffer_free(h->q);
		free(h->recs.v);
		pthread_mutex_destroy(&h->mu);
	}
	for (unsigned i = 0; ls->scratch != NULL && i < ls->n; i++)
		free(ls->scratch[i].p);
	for (unsigned i = 0; i < ls->n; i++)
		if (ls->flush[i].ev != NULL)
			event_free(ls->flush[i].ev);
	free(ls->flush);
	free(ls->scratch);
	free(ls->ends);
	free(ls->halves);
	free(ls);
}
