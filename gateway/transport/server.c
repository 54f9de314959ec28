/*
 * server.c: the gateway's one listening port (see server.h): TLS on
 * libevent bufferevents, HTTP/1.1 requests (http.c) and WebSocket
 * handshakes, each handed to the route registered for its path (route.h).
 *
 * A connection starts as a struct hconn speaking HTTP:
 *
 *   READING --request--> answered: READING again (keep-alive)
 *      |                     or CLOSING --written--> LINGERING --EOF/2 s--> freed
 *      |--request, answered later--> REPLYING --reply_send--> as answered
 *      |                  \------http timeout--> 504, CLOSING
 *      |--upgrade--> UPGRADING --upgrade_accept--> handed over to a wsconn
 *      |                  \------upgrade_refuse--> CLOSING
 *      `--exchange head--> EXCHANGING --exchange_finish--> READING or CLOSING
 *                             \--exchange_abort / client gone--> freed
 *
 * Handing over moves the bufferevent (socket, SSL, buffered input) to a
 * struct wsconn (wsconn.c) and frees the hconn, so an idle WebSocket (an
 * agent tunnel, tunnel.c) carries nothing of HTTP.
 *
 * Every bufferevent is made with BEV_OPT_DEFER_CALLBACKS: adding to an
 * output buffer may write to the socket at once, and without deferral a
 * write error would run the event callback (and free the connection) inside
 * whatever call queued the bytes.
 *
 * Before TLS or HTTP, a connection may carry a PROXY protocol v2 header
 * (docs/0017): with --trusted-proxy set, every accepted socket first
 * becomes a struct preface that peeks at its first byte.  No header (the
 * first byte is not the signature's): it is handed to a hconn untouched,
 * unless it comes from a trusted source and --require-proxy-header is on
 * (then the client behind the balancer would choose nothing, but the
 * balancer's address would stand for it: refused).  A
 * header from a trusted source is read (exactly its length, at most
 * PROXY_V2_MAX bytes) and its client address becomes the connection's
 * peer; from any other source it is refused.  The --plain-listen port
 * speaks HTTP without TLS and takes connections from trusted sources only.
 * The mutual-TLS port (--peer-listen, docs/0020) requires a replica's
 * certificate at the handshake (tlspeer.h) and serves only the routes
 * marked mtls_port; the main port asks for a certificate but takes any
 * answer, and tells the routes whether a replica's came.
 *
 * Buffer ownership: a hconn owns its bufferevent, its timer and its reader
 * (the request being read, bounded by HTTP_HEAD_MAX and max_body_bytes); a
 * response body is handed to the output buffer by reference and freed by it.
 */
#include "server.h"

#include <assert.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/queue.h>
#include <poll.h>
#include <sys/socket.h>
#include <pthread.h>
#include <stdatomic.h>
#include <time.h>
#include <unistd.h>

#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/bufferevent_ssl.h>
#include <event2/event.h>
#include <event2/listener.h>
#include <event2/util.h>
#include <http_parser.h>
#include <jansson.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/sha.h>
#include <openssl/ssl.h>

#include "gateway.h"
#include "http.h"
#include "log.h"
#include "loop.h"
#include "netaddr.h"
#include "proxyv2.h"
#include "route.h"
#include "srccount.h"
#include "runtime.h"
#include "tlsloop.h"
#include "tlspeer.h"
#include "tlsread.h"
#include "tlssuites.h"
#include "tlswrite.h"
#include "wsconn.h"
#include "wsframe.h"

#define LISTEN_BACKLOG      1024
#define ACCEPT_RETRY_MS     1000     /* after accept failed (out of fds) */
#define ACCEPT_LOG_MS       10000    /* at most one line per cap refusals */
#define HTTP_OUTPUT_HIGH    65536    /* read no request while more is queued */
#define HTTP_LINGER_MS      2000     /* after the last answer: wait for EOF */
#define UPGRADE_PARK_MAX    4096     /* input held while an upgrade is decided */
#define PEER_MAX            64

struct hconn;
struct preface;
struct server;
struct conn_release;

/* Which listener a connection came from. */
enum conn_port {
	PORT_TLS,         /* the main port */
	PORT_PLAIN,       /* --plain-listen: plain HTTP from trusted proxies */
	PORT_MTLS,        /* --peer-listen: replicas only, mtls_port routes */
};

/* An accepted connection waiting for a TLS handshake slot
 * (--max-tls-handshakes): only its descriptor, no TLS state yet. */
struct tls_waiter {
	evutil_socket_t fd;
	int64_t since_ms;                 /* monotonic: when it was accepted */
	enum conn_port port;              /* PORT_TLS or PORT_MTLS */
	int exempt;                       /* a --trusted-proxy's own: no share */
	int evented;                      /* had an event on loop 0 (a PROXY
	                                   * preface): leaves it a pass later */
	char peer[PEER_MAX];
};

/* A loop's part of the server (docs/0040 section 2): the HTTP connections
 * and WebSockets that live on that loop, touched only by its thread.
 * Loop k's set is made (serve_loop_start) and freed (serve_loop_stop) on
 * loop k's own thread: wsconn_set_new arms its events on the loop's base. */
struct server_loop {
	struct server *srv;
	struct loop *loop;                /* NULL: no loops (one, unit tests) */
	unsigned index;                   /* 0..nloops-1 */
	struct event_base *base;
	LIST_HEAD(hconn_list, hconn) http;
	struct wsconn_set *ws;            /* every WebSocket of this loop, their
	                                   * ping wheel; NULL until made (loop k:
	                                   * its first message) or if out of
	                                   * memory there */
	int stopped;                      /* serve_loop_stop ran: nothing lands */
	struct conn_release *released;    /* places to give back to loop 0 at
	                                   * the end of this pass (loop k) */
	struct event *release_ev;         /* active while released is not empty */
	atomic_uint owed;                 /* its hconns neither lingering nor
	                                   * done (loop 0 reads it at a drain:
	                                   * server_unanswered) */
};

struct server {
	struct gateway *gw;
	const struct route *const *routes;  /* NULL-terminated, in order */
	const struct route *exchange;       /* the one route with that shape */
	SSL_CTX *ssl_ctx;
	SSL_CTX *mtls_ctx;                /* --peer-listen's, or NULL */
	struct evconnlistener *listener;
	struct evconnlistener *plain;     /* --plain-listen, or NULL */
	struct evconnlistener *mtls;      /* --peer-listen, or NULL */
	struct event *accept_retry;       /* re-enables the listeners */
	LIST_HEAD(preface_list, preface) prefaces;
	int port;
	/* Admission (docs/0018): at most max_tls_handshakes TLS handshakes
	 * at once; the connections accepted past that wait in a ring of
	 * max_tls_queue (cost: ~80 bytes a slot), and past that in the
	 * kernel's listen backlog (the listener is paused). */
	uint32_t tls_handshakes;
	struct tls_waiter *queue;
	uint32_t qhead, qlen;
	atomic_uint qlen_seen;            /* qlen as of its last change, for
	                                   * any loop (server_tls_waiting) */
	int listener_paused;              /* by a full queue */
	uint64_t shed;                    /* waited past the handshake timeout */
	uint64_t shed_at_accept;          /* of them, closed at accept (the
	                                   * queue held what it finishes in
	                                   * time: tls_queue_over) */
	/* Per source (docs/0028): slots and queue places held, at most
	 * --max-tls-per-source each. */
	struct srccount *tls_sources;
	/* HTTP connections (not yet a WebSocket): at most --max-connections,
	 * and --max-connections-per-source of one source (docs/0028). */
	uint32_t http_conns;
	struct srccount *http_sources;
	uint32_t prefaces_n;              /* PROXY prefaces under way */
	uint64_t refused;                 /* over a cap at accept, since start */
	uint64_t refused_logged;          /* as of the last line saying so */
	int64_t refused_log_ms;           /* monotonic: that line's time */
	int plain_port;
	int mtls_port;
	/* Loops (--workers, docs/0032 and 0040; gw->loops, core/loop.h):
	 * loop 0 is gw->base, where admission and every count live; each loop
	 * runs TLS handshakes (pick_loop), as tlsloop.h jobs (loop 0's
	 * too when its connection lands by its request line: lands_by_line)
	 * or, on loop 0, inline (hconn_tls_timer).  Per loop: handshakes it
	 * holds now and finished since start. */
	struct tlsloops *loops;           /* NULL with --workers 1 */
	unsigned nloops;
	unsigned loop_next;               /* where the next pick starts */
	uint32_t *loop_inflight;          /* [nloops] */
	uint64_t *loop_handshakes;        /* [nloops] */
	struct server_loop *per;          /* [nloops]: each loop's connections */
	int loops_stopping;               /* server_stop_loops ran */
	int closing;                      /* server_stop under way */
};

/* A TLS handshake given to a loop as a job: what the connection becomes
 * once it is back (tls_job_done). */
struct tls_job {
	struct tlsloop_job job;           /* first: the loop's part */
	struct server *srv;
	enum conn_port port;
	int exempt;
	int home_counted;                 /* tls_land sent it home: counted in
	                                     loop 0's nconns from then on */
	struct loop *weighed;             /* tls_land sent it home weighed
	                                     (land_where): its hconn's, or
	                                     given back (weigh_put); or NULL */
	unsigned to;                      /* the loop its handshake runs on */
	char peer[PEER_MAX];
};

/* An accepted socket before TLS/HTTP: a PROXY header may come first.
 * On the plain port, when connections land by their request line
 * (lands_by_line), the line is read here too (head), after the header.
 * Memory: ~1.2 KiB, only until the header is read or found absent, and
 * LAND_LINE_MAX more while a line is read. */
struct preface {
	LIST_ENTRY(preface) link;         /* in server.prefaces */
	struct server *srv;
	evutil_socket_t fd;
	struct event *ev;                 /* readable, or the deadline */
	enum conn_port port;              /* the listener it came from */
	int trusted;                      /* the source is a --trusted-proxy */
	int named;                        /* a PROXY header named the client */
	int counted;                      /* in srv->tls_sources as sock_peer */
	char sock_peer[PEER_MAX];         /* the socket's own peer */
	int64_t deadline_ms;              /* the whole header by then */
	size_t have;                      /* header bytes read so far */
	uint8_t buf[PROXY_V2_MAX];
	int64_t line_since_ms;            /* monotonic: its line's wait began;
	                                   * 0: not reading a line */
	char *head;                       /* the line read so far (malloc'd,
	                                   * LAND_LINE_MAX), or NULL */
	size_t head_len;
	char peer[PEER_MAX];
};

enum hconn_state {
	HC_READING,       /* reading a request, or idle between two */
	HC_UPGRADING,     /* a route deciding an upgrade: input parked */
	HC_CLOSING,       /* the last answer is queued: write it */
	HC_LINGERING,     /* close_notify sent: drop input until EOF or deadline */
	HC_EXCHANGING,    /* an exchange (its route's) owns the connection */
	HC_REPLYING,      /* a request route answers later: input parked */
	HC_DONE,          /* handed over or ended: freed by its timer, soon */
	HC_ENTRIES        /* must be last */
};

static const char *const hconn_state_names[HC_ENTRIES] = {
	[HC_READING] = "reading",
	[HC_UPGRADING] = "upgrading",
	[HC_CLOSING] = "closing",
	[HC_LINGERING] = "lingering",
	[HC_EXCHANGING] = "exchanging",
	[HC_REPLYING] = "replying",
	[HC_DONE] = "done",
};

struct upgrade {
	struct hconn *h;
	void (*abandon)(void *arg);
	void *abandon_arg;
};

/* A request's answer to come (server.h: "Replies later"): the route's
 * until reply_send; h is NULL once the connection cannot take it. */
struct reply {
	struct hconn *h;
	const struct route *route;        /* for logs */
};

struct hconn {
	LIST_ENTRY(hconn) link;           /* in its loop's http */
	struct server *srv;
	struct server_loop *sl;           /* the loop it lives on */
	struct bufferevent *bev;          /* NULL once handed to a wsconn */
	struct event *timer;              /* request, flush or linger deadline */
	/* The deadline (monotonic ms; 0: none, as while an exchange runs) and
	 * when the timer, if pending, fires (0: not pending): see hconn_arm. */
	int64_t deadline_ms, timer_at_ms;
	struct http_reader *reader;
	struct upgrade upgrade;           /* HC_UPGRADING */
	struct reply *reply;              /* HC_REPLYING: the route holds it */
	unsigned replies;                 /* tickets taken, ever (hconn_request) */
	enum hconn_state state;
	int read_blocked;                 /* output over HTTP_OUTPUT_HIGH */
	void *x;                          /* HC_EXCHANGING: the route's exchange */
	int x_req_done;                   /* its request was read whole */
	int x_raw;                        /* after a 101: input is raw bytes */
	int x_keep;                       /* the client allows keep-alive */
	int tls_counted;                  /* in srv->tls_handshakes */
	int owed;                         /* in sl->owed */
	int exempt;                       /* a --trusted-proxy's own: no share */
	struct loop *weighed;             /* counted in its tunnel_side (its
	                                     landing weighed it: land_where),
	                                     given back in hconn_free; or NULL */
	int keeps_counts;                 /* HC_UPGRADING: its route's
	                                     keeps_counts (a dial) */
	int counts_handed;                /* its places in nconns and
	                                     tunnel_side are its wsconn's now
	                                     (wsconn_keep_counts) */
	unsigned requests;                /* request heads read, ever */
	int64_t tls_since_ms;             /* monotonic: when it took its slot */
	enum conn_port port;              /* the listener it came from */
	void *kept;                       /* a route's state between exchanges */
	void (*kept_free)(void *);
	char ws_accept[WS_ACCEPT_LEN + 1];
	char peer[PEER_MAX];
};

static void hconn_process(struct hconn *h);
static void hconn_kick_read(struct hconn *h);
static void hconn_linger(struct hconn *h);
static void tls_slot_free(struct hconn *h);
static void tls_slot_release(struct server *srv, const char *peer, int exempt,
    int64_t began_ms);
static void hconn_tls_timer(struct hconn *h);
static void tls_job_done(struct tlsloop_job *job, void *arg);
static int hconn_idle(const struct hconn *h);
static int conn_admit(struct server *srv, const char *peer, int exempt);

/* h no longer owes an answer (lingering, done or freed). */
static void
hconn_unowe(struct hconn *h)
{
	if (!h->owed)
		return;
	h->owed = 0;
	atomic_fetch_sub_explicit(&h->sl->owed, 1, memory_order_relaxed);
}

static void
hconn_set_state(struct hconn *h, enum hconn_state next)
{
	debug("http state", KV_S("peer", h->peer),    /* twice a request */
	    KV_S("from", hconn_state_names[h->state]),
	    KV_S("to", hconn_state_names[next]));
	h->state = next;
	if (next == HC_LINGERING || next == HC_DONE)
		hconn_unowe(h);
}

