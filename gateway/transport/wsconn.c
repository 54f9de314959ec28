/*
 * wsconn.c: the server side of RFC 6455 on one TLS bufferevent, after the
 * upgrade (see wsconn.h).
 *
 * Input is parsed in place: the frame header is read from the first bytes
 * of the input evbuffer, and a message that arrives as one frame (nearly all
 * of them) is made contiguous with a single evbuffer_pullup, unmasked in
 * place, handed to on_message and only then drained.  Fragmented messages
 * are copied into a reassembly buffer bounded by max_message.  Each read
 * callback first takes every TLS record already readable (tlsread.h), so a
 * large frame is not parsed again for every record of it.
 *
 * Output is a frame header and the caller's bytes, copied once into the
 * bufferevent's output in one commit (or, wsface_send_buffer, the header
 * added and the caller's evbuffer chains moved in); how much is queued
 * there is the backpressure.  Sealed records leave in batches (tlswrite.h).
 * Every frame counts against one cap (wsface_set_max_queue), the ones we
 * write on our own for the peer's input (PONG) too: a frame that would
 * pass it ends the connection at once (docs/0009-peer-queue-caps.md).
 *
 * States:
 *   OPEN     messages both ways
 *   CLOSING  a close frame is queued: once it is written and the peer's
 *            close frame (or EOF) has arrived, or WS_CLOSE_TIMEOUT_MS
 *            passed, the connection ends
 *   CLOSED   on_close is running; the struct is freed right after
 *
 * on_close runs only from the event loop's own callbacks (write, event,
 * the set's tick or its "soon" event) or wsconn_destroy_all, never inside
 * a call the owner made or inside the input path (docs/0015-lifecycle.md):
 * whatever decides the connection must end while something of it may be
 * on the stack (out of memory, the close handshake completed while
 * parsing) marks it and queues it for the set's "soon" event
 * (ws_end_soon), whose callback ends it.
 *
 * Keepalive and the close deadline are a node on the set's timing wheel
 * (twheel.h), not a timeout of the bufferevent's read event: a timeout
 * that fires makes libevent delete and add the read event again (an
 * epoll_ctl per ping), and a timer per connection costs an event.  A read
 * only notes the wheel's time (heard_ms, what wsface_heard_ms answers);
 * when the node comes due the connection is pinged, dropped, or the node
 * moves to heard_ms + interval.
 * A ping's timeout that finds input not yet read (a loop back from a stall
 * runs the tick before the deferred read callback) waits one more tick
 * before dropping: the pong that came in time is read first (docs/0035).
 */
#include "wsconn.h"
#include "tlsread.h"
#include "tlswrite.h"
#include "twheel.h"

#include <assert.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/bufferevent_ssl.h>
#include <event2/event.h>
#include <openssl/err.h>
#include <openssl/ssl.h>

#include "budget.h"
#include "log.h"
#include "loop.h"
#include "runtime.h"
#include "wsframe.h"
#include "wsturn.h"

#define WS_HEADER_MAX        14          /* 2 + 8 (length) + 4 (mask) */
#define WS_DEFAULT_MAX       (1u << 20)  /* until wsface_set_max_message */
#define WS_DEFAULT_QUEUE     (64u << 10) /* until wsface_set_max_queue */
#define WS_INPUT_MIN         (64u << 10) /* smallest read high-water mark */
#define WS_PING_INTERVAL_MS  20000       /* silence before we ping (until set) */
#define WS_PING_TIMEOUT_MS   30000       /* then no answer before we give up */
#define WS_CLOSE_TIMEOUT_MS  5000        /* close frame out, peer's close in */
#define WS_CLOSE_REASON_MAX  123         /* a control frame's 125 minus the code */
/* A PING that finds more than this queued for the peer (output and the
 * TLS batch) is answered once it drains (only the latest, RFC 6455
 * 5.5.3): a peer that pings and never reads holds one payload, not a PONG
 * per PING (issue 22: 100 such connections took 7 MiB each); the PONGs
 * it was not sent still count toward the output cap, which drops it. */
#define WS_PONG_ROOM         (16u << 10)
/* A partial frame left in the input after its complete ones were taken,
 * at most this long, moves to a chain of its own: the chains the reads
 * reserved (up to 2 MiB each in bulk mode) are freed now rather than kept
 * for a few bytes while the peer sends the rest (a pinging client held
 * ~2 MiB per connection that way: docs/0036). */
#define WS_COMPACT_MAX       (16u << 10)
#define WS_PING_PAYLOAD_MAX  125
enum ws_state {
	WS_OPEN,
	WS_CLOSING,
	WS_CLOSED,
	WS_ENTRIES        /* must be last */
};

static const char *const ws_state_names[WS_ENTRIES] = {
	[WS_OPEN] = "open",
	[WS_CLOSING] = "closing",
	[WS_CLOSED] = "closed",
};

/* The wheel's slots: 256 ticks (64 s at 250 ms) cover the default interval
 * and timeout in one lap; a longer deadline waits a lap or more. */
#define WS_WHEEL_SLOTS       256
#define WS_TICK_MIN_MS       10
#define WS_TICK_MAX_MS       250

struct wsconn_set {
	LIST_HEAD(, wsconn) conns;        /* every open connection */
	LIST_HEAD(, wsconn) soon;         /* those waiting for soon_ev */
	struct event_base *base;
	struct event *tick;               /* persistent, added while the wheel has nodes */
	struct event *soon_ev;            /* active (ws_yield: due) while soon is not empty */
	int ticking;
	struct twheel wheel;
	struct budget_slice slice;        /* what its connections hold (budget NULL: not counted) */
	struct event *evict_ev;           /* made active when a holding is over */
	struct loop *loops;               /* the gateway's loops, or NULL */
	unsigned index;                   /* the set's loop: loops[index] */
};

struct ws_pong {
	uint8_t len;
	uint8_t payload[WS_PING_PAYLOAD_MAX];
};

struct wsconn {
	struct wsface face;               /* first: what the owner holds */
	LIST_ENTRY(wsconn) link;          /* in the set's conns */
	struct bufferevent *bev;          /* owned: freed (socket, SSL) with us */
	struct wsconn_set *set;
	/* OPEN: the keepalive deadline.  CLOSING: the close deadline. */
	struct twheel_node due;
	/* In set->soon (in_soon): OPEN, to deliver messages already buffered
	 * when reading resumes or after its turn (ws_yield); otherwise to end
	 * (an abort, or the close handshake done). */
	LIST_ENTRY(wsconn) soon_link;
	/* The wheel's time (twheel_now: its last tick, not a clock read) of
	 * the last read callback, or of wsconn_new (the upgrade request was
	 * the peer's last word then); wsface_heard_ms answers it. */
	uint64_t heard_ms;
	enum ws_state state;
	/* Its places in the landing's counts (wsconn_keep_counts), given
	 * back in ws_finish: in its loop's nconns; in the tunnel_side of
	 * set->loops[weighed_at - 1] (0: none).  In the padding after state. */
	uint8_t counted, weighed_at;
	size_t max_message;
	size_t max_queue;                 /* output cap: more and the peer is dropped */
	size_t low_water;

