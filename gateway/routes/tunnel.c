/*
 * tunnel.c: agent tunnels (see tunnel.h): a struct tunnel is one accepted
 * WebSocket and the session it carries.
 *
 * Lifecycle: made by tunnel_upgrade, freed in its WebSocket's on_close,
 * which runs from the loop (wsface.h), never inside a call made by the session;
 * the session is freed there first (session_closed).  After tunnel_close
 * or a refused send, `closing` holds: nothing more is sent.
 */
#include "tunnel.h"

#include <assert.h>
#include <limits.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/queue.h>

#include <event2/event.h>

#include "frame.h"
#include "gateway.h"
#include "http.h"
#include "log.h"
#include "loop.h"
#include "metrics.h"
#include "mux.h"
#include "route.h"
#include "runtime.h"
#include "server.h"
#include "session.h"
#include "wsface.h"
#include "wsmux.h"

#define TUNNEL_PATH "/v1/connect"

struct tunnel {
	struct gateway *gw;
	struct wsface *ws;                /* NULL once closed */
	struct session *session;          /* NULL once closed */
	int closing;
	size_t max_message, max_queue;    /* the limits ws has now */
};

/* ---- what the session may do (session.h: struct session_transport) ---- */

static const char *
tunnel_peer(const void *arg)
{
	const struct tunnel *c = arg;

	return c->ws != NULL ? wsface_peer(c->ws) : "(closed)";
}

static int
tunnel_send(void *arg, const struct frame *f)
{
	struct tunnel *c = arg;
	uint8_t *buf;
	size_t len;
	int r;

	if (c->ws == NULL || c->closing)
		return -1;
	if (frame_encode(f, 0, &buf, &len) != 0) {
		warn("tunnel: cannot encode a frame", KV_S("peer", tunnel_peer(c)),
		    KV_S("frame", frame_type_name(f->type)));
		return -1;
	}
	/* Over the output cap (session_max_queue) the face drops the peer. */
	r = wsface_send(c->ws, buf, len, 1);
	free(buf);
	if (r != 0)
		c->closing = 1;
	return r;
}

static void
tunnel_close(void *arg)
{
	struct tunnel *c = arg;

	if (c->ws == NULL || c->closing)
		return;
	c->closing = 1;
	/* Queued after every frame already sent: they go out first. */
	wsface_close(c->ws, 1000, NULL);
}

/* The session's multiplexer writes its frames to the WebSocket directly
 * (wsmux.h); the face outlives the multiplexer, which session_closed
 * frees inside tunnel_on_close. */
static void *
tunnel_bulk_arg(void *arg)
{
	struct tunnel *c = arg;

	return c->ws;
}

static int
tunnel_input_pending(const void *arg)
{
	const struct tunnel *c = arg;

	return c->ws != NULL && wsface_input_pending(c->ws);
}

static const struct session_transport tunnel_transport = {
	.send = tunnel_send,
	.close = tunnel_close,
	.peer = tunnel_peer,
	.bulk = &wsmux_io,
	.bulk_arg = tunnel_bulk_arg,
	.input_pending = tunnel_input_pending,
};

/* The limits follow the session's (they grow once the agent is
 * authenticated): set when they change. */
static void
tunnel_fit_limits(struct tunnel *c)
{
	size_t max_message = session_max_message(c->session);
	size_t max_queue = session_max_queue(c->session);

	if (max_message != c->max_message) {
		c->max_message = max_message;
		wsface_set_max_message(c->ws, max_message);
	}
	if (max_queue != c->max_queue) {
		c->max_queue = max_queue;
		wsface_set_max_queue(c->ws, max_queue);
	}
}

/* ---- the WebSocket's events ---- */

static void
tunnel_on_message(struct wsface *ws, const uint8_t *data, size_t len, int binary,
    void *arg)
{
	struct tunnel *c = arg;

	if (c->session == NULL || c->closing)
		return;
	if (!binary) {
		session_protocol_error(c->session, "protocol",
		    "text messages are not part of tether.v1; frames are binary");
		return;
	}
	session_on_message(c->session, data, len);
	if (c->session != NULL)
		tunnel_fit_limits(c);
}

static void
tunnel_on_too_large(struct wsface *ws, size_t limit, void *arg)
{
	struct tunnel *c = arg;
	char reason[96];

	if (c->session == NULL || c->closing)
		return;
	snprintf(reason, sizeof(reason), "frame larger than %zu bytes", limit);
	session_protocol_error(c->session, "frame_too_large", reason);
}

