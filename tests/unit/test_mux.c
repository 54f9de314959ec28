/*
 * test_mux.c: stream multiplexing (common/mux.c), sans I/O.
 *
 * Two multiplexers are wired back to back in memory.  Each one's sendv
 * copies the message into its peer's inbox; the test decides when (and
 * whether) queued frames are decoded with frame_decode and fed to the other
 * side's mux_on_frame, so it can hold frames back, cross them, or forge
 * frames a well-behaved peer would never send.  pending() returns whatever
 * the test sets, which is how the transport high-water mark is exercised.
 *
 * Every stream callback is counted per stream and in totals, and each test
 * ends by asserting the totals, so a callback that fires twice (or not at
 * all) is caught even where the test does not look for it.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <event2/buffer.h>
#include <event2/event.h>

#include "frame.h"
#include "mux.h"

#define KiB 1024u
#define MiB (1024u * 1024u)
#define DEFAULT_BUDGET (256u << 20)

/* ---- randomness (fixed seeds) ---- */

/* An OPEN request for mux_open (it copies it). */
static const struct frame_open *
open_req(const char *target, const char *service)
{
	static struct frame_open req;

	frame_open_init(&req, target, service);
	return &req;
}

static uint64_t rng_state;

static uint64_t
rnd(void)
{
	rng_state ^= rng_state >> 12;
	rng_state ^= rng_state << 25;
	rng_state ^= rng_state >> 27;
	return rng_state * 2685821657736338717ull;
}

static size_t
rnd_upto(size_t n)   /* 1..n */
{
	return 1 + (size_t)(rnd() % n);
}

/* ---- one captured message ---- */

struct msg {
	uint8_t *buf;
	size_t len;
};

struct queue {
	struct msg *v;
	size_t head, n, cap;
};

static void
queue_push(struct queue *q, uint8_t *buf, size_t len)
{
	if (q->head + q->n == q->cap) {
		if (q->head > 0) {
			memmove(q->v, q->v + q->head, q->n * sizeof(*q->v));
			q->head = 0;
		} else {
			q->cap = q->cap ? 2 * q->cap : 64;
			q->v = realloc(q->v, q->cap * sizeof(*q->v));
			assert_non_null(q->v);
		}
	}
	q->v[q->head + q->n].buf = buf;
	q->v[q->head + q->n].len = len;
	q->n++;
}

static struct msg
queue_pop(struct queue *q)
{
	struct msg m;

	assert_true(q->n > 0);
	m = q->v[q->head++];
	q->n--;
	return m;
}

static void
queue_clear(struct queue *q)
{
	while (q->n > 0)
		free(queue_pop(q).buf);
	free(q->v);
	memset(q, 0, sizeof(*q));
}

/* ---- per-stream handler state ---- */

struct peer;

struct sctx {
	struct peer *p;
	struct mux_stream *s;       /* NULL once ended */
	/* counts */
	int opened_ok, opened_fail, data_calls, writable, fin, close;
	char opened_code[FRAME_CODE_MAX + 1];
	char opened_reason[FRAME_REASON_MAX + 1];
	char close_code[FRAME_CODE_MAX + 1];
	/* what arrived */
	uint8_t *rxbuf;             /* optional: copy of the bytes */
	size_t rxcap, rx, undrained;
	/* behaviour */
	int auto_drain;             /* drain as soon as it arrives */
	const char *reset_in_data;  /* mux_stream_reset(code) from on_data */
	int fin_in_data;            /* mux_stream_fin from on_data */
	int fin_on_fin;             /* answer the peer's FIN with ours */
	struct sctx *reset_on_writable; /* reset that stream from on_writable */
	int blocked;                /* a send came up short: wait for on_writable */
};

/* Totals over every stream of a test. */
static struct {
	int opened_ok, opened_fail, data_calls, writable, fin, close, open_req;
} tot;

#define MAX_CTX 2100  /* 1024 streams each way and some */

enum open_policy {
	ACCEPT,     /* mux_stream_accept from on_open */
	REFUSE,     /* mux_stream_refuse from on_open */
	HOLD,       /* mux_stream_hold; the test answers later */
	DEFER,      /* remember the stream, register nothing */
};

struct peer {
	const char *name;
	struct mux_config cfg;
	struct mux *m;
	struct peer *other;
	struct queue out;           /* messages sent, not yet delivered */
	size_t pending;             /* what pending() reports */
	int grow_pending;           /* each message sent adds to pending */
	int fail_sendv;
	int sendbuf_calls, sendbuf_moved;  /* io_sendbuf, io_senddata */
	int senddata_calls;                /* io_senddata */
	int sendframe_calls[FRAME_RESET + 1]; /* io_sendframe, per type */
	int sendv_calls;                   /* io_sendv */
	/* frames this side sent, by type, and DATA bytes */
	unsigned sent[32];
	uint64_t data_bytes_sent;
	uint64_t credit_received;   /* WINDOW credits delivered to this side */
	/* incoming OPENs */
	enum open_policy policy;
	const char *refuse_code, *refuse_reason;
	int accept_result;
	struct frame_open last_req;
	struct mux_stream *incoming[MAX_CTX];
	struct sctx *incoming_ctx[MAX_CTX];
	int nincoming;
	int auto_drain;             /* for accepted streams */
	size_t rxcap;               /* for accepted streams: keep the bytes */
};

static struct peer A, B;
static struct sctx ctx_pool[MAX_CTX];
static int nctx;

static struct sctx *
ctx_new(struct peer *p)
{
	struct sctx *c;

	assert_true(nctx < MAX_CTX);
	c = &ctx_pool[nctx++];
	memset(c, 0, sizeof(*c));
	c->p = p;
	return c;
}

static void
ctx_want_bytes(struct sctx *c, size_t cap)
{
	c->rxbuf = malloc(cap);
	assert_non_null(c->rxbuf);
	c->rxcap = cap;
}

/* ---- stream handlers ---- */

static void
h_opened(struct mux_stream *s, int ok, const char *code, const char *reason, void *arg)
{
	struct sctx *c = arg;

	assert_ptr_equal(s, c->s);
	if (ok) {
		assert_null(code);
		c->opened_ok++;
		tot.opened_ok++;
	} else {
		assert_non_null(code);
		assert_non_null(reason);
		snprintf(c->opened_code, sizeof(c->opened_code), "%s", code);
		snprintf(c->opened_reason, sizeof(c->opened_reason), "%s", reason);
		c->opened_fail++;
		tot.opened_fail++;
		c->s = NULL;
	}
}

static void
h_data(struct mux_stream *s, const uint8_t *data, size_t len, void *arg)
{
	struct sctx *c = arg;

	assert_ptr_equal(s, c->s);
	assert_true(len > 0);
	c->data_calls++;
	tot.data_calls++;
	if (c->rxbuf != NULL) {
		assert_true(c->rx + len <= c->rxcap);
		memcpy(c->rxbuf + c->rx, data, len);
	}
	c->rx += len;
	c->undrained += len;
	/* What the receiver holds never exceeds the window it granted. */
	assert_int_equal(mux_stream_buffered(s), c->undrained);
	assert_true(c->undrained <= c->p->cfg.window);
	if (c->reset_in_data != NULL) {
		mux_stream_reset(s, c->reset_in_data);
		c->s = NULL;
		/* The stream is dead to us but its memory must still be valid
		 * while the mux is on the stack: these are no-ops. */
		assert_int_equal(mux_stream_send(s, (const uint8_t *)"x", 1), 0);
		mux_stream_drained(s, len);
		mux_stream_fin(s);
		mux_stream_reset(s, "again");
		return;
	}
	if (c->fin_in_data)
		mux_stream_fin(s);   /* may not end it: the peer has not FINed */
	if (c->auto_drain) {
		mux_stream_drained(s, len);
		c->undrained -= len;
	}
}

static void
h_writable(struct mux_stream *s, void *arg)
{
	struct sctx *c = arg;

	assert_ptr_equal(s, c->s);
	c->writable++;
	tot.writable++;
	c->blocked = 0;
	if (c->reset_on_writable != NULL && c->reset_on_writable->s != NULL) {
		mux_stream_reset(c->reset_on_writable->s, "by_neighbour");
		c->reset_on_writable->s = NULL;
	}
}

static void
h_fin(struct mux_stream *s, void *arg)
{
	struct sctx *c = arg;

	assert_ptr_equal(s, c->s);
	c->fin++;
	tot.fin++;
	assert_int_equal(c->close, 0);
	if (c->fin_on_fin)
		mux_stream_fin(s);   /* ends the stream: on_close("done") now */
}

static void
h_close(struct mux_stream *s, const char *code, void *arg)
{
	struct sctx *c = arg;

	assert_ptr_equal(s, c->s);
	assert_non_null(code);
	snprintf(c->close_code, sizeof(c->close_code), "%s", code);
	c->close++;
	tot.close++;
	c->s = NULL;
	/* Already ended: calls on it are harmless no-ops. */
	mux_stream_reset(s, "late");
	mux_stream_fin(s);
}

static const struct mux_stream_handlers handlers = {
	.on_opened = h_opened,
	.on_data = h_data,
	.on_writable = h_writable,
	.on_fin = h_fin,
	.on_close = h_close,
};

/* ---- the mux side: transport and OPEN ---- */

static const struct mux_io io_data;     /* senddata's transport, below */
static const struct mux_io io_frames;   /* senddata's and sendframe's */
static const struct mux_io *wire_io;    /* the one wire_cfg gives both */

