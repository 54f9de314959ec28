/*
 * looplink.c: the stream links between the gateway's loops (see
 * looplink.h and docs/0040 section 2 (ii)).
 *
 * A half carries one direction, A>B: its writer is loop A's end toward B,
 * its reader loop B's end toward A.  Its queue holds whole frames, each a
 * 4-byte length (host order: it never leaves the process) and the encoded
 * frame.  The writer builds a frame in a staging evbuffer of its own (no
 * lock; a failure leaves no half frame behind), then moves it into the
 * queue under the half's mutex.  The reader takes the queue whole under
 * the mutex into its own evbuffer and decodes it with no lock held.
 *
 *   posted   a LINK message to the reader is on its way (set by the first
 *            frame into an empty queue, cleared when the reader takes it)
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

#include <event2/buffer.h>

#include "budget.h"
#include "frame.h"
#include "log.h"
#include "loop.h"
#include "mux.h"

struct looplink_half {
	pthread_mutex_t mu;
	struct evbuffer *q;     /* frames: u32 length, then the frame */
	size_t queued;          /* bytes in q */
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
	char name[40];                  /* "loop-link:A>B", its account's name */
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

/* Moves the staged frame (its length first) into the half; posts LINK to
 * the reader when none is on its way.  Returns 0, or -1 (the reader's end
 * closed: the frame is dropped). */
static int
half_push(struct looplink_end *e, size_t framelen)
{
	struct looplink_half *h = e->out;
	size_t n = evbuffer_get_length(e->stage);
	bool post = false;

	assert(n == framelen + sizeof(uint32_t));
	pthread_mutex_lock(&h->mu);
	if (h->closed || evbuffer_add_buffer(h->q, e->stage) != 0) {
		pthread_mutex_unlock(&h->mu);
		evbuffer_drain(e->stage, n);
		return -1;
	}
	/* Only the writer's loop sends while the reader's end is open (after
	 * the joins, looplinks_free closed every half first). */
	assert(loop_self() == &e->set->loops[e->from]);
	h->queued += n;
	if (!h->posted)
		post = h->posted = true;
	pthread_mutex_unlock(&h->mu);
	if (post)
		(void)loop_call(&e->set->loops[e->to], link_take, end_far(e), NULL);
	return 0;
}

/* A frame's 4-byte length into the empty stage.  0 or -1. */
static int
stage_len(struct looplink_end *e, size_t len)
{
	uint32_t len32 = (uint32_t)len;

	assert(evbuffer_get_length(e->stage) == 0);
	return len > UINT32_MAX ? -1 : evbuffer_add(e->stage, &len32, sizeof(len32));
}

static int
link_sendv(void *io, const struct iovec *iov, int iovcnt)
{
	struct looplink_end *e = io;
	size_t len = 0;

	for (int i = 0; i < iovcnt; i++)
		len += iov[i].iov_len;
	if (stage_len(e, len) != 0)
		goto fail;
	for (int i = 0; i < iovcnt; i++)
		if (evbuffer_add(e->stage, iov[i].iov_base, iov[i].iov_len) != 0)
			goto fail;
	if (half_push(e, len) != 0)
		return -1;
	/* A DATA frame copied (mux_stream_send: its header, then the
	 * payload) counts as one by reference does (link_sendbuf). */
	if (iovcnt == 2 && iov[0].iov_len >= 2 &&
	    ((const uint8_t *)iov[0].iov_base)[0] == 0x93 &&
	    ((const uint8_t *)iov[0].iov_base)[1] == FRAME_DATA)
		atomic_fetch_add_explicit(&e->out->bytes, iov[1].iov_len,
		    memory_order_relaxed);
	return 0;
fail:
	evbuffer_drain(e->stage, evbuffer_get_length(e->stage));
	return -1;
}

