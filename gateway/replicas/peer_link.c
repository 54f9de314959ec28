/*
 * peer_link.c: links between gateway replicas (see peer_link.h and
 * docs/0020-peer-links.md).
 *
 * One struct link per other replica this one has talked to, keyed by the
 * replica's id (at most PEER_LINKS_MAX):
 *
 *   DOWN --first use--> DIALING --101--> UP --transport ends--> DOWN
 *    (backoff)   \                        ^
 *                 `--their dial arrives--/   (accepted: UP at once)
 *
 * The link's multiplexer exists from DIALING on, so peer_link_open_stream hands
 * out a stream at once; its OPEN waits in `held` until the transport is up
 * (at most PEER_WAITING_MAX streams wait), then the multiplexer moves onto
 * the link's WebSocket (common/wsmux.h).  A link is one WebSocket face
 * (common/wsface.h) whichever replica dialled it: only the keepalive
 * differs (the accepted side's WebSocket pings on its own).  Either side
 * opens streams on a link, whoever dialed: stream ids are odd on the
 * replica whose id sorts first, so a multiplexer made before its transport
 * fits whichever connection wins.  When both replicas dial each other at once, the dial of
 * the replica whose id sorts first wins: the other is refused with 409, and
 * its dialer waits (DIALING) for the incoming one.
 *
 * Dead links: the accepting side's WebSocket pings when the link is quiet
 * (--ping-interval, --ping-timeout); the dialing side sends a PING frame
 * when it has heard nothing for --ping-interval and drops the link after
 * --ping-timeout more.  A link that ends refuses the streams still opening
 * with "peer_unreachable" and ends the open ones (tunnel_lost); the next
 * use dials again, no sooner than its backoff (PEER_BACKOFF_MIN_MS,
 * doubling to PEER_BACKOFF_MAX_MS; reset once a link is up).
 *
 * The far side of a stream (replica B): an OPEN names the agent and the
 * principal, and goes to the handler the /v1/peer route set
 * (routes/peer_route.c), which splices it to the agent's tunnel.
 *
 * Memory: a link is ~1 KiB plus its multiplexer; held OPENs at most
 * PEER_WAITING_MAX frames of ~500 bytes; streams at most PEER_MAX_STREAMS
 * per link, their windows charged to gw->budget.
 */
#include "peer_link.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/queue.h>

#include <event2/buffer.h>
#include <event2/event.h>
#include <openssl/err.h>
#include <openssl/ssl.h>

#include "frame.h"
#include "gateway.h"
#include "http.h"
#include "log.h"
#include "mux.h"
#include "route.h"
#include "runtime.h"
#include "server.h"
#include "shares.h"
#include "tlspeer.h"
#include "wsclient.h"
#include "wsface.h"
#include "wsmux.h"

#define PEER_LINKS_MAX          256     /* replicas linked (or remembered) at once */
#define PEER_WAITING_MAX        64      /* streams waiting for a link to come up */
#define PEER_HELD_MAX           (2 * PEER_WAITING_MAX)  /* their frames (OPEN, RESET) */
#define PEER_MAX_STREAMS        4096    /* streams on one link */
#define PEER_CONNECT_TIMEOUT_MS 5000    /* TCP + TLS + upgrade */
#define PEER_WAIT_MS            (PEER_CONNECT_TIMEOUT_MS + 1000)  /* DIALING, all told */
#define PEER_BACKOFF_MIN_MS     250
#define PEER_BACKOFF_MAX_MS     8000
#define REPLICA_MAX             63

enum link_state { LINK_DOWN, LINK_DIALING, LINK_UP };

struct link {
	LIST_ENTRY(link) entry;
	struct peers *peers;
	enum link_state state;
	char replica[REPLICA_MAX + 1];
	char url[256];                /* the replica's peer URL, last given */
	struct wsface *face;          /* our dial (DIALING, or UP on it), or
	                               * theirs (UP on it); NULL when DOWN, or
	                               * DIALING after our dial lost to theirs */
	int dialed;                   /* face is our dial */
	struct mux *mux;              /* DIALING and UP */
	struct evbuffer *held;        /* DIALING: frames, each a u32 length + bytes */
	uint32_t nheld;
	struct event *timer;          /* DIALING: the deadline; UP: keepalive */
	int64_t heard_ms;             /* UP: the far side's last word (monotonic) */
	int64_t retry_ms;             /* DOWN: no dial before this (monotonic) */
	uint32_t backoff_ms;
	uint64_t ping_seq;
	char why[200];                /* DOWN: why the last link ended */
};