	uint8_t *rx;                      /* owned: a fragmented message so far */
	size_t rx_len;
	int rx_opcode;                    /* its first opcode; 0: none under way */
	int rx_skip;                      /* that message is over the limit: drop it */
	uint64_t skip;                    /* payload bytes of this frame to drop */

	uint32_t ping_interval_ms;        /* silence before we ping */
	uint32_t ping_timeout_ms;         /* a ping unanswered this long: drop */
	int paused;                       /* owner asked: no messages, no reading */
	int pinged;                       /* silence: a ping is out */
	int ping_grace;                   /* its timeout gave unread input a tick */
	int discard;                      /* input is no longer parsed */
	int close_flushed;                /* our close frame is written */
	int peer_closed;                  /* the peer's close frame arrived */
	int finish;                       /* ending: queued to end with close_notify */
	int in_soon;
	struct ws_turn turn;              /* its turns of the loop (wsturn.h) */
	size_t input_high;                /* the read high-water mark set; 0: none */
	/* A PING waits for the output to drain: the latest such PING's
	 * payload, made when one finds the output full and freed when its
	 * PONG goes, so that a connection holds it only then (~140 bytes a
	 * tunnel otherwise). */
	struct ws_pong *pong_owed;
	size_t pong_debt;                 /* PONGs those PINGs would have queued */
	struct budget_holder hold;        /* input + output, in the memory budget */
	/* The output's callback counting it (ws_count); NULL: not counting.
	 * The input is counted where it is taken, at the end of ws_process. */
	struct evbuffer_cb_entry *out_cb;
	char who[64];                     /* the principal charged, for logs */
	char peer[64];
};

static const struct wsface_ops ws_ops;

static void
ws_set_state(struct wsconn *c, enum ws_state next)
{
	debug("websocket state", KV_S("peer", c->peer),
	    KV_S("from", ws_state_names[c->state]), KV_S("to", ws_state_names[next]));
	c->state = next;
}

/* The read high-water mark for messages of up to max_message bytes: four
 * of them, at least 64 KiB (TLS gets whole records), at most 4 MiB. */
static size_t
input_mark(size_t max_message)
{
	size_t mark = max_message < (1u << 20) ? 4 * max_message : 4u << 20;

	return mark < WS_INPUT_MIN ? WS_INPUT_MIN : mark;
}

/*
 * The read high-water mark, set at every read callback (so at most one
 * read's worth of input comes in past a change): input_mark's while the
 * connection reads in bulk (wsturn.h: it bounds what one socket event's
 * read takes, up to 1 MiB then), none while it reads small.  With a mark
 * libevent runs its watermark callback at every change of the input, the
 * read of a message and its drain (~390 of the gateway's instructions per
 * /k8s request); the turns bound the input without it (one pull a turn,
 * WS_READ_SMALL; a turn that leaves input stops reading, ws_turn_end; a
 * frame over max_message is refused), and one socket event's read takes
 * at most a record past 4 KiB (tlsread.h).  Paused, c does not read at
 * all; closing, it has no mark (ws_start_close).
 */
static void
ws_input_mark(struct wsconn *c)
{
	size_t want = c->state == WS_OPEN && c->turn.bulk ?
	    input_mark(c->max_message) : 0;

	if (want == c->input_high)
		return;
	c->input_high = want;
	tls_tune_input(c->bev, want);
}

/* ---- the end ---- */

static void ws_unhold(struct wsconn *c);

/* Calls on_close and frees everything.  graceful: send TLS close_notify. */
static void
ws_finish(struct wsconn *c, int graceful)
{
	if (c->state == WS_CLOSED)
		return;
	ws_set_state(c, WS_CLOSED);
	if (c->counted)
		loop_counts_put(&c->set->loops[c->set->index], c->weighed_at != 0 ?
		    &c->set->loops[c->weighed_at - 1] : NULL);
	c->counted = 0;
	LIST_REMOVE(c, link);
	twheel_cancel(&c->set->wheel, &c->due);
	if (c->in_soon)
		LIST_REMOVE(c, soon_link);
	c->in_soon = 0;
	bufferevent_disable(c->bev, EV_READ | EV_WRITE);
	if (graceful) {
		SSL *ssl = bufferevent_openssl_get_ssl(c->bev);

		/* Best effort and non-blocking: the alert is tiny. */
		if (ssl != NULL)
			SSL_shutdown(ssl);
		/* Leave no error behind for the next connection to misread. */
		ERR_clear_error();
	}
	if (c->face.h->on_close != NULL)
		c->face.h->on_close(&c->face, c->peer_closed ? 101 : 0,
		    c->peer_closed ? "closed by the peer" : c->pinged ?
		    "no answer to a ping" : "the connection ended", c->face.arg);
	ws_unhold(c);
	bufferevent_free(c->bev);
	free(c->pong_owed);
	free(c->rx);
	free(c);
}

/* ---- the memory budget ---- */

/* c holds its input's and its output's bytes; past a budget the set
 * drops the largest holders from the loop (ws_evict_cb). */
static void
ws_count_now(struct wsconn *c)
{
	budget_hold_set(&c->hold, evbuffer_get_length(bufferevent_get_input(c->bev)) +
	    evbuffer_get_length(bufferevent_get_output(c->bev)) +
	    tls_write_pending(c->bev));
	if (budget_hold_over(&c->hold) != BUDGET_OK)
		event_active(c->set->evict_ev, EV_TIMEOUT, 1);
}

/* The output changed (its evbuffer callback). */
static void
ws_count(struct evbuffer *buf, const struct evbuffer_cb_info *info, void *arg)
{
	(void)buf;
	(void)info;
	ws_count_now(arg);
}

/* c stops counting (it ends, or is dropped). */
static void
ws_unhold(struct wsconn *c)
{
	if (c->out_cb != NULL)
		evbuffer_remove_cb_entry(bufferevent_get_output(c->bev), c->out_cb);
	c->out_cb = NULL;
	budget_hold_release(&c->hold);
}

static void ws_abort(struct wsconn *c, const char *why);

/* Drops c for the budget: what it holds is freed now (the peer was not
 * reading it), the rest from the loop. */