static void
tunnel_on_drain(struct wsface *ws, void *arg)
{
	struct tunnel *c = arg;

	if (c->session != NULL)
		session_on_drain(c->session);
}

static void
tunnel_on_close(struct wsface *ws, int status, const char *reason, void *arg)
{
	struct tunnel *c = arg;
	struct session *s = c->session;

	/* c->ws stays set during session_closed: ending the session's streams
	 * may still try to send, which the closed face refuses. */
	c->session = NULL;
	c->closing = 1;
	if (s != NULL)
		session_closed(s);
	c->ws = NULL;
	free(c);
}

static const struct wsface_handlers tunnel_handlers = {
	.on_message = tunnel_on_message,
	.on_drain = tunnel_on_drain,
	.on_close = tunnel_on_close,
	.on_too_large = tunnel_on_too_large,
};

/* ---- the route ---- */

static int
tunnel_matches(const char *path)
{
	return strcmp(path, TUNNEL_PATH) == 0;
}

static void
tunnel_request(struct gateway *gw, const struct route_request *req,
    struct route_response *r)
{
	memset(r, 0, sizeof(*r));
	route_respond_error(r, 400, "%s takes a WebSocket upgrade with "
	    "subprotocol %s", TUNNEL_PATH, TETHER_SUBPROTOCOL);
}

static void tunnel_take(struct gateway *gw, struct upgrade *u);

/* ---- waiting for a handshake slot (--handshake-wait, docs/0035) ----
 *
 * An upgrade that finds every slot taken waits, first come first served,
 * for one to free up, instead of being answered 503 at once: a storm's
 * burst then costs each agent one dial, not two.  Each waits at most
 * --handshake-wait, then gets 503 with a Retry-After: by then the gateway
 * has measured how fast it takes them (retry_after.h), which at the
 * burst's first instant it cannot know, and the moment it names is its
 * queue over that rate.  At most --max-tls-queue wait (the same budget as
 * connections waiting for TLS); past it 503 at once.  A waiting upgrade
 * holds its connection (TLS done, input parked) and no CPU: established
 * tunnels are not starved by it. */

struct tunnel_waiter {
	TAILQ_ENTRY(tunnel_waiter) link;
	struct tunnel_wait *wl;
	struct upgrade *u;
	int64_t since_ms;                 /* monotonic, at least 1 */
	int64_t deadline_ms;
};

/* One loop's line (docs/0040 step 7: waiters per loop; an upgrade waits
 * on the loop that holds its connection).  The loop publishes when its
 * first waiter began to wait (loop->wait_oldest_ms), and a slot freed on
 * any loop pokes the loop whose first waiter is the oldest, so the
 * process serves first come first served across its loops. */
struct tunnel_wait {
	struct gateway *gw;
	struct loop *loop;                /* NULL: off any loop (unit tests) */
	TAILQ_HEAD(waiters, tunnel_waiter) q;
	unsigned n;                       /* waiters in q */
	struct event *serve;              /* a slot freed: run from the loop */
	struct event *expire;             /* the first waiter's deadline */
};

/* The calling loop's line: its loop's, or the gateway's off any loop. */
static struct tunnel_wait **
wait_here(struct gateway *gw)
{
	struct loop *l = loop_self();

	return l != NULL && l->gw == gw ? &l->tunnel_wait : &gw->tunnel_wait;
}

/* Tells the other loops when this line's first waiter began (0: none). */
static void
wait_publish(struct tunnel_wait *wl)
{
	struct tunnel_waiter *w = TAILQ_FIRST(&wl->q);

	if (wl->loop != NULL)
		atomic_store(&wl->loop->wait_oldest_ms, w != NULL ? w->since_ms : 0);
}

/* When an agent turned away for now (draining, handshakes at their cap,
 * its wait run out) should come back: after the connections the TLS queue
 * holds and the upgrades in line that can still take a slot before their
 * waits run out.  The others are turned away too, later, each told a slot
 * after this one's: a wave of waits that ran out together, each counting
 * the rest of the wave ahead, was told about twice what it needed
 * (docs/0035).  This loop's line says when its last waiter runs out;
 * another loop's may hold waiters for up to --handshake-wait. */