struct peers {
	struct gateway *gw;
	LIST_HEAD(link_list, link) links;
	unsigned nlinks;
	SSL_CTX *tls;                 /* the dialing side's (our certificate) */
	peer_link_open_fn *on_open;   /* the far side of an OPEN (the /v1/peer route) */
};

static void link_down(struct link *l, const char *why);

/* ---- the registry ---- */

static struct peers *
peers_get(struct gateway *gw)
{
	if (gw->peers == NULL && (gw->peers = calloc(1, sizeof(*gw->peers))) != NULL) {
		gw->peers->gw = gw;
		LIST_INIT(&gw->peers->links);
	}
	return gw->peers;
}

static void link_timer_cb(evutil_socket_t fd, short what, void *arg);

/* The link to replica, made DOWN if there is none yet.  NULL with err. */
static struct link *
link_get(struct peers *p, const char *replica, char *err, size_t errlen)
{
	struct link *l;

	LIST_FOREACH(l, &p->links, entry)
		if (strcmp(l->replica, replica) == 0)
			return l;
	if (p->nlinks >= PEER_LINKS_MAX) {
		snprintf(err, errlen, "linked to %d replicas already", PEER_LINKS_MAX);
		return NULL;
	}
	if ((l = calloc(1, sizeof(*l))) == NULL ||
	    (l->held = evbuffer_new()) == NULL ||
	    (l->timer = evtimer_new(p->gw->base, link_timer_cb, l)) == NULL) {
		if (l != NULL && l->held != NULL)
			evbuffer_free(l->held);
		free(l);
		snprintf(err, errlen, "out of memory");
		return NULL;
	}
	l->peers = p;
	l->state = LINK_DOWN;
	snprintf(l->replica, sizeof(l->replica), "%s", replica);
	LIST_INSERT_HEAD(&p->links, l, entry);
	p->nlinks++;
	return l;
}

/* A replica id as --replica-id takes it: 1..63 of [A-Za-z0-9._-]. */
static int
replica_id_ok(const char *s)
{
	size_t n = strlen(s);

	return n >= 1 && n <= REPLICA_MAX && strspn(s, "ABCDEFGHIJKLMNOPQRSTUVWXYZ"
	    "abcdefghijklmnopqrstuvwxyz0123456789._-") == n;
}

/* ---- the multiplexer's transport until the link is up ---- */

/* DIALING: OPENs (and RESETs) wait in `held`, in order. */
static int
link_hold(void *io, const struct iovec *iov, int iovcnt)
{
	struct link *l = io;
	uint32_t len = 0;

	if (l->state != LINK_DIALING || l->nheld >= PEER_HELD_MAX)
		return -1;
	for (int i = 0; i < iovcnt; i++)
		len += (uint32_t)iov[i].iov_len;
	if (evbuffer_add(l->held, &len, sizeof(len)) != 0)
		return -1;
	for (int i = 0; i < iovcnt; i++)
		if (evbuffer_add(l->held, iov[i].iov_base, iov[i].iov_len) != 0)
			return -1;
	l->nheld++;
	return 0;
}

/* Until the link is up nothing but OPENs (and RESETs) may go: report it
 * full, so no DATA is fed (none can be before OPEN_OK anyway). */
static size_t
link_hold_pending(void *io)
{
	return SIZE_MAX / 2;
}

static const struct mux_io link_hold_io = {
	.sendv = link_hold,
	.pending = link_hold_pending,
};

/* Sends a whole frame (PING, PONG) on an up link. */
static void
link_send_frame(struct link *l, const struct frame *f)
{
	uint8_t *buf;
	size_t len;

	if (l->state != LINK_UP || frame_encode(f, 0, &buf, &len) != 0)
		return;
	(void)wsface_send(l->face, buf, len, 1);
	free(buf);
}

/* ---- the far side of a stream: an OPEN from the other replica ---- */

/* Hands the OPEN to the handler the /v1/peer route set (peer_link.h). */
static void
link_on_open(struct mux *m, struct mux_stream *s, const struct frame_open *req,
    void *arg)
{
	struct link *l = arg;
	struct peers *p = l->peers;

	if (p->on_open == NULL) {
		mux_stream_refuse(s, "agent_not_here", "this replica takes no streams "
		    "from other replicas");
		return;
	}
	p->on_open(p->gw, l->replica, s, req);
}