static void
ws_evict(struct wsconn *c, enum budget_refusal pool)
{
	const struct budget *b = c->set->slice.budget;
	const struct loop *l = loop_self();
	char why[160];

	snprintf(why, sizeof(why), "memory budget: the largest holder %s "
	    "(%zu bytes queued; %zu held of %zu)", pool == BUDGET_TOTAL ?
	    "of the process" : "of its principal's share", c->hold.held,
	    pool == BUDGET_TOTAL ? budget_slice_total(&c->set->slice) :
	    (size_t)c->hold.principal->held,
	    pool == BUDGET_TOTAL ? b->memory : b->memory_share);
	warn("memory budget: dropping a connection", KV_S("peer", c->peer),
	    KV_S("who", c->who), KV_U("held", c->hold.held),
	    KV_S("pool", pool == BUDGET_TOTAL ? "process" : "principal"),
	    KV_U("loop", l != NULL ? l->index : 0),
	    KV_U("loop_held", budget_hold_part(&c->hold, pool)));
	ws_abort(c, why);
	evbuffer_drain(bufferevent_get_output(c->bev),
	    evbuffer_get_length(bufferevent_get_output(c->bev)));
	evbuffer_drain(bufferevent_get_input(c->bev),
	    evbuffer_get_length(bufferevent_get_input(c->bev)));
	ws_unhold(c);
}

/* The largest holder in pool (BUDGET_PRINCIPAL: of principal), or NULL. */
static struct wsconn *
ws_largest(struct wsconn_set *set, enum budget_refusal pool,
    const struct budget_account *principal)
{
	const struct budget_holder *best = NULL;
	struct wsconn *c, *victim = NULL;

	LIST_FOREACH(c, &set->conns, link) {
		if (c->state != WS_OPEN)
			continue;
		if (budget_pick(best, &c->hold, pool, principal) != best) {
			best = &c->hold;
			victim = c;
		}
	}
	return victim;
}

/* Past the process's budget, while this loop holds more than its part of
 * it: this loop's largest holders go first until either is back within;
 * then each principal past its share loses its largest here while this
 * loop holds more than its part of the share (budget_hold_over). */
static void
ws_evict_cb(evutil_socket_t fd, short what, void *arg)
{
	struct wsconn_set *set = arg;
	struct wsconn *c, *victim;

	(void)fd;
	(void)what;
	while (budget_slice_over(&set->slice) &&
	    (victim = ws_largest(set, BUDGET_TOTAL, NULL)) != NULL)
		ws_evict(victim, BUDGET_TOTAL);
	for (;;) {
		victim = NULL;
		LIST_FOREACH(c, &set->conns, link)
			if (c->state == WS_OPEN &&
			    budget_hold_over(&c->hold) == BUDGET_PRINCIPAL)
				break;
		if (c == NULL || (victim = ws_largest(set, BUDGET_PRINCIPAL,
		    c->hold.principal)) == NULL)
			return;
		ws_evict(victim, BUDGET_PRINCIPAL);
	}
}

/* Queues c for the set's "soon" event: served from the loop, once the
 * stack has unwound (ws_soon_cb). */
static void
ws_soon(struct wsconn *c)
{
	if (c->in_soon || c->state == WS_CLOSED)
		return;
	if (LIST_EMPTY(&c->set->soon))
		event_active(c->set->soon_ev, EV_TIMEOUT, 1);
	LIST_INSERT_HEAD(&c->set->soon, c, soon_link);
	c->in_soon = 1;
}

/* c's turn is over with input left (ws_turn_end, which stopped its
 * reading): queued like ws_soon, but the set's event is armed as a timer
 * of 0 ms rather than made active.  libevent polls for I/O before it runs
 * due timers, so every connection that became readable meanwhile is
 * served before c goes on: a flooding peer gets a turn like everyone
 * else, not the loop.  (Made active by ws_soon meanwhile, the event
 * serves c too, sooner.) */
static void
ws_yield(struct wsconn *c)
{
	static const struct timeval now = { 0, 0 };

	if (c->state == WS_CLOSED || c->in_soon)
		return;
	if (LIST_EMPTY(&c->set->soon))
		event_add(c->set->soon_ev, &now);
	LIST_INSERT_HEAD(&c->set->soon, c, soon_link);
	c->in_soon = 1;
}

/* Arms c's deadline delay_ms from now (the wheel's time); starts the tick
 * if the wheel was empty. */
static void
ws_due_in(struct wsconn *c, uint32_t delay_ms)
{
	struct wsconn_set *set = c->set;

	if (!set->ticking) {
		struct timeval tv = runtime_ms_timeval(set->wheel.tick_ms);

		twheel_sync(&set->wheel, (uint64_t)runtime_monotonic_ms());
		if (event_add(set->tick, &tv) == 0)
			set->ticking = 1;
	}
	twheel_arm_in(&set->wheel, &c->due, delay_ms);
}

/* The close handshake is complete: end from the loop, with close_notify,
 * once the stack has unwound.  Stops the input path. */
static void
ws_end_soon(struct wsconn *c)
{
	if (c->finish || c->state == WS_CLOSED)
		return;
	c->finish = 1;
	ws_soon(c);
}

/* Ends the connection from the loop, soon: safe inside an owner's call. */
static void
ws_abort(struct wsconn *c, const char *why)
{
	if (c->state == WS_CLOSED)
		return;
	warn("websocket error: closing", KV_S("peer", c->peer), KV_S("reason", why));
	if (c->state == WS_OPEN)
		ws_set_state(c, WS_CLOSING);
	c->discard = 1;
	bufferevent_disable(c->bev, EV_READ | EV_WRITE);
	twheel_cancel(&c->set->wheel, &c->due);
	ws_soon(c);
}

/* ---- sending ---- */

/* Copies a frame (header, then the pieces of its payload) to p. */
static void
ws_frame_copy(uint8_t *p, const uint8_t *hdr, size_t n, const struct iovec *iov,
    int iovcnt)
{
	memcpy(p, hdr, n);
	p += n;
	for (int i = 0; i < iovcnt; i++) {
		if (iov[i].iov_len > 0)
			memcpy(p, iov[i].iov_base, iov[i].iov_len);
		p += iov[i].iov_len;
	}
}

/* A small frame (a ping, a pong, a tunnel's PING or PONG, a window
 * update, the DATA of a small request) of a connection with nothing
 * queued leaves with this loop pass's send, without
 * arming the bufferevent's write event (tls_write_now): an agent's
 * keepalive ping is answered as cheaply as the gateway's own.  Returns 1
 * if sent, 0 if it goes through the output, -1 if the connection failed
 * (aborted). */
