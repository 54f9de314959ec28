/*
 * fetch.c: a blocking HTTPS GET for `tether-client join` (see fetch.h).
 *
 * The layers, each failing with its own message: the lookup (libevent's
 * resolver on a private loop, as the tunnel resolves), TCP to each address
 * in turn, the proxy when NO_PROXY does not exempt the host (TLS to it for
 * an https:// proxy, then CONNECT with common/proxy.c's request), TLS to
 * the server (pinned to one CA, or unverified when the caller checks the
 * answer otherwise), one GET with Connection: close, and the answer read
 * until common/getanswer.c says it is complete.  Every read and write
 * waits at most what is left of the deadline (SO_RCVTIMEO, SO_SNDTIMEO).
 * Each layer names itself in the result (fetch_result's step) as it
 * starts, and a failure that says more (a certificate that does not
 * verify, a proxy's status, a malformed answer) names that instead, so
 * that fetch_retryable can tell a fault of the way from a refusal.
 */
#include "fetch.h"
#include "wsclient.h"

#include <arpa/inet.h>
#include <errno.h>
#include <stdarg.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <event2/dns.h>
#include <event2/event.h>
#include <event2/util.h>
#include <openssl/bio.h>
#include <openssl/err.h>
#include <openssl/pem.h>
#include <openssl/ssl.h>
#include <openssl/x509v3.h>

#include "getanswer.h"
#include "httphead.h"
#include "proxy.h"
#include "proxyauth.h"
#include "url.h"
#include "wshead.h"
#include "wsclient.h"


struct fetch {
	const struct fetch_opts *o;
	struct timespec deadline;
	struct url server;
	struct url *proxy;          /* NULL: straight to the server */
	char proxy_name[300];       /* scheme://host:port, no credentials */
	int fd;
	BIO *transport;             /* the socket, or TLS to the proxy */
	SSL_CTX *ctx;
	SSL *ssl;
	char *err;
	size_t errlen;
	struct fetch_result *res;   /* the step under way, then where it failed */
};

