/*
 * proxy.c: NO_PROXY matching, the CONNECT request and the proxy's answer
 * (see proxy.h).
 */
#include "proxy.h"

#include <arpa/inet.h>
#include <ctype.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include <openssl/crypto.h>
#include <openssl/evp.h>

#include "netaddr.h"
#include "printable.h"

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

const char *const proxy_auth_names[] = { "basic", "ntlm", "negotiate", NULL };

char *
proxy_connect_request(const struct url *proxy, const char *host, unsigned int port,
    const char *authorization, size_t *len)
{
	char cred[2 * URL_USERINFO_MAX + 2], b64[4 * ((sizeof(cred) + 2) / 3) + 1];
	char target[300], *req = NULL;
	const char *scheme = "", *value = "";
	int v6 = strchr(host, ':') != NULL, n;

	if (authorization != NULL) {
		for (const char *p = authorization; *p != '\0'; p++)
			if ((unsigned char)*p < 0x20 || (unsigned char)*p > 0x7e)
				return NULL;
		value = authorization;
	}
	snprintf(target, sizeof(target), "%s%s%s:%u", v6 ? "[" : "", host, v6 ? "]" : "", port);
	b64[0] = '\0';
	if (authorization == NULL && proxy->has_userinfo) {
		n = snprintf(cred, sizeof(cred), "%s:%s", proxy->user, proxy->password);
		EVP_EncodeBlock((unsigned char *)b64, (const unsigned char *)cred, n);
		OPENSSL_cleanse(cred, sizeof(cred));
		scheme = "Basic ";
		value = b64;
	}
	n = asprintf(&req, "CONNECT %s HTTP/1.1\r\nHost: %s\r\n"
	    "Proxy-Connection: keep-alive\r\n%s%s%s%s\r\n", target, target,
	    value[0] != '\0' ? "Proxy-Authorization: " : "", scheme, value,
	    value[0] != '\0' ? "\r\n" : "");
	OPENSSL_cleanse(b64, sizeof(b64));
	if (n < 0)
		return NULL;
	*len = (size_t)n;
	return req;
}

/* ---- the proxy's answer ---- */

static void
why_set(char *why, size_t whylen, const char *fmt, const char *arg)
{
	snprintf(why, whylen, fmt, arg);
}

/* Does the comma-separated header value list token (without case)? */
static int
value_lists(const char *v, size_t vlen, const char *token)
{
	size_t tlen = strlen(token), i = 0;

	while (i < vlen) {
		size_t start, end;

		while (i < vlen && (v[i] == ',' || v[i] == ' ' || v[i] == '\t'))
			i++;
		start = i;
		while (i < vlen && v[i] != ',')
			i++;
		end = i;
		while (end > start && (v[end - 1] == ' ' || v[end - 1] == '\t'))
			end--;
		if (end - start == tlen && strncasecmp(v + start, token, tlen) == 0)
			return 1;
	}
	return 0;
}

static int
is_b64(int ch)
{
	return isalnum(ch) || ch == '+' || ch == '/' || ch == '=';
}

/*
 * One Proxy-Authenticate value: "Scheme [token-or-params]" (one challenge
 * per header, as proxies send them; a value listing several challenges
 * separated by commas is read for its first scheme and Basic's realm).
 */
static int
read_challenge(const char *v, size_t vlen, enum proxy_auth want,
    struct proxy_answer *a, char *why, size_t whylen)
{
	size_t n = 0, t, i;
	int scheme = -1;

	while (n < vlen && v[n] != ' ' && v[n] != '\t' && v[n] != ',')
		n++;
	for (i = 0; proxy_auth_names[i] != NULL; i++)
		if (strlen(proxy_auth_names[i]) == n &&
		    strncasecmp(v, proxy_auth_names[i], n) == 0)
			scheme = (int)i;
	if (scheme < 0)
		return 0;   /* Digest and others: not offered to us */
	a->offers |= 1u << scheme;
	if (scheme != (int)want || scheme == PROXY_AUTH_BASIC)
		return 0;
	while (n < vlen && (v[n] == ' ' || v[n] == '\t'))
		n++;
	t = vlen - n;
	while (t > 0 && (v[n + t - 1] == ' ' || v[n + t - 1] == '\t'))
		t--;
	if (t == 0)
		return 0;   /* the scheme alone: an offer, no token */
	if (t > PROXY_TOKEN_MAX) {
		why_set(why, whylen, "a %s token over 6144 bytes",
		    proxy_auth_names[scheme]);
		return -1;
	}
	for (i = 0; i < t; i++)
		if (!is_b64((unsigned char)v[n + i])) {
			why_set(why, whylen, "a %s token that is not base64",
			    proxy_auth_names[scheme]);
			return -1;
		}
	if (a->has_token) {
		why_set(why, whylen, "two %s tokens", proxy_auth_names[scheme]);
		return -1;
	}
	memcpy(a->token, v + n, t);
	a->token[t] = '\0';
	a->has_token = 1;
	return 0;
}