static int
io_sendv(void *io, const struct iovec *iov, int iovcnt)
{
	struct peer *p = io;
	struct frame f;
	char err[256];
	size_t len = 0, off = 0;
	uint8_t *buf;

	if (p->fail_sendv)
		return -1;
	p->sendv_calls++;
	for (int i = 0; i < iovcnt; i++)
		len += iov[i].iov_len;
	buf = malloc(len ? len : 1);
	assert_non_null(buf);
	for (int i = 0; i < iovcnt; i++) {
		memcpy(buf + off, iov[i].iov_base, iov[i].iov_len);
		off += iov[i].iov_len;
	}
	/* Every message is exactly one valid stream frame. */
	if (frame_decode(buf, len, &f, err, sizeof(err)) != 0)
		fail_msg("%s sent an undecodable frame: %s", p->name, err);
	assert_true(f.type >= FRAME_OPEN && f.type <= FRAME_RESET);
	/* With senddata, DATA never comes this way (mux.h). */
	if (wire_io == &io_data || wire_io == &io_frames)
		assert_int_not_equal(f.type, FRAME_DATA);
	p->sent[f.type]++;
	if (f.type == FRAME_DATA) {
		assert_true(f.u.data.len <= p->cfg.max_payload);
		/* DATA is handed over only below the high-water mark. */
		assert_true(p->pending < p->cfg.tx_high_water);
		p->data_bytes_sent += f.u.data.len;
	}
	if (p->grow_pending)
		p->pending += len;
	queue_push(&p->out, buf, len);
	return 0;
}

static size_t
io_pending(void *io)
{
	return ((struct peer *)io)->pending;
}

static const struct mux_io io = { .sendv = io_sendv, .pending = io_pending };

/* sendbuf: the frame's header, then n bytes taken from src; counts the
 * frames whose bytes were a chain of src moved whole (no copy). */
static int
io_sendbuf(void *io_arg, const uint8_t *hdr, size_t hdrlen, struct evbuffer *src,
    size_t n)
{
	struct peer *p = io_arg;
	struct evbuffer *dst = evbuffer_new();
	struct evbuffer_iovec before, after;
	struct iovec iov[2];
	int r;

	assert_non_null(dst);
	p->sendbuf_calls++;
	assert_true(evbuffer_peek(src, -1, NULL, &before, 1) == 1);
	assert_int_equal(evbuffer_remove_buffer(src, dst, n), (int)n);
	assert_true(evbuffer_peek(dst, -1, NULL, &after, 1) >= 1);
	if (after.iov_base == before.iov_base && after.iov_len == n)
		p->sendbuf_moved++;
	iov[0].iov_base = (void *)hdr;
	iov[0].iov_len = hdrlen;
	iov[1].iov_base = evbuffer_pullup(dst, -1);
	iov[1].iov_len = n;
	r = io_sendv(io_arg, iov, 2);
	evbuffer_free(dst);
	return r;
}

static const struct mux_io io_buf = { .sendv = io_sendv, .pending = io_pending,
    .sendbuf = io_sendbuf };

/* senddata (mux.h: an in-process transport's DATA, the loop link's): the
 * stream id and payload, no header; queued as the DATA frame it stands
 * for, and delivered through mux_on_data (feed).  Counts its calls and the
 * chains of src moved whole. */
static int
io_senddata(void *io_arg, uint32_t id, const uint8_t *data, struct evbuffer *src,
    size_t n)
{
	struct peer *p = io_arg;
	uint8_t hdr[FRAME_DATA_HEADER_MAX];
	size_t hl = frame_data_header(hdr, id, n);
	uint8_t *buf = malloc(hl + n);
	struct evbuffer_iovec before, after;
	struct evbuffer *dst;

	assert_non_null(buf);
	assert_true(hl > 0 && n > 0);
	p->senddata_calls++;
	memcpy(buf, hdr, hl);
	if (src != NULL) {
		assert_null(data);
		assert_non_null(dst = evbuffer_new());
		assert_true(evbuffer_peek(src, -1, NULL, &before, 1) == 1);
		assert_int_equal(evbuffer_remove_buffer(src, dst, n), (int)n);
		assert_true(evbuffer_peek(dst, -1, NULL, &after, 1) >= 1);
		if (after.iov_base == before.iov_base && after.iov_len == n)
			p->sendbuf_moved++;
		assert_int_equal(evbuffer_copyout(dst, buf + hl, n), (ev_ssize_t)n);
		evbuffer_free(dst);
	} else {
		memcpy(buf + hl, data, n);
	}
	assert_true(n <= p->cfg.max_payload);
	assert_true(p->pending < p->cfg.tx_high_water);
	p->sent[FRAME_DATA]++;
	p->data_bytes_sent += n;
	if (p->grow_pending)
		p->pending += hl + n;
	queue_push(&p->out, buf, hl + n);
	return 0;
}

static const struct mux_io io_data = { .sendv = io_sendv, .pending = io_pending,
    .senddata = io_senddata };

/* sendframe (mux.h: the loop link's other frames, never encoded): only the
 * type's member of f->u is set, so the frame is copied head and member
 * into a zeroed one before it is encoded for the wire (a field read
 * outside the member would show as a difference in what arrives). */
static int
io_sendframe(void *io_arg, const struct frame *f)
{
	struct peer *p = io_arg;
	struct frame *g = calloc(1, sizeof(*g));
	struct iovec iov;
	uint8_t *buf;
	size_t len;
	int r;

	assert_non_null(g);
	assert_true(f->type >= FRAME_OPEN && f->type <= FRAME_RESET);
	assert_int_not_equal(f->type, FRAME_DATA);
	p->sendframe_calls[f->type]++;
	g->type = f->type;
	g->stream_id = f->stream_id;
	switch (f->type) {
	case FRAME_OPEN: g->u.open = f->u.open; break;
	case FRAME_OPEN_OK: g->u.open_ok_window = f->u.open_ok_window; break;
	case FRAME_OPEN_FAIL: g->u.open_fail = f->u.open_fail; break;
	case FRAME_WINDOW: g->u.window_credit = f->u.window_credit; break;
	case FRAME_RESET: memcpy(g->u.reset_code, f->u.reset_code, sizeof(g->u.reset_code)); break;
	default: break;
	}
	assert_int_equal(frame_encode(g, 0, &buf, &len), 0);
	free(g);
	iov.iov_base = buf;
	iov.iov_len = len;
	r = io_sendv(io_arg, &iov, 1);
	p->sendv_calls--;   /* the test's own hop, not the multiplexer's */
	free(buf);
	return r;
}

static const struct mux_io io_frames = { .sendv = io_sendv, .pending = io_pending,
    .senddata = io_senddata, .sendframe = io_sendframe };
/* The transport wire_cfg gives both sides (io unless a test says). */
static const struct mux_io *wire_io = &io;

static void
m_open(struct mux *m, struct mux_stream *s, const struct frame_open *req, void *arg)
{
	struct peer *p = arg;
	struct sctx *c = NULL;

	assert_ptr_equal(m, p->m);
	tot.open_req++;
	p->last_req = *req;
	assert_true(p->nincoming < MAX_CTX);
	switch (p->policy) {
	case ACCEPT:
		c = ctx_new(p);
		c->s = s;
		c->auto_drain = p->auto_drain;
		if (p->rxcap)
			ctx_want_bytes(c, p->rxcap);
		p->accept_result = mux_stream_accept(s, NULL, &handlers, c);
		if (p->accept_result != 0)
			c->s = NULL;
		break;
	case REFUSE:
		mux_stream_refuse(s, p->refuse_code, p->refuse_reason);
		s = NULL;
		break;
	case HOLD:
		c = ctx_new(p);
		c->s = s;
		mux_stream_hold(s, &handlers, c);
		break;
	case DEFER:
		break;
	}
	p->incoming_ctx[p->nincoming] = c;
	p->incoming[p->nincoming++] = s;
}

static const struct mux_handlers mux_handlers = { .on_open = m_open };

/* ---- the wire ---- */

static struct mux_config
config(int odd_ids, uint32_t window)
{
	struct mux_config cfg = MUX_DEFAULT_CONFIG;

	cfg.odd_ids = odd_ids;
	cfg.window = window;
	cfg.max_payload = 16 * KiB;
	return cfg;
}

/* The loop whose events free the streams that ended (mux.h). */
static struct event_base *loop;

/* A is the gateway side (odd ids), B the dialing side (even ids). */
static void
wire_cfg(const struct mux_config *ca, const struct mux_config *cb)
{
	A.name = "A";
	B.name = "B";
	A.cfg = *ca;
	B.cfg = *cb;
	A.other = &B;
	B.other = &A;
	A.m = mux_new(loop, &A.cfg, wire_io, &A, &mux_handlers, &A);
	B.m = mux_new(loop, &B.cfg, wire_io, &B, &mux_handlers, &B);
	assert_non_null(A.m);
	assert_non_null(B.m);
}

static void
wire(uint32_t window_a, uint32_t window_b)
{
	struct mux_config ca = config(1, window_a), cb = config(0, window_b);

	wire_cfg(&ca, &cb);
}

static void
unwire_peer(struct peer *p)
{
	mux_free(p->m);
	p->m = NULL;
}

static int
setup(void **state)
{
	(void)state;
	memset(&A, 0, sizeof(A));
	memset(&B, 0, sizeof(B));
	memset(&tot, 0, sizeof(tot));
	memset(ctx_pool, 0, sizeof(ctx_pool));
	nctx = 0;
	wire_io = &io;
	mux_set_process_budget(DEFAULT_BUDGET);
	loop = event_base_new();
	assert_non_null(loop);
	return 0;
}

static int
teardown(void **state)
{
	(void)state;
	if (A.m != NULL)
		unwire_peer(&A);
	if (B.m != NULL)
		unwire_peer(&B);
	queue_clear(&A.out);
	queue_clear(&B.out);
	for (int i = 0; i < nctx; i++)
		free(ctx_pool[i].rxbuf);
	mux_set_process_budget(DEFAULT_BUDGET);
	event_base_free(loop);
	loop = NULL;
	return 0;
}

/* Decodes the oldest frame `from` sent into *f (DATA's payload points into
 * the returned buffer, which the caller frees). */
static uint8_t *
take_frame(struct peer *from, struct frame *f)
{
	struct msg m = queue_pop(&from->out);
	char err[256];

	assert_int_equal(frame_decode(m.buf, m.len, f, err, sizeof(err)), 0);
	return m.buf;
}

