/*
 * proxy.c: NO_PROXY matching and the CONNECT request (see proxy.h).
 */
#include "proxy.h"

#include <arpa/inet.h>
#include <ctype.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include <openssl/crypto.h>
#include <openssl/evp.h>

#include "netaddr.h"

#define ENTRY_MAX 256

const char *const proxy_url_schemes[] = { "http", "https", NULL };

/* An IPv4 or IPv6 address (brackets allowed) into a 16-byte buffer. */
static int
parse_ip(const char *s, unsigned char addr[16], int *family)
{
	char buf[ENTRY_MAX];
	size_t n = strlen(s);

	if (n >= 2 && s[0] == '[' && s[n - 1] == ']') {
		snprintf(buf, sizeof(buf), "%.*s", (int)(n - 2), s + 1);
		s = buf;
	}
	if (inet_pton(AF_INET, s, addr) == 1) {
		*family = AF_INET;
		return 0;
	}
	if (inet_pton(AF_INET6, s, addr) == 1) {
		*family = AF_INET6;
		return 0;
	}
	return -1;
}

/* entry is "ADDR/BITS" (netaddr.h's networks). */
static int
cidr_match(const char *entry, const char *host)
{
	struct cidr net;
	unsigned char ip[16];
	char why[128];
	int hf;

	if (cidr_parse(entry, strlen(entry), &net, why, sizeof(why)) != 0 ||
	    parse_ip(host, ip, &hf) != 0)
		return 0;
	return cidr_contains(&net, hf, ip);
}

static int
name_match(char *entry, const char *host)
{
	size_t elen, hlen = strlen(host);
	char *colon;

	if (strncmp(entry, "*.", 2) == 0)
		entry += 2;
	else if (entry[0] == '.')
		entry++;
	colon = strrchr(entry, ':');
	if (colon != NULL)
		*colon = '\0';	/* the port */
	elen = strlen(entry);
	if (elen > 0 && entry[elen - 1] == '.')
		entry[--elen] = '\0';
	if (hlen > 0 && host[hlen - 1] == '.')
		hlen--;
	if (elen == 0 || elen > hlen)
		return 0;
	if (strncasecmp(host + hlen - elen, entry, elen) != 0)
		return 0;
	return elen == hlen || host[hlen - elen - 1] == '.';
}

static int
entry_match(char *entry, const char *host)
{
	unsigned char a[16], b[16];
	int af, bf;

	if (strcmp(entry, "*") == 0)
		return 1;
	if (strchr(entry, '/') != NULL)
		return cidr_match(entry, host);
	if (parse_ip(entry, a, &af) == 0)
		return parse_ip(host, b, &bf) == 0 && af == bf &&
		    memcmp(a, b, af == AF_INET ? 4 : 16) == 0;
	return name_match(entry, host);
}

int
no_proxy_match(const char *list, const char *host)
{
	const char *p = list;

	if (list == NULL || host == NULL || host[0] == '\0')
		return 0;
	while (*p != '\0') {
		size_t n;
		char entry[ENTRY_MAX];

		p += strspn(p, ", \t");
		n = strcspn(p, ", \t");
		if (n > 0 && n < sizeof(entry)) {
			memcpy(entry, p, n);
			entry[n] = '\0';
			if (entry_match(entry, host))
				return 1;
		}
		p += n;
	}
	return 0;
}

char *
proxy_connect_request(const struct url *proxy, const char *host, unsigned int port,
    size_t *len)
{
	char cred[2 * URL_USERINFO_MAX + 2], b64[4 * ((sizeof(cred) + 2) / 3) + 1];
	char target[300], *req = NULL;
	int v6 = strchr(host, ':') != NULL, n;

	snprintf(target, sizeof(target), "%s%s%s:%u", v6 ? "[" : "", host, v6 ? "]" : "", port);
	b64[0] = '\0';
	if (proxy->has_userinfo) {
		n = snprintf(cred, sizeof(cred), "%s:%s", proxy->user, proxy->password);
		EVP_EncodeBlock((unsigned char *)b64, (const unsigned char *)cred, n);
		OPENSSL_cleanse(cred, sizeof(cred));
	}
	n = asprintf(&req, "CONNECT %s HTTP/1.1\r\nHost: %s\r\n%s%s%s\r\n", target, target,
	    b64[0] != '\0' ? "Proxy-Authorization: Basic " : "", b64,
	    b64[0] != '\0' ? "\r\n" : "");
	OPENSSL_cleanse(b64, sizeof(b64));
	if (n < 0)
		return NULL;
	*len = (size_t)n;
	return req;
}
