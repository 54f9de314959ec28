/*
 * k8s.c: the /k8s/clusters/ID/<rest> proxy (see k8s.h).
 *
 * One exchange per request: the bearer token is checked for the cluster
 * (access_cluster_async: its store reads on the store thread, the body
 * unread meanwhile, 503 past --http-timeout; a keep-alive connection's
 * next request with the same token bytes for the same cluster takes the
 * last grant without a check while the loop's cache would have answered
 * it, access_memo), an active agent of it is
 * picked, a stream to its "kube-api" service is
 * opened, and the request is written to it again as
 *
 *   METHOD /<rest>?<query> HTTP/1.1
 *   the client's headers, minus Authorization (no gateway token reaches
 *   the node), Impersonate-*, the framing and hop-by-hop headers,
 *   nothing (keep-alive), Connection: close when the client's connection
 *   ends after this answer, or Upgrade + Connection: Upgrade when asked,
 *   the framing the reader parsed (Content-Length, or chunked)
 *
 * with the body as it arrives (chunks encoded again).  The reader has
 * refused any head with two readings (http_head_check); answer heads are
 * held to the same rules.  A stream whose answer leaves the upstream connection fit is
 * parked on the client's connection (struct k8s_link) and adopted by its
 * next request for the same cluster and principal; see x_park, x_retry
 * and docs/0007.  The answer's head is parsed (http-parser, response mode),
 * checked (http_head_check) and written again from its raw bytes
 * (put_header_lines) without Connection, Keep-Alive and Proxy-Connection, because the client's
 * connection is ours to keep or close; its body is relayed byte for byte,
 * as it arrives, and parsed only to find where it ends, so that the
 * client's connection carries the next request.  What follows a head is
 * as RFC 9110 says, whatever its headers say (http_answer_body): nothing
 * after a 1xx, 204 or 304 or an answer to HEAD; a 1xx or 204 that names a
 * length or chunks is refused (502), and so is a 101 to a request that
 * asked for no upgrade.  A 101 to one that did turns the exchange into raw
 * bytes both ways until either side ends.  Bytes past a complete answer
 * are never relayed: they end the upstream connection (not parked; a
 * parked stream that hears from its node is dropped).
 *
 *   CHECKING --granted--> OPENING (or HEAD, on a parked stream)
 *      `--refused: 401/403/404/503, late: 503
 *   OPENING --OPEN_OK--> HEAD --head read--> HEAD_END --its last byte--> BODY --end--> DONE
 *      |                  |                               |      \--1xx--> HEAD
 *      |                  |                               `--101--> RAW --either side ends--> DONE
 *      `--OPEN_FAIL: 502  `--closed, malformed: 502
 *
 * Flow control: bytes of the answer, heads (1xx too) included, are
 * credited to the agent's stream only as they leave the client's output
 * buffer (an evbuffer callback), so the gateway holds at most one window
 * of answer per exchange; toward the
 * agent at most K8S_UP_HIGH bytes wait, then the client is not read.
 *
 * Buffer ownership: the exchange owns the request's head (req_head),
 * to_agent and the answer head's buffer (rraw); the client's output buffer is the server's, the exchange
 * only adds to it and watches it drain.
 */
#include "k8s.h"

#include <inttypes.h>
#include <sched.h>
#include <stdatomic.h>
#include <limits.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/time.h>

#include <event2/buffer.h>
#include <event2/event.h>
#include <http_parser.h>
#include <jansson.h>

#include "access.h"
#include "gateway.h"
#include "http.h"
#include "httphead.h"
#include "livestreams.h"
#include "log.h"
#include "loop.h"
#include "metrics.h"
#include "mux.h"
#include "route.h"
#include "runtime.h"
#include "server.h"
#include "reach.h"
#include "srccount.h"
#include "store.h"

#define K8S_CLUSTERS      "/k8s/clusters/"
#define K8S_UP_HIGH       (256 * 1024)   /* queued toward the agent */
#define K8S_SEND_MAX      (128 * 1024)   /* one mux_stream_send */
#define K8S_LOG_PATH      200
/* Token checks one source address may have waiting on the store at once
 * (issue 22): more are answered 503 with Retry-After: K8S_RETRY_AFTER_S. */
#define K8S_CHECKS_PER_SOURCE 16
#define K8S_RETRY_AFTER_S     1

enum x_state {
	X_CHECKING,       /* the token check is out; the head waits in req_head */
	X_OPENING,        /* OPEN sent; the request waits in to_agent */
	X_HEAD,           /* reading the answer's head */
	X_HEAD_END,       /* head parsed but its last byte */
	X_BODY,           /* relaying the answer's body */
	X_RAW,            /* after a 101: bytes both ways */
	X_DONE,           /* the answer is complete */
	X_ENTRIES         /* must be last */
};

static const char *const x_state_names[X_ENTRIES] = {
	[X_CHECKING] = "checking",
	[X_OPENING] = "opening",
	[X_HEAD] = "head",
	[X_HEAD_END] = "head_end",
	[X_BODY] = "body",
	[X_RAW] = "raw",
	[X_DONE] = "done",
};

/*
 * One stream to an agent's kube-api service, bound to one client
 * connection: the stream's handler argument.  It outlives the exchange
 * that opened it when the answer leaves the upstream connection fit for
 * another request: it is then parked on the client's connection
 * (exchange_keep) and the next request of that connection for the same
 * cluster and principal adopts it.  The flow-control accounting of the
 * answer bytes in the client's output lives here, so bytes still queued
 * when an exchange ends are credited as they leave.
 */
struct k8s_link {
	struct mux_stream *s;         /* NULL once ended */
	struct k8s_exchange *x;       /* the exchange using it; NULL when parked */
	struct hconn *h;              /* the client */
	struct evbuffer *out;         /* the client's output */
	struct evbuffer_cb_entry *out_cb;
	size_t out_skip;              /* bytes in the output that carry no credit */
	size_t uncredited;            /* answer bytes in the output */
	int fin;                      /* the agent sent FIN */
	char principal[96], cluster[STORE_ID_MAX + 1], node[STORE_NAME_MAX + 1];
	char replica[64];             /* the one holding the agent's tunnel */
	char agent_id[STORE_ID_MAX + 1];
	/* The grant of the request that parked it, for the connection's next
	 * request with the same token (access_memo: no check again). */
	struct access_memo memo;
	/* The exchange that parked it, its buffers emptied, for the
	 * connection's next request (x_new): no allocation per request. */
	struct k8s_exchange *spare;
};

struct k8s_exchange {
	struct gateway *gw;
	struct hconn *h;              /* the client; NULL once ended */
	struct mux_stream *agent;     /* NULL once ended */
	struct k8s_link *link;        /* agent's link; NULL once ended */
	enum x_state state;
	/* The request's head for the agent, flat, sent (req_head_sent)
	 * before anything in to_agent; whole until the exchange ends, so
	 * that x_retry can send it again.  Kept with the spare exchange up
	 * to RRAW_KEEP_MAX bytes.  In an evbuffer with the body, its add,
	 * pullup and drain, and a copy for the retry, were ~500
	 * instructions of a /k8s request. */
	char *req_head;
	size_t req_head_len, req_head_cap, req_head_sent;
	struct evbuffer *to_agent;    /* the body's bytes without credit yet */
	int adopted;                  /* on a parked stream */
	int retried;
	int upgrade_req;              /* the request asks for an upgrade */
	int has_body;
	int keep_up;                  /* sent without Connection: close */
	int reusable;                 /* the answer leaves the stream fit */
	int no_reuse;                 /* bytes past the answer */
	int body_chunked;             /* encode the request body in chunks */
	int in_paused;                /* the server stopped reading for us */
	int head_method;              /* HEAD: the answer has no body */
	int idempotent;               /* may be sent again on a new stream */
	int root;                     /* a root path: the token names the cluster */

	/* The token check (X_CHECKING), and the head's tail it waits for. */
	struct access_check *check;   /* NULL once answered or cancelled */
	int counted_check;            /* in gw->k8s_checks (x_uncount) */
	struct event *deadline;       /* --http-timeout for the check */
	int in_start, checked, check_status;
	struct access_grant grant;
	char check_err[256];
	char *up_value;               /* the client's Upgrade (upgrade_req) */
	char req_path[K8S_LOG_PATH + 1];  /* rq->path (decoded), for refusals */
	int req_chunked, req_has_length;
	unsigned long long req_length;
	enum http_answer_kind answer; /* what follows the answer's head */

	/* The answer. */
	http_parser rp;
	/* The head as received (<= HTTP_HEAD_MAX + 2 bytes), flat: an
	 * evbuffer's add, pullup and drain for it and for the reason phrase
	 * were ~700 instructions of a /k8s answer.  Kept with the spare
	 * exchange up to RRAW_KEEP_MAX bytes. */
	char *rraw;
	size_t rraw_len, rraw_cap;
	size_t rreason_off, rreason_len;  /* the reason phrase, in rraw */
	int rreason_seen;             /* on_status said where it starts */
	const char *rp_base;          /* the bytes rp_execute is parsing */
	size_t head_bytes;
	int rp_paused;                /* paused at the end of a head */
	int msg_complete;
	int close_after;              /* close the client after this answer */