/*
 * h's deadline is ms from now.  The timer is added only when it is not
 * pending already to fire by then: a timer that fires before the
 * deadline is added again for the rest (hconn_timer_cb).  A keep-alive
 * connection's every request took the timer off (hconn_disarm) and put it
 * back (~350 instructions of a /k8s request: libevent's heap); now a
 * request sets two numbers, and a connection busy for longer than its
 * timeout wakes once more per timeout.  Cost: one clock read.
 */
static void
hconn_arm(struct hconn *h, uint32_t ms)
{
	struct timeval tv = runtime_ms_timeval(ms);

	h->deadline_ms = runtime_monotonic_ms() + ms;
	if (h->timer_at_ms != 0 && h->timer_at_ms <= h->deadline_ms)
		return;
	if (evtimer_add(h->timer, &tv) == 0)
		h->timer_at_ms = h->deadline_ms;
}

/* No deadline (an exchange, an upgrade: they last).  The timer, if
 * pending, is left to fire and finds none. */
static void
hconn_disarm(struct hconn *h)
{
	h->deadline_ms = 0;
}

/* The connection will not carry the answer it waits for: the ticket stays
 * the route's, and reply_send only frees it. */
static void
hconn_drop_reply(struct hconn *h)
{
	if (h->reply == NULL)
		return;
	debug("http: the answer to come is dropped", KV_S("peer", h->peer),
	    KV_S("route", h->reply->route->name));
	h->reply->h = NULL;
	h->reply = NULL;
}

/* A connection landed on loop k ended or became a WebSocket: its place in
 * --max-connections and its source's share, loop 0's counts (docs/0040
 * section 3), go back there. */
struct conn_release {
	struct server *srv;
	struct conn_release *next;        /* the rest of the batch */
	int exempt;
	char peer[PEER_MAX];
};

/* On loop 0: a batch of released places (one loop's pass). */
static void
conn_release_home(void *arg)
{
	struct conn_release *r = arg, *next;

	for (; r != NULL; r = next) {
		next = r->next;
		r->srv->http_conns--;
		if (!r->exempt)
			srccount_put(r->srv->http_sources, r->peer);
		free(r);
	}
}

/* Loop 0 stopped first: nothing left to count. */
static void
conn_release_drop(void *arg)
{
	struct conn_release *r = arg, *next;

	for (; r != NULL; r = next) {
		next = r->next;
		free(r);
	}
}

/* Sends sl's batch to loop 0 (one message). */
static void
conn_release_flush(struct server_loop *sl)
{
	struct conn_release *batch = sl->released;

	sl->released = NULL;
	if (batch != NULL)
		(void)loop_call(sl->srv->per[0].loop, conn_release_home, batch,
		    conn_release_drop);
}

/* The end of a pass in which connections ended on this loop. */
static void
conn_release_cb(evutil_socket_t fd, short what, void *arg)
{
	conn_release_flush(arg);
}

/* Tells loop 0 (from loop k) that a connection's place is free: batched
 * per pass of the calling loop when it is one of the server's running
 * loops (one message for the pass), else sent at once. */
static void
server_conn_released(struct server *srv, const char *peer, int exempt)
{
	struct conn_release *r = malloc(sizeof(*r));
	struct loop *self = loop_self();
	struct server_loop *sl = self != NULL && self->index < srv->nloops &&
	    srv->per[self->index].loop == self ? &srv->per[self->index] : NULL;

	if (r == NULL) {
		/* Its place stays taken: one fewer connection until restart. */
		warn("http: out of memory telling loop 0 a connection ended",
		    KV_S("peer", peer));
		return;
	}
	r->srv = srv;
	r->next = NULL;
	r->exempt = exempt;
	snprintf(r->peer, sizeof(r->peer), "%s", peer);
	if (sl == NULL || sl->release_ev == NULL) {
		(void)loop_call(srv->per[0].loop, conn_release_home, r,
		    conn_release_drop);
		return;
	}
	if (sl->released == NULL)
		event_active(sl->release_ev, EV_TIMEOUT, 1);
	r->next = sl->released;
	sl->released = r;
}

/* sl's count of HTTP connections for any thread (loop->nconns, the
 * landing's guard): up by one (up) or down. */
static void
conns_count(struct server_loop *sl, int up)
{
	if (sl->loop == NULL)
		return;
	if (up)
		atomic_fetch_add_explicit(&sl->loop->nconns, 1, memory_order_relaxed);
	else
		loop_counts_put(sl->loop, NULL);
}

/* A landing's tunnel side given back (loop->tunnel_side; land_where
 * counted it): once per weighed connection, when it ends or fails before
 * it is a hconn, from any thread.  NULL: none was counted. */
static void
weigh_put(struct loop *weighed)
{
	loop_counts_put(NULL, weighed);
}

static void
hconn_free(struct hconn *h)
{
	LIST_REMOVE(h, link);
	if (!h->counts_handed)
		conns_count(h->sl, 0);
	weigh_put(h->weighed);
	hconn_unowe(h);
	hconn_drop_reply(h);
	if (h->tls_counted)
		tls_slot_free(h);
	if (h->sl->index == 0) {
		h->srv->http_conns--;
		if (!h->exempt)
			srccount_put(h->srv->http_sources, h->peer);
	} else
		server_conn_released(h->srv, h->peer, h->exempt);
	if (h->kept != NULL) {
		void *kept = h->kept;

		h->kept = NULL;
		h->kept_free(kept);
	}
	if (h->x != NULL) {
		void *x = h->x;

		h->x = NULL;
		h->srv->exchange->exchange->client_gone(x);
	}
	if (h->bev != NULL)
		bufferevent_free(h->bev);
	event_free(h->timer);
	http_reader_free(h->reader);
	free(h);
}

/*
 * Ends the connection from the loop (docs/0015-lifecycle.md): it is marked
 * HC_DONE, hears nothing more from its bufferevent, and its timer, made
 * active now, frees it once every call on the stack has returned.  Safe
 * anywhere, any number of times.
 */
static void
hconn_end(struct hconn *h)
{
	if (h->state == HC_DONE)
		return;
	hconn_drop_reply(h);
	hconn_set_state(h, HC_DONE);
	if (h->bev != NULL) {
		bufferevent_setcb(h->bev, NULL, NULL, NULL, NULL);
		bufferevent_disable(h->bev, EV_READ | EV_WRITE);
	}
	event_active(h->timer, EV_TIMEOUT, 1);
}

/* ---- answers ---- */

/* Answers may hold secrets (a new token, a kubeconfig): wiped, then freed. */
static void
free_body(const void *data, size_t len, void *arg)
{
	if (data != NULL)
		OPENSSL_cleanse((void *)data, len);
	free((void *)data);
}

/*
 * Queues one response and takes body (malloc'd, may be NULL).  keep_alive:
 * read the next request after it; else close once it is written.  headers:
 * more header lines ("Name: value\r\n"...), or NULL.
 */
static void
hconn_respond(struct hconn *h, int status, const char *type, char *body,
    size_t len, int keep_alive, int head_only, const char *headers)
{
	struct evbuffer *out = bufferevent_get_output(h->bev);
	struct gateway *gw = h->srv->gw;

	/* After SIGTERM, no connection is kept for another request. */
	if (gw->stopping)
		keep_alive = 0;
	if (evbuffer_add_printf(out, "HTTP/1.1 %d %s\r\n"
	    "Content-Type: %s\r\n"
	    "Content-Length: %zu\r\n"
	    "Cache-Control: no-store\r\n"
	    "X-Content-Type-Options: nosniff\r\n"
	    "%s%s\r\n", status, http_status_str((enum http_status)status),
	    type != NULL ? type : "text/plain", len, headers != NULL ? headers : "",
	    keep_alive ? "" : "Connection: close\r\n") < 0) {
		free_body(body, len, NULL);
		warn("http: out of memory for a response: closing", KV_S("peer", h->peer));
		hconn_end(h);
		return;
	}
	if (head_only || len == 0)
		free_body(body, len, NULL);
	else if (evbuffer_add_reference(out, body, len, free_body, NULL) != 0) {
		free_body(body, len, NULL);
		warn("http: out of memory for a response: closing", KV_S("peer", h->peer));
		hconn_end(h);
		return;
	}
	if (keep_alive) {
		http_reader_reset(h->reader);
		hconn_arm(h, gw->limits.http_timeout_ms);
		return;
	}
	hconn_set_state(h, HC_CLOSING);
	/* A client that does not read the answer is dropped at the deadline. */
	hconn_arm(h, gw->limits.http_timeout_ms);
}

/* A malloc'd {"error": reason} and newline, or NULL. */
static char *
json_error(const char *reason, size_t *len)
{
	json_t *v = json_pack("{s:s}", "error", reason);
	char *s = v != NULL ? json_dumps(v, JSON_COMPACT) : NULL;
	char *line;

	json_decref(v);
	*len = 0;
	if (s == NULL)
		return NULL;
	line = realloc(s, strlen(s) + 2);
	if (line == NULL) {
		free(s);
		return NULL;
	}
	*len = strlen(line);
	line[(*len)++] = '\n';
	line[*len] = '\0';
	return line;
}

/* Answers status with {"error": reason} and closes. */
static void
hconn_refuse(struct hconn *h, int status, const char *reason)
{
	size_t len;
	char *body = json_error(reason, &len);

	debug("http refused", KV_S("peer", h->peer), KV_I("status", status),
	    KV_S("reason", reason));
	hconn_respond(h, status, "application/json", body, len, 0, 0, NULL);
}

/* ---- WebSocket handshake ---- */

/*
 * Answers 101 and hands the connection to a new wsconn; the hconn ends.
 * Returns the wsconn, or NULL when out of memory: the client then gets 500,
 * or (if the 101 was already queued) the connection is dropped.
 */
static struct wsconn *
hconn_to_websocket(struct hconn *h, const char *subprotocol,
    const struct wsface_handlers *handlers, void *arg)
{
	struct evbuffer *out = bufferevent_get_output(h->bev);
	struct wsconn *ws;

	if (evbuffer_add_printf(out, "HTTP/1.1 101 Switching Protocols\r\n"
	    "Upgrade: websocket\r\n"
	    "Connection: Upgrade\r\n"
	    "Sec-WebSocket-Accept: %s\r\n"
	    "%s%s%s\r\n", h->ws_accept,
	    subprotocol != NULL ? "Sec-WebSocket-Protocol: " : "",
	    subprotocol != NULL ? subprotocol : "",
	    subprotocol != NULL ? "\r\n" : "") < 0) {
		hconn_refuse(h, 500, "out of memory");
		return NULL;
	}
	ws = h->sl->ws != NULL ? wsconn_new(h->sl->ws, h->bev, h->peer, handlers,
	    arg) : NULL;
	if (ws == NULL) {
		/* The 101 may be on its way: nothing else can be said. */
		warn("http: out of memory for a WebSocket: closing", KV_S("peer", h->peer));
		hconn_end(h);
		return NULL;
	}
	wsconn_set_keepalive(ws, h->srv->gw->limits.ping_interval_ms,
	    h->srv->gw->limits.ping_timeout_ms);
	/* A dial stays in the landing's counts until it ends (loop.h,
	 * nconns): its wsconn owns its places from here. */
	if (h->keeps_counts && h->sl->loop != NULL &&
	    wsconn_keep_counts(ws, h->weighed)) {
		h->counts_handed = 1;
		h->weighed = NULL;
	}
	debug("http upgraded to WebSocket", KV_S("peer", h->peer),
	    KV_S("subprotocol", subprotocol));
	h->bev = NULL;        /* the wsconn's now */
	hconn_end(h);
	return ws;
}

/* ---- upgrades (server.h) ---- */

const char *
upgrade_offered_protocols(const struct upgrade *u)
{
	return http_reader_request(u->h->reader)->ws_protocol;
}

const char *
upgrade_peer(const struct upgrade *u)
{
	return u->h->peer;
}

void
upgrade_on_abandon(struct upgrade *u, void (*cb)(void *arg), void *arg)
{
	u->abandon = cb;
	u->abandon_arg = arg;
}

struct wsface *
upgrade_accept(struct upgrade *u, const char *subprotocol,
    const struct wsface_handlers *handlers, void *arg)
{
	struct hconn *h = u->h;
	struct wsconn *ws;

	/* server.h: exactly one of accept or refuse, never after abandon. */
	assert(h->state == HC_UPGRADING);
	if (h->state != HC_UPGRADING)
		return NULL;
	ws = hconn_to_websocket(h, subprotocol, handlers, arg);
	return ws != NULL ? wsconn_face(ws) : NULL;
}

void
upgrade_refuse(struct upgrade *u, int status, const char *reason)
{
	struct hconn *h = u->h;

	assert(h->state == HC_UPGRADING);
	if (h->state != HC_UPGRADING)
		return;
	/* Unpark: the lingering close reads (and drops) what comes. */
	bufferevent_setwatermark(h->bev, EV_READ, 0, 0);
	hconn_refuse(h, status, reason);
}

void
upgrade_refuse_later(struct upgrade *u, int status, const char *reason,
    uint32_t retry_after_ms)
{
	struct hconn *h = u->h;
	char header[40];
	size_t len;
	char *body;

	assert(h->state == HC_UPGRADING);
	if (h->state != HC_UPGRADING)
		return;
	bufferevent_setwatermark(h->bev, EV_READ, 0, 0);
	snprintf(header, sizeof(header), "Retry-After: %u\r\n",
	    retry_after_ms >= 2000 ? retry_after_ms / 1000 : 1);
	body = json_error(reason, &len);
	debug("http refused", KV_S("peer", h->peer), KV_I("status", status),
	    KV_S("reason", reason), KV_U("retry_after_ms", retry_after_ms));
	hconn_respond(h, status, "application/json", body, len, 0, 0, header);
}

/* The client left while its upgrade was being decided. */
static void
hconn_abandon(struct hconn *h)
{
	struct upgrade *u = &h->upgrade;

	debug("http gone while its upgrade was decided", KV_S("peer", h->peer));
	/* No upgrade_* call may reach it from here on. */
	hconn_set_state(h, HC_DONE);
	if (u->abandon != NULL)
		u->abandon(u->abandon_arg);
}

/* The first route of the table with that shape that takes path, or NULL.
 * The mutual-TLS port serves only routes marked for it. */
static const struct route *
route_find(const struct server *srv, const char *path, int shape,
    enum conn_port port)
{
	for (const struct route *const *r = srv->routes; *r != NULL; r++) {
		int has = shape == 'r' ? (*r)->request != NULL :
		    shape == 'u' ? (*r)->upgrade != NULL : (*r)->exchange != NULL;

		if (port == PORT_MTLS && !(*r)->mtls_port)
			continue;
		if (has && ((*r)->matches == NULL || (*r)->matches(path)))
			return *r;
	}
	return NULL;
}

/* The one exchange route's matches(), for the reader (http_reader_stream). */
static int
no_exchange(const char *path)
{
	return 0;
}

/* A route whose connections live on loop 0 (a tunnel, a replica's link)
 * asked for on a connection that landed elsewhere: a later request of a
 * kept-alive connection (the first one's line landed it): refused, 421,
 * and closed; its client asks again on a new connection.  1 if so. */
