/*
 * hostname.h: what a host may look like wherever Tether accepts one: the
 * join document's gateway URL, `join --allow` and `--service`, the dial
 * endpoint's and forward OPEN targets (checked by the gateway where they
 * enter) and the targets the agent checks against its allowlist.
 */
#ifndef TETHER_HOSTNAME_H
#define TETHER_HOSTNAME_H

#include <netinet/in.h>
#include <stddef.h>

/* A DNS name (labels of [A-Za-z0-9-], no '-' at either end of a label) or
 * a dotted IPv4 address; n bytes of s, not NUL-terminated.  1 or 0. */
int host_dns_or_ipv4_valid(const char *s, size_t n);

/* "[IPv6]" with the brackets; n bytes of s.  Fills *a6 when non-NULL.
 * 1 or 0. */
int host_ipv6_bracketed(const char *s, size_t n, struct in6_addr *a6);

/* Either of the above.  1 or 0. */
int host_valid(const char *s, size_t n);

/* A port: 1 to 65535 in decimal, n bytes of digits, no sign, no leading
 * zero.  The port, or 0. */
unsigned int port_parse(const char *s, size_t n);

/*
 * A target "HOST:PORT", n bytes of s: HOST as host_valid (IPv6 bracketed),
 * PORT as port_parse, nothing else (no NUL, space, scheme or path).
 * Returns 0 with *host_len (bytes of HOST, brackets included) and *port
 * set, or -1 with the reason in why (which never quotes s: callers decide
 * how to show a peer's bytes).
 */
int target_parse(const char *s, size_t n, size_t *host_len, unsigned int *port,
    char *why, size_t whylen);

#endif