/* DATA: the header copied, the payload's chains moved (mux.h). */
static int
link_sendbuf(void *io, const uint8_t *hdr, size_t hdrlen, struct evbuffer *src,
    size_t n)
{
	struct looplink_end *e = io;

	if (stage_len(e, hdrlen + n) != 0 ||
	    evbuffer_add(e->stage, hdr, hdrlen) != 0 ||
	    evbuffer_remove_buffer(src, e->stage, n) != (int)n) {
		evbuffer_drain(e->stage, evbuffer_get_length(e->stage));
		return -1;
	}
	if (half_push(e, hdrlen + n) != 0)
		return -1;
	atomic_fetch_add_explicit(&e->out->bytes, n, memory_order_relaxed);
	return 0;
}

/* The half's bytes; at or past tx_high_water the reader is asked to say
 * when it took them (the multiplexer blocks its DATA until then). */
static size_t
link_pending(void *io)
{
	struct looplink_end *e = io;
	struct looplink_half *h = e->out;
	size_t q;

	pthread_mutex_lock(&h->mu);
	q = h->queued;
	if (q >= e->set->cfg.tx_high_water)
		h->blocked = true;
	pthread_mutex_unlock(&h->mu);
	return q;
}

static const struct mux_io link_io = {
	.sendv = link_sendv,
	.pending = link_pending,
	.sendbuf = link_sendbuf,
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
 * holds them (control frames), else copied into the loop's scratch (a
 * DATA frame's header and payload are two chains; evbuffer_pullup would
 * allocate a chain per frame).  NULL when out of memory. */
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

/* Decodes every whole frame in e->rx and hands it to e's multiplexer
 * (dropped once e closed).  A frame that does not decode is a bug of this
 * process, not hostile input: logged and skipped. */
static void
rx_run(struct looplink_end *e)
{
	struct frame f;
	uint32_t len;
	char err[200];
	const uint8_t *p;

	while (evbuffer_copyout(e->rx, &len, sizeof(len)) == sizeof(len)) {
		assert(evbuffer_get_length(e->rx) >= sizeof(len) + len);
		evbuffer_drain(e->rx, sizeof(len));
		if (e->mux == NULL) {
			evbuffer_drain(e->rx, len);
			continue;
		}
		p = rx_frame(e, len);
		if (p == NULL || frame_decode(p, len, &f, err, sizeof(err)) != 0 ||
		    f.type < FRAME_OPEN) {
			warn("loop link: a frame did not decode", KV_S("link", e->name),
			    KV_S("err", p == NULL ? "out of memory" : err));
		} else if (mux_on_frame(e->mux, &f, err, sizeof(err)) != 0) {
			warn("loop link: a frame broke the stream protocol",
			    KV_S("link", e->name), KV_S("err", err));
		}
		evbuffer_drain(e->rx, len);
	}
}

/* LINK, on the reader's loop: takes the half whole, then decodes it. */
static void
link_take(void *arg)
{
	struct looplink_end *e = arg;
	struct looplink_half *h = e->in;
	bool drained;

	assert(loop_self() == &e->set->loops[e->from]);
	pthread_mutex_lock(&h->mu);
	(void)evbuffer_add_buffer(e->rx, h->q);
	h->queued = 0;
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
	h->queued = 0;
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
	for (unsigned to = 0; to < ls->n; to++) {
		struct looplink_end *e = end_at(ls, me, to);

		if (to == me || e->mux == NULL)
			continue;
		end_close(e);
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
	    sizeof(*ls->scratch))) == NULL) {
		snprintf(err, errlen, n < 2 ? "a link needs two loops" : "out of memory");
		if (ls != NULL) {
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
		if (h->q != NULL)
			evbuffer_free(h->q);
		pthread_mutex_destroy(&h->mu);
	}
	for (unsigned i = 0; ls->scratch != NULL && i < ls->n; i++)
		free(ls->scratch[i].p);
	free(ls->scratch);
	free(ls->ends);
	free(ls->halves);
	free(ls);
}