static int
hconn_misplaced(struct hconn *h, const struct route *r)
{
	if (!r->home_loop || h->sl->index == 0)
		return 0;
	hconn_refuse(h, 421, "this endpoint must be the first request of its "
	    "connection: ask again on a new one");
	return 1;
}

/* 1 if the client proved a replica's certificate (tlspeer.h). */
static int
hconn_from_replica(struct hconn *h)
{
	return h->port != PORT_PLAIN && h->bev != NULL &&
	    tlspeer_is_replica(bufferevent_openssl_get_ssl(h->bev));
}

/* A valid upgrade: its route decides, now or later. */
static void
hconn_route_upgrade(struct hconn *h, const struct http_request *rq)
{
	const struct route *r = route_find(h->srv, rq->path, 'u', h->port);
	struct route_request req = {
		.method = rq->method, .path = rq->path, .query = rq->query,
		.authorization = rq->authorization, .replica = rq->replica,
		.from_replica = hconn_from_replica(h),
	};
	char reason[600];

	if (r == NULL) {
		snprintf(reason, sizeof(reason), "no WebSocket endpoint at %s",
		    rq->path);
		hconn_refuse(h, 404, reason);
		return;
	}
	if (hconn_misplaced(h, r))
		return;
	h->upgrade.h = h;
	h->keeps_counts = r->keeps_counts;
	hconn_set_state(h, HC_UPGRADING);
	hconn_disarm(h);
	/* Stop taking input, but keep reading up to a little so that a client
	 * that hangs up is noticed (EOF) and its upgrade abandoned. */
	bufferevent_setwatermark(h->bev, EV_READ, 0, UPGRADE_PARK_MAX);
	r->upgrade(h->srv->gw, &req, &h->upgrade);
}

/* A request that asks for a WebSocket: valid?  Then where to. */
static void
hconn_upgrade(struct hconn *h, const struct http_request *rq)
{
	if (strcmp(rq->method, "GET") != 0) {
		hconn_refuse(h, 400, "a WebSocket upgrade must be a GET");
		return;
	}
	if (!http_token_list_has(rq->connection, "upgrade")) {
		hconn_refuse(h, 400, "a WebSocket upgrade needs \"Connection: Upgrade\"");
		return;
	}
	if (strcmp(rq->ws_version, "13") != 0) {
		hconn_refuse(h, 400, "Sec-WebSocket-Version must be 13");
		return;
	}
	if (ws_accept_key(rq->ws_key, h->ws_accept) != 0) {
		hconn_refuse(h, 400, "Sec-WebSocket-Key must be 16 bytes in base64");
		return;
	}
	hconn_route_upgrade(h, rq);
}

/* ---- HTTP requests ---- */

/* Writes a request route's answer (resp's body is taken) for rq. */
static void
hconn_answer(struct hconn *h, const struct route *r,
    const struct http_request *rq, struct route_response *resp)
{
	if (resp->body == NULL) {
		hconn_respond(h, 500, "text/plain", strdup("out of memory\n"), 14,
		    0, 0, NULL);
		return;
	}
	if (resp->status < 100 || resp->status > 599) {
		/* A bug in a route; the client still gets an answer. */
		error("http: a route answered an invalid status", KV_S("peer", h->peer),
		    KV_S("route", r->name), KV_S("method", rq->method),
		    KV_S("path", rq->path), KV_I("status", resp->status));
		free_body(resp->body, resp->body_len, NULL);
		hconn_refuse(h, 500, "internal error");
		return;
	}
	debug("http request", KV_S("peer", h->peer), KV_S("method", rq->method),
	    KV_S("path", rq->path), KV_I("status", resp->status));
	hconn_respond(h, resp->status, resp->content_type, resp->body,
	    resp->body_len, rq->keep_alive, rq->head_only, resp->headers);
}

static void
hconn_request(struct hconn *h, const struct http_request *rq)
{
	const struct route *r = route_find(h->srv, rq->path, 'r', h->port);
	struct route_request req = {
		.method = rq->method, .path = rq->path, .query = rq->query,
		.authorization = rq->authorization, .body = rq->body,
		.body_len = rq->body_len, .body_too_large = rq->body_too_large,
		.replica = rq->replica, .from_replica = hconn_from_replica(h),
		.conn = h,
	};
	struct route_response resp = { 0 };
	unsigned replies = h->replies;

	if (r == NULL) {
		hconn_refuse(h, 404, "no route");
		return;
	}
	if (hconn_misplaced(h, r))
		return;
	r->request(h->srv->gw, &req, &resp);
	if (h->replies != replies) {
		/* The ticket answers, now or later (reply_send). */
		free_body(resp.body, resp.body_len, NULL);
		return;
	}
	hconn_answer(h, r, rq, &resp);
}

/* ---- replies later (server.h) ---- */

struct reply *
reply_later(const struct route_request *req)
{
	struct hconn *h = req->conn;
	struct reply *t;

	/* server.h: one ticket, during the route's request call. */
	assert(h->state == HC_READING && h->reply == NULL);
	if ((t = calloc(1, sizeof(*t))) == NULL)
		return NULL;
	t->h = h;
	t->route = route_find(h->srv, req->path, 'r', h->port);
	h->reply = t;
	h->replies++;
	hconn_set_state(h, HC_REPLYING);
	/* Stop taking input, but keep reading up to a little so that a client
	 * that hangs up is noticed (EOF) and the answer dropped. */
	bufferevent_setwatermark(h->bev, EV_READ, 0, UPGRADE_PARK_MAX);
	hconn_arm(h, h->srv->gw->limits.http_timeout_ms);
	return t;
}

int
reply_client_gone(const struct reply *t)
{
	return t->h == NULL;
}

void
reply_send(struct reply *t, struct route_response *resp)
{
	struct hconn *h = t->h;
	const struct route *r = t->route;

	if (h == NULL) {
		free_body(resp->body, resp->body_len, NULL);
		free(t);
		return;
	}
	assert(h->state == HC_REPLYING && h->reply == t);
	h->reply = NULL;
	free(t);
	hconn_set_state(h, HC_READING);
	bufferevent_setwatermark(h->bev, EV_READ, 0, 0);
	hconn_answer(h, r, http_reader_request(h->reader), resp);
	if (h->state == HC_READING)
		hconn_kick_read(h);      /* a pipelined request may wait */
}

/* ---- exchanges (route.h, server.h) ---- */

static void hconn_exchange_body_done(struct hconn *h);

/* Reading on.  Only if it is off: bufferevent_enable of a read already
 * on still runs the OpenSSL bufferevent's enable (an event_add that finds
 * the event added, ~200 instructions; twice per /k8s request). */
static void
hconn_read_on(struct hconn *h)
{
	if (!(bufferevent_get_enabled(h->bev) & EV_READ))
		bufferevent_enable(h->bev, EV_READ);
}

/* Runs the read callback soon (deferred), whatever is buffered. */
static void
hconn_kick_read(struct hconn *h)
{
	hconn_read_on(h);
	bufferevent_trigger(h->bev, EV_READ,
	    BEV_TRIG_IGNORE_WATERMARKS | BEV_TRIG_DEFER_CALLBACKS);
}

/* An exchange route's request head is read (request_done: and its body,
 * if any). */
static void
hconn_exchange_start(struct hconn *h, const struct http_request *rq,
    int request_done)
{
	void *x;

	hconn_set_state(h, HC_EXCHANGING);
	hconn_disarm(h);             /* watches and exec sessions last */
	h->x = NULL;
	h->x_req_done = request_done;
	h->x_raw = 0;
	h->x_keep = rq->keep_alive;
	x = h->srv->exchange->exchange->start(h->srv->gw, h, rq);
	/* NULL: answered already (exchange_reply), the state says what next. */
	if (x == NULL)
		return;
	h->x = x;
	if (request_done)
		hconn_exchange_body_done(h);
}

static void
hconn_body_sink(void *arg, const char *data, size_t len)
{
	struct hconn *h = arg;

	if (h->state == HC_EXCHANGING && h->x != NULL)
		h->srv->exchange->exchange->body(h->x, data, len);
}

/* The request is read whole: park further input (the next request) but
 * keep reading a little, so that a client that hangs up is noticed: up
 * to UPGRADE_PARK_MAX, then reading stops (hconn_read_cb) until the
 * exchange is detached.  Not with a read high-water mark: libevent would
 * run its watermark callback at every change of the input and reset the
 * mark twice a request (~900 instructions of a /k8s request). */
static void
hconn_exchange_body_done(struct hconn *h)
{
	h->x_req_done = 1;
	if (h->x != NULL)
		h->srv->exchange->exchange->body_end(h->x);
}

/* Leaves HC_EXCHANGING; the exchange is detached, and reads on (a mark an
 * earlier phase left goes). */
static void
hconn_exchange_detach(struct hconn *h)
{
	size_t high = 0;

	h->x = NULL;
	h->x_raw = 0;
	if (bufferevent_getwatermark(h->bev, EV_READ, NULL, &high) != 0 ||
	    high != 0)
		bufferevent_setwatermark(h->bev, EV_READ, 0, 0);
	hconn_read_on(h);
}

struct evbuffer *
exchange_output(struct hconn *h)
{
	return bufferevent_get_output(h->bev);
}

int
exchange_write_now(struct hconn *h, const void *data, size_t len)
{
	return tls_write_now(h->bev, data, len);
}

/* Everything queued for the client is the kernel's: the output, and the
 * TLS records the batching BIO holds (tlswrite.h). */
static int
hconn_written(const struct hconn *h)
{
	return evbuffer_get_length(bufferevent_get_output(h->bev)) == 0 &&
	    tls_write_pending(h->bev) == 0;
}

/* A TLS connection's handshake is done: its records leave in one send per
 * loop pass (tlswrite.h), which exchange_write_now needs, and come in
 * with one read(2) for many (a record's header and body were two): every
 * reader pulls them (hconn_pull). */
static void
hconn_tls_open(struct hconn *h)
{
	(void)tls_write_batch(h->bev);
	tls_read_ahead(h->bev);
}

/* Input the client's records hold, at most this much at once. */
#define HCONN_PULL_MAX (64 * 1024)

/* Records read ahead raise no socket event (tlsread.h): what OpenSSL can
 * decrypt now goes into the input before it is parsed.  Returns 1 when
 * the pull stopped at HCONN_PULL_MAX with bytes still held: only then is
 * there more to take without the socket (a partial record also counts as
 * held, and waits for its rest, which the socket announces). */
static int
hconn_pull(struct hconn *h)
{
	struct evbuffer *in = bufferevent_get_input(h->bev);

	(void)tls_read_available(h->bev, HCONN_PULL_MAX);
	return evbuffer_get_length(in) >= HCONN_PULL_MAX && tls_read_held(h->bev);
}

static int hconn_wants_input(struct hconn *h);

/* The pull stopped at its limit (full), the input is all parsed and more
 * is wanted: the rest is taken on a later pass (hconn_kick_read). */
static void
hconn_more(struct hconn *h, int full)
{
	if (full && h->bev != NULL && hconn_wants_input(h) &&
	    evbuffer_get_length(bufferevent_get_input(h->bev)) == 0)
		hconn_kick_read(h);
}

const char *
exchange_peer(const struct hconn *h)
{
	return h->peer;
}

int
exchange_request_done(const struct hconn *h)
{
	return h->x_req_done;
}

void
exchange_keep(struct hconn *h, void *state, void (*free_fn)(void *state))
{
	assert(h->kept == NULL);
	h->kept = state;
	h->kept_free = free_fn;
}

void *
exchange_kept(const struct hconn *h)
{
	return h->kept;
}

void *
exchange_take_kept(struct hconn *h)
{
	void *kept = h->kept;

	h->kept = NULL;
	return kept;
}

int
exchange_keep_alive(const struct hconn *h)
{
	return h->x_keep && !h->srv->gw->stopping;
}

void
exchange_resume_input(struct hconn *h)
{
	if (h->state != HC_EXCHANGING)
		return;
	/* Deferred: never inside the caller. */
	hconn_kick_read(h);
}

void
exchange_go_raw(struct hconn *h)
{
	if (h->state != HC_EXCHANGING)
		return;
	h->x_raw = 1;
	bufferevent_setwatermark(h->bev, EV_READ, 0, 0);
	exchange_resume_input(h);
}

void
exchange_reply(struct hconn *h, int status, char *body, size_t len)
{
	int keep = h->x_req_done && exchange_keep_alive(h);

	/* server.h: one end per exchange, while it owns the connection. */
	assert(h->state == HC_EXCHANGING);
	hconn_exchange_detach(h);
	hconn_set_state(h, HC_READING);
	hconn_respond(h, status, "application/json", body, len, keep, 0, NULL);
	if (keep && h->state == HC_READING)
		hconn_kick_read(h);      /* a pipelined request may wait */
}

void
exchange_reply_later(struct hconn *h, int status, char *body, size_t len,
    unsigned seconds)
{
	int keep = h->x_req_done && exchange_keep_alive(h);
	char later[40];

	assert(h->state == HC_EXCHANGING);
	snprintf(later, sizeof(later), "Retry-After: %u\r\n", seconds);
	hconn_exchange_detach(h);
	hconn_set_state(h, HC_READING);
	hconn_respond(h, status, "application/json", body, len, keep, 0, later);
	if (keep && h->state == HC_READING)
		hconn_kick_read(h);
}

void
exchange_finish(struct hconn *h, int keep_alive)
{
	assert(h->state == HC_EXCHANGING);
	hconn_exchange_detach(h);
	if (keep_alive && h->x_req_done && exchange_keep_alive(h)) {
		hconn_set_state(h, HC_READING);
		http_reader_reset(h->reader);
		hconn_arm(h, h->srv->gw->limits.http_timeout_ms);
		/* A request already here (parked input, or records read ahead,
		 * which raise no socket event) is read now; else the next
		 * one's socket event runs the read (reading is on: detach).
		 * A kick for nothing was a deferred callback and an empty
		 * read, ~400 instructions of every keep-alive request. */
		if (evbuffer_get_length(bufferevent_get_input(h->bev)) > 0 ||
		    tls_read_held(h->bev))
			hconn_kick_read(h);
		return;
	}
	hconn_set_state(h, HC_CLOSING);
	hconn_arm(h, h->srv->gw->limits.http_timeout_ms);
	if (hconn_written(h))
		hconn_linger(h);         /* no write callback will come */
}

void
exchange_refuse(struct hconn *h, int status, char *body, size_t len)
{
	hconn_respond(h, status, "application/json", body, len, 0, 0, NULL);
}

void
exchange_abort(struct hconn *h)
{
	assert(h->state == HC_EXCHANGING);
	h->x = NULL;
	hconn_end(h);
}

/* The body of an exchange's request is malformed (a bad chunk, a
 * duplicate Authorization trailer) while its answer may be streaming: no
 * answer of ours may go into the middle of it, so the exchange ends (the
 * route's client_gone) and so does the connection. */
static void
hconn_exchange_malformed(struct hconn *h)
{
	void *x = h->x;

	h->x = NULL;
	if (x != NULL)
		h->srv->exchange->exchange->client_gone(x);
	hconn_end(h);
}

