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

#include <stddef.h>

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

/*
 * GET base_url (an https:// origin) + path.  Returns 0 with the body of a
 * 200 answer in *b (caller wipes it with httpbody_wipe), or -1 with a
 * reason in err (any other status, a lookup, connect, proxy, TLS or
 * verification failure, the time or a size limit) and *b empty.  Costs
 * one connection; blocks up to timeout_ms.
 */
int fetch_get(const char *base_url, const char *path, const struct fetch_opts *o,
    struct httpbody *b, char *err, size_t errlen);

#endif
