/*
 * route.h: what a route is, for the transport (server.c) and the routes
 * (api.c, ui.c, metrics_route.c, dial.c, k8s.c, tunnel.c).
 *
 * The transport knows TLS, HTTP/1.1 and WebSocket and no route by name:
 * each route registers a struct route (main.c builds the table), and the
 * server hands it what it matched, in one of three shapes:
 *
 *   request   a whole request (bounded body), answered as a function:
 *             struct route_request in, struct route_response out; or, when
 *             the answer needs the store thread, later: the route takes a
 *             ticket with reply_later during its call and answers with
 *             reply_send (server.h: "Replies later");
 *   upgrade   a valid WebSocket handshake, decided now or later with
 *             exactly one of upgrade_accept or upgrade_refuse (server.h);
 *   exchange  a request handed over as soon as its head is read, which
 *             then owns the connection until it ends (server.h:
 *             "Exchanges"); its state is the route's, an opaque pointer
 *             the server gives back to the route's callbacks and frees
 *             only through them.
 *
 * The table is read in order, a route at a time, per shape: the first
 * route whose matches() accepts the path and that has that shape wins;
 * matches NULL accepts every path (the admin API, last).  Cost: one
 * matches() call per route per request, a handful of string compares.
 */
#ifndef TETHER_ROUTE_H
#define TETHER_ROUTE_H

#include <limits.h>
#include <stddef.h>

struct gateway;
struct upgrade;
struct hconn;
struct http_request;
struct evbuffer;
struct json_t;

struct route_request {
	const char *method;          /* "GET", "POST", ... */
	const char *path;            /* "/v1/clusters", no query */
	const char *query;           /* "cluster=c-1&x=y" (decoded), or "" */
	const char *authorization;   /* the Authorization header, or "" */
	const char *body;            /* may be NULL when body_len is 0 */
	size_t body_len;
	int body_too_large;          /* the body exceeded the limit and was cut */
	const char *replica;         /* the Tether-Replica header, or "" */
	int from_replica;            /* 1: the client proved a gateway replica's
	                                certificate over TLS (tlspeer.h) */
	struct hconn *conn;          /* the transport's, for reply_later only */
};

struct route_response {
	int status;
	const char *content_type;    /* static string */
	char *body;                  /* malloc'd; the server wipes and frees it;
	                                NULL: the server answers 500 */
	size_t body_len;
	const char *headers;         /* more header lines, "Name: value\r\n"...
	                                (static), or NULL */
};

/*
 * An exchange: a request whose route takes it as soon as its head is read
 * (the k8s proxy).  x is what start returned; the server never looks into
 * it.  Exactly one route may have this shape (the HTTP reader decides at
 * head time with its matches()).
 */
struct route_exchange {
	/* rq is valid during the call only.  Returns the exchange, or NULL
	 * when it was answered at once (exchange_reply or exchange_refuse). */
	void *(*start)(struct gateway *gw, struct hconn *h,
	    const struct http_request *rq);
	/* The reader refused a request of this route (status and reason from
	 * http_reader_error); rq holds what was read of it.  Must answer with
	 * exchange_refuse. */
	void (*unreadable)(struct hconn *h, const struct http_request *rq,
	    int status, const char *reason);
	/* A piece of the decoded request body, and its end. */
	void (*body)(void *x, const char *data, size_t len);
	void (*body_end)(void *x);
	/* 0 while x takes no more body: the server stops reading until
	 * exchange_resume_input. */
	int (*wants_body)(void *x);
	/* After exchange_go_raw: takes what it can of in.  0 if it took it
	 * all, 1 if full (exchange_resume_input follows). */
	int (*raw_input)(void *x, struct evbuffer *in);
	/* The client's connection is gone, or ends because the request's
	 * body was malformed (nothing more is written to it): x is freed; no
	 * exchange_* call on its connection may follow. */
	void (*client_gone)(void *x);
};

/* What a route's land_loop is told of a connection before anything is
 * built on it (docs/0040 section 2 (i-a)): its request line's path and
 * query, decoded as the reader decodes them, valid during the call; and
 * where to say which loop its requests' tunnel side will run on. */
struct route_landing {
	const char *path;             /* "/k8s/clusters/c-1/api", no query */
	const char *query;            /* "node=n1&target=x:22", or "" */
	unsigned here;                /* the loop its handshake ran on */
	unsigned *tunnel;             /* out, set to ROUTE_NO_LOOP before the
	                                 call: the loop (0..nloops-1) whose
	                                 tunnel this connection's streams will
	                                 use, when the landing weighed it
	                                 (--landing any, access_land_loop);
	                                 the server counts it there
	                                 (loop->tunnel_side) while the
	                                 connection lives */
};

/* route_landing's tunnel when the landing weighed no tunnel side. */
#define ROUTE_NO_LOOP UINT_MAX

struct route {
	const char *name;                       /* for logs */
	int (*matches)(const char *path);       /* NULL: every path */
	/* req is valid during the call only (copy what a later answer needs).
	 * Fills resp, or takes a ticket (reply_later) and leaves resp alone. */
	void (*request)(struct gateway *gw, const struct route_request *req,
	    struct route_response *resp);
	void (*upgrade)(struct gateway *gw, const struct route_request *req,
	    struct upgrade *u);
	const struct route_exchange *exchange;
	/* Also served on the mutual-TLS port (--peer-listen), where only
	 * routes marked so are. */
	int mtls_port;
	/* Its connections live on loop 0 (docs/0040 section 2: the hub of
	 * tunnels, the peers registry are loop 0's): with --landing any, a
	 * connection whose request line names it lands there, and one that
	 * asks for it later on another loop is refused (421). */
	int home_loop;
	/* With --landing any, for a connection whose request line names this
	 * route (home_loop unset): the loop (0..nloops-1) it lands on,
	 * chosen by what the line says (its path and query) and where its
	 * handshake ran (at->here: return it to stay).  Asked on the
	 * handshake loop's thread, so it reads only what any thread may
	 * (atomics, the agent directory).  NULL: it stays where its
	 * handshake ran.  Cost: one call per landing, which must take no
	 * long lock (O(agents of one cluster) at most, docs/0040 step 8). */
	unsigned (*land_loop)(struct gateway *gw, const struct route_landing *at);
	/* Its upgraded connections stay in the landing's counts (core/loop.h:
	 * their loop's nconns, and the tunnel_side their landing weighed)
	 * until they end, their wsconn owning the places from the 101
	 * (wsconn_keep_counts): a dial, whose streams are the load of the
	 * loop it lives on and of its agent's.  Unset: the places are given
	 * back at the 101 (a tunnel, counted in ntunnels; a replica's link). */
	int keeps_counts;
};

/* Answers for request routes.  route_respond_text copies text;
 * route_respond_json takes v (NULL: 500) and writes one line;
 * route_respond_error writes {"error": reason} (reason printf-formatted). */
void route_respond_text(struct route_response *r, int status, const char *type,
    const char *text, size_t len);
void route_respond_json(struct route_response *r, int status, struct json_t *v);
void route_respond_error(struct route_response *r, int status, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

#endif