/* ---- dispatching ---- */

static void
hconn_dispatch(struct hconn *h)
{
	const struct http_request *rq = http_reader_request(h->reader);

	if (h->srv->exchange != NULL && h->srv->exchange->matches(rq->path))
		hconn_exchange_start(h, rq, 1);
	else if (http_token_list_has(rq->upgrade, "websocket"))
		hconn_upgrade(h, rq);
	else
		hconn_request(h, rq);
}

/* Input to parse: a request, or the body of an exchange's that it wants now. */
static int
hconn_wants_input(struct hconn *h)
{
	if (h->state == HC_READING)
		return 1;
	return h->state == HC_EXCHANGING && !h->x_req_done && !h->x_raw &&
	    h->x != NULL && h->srv->exchange->exchange->wants_body(h->x);
}

/* Parses and answers requests while the state allows. */
static void
hconn_process(struct hconn *h)
{
	struct evbuffer *in = bufferevent_get_input(h->bev);
	struct evbuffer *out = bufferevent_get_output(h->bev);

	while (hconn_wants_input(h) && evbuffer_get_length(in) > 0) {
		struct evbuffer_iovec v;
		enum http_read_result res;
		const char *reason;
		size_t n;
		int status;

		if (h->state == HC_READING &&
		    evbuffer_get_length(out) >= HTTP_OUTPUT_HIGH) {
			/* Pipelined requests faster than the answers are read:
			 * wait for the output to drain (write callback). */
			h->read_blocked = 1;
			bufferevent_disable(h->bev, EV_READ);
			break;
		}
		if (evbuffer_peek(in, -1, NULL, &v, 1) < 1)
			break;
		n = http_reader_feed(h->reader, v.iov_base, v.iov_len, &res);
		evbuffer_drain(in, n);
		if (http_reader_take_continue(h->reader) &&
		    evbuffer_add(out, "HTTP/1.1 100 Continue\r\n\r\n", 25) != 0) {
			hconn_end(h);
			break;
		}
		if (res == HTTP_READ_ERROR) {
			status = http_reader_error(h->reader, &reason);
			info("http request refused", KV_S("peer", h->peer),
			    KV_I("status", status), KV_S("reason", reason));
			if (h->state == HC_EXCHANGING) {
				hconn_exchange_malformed(h);
				break;
			}
			if (h->state == HC_READING &&
			    http_reader_streamed(h->reader))
				h->srv->exchange->exchange->unreadable(h,
				    http_reader_request(h->reader), status, reason);
			else
				hconn_refuse(h, status, reason);
			break;
		}
		if (res == HTTP_READ_HEAD) {
			h->requests++;
			hconn_exchange_start(h, http_reader_request(h->reader), 0);
		} else if (res == HTTP_READ_REQUEST && h->state == HC_EXCHANGING)
			hconn_exchange_body_done(h);
		else if (res == HTTP_READ_REQUEST) {
			h->requests++;
			hconn_dispatch(h);
		}
	}
	/* A proxied body the exchange cannot take yet: stop reading until
	 * exchange_resume_input. */
	if (h->state == HC_EXCHANGING && !h->x_req_done && !h->x_raw &&
	    h->x != NULL && !h->srv->exchange->exchange->wants_body(h->x))
		bufferevent_disable(h->bev, EV_READ);
}

/* The last answer is written: close_notify, FIN, then wait for the
 * client's EOF so that unread input does not turn our close into a reset
 * that could destroy the answer in flight. */
static void
hconn_linger(struct hconn *h)
{
	SSL *ssl = bufferevent_openssl_get_ssl(h->bev);

	hconn_set_state(h, HC_LINGERING);
	if (ssl != NULL)
		SSL_shutdown(ssl);
	ERR_clear_error();
	shutdown(bufferevent_getfd(h->bev), SHUT_WR);
	bufferevent_enable(h->bev, EV_READ);
	bufferevent_setwatermark(h->bev, EV_READ, 0, 0);
	hconn_arm(h, HTTP_LINGER_MS);
}

static void
hconn_read_cb(struct bufferevent *bev, void *arg)
{
	struct hconn *h = arg;

	int full;

	switch (h->state) {
	case HC_READING:
		full = hconn_pull(h);
		hconn_process(h);
		hconn_more(h, full);
		break;
	case HC_UPGRADING:
	case HC_REPLYING:
		break;         /* parked until the upgrade is decided, the answer sent */
	case HC_EXCHANGING:
		if (h->x_raw && h->x != NULL) {
			full = hconn_pull(h);
			if (h->srv->exchange->exchange->raw_input(h->x,
			    bufferevent_get_input(bev)) != 0)
				bufferevent_disable(bev, EV_READ);
			else if (full)
				hconn_kick_read(h);
		} else if (!h->x_req_done) {
			full = hconn_pull(h);
			hconn_process(h);
			hconn_more(h, full);
		} else if (evbuffer_get_length(bufferevent_get_input(bev)) >=
		    UPGRADE_PARK_MAX)
			bufferevent_disable(bev, EV_READ);
		break;         /* else: parked until the answer is complete
		                * (hconn_exchange_body_done) */
	default:
		evbuffer_drain(bufferevent_get_input(bev),
		    evbuffer_get_length(bufferevent_get_input(bev)));
		break;
	}
}

static void
hconn_write_cb(struct bufferevent *bev, void *arg)
{
	struct hconn *h = arg;
	int full;

	/* A plain socket's write callback may be one queued (deferred) before
	 * the answer was: linger only once the answer is really out. */
	if (h->state == HC_CLOSING && hconn_written(h)) {
		hconn_linger(h);
		return;
	}
	if (h->state == HC_CLOSING)
		return;
	if (h->state == HC_READING && h->read_blocked) {
		h->read_blocked = 0;
		bufferevent_enable(bev, EV_READ);
		full = hconn_pull(h);
		hconn_process(h);
		hconn_more(h, full);
	}
}

static void
hconn_event_cb(struct bufferevent *bev, short what, void *arg)
{
	struct hconn *h = arg;
	unsigned long e;

	if (!(what & (BEV_EVENT_EOF | BEV_EVENT_ERROR | BEV_EVENT_TIMEOUT))) {
		/* BEV_EVENT_CONNECTED: the TLS handshake is done; the first
		 * request has --http-timeout from now. */
		if (h->tls_counted) {
			h->srv->loop_handshakes[0]++;
			tls_slot_free(h);
			hconn_arm(h, h->srv->gw->limits.http_timeout_ms);
		}
		hconn_tls_open(h);
		return;
	}
	e = bufferevent_get_openssl_error(bev);
	if (e != 0)
		debug("http TLS error", KV_S("peer", h->peer),
		    KV_S("err", ERR_reason_error_string(e)));
	else if ((what & BEV_EVENT_ERROR) && h->state == HC_READING)
		debug("http socket error", KV_S("peer", h->peer),
		    KV_S("err", strerror(EVUTIL_SOCKET_ERROR())));
	if (h->state == HC_UPGRADING)
		hconn_abandon(h);
	hconn_free(h);
}

/* A connection holding a TLS slot that did not move in time is closed
 * (counted as shed): no ClientHello by --tls-hello-timeout, or no finished
 * handshake by --tls-handshake-timeout.  Otherwise it waits for the rest. */
static void
hconn_tls_timer(struct hconn *h)
{
	const struct gateway_limits *l = &h->srv->gw->limits;
	SSL *ssl = bufferevent_openssl_get_ssl(h->bev);
	int64_t held = runtime_monotonic_ms() - h->tls_since_ms;

	if (ssl == NULL || SSL_get_state(ssl) == TLS_ST_BEFORE) {
		h->srv->shed++;
		debug("http: no ClientHello within --tls-hello-timeout: closed",
		    KV_S("peer", h->peer), KV_U("ms", l->tls_hello_timeout_ms));
		hconn_free(h);
		return;
	}
	if (held >= (int64_t)l->tls_handshake_timeout_ms) {
		h->srv->shed++;
		debug("http: TLS handshake not finished within "
		    "--tls-handshake-timeout: closed", KV_S("peer", h->peer),
		    KV_U("ms", l->tls_handshake_timeout_ms));
		hconn_free(h);
		return;
	}
	hconn_arm(h, (uint32_t)((int64_t)l->tls_handshake_timeout_ms - held));
}

static void
hconn_timer_cb(evutil_socket_t fd, short what, void *arg)
{
	struct hconn *h = arg;
	char reason[96];
	int64_t now;

	if (h->state == HC_DONE) {
		hconn_free(h);             /* hconn_end: the deferred end */
		return;
	}
	/* Fired: not pending any more.  No deadline, or one still ahead
	 * (hconn_arm moved it on): nothing yet. */
	h->timer_at_ms = 0;
	if (h->deadline_ms == 0)
		return;
	if ((now = runtime_monotonic_ms()) < h->deadline_ms) {
		hconn_arm(h, (uint32_t)(h->deadline_ms - now));
		return;
	}
	if (h->tls_counted) {
		hconn_tls_timer(h);
		return;
	}
	if (h->state == HC_REPLYING) {
		snprintf(reason, sizeof(reason), "no answer within %u ms (the store "
		    "is slow or unreachable)", h->srv->gw->limits.http_timeout_ms);
		warn("http timeout", KV_S("peer", h->peer),
		    KV_S("route", h->reply->route->name), KV_S("reason", reason));
		hconn_drop_reply(h);
		hconn_refuse(h, 504, reason);
		return;
	}
	if (h->state == HC_READING && http_reader_started(h->reader)) {
		snprintf(reason, sizeof(reason), "request not received within %u ms",
		    h->srv->gw->limits.http_timeout_ms);
		info("http timeout", KV_S("peer", h->peer), KV_S("reason", reason));
		hconn_refuse(h, 408, reason);
		return;
	}
	if (h->state == HC_READING)
		debug("http idle: closing", KV_S("peer", h->peer),
		    KV_U("idle_ms", h->srv->gw->limits.http_timeout_ms));
	hconn_free(h);
}

/* ---- accepting ---- */

static void
format_peer(const struct sockaddr *sa, char *out, size_t outlen)
{
	char ip[INET6_ADDRSTRLEN] = "?";

	if (sa->sa_family == AF_INET6) {
		const struct sockaddr_in6 *s6 = (const struct sockaddr_in6 *)sa;

		evutil_inet_ntop(AF_INET6, &s6->sin6_addr, ip, sizeof(ip));
		snprintf(out, outlen, "[%s]:%u", ip, ntohs(s6->sin6_port));
	} else if (sa->sa_family == AF_INET) {
		const struct sockaddr_in *s4 = (const struct sockaddr_in *)sa;

		evutil_inet_ntop(AF_INET, &s4->sin_addr, ip, sizeof(ip));
		snprintf(out, outlen, "%s:%u", ip, ntohs(s4->sin_port));
	} else
		snprintf(out, outlen, "?");
}

/* A new connection in HC_READING on loop sl (the calling thread's),
 * TLS unless from the plain port.  established: NULL, or an SSL whose
 * handshake a handshake loop finished (taken, freed on failure too).
 * Returns NULL (fd still ours) on failure. */
static struct hconn *
hconn_new(struct server_loop *sl, evutil_socket_t fd, const char *peer,
    enum conn_port port, int exempt, SSL *established)
{
	struct server *srv = sl->srv;
	int plain = port == PORT_PLAIN;
	struct event_base *base = sl->base;
	struct hconn *h = calloc(1, sizeof(*h));
	SSL *ssl = established;

	if (h == NULL) {
		if (established != NULL)
			SSL_free(established);
		return NULL;
	}
	h->srv = srv;
	h->sl = sl;
	h->port = port;
	h->exempt = exempt;
	h->state = HC_READING;
	snprintf(h->peer, sizeof(h->peer), "%s", peer);
	h->reader = http_reader_new(srv->gw->limits.max_body_bytes);
	h->timer = evtimer_new(base, hconn_timer_cb, h);
	if (!plain && ssl == NULL)
		ssl = SSL_new(port == PORT_MTLS ? srv->mtls_ctx : srv->ssl_ctx);
	if (h->reader == NULL || h->timer == NULL || (!plain && ssl == NULL) ||
	    http_reader_stream(h->reader, srv->exchange != NULL ?
	    srv->exchange->matches : no_exchange, hconn_body_sink, h) != 0)
		goto fail;
	if (plain) {
		/* On failure the socket is not closed (still the caller's). */
		h->bev = bufferevent_socket_new(base, fd, BEV_OPT_CLOSE_ON_FREE |
		    BEV_OPT_DEFER_CALLBACKS);
		if (h->bev == NULL)
			goto fail;
	} else {
		/* On failure this frees ssl (BEV_OPT_CLOSE_ON_FREE), not the socket. */
		h->bev = bufferevent_openssl_socket_new(base, fd, ssl,
		    established != NULL ? BUFFEREVENT_SSL_OPEN :
		    BUFFEREVENT_SSL_ACCEPTING, BEV_OPT_CLOSE_ON_FREE |
		    BEV_OPT_DEFER_CALLBACKS);
		ssl = NULL;
		if (h->bev == NULL)
			goto fail;
		/* Clients often close without close_notify: that is an EOF, not
		 * an error. */
		bufferevent_openssl_set_allow_dirty_shutdown(h->bev, 1);
		if (established != NULL)
			hconn_tls_open(h);
	}
	bufferevent_setcb(h->bev, hconn_read_cb, hconn_write_cb, hconn_event_cb, h);
	bufferevent_enable(h->bev, EV_READ | EV_WRITE);
	/* The TLS handshake and the first request share the deadline. */
	hconn_arm(h, srv->gw->limits.http_timeout_ms);
	LIST_INSERT_HEAD(&sl->http, h, link);
	conns_count(sl, 1);
	h->owed = 1;
	atomic_fetch_add_explicit(&sl->owed, 1, memory_order_relaxed);
	/* Its share was taken by conn_admit; on loop k its place was too, and
	 * stays loop 0's (tls_land). */
	if (sl->index == 0)
		srv->http_conns++;
	return h;
fail:
	if (ssl != NULL)
		SSL_free(ssl);
	if (h->timer != NULL)
		event_free(h->timer);
	http_reader_free(h->reader);
	free(h);
	return NULL;
}

/* The loop that runs the next TLS handshake: the one holding the fewest
 * now, ties going round (so that a trickle alternates too).  A plain-port
 * connection that lands by its line counts as this loop's too (the loop
 * land_where keeps it on where no route says otherwise: plain_start), so
 * both ports spread by one rule (docs/0040 step 8). */
static unsigned
pick_loop(struct server *srv)
{
	unsigned start = srv->loop_next++ % srv->nloops, best = start;

	for (unsigned k = 1; k < srv->nloops; k++) {
		unsigned i = (start + k) % srv->nloops;

		if (srv->loop_inflight[i] < srv->loop_inflight[best])
			best = i;
	}
	return best;
}

/* Whether a connection from port reads its request line and lands by it
 * (docs/0040 section 2 (i-a)): --landing any or route (gw->landing_any),
 * more than one loop, the main port (after its handshake, on its
 * handshake loop) or the plain port (after its PROXY header, in its
 * preface on loop 0); the replicas' stay on loop 0. */
