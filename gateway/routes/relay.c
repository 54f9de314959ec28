/*
 * relay.c: an operator stream joined to an agent stream (see relay.h).
 *
 * Naming: "agent" is the stream in the agent's tunnel; "client" is the
 * operator's side (a raw WebSocket or a stream of a tether.v1 connection).
 * to_agent / to_client hold bytes received from one side that the other
 * has no credit (or tunnel room) for yet; each is bounded by the window of
 * the side that sent them, because that side gets credit back only as they
 * drain.  A piece of 4 KiB or more is held in a chain of its own, which
 * moves into the next hop's WebSocket output without a copy.
 */
#include "relay.h"

#include <inttypes.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>

#include <event2/buffer.h>
#include <event2/event.h>

#include "gateway.h"
#include "livestreams.h"
#include "log.h"
#include "loop.h"
#include "mux.h"
#include "server.h"
#include "reach.h"
#include "shares.h"
#include "wsface.h"

enum client_kind { CLIENT_RAW, CLIENT_STREAM };

struct relay {
	struct gateway *gw;
	struct event_base *base;       /* its loop's: it lives there */
	enum client_kind kind;
	struct mux_stream *agent;      /* NULL once ended */
	struct upgrade *upgrade;       /* raw, until answered */
	struct wsface *ws;             /* raw, once upgraded; NULL once closed */
	struct mux_stream *cs;         /* stream kind; NULL once ended */
	struct evbuffer *to_agent;
	struct evbuffer *to_client;
	size_t uncredited;             /* raw: bytes sent to ws, not yet credited to the agent */
	int agent_fin, client_fin;     /* each side said it sends no more */
	int agent_fin_sent, client_fin_sent;
	int opened;                    /* the agent accepted the stream */
	struct event *end_ev;          /* a revocation's end, from the loop; or NULL */
	uint64_t up, down;             /* bytes client->agent, agent->client */
	struct timeval started;
	char principal[96], cluster[32], node[64], target[256], end[64];
	char replica[64];              /* the one holding the agent's tunnel */
	char via[64];                  /* relay_who's, "" when none */
	char client[64];               /* relay_who's, "" when none */
	char reason[256];              /* the agent's OPEN_FAIL reason, or the revocation */
	char token_id[64], agent_id[STORE_ID_MAX + 1];   /* what a revocation matches */
	int quiet;                     /* relay_who's: no audit, not listed */
	struct live_stream live;       /* listed for the status page while it lives */
};

/* ---- ending ---- */

static void
relay_audit(struct relay *r)
{
	struct timeval now, took;

	gettimeofday(&now, NULL);
	timersub(&now, &r->started, &took);
	audit("stream", r->client, KV_S("who", r->principal), KV_S("cluster", r->cluster),
	    KV_S("node", r->node), KV_S("target", r->target),
	    KV_S("replica", r->replica), KV_S("via", r->via), KV_U("bytes_up", r->up),
	    KV_U("bytes_down", r->down),
	    KV_I("duration_ms", took.tv_sec * 1000 + took.tv_usec / 1000),
	    KV_S("end", r->end[0] ? r->end : "done"), KV_S("reason", r->reason));
}

static void
relay_note_end(struct relay *r, const char *end)
{
	if (r->end[0] != '\0')
		return;
	snprintf(r->end, sizeof(r->end), "%s", end);
	/* The other side's relay (a peer link's far or near half) ended it
	 * for a revocation it heard of. */
	if (strcmp(end, "revoked") == 0 && r->reason[0] == '\0')
		snprintf(r->reason, sizeof(r->reason), "revoked: ended by the "
		    "other side of the stream");
}

/* Frees r once neither side is left. */
static void
relay_maybe_free(struct relay *r)
{
	if (r->agent != NULL || r->ws != NULL || r->cs != NULL || r->upgrade != NULL)
		return;
	if (!r->quiet)
		relay_audit(r);
	live_stream_remove(&r->live);
	if (r->end_ev != NULL)
		event_free(r->end_ev);
	evbuffer_free(r->to_agent);
	evbuffer_free(r->to_client);
	free(r);
}

/* Ends the client side after what is buffered for it (or at once on error). */
static void
client_end(struct relay *r, const char *code)
{
	char reason[96];

	if (r->kind == CLIENT_RAW && r->ws != NULL) {
		if (strcmp(code, "done") == 0) {
			wsface_close(r->ws, 1000, "done");
		} else {
			snprintf(reason, sizeof(reason), "stream reset: %s", code);
			wsface_close(r->ws, 1011, reason);
		}
	} else if (r->kind == CLIENT_STREAM && r->cs != NULL) {
		if (strcmp(code, "done") != 0) {
			mux_stream_reset(r->cs, code);
			r->cs = NULL;
		}
	}
}