/* Type of the i-th queued frame from `from`. */
static enum frame_type
peek_type(struct peer *from, size_t i)
{
	struct frame f;
	char err[256];
	struct msg *m;

	assert_true(i < from->out.n);
	m = &from->out.v[from->out.head + i];
	assert_int_equal(frame_decode(m->buf, m->len, &f, err, sizeof(err)), 0);
	return f.type;
}

/* Feeds one frame to `to`; returns mux_on_frame's result. */
static int
feed(struct peer *to, const struct frame *f)
{
	char err[256] = "";
	int r;

	if (f->type == FRAME_WINDOW)
		to->credit_received += f->u.window_credit;
	/* A senddata transport's far end hands DATA on as id and payload. */
	if ((wire_io == &io_data || wire_io == &io_frames) && f->type == FRAME_DATA)
		return mux_on_data(to->m, f->stream_id, f->u.data.payload,
		    f->u.data.len);
	r = mux_on_frame(to->m, f, err, sizeof(err));
	if (r != 0)
		assert_true(err[0] != '\0');   /* a reason for the log */
	return r;
}

/* Delivers the oldest frame `from` sent to its peer. */
static int
deliver_one(struct peer *from)
{
	struct frame f;
	uint8_t *buf = take_frame(from, &f);
	int r = feed(from->other, &f);

	free(buf);
	return r;
}

static void
deliver(struct peer *from, size_t n)
{
	while (n-- > 0 && from->out.n > 0)
		assert_int_equal(deliver_one(from), 0);
}

/* Delivers everything both ways until both queues are empty. */
static void
settle(void)
{
	while (A.out.n > 0 || B.out.n > 0) {
		if (A.out.n > 0)
			assert_int_equal(deliver_one(&A), 0);
		if (B.out.n > 0)
			assert_int_equal(deliver_one(&B), 0);
	}
}

/* Opens a stream from p and (with the peer's policy) answers it. */
static struct sctx *
open_from(struct peer *p, const char *target)
{
	struct sctx *c = ctx_new(p);

	c->s = mux_open(p->m, NULL, open_req(target, NULL), &handlers, c);
	assert_non_null(c->s);
	return c;
}

/* The peer's context for the most recent OPEN it accepted or held. */
static struct sctx *
last_incoming(struct peer *p)
{
	assert_true(p->nincoming > 0);
	assert_non_null(p->incoming_ctx[p->nincoming - 1]);
	return p->incoming_ctx[p->nincoming - 1];
}

/* An open stream between A (opener) and B (accepter). */
static void
open_pair(struct sctx **a, struct sctx **b)
{
	B.policy = ACCEPT;
	*a = open_from(&A, "db:5432");
	settle();
	assert_int_equal((*a)->opened_ok, 1);
	*b = last_incoming(&B);
	assert_non_null((*b)->s);
}

static void
forge(struct frame *f, enum frame_type type, uint32_t id)
{
	memset(f, 0, sizeof(*f));
	f->type = type;
	f->stream_id = id;
}

static uint8_t pattern[256 * KiB];

static void
fill_pattern(uint64_t seed)
{
	rng_state = seed;
	for (size_t i = 0; i < sizeof(pattern); i++)
		pattern[i] = (uint8_t)rnd();
}

#define assert_totals(ook, ofail, fins, closes) do { \
	assert_int_equal(tot.opened_ok, (ook)); \
	assert_int_equal(tot.opened_fail, (ofail)); \
	assert_int_equal(tot.fin, (fins)); \
	assert_int_equal(tot.close, (closes)); \
} while (0)

/* ---- opening ---- */

static void
test_open_accept_calls_on_opened_with_windows(void **state)
{
	struct sctx *a, *b;

	(void)state;
	wire(64 * KiB, 32 * KiB);
	B.policy = ACCEPT;
	a = ctx_new(&A);
	a->s = mux_open(A.m, NULL, open_req("db.internal:5432", NULL), &handlers, a);
	assert_non_null(a->s);
	assert_int_equal(A.sent[FRAME_OPEN], 1);
	assert_int_equal(mux_stream_count(A.m), 1);
	/* Nothing may be sent before OPEN_OK. */
	assert_int_equal(mux_stream_send(a->s, pattern, 100), 0);
	assert_int_equal(A.sent[FRAME_DATA], 0);

	deliver(&A, 1);
	assert_int_equal(tot.open_req, 1);
	assert_string_equal(B.last_req.target, "db.internal:5432");
	assert_string_equal(B.last_req.service, "");
	assert_int_equal(B.last_req.window, 64 * KiB);   /* A's window */
	assert_int_equal(B.accept_result, 0);
	assert_int_equal(B.sent[FRAME_OPEN_OK], 1);
	b = last_incoming(&B);
	assert_int_equal(mux_stream_id(b->s), mux_stream_id(a->s));
	assert_int_equal(mux_stream_count(B.m), 1);
	assert_int_equal(a->opened_ok, 0);

	deliver(&B, 1);
	assert_int_equal(a->opened_ok, 1);
	assert_int_equal(a->opened_fail, 0);

	/* A may send what B granted (32 KiB), B what A granted (64 KiB). */
	assert_int_equal(mux_stream_send(a->s, pattern, 100 * KiB), 32 * KiB);
	assert_int_equal(mux_stream_send(b->s, pattern, 100 * KiB), 64 * KiB);
	assert_int_equal(A.data_bytes_sent, 32 * KiB);
	assert_int_equal(A.sent[FRAME_DATA], 2);   /* 16 KiB max_payload */
	assert_int_equal(B.sent[FRAME_DATA], 4);
	assert_totals(1, 0, 0, 0);
}

static void
test_open_by_service_name_reaches_peer(void **state)
{
	struct sctx *a;

	(void)state;
	wire(64 * KiB, 64 * KiB);
	B.policy = DEFER;
	a = ctx_new(&A);
	a->s = mux_open(A.m, NULL, open_req(NULL, "kube-api"), &handlers, a);
	assert_non_null(a->s);
	deliver(&A, 1);
	assert_string_equal(B.last_req.target, "");
	assert_string_equal(B.last_req.service, "kube-api");
	/* Answer later, from outside any callback. */
	struct sctx *b = ctx_new(&B);
	b->s = B.incoming[0];
	assert_int_equal(mux_stream_accept(b->s, NULL, &handlers, b), 0);
	settle();
	assert_int_equal(a->opened_ok, 1);
	assert_totals(1, 0, 0, 0);
}

static void
test_refuse_calls_on_opened_with_code_and_no_on_close(void **state)
{
	struct sctx *a;

	(void)state;
	wire(64 * KiB, 64 * KiB);
	B.policy = REFUSE;
	B.refuse_code = "connection_refused";
	B.refuse_reason = "nothing listens on db:5432";
	a = open_from(&A, "db:5432");
	settle();
	assert_int_equal(B.sent[FRAME_OPEN_FAIL], 1);
	assert_int_equal(a->opened_fail, 1);
	assert_int_equal(a->opened_ok, 0);
	assert_string_equal(a->opened_code, "connection_refused");
	assert_string_equal(a->opened_reason, "nothing listens on db:5432");
	assert_int_equal(a->close, 0);
	assert_int_equal(mux_stream_count(A.m), 0);
	assert_int_equal(mux_stream_count(B.m), 0);
	/* Freeing the muxes afterwards reports nothing more. */
	unwire_peer(&A);
	unwire_peer(&B);
	assert_totals(0, 1, 0, 0);
}

static void
test_held_stream_accepted_later_keeps_held_handlers(void **state)
{
	struct sctx *a, *b;

	(void)state;
	wire(64 * KiB, 64 * KiB);
	B.policy = HOLD;
	a = open_from(&A, "db:5432");
	settle();
	assert_int_equal(a->opened_ok, 0);   /* B is "dialing" */
	b = last_incoming(&B);
	assert_int_equal(mux_stream_accept(b->s, NULL, NULL, NULL), 0);
	/* Answering twice is refused. */
	assert_int_equal(mux_stream_accept(b->s, NULL, NULL, NULL), -1);
	settle();
	assert_int_equal(a->opened_ok, 1);
	assert_int_equal(mux_stream_send(a->s, (const uint8_t *)"hello", 5), 5);
	settle();
	assert_int_equal(b->rx, 5);   /* reached the held handlers */
	assert_totals(1, 0, 0, 0);
}

/* ---- data ---- */

/*
 * Moves `total` bytes each way between a stream pair, in random chunk
 * sizes, with frames delivered and receive buffers drained at random
 * moments.  A sender whose send came up short waits for on_writable, as a
 * real one must, so a missing wakeup shows up as a stall.
 */
