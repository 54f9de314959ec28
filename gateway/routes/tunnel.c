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
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "frame.h"
#include "gateway.h"
#include "http.h"
#include "log.h"
#include "mux.h"
#include "route.h"
#include "server.h"
#include "session.h"
#include "srccount.h"
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

static const struct session_transport tunnel_transport = {
	.send = tunnel_send,
	.close = tunnel_close,
	.peer = tunnel_peer,
	.bulk = &wsmux_io,
	.bulk_arg = tunnel_bulk_arg,
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

/* When an agent turned away for now (draining, handshakes at their cap)
 * should come back: after the connections the TLS queue holds. */
static uint32_t
tunnel_retry_after(struct gateway *gw)
{
	uint32_t handshaking, waiting;
	uint64_t shed;

	server_tls_admission(gw, &handshaking, &waiting, &shed);
	return gateway_retry_after_ms(gw, waiting);
}

/* A new tunnel, if the gateway takes one. */
static void
tunnel_upgrade(struct gateway *gw, const struct route_request *req,
    struct upgrade *u)
{
	char reason[128];
	struct tunnel *c;
	uint32_t later;

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
	if (gw->handshakes >= gw->limits.max_handshakes) {
		later = tunnel_retry_after(gw);
		warn("refusing a tunnel: too many handshakes under way (--max-handshakes)",
		    KV_S("peer", upgrade_peer(u)), KV_U("handshakes", gw->handshakes),
		    KV_U("retry_after_ms", later));
		snprintf(reason, sizeof(reason), "%u tunnel handshakes under way: "
		    "retry later", gw->handshakes);
		upgrade_refuse_later(u, 503, reason, later);
		return;
	}
	/* One source's share (docs/0028): a flood of silent upgrades from one
	 * address cannot hold every slot and shut reconnecting agents out. */
	if (gw->handshake_sources != NULL && srccount_get(gw->handshake_sources,
	    upgrade_peer(u)) >= gw->limits.max_handshakes_per_source) {
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
		upgrade_refuse(u, 500, "out of memory");
		return;
	}
	c->gw = gw;
	c->ws = upgrade_accept(u, TETHER_SUBPROTOCOL, &tunnel_handlers, c);
	if (c->ws == NULL) {
		free(c);
		return;
	}
	c->session = session_new(gw, &tunnel_transport, c);
	if (c->session == NULL) {
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
	.request = tunnel_request,
	.upgrade = tunnel_upgrade,
};