/* ---- moving bytes ---- */

/* Pieces at least this large get a chain of their own in to_agent or
 * to_client; smaller ones are appended (a chain each would cost more than
 * the piece: ~100 bytes of chain and malloc per piece). */
#define RELAY_BLOCK_MIN 4096

static void
relay_block_free(const void *data, size_t len, void *arg)
{
	(void)len;
	(void)arg;
	free((void *)data);
}

/* Keeps bytes the next hop has no room for yet, copied once: a large piece
 * goes into a block of its own, added by reference, which later moves whole
 * into the tunnel's output (mux_stream_send_buffer) instead of being copied
 * out again and framed (docs/0019, "Second pass").  Returns 0 or -1. */
static int
relay_keep(struct evbuffer *b, const uint8_t *data, size_t len)
{
	uint8_t *block;

	if (len >= RELAY_BLOCK_MIN && (block = malloc(len)) != NULL) {
		memcpy(block, data, len);
		if (evbuffer_add_reference(b, block, len, relay_block_free, NULL) == 0)
			return 0;
		free(block);
	}
	return evbuffer_add(b, data, len);
}

static void
flush_to_agent(struct relay *r)
{
	size_t n;

	if (r->agent != NULL && evbuffer_get_length(r->to_agent) > 0) {
		n = mux_stream_send_buffer(r->agent, r->to_agent);
		r->up += n;
		if (n > 0 && r->kind == CLIENT_STREAM && r->cs != NULL)
			mux_stream_drained(r->cs, n);
		if (evbuffer_get_length(r->to_agent) > 0)
			return;
	}
	if (r->agent == NULL)
		return;
	if (r->kind == CLIENT_RAW && r->ws != NULL)
		wsface_pause_reading(r->ws, 0);
	if (r->client_fin && !r->agent_fin_sent) {
		r->agent_fin_sent = 1;
		mux_stream_fin(r->agent);
	}
}

static void
flush_to_client(struct relay *r)
{
	size_t n;

	if (r->kind != CLIENT_STREAM)
		return;
	if (r->cs != NULL && evbuffer_get_length(r->to_client) > 0) {
		n = mux_stream_send_buffer(r->cs, r->to_client);
		r->down += n;
		if (n > 0 && r->agent != NULL)
			mux_stream_drained(r->agent, n);
		if (evbuffer_get_length(r->to_client) > 0)
			return;
	}
	if (r->cs != NULL && r->agent_fin && !r->client_fin_sent) {
		r->client_fin_sent = 1;
		mux_stream_fin(r->cs);
	}
}

/* ---- the agent's stream ---- */

static void
agent_opened(struct mux_stream *s, int ok, const char *code, const char *reason, void *arg);

static void
agent_data(struct mux_stream *s, const uint8_t *data, size_t len, void *arg)
{
	struct relay *r = arg;

	if (r->kind == CLIENT_RAW) {
		if (r->ws == NULL)
			return;
		wsface_send(r->ws, data, len, 1);
		r->down += len;
		r->uncredited += len;
		return;
	}
	/* Pass straight through while nothing waits ahead of these bytes;
	 * only what the client has no credit for yet is copied aside. */
	if (evbuffer_get_length(r->to_client) == 0 && r->cs != NULL) {
		size_t n = mux_stream_send(r->cs, data, len);
		r->down += n;
		mux_stream_drained(s, n);
		data += n;
		len -= n;
	}
	if (len > 0)
		relay_keep(r->to_client, data, len);
	flush_to_client(r);
}

static void
agent_writable(struct mux_stream *s, void *arg)
{
	flush_to_agent(arg);
}

static void
agent_fin(struct mux_stream *s, void *arg)
{
	struct relay *r = arg;

	r->agent_fin = 1;
	if (r->kind == CLIENT_RAW) {
		/* An empty message tells the raw client "no more from the node". */
		if (r->ws != NULL && !r->client_fin_sent) {
			r->client_fin_sent = 1;
			wsface_send(r->ws, (const uint8_t *)"", 0, 1);
		}
		return;
	}
	flush_to_client(r);
}