static int
ws_put_small_now(struct wsconn *c, const uint8_t *hdr, size_t n,
    const struct iovec *iov, int iovcnt, size_t len)
{
	uint8_t frame[TLS_WRITE_NOW_MAX];
	int r;

	if (n + len > sizeof(frame))
		return 0;
	ws_frame_copy(frame, hdr, n, iov, iovcnt);
	r = tls_write_now(c->bev, frame, n + len);
	if (r < 0)
		ws_abort(c, "TLS write failed");
	return r;
}

static int
ws_put_frame(struct wsconn *c, int opcode, const struct iovec *iov, int iovcnt)
{
	struct evbuffer *out = bufferevent_get_output(c->bev);
	struct evbuffer_iovec v;
	uint8_t hdr[WS_HEADER_MAX];
	uint64_t len = 0;
	size_t n;
	int r;

	for (int i = 0; i < iovcnt; i++)
		len += iov[i].iov_len;
	/* Whatever the frame (our data, or a PONG, ERROR, OPEN_FAIL the peer's
	 * own input made us write): a peer that does not read is dropped at
	 * the cap, before it costs more memory. */
	n = ws_header_put(hdr, opcode, len, NULL);
	if (evbuffer_get_length(out) + n + len > c->max_queue) {
		char why[96];

		snprintf(why, sizeof(why), "output queue over %zu bytes (the peer "
		    "does not read)", c->max_queue);
		ws_abort(c, why);
		return -1;
	}
	/* Not a close frame: its end is seen by the write callback. */
	if (opcode != WS_OP_CLOSE &&
	    (r = ws_put_small_now(c, hdr, n, iov, iovcnt, (size_t)len)) != 0)
		return r > 0 ? 0 : -1;
	/* The whole frame in one piece of space, committed at once: a
	 * failure leaves no half frame in the stream, and the TLS layer sees
	 * one frame (one SSL_write), not a small record for its header. */
	if (evbuffer_reserve_space(out, (ev_ssize_t)(n + len), &v, 1) != 1 ||
	    v.iov_len < n + len) {
		ws_abort(c, "out of memory for output");
		return -1;
	}
	ws_frame_copy(v.iov_base, hdr, n, iov, iovcnt);
	v.iov_len = n + (size_t)len;
	if (evbuffer_commit_space(out, &v, 1) != 0) {
		ws_abort(c, "out of memory for output");
		return -1;
	}
	return 0;
}

/* The face's operations (wsface.h); f is the first member of a wsconn. */
static struct wsconn *
of_face(struct wsface *f)
{
	return (struct wsconn *)f;
}

static const struct wsconn *
of_face_const(const struct wsface *f)
{
	return (const struct wsconn *)f;
}

static int
ws_send_buffer(struct wsface *f, const uint8_t *prefix, size_t plen,
    struct evbuffer *src, size_t n)
{
	struct wsconn *c = of_face(f);
	struct evbuffer *out = bufferevent_get_output(c->bev);
	uint8_t hdr[WS_HEADER_MAX + 32];
	size_t hl;

	if (c->state != WS_OPEN || plen > 32 || n > evbuffer_get_length(src))
		return -1;
	hl = ws_header_put(hdr, WS_OP_BINARY, (uint64_t)(plen + n), NULL);
	if (evbuffer_get_length(out) + hl + plen + n > c->max_queue) {
		char why[96];

		snprintf(why, sizeof(why), "output queue over %zu bytes (the peer "
		    "does not read)", c->max_queue);
		ws_abort(c, why);
		return -1;
	}
	memcpy(hdr + hl, prefix, plen);
	/* The headers land in the output's last chain (or a small one of
	 * their own: a record of ~30 bytes); src's whole chains are moved,
	 * not copied.  Half a frame cannot stay: a failure drops the peer. */
	if (evbuffer_add(out, hdr, hl + plen) != 0 ||
	    evbuffer_remove_buffer(src, out, n) != (int)n) {
		ws_abort(c, "out of memory for output");
		return -1;
	}
	return 0;
}

static int
ws_sendv(struct wsface *f, const struct iovec *iov, int iovcnt, int binary)
{
	struct wsconn *c = of_face(f);

	if (c->state != WS_OPEN)
		return -1;
	return ws_put_frame(c, binary ? WS_OP_BINARY : WS_OP_TEXT, iov, iovcnt);
}

static size_t
ws_pending(const struct wsface *f)
{
	return evbuffer_get_length(bufferevent_get_output(of_face_const(f)->bev));
}

/* Queues a close frame and enters CLOSING. */
static void
ws_start_close(struct wsconn *c, uint16_t code, const char *reason)
{
	uint8_t payload[2 + WS_CLOSE_REASON_MAX];
	size_t rlen = reason != NULL ? strlen(reason) : 0;
	struct iovec iov;

	if (rlen > WS_CLOSE_REASON_MAX)
		rlen = WS_CLOSE_REASON_MAX;
	payload[0] = (uint8_t)(code >> 8);
	payload[1] = (uint8_t)code;
	if (rlen > 0)
		memcpy(payload + 2, reason, rlen);
	iov.iov_base = payload;
	/* Code 0 stands for "no code": the peer's close carried none. */
	iov.iov_len = code != 0 ? 2 + rlen : 0;
	if (ws_put_frame(c, WS_OP_CLOSE, &iov, 1) != 0)
		return;        /* aborting already */
	ws_set_state(c, WS_CLOSING);
	free(c->rx);
	c->rx = NULL;
	c->rx_len = 0;
	/* Read on (the peer's close frame ends it) whatever the owner paused
	 * or a large frame was awaited; the write callback must now see the
	 * output run empty. */
	c->paused = 0;
	c->input_high = 0;
	bufferevent_setwatermark(c->bev, EV_READ | EV_WRITE, 0, 0);
	bufferevent_enable(c->bev, EV_READ | EV_WRITE);
	ws_due_in(c, WS_CLOSE_TIMEOUT_MS);
}

static void
ws_close(struct wsface *f, uint16_t code, const char *reason)
{
	struct wsconn *c = of_face(f);

	if (c->state != WS_OPEN)
		return;
	ws_start_close(c, code, reason);
}

/* The peer broke the protocol: close with code, parse nothing more. */
static void
ws_fail(struct wsconn *c, uint16_t code, const char *why)
{
	if (c->state == WS_OPEN)
		info("websocket closing", KV_S("peer", c->peer), KV_S("reason", why),
		    KV_U("code", code));
	c->discard = 1;
	/* The stream cannot be parsed now, so the peer's close cannot be
	 * seen: end once our close frame is out. */
	c->peer_closed = 1;
	if (c->state == WS_OPEN)
		ws_start_close(c, code, why);
	else if (c->close_flushed)
		ws_end_soon(c);
}

/* ---- receiving ---- */

