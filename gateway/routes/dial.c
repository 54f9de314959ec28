/*
 * dial.c: the dial endpoint (see dial.h): checks who asks and for what
 * (an admin token, or a user token scoped to the cluster; the store reads
 * on the store thread, the upgrade decided when they answer: docs/0022),
 * picks the agent, and hands the connection to a relay; for tether.v1
 * connections, one multiplexer whose streams each become a relay.
 */
#include "dial.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "access.h"
#include "apibody.h"
#include "frame.h"
#include "gateway.h"
#include "hostname.h"
#include "http.h"
#include "log.h"
#include "loop.h"
#include "mux.h"
#include "reach.h"
#include "relay.h"
#include "route.h"
#include "server.h"
#include "shares.h"
#include "store.h"
#include "wsface.h"
#include "wsmux.h"

/* A tetherctl forward connection: many streams over one WebSocket. */
struct ctlconn {
	struct gateway *gw;
	struct wsface *ws;
	struct mux *mux;                 /* over ws (wsmux.h); NULL: out of memory */
	struct access_grant grant;       /* checked again for every stream */
};

static int
dial_matches(const char *path)
{
	const char *p;

	if (strncmp(path, "/v1/clusters/", 13) != 0)
		return 0;
	p = strchr(path + 13, '/');
	return p != NULL && p > path + 13 && strcmp(p, "/dial") == 0;
}

/*
 * A target a client asks for, checked where it enters (the agent checks it
 * again against its allowlist): HOST:PORT with a valid host and a port from
 * 1 to 65535.  0, or -1 with the reason in why (without the target: the
 * caller's message must not echo a peer's bytes into a log or a terminal).
 */
static int
target_check(const char *target, char *why, size_t whylen)
{
	char reason[128];
	size_t hlen;
	unsigned int port;

	if (target_parse(target, strlen(target), &hlen, &port, reason,
	    sizeof(reason)) == 0)
		return 0;
	snprintf(why, whylen, "bad target: %s", reason);
	return -1;
}

/* ---- tether.v1 connections ---- */

/*
 * A forwarded stream while its connection's token is checked again
 * (access_recheck_async, docs/0022): the stream is held until the check
 * answers, and the check cancelled if the stream (or its connection) ends
 * first.  ~300 bytes.
 */
struct fwd_ask {
	struct ctlconn *c;
	struct mux_stream *cs;
	struct access_check *check;     /* out on the store thread, or NULL */
	int starting;                   /* inside ctl_open's call */
	int answered;                   /* the check answered inside it */
	char target[FRAME_TARGET_MAX + 1];
};

static void
fwd_gone(struct mux_stream *cs, const char *code, void *arg)
{
	struct fwd_ask *a = arg;

	access_cancel(a->check);
	free(a);
}

/* Held while the check is out; then nothing of ours. */
static const struct mux_stream_handlers fwd_waiting = { .on_close = fwd_gone };
static const struct mux_stream_handlers fwd_decided = { 0 };

/* The token still reaches the cluster: the agent, then the relay. */
static void
fwd_start(struct ctlconn *c, struct mux_stream *cs, const char *target)
{
	struct reach agent;
	struct relay_who who = { 0 };
	char reason[256];

	if (access_pick(c->gw, &c->grant, &agent, reason, sizeof(reason)) != 0) {
		mux_stream_refuse(cs, "no_agent", reason);
		return;
	}
	who.principal = c->grant.principal;
	who.token_id = c->grant.token_id;
	who.cluster = c->grant.cluster;
	who.target = target;
	who.client = wsface_peer(c->ws);
	relay_start_stream(c->gw, &agent, cs, &who);
}

static void
fwd_checked(void *arg, int status, const struct access_grant *g,
    const char *err)
{
	struct fwd_ask *a = arg;

	(void)g;
	a->check = NULL;
	mux_stream_hold(a->cs, &fwd_decided, NULL);
	if (status != 0)
		mux_stream_refuse(a->cs, "unauthorized", err);
	else
		fwd_start(a->c, a->cs, a->target);
	if (a->starting)
		a->answered = 1;        /* ctl_open frees a */
	else
		free(a);
}

static void
ctl_open(struct mux *m, struct mux_stream *cs, const struct frame_open *req, void *arg)
{
	struct ctlconn *c = arg;
	struct access_check *check;
	struct fwd_ask *a;
	char reason[256];

	if (req->target[0] == '\0') {
		mux_stream_refuse(cs, "not_allowed", "services are reached through their own endpoints");
		return;
	}
	if (target_check(req->target, reason, sizeof(reason)) != 0) {
		mux_stream_refuse(cs, "bad_target", reason);
		return;
	}
	if ((a = calloc(1, sizeof(*a))) == NULL) {
		mux_stream_refuse(cs, "internal", "out of memory");
		return;
	}
	a->c = c;
	a->cs = cs;
	snprintf(a->target, sizeof(a->target), "%s", req->target);
	mux_stream_hold(cs, &fwd_waiting, a);
	/* The connection may outlive its token: a revoked user stops here.
	 * A pair proven moments ago answers at once. */
	a->starting = 1;
	check = access_recheck_async(c->gw, &c->grant, fwd_checked, a);
	if (a->answered) {
		free(a);
		return;
	}
	a->starting = 0;
	a->check = check;
}