static int
lands_by_line(const struct server *srv, enum conn_port port)
{
	return srv->loops != NULL && srv->gw->landing_any && port != PORT_MTLS;
}

/* Loop 0's pass after the one in which a socket that had an event on
 * loop 0 (a PROXY preface) was given a handshake on loop k: its epoll
 * changes for the socket are made by now (as adopt_send's). */
static void
hand_out_send(void *arg)
{
	struct tls_job *tj = arg;

	tlsloop_submit(tj->srv->loops, tj->to, &tj->job);
}

/* Out of memory for that pass: the handshake failed before it began. */
static void
hand_out_dropped(void *arg)
{
	struct tls_job *tj = arg;

	tj->job.loop = tj->to;
	tj->job.result = TLSLOOP_FAILED;
	tls_job_done(&tj->job, tj->srv);
}

/* The handshake goes to loop i (0..nloops-1) as a job; the slot, the
 * connection's place and its shares stay taken until it comes back
 * (tls_job_done).  evented: the socket had an event on loop 0 (a PROXY
 * preface); sent to loop k, it leaves a pass later: loop 0's base removes
 * that event from epoll at its next dispatch (runtime_event_base's
 * changelist), which loop k's close of the socket must not precede (the
 * order adopt_send keeps, docs/0040 step 8). */
static void
tls_hand_out(struct server *srv, unsigned i, evutil_socket_t fd,
    const char *peer, enum conn_port port, int exempt, int evented)
{
	const struct gateway_limits *l = &srv->gw->limits;
	struct tls_job *tj = calloc(1, sizeof(*tj));
	SSL *ssl = SSL_new(port == PORT_MTLS ? srv->mtls_ctx : srv->ssl_ctx);

	if (tj == NULL || ssl == NULL) {
		warn("http: out of memory for a connection: closed", KV_S("peer", peer));
		free(tj);
		if (ssl != NULL)
			SSL_free(ssl);
		if (!exempt) {
			srccount_put(srv->tls_sources, peer);
			srccount_put(srv->http_sources, peer);
		}
		evutil_closesocket(fd);
		return;
	}
	tj->srv = srv;
	tj->port = port;
	tj->exempt = exempt;
	snprintf(tj->peer, sizeof(tj->peer), "%s", peer);
	tj->job.fd = fd;
	tj->job.ssl = ssl;
	tj->job.since_ms = runtime_monotonic_ms();
	tj->job.hello_ms = l->tls_hello_timeout_ms;
	tj->job.handshake_ms = l->tls_handshake_timeout_ms;
	/* The main port's connections land by their request line (tls_land),
	 * whichever loop runs their handshake, loop 0 included. */
	tj->job.read_line = lands_by_line(srv, port);
	srv->tls_handshakes++;
	srv->http_conns++;        /* its place, until it is a hconn or closed */
	srv->loop_inflight[i]++;
	tj->to = i;
	if (evented && i != 0)
		(void)loop_call(srv->per[0].loop, hand_out_send, tj,
		    hand_out_dropped);
	else
		tlsloop_submit(srv->loops, i, &tj->job);
}

/* Bytes read before the connection had a bufferevent (the landing's
 * request line and what came with it): wiped and freed. */
static void
head_free(char *head, size_t len)
{
	if (head != NULL)
		OPENSSL_cleanse(head, len);
	free(head);
}

/* The bytes the handshake loop read are the first of h's input, before
 * anything its bufferevent reads (it reads nothing before its loop runs
 * again); taken. */
static void
hconn_take_head(struct hconn *h, char *head, size_t len)
{
	struct evbuffer *in = bufferevent_get_input(h->bev);
	int r = 0;

	/* A socket bufferevent (the plain port's) keeps its input's end
	 * frozen but while it reads itself (libevent's bufferevent_sock.c
	 * opens it around each read): opened the same way for the head. */
	if (len > 0 && h->port == PORT_PLAIN)
		evbuffer_unfreeze(in, 0);
	if (len > 0)
		r = evbuffer_add(in, head, len);
	if (len > 0 && h->port == PORT_PLAIN)
		evbuffer_freeze(in, 0);
	if (r != 0) {
		warn("http: out of memory for a request: closing",
		    KV_S("peer", h->peer));
		hconn_end(h);
	} else if (len > 0)
		hconn_kick_read(h);
	head_free(head, len);
}

/* Where a connection whose request line is head lives (docs/0040 section
 * 2 (i-a)), its handshake having run on loop `here`: loop 0 for a route
 * whose connections live there (home_loop), or a line not read whole or
 * not understood; the loop a route's land_loop names (told the line's path
 * and query, and here); else here.  When the route weighed its tunnel
 * side on a loop (route_landing's tunnel: --landing any), that loop's
 * tunnel_side counts it from now and *weighed names the loop: the
 * connection's to carry and give back once (weigh_put); else NULL.  On
 * the handshake loop; reads the route table and what land_loop reads. */
static unsigned
land_where(const struct server *srv, unsigned here, const char *head,
    size_t len, struct loop **weighed)
{
	char path[LAND_LINE_MAX], query[LAND_LINE_MAX];
	unsigned tunnel = ROUTE_NO_LOOP;
	struct route_landing at = { path, query, here, &tunnel };

	*weighed = NULL;
	if (head == NULL || http_line_target(head, len, path, sizeof(path),
	    query, sizeof(query)) != 0)
		return 0;
	for (const struct route *const *r = srv->routes; *r != NULL; r++) {
		unsigned to;

		if ((*r)->matches == NULL || !(*r)->matches(path))
			continue;
		if ((*r)->home_loop)
			return 0;
		if ((*r)->land_loop == NULL)
			continue;
		to = (*r)->land_loop(srv->gw, &at);
		if (tunnel < srv->nloops && srv->gw->loops != NULL) {
			*weighed = &srv->gw->loops[tunnel];
			atomic_fetch_add_explicit(&(*weighed)->tunnel_side, 1,
			    memory_order_relaxed);
		}
		return to < srv->nloops ? to : 0;
	}
	return here;
}

/* A landed connection becomes a hconn on sl (its thread), head its first
 * input (taken), weighed its landing's tunnel side (taken: land_where);
 * its handshake ran on loop `from`.  On failure it is closed and its
 * place and weight given back. */
static void
land_on(struct server_loop *sl, evutil_socket_t fd, SSL *ssl,
    const char *peer, enum conn_port port, int exempt, char *head,
    size_t head_len, unsigned from, struct loop *weighed)
{
	struct hconn *h = NULL;

	if (!sl->stopped && sl->ws != NULL)
		h = hconn_new(sl, fd, peer, port, exempt, ssl);
	else
		SSL_free(ssl);
	if (h == NULL) {
		warn("http: out of memory for a connection: closed",
		    KV_S("peer", peer), KV_U("loop", sl->index));
		evutil_closesocket(fd);
		head_free(head, head_len);
		weigh_put(weighed);
		if (sl->index == 0) {
			sl->srv->http_conns--;
			if (!exempt)
				srccount_put(sl->srv->http_sources, peer);
		} else
			server_conn_released(sl->srv, peer, exempt);
		return;
	}
	h->weighed = weighed;
	debug("http: landed", KV_S("peer", peer), KV_U("loop", sl->index),
	    KV_U("from", from));
	hconn_take_head(h, head, head_len);
}

/* A connection sent from its handshake loop to the loop it lands on
 * (server_adopt): the receiver's once sent. */
struct adopt {
	struct server_loop *to;
	evutil_socket_t fd;
	SSL *ssl;
	char *head;
	size_t head_len;
	enum conn_port port;
	int exempt;
	unsigned from;                    /* the loop that ran its handshake */
	struct loop *weighed;             /* its landing's tunnel side, or NULL */
	char peer[PEER_MAX];
};

static void
adopt_here(void *arg)
{
	struct adopt *a = arg;

	land_on(a->to, a->fd, a->ssl, a->peer, a->port, a->exempt, a->head,
	    a->head_len, a->from, a->weighed);
	atomic_fetch_sub_explicit(&a->to->owed, 1, memory_order_relaxed);
	conns_count(a->to, 0);
	free(a);
}

/* The loop stopped first: closed, its place given back. */
static void
adopt_dropped(void *arg)
{
	struct adopt *a = arg;

	SSL_free(a->ssl);
	evutil_closesocket(a->fd);
	head_free(a->head, a->head_len);
	weigh_put(a->weighed);
	server_conn_released(a->to->srv, a->peer, a->exempt);
	atomic_fetch_sub_explicit(&a->to->owed, 1, memory_order_relaxed);
	conns_count(a->to, 0);
	free(a);
}

/* Loop 0's pass after the one that sent a connection on (server_adopt):
 * its epoll changes for the socket are made by now. */
static void
adopt_send(void *arg)
{
	struct adopt *a = arg;

	(void)loop_call(a->to->loop, adopt_here, a, adopt_dropped);
}

/* Sends a connection (established, its head read) from loop `from` (the
 * calling one) to loop `to` (not the calling one, not 0): LOOP_MSG_ADOPT
 * of docs/0040.  Takes fd, ssl, head and weighed (land_where's).  From
 * loop 0 it leaves a pass later: loop 0's base makes its epoll changes
 * at its next dispatch (runtime_event_base: a changelist), so the removal
 * of the handshake's event from the socket may come after the call; sent
 * at once, `to` could close the socket first (a loop 0 epoll_ctl on a closed, maybe reused,
 * descriptor: ThreadSanitizer saw it). */
static void
server_adopt(struct server_loop *to, evutil_socket_t fd, SSL *ssl,
    const char *peer, enum conn_port port, int exempt, char *head,
    size_t head_len, unsigned from, struct loop *weighed)
{
	struct adopt *a = malloc(sizeof(*a));

	if (a == NULL) {
		warn("http: out of memory for a connection: closed",
		    KV_S("peer", peer));
		SSL_free(ssl);
		evutil_closesocket(fd);
		head_free(head, head_len);
		weigh_put(weighed);
		server_conn_released(to->srv, peer, exempt);
		return;
	}
	*a = (struct adopt){ .to = to, .fd = fd, .ssl = ssl, .head = head,
	    .head_len = head_len, .port = port, .exempt = exempt, .from = from,
	    .weighed = weighed };
	snprintf(a->peer, sizeof(a->peer), "%s", peer);
	/* Owed from now (a drain's count), not only once it arrived; and
	 * counted where it lands from now (the next landing's guard). */
	atomic_fetch_add_explicit(&to->owed, 1, memory_order_relaxed);
	conns_count(to, 1);
	if (from == 0)
		(void)loop_call(to->srv->per[0].loop, adopt_send, a, adopt_dropped);
	else
		(void)loop_call(to->loop, adopt_here, a, adopt_dropped);
}

/* tlsloops' land callback, on handshake loop job->loop (0..nloops-1,
 * --landing any): the connection becomes a hconn on the loop land_where
 * names (there, or sent on: server_adopt), its head the first input,
 * unless it belongs on loop 0 (then 0: the job goes home, where
 * tls_job_done makes the hconn).  Its place in the
 * connection counts stays taken on loop 0 until it ends or becomes a
 * WebSocket (server_conn_released); only its slot goes home
 * (TLSLOOP_LANDED, tls_job_done). */
static int
tls_land(struct tlsloop_job *job, void *arg)
{
	struct server *srv = arg;
	struct tls_job *tj = (struct tls_job *)job;
	struct server_loop *sl = &srv->per[job->loop];
	struct loop *weighed = NULL;
	unsigned to;

	if (job->head == NULL || memchr(job->head, '\n', job->head_len) == NULL)
		debug("http: no whole request line in time or in 8 KiB: on "
		    "loop 0", KV_S("peer", tj->peer), KV_U("loop", job->loop),
		    KV_U("bytes", job->head_len), KV_I("waited_ms",
		    runtime_monotonic_ms() - job->line_since_ms));
	if (sl->stopped || sl->ws == NULL || (to = land_where(srv, job->loop,
	    job->head, job->head_len, &weighed)) == 0) {
		/* Counted on loop 0 from now, as server_adopt counts from the
		 * send: a burst's landings decided before its hconns exist see
		 * each other (access.c's guard reads the counts). */
		tj->home_counted = 1;
		tj->weighed = weighed;
		conns_count(&srv->per[0], 1);
		return 0;
	}
	if (to == job->loop)
		land_on(sl, job->fd, job->ssl, tj->peer, tj->port, tj->exempt,
		    job->head, job->head_len, job->loop, weighed);
	else
		server_adopt(&srv->per[to], job->fd, job->ssl, tj->peer, tj->port,
		    tj->exempt, job->head, job->head_len, job->loop, weighed);
	job->ssl = NULL;
	job->head = NULL;
	return 1;
}

/* A loop gave a job back (on loop 0): established, the connection
 * becomes a hconn reading its first request (the bytes the loop read of
 * it first); landed there, only its slot is released here; else it is
 * closed. */
static void
tls_job_done(struct tlsloop_job *job, void *arg)
{
	struct server *srv = arg;
	struct tls_job *tj = (struct tls_job *)job;
	SSL *ssl = job->ssl;
	struct hconn *h;

	job->ssl = NULL;
	srv->loop_inflight[job->loop]--;
	if (tj->home_counted)     /* its hconn, if made, counts itself */
		conns_count(&srv->per[0], 0);
	if (job->result == TLSLOOP_LANDED) {
		/* Its place stays taken: the hconn on job->loop holds it. */
		srv->loop_handshakes[job->loop]++;
		tls_slot_release(srv, tj->peer, tj->exempt, tj->job.since_ms);
		free(tj);
		return;
	}
	srv->http_conns--;
	if (job->result == TLSLOOP_NO_HELLO || job->result == TLSLOOP_TOO_SLOW)
		srv->shed++;
	if (job->result == TLSLOOP_OK && !srv->closing) {
		srv->loop_handshakes[job->loop]++;
		debug("http: TLS handshake done", KV_S("peer", tj->peer),
		    KV_U("loop", job->loop));
		if ((h = hconn_new(&srv->per[0], job->fd, tj->peer, tj->port,
		    tj->exempt, ssl)) == NULL) {
			warn("http: out of memory for a connection: closed",
			    KV_S("peer", tj->peer));
			if (!tj->exempt)
				srccount_put(srv->http_sources, tj->peer);
			evutil_closesocket(job->fd);
		} else {
			h->weighed = tj->weighed;
			tj->weighed = NULL;
			hconn_take_head(h, job->head, job->head_len);
			job->head = NULL;
		}
	} else {
		if (ssl != NULL)
			SSL_free(ssl);
		evutil_closesocket(job->fd);
		if (!tj->exempt)
			srccount_put(srv->http_sources, tj->peer);
	}
	head_free(job->head, job->head_len);
	weigh_put(tj->weighed);
	tls_slot_release(srv, tj->peer, tj->exempt, tj->job.since_ms);
	free(tj);
}

