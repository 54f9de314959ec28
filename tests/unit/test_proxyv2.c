/*
 * test_proxyv2.c: the PROXY v2 header parser (common/proxyv2.c) and the
 * networks of --trusted-proxy (common/netaddr.c): TCP4 and TCP6 headers with and without TLVs, LOCAL,
 * headers arriving byte by byte, and every refusal with its reason.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <string.h>

#include "netaddr.h"
#include "proxyv2.h"

/* Builds a header: ver/cmd byte, family byte, body of blen bytes. */
static size_t
build(uint8_t *out, uint8_t vercmd, uint8_t fam, const uint8_t *body, size_t blen)
{
	memcpy(out, proxy_v2_sig, PROXY_V2_SIG_LEN);
	out[12] = vercmd;
	out[13] = fam;
	out[14] = (uint8_t)(blen >> 8);
	out[15] = (uint8_t)blen;
	if (blen > 0)
		memcpy(out + 16, body, blen);
	return 16 + blen;
}

static void
test_tcp4(void **state)
{
	/* 192.0.2.7:51000 -> 10.0.0.1:8080, a 7-byte TLV after the addresses,
	 * then the client's own bytes. */
	uint8_t body[19] = { 192, 0, 2, 7, 10, 0, 0, 1, 0xc7, 0x38, 0x1f, 0x90,
	    0x05, 0x00, 0x04, 'a', 'b', 'c', 'd' };
	uint8_t buf[64];
	struct proxy_v2 p;
	const struct sockaddr_in *s4 = (const struct sockaddr_in *)&p.src;
	char err[128], ip[INET_ADDRSTRLEN];
	size_t n = build(buf, 0x21, 0x11, body, sizeof(body)), need;

	(void)state;
	memcpy(buf + n, "\x16\x03\x01", 3);   /* a TLS record follows */
	/* Every prefix asks for more, never reads past len. */
	for (size_t len = 1; len < n; len++) {
		assert_int_equal(proxy_v2_parse(buf, len, &p, &need, err, sizeof(err)), 0);
		assert_true(need > len && need <= n);
	}
	assert_int_equal(proxy_v2_parse(buf, n + 3, &p, &need, err, sizeof(err)), 1);
	assert_int_equal(p.len, n);
	assert_int_equal(p.local, 0);
	assert_int_equal(s4->sin_family, AF_INET);
	assert_int_equal(ntohs(s4->sin_port), 51000);
	inet_ntop(AF_INET, &s4->sin_addr, ip, sizeof(ip));
	assert_string_equal(ip, "192.0.2.7");
}

static void
test_tcp6_and_local(void **state)
{
	uint8_t body[36] = { 0x20, 0x01, 0x0d, 0xb8 }, buf[64];
	struct proxy_v2 p;
	const struct sockaddr_in6 *s6 = (const struct sockaddr_in6 *)&p.src;
	char err[128];
	size_t n, need;

	(void)state;
	body[15] = 9;
	body[32] = 0x01;
	body[33] = 0xbb;
	n = build(buf, 0x21, 0x21, body, sizeof(body));
	assert_int_equal(proxy_v2_parse(buf, n, &p, &need, err, sizeof(err)), 1);
	assert_int_equal(s6->sin6_family, AF_INET6);
	assert_int_equal(ntohs(s6->sin6_port), 443);
	assert_int_equal(s6->sin6_addr.s6_addr[15], 9);

	/* LOCAL (a health check): no address, the connection's own stands. */
	n = build(buf, 0x20, 0x00, NULL, 0);
	assert_int_equal(proxy_v2_parse(buf, n, &p, &need, err, sizeof(err)), 1);
	assert_int_equal(p.local, 1);
	assert_int_equal(p.len, 16);
}

static void
expect_bad(const uint8_t *buf, size_t n, const char *reason)
{
	struct proxy_v2 p;
	char err[128];
	size_t need;

	assert_int_equal(proxy_v2_parse(buf, n, &p, &need, err, sizeof(err)), -1);
	if (strstr(err, reason) == NULL)
		fail_msg("\"%s\" does not say \"%s\"", err, reason);
}