	int status;                   /* answered status, for the audit */
	uint64_t up, down;
	struct timeval started;
	char principal[96], cluster[STORE_ID_MAX + 1], node[STORE_NAME_MAX + 1];
	char replica[64];             /* the one holding the agent's tunnel */
	char method[24], path[K8S_LOG_PATH + 1];
	char client[64];              /* the client's address, for the audit */
	struct live_stream live;      /* listed for the status page while it lives */
	/* A revocation (livestreams.h): what it matches, and its end. */
	char token_id[TOKEN_ID_LEN + 1], agent_id[STORE_ID_MAX + 1];
	char revoked[160];            /* the revocation that ended it, or "" */
	struct event *end_ev;         /* that end, from the loop; or NULL */
	struct access_memo memo;      /* this request's token and grant */
};

/*
 * src into dst of size n (> 0), cut to fit, always terminated: what
 * snprintf(dst, n, "%s", src) writes, without its format machinery (a
 * request's start and end copied a dozen strings that way).
 */
static void
copy_str(char *dst, size_t n, const char *src)
{
	size_t len = strnlen(src, n - 1);

	memcpy(dst, src, len);
	dst[len] = '\0';
}

/* The first len bytes of src (fewer at a NUL), as copy_str. */
static void
copy_mem(char *dst, size_t n, const char *src, size_t len)
{
	if (len > n - 1)
		len = n - 1;
	len = strnlen(src, len);
	memcpy(dst, src, len);
	dst[len] = '\0';
}

/* Paths of the Kubernetes API itself, reached without /k8s/clusters/ID,
 * with their lengths (a strlen and a strncmp for each of them, twice per
 * request, were ~250 instructions of a /k8s request). */
#define ROOT(s) { s, sizeof(s) - 1 }
static const struct { const char *s; size_t n; } k8s_roots[] = {
	ROOT("/version"), ROOT("/api"), ROOT("/apis"), ROOT("/openapi") };

static int
k8s_root_path(const char *path)
{
	if (path[0] != '/')
		return 0;
	for (size_t i = 0; i < sizeof(k8s_roots) / sizeof(k8s_roots[0]); i++) {
		size_t n = k8s_roots[i].n;

		/* path[1] first: a mismatch costs no call; then the rest,
		 * whose NUL (a shorter path) differs from the root's byte. */
		if (path[1] == k8s_roots[i].s[1] &&
		    strncmp(path, k8s_roots[i].s, n) == 0 &&
		    (path[n] == '\0' || path[n] == '/'))
			return 1;
	}
	return 0;
}

static int
k8s_matches(const char *path)
{
	return strncmp(path, K8S_PREFIX, sizeof(K8S_PREFIX) - 1) == 0 ||
	    k8s_root_path(path);
}

/* ---- Kubernetes Status answers ---- */

static const char *
status_reason(int code)
{
	switch (code) {
	case 400: return "BadRequest";
	case 401: return "Unauthorized";
	case 403: return "Forbidden";
	case 404: return "NotFound";
	case 413: return "RequestEntityTooLarge";
	case 502: return "BadGateway";
	case 503: return "ServiceUnavailable";
	default: return "InternalError";
	}
}

/* A malloc'd Kubernetes Status object for code and message, or NULL. */
static char *
status_json(int code, const char *message, size_t *len)
{
	json_t *v = json_pack("{s:s, s:s, s:{}, s:s, s:s, s:s, s:i}",
	    "kind", "Status", "apiVersion", "v1", "metadata", "status", "Failure",
	    "message", message, "reason", status_reason(code), "code", code);
	char *s = v != NULL ? json_dumps(v, JSON_COMPACT) : NULL;

	json_decref(v);
	*len = s != NULL ? strlen(s) : 0;
	return s;
}

/* Answers a Status (the server ends the exchange's hold on h). */
static void
reply_status(struct hconn *h, int code, const char *message)
{
	size_t len;
	char *body = status_json(code, message, &len);

	exchange_reply(h, code, body, len);
}

/* ---- the end ---- */

static void
x_audit(const struct k8s_exchange *x)
{
	struct timeval now, took;

	gettimeofday(&now, NULL);
	timersub(&now, &x->started, &took);
	/* end= and reason= only for an exchange a revocation ended. */
	/* KV_A: x's arrays, which the encoder may scan 16 bytes a step. */
	const struct log_field f[] = {
	    x->principal[0] ? KV_A("who", x->principal) : KV_S("who", "-"),
	    x->cluster[0] ? KV_A("cluster", x->cluster) : KV_S("cluster", "-"),
	    x->node[0] ? KV_A("node", x->node) : KV_S("node", "-"),
	    KV_A("method", x->method), KV_A("path", x->path),
	    KV_I("status", x->status), KV_U("bytes_up", x->up),
	    KV_U("bytes_down", x->down),
	    KV_I("duration_ms", took.tv_sec * 1000 + took.tv_usec / 1000),
	    KV_A("replica", x->replica), KV_S("end", "revoked"),
	    KV_A("reason", x->revoked) };
	log_audit_kv("k8s", x->client, f,
	    sizeof(f) / sizeof(f[0]) - (x->revoked[0] != '\0' ? 0 : 2));
	metrics_k8s_request(x->status, took.tv_sec + took.tv_usec / 1e6);
}

static void x_spare_free(struct k8s_exchange *x);

/* Stops watching the client's output and lets go of the agent's stream. */
static void
link_free(struct k8s_link *l, const char *reset_code)
{
	if (l->out_cb != NULL)
		evbuffer_remove_cb_entry(l->out, l->out_cb);
	if (l->s != NULL)
		mux_stream_reset(l->s, reset_code);
	access_memo_clear(&l->memo);
	x_spare_free(l->spare);
	free(l);
}

/* A parked stream ends (or is dropped): off the client's connection. */
static void
link_drop(struct k8s_link *l, const char *reset_code)
{
	if (l->h != NULL && exchange_kept(l->h) == l)
		exchange_take_kept(l->h);
	link_free(l, reset_code);
}

/* The client's connection, with this idle stream kept on it, ends
 * (server.h: exchange_keep's free_fn): the stream is reset. */
static void
parked_gone(void *arg)
{
	struct k8s_link *l = arg;

	debug("k8s client gone: idle stream reset", KV_S("node", l->node));
	l->h = NULL;
	link_free(l, "client_gone");
}

static void
x_detach(struct k8s_exchange *x, const char *reset_code)
{
	struct k8s_link *l = x->link;

	if (l != NULL) {
		x->link = NULL;
		l->x = NULL;
		l->s = x->agent;
		x->agent = NULL;
		link_free(l, reset_code);
	}
	if (x->agent != NULL) {
		mux_stream_reset(x->agent, reset_code);
		x->agent = NULL;
	}
}

/*
 * gw->k8s_checks is the whole process's (the per-source cap guards the one
 * store thread's queue, whichever loop asks, docs/0040): every take and
 * put is under this lock, held for one hash lookup (a spin: the holder
 * never blocks inside).  Zero-initialized: free.
 */
static void
k8s_checks_lock(struct gateway *gw)
{
	while (atomic_exchange_explicit(&gw->k8s_checks_lock, 1,
	    memory_order_acquire) != 0)
		sched_yield();
}

static void
k8s_checks_unlock(struct gateway *gw)
{
	atomic_store_explicit(&gw->k8s_checks_lock, 0, memory_order_release);
}

/* x's token check no longer waits: its source's count goes down. */
static void
x_uncount(struct k8s_exchange *x)
{
	if (!x->counted_check)
		return;
	x->counted_check = 0;
	k8s_checks_lock(x->gw);
	srccount_put(x->gw->k8s_checks, x->client);
	k8s_checks_unlock(x->gw);
}

/* An exchange's end but its buffers and itself: audited, off every list,
 * its events and its copy of the token gone. */
static void
x_end_all_but_buffers(struct k8s_exchange *x)
{
	x_audit(x);
	x_uncount(x);
	access_cancel(x->check);
	x->check = NULL;
	if (x->deadline != NULL)
		event_free(x->deadline);
	x->deadline = NULL;
	free(x->up_value);
	x->up_value = NULL;
	live_stream_remove(&x->live);
	if (x->end_ev != NULL)
		event_free(x->end_ev);
	x->end_ev = NULL;
	access_memo_clear(&x->memo);
}

/* The answer head's buffer and the request's copy, kept for the
 * connection's next exchange when at most this large (a head is a few
 * hundred bytes). */
#define RRAW_KEEP_MAX 4096

/* Forgets the answer head read so far (its buffer kept). */
static void
rraw_clear(struct k8s_exchange *x)
{
	x->rraw_len = 0;
	x->rreason_off = x->rreason_len = 0;
	x->rreason_seen = 0;
}

/* Appends data[0..len) to the answer head's buffer; -1 when out of
 * memory.  The caller bounds the head (HTTP_HEAD_MAX + 2). */
static int
rraw_add(struct k8s_exchange *x, const uint8_t *data, size_t len)
{
	if (x->rraw_len + len > x->rraw_cap) {
		size_t cap = x->rraw_cap ? x->rraw_cap : 512;
		char *p;

		while (cap < x->rraw_len + len)
			cap *= 2;
		if ((p = realloc(x->rraw, cap)) == NULL)
			return -1;
		x->rraw = p;
		x->rraw_cap = cap;
	}
	if (len > 0)
		memcpy(x->rraw + x->rraw_len, data, len);
	x->rraw_len += len;
	return 0;
}

/* Frees an exchange ended by x_end_all_but_buffers (a spare).  NULL is
 * allowed. */
static void
x_spare_free(struct k8s_exchange *x)
{
	if (x == NULL)
		return;
	evbuffer_free(x->to_agent);
	free(x->req_head);
	free(x->rraw);
	free(x);
}

