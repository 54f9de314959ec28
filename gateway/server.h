/*
 * server.h: the gateway's single listening port: TLS (OpenSSL), HTTP/1.1
 * (http-parser) and WebSocket, on the process's libevent loop
 * (docs/0004-gateway-http-server.md).
 *
 * HTTP requests are collected (method, path, query, bearer token, a bounded
 * body) and handed to api_handle; WebSocket upgrades on /v1/connect with
 * subprotocol tether.v1 become agent tunnels, each a struct conn carrying
 * one struct session.  The conn_* calls are what a session may do to its
 * transport.
 */
#ifndef TETHER_SERVER_H
#define TETHER_SERVER_H

#include <stddef.h>

struct gateway;
struct conn;
struct frame;

/*
 * Listens on host:port (an IPv4 or IPv6 literal; port 0: any free port) on
 * gw->base, with the TLS certificate and key in gw->data_dir.  Returns 0 or
 * -1 with err.
 */
int server_start(struct gateway *gw, const char *host, int port, char *err,
    size_t errlen);
/* The port actually bound (useful with port 0). */
int server_port(struct gateway *gw);
/* Closes the listener and frees every connection (tunnels' sessions get
 * session_closed, pending upgrades their abandon callback).  Idempotent. */
void server_stop(struct gateway *gw);

/*
 * Queues one frame to the agent.  Returns 0, or -1 when the frame cannot be
 * encoded or would pass the connection's output cap (session_max_queue; the
 * connection is then dropped: a peer that does not read loses its tunnel,
 * not our memory).
 */
int conn_send(struct conn *c, const struct frame *f);
/* Closes the connection once queued frames are written.  The session is
 * told through session_closed() later, never from inside this call. */
void conn_close(struct conn *c);
/* Remote address for logs ("127.0.0.1:53122"). */
const char *conn_peer(const struct conn *c);
/* The tunnel's WebSocket, for the stream multiplexer's bulk path. */
struct wsconn *conn_ws(struct conn *c);

/*
 * Deferred WebSocket upgrades: a request with "Upgrade: websocket" on any
 * path but /v1/connect is handed to api_upgrade (api.h) together with a
 * struct upgrade.  The API layer decides now or later (for example after
 * an agent answered OPEN) by calling exactly one of upgrade_accept or
 * upgrade_refuse.  If the client goes away first, the abandon callback
 * runs and the upgrade is freed: neither may be called after that.
 */
struct upgrade;
struct wsconn;
struct wsconn_handlers;

/* The Sec-WebSocket-Protocol values the client offered ("" if none). */
const char *upgrade_offered_protocols(const struct upgrade *u);
void upgrade_on_abandon(struct upgrade *u, void (*cb)(void *arg), void *arg);
/* Answers 101 (with subprotocol, if non-NULL) and returns the connection;
 * NULL if out of memory (the client got 500 or was dropped).  Either way u
 * is gone. */
struct wsconn *upgrade_accept(struct upgrade *u, const char *subprotocol,
    const struct wsconn_handlers *h, void *arg);
/* Answers status with a JSON body {"error": reason} and closes. */
void upgrade_refuse(struct upgrade *u, int status, const char *reason);

/*
 * Proxied requests (k8s.c): a request whose path k8s_matches is not
 * answered by the API but handed to k8s_start together with its connection
 * (a struct hconn), as soon as its head is read.  While the exchange runs
 * the connection is its own: the request body reaches k8s_body piece by
 * piece (only while k8s_wants_body), then k8s_body_end; the answer is
 * written to proxy_output.  The exchange ends with exactly one of
 * proxy_reply, proxy_finish or proxy_abort, or, if the client goes first,
 * the server calls k8s_client_gone; nothing may be called after either.
 */
struct hconn;
struct evbuffer;

struct evbuffer *proxy_output(struct hconn *h);
const char *proxy_peer(const struct hconn *h);
/* 1 once the whole request (body included) has been read. */
int proxy_request_done(const struct hconn *h);
/* 1 if the connection may carry another request after this answer, as
 * far as the client and the gateway are concerned. */
int proxy_keep_alive(const struct hconn *h);
/* An agent stream left idle between requests of this connection, owned
 * by k8s.c (NULL if none); the server hands it to k8s_parked_gone when the
 * connection ends. */
struct k8s_link;
struct k8s_link *proxy_parked(struct hconn *h);
void proxy_set_parked(struct hconn *h, struct k8s_link *l);
/* The exchange takes input again (body, or raw bytes after a 101). */
void proxy_resume_input(struct hconn *h);
/* After a 101: input from now on goes to k8s_raw_input as it arrives. */
void proxy_go_raw(struct hconn *h);
/* Answers status with a JSON body (malloc'd, taken) and ends the exchange. */
void proxy_reply(struct hconn *h, int status, char *body, size_t len);
/* The answer is queued: carry the next request if keep_alive (and the
 * request was read whole), else close once it is written. */
void proxy_finish(struct hconn *h, int keep_alive);
/* The answer cannot be completed: drop the connection now. */
void proxy_abort(struct hconn *h);
/* A passed-on request the reader refused (no exchange exists): answers
 * status with a JSON body (malloc'd, taken) and closes. */
void proxy_refuse(struct hconn *h, int status, char *body, size_t len);

#endif