static void
run_bulk(uint64_t seed, uint32_t window, size_t max_payload, size_t total)
{
	struct sctx *a, *b, *ends[2];
	struct peer *peers[2] = { &A, &B };
	size_t off[2] = { 0, 0 };
	uint64_t steps = 0;
	uint8_t *src[2];

	struct mux_config ca = config(1, window), cb = config(0, window);

	ca.max_payload = cb.max_payload = max_payload;
	wire_cfg(&ca, &cb);
	B.rxcap = total;
	open_pair(&a, &b);
	ctx_want_bytes(a, total);
	ends[0] = a;
	ends[1] = b;

	rng_state = seed;
	for (int i = 0; i < 2; i++) {
		src[i] = malloc(total);
		assert_non_null(src[i]);
		for (size_t k = 0; k < total; k++)
			src[i][k] = (uint8_t)(rnd() >> 32);
	}

	while (a->close == 0 || b->close == 0 || A.out.n > 0 || B.out.n > 0) {
		int i = (int)(rnd() % 2);
		struct sctx *c = ends[i];
		struct peer *p = peers[i];
		unsigned pick = (unsigned)(rnd() % 10);

		assert_true(++steps < 10u * 1000 * 1000);
		if (pick < 3) {
			/* Send the next random-sized chunk, unless waiting. */
			if (c->s == NULL || c->blocked || off[i] == total)
				continue;
			size_t want = rnd_upto(64 * KiB);
			if (want > total - off[i])
				want = total - off[i];
			size_t n = mux_stream_send(c->s, src[i] + off[i], want);
			assert_true(n <= want);
			off[i] += n;
			if (n < want)
				c->blocked = 1;
			else if (off[i] == total)
				mux_stream_fin(c->s);
		} else if (pick < 7) {
			deliver(p, rnd_upto(8));
		} else if (c->s != NULL && c->undrained > 0) {
			/* The receiver's destination took some bytes. */
			size_t n = rnd_upto(c->undrained);
			mux_stream_drained(c->s, n);
			c->undrained -= n;
		}
		/* Senders stay within the credit they were given. */
		assert_true(A.data_bytes_sent <= B.cfg.window + A.credit_received);
		assert_true(B.data_bytes_sent <= A.cfg.window + B.credit_received);
		if (a->s != NULL)
			assert_int_equal(mux_stream_buffered(a->s), a->undrained);
		if (b->s != NULL)
			assert_int_equal(mux_stream_buffered(b->s), b->undrained);
		/* Never stalled: a blocked sender has a WINDOW on the way or
		 * a reader with bytes to drain. */
		for (int k = 0; k < 2; k++) {
			if (ends[k]->blocked) {
				struct sctx *r = ends[1 - k];
				assert_true(peers[1 - k]->out.n > 0 || peers[k]->out.n > 0 ||
				    r->undrained > 0);
			}
		}
	}

	for (int i = 0; i < 2; i++) {
		struct sctx *r = ends[1 - i];
		assert_int_equal(off[i], total);
		assert_int_equal(r->rx, total);
		assert_memory_equal(r->rxbuf, src[i], total);
		assert_int_equal(ends[i]->fin, 1);
		assert_int_equal(ends[i]->close, 1);
		assert_string_equal(ends[i]->close_code, "done");
		assert_int_equal(peers[i]->sent[FRAME_RESET], 0);
		free(src[i]);
	}
	/* Credit flowed back: each WINDOW returns at most a window, and all
	 * but the first window's worth had to be granted. */
	assert_true(A.sent[FRAME_WINDOW] >= total / window - 1);
	assert_true(B.sent[FRAME_WINDOW] >= total / window - 1);
	assert_int_equal(mux_stream_count(A.m), 0);
	assert_int_equal(mux_stream_count(B.m), 0);
	assert_totals(1, 0, 2, 2);
}

static void
test_data_3MiB_both_ways_intact_with_random_drains(void **state)
{
	(void)state;
	/* 3 MiB each way through a 256 KiB window in <= 16 KiB frames. */
	run_bulk(0xb01c0001, 256 * KiB, 16 * KiB, 3 * MiB);
}

static void
test_data_small_window_many_windows_intact(void **state)
{
	(void)state;
	/* A 4 KiB window with 1 KiB frames: a WINDOW every 2 KiB drained. */
	run_bulk(0xb01c0002, 4 * KiB, 1 * KiB, 512 * KiB);
}

static void
test_send_stops_at_credit_then_window_brings_on_writable(void **state)
{
	struct sctx *a, *b;

	(void)state;
	wire(64 * KiB, 64 * KiB);
	open_pair(&a, &b);
	/* B granted 64 KiB: 100 KiB asked, 64 KiB taken, in 16 KiB frames. */
	assert_int_equal(mux_stream_send(a->s, pattern, 100 * KiB), 64 * KiB);
	assert_int_equal(A.sent[FRAME_DATA], 4);
	assert_int_equal(mux_stream_send(a->s, pattern, 1), 0);
	settle();
	assert_int_equal(b->rx, 64 * KiB);
	assert_int_equal(a->writable, 0);

	/* Draining less than half the window sends no WINDOW... */
	mux_stream_drained(b->s, 32 * KiB - 1);
	assert_int_equal(B.sent[FRAME_WINDOW], 0);
	/* ...reaching half does, for exactly what was drained. */
	mux_stream_drained(b->s, 1);
	assert_int_equal(B.sent[FRAME_WINDOW], 1);
	b->undrained -= 32 * KiB;
	assert_int_equal(mux_stream_buffered(b->s), 32 * KiB);
	deliver(&B, 1);
	assert_int_equal(A.credit_received, 32 * KiB);
	assert_int_equal(a->writable, 1);
	assert_int_equal(mux_stream_send(a->s, pattern, 100 * KiB), 32 * KiB);
	assert_int_equal(mux_stream_send(a->s, pattern, 1), 0);
	settle();
	assert_int_equal(b->rx, 96 * KiB);
	assert_int_equal(mux_stream_buffered(b->s), 64 * KiB);
	mux_stream_drained(b->s, 64 * KiB);
	b->undrained = 0;
	settle();
	assert_int_equal(a->writable, 2);
	/* A WINDOW when the sender was not blocked wakes nobody. */
	assert_int_equal(mux_stream_send(a->s, pattern, 40 * KiB), 40 * KiB);
	settle();
	mux_stream_drained(b->s, 40 * KiB);
	b->undrained = 0;
	assert_int_equal(B.sent[FRAME_WINDOW], 3);
	settle();
	assert_int_equal(a->writable, 2);
	assert_int_equal(mux_stream_send(a->s, pattern, 100 * KiB), 64 * KiB);
	assert_totals(1, 0, 0, 0);
}

static void
test_block_free(const void *data, size_t len, void *arg)
{
	(void)len;
	(void)arg;
	free((void *)data);
}

/* src: a 10 KiB and a 20 KiB piece of pattern, each a chain of its own (by
 * reference, as relay.c keeps them), then 100 bytes appended. */
static struct evbuffer *
pieces(void)
{
	struct evbuffer *src = evbuffer_new();
	size_t sizes[2] = { 10 * KiB, 20 * KiB }, off = 0;

	assert_non_null(src);
	for (int i = 0; i < 2; i++) {
		uint8_t *b = malloc(sizes[i]);

		assert_non_null(b);
		memcpy(b, pattern + off, sizes[i]);
		assert_int_equal(evbuffer_add_reference(src, b, sizes[i],
		    test_block_free, NULL), 0);
		off += sizes[i];
	}
	assert_int_equal(evbuffer_add(src, pattern + off, 100), 0);
	return src;
}

/* with_sendbuf: 0 the plain transport (copies), 1 sendbuf, 2 senddata. */
static void
send_buffer_case(int with_sendbuf)
{
	struct sctx *a, *b;
	struct evbuffer *src;

	wire_io = with_sendbuf == 2 ? &io_data : with_sendbuf ? &io_buf : &io;
	wire(24 * KiB, 24 * KiB);
	B.rxcap = 64 * KiB;
	open_pair(&a, &b);
	src = pieces();
	/* Credit for 24 KiB: the 10 KiB chain, then 14 KiB of the 20 KiB one;
	 * the rest stays in src and on_writable follows the WINDOW. */
	assert_int_equal(mux_stream_send_buffer(a->s, src), 24 * KiB);
	assert_int_equal(evbuffer_get_length(src), 6 * KiB + 100);
	assert_int_equal(A.sent[FRAME_DATA], 2);
	settle();
	assert_int_equal(b->rx, 24 * KiB);
	mux_stream_drained(b->s, 24 * KiB);
	b->undrained = 0;
	settle();
	assert_int_equal(a->writable, 1);
	/* One frame per chain: the 6 KiB left of the second, then the 100. */
	assert_int_equal(mux_stream_send_buffer(a->s, src), 6 * KiB + 100);
	assert_int_equal(evbuffer_get_length(src), 0);
	assert_int_equal(A.sent[FRAME_DATA], 4);
	settle();
	assert_int_equal(b->rx, 30 * KiB + 100);
	assert_memory_equal(b->rxbuf, pattern, 30 * KiB + 100);
	if (with_sendbuf) {
		/* Every frame went through sendbuf (senddata); the whole chains
		 * (10 KiB, the 6 KiB rest, the 100 bytes) moved, the cut one was
		 * copied. */
		assert_int_equal(with_sendbuf == 2 ? A.senddata_calls :
		    A.sendbuf_calls, 4);
		assert_int_equal(A.sendbuf_moved, 3);
	}
	evbuffer_free(src);
	assert_totals(1, 0, 0, 0);
}

static void
test_send_buffer_one_frame_per_chain_moved_within_credit(void **state)
{
	(void)state;
	send_buffer_case(1);
}

static void
test_send_buffer_without_sendbuf_copies_the_same_bytes(void **state)
{
	(void)state;
	send_buffer_case(0);
	assert_int_equal(A.sendbuf_calls, 0);
}

/* senddata set: DATA leaves as stream id and payload, by reference from
 * mux_stream_send_buffer (above) and copied from mux_stream_send, never
 * through sendv or sendbuf; the far end's mux_on_data charges the window
 * as mux_on_frame does (an overrun resets that stream, flow_control), and
 * DATA for a stream already gone is dropped quietly. */
static void
test_senddata_carries_data_and_mux_on_data_keeps_the_window(void **state)
{
	struct sctx *a, *b;
	uint32_t id;

	(void)state;
	send_buffer_case(2);
	assert_int_equal(A.sendbuf_calls, 0);
	teardown(NULL);
	setup(NULL);
	wire_io = &io_data;
	wire(64 * KiB, 64 * KiB);
	B.rxcap = 64 * KiB;
	open_pair(&a, &b);
	id = mux_stream_id(a->s);
	/* Copied: 64 KiB in frames of max_payload (16 KiB), then no credit. */
	assert_int_equal(mux_stream_send(a->s, pattern, 100 * KiB), 64 * KiB);
	assert_int_equal(A.senddata_calls, 4);
	assert_int_equal(A.sent[FRAME_DATA], 4);
	settle();
	assert_int_equal(b->rx, 64 * KiB);
	assert_memory_equal(b->rxbuf, pattern, 64 * KiB);
	/* One byte past the window, as a broken peer would send it. */
	assert_int_equal(mux_on_data(B.m, id, pattern, 1), 0);
	assert_int_equal(b->rx, 64 * KiB);
	assert_string_equal(b->close_code, "flow_control");
	settle();
	assert_string_equal(a->close_code, "flow_control");
	/* A stream id no longer (or never) open: nothing happens. */
	assert_int_equal(mux_on_data(B.m, id, pattern, 1), 0);
	assert_int_equal(mux_on_data(B.m, 999, pattern, 1), 0);
	assert_int_equal(B.out.n, 0);
	assert_totals(1, 0, 0, 2);
}