static const struct mux_handlers link_mux_handlers = {
	.on_open = link_on_open,
};

static struct mux *
link_mux_new(struct link *l)
{
	struct gateway *gw = l->peers->gw;
	struct mux_config cfg = gw->mux_config;

	cfg.odd_ids = strcmp(gw->replica_id, l->replica) < 0;
	cfg.max_streams = PEER_MAX_STREAMS;
	cfg.counted = 0;
	cfg.budget = &gw->budget;
	return mux_new(gw->base, &cfg, &link_hold_io, l, &link_mux_handlers, l);
}

/* ---- messages, both directions ---- */

static void
link_on_message(struct link *l, const uint8_t *data, size_t len, int binary)
{
	struct frame f, pong;
	char err[256], why[300];
	int rc = binary ? frame_decode(data, len, &f, err, sizeof(err)) : -1;

	l->heard_ms = runtime_monotonic_ms();
	if (rc == FRAME_UNKNOWN_TYPE) {
		/* A newer replica's frame (a rolling upgrade): skipped. */
		debug("peer link: frame of an unknown type skipped",
		    KV_S("replica", l->replica), KV_S("err", err));
		return;
	}
	if (rc != 0) {
		snprintf(why, sizeof(why), "replica %s sent a bad frame: %s", l->replica,
		    binary ? err : "a text message");
		link_down(l, why);
		return;
	}
	if (f.type == FRAME_PING) {
		memset(&pong, 0, sizeof(pong));
		pong.type = FRAME_PONG;
		pong.u.ping.seq = f.u.ping.seq;
		link_send_frame(l, &pong);
		return;
	}
	if (f.type == FRAME_PONG)
		return;
	if (f.type < FRAME_OPEN) {
		snprintf(why, sizeof(why), "replica %s sent %s on a peer link",
		    l->replica, frame_type_name(f.type));
		link_down(l, why);
		return;
	}
	if (mux_on_frame(l->mux, &f, err, sizeof(err)) != 0) {
		snprintf(why, sizeof(why), "replica %s broke the stream protocol: %s",
		    l->replica, err);
		link_down(l, why);
	}
}

/* The transport is up: the held OPENs go, in order, then the multiplexer
 * writes to the WebSocket itself. */
static void
link_up(struct link *l)
{
	struct gateway *gw = l->peers->gw;
	uint32_t len;
	uint8_t *p;

	l->state = LINK_UP;
	l->backoff_ms = 0;
	l->heard_ms = runtime_monotonic_ms();
	while (l->nheld > 0 && evbuffer_remove(l->held, &len, sizeof(len)) == sizeof(len)) {
		p = evbuffer_pullup(l->held, len);
		if (p != NULL)
			(void)wsface_send(l->face, p, len, 1);
		evbuffer_drain(l->held, len);
		l->nheld--;
	}
	evbuffer_drain(l->held, evbuffer_get_length(l->held));
	l->nheld = 0;
	mux_set_io(l->mux, &wsmux_io, l->face);
	evtimer_del(l->timer);
	if (l->dialed) {
		struct timeval tv = runtime_ms_timeval(gw->limits.ping_interval_ms / 2);

		event_add(l->timer, &tv);
	}
	info("peer link up", KV_S("replica", l->replica),
	    KV_S("dialed", l->dialed ? "here" : "there"));
}

/* ---- the link's WebSocket, whoever dialled it ---- */

static void
face_open(struct wsface *f, void *arg)
{
	link_up(arg);
}

static void
face_message(struct wsface *f, const uint8_t *data, size_t len, int binary, void *arg)
{
	link_on_message(arg, data, len, binary);
}

static void
face_drain(struct wsface *f, void *arg)
{
	struct link *l = arg;

	if (l->mux != NULL)
		mux_on_drain(l->mux);
}

static void
face_ping(struct wsface *f, void *arg)
{
	struct link *l = arg;

	l->heard_ms = runtime_monotonic_ms();
}

/* The face is freed when this returns: the link lets go of it first. */
static void
face_close(struct wsface *f, int status, const char *reason, void *arg)
{
	struct link *l = arg;
	char why[300];

	l->face = NULL;
	if (status == 409 && l->state == LINK_DIALING) {
		/* Both dialed at once; theirs wins and is on its way. */
		debug("peer link: our dial lost to theirs", KV_S("replica", l->replica));
		return;
	}
	if (!l->dialed)
		snprintf(why, sizeof(why), "link from replica %s: %s", l->replica,
		    reason);
	else if (status == 101 || status == 0)
		snprintf(why, sizeof(why), "link to replica %s at %s: %s", l->replica,
		    l->url, reason);
	else
		snprintf(why, sizeof(why), "link to replica %s at %s: HTTP %d: %s",
		    l->replica, l->url, status, reason);
	link_down(l, why);
}