/* The agent's stream ended.  Before it was answered (the far side's RESET
 * of a stream still opening, which mux.h allows: an agent's, a peer
 * link's or a loop link's far relay passing a reset on) it is a refusal:
 * the client's upgrade or stream is refused (agent_opened), never left
 * waiting.  A raw client's upgrade has no deadline of its own (its
 * connection is parked, server.c): left unanswered, the client waited
 * until something between cut its connection (a balancer's idle timeout)
 * or the replica exited. */
static void
agent_close(struct mux_stream *s, const char *code, void *arg)
{
	struct relay *r = arg;

	if (!r->opened) {
		agent_opened(s, 0, code, "the stream was reset before it was "
		    "answered", r);
		return;
	}
	r->agent = NULL;
	relay_note_end(r, code);
	if (strcmp(code, "done") != 0 || r->kind == CLIENT_RAW)
		client_end(r, code);
	relay_maybe_free(r);
}

static const struct mux_stream_handlers agent_handlers = {
	.on_opened = agent_opened,
	.on_data = agent_data,
	.on_writable = agent_writable,
	.on_fin = agent_fin,
	.on_close = agent_close,
};

/* ---- raw WebSocket client ---- */

static void
raw_message(struct wsface *c, const uint8_t *data, size_t len, int binary, void *arg)
{
	struct relay *r = arg;

	if (len == 0) {
		r->client_fin = 1;
		flush_to_agent(r);
		return;
	}
	if (r->client_fin)
		return;
	relay_keep(r->to_agent, data, len);
	flush_to_agent(r);
	if (evbuffer_get_length(r->to_agent) > 0)
		wsface_pause_reading(c, 1);
}

static void
raw_drain(struct wsface *c, void *arg)
{
	struct relay *r = arg;

	if (r->agent != NULL && r->uncredited > 0)
		mux_stream_drained(r->agent, r->uncredited);
	r->uncredited = 0;
}

static void
raw_close(struct wsface *c, int status, const char *reason, void *arg)
{
	struct relay *r = arg;

	r->ws = NULL;
	relay_note_end(r, "client_closed");
	if (r->agent != NULL) {
		mux_stream_reset(r->agent, "client_gone");
		r->agent = NULL;
	}
	relay_maybe_free(r);
}

static const struct wsface_handlers raw_handlers = {
	.on_message = raw_message,
	.on_drain = raw_drain,
	.on_close = raw_close,
};

static void
raw_abandoned(void *arg)
{
	struct relay *r = arg;

	r->upgrade = NULL;
	relay_note_end(r, "client_gone");
	if (r->agent != NULL) {
		mux_stream_reset(r->agent, "client_gone");
		r->agent = NULL;
	}
	relay_maybe_free(r);
}

/* ---- multiplexed client stream ---- */

static void
cs_data(struct mux_stream *s, const uint8_t *data, size_t len, void *arg)
{
	struct relay *r = arg;

	if (evbuffer_get_length(r->to_agent) == 0 && r->agent != NULL) {
		size_t n = mux_stream_send(r->agent, data, len);
		r->up += n;
		mux_stream_drained(s, n);
		data += n;
		len -= n;
	}
	if (len > 0)
		relay_keep(r->to_agent, data, len);
	flush_to_agent(r);
}

static void
cs_writable(struct mux_stream *s, void *arg)
{
	flush_to_client(arg);
}

static void
cs_fin(struct mux_stream *s, void *arg)
{
	struct relay *r = arg;

	r->client_fin = 1;
	flush_to_agent(r);
}

static void
cs_close(struct mux_stream *s, const char *code, void *arg)
{
	struct relay *r = arg;

	r->cs = NULL;
	relay_note_end(r, strcmp(code, "done") == 0 ? "done" : code);
	/* A quiet relay is a splice in the middle of one stream (a loop
	 * link's end, docs/0040): the code goes on as it came, so the far
	 * end hears "revoked" as the near one said it. */
	if (r->agent != NULL && strcmp(code, "done") != 0) {
		mux_stream_reset(r->agent, r->quiet ? code : "client_gone");
		r->agent = NULL;
	}
	relay_maybe_free(r);
}

static const struct mux_stream_handlers cs_handlers = {
	.on_data = cs_data,
	.on_writable = cs_writable,
	.on_fin = cs_fin,
	.on_close = cs_close,
};

/* ---- a revocation (livestreams.h) ---- */

/* The relay's own event: both sides reset with "revoked" (the far side of
 * a peer link, or the agent, sees that code), then freed once neither is
 * left (a raw client's close follows from the loop). */
