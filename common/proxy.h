/*
 * proxy.h: the agent's way to the gateway through an HTTP CONNECT proxy:
 * which proxy applies to a host (NO_PROXY), and the CONNECT request.  Pure
 * functions; common/wsclient.c does the I/O on the loop.
 */
#ifndef TETHER_PROXY_H
#define TETHER_PROXY_H

#include <stddef.h>

#include "url.h"

/* Schemes a proxy URL may have: http:// (plain to the proxy) and https://
 * (TLS to the proxy, then the tunnel's own TLS inside). */
extern const char *const proxy_url_schemes[];

/*
 * Does the NO_PROXY-style list exempt host (a name, or an IP address
 * without brackets)?  Entries are separated by commas or spaces:
 *   *                     every host
 *   example.com           example.com and every name under it
 *   .example.com, *.example.com   the same (the leading dot or "*." is dropped)
 *   192.0.2.7, ::1, [::1] that address
 *   10.0.0.0/8, fd00::/8  addresses in that block (IP hosts only)
 * Names compare without case and without a trailing dot; an entry's ":PORT"
 * is ignored.  1 or 0.
 */
int no_proxy_match(const char *list, const char *host);

/*
 * Builds "CONNECT host:port HTTP/1.1" with Host, "Proxy-Connection:
 * keep-alive" and a Proxy-Authorization header: authorization ("NTLM
 * <base64>", "Negotiate <base64>": printable ASCII, no CR/LF) when not
 * NULL, else "Basic base64(user:password)" when the proxy URL has user
 * information, else none.  host is a name or address without brackets
 * (they are added for IPv6).  Returns a malloc'd request of *len bytes (the
 * caller wipes it with OPENSSL_cleanse before free: it holds the
 * credentials), or NULL (out of memory, or authorization with a control
 * byte).
 */
char *proxy_connect_request(const struct url *proxy, const char *host,
    unsigned int port, const char *authorization, size_t *len);

/* How the agent authenticates to the proxy (--proxy-auth). */
enum proxy_auth {
	PROXY_AUTH_BASIC,      /* the URL's user information, if any */
	PROXY_AUTH_NTLM,       /* NTLMv2, common/ntlm.h */
	PROXY_AUTH_NEGOTIATE,  /* SPNEGO/Kerberos through GSSAPI */
};

/* The names of enum proxy_auth, in its order, NULL-terminated: "basic",
 * "ntlm", "negotiate" (the --proxy-auth choices). */
extern const char *const proxy_auth_names[];

/* Limits of a proxy's answer to CONNECT: the head (status line and
 * headers) and one challenge's token (base64, in Proxy-Authenticate). */
#define PROXY_HEAD_MAX   (8 * 1024)
#define PROXY_TOKEN_MAX  (6 * 1024)

/* What the agent reads from a proxy's answer to CONNECT. */
struct proxy_answer {
	int status;               /* 100..599 */
	long long content_length; /* -1: none */
	int chunked;              /* Transfer-Encoding lists chunked */
	int closes;               /* the proxy closes after it: Connection or
	                           * Proxy-Connection "close", or HTTP/1.0
	                           * without keep-alive */
	unsigned offers;          /* 1 << enum proxy_auth per scheme the
	                           * Proxy-Authenticate headers offer */
	int has_token;            /* the wanted scheme came with a token */
	char token[PROXY_TOKEN_MAX + 1]; /* its base64 token */
};

/*
 * Parses the head of a proxy's answer: len bytes (at most PROXY_HEAD_MAX;
 * NUL bytes refused), the status line, then header lines ending in "\r\n"
 * or "\n", up to and including the empty line.  want is the scheme whose
 * token is kept (Proxy-Authenticate: NTLM <token>).  The status line, made
 * printable, goes to status_line.  Returns 0, or -1 with a reason in why
 * (no HTTP/1.x status line, a header line without a colon, a bad or
 * repeated Content-Length, a token over PROXY_TOKEN_MAX or not base64).
 * Pure, no allocation.
 */
int proxy_answer_parse(const char *head, size_t len, enum proxy_auth want,
    struct proxy_answer *a, char *status_line, size_t sllen, char *why,
    size_t whylen);

#endif
