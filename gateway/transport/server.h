/*
 * server.h: the gateway's single listening port: TLS (OpenSSL), HTTP/1.1
 * (http-parser) and WebSocket, on the process's libevent loop
 * (docs/0004-gateway-http-server.md).
 *
 * The server knows no route by name: it hands each request to the route
 * that registered for it (route.h), in one of three shapes: a request
 * answered at once, a WebSocket upgrade (struct upgrade, below), or an
 * exchange that owns the connection while it runs (struct hconn, below).
 */
#ifndef TETHER_SERVER_H
#define TETHER_SERVER_H

#include <stddef.h>
#include <stdint.h>

struct gateway;
struct route;

/*
 * Listens on host:port (an IPv4 or IPv6 literal; port 0: any free port) on
 * gw->base, with the TLS certificate and key in gw->data_dir, serving
 * routes (a NULL-terminated table, read in order; kept, not copied).
 * TLS handshakes run on gw->loops 1..nloops-1 when there are (core/loop.h;
 * gw->loops NULL: all on gw->base).  Returns 0 or -1 with err.
 */
int server_start(struct gateway *gw, const struct route *const *routes,
    const char *host, int port, char *err, size_t errlen);
/* The port actually bound (useful with port 0). */
/* How many accepted connections wait for a TLS slot (the queue), as of
 * its last change: any thread (a relaxed atomic; loop 0's own count may
 * have moved since).  0 before server_start and after server_stop. */
uint32_t server_tls_waiting(const struct gateway *gw);
/* The TLS admission's state (docs/0018): handshakes under way, accepted
 * connections waiting for a slot, and those closed unread (client gone or
 * waited over half of --handshake-timeout) since start.  Zeros before server_start. */
void server_tls_admission(const struct gateway *gw, uint32_t *handshaking,
    uint32_t *waiting, uint64_t *shed);
/* Of those shed, the ones closed at accept because the queue held what
 * the TLS handshakes finish in time (docs/0035).  0 before server_start. */
uint64_t server_tls_shed_at_accept(const struct gateway *gw);
int server_port(struct gateway *gw);
/* The event loops serving (gw->workers, docs/0032): loop 0 is gw->base,
 * the others run TLS handshakes only.  0 before server_start. */
unsigned server_loops(const struct gateway *gw);
/* Loop i's TLS handshakes finished since start and its thread's CPU
 * seconds (zeros for a loop that does not exist).  On loop 0. */
void server_loop_stats(const struct gateway *gw, unsigned i, uint64_t *handshakes,
    double *cpu_seconds);
/*
 * After server_start: also listens on host:port for plain HTTP (no TLS),
 * for a load balancer that terminates TLS.  Only sources in
 * gw->trusted_proxies may connect there (refused: -1 with err when there
 * are none).  Returns 0 or -1 with err.
 */
int server_listen_plain(struct gateway *gw, const char *host, int port, char *err,
    size_t errlen);
/*
 * After server_start: also listens on host:port (--peer-listen) for other
 * replicas only: the TLS handshake requires a replica's certificate
 * (tlspeer.h), and only routes marked mtls_port are served there.  Returns
 * 0 or -1 with err.
 */
int server_listen_mtls(struct gateway *gw, const char *host, int port, char *err,
    size_t errlen);
/* The mutual-TLS port bound, or -1 when there is none. */
int server_mtls_port(struct gateway *gw);
/* The plain port bound, or -1 when there is none. */
int server_plain_port(struct gateway *gw);

struct ssl_ctx_st;
struct x509_st;
/*
 * A server TLS context as server_start's (peer 0) or --peer-listen's
 * (peer 1) with the certificate and key now in data_dir (server.crt,
 * server.key, checked to belong together; ca.crt for the peer check).
 * Touches no gateway state: callable on any thread (it reads files: not
 * on the loop).  The caller owns the result.  NULL with err.
 */
struct ssl_ctx_st *server_tls_context_new(const char *data_dir, int peer,
    char *err, size_t errlen);