static const struct wsface_handlers link_face_handlers = {
	.on_open = face_open,
	.on_message = face_message,
	.on_drain = face_drain,
	.on_close = face_close,
	.on_ping = face_ping,
};

/* The dialing side's TLS: our peer credential (peer.crt, peer.key) as the
 * client's certificate, the far side verified against ca.crt (tlspeer.h). */
static SSL_CTX *
peers_tls(struct peers *p, char *err, size_t errlen)
{
	const char *dir = p->gw->data_dir;
	char path[4200];
	SSL_CTX *ctx;

	if (p->tls != NULL)
		return p->tls;
	snprintf(path, sizeof(path), "%s/ca.crt", dir);
	if ((ctx = wsclient_tls_context(path, err, errlen)) == NULL)
		return NULL;
	snprintf(path, sizeof(path), "%s/peer.crt", dir);
	if (SSL_CTX_use_certificate_chain_file(ctx, path) != 1) {
		snprintf(err, errlen, "cannot load %s (the replicas' own credential: "
		    "'tether-gateway cert renew' makes peer.crt and peer.key where "
		    "ca.key is; copy both here)", path);
		goto fail;
	}
	snprintf(path, sizeof(path), "%s/peer.key", dir);
	if (SSL_CTX_use_PrivateKey_file(ctx, path, SSL_FILETYPE_PEM) != 1 ||
	    SSL_CTX_check_private_key(ctx) != 1) {
		snprintf(err, errlen, "cannot load %s (or it is not peer.crt's key)",
		    path);
		goto fail;
	}
	if (tlspeer_setup(ctx, dir, TLSPEER_DIAL, err, errlen) != 0)
		goto fail;
	p->tls = ctx;
	return ctx;
fail:
	ERR_clear_error();   /* the loop's later SSL_get_error reads the queue */
	SSL_CTX_free(ctx);
	return NULL;
}

/* DOWN -> DIALING.  0, or -1 with err (the link stays DOWN). */
static int
link_dial(struct link *l, char *err, size_t errlen)
{
	struct gateway *gw = l->peers->gw;
	struct timeval tv = runtime_ms_timeval(PEER_WAIT_MS);
	char url[300], header[128];
	struct wsclient_config cfg = { 0 };
	SSL_CTX *tls = peers_tls(l->peers, err, errlen);

	if (tls == NULL)
		return -1;
	if (strncmp(l->url, "https://", 8) != 0) {
		snprintf(err, errlen, "replica %s has no https:// peer URL (%s)",
		    l->replica, l->url[0] != '\0' ? l->url : "none");
		return -1;
	}
	snprintf(url, sizeof(url), "wss://%s%s", l->url + 8, PEER_PATH);
	snprintf(header, sizeof(header), "%s: %s", PEER_HEADER, gw->replica_id);
	cfg.url = url;
	cfg.subprotocol = PEER_SUBPROTOCOL;
	cfg.tls_ctx = tls;
	cfg.header = header;
	cfg.max_message = gw->limits.max_frame_bytes;
	cfg.max_queue = (size_t)gw->limits.max_queue_bytes + gw->mux_config.tx_high_water;
	cfg.low_water = gw->mux_config.tx_high_water / 2;
	cfg.connect_timeout_ms = PEER_CONNECT_TIMEOUT_MS;
	if ((l->mux = link_mux_new(l)) == NULL) {
		snprintf(err, errlen, "out of memory");
		return -1;
	}
	l->face = wsclient_connect(gw->base, &cfg, &link_face_handlers, l, err, errlen);
	if (l->face == NULL) {
		mux_free(l->mux);
		l->mux = NULL;
		return -1;
	}
	l->dialed = 1;
	l->state = LINK_DIALING;
	event_add(l->timer, &tv);
	debug("peer link dialing", KV_S("replica", l->replica), KV_S("url", url));
	return 0;
}

/* ---- timers and the end of a link ---- */

