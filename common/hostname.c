/* hostname.c: host syntax shared by URLs, allowlists and targets (see hostname.h). */
#include "hostname.h"

#include <arpa/inet.h>
#include <ctype.h>
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