/* The certificate new handshakes on the main port get (borrowed, valid
 * until the next server_tls_use), or NULL before server_start. */
struct x509_st *server_certificate(struct gateway *gw);
/*
 * From now on new handshakes on the main port use main, those on the
 * --peer-listen port peer (NULL when there is none: peer is then freed):
 * takes both; the contexts they replace are released, and connections
 * that hold them keep them until they close.  After server_start.
 */
void server_tls_use(struct gateway *gw, struct ssl_ctx_st *main,
    struct ssl_ctx_st *peer);
/*
 * The drain's end (docs/0017): takes the connections the kernel already
 * accepted (the listen backlog), then closes every listener.  What was
 * accepted goes on as usual.  Idempotent.
 */
void server_stop_accepting(struct gateway *gw);
/* Connections accepted and owed an answer: in a PROXY preface, waiting for
 * a TLS slot, in a TLS handshake, or an HTTP connection before or in a
 * request (not a kept-alive one between two, not one whose last answer is
 * out).  WebSockets are not counted (streams, tunnels).  O(HTTP
 * connections). */
unsigned server_unanswered(const struct gateway *gw);
/* Stop, step 3 of docs/0040 section 4: asks loops 1..nloops-1 to give back
 * the handshakes they hold and then to close, each on its own thread, the
 * connections living there (WebSockets get their on_close); their places
 * come back to loop 0 through its inbox (loops_stop runs it).  Sent before
 * the loops' links close (main.c), so their streams end with them.  From
 * loop 0's thread; server_stop calls it too.  Idempotent. */
void server_stop_loops(struct gateway *gw);
/* Closes the listener and frees every connection (WebSockets get their
 * on_close, pending upgrades their abandon callback, exchanges their
 * route's client_gone).  Stops gw->loops 1..nloops-1 (loops_stop: the
 * handshakes they held come back and are closed); the loops stay
 * allocated for loops_free.  Idempotent. */
void server_stop(struct gateway *gw);

/*
 * Upgrades: a valid WebSocket handshake on a path whose route has an
 * upgrade callback.  The route decides now or later (for example after an
 * agent answered OPEN) by calling exactly one of upgrade_accept or
 * upgrade_refuse.  If the client goes away first, the abandon callback
 * runs and the upgrade is freed: neither may be called after that.
 */
struct upgrade;
struct wsface;
struct wsface_handlers;

/* The Sec-WebSocket-Protocol values the client offered ("" if none). */
const char *upgrade_offered_protocols(const struct upgrade *u);
/* Remote address for logs ("127.0.0.1:53122"). */
const char *upgrade_peer(const struct upgrade *u);
void upgrade_on_abandon(struct upgrade *u, void (*cb)(void *arg), void *arg);
/* Answers 101 (with subprotocol, if non-NULL) and returns the connection's
 * face (common/wsface.h; h static, called with arg); NULL if out of memory
 * (the client got 500 or was dropped).  Either way u is gone. */
struct wsface *upgrade_accept(struct upgrade *u, const char *subprotocol,
    const struct wsface_handlers *h, void *arg);
/* Answers status with a JSON body {"error": reason} and closes. */
void upgrade_refuse(struct upgrade *u, int status, const char *reason);
/* The same for a refusal that means "come back later", with a Retry-After
 * header: retry_after_ms in whole seconds, rounded down, at least 1 (the
 * agent adds up to a second of its own jitter: docs/0035). */
void upgrade_refuse_later(struct upgrade *u, int status, const char *reason,
    uint32_t retry_after_ms);

/*
 * Replies later (request routes, route.h).  A route whose answer needs
 * work done elsewhere (the store thread) calls reply_later during its
 * request call and leaves resp alone; the connection then waits for the
 * answer, its input parked, for at most --http-timeout.  The route owns
 * the ticket until it calls reply_send, exactly once, from the loop
 * (possibly still inside its request call): the answer goes out if the
 * client is still there.  If the client left first, or the deadline
 * passed (the client got 504 and the connection closed), the ticket is
 * told (reply_client_gone) and the late answer is only wiped and freed.
 * Cost: one small allocation per deferred request.
 */