/* One header line (without its line end). */
static int
read_header(const char *line, size_t len, enum proxy_auth want,
    struct proxy_answer *a, int *keep_alive, char *why, size_t whylen)
{
	const char *colon = memchr(line, ':', len), *v;
	size_t nlen, vlen;

	if (colon == NULL || colon == line) {
		why_set(why, whylen, "%s", "a header line without a name and colon");
		return -1;
	}
	nlen = (size_t)(colon - line);
	v = colon + 1;
	vlen = len - nlen - 1;
	while (vlen > 0 && (*v == ' ' || *v == '\t')) {
		v++;
		vlen--;
	}
	while (vlen > 0 && (v[vlen - 1] == ' ' || v[vlen - 1] == '\t'))
		vlen--;
#define NAME_IS(s) (nlen == sizeof(s) - 1 && strncasecmp(line, s, nlen) == 0)
	if (NAME_IS("Content-Length")) {
		long long cl = 0;

		if (a->content_length >= 0 || vlen == 0 || vlen > 12) {
			why_set(why, whylen, "%s", "a bad or repeated Content-Length");
			return -1;
		}
		for (size_t i = 0; i < vlen; i++) {
			if (!isdigit((unsigned char)v[i])) {
				why_set(why, whylen, "%s", "a bad Content-Length");
				return -1;
			}
			cl = cl * 10 + (v[i] - '0');
		}
		a->content_length = cl;
	} else if (NAME_IS("Transfer-Encoding")) {
		if (value_lists(v, vlen, "chunked"))
			a->chunked = 1;
	} else if (NAME_IS("Connection") || NAME_IS("Proxy-Connection")) {
		if (value_lists(v, vlen, "close"))
			a->closes = 1;
		if (value_lists(v, vlen, "keep-alive"))
			*keep_alive = 1;
	} else if (NAME_IS("Proxy-Authenticate"))
		return read_challenge(v, vlen, want, a, why, whylen);
#undef NAME_IS
	return 0;
}

int
proxy_answer_parse(const char *head, size_t len, enum proxy_auth want,
    struct proxy_answer *a, char *status_line, size_t sllen, char *why,
    size_t whylen)
{
	size_t i = 0, eol;
	int keep_alive = 0, http10, lines = 0;

	memset(a, 0, offsetof(struct proxy_answer, token));
	a->token[0] = '\0';
	a->content_length = -1;
	if (sllen > 0)
		status_line[0] = '\0';
	if (len > PROXY_HEAD_MAX || memchr(head, '\0', len) != NULL) {
		why_set(why, whylen, "%s", len > PROXY_HEAD_MAX ?
		    "an answer head over 8192 bytes" : "a NUL byte in the answer");
		return -1;
	}
	eol = 0;
	while (eol < len && head[eol] != '\n')
		eol++;
	{
		size_t sl = eol > 0 && head[eol - 1] == '\r' ? eol - 1 : eol;

		if (sllen > 0)
			text_printable(status_line, sllen, head, sl);
		if (sl < 12 || strncmp(head, "HTTP/1.", 7) != 0 ||
		    (head[7] != '0' && head[7] != '1') || head[8] != ' ' ||
		    !isdigit((unsigned char)head[9]) || !isdigit((unsigned char)head[10]) ||
		    !isdigit((unsigned char)head[11]) || (sl > 12 && head[12] != ' ') ||
		    head[9] < '1' || head[9] > '5') {
			why_set(why, whylen, "%s", "no HTTP/1.x status line");
			return -1;
		}
		a->status = (head[9] - '0') * 100 + (head[10] - '0') * 10 + (head[11] - '0');
		http10 = head[7] == '0';
	}
	i = eol + 1;
	while (i < len) {
		size_t l;

		eol = i;
		while (eol < len && head[eol] != '\n')
			eol++;
		l = eol - i;
		if (l > 0 && head[i + l - 1] == '\r')
			l--;
		if (l == 0)
			break;   /* the empty line: the head ends */
		if (++lines > 100) {
			why_set(why, whylen, "%s", "over 100 header lines");
			return -1;
		}
		if (read_header(head + i, l, want, a, &keep_alive, why, whylen) != 0)
			return -1;
		i = eol + 1;
	}
	if (http10 && !keep_alive)
		a->closes = 1;
	return 0;
}
