/*
 * netaddr.c: listening addresses (see netaddr.h).
 */
#include "netaddr.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int
netaddr_split(const char *s, char *host, size_t hostlen, int *port)
{
	const char *colon = strrchr(s, ':');
	char *end;
	long p;

	if (colon == NULL || colon == s || (size_t)(colon - s) >= hostlen)
		return -1;
	p = strtol(colon + 1, &end, 10);
	if (*end != '\0' || end == colon + 1 || p < 0 || p > 65535)
		return -1;
	snprintf(host, hostlen, "%.*s", (int)(colon - s), s);
	*port = (int)p;
	return 0;
}

int
netaddr_literal(const char *host, int port, struct sockaddr_storage *ss, int *sslen)
{
	char h[INET6_ADDRSTRLEN + 2];
	size_t n = strlen(host);
	struct sockaddr_in *s4 = (struct sockaddr_in *)ss;
	struct sockaddr_in6 *s6 = (struct sockaddr_in6 *)ss;

	if (n >= 2 && host[0] == '[' && host[n - 1] == ']') {
		host++;
		n -= 2;
	}
	if (n >= sizeof(h))
		return -1;
	memcpy(h, host, n);
	h[n] = '\0';
	memset(ss, 0, sizeof(*ss));
	if (inet_pton(AF_INET, h, &s4->sin_addr) == 1) {
		s4->sin_family = AF_INET;
		s4->sin_port = htons((uint16_t)port);
		*sslen = sizeof(*s4);
		return 0;
	}
	if (inet_pton(AF_INET6, h, &s6->sin6_addr) == 1) {
		s6->sin6_family = AF_INET6;
		s6->sin6_port = htons((uint16_t)port);
		*sslen = sizeof(*s6);
		return 0;
	}
	return -1;
}

int
netaddr_parse(const char *s, struct sockaddr_storage *ss, int *sslen)
{
	char host[INET6_ADDRSTRLEN + 3];
	int port;

	if (netaddr_split(s, host, sizeof(host), &port) != 0)
		return -1;
	return netaddr_literal(host, port, ss, sslen);
}

int
netaddr_check(const char *v, char *why, size_t whylen)
{
	struct sockaddr_storage ss;
	int sslen;

	if (netaddr_parse(v, &ss, &sslen) == 0)
		return 0;
	snprintf(why, whylen, "wants HOST:PORT, got \"%s\" (HOST: an IPv4 or "
	    "[IPv6] address, not a name)", v);
	return -1;
}

int
netaddr_bound_port(int fd)
{
	struct sockaddr_storage ss;
	socklen_t len = sizeof(ss);

	if (getsockname(fd, (struct sockaddr *)&ss, &len) != 0)
		return -1;
	if (ss.ss_family == AF_INET6)
		return ntohs(((struct sockaddr_in6 *)&ss)->sin6_port);
	return ntohs(((struct sockaddr_in *)&ss)->sin_port);
}