/* Starts the TLS handshake of an accepted connection (it takes a slot) on
 * the loop pick_loop names: a job (tlsloop.h) on loops 1..n-1, and on
 * loop 0 too when the connection lands by its request line
 * (lands_by_line); else (--workers 1, --landing zero, the replicas'
 * port) inline on loop 0, a hconn whose bufferevent runs the handshake. */
static void
tls_start(struct server *srv, evutil_socket_t fd, const char *peer,
    enum conn_port port, int exempt, int evented)
{
	struct hconn *h;
	unsigned loop;

	if (conn_admit(srv, peer, exempt) != 0) {
		if (!exempt)
			srccount_put(srv->tls_sources, peer);
		evutil_closesocket(fd);
		return;
	}
	if ((loop = pick_loop(srv)) != 0 || lands_by_line(srv, port)) {
		tls_hand_out(srv, loop, fd, peer, port, exempt, evented);
		return;
	}
	h = hconn_new(&srv->per[0], fd, peer, port, exempt, NULL);
	if (h == NULL) {
		warn("http: out of memory for a connection: closed", KV_S("peer", peer));
		if (!exempt) {
			srccount_put(srv->tls_sources, peer);
			srccount_put(srv->http_sources, peer);
		}
		evutil_closesocket(fd);
		return;
	}
	h->tls_counted = 1;
	h->tls_since_ms = runtime_monotonic_ms();
	srv->tls_handshakes++;
	srv->loop_inflight[0]++;
	/* The slot is held only while the handshake moves (docs/0028): the
	 * ClientHello within --tls-hello-timeout, all of it within
	 * --tls-handshake-timeout (hconn_tls_timer). */
	hconn_arm(h, srv->gw->limits.tls_hello_timeout_ms);
}

/* Has the client of a waiting connection given up (closed its end)?  Its
 * ClientHello may still be unread: without this check the gateway would
 * pay a whole handshake for nobody. */
static int
tls_waiter_gone(evutil_socket_t fd)
{
	struct pollfd p = { .fd = fd, .events = POLLRDHUP };

	return poll(&p, 1, 0) == 1 && (p.revents & (POLLRDHUP | POLLHUP | POLLERR));
}

/* A TLS handshake ended (done, failed or its connection gone): the oldest
 * waiting connection takes the slot.  One whose client closed, or that
 * waited more than half of --handshake-timeout (an agent gives up on the
 * whole TCP + TLS + upgrade after 10 s), is closed unread: it would cost
 * a handshake and most likely not finish in time.  Its client backs off
 * with jitter.  Cost: one poll() per connection taken from the queue.
 * The queue is served during a drain too: what waits there then is a
 * balancer's /readyz probe (it must hear 503) or an agent moving away on
 * RECONNECT (its dial must fail now, not at its 10 s deadline, so that it
 * lets the draining tunnel go: docs/0017). */
static void
tls_slot_release(struct server *srv, const char *peer, int exempt,
    int64_t began_ms)
{
	struct gateway *gw = srv->gw;
	uint32_t cap = gw->limits.max_tls_queue;
	int64_t now = runtime_monotonic_ms();

	gateway_tls_ended(gw, began_ms, srv->qlen > 0);
	srv->tls_handshakes--;
	if (!exempt)
		srccount_put(srv->tls_sources, peer);
	while (srv->qlen > 0 && srv->tls_handshakes < gw->limits.max_tls_handshakes) {
		struct tls_waiter w = srv->queue[srv->qhead];

		srv->qhead = (srv->qhead + 1) % cap;
		srv->qlen--;
		atomic_store_explicit(&srv->qlen_seen, srv->qlen,
		    memory_order_relaxed);
		if (now - w.since_ms > (int64_t)gw->limits.handshake_timeout_ms / 2 ||
		    tls_waiter_gone(w.fd)) {
			srv->shed++;
			debug("http: gave up or waited too long for a TLS slot: closed",
			    KV_S("peer", w.peer));
			if (!w.exempt)
				srccount_put(srv->tls_sources, w.peer);
			evutil_closesocket(w.fd);
			continue;
		}
		tls_start(srv, w.fd, w.peer, w.port, w.exempt, w.evented);
	}
	if (srv->listener_paused && srv->listener != NULL && srv->qlen <= cap / 2) {
		srv->listener_paused = 0;
		evconnlistener_enable(srv->listener);
		info("TLS admission queue below half: accepting again",
		    KV_U("queued", srv->qlen), KV_U("shed_total", srv->shed));
	}
}

/* A handshake on loop 0 ended: its slot goes on (tls_slot_release). */
static void
tls_slot_free(struct hconn *h)
{
	h->tls_counted = 0;
	h->srv->loop_inflight[0]--;
	tls_slot_release(h->srv, h->peer, h->exempt, h->tls_since_ms);
}

/*
 * Whether the TLS queue holds already what it can serve in time (docs/0035):
 * more connections than the TLS handshakes finish, at the rate measured
 * while the queue was busy (gateway_tls_rate), in half of
 * --handshake-timeout, the wait after which a waiting connection is
 * closed unread (tls_slot_release); at least a slot's worth.  And the queue
 * is seen to be slow: its oldest connection has waited a quarter of
 * --handshake-timeout (at a burst's first instant the depth alone says
 * little: the first handshakes after a start are the slowest, and the
 * first windows' rate with them).  Never on a guess: not before a busy
 * window was measured.  One more connection would wait for nothing: it is
 * closed at accept instead (conn_start), at once, and its agent redials on
 * its backoff or its redial spread while those taken finish.  Cost: O(1).
 */
static int
tls_queue_over(const struct server *srv)
{
	const struct gateway_limits *l = &srv->gw->limits;
	double room;

	if (srv->qlen == 0 || srv->gw->tls_rate.measured <= 0 ||
	    runtime_monotonic_ms() - srv->queue[srv->qhead].since_ms <
	    (int64_t)(l->handshake_timeout_ms / 4))
		return 0;
	room = gateway_tls_rate(srv->gw) * (double)(l->handshake_timeout_ms / 2) /
	    1000.0;
	if (room < (double)l->max_tls_handshakes)
		room = (double)l->max_tls_handshakes;
	return (double)srv->qlen >= room;
}

/* No slot free: the connection waits, unencrypted and unread. */
static void
tls_wait(struct server *srv, evutil_socket_t fd, const char *peer,
    enum conn_port port, int exempt, int evented)
{
	uint32_t cap = srv->gw->limits.max_tls_queue;
	struct tls_waiter *w;

	if (srv->qlen >= cap) {   /* only after an accept retry: pause again */
		if (!exempt)
			srccount_put(srv->tls_sources, peer);
		evutil_closesocket(fd);
		srv->shed++;
		return;
	}
	w = &srv->queue[(srv->qhead + srv->qlen) % cap];
	w->fd = fd;
	w->since_ms = runtime_monotonic_ms();
	w->port = port;
	w->exempt = exempt;
	w->evented = evented;
	snprintf(w->peer, sizeof(w->peer), "%s", peer);
	atomic_store_explicit(&srv->qlen_seen, ++srv->qlen, memory_order_relaxed);
	if (srv->qlen == cap && !srv->listener_paused && srv->listener != NULL) {
		srv->listener_paused = 1;
		evconnlistener_disable(srv->listener);
		warn("TLS admission queue full (--max-tls-queue): new connections "
		    "wait in the listen backlog", KV_U("queued", srv->qlen),
		    KV_U("tls_handshakes", srv->tls_handshakes));
	}
}

/* Says, at most once per ACCEPT_LOG_MS, how many connections were closed
 * at accept over a cap since the last line (a flood writes no more). */
static void
conn_refused(struct server *srv, const char *peer, const char *why)
{
	int64_t now = runtime_monotonic_ms();

	srv->refused++;
	debug("connection closed at accept", KV_S("peer", peer), KV_S("reason", why));
	if (srv->refused_log_ms != 0 && now - srv->refused_log_ms < ACCEPT_LOG_MS)
		return;
	warn("connections closed at accept: over a cap (docs/0028)",
	    KV_S("last_peer", peer), KV_S("last_reason", why),
	    KV_U("count", srv->refused - srv->refused_logged),
	    KV_I("interval_ms", ACCEPT_LOG_MS));
	srv->refused_logged = srv->refused;
	srv->refused_log_ms = now;
}

/* Room for one more HTTP connection from peer: within --max-connections
 * and, unless exempt, its source's --max-connections-per-source (taken:
 * hconn_free gives it back).  0, or -1 (refused, said by conn_refused). */
static int
conn_admit(struct server *srv, const char *peer, int exempt)
{
	const struct gateway_limits *l = &srv->gw->limits;

	if (srv->http_conns >= l->max_connections) {
		conn_refused(srv, peer, "--max-connections");
		return -1;
	}
	if (!exempt && srccount_take(srv->http_sources, peer,
	    l->max_connections_per_source) != 0) {
		conn_refused(srv, peer, "--max-connections-per-source");
		return -1;
	}
	return 0;
}

/*
 * A plain-port connection (its PROXY header, if any, read) goes on, if
 * admitted (conn_admit), as a hconn: on loop 0, or, when connections land
 * by their line (lands_by_line), where its request line (head, taken; NULL:
 * none read) lands it (docs/0040 step 8): land_where from the loop
 * pick_loop names, as a TLS connection lands from its handshake loop, so
 * `any` spreads plain connections as it spreads handshakes, a tunnel lands
 * by count, a home_loop route (/v1/peer) or a line not whole on loop 0.
 * Sent on to loop k (server_adopt, from loop 0: a pass later, so its
 * preface's event leaves loop 0's epoll first) with peer, the client a
 * PROXY header named; its place in the counts stays loop 0's until it
 * ends there (server_conn_released), as a landed TLS connection's.
 */
static void
plain_start(struct server *srv, evutil_socket_t fd, const char *peer,
    int exempt, char *head, size_t head_len)
{
	unsigned here = 0, to = 0;
	struct loop *weighed = NULL;
	struct hconn *h;

	if (conn_admit(srv, peer, exempt) != 0) {
		evutil_closesocket(fd);
		head_free(head, head_len);
		return;
	}
	if (lands_by_line(srv, PORT_PLAIN) && !srv->loops_stopping) {
		here = pick_loop(srv);
		to = land_where(srv, here, head, head_len, &weighed);
	}
	if (to != 0) {
		srv->http_conns++;        /* its place, held for loop `to` */
		server_adopt(&srv->per[to], fd, NULL, peer, PORT_PLAIN, exempt,
		    head, head_len, 0, weighed);
		return;
	}
	if ((h = hconn_new(&srv->per[0], fd, peer, PORT_PLAIN, exempt,
	    NULL)) == NULL) {
		warn("http: out of memory for a connection: closed",
		    KV_S("peer", peer));
		if (!exempt)
			srccount_put(srv->http_sources, peer);
		evutil_closesocket(fd);
		head_free(head, head_len);
		weigh_put(weighed);
		return;
	}
	h->weighed = weighed;
	if (lands_by_line(srv, PORT_PLAIN))
		debug("http: landed", KV_S("peer", peer), KV_U("loop", 0),
		    KV_U("from", 0), KV_U("picked", here));
	hconn_take_head(h, head, head_len);
}

/* An accepted connection (its PROXY header, if any, read) goes on: plain
 * HTTP at once (plain_start), TLS through admission (a slot now, or the
 * queue).  exempt: a --trusted-proxy's own connection (no PROXY header
 * naming a client), held to the totals only, not to one source's share.
 * evented: the socket had an event on loop 0 (its preface: tls_hand_out). */
static void
conn_start(struct server *srv, evutil_socket_t fd, const char *peer,
    enum conn_port port, int exempt, int evented)
{
	if (port == PORT_PLAIN) {
		plain_start(srv, fd, peer, exempt, NULL, 0);
	} else if (!exempt && srccount_take(srv->tls_sources, peer,
	    srv->gw->limits.max_tls_per_source) != 0) {
		/* Its source holds its share of slots and queue already. */
		srv->shed++;
		conn_refused(srv, peer, "--max-tls-per-source");
		evutil_closesocket(fd);
	} else if (srv->tls_handshakes < srv->gw->limits.max_tls_handshakes &&
	    srv->qlen == 0) {
		tls_start(srv, fd, peer, port, exempt, evented);
	} else if (port == PORT_TLS && tls_queue_over(srv)) {
		/* It would wait past what it may: told nothing either way
		 * (there is no TLS yet to say it with), at once is cheaper. */
		srv->shed++;
		srv->shed_at_accept++;
		conn_refused(srv, peer, "TLS queue holds what it can finish in time");
		if (!exempt)
			srccount_put(srv->tls_sources, peer);
		evutil_closesocket(fd);
	} else {
		tls_wait(srv, fd, peer, port, exempt, evented);
	}
}

/* The socket goes on as TLS (or plain) HTTP with this peer, a plain one
 * with the request line read (head); pf no longer owns either. */
static void
preface_hand_over(struct preface *pf)
{
	int exempt = pf->trusted && !pf->named;

	if (pf->counted) {      /* its place goes to what it becomes */
		srccount_put(pf->srv->tls_sources, pf->sock_peer);
		pf->counted = 0;
	}
	if (pf->port != PORT_PLAIN) {
		conn_start(pf->srv, pf->fd, pf->peer, pf->port, exempt, 1);
		pf->fd = -1;
		return;
	}
	if (pf->line_since_ms != 0 && (pf->head == NULL ||
	    memchr(pf->head, '\n', pf->head_len) == NULL))
		debug("http: no whole request line in time or in 8 KiB: on "
		    "loop 0", KV_S("peer", pf->peer), KV_U("loop", 0),
		    KV_U("bytes", pf->head_len), KV_I("waited_ms",
		    runtime_monotonic_ms() - pf->line_since_ms));
	plain_start(pf->srv, pf->fd, pf->peer, exempt, pf->head, pf->head_len);
	pf->fd = -1;
	pf->head = NULL;
	pf->head_len = 0;
}

static void
preface_free(struct preface *pf)
{
	LIST_REMOVE(pf, link);
	pf->srv->prefaces_n--;
	if (pf->counted)
		srccount_put(pf->srv->tls_sources, pf->sock_peer);
	if (pf->fd >= 0)
		evutil_closesocket(pf->fd);
	head_free(pf->head, pf->head_len);
	event_free(pf->ev);
	free(pf);
}

static void
preface_refuse(struct preface *pf, const char *reason)
{
	warn("connection refused", KV_S("peer", pf->peer), KV_S("reason", reason));
	preface_free(pf);
}

/*
 * Reads a plain-port connection's request line in its preface (docs/0040
 * section 2 (i-a), as a handshake loop reads a TLS one): until its LF or
 * LAND_LINE_MAX bytes, within LAND_WAIT_MS of its PROXY header (late: the
 * wait is over, what is there is taken).  Then it goes on
 * (preface_hand_over) with what was read as its first input: a line not
 * whole lands on loop 0; a client that closed or failed meanwhile is seen
 * so by its hconn.  Bytes past the line that came with it are read too
 * (they are input all the same); the rest stays in the socket for the
 * hconn's bufferevent.  1: done (pf freed); 0: wait for more bytes.
 */