static uint32_t
tunnel_retry_after(struct gateway *gw)
{
	struct tunnel_wait *wl = *wait_here(gw);
	struct tunnel_waiter *last = wl != NULL ? TAILQ_LAST(&wl->q, waiters) : NULL;
	unsigned waiting = atomic_load(&gw->handshakes_waiting);
	int64_t left = 0;

	if (waiting > (wl != NULL ? wl->n : 0))
		left = gw->limits.handshake_wait_ms;
	else if (last != NULL)
		left = last->deadline_ms - runtime_monotonic_ms();
	/* The TLS queue is loop 0's: its length as last published, from any
	 * loop (server_tls_waiting). */
	return gateway_retry_after_ms(gw, server_tls_waiting(gw), waiting, left);
}

/* w's wait is over: how it ended is counted (metrics_handshake_wait). */
static void
waiter_remove(struct tunnel_waiter *w, const char *result)
{
	struct tunnel_wait *wl = w->wl;

	metrics_handshake_wait(result);
	TAILQ_REMOVE(&wl->q, w, link);
	wl->n--;
	atomic_fetch_sub(&wl->gw->handshakes_waiting, 1);
	wait_publish(wl);
	free(w);
}

/* The client went away while its upgrade waited. */
static void
waiter_abandoned(void *arg)
{
	waiter_remove(arg, "abandoned");
}

static void
waiter_refuse(struct tunnel_waiter *w, const char *result, const char *reason)
{
	struct gateway *gw = w->wl->gw;
	struct upgrade *u = w->u;

	upgrade_on_abandon(u, NULL, NULL);
	waiter_remove(w, result);
	upgrade_refuse_later(u, 503, reason, tunnel_retry_after(gw));
}

static void
wait_arm(struct tunnel_wait *wl)
{
	struct tunnel_waiter *w = TAILQ_FIRST(&wl->q);
	int64_t left;
	struct timeval tv;

	if (w == NULL) {
		evtimer_del(wl->expire);
		return;
	}
	left = w->deadline_ms - runtime_monotonic_ms();
	tv = runtime_ms_timeval(left > 0 ? (uint32_t)left : 0);
	evtimer_add(wl->expire, &tv);
}

static void wait_slot_freed(struct gateway *gw);

/* Slots free: the first waiters take them.  A slot still free with none
 * waiting here goes on to the loop whose waiter is now the oldest. */
static void
wait_serve(evutil_socket_t fd, short what, void *arg)
{
	struct tunnel_wait *wl = arg;
	struct gateway *gw = wl->gw;
	struct tunnel_waiter *w;
	struct upgrade *u;

	while ((w = TAILQ_FIRST(&wl->q)) != NULL &&
	    gateway_handshake_take(gw) == 0) {
		u = w->u;
		upgrade_on_abandon(u, NULL, NULL);
		waiter_remove(w, "served");
		tunnel_take(gw, u);
	}
	wait_arm(wl);
	if (TAILQ_EMPTY(&wl->q) && gw->handshakes < gw->limits.max_handshakes)
		wait_slot_freed(gw);
}

/* The first waiters' time is up: come back later. */
static void
wait_expire(evutil_socket_t fd, short what, void *arg)
{
	struct tunnel_wait *wl = arg;
	struct tunnel_waiter *w;
	int64_t now = runtime_monotonic_ms();

	while ((w = TAILQ_FIRST(&wl->q)) != NULL && w->deadline_ms <= now)
		waiter_refuse(w, "expired", "no tunnel handshake slot freed within "
		    "--handshake-wait: retry later");
	wait_arm(wl);
}

/* A poke from the loop that freed a slot: this loop's line is served. */
static void
wait_poke(void *arg)
{
	struct tunnel_wait *wl = *wait_here(arg);

	if (wl != NULL)
		event_active(wl->serve, EV_TIMEOUT, 0);
}

/* The loop whose first waiter began first, or NULL when none waits on a
 * loop.  Reads one atomic per loop. */
static struct loop *
wait_oldest_loop(struct gateway *gw)
{
	struct loop *best = NULL;
	int64_t best_ms = 0, t;

	for (unsigned i = 0; gw->loops != NULL && i < gw->nloops; i++) {
		t = atomic_load(&gw->loops[i].wait_oldest_ms);
		if (t != 0 && (best == NULL || t < best_ms)) {
			best = &gw->loops[i];
			best_ms = t;
		}
	}
	return best;
}

