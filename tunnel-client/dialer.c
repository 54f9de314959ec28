/*
 * dialer.c: allowlist, asynchronous dial, bridge (see dialer.h).
 *
 * Each OPEN gets a struct dial that lives until its bridge is done: while
 * connecting it owns a bufferevent and a deadline timer; once connected the
 * bufferevent passes to the bridge.
 *
 * A service whose URL is https:// is reached over TLS: once TCP is up the
 * socket's bufferevent is wrapped in an OpenSSL filter (SNI and name or IP
 * checked against the URL's host; verified against DIR/service-NAME-ca.crt
 * when join was given --service-ca, else the system's CAs), and the bridge
 * gets the filter once the handshake is done, so a bad certificate is an
 * OPEN_FAIL ("tls") with the reason, not a stream that dies.
 *
 * A service joined with --service-token gets a head filter on its bridge:
 * every request head the stream carries has its Authorization headers
 * replaced by `Authorization: Bearer TOKEN` (httphead.h) before it enters
 * the socket, and its framing (checked: one reading only) says where its
 * body ends; the bytes after that must be the next request's head, which
 * gets the same rewrite.  So the gateway may send the requests of one
 * client connection on one stream (docs/0007) and the upstream connection
 * carries them all, each with the node's token and no other credential.
 * After a head that asks for an upgrade the bytes are the new protocol's
 * (after a 101; without one the gateway sends none) and pass as they are.
 * The token is read from DIR/service-NAME.token at start and never logged.
 *
 *   CONNECTING --TCP up--> (https) HANDSHAKING --TLS up--> bridged
 *       \--error/deadline: OPEN_FAIL  \--error/deadline: OPEN_FAIL
 */
#include "dialer.h"

#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <event2/bufferevent.h>
#include <event2/bufferevent_ssl.h>
#include <event2/dns.h>
#include <event2/event.h>
#include <event2/util.h>
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <openssl/x509v3.h>

#include "bridge.h"
#include "fileio.h"
#include "frame.h"
#include "hostname.h"
#include "httphead.h"
#include "log.h"
#include "mux.h"
#include "runtime.h"
#include "state.h"

/* The largest request head a token service's stream may start with. */
#define DIAL_HEAD_MAX (64 * 1024)

struct dialer {
	struct event_base *base;
	struct evdns_base *dns;
	const struct client_state *st;
	char dir[4096];              /* the state dir: service CAs */
	SSL_CTX *svc_tls[CLIENT_MAX_SERVICES];   /* per https service, lazily */
	char *svc_token[CLIENT_MAX_SERVICES];    /* per service with a token */
	size_t svc_toklen[CLIENT_MAX_SERVICES];  /* its length */
	uint32_t timeout_ms;
	struct dial *dials;          /* every dial not yet finished */
	unsigned active;
};

struct dial {
	struct dial *next, **prevp;
	struct dialer *d;
	struct bridge *bridge;
	struct bufferevent *bev;     /* while connecting */
	struct event *deadline;
	char target[FRAME_TARGET_MAX + 1];
	int svc;                     /* index of an https service, or -1 */
	int handshaking;             /* TLS under way on bev */
	char host[256];              /* for SNI and the certificate check */
	uint32_t stream_id;
	struct timeval started;
	/* A service with a token (dial_set_bearer, dial_request_body): */
	const char *token;
	size_t toklen;
	struct http_body_end body;   /* where the current request's body ends */
	int upgrade;                 /* it asks for an upgrade: raw bytes may follow */
};

static void
dial_unlink(struct dial *x)
{
	if (x->prevp == NULL)
		return;
	*x->prevp = x->next;
	if (x->next != NULL)
		x->next->prevp = x->prevp;
	x->prevp = NULL;
	x->d->active--;
}

static void
dial_stop_connecting(struct dial *x)
{
	if (x->deadline != NULL) {
		event_free(x->deadline);
		x->deadline = NULL;
	}
	if (x->bev != NULL) {
		bufferevent_free(x->bev);
		x->bev = NULL;
	}
}