/* sendframe set: OPEN, OPEN_OK, OPEN_FAIL, WINDOW, FIN and RESET leave as
 * structs, never through sendv, each with its member whole (the far side
 * sees the OPEN's target, the credit, the refusal's code and reason, the
 * RESET's code). */
static void
test_sendframe_carries_every_other_frame(void **state)
{
	struct sctx *a, *b, *c;

	(void)state;
	wire_io = &io_frames;
	wire(16 * KiB, 16 * KiB);
	B.auto_drain = 1;
	open_pair(&a, &b);
	assert_string_equal(B.last_req.target, "db:5432");
	assert_int_equal(mux_stream_send(a->s, pattern, 40 * KiB), 16 * KiB);
	settle();   /* B drains at once: WINDOWs bring A's on_writable */
	assert_true(a->writable > 0);
	assert_int_equal(mux_stream_send(a->s, pattern, 8 * KiB), 8 * KiB);
	mux_stream_fin(a->s);
	settle();
	mux_stream_fin(b->s);
	settle();
	assert_string_equal(a->close_code, "done");
	assert_string_equal(b->close_code, "done");
	B.policy = REFUSE;
	B.refuse_code = "no_route";
	B.refuse_reason = "nothing listens there";
	c = open_from(&A, "db:5433");
	settle();
	assert_string_equal(c->opened_code, "no_route");
	assert_string_equal(c->opened_reason, "nothing listens there");
	B.policy = ACCEPT;
	open_pair(&a, &b);
	mux_stream_reset(a->s, "by_test");
	a->s = NULL;
	settle();
	assert_string_equal(b->close_code, "by_test");
	assert_int_equal(A.sendv_calls + B.sendv_calls, 0);
	assert_int_equal(A.sendframe_calls[FRAME_OPEN], 3);
	assert_int_equal(B.sendframe_calls[FRAME_OPEN_OK], 2);
	assert_int_equal(B.sendframe_calls[FRAME_OPEN_FAIL], 1);
	assert_true(B.sendframe_calls[FRAME_WINDOW] > 0);
	assert_int_equal(A.sendframe_calls[FRAME_FIN] + B.sendframe_calls[FRAME_FIN], 2);
	assert_int_equal(A.sendframe_calls[FRAME_RESET], 1);
}

static void
test_window_overrun_resets_that_stream_only(void **state)
{
	struct sctx *a1, *b1, *a2, *b2;
	struct frame f;

	(void)state;
	wire(64 * KiB, 64 * KiB);
	open_pair(&a1, &b1);
	open_pair(&a2, &b2);
	/* A fills s1's window legitimately... */
	assert_int_equal(mux_stream_send(a1->s, pattern, 64 * KiB), 64 * KiB);
	settle();
	assert_int_equal(b1->rx, 64 * KiB);
	/* ...then a broken A sends one byte more. */
	forge(&f, FRAME_DATA, mux_stream_id(a1->s));
	f.u.data.payload = pattern;
	f.u.data.len = 1;
	assert_int_equal(feed(&B, &f), 0);   /* a stream problem, not a tunnel one */
	assert_int_equal(b1->rx, 64 * KiB);  /* the extra byte never surfaced */
	assert_int_equal(B.sent[FRAME_RESET], 1);
	/* B's own side of s1 learns that it ended, and why. */
	assert_int_equal(b1->close, 1);
	assert_string_equal(b1->close_code, "flow_control");
	settle();
	assert_int_equal(a1->close, 1);
	assert_string_equal(a1->close_code, "flow_control");
	assert_int_equal(mux_stream_count(A.m), 1);
	assert_int_equal(mux_stream_count(B.m), 1);

	/* s2 carries on both ways. */
	assert_int_equal(mux_stream_send(a2->s, pattern, 1000), 1000);
	assert_int_equal(mux_stream_send(b2->s, pattern + 1, 2000), 2000);
	settle();
	assert_int_equal(b2->rx, 1000);
	assert_int_equal(a2->rx, 2000);
	assert_int_equal(a2->close + b2->close, 0);
	assert_totals(2, 0, 0, 2);
}

static void
test_oversized_single_data_resets_with_flow_control(void **state)
{
	static uint8_t big[64 * KiB + 1];
	struct sctx *a, *b;
	struct frame f;

	(void)state;
	wire(64 * KiB, 64 * KiB);
	open_pair(&a, &b);
	forge(&f, FRAME_DATA, mux_stream_id(a->s));
	f.u.data.payload = big;
	f.u.data.len = sizeof(big);
	assert_int_equal(feed(&B, &f), 0);
	assert_int_equal(b->data_calls, 0);
	assert_string_equal(b->close_code, "flow_control");
	settle();
	assert_string_equal(a->close_code, "flow_control");
	assert_totals(1, 0, 0, 2);
}

static void
test_window_grant_past_max_resets_with_flow_control(void **state)
{
	struct sctx *a, *b;
	struct frame f;

	(void)state;
	wire(64 * KiB, 64 * KiB);
	open_pair(&a, &b);
	forge(&f, FRAME_WINDOW, mux_stream_id(a->s));
	f.u.window_credit = UINT32_MAX;
	assert_int_equal(feed(&A, &f), 0);
	assert_int_equal(A.sent[FRAME_RESET], 1);
	assert_int_equal(a->close, 1);
	assert_string_equal(a->close_code, "flow_control");
	settle();
	assert_int_equal(b->close, 1);
	assert_string_equal(b->close_code, "flow_control");
	assert_totals(1, 0, 0, 2);
}

static void
test_data_after_fin_resets_with_protocol(void **state)
{
	struct sctx *a, *b;
	struct frame f;

	(void)state;
	wire(64 * KiB, 64 * KiB);
	open_pair(&a, &b);
	mux_stream_fin(a->s);
	settle();
	assert_int_equal(b->fin, 1);
	forge(&f, FRAME_DATA, mux_stream_id(a->s));
	f.u.data.payload = pattern;
	f.u.data.len = 10;
	assert_int_equal(feed(&B, &f), 0);
	assert_int_equal(b->data_calls, 0);
	assert_int_equal(b->close, 1);
	assert_string_equal(b->close_code, "protocol");
	settle();
	assert_int_equal(a->close, 1);
	assert_string_equal(a->close_code, "protocol");
	assert_totals(1, 0, 1, 2);
}

static void
test_data_before_open_ok_resets_with_protocol(void **state)
{
	struct sctx *a;
	struct frame f;

	(void)state;
	wire(64 * KiB, 64 * KiB);
	B.policy = DEFER;
	a = open_from(&A, "x:1");
	deliver(&A, 1);
	/* B answers with DATA instead of OPEN_OK. */
	forge(&f, FRAME_DATA, mux_stream_id(a->s));
	f.u.data.payload = pattern;
	f.u.data.len = 3;
	assert_int_equal(feed(&A, &f), 0);
	assert_int_equal(a->data_calls, 0);
	assert_int_equal(a->close, 1);
	assert_string_equal(a->close_code, "protocol");
	assert_int_equal(A.sent[FRAME_RESET], 1);
	assert_int_equal(mux_stream_count(A.m), 0);
	/* A late OPEN_OK finds nothing. */
	forge(&f, FRAME_OPEN_OK, 1);
	f.u.open_ok_window = 64 * KiB;
	assert_int_equal(feed(&A, &f), 0);
	assert_totals(0, 0, 0, 1);
}

/* ---- the transport high-water mark ---- */

static void
test_high_water_blocks_data_not_control_then_drain_wakes(void **state)
{
	struct sctx *a1, *b1, *a2, *b2, *a3, *b3;
	unsigned before[32];

	(void)state;
	wire(64 * KiB, 64 * KiB);
	open_pair(&a1, &b1);
	open_pair(&a2, &b2);
	open_pair(&a3, &b3);
	/* B sends A 40 KiB on s1 so that A has credit to return. */
	assert_int_equal(mux_stream_send(b1->s, pattern, 40 * KiB), 40 * KiB);
	settle();

	A.pending = A.cfg.tx_high_water + 1;   /* the socket is backed up */
	memcpy(before, A.sent, sizeof(before));
	assert_int_equal(mux_stream_send(a1->s, pattern, 1000), 0);
	assert_int_equal(mux_stream_send(a2->s, pattern, 1000), 0);
	assert_int_equal(A.sent[FRAME_DATA], before[FRAME_DATA]);
	/* Control frames still go out at once. */
	mux_stream_drained(a1->s, 40 * KiB);
	a1->undrained = 0;
	assert_int_equal(A.sent[FRAME_WINDOW], before[FRAME_WINDOW] + 1);
	mux_stream_fin(a3->s);
	assert_int_equal(A.sent[FRAME_FIN], before[FRAME_FIN] + 1);
	struct sctx *a4 = open_from(&A, "other:1");
	assert_int_equal(A.sent[FRAME_OPEN], before[FRAME_OPEN] + 1);
	mux_stream_reset(a4->s, "cancelled");
	a4->s = NULL;
	assert_int_equal(A.sent[FRAME_RESET], before[FRAME_RESET] + 1);
	assert_int_equal(A.out.n, 4);
	assert_int_equal(peek_type(&A, 0), FRAME_WINDOW);
	assert_int_equal(peek_type(&A, 1), FRAME_FIN);
	assert_int_equal(peek_type(&A, 2), FRAME_OPEN);
	assert_int_equal(peek_type(&A, 3), FRAME_RESET);
	/* Exactly at the mark still blocks. */
	A.pending = A.cfg.tx_high_water;
	assert_int_equal(mux_stream_send(a1->s, pattern, 1000), 0);
	mux_on_drain(A.m);   /* not below the mark yet: nobody wakes */
	assert_int_equal(a1->writable + a2->writable + a3->writable, 0);

	A.pending = 0;
	mux_on_drain(A.m);
	assert_int_equal(a1->writable, 1);
	assert_int_equal(a2->writable, 1);
	assert_int_equal(a3->writable, 0);   /* it never asked */
	mux_on_drain(A.m);                   /* one wakeup per block */
	assert_int_equal(a1->writable + a2->writable, 2);
	assert_int_equal(mux_stream_send(a1->s, pattern, 1000), 1000);
	assert_int_equal(mux_stream_send(a2->s, pattern, 1000), 1000);
	settle();
	assert_int_equal(b1->rx, 1000);
	assert_int_equal(b2->rx, 1000);
	assert_int_equal(b3->fin, 1);
	assert_totals(3, 0, 1, 1);   /* b3's FIN; a4's RESET closes B's side */
}

