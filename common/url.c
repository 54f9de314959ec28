/*
 * url.c: parsing user-given URLs (see url.h).  Pure: no I/O, no heap.
 */
#include "url.h"

#include <arpa/inet.h>
#include <ctype.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>

#include <openssl/crypto.h>

#include "hostname.h"

static const struct {
	const char *name;
	unsigned int port;
} default_ports[] = {
	{ "http", 80 }, { "https", 443 }, { "ws", 80 }, { "wss", 443 },
};

static int
host_is_ipv4(const char *host)
{
	struct in_addr a;

	return inet_pton(AF_INET, host, &a) == 1;
}

/* Percent-decodes n bytes of s into out (outlen bytes with the NUL). */
static int
decode(const char *s, size_t n, char *out, size_t outlen, char *why, size_t whylen)
{
	size_t o = 0;

	for (size_t i = 0; i < n; i++) {
		int c = (unsigned char)s[i];

		if (c == '%') {
			int hi = i + 2 < n ? OPENSSL_hexchar2int((unsigned char)s[i + 1]) : -1;
			int lo = i + 2 < n ? OPENSSL_hexchar2int((unsigned char)s[i + 2]) : -1;

			if (hi < 0 || lo < 0) {
				snprintf(why, whylen, "bad %%-escape in the user information");
				return -1;
			}
			c = hi * 16 + lo;
			i += 2;
			if (c < 0x20 || c == 0x7f) {
				snprintf(why, whylen, "the user information decodes to a "
				    "control character");
				return -1;
			}
		}
		if (o + 1 >= outlen) {
			snprintf(why, whylen, "user information longer than %zu bytes",
			    outlen - 1);
			return -1;
		}
		out[o++] = (char)c;
	}
	out[o] = '\0';
	return 0;
}

static int
parse_scheme(const char *s, const char *const *schemes, struct url *u,
    const char **rest, char *why, size_t whylen)
{
	const char *sep = strstr(s, "://");
	size_t n = sep != NULL ? (size_t)(sep - s) : 0;

	if (sep == NULL || n == 0 || n >= sizeof(u->scheme)) {
		snprintf(why, whylen, "wants scheme://host[:port]");
		return -1;
	}
	for (size_t i = 0; schemes[i] != NULL; i++) {
		if (strlen(schemes[i]) == n && strncasecmp(s, schemes[i], n) == 0) {
			for (size_t j = 0; j < n; j++)
				u->scheme[j] = (char)tolower((unsigned char)s[j]);
			u->scheme[n] = '\0';
			*rest = sep + 3;
			return 0;
		}
	}
	snprintf(why, whylen, "unsupported scheme \"%.*s\"", (int)n, s);
	return -1;
}

static int
parse_userinfo(const char *p, size_t n, struct url *u, char *why, size_t whylen)
{
	const char *colon = memchr(p, ':', n);
	size_t ulen = colon != NULL ? (size_t)(colon - p) : n;

	u->has_userinfo = 1;
	if (decode(p, ulen, u->user, sizeof(u->user), why, whylen) != 0)
		return -1;
	if (colon != NULL && decode(colon + 1, n - ulen - 1, u->password,
	    sizeof(u->password), why, whylen) != 0)
		return -1;
	return 0;
}

/* host[:port] or [v6][:port], n bytes of p. */
static int
parse_hostport(const char *p, size_t n, struct url *u, char *why, size_t whylen)
{
	const char *port = NULL, *end = p + n;
	size_t hlen;

	if (n > 0 && p[0] == '[') {
		const char *close = memchr(p, ']', n);

		if (close == NULL) {
			snprintf(why, whylen, "unterminated [IPv6] host");
			return -1;
		}
		hlen = (size_t)(close - p) + 1;
		if (close + 1 < end) {
			if (close[1] != ':') {
				snprintf(why, whylen, "garbage after ] in the host");
				return -1;
			}
			port = close + 2;
		}
	} else {
		const char *colon = memchr(p, ':', n);

		hlen = colon != NULL ? (size_t)(colon - p) : n;
		if (colon != NULL)
			port = colon + 1;
	}
	if (hlen == 0 || !host_valid(p, hlen)) {
		snprintf(why, whylen, "bad or missing host");
		return -1;
	}
	u->host_is_ipv6 = p[0] == '[';
	if (u->host_is_ipv6)
		snprintf(u->host, sizeof(u->host), "%.*s", (int)(hlen - 2), p + 1);
	else
		snprintf(u->host, sizeof(u->host), "%.*s", (int)hlen, p);
	if (port != NULL) {
		u->port = port_parse(port, (size_t)(end - port));
		if (u->port == 0) {
			snprintf(why, whylen, "bad port");
			return -1;
		}
		u->port_given = 1;
	}
	u->host_is_ip = u->host_is_ipv6 || host_is_ipv4(u->host);
	return 0;
}