static int
close_code_valid(unsigned code)
{
	return (code >= 1000 && code <= 1003) || (code >= 1007 && code <= 1011) ||
	    (code >= 3000 && code <= 4999);
}

static void
ws_on_close_frame(struct wsconn *c, const uint8_t *p, size_t len)
{
	unsigned code = 0;

	if (len == 1) {
		ws_fail(c, 1002, "close frame with a 1-byte payload");
		return;
	}
	if (len >= 2) {
		code = (unsigned)p[0] << 8 | p[1];
		if (!close_code_valid(code)) {
			char why[64];

			snprintf(why, sizeof(why), "close code %u is not allowed", code);
			ws_fail(c, 1002, why);
			return;
		}
	}
	debug("websocket close from the peer", KV_S("peer", c->peer),
	    KV_U("code", code));
	c->peer_closed = 1;
	c->discard = 1;         /* nothing may follow a close frame */
	if (c->state == WS_OPEN)
		ws_start_close(c, (uint16_t)code, NULL);   /* echo its code */
	else if (c->close_flushed)
		ws_end_soon(c);
}

/* Appends a fragment; delivers the message on the last one. */
static void
ws_on_fragment(struct wsconn *c, const struct ws_frame_header *h,
    const uint8_t *p, size_t len)
{
	uint8_t *grown;

	if (len > 0) {
		grown = realloc(c->rx, c->rx_len + len);
		if (grown == NULL) {
			ws_fail(c, 1011, "out of memory for a fragmented message");
			return;
		}
		c->rx = grown;
		memcpy(c->rx + c->rx_len, p, len);
		c->rx_len += len;
	}
	if (!h->fin)
		return;
	if (c->face.h->on_message != NULL)
		c->face.h->on_message(&c->face, c->rx, c->rx_len,
		    c->rx_opcode == WS_OP_BINARY, c->face.arg);
	/* Fragmented messages are rare: give the memory back. */
	free(c->rx);
	c->rx = NULL;
	c->rx_len = 0;
	c->rx_opcode = 0;
}

/* A complete frame whose payload p[0..len) is unmasked. */
static void
ws_on_frame(struct wsconn *c, const struct ws_frame_header *h,
    const uint8_t *p, size_t len)
{
	struct iovec iov = { (void *)p, len };

	switch (h->opcode) {
	case WS_OP_PING:
		if (c->state != WS_OPEN)
			return;
		if (evbuffer_get_length(bufferevent_get_output(c->bev)) +
		    tls_write_pending(c->bev) > WS_PONG_ROOM) {
			/* Owed until the output drains (ws_write_cb).  The PONGs
			 * not queued still count against the cap: a peer that
			 * pings and never reads is dropped where it was. */
			c->pong_debt += 2 + len;
			if (evbuffer_get_length(bufferevent_get_output(c->bev)) +
			    c->pong_debt > c->max_queue) {
				char why[96];

				snprintf(why, sizeof(why), "output queue over %zu bytes "
				    "(the peer does not read)", c->max_queue);
				ws_abort(c, why);
				return;
			}
			if (c->pong_owed == NULL &&
			    (c->pong_owed = malloc(sizeof(*c->pong_owed))) == NULL) {
				ws_abort(c, "out of memory for a PONG");
				return;
			}
			c->pong_owed->len = (uint8_t)(len < sizeof(c->pong_owed->payload) ?
			    len : sizeof(c->pong_owed->payload));
			memcpy(c->pong_owed->payload, p, c->pong_owed->len);
			bufferevent_setwatermark(c->bev, EV_WRITE, c->low_water >
			    WS_PONG_ROOM ? c->low_water : WS_PONG_ROOM, 0);
			return;
		}
		ws_put_frame(c, WS_OP_PONG, &iov, 1);
		return;
	case WS_OP_PONG:
		return;
	case WS_OP_CLOSE:
		ws_on_close_frame(c, p, len);
		return;
	default:
		break;
	}
	if (c->state != WS_OPEN)
		return;
	if (h->opcode != WS_OP_CONT && h->fin) {
		if (c->face.h->on_message != NULL)
			c->face.h->on_message(&c->face, p, len,
			    h->opcode == WS_OP_BINARY, c->face.arg);
		return;
	}
	if (h->opcode != WS_OP_CONT)
		c->rx_opcode = h->opcode;
	ws_on_fragment(c, h, p, len);
}

/*
 * A data frame's header passed: is it in sequence, and within the limit?
 * Returns 1 to read its payload, 0 if it is skipped or the input failed.
 */
static int
ws_check_data(struct wsconn *c, const struct ws_frame_header *h)
{
	uint64_t total;
	char why[96];

	if (c->state != WS_OPEN) {
		c->skip = h->payload_len;          /* closing: data is dropped */
		return 0;
	}
	if (h->opcode == WS_OP_CONT && c->rx_opcode == 0) {
		ws_fail(c, 1002, "continuation frame outside a fragmented message");
		return 0;
	}
	if (h->opcode != WS_OP_CONT && c->rx_opcode != 0) {
		ws_fail(c, 1002, "new message inside a fragmented one");
		return 0;
	}
	if (c->rx_skip) {
		c->skip = h->payload_len;
		if (h->fin)
			c->rx_skip = c->rx_opcode = 0;
		return 0;
	}
	total = (h->opcode == WS_OP_CONT ? c->rx_len : 0) + h->payload_len;
	if (total <= c->max_message)
		return 1;
	if (c->face.h->on_too_large == NULL) {
		snprintf(why, sizeof(why), "message larger than %zu bytes", c->max_message);
		ws_fail(c, 1009, why);
		return 0;
	}
	/* Skip this message, all of its fragments, and let the owner speak. */
	c->skip = h->payload_len;
	if (!h->fin) {
		c->rx_skip = 1;
		if (h->opcode != WS_OP_CONT)
			c->rx_opcode = h->opcode;
	} else
		c->rx_opcode = 0;
	free(c->rx);
	c->rx = NULL;
	c->rx_len = 0;
	c->face.h->on_too_large(&c->face, c->max_message, c->face.arg);
	return 0;
}

enum ws_step {
	STEP_NEXT,        /* one frame (or part of a skip) done: go on */
	STEP_WAIT,        /* more bytes needed, or nothing may be read now */
};

