/*
 * proxyv2.c: the PROXY protocol v2 header (see proxyv2.h).  The layout (haproxy's proxy-protocol.txt, section 2.2):
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