static void
relay_revoked(evutil_socket_t fd, short what, void *arg)
{
	struct relay *r = arg;
	char msg[320];

	(void)fd;
	(void)what;
	if (r->agent != NULL) {
		mux_stream_reset(r->agent, "revoked");
		r->agent = NULL;
	}
	if (r->kind == CLIENT_RAW && r->upgrade != NULL) {
		snprintf(msg, sizeof(msg), "%s", r->reason);
		upgrade_refuse(r->upgrade, 401, msg);
		r->upgrade = NULL;
	} else if (r->kind == CLIENT_RAW && r->ws != NULL) {
		snprintf(msg, sizeof(msg), "revoked: %s", r->reason);
		wsface_close(r->ws, 1008, msg);
	} else if (r->kind == CLIENT_STREAM && r->cs != NULL) {
		if (r->opened)
			mux_stream_reset(r->cs, "revoked");
		else
			mux_stream_refuse(r->cs, "revoked", r->reason);
		r->cs = NULL;
	}
	relay_maybe_free(r);
}

/* live_stream's end: marked now (the audit says end=revoked whatever
 * happens next), ended from the loop. */
static void
relay_end(struct live_stream *ls, const char *reason)
{
	struct relay *r = (struct relay *)((char *)ls - offsetof(struct relay, live));

	snprintf(r->end, sizeof(r->end), "revoked");
	snprintf(r->reason, sizeof(r->reason), "%s", reason);
	if (r->end_ev == NULL && (r->end_ev = event_new(r->base, -1, 0,
	    relay_revoked, r)) == NULL) {
		warn("relay: out of memory to end a revoked stream",
		    KV_S("who", r->principal));
		return;
	}
	event_active(r->end_ev, EV_TIMEOUT, 1);
}

/* ---- opening ---- */

/*
 * The account the client's side of r is charged to: its principal's, or
 * for a stream that came over a peer link the link's own ("peer-link:ID";
 * "admin:peer-link:ID" for an admin principal, which may use the reserve).
 * A replica naming a new principal per OPEN still has one share on this
 * side, and the agent's side stays charged to the principal it named
 * (issue 22: 150 MiB of windows against a 64 MiB share).  A quiet relay's
 * (over a loop link): none, NULL, the link's multiplexer has the link's
 * account ("loop-link:A>B").  NULL too when out of memory.  Pinned: the
 * caller charges it, then shares_unpin.
 */
static struct budget_account *
client_account(struct relay *r)
{
	char link[sizeof(r->via) + 32];

	if (r->quiet)
		return NULL;
	if (r->via[0] == '\0')
		return shares_principal(r->gw, r->principal);
	snprintf(link, sizeof(link), "%speer-link:%s",
	    strncmp(r->principal, "admin:", 6) == 0 ? "admin:" : "", r->via);
	return shares_principal(r->gw, link);
}

static void
agent_opened(struct mux_stream *s, int ok, const char *code, const char *reason, void *arg)
{
	struct relay *r = arg;
	struct budget_account *who;
	char msg[512];
	int rc;

	if (!ok) {
		r->agent = NULL;
		snprintf(msg, sizeof(msg), "node %s: %s (%s)", r->node, reason, code);
		snprintf(r->end, sizeof(r->end), "refused:%s", code);
		snprintf(r->reason, sizeof(r->reason), "%s", reason);
		if (r->kind == CLIENT_RAW && r->upgrade != NULL) {
			upgrade_refuse(r->upgrade, 502, msg);
			r->upgrade = NULL;
		} else if (r->kind == CLIENT_STREAM && r->cs != NULL) {
			mux_stream_refuse(r->cs, code, reason);
			r->cs = NULL;
		}
		relay_maybe_free(r);
		return;
	}
	r->opened = 1;
	if (r->kind == CLIENT_RAW) {
		r->ws = upgrade_accept(r->upgrade, NULL, &raw_handlers, r);
		r->upgrade = NULL;
		if (r->ws == NULL) {
			relay_note_end(r, "client_gone");
			mux_stream_reset(s, "client_gone");
			r->agent = NULL;
			relay_maybe_free(r);
			return;
		}
		wsface_set_low_water(r->ws, 256 * 1024);
		who = shares_principal(r->gw, r->principal);
		wsface_charge_to(r->ws, who, r->principal);
		shares_unpin(r->gw, who);  /* the connection holds it now */
		/* The node's bytes go straight to the socket, bounded by the
		 * stream's window (credit returns as they drain); PONGs to a
		 * client that does not read count on top, up to --max-queue. */
		wsface_set_max_queue(r->ws, (size_t)r->gw->mux_config.window +
		    r->gw->limits.max_queue_bytes);
		return;
	}
	/* The client's side of the stream is charged to the same principal
	 * (over a peer link: the link's), and to the forward connection's (the
	 * link's) own share. */
	who = r->cs != NULL ? client_account(r) : NULL;
	rc = r->cs == NULL ? -1 : mux_stream_accept(r->cs, who, &cs_handlers, r);
	shares_unpin(r->gw, who);      /* the stream's charge holds it now */
	if (rc != 0) {
		r->cs = NULL;
		relay_note_end(r, "client_gone");
		mux_stream_reset(s, "client_gone");
		r->agent = NULL;
		relay_maybe_free(r);
	}
}

