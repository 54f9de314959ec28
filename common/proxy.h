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
 * Builds "CONNECT host:port HTTP/1.1" with Host and, when the proxy URL has
 * user information, "Proxy-Authorization: Basic base64(user:password)".
 * host is a name or address without brackets (they are added for IPv6).
 * Returns a malloc'd request of *len bytes (the caller wipes it with
 * OPENSSL_cleanse before free: it holds the credentials), or NULL.
 */
char *proxy_connect_request(const struct url *proxy, const char *host,
    unsigned int port, size_t *len);

#endif
