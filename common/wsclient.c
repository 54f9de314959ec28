/*
 * wsclient.c: a WebSocket client (RFC 6455) over TLS or plain TCP on a
 * libevent loop (see wsclient.h).
 *
 * Why not libwebsockets' client: it parses and masks payload one byte at a
 * time, which caps a tunnel at ~300-450 MB/s per core.  Here the receive
 * path parses a frame header in place in the bufferevent's input (pulling up
 * only the header bytes), and hands a whole single-frame message to the
 * caller as one contiguous pointer into that buffer; the send path reserves
 * one contiguous region in the output buffer per message and masks 8 bytes
 * at a time while copying the payload into it (ws_mask_copy in wsframe.c).
 *
 * Input comes in turns (wsturn.h), as on the gateway's side: a callback
 * parses at most WS_FRAMES_PER_TURN frames and takes one pull of TLS
 * records; the rest waits, not reading, for the deferred event armed as a
 * 0 ms timer (yield), so a server that floods small frames shares the loop
 * with the other connections on it (a replica's peer links, tetherctl's).
 *
 * Transport: bufferevent_openssl (wss://) or a socket bufferevent (ws://,
 * for a TLS-terminating load balancer).  Names are resolved with
 * evdns_getaddrinfo, so nothing here ever blocks the loop; we do the lookup
 * ourselves rather than through bufferevent_socket_connect_hostname because
 * a lookup cancelled by a free completes later, on the loop, and only our
 * own callback tells us when the evdns_base may go (freeing it earlier
 * leaks the bufferevent, its SSL and the SSL_CTX).  One timer covers DNS,
 * TCP, TLS and the upgrade; after a close frame it bounds the wait for the
 * peer.
 *
 * Callback discipline (docs/0015: an end is always deferred to the loop),
 * because wsface_free may be called from inside any callback:
 *  - wsface_free (and the end of on_close) only marks the client dead,
 *    drops the transport and
 *    makes the deferred event active (DEFER_FREE); the loop runs it once
 *    every call on the stack has returned, and it frees the memory (or, if
 *    a DNS lookup is being cancelled, once the lookup's callback has come
 *    back: until then the memory stays, no callbacks).  No entry point
 *    counts itself;
 *  - after every user callback the code checks gone() before touching the
 *    bufferevent again;
 *  - on_close is never made from inside an API call or a bufferevent
 *    callback: finish() drops the transport, records the status and reason,
 *    and the deferred event reports them, exactly once (asserted).
 *
 * on_close statuses: the HTTP status of a refused upgrade; 101 once the
 * closing handshake happened (a close frame from the server, or our own
 * close that the server answered or that timed out); 0 for everything else
 * (DNS, TCP, TLS, timeouts, protocol errors, a connection that ended
 * without a close frame).
 *
 * Writing to a socket the peer closed raises SIGPIPE: callers ignore it
 * (every Tether program does, at start-up).
 */
#include "wsclient.h"
#include "wsframe.h"
#include "wshead.h"
#include "wsturn.h"
#include "printable.h"
#include "proxy.h"
#include "proxyauth.h"
#include "runtime.h"
#include "tlsread.h"
#include "tlssuites.h"
#include "tlswrite.h"
#include "url.h"

#include <assert.h>
#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>

#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/bufferevent_ssl.h>
#include <event2/dns.h>
#include <event2/event.h>
#include <event2/util.h>

#include <jansson.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/rand.h>
#include <openssl/sha.h>
#include <openssl/ssl.h>
#include <openssl/x509v3.h>

#define HEAD_MAX            (16 * 1024)   /* upgrade response head */
#define PROXY_BODY_MAX      (1 << 20)     /* a 407 page read past */
#define BODY_MAX            (8 * 1024)    /* refusal body we read for a reason */
#define REASON_MAX          640           /* a refused interception says a lot */
#define EOF_REASON_MAX      256
#define DEFAULT_TIMEOUT_MS  10000
#define DEFAULT_MAX_MESSAGE ((size_t)16 * 1024 * 1024)
#define DEFAULT_MAX_QUEUE   ((size_t)8 * 1024 * 1024)
#define CLOSE_WAIT_MS       2000          /* for the peer's close / our flush */
#define MASK_POOL           2048          /* random bytes: 512 frame masks */
#define CLOSE_REASON_MAX    123           /* 125 minus the status code */
/* Output chunk for a backlog: 256 KiB with libevent's chain header (its
 * allocations are powers of two), shared by the messages queued in it. */
#define OUT_CHUNK           (256 * 1024 - 256)
#define OUT_BIG_MESSAGE     (16 * 1024)
/* Input buffered at most (the read high-water mark), unless one frame is
 * bigger: then the mark is raised for that frame (see need_input).  No
 * mark while the connection is open and reads small (input_mark). */
#define INPUT_HIGH          ((size_t)4 << 20)


enum state {
	ST_CONNECTING, /* DNS, TCP, TLS (to the proxy, or through its tunnel) */
	ST_PROXY,      /* CONNECT sent, reading the proxy's answer */
	ST_UPGRADING,  /* request sent, reading the response head */
	ST_REFUSED,    /* not 101: reading the body for a reason */
	ST_OPEN,
	ST_CLOSING,    /* our close frame sent, waiting for the server's */
	ST_FLUSHING,   /* our last frame queued: close once it is written */
	ST_CLOSED,     /* transport gone; on_close reported or pending */
};

/* Work the deferred event does on the loop, outside other callbacks. */
#define DEFER_CLOSE 0x1 /* report on_close */
#define DEFER_READ  0x2 /* process input already buffered (after a resume,
                         * or its next turn: wsturn.h) */
#define DEFER_EOF   0x4 /* the transport ended: drain input, then finish */
#define DEFER_FREE  0x8 /* released (wsface_free, or after on_close) */

/* Pieces of an evbuffer one client_send_buffer masks in place. */
#define SEND_PIECES_MAX 16

struct authn_job;

struct wsclient {
	struct wsface face;         /* first: what the owner holds */
	struct event_base *base;
	struct evdns_base *dns;     /* only for names, not IP literals */
	struct evdns_getaddrinfo_request *lookup; /* in flight, or NULL */
	int lookup_cancelled;
	SSL_CTX *ssl_ctx;           /* NULL for ws:// */
	struct bufferevent *bev;    /* NULL once the transport is gone */
	struct event *timer;        /* connect timeout, then close wait */
	struct event *defer;

	/* From the URL and the configuration. */
	char *host;                 /* no brackets */
	char *host_header;          /* brackets for IPv6, port if not default */
	char *resource;             /* /path?query */
	int port;
	int tls;
	int host_is_ip;
	/* Where TCP goes: the server, or the proxy while there is one. */
	const char *dial_host;
	int dial_port;
	int dial_is_ip;
	/* An HTTP CONNECT proxy (NULL: none).  Costs ~3 KiB when set. */
	struct url *proxy;
	SSL_CTX *proxy_ssl_ctx;     /* https:// proxy */
	char proxy_name[300];       /* scheme://host:port, no credentials */
	int via_tunnel;             /* the proxy said 2xx: bytes go to the server */
	struct proxy_authn *authn;  /* Proxy-Authorization for each CONNECT */
	struct authn_job *job;      /* a Negotiate step on its thread, or NULL */
	size_t proxy_skip;          /* bytes of a 407's body still to drop */
	char *subprotocol;
	char *token;
	char *header;                 /* wsclient_config.header, or NULL */
	size_t max_message;
	size_t max_queue;           /* output cap: past it the server is dropped */
	size_t low_water;
	uint32_t timeout_ms;

	enum state state;
	char key[32];               /* Sec-WebSocket-Key we sent (base64) */
	int http_status;            /* of a refused upgrade */
	uint32_t *retry_after_ms;   /* wsclient_config.retry_after_ms */
	char status_line[128];
	size_t body_want;           /* refusal body bytes; SIZE_MAX: until EOF */
	int body_chunked;

	/* A fragmented message being reassembled (frag_opcode 0: none). */
	uint8_t *frag;
	size_t frag_len, frag_cap;
	int frag_opcode;

	int paused;
	int eof;                    /* the transport ended; see DEFER_EOF */
	char eof_reason[EOF_REASON_MAX];

	int dead;                   /* released: no more callbacks */
	int close_reported;
	unsigned deferred;          /* DEFER_* */
	size_t delivering;          /* bytes at the input's start in on_message
	                             * now (a whole frame, drained after) */
	int64_t heard_ms;           /* monotonic: the last read callback
	                             * (wsface_heard_ms); 0 none yet */
	int final_status;           /* what on_close will report */
	char final_reason[REASON_MAX];

	uint8_t pool[MASK_POOL];    /* random bytes for frame masks */
	size_t pool_off;
	size_t out_room;            /* free bytes after the output's last chain */
	size_t input_high;          /* the read high-water mark now set; 0: none */
	struct ws_turn turn;        /* its turns of the loop (wsturn.h) */
};

static void process_input(struct wsclient *);
static const struct wsface_ops client_ops;

/* f is the first member of a wsclient. */
static struct wsclient *
of_face(struct wsface *f)
{
	return (struct wsclient *)f;
}

static const struct wsclient *
of_face_const(const struct wsface *f)
{
	return (const struct wsclient *)f;
}

/* ---- small helpers ---------------------------------------------------- */