static void
test_high_water_reached_mid_send_takes_part(void **state)
{
	struct sctx *a, *b;

	(void)state;
	wire(256 * KiB, 256 * KiB);
	B.rxcap = 100 * KiB;
	open_pair(&a, &b);
	/* A transport that fills as it is fed (mark: 256 KiB).  The mux looks
	 * before each 16 KiB frame: from 236 KiB pending it sends two frames
	 * (236 -> ~252 -> ~268 KiB) and stops. */
	A.grow_pending = 1;
	A.pending = A.cfg.tx_high_water - 20 * KiB;
	assert_int_equal(mux_stream_send(a->s, pattern, 100 * KiB), 32 * KiB);
	assert_int_equal(A.sent[FRAME_DATA], 2);
	assert_int_equal(mux_stream_send(a->s, pattern + 32 * KiB, 10), 0);
	/* The socket drains: on_writable, and the rest goes. */
	A.pending = 0;
	A.grow_pending = 0;
	mux_on_drain(A.m);
	assert_int_equal(a->writable, 1);
	assert_int_equal(mux_stream_send(a->s, pattern + 32 * KiB, 68 * KiB), 68 * KiB);
	settle();
	assert_int_equal(b->rx, 100 * KiB);
	assert_memory_equal(b->rxbuf, pattern, 100 * KiB);
	assert_totals(1, 0, 0, 0);
}

static void
test_drain_wakes_every_blocked_stream_even_if_one_resets_another(void **state)
{
	struct sctx *a[3], *b[3];

	(void)state;
	wire(64 * KiB, 64 * KiB);
	for (int i = 0; i < 3; i++)
		open_pair(&a[i], &b[i]);
	A.pending = A.cfg.tx_high_water;
	for (int i = 0; i < 3; i++)
		assert_int_equal(mux_stream_send(a[i]->s, pattern, 10), 0);
	/* Whichever of a[0] and a[2] wakes first resets a[1], the stream in
	 * the middle; the other must still be woken. */
	a[0]->reset_on_writable = a[1];
	a[2]->reset_on_writable = a[1];
	A.pending = 0;
	mux_on_drain(A.m);
	assert_null(a[1]->s);
	assert_int_equal(a[1]->writable, 0);
	assert_int_equal(a[0]->writable, 1);
	assert_int_equal(a[2]->writable, 1);
	assert_int_equal(mux_stream_send(a[0]->s, pattern, 10), 10);
	assert_int_equal(mux_stream_send(a[2]->s, pattern, 10), 10);
	settle();
	assert_int_equal(b[0]->rx + b[2]->rx, 20);
	assert_string_equal(b[1]->close_code, "by_neighbour");
	assert_totals(3, 0, 0, 1);
}

static void
test_drain_survives_streams_resetting_themselves_in_on_writable(void **state)
{
	struct sctx *a[3], *b[3];

	(void)state;
	wire(64 * KiB, 64 * KiB);
	for (int i = 0; i < 3; i++)
		open_pair(&a[i], &b[i]);
	A.pending = A.cfg.tx_high_water;
	for (int i = 0; i < 3; i++) {
		assert_int_equal(mux_stream_send(a[i]->s, pattern, 10), 0);
		a[i]->reset_on_writable = a[i];   /* ends itself when woken */
	}
	A.pending = 0;
	mux_on_drain(A.m);
	for (int i = 0; i < 3; i++) {
		assert_int_equal(a[i]->writable, 1);
		assert_null(a[i]->s);
	}
	assert_int_equal(mux_stream_count(A.m), 0);
	settle();
	for (int i = 0; i < 3; i++)
		assert_string_equal(b[i]->close_code, "by_neighbour");
	assert_totals(3, 0, 0, 3);
}

/* ---- ending streams ---- */

static void
test_fin_each_way_then_done_exactly_once(void **state)
{
	struct sctx *a, *b;

	(void)state;
	wire(64 * KiB, 64 * KiB);
	open_pair(&a, &b);
	assert_int_equal(mux_stream_send(a->s, (const uint8_t *)"ping", 4), 4);
	mux_stream_fin(a->s);
	mux_stream_fin(a->s);   /* twice: one FIN only */
	assert_int_equal(A.sent[FRAME_FIN], 1);
	assert_int_equal(mux_stream_send(a->s, pattern, 1), 0);  /* after FIN */
	settle();
	assert_int_equal(b->rx, 4);
	assert_int_equal(b->fin, 1);
	assert_int_equal(b->close + a->close, 0);   /* half-closed */
	/* B still talks after A's FIN. */
	assert_int_equal(mux_stream_send(b->s, (const uint8_t *)"pong", 4), 4);
	mux_stream_fin(b->s);   /* both FINs: B's side ends now */
	assert_int_equal(b->close, 1);
	assert_string_equal(b->close_code, "done");
	settle();
	assert_int_equal(a->rx, 4);
	assert_int_equal(a->fin, 1);
	assert_int_equal(a->close, 1);
	assert_string_equal(a->close_code, "done");
	assert_int_equal(mux_stream_count(A.m), 0);
	assert_int_equal(mux_stream_count(B.m), 0);
	unwire_peer(&A);
	unwire_peer(&B);
	assert_totals(1, 0, 2, 2);
}

static void
test_fins_crossing_close_both_done_once(void **state)
{
	struct sctx *a, *b;

	(void)state;
	wire(64 * KiB, 64 * KiB);
	open_pair(&a, &b);
	mux_stream_fin(a->s);
	mux_stream_fin(b->s);
	settle();
	assert_int_equal(a->fin + b->fin, 2);
	assert_int_equal(a->close, 1);
	assert_int_equal(b->close, 1);
	assert_string_equal(a->close_code, "done");
	assert_string_equal(b->close_code, "done");
	assert_totals(1, 0, 2, 2);
}

static void
test_fin_answered_from_on_fin_closes_once(void **state)
{
	struct sctx *a, *b;

	(void)state;
	wire(64 * KiB, 64 * KiB);
	open_pair(&a, &b);
	b->fin_on_fin = 1;
	mux_stream_fin(a->s);
	settle();
	assert_int_equal(b->fin, 1);
	assert_int_equal(b->close, 1);
	assert_int_equal(a->close, 1);
	assert_string_equal(a->close_code, "done");
	assert_string_equal(b->close_code, "done");
	assert_totals(1, 0, 2, 2);
}

static void
test_peer_reset_calls_on_close_with_code_once(void **state)
{
	struct sctx *a, *b;
	struct frame f;

	(void)state;
	wire(64 * KiB, 64 * KiB);
	open_pair(&a, &b);
	uint32_t id = mux_stream_id(a->s);
	/* B had data in flight when A reset. */
	assert_int_equal(mux_stream_send(b->s, pattern, 1000), 1000);
	mux_stream_reset(a->s, "cancelled");
	a->s = NULL;
	assert_int_equal(A.sent[FRAME_RESET], 1);
	assert_int_equal(a->close, 0);          /* our own reset: no on_close */
	assert_int_equal(mux_stream_count(A.m), 0);
	settle();                               /* B's DATA reaches nobody */
	assert_int_equal(a->data_calls, 0);
	assert_int_equal(b->close, 1);
	assert_string_equal(b->close_code, "cancelled");
	assert_int_equal(mux_stream_count(B.m), 0);
	/* Late frames for the dead stream are ignored, not tunnel errors. */
	forge(&f, FRAME_RESET, id);
	snprintf(f.u.reset_code, sizeof(f.u.reset_code), "again");
	assert_int_equal(feed(&B, &f), 0);
	assert_int_equal(feed(&A, &f), 0);
	forge(&f, FRAME_WINDOW, id);
	f.u.window_credit = 10;
	assert_int_equal(feed(&A, &f), 0);
	forge(&f, FRAME_FIN, id);
	assert_int_equal(feed(&B, &f), 0);
	assert_totals(1, 0, 0, 1);
}

static void
test_peer_reset_while_held_calls_on_close(void **state)
{
	struct sctx *a, *b;

	(void)state;
	wire(64 * KiB, 64 * KiB);
	B.policy = HOLD;
	a = open_from(&A, "slow:1");
	settle();
	b = last_incoming(&B);
	mux_stream_reset(a->s, "client_gone");   /* gave up waiting */
	a->s = NULL;
	settle();
	assert_int_equal(b->close, 1);
	assert_string_equal(b->close_code, "client_gone");
	assert_int_equal(mux_stream_count(B.m), 0);
	assert_totals(0, 0, 0, 1);
}

static void
test_reset_inside_on_data_is_safe(void **state)
{
	struct sctx *a, *b;

	(void)state;
	wire(64 * KiB, 64 * KiB);
	open_pair(&a, &b);
	b->reset_in_data = "enough";
	/* Four DATA frames queued: the first one's handler ends the stream. */
	assert_int_equal(mux_stream_send(a->s, pattern, 64 * KiB), 64 * KiB);
	assert_int_equal(A.out.n, 4);
	for (size_t i = 0; i < 4; i++)
		assert_int_equal(peek_type(&A, i), FRAME_DATA);
	settle();
	assert_int_equal(b->data_calls, 1);
	assert_int_equal(b->close, 0);
	assert_int_equal(a->close, 1);
	assert_string_equal(a->close_code, "enough");
	assert_int_equal(B.sent[FRAME_RESET], 1);   /* "again" etc. were no-ops */
	assert_int_equal(mux_stream_count(B.m), 0);
	assert_totals(1, 0, 0, 1);
}