static void
link_timer_cb(evutil_socket_t fd, short what, void *arg)
{
	struct link *l = arg;
	struct gateway *gw = l->peers->gw;
	int64_t quiet = runtime_monotonic_ms() - l->heard_ms;
	struct timeval tv = runtime_ms_timeval(gw->limits.ping_interval_ms / 2);
	struct frame ping;
	char why[200];

	if (l->state == LINK_DIALING) {
		snprintf(why, sizeof(why), "no link to replica %s at %s within %d ms",
		    l->replica, l->url, PEER_WAIT_MS);
		link_down(l, why);
		return;
	}
	if (l->state != LINK_UP)
		return;
	if (quiet > (int64_t)gw->limits.ping_interval_ms + gw->limits.ping_timeout_ms) {
		snprintf(why, sizeof(why), "replica %s said nothing for %lld ms",
		    l->replica, (long long)quiet);
		link_down(l, why);
		return;
	}
	if (quiet >= (int64_t)gw->limits.ping_interval_ms) {
		memset(&ping, 0, sizeof(ping));
		ping.type = FRAME_PING;
		ping.u.ping.seq = ++l->ping_seq;
		link_send_frame(l, &ping);
	}
	event_add(l->timer, &tv);
}

/*
 * Ends the link's transport and multiplexer (from a callback of the
 * transport or a timer, never inside a mux call): streams still opening are
 * refused with "peer_unreachable", open ones end (tunnel_lost).  The next
 * use dials again after the backoff.
 */
static void
link_down(struct link *l, const char *why)
{
	struct mux *m = l->mux;
	char reason[FRAME_REASON_MAX + 1];
	int was_up = l->state == LINK_UP;

	if (l->state == LINK_DOWN)
		return;
	snprintf(l->why, sizeof(l->why), "%s", why);
	/* The streams ended below send nothing (link_hold refuses when not
	 * DIALING): the face is let go first. */
	if (m != NULL)
		mux_set_io(m, &link_hold_io, l);
	if (l->face != NULL) {
		wsface_close(l->face, 1011, "link ended");
		wsface_free(l->face);
	}
	l->face = NULL;
	evtimer_del(l->timer);
	evbuffer_drain(l->held, evbuffer_get_length(l->held));
	l->nheld = 0;
	l->mux = NULL;
	l->state = LINK_DOWN;
	if (!was_up)
		l->backoff_ms = l->backoff_ms == 0 ? PEER_BACKOFF_MIN_MS :
		    l->backoff_ms * 2 > PEER_BACKOFF_MAX_MS ? PEER_BACKOFF_MAX_MS :
		    l->backoff_ms * 2;
	l->retry_ms = runtime_monotonic_ms() + l->backoff_ms;
	warn("peer link down", KV_S("replica", l->replica), KV_S("reason", why),
	    KV_U("streams", m != NULL ? mux_stream_count(m) : 0),
	    KV_U("retry_ms", l->backoff_ms));
	snprintf(reason, sizeof(reason), "%s", why);
	mux_free_as(m, "peer_unreachable", reason);
}

/* ---- their dial arrives (peer_link.h) ---- */

/* Takes the accepted connection as l's transport (l DOWN or DIALING). */
static int
link_adopt(struct link *l, struct upgrade *u)
{
	struct gateway *gw = l->peers->gw;
	struct wsface *theirs;

	if (l->mux == NULL && (l->mux = link_mux_new(l)) == NULL) {
		upgrade_refuse(u, 500, "out of memory");
		return -1;
	}
	theirs = upgrade_accept(u, PEER_SUBPROTOCOL, &link_face_handlers, l);
	if (theirs == NULL) {
		if (l->state == LINK_DOWN) {
			mux_free(l->mux);
			l->mux = NULL;
		}
		return -1;
	}
	if (l->face != NULL)          /* our own dial lost to theirs */
		wsface_free(l->face);
	l->face = theirs;
	l->dialed = 0;
	wsface_set_max_message(l->face, gw->limits.max_frame_bytes);
	wsface_set_max_queue(l->face, (size_t)gw->limits.max_queue_bytes +
	    gw->mux_config.tx_high_water);
	wsface_set_low_water(l->face, gw->mux_config.tx_high_water / 2);
	link_up(l);
	return 0;
}