static void
errf(char *err, size_t errlen, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static void
errf(char *err, size_t errlen, const char *fmt, ...)
{
	va_list ap;

	if (err == NULL || errlen == 0)
		return;
	va_start(ap, fmt);
	vsnprintf(err, errlen, fmt, ap);
	va_end(ap);
}

/*
 * Copies untrusted text (a server's close reason or error body) for a log
 * line: printable ASCII only, bounded, no trailing blanks.
 */

static int
gone(const struct wsclient *c)
{
	return c->dead || c->bev == NULL;
}

static struct evbuffer *
input_of(struct wsclient *c)
{
	return bufferevent_get_input(c->bev);
}

static void
defer(struct wsclient *c, unsigned what)
{
	c->deferred |= what;
	event_active(c->defer, EV_TIMEOUT, 1);
}

static void
arm_timer(struct wsclient *c, uint32_t ms)
{
	struct timeval tv = runtime_ms_timeval(ms);

	evtimer_add(c->timer, &tv);
}

/* The transport only: memory stays until destroy(). */
static void
drop_transport(struct wsclient *c)
{
	/* Its callback comes back (now or from the loop) with
	 * EVUTIL_EAI_CANCEL; lookup_done() expects it. */
	if (c->lookup != NULL && !c->lookup_cancelled) {
		c->lookup_cancelled = 1;
		evdns_getaddrinfo_cancel(c->lookup);
	}
	if (c->bev != NULL) {
		/* Safe inside the bufferevent's own callbacks: libevent holds
		 * a reference while it runs them. */
		bufferevent_free(c->bev);
		c->bev = NULL;
	}
	if (c->timer != NULL)
		evtimer_del(c->timer);
}

static void authn_job_end(struct wsclient *c);

/* The owner is done with c (wsface_free, or on_close returned): no
 * callback after this, and the loop frees the memory (defer_cb), since
 * this may run inside one of our callbacks. */
static void
release(struct wsclient *c)
{
	c->dead = 1;
	drop_transport(c);
	defer(c, DEFER_FREE);
}

static void
destroy(struct wsclient *c)
{
	c->dead = 1;
	drop_transport(c);
	authn_job_end(c);
	if (c->lookup != NULL)
		return; /* lookup_done() comes back to finish this */
	if (c->timer != NULL)
		event_free(c->timer);
	if (c->defer != NULL)
		event_free(c->defer);
	/* Never from inside an evdns callback (see lookup_done). */
	if (c->dns != NULL)
		evdns_base_free(c->dns, 0);
	if (c->ssl_ctx != NULL)
		SSL_CTX_free(c->ssl_ctx);
	if (c->proxy_ssl_ctx != NULL)
		SSL_CTX_free(c->proxy_ssl_ctx);
	if (c->proxy != NULL) {
		url_clear(c->proxy);
		free(c->proxy);
	}
	proxy_authn_free(c->authn);
	free(c->host);
	free(c->host_header);
	free(c->resource);
	free(c->subprotocol);
	free(c->header);
	if (c->token != NULL) {
		OPENSSL_cleanse(c->token, strlen(c->token));
		free(c->token);
	}
	free(c->frag);
	OPENSSL_cleanse(c->pool, sizeof(c->pool));
	free(c);
}

/* Records what on_close will say (unless it is already decided). */
static void
set_final(struct wsclient *c, int status, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static void
set_final(struct wsclient *c, int status, const char *fmt, ...)
{
	char buf[REASON_MAX];
	va_list ap;

	if (c->state == ST_CLOSED)
		return;
	va_start(ap, fmt);
	vsnprintf(buf, sizeof(buf), fmt, ap);
	va_end(ap);
	c->final_status = status;
	text_printable(c->final_reason, sizeof(c->final_reason), buf, strlen(buf));
}

/* Ends the connection now and reports the recorded status from the loop. */
static void
finish(struct wsclient *c)
{
	if (c->state == ST_CLOSED)
		return;
	c->state = ST_CLOSED;
	drop_transport(c);
	defer(c, DEFER_CLOSE);
}

static void
finish_with(struct wsclient *c, int status, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static void
finish_with(struct wsclient *c, int status, const char *fmt, ...)
{
	char buf[REASON_MAX];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(buf, sizeof(buf), fmt, ap);
	va_end(ap);
	set_final(c, status, "%s", buf);
	finish(c);
}

/* ---- URL and configuration ---------------------------------------------- */

static const char *const ws_url_schemes[] = { "wss", "ws", NULL };

/* Parses wss://HOST[:PORT]/PATH?QUERY or ws://... (url_parse's rules, no
 * user information; a #fragment is dropped, as a browser does) into the
 * client's host, port, resource and Host header. */
static int
parse_url(struct wsclient *c, const char *url, char *err, size_t errlen)
{
	char why[160], authority[URL_HOST_MAX + 16], *text;
	struct url u;
	int r = -1;

	if ((text = strndup(url, strcspn(url, "#"))) == NULL) {
		errf(err, errlen, "out of memory");
		return -1;
	}
	memset(&u, 0, sizeof(u));
	if (url_parse(text, ws_url_schemes, &u, why, sizeof(why)) != 0) {
		errf(err, errlen, "URL must be wss://HOST[:PORT]/PATH or ws://...: %s",
		    why);
		goto out;
	}
	if (u.has_userinfo) {
		errf(err, errlen, "user information in a URL is not supported");
		goto out;
	}
	c->tls = strcmp(u.scheme, "wss") == 0;
	c->port = (int)u.port;
	c->host_is_ip = u.host_is_ip;
	if (url_authority(&u, authority, sizeof(authority)) < 0) {
		errf(err, errlen, "the URL's host is too long");
		goto out;
	}
	if ((c->host = strdup(u.host)) == NULL ||
	    (c->resource = strdup(u.path)) == NULL ||
	    (c->host_header = strdup(authority)) == NULL) {
		errf(err, errlen, "out of memory");
		goto out;
	}
	r = 0;
out:
	url_clear(&u);
	free(text);
	return r;
}

/* A value that goes into a request header: printable, no CR/LF. */
static int
header_value_ok(const char *s)
{
	for (; *s != '\0'; s++) {
		unsigned char ch = (unsigned char)*s;
		if (ch < 0x20 || ch >= 0x7f)
			return 0;
	}
	return 1;
}

static int
dup_opt(char **dst, const char *src)
{
	if (src == NULL || *src == '\0') {
		*dst = NULL;
		return 0;
	}
	*dst = strdup(src);
	return *dst == NULL ? -1 : 0;
}

/* ---- TLS ---------------------------------------------------------------- */

void
wsclient_tls_reason(char *buf, size_t len, const char *what)
{
	unsigned long e = ERR_peek_last_error();
	char ebuf[256];

	if (e != 0) {
		ERR_error_string_n(e, ebuf, sizeof(ebuf));
		snprintf(buf, len, "%.150s: %.160s", what, ebuf);
	} else
		snprintf(buf, len, "%s", what);
	ERR_clear_error();
}

static SSL_CTX *
tls_context(const char *ca_file, char *err, size_t errlen)
{
	char why[320];
	SSL_CTX *ctx;

	if ((ctx = SSL_CTX_new(TLS_client_method())) == NULL) {
		wsclient_tls_reason(why, sizeof(why), "cannot create a TLS context");
		errf(err, errlen, "%s", why);
		return NULL;
	}
	/* The suites every Tether end offers (tlssuites.h). */
	if (SSL_CTX_set_min_proto_version(ctx, TLS1_2_VERSION) != 1 ||
	    SSL_CTX_set_ciphersuites(ctx, TETHER_TLS13_SUITES) != 1 ||
	    SSL_CTX_set_cipher_list(ctx, TETHER_TLS12_CIPHERS) != 1) {
		wsclient_tls_reason(why, sizeof(why), "cannot configure TLS");
		goto fail;
	}
	SSL_CTX_set_options(ctx, SSL_OP_NO_RENEGOTIATION | SSL_OP_NO_COMPRESSION);
	SSL_CTX_set_verify(ctx, SSL_VERIFY_PEER, NULL);
	if (ca_file != NULL) {
		if (SSL_CTX_load_verify_locations(ctx, ca_file, NULL) != 1) {
			char what[300];
			snprintf(what, sizeof(what), "cannot load CA file %s", ca_file);
			wsclient_tls_reason(why, sizeof(why), what);
			goto fail;
		}
	} else if (SSL_CTX_set_default_verify_paths(ctx) != 1) {
		wsclient_tls_reason(why, sizeof(why), "cannot load the system CA store");
		goto fail;
	}
	return ctx;
fail:
	errf(err, errlen, "%s", why);
	SSL_CTX_free(ctx);
	return NULL;
}

SSL_CTX *
wsclient_tls_context(const char *ca_file, char *err, size_t errlen)
{
	return tls_context(ca_file, err, errlen);
}

int
wsclient_tls_trust_more(struct ssl_ctx_st *ctx, const char *ca_file, char *err,
    size_t errlen)
{
	char what[300], why[320];

	if (SSL_CTX_load_verify_locations(ctx, ca_file, NULL) == 1)
		return 0;
	snprintf(what, sizeof(what), "cannot load CA file %s", ca_file);
	wsclient_tls_reason(why, sizeof(why), what);
	errf(err, errlen, "%s", why);
	return -1;
}

/* An SSL for one connection to host: SNI for names, and the name or
 * address the certificate must carry. */
static SSL *
tls_session_for(SSL_CTX *ctx, const char *host, int host_is_ip, char *err,
    size_t errlen)
{
	X509_VERIFY_PARAM *vp;
	char why[320];
	SSL *ssl;
	int ok;

	if ((ssl = SSL_new(ctx)) == NULL) {
		wsclient_tls_reason(why, sizeof(why), "cannot create a TLS session");
		errf(err, errlen, "%s", why);
		return NULL;
	}
	vp = SSL_get0_param(ssl);
	if (host_is_ip)
		ok = X509_VERIFY_PARAM_set1_ip_asc(vp, host) == 1;
	else {
		X509_VERIFY_PARAM_set_hostflags(vp,
		    X509_CHECK_FLAG_NO_PARTIAL_WILDCARDS);
		ok = X509_VERIFY_PARAM_set1_host(vp, host, 0) == 1 &&
		    SSL_set_tlsext_host_name(ssl, host) == 1;
	}
	if (!ok) {
		wsclient_tls_reason(why, sizeof(why), "cannot set the TLS peer name");
		errf(err, errlen, "%s", why);
		SSL_free(ssl);
		return NULL;
	}
	return ssl;
}

/* The SSL for the server itself (through a proxy's tunnel or not). */
static SSL *
tls_session(struct wsclient *c, char *err, size_t errlen)
{
	return tls_session_for(c->ssl_ctx, c->host, c->host_is_ip, err, errlen);
}

/* Is the peer of the transport now the proxy (not yet the server)? */
static int
at_proxy(const struct wsclient *c)
{
	return c->proxy != NULL && !c->via_tunnel;
}

/* One name of a certificate (subject or issuer) as RFC 2253 text with
 * every byte past ASCII escaped: it is the peer's text. */
static void
cert_name(const X509_NAME *name, char *out, size_t outlen)
{
	BIO *b = BIO_new(BIO_s_mem());
	char *p;
	long n;

	snprintf(out, outlen, "(none)");
	if (b == NULL || name == NULL ||
	    X509_NAME_print_ex(b, name, 0, XN_FLAG_RFC2253) < 0) {
		BIO_free(b);
		return;
	}
	n = BIO_get_mem_data(b, &p);
	if (n > 0)
		text_printable(out, outlen, p, (size_t)n);
	BIO_free(b);
}

/* The name a gateway's CA has (auth/ca.c's ca_root_new: "Tether CA " and
 * random hex), as cert_name writes it. */
#define GATEWAY_CA_NAME "CN=Tether CA "

/*
 * The server's certificate does not verify against the CA this client
 * trusts (for the agent: the gateway's CA, pinned at join).  Whatever
 * answered presented someone else's certificate.  When its issuer is named
 * as a gateway's CA is, the gateway's CA most likely changed while this
 * node was away (a CA rotation finished without it: docs/0033), and the
 * message says so first, with the recovery, so that a status line cut
 * short still carries them.  Otherwise a TLS-inspecting proxy or firewall
 * is the usual reason, so the message names the certificate it got, its
 * issuer, and what the operator can do about it.
 */
static void
server_verify_error(struct wsclient *c, SSL *ssl, char *buf, size_t len)
{
	STACK_OF(X509) *chain = SSL_get_peer_cert_chain(ssl);
	X509 *leaf = chain != NULL && sk_X509_num(chain) > 0 ?
	    sk_X509_value(chain, 0) : NULL;
	char subject[160], issuer[160];

	cert_name(leaf != NULL ? X509_get_subject_name(leaf) : NULL, subject,
	    sizeof(subject));
	cert_name(leaf != NULL ? X509_get_issuer_name(leaf) : NULL, issuer,
	    sizeof(issuer));
	if (strncmp(issuer, GATEWAY_CA_NAME, strlen(GATEWAY_CA_NAME)) == 0) {
		snprintf(buf, len, "the gateway's CA changed (a CA rotation "
		    "finished while this node was away?): recover with a new join "
		    "document: tether-client join --rejoin (docs/0033); TLS "
		    "certificate verify failed for %s: %s; its certificate is "
		    "issued by \"%s\", not by the CA this node trusts", c->host,
		    X509_verify_cert_error_string(SSL_get_verify_result(ssl)),
		    issuer);
		return;
	}
	snprintf(buf, len, "TLS certificate verify failed for %s: %s; it got "
	    "subject \"%s\" issued by \"%s\", which the pinned CA did not "
	    "issue: %s%s%s may be intercepting TLS. Exempt %s from TLS "
	    "inspection%s, or trust the proxy's CA deliberately "
	    "(tether-client --trust-proxy-ca FILE)", c->host,
	    X509_verify_cert_error_string(SSL_get_verify_result(ssl)), subject,
	    issuer, c->proxy != NULL ? "proxy " : "a proxy or firewall",
	    c->proxy != NULL ? c->proxy_name : "", c->proxy != NULL ? "" : " on the path",
	    c->host, c->proxy != NULL ? " at the proxy (or list it in no-proxy)" : "");
}

/* Why the transport failed, as precisely as the layers below tell us. */
static void
transport_error(struct wsclient *c, short what, char *buf, size_t len)
{
	int saved_errno = EVUTIL_SOCKET_ERROR();
	unsigned long e, last = 0;
	SSL *ssl;

	const char *peer = at_proxy(c) ? c->dial_host : c->host;
	int peer_port = at_proxy(c) ? c->dial_port : c->port;
	const char *what_peer = at_proxy(c) ? "proxy " : "";

	if (at_proxy(c) ? c->proxy_ssl_ctx != NULL : c->tls) {
		/* libevent queues OpenSSL's error codes, and also bare
		 * SSL_get_error() kinds (no library) for socket errors:
		 * those say less than errno, so skip them. */
		while ((e = bufferevent_get_openssl_error(c->bev)) != 0)
			if (ERR_GET_LIB(e) != 0)
				last = e;
		ssl = bufferevent_openssl_get_ssl(c->bev);
		if (ssl != NULL && SSL_get_verify_result(ssl) != X509_V_OK) {
			if (at_proxy(c))
				snprintf(buf, len, "TLS certificate verify failed for "
				    "proxy %s: %s", peer, X509_verify_cert_error_string(
				    SSL_get_verify_result(ssl)));
			else
				server_verify_error(c, ssl, buf, len);
			return;
		}
		if (last != 0) {
			char ebuf[256];
			ERR_error_string_n(last, ebuf, sizeof(ebuf));
			snprintf(buf, len, "TLS error with %s%.64s:%d: %.160s",
			    what_peer, peer, peer_port, ebuf);
			return;
		}
	}
	/* A refused TLS connect looks like a dirty shutdown (EOF) to
	 * bufferevent_openssl: before the upgrade, trust a telling errno. */
	if (c->state == ST_CONNECTING && saved_errno != 0 &&
	    saved_errno != EAGAIN && saved_errno != EINTR)
		what = BEV_EVENT_ERROR;
	if ((what & BEV_EVENT_EOF) || saved_errno == 0)
		snprintf(buf, len, "connection to %s%s:%d closed by the %s%s",
		    what_peer, peer, peer_port, at_proxy(c) ? "proxy" : "server",
		    c->state == ST_CONNECTING && c->tls ?
		    " during the TLS handshake" : "");
	else
		snprintf(buf, len, "%s %s%s:%d: %s", c->state == ST_CONNECTING ?
		    "cannot connect to" : "connection to", what_peer, peer, peer_port,
		    evutil_socket_error_to_string(saved_errno));
}

/* ---- random masks and the upgrade key --------------------------------- */

/* Four fresh random bytes per frame, from a pool refilled by RAND_bytes:
 * one call per 512 frames instead of one per frame (a call costs ~7,000
 * instructions for 256 bytes, mostly fixed: ~110 a frame at 64 frames a
 * refill; the agent sends one frame per /k8s request). */
static int
mask_key(struct wsclient *c, uint8_t mask[4])
{
	if (c->pool_off + 4 > sizeof(c->pool)) {
		if (RAND_bytes(c->pool, sizeof(c->pool)) != 1)
			return -1;
		c->pool_off = 0;
	}
	memcpy(mask, c->pool + c->pool_off, 4);
	c->pool_off += 4;
	return 0;
}

/* ---- sending ------------------------------------------------------------ */

/*
 * Reserves one contiguous region of len bytes at the end of the output.
 * While data is queued (or for a big message), a new chain is made big
 * enough to take the following messages too: TLS then gets long
 * contiguous runs (one SSL_write, full 16 KiB records, instead of a record
 * per message plus one for each header that spilled over).  A small
 * message on an empty buffer gets a small chain: no 256 KiB per ping.
 */
static int
reserve_output(struct wsclient *c, size_t len, struct evbuffer_iovec *v)
{
	struct evbuffer *out = bufferevent_get_output(c->bev);
	size_t queued = evbuffer_get_length(out), want = len;

	/* An emptied buffer has freed its chains: no room to count on. */
	if (queued == 0)
		c->out_room = 0;
	if (len > c->out_room && (queued > 0 || len >= OUT_BIG_MESSAGE) &&
	    len < OUT_CHUNK)
		want = OUT_CHUNK;
	if (evbuffer_reserve_space(out, (ev_ssize_t)want, v, 1) != 1 ||
	    v->iov_len < len)
		return -1;
	/* We are the only writer: what we leave unused stays at the end. */
	c->out_room = v->iov_len - len;
	return 0;
}

/*
 * Queues one frame: header and masked payload in a single contiguous
 * region of the output buffer (see reserve_output), the payload read once,
 * while masking.
 */
/* Copies a frame to p: its header, then its payload masked with mask. */
static void
mask_frame(uint8_t *p, const uint8_t *hdr, size_t hl, const struct iovec *iov,
    int iovcnt, const uint8_t mask[4])
{
	size_t phase = 0;

	memcpy(p, hdr, hl);
	p += hl;
	for (int i = 0; i < iovcnt; i++) {
		phase = ws_mask_copy(p, iov[i].iov_base, iov[i].iov_len, mask,
		    phase);
		p += iov[i].iov_len;
	}
}

static int
send_frame(struct wsclient *c, int opcode, const struct iovec *iov, int iovcnt)
{
	uint8_t hdr[WS_HEADER_MAX], mask[4], small[TLS_WRITE_NOW_MAX];
	struct evbuffer_iovec v;
	size_t plen = 0, hl;
	int r;

	if (c->bev == NULL || iovcnt < 0 || (iovcnt > 0 && iov == NULL))
		return -1;
	for (int i = 0; i < iovcnt; i++) {
		if (plen + iov[i].iov_len < plen)
			return -1;
		plen += iov[i].iov_len;
	}
	if ((opcode & WS_OP_CONTROL) && plen > 125)
		return -1;
	if (plen > SIZE_MAX - WS_HEADER_MAX)
		return -1;

	if (mask_key(c, mask) != 0)
		return -1;
	hl = ws_header_put(hdr, opcode, plen, mask);

	/* Every frame counts, the PONGs the server's pings ask for too: a
	 * server that sends without reading is dropped at the cap. */
	if (evbuffer_get_length(bufferevent_get_output(c->bev)) + hl + plen >
	    c->max_queue) {
		finish_with(c, 0, "%s does not read: output queue over %zu bytes",
		    c->host, c->max_queue);
		return -1;
	}
	/* A small frame (a ping, a pong, a tunnel's DATA of a request or an
	 * answer) with nothing queued leaves with this loop pass's send,
	 * without arming the bufferevent's write event (tls_write_now): two
	 * epoll_ctl(2) and a loop pass for every answer an agent relays.  A
	 * close frame goes through the output: its end is seen there. */
	if (opcode != WS_OP_CLOSE && hl + plen <= sizeof(small)) {
		mask_frame(small, hdr, hl, iov, iovcnt, mask);
		r = tls_write_now(c->bev, small, hl + plen);
		if (r != 0)
			return r > 0 ? 0 : -1;
	}
	if (reserve_output(c, hl + plen, &v) != 0)
		return -1;
	mask_frame(v.iov_base, hdr, hl, iov, iovcnt, mask);
	v.iov_len = hl + plen;
	return evbuffer_commit_space(bufferevent_get_output(c->bev), &v, 1);
}

static int
send_close(struct wsclient *c, uint16_t code, const char *reason)
{
	uint8_t buf[2 + CLOSE_REASON_MAX];
	struct iovec iov;
	size_t rlen = reason != NULL ? strlen(reason) : 0;

	if (rlen > CLOSE_REASON_MAX)
		rlen = CLOSE_REASON_MAX;
	buf[0] = (uint8_t)(code >> 8);
	buf[1] = (uint8_t)code;
	if (rlen > 0)
		memcpy(buf + 2, reason, rlen);
	iov.iov_base = buf;
	/* 1005 means "no code": it is never sent, so send an empty body. */
	iov.iov_len = code == 1005 ? 0 : 2 + rlen;
	return send_frame(c, WS_OP_CLOSE, &iov, 1);
}

/* Everything queued has reached the kernel: the output buffer and the
 * sealed records the batching BIO holds (tlswrite.h). */
static int
all_written(struct wsclient *c)
{
	return evbuffer_get_length(bufferevent_get_output(c->bev)) == 0 &&
	    tls_write_pending(c->bev) == 0;
}

/* Our last frame is queued: stop reading, close once it is written (or
 * after CLOSE_WAIT_MS if the peer does not read it). */
static void
flush_and_finish(struct wsclient *c)
{
	c->state = ST_FLUSHING;
	bufferevent_disable(c->bev, EV_READ);
	if (all_written(c)) {
		finish(c);
		return;
	}
	bufferevent_setwatermark(c->bev, EV_WRITE, 0, 0);
	arm_timer(c, CLOSE_WAIT_MS);
}

/* Fails the connection (RFC 6455 7.1.7): a close frame with the code, then
 * the end of the transport; on_close says why. */
static void
protocol_error(struct wsclient *c, uint16_t code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static void
protocol_error(struct wsclient *c, uint16_t code, const char *fmt, ...)
{
	char buf[REASON_MAX];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(buf, sizeof(buf), fmt, ap);
	va_end(ap);
	set_final(c, 0, "WebSocket protocol error from %s: %s", c->host, buf);
	if (c->state == ST_OPEN && send_close(c, code, buf) == 0)
		flush_and_finish(c);
	else
		finish(c);
}

/* ---- the upgrade ---------------------------------------------------------- */

static int
send_upgrade(struct wsclient *c)
{
	struct evbuffer *out = bufferevent_get_output(c->bev);
	uint8_t nonce[16];

	if (RAND_bytes(nonce, sizeof(nonce)) != 1)
		return -1;
	EVP_EncodeBlock((unsigned char *)c->key, nonce, sizeof(nonce));
	if (evbuffer_add_printf(out,
	    "GET %s HTTP/1.1\r\n"
	    "Host: %s\r\n"
	    "Upgrade: websocket\r\n"
	    "Connection: Upgrade\r\n"
	    "Sec-WebSocket-Key: %s\r\n"
	    "Sec-WebSocket-Version: 13\r\n",
	    c->resource, c->host_header, c->key) < 0)
		return -1;
	if (c->subprotocol != NULL &&
	    evbuffer_add_printf(out, "Sec-WebSocket-Protocol: %s\r\n",
	    c->subprotocol) < 0)
		return -1;
	if (c->token != NULL &&
	    evbuffer_add_printf(out, "Authorization: Bearer %s\r\n", c->token) < 0)
		return -1;
	if (c->header != NULL && evbuffer_add_printf(out, "%s\r\n", c->header) < 0)
		return -1;
	return evbuffer_add(out, "\r\n", 2);
}




/* The refusal body is complete (or all we will wait for): report it. */
static void
refused_done(struct wsclient *c)
{
	struct evbuffer *in = input_of(c);
	char reason[REASON_MAX], *body;
	size_t len = evbuffer_get_length(in);
	int complete;

	if (len > BODY_MAX)
		len = BODY_MAX;
	if (c->body_want != SIZE_MAX && len > c->body_want)
		len = c->body_want;
	if ((body = malloc(len + 1)) == NULL) {
		finish_with(c, c->http_status, "%s", c->status_line);
		return;
	}
	if (evbuffer_copyout(in, body, len) != (ev_ssize_t)len)
		len = 0;
	if (c->body_chunked)
		len = ws_dechunk(body, len, &complete);
	body[len] = '\0';
	ws_refusal_reason(body, len, c->status_line, reason, sizeof(reason));
	free(body);
	finish_with(c, c->http_status, "%s", reason);
}

/* Is a chunked body complete (its empty last chunk arrived)? */
static int
chunked_complete(struct evbuffer *in, size_t have)
{
	char *copy;
	int complete = 0;

	if ((copy = malloc(have + 1)) == NULL)
		return 1; /* report what we have */
	if (evbuffer_copyout(in, copy, have) == (ev_ssize_t)have)
		(void)ws_dechunk(copy, have, &complete);
	free(copy);
	return complete;
}

static void
read_body(struct wsclient *c)
{
	struct evbuffer *in = input_of(c);
	size_t have = evbuffer_get_length(in);

	if (have >= BODY_MAX ||
	    (c->body_want != SIZE_MAX && have >= c->body_want) ||
	    (c->body_chunked && have > 0 && chunked_complete(in, have)))
		refused_done(c);
}

/* A 101: check that it is the upgrade we asked for. */
static int
check_upgrade(struct wsclient *c, const struct ws_response_head *h)
{
	char want[WS_ACCEPT_LEN + 1];

	if (!h->upgrade_ok || !h->connection_ok) {
		finish_with(c, 0, "server %s answered 101 without "
		    "\"Upgrade: websocket\" and \"Connection: Upgrade\"", c->host);
		return -1;
	}
	if (ws_accept_key(c->key, want) != 0 || !h->have_accept ||
	    strcmp(h->accept, want) != 0) {
		finish_with(c, 0, "server %s sent a wrong Sec-WebSocket-Accept",
		    c->host);
		return -1;
	}
	if (c->subprotocol != NULL &&
	    (!h->have_protocol || strcmp(h->protocol, c->subprotocol) != 0)) {
		finish_with(c, 0, "server %s did not accept subprotocol %s",
		    c->host, c->subprotocol);
		return -1;
	}
	if (c->subprotocol == NULL && h->have_protocol) {
		finish_with(c, 0, "server %s chose a subprotocol we did not offer",
		    c->host);
		return -1;
	}
	return 0;
}

static int
open_connection(struct wsclient *c)
{
	c->state = ST_OPEN;
	evtimer_del(c->timer);
	bufferevent_setwatermark(c->bev, EV_WRITE, c->low_water, 0);
	/* From now on every read drains OpenSSL (read_cb, DEFER_READ) one
	 * turn's worth at a time, reads start small and grow with the traffic
	 * (wsturn.h), and sealed records leave in batches. */
	ws_turn_start(&c->turn, c->bev);
	tls_read_ahead(c->bev);
	tls_write_batch(c->bev);
	if (c->paused)
		bufferevent_disable(c->bev, EV_READ);
	if (c->face.h->on_open != NULL) {
		assert(!c->dead);   /* wsface.h: no callback after wsface_free */
		c->face.h->on_open(&c->face, c->face.arg);
		if (gone(c))
			return -1;
	}
	return 1;
}

/* Reads the response head.  Returns 1 if the connection is now open and
 * frames may follow, 0 otherwise (waiting for bytes, or finished). */
static int
read_head(struct wsclient *c)
{
	struct evbuffer *in = input_of(c);
	struct evbuffer_ptr end;
	struct ws_response_head h;
	size_t n;
	char *head;

	end = evbuffer_search(in, "\r\n\r\n", 4, NULL);
	if (end.pos < 0) {
		if (evbuffer_get_length(in) > HEAD_MAX)
			finish_with(c, 0, "upgrade response head from %s is "
			    "over %d bytes", c->host, HEAD_MAX);
		return 0;
	}
	n = (size_t)end.pos + 4;
	if (n > HEAD_MAX) {
		finish_with(c, 0, "upgrade response head from %s is over %d bytes",
		    c->host, HEAD_MAX);
		return 0;
	}
	if ((head = malloc(n + 1)) == NULL) {
		finish_with(c, 0, "out of memory");
		return 0;
	}
	if (evbuffer_remove(in, head, n) != (int)n) {
		free(head);
		finish_with(c, 0, "cannot read the upgrade response");
		return 0;
	}
	head[n] = '\0';
	if (ws_response_parse_head(head, &h, c->status_line, sizeof(c->status_line)) != 0) {
		free(head);
		finish_with(c, 0, "server %s sent a malformed HTTP response: %s",
		    c->host, c->status_line);
		return 0;
	}
	free(head);

	if (h.status == 101) {
		if (check_upgrade(c, &h) != 0)
			return 0;
		return open_connection(c) == 1;
	}
	c->state = ST_REFUSED;
	c->http_status = h.status;
	if (c->retry_after_ms != NULL && h.retry_after_s >= 0)
		*c->retry_after_ms = (uint32_t)h.retry_after_s * 1000;
	c->body_chunked = h.chunked;
	if (h.chunked || h.content_length < 0)
		c->body_want = SIZE_MAX; /* until EOF, at most BODY_MAX */
	else
		c->body_want = h.content_length > BODY_MAX ? BODY_MAX :
		    (size_t)h.content_length;
	read_body(c);
	return 0;
}

/* ---- through an HTTP CONNECT proxy --------------------------------------- */

static void set_io_sizes(struct bufferevent *bev);
static void on_connected(struct wsclient *c);
static void read_cb(struct bufferevent *bev, void *arg);
static void write_cb(struct bufferevent *bev, void *arg);
static void event_cb(struct bufferevent *bev, short what, void *arg);

/*
 * Sends the next CONNECT with the Proxy-Authorization value proxy_authn_next
 * gave (r, value, why: see proxyauth.h); when there is nothing more to
 * send, the proxy refused: the error quotes its status line.  can_go_on: the
 * connection can carry another request (its 407 kept it open).
 */
static void
connect_with(struct wsclient *c, int r, char *value, const char *why, int can_go_on)
{
	char *req = NULL;
	size_t len;
	int ok;

	if (r == 0 && !can_go_on)
		finish_with(c, 0, "proxy %s refused CONNECT to %s:%d: %s: it ends the "
		    "connection after its challenge (Connection: close, or no "
		    "Content-Length), and %s authentication needs it kept open",
		    c->proxy_name, c->host, c->port, c->status_line,
		    proxy_auth_names[proxy_authn_scheme(c->authn)]);
	else if (r < 0)
		finish_with(c, 0, "proxy %s: %s", c->proxy_name, why);
	else if (r > 0)
		finish_with(c, 0, "proxy %s refused CONNECT to %s:%d: %s%s%s",
		    c->proxy_name, c->host, c->port, c->status_line,
		    why[0] != '\0' ? ": " : "", why);
	else if ((req = proxy_connect_request(c->proxy, c->host, (unsigned int)c->port,
	    value, &len)) == NULL)
		finish_with(c, 0, "out of memory");
	if (value != NULL) {
		OPENSSL_cleanse(value, strlen(value));
		free(value);
	}
	if (req == NULL)
		return;
	ok = bufferevent_write(c->bev, req, len) == 0;
	OPENSSL_cleanse(req, len);
	free(req);
	if (!ok) {
		finish_with(c, 0, "cannot queue the CONNECT request");
		return;
	}
	c->state = ST_PROXY;
}

/*
 * A Negotiate step runs on a thread of its own: it may ask the KDC for a
 * ticket, a blocking exchange that must not stop the loop.  The thread
 * owns nothing of the client but the authentication (which the loop leaves
 * alone meanwhile) and says it is done through a pipe the loop watches.
 */
struct authn_job {
	struct wsclient *c;
	pthread_t thread;
	int pipe[2];
	struct event *done;
	struct proxy_answer *ans;   /* owned copy, or NULL: the first step */
	int can_go_on;
	int r;
	char *value;
	char why[300];
};

static void *
authn_job_main(void *arg)
{
	struct authn_job *j = arg;
	char byte = 1;

	j->r = proxy_authn_next(j->c->authn, j->ans, &j->value, j->why, sizeof(j->why));
	while (write(j->pipe[1], &byte, 1) < 0 && errno == EINTR)
		;
	return NULL;
}

static void
authn_job_free(struct authn_job *j)
{
	if (j->done != NULL)
		event_free(j->done);
	close(j->pipe[0]);
	close(j->pipe[1]);
	if (j->value != NULL) {
		OPENSSL_cleanse(j->value, strlen(j->value));
		free(j->value);
	}
	free(j->ans);
	free(j);
}

/* Waits for a running step (at most krb5's own timeouts) and drops it. */
static void
authn_job_end(struct wsclient *c)
{
	if (c->job == NULL)
		return;
	pthread_join(c->job->thread, NULL);
	authn_job_free(c->job);
	c->job = NULL;
}

static void
authn_job_done(evutil_socket_t fd, short what, void *arg)
{
	struct wsclient *c = arg;
	struct authn_job *j = c->job;
	char *value;

	(void)fd;
	(void)what;
	pthread_join(j->thread, NULL);
	c->job = NULL;
	value = j->value;
	j->value = NULL;
	if (c->state == ST_CLOSED) {    /* timed out or ended meanwhile */
		if (value != NULL) {
			OPENSSL_cleanse(value, strlen(value));
			free(value);
		}
	} else
		connect_with(c, j->r, value, j->why, j->can_go_on);
	authn_job_free(j);
}

static int
authn_job_start(struct wsclient *c, const struct proxy_answer *ans, int can_go_on)
{
	struct authn_job *j = calloc(1, sizeof(*j));

	if (j == NULL)
		return -1;
	j->c = c;
	j->can_go_on = can_go_on;
	j->pipe[0] = j->pipe[1] = -1;
	if ((ans != NULL && (j->ans = malloc(sizeof(*ans))) == NULL) ||
	    pipe2(j->pipe, O_CLOEXEC) != 0 ||
	    (j->done = event_new(c->base, j->pipe[0], EV_READ, authn_job_done, c)) == NULL ||
	    event_add(j->done, NULL) != 0) {
		authn_job_free(j);
		return -1;
	}
	if (ans != NULL)
		memcpy(j->ans, ans, sizeof(*ans));
	if (pthread_create(&j->thread, NULL, authn_job_main, j) != 0) {
		authn_job_free(j);
		return -1;
	}
	c->job = j;
	return 0;
}

/*
 * Asks the proxy for a tunnel to the server: the first CONNECT (ans NULL)
 * or the next one after its 407 ans, with the Proxy-Authorization the
 * configured scheme says (Negotiate's computed on a thread).
 */
static void
send_connect(struct wsclient *c, const struct proxy_answer *ans, int can_go_on)
{
	char why[300], *value = NULL;
	int r;

	if (proxy_authn_blocks(c->authn)) {
		c->state = ST_PROXY;   /* the timeout covers the step too */
		if (authn_job_start(c, ans, can_go_on) != 0)
			finish_with(c, 0, "cannot start the proxy authentication");
		return;
	}
	r = proxy_authn_next(c->authn, ans, &value, why, sizeof(why));
	connect_with(c, r, value, why, can_go_on);
}

/*
 * The proxy granted the tunnel: from here on the socket carries the
 * server's bytes.  wss:// starts TLS with the server on the same socket (an
 * http:// proxy) or inside the proxy's TLS (an https:// proxy, a filter);
 * then BEV_EVENT_CONNECTED leads to the upgrade as without a proxy.
 */
static void
enter_tunnel(struct wsclient *c)
{
	struct bufferevent *old = c->bev, *bev;
	char err[REASON_MAX];
	evutil_socket_t fd;
	SSL *ssl;

	c->via_tunnel = 1;
	c->state = ST_CONNECTING;
	if (!c->tls) {
		on_connected(c);
		return;
	}
	if ((ssl = tls_session(c, err, sizeof(err))) == NULL) {
		finish_with(c, 0, "%s", err);
		return;
	}
	if (c->proxy_ssl_ctx != NULL) {
		/* The filter owns old (BEV_OPT_CLOSE_ON_FREE) and ssl. */
		bev = bufferevent_openssl_filter_new(c->base, old, ssl,
		    BUFFEREVENT_SSL_CONNECTING, BEV_OPT_CLOSE_ON_FREE);
	} else {
		/* The socket moves to a TLS bufferevent; old lets go of it
		 * (setfd -1: freeing it then closes nothing). */
		fd = bufferevent_getfd(old);
		bufferevent_setfd(old, -1);
		bufferevent_free(old);
		bev = bufferevent_openssl_socket_new(c->base, fd, ssl,
		    BUFFEREVENT_SSL_CONNECTING, BEV_OPT_CLOSE_ON_FREE);
		if (bev == NULL)
			evutil_closesocket(fd);
	}
	c->bev = bev;
	if (bev == NULL) {
		SSL_free(ssl);
		finish_with(c, 0, "cannot start TLS through the proxy");
		return;
	}
	bufferevent_openssl_set_allow_dirty_shutdown(bev, 1);
	set_io_sizes(bev);
	bufferevent_setcb(bev, read_cb, write_cb, event_cb, c);
	if (bufferevent_enable(bev, EV_READ | EV_WRITE) != 0)
		finish_with(c, 0, "cannot enable the bufferevent");
}

/* Drops what is left of a 407's body; 1 once it is all gone. */
static int
skip_proxy_body(struct wsclient *c)
{
	struct evbuffer *in = input_of(c);
	size_t n = evbuffer_get_length(in);

	if (n > c->proxy_skip)
		n = c->proxy_skip;
	evbuffer_drain(in, n);
	c->proxy_skip -= n;
	return c->proxy_skip == 0;
}

/*
 * A 407 that the authentication may answer on the same connection: the
 * proxy keeps it open and says how long its body is.  Then the body is
 * dropped and the next CONNECT goes; otherwise send_connect reports.
 */
static void
proxy_challenged(struct wsclient *c, const struct proxy_answer *a)
{
	int can_go_on = !a->closes && !a->chunked && a->content_length >= 0 &&
	    a->content_length <= PROXY_BODY_MAX;

	if (can_go_on) {
		c->proxy_skip = (size_t)a->content_length;
		(void)skip_proxy_body(c);
	}
	send_connect(c, a, can_go_on);
}

/* Reads the proxy's answer to CONNECT: at most PROXY_HEAD_MAX bytes. */
static void
read_proxy_head(struct wsclient *c)
{
	struct evbuffer *in = input_of(c);
	struct evbuffer_ptr end;
	struct proxy_answer *a;
	char head[PROXY_HEAD_MAX + 1], why[200];
	size_t n;

	if (c->job != NULL)
		return;   /* a Negotiate step runs: the proxy has nothing to say */
	if (c->proxy_skip > 0 && !skip_proxy_body(c))
		return;
	end = evbuffer_search(in, "\r\n\r\n", 4, NULL);
	if (end.pos < 0 || (size_t)end.pos + 4 > PROXY_HEAD_MAX) {
		if (evbuffer_get_length(in) >= PROXY_HEAD_MAX || end.pos >= 0)
			finish_with(c, 0, "proxy %s: answer to CONNECT is over %d "
			    "bytes", c->proxy_name, PROXY_HEAD_MAX);
		return;
	}
	n = (size_t)end.pos + 4;
	if (evbuffer_remove(in, head, n) != (int)n || (a = malloc(sizeof(*a))) == NULL) {
		finish_with(c, 0, "cannot read the proxy's answer");
		return;
	}
	head[n] = '\0';
	if (proxy_answer_parse(head, n, proxy_authn_scheme(c->authn), a,
	    c->status_line, sizeof(c->status_line), why, sizeof(why)) != 0)
		finish_with(c, 0, "proxy %s sent a malformed answer to CONNECT: %s (%s)",
		    c->proxy_name, c->status_line, why);
	else if (a->status == 407)
		proxy_challenged(c, a);
	else if (a->status < 200 || a->status > 299)
		finish_with(c, 0, "proxy %s refused CONNECT to %s:%d: %s",
		    c->proxy_name, c->host, c->port, c->status_line);
	else if (evbuffer_get_length(in) > 0)
		/* The server speaks only after our ClientHello or upgrade. */
		finish_with(c, 0, "proxy %s sent bytes after its answer to CONNECT",
		    c->proxy_name);
	else
		enter_tunnel(c);
	OPENSSL_cleanse(a, sizeof(*a));
	free(a);
}

/* ---- receiving frames --------------------------------------------------- */

/*
 * The read high-water mark, set at every read callback (so at most one
 * read's worth of input comes in past a change).  None while the
 * connection is open, not paused, and its reads are small (wsturn.h):
 * with a mark libevent runs a callback at every change of the input, the
 * read of a message and its drain, and each one adds the read event
 * again (~530 of the agent's ~21,300 instructions per /k8s request); the
 * turns bound the input then (one pull a turn; a turn that leaves input
 * stops reading, ws_turn_end; a frame over max_message is refused).  A
 * mark otherwise: INPUT_HIGH, or the frame under way if bigger; in bulk
 * mode the OpenSSL bufferevent reserves up to it at once instead of 4 KiB
 * pieces, and before the upgrade or once closing no turn takes the input.
 * Raising and lowering a mark for a big frame is need_input's and
 * input_done's.
 */
static void
input_mark(struct wsclient *c)
{
	size_t want = 0;

	if (c->state != ST_OPEN || c->paused || c->turn.bulk)
		want = c->turn.need > INPUT_HIGH ? c->turn.need : INPUT_HIGH;
	if ((want == 0) == (c->input_high == 0))
		return;
	c->input_high = want;
	bufferevent_setwatermark(c->bev, EV_READ, 0, want);
}

/*
 * A frame of `total` bytes is not all in yet.  With reading suspended at
 * the high-water mark, a frame bigger than the mark would never complete:
 * raise the mark to fit it (max_message bounds it), and lower it again
 * once that frame is consumed (input_done).  Without a mark nothing
 * stops reading.
 */
static void
need_input(struct wsclient *c, size_t total)
{
	if (c->input_high == 0 || total <= c->input_high)
		return;
	c->input_high = total;
	bufferevent_setwatermark(c->bev, EV_READ, 0, total);
}

static void
input_done(struct wsclient *c)
{
	if (c->input_high <= INPUT_HIGH || gone(c))
		return;
	c->input_high = INPUT_HIGH;
	bufferevent_setwatermark(c->bev, EV_READ, 0, INPUT_HIGH);
}

static int
deliver(struct wsclient *c, const uint8_t *data, size_t len, int opcode)
{
	if (c->state != ST_OPEN || c->face.h->on_message == NULL)
		return 0; /* closing: the caller asked for no more */
	assert(!c->dead);   /* wsface.h: no callback after wsface_free */
	c->face.h->on_message(&c->face, data, len, opcode == WS_OP_BINARY,
	    c->face.arg);
	return gone(c) ? -1 : 0;
}

/* One frame of a fragmented message: append it, deliver at the end. */
static int
fragment(struct wsclient *c, const struct ws_frame_header *h, size_t hl)
{
	struct evbuffer *in = input_of(c);
	size_t plen = (size_t)h->payload_len, need = c->frag_len + plen;
	uint8_t *msg;
	size_t len;
	int opcode, r;

	if (h->opcode != WS_OP_CONT)
		c->frag_opcode = h->opcode;
	if (need > c->frag_cap) {
		size_t cap = c->frag_cap < 4096 ? 4096 : c->frag_cap;
		uint8_t *p;

		while (cap < need)
			cap = cap > c->max_message / 2 ? c->max_message : cap * 2;
		if ((p = realloc(c->frag, cap)) == NULL) {
			protocol_error(c, 1009, "out of memory for a %zu-byte message",
			    need);
			return -1;
		}
		c->frag = p;
		c->frag_cap = cap;
	}
	evbuffer_drain(in, hl);
	if (plen > 0 && evbuffer_remove(in, c->frag + c->frag_len, plen) !=
	    (int)plen) {
		protocol_error(c, 1011, "cannot read a frame from the buffer");
		return -1;
	}
	c->frag_len = need;
	if (!h->fin)
		return 1;

	/* Hand the buffer over before the callback: it may free c. */
	msg = c->frag;
	len = c->frag_len;
	opcode = c->frag_opcode;
	c->frag = NULL;
	c->frag_len = c->frag_cap = 0;
	c->frag_opcode = 0;
	r = deliver(c, msg, len, opcode);
	free(msg);
	return r < 0 ? -1 : 1;
}

static int
control_frame(struct wsclient *c, const struct ws_frame_header *h, size_t hl)
{
	struct evbuffer *in = input_of(c);
	uint8_t payload[125];
	size_t plen = (size_t)h->payload_len;
	struct iovec iov;
	uint16_t code = 1005;
	char text[CLOSE_REASON_MAX + 1];

	evbuffer_drain(in, hl);
	if (plen > 0 && evbuffer_remove(in, payload, plen) != (int)plen) {
		protocol_error(c, 1011, "cannot read a frame from the buffer");
		return -1;
	}
	switch (h->opcode) {
	case WS_OP_PING:
		if (c->state != ST_OPEN)
			return 1; /* no frames after our close */
		iov.iov_base = payload;
		iov.iov_len = plen;
		if (send_frame(c, WS_OP_PONG, &iov, 1) != 0) {
			protocol_error(c, 1011, "cannot queue a pong");
			return -1;
		}
		if (c->face.h->on_ping != NULL)
			c->face.h->on_ping(&c->face, c->face.arg);
		return 1;
	case WS_OP_PONG:
		return 1; /* we send no pings: nothing to match */
	case WS_OP_CLOSE:
		break;
	default:
		return 1;
	}

	if (plen == 1) {
		protocol_error(c, 1002, "close frame with a 1-byte body");
		return -1;
	}
	text[0] = '\0';
	if (plen >= 2) {
		code = (uint16_t)(payload[0] << 8 | payload[1]);
		text_printable(text, sizeof(text), (const char *)payload + 2, plen - 2);
	}
	if (text[0] != '\0')
		set_final(c, 101, "%s", text);
	else
		set_final(c, 101, "closed by the server (code %u)", code);

	if (c->state == ST_CLOSING) {
		finish(c); /* the answer to our close: done */
		return -1;
	}
	/* Echo the close (same code), then hang up once it is written. */
	if (send_close(c, code, NULL) != 0) {
		finish(c);
		return -1;
	}
	flush_and_finish(c);
	return -1;
}

/* Processes one frame if it is all there.  Returns 1 if one was consumed,
 * 0 if more bytes are needed, -1 if processing must stop. */
static int
read_frame(struct wsclient *c)
{
	struct evbuffer *in = input_of(c);
	size_t avail = evbuffer_get_length(in), n, total, sofar;
	struct ws_frame_header h;
	char err[160];
	uint8_t *p;
	int hl, r;

	if (avail < 2)
		return 0;
	n = avail < WS_HEADER_MAX ? avail : WS_HEADER_MAX;
	if ((p = evbuffer_pullup(in, (ev_ssize_t)n)) == NULL) {
		protocol_error(c, 1011, "out of memory");
		return -1;
	}
	hl = ws_parse_header(p, n, 0, &h, err, sizeof(err));
	if (hl < 0) {
		protocol_error(c, 1002, "%s", err);
		return -1;
	}
	if (hl == 0)
		return 0;

	if (!(h.opcode & WS_OP_CONTROL)) {
		if (h.opcode == WS_OP_CONT && c->frag_opcode == 0) {
			protocol_error(c, 1002, "continuation frame with no "
			    "message to continue");
			return -1;
		}
		if (h.opcode != WS_OP_CONT && c->frag_opcode != 0) {
			protocol_error(c, 1002, "new message inside a "
			    "fragmented one");
			return -1;
		}
		sofar = h.opcode == WS_OP_CONT ? c->frag_len : 0;
		if (h.payload_len > c->max_message - sofar) {
			protocol_error(c, 1009, "message over %zu bytes",
			    c->max_message);
			return -1;
		}
	}
	total = (size_t)hl + (size_t)h.payload_len;
	if (avail < total) {
		need_input(c, total);
		c->turn.need = total;  /* the next pull reads at least that far */
		return 0;
	}
	c->turn.need = 0;
	if (!(h.opcode & WS_OP_CONTROL))
		c->turn.data_in += (size_t)h.payload_len;

	if (h.opcode & WS_OP_CONTROL)
		return control_frame(c, &h, (size_t)hl);
	if (h.opcode == WS_OP_CONT || !h.fin)
		return fragment(c, &h, (size_t)hl);

	/* A whole message in one frame: no copy unless the buffer must
	 * make it contiguous. */
	if ((p = evbuffer_pullup(in, (ev_ssize_t)total)) == NULL) {
		protocol_error(c, 1009, "out of memory for a %zu-byte message",
		    total);
		return -1;
	}
	c->delivering = total;
	r = deliver(c, p + hl, (size_t)h.payload_len, h.opcode);
	c->delivering = 0;     /* c's memory outlives a free (destroy) */
	if (r < 0)
		return -1;
	evbuffer_drain(in, total);
	return 1;
}

/* Whether c may parse frames and read more now: open and not paused, or
 * closing (waiting for the server's close frame). */
static int
frames_go_on(const struct wsclient *c)
{
	return !gone(c) && (c->state == ST_CLOSING ||
	    (c->state == ST_OPEN && !c->paused));
}

/* c's turn is over with input left (ws_turn_end stopped its reading): the
 * rest is read from the deferred event armed as a 0 ms timer, which
 * libevent runs once it has polled for I/O and served every connection
 * that became ready meanwhile: a flooding server gets a turn like every
 * other connection on the loop, not the loop.  (Made active by defer()
 * meanwhile, the event serves c too, sooner.) */
static void
yield(struct wsclient *c)
{
	static const struct timeval now = { 0, 0 };

	c->deferred |= DEFER_READ;
	evtimer_add(c->defer, &now);
}

/* One turn of frames: at most WS_FRAMES_PER_TURN, then the rest waits
 * for c's next turn. */
static void
read_frames(struct wsclient *c)
{
	unsigned frames = 0;
	int full;

	while (frames_go_on(c) && frames < WS_FRAMES_PER_TURN) {
		if (read_frame(c) <= 0)
			break;
		input_done(c);
		frames++;
	}
	if (gone(c))
		return;
	full = frames == WS_FRAMES_PER_TURN && evbuffer_get_length(input_of(c)) > 0;
	if (c->eof) {
		/* Nothing more to read: the turns go on until the input is
		 * used up, then handle_eof reports. */
		if (full && frames_go_on(c))
			yield(c);
		return;
	}
	if (ws_turn_end(&c->turn, c->bev, full, frames_go_on(c)))
		yield(c);
}

static void
process_input(struct wsclient *c)
{
	while (!gone(c)) {
		switch (c->state) {
		case ST_PROXY:
			read_proxy_head(c);
			return;
		case ST_UPGRADING:
			if (read_head(c) != 1)
				return;
			continue;
		case ST_REFUSED:
			read_body(c);
			return;
		case ST_OPEN:
		case ST_CLOSING:
			read_frames(c);
			return;
		default:
			return;
		}
	}
}

/* The transport ended: whatever arrived before the end still counts (a
 * server's last frames, a refusal body), then report. */
static void
handle_eof(struct wsclient *c)
{
	process_input(c);
	if (gone(c) || (c->deferred & DEFER_READ))
		return;     /* its next turn (yield) comes back here */
	switch (c->state) {
	case ST_OPEN:
		if (c->paused && evbuffer_get_length(input_of(c)) > 0)
			return; /* pause_reading(c, 0) comes back here */
		finish_with(c, 0, "%s without a close frame", c->eof_reason);
		break;
	case ST_UPGRADING:
		finish_with(c, 0, "%s during the WebSocket upgrade", c->eof_reason);
		break;
	case ST_PROXY:
		finish_with(c, 0, "%s before answering CONNECT", c->eof_reason);
		break;
	case ST_REFUSED:
		refused_done(c);
		break;
	case ST_CLOSING:
	case ST_FLUSHING:
		finish(c);
		break;
	default:
		finish_with(c, 0, "%s", c->eof_reason);
		break;
	}
}

/* ---- libevent callbacks ------------------------------------------------- */

static void
on_connected(struct wsclient *c)
{
	int one = 1;
	evutil_socket_t fd = bufferevent_getfd(c->bev);

	/* Small control frames must not wait for Nagle and the peer's
	 * delayed ACK (~40 ms each).  A failure only costs latency. */
	if (fd >= 0)
		(void)setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
	if (send_upgrade(c) != 0) {
		finish_with(c, 0, "cannot queue the upgrade request");
		return;
	}
	c->state = ST_UPGRADING;
}

/* Input arrived: decrypted TLS records (bufferevent_openssl, or
 * tls_read_ahead's read, calls back only once a record is whole and
 * authenticated), or bytes read off a plain socket.  The time is noted
 * for the owner's keepalive (wsface_heard_ms): one clock read per
 * callback, nothing per byte.  Not libevent's cached time: it is the wall
 * clock (its monotonic time plus an offset it refreshes), which a step
 * would move against runtime_monotonic_ms. */
static void
read_cb(struct bufferevent *bev, void *arg)
{
	struct wsclient *c = arg;

	c->heard_ms = runtime_monotonic_ms();
	if (frames_go_on(c)) {
		ws_turn_read(&c->turn, bev);
		/* Take the records ready now, not one per loop iteration. */
		if (!c->turn.yielded)
			ws_turn_pull(&c->turn, bev, c->max_message);
	}
	input_mark(c);
	process_input(c);
}

static void
write_cb(struct bufferevent *bev, void *arg)
{
	struct wsclient *c = arg;

	if (c->state == ST_FLUSHING) {
		if (all_written(c))
			finish(c);
	} else if (c->state == ST_OPEN && c->face.h->on_drain != NULL) {
		assert(!c->dead);   /* wsface.h: no callback after wsface_free */
		c->face.h->on_drain(&c->face, c->face.arg);
	}
}

static void
event_cb(struct bufferevent *bev, short what, void *arg)
{
	struct wsclient *c = arg;
	char why[REASON_MAX];

	if (what & BEV_EVENT_CONNECTED) {
		if (c->state == ST_CONNECTING && at_proxy(c))
			send_connect(c, NULL, 1);
		else if (c->state == ST_CONNECTING)
			on_connected(c);
	} else if (what & (BEV_EVENT_EOF | BEV_EVENT_ERROR)) {
		transport_error(c, what, why, sizeof(why));
		if (c->state == ST_CONNECTING)
			finish_with(c, 0, "%s", why);
		else if (!c->eof) {
			/* With TLS, data read in the same pass may reach the
			 * input buffer only after this callback: look at it
			 * from the loop, before reporting. */
			c->eof = 1;
			snprintf(c->eof_reason, sizeof(c->eof_reason), "%s", why);
			defer(c, DEFER_EOF);
		}
	}
}

static void
timer_cb(evutil_socket_t fd, short what, void *arg)
{
	struct wsclient *c = arg;

	switch (c->state) {
	case ST_CONNECTING:
		finish_with(c, 0, "timed out after %u ms connecting to %s:%d%s%s",
		    c->timeout_ms, c->host, c->port, c->proxy != NULL ? " through proxy " : "",
		    c->proxy != NULL ? c->proxy_name : "");
		break;
	case ST_PROXY:
		finish_with(c, 0, "timed out after %u ms waiting for proxy %s to "
		    "answer CONNECT", c->timeout_ms, c->proxy_name);
		break;
	case ST_UPGRADING:
		finish_with(c, 0, "timed out after %u ms waiting for the "
		    "WebSocket upgrade from %s", c->timeout_ms, c->host);
		break;
	case ST_REFUSED:
		refused_done(c);
		break;
	case ST_CLOSING:
	case ST_FLUSHING:
		finish(c);
		break;
	default:
		break;
	}
}

static void
defer_cb(evutil_socket_t fd, short what, void *arg)
{
	struct wsclient *c = arg;
	unsigned todo = c->deferred;

	c->deferred = 0;
	if (c->dead) {
		/* No callbacks after wsface_free; memory goes once nothing
		 * (a lookup being cancelled) still refers to it: lookup_done
		 * asks again. */
		if ((todo & DEFER_FREE) && c->lookup == NULL)
			destroy(c);
		return;
	}
	if (todo & DEFER_CLOSE) {
		/* wsface.h: on_close exactly once (finish() asks once), and
		 * the face is freed when it returns. */
		assert(!c->close_reported);
		c->close_reported = 1;
		if (c->face.h->on_close != NULL)
			c->face.h->on_close(&c->face, c->final_status,
			    c->final_reason, c->face.arg);
		release(c);
	} else if (!gone(c) && (todo & (DEFER_READ | DEFER_EOF))) {
		if (c->eof)
			handle_eof(c);
		else {
			/* Records OpenSSL read ahead get no read event. */
			if (frames_go_on(c))
				ws_turn_pull(&c->turn, c->bev, c->max_message);
			process_input(c);
		}
	}
}

/* ---- the API ------------------------------------------------------------ */

static void
connect_to(struct wsclient *c, const struct sockaddr *sa, socklen_t salen)
{
	/* A failure may be reported through event_cb inside this call, or
	 * here: either way finish() defers on_close to the loop. */
	if (bufferevent_socket_connect(c->bev, (struct sockaddr *)sa,
	    (int)salen) != 0 && c->state == ST_CONNECTING)
		finish_with(c, 0, "cannot connect to %s%s:%d: %s",
		    at_proxy(c) ? "proxy " : "", c->dial_host, c->dial_port,
		    evutil_socket_error_to_string(EVUTIL_SOCKET_ERROR()));
}

/* The name lookup ended: connect to the first address it gave. */
static void
lookup_done(int result, struct evutil_addrinfo *ai, void *arg)
{
	struct wsclient *c = arg;

	c->lookup = NULL;
	if (c->dead) {
		/* Freed meanwhile: finish that from the loop, since the
		 * evdns_base must not be freed inside its own callback. */
		if (ai != NULL)
			evutil_freeaddrinfo(ai);
		defer(c, DEFER_FREE);
		return;
	}
	if (result == EVUTIL_EAI_CANCEL || c->state != ST_CONNECTING)
		; /* finish() cancelled it: on_close is already on its way */
	else if (result != 0 || ai == NULL)
		finish_with(c, 0, "cannot resolve %s%s: %s", at_proxy(c) ? "proxy " : "",
		    c->dial_host,
		    result != 0 ? evutil_gai_strerror(result) : "no address");
	else
		connect_to(c, ai->ai_addr, (socklen_t)ai->ai_addrlen);
	if (ai != NULL)
		evutil_freeaddrinfo(ai);
}

/* Starts TCP (and TLS): by address for literals, through evdns for names. */
static int
start_connect(struct wsclient *c, char *err, size_t errlen)
{
	struct evdns_getaddrinfo_request *req;
	struct evutil_addrinfo hints;
	char port[8];

	if (c->dial_is_ip) {
		struct sockaddr_storage ss;
		struct sockaddr_in *sin = (struct sockaddr_in *)&ss;
		struct sockaddr_in6 *sin6 = (struct sockaddr_in6 *)&ss;
		socklen_t sl;

		memset(&ss, 0, sizeof(ss));
		if (inet_pton(AF_INET, c->dial_host, &sin->sin_addr) == 1) {
			sin->sin_family = AF_INET;
			sin->sin_port = htons((uint16_t)c->dial_port);
			sl = sizeof(*sin);
		} else {
			if (inet_pton(AF_INET6, c->dial_host, &sin6->sin6_addr) != 1) {
				errf(err, errlen, "bad address %s", c->dial_host);
				return -1;
			}
			sin6->sin6_family = AF_INET6;
			sin6->sin6_port = htons((uint16_t)c->dial_port);
			sl = sizeof(*sin6);
		}
		connect_to(c, (struct sockaddr *)&ss, sl);
		return 0;
	}
	c->dns = evdns_base_new(c->base, EVDNS_BASE_INITIALIZE_NAMESERVERS |
	    EVDNS_BASE_DISABLE_WHEN_INACTIVE);
	if (c->dns == NULL) {
		errf(err, errlen, "cannot set up DNS resolution (resolv.conf?)");
		return -1;
	}
	memset(&hints, 0, sizeof(hints));
	hints.ai_family = AF_UNSPEC;
	hints.ai_socktype = SOCK_STREAM;
	hints.ai_protocol = IPPROTO_TCP;
	hints.ai_flags = EVUTIL_AI_ADDRCONFIG;
	snprintf(port, sizeof(port), "%d", c->dial_port);
	/* NULL if lookup_done already ran inside this call (a name from
	 * /etc/hosts, or an immediate failure); else it is in flight. */
	req = evdns_getaddrinfo(c->dns, c->dial_host, port, &hints, lookup_done, c);
	c->lookup = req;
	return 0;
}

/* libevent moves at most 16 KiB per socket per loop iteration by default:
 * one tunnel carries many streams' bulk data, so let it move up to 1 MiB. */
static void
set_io_sizes(struct bufferevent *bev)
{
	bufferevent_set_max_single_read(bev, 1 << 20);
	bufferevent_set_max_single_write(bev, 1 << 20);
	tls_tune_input(bev, INPUT_HIGH);
}

static struct bufferevent *
make_transport(struct wsclient *c, char *err, size_t errlen)
{
	struct bufferevent *bev;
	SSL *ssl;

	if (c->proxy != NULL && c->proxy_ssl_ctx != NULL) {
		ssl = tls_session_for(c->proxy_ssl_ctx, c->dial_host, c->dial_is_ip,
		    err, errlen);
		if (ssl == NULL)
			return NULL;
		bev = bufferevent_openssl_socket_new(c->base, -1, ssl,
		    BUFFEREVENT_SSL_CONNECTING, BEV_OPT_CLOSE_ON_FREE);
		if (bev == NULL)
			errf(err, errlen, "cannot create a TLS bufferevent");
		return bev;
	}
	if (!c->tls || c->proxy != NULL) {
		bev = bufferevent_socket_new(c->base, -1, BEV_OPT_CLOSE_ON_FREE);
		if (bev == NULL)
			errf(err, errlen, "cannot create a bufferevent");
		else
			set_io_sizes(bev);
		return bev;
	}
	if ((ssl = tls_session(c, err, errlen)) == NULL)
		return NULL;
	/* With CLOSE_ON_FREE the bufferevent owns ssl from here on. */
	bev = bufferevent_openssl_socket_new(c->base, -1, ssl,
	    BUFFEREVENT_SSL_CONNECTING, BEV_OPT_CLOSE_ON_FREE);
	if (bev == NULL) {
		errf(err, errlen, "cannot create a TLS bufferevent");
		return NULL;
	}
	/* A server that drops TCP without close_notify has still ended the
	 * stream; the WebSocket close handshake says whether cleanly. */
	bufferevent_openssl_set_allow_dirty_shutdown(bev, 1);
	set_io_sizes(bev);
	return bev;
}

/* Parses the proxy URL; TCP (and maybe TLS) will go to the proxy. */
static int
set_proxy(struct wsclient *c, const struct wsclient_config *cfg, char *err,
    size_t errlen)
{
	char why[300];

	if ((c->proxy = malloc(sizeof(*c->proxy))) == NULL) {
		errf(err, errlen, "out of memory");
		return -1;
	}
	if (url_parse(cfg->proxy_url, proxy_url_schemes, c->proxy, why, sizeof(why)) != 0) {
		errf(err, errlen, "proxy URL: %s", why);
		return -1;
	}
	url_display(c->proxy, c->proxy_name, sizeof(c->proxy_name));
	c->authn = proxy_authn_new((enum proxy_auth)cfg->proxy_auth,
	    cfg->proxy_user != NULL ? cfg->proxy_user : c->proxy->user,
	    cfg->proxy_password != NULL ? cfg->proxy_password : c->proxy->password,
	    c->proxy->host, why, sizeof(why));
	if (c->authn == NULL) {
		errf(err, errlen, "proxy: %s", why);
		return -1;
	}
	if (strcmp(c->proxy->scheme, "https") == 0 &&
	    (c->proxy_ssl_ctx = tls_context(cfg->proxy_ca_file, err, errlen)) == NULL)
		return -1;
	c->dial_host = c->proxy->host;
	c->dial_port = (int)c->proxy->port;
	c->dial_is_ip = c->proxy->host_is_ip;
	return 0;
}

struct wsface *
wsclient_connect(struct event_base *base, const struct wsclient_config *cfg,
    const struct wsface_handlers *h, void *arg, char *err, size_t errlen)
{
	struct wsclient *c;

	errf(err, errlen, "%s", "");
	if (base == NULL || cfg == NULL || cfg->url == NULL || h == NULL) {
		errf(err, errlen, "wsclient_connect: missing argument");
		return NULL;
	}
	if ((c = calloc(1, sizeof(*c))) == NULL) {
		errf(err, errlen, "out of memory");
		return NULL;
	}
	c->base = base;
	c->face.ops = &client_ops;
	c->face.h = h;
	c->face.arg = arg;
	c->state = ST_CONNECTING;
	c->pool_off = sizeof(c->pool); /* empty: filled on first use */
	c->input_high = INPUT_HIGH;   /* set_io_sizes sets it on the bufferevent */
	c->max_message = cfg->max_message ? cfg->max_message : DEFAULT_MAX_MESSAGE;
	c->max_queue = cfg->max_queue ? cfg->max_queue : DEFAULT_MAX_QUEUE;
	c->retry_after_ms = cfg->retry_after_ms;
	c->low_water = cfg->low_water;
	c->timeout_ms = cfg->connect_timeout_ms ? cfg->connect_timeout_ms :
	    DEFAULT_TIMEOUT_MS;

	if (parse_url(c, cfg->url, err, errlen) != 0)
		goto fail;
	if ((cfg->subprotocol != NULL && !header_value_ok(cfg->subprotocol)) ||
	    (cfg->bearer_token != NULL && !header_value_ok(cfg->bearer_token)) ||
	    (cfg->header != NULL && (!header_value_ok(cfg->header) ||
	    strchr(cfg->header, ':') == NULL))) {
		errf(err, errlen, "subprotocol or token has a character that "
		    "cannot go in an HTTP header");
		goto fail;
	}
	if (dup_opt(&c->subprotocol, cfg->subprotocol) != 0 ||
	    dup_opt(&c->token, cfg->bearer_token) != 0 ||
	    dup_opt(&c->header, cfg->header) != 0) {
		errf(err, errlen, "out of memory");
		goto fail;
	}
	if (c->tls && cfg->tls_ctx != NULL) {
		if (SSL_CTX_up_ref(cfg->tls_ctx) != 1) {
			errf(err, errlen, "cannot share the TLS context");
			goto fail;
		}
		c->ssl_ctx = cfg->tls_ctx;
	} else if (c->tls && (c->ssl_ctx = tls_context(cfg->ca_file, err, errlen)) == NULL)
		goto fail;
	c->dial_host = c->host;
	c->dial_port = c->port;
	c->dial_is_ip = c->host_is_ip;
	if (cfg->proxy_url != NULL && set_proxy(c, cfg, err, errlen) != 0)
		goto fail;
	c->timer = evtimer_new(base, timer_cb, c);
	c->defer = event_new(base, -1, 0, defer_cb, c);
	if (c->timer == NULL || c->defer == NULL) {
		errf(err, errlen, "cannot create events");
		goto fail;
	}
	if ((c->bev = make_transport(c, err, errlen)) == NULL)
		goto fail;
	bufferevent_setcb(c->bev, read_cb, write_cb, event_cb, c);
	if (bufferevent_enable(c->bev, EV_READ | EV_WRITE) != 0) {
		errf(err, errlen, "cannot enable the bufferevent");
		goto fail;
	}
	arm_timer(c, c->timeout_ms);
	if (start_connect(c, err, errlen) != 0)
		goto fail;
	return &c->face;
fail:
	destroy(c);
	return NULL;
}

/* ---- the face's operations (wsface.h) ---- */

static int
client_sendv(struct wsface *f, const struct iovec *iov, int iovcnt, int binary)
{
	struct wsclient *c = of_face(f);

	if (c == NULL || c->dead || c->state != ST_OPEN)
		return -1;
	return send_frame(c, binary ? WS_OP_BINARY : WS_OP_TEXT, iov, iovcnt) == 0 ?
	    0 : -1;
}

/* Masks the first n bytes of src into the output after prefix: as many
 * pieces as src has chains, read once. */
static int
client_send_buffer(struct wsface *f, const uint8_t *prefix, size_t plen,
    struct evbuffer *src, size_t n)
{
	struct wsclient *c = of_face(f);
	struct evbuffer_iovec v[SEND_PIECES_MAX];
	struct iovec iov[SEND_PIECES_MAX + 1];
	size_t before = 0;
	int nv, r;

	if (c->dead || c->state != ST_OPEN || n > evbuffer_get_length(src))
		return -1;
	iov[0].iov_base = (void *)(uintptr_t)prefix;
	iov[0].iov_len = plen;
	nv = evbuffer_peek(src, (ev_ssize_t)n, NULL, v, SEND_PIECES_MAX);
	if (nv > SEND_PIECES_MAX) {
		/* Rare (mux.c sends a chain at most per frame): one piece. */
		v[0].iov_base = evbuffer_pullup(src, (ev_ssize_t)n);
		if (v[0].iov_base == NULL)
			return -1;
		v[0].iov_len = n;
		nv = 1;
	}
	/* The last piece may run past n. */
	for (int i = 0; i < nv; i++) {
		iov[i + 1].iov_base = v[i].iov_base;
		iov[i + 1].iov_len = i + 1 < nv ? v[i].iov_len : n - before;
		before += v[i].iov_len;
	}
	r = send_frame(c, WS_OP_BINARY, iov, nv + 1) == 0 ? 0 : -1;
	if (r == 0)
		evbuffer_drain(src, n);
	return r;
}

static size_t
client_pending(const struct wsface *f)
{
	const struct wsclient *c = of_face_const(f);

	if (c == NULL || c->bev == NULL)
		return 0;
	return evbuffer_get_length(bufferevent_get_output(c->bev));
}

static void
client_pause_reading(struct wsface *f, int paused)
{
	struct wsclient *c = of_face(f);

	if (c == NULL || c->dead)
		return;
	paused = paused != 0;
	if (c->paused == paused)
		return;
	c->paused = paused;
	/* Before the upgrade completes the flag only takes effect at
	 * on_open; after a close frame reading is ours to control. */
	if (c->bev == NULL || c->state != ST_OPEN)
		return;
	if (paused) {
		bufferevent_disable(c->bev, EV_READ);
		return;
	}
	if (!c->eof && !c->turn.yielded)   /* else its turn enables it */
		bufferevent_enable(c->bev, EV_READ);
	/* Messages already buffered get no read event of their own. */
	defer(c, DEFER_READ);
}

static void
client_close(struct wsface *f, uint16_t code, const char *reason)
{
	struct wsclient *c = of_face(f);

	if (c == NULL || c->dead)
		return;
	switch (c->state) {
	case ST_OPEN:
		break;
	case ST_CLOSING:
	case ST_FLUSHING:
	case ST_CLOSED:
		return; /* already on its way */
	default:
		finish_with(c, 0, "closed before the WebSocket was open%s%s",
		    reason != NULL && *reason != '\0' ? ": " : "",
		    reason != NULL ? reason : "");
		return;
	}
	set_final(c, 101, "%s", reason != NULL && *reason != '\0' ? reason :
	    "closed by the client");
	if (send_close(c, code, reason) != 0) {
		finish(c);
		return;
	}
	/* Wait for the server's close (discarding any data before it). */
	c->state = ST_CLOSING;
	if (c->paused) {
		c->paused = 0;
		if (!c->eof)
			bufferevent_enable(c->bev, EV_READ);
		defer(c, DEFER_READ);
	}
	arm_timer(c, CLOSE_WAIT_MS);
}

static void
client_free(struct wsface *f)
{
	struct wsclient *c = of_face(f);

	/* wsface.h: once, never after on_close (which releases it). */
	assert(!c->dead && !c->close_reported);
	release(c);
}

static void
client_set_low_water(struct wsface *f, size_t bytes)
{
	struct wsclient *c = of_face(f);

	c->low_water = bytes;
	if (c->state == ST_OPEN && c->bev != NULL)
		bufferevent_setwatermark(c->bev, EV_WRITE, bytes, 0);
}

static void
client_set_max_message(struct wsface *f, size_t bytes)
{
	of_face(f)->max_message = bytes;
}

static void
client_set_max_queue(struct wsface *f, size_t bytes)
{
	of_face(f)->max_queue = bytes;
}

static const char *
client_peer(const struct wsface *f)
{
	return of_face_const(f)->host;
}

/* wsface_input_pending: input the owner has not been given yet, while
 * open: a turn or a resume to come (DEFER_READ: messages left in the
 * input, records OpenSSL read ahead), bytes in the input buffer past the
 * message in on_message now (a frame not whole yet, messages held while
 * paused or read with it), in TLS, or in the
 * underlying socket's bufferevent (through a proxy), or the socket
 * readable (one poll(), only when the rest is empty). */
static int
client_input_pending(const struct wsface *f)
{
	const struct wsclient *c = of_face_const(f);
	struct bufferevent *under;
	struct pollfd p = { .fd = -1, .events = POLLIN };

	if (gone(c) || c->state != ST_OPEN)
		return 0;
	if ((c->deferred & DEFER_READ) ||
	    evbuffer_get_length(bufferevent_get_input(c->bev)) > c->delivering ||
	    tls_read_held(c->bev))
		return 1;
	under = bufferevent_get_underlying(c->bev);
	if (under != NULL && evbuffer_get_length(bufferevent_get_input(under)) > 0)
		return 1;
	p.fd = bufferevent_getfd(under != NULL ? under : c->bev);
	return p.fd >= 0 && poll(&p, 1, 0) > 0 && (p.revents & POLLIN);
}

/* wsface_heard_ms: the last read callback's time (read_cb). */
static int64_t
client_heard_ms(const struct wsface *f)
{
	return of_face_const(f)->heard_ms;
}

static const struct wsface_ops client_ops = {
	.sendv = client_sendv,
	.send_buffer = client_send_buffer,
	.pending = client_pending,
	.pause_reading = client_pause_reading,
	.set_low_water = client_set_low_water,
	.set_max_message = client_set_max_message,
	.set_max_queue = client_set_max_queue,
	.close = client_close,
	.free = client_free,
	.peer = client_peer,
	.input_pending = client_input_pending,
	.heard_ms = client_heard_ms,
};