static void
test_refusals(void **state)
{
	uint8_t body[40] = { 0 }, buf[2048];
	size_t n;

	(void)state;
	expect_bad((const uint8_t *)"GET / HTTP/1.1\r\n", 16, "wrong signature");
	expect_bad((const uint8_t *)"\r\nX", 3, "wrong signature");
	n = build(buf, 0x11, 0x11, body, 12);
	expect_bad(buf, n, "version is not 2");
	n = build(buf, 0x22, 0x11, body, 12);
	expect_bad(buf, n, "unknown command");
	n = build(buf, 0x21, 0x11, body, 11);
	expect_bad(buf, n, "TCP4 address block too short");
	n = build(buf, 0x21, 0x21, body, 35);
	expect_bad(buf, n, "TCP6 address block too short");
	n = build(buf, 0x21, 0x12, body, 12);   /* UDP */
	expect_bad(buf, n, "only TCP");
	n = build(buf, 0x21, 0x31, body, 40);   /* UNIX */
	expect_bad(buf, n, "only TCP");
	/* An over-long block is refused from its 16-byte head alone. */
	build(buf, 0x21, 0x11, NULL, 0);
	buf[14] = 0xff;
	buf[15] = 0xff;
	expect_bad(buf, 16, "longer than 1024 bytes");
	buf[14] = (PROXY_V2_MAX - 16 + 1) >> 8;
	buf[15] = (PROXY_V2_MAX - 16 + 1) & 0xff;
	expect_bad(buf, 16, "longer than 1024 bytes");
}

static void
test_cidr(void **state)
{
	struct cidr_list l;
	struct sockaddr_in s4 = { .sin_family = AF_INET };
	struct sockaddr_in6 s6 = { .sin6_family = AF_INET6 };
	char why[128];

	(void)state;
	assert_int_equal(cidr_list_parse("10.1.0.0/16, 127.0.0.3,fd00::/8", &l,
	    why, sizeof(why)), 0);
	assert_int_equal(l.n, 3);
	inet_pton(AF_INET, "10.1.200.3", &s4.sin_addr);
	assert_true(cidr_list_match(&l, (struct sockaddr *)&s4));
	inet_pton(AF_INET, "10.2.0.1", &s4.sin_addr);
	assert_false(cidr_list_match(&l, (struct sockaddr *)&s4));
	inet_pton(AF_INET, "127.0.0.3", &s4.sin_addr);
	assert_true(cidr_list_match(&l, (struct sockaddr *)&s4));
	inet_pton(AF_INET, "127.0.0.1", &s4.sin_addr);
	assert_false(cidr_list_match(&l, (struct sockaddr *)&s4));
	inet_pton(AF_INET6, "fd12::1", &s6.sin6_addr);
	assert_true(cidr_list_match(&l, (struct sockaddr *)&s6));
	inet_pton(AF_INET6, "fe80::1", &s6.sin6_addr);
	assert_false(cidr_list_match(&l, (struct sockaddr *)&s6));
	/* An IPv4-mapped IPv6 peer matches the IPv4 network. */
	inet_pton(AF_INET6, "::ffff:10.1.2.3", &s6.sin6_addr);
	assert_true(cidr_list_match(&l, (struct sockaddr *)&s6));
	/* Host bits are cleared; /0 matches everything of its family. */
	assert_int_equal(cidr_list_parse("10.1.2.3/8,::/0", &l, why, sizeof(why)), 0);
	inet_pton(AF_INET, "10.200.0.1", &s4.sin_addr);
	assert_true(cidr_list_match(&l, (struct sockaddr *)&s4));
	inet_pton(AF_INET6, "2001:db8::1", &s6.sin6_addr);
	assert_true(cidr_list_match(&l, (struct sockaddr *)&s6));

	assert_int_equal(cidr_list_parse("10.0.0.0/33", &l, why, sizeof(why)), -1);
	assert_non_null(strstr(why, "prefix length"));
	assert_int_equal(cidr_list_parse("lb.example", &l, why, sizeof(why)), -1);
	assert_non_null(strstr(why, "not an IPv4 or IPv6 address"));
	assert_int_equal(cidr_list_parse("10.0.0.1,", &l, why, sizeof(why)), -1);
	assert_int_equal(cidr_list_parse("10.0.0.1/", &l, why, sizeof(why)), -1);
	assert_int_equal(cidr_list_parse("", &l, why, sizeof(why)), -1);
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_tcp4),
		cmocka_unit_test(test_tcp6_and_local),
		cmocka_unit_test(test_refusals),
		cmocka_unit_test(test_cidr),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
