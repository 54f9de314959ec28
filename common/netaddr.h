/*
 * netaddr.h: listening addresses, "HOST:PORT" with HOST an IPv4 or IPv6
 * literal (the latter with or without brackets) and PORT 0 to 65535 (0:
 * any free port).  The gateway's --listen and both daemons'
 * --metrics-listen use these; names are not resolved.
 */
#ifndef TETHER_NETADDR_H
#define TETHER_NETADDR_H

#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>

/* Splits s at its last ':' into host (as written) and port.  0, or -1 when
 * s is not HOST:PORT or host does not fit. */
int netaddr_split(const char *s, char *host, size_t hostlen, int *port);

/* host (an IP literal, IPv6 brackets optional) and port as a socket
 * address.  0, or -1 when host is not a literal. */
int netaddr_literal(const char *host, int port, struct sockaddr_storage *ss,
    int *sslen);

/* Both: "HOST:PORT" as a socket address.  0 or -1. */
int netaddr_parse(const char *s, struct sockaddr_storage *ss, int *sslen);

/* An option check (options.h's opt_check_fn): 0 if v is a listening
 * address, else -1 with why. */
int netaddr_check(const char *v, char *why, size_t whylen);

/* The port a bound socket listens on, or -1. */
int netaddr_bound_port(int fd);

/*
 * Networks: "ADDRESS[/BITS]" (IPv4 or IPv6; no /BITS: the one address).
 * --trusted-proxy lists and NO_PROXY's CIDR entries use these.
 */
/* One trusted source: an IPv4 or IPv6 network. */
struct cidr {
	int family;          /* AF_INET or AF_INET6 */
	uint8_t addr[16];    /* network bytes, host bits zero */
	unsigned bits;       /* prefix length */
};

#define CIDR_LIST_MAX 32

/* Sources trusted to send PROXY headers (--trusted-proxy).  Fixed size. */
struct cidr_list {
	struct cidr net[CIDR_LIST_MAX];
	size_t n;
};

/*
 * Parses "CIDR[,CIDR...]" (each an address or ADDRESS/BITS; spaces around
 * commas allowed) into *out.  0, or -1 with why.
 */
int cidr_list_parse(const char *s, struct cidr_list *out, char *why, size_t whylen);
/* An option check (options.h's opt_check_fn) for such a list. */
int cidr_list_check(const char *v, char *why, size_t whylen);
/* 1 if sa (AF_INET, AF_INET6, IPv4-mapped IPv6 too) is in one of them. */
int cidr_list_match(const struct cidr_list *l, const struct sockaddr *sa);

/* s[0..len) as one network.  0, or -1 with why. */
int cidr_parse(const char *s, size_t len, struct cidr *c, char *why, size_t whylen);
/* 1 if addr (4 bytes for AF_INET, 16 for AF_INET6) is in c. */
int cidr_contains(const struct cidr *c, int family, const uint8_t *addr);

#endif