static struct relay *
relay_new(struct gateway *gw, const struct reach *agent, const struct relay_who *who,
    enum client_kind kind)
{
	struct relay *r = calloc(1, sizeof(*r));

	if (r == NULL)
		return NULL;
	r->gw = gw;
	r->base = loop_base_here(gw);
	r->kind = kind;
	r->to_agent = evbuffer_new();
	r->to_client = evbuffer_new();
	if (r->to_agent == NULL || r->to_client == NULL) {
		if (r->to_agent != NULL)
			evbuffer_free(r->to_agent);
		if (r->to_client != NULL)
			evbuffer_free(r->to_client);
		free(r);
		return NULL;
	}
	gettimeofday(&r->started, NULL);
	snprintf(r->principal, sizeof(r->principal), "%s", who->principal);
	snprintf(r->cluster, sizeof(r->cluster), "%s", who->cluster);
	snprintf(r->node, sizeof(r->node), "%s", agent->node);
	snprintf(r->target, sizeof(r->target), "%s", who->target);
	snprintf(r->replica, sizeof(r->replica), "%s", agent->replica);
	snprintf(r->via, sizeof(r->via), "%s", who->via != NULL ? who->via : "");
	snprintf(r->client, sizeof(r->client), "%s",
	    who->client != NULL ? who->client : "");
	snprintf(r->token_id, sizeof(r->token_id), "%s",
	    who->token_id != NULL ? who->token_id : "");
	snprintf(r->agent_id, sizeof(r->agent_id), "%s", agent->agent_id);
	r->quiet = who->quiet;
	r->live = (struct live_stream){ .kind = kind == CLIENT_RAW ? "connect" : "forward",
	    .principal = r->principal, .cluster = r->cluster, .node = r->node,
	    .target = r->target, .up = &r->up, .down = &r->down,
	    .started = r->started.tv_sec, .token_id = r->token_id,
	    .agent_id = r->agent_id, .end = relay_end };
	if (!r->quiet)
		live_stream_add(live_streams_here(gw), &r->live);
	return r;
}

void
relay_start_raw(struct gateway *gw, const struct reach *agent, struct upgrade *u,
    const struct relay_who *who)
{
	struct relay *r = relay_new(gw, agent, who, CLIENT_RAW);
	char err[128];

	if (r == NULL) {
		upgrade_refuse(u, 500, "out of memory");
		return;
	}
	r->upgrade = u;
	r->agent = reach_open_stream(gw, agent, who->principal, who->target, NULL,
	    &agent_handlers, r, err, sizeof(err));
	if (r->agent == NULL) {
		upgrade_refuse(u, 503, err);
		r->upgrade = NULL;
		snprintf(r->end, sizeof(r->end), "refused:busy");
		relay_maybe_free(r);
		return;
	}
	upgrade_on_abandon(u, raw_abandoned, r);
}

void
relay_start_stream(struct gateway *gw, const struct reach *agent, struct mux_stream *cs,
    const struct relay_who *who)
{
	struct relay *r = relay_new(gw, agent, who, CLIENT_STREAM);
	char err[128];

	if (r == NULL) {
		mux_stream_refuse(cs, "internal", "out of memory");
		return;
	}
	r->cs = cs;
	mux_stream_hold(cs, &cs_handlers, r);
	r->agent = reach_open_stream(gw, agent, who->principal,
	    who->service != NULL ? NULL : who->target, who->service,
	    &agent_handlers, r, err, sizeof(err));
	if (r->agent == NULL) {
		mux_stream_refuse(cs, "busy", err);
		r->cs = NULL;
		snprintf(r->end, sizeof(r->end), "refused:busy");
		relay_maybe_free(r);
	}
}
