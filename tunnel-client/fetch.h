/*
 * fetch.h: the agent's one kind of HTTPS request outside the tunnel: a GET
 * to the gateway during `tether-client join` (its CA, then its health with
 * that CA pinned).  Blocking, for a command that runs no event loop:
 * name lookup with libevent's resolver (/etc/hosts and /etc/resolv.conf,
 * as the tunnel does; no NSS, so a static binary resolves too), TCP, the
 * HTTP CONNECT proxy the tunnel would use (common/proxy.h: HTTPS_PROXY,
 * NO_PROXY, --proxy), TLS with OpenSSL, and the answer read with
 * common/getanswer.h, bounded.
 */
#ifndef TETHER_CLIENT_FETCH_H
#define TETHER_CLIENT_FETCH_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "httpbody.h"

struct fetch_opts {
	const char *proxy_url;     /* http(s)://[user:pass@]host:port, or NULL */
	const char *no_proxy;      /* NO_PROXY list, or NULL */
	const char *proxy_ca_file; /* CA of an https:// proxy; NULL: system CAs */
	int proxy_auth;            /* enum proxy_auth (common/proxy.h) */
	const char *proxy_user;    /* NTLM's user, or NULL: the URL's */
	const char *proxy_password;/* NTLM's password, or NULL: the URL's */
	/* The one CA the server must verify against (PEM; its name or IP is
	 * checked too), or NULL for no verification at all (the caller checks
	 * what it got by other means, e.g. a checksum). */
	const char *ca_pem;
	unsigned int timeout_ms;   /* the whole request, lookup included */
	size_t max_body;           /* a larger body is refused */
};

/* Where a request failed: what fetch_retryable judges. */
enum fetch_step {
	FETCH_LOCAL,          /* ours: a bad URL, memory, a TLS context */
	FETCH_LOOKUP,         /* the name lookup: no answer, no such name */
	FETCH_CONNECT,        /* TCP to the server or the proxy */
	FETCH_PROXY,          /* TLS to the proxy or its CONNECT: cut, timed out */
	FETCH_PROXY_REFUSED,  /* the proxy answered CONNECT with status */
	FETCH_PROXY_AUTH,     /* no way to authenticate to the proxy */
	FETCH_TLS,            /* the server's handshake cut, reset or timed out */
	FETCH_TLS_REFUSED,    /* the handshake failed: the certificate does not
	                       * verify, an alert, not TLS at all */
	FETCH_ANSWER,         /* the request or the answer cut or timed out */
	FETCH_MALFORMED,      /* not an HTTP answer, or over the size limits */
	FETCH_STATUS,         /* a complete answer, but not 200: status */
};

struct fetch_result {
	enum fetch_step step;     /* where it failed (fetch_get returned -1) */
	int status;               /* FETCH_STATUS, FETCH_PROXY_REFUSED: the HTTP
	                           * status; else 0 */
	uint32_t retry_after_ms;  /* FETCH_STATUS: the answer's Retry-After
	                           * (delta-seconds form) in ms; 0: none */
};

/*
 * GET base_url (an https:// origin) + path.  Returns 0 with the body of a
 * 200 answer in *b (caller wipes it with httpbody_wipe), or -1 with a
 * reason in err (any other status, a lookup, connect, proxy, TLS or
 * verification failure, the time or a size limit), where it failed in
 * *res, and *b empty.  Costs one connection; blocks up to timeout_ms.
 */
int fetch_get(const char *base_url, const char *path, const struct fetch_opts *o,
    struct httpbody *b, struct fetch_result *res, char *err, size_t errlen);

/*
 * Whether another try of a failed request may succeed, the server being
 * the same: true for a fault of the way there or of a server not (yet)
 * serving: a lookup, a connection refused or timed out, a proxy that lost
 * its way (CONNECT cut, or answered 408, 429 or 5xx), a handshake or an
 * answer cut short, an answer 408, 429 or 5xx.  False for what a retry
 * cannot change: a certificate that does not verify, a TLS alert, an
 * answer that is not HTTP or is too big, any other status (404: not a
 * Tether gateway), a proxy that refuses or cannot be authenticated to,
 * and our own failures.  Pure.
 */
bool fetch_retryable(const struct fetch_result *res);

#endif