static int
preface_line_step(struct preface *pf, int late)
{
	ssize_t n;

	while (pf->head_len < LAND_LINE_MAX && (pf->head == NULL ||
	    memchr(pf->head, '\n', pf->head_len) == NULL)) {
		if (pf->head == NULL && (pf->head = malloc(LAND_LINE_MAX)) == NULL)
			break;          /* out of memory: on loop 0, unread */
		n = recv(pf->fd, pf->head + pf->head_len,
		    LAND_LINE_MAX - pf->head_len, 0);
		if (n > 0) {
			pf->head_len += (size_t)n;
			continue;
		}
		if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK ||
		    errno == EINTR) && !late)
			return 0;
		break;                  /* late, closed or failed */
	}
	preface_hand_over(pf);
	preface_free(pf);
	return 1;
}

/* The PROXY header was read, or found absent: the socket goes on, unless
 * it is the plain port's and lands by its line (lands_by_line): that is
 * read first, from now on under the line's deadline.  As preface_step. */
static int
preface_header_done(struct preface *pf)
{
	if (pf->port == PORT_PLAIN && lands_by_line(pf->srv, PORT_PLAIN)) {
		pf->line_since_ms = runtime_monotonic_ms();
		pf->deadline_ms = pf->line_since_ms + LAND_WAIT_MS;
		return preface_line_step(pf, 0);
	}
	preface_hand_over(pf);
	preface_free(pf);
	return 1;
}

/* 1: done (handed over or refused, pf freed); 0: wait for more bytes. */
static int
preface_step(struct preface *pf)
{
	struct proxy_v2 p;
	char err[128];
	size_t need = PROXY_V2_HEAD_LEN;
	uint8_t first;
	ssize_t n;
	int r;

	if (pf->have == 0) {
		n = recv(pf->fd, &first, 1, MSG_PEEK);
		if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR))
			return 0;
		if (n <= 0) {
			preface_free(pf);       /* gone before saying anything */
			return 1;
		}
		if (first != PROXY_V2_FIRST_BYTE && pf->trusted &&
		    pf->srv->gw->require_proxy_header) {
			preface_refuse(pf, "no PROXY protocol header from a "
			    "--trusted-proxy source (--require-proxy-header)");
			return 1;
		}
		if (first != PROXY_V2_FIRST_BYTE)
			return preface_header_done(pf);
		if (!pf->trusted) {
			preface_refuse(pf, "a PROXY protocol header from a source "
			    "that is not a --trusted-proxy");
			return 1;
		}
	}
	for (;;) {
		r = proxy_v2_parse(pf->buf, pf->have, &p, &need, err, sizeof(err));
		if (r != 0 || pf->have == need)
			break;
		/* Exactly the header's bytes: what follows is the client's. */
		n = recv(pf->fd, pf->buf + pf->have, need - pf->have, 0);
		if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR))
			return 0;
		if (n <= 0) {
			preface_refuse(pf, "closed inside its PROXY header");
			return 1;
		}
		pf->have += (size_t)n;
	}
	if (r < 0) {
		preface_refuse(pf, err);
		return 1;
	}
	if (!p.local) {
		format_peer((struct sockaddr *)&p.src, pf->peer, sizeof(pf->peer));
		pf->named = 1;
	}
	return preface_header_done(pf);
}

static void
preface_cb(evutil_socket_t fd, short what, void *arg)
{
	struct preface *pf = arg;
	int done;

	if (pf->line_since_ms != 0) {
		done = preface_line_step(pf, (what & EV_TIMEOUT) != 0);
	} else if (what & EV_TIMEOUT) {
		preface_refuse(pf, "no PROXY header or first byte within "
		    "--tls-hello-timeout");
		return;
	} else
		done = preface_step(pf);
	if (done == 0) {
		int64_t left = pf->deadline_ms - runtime_monotonic_ms();
		struct timeval tv = runtime_ms_timeval(left > 0 ? (uint32_t)left : 0);

		event_add(pf->ev, &tv);
	}
}

static void
server_accept(struct evconnlistener *l, evutil_socket_t fd, struct sockaddr *sa,
    int salen, void *arg)
{
	struct server *srv = arg;
	const struct cidr_list *trusted = &srv->gw->trusted_proxies;
	struct timeval tv = runtime_ms_timeval(srv->gw->limits.tls_hello_timeout_ms);
	char peer[PEER_MAX];
	struct preface *pf;
	int one = 1;
	enum conn_port port = l == srv->plain ? PORT_PLAIN :
	    l == srv->mtls ? PORT_MTLS : PORT_TLS;

	format_peer(sa, peer, sizeof(peer));
	/* Frames are written whole: waiting for more only adds latency. */
	if (setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one)) != 0)
		debug("http TCP_NODELAY failed", KV_S("peer", peer),
		    KV_S("err", strerror(errno)));
	if (trusted->n == 0) {
		conn_start(srv, fd, peer, port, 0, 0);
		return;
	}
	/* The preface stage is under the admission caps too (docs/0028): at
	 * most --max-tls-queue at once, --max-tls-per-source of an untrusted
	 * source, and its first bytes within --tls-hello-timeout. */
	if (srv->prefaces_n >= srv->gw->limits.max_tls_queue) {
		conn_refused(srv, peer, "--max-tls-queue (PROXY prefaces)");
		evutil_closesocket(fd);
		return;
	}
	pf = calloc(1, sizeof(*pf));
	if (pf == NULL || (pf->ev = event_new(srv->gw->base, fd, EV_READ,
	    preface_cb, pf)) == NULL) {
		warn("http: out of memory for a connection: closed", KV_S("peer", peer));
		free(pf);
		evutil_closesocket(fd);
		return;
	}
	pf->srv = srv;
	pf->fd = fd;
	pf->port = port;
	pf->trusted = cidr_list_match(trusted, sa);
	snprintf(pf->peer, sizeof(pf->peer), "%s", peer);
	snprintf(pf->sock_peer, sizeof(pf->sock_peer), "%s", peer);
	LIST_INSERT_HEAD(&srv->prefaces, pf, link);
	srv->prefaces_n++;
	if (!pf->trusted) {
		if (srccount_take(srv->tls_sources, peer,
		    srv->gw->limits.max_tls_per_source) != 0) {
			conn_refused(srv, peer, "--max-tls-per-source (PROXY prefaces)");
			preface_free(pf);
			return;
		}
		pf->counted = 1;
	}
	if (port == PORT_PLAIN && !pf->trusted) {
		preface_refuse(pf, "the plain HTTP port (--plain-listen) takes "
		    "only --trusted-proxy sources");
		return;
	}
	/* One deadline for the whole header, not one per read. */
	pf->deadline_ms = runtime_monotonic_ms() + srv->gw->limits.tls_hello_timeout_ms;
	event_add(pf->ev, &tv);
}

static void
server_accept_error(struct evconnlistener *l, void *arg)
{
	struct server *srv = arg;
	struct timeval tv = { ACCEPT_RETRY_MS / 1000, (ACCEPT_RETRY_MS % 1000) * 1000 };

	/* Out of descriptors or memory: the listener would report it again at
	 * once, forever.  Pause it instead. */
	warn("accept failed: new connections paused",
	    KV_S("err", strerror(EVUTIL_SOCKET_ERROR())),
	    KV_I("pause_ms", ACCEPT_RETRY_MS));
	evconnlistener_disable(l);
	evtimer_add(srv->accept_retry, &tv);
}

static void
server_accept_retry(evutil_socket_t fd, short what, void *arg)
{
	struct server *srv = arg;

	if (!srv->listener_paused && srv->listener != NULL)
		evconnlistener_enable(srv->listener);
	if (srv->plain != NULL)
		evconnlistener_enable(srv->plain);
	if (srv->mtls != NULL)
		evconnlistener_enable(srv->mtls);
}

/* Takes what the kernel has already accepted on l (its listen backlog:
 * clients that see their connection as open) and closes l. */
static void
listener_close(struct server *srv, struct evconnlistener **lp)
{
	struct evconnlistener *l = *lp;
	evutil_socket_t lfd;

	if (l == NULL)
		return;
	lfd = evconnlistener_get_fd(l);
	for (;;) {
		struct sockaddr_storage ss;
		socklen_t sl = sizeof(ss);
		evutil_socket_t fd = accept(lfd, (struct sockaddr *)&ss, &sl);

		if (fd < 0)
			break;     /* EAGAIN: the backlog is empty (or an error) */
		if (evutil_make_socket_nonblocking(fd) != 0 ||
		    evutil_make_socket_closeonexec(fd) != 0) {
			evutil_closesocket(fd);
			continue;
		}
		server_accept(l, fd, (struct sockaddr *)&ss, (int)sl, srv);
	}
	*lp = NULL;
	evconnlistener_free(l);
}

/* On loop k once no connection is accepted any more (a drain's end): its
 * kept-alive connections between two requests close (on loop 0 they stay
 * until the exit; here they would hold it: server_unanswered counts loop
 * k's in one number), and every later answer closes its connection
 * (gw->stopping). */
static void
serve_loop_idle_close(void *arg)
{
	struct server_loop *sl = arg;
	struct hconn *h, *next;

	for (h = LIST_FIRST(&sl->http); h != NULL; h = next) {
		next = LIST_NEXT(h, link);
		if (hconn_idle(h))
			hconn_end(h);
	}
}

void
server_stop_accepting(struct gateway *gw)
{
	struct server *srv = gw->server;

	if (srv == NULL || srv->listener == NULL)
		return;
	if (srv->accept_retry != NULL)
		evtimer_del(srv->accept_retry);
	listener_close(srv, &srv->listener);
	listener_close(srv, &srv->plain);
	listener_close(srv, &srv->mtls);
	for (unsigned i = 1; i < srv->nloops; i++)
		(void)loop_call(srv->per[i].loop, serve_loop_idle_close,
		    &srv->per[i], NULL);
	info("stopped accepting connections: those accepted are served",
	    KV_U("unanswered", server_unanswered(gw)));
}

/* A kept-alive connection between two requests: nothing of it is owed. */
static int
hconn_idle(const struct hconn *h)
{
	return h->state == HC_READING && h->requests > 0 && !h->tls_counted &&
	    !http_reader_started(h->reader) &&
	    evbuffer_get_length(bufferevent_get_input(h->bev)) == 0 &&
	    hconn_written(h);
}

unsigned
server_unanswered(const struct gateway *gw)
{
	const struct server *srv = gw->server;
	const struct hconn *h;
	unsigned n;

	if (srv == NULL)
		return 0;
	n = srv->prefaces_n + srv->qlen + srv->tls_handshakes;
	LIST_FOREACH(h, &srv->per[0].http, link)
		if (!h->tls_counted && h->state != HC_DONE &&
		    h->state != HC_LINGERING && !hconn_idle(h))
			n++;
	/* Landed on another loop: each counted there (made before its slot
	 * came back, so never between the two); its idle ones were closed
	 * when the listeners were (serve_loop_idle_close). */
	for (unsigned i = 1; i < srv->nloops; i++)
		n += atomic_load_explicit(&srv->per[i].owed, memory_order_relaxed);
	return n;
}

/* ---- TLS ---- */

/* ALPN: we speak HTTP/1.1 only; say so when asked. */
static int
alpn_select(SSL *ssl, const unsigned char **out, unsigned char *outlen,
    const unsigned char *in, unsigned int inlen, void *arg)
{
	static const unsigned char ours[] = "\x08http/1.1";
	unsigned char *sel;

	if (SSL_select_next_proto(&sel, outlen, ours, sizeof(ours) - 1, in, inlen) !=
	    OPENSSL_NPN_NEGOTIATED)
		return SSL_TLSEXT_ERR_NOACK;
	*out = sel;
	return SSL_TLSEXT_ERR_OK;
}

static void
tls_error(char *err, size_t errlen, const char *what, const char *path)
{
	char detail[256] = "unknown error";
	unsigned long e = ERR_peek_last_error();

	if (e != 0)
		ERR_error_string_n(e, detail, sizeof(detail));
	ERR_clear_error();
	snprintf(err, errlen, "%s %s: %s", what, path, detail);
}

/*
 * The certificate chain the server presents, built once here instead of
 * at every handshake.  A server.crt holding the leaf alone leaves OpenSSL
 * to "auto-chain": each handshake ran X509_verify_cert over ca.crt (and
 * ca.next.crt) to find the chain to send, an ECDSA verify of our own
 * certificate costing about three times the handshake's own signature.
 * SSL_CTX_build_cert_chain runs that same search once, from the same store,
 * and keeps its result; without SSL_BUILD_CHAIN_FLAG_NO_ROOT it keeps the
 * trust anchor too, so the Certificate message is unchanged (leaf, then
 * the chain auto-chain found).  Errors are ignored as auto-chain ignores
 * them (whatever chain was found is sent).  A server.crt that carries its
 * own chain (SSL_CTX_use_certificate_chain_file put it in) is left as it
 * is: auto-chain never ran for it.  Should the build fail (out of memory,
 * a CA below the security level), nothing is set and auto-chain stays,
 * as before.  The context is made again from the files on every reload.
 */
static void
tls_fix_chain(SSL_CTX *ctx)
{
	STACK_OF(X509) *chain = NULL;

	if (SSL_CTX_get0_chain_certs(ctx, &chain) != 1 || chain != NULL)
		return;
	(void)SSL_CTX_build_cert_chain(ctx, SSL_BUILD_CHAIN_FLAG_IGNORE_ERROR |
	    SSL_BUILD_CHAIN_FLAG_CLEAR_ERROR);
	ERR_clear_error();
}

static SSL_CTX *
tls_context(const char *dir, enum tlspeer_mode mode, char *err, size_t errlen)
{
	char cert[4200], key[4200];
	SSL_CTX *ctx = SSL_CTX_new(TLS_server_method());

	if (ctx == NULL) {
		tls_error(err, errlen, "TLS", "context");
		return NULL;
	}
	snprintf(cert, sizeof(cert), "%s/server.crt", dir);
	snprintf(key, sizeof(key), "%s/server.key", dir);
	if (SSL_CTX_set_min_proto_version(ctx, TLS1_2_VERSION) != 1 ||
	    SSL_CTX_set_ciphersuites(ctx, TETHER_TLS13_SUITES) != 1 ||
	    SSL_CTX_set_cipher_list(ctx, TETHER_TLS12_CIPHERS) != 1) {
		tls_error(err, errlen, "TLS", "settings");
		goto fail;
	}
	/* IGNORE_UNEXPECTED_EOF: a peer that closes without close_notify has
	 * simply closed; our messages are framed (Content-Length, WebSocket),
	 * so truncation is seen without TLS's help. */
	SSL_CTX_set_options(ctx, SSL_OP_NO_RENEGOTIATION |
	    SSL_OP_CIPHER_SERVER_PREFERENCE | SSL_OP_NO_COMPRESSION |
	    SSL_OP_IGNORE_UNEXPECTED_EOF);
	/* Idle connections (most tunnels) then hold no TLS read/write buffers. */
	SSL_CTX_set_mode(ctx, SSL_MODE_RELEASE_BUFFERS);
	/* No session resumption (docs/0042): no client of ours resumes, and
	 * the two TLS 1.3 tickets OpenSSL issued after every handshake by
	 * default cost a fifth of the handshake's CPU (two per join). */
	SSL_CTX_set_num_tickets(ctx, 0);
	SSL_CTX_set_options(ctx, SSL_OP_NO_TICKET);
	SSL_CTX_set_session_cache_mode(ctx, SSL_SESS_CACHE_OFF);
	SSL_CTX_set_alpn_select_cb(ctx, alpn_select, NULL);
	if (SSL_CTX_use_certificate_chain_file(ctx, cert) != 1) {
		tls_error(err, errlen, "certificate", cert);
		goto fail;
	}
	if (SSL_CTX_use_PrivateKey_file(ctx, key, SSL_FILETYPE_PEM) != 1 ||
	    SSL_CTX_check_private_key(ctx) != 1) {
		tls_error(err, errlen, "private key", key);
		goto fail;
	}
	if (tlspeer_setup(ctx, dir, mode, err, errlen) != 0)
		goto fail;
	tls_fix_chain(ctx);
	return ctx;
fail:
	SSL_CTX_free(ctx);
	return NULL;
}