/* docs/0015: an ended stream is freed by the multiplexer's event, on the
 * loop, after the handler that ended it has returned; the loop running
 * between frames does not disturb the streams still open. */
static void
test_ended_streams_are_freed_by_the_loop(void **state)
{
	struct sctx *a, *b, *a2, *b2;

	(void)state;
	wire(64 * KiB, 64 * KiB);
	open_pair(&a, &b);
	open_pair(&a2, &b2);
	b->reset_in_data = "enough";
	assert_int_equal(mux_stream_send(a->s, pattern, 100), 100);
	settle();
	assert_int_equal(a->close, 1);
	assert_int_equal(mux_stream_count(A.m), 1);
	assert_int_equal(mux_stream_count(B.m), 1);
	/* Each side's ended stream waits for its multiplexer's event; the
	 * memory goes when the loop runs it (ASan: no leak, no reuse). */
	assert_int_equal(event_base_get_num_events(loop, EVENT_BASE_COUNT_ACTIVE), 2);
	assert_true(event_base_loop(loop, EVLOOP_NONBLOCK) >= 0);
	assert_int_equal(event_base_get_num_events(loop, EVENT_BASE_COUNT_ACTIVE), 0);
	assert_int_equal(mux_stream_send(a2->s, pattern, 100), 100);
	mux_stream_fin(a2->s);
	settle();
	assert_int_equal(b2->rx, 100);
	assert_int_equal(b2->fin, 1);
	assert_true(event_base_loop(loop, EVLOOP_NONBLOCK) >= 0);
	assert_int_equal(a2->close + b2->close, 0);
}

static void
test_fin_inside_on_data_then_peer_fin_closes_once(void **state)
{
	struct sctx *a, *b;

	(void)state;
	wire(64 * KiB, 64 * KiB);
	open_pair(&a, &b);
	b->fin_in_data = 1;
	assert_int_equal(mux_stream_send(a->s, pattern, 100), 100);
	mux_stream_fin(a->s);   /* DATA then FIN in one batch */
	settle();
	assert_int_equal(B.sent[FRAME_FIN], 1);
	assert_int_equal(b->close, 1);
	assert_int_equal(a->close, 1);
	assert_totals(1, 0, 2, 2);
}

/* ---- losing the tunnel ---- */

static void
test_mux_free_reports_tunnel_lost_to_every_stream(void **state)
{
	struct sctx *a_open, *b_open, *a_opening, *a_held_remote, *b_held;
	struct sctx *b_opening_to_a, *a_held;

	(void)state;
	wire(64 * KiB, 64 * KiB);
	open_pair(&a_open, &b_open);
	/* A opens; B has not answered (its OPEN_OK never leaves B). */
	B.policy = DEFER;
	a_opening = open_from(&A, "pending:1");
	deliver(&A, 1);
	/* A opens; B holds it while "dialing". */
	B.policy = HOLD;
	a_held_remote = open_from(&A, "dialing:1");
	deliver(&A, 1);
	b_held = last_incoming(&B);
	/* And the other way: B opens, A holds. */
	A.policy = HOLD;
	b_opening_to_a = open_from(&B, "back:1");
	deliver(&B, 1);
	a_held = last_incoming(&A);
	assert_int_equal(mux_stream_count(A.m), 4);
	assert_int_equal(mux_stream_count(B.m), 4);
	assert_int_equal(A.out.n + B.out.n, 0);

	unwire_peer(&A);
	assert_int_equal(a_open->close, 1);
	assert_string_equal(a_open->close_code, "tunnel_lost");
	assert_int_equal(a_opening->opened_fail, 1);
	assert_string_equal(a_opening->opened_code, "tunnel_lost");
	assert_int_equal(a_opening->close, 0);
	assert_int_equal(a_held_remote->opened_fail, 1);
	assert_int_equal(a_held_remote->close, 0);
	assert_int_equal(a_held->close, 1);
	assert_string_equal(a_held->close_code, "tunnel_lost");
	assert_int_equal(A.out.n, 0);   /* nothing is sent on a lost tunnel */

	unwire_peer(&B);
	assert_int_equal(b_open->close, 1);
	assert_string_equal(b_open->close_code, "tunnel_lost");
	assert_int_equal(b_held->close, 1);
	assert_string_equal(b_held->close_code, "tunnel_lost");
	assert_int_equal(b_opening_to_a->opened_fail, 1);
	assert_string_equal(b_opening_to_a->opened_code, "tunnel_lost");
	/* B's deferred stream had no handlers: nothing to call. */
	assert_totals(1, 3, 0, 4);
}

/* ---- stream ids ---- */

static void
test_stream_ids_odd_on_odd_side_even_on_other(void **state)
{
	(void)state;
	wire(64 * KiB, 64 * KiB);
	B.policy = A.policy = ACCEPT;
	for (uint32_t i = 0; i < 3; i++) {
		struct sctx *a = open_from(&A, "x:1");
		struct sctx *b = open_from(&B, "y:1");
		assert_int_equal(mux_stream_id(a->s), 1 + 2 * i);
		assert_int_equal(mux_stream_id(b->s), 2 + 2 * i);
	}
	settle();
	assert_int_equal(mux_stream_count(A.m), 6);
	assert_int_equal(mux_stream_count(B.m), 6);
	assert_totals(6, 0, 0, 0);
}

/* After 2^31 streams the ids wrap: 0 is skipped, and so is every id a
 * stream still holds; the peer takes each OPEN (a reused id would be a
 * tunnel error there, and settle() would fail). */
static void
test_stream_ids_wrap_skipping_zero_and_live_ids(void **state)
{
	struct sctx *a[4], *b[3];

	(void)state;
	wire(64 * KiB, 64 * KiB);
	B.policy = A.policy = ACCEPT;
	a[0] = open_from(&A, "x:1");                 /* 1, stays open */
	b[0] = open_from(&B, "y:1");                 /* 2, stays open */
	mux_test_set_next_id(A.m, UINT32_MAX - 2);
	mux_test_set_next_id(B.m, UINT32_MAX - 1);
	a[1] = open_from(&A, "x:1");
	a[2] = open_from(&A, "x:1");
	a[3] = open_from(&A, "x:1");                 /* wrapped: 1 is held */
	b[1] = open_from(&B, "y:1");
	b[2] = open_from(&B, "y:1");                 /* wrapped: 0, then 2 held */
	assert_int_equal(mux_stream_id(a[0]->s), 1);
	assert_int_equal(mux_stream_id(a[1]->s), UINT32_MAX - 2);
	assert_int_equal(mux_stream_id(a[2]->s), UINT32_MAX);
	assert_int_equal(mux_stream_id(a[3]->s), 3);
	assert_int_equal(mux_stream_id(b[0]->s), 2);
	assert_int_equal(mux_stream_id(b[1]->s), UINT32_MAX - 1);
	assert_int_equal(mux_stream_id(b[2]->s), 4);
	settle();
	assert_int_equal(mux_stream_count(A.m), 7);
	assert_int_equal(mux_stream_count(B.m), 7);
	assert_totals(7, 0, 0, 0);
}

static void
test_open_with_wrong_parity_is_a_tunnel_error(void **state)
{
	struct frame f;

	(void)state;
	wire(64 * KiB, 64 * KiB);
	A.policy = B.policy = ACCEPT;
	/* A (odd side) gets an odd id from B: B may only use even ones. */
	forge(&f, FRAME_OPEN, 7);
	snprintf(f.u.open.target, sizeof(f.u.open.target), "x:1");
	f.u.open.window = 64 * KiB;
	assert_int_equal(feed(&A, &f), -1);
	/* B (even side) gets an even id from A. */
	f.stream_id = 8;
	assert_int_equal(feed(&B, &f), -1);
	assert_int_equal(tot.open_req, 0);
	assert_int_equal(A.out.n + B.out.n, 0);
	/* The right parity is fine. */
	f.stream_id = 7;
	assert_int_equal(feed(&B, &f), 0);
	assert_int_equal(tot.open_req, 1);
}

static void
test_open_with_duplicate_id_is_a_tunnel_error(void **state)
{
	struct sctx *a, *b;
	struct frame f;

	(void)state;
	wire(64 * KiB, 64 * KiB);
	open_pair(&a, &b);
	forge(&f, FRAME_OPEN, mux_stream_id(a->s));
	f.u.open.window = 64 * KiB;
	assert_int_equal(feed(&B, &f), -1);
	assert_int_equal(tot.open_req, 1);
	/* The existing stream is untouched. */
	assert_int_equal(mux_stream_send(a->s, pattern, 10), 10);
	settle();
	assert_int_equal(b->rx, 10);
	/* A still-unanswered (deferred) stream's id counts as in use too. */
	B.policy = DEFER;
	struct sctx *a2 = open_from(&A, "x:1");
	deliver(&A, 1);
	forge(&f, FRAME_OPEN, mux_stream_id(a2->s));
	assert_int_equal(feed(&B, &f), -1);
	assert_totals(1, 0, 0, 0);
}

static void
test_stream_frame_for_unknown_id_is_ignored(void **state)
{
	struct frame f;

	(void)state;
	wire(64 * KiB, 64 * KiB);
	forge(&f, FRAME_DATA, 2);
	f.u.data.payload = pattern;
	f.u.data.len = 5;
	assert_int_equal(feed(&A, &f), 0);
	forge(&f, FRAME_OPEN_OK, 1);
	f.u.open_ok_window = 10;
	assert_int_equal(feed(&A, &f), 0);
	assert_int_equal(A.out.n, 0);
}

/* ---- limits ---- */