/* gateway_handshake_free's hook, on the thread that freed the slot. */
static void
wait_slot_freed(struct gateway *gw)
{
	struct loop *to;

	if (atomic_load(&gw->handshakes_waiting) == 0)
		return;
	if ((to = wait_oldest_loop(gw)) == NULL) {
		/* Off any loop (unit tests): the gateway's own line. */
		if (gw->tunnel_wait != NULL && loop_self() == NULL)
			event_active(gw->tunnel_wait->serve, EV_TIMEOUT, 0);
		return;
	}
	if (to == loop_self())
		wait_poke(gw);
	else
		(void)loop_call(to, wait_poke, gw, NULL);
}

static struct tunnel_wait *
wait_list(struct gateway *gw)
{
	struct tunnel_wait **slot = wait_here(gw);
	struct tunnel_wait *wl = *slot;
	struct loop *l = loop_self();
	struct event_base *base = l != NULL && l->gw == gw ? l->base : gw->base;

	if (wl != NULL)
		return wl;
	if ((wl = calloc(1, sizeof(*wl))) == NULL)
		return NULL;
	wl->gw = gw;
	wl->loop = l != NULL && l->gw == gw ? l : NULL;
	TAILQ_INIT(&wl->q);
	wl->serve = evtimer_new(base, wait_serve, wl);
	wl->expire = evtimer_new(base, wait_expire, wl);
	if (wl->serve == NULL || wl->expire == NULL) {
		if (wl->serve != NULL)
			event_free(wl->serve);
		if (wl->expire != NULL)
			event_free(wl->expire);
		free(wl);
		return NULL;
	}
	*slot = wl;
	atomic_store(&gw->handshake_freed, wait_slot_freed);
	return wl;
}

/* Puts u in this loop's line for a slot (at most --max-tls-queue wait in
 * the process); 0 if it waits (u is the list's until it is taken, refused
 * or abandoned), -1 if not. */
static int
wait_for_slot(struct gateway *gw, struct upgrade *u)
{
	struct tunnel_wait *wl;
	struct tunnel_waiter *w;
	int64_t now = runtime_monotonic_ms();

	if (gw->limits.handshake_wait_ms == 0 ||
	    gw->handshakes_waiting >= gw->limits.max_tls_queue ||
	    (wl = wait_list(gw)) == NULL || (w = calloc(1, sizeof(*w))) == NULL)
		return -1;
	w->wl = wl;
	w->u = u;
	w->since_ms = now > 0 ? now : 1;
	w->deadline_ms = now + gw->limits.handshake_wait_ms;
	TAILQ_INSERT_TAIL(&wl->q, w, link);
	wl->n++;
	atomic_fetch_add(&gw->handshakes_waiting, 1);
	upgrade_on_abandon(u, waiter_abandoned, w);
	if (w == TAILQ_FIRST(&wl->q)) {
		wait_publish(wl);
		wait_arm(wl);
	}
	/* A slot freed on another loop between the caller's take and the
	 * count above found no waiter to poke: look again. */
	if (gw->handshakes < gw->limits.max_handshakes)
		event_active(wl->serve, EV_TIMEOUT, 0);
	return 0;
}

void
tunnel_wait_stop(struct gateway *gw)
{
	struct tunnel_wait **slot = wait_here(gw);
	struct tunnel_wait *wl = *slot;
	struct tunnel_waiter *w;

	if (wl == NULL)
		return;
	while ((w = TAILQ_FIRST(&wl->q)) != NULL)
		waiter_refuse(w, "stopped", "the gateway is shutting down");
	event_free(wl->serve);
	event_free(wl->expire);
	free(wl);
	*slot = NULL;
}

static void
wait_stop_here(void *arg)
{
	tunnel_wait_stop(arg);
}

void
tunnel_wait_stop_everywhere(struct gateway *gw)
{
	for (unsigned i = 1; gw->loops != NULL && i < gw->nloops; i++)
		(void)loop_call(&gw->loops[i], wait_stop_here, gw, NULL);
	tunnel_wait_stop(gw);
}

/* ---- where a new tunnel lands (docs/0040 section 2) ---- */

unsigned
tunnel_land_loop(struct gateway *gw, const struct route_landing *at)
{
	static atomic_uint rotor;
	unsigned n = gw->loops != NULL ? gw->nloops : 1;
	unsigned start, best = 0, best_load = UINT_MAX;

	(void)at;
	if (n < 2)
		return 0;
	/* Ties go round the loops: a burst lands before any count moved. */
	start = atomic_fetch_add_explicit(&rotor, 1, memory_order_relaxed) % n;
	for (unsigned k = 0; k < n; k++) {
		unsigned i = (start + k) % n;
		unsigned load = atomic_load(&gw->loops[i].ntunnels) +
		    atomic_load(&gw->loops[i].nhandshakes);

		if (load < best_load) {
			best = i;
			best_load = load;
		}
	}
	return best;
}

