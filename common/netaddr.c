/*
 * netaddr.c: listening addresses and networks (see netaddr.h).
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

/* ---- networks ---- */

int
cidr_parse(const char *s, size_t len, struct cidr *c, char *why, size_t whylen)
{
	char text[INET6_ADDRSTRLEN + 8], *slash, *end;
	unsigned max;
	long bits;

	memset(c, 0, sizeof(*c));
	if (len == 0 || len >= sizeof(text)) {
		snprintf(why, whylen, "wants ADDRESS[/BITS], got \"%.*s\"",
		    (int)(len < 64 ? len : 64), s);
		return -1;
	}
	memcpy(text, s, len);
	text[len] = '\0';
	slash = strchr(text, '/');
	if (slash != NULL)
		*slash++ = '\0';
	if (inet_pton(AF_INET, text, c->addr) == 1) {
		c->family = AF_INET;
		max = 32;
	} else if (inet_pton(AF_INET6, text, c->addr) == 1) {
		c->family = AF_INET6;
		max = 128;
	} else {
		snprintf(why, whylen, "\"%s\" is not an IPv4 or IPv6 address", text);
		return -1;
	}
	c->bits = max;
	if (slash != NULL) {
		bits = strtol(slash, &end, 10);
		if (*slash == '\0' || *end != '\0' || bits < 0 || bits > (long)max) {
			snprintf(why, whylen, "prefix length \"/%s\" is not 0 to %u",
			    slash, max);
			return -1;
		}
		c->bits = (unsigned)bits;
	}
	for (unsigned i = c->bits; i < max; i++)   /* host bits off */
		c->addr[i / 8] &= (uint8_t)~(0x80u >> (i % 8));
	return 0;
}

int
cidr_list_parse(const char *s, struct cidr_list *out, char *why, size_t whylen)
{
	const char *p = s;

	memset(out, 0, sizeof(*out));
	for (;;) {
		size_t len;

		while (*p == ' ' || *p == '\t')
			p++;
		len = strcspn(p, ",");
		while (len > 0 && (p[len - 1] == ' ' || p[len - 1] == '\t'))
			len--;
		if (out->n == CIDR_LIST_MAX) {
			snprintf(why, whylen, "at most %d networks", CIDR_LIST_MAX);
			return -1;
		}
		if (cidr_parse(p, len, &out->net[out->n], why, whylen) != 0)
			return -1;
		out->n++;
		p += strcspn(p, ",");
		if (*p == '\0')
			return 0;
		p++;
	}
}

int
cidr_list_check(const char *v, char *why, size_t whylen)
{
	struct cidr_list l;

	return cidr_list_parse(v, &l, why, whylen);
}

int
cidr_contains(const struct cidr *c, int family, const uint8_t *addr)
{
	unsigned full = c->bits / 8, rest = c->bits % 8;

	if (c->family != family || memcmp(c->addr, addr, full) != 0)
		return 0;
	return rest == 0 ||
	    ((addr[full] ^ c->addr[full]) & (uint8_t)(0xff00u >> rest)) == 0;
}

int
cidr_list_match(const struct cidr_list *l, const struct sockaddr *sa)
{
	static const uint8_t mapped[12] = { 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff };
	const uint8_t *addr;
	int family = sa->sa_family;

	if (family == AF_INET) {
		addr = (const uint8_t *)&((const struct sockaddr_in *)sa)->sin_addr;
	} else if (family == AF_INET6) {
		addr = (const uint8_t *)&((const struct sockaddr_in6 *)sa)->sin6_addr;
		if (memcmp(addr, mapped, sizeof(mapped)) == 0) {
			family = AF_INET;
			addr += 12;
		}
	} else {
		return 0;
	}
	for (size_t i = 0; i < l->n; i++)
		if (cidr_contains(&l->net[i], family, addr))
			return 1;
	return 0;
}