static void
x_free(struct k8s_exchange *x)
{
	x_end_all_but_buffers(x);
	x_spare_free(x);
}

/* x ended with its stream parked on l: kept there, its buffers emptied,
 * as the spare of the connection's next request (x_new), else freed. */
static void
x_free_to(struct k8s_exchange *x, struct k8s_link *l)
{
	x_end_all_but_buffers(x);
	if (l == NULL || l->spare != NULL ||
	    evbuffer_drain(x->to_agent, evbuffer_get_length(x->to_agent)) != 0) {
		x_spare_free(x);
		return;
	}
	rraw_clear(x);
	if (x->rraw_cap > RRAW_KEEP_MAX) {
		free(x->rraw);
		x->rraw = NULL;
		x->rraw_cap = 0;
	}
	x->req_head_len = x->req_head_sent = 0;
	if (x->req_head_cap > RRAW_KEEP_MAX) {
		free(x->req_head);
		x->req_head = NULL;
		x->req_head_cap = 0;
	}
	l->spare = x;
}

/* Ends with an error Status, if nothing of an answer was sent yet; else
 * the client's connection is dropped (an answer cut short must not look
 * complete). */
static void
x_fail(struct k8s_exchange *x, int code, const char *message)
{
	struct hconn *h = x->h;

	debug("k8s exchange failed", KV_S("peer", h != NULL ? exchange_peer(h) : "-"),
	    KV_S("reason", message), KV_S("state", x_state_names[x->state]));
	x_detach(x, "closed");
	x->h = NULL;
	if (h != NULL && x->state <= X_HEAD_END) {
		x->status = code;
		reply_status(h, code, message);
	} else if (h != NULL) {
		warn("k8s answer cut short", KV_S("peer", exchange_peer(h)),
		    KV_S("method", x->method), KV_S("path", x->path),
		    KV_S("reason", message));
		exchange_abort(h);
	}
	x_free(x);
}

/* x's own event after a revocation: the agent's stream reset with
 * "revoked", then a 401 Status if nothing of an answer was sent yet, else
 * the connection (an upgraded one too) dropped. */
static void
x_revoked(evutil_socket_t fd, short what, void *arg)
{
	struct k8s_exchange *x = arg;

	(void)fd;
	(void)what;
	x_detach(x, "revoked");   /* the far side says so too (relay.h) */
	x_fail(x, 401, x->revoked);
}

/* live_stream's end (livestreams.h): marked now, ended from the loop. */
static void
x_end(struct live_stream *ls, const char *reason)
{
	struct k8s_exchange *x = (struct k8s_exchange *)
	    ((char *)ls - offsetof(struct k8s_exchange, live));

	copy_str(x->revoked, sizeof(x->revoked), reason);
	if (x->end_ev == NULL && (x->end_ev = event_new(loop_base_here(x->gw), -1, 0,
	    x_revoked, x)) == NULL) {
		warn("k8s: out of memory to end a revoked exchange",
		    KV_S("who", x->principal));
		return;
	}
	event_active(x->end_ev, EV_TIMEOUT, 1);
}

/* The answer is complete (or, raw, one side ended). */
/* The upstream connection may carry the next request: park the stream on
 * the client's connection.  Returns 1 if parked. */
static int
x_park(struct k8s_exchange *x)
{
	struct k8s_link *l = x->link;
	struct hconn *h = x->h;

	if (l == NULL || h == NULL || x->agent == NULL || l->s != x->agent ||
	    l->fin || x->state != X_DONE || !x->reusable || x->no_reuse ||
	    x->upgrade_req || !x->keep_up || x->close_after ||
	    !exchange_request_done(h) || !exchange_keep_alive(h) ||
	    x->req_head_sent < x->req_head_len ||
	    evbuffer_get_length(x->to_agent) != 0 || x->body_chunked ||
	    exchange_kept(h) != NULL)
		return 0;
	x->link = NULL;
	x->agent = NULL;
	l->x = NULL;
	l->memo = x->memo;    /* the next request's token, proven or not */
	exchange_keep(h, l, parked_gone);
	return 1;
}

static void
x_finish(struct k8s_exchange *x)
{
	struct hconn *h = x->h;
	struct k8s_link *l = x->link;
	int keep = !x->close_after;

	if (!x_park(x)) {
		x_detach(x, "closed");
		l = NULL;
	}
	x->h = NULL;
	/* Before the connection goes on (it may read the next request
	 * now): x is audited and, its stream parked, the link's spare. */
	x_free_to(x, l);
	if (h != NULL)
		exchange_finish(h, keep);
}

/* ---- toward the agent ---- */

static void
flush_up(struct k8s_exchange *x)
{
	size_t len, n;
	uint8_t *p;

	/* The head first, from its flat buffer; then the body. */
	while (x->agent != NULL && x->state != X_OPENING &&
	    x->req_head_sent < x->req_head_len) {
		len = x->req_head_len - x->req_head_sent;
		if (len > K8S_SEND_MAX)
			len = K8S_SEND_MAX;
		n = mux_stream_send(x->agent,
		    (const uint8_t *)x->req_head + x->req_head_sent, len);
		if (n == 0)
			break;
		x->req_head_sent += n;
		x->up += n;
	}
	while (x->agent != NULL && x->state != X_OPENING &&
	    x->req_head_sent == x->req_head_len &&
	    (len = evbuffer_get_length(x->to_agent)) > 0) {
		if (len > K8S_SEND_MAX)
			len = K8S_SEND_MAX;
		p = evbuffer_pullup(x->to_agent, (ssize_t)len);
		if (p == NULL)
			break;
		n = mux_stream_send(x->agent, p, len);
		if (n == 0)
			break;
		evbuffer_drain(x->to_agent, n);
		x->up += n;
	}
	if (x->in_paused && x->h != NULL &&
	    evbuffer_get_length(x->to_agent) < K8S_UP_HIGH) {
		x->in_paused = 0;
		exchange_resume_input(x->h);
	}
}

static int
k8s_wants_body(void *arg)
{
	struct k8s_exchange *x = arg;

	if (x->state != X_CHECKING && evbuffer_get_length(x->to_agent) < K8S_UP_HIGH)
		return 1;
	x->in_paused = 1;
	return 0;
}

static void
k8s_body(void *arg, const char *data, size_t len)
{
	struct k8s_exchange *x = arg;
	int r = 0;

	if (len == 0)
		return;
	if (x->body_chunked)
		r |= evbuffer_add_printf(x->to_agent, "%zx\r\n", len) < 0;
	r |= evbuffer_add(x->to_agent, data, len);
	if (x->body_chunked)
		r |= evbuffer_add(x->to_agent, "\r\n", 2);
	if (r != 0)
		warn("k8s: out of memory for a request body");
	flush_up(x);
}

static void
k8s_body_end(void *arg)
{
	struct k8s_exchange *x = arg;

	if (x->body_chunked && evbuffer_add(x->to_agent, "0\r\n\r\n", 5) != 0)
		warn("k8s: out of memory for a request body");
	x->body_chunked = 0;
	flush_up(x);
}

static int
k8s_raw_input(void *arg, struct evbuffer *in)
{
	struct k8s_exchange *x = arg;
	size_t queued = evbuffer_get_length(x->to_agent);

	if (queued < K8S_UP_HIGH)
		evbuffer_remove_buffer(in, x->to_agent, K8S_UP_HIGH - queued);
	flush_up(x);
	if (evbuffer_get_length(in) == 0)
		return 0;
	x->in_paused = 1;
	return 1;
}

static void
k8s_client_gone(void *arg)
{
	struct k8s_exchange *x = arg;

	debug("k8s client gone", KV_S("peer", exchange_peer(x->h)),
	    KV_S("state", x_state_names[x->state]));
	if (x->status == 0)
		x->status = 499;     /* as nginx logs it: the client closed first */
	x_detach(x, "client_gone");
	x->h = NULL;
	x_free(x);
}

/* ---- toward the client ---- */

/* Answer bytes left the client's output: credit them to the agent. */
static void
out_drained(struct evbuffer *buf, const struct evbuffer_cb_info *info, void *arg)
{
	struct k8s_link *l = arg;
	size_t n = info->n_deleted, skip, credit;

	if (n == 0)
		return;
	skip = n < l->out_skip ? n : l->out_skip;
	l->out_skip -= skip;
	n -= skip;
	credit = n < l->uncredited ? n : l->uncredited;
	l->uncredited -= credit;
	if (credit > 0 && l->s != NULL)
		mux_stream_drained(l->s, credit);
}

/* Answer bytes for the client: with this pass's send when nothing waits
 * ahead of them (exchange_write_now), else into its output.  Returns the
 * credit due now: bytes sent now have left the gateway (those in the
 * output are credited as they leave it, out_drained). */
static size_t
to_client(struct k8s_exchange *x, const uint8_t *data, size_t len)
{
	if (len > 0 && exchange_write_now(x->h, data, len) != 0) {
		x->down += len;        /* -1: the connection's read ends it */
		return len;
	}
	if (evbuffer_add(exchange_output(x->h), data, len) != 0) {
		/* Not credited: the stream stalls rather than lose bytes. */
		warn("k8s: out of memory relaying an answer", KV_S("peer", exchange_peer(x->h)));
		return 0;
	}
	if (x->link != NULL)
		x->link->uncredited += len;
	x->down += len;
	return 0;
}

/* ---- the answer's head ---- */

