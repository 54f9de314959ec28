/*
 * hostname.h: what a host may look like wherever Tether accepts one: the
 * join document's gateway URL, `join --allow` and `--service`, and the
 * targets the agent checks against its allowlist.
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

#endif