/* The bridge ended: one line of what the stream did, then forget it. */
static void
dial_done(struct bridge *b, const struct bridge_stats *st, void *arg)
{
	struct dial *x = arg;
	struct timeval now, took;

	gettimeofday(&now, NULL);
	timersub(&now, &x->started, &took);
	if (strncmp(st->end, "refused:", 8) != 0)
		info("stream ended", KV_U("stream", x->stream_id),
		    KV_S("target", x->target), KV_S("end", st->end),
		    KV_U("bytes_in", st->bytes_in), KV_U("bytes_out", st->bytes_out),
		    KV_I("duration_ms", took.tv_sec * 1000 + took.tv_usec / 1000));
	dial_stop_connecting(x);
	dial_unlink(x);
	free(x);
}

static void
dial_fail(struct dial *x, const char *code, const char *reason)
{
	info("stream refused", KV_U("stream", x->stream_id), KV_S("target", x->target),
	    KV_S("code", code), KV_S("reason", reason));
	dial_stop_connecting(x);
	bridge_refuse(x->bridge, code, reason);   /* calls dial_done, frees x */
}

static const char *
errno_code(int err)
{
	switch (err) {
	case ECONNREFUSED:
		return "refused";
	case ETIMEDOUT:
		return "timeout";
	default:
		return "unreachable";
	}
}

static void dial_event(struct bufferevent *bev, short what, void *arg);

/* The TLS context for https service i: its CA, or the system's. */
static SSL_CTX *
service_tls(struct dialer *d, int i, char *reason, size_t rlen)
{
	char name[64], path[4200];
	SSL_CTX *ctx;

	if (d->svc_tls[i] != NULL)
		return d->svc_tls[i];
	ctx = SSL_CTX_new(TLS_client_method());
	if (ctx == NULL) {
		snprintf(reason, rlen, "out of memory");
		return NULL;
	}
	SSL_CTX_set_min_proto_version(ctx, TLS1_2_VERSION);
	SSL_CTX_set_verify(ctx, SSL_VERIFY_PEER, NULL);
	SSL_CTX_set_mode(ctx, SSL_MODE_RELEASE_BUFFERS);
	snprintf(name, sizeof(name), "service-%s-ca.crt", d->st->services[i].name);
	if (client_path(d->dir, name, path, sizeof(path)) == 0 && file_exists(path)) {
		if (SSL_CTX_load_verify_locations(ctx, path, NULL) != 1) {
			snprintf(reason, rlen, "cannot load %s", path);
			ERR_clear_error();
			SSL_CTX_free(ctx);
			return NULL;
		}
	} else if (SSL_CTX_set_default_verify_paths(ctx) != 1) {
		snprintf(reason, rlen, "cannot load the system's CAs");
		ERR_clear_error();
		SSL_CTX_free(ctx);
		return NULL;
	}
	d->svc_tls[i] = ctx;
	return ctx;
}

/* TCP is up to an https service: start TLS over it.  Returns 0, or -1
 * with a reason (x->bev is then still the plain socket). */
static int
dial_start_tls(struct dial *x, char *reason, size_t rlen)
{
	struct dialer *d = x->d;
	static const unsigned char alpn[] = "\x08http/1.1";
	struct bufferevent *tls;
	SSL_CTX *ctx = service_tls(d, x->svc, reason, rlen);
	SSL *ssl;
	int ip;

	if (ctx == NULL)
		return -1;
	if ((ssl = SSL_new(ctx)) == NULL) {
		snprintf(reason, rlen, "out of memory");
		return -1;
	}
	ip = strchr(x->host, ':') != NULL || strspn(x->host, "0123456789.") ==
	    strlen(x->host);
	if ((ip ? X509_VERIFY_PARAM_set1_ip_asc(SSL_get0_param(ssl), x->host) :
	    SSL_set1_host(ssl, x->host)) != 1 ||
	    (!ip && SSL_set_tlsext_host_name(ssl, x->host) != 1) ||
	    SSL_set_alpn_protos(ssl, alpn, sizeof(alpn) - 1) != 0) {
		snprintf(reason, rlen, "cannot set up TLS for %s", x->host);
		ERR_clear_error();
		SSL_free(ssl);
		return -1;
	}
	/* The filter owns the socket's bufferevent from here (CLOSE_ON_FREE). */
	tls = bufferevent_openssl_filter_new(d->base, x->bev, ssl,
	    BUFFEREVENT_SSL_CONNECTING, BEV_OPT_CLOSE_ON_FREE | BEV_OPT_DEFER_CALLBACKS);
	if (tls == NULL) {
		snprintf(reason, rlen, "out of memory");
		return -1;
	}
	bufferevent_openssl_set_allow_dirty_shutdown(tls, 1);
	x->bev = tls;
	x->handshaking = 1;
	bufferevent_setcb(tls, NULL, NULL, dial_event, x);
	bufferevent_enable(tls, EV_READ | EV_WRITE);
	return 0;
}