static int
rp_on_status(http_parser *p, const char *at, size_t len)
{
	struct k8s_exchange *x = p->data;

	/* The reason's bytes are the head's (rraw gets every byte the
	 * parser takes): only where they start, and how many. */
	if (!x->rreason_seen) {
		x->rreason_seen = 1;
		x->rreason_off = x->head_bytes + (size_t)(at - x->rp_base);
	}
	x->rreason_len += len;
	return 0;
}

static int
rp_on_headers_complete(http_parser *p)
{
	struct k8s_exchange *x = p->data;

	/* Stop at the head's last byte: its end is where the body begins. */
	x->rp_paused = 1;
	http_parser_pause(p, 1);
	/* 1: no body follows, whatever the headers say (a 1xx, 204, 304, an
	 * answer to HEAD: RFC 9110 6.4.1).  http-parser would read a 204's
	 * or a 304's Content-Length as a body. */
	return http_answer_bodiless(p->status_code, x->head_method);
}

static int
rp_on_message_complete(http_parser *p)
{
	struct k8s_exchange *x = p->data;

	x->msg_complete = 1;
	http_parser_pause(p, 1);
	return 0;
}

static const http_parser_settings rp_settings = {
	.on_status = rp_on_status,
	.on_headers_complete = rp_on_headers_complete,
	.on_message_complete = rp_on_message_complete,
};

/* Runs the answer parser; returns the bytes taken, or (size_t)-1 with a
 * reason when the answer is malformed (*good, if not NULL: the bytes it
 * took before the one it refused). */
static size_t
rp_execute_at(struct k8s_exchange *x, const uint8_t *data, size_t len,
    const char **why, size_t *good)
{
	size_t n;
	enum http_errno e;

	if (HTTP_PARSER_ERRNO(&x->rp) == HPE_PAUSED)
		http_parser_pause(&x->rp, 0);
	x->rp_base = (const char *)data;
	n = http_parser_execute(&x->rp, &rp_settings, (const char *)data, len);
	e = HTTP_PARSER_ERRNO(&x->rp);
	if (e != HPE_OK && e != HPE_PAUSED) {
		*why = http_errno_description(e);
		if (good != NULL)
			*good = n;
		return (size_t)-1;
	}
	return n;
}

static size_t
rp_execute(struct k8s_exchange *x, const uint8_t *data, size_t len,
    const char **why)
{
	return rp_execute_at(x, data, len, why, NULL);
}

/* 1 if the header name (n bytes) is hop-by-hop: the client's connection
 * is ours to keep or close. */
static int
hop_by_hop(const char *name, size_t n)
{
	return (n == 10 && (strncasecmp(name, "connection", 10) == 0 ||
	    strncasecmp(name, "keep-alive", 10) == 0)) ||
	    (n == 16 && strncasecmp(name, "proxy-connection", 16) == 0);
}

/* The answer's body ends only when the upstream closes (neither a length
 * nor chunks).  Asked right after the head. */
static int
needs_eof(const struct k8s_exchange *x)
{
	return x->answer == HTTP_ANSWER_TO_EOF;
}

/* The most emit_head writes for a head of len bytes: "HTTP/1.1 NNN " and
 * a reason from its status line, each header line with at most one more
 * byte (": " for ":"), "Connection: close\r\n" and the empty line. */
#define HEAD_OUT_MAX(len) (2 * (len) + 64)

/* "HTTP/1.1 NNN REASON\r\n" (status 100-999, from http-parser) at p;
 * returns the end of it. */
static char *
put_status_line(char *p, int status, const char *reason, size_t rlen)
{
	memcpy(p, "HTTP/1.1 ", 9);
	p[9] = (char)('0' + status / 100 % 10);
	p[10] = (char)('0' + status / 10 % 10);
	p[11] = (char)('0' + status % 10);
	p[12] = ' ';
	memcpy(p + 13, reason, rlen);
	p += 13 + rlen;
	memcpy(p, "\r\n", 2);
	return p + 2;
}

/* One header line (name bytes at line, its colon at line + name, its CR
 * at vend, its LF after it) written again at p as "NAME: VALUE\r\n", the
 * value as http-parser reads it (from its first byte that is not a space
 * or a tab), unless hop-by-hop and not keep_hop.  Returns the end of what it
 * wrote: at most one byte more than the line. */
static char *
put_header_line(char *p, const char *line, size_t name, const char *vend,
    int keep_hop)
{
	const char *v = line + name + 1;
	size_t n = (size_t)(vend - line);

	if (!keep_hop && hop_by_hop(line, name))
		return p;
	/* Already "NAME: VALUE" (one space, then the value or the CR): the
	 * line as it is, its CRLF too, in one copy (most heads are). */
	if (v < vend && *v == ' ' && (v + 1 == vend ||
	    (v[1] != ' ' && v[1] != '\t'))) {
		memcpy(p, line, n + 2);
		return p + n + 2;
	}
	for (; v < vend && (*v == ' ' || *v == '\t'); v++)
		;
	memcpy(p, line, name);
	p += name;
	memcpy(p, ": ", 2);
	memcpy(p + 2, v, (size_t)(vend - v));
	p += 2 + (size_t)(vend - v);
	memcpy(p, "\r\n", 2);
	return p + 2;
}

/*
 * The header lines of an answer head (raw[0..len), which passed
 * http_head_check_lines: CRLF line ends, a token and a colon on each
 * line, no obs-fold; `lines` says where they are) written again at p by
 * put_header_line, the hop-by-hop ones left out unless keep_hop.  Returns
 * the end of what it wrote: at most one byte more than each line.  From
 * the line index, with no scan (a memchr for each line's end and another
 * for its colon were ~550 instructions of a /k8s answer); a head of more
 * than HTTP_LINES_MAX lines is read from its bytes, in one pass.
 * Collected through http-parser's callbacks into an evbuffer and written
 * again with four evbuffer_add a line, they were ~8k of a /k8s request's
 * instructions.
 */
static char *
put_header_lines(char *p, const char *raw, size_t len,
    const struct http_lines *lines, int keep_hop)
{
	const char *at = raw, *end = raw + len, *nl, *colon;
	int start = 1;

	if (!lines->more) {
		for (unsigned i = 0; i < lines->n; i++) {
			const char *line = raw + lines->at[i].off;

			p = put_header_line(p, line, lines->at[i].name,
			    line + lines->at[i].len, keep_hop);
		}
		return p;
	}
	while (at < end && (nl = memchr(at, '\n', (size_t)(end - at))) != NULL) {
		const char *line = at, *vend = nl - 1;

		at = nl + 1;
		if (start) {
			/* Empty lines, then the status line. */
			start = vend == line;
			continue;
		}
		if (vend == line)
			break;		/* the empty line */
		if ((colon = memchr(line, ':', (size_t)(vend - line))) == NULL)
			continue;	/* not after http_head_check */
		p = put_header_line(p, line, (size_t)(colon - line), vend,
		    keep_hop);
	}
	return p;
}

/*
 * The head's credit: the head_bytes it took from the stream come back as
 * the written bytes leave the client's output, like answer bytes (a 1xx
 * head too: a node that sends them forever to a client that never reads
 * is held to one window).  Rewritten bytes beyond head_bytes carry none;
 * head_bytes beyond the written ones are credited now (*credit_now).
 */
static void
head_credit(struct k8s_exchange *x, size_t written, size_t *credit_now)
{
	size_t c = written < x->head_bytes ? written : x->head_bytes;

	if (x->link == NULL) {
		*credit_now += x->head_bytes;
		return;
	}
	x->link->uncredited += c;
	x->link->out_skip += written - c;
	*credit_now += x->head_bytes - c;
}

/* Writes the answer's head (raw[0..len), the whole of rraw, checked by
 * check_answer_head, which found its header lines: *lines; its reason
 * phrase at rreason_off) again to the client, and chooses what follows;
 * rraw is emptied.  *credit_now: credit for the agent's stream that is
 * due now. */
static int
emit_head(struct k8s_exchange *x, const char *raw, size_t len,
    const struct http_lines *lines, size_t *credit_now)
{
	struct evbuffer *out = exchange_output(x->h);
	int status = x->rp.status_code, r = 0;
	int sw = x->answer == HTTP_ANSWER_SWITCH;
	int info1xx = x->answer == HTTP_ANSWER_INTERIM;
	size_t rlen = x->rreason_len, written;
	const char *reason = raw + x->rreason_off;
	char head[HEAD_OUT_MAX(HTTP_HEAD_MAX + 2)], *p = head;

	if (len > HTTP_HEAD_MAX + 2 || x->rreason_off > len ||
	    rlen > len - x->rreason_off)
		return -1;
	if (!info1xx) {
		x->close_after = sw || !exchange_keep_alive(x->h) ||
		    (!x->msg_complete && needs_eof(x));
		x->reusable = !sw && x->rp.http_major == 1 &&
		    x->rp.http_minor >= 1 && http_should_keep_alive(&x->rp) &&
		    !needs_eof(x);
	}
	/* The head is put together in head[], then sent now or queued
	 * whole (to_client's rule). */
	p = put_status_line(p, status, reason, rlen);
	p = put_header_lines(p, raw, len, lines, sw);
	if (!sw && !info1xx && x->close_after) {
		memcpy(p, "Connection: close\r\n", 19);
		p += 19;
	}
	memcpy(p, "\r\n", 2);
	p += 2;
	written = (size_t)(p - head);
	if (exchange_write_now(x->h, (const uint8_t *)head, written) != 0)
		*credit_now += x->head_bytes;    /* left now: all of it */
	else if (evbuffer_add(out, head, written) == 0)
		head_credit(x, written, credit_now);
	else
		r = -1;
	x->down += written;
	if (!info1xx)
		x->status = status;
	rraw_clear(x);
	if (r != 0)
		return -1;
	if (info1xx) {
		x->msg_complete = 0;
		x->head_bytes = 0;
		x->state = X_HEAD;
	} else if (sw) {
		x->state = X_RAW;
		exchange_go_raw(x->h);
	} else
		x->state = x->msg_complete ? X_DONE : X_BODY;
	return 0;
}