SSL_CTX *
server_tls_context_new(const char *data_dir, int peer, char *err, size_t errlen)
{
	return tls_context(data_dir, peer ? TLSPEER_REQUIRE : TLSPEER_ASK, err,
	    errlen);
}

X509 *
server_certificate(struct gateway *gw)
{
	return gw->server != NULL && gw->server->ssl_ctx != NULL ?
	    SSL_CTX_get0_certificate(gw->server->ssl_ctx) : NULL;
}

void
server_tls_use(struct gateway *gw, SSL_CTX *main, SSL_CTX *peer)
{
	struct server *srv = gw->server;

	/* Each SSL holds a reference to its context (SSL_new): freeing ours
	 * ends the context only when its last connection closes. */
	SSL_CTX_free(srv->ssl_ctx);
	srv->ssl_ctx = main;
	if (srv->mtls_ctx == NULL) {
		SSL_CTX_free(peer);
		return;
	}
	if (peer != NULL) {
		SSL_CTX_free(srv->mtls_ctx);
		srv->mtls_ctx = peer;
	}
}

/* ---- each loop's part (docs/0040 section 2) ---- */

/* Ends every connection of sl (on_close for each WebSocket: a tunnel ends
 * its session there) and frees its set.  On sl's thread, or on loop 0's
 * once sl's thread was joined. */
static void
serve_loop_close(struct server_loop *sl)
{
	sl->stopped = 1;
	while (!LIST_EMPTY(&sl->http)) {
		struct hconn *h = LIST_FIRST(&sl->http);

		if (h->state == HC_UPGRADING)
			hconn_abandon(h);
		hconn_free(h);
	}
	if (sl->ws != NULL)
		wsconn_destroy_all(sl->ws);
}

/* Loop k's first message: its WebSocket set, on its own base. */
static void
serve_loop_start(void *arg)
{
	struct server_loop *sl = arg;
	const struct gateway_limits *l = &sl->srv->gw->limits;

	sl->ws = wsconn_set_new(sl->base, wsconn_tick_for(l->ping_interval_ms,
	    l->ping_timeout_ms));
	if (sl->index > 0 && sl->ws != NULL &&
	    (sl->release_ev = event_new(sl->base, -1, 0, conn_release_cb,
	    sl)) == NULL) {
		wsconn_set_free(sl->ws);
		sl->ws = NULL;
	}
	if (sl->ws == NULL) {
		warn("http: out of memory for a loop's WebSockets: connections "
		    "land on loop 0", KV_U("loop", sl->index));
		return;
	}
	wsconn_set_budget(sl->ws, &sl->srv->gw->budget);
	if (sl->loop != NULL)
		wsconn_set_loops(sl->ws, sl->srv->gw->loops, sl->index);
}

/* Stop, step 3 of docs/0040 section 4, on loop k's thread: its
 * connections end and its set goes; what the loop defers of them runs
 * before its thread returns (loop.c). */
static void
serve_loop_stop(void *arg)
{
	struct server_loop *sl = arg;

	serve_loop_close(sl);
	wsconn_set_free(sl->ws);
	sl->ws = NULL;
	/* The places of what it closed go home now, in one message. */
	conn_release_flush(sl);
	if (sl->release_ev != NULL)
		event_free(sl->release_ev);
	sl->release_ev = NULL;
}

/* Every loop's part: loop 0's set made here, loop k's by its first
 * message (sent before any handshake: a loop runs its inbox in order).
 * 0, or -1 when out of memory. */
static int
server_loops_new(struct server *srv)
{
	struct gateway *gw = srv->gw;

	if ((srv->per = calloc(srv->nloops, sizeof(*srv->per))) == NULL)
		return -1;
	for (unsigned i = 0; i < srv->nloops; i++) {
		struct server_loop *sl = &srv->per[i];

		sl->srv = srv;
		sl->index = i;
		sl->loop = gw->loops != NULL ? &gw->loops[i] : NULL;
		sl->base = sl->loop != NULL ? sl->loop->base : gw->base;
		LIST_INIT(&sl->http);
	}
	serve_loop_start(&srv->per[0]);
	if (srv->per[0].ws == NULL)
		return -1;
	for (unsigned i = 1; i < srv->nloops; i++)
		(void)loop_call(srv->per[i].loop, serve_loop_start, &srv->per[i],
		    NULL);
	return 0;
}

/* After the joins, on loop 0's thread: loop 0's connections end, then
 * what a stopped loop k did not close itself (its stop message dropped),
 * and every set is freed. */
static void
server_loops_free(struct server *srv)
{
	if (srv->per == NULL)
		return;
	serve_loop_close(&srv->per[0]);
	for (unsigned i = 1; i < srv->nloops; i++)
		if (!srv->per[i].stopped || srv->per[i].ws != NULL ||
		    srv->per[i].release_ev != NULL) {
			serve_loop_stop(&srv->per[i]);
			/* Their places come back through loop 0's inbox. */
			loops_stop(srv->gw->loops, srv->gw->nloops);
		}
	/* What loop 0 still holds of them goes too (runtime.h). */
	runtime_drain(srv->gw->base);
	for (unsigned i = 0; i < srv->nloops; i++)
		wsconn_set_free(srv->per[i].ws);
	free(srv->per);
	srv->per = NULL;
}

/* ---- start and stop ---- */

/* A listener on host:port feeding server_accept.  NULL with err. */
static struct evconnlistener *
listen_on(struct server *srv, const char *host, int port, char *err, size_t errlen)
{
	struct sockaddr_storage ss;
	struct evconnlistener *l;
	int sslen;

	if (netaddr_literal(host, port, &ss, &sslen) != 0) {
		snprintf(err, errlen, "cannot listen on %s: not an IPv4 or IPv6 address",
		    host);
		return NULL;
	}
	l = evconnlistener_new_bind(srv->gw->base, server_accept, srv,
	    LEV_OPT_CLOSE_ON_FREE | LEV_OPT_REUSEABLE | LEV_OPT_CLOSE_ON_EXEC,
	    LISTEN_BACKLOG, (struct sockaddr *)&ss, sslen);
	if (l == NULL) {
		snprintf(err, errlen, "cannot listen on %s:%d: %s", host, port,
		    strerror(errno));
		return NULL;
	}
	evconnlistener_set_error_cb(l, server_accept_error);
	return l;
}

int
server_start(struct gateway *gw, const struct route *const *routes,
    const char *host, int port, char *err, size_t errlen)
{
	struct server *srv = calloc(1, sizeof(*srv));

	if (srv == NULL) {
		snprintf(err, errlen, "out of memory");
		return -1;
	}
	srv->gw = gw;
	srv->routes = routes;
	for (const struct route *const *r = routes; *r != NULL; r++) {
		/* The reader knows one predicate: one exchange route. */
		assert((*r)->exchange == NULL || srv->exchange == NULL);
		assert((*r)->exchange == NULL || (*r)->matches != NULL);
		if ((*r)->exchange != NULL)
			srv->exchange = *r;
	}
	LIST_INIT(&srv->prefaces);
	gw->server = srv;
	srv->ssl_ctx = tls_context(gw->data_dir, TLSPEER_ASK, err, errlen);
	if (srv->ssl_ctx == NULL)
		goto fail;
	srv->accept_retry = evtimer_new(gw->base, server_accept_retry, srv);
	srv->queue = calloc(gw->limits.max_tls_queue, sizeof(*srv->queue));
	srv->tls_sources = srccount_new();
	srv->http_sources = srccount_new();
	srv->nloops = gw->loops != NULL ? gw->nloops : 1;
	srv->loop_inflight = calloc(srv->nloops, sizeof(*srv->loop_inflight));
	srv->loop_handshakes = calloc(srv->nloops, sizeof(*srv->loop_handshakes));
	if (srv->accept_retry == NULL || srv->queue == NULL ||
	    srv->tls_sources == NULL || srv->http_sources == NULL ||
	    srv->loop_inflight == NULL || srv->loop_handshakes == NULL ||
	    server_loops_new(srv) != 0) {
		snprintf(err, errlen, "out of memory");
		goto fail;
	}
	/* Before the listener: every loop runs once the port takes connections. */
	if (srv->nloops > 1 && (srv->loops = tlsloops_new(gw->loops, srv->nloops,
	    tls_job_done, tls_land, srv, err, errlen)) == NULL)
		goto fail;
	srv->listener = listen_on(srv, host, port, err, errlen);
	if (srv->listener == NULL)
		goto fail;
	srv->port = netaddr_bound_port(evconnlistener_get_fd(srv->listener));
	return 0;
fail:
	server_stop(gw);
	return -1;
}

void
server_tls_admission(const struct gateway *gw, uint32_t *handshaking,
    uint32_t *waiting, uint64_t *shed)
{
	const struct server *srv = gw->server;

	*handshaking = srv != NULL ? srv->tls_handshakes : 0;
	*waiting = srv != NULL ? srv->qlen : 0;
	*shed = srv != NULL ? srv->shed : 0;
}

uint32_t
server_tls_waiting(const struct gateway *gw)
{
	const struct server *srv = gw->server;

	return srv != NULL ? atomic_load_explicit(&srv->qlen_seen,
	    memory_order_relaxed) : 0;
}

uint64_t
server_tls_shed_at_accept(const struct gateway *gw)
{
	return gw->server != NULL ? gw->server->shed_at_accept : 0;
}

unsigned
server_loops(const struct gateway *gw)
{
	return gw->server != NULL ? gw->server->nloops : 0;
}

void
server_loop_stats(const struct gateway *gw, unsigned i, uint64_t *handshakes,
    double *cpu_seconds)
{
	const struct server *srv = gw->server;

	*handshakes = 0;
	*cpu_seconds = 0;
	if (srv == NULL || i >= srv->nloops)
		return;
	*handshakes = srv->loop_handshakes[i];
	*cpu_seconds = gw->loops != NULL ? loop_cpu_seconds(&gw->loops[i]) : 0;
}

int
server_port(struct gateway *gw)
{
	return gw->server != NULL ? gw->server->port : -1;
}

int
server_listen_plain(struct gateway *gw, const char *host, int port, char *err,
    size_t errlen)
{
	struct server *srv = gw->server;

	if (gw->trusted_proxies.n == 0) {
		snprintf(err, errlen, "--plain-listen needs --trusted-proxy: the "
		    "plain port takes only the balancer's connections");
		return -1;
	}
	srv->plain = listen_on(srv, host, port, err, errlen);
	if (srv->plain == NULL)
		return -1;
	srv->plain_port = netaddr_bound_port(evconnlistener_get_fd(srv->plain));
	return 0;
}

int
server_listen_mtls(struct gateway *gw, const char *host, int port, char *err,
    size_t errlen)
{
	struct server *srv = gw->server;

	srv->mtls_ctx = tls_context(gw->data_dir, TLSPEER_REQUIRE, err, errlen);
	if (srv->mtls_ctx == NULL)
		return -1;
	srv->mtls = listen_on(srv, host, port, err, errlen);
	if (srv->mtls == NULL)
		return -1;
	srv->mtls_port = netaddr_bound_port(evconnlistener_get_fd(srv->mtls));
	return 0;
}

int
server_mtls_port(struct gateway *gw)
{
	return gw->server != NULL && gw->server->mtls != NULL ?
	    gw->server->mtls_port : -1;
}

int
server_plain_port(struct gateway *gw)
{
	return gw->server != NULL && gw->server->plain != NULL ?
	    gw->server->plain_port : -1;
}

void
server_stop_loops(struct gateway *gw)
{
	struct server *srv = gw->server;

	if (srv == NULL || srv->loops_stopping)
		return;
	srv->loops_stopping = 1;
	/* First the handshakes they hold (back to loop 0), then what lives
	 * there: each loop's inbox runs them in this order. */
	tlsloops_stop(srv->loops);
	for (unsigned i = 1; srv->per != NULL && i < srv->nloops; i++)
		(void)loop_call(srv->per[i].loop, serve_loop_stop, &srv->per[i],
		    NULL);
}

void
server_stop(struct gateway *gw)
{
	struct server *srv = gw->server;

	if (srv == NULL)
		return;
	server_stop_loops(gw);
	srv->closing = 1;
	if (srv->listener != NULL)
		evconnlistener_free(srv->listener);
	srv->listener = NULL;
	if (srv->plain != NULL)
		evconnlistener_free(srv->plain);
	srv->plain = NULL;
	if (srv->mtls != NULL)
		evconnlistener_free(srv->mtls);
	srv->mtls = NULL;
	while (!LIST_EMPTY(&srv->prefaces))
		preface_free(LIST_FIRST(&srv->prefaces));
	if (srv->accept_retry != NULL)
		event_free(srv->accept_retry);
	atomic_store_explicit(&srv->qlen_seen, 0, memory_order_relaxed);
	for (; srv->qlen > 0; srv->qlen--) {
		evutil_closesocket(srv->queue[srv->qhead].fd);
		srv->qhead = (srv->qhead + 1) % srv->gw->limits.max_tls_queue;
	}
	free(srv->queue);
	srv->queue = NULL;
	/* The handshake loops stop; what they held comes back (through loop
	 * 0's inbox, which loops_stop runs) and is closed; each closed its
	 * own connections first (server_stop_loops), and their places came
	 * back the same way. */
	loops_stop(gw->loops, gw->nloops);
	tlsloops_free(srv->loops);
	srv->loops = NULL;
	server_loops_free(srv);
	srccount_free(srv->tls_sources);    /* after the slots gave theirs back */
	srv->tls_sources = NULL;
	srccount_free(srv->http_sources);
	srv->http_sources = NULL;
	if (srv->ssl_ctx != NULL)
		SSL_CTX_free(srv->ssl_ctx);
	if (srv->mtls_ctx != NULL)
		SSL_CTX_free(srv->mtls_ctx);
	free(srv->loop_inflight);
	free(srv->loop_handshakes);
	free(srv);
	gw->server = NULL;
}