static void
test_max_streams_refuses_with_too_many_streams(void **state)
{
	struct sctx *a[3];

	(void)state;
	struct mux_config ca = config(1, 64 * KiB), cb = config(0, 64 * KiB);

	cb.max_streams = 2;
	wire_cfg(&ca, &cb);
	B.policy = ACCEPT;
	for (int i = 0; i < 3; i++)
		a[i] = open_from(&A, "x:1");
	settle();
	assert_int_equal(a[0]->opened_ok + a[1]->opened_ok, 2);
	assert_int_equal(a[2]->opened_fail, 1);
	assert_string_equal(a[2]->opened_code, "too_many_streams");
	assert_int_equal(tot.open_req, 2);   /* the third never reached on_open */
	assert_int_equal(mux_stream_count(B.m), 2);
	/* B itself cannot open a third either. */
	struct sctx *c = ctx_new(&B);
	assert_null(mux_open(B.m, NULL, open_req("y:1", NULL), &handlers, c));
	/* Once one ends there is room again. */
	mux_stream_reset(a[0]->s, "cancelled");
	a[0]->s = NULL;
	settle();
	a[2] = open_from(&A, "x:1");
	settle();
	assert_int_equal(a[2]->opened_ok, 1);
	assert_totals(3, 1, 0, 1);
}

static void
test_process_budget_refuses_open_and_accept_with_busy(void **state)
{
	struct sctx *a1, *b1, *a2;

	(void)state;
	wire(64 * KiB, 64 * KiB);
	/* Room for two 64 KiB windows in the whole process. */
	mux_set_process_budget(128 * KiB);
	open_pair(&a1, &b1);                  /* A's and B's window: 128 KiB */
	a2 = ctx_new(&A);
	assert_null(mux_open(A.m, NULL, open_req("x:1", NULL), &handlers, a2));
	assert_int_equal(A.sent[FRAME_OPEN], 1);

	/* B asks A; A's accept would commit beyond the budget.  16 KiB free:
	 * B's open gets the smallest window (16 KiB, windows shrink before
	 * streams are refused), and then nothing is left for A's accept. */
	mux_set_process_budget(144 * KiB);
	A.policy = ACCEPT;
	struct sctx *b2 = open_from(&B, "y:1");
	settle();
	assert_int_equal(A.accept_result, -1);
	assert_int_equal(b2->opened_fail, 1);
	assert_string_equal(b2->opened_code, "busy");
	assert_int_equal(mux_stream_count(A.m), 1);
	assert_int_equal(mux_stream_count(B.m), 1);

	/* Ending streams returns their share. */
	mux_stream_fin(a1->s);
	mux_stream_fin(b1->s);
	settle();
	assert_int_equal(a1->close + b1->close, 2);
	mux_set_process_budget(128 * KiB);
	B.policy = ACCEPT;
	a2 = open_from(&A, "x:1");
	settle();
	assert_int_equal(a2->opened_ok, 1);
	assert_totals(2, 1, 2, 2);
}

/* Past half of the budget a new stream's OPEN announces a smaller window,
 * down to the 16 KiB minimum, and only then are streams refused. */
static void
test_windows_shrink_under_pressure_before_refusal(void **state)
{
	struct sctx *a1, *b1, *c;
	struct frame f;

	(void)state;
	wire(64 * KiB, 64 * KiB);
	mux_set_process_budget(192 * KiB);
	open_pair(&a1, &b1);                  /* 128 KiB: two full windows */
	c = open_from(&A, "x:1");             /* 64 KiB free of 192: 2/3 of 64 */
	free(take_frame(&A, &f));
	assert_int_equal(f.type, FRAME_OPEN);
	assert_int_equal(f.u.open.window, 64 * KiB * 64 / 96);
	c = open_from(&A, "x:2");             /* 21.3 KiB free: the minimum */
	free(take_frame(&A, &f));
	assert_int_equal(f.u.open.window, 16 * KiB);
	c = ctx_new(&A);                      /* 5.3 KiB free: refused */
	assert_null(mux_open(A.m, NULL, open_req("x:3", NULL), &handlers, c));
	assert_string_equal(mux_refusal(A.m), "the stream memory budget is spent");
}

static void
test_open_fails_cleanly_when_transport_refuses(void **state)
{
	struct sctx *c;

	(void)state;
	wire(64 * KiB, 64 * KiB);
	mux_set_process_budget(64 * KiB);
	A.fail_sendv = 1;
	c = ctx_new(&A);
	assert_null(mux_open(A.m, NULL, open_req("x:1", NULL), &handlers, c));
	assert_int_equal(mux_stream_count(A.m), 0);
	A.fail_sendv = 0;
	/* The failed open gave its budget back. */
	c->s = mux_open(A.m, NULL, open_req("x:1", NULL), &handlers, c);
	assert_non_null(c->s);
	assert_totals(0, 0, 0, 0);
}

/* ---- many streams: every frame finds its own stream ---- */

/* Sends n bytes of pattern (starting at off) on c, all at once. */
static void
send_n(struct sctx *c, size_t off, size_t n)
{
	assert_int_equal(mux_stream_send(c->s, pattern + off, n), n);
}

static void
test_many_streams_each_frame_reaches_its_own_stream(void **state)
{
	enum { N = 1024 };
	static struct sctx *a[N], *b[N];

	(void)state;
	fill_pattern(7);
	wire(16 * KiB, 16 * KiB);
	assert_int_equal(A.cfg.max_streams, N);
	B.policy = ACCEPT;
	B.auto_drain = 1;
	for (int i = 0; i < N; i++) {
		a[i] = open_from(&A, "db:5432");
		a[i]->auto_drain = 1;
	}
	settle();
	assert_int_equal(mux_stream_count(A.m), N);
	assert_int_equal(mux_stream_count(B.m), N);
	for (int i = 0; i < N; i++) {
		assert_int_equal(a[i]->opened_ok, 1);
		b[i] = B.incoming_ctx[i];
		assert_non_null(b[i]);
	}
	/* A tunnel full: the next OPEN is refused, the rest carry on. */
	assert_null(mux_open(A.m, NULL, open_req("db:5432", NULL), &handlers, ctx_new(&A)));

	/* Each stream its own length, both ways, sent in opposite orders. */
	for (int i = 0; i < N; i++) {
		send_n(a[N - 1 - i], 0, (size_t)(N - 1 - i) % 200 + 1);
		send_n(b[i], 0, (size_t)i % 300 + 1);
	}
	settle();
	for (int i = 0; i < N; i++) {
		assert_int_equal(b[i]->rx, (size_t)i % 200 + 1);
		assert_int_equal(a[i]->rx, (size_t)i % 300 + 1);
	}

	/* Every other stream reset: the rest still find theirs. */
	for (int i = 0; i < N; i += 2) {
		mux_stream_reset(a[i]->s, "test");
		a[i]->s = NULL;
	}
	settle();
	assert_int_equal(mux_stream_count(A.m), N / 2);
	assert_int_equal(mux_stream_count(B.m), N / 2);
	for (int i = 1; i < N; i += 2)
		send_n(a[i], 0, 7);
	settle();
	for (int i = 0; i < N; i++) {
		if (i % 2 == 0) {
			assert_int_equal(b[i]->close, 1);
			assert_string_equal(b[i]->close_code, "test");
			assert_int_equal(b[i]->rx, (size_t)i % 200 + 1);
		} else
			assert_int_equal(b[i]->rx, (size_t)i % 200 + 1 + 7);
	}
	assert_totals(N, 0, 0, N / 2);
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
#define T(name) cmocka_unit_test_setup_teardown(name, setup, teardown)
		T(test_open_accept_calls_on_opened_with_windows),
		T(test_many_streams_each_frame_reaches_its_own_stream),
		T(test_open_by_service_name_reaches_peer),
		T(test_refuse_calls_on_opened_with_code_and_no_on_close),
		T(test_held_stream_accepted_later_keeps_held_handlers),
		T(test_data_3MiB_both_ways_intact_with_random_drains),
		T(test_data_small_window_many_windows_intact),
		T(test_send_stops_at_credit_then_window_brings_on_writable),
		T(test_send_buffer_one_frame_per_chain_moved_within_credit),
		T(test_send_buffer_without_sendbuf_copies_the_same_bytes),
		T(test_senddata_carries_data_and_mux_on_data_keeps_the_window),
		T(test_sendframe_carries_every_other_frame),
		T(test_window_overrun_resets_that_stream_only),
		T(test_oversized_single_data_resets_with_flow_control),
		T(test_window_grant_past_max_resets_with_flow_control),
		T(test_data_after_fin_resets_with_protocol),
		T(test_data_before_open_ok_resets_with_protocol),
		T(test_high_water_blocks_data_not_control_then_drain_wakes),
		T(test_high_water_reached_mid_send_takes_part),
		T(test_drain_wakes_every_blocked_stream_even_if_one_resets_another),
		T(test_drain_survives_streams_resetting_themselves_in_on_writable),
		T(test_fin_each_way_then_done_exactly_once),
		T(test_fins_crossing_close_both_done_once),
		T(test_fin_answered_from_on_fin_closes_once),
		T(test_peer_reset_calls_on_close_with_code_once),
		T(test_peer_reset_while_held_calls_on_close),
		T(test_reset_inside_on_data_is_safe),
		T(test_fin_inside_on_data_then_peer_fin_closes_once),
		T(test_ended_streams_are_freed_by_the_loop),
		T(test_mux_free_reports_tunnel_lost_to_every_stream),
		T(test_stream_ids_odd_on_odd_side_even_on_other),
		T(test_stream_ids_wrap_skipping_zero_and_live_ids),
		T(test_open_with_wrong_parity_is_a_tunnel_error),
		T(test_open_with_duplicate_id_is_a_tunnel_error),
		T(test_stream_frame_for_unknown_id_is_ignored),
		T(test_max_streams_refuses_with_too_many_streams),
		T(test_process_budget_refuses_open_and_accept_with_busy),
		T(test_open_fails_cleanly_when_transport_refuses),
		T(test_windows_shrink_under_pressure_before_refusal),
#undef T
	};

	fill_pattern(0x9a77e54);
	return cmocka_run_group_tests(tests, NULL, NULL);
}