/* The whole answer head is in rraw (*raw, *len: it, made contiguous): it
 * must frame the answer in one way only (httphead.h), as a client's
 * request must, and as RFC 9110 says for its status (http_answer_body:
 * x->answer).  Returns 0 with *lines saying where its header lines are,
 * -1 (ambiguous) or -2 (framed as RFC 9110 forbids, or an unasked-for
 * 101) with the reason in why. */
static int
check_answer_head(struct k8s_exchange *x, const char **raw, size_t *len,
    struct http_lines *lines, const char **why)
{
	struct http_framing f;

	*len = x->rraw_len;
	*raw = x->rraw;
	if (x->rp.http_major != 1) {
		*why = "an HTTP version other than 1.x";
		return -1;
	}
	if (http_head_check_lines(*raw, *len, &f, lines, why) != 0)
		return -1;
	x->answer = http_answer_body(x->rp.status_code, &f, x->head_method,
	    x->upgrade_req, why);
	return x->answer == HTTP_ANSWER_REFUSED ? -2 : 0;
}

/* Answer bytes from the agent. */
static void
resp_input(struct k8s_exchange *x, const uint8_t *data, size_t len)
{
	struct http_lines lines;	/* not zeroed: filled by the check */
	char msg[256];
	const char *why = NULL, *why_head = NULL, *raw;
	size_t n, take, credit_now = 0, rawlen, good = 0;
	int r, bad;

	while (len > 0 && x->h != NULL && x->state != X_DONE) {
		switch (x->state) {
		case X_HEAD:
			/* At most one byte past the limit is ever held. */
			take = HTTP_HEAD_MAX + 1 - x->head_bytes;
			n = rp_execute(x, data, len < take ? len : take, &why);
			if (n == (size_t)-1)
				goto malformed;
			if (rraw_add(x, data, n) != 0) {
				x_fail(x, 502, "out of memory");
				return;
			}
			x->head_bytes += n;
			if (x->rp_paused) {
				x->rp_paused = 0;
				x->state = X_HEAD_END;
			} else if (x->head_bytes > HTTP_HEAD_MAX) {
				snprintf(msg, sizeof(msg), "the %s service of node %s "
				    "answered a head larger than %d bytes", K8S_SERVICE,
				    x->node, HTTP_HEAD_MAX);
				x_fail(x, 502, msg);
				return;
			} else if (n == 0) {
				why = "the parser stopped";
				goto malformed;
			}
			break;
		case X_HEAD_END:
			/*
			 * The head's last byte (its LF) and the answer's bytes
			 * after it in one run of the parser (a run of its own
			 * for the LF was ~190 instructions): it stops after the
			 * LF where no body follows (a 1xx, a 101, a bodiless
			 * answer: message complete), else takes the body as in
			 * X_BODY.  What it took after the LF is acted on only
			 * once the head is checked and written, and a refusal
			 * there is judged after the head's, as when the two
			 * were parsed apart: in X_BODY, with none of them
			 * relayed.
			 */
			bad = 0;
			n = rp_execute_at(x, data, len, &why, &good);
			if (n == (size_t)-1) {
				if (good == 0)
					goto malformed;      /* the LF itself */
				bad = 1;
				n = good;
			}
			x->head_bytes += 1;
			if (rraw_add(x, data, 1) != 0) {
				x_fail(x, 502, "out of memory");
				return;
			}
			if ((r = check_answer_head(x, &raw, &rawlen, &lines,
			    &why_head)) != 0) {
				snprintf(msg, sizeof(msg), "the %s service of node %s "
				    "answered %s: %s", K8S_SERVICE, x->node, r == -1 ?
				    "an ambiguous head" : "a head it may not send", why_head);
				x_fail(x, 502, msg);
				return;
			}
			if (emit_head(x, raw, rawlen, &lines, &credit_now) != 0) {
				warn("k8s: out of memory for an answer head",
				    KV_S("peer", exchange_peer(x->h)));
				x_fail(x, 502, "out of memory");
				return;
			}
			if (bad)
				goto malformed;
			if (n > 1 && x->state != X_BODY && x->state != X_DONE) {
				/* Cannot be: the parser stops after such a head. */
				why = "the parser read past a head";
				goto malformed;
			}
			if (n > 1)
				credit_now += to_client(x, data + 1, n - 1);
			break;
		case X_BODY:
			n = rp_execute(x, data, len, &why);
			if (n == (size_t)-1)
				goto malformed;
			credit_now += to_client(x, data, n);
			if (x->msg_complete)
				x->state = X_DONE;
			break;
		default:      /* X_RAW */
			n = len;
			credit_now += to_client(x, data, n);
			break;
		}
		data += n;
		len -= n;
	}
	/* Past the end of the answer: nothing more is relayed. */
	if (len > 0)
		x->no_reuse = 1;
	credit_now += len;
	if (credit_now > 0 && x->agent != NULL)
		mux_stream_drained(x->agent, credit_now);
	if (x->state == X_DONE && x->h != NULL)
		x_finish(x);
	return;
malformed:
	snprintf(msg, sizeof(msg), "the %s service of node %s answered "
	    "malformed HTTP: %s", K8S_SERVICE, x->node, why);
	x_fail(x, 502, msg);
}

/* ---- the agent's stream ---- */

static int x_retry(struct k8s_exchange *x);

static void
agent_opened(struct mux_stream *s, int ok, const char *code, const char *reason,
    void *arg)
{
	struct k8s_exchange *x = arg;
	char msg[512];

	if (!ok) {
		x->agent = NULL;
		snprintf(msg, sizeof(msg), "node %s: %s (%s)", x->node, reason, code);
		x_fail(x, 502, msg);
		return;
	}
	x->state = X_HEAD;
	flush_up(x);
}

static void
agent_data(struct mux_stream *s, const uint8_t *data, size_t len, void *arg)
{
	resp_input(arg, data, len);
}

static void
agent_writable(struct mux_stream *s, void *arg)
{
	flush_up(arg);
}

static void
agent_fin(struct mux_stream *s, void *arg)
{
	struct k8s_exchange *x = arg;
	const char *why = NULL;
	char msg[256];

	switch (x->state) {
	case X_BODY:
		/* A close-delimited body ends here. */
		if (rp_execute(x, NULL, 0, &why) != (size_t)-1 && x->msg_complete) {
			x->state = X_DONE;
			x_finish(x);
			return;
		}
		x_fail(x, 502, "the upstream closed in the middle of its answer");
		return;
	case X_RAW:
		x_finish(x);
		return;
	case X_DONE:
		return;
	default:
		if (x_retry(x) == 0)
			return;
		snprintf(msg, sizeof(msg), "the %s service of node %s closed the "
		    "connection %s", K8S_SERVICE, x->node, x->head_bytes == 0 ?
		    "without answering" : "in the middle of its answer head");
		x_fail(x, 502, msg);
		return;
	}
}

static void
agent_close(struct mux_stream *s, const char *code, void *arg)
{
	struct k8s_exchange *x = arg;
	char msg[256];

	x->agent = NULL;
	if (x->state == X_RAW) {
		x_finish(x);
		return;
	}
	if (x_retry(x) == 0)
		return;
	snprintf(msg, sizeof(msg), "the stream to node %s ended: %s", x->node, code);
	x_fail(x, 502, msg);
}

/* The stream's handlers: to its exchange, or, parked, the stream is
 * dropped at the first sign of life (upstream idle timeout, agent gone). */
static void
link_opened(struct mux_stream *s, int ok, const char *code, const char *reason,
    void *arg)
{
	struct k8s_link *l = arg;

	if (!ok)
		l->s = NULL;
	if (l->x != NULL)
		agent_opened(s, ok, code, reason, l->x);
	else if (!ok)
		link_drop(l, "closed");
}

static void
link_data(struct mux_stream *s, const uint8_t *data, size_t len, void *arg)
{
	struct k8s_link *l = arg;

	if (l->x != NULL) {
		agent_data(s, data, len, l->x);
		return;
	}
	debug("k8s idle stream got bytes: dropped", KV_S("node", l->node),
	    KV_U("bytes", len));
	link_drop(l, "closed");
}

static void
link_writable(struct mux_stream *s, void *arg)
{
	struct k8s_link *l = arg;

	if (l->x != NULL)
		agent_writable(s, l->x);
}

static void
link_fin(struct mux_stream *s, void *arg)
{
	struct k8s_link *l = arg;

	l->fin = 1;
	if (l->x != NULL)
		agent_fin(s, l->x);
	else
		link_drop(l, "closed");
}

static void
link_close(struct mux_stream *s, const char *code, void *arg)
{
	struct k8s_link *l = arg;

	l->s = NULL;
	/* The far half of a peer link (or the agent's side) ended it for a
	 * revocation heard there first (relay.h): the audit says so too. */
	if (l->x != NULL && strcmp(code, "revoked") == 0 && l->x->revoked[0] == '\0')
		snprintf(l->x->revoked, sizeof(l->x->revoked), "revoked: ended by "
		    "the other side of the stream");
	if (l->x != NULL)
		agent_close(s, code, l->x);
	else
		link_drop(l, code);
}