static int
fail(struct fetch *f, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

static int
fail(struct fetch *f, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(f->err, f->errlen, fmt, ap);
	va_end(ap);
	return -1;
}

/* fail() where the failure says more than the step under way. */
static int
fail_at(struct fetch *f, enum fetch_step step, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static int
fail_at(struct fetch *f, enum fetch_step step, const char *fmt, ...)
{
	va_list ap;

	f->res->step = step;
	va_start(ap, fmt);
	vsnprintf(f->err, f->errlen, fmt, ap);
	va_end(ap);
	return -1;
}

/* Milliseconds left before the deadline (0 when passed). */
static long
ms_left(const struct fetch *f)
{
	struct timespec now;
	long ms;

	clock_gettime(CLOCK_MONOTONIC, &now);
	ms = (long)(f->deadline.tv_sec - now.tv_sec) * 1000 +
	    (f->deadline.tv_nsec - now.tv_nsec) / 1000000;
	return ms > 0 ? ms : 0;
}

/* --- the lookup ---------------------------------------------------------- */

struct lookup {
	int result;
	struct evutil_addrinfo *ai;
	bool done;
	struct evdns_getaddrinfo_request *req;
};

static void
lookup_cb(int result, struct evutil_addrinfo *ai, void *arg)
{
	struct lookup *l = arg;

	l->result = result;
	l->ai = ai;
	l->done = true;
	l->req = NULL;
}

static void
lookup_timeout(evutil_socket_t fd, short what, void *arg)
{
	struct lookup *l = arg;

	if (l->req != NULL)
		evdns_getaddrinfo_cancel(l->req);
}

/* host's addresses (an IP literal is taken as it is).  0 or -1. */
static int
resolve(struct fetch *f, const char *host, unsigned int port,
    struct evutil_addrinfo **out)
{
	struct evutil_addrinfo hints;
	struct event_base *base = NULL;
	struct evdns_base *dns = NULL;
	struct event *timer = NULL;
	struct lookup l = { 0 };
	struct timeval tv;
	char portstr[8];
	long ms = ms_left(f);

	memset(&hints, 0, sizeof(hints));
	hints.ai_family = AF_UNSPEC;
	hints.ai_socktype = SOCK_STREAM;
	hints.ai_protocol = IPPROTO_TCP;
	snprintf(portstr, sizeof(portstr), "%u", port);
	*out = NULL;
	f->res->step = FETCH_LOOKUP;
	if ((base = event_base_new()) == NULL ||
	    (timer = evtimer_new(base, lookup_timeout, &l)) == NULL) {
		fail_at(f, FETCH_LOCAL, "cannot set up a name lookup");
		goto out;
	}
	dns = evdns_base_new(base, EVDNS_BASE_INITIALIZE_NAMESERVERS |
	    EVDNS_BASE_DISABLE_WHEN_INACTIVE);
	if (dns == NULL) {
		fail(f, "cannot set up DNS resolution (resolv.conf?)");
		goto out;
	}
	tv.tv_sec = ms / 1000;
	tv.tv_usec = (ms % 1000) * 1000;
	evtimer_add(timer, &tv);
	l.req = evdns_getaddrinfo(dns, host, portstr, &hints, lookup_cb, &l);
	while (!l.done && event_base_loop(base, EVLOOP_ONCE) == 0)
		;
	if (!l.done || l.result != 0 || l.ai == NULL) {
		fail(f, "cannot resolve %s: %s", host, !l.done ? "no answer" :
		    l.result == EVUTIL_EAI_CANCEL ? "timed out" :
		    l.result != 0 ? evutil_gai_strerror(l.result) : "no address");
		if (l.ai != NULL)
			evutil_freeaddrinfo(l.ai);
		l.ai = NULL;
	}
	*out = l.ai;
out:
	if (timer != NULL)
		event_free(timer);
	if (dns != NULL)
		evdns_base_free(dns, 0);
	if (base != NULL)
		event_base_free(base);
	return *out != NULL ? 0 : -1;
}

/* --- TCP ----------------------------------------------------------------- */

/* Connects within the deadline: 0 with the socket, -1 with errno. */
static int
connect_one(struct fetch *f, const struct sockaddr *sa, socklen_t salen)
{
	struct pollfd p;
	socklen_t el = sizeof(int);
	int fd, e = 0, flags;

	fd = socket(sa->sa_family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
	if (fd == -1)
		return -1;
	if (connect(fd, sa, salen) == -1) {
		if (errno != EINPROGRESS)
			goto fail;
		p.fd = fd;
		p.events = POLLOUT;
		p.revents = 0;
		if (poll(&p, 1, (int)ms_left(f)) != 1) {
			errno = ETIMEDOUT;
			goto fail;
		}
		if (getsockopt(fd, SOL_SOCKET, SO_ERROR, &e, &el) == -1)
			goto fail;
		if (e != 0) {
			errno = e;
			goto fail;
		}
	}
	flags = fcntl(fd, F_GETFL);
	if (flags == -1 || fcntl(fd, F_SETFL, flags & ~O_NONBLOCK) == -1)
		goto fail;
	f->fd = fd;
	return 0;
fail:
	e = errno;
	close(fd);
	errno = e;
	return -1;
}

/* Sets the socket's read and write timeouts to what is left. */
static void
arm_timeouts(struct fetch *f)
{
	long ms = ms_left(f);
	struct timeval tv = { ms / 1000, (ms % 1000) * 1000 };

	if (ms == 0)
		tv.tv_usec = 1000;
	(void)setsockopt(f->fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
	(void)setsockopt(f->fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
}

static int
tcp_connect(struct fetch *f, const char *what, const char *host, unsigned int port)
{
	struct evutil_addrinfo *ai = NULL;
	int e = 0;

	if (resolve(f, host, port, &ai) != 0)
		return -1;
	f->res->step = FETCH_CONNECT;
	for (struct evutil_addrinfo *p = ai; p != NULL; p = p->ai_next) {
		if (connect_one(f, p->ai_addr, (socklen_t)p->ai_addrlen) == 0)
			break;
		e = errno;
		if (ms_left(f) == 0)
			break;
	}
	evutil_freeaddrinfo(ai);
	if (f->fd == -1)
		return fail(f, "cannot connect to %s%s:%u: %s", what, host, port,
		    e == ETIMEDOUT || ms_left(f) == 0 ? "timed out" : strerror(e));
	arm_timeouts(f);
	if ((f->transport = BIO_new_socket(f->fd, BIO_NOCLOSE)) == NULL)
		return fail_at(f, FETCH_LOCAL, "out of memory");
	return 0;
}

/* --- TLS ----------------------------------------------------------------- */

/* The peer name checked in the certificate (and sent as SNI for names). */
static int
set_peer_name(SSL *ssl, const struct url *u)
{
	X509_VERIFY_PARAM *vp = SSL_get0_param(ssl);

	if (u->host_is_ip)
		return X509_VERIFY_PARAM_set1_ip_asc(vp, u->host) == 1 ? 0 : -1;
	X509_VERIFY_PARAM_set_hostflags(vp, X509_CHECK_FLAG_NO_PARTIAL_WILDCARDS);
	return X509_VERIFY_PARAM_set1_host(vp, u->host, 0) == 1 &&
	    SSL_set_tlsext_host_name(ssl, u->host) == 1 ? 0 : -1;
}

/* Why a handshake with ssl failed, for "TLS with X: ...".  Returns true
 * when it was cut short (closed, reset, timed out: the way, or a server
 * that shed it), false when it failed (verification, an alert). */
static bool
handshake_reason(struct fetch *f, SSL *ssl, int r, char *buf, size_t len)
{
	long v = SSL_get_verify_result(ssl);
	int e = SSL_get_error(ssl, r);
	bool cut = false;

	if (v != X509_V_OK)
		snprintf(buf, len, "certificate verify failed: %s",
		    X509_verify_cert_error_string(v));
	else if (e == SSL_ERROR_SYSCALL || (e == SSL_ERROR_WANT_READ ||
	    e == SSL_ERROR_WANT_WRITE)) {
		snprintf(buf, len, "%s", ms_left(f) == 0 || errno == EAGAIN ?
		    "timed out" : errno != 0 ? strerror(errno) :
		    "connection closed during the handshake");
		cut = true;
	} else if (e == SSL_ERROR_SSL && ERR_GET_REASON(ERR_peek_last_error()) ==
	    SSL_R_UNEXPECTED_EOF_WHILE_READING) {
		/* OpenSSL 3's word for a peer that closed (a gateway shedding
		 * its TLS queue closes unread). */
		snprintf(buf, len, "connection closed during the handshake");
		cut = true;
	} else
		wsclient_tls_reason(buf, len, "handshake failed");
	ERR_clear_error();
	return cut;
}

/* The server's TLS context: the one pinned CA, or no verification. */
static SSL_CTX *
server_context(struct fetch *f)
{
	SSL_CTX *ctx = SSL_CTX_new(TLS_client_method());
	BIO *in = NULL;
	X509 *x = NULL;
	char why[320];

	if (ctx == NULL || SSL_CTX_set_min_proto_version(ctx, TLS1_2_VERSION) != 1) {
		wsclient_tls_reason(why, sizeof(why), "cannot create a TLS context");
		fail(f, "%s", why);
		goto fail;
	}
	SSL_CTX_set_options(ctx, SSL_OP_NO_RENEGOTIATION | SSL_OP_NO_COMPRESSION);
	if (f->o->ca_pem == NULL) {
		SSL_CTX_set_verify(ctx, SSL_VERIFY_NONE, NULL);
		return ctx;
	}
	/* This CA and nothing else: no system store. */
	if ((in = BIO_new_mem_buf(f->o->ca_pem, -1)) == NULL ||
	    (x = PEM_read_bio_X509(in, NULL, NULL, NULL)) == NULL ||
	    X509_STORE_add_cert(SSL_CTX_get_cert_store(ctx), x) != 1) {
		wsclient_tls_reason(why, sizeof(why), "cannot load the pinned CA");
		fail(f, "%s", why);
		goto fail;
	}
	SSL_CTX_set_verify(ctx, SSL_VERIFY_PEER, NULL);
	X509_free(x);
	BIO_free(in);
	return ctx;
fail:
	X509_free(x);
	BIO_free(in);
	SSL_CTX_free(ctx);
	return NULL;
}

/* TLS to an https:// proxy, verified like the tunnel's; it then carries
 * the CONNECT and, inside, the server's own TLS. */
static int
proxy_tls(struct fetch *f)
{
	SSL_CTX *ctx;
	SSL *ssl = NULL;
	BIO *b;
	char why[300];
	int r;

	if ((ctx = wsclient_tls_context(f->o->proxy_ca_file, why, sizeof(why))) == NULL)
		return fail_at(f, FETCH_LOCAL, "proxy %s: %s", f->proxy_name, why);
	f->res->step = FETCH_PROXY;
	ssl = SSL_new(ctx);
	SSL_CTX_free(ctx);  /* ssl holds its own reference */
	if (ssl == NULL || set_peer_name(ssl, f->proxy) != 0) {
		SSL_free(ssl);
		return fail_at(f, FETCH_LOCAL, "proxy %s: cannot set up TLS",
		    f->proxy_name);
	}
	SSL_set_bio(ssl, f->transport, f->transport);
	f->transport = NULL;
	if ((r = SSL_connect(ssl)) != 1) {
		bool cut = handshake_reason(f, ssl, r, why, sizeof(why));

		SSL_free(ssl);
		return fail_at(f, cut ? FETCH_PROXY : FETCH_TLS_REFUSED,
		    "TLS with proxy %s: %s", f->proxy_name, why);
	}
	if ((b = BIO_new(BIO_f_ssl())) == NULL) {
		SSL_free(ssl);
		return fail_at(f, FETCH_LOCAL, "out of memory");
	}
	BIO_set_ssl(b, ssl, BIO_CLOSE);
	f->transport = b;
	return 0;
}

/* --- the proxy ----------------------------------------------------------- */

static int
transport_write(struct fetch *f, const char *buf, size_t len)
{
	while (len > 0) {
		int n = BIO_write(f->transport, buf, (int)len);

		if (n <= 0)
			return -1;
		buf += n;
		len -= (size_t)n;
	}
	return 0;
}

/* Reads the proxy's answer head a byte at a time, so that nothing of the
 * server's is taken with it.  Its length, or -1 after fail(). */
static long
read_connect_answer(struct fetch *f, char head[PROXY_HEAD_MAX + 1])
{
	size_t len = 0;

	while (len < 4 || memcmp(head + len - 4, "\r\n\r\n", 4) != 0) {
		if (len == PROXY_HEAD_MAX)
			return fail_at(f, FETCH_MALFORMED, "proxy %s: answer to CONNECT "
			    "is over %d bytes", f->proxy_name, PROXY_HEAD_MAX);
		if (BIO_read(f->transport, head + len, 1) != 1)
			return fail(f, "proxy %s: %s before answering CONNECT",
			    f->proxy_name, ms_left(f) == 0 || errno == EAGAIN ?
			    "timed out" : "connection closed");
		len++;
	}
	head[len] = '\0';
	return (long)len;
}

/* Reads past a 407's body of n bytes.  0, or -1 after fail(). */
static int
skip_body(struct fetch *f, long long n)
{
	char buf[4096];

	while (n > 0) {
		int r = BIO_read(f->transport, buf, n > (long long)sizeof(buf) ?
		    (int)sizeof(buf) : (int)n);

		if (r <= 0)
			return fail(f, "proxy %s: connection closed in its answer",
			    f->proxy_name);
		n -= r;
	}
	return 0;
}

/* Sends one CONNECT with the authorization value (NULL: Basic from the
 * URL, or none).  0, or -1 after fail(). */
static int
send_connect(struct fetch *f, const char *value)
{
	size_t reqlen = 0;
	char *req = proxy_connect_request(f->proxy, f->server.host, f->server.port,
	    value, &reqlen);
	int r;

	if (req == NULL)
		return fail(f, "out of memory");
	r = transport_write(f, req, reqlen);
	OPENSSL_cleanse(req, reqlen);
	free(req);
	if (r != 0)
		return fail(f, "proxy %s: cannot send CONNECT: %s", f->proxy_name,
		    ms_left(f) == 0 ? "timed out" : "connection closed");
	return 0;
}

/*
 * CONNECT to the server through the proxy, authenticating as `run` does
 * (common/proxyauth.h): a 407 with a challenge is answered on the same
 * connection, a few rounds at most.
 */
static int
proxy_connect(struct fetch *f)
{
	static struct proxy_answer a;   /* ~6 KiB: not on the stack */
	char head[PROXY_HEAD_MAX + 1], status[128] = "", why[300], *value = NULL;
	struct proxy_authn *authn;
	int r = -1, step, round;
	long len;

	authn = proxy_authn_new((enum proxy_auth)f->o->proxy_auth,
	    f->o->proxy_user != NULL ? f->o->proxy_user : f->proxy->user,
	    f->o->proxy_password != NULL ? f->o->proxy_password : f->proxy->password,
	    f->proxy->host, why, sizeof(why));
	f->res->step = FETCH_PROXY;
	if (authn == NULL)
		return fail_at(f, FETCH_PROXY_AUTH, "proxy %s: %s", f->proxy_name, why);
	step = proxy_authn_next(authn, NULL, &value, why, sizeof(why));
	for (round = 0; round < 5; round++) {
		if (step < 0) {
			fail_at(f, FETCH_PROXY_AUTH, "proxy %s: %s", f->proxy_name, why);
			break;
		}
		if (step > 0) {
			fail_at(f, FETCH_PROXY_AUTH, "proxy %s refused CONNECT to %s:%u: "
			    "%s%s%s", f->proxy_name,
			    f->server.host, f->server.port, status, why[0] != '\0' ? ": " : "",
			    why);
			break;
		}
		r = send_connect(f, value);
		if (value != NULL) {
			OPENSSL_cleanse(value, strlen(value));
			free(value);
			value = NULL;
		}
		if (r != 0 || (len = read_connect_answer(f, head)) < 0) {
			r = -1;
			break;
		}
		r = -1;
		if (proxy_answer_parse(head, (size_t)len, proxy_authn_scheme(authn), &a,
		    status, sizeof(status), why, sizeof(why)) != 0) {
			fail_at(f, FETCH_MALFORMED, "proxy %s sent a malformed answer "
			    "to CONNECT: %s (%s)", f->proxy_name, status, why);
			break;
		}
		if (a.status >= 200 && a.status <= 299) {
			r = 0;
			break;
		}
		if (a.status != 407 || a.closes || a.chunked || a.content_length < 0 ||
		    a.content_length > (1 << 20)) {
			f->res->status = a.status;
			fail_at(f, a.status == 407 ? FETCH_PROXY_AUTH :
			    FETCH_PROXY_REFUSED, "proxy %s refused CONNECT to %s:%u: "
			    "%s", f->proxy_name, f->server.host, f->server.port, status);
			break;
		}
		if (skip_body(f, a.content_length) != 0)
			break;
		step = proxy_authn_next(authn, &a, &value, why, sizeof(why));
	}
	if (round == 5)
		fail_at(f, FETCH_PROXY_AUTH, "proxy %s: still 407 after 5 rounds",
		    f->proxy_name);
	if (value != NULL) {
		OPENSSL_cleanse(value, strlen(value));
		free(value);
	}
	OPENSSL_cleanse(&a, sizeof(a));
	proxy_authn_free(authn);
	return r;
}

/* --- the request --------------------------------------------------------- */

static int
server_tls(struct fetch *f)
{
	char why[300];
	int r;

	f->res->step = FETCH_LOCAL;
	if ((f->ctx = server_context(f)) == NULL)
		return -1;
	if ((f->ssl = SSL_new(f->ctx)) == NULL || set_peer_name(f->ssl, &f->server) != 0)
		return fail(f, "cannot set up TLS for %s", f->server.host);
	SSL_set_bio(f->ssl, f->transport, f->transport);
	f->transport = NULL;
	if ((r = SSL_connect(f->ssl)) != 1) {
		bool cut = handshake_reason(f, f->ssl, r, why, sizeof(why));

		return fail_at(f, cut ? FETCH_TLS : FETCH_TLS_REFUSED,
		    "TLS with %s:%u: %s", f->server.host, f->server.port, why);
	}
	return 0;
}

/* Reads until the answer is complete; *buf holds it (caller wipes). */
static int
read_answer(struct fetch *f, char **bufp, size_t *lenp, struct get_answer *a)
{
	size_t cap = GET_ANSWER_HEAD_MAX + f->o->max_body + GET_ANSWER_FRAMING_MAX + 1;
	size_t len = 0;
	char *buf = malloc(cap), why[200];
	int r = 0, eof = 0;

	*bufp = buf;
	*lenp = 0;
	if (buf == NULL)
		return fail_at(f, FETCH_LOCAL, "out of memory");
	while (r == 0) {
		int n = 0;

		if (len == cap)
			return fail_at(f, FETCH_MALFORMED, "answer larger than %zu bytes",
			    cap - 1);
		if (!eof && (n = SSL_read(f->ssl, buf + len, (int)(cap - len))) <= 0) {
			int e = SSL_get_error(f->ssl, n);

			if (e != SSL_ERROR_ZERO_RETURN && e != SSL_ERROR_SYSCALL)
				return fail(f, "reading the answer: %s", ms_left(f) == 0 ||
				    e == SSL_ERROR_WANT_READ ? "timed out" : "TLS error");
			ERR_clear_error();
			eof = 1;
			n = 0;
		}
		len += (size_t)n;
		*lenp = len;
		r = get_answer_parse(buf, len, eof, f->o->max_body, a, why, sizeof(why));
	}
	/* Malformed, or (more bytes would have done) cut short. */
	if (r == -1)
		return fail_at(f, eof && get_answer_parse(buf, len, 0, f->o->max_body,
		    a, NULL, 0) == 0 ? FETCH_ANSWER : FETCH_MALFORMED, "%s", why);
	return 0;
}

/* The Retry-After of the answer head at buf[0..len), in ms; 0: none (or
 * the date form, which the caller's backoff replaces). */
static uint32_t
answer_retry_after_ms(const char *buf, size_t len)
{
	struct ws_response_head h;
	char *head, line[64];
	size_t hl = http_head_length(buf, len);

	if (hl == 0 || (head = malloc(hl + 1)) == NULL)
		return 0;
	memcpy(head, buf, hl);
	head[hl] = '\0';
	if (ws_response_parse_head(head, &h, line, sizeof(line)) != 0)
		h.retry_after_s = -1;
	free(head);
	return h.retry_after_s > 0 ? (uint32_t)h.retry_after_s * 1000u : 0;
}

static int
request(struct fetch *f, const char *path, struct httpbody *b)
{
	char auth[URL_HOST_MAX + 16], req[URL_MAX + URL_HOST_MAX + 256];
	struct get_answer a;
	char *buf = NULL;
	size_t len = 0;
	int n, r = -1;

	if (url_authority(&f->server, auth, sizeof(auth)) < 0)
		return fail(f, "gateway URL too long");
	n = snprintf(req, sizeof(req), "GET %s HTTP/1.1\r\nHost: %s\r\n"
	    "User-Agent: tether-client/" TETHER_VERSION "\r\nAccept: */*\r\n"
	    "Connection: close\r\n\r\n", path, auth);
	if (n < 0 || (size_t)n >= sizeof(req))
		return fail(f, "request too long");
	f->res->step = FETCH_ANSWER;
	if (SSL_write(f->ssl, req, n) != n) {
		ERR_clear_error();
		return fail(f, "cannot send the request: %s", ms_left(f) == 0 ?
		    "timed out" : "connection closed");
	}
	if (read_answer(f, &buf, &len, &a) != 0)
		goto out;
	if (a.status != 200) {
		f->res->status = a.status;
		f->res->retry_after_ms = answer_retry_after_ms(buf, len);
		fail_at(f, FETCH_STATUS, "GET %s answered HTTP %d", path, a.status);
		goto out;
	}
	memset(b, 0, sizeof(*b));
	b->max = f->o->max_body;
	if (a.body_len > 0 && httpbody_write(a.body, 1, a.body_len, b) != a.body_len) {
		fail_at(f, FETCH_LOCAL, "out of memory");
		goto out;
	}
	r = 0;
out:
	if (buf != NULL) {
		OPENSSL_cleanse(buf, len);
		free(buf);
	}
	return r;
}

/* Which proxy applies, if any: 0, or -1 when its URL is bad. */
static int
pick_proxy(struct fetch *f)
{
	char why[200];

	if (f->o->proxy_url == NULL || f->o->proxy_url[0] == '\0' ||
	    no_proxy_match(f->o->no_proxy, f->server.host))
		return 0;
	if ((f->proxy = calloc(1, sizeof(*f->proxy))) == NULL)
		return fail(f, "out of memory");
	if (url_parse(f->o->proxy_url, proxy_url_schemes, f->proxy, why,
	    sizeof(why)) != 0)
		return fail(f, "proxy URL: %s", why);
	url_display(f->proxy, f->proxy_name, sizeof(f->proxy_name));
	return 0;
}

static int
fetch_run(struct fetch *f, const char *base_url, const char *path,
    struct httpbody *b)
{
	static const char *const https_only[] = { "https", NULL };
	char why[200];

	if (url_parse(base_url, https_only, &f->server, why, sizeof(why)) != 0)
		return fail(f, "gateway URL: %s", why);
	if (pick_proxy(f) != 0)
		return -1;
	if (f->proxy == NULL) {
		if (tcp_connect(f, "", f->server.host, f->server.port) != 0)
			return -1;
	} else {
		if (tcp_connect(f, "proxy ", f->proxy->host, f->proxy->port) != 0)
			return -1;
		if (strcmp(f->proxy->scheme, "https") == 0 && proxy_tls(f) != 0)
			return -1;
		if (proxy_connect(f) != 0)
			return -1;
	}
	if (server_tls(f) != 0)
		return -1;
	return request(f, path, b);
}

int
fetch_get(const char *base_url, const char *path, const struct fetch_opts *o,
    struct httpbody *b, struct fetch_result *res, char *err, size_t errlen)
{
	struct fetch f;
	int r;

	memset(&f, 0, sizeof(f));
	memset(b, 0, sizeof(*b));
	memset(res, 0, sizeof(*res));
	res->step = FETCH_LOCAL;
	f.res = res;
	f.o = o;
	f.fd = -1;
	f.err = err;
	f.errlen = errlen;
	clock_gettime(CLOCK_MONOTONIC, &f.deadline);
	f.deadline.tv_sec += o->timeout_ms / 1000;
	f.deadline.tv_nsec += (long)(o->timeout_ms % 1000) * 1000000;
	if (f.deadline.tv_nsec >= 1000000000) {
		f.deadline.tv_sec++;
		f.deadline.tv_nsec -= 1000000000;
	}
	r = fetch_run(&f, base_url, path, b);
	if (r != 0)
		httpbody_wipe(b);
	SSL_free(f.ssl);    /* frees the transport BIO it took */
	SSL_CTX_free(f.ctx);
	BIO_free_all(f.transport);
	if (f.fd != -1)
		close(f.fd);
	if (f.proxy != NULL) {
		url_clear(f.proxy);
		free(f.proxy);
	}
	url_clear(&f.server);
	ERR_clear_error();
	return r;
}

static bool
status_retryable(int status)
{
	return status == 408 || status == 429 || (status >= 500 && status <= 599);
}

bool
fetch_retryable(const struct fetch_result *res)
{
	switch (res->step) {
	case FETCH_LOOKUP:
	case FETCH_CONNECT:
	case FETCH_PROXY:
	case FETCH_TLS:
	case FETCH_ANSWER:
		return true;
	case FETCH_PROXY_REFUSED:
	case FETCH_STATUS:
		return status_retryable(res->status);
	case FETCH_LOCAL:
	case FETCH_PROXY_AUTH:
	case FETCH_TLS_REFUSED:
	case FETCH_MALFORMED:
		break;
	}
	return false;
}