/* Why the TLS handshake failed, for OPEN_FAIL. */
static void
tls_failure(struct dial *x, struct bufferevent *bev, char *reason, size_t rlen)
{
	SSL *ssl = bufferevent_openssl_get_ssl(bev);
	unsigned long e = bufferevent_get_openssl_error(bev);
	long v = ssl != NULL ? SSL_get_verify_result(ssl) : X509_V_OK;

	if (v != X509_V_OK)
		snprintf(reason, rlen, "TLS to %s: certificate: %s", x->target,
		    X509_verify_cert_error_string(v));
	else if (e != 0)
		snprintf(reason, rlen, "TLS to %s: %s", x->target,
		    ERR_reason_error_string(e));
	else
		snprintf(reason, rlen, "TLS to %s: the connection closed", x->target);
	ERR_clear_error();
}

static void
dial_event(struct bufferevent *bev, short what, void *arg)
{
	struct dial *x = arg;
	char reason[FRAME_REASON_MAX + 1];
	int one = 1, err;

	if ((what & BEV_EVENT_CONNECTED) && !x->handshaking && x->svc >= 0) {
		setsockopt(bufferevent_getfd(bev), IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
		if (dial_start_tls(x, reason, sizeof(reason)) != 0)
			dial_fail(x, "tls", reason);
		return;
	}
	if (x->handshaking && !(what & BEV_EVENT_CONNECTED)) {
		tls_failure(x, bev, reason, sizeof(reason));
		dial_fail(x, "tls", reason);
		return;
	}
	if (what & BEV_EVENT_CONNECTED) {
		if (!x->handshaking)
			setsockopt(bufferevent_getfd(bev), IPPROTO_TCP, TCP_NODELAY,
			    &one, sizeof(one));
		event_free(x->deadline);
		x->deadline = NULL;
		x->bev = NULL;
		debug("stream connected", KV_U("stream", x->stream_id),
		    KV_S("target", x->target));
		bridge_attach(x->bridge, bev);
		return;
	}
	err = bufferevent_socket_get_dns_error(bev);
	if (err != 0) {
		snprintf(reason, sizeof(reason), "cannot resolve %s: %s", x->target,
		    evutil_gai_strerror(err));
		dial_fail(x, "unreachable", reason);
		return;
	}
	err = EVUTIL_SOCKET_ERROR();
	snprintf(reason, sizeof(reason), "connect to %s: %s", x->target,
	    evutil_socket_error_to_string(err));
	dial_fail(x, errno_code(err), reason);
}

static void
dial_timeout(evutil_socket_t fd, short what, void *arg)
{
	struct dial *x = arg;
	char reason[FRAME_REASON_MAX + 1];

	snprintf(reason, sizeof(reason), "no answer from %s within %u ms",
	    x->target, x->d->timeout_ms);
	dial_fail(x, "timeout", reason);
}

/* Splits "host:port" / "[v6]:port" (checked by target_parse) into the
 * host to resolve, without brackets, and the port.  Returns 0 or -1 with
 * the reason in why. */
static int
split_target(const char *target, char *host, size_t hostlen, int *port,
    char *why, size_t whylen)
{
	size_t n;
	unsigned int p;
	const char *h = target;

	if (target_parse(target, strlen(target), &n, &p, why, whylen) != 0)
		return -1;
	if (target[0] == '[') {
		h++;
		n -= 2;
	}
	if (n >= hostlen) {
		snprintf(why, whylen, "the host is too long");
		return -1;
	}
	memcpy(host, h, n);
	host[n] = '\0';
	*port = (int)p;
	return 0;
}

/* A request head on a service stream with a token (bridge_head_fn):
 * Authorization replaced by the node's bearer token; its framing says where
 * its body ends.  The rewrite reads the check's line table
 * (http_head_set_bearer_lines: 3.0k -> ~1.6k instructions per /k8s
 * request, tests/bench/k8s_instructions.sh BENCH_PROFILE=agent
 * BENCH_SERVICE_TOKEN=1), the whole head again only past HTTP_LINES_MAX
 * header lines. */
static int
dial_set_bearer(const uint8_t *buf, size_t len, size_t *used, char **out,
    size_t *outlen, const char **code, void *arg)
{
	struct dial *x = arg;
	const char *head = (const char *)buf, *why;
	size_t n = http_head_length(head, len);
	struct http_framing f;
	struct http_lines lines;
	int r;

	if (n == 0)
		return 0;
	r = http_head_check_lines(head, n, &f, &lines, &why);
	if (r == 0)
		r = lines.more ? http_head_set_bearer(head, n, x->token, out, outlen) :
		    http_head_set_bearer_lines(head, n, &lines, x->token, x->toklen,
		    out, outlen);
	if (r != 0) {
		*code = "bad_request_head";
		return -1;
	}
	http_body_end_init(&x->body, &f);
	x->upgrade = f.upgrade;
	*used = n;
	return 1;
}

/* Stream bytes after a head (bridge_tail_fn): its body, as its framing
 * says; once the body ends, the next bytes are the next request's head.
 * After an upgrade everything passes (the new protocol's bytes, after a
 * 101; without one the gateway sends none).  Malformed chunk framing
 * resets the stream "bad_request_body". */
static size_t
dial_request_body(const uint8_t *data, size_t len, int *done, const char **code,
    void *arg)
{
	struct dial *x = arg;
	size_t n;

	*done = 0;
	if (x->upgrade)
		return len;
	n = http_body_end_feed(&x->body, (const char *)data, len, done);
	if (n == (size_t)-1) {
		*done = 0;
		*code = "bad_request_body";
		return 0;
	}
	return n;
}

/* The host:port a --service URL names (http(s)://HOST:PORT[/]); *svc is
 * the service's index, *tls_svc the same when it is https, else -1. */
static int
service_target(const struct client_state *st, const char *name, char *out,
    size_t outlen, int *svc, int *tls_svc)
{
	for (size_t i = 0; i < st->nservices; i++) {
		int tls;

		if (strcmp(st->services[i].name, name) != 0)
			continue;
		if (client_service_url(st->services[i].url, out, outlen, &tls) != 0)
			return -1;
		*svc = (int)i;
		*tls_svc = tls ? (int)i : -1;
		return 0;
	}
	return -1;
}

void
dialer_on_open(struct mux *m, struct mux_stream *s, const struct frame_open *req, void *arg)
{
	struct dialer *d = arg;
	struct dial *x;
	char host[256], reason[FRAME_REASON_MAX + 1], why[128];
	struct timeval tv;
	int port, svc = -1;

	x = calloc(1, sizeof(*x));
	if (x == NULL) {
		mux_stream_refuse(s, "internal", "out of memory");
		return;
	}
	x->d = d;
	x->svc = -1;
	x->stream_id = mux_stream_id(s);
	gettimeofday(&x->started, NULL);
	x->next = d->dials;
	if (d->dials != NULL)
		d->dials->prevp = &x->next;
	d->dials = x;
	x->prevp = &d->dials;
	d->active++;
	x->bridge = bridge_accepting(s, dial_done, x);
	if (x->bridge == NULL) {
		dial_unlink(x);
		free(x);
		mux_stream_refuse(s, "internal", "out of memory");
		return;
	}

	if (req->service[0] != '\0') {
		snprintf(x->target, sizeof(x->target), "service %s", req->service);
		if (service_target(d->st, req->service, x->target, sizeof(x->target),
		    &svc, &x->svc) != 0) {
			snprintf(reason, sizeof(reason), "no service \"%s\" on this node",
			    req->service);
			dial_fail(x, "unknown_service", reason);
			return;
		}
		if (d->svc_token[svc] != NULL) {
			x->token = d->svc_token[svc];
			x->toklen = d->svc_toklen[svc];
			bridge_set_head_filter(x->bridge, DIAL_HEAD_MAX, dial_set_bearer,
			    dial_request_body, x);
		}
	} else {
		snprintf(x->target, sizeof(x->target), "%s", req->target);
		/* Deny by default: a compromised gateway still reaches only what
		 * the node's owner allowed. */
		if (!client_allow_match(d->st, req->target)) {
			snprintf(reason, sizeof(reason), "%s is not in this node's allowlist",
			    req->target);
			dial_fail(x, "not_allowed", reason);
			return;
		}
	}
	if (split_target(x->target, host, sizeof(host), &port, why, sizeof(why)) != 0) {
		snprintf(reason, sizeof(reason), "bad target: %s", why);
		dial_fail(x, "bad_target", reason);
		return;
	}
	snprintf(x->host, sizeof(x->host), "%s", host);
	x->bev = bufferevent_socket_new(d->base, -1, BEV_OPT_CLOSE_ON_FREE);
	x->deadline = evtimer_new(d->base, dial_timeout, x);
	if (x->bev == NULL || x->deadline == NULL) {
		dial_fail(x, "internal", "out of memory");
		return;
	}
	bufferevent_setcb(x->bev, NULL, NULL, dial_event, x);
	tv = runtime_ms_timeval(d->timeout_ms);
	evtimer_add(x->deadline, &tv);
	debug("stream dialing", KV_U("stream", x->stream_id), KV_S("target", x->target));
	/* May report failure synchronously through dial_event (x freed then). */
	bufferevent_socket_connect_hostname(x->bev, d->dns, AF_UNSPEC, host, port);
}

struct dialer *
dialer_new(struct event_base *base, struct evdns_base *dns,
    const struct client_state *st, const char *state_dir, uint32_t dial_timeout_ms,
    char *err, size_t errlen)
{
	struct dialer *d = calloc(1, sizeof(*d));
	char name[64], path[4200];

	if (d == NULL) {
		snprintf(err, errlen, "out of memory");
		return NULL;
	}
	snprintf(d->dir, sizeof(d->dir), "%s", state_dir);
	d->base = base;
	d->dns = dns;
	d->st = st;
	d->timeout_ms = dial_timeout_ms;
	for (size_t i = 0; i < st->nservices; i++) {
		if (!st->services[i].token)
			continue;
		if (client_service_token_name(st->services[i].name, name,
		    sizeof(name)) != 0 ||
		    client_path(state_dir, name, path, sizeof(path)) != 0) {
			snprintf(err, errlen, "service %s: token path too long",
			    st->services[i].name);
			dialer_free(d);
			return NULL;
		}
		if (client_service_token_read(path, &d->svc_token[i], err,
		    errlen) != 0) {
			dialer_free(d);
			return NULL;
		}
		/* Checked there (http_token_valid): the rewrite trusts it. */
		d->svc_toklen[i] = strlen(d->svc_token[i]);
	}
	return d;
}

void
dialer_free(struct dialer *d)
{
	if (d == NULL)
		return;
	while (d->dials != NULL) {
		struct dial *x = d->dials;
		bridge_abort(x->bridge, "agent_stopping");   /* frees x via dial_done */
		if (d->dials == x) {                         /* bridge already gone */
			dial_stop_connecting(x);
			dial_unlink(x);
			free(x);
		}
	}
	for (size_t i = 0; i < CLIENT_MAX_SERVICES; i++) {
		if (d->svc_tls[i] != NULL)
			SSL_CTX_free(d->svc_tls[i]);
		if (d->svc_token[i] != NULL) {
			explicit_bzero(d->svc_token[i], strlen(d->svc_token[i]));
			free(d->svc_token[i]);
		}
	}
	free(d);
}

unsigned
dialer_active(const struct dialer *d)
{
	return d->active;
}
