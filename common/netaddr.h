/*
 * netaddr.h: listening addresses, "HOST:PORT" with HOST an IPv4 or IPv6
 * literal (the latter with or without brackets) and PORT 0 to 65535 (0:
 * any free port).  The gateway's --listen and both daemons'
 * --metrics-listen use these; names are not resolved.
 */
#ifndef TETHER_NETADDR_H
#define TETHER_NETADDR_H

#include <stddef.h>
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

#endif