static const struct mux_stream_handlers link_handlers = {
	.on_opened = link_opened,
	.on_data = link_data,
	.on_writable = link_writable,
	.on_fin = link_fin,
	.on_close = link_close,
};

/* A new stream for x to the agent (here or through a peer), bound to
 * client h (the exchange's output accounting starts there).  Returns 0, or
 * -1 with err. */
static int
x_open(struct k8s_exchange *x, const struct reach *agent, struct hconn *h,
    char *err, size_t errlen)
{
	struct k8s_link *l = calloc(1, sizeof(*l));

	if (l == NULL) {
		snprintf(err, errlen, "out of memory");
		return -1;
	}
	l->x = x;
	l->h = h;
	l->out = exchange_output(h);
	copy_str(l->principal, sizeof(l->principal), x->principal);
	copy_str(l->cluster, sizeof(l->cluster), x->cluster);
	copy_str(l->node, sizeof(l->node), agent->node);
	copy_str(l->replica, sizeof(l->replica), agent->replica);
	copy_str(l->agent_id, sizeof(l->agent_id), agent->agent_id);
	l->out_cb = evbuffer_add_cb(l->out, out_drained, l);
	if (l->out_cb == NULL) {
		free(l);
		snprintf(err, errlen, "out of memory");
		return -1;
	}
	l->s = reach_open_stream(x->gw, agent, l->principal, NULL, K8S_SERVICE,
	    &link_handlers, l, err, errlen);
	if (l->s == NULL) {
		link_free(l, "closed");
		return -1;
	}
	x->link = l;
	x->agent = l->s;
	copy_str(x->node, sizeof(x->node), l->node);
	copy_str(x->replica, sizeof(x->replica), l->replica);
	copy_str(x->agent_id, sizeof(x->agent_id), l->agent_id);
	return 0;
}

/* A request written to a parked stream met an upstream that closed before
 * answering (it timed the idle connection out meanwhile): once, and only
 * for a request without a body whose method is idempotent, on a new
 * stream.  Returns 0 if retried. */
static int
x_retry(struct k8s_exchange *x)
{
	struct hconn *h = x->h;
	struct access_grant g = { .node = "" };
	struct reach agent;
	char err[512];

	if (!x->adopted || x->retried || !x->idempotent || x->req_head_len == 0 ||
	    h == NULL || x->state != X_HEAD || x->head_bytes != 0)
		return -1;
	x_detach(x, "closed");
	x->retried = 1;
	x->adopted = 0;
	copy_str(g.principal, sizeof(g.principal), x->principal);
	copy_str(g.cluster, sizeof(g.cluster), x->cluster);
	if (access_pick(x->gw, &g, &agent, err, sizeof(err)) != 0)
		return -1;
	debug("k8s idle stream closed under a request: retried on a new one",
	    KV_S("peer", exchange_peer(h)), KV_S("method", x->method),
	    KV_S("path", x->path));
	/* The whole head again (an idempotent request: no body). */
	evbuffer_drain(x->to_agent, evbuffer_get_length(x->to_agent));
	x->req_head_sent = 0;
	http_parser_init(&x->rp, HTTP_RESPONSE);
	x->rp.data = x;
	rraw_clear(x);
	x->rp_paused = 0;
	x->msg_complete = 0;
	x->up = 0;
	x->state = X_OPENING;
	if (x_open(x, &agent, h, err, sizeof(err)) != 0)
		return -1;
	return 0;
}

/* ---- the upstream request ---- */

/* ASCII lower case, inline (tolower is a call into the C library for
 * every byte of every header name a request carries). */
static unsigned char
ascii_lower(unsigned char c)
{
	return c >= 'A' && c <= 'Z' ? (unsigned char)(c + ('a' - 'A')) : c;
}

/*
 * 1 if the first n bytes of name are those of want (both at least n
 * long, or name ends sooner: no match), compared as servers that map
 * names to variables do: any case, and '_' the same as '-' (CGI, WSGI
 * and some proxies read "Impersonate_User" as "Impersonate-User").  A
 * whole name: the caller compares the lengths first.
 */
static int
name_is(const char *name, const char *want, size_t n)
{
	for (size_t i = 0; i < n; i++) {
		unsigned char a = (unsigned char)name[i], b = (unsigned char)want[i];

		if (a == '_')
			a = '-';
		if (a == '\0' || ascii_lower(a) != ascii_lower(b))
			return 0;
	}
	return 1;
}

/*
 * Request headers never passed on: hop-by-hop ones, and the ones the
 * gateway writes itself (framing from what it parsed, Upgrade and
 * Connection, who the request acts as), under any name that normalises
 * to one of them (name_is).  Checked in this order, so the client's
 * Connection can only drop more: never Host, never the framing (written
 * by us anyway), and it cannot make Authorization or Impersonate-* pass.
 * name is n bytes long (no NUL inside: a header name is a token).
 */
#define NAME_LEN(s) { s, sizeof(s) - 1 }

static int
request_header_dropped(const char *name, size_t n, const char *connection)
{
	/* With their lengths, by first letter: a whole name of another
	 * length cannot match, nor a prefix longer than the name, nor a name
	 * that starts with another letter ('_' is no letter): only a name
	 * that may match is compared, byte by byte (each of a request's
	 * headers was compared with every one, ~500 instructions a request). */
	static const struct { const char *s; size_t n; } drop[] = {
		NAME_LEN("Authorization"), NAME_LEN("Connection"),
		NAME_LEN("Keep-Alive"), NAME_LEN("TE"), NAME_LEN("Trailer"),
		NAME_LEN("Transfer-Encoding"), NAME_LEN("Content-Length"),
		NAME_LEN("Upgrade"), NAME_LEN("Expect") };
	unsigned char c = ascii_lower((unsigned char)name[0]);

	switch (c) {
	case 'a': case 'c': case 'k': case 't': case 'u': case 'e':
		for (size_t i = 0; i < sizeof(drop) / sizeof(drop[0]); i++)
			if (n == drop[i].n && c == ascii_lower((unsigned char)
			    drop[i].s[0]) && name_is(name, drop[i].s, n))
				return 1;
		break;
	case 'p':
		if (n >= 6 && name_is(name, "Proxy-", 6))
			return 1;
		break;
	case 'i':
		/* Who the request acts as is the gateway's to say, never the
		 * client's (the node's API server trusts the node's own
		 * credential). */
		if (n >= 12 && name_is(name, "Impersonate-", 12))
			return 1;
		break;
	case 'h':
		if (n == 4 && strncasecmp(name, "Host", 4) == 0)
			return 0;
		break;
	}
	/* Other headers the client named in Connection are hop-by-hop too
	 * (none named: nothing to look for). */
	return connection[0] != '\0' && http_token_list_has(connection, name);
}

/* A request head being written, at the end of x->req_head (grown as
 * needed: a spare exchange's buffer usually holds it already). */
struct head_out {
	struct k8s_exchange *x;
	int err;                      /* out of memory: the head is cut */
};

/* ho_put for a piece that does not fit what is left of the buffer. */
static void
ho_put_slow(struct head_out *o, const char *p, size_t n)
{
	struct k8s_exchange *x = o->x;
	size_t cap = x->req_head_cap ? x->req_head_cap : 1024;
	char *b;

	if (o->err)
		return;
	while (cap - x->req_head_len < n)
		cap *= 2;
	if ((b = realloc(x->req_head, cap)) == NULL) {
		o->err = 1;
		return;
	}
	x->req_head = b;
	x->req_head_cap = cap;
	memcpy(x->req_head + x->req_head_len, p, n);
	x->req_head_len += n;
}

/* Inline: called ~15 times per request with small pieces, most of them
 * of a constant size (a call each was ~570 instructions of a request). */
static inline void
ho_put(struct head_out *o, const char *p, size_t n)
{
	struct k8s_exchange *x = o->x;

	if (n > x->req_head_cap - x->req_head_len) {
		ho_put_slow(o, p, n);
		return;
	}
	memcpy(x->req_head + x->req_head_len, p, n);
	x->req_head_len += n;
}

/* A header's value with any CR or LF made a space: one header, one line. */
static void
ho_value(struct head_out *o, const char *v)
{
	for (const char *p = v; *p != '\0';) {
		size_t n = strcspn(p, "\r\n");

		ho_put(o, p, n);
		p += n;
		if (*p != '\0') {
			ho_put(o, " ", 1);
			p++;
		}
	}
}

/* The request line and the client's headers that pass (the rest of the
 * head, write_request_tail, waits for the token check: who asks), into
 * x->req_head (empty). */
static int
write_request_head(struct k8s_exchange *x, const struct http_request *rq,
    const char *rest)
{
	struct head_out o = { x, 0 };
	const char *p = rq->headers, *end = rq->headers + rq->headers_len;
	int r = 0;

	ho_put(&o, rq->method, strlen(rq->method));
	ho_put(&o, " /", rest[0] == '/' ? 1 : 2);
	ho_put(&o, rest, strlen(rest));
	ho_put(&o, " HTTP/1.1\r\n", 11);
	while (p < end) {
		size_t n = strlen(p);
		const char *name = p, *value = p + n + 1;

		if (value >= end)
			break;
		p = value + strlen(value) + 1;
		if (request_header_dropped(name, n, rq->connection))
			continue;
		ho_put(&o, name, n);
		ho_put(&o, ": ", 2);
		ho_value(&o, value);
		ho_put(&o, "\r\n", 2);
	}
	r = o.err;
	/* What the tail needs of rq, which lives only during k8s_start. */
	x->req_chunked = rq->body_chunked;
	x->req_has_length = rq->has_length;
	x->req_length = rq->content_length;
	if (x->upgrade_req && (x->up_value = strdup(rq->upgrade)) == NULL)
		r = -1;
	return r != 0 ? -1 : 0;
}

