/*
 * proxyv2.c: the PROXY protocol v2 header and trusted source lists (see
 * proxyv2.h).  The layout (haproxy's proxy-protocol.txt, section 2.2):
 *
 *   12 bytes  signature \r\n\r\n\0\r\nQUIT\n
 *    1 byte   version (high nibble, 2) and command (low: 0 LOCAL, 1 PROXY)
 *    1 byte   family (high: 0 UNSPEC, 1 INET, 2 INET6, 3 UNIX) and
 *             protocol (low: 0 UNSPEC, 1 STREAM, 2 DGRAM)
 *    2 bytes  length of what follows, big-endian
 *   then      TCP4: src(4) dst(4) sport(2) dport(2); TCP6: 16 16 2 2;
 *             then TLVs up to the length (skipped).
 */
#include "proxyv2.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

const uint8_t proxy_v2_sig[PROXY_V2_SIG_LEN] = {
	0x0d, 0x0a, 0x0d, 0x0a, 0x00, 0x0d, 0x0a, 0x51, 0x55, 0x49, 0x54, 0x0a
};

static int
bad(char *err, size_t errlen, const char *reason)
{
	snprintf(err, errlen, "PROXY v2 header: %s", reason);
	return -1;
}

int
proxy_v2_parse(const uint8_t *buf, size_t len, struct proxy_v2 *out,
    size_t *need, char *err, size_t errlen)
{
	size_t n = len < PROXY_V2_SIG_LEN ? len : PROXY_V2_SIG_LEN, body, total;
	uint8_t cmd, fam;

	memset(out, 0, sizeof(*out));
	*need = PROXY_V2_HEAD_LEN;
	if (memcmp(buf, proxy_v2_sig, n) != 0)
		return bad(err, errlen, "wrong signature");
	if (len < PROXY_V2_HEAD_LEN)
		return 0;
	if ((buf[12] >> 4) != 2)
		return bad(err, errlen, "version is not 2");
	cmd = buf[12] & 0x0f;
	if (cmd > 1)
		return bad(err, errlen, "unknown command");
	fam = buf[13];
	body = (size_t)buf[14] << 8 | buf[15];
	total = PROXY_V2_HEAD_LEN + body;
	if (total > PROXY_V2_MAX)
		return bad(err, errlen, "longer than 1024 bytes");
	*need = total;
	if (len < total)
		return 0;
	out->len = total;
	if (cmd == 0 || fam == 0x00) {      /* LOCAL, or PROXY UNSPEC */
		out->local = 1;
		return 1;
	}
	if (fam == 0x11) {                  /* TCP over IPv4 */
		struct sockaddr_in *s4 = (struct sockaddr_in *)&out->src;

		if (body < 12)
			return bad(err, errlen, "TCP4 address block too short");
		s4->sin_family = AF_INET;
		memcpy(&s4->sin_addr, buf + 16, 4);
		memcpy(&s4->sin_port, buf + 24, 2);
		return 1;
	}
	if (fam == 0x21) {                  /* TCP over IPv6 */
		struct sockaddr_in6 *s6 = (struct sockaddr_in6 *)&out->src;

		if (body < 36)
			return bad(err, errlen, "TCP6 address block too short");
		s6->sin6_family = AF_INET6;
		memcpy(&s6->sin6_addr, buf + 16, 16);
		memcpy(&s6->sin6_port, buf + 48, 2);
		return 1;
	}
	return bad(err, errlen, "only TCP over IPv4 or IPv6 is accepted");
}

/* ---- trusted sources ---- */

static int
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

static int
cidr_has(const struct cidr *c, int family, const uint8_t *addr)
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
		if (cidr_has(&l->net[i], family, addr))
			return 1;
	return 0;
}