void
peer_link_accept(struct gateway *gw, const char *replica, struct upgrade *u)
{
	struct peers *p;
	struct link *l;
	char err[160];

	if (!replica_id_ok(replica) || strcmp(replica, gw->replica_id) == 0) {
		upgrade_refuse(u, 400, PEER_PATH " needs the dialing replica's id "
		    "(1 to 63 of A-Z a-z 0-9 . _ -, not this replica's) in " PEER_HEADER);
		return;
	}
	if ((p = peers_get(gw)) == NULL) {
		upgrade_refuse(u, 500, "out of memory");
		return;
	}
	if ((l = link_get(p, replica, err, sizeof(err))) == NULL) {
		upgrade_refuse(u, 503, err);
		return;
	}
	if (l->state == LINK_DIALING && l->face != NULL &&
	    strcmp(gw->replica_id, replica) < 0) {
		upgrade_refuse(u, 409, "both replicas dialed: the link this replica "
		    "dialed wins");
		return;
	}
	if (l->state == LINK_UP)
		link_down(l, "the replica dialed a new link");
	(void)link_adopt(l, u);
}

int
peer_link_set_open_handler(struct gateway *gw, peer_link_open_fn *on_open)
{
	struct peers *p = peers_get(gw);

	if (p == NULL)
		return -1;
	p->on_open = on_open;
	return 0;
}

/* ---- opening a stream (peer_link.h) ---- */

struct mux_stream *
peer_link_open_stream(struct gateway *gw, const char *replica, const char *peer_url,
    const char *agent_id, const char *principal, const char *target, const char *service,
    const struct mux_stream_handlers *h, void *arg, char *err, size_t errlen)
{
	struct budget_account *who;
	struct frame_open req;
	struct mux_stream *st;
	struct peers *p;
	struct link *l;
	int64_t now;

	if (!replica_id_ok(replica) || strcmp(replica, gw->replica_id) == 0 ||
	    strlen(agent_id) > FRAME_ID_MAX || strlen(principal) > FRAME_PRINCIPAL_MAX ||
	    strlen(peer_url) >= sizeof(l->url)) {
		snprintf(err, errlen, "cannot reach agent %.63s on replica %.63s: bad "
		    "replica, agent or principal", agent_id, replica);
		return NULL;
	}
	if ((p = peers_get(gw)) == NULL) {
		snprintf(err, errlen, "out of memory");
		return NULL;
	}
	if ((l = link_get(p, replica, err, errlen)) == NULL)
		return NULL;
	snprintf(l->url, sizeof(l->url), "%s", peer_url);
	if (l->state == LINK_DOWN) {
		now = runtime_monotonic_ms();
		if (now < l->retry_ms) {
			snprintf(err, errlen, "%s (next try in %lld ms)", l->why,
			    (long long)(l->retry_ms - now));
			return NULL;
		}
		if (link_dial(l, err, errlen) != 0)
			return NULL;
	}
	if (l->state == LINK_DIALING && mux_stream_count(l->mux) >= PEER_WAITING_MAX) {
		snprintf(err, errlen, "%d streams wait already for the link to replica %s",
		    PEER_WAITING_MAX, replica);
		return NULL;
	}
	if ((who = shares_principal(gw, principal)) == NULL) {
		snprintf(err, errlen, "out of memory");
		return NULL;
	}
	frame_open_init(&req, target, service);
	snprintf(req.agent, sizeof(req.agent), "%s", agent_id);
	snprintf(req.principal, sizeof(req.principal), "%s", principal);
	st = mux_open(l->mux, who, &req, h, arg);
	shares_unpin(gw, who);         /* the stream's charge holds it now */
	if (st == NULL)
		snprintf(err, errlen, "link to replica %s: %s", replica, mux_refusal(l->mux));
	return st;
}

void
peer_link_tls_renewed(struct gateway *gw)
{
	struct peers *p = gw->peers;

	/* Each link's connection holds its own reference (wsclient.c). */
	if (p != NULL && p->tls != NULL) {
		SSL_CTX_free(p->tls);
		p->tls = NULL;
	}
}

void
peer_link_shutdown(struct gateway *gw)
{
	struct peers *p = gw->peers;
	struct link *l;

	if (p == NULL)
		return;
	while ((l = LIST_FIRST(&p->links)) != NULL) {
		link_down(l, "the gateway is stopping");
		LIST_REMOVE(l, entry);
		event_free(l->timer);
		evbuffer_free(l->held);
		free(l);
	}
	if (p->tls != NULL)
		SSL_CTX_free(p->tls);
	free(p);
	gw->peers = NULL;
	/* The dialed links' memory goes from the loop (wsclient.h). */
	runtime_drain(gw->base);
}