/* The rest of the head, once the check said who asks. */
static int
write_request_tail(struct k8s_exchange *x)
{
	struct head_out o = { x, 0 };
	char length[48];
	int n;

	/* --impersonate: the upstream learns which gateway user asked. */
	if (x->gw->impersonate && strncmp(x->principal, "user:", 5) == 0) {
		ho_put(&o, "Impersonate-User: ", 18);
		ho_value(&o, x->principal + 5);
		ho_put(&o, "\r\n", 2);
	}
	if (x->upgrade_req) {
		ho_put(&o, "Upgrade: ", 9);
		ho_value(&o, x->up_value);
		ho_put(&o, "\r\nConnection: Upgrade\r\n", 23);
	} else if (!x->keep_up)
		ho_put(&o, "Connection: close\r\n", 19);
	/* The framing of the bytes we send, from what the reader parsed. */
	if (x->req_chunked)
		ho_put(&o, "Transfer-Encoding: chunked\r\n", 28);
	else if (x->req_has_length) {
		n = snprintf(length, sizeof(length), "Content-Length: %llu\r\n",
		    x->req_length);
		ho_put(&o, length, (size_t)n);
	}
	ho_put(&o, "\r\n", 2);
	return o.err ? -1 : 0;
}

/* ---- starting ---- */

/* A new exchange's memory and buffers (zeroed), or NULL. */
static struct k8s_exchange *
x_fresh(void)
{
	struct k8s_exchange *x = calloc(1, sizeof(*x));

	if (x == NULL)
		return NULL;
	x->to_agent = evbuffer_new();
	if (x->to_agent == NULL) {
		free(x);
		return NULL;
	}
	return x;
}

/* The spare exchange of h's parked stream (x_free_to), made new: its
 * buffers (empty) kept, the rest zeroed; or NULL. */
static struct k8s_exchange *
x_reuse(struct hconn *h)
{
	struct k8s_link *l = exchange_kept(h);
	struct k8s_exchange *x = l != NULL ? l->spare : NULL;
	struct evbuffer *to_agent;
	char *rraw, *req_head;
	size_t rraw_cap, req_head_cap;

	if (x == NULL)
		return NULL;
	l->spare = NULL;
	to_agent = x->to_agent;
	req_head = x->req_head;
	req_head_cap = x->req_head_cap;
	rraw = x->rraw;
	rraw_cap = x->rraw_cap;
	memset(x, 0, sizeof(*x));
	x->to_agent = to_agent;
	x->req_head = req_head;
	x->req_head_cap = req_head_cap;
	x->rraw = rraw;
	x->rraw_cap = rraw_cap;
	return x;
}

static struct k8s_exchange *
x_new(struct gateway *gw, struct hconn *h, const struct http_request *rq)
{
	struct k8s_exchange *x = x_reuse(h);

	if (x == NULL && (x = x_fresh()) == NULL)
		return NULL;
	x->gw = gw;
	x->h = h;
	x->state = X_CHECKING;
	gettimeofday(&x->started, NULL);
	http_parser_init(&x->rp, HTTP_RESPONSE);
	x->rp.data = x;
	x->head_method = strcmp(rq->method, "HEAD") == 0;
	x->body_chunked = rq->body_chunked;
	x->has_body = rq->body_chunked ||
	    (rq->has_length && rq->content_length > 0);
	x->upgrade_req = rq->upgrade[0] != '\0' &&
	    http_token_list_has(rq->connection, "upgrade");
	x->keep_up = !x->upgrade_req && rq->keep_alive && exchange_keep_alive(h);
	copy_str(x->method, sizeof(x->method), rq->method);
	copy_str(x->client, sizeof(x->client), exchange_peer(h));
	return x;
}

/* The audit line of a request refused before an exchange exists. */
static void
audit_refusal(const struct hconn *h, const struct http_request *rq,
    const char *principal, const char *cluster, int code)
{
	audit("k8s", exchange_peer(h), KV_S("who", principal[0] ? principal : "-"),
	    KV_S("cluster", cluster[0] ? cluster : "-"), KV_S("node", "-"),
	    KV_S("method", rq->method), KV_S("path", rq->path),
	    KV_I("status", code), KV_U("bytes_up", 0), KV_U("bytes_down", 0),
	    KV_I("duration_ms", 0));
	metrics_k8s_request(code, 0);
}

/* Refusals before an exchange exists: a Status and an audit line. */
static void
refuse(struct hconn *h, const struct http_request *rq, const char *principal,
    const char *cluster, int code, const char *message)
{
	audit_refusal(h, rq, principal, cluster, code);
	reply_status(h, code, message);
}

static void
k8s_refuse_unreadable(struct hconn *h, const struct http_request *rq,
    int status, const char *reason)
{
	char cluster[STORE_ID_MAX + 1] = "";
	const char *seg;
	size_t len;
	char *body;

	if (strncmp(rq->path, K8S_CLUSTERS, strlen(K8S_CLUSTERS)) == 0) {
		seg = rq->path + strlen(K8S_CLUSTERS);
		copy_mem(cluster, sizeof(cluster),
		    seg, strcspn(seg, "/"));
	}
	audit_refusal(h, rq, "", cluster, status);
	body = status_json(status, reason, &len);
	exchange_refuse(h, status, body, len);
}

/*
 * Which cluster rq is for, and the rest of its target, to be passed on
 * exactly as the client sent it: /k8s/clusters/ID/REST, or a root path
 * (/version, /api...), whose cluster is the one a user token is scoped
 * to: the token check finds it (*root set, cluster "").  Returns 0 with
 * cluster and *rest, or 404 with why in err (cluster "").
 */
static int
k8s_target(const struct http_request *rq, char cluster[STORE_ID_MAX + 1],
    const char **rest, int *root, char *err, size_t errlen)
{
	const char *seg;
	size_t n;

	cluster[0] = '\0';
	*root = 0;
	/* The raw target: the rest is passed on exactly as the client sent it. */
	if (!k8s_matches(rq->path) || rq->target[0] != '/') {
		snprintf(err, errlen, "no route");
		return 404;
	}
	if (k8s_root_path(rq->path)) {
		*rest = rq->target;
		*root = 1;
		return 0;
	}
	if (strncmp(rq->target, K8S_CLUSTERS, strlen(K8S_CLUSTERS)) != 0) {
		snprintf(err, errlen, "no route: want %sID/...", K8S_CLUSTERS);
		return 404;
	}
	seg = rq->target + strlen(K8S_CLUSTERS);
	n = strcspn(seg, "/?");
	if (n == 0 || n > STORE_ID_MAX) {
		snprintf(err, errlen, "no such cluster");
		return 404;
	}
	copy_mem(cluster, STORE_ID_MAX + 1, seg, n);
	*rest = seg + n;
	return 0;
}

/*
 * The way to an agent for g's request on connection h: the stream h's
 * last request left parked, if it is still open and was for the same
 * cluster and principal (*parked; any other parked stream is closed), or
 * else the agent access_pick chooses (*agent, *parked NULL).  Returns 0,
 * or a status (503: no active agent) with err.
 */
static int
k8s_way(struct gateway *gw, struct hconn *h, const struct access_grant *g,
    struct k8s_link **parked, struct reach *agent, char *err, size_t errlen)
{
	struct k8s_link *p = exchange_take_kept(h);

	if (p != NULL && (p->s == NULL || p->fin ||
	    strcmp(p->cluster, g->cluster) != 0 ||
	    strcmp(p->principal, g->principal) != 0)) {
		link_free(p, "closed");
		p = NULL;
	}
	*parked = p;
	return p != NULL ? 0 : access_pick(gw, g, agent, err, errlen);
}

/* Ends x before any answer byte with a Status (audited by x_free, with
 * the path as the client's request named it, like refuse's).  Returns -1. */
static int
x_refuse(struct k8s_exchange *x, int status, const char *message)
{
	struct hconn *h = x->h;

	copy_str(x->path, sizeof(x->path), x->req_path);
	x->h = NULL;
	x->status = status;
	reply_status(h, status, message);
	x_free(x);
	return -1;
}

/*
 * A new exchange for rq on h (for cluster, "" for a root path), in state
 * checking: its request head written up to the client's headers (the
 * tail waits for who asks).  Returns it, or NULL with the client answered
 * 500 (and the request audited).
 */
static struct k8s_exchange *
k8s_exchange_new(struct gateway *gw, struct hconn *h,
    const struct http_request *rq, const char *cluster, const char *rest,
    int root)
{
	struct k8s_exchange *x = x_new(gw, h, rq);

	if (x == NULL) {
		refuse(h, rq, "", cluster, 500, "out of memory");
		return NULL;
	}
	x->root = root;
	copy_str(x->req_path, sizeof(x->req_path), rq->path);
	copy_str(x->cluster, sizeof(x->cluster), cluster);
	copy_mem(x->path, sizeof(x->path), rest, strcspn(rest, "?"));
	if (x->path[0] == '\0')
		snprintf(x->path, sizeof(x->path), "/");
	x->idempotent = !x->has_body && (strcmp(rq->method, "GET") == 0 ||
	    strcmp(rq->method, "HEAD") == 0 || strcmp(rq->method, "OPTIONS") == 0);
	if (write_request_head(x, rq, rest[0] != '\0' ? rest : "/") != 0) {
		(void)x_refuse(x, 500, "out of memory");
		return NULL;
	}
	return x;
}

