/* hostname.c: host syntax shared by URLs, allowlists and targets (see hostname.h). */
#include "hostname.h"

#include <arpa/inet.h>
#include <ctype.h>
#include <stdio.h>
#include <string.h>

int
host_dns_or_ipv4_valid(const char *s, size_t n)
{
	char buf[256];
	struct in_addr a4;
	size_t label = 0;
	int all_numeric = 1;

	if (n == 0 || n > 253)
		return 0;
	for (size_t i = 0; i < n; i++) {
		char c = s[i];

		if (c == '.') {
			if (label == 0 || s[i - 1] == '-')
				return 0;
			label = 0;
			continue;
		}
		if (!isalnum((unsigned char)c) && c != '-')
			return 0;
		if (c == '-' && label == 0)
			return 0;
		if (!isdigit((unsigned char)c))
			all_numeric = 0;
		if (++label > 63)
			return 0;
	}
	if (label == 0 || s[n - 1] == '-')
		return 0;
	if (all_numeric) {
		/* Looks like an address: it must be a real one. */
		memcpy(buf, s, n);
		buf[n] = '\0';
		return inet_pton(AF_INET, buf, &a4) == 1;
	}
	return 1;
}

int
host_ipv6_bracketed(const char *s, size_t n, struct in6_addr *a6)
{
	char buf[64];
	struct in6_addr tmp;

	if (n < 4 || s[0] != '[' || s[n - 1] != ']' || n - 2 >= sizeof(buf))
		return 0;
	memcpy(buf, s + 1, n - 2);
	buf[n - 2] = '\0';
	return inet_pton(AF_INET6, buf, a6 != NULL ? a6 : &tmp) == 1;
}

int
host_valid(const char *s, size_t n)
{
	if (n > 0 && s[0] == '[')
		return host_ipv6_bracketed(s, n, NULL);
	return host_dns_or_ipv4_valid(s, n);
}

unsigned int
port_parse(const char *s, size_t n)
{
	unsigned int v = 0;

	if (n == 0 || n > 5 || s[0] == '0')
		return 0;
	for (size_t i = 0; i < n; i++) {
		if (!isdigit((unsigned char)s[i]))
			return 0;
		v = v * 10 + (unsigned int)(s[i] - '0');
	}
	return v <= 65535 ? v : 0;
}

int
target_parse(const char *s, size_t n, size_t *host_len, unsigned int *port,
    char *why, size_t whylen)
{
	const char *colon = NULL;
	unsigned int p;

	for (size_t i = n; i > 0; i--) {
		if (s[i - 1] == ':') {
			colon = s + i - 1;
			break;
		}
	}
	if (n == 0 || colon == NULL || colon == s) {
		snprintf(why, whylen, "want HOST:PORT");
		return -1;
	}
	/* "[::1]:22": the colon must follow the closing bracket. */
	if (s[0] == '[' && colon[-1] != ']') {
		snprintf(why, whylen, "want HOST:PORT with an IPv6 host in brackets");
		return -1;
	}
	if (!host_valid(s, (size_t)(colon - s))) {
		snprintf(why, whylen, "the host is not a DNS name, an IPv4 address "
		    "or a bracketed IPv6 address");
		return -1;
	}
	p = port_parse(colon + 1, n - (size_t)(colon - s) - 1);
	if (p == 0) {
		snprintf(why, whylen, "the port must be a number from 1 to 65535");
		return -1;
	}
	*host_len = (size_t)(colon - s);
	*port = p;
	return 0;
}