static const struct mux_handlers ctl_mux_handlers = { .on_open = ctl_open };

static void
ctl_message(struct wsface *ws, const uint8_t *data, size_t len, int binary, void *arg)
{
	struct ctlconn *c = arg;
	struct frame f;
	char err[200];
	int rc;

	if (c->mux == NULL)
		return;
	rc = binary ? frame_decode(data, len, &f, err, sizeof(err)) : -1;
	if (rc == FRAME_UNKNOWN_TYPE)
		return;   /* a newer tetherctl's frame: skipped */
	if (rc != 0) {
		warn("dial: bad message", KV_S("peer", wsface_peer(ws)),
		    KV_S("reason", binary ? err : "text message"));
		wsface_close(ws, 1002, binary ? "malformed frame" : "frames are binary");
		return;
	}
	if (f.type < FRAME_OPEN || mux_on_frame(c->mux, &f, err, sizeof(err)) != 0) {
		warn("dial: protocol error", KV_S("peer", wsface_peer(ws)),
		    KV_S("reason", f.type < FRAME_OPEN ?
		    "only stream frames are allowed here" : err));
		wsface_close(ws, 1002, "protocol error");
	}
}

static void
ctl_drain(struct wsface *ws, void *arg)
{
	struct ctlconn *c = arg;

	if (c->mux != NULL)
		mux_on_drain(c->mux);
}

static void
ctl_close(struct wsface *ws, int status, const char *reason, void *arg)
{
	struct ctlconn *c = arg;

	c->ws = NULL;
	mux_free(c->mux);
	free(c);
}

static const struct wsface_handlers ctl_ws_handlers = {
	.on_message = ctl_message,
	.on_drain = ctl_drain,
	.on_close = ctl_close,
};

static void
ctl_start(struct gateway *gw, struct upgrade *u, const struct access_grant *g)
{
	struct ctlconn *c = calloc(1, sizeof(*c));
	struct mux_config cfg = gw->mux_config;
	struct budget_account *who;

	if (c == NULL) {
		upgrade_refuse(u, 500, "out of memory");
		return;
	}
	c->gw = gw;
	c->grant = *g;
	cfg.odd_ids = 1;
	cfg.counted = 0;      /* its streams are counted in the agents' tunnels */
	c->ws = upgrade_accept(u, TETHER_SUBPROTOCOL, &ctl_ws_handlers, c);
	if (c->ws == NULL) {
		free(c);
		return;
	}
	who = shares_principal(gw, c->grant.principal);
	wsface_charge_to(c->ws, who, c->grant.principal);
	shares_unpin(gw, who);         /* the connection holds it now */
	c->mux = wsmux_new(loop_base_here(gw), &cfg, c->ws, &ctl_mux_handlers, c);
	if (c->mux == NULL) {
		warn("dial: out of memory for a multiplexer: closing",
		    KV_S("peer", wsface_peer(c->ws)));
		wsface_close(c->ws, 1011, "out of memory");
		return;
	}
	wsface_set_max_message(c->ws, gw->limits.max_frame_bytes);
	/* DATA stops at tx_high_water; OPEN_FAIL, RESET and PONG answers to a
	 * client that does not read pile up to this, then it is dropped. */
	wsface_set_max_queue(c->ws, gw->limits.max_queue_bytes);
	wsface_set_low_water(c->ws, cfg.tx_high_water / 2);
}

/* ---- the endpoint ---- */

/*
 * A dial upgrade while its token is checked on the store thread
 * (access_cluster_async, docs/0022): what the rest of the decision needs,
 * copied from the request, which lives only during dial_upgrade.  Freed
 * once the check answered, or when the client leaves first (the check is
 * then cancelled).  ~300 bytes.
 */
struct dial_ask {
	struct gateway *gw;
	struct upgrade *u;
	struct access_check *check;     /* out on the store thread, or NULL */
	int starting;                   /* inside dial_upgrade's call */
	int answered;                   /* the check answered inside it */
	int node_bad;                   /* node given twice or too long */
	int target_rc;                  /* api_query_param's, for target */
	char target[FRAME_TARGET_MAX + 1];
};