/* Handles the frame at the start of the input, if it is all there. */
static enum ws_step
ws_next_frame(struct wsconn *c, struct evbuffer *in)
{
	struct ws_frame_header h;
	size_t len = evbuffer_get_length(in), avail;
	uint64_t need;
	uint8_t *p;
	char err[128];
	int hl;

	if (c->skip > 0) {
		size_t n = c->skip < len ? (size_t)c->skip : len;

		evbuffer_drain(in, n);
		c->skip -= n;
		return c->skip > 0 || n == 0 ? STEP_WAIT : STEP_NEXT;
	}
	avail = len < WS_HEADER_MAX ? len : WS_HEADER_MAX;
	if (avail == 0)
		return STEP_WAIT;
	p = evbuffer_pullup(in, (ev_ssize_t)avail);
	if (p == NULL) {
		ws_fail(c, 1011, "out of memory for input");
		return STEP_WAIT;
	}
	hl = ws_parse_header(p, avail, 1, &h, err, sizeof(err));
	if (hl < 0) {
		ws_fail(c, 1002, err);
		return STEP_WAIT;
	}
	if (hl == 0)
		return STEP_WAIT;
	if (!(h.opcode & WS_OP_CONTROL) && !ws_check_data(c, &h)) {
		if (c->discard)
			return STEP_WAIT;
		evbuffer_drain(in, (size_t)hl);    /* skipping its payload */
		return STEP_NEXT;
	}
	need = (uint64_t)hl + h.payload_len;
	if (len < need) {
		c->turn.need = (size_t)need;  /* within max_message: checked above */
		return STEP_WAIT;   /* ws_pull reads at least that far */
	}
	c->turn.need = 0;
	p = evbuffer_pullup(in, (ev_ssize_t)need);
	if (p == NULL) {
		ws_fail(c, 1011, "out of memory for input");
		return STEP_WAIT;
	}
	ws_mask(p + hl, (size_t)h.payload_len, h.mask, 0);
	if (!(h.opcode & WS_OP_CONTROL))
		c->turn.data_in += (size_t)h.payload_len;
	ws_on_frame(c, &h, p + hl, (size_t)h.payload_len);
	/* The payload was the owner's during on_message only: drop it now. */
	evbuffer_drain(in, (size_t)need);
	return STEP_NEXT;
}

/* Moves the few bytes left in the input (at most WS_COMPACT_MAX) to a
 * chain of their own.  Put back at the start: a plain socket's bufferevent
 * (--plain-listen) freezes its input's end against anyone but its own
 * reads, and evbuffer_add there failed, losing the bytes (the rest of a
 * frame split across reads: the stream was then misparsed). */
static void
ws_compact(struct wsconn *c, struct evbuffer *in)
{
	uint8_t rest[WS_COMPACT_MAX];
	size_t n = evbuffer_get_length(in);

	if (n == 0 || n > sizeof(rest) ||
	    evbuffer_remove(in, rest, n) != (int)n)
		return;
	if (evbuffer_prepend(in, rest, n) != 0)
		ws_fail(c, 1011, "out of memory for input");
}

/* Whether c may parse and read more now: open and not paused, or
 * closing (the peer's close frame ends it); not ending, not discarding. */
static int
ws_may_go_on(const struct wsconn *c)
{
	return (c->state == WS_OPEN ? !c->paused : c->state == WS_CLOSING) &&
	    !c->finish && !c->discard;
}

/* Parses and delivers what the input holds, as far as allowed: at most
 * WS_FRAMES_PER_TURN frames, then the rest waits for c's next turn. */
static void
ws_process(struct wsconn *c)
{
	struct evbuffer *in = bufferevent_get_input(c->bev);
	unsigned frames = 0;

	while (!c->finish && !c->discard && !(c->state == WS_OPEN && c->paused) &&
	    frames < WS_FRAMES_PER_TURN && ws_next_frame(c, in) == STEP_NEXT)
		frames++;
	if (c->discard)
		evbuffer_drain(in, evbuffer_get_length(in));
	ws_compact(c, in);
	/* The input is counted here, not by a callback at each of its
	 * changes (a read, then its drain: ~340 instructions of a /k8s
	 * request): every read is followed by this (the read callback, a
	 * turn, a resume), and the set's drops run from the loop
	 * (ws_evict_cb), after it, so they see what stays. */
	if (c->out_cb != NULL)
		ws_count_now(c);
	if (ws_turn_end(&c->turn, c->bev, frames == WS_FRAMES_PER_TURN &&
	    evbuffer_get_length(in) > 0, ws_may_go_on(c)))
		ws_yield(c);
}

/* Takes the TLS records ready now, one turn's worth (ws_turn_pull). */
static void
ws_pull(struct wsconn *c)
{
	if (!c->paused)
		ws_turn_pull(&c->turn, c->bev, c->max_message);
}

/* ---- libevent callbacks ---- */

static void
ws_read_cb(struct bufferevent *bev, void *arg)
{
	struct wsconn *c = arg;

	/* It answered (or said something): the silence is over.  While no
	 * ping is out the node stays where it is (when it comes due it moves
	 * to heard_ms + interval, ws_due): a read costs one store.  After a
	 * ping the node waits for the timeout: back to the interval. */
	c->heard_ms = twheel_now(&c->set->wheel);
	if (c->pinged) {
		c->pinged = 0;
		twheel_arm(&c->set->wheel, &c->due, c->heard_ms + c->ping_interval_ms);
	}
	ws_turn_read(&c->turn, bev);
	ws_input_mark(c);
	/* Take the records ready now, not one per loop iteration. */
	if (!c->turn.yielded)
		ws_pull(c);
	ws_process(c);
}

static void
ws_write_cb(struct bufferevent *bev, void *arg)
{
	struct wsconn *c = arg;

	if (c->state == WS_OPEN) {
		if (c->pong_owed != NULL && evbuffer_get_length(bufferevent_get_output(bev)) +
		    tls_write_pending(bev) <= WS_PONG_ROOM) {
			struct ws_pong pong = *c->pong_owed;
			struct iovec iov = { pong.payload, pong.len };

			free(c->pong_owed);
			c->pong_owed = NULL;
			c->pong_debt = 0;
			bufferevent_setwatermark(bev, EV_WRITE, c->low_water, 0);
			if (ws_put_frame(c, WS_OP_PONG, &iov, 1) != 0)
				return;
		}
		if (c->face.h->on_drain != NULL)
			c->face.h->on_drain(&c->face, c->face.arg);
		return;
	}
	if (c->state != WS_CLOSING || evbuffer_get_length(bufferevent_get_output(bev)) > 0 ||
	    tls_write_pending(bev) > 0)
		return;
	c->close_flushed = 1;
	if (c->peer_closed)
		ws_finish(c, 1);
}

/* 1 when c holds input its read callback has not taken yet: messages
 * waiting for their turn or for the owner to resume, bytes in the input
 * buffer, in OpenSSL (decrypted or read ahead by tlsread's BIO), or in the
 * socket (one poll(), only when the rest is empty). */