int
url_parse(const char *s, const char *const *schemes, struct url *u, char *why,
    size_t whylen)
{
	const char *auth, *auth_end, *at;
	size_t len = strlen(s);

	memset(u, 0, sizeof(*u));
	if (len > URL_MAX - 1) {
		snprintf(why, whylen, "URL longer than %d bytes", URL_MAX - 1);
		return -1;
	}
	for (size_t i = 0; i < len; i++) {
		unsigned char c = (unsigned char)s[i];

		if (c <= 0x20 || c >= 0x7f) {
			snprintf(why, whylen, "space or control byte in the URL");
			return -1;
		}
	}
	if (strchr(s, '#') != NULL) {
		snprintf(why, whylen, "a URL here has no #fragment");
		return -1;
	}
	if (parse_scheme(s, schemes, u, &auth, why, whylen) != 0)
		return -1;
	for (size_t i = 0; i < sizeof(default_ports) / sizeof(default_ports[0]); i++)
		if (strcmp(u->scheme, default_ports[i].name) == 0)
			u->port = default_ports[i].port;
	auth_end = auth + strcspn(auth, "/?");
	at = NULL;
	for (const char *p = auth; p < auth_end; p++)
		if (*p == '@')
			at = p;	/* the last '@': passwords may hold an unescaped one */
	if (at != NULL) {
		if (parse_userinfo(auth, (size_t)(at - auth), u, why, whylen) != 0)
			goto fail;
		auth = at + 1;
	}
	if (parse_hostport(auth, (size_t)(auth_end - auth), u, why, whylen) != 0)
		goto fail;
	if (u->port == 0) {
		snprintf(why, whylen, "no port and no default port for %s", u->scheme);
		goto fail;
	}
	snprintf(u->path, sizeof(u->path), "%s%s", *auth_end == '/' ? "" : "/", auth_end);
	return 0;
fail:
	url_clear(u);
	return -1;
}

void
url_clear(struct url *u)
{
	OPENSSL_cleanse(u, sizeof(*u));
}

void
url_display(const struct url *u, char *buf, size_t len)
{
	snprintf(buf, len, "%s://%s%s%s:%u", u->scheme, u->host_is_ipv6 ? "[" : "",
	    u->host, u->host_is_ipv6 ? "]" : "", u->port);
}

int
url_is_origin(const struct url *u)
{
	return strcmp(u->path, "/") == 0;
}

int
url_authority(const struct url *u, char *buf, size_t len)
{
	char port[8] = "";
	int n;

	if (u->port_given)
		snprintf(port, sizeof(port), ":%u", u->port);
	n = snprintf(buf, len, "%s%s%s%s", u->host_is_ipv6 ? "[" : "", u->host,
	    u->host_is_ipv6 ? "]" : "", port);
	if (n < 0 || (size_t)n >= len) {
		if (len > 0)
			buf[0] = '\0';
		return -1;
	}
	return n;
}

int
url_origin(const struct url *u, char *buf, size_t len)
{
	int n = snprintf(buf, len, "%s://", u->scheme);

	if (n < 0 || (size_t)n >= len || url_authority(u, buf + n, len - (size_t)n) < 0) {
		if (len > 0)
			buf[0] = '\0';
		return -1;
	}
	return (int)strlen(buf);
}