/* The token reaches the cluster (g): the rest of the decision. */
static void
dial_decide(struct dial_ask *a, const struct access_grant *g)
{
	struct gateway *gw = a->gw;
	struct upgrade *u = a->u;
	struct reach agent;
	struct relay_who who = { 0 };
	char err[256];
	int status;

	if (a->node_bad) {
		upgrade_refuse(u, 400, "query parameter node: given twice or too long");
		return;
	}
	if (http_token_list_has(upgrade_offered_protocols(u), TETHER_SUBPROTOCOL)) {
		ctl_start(gw, u, g);
		return;
	}
	switch (a->target_rc) {
	case -1:
		upgrade_refuse(u, 400, "query parameter target=HOST:PORT is required");
		return;
	case -2:
		upgrade_refuse(u, 400, "query parameter target: given twice or too long");
		return;
	}
	if (target_check(a->target, err, sizeof(err)) != 0) {
		upgrade_refuse(u, 400, err);
		return;
	}
	if ((status = access_pick(gw, g, &agent, err, sizeof(err))) != 0) {
		upgrade_refuse(u, status, err);
		return;
	}
	who.principal = g->principal;
	who.token_id = g->token_id;
	who.cluster = g->cluster;
	who.target = a->target;
	who.client = upgrade_peer(u);
	relay_start_raw(gw, &agent, u, &who);
}

static void
dial_checked(void *arg, int status, const struct access_grant *g,
    const char *err)
{
	struct dial_ask *a = arg;

	a->check = NULL;
	/* From here the upgrade is decided, or the relay watches it. */
	upgrade_on_abandon(a->u, NULL, NULL);
	if (status != 0)
		upgrade_refuse(a->u, status, err);
	else
		dial_decide(a, g);
	if (a->starting)
		a->answered = 1;        /* dial_upgrade frees a */
	else
		free(a);
}

/* The client left while its token was being checked. */
static void
dial_abandoned(void *arg)
{
	struct dial_ask *a = arg;

	access_cancel(a->check);
	free(a);
}

static void
dial_upgrade(struct gateway *gw, const struct route_request *req, struct upgrade *u)
{
	char cluster[STORE_ID_MAX + 1], node[STORE_NAME_MAX + 1];
	struct dial_ask *a = calloc(1, sizeof(*a));
	struct access_check *check;

	if (a == NULL) {
		upgrade_refuse(u, 500, "out of memory");
		return;
	}
	/* dial_matches vouched for the shape.  A segment too long for an id
	 * is cut, and no cluster id is that long, so it stays unknown. */
	snprintf(cluster, sizeof(cluster), "%.*s",
	    (int)(strchr(req->path + 13, '/') - (req->path + 13)), req->path + 13);
	a->gw = gw;
	a->u = u;
	a->node_bad = api_query_param(req->query, "node", node, sizeof(node)) == -2;
	a->target_rc = api_query_param(req->query, "target", a->target,
	    sizeof(a->target));
	a->starting = 1;
	upgrade_on_abandon(u, dial_abandoned, a);
	/* A token proven for the cluster moments ago answers at once. */
	check = access_cluster_async(gw, req->authorization, cluster,
	    a->node_bad ? NULL : node, dial_checked, a);
	if (a->answered) {
		free(a);
		return;
	}
	a->starting = 0;
	a->check = check;
}

/*
 * The route's land_loop (docs/0040 step 8): a dial lands by where the
 * agent it will reach is (the named node's, wherever it is, or an agent
 * of the cluster; access_land_dial): on its loop, so a raw dial's stream
 * and a tetherctl forward's streams cross no loop link, unless that loop
 * is clearly the busier (--landing route: by connections; any: weighing
 * the tunnel sides too, which the dial's own joins there); an unknown
 * cluster or node, or a node given twice, stays where its handshake ran
 * (the upgrade refuses it there).  The route keeps_counts: the dial
 * stays counted past its 101 until it ends, so a row of dials to one
 * agent does not all land on its loop.
 */
static unsigned
dial_land_loop(struct gateway *gw, const struct route_landing *at)
{
	char cluster[STORE_ID_MAX + 1], node[STORE_NAME_MAX + 1];
	const char *seg = at->path + 13;
	size_t n = strcspn(seg, "/");
	int rc;

	/* dial_matches vouched for the shape. */
	if (n > STORE_ID_MAX)
		return at->here;
	snprintf(cluster, sizeof(cluster), "%.*s", (int)n, seg);
	if ((rc = api_query_param(at->query, "node", node, sizeof(node))) == -2)
		return at->here;
	return access_land_dial(gw, cluster, rc == 0 && node[0] != '\0' ? node : NULL,
	    at->here, at->tunnel);
}

const struct route dial_route = {
	.name = "dial",
	.matches = dial_matches,
	.upgrade = dial_upgrade,
	.land_loop = dial_land_loop,
	.keeps_counts = 1,
};