static int
ws_has_input(const struct wsconn *c)
{
	struct pollfd p = { .fd = bufferevent_getfd(c->bev), .events = POLLIN };

	if ((c->in_soon && c->state == WS_OPEN) ||
	    evbuffer_get_length(bufferevent_get_input(c->bev)) > 0 ||
	    tls_read_held(c->bev))
		return 1;
	return p.fd >= 0 && poll(&p, 1, 0) > 0 && (p.revents & POLLIN);
}

/* c's node came due (the set's tick): the close deadline, or keepalive. */
static void
ws_due(struct twheel_node *n, void *arg)
{
	struct wsconn *c = (struct wsconn *)((char *)n - offsetof(struct wsconn, due));
	uint64_t now = twheel_now(&c->set->wheel);

	(void)arg;
	if (c->state != WS_OPEN) {
		ws_finish(c, c->finish);
		return;
	}
	if (c->paused) {
		/* Not reading (the owner's backpressure): no pong could be
		 * heard, so the clock waits; wsface_pause_reading restarts it. */
		ws_due_in(c, c->pinged ? c->ping_timeout_ms : c->ping_interval_ms);
		return;
	}
	if (c->pinged) {
		/* An answer that came in time may still be unread: a loop back
		 * from a stall runs this tick in the pass whose read callbacks
		 * are deferred to the next.  One more tick, then judged. */
		if (!c->ping_grace && ws_has_input(c)) {
			c->ping_grace = 1;
			ws_due_in(c, 1);
			return;
		}
		info("websocket: no answer to a ping: dropping", KV_S("peer", c->peer),
		    KV_U("ping_timeout_ms", c->ping_timeout_ms));
		ws_finish(c, 0);
		return;
	}
	if (c->heard_ms + c->ping_interval_ms > now) {
		/* Heard since the node was armed: not silent long enough. */
		twheel_arm(&c->set->wheel, &c->due, c->heard_ms + c->ping_interval_ms);
		return;
	}
	c->pinged = 1;
	c->ping_grace = 0;
	if (ws_put_frame(c, WS_OP_PING, NULL, 0) != 0)
		return;
	ws_due_in(c, c->ping_timeout_ms);
}

static void
ws_event_cb(struct bufferevent *bev, short what, void *arg)
{
	struct wsconn *c = arg;

	if (what & (BEV_EVENT_EOF | BEV_EVENT_ERROR)) {
		unsigned long e = bufferevent_get_openssl_error(bev);

		if (c->state == WS_OPEN)
			debug("websocket connection ended", KV_S("peer", c->peer),
			    KV_S("how", (what & BEV_EVENT_EOF) ? "closed by the peer" :
			    "failed"), KV_S("err", e != 0 ? ERR_reason_error_string(e) : ""));
		ws_finish(c, 0);
	}
}

/* One connection taken from the "soon" list. */
static void
ws_serve_soon(struct wsconn *c)
{
	if (c->state != WS_OPEN && (c->finish || c->discard)) {
		/* The close handshake completed (graceful), or an abort. */
		ws_finish(c, c->finish);
		return;
	}
	/* Open, or closing and waiting for the peer's close: its turn. */
	ws_pull(c);
	ws_process(c);
}

/* The set's "soon" event: serves the connections queued before it ran;
 * those queued meanwhile wait for its next run (it is made active again). */
static void
ws_soon_cb(evutil_socket_t fd, short what, void *arg)
{
	struct wsconn_set *set = arg;
	struct wsconn *work = LIST_FIRST(&set->soon), *c;

	(void)fd;
	(void)what;
	/* The list moves to `work`: ws_finish can still take any of them
	 * out (LIST_REMOVE needs no head). */
	LIST_INIT(&set->soon);
	if (work != NULL)
		work->soon_link.le_prev = &work;
	while ((c = work) != NULL) {
		LIST_REMOVE(c, soon_link);
		c->in_soon = 0;
		ws_serve_soon(c);
	}
}

/* The set's tick: the wheel advances to now, firing what came due. */
static void
ws_tick_cb(evutil_socket_t fd, short what, void *arg)
{
	struct wsconn_set *set = arg;

	(void)fd;
	(void)what;
	twheel_advance(&set->wheel, (uint64_t)runtime_monotonic_ms(), ws_due, NULL);
	if (set->wheel.count == 0 && set->ticking) {
		event_del(set->tick);
		set->ticking = 0;
	}
}

/* ---- setup and settings ---- */

struct wsconn *
wsconn_new(struct wsconn_set *all, struct bufferevent *bev, const char *peer,
    const struct wsface_handlers *h, void *arg)
{
	struct wsconn *c = calloc(1, sizeof(*c));

	if (c == NULL)
		return NULL;
	c->set = all;
	c->bev = bev;
	c->face.ops = &ws_ops;
	c->face.h = h;
	c->face.arg = arg;
	c->state = WS_OPEN;
	c->max_message = WS_DEFAULT_MAX;
	c->max_queue = WS_DEFAULT_QUEUE;
	c->ping_interval_ms = WS_PING_INTERVAL_MS;
	c->ping_timeout_ms = WS_PING_TIMEOUT_MS;
	snprintf(c->peer, sizeof(c->peer), "%s", peer);
	bufferevent_setcb(bev, ws_read_cb, ws_write_cb, ws_event_cb, c);
	bufferevent_setwatermark(bev, EV_READ | EV_WRITE, 0, 0);
	/* libevent moves at most 16 KiB per loop iteration by default; a
	 * tunnel carries many streams' bulk data.  Reads start small, without
	 * a read high-water mark, and grow with the traffic (ws_turn_read,
	 * ws_input_mark). */
	ws_turn_start(&c->turn, bev);
	bufferevent_set_max_single_write(bev, 1 << 20);
	tls_read_ahead(bev);
	tls_write_batch(bev);
	/* No timeouts on the bufferevent (the handshake's are cleared): the
	 * wheel keeps the connection's time. */
	bufferevent_set_timeouts(bev, NULL, NULL);
	bufferevent_enable(bev, EV_READ | EV_WRITE);
	budget_hold_init(&c->hold, &all->slice);
	if (all->slice.budget != NULL &&
	    (c->out_cb = evbuffer_add_cb(bufferevent_get_output(bev), ws_count, c)) == NULL) {
		free(c);
		return NULL;
	}
	LIST_INSERT_HEAD(&all->conns, c, link);
	ws_due_in(c, c->ping_interval_ms);
	c->heard_ms = twheel_now(&all->wheel);
	/* Frames that came with the upgrade request: delivered from the loop,
	 * once the owner holds the connection (those still in OpenSSL too:
	 * no socket event announces them). */
	if (evbuffer_get_length(bufferevent_get_input(bev)) > 0 || tls_read_held(bev))
		ws_soon(c);
	return c;
}