/*
 * Sends x's request over the stream parked on h (k8s_way).  A GET, HEAD
 * or OPTIONS without a body can be sent again on a new stream (x_retry,
 * from x->req_head, whole until x ends) should the parked one turn out
 * closed under it.
 */
static void
k8s_adopt(struct k8s_exchange *x, struct k8s_link *parked)
{
	x->link = parked;
	parked->x = x;
	copy_str(x->agent_id, sizeof(x->agent_id), parked->agent_id);
	x->agent = parked->s;
	x->adopted = 1;
	x->state = X_HEAD;
	flush_up(x);
}

/*
 * The token check answered (x->checked): the refusal, or the way to an
 * agent (k8s_way), the head's tail, and the request sent over the parked
 * stream or waiting for a new one to open.  Returns 0 if the exchange
 * goes on, -1 if it ended (answered and audited; x freed).
 */
static int
x_go(struct k8s_exchange *x)
{
	struct k8s_link *parked = NULL;
	struct reach agent;
	char err[512];
	int status = x->check_status;

	if (x->grant.cluster[0] != '\0')
		copy_str(x->cluster, sizeof(x->cluster), x->grant.cluster);
	if (status == 404 && x->root && x->cluster[0] == '\0') {
		snprintf(err, sizeof(err), "no route %s %.200s: a cluster's "
		    "Kubernetes API is at %sID/ (or send a user token scoped "
		    "to exactly one cluster)", x->method, x->req_path, K8S_CLUSTERS);
		return x_refuse(x, 404, err);
	}
	if (status != 0)
		return x_refuse(x, status, x->check_err);
	copy_str(x->principal, sizeof(x->principal), x->grant.principal);
	if ((status = k8s_way(x->gw, x->h, &x->grant, &parked, &agent, err,
	    sizeof(err))) != 0)
		return x_refuse(x, status, err);
	copy_str(x->node, sizeof(x->node),
	    parked != NULL ? parked->node : agent.node);
	copy_str(x->replica, sizeof(x->replica),
	    parked != NULL ? parked->replica : agent.replica);
	copy_str(x->token_id, sizeof(x->token_id), x->grant.token_id);
	x->live = (struct live_stream){ .kind = "k8s", .principal = x->principal,
	    .cluster = x->cluster, .node = x->node, .target = x->path, .up = &x->up,
	    .down = &x->down, .started = x->started.tv_sec,
	    .token_id = x->token_id, .agent_id = x->agent_id, .end = x_end };
	live_stream_add(live_streams_here(x->gw), &x->live);
	if (write_request_tail(x) != 0) {
		if (parked != NULL)
			link_free(parked, "closed");
		return x_refuse(x, 500, "out of memory");
	}
	if (parked != NULL) {
		k8s_adopt(x, parked);
		return 0;
	}
	x->state = X_OPENING;
	if (x_open(x, &agent, x->h, err, sizeof(err)) != 0)
		return x_refuse(x, 503, err);
	flush_up(x);        /* the client's body, held during the check, flows */
	return 0;
}

/* A 503 with Retry-After (K8S_RETRY_AFTER_S) before any check. */
static void
x_refuse_later(struct k8s_exchange *x, const char *message)
{
	struct hconn *h = x->h;
	size_t len;
	char *body = status_json(503, message, &len);

	copy_str(x->path, sizeof(x->path), x->req_path);
	x->h = NULL;
	x->status = 503;
	exchange_reply_later(h, 503, body, len, K8S_RETRY_AFTER_S);
	x_free(x);
}

/* access_cluster_async's answer: inside k8s_start (x->in_start: it goes
 * on from there), or later from the store thread's result. */
static void
x_checked(void *arg, int status, const struct access_grant *g, const char *err)
{
	struct k8s_exchange *x = arg;

	x->check = NULL;
	x_uncount(x);
	x->checked = 1;
	x->check_status = status;
	x->grant = *g;
	if (status == 0)
		access_memo_grant(&x->memo, g);
	else
		access_memo_clear(&x->memo);
	copy_str(x->check_err, sizeof(x->check_err), err != NULL ? err : "");
	if (x->in_start)
		return;
	if (x->deadline != NULL)
		evtimer_del(x->deadline);
	(void)x_go(x);
}

/* The store did not answer the check in time (stalled, or its queue long):
 * a 503 rather than a client left waiting. */
static void
x_check_late(evutil_socket_t fd, short what, void *arg)
{
	struct k8s_exchange *x = arg;
	char msg[160];

	(void)fd;
	(void)what;
	access_cancel(x->check);
	x->check = NULL;
	snprintf(msg, sizeof(msg), "the store did not answer the token check "
	    "within %u ms: retry shortly", x->gw->limits.http_timeout_ms);
	debug("k8s: token check late", KV_S("peer", x->client), KV_S("reason", msg));
	(void)x_refuse(x, 503, msg);
}

/*
 * An exchange's start (route.h): the cluster from the path, then the
 * exchange, which waits for its token check (access_cluster_async: never
 * a store read on the loop, issue 22; its body unread meanwhile) before
 * it goes on (x_go), at once when the check needs no store read.  Returns
 * the exchange, or NULL with the client answered (and audited).
 */
static void *
k8s_start(struct gateway *gw, struct hconn *h, const struct http_request *rq)
{
	char cluster[STORE_ID_MAX + 1], err[512];
	struct k8s_exchange *x;
	struct k8s_link *kept;
	struct timeval tv;
	const char *rest;
	int status, root, taken;

	if ((status = k8s_target(rq, cluster, &rest, &root, err,
	    sizeof(err))) != 0) {
		refuse(h, rq, "", cluster, status, err);
		return NULL;
	}
	if ((x = k8s_exchange_new(gw, h, rq, cluster, rest, root)) == NULL)
		return NULL;
	/* The connection's last request proved these very bytes for this
	 * cluster moments ago, and nothing was revoked since (access_memo):
	 * its grant, no check. */
	kept = exchange_kept(h);
	if (kept != NULL && access_memo_take(gw, &kept->memo, rq->authorization,
	    root ? NULL : cluster, &x->grant)) {
		x->memo = kept->memo;
		x->checked = 1;
		return x_go(x) == 0 ? x : NULL;
	}
	access_memo_begin(&x->memo, rq->authorization, root ? NULL : cluster);
	/* One source cannot fill the store's queue with checks (issue 22):
	 * past K8S_CHECKS_PER_SOURCE waiting, 503 and when to come back. */
	k8s_checks_lock(gw);
	if (gw->k8s_checks == NULL)
		gw->k8s_checks = srccount_new();
	taken = gw->k8s_checks != NULL &&
	    srccount_take(gw->k8s_checks, x->client, K8S_CHECKS_PER_SOURCE) == 0;
	k8s_checks_unlock(gw);
	if (!taken) {
		x_refuse_later(x, "too many token checks from this address are "
		    "waiting for the store: retry shortly");
		return NULL;
	}
	x->counted_check = 1;
	x->in_start = 1;
	x->check = access_cluster_async(gw, rq->authorization, root ? NULL :
	    cluster, NULL, x_checked, x);
	x->in_start = 0;
	if (x->checked)
		return x_go(x) == 0 ? x : NULL;
	tv = runtime_ms_timeval(gw->limits.http_timeout_ms);
	if ((x->deadline = evtimer_new(loop_base_here(gw), x_check_late, x)) == NULL ||
	    evtimer_add(x->deadline, &tv) != 0) {
		(void)x_refuse(x, 500, "out of memory");
		return NULL;
	}
	return x;
}

static const struct route_exchange k8s_exchange_ops = {
	.start = k8s_start,
	.unreadable = k8s_refuse_unreadable,
	.body = k8s_body,
	.body_end = k8s_body_end,
	.wants_body = k8s_wants_body,
	.raw_input = k8s_raw_input,
	.client_gone = k8s_client_gone,
};

/*
 * The route's land_loop (docs/0040 step 8): a connection whose first
 * request is for /k8s/clusters/ID/... lands by where ID's agents are
 * (access_land_loop: with --landing route on the loop of an agent of ID,
 * so its streams cross no loop link; with any where the loops stay most
 * even, its tunnel side weighed on its agent's loop); a root path
 * (/version...: the cluster is the token's, known only after the store
 * read) or an unknown cluster stays where its handshake ran.  A later
 * request of the connection for another cluster may cross.
 */
static unsigned
k8s_land_loop(struct gateway *gw, const struct route_landing *at)
{
	char cluster[STORE_ID_MAX + 1];
	const char *seg;
	size_t n;

	if (strncmp(at->path, K8S_CLUSTERS, strlen(K8S_CLUSTERS)) != 0)
		return at->here;
	seg = at->path + strlen(K8S_CLUSTERS);
	n = strcspn(seg, "/");
	if (n == 0 || n > STORE_ID_MAX)
		return at->here;
	copy_mem(cluster, sizeof(cluster), seg, n);
	return access_land_loop(gw, cluster, NULL, at->here, at->tunnel);
}

const struct route k8s_route = {
	.name = "k8s",
	.matches = k8s_matches,
	.exchange = &k8s_exchange_ops,
	.land_loop = k8s_land_loop,
};