/* ---- a new tunnel ---- */

/* A new tunnel, if the gateway takes one. */
static void
tunnel_upgrade(struct gateway *gw, const struct route_request *req,
    struct upgrade *u)
{
	char reason[128];
	uint32_t later;
	unsigned n;

	if (!http_token_list_has(upgrade_offered_protocols(u), TETHER_SUBPROTOCOL)) {
		upgrade_refuse(u, 400, TUNNEL_PATH " needs the WebSocket subprotocol "
		    TETHER_SUBPROTOCOL " (Sec-WebSocket-Protocol)");
		return;
	}
	if (gw->stopping) {
		upgrade_refuse_later(u, 503, "the gateway is shutting down",
		    tunnel_retry_after(gw));
		return;
	}
	/* Earlier upgrades waiting for a slot go first. */
	if (gw->handshakes_waiting > 0 || gateway_handshake_take(gw) != 0) {
		if (wait_for_slot(gw, u) == 0)
			return;
		later = tunnel_retry_after(gw);
		n = gw->handshakes;
		warn("refusing a tunnel: too many handshakes under way (--max-handshakes)",
		    KV_S("peer", upgrade_peer(u)), KV_U("handshakes", n),
		    KV_U("waiting", gw->handshakes_waiting),
		    KV_U("retry_after_ms", later));
		snprintf(reason, sizeof(reason), "%u tunnel handshakes under way: "
		    "retry later", n);
		upgrade_refuse_later(u, 503, reason, later);
		return;
	}
	tunnel_take(gw, u);
}

/* A slot and a source's share taken for an upgrade that carries no
 * session after all. */
static void
tunnel_untake(struct gateway *gw, const char *peer)
{
	gateway_handshake_source_put(gw, peer);
	gateway_handshake_free(gw, -1);
}

/* The upgrade holds a handshake slot (gateway_handshake_take): its
 * source's share is taken, then the WebSocket is accepted and carries a
 * new session, which owns both; on any failure both are given back. */
static void
tunnel_take(struct gateway *gw, struct upgrade *u)
{
	char reason[128], peer[128];
	struct tunnel *c;

	/* One source's share (docs/0028): a flood of silent upgrades from one
	 * address cannot hold every slot and shut reconnecting agents out. */
	if (gateway_handshake_source_take(gw, upgrade_peer(u)) != 0) {
		gateway_handshake_free(gw, -1);
		debug("refusing a tunnel: its source's handshakes are at "
		    "--max-handshakes-per-source", KV_S("peer", upgrade_peer(u)));
		snprintf(reason, sizeof(reason), "%u tunnel handshakes under way "
		    "from this address: retry later",
		    gw->limits.max_handshakes_per_source);
		upgrade_refuse_later(u, 503, reason, tunnel_retry_after(gw));
		return;
	}
	c = calloc(1, sizeof(*c));
	if (c == NULL) {
		tunnel_untake(gw, upgrade_peer(u));
		upgrade_refuse(u, 500, "out of memory");
		return;
	}
	c->gw = gw;
	/* The peer before the accept, which may free the upgrade. */
	snprintf(peer, sizeof(peer), "%s", upgrade_peer(u));
	c->ws = upgrade_accept(u, TETHER_SUBPROTOCOL, &tunnel_handlers, c);
	if (c->ws == NULL) {
		tunnel_untake(gw, peer);
		free(c);
		return;
	}
	c->session = session_new(gw, &tunnel_transport, c);
	if (c->session == NULL) {
		tunnel_untake(gw, peer);
		warn("tunnel: out of memory for a session: closing",
		    KV_S("peer", tunnel_peer(c)));
		c->closing = 1;
		wsface_close(c->ws, 1011, "out of memory");
		return;
	}
	tunnel_fit_limits(c);
	/* Streams blocked on a full tunnel resume at half their high water. */
	wsface_set_low_water(c->ws, gw->mux_config.tx_high_water / 2);
}

const struct route tunnel_route = {
	.name = "tunnel",
	.matches = tunnel_matches,
	.land_loop = tunnel_land_loop,
	.request = tunnel_request,
	.upgrade = tunnel_upgrade,
};