uint32_t
wsconn_tick_for(uint32_t interval_ms, uint32_t timeout_ms)
{
	uint32_t shorter = interval_ms < timeout_ms ? interval_ms : timeout_ms;
	uint32_t tick = shorter / 8;

	if (tick < WS_TICK_MIN_MS)
		return WS_TICK_MIN_MS;
	return tick > WS_TICK_MAX_MS ? WS_TICK_MAX_MS : tick;
}

int
wsconn_keep_counts(struct wsconn *c, struct loop *tunnel)
{
	assert(!c->counted);
	if (c->set->loops == NULL || c->counted)
		return 0;
	assert(tunnel == NULL || tunnel->index < UINT8_MAX);
	c->counted = 1;
	c->weighed_at = tunnel != NULL ? (uint8_t)(tunnel->index + 1) : 0;
	return 1;
}

void
wsconn_set_loops(struct wsconn_set *all, struct loop *loops, unsigned index)
{
	all->loops = loops;
	all->index = index;
}

struct wsconn_set *
wsconn_set_new(struct event_base *base, uint32_t tick_ms)
{
	struct wsconn_set *set = calloc(1, sizeof(*set));

	if (set == NULL)
		return NULL;
	LIST_INIT(&set->conns);
	LIST_INIT(&set->soon);
	set->base = base;
	budget_slice_init(&set->slice, NULL);
	set->tick = event_new(base, -1, EV_PERSIST, ws_tick_cb, set);
	set->soon_ev = event_new(base, -1, 0, ws_soon_cb, set);
	set->evict_ev = event_new(base, -1, 0, ws_evict_cb, set);
	if (set->tick == NULL || set->soon_ev == NULL || set->evict_ev == NULL ||
	    twheel_init(&set->wheel, tick_ms, WS_WHEEL_SLOTS,
	    (uint64_t)runtime_monotonic_ms()) != 0) {
		if (set->tick != NULL)
			event_free(set->tick);
		if (set->soon_ev != NULL)
			event_free(set->soon_ev);
		if (set->evict_ev != NULL)
			event_free(set->evict_ev);
		free(set);
		return NULL;
	}
	return set;
}

void
wsconn_destroy_all(struct wsconn_set *all)
{
	while (!LIST_EMPTY(&all->conns))
		ws_finish(LIST_FIRST(&all->conns), 0);
}

void
wsconn_set_free(struct wsconn_set *all)
{
	if (all == NULL)
		return;
	wsconn_destroy_all(all);
	budget_slice_fini(&all->slice);
	event_free(all->tick);
	event_free(all->soon_ev);
	event_free(all->evict_ev);
	twheel_free(&all->wheel);
	free(all);
}

static void
ws_pause_reading(struct wsface *f, int paused)
{
	struct wsconn *c = of_face(f);

	paused = paused != 0;
	if (c->state != WS_OPEN || c->paused == paused)
		return;
	c->paused = paused;
	if (paused) {
		bufferevent_disable(c->bev, EV_READ);
		return;
	}
	bufferevent_enable(c->bev, EV_READ);
	/* The keepalive's clock waited while reading was off: it starts again
	 * from now.  heard_ms stays the last read's (nothing was heard). */
	ws_due_in(c, c->pinged ? c->ping_timeout_ms : c->ping_interval_ms);
	/* Messages already buffered, or records OpenSSL read ahead, get no
	 * read event of their own: from the loop, not inside this call. */
	ws_soon(c);
}

static void
ws_set_low_water(struct wsface *f, size_t bytes)
{
	struct wsconn *c = of_face(f);

	c->low_water = bytes;
	if (c->state == WS_OPEN)
		bufferevent_setwatermark(c->bev, EV_WRITE, bytes, 0);
}

void
wsconn_set_keepalive(struct wsconn *c, uint32_t interval_ms, uint32_t timeout_ms)
{
	c->ping_interval_ms = interval_ms;
	c->ping_timeout_ms = timeout_ms;
	if (c->state != WS_OPEN)
		return;
	ws_due_in(c, c->pinged ? timeout_ms : interval_ms);
}

static void
ws_set_max_message(struct wsface *f, size_t bytes)
{
	struct wsconn *c = of_face(f);

	if (c->max_message == bytes)
		return;
	c->max_message = bytes;
	if (c->state == WS_OPEN && c->input_high != 0) {
		c->input_high = input_mark(bytes);
		tls_tune_input(c->bev, c->input_high);
	}
}

static void
ws_set_max_queue(struct wsface *f, size_t bytes)
{
	of_face(f)->max_queue = bytes;
}

static void
ws_charge_to(struct wsface *f, struct budget_account *who, const char *name)
{
	struct wsconn *c = of_face(f);

	if (c->state == WS_CLOSED)
		return;
	snprintf(c->who, sizeof(c->who), "%s", name != NULL ? name : "");
	budget_hold_charge(&c->hold, who);
	if (budget_hold_over(&c->hold) != BUDGET_OK)
		event_active(c->set->evict_ev, EV_TIMEOUT, 1);
}

void
wsconn_set_budget(struct wsconn_set *all, struct budget *b)
{
	budget_slice_fini(&all->slice);
	budget_slice_init(&all->slice, b);
}

static const char *
ws_peer(const struct wsface *f)
{
	return of_face_const(f)->peer;
}

static int
ws_input_pending(const struct wsface *f)
{
	return ws_has_input(of_face_const(f));
}

/* wsface_heard_ms: the last read callback's time (ws_read_cb), a load. */
static int64_t
ws_heard_ms(const struct wsface *f)
{
	return (int64_t)of_face_const(f)->heard_ms;
}

/* What a face its owner let go of hears: nothing. */
static const struct wsface_handlers ws_unheard = { 0 };

static void
ws_free(struct wsface *f)
{
	struct wsconn *c = of_face(f);

	assert(c->state != WS_CLOSED);   /* wsface.h: never after on_close */
	c->face.h = &ws_unheard;
	c->face.arg = NULL;
	if (c->state == WS_OPEN)
		ws_start_close(c, 1001, NULL);
}

static const struct wsface_ops ws_ops = {
	.sendv = ws_sendv,
	.send_buffer = ws_send_buffer,
	.pending = ws_pending,
	.pause_reading = ws_pause_reading,
	.set_low_water = ws_set_low_water,
	.set_max_message = ws_set_max_message,
	.set_max_queue = ws_set_max_queue,
	.charge_to = ws_charge_to,
	.close = ws_close,
	.free = ws_free,
	.peer = ws_peer,
	.input_pending = ws_input_pending,
	.heard_ms = ws_heard_ms,
};

struct wsface *
wsconn_face(struct wsconn *c)
{
	return &c->face;
}