struct reply;
struct route_request;
struct route_response;

/* The ticket for req's answer (req as the route got it, during its call),
 * or NULL when out of memory: then answer now, through resp. */
struct reply *reply_later(const struct route_request *req);
/* 1 once the client will never see this ticket's answer. */
int reply_client_gone(const struct reply *t);
/* Answers (takes resp->body; NULL body: 500) and frees t. */
void reply_send(struct reply *t, struct route_response *resp);

/*
 * Exchanges (route.h: struct route_exchange): a request whose route takes
 * it as soon as its head is read, with its connection (a struct hconn).
 * While the exchange runs the connection is its own: the request body
 * reaches the route's body callback piece by piece (only while wants_body),
 * then body_end; the answer is written to exchange_output.  The exchange
 * ends with exactly one of exchange_reply, exchange_finish or
 * exchange_abort, or, if the client goes first, the server calls the
 * route's client_gone; nothing may be called after either.
 */
struct hconn;
struct evbuffer;

struct evbuffer *exchange_output(struct hconn *h);
/*
 * Sends len bytes of the answer with this loop pass's send instead of
 * through exchange_output, when that holds nothing (the order is kept) and
 * they are few (tlswrite.h: tls_write_now, TLS_WRITE_NOW_MAX): a TLS
 * connection's output arms its write event and disarms it once written,
 * two epoll_ctl(2) and a loop pass per answer.  Returns 1 if sent (the
 * bytes are the connection's: no drain of exchange_output reports them),
 * 0 if the caller adds them to exchange_output (a plain connection, bytes
 * queued there, too many), -1 if the connection failed (its next read
 * ends it: the caller goes on as if sent).  The small answers of a pass
 * leave in one record.
 */
int exchange_write_now(struct hconn *h, const void *data, size_t len);
const char *exchange_peer(const struct hconn *h);
/* 1 once the whole request (body included) has been read. */
int exchange_request_done(const struct hconn *h);
/* 1 if the connection may carry another request after this answer, as
 * far as the client and the gateway are concerned. */
int exchange_keep_alive(const struct hconn *h);
/*
 * State a route keeps on the connection between two exchanges (the k8s
 * proxy's idle agent stream).  The connection owns it from exchange_keep
 * on: it frees it with free_fn when it ends, unless the route took it back
 * first with exchange_take_kept.  At most one: the connection must keep
 * nothing when exchange_keep is called (asserted).
 */
void exchange_keep(struct hconn *h, void *state, void (*free_fn)(void *state));
/* The kept state (NULL if none), still owned by the connection. */
void *exchange_kept(const struct hconn *h);
/* Takes the kept state back (NULL if none): the caller owns it now. */
void *exchange_take_kept(struct hconn *h);
/* The exchange takes input again (body, or raw bytes after a 101). */
void exchange_resume_input(struct hconn *h);
/* After a 101: input from now on goes to the route's raw_input. */
void exchange_go_raw(struct hconn *h);
/* Answers status with a JSON body (malloc'd, taken) and ends the exchange. */
void exchange_reply(struct hconn *h, int status, char *body, size_t len);
/* The same with Retry-After: seconds (a 503 that says when to come back). */
void exchange_reply_later(struct hconn *h, int status, char *body, size_t len,
    unsigned seconds);
/* The answer is queued: carry the next request if keep_alive (and the
 * request was read whole), else close once it is written. */
void exchange_finish(struct hconn *h, int keep_alive);
/* The answer cannot be completed: drop the connection now. */
void exchange_abort(struct hconn *h);
/* A request of the route the reader refused (no exchange exists): answers
 * status with a JSON body (malloc'd, taken) and closes. */
void exchange_refuse(struct hconn *h, int status, char *body, size_t len);

#endif
