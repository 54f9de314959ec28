/*
 * test_proxy.c: the one URL parser (common/url.c) with the proxy's schemes
 * and with the gateway's (https, wss, ws), NO_PROXY matching and the
 * CONNECT request (common/proxy.c).
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "proxy.h"
#include "proxyauth.h"
#include "url.h"

static void
parse_ok(const char *s, struct url *u)
{
	char why[256] = "";

	if (url_parse(s, proxy_url_schemes, u, why, sizeof(why)) != 0)
		fail_msg("%s: %s", s, why);
}

static void
parse_bad(const char *s, const char *want)
{
	struct url u;
	char why[256] = "";

	assert_int_equal(url_parse(s, proxy_url_schemes, &u, why, sizeof(why)), -1);
	if (strstr(why, want) == NULL)
		fail_msg("%s: reason \"%s\" lacks \"%s\"", s, why, want);
}

static void
test_url_parse(void **state)
{
	struct url u;
	char disp[300];

	parse_ok("http://proxy.example.com:3128", &u);
	assert_string_equal(u.scheme, "http");
	assert_string_equal(u.host, "proxy.example.com");
	assert_int_equal(u.port, 3128);
	assert_int_equal(u.has_userinfo, 0);
	assert_string_equal(u.path, "/");

	parse_ok("HTTPS://proxy.example.com/", &u);
	assert_string_equal(u.scheme, "https");
	assert_int_equal(u.port, 443);

	parse_ok("http://proxy:80", &u);
	assert_int_equal(u.port, 80);

	/* Percent-decoded user information; the last '@' ends it. */
	parse_ok("http://us%40er:p%3Ass@w@10.0.0.1:8080/x?y=1", &u);
	assert_int_equal(u.has_userinfo, 1);
	assert_string_equal(u.user, "us@er");
	assert_string_equal(u.password, "p:ss@w");
	assert_string_equal(u.host, "10.0.0.1");
	assert_string_equal(u.path, "/x?y=1");

	parse_ok("http://alice@[::1]:3128", &u);
	assert_string_equal(u.user, "alice");
	assert_string_equal(u.password, "");
	assert_string_equal(u.host, "::1");
	assert_int_equal(u.host_is_ipv6, 1);
	url_display(&u, disp, sizeof(disp));
	assert_string_equal(disp, "http://[::1]:3128");
	url_clear(&u);
	assert_string_equal(u.password, "");

	parse_bad("socks5://proxy:1080", "unsupported scheme");
	parse_bad("proxy:3128", "scheme://");
	parse_bad("http://", "host");
	parse_bad("http://proxy:0", "bad port");
	parse_bad("http://proxy:65536", "bad port");
	parse_bad("http://proxy:31x", "bad port");
	parse_bad("http://pro xy:3128", "space");
	parse_bad("http://proxy\r\n:3128", "control");
	parse_bad("http://proxy#frag", "fragment");
	parse_bad("http://a:b%0d@proxy", "control");
	parse_bad("http://a:b%4@proxy", "escape");
	parse_bad("http://a:b%@proxy", "escape");
	parse_bad("http://[::1:3128", "unterminated");
	parse_bad("http://[::1]x:3128", "garbage");
	parse_bad("http://bad_host!:3128", "host");
}

/* What the gateway URL, the WebSocket client and the agent read. */
static void
test_url_origin(void **state)
{
	static const char *const https[] = { "https", NULL };
	static const char *const ws[] = { "wss", "ws", NULL };
	char why[256] = "", buf[300];
	struct url u;

	(void)state;
	assert_int_equal(url_parse("HTTPS://Gw.example:8443/", https, &u, why,
	    sizeof(why)), 0);
	assert_int_equal(u.port_given, 1);
	assert_int_equal(u.host_is_ip, 0);
	assert_int_equal(url_is_origin(&u), 1);
	assert_int_equal(url_origin(&u, buf, sizeof(buf)), 23);
	assert_string_equal(buf, "https://Gw.example:8443");

	/* No port named: none written; the scheme's default is the port. */
	assert_int_equal(url_parse("https://[::1]", https, &u, why, sizeof(why)), 0);
	assert_int_equal(u.port_given, 0);
	assert_int_equal(u.port, 443);
	assert_int_equal(u.host_is_ip, 1);
	assert_int_equal(url_authority(&u, buf, sizeof(buf)), 5);
	assert_string_equal(buf, "[::1]");
	assert_int_equal(url_authority(&u, buf, 5), -1);
	assert_string_equal(buf, "");

	assert_int_equal(url_parse("https://10.1.2.3:9/x", https, &u, why,
	    sizeof(why)), 0);
	assert_int_equal(u.host_is_ip, 1);
	assert_int_equal(url_is_origin(&u), 0);
	assert_int_equal(url_parse("https://h?q", https, &u, why, sizeof(why)), 0);
	assert_int_equal(url_is_origin(&u), 0);

	assert_int_equal(url_parse("wss://gw:8443/v1/connect?x=1", ws, &u, why,
	    sizeof(why)), 0);
	assert_string_equal(u.scheme, "wss");
	assert_string_equal(u.path, "/v1/connect?x=1");
	assert_int_equal(url_parse("ws://gw?x", ws, &u, why, sizeof(why)), 0);
	assert_int_equal(u.port, 80);
	assert_string_equal(u.path, "/?x");

	assert_int_equal(url_parse("http://gw", https, &u, why, sizeof(why)), -1);
	assert_non_null(strstr(why, "unsupported scheme"));
	assert_int_equal(url_parse("https://gw:99999", https, &u, why, sizeof(why)), -1);
	assert_non_null(strstr(why, "bad port"));
	url_clear(&u);
}

static void
test_no_proxy(void **state)
{
	assert_true(no_proxy_match("*", "anything.example"));
	assert_true(no_proxy_match("localhost, example.com", "example.com"));
	assert_true(no_proxy_match("example.com", "gw.example.com"));
	assert_true(no_proxy_match("example.com", "GW.Example.COM."));
	assert_true(no_proxy_match(".example.com", "gw.example.com"));
	assert_true(no_proxy_match(".example.com", "example.com"));
	assert_true(no_proxy_match("*.example.com", "a.b.example.com"));
	assert_false(no_proxy_match("example.com", "notexample.com"));
	assert_false(no_proxy_match("example.com", "example.com.evil"));
	assert_false(no_proxy_match("gw.example.com", "example.com"));
	assert_true(no_proxy_match("example.com:8443", "gw.example.com"));
	assert_true(no_proxy_match("10.0.0.0/8", "10.200.3.4"));
	assert_false(no_proxy_match("10.0.0.0/8", "11.0.0.1"));
	assert_true(no_proxy_match("192.168.1.0/23", "192.168.0.9"));
	assert_false(no_proxy_match("192.168.1.0/24", "192.168.0.9"));
	assert_true(no_proxy_match("0.0.0.0/0", "203.0.113.9"));
	assert_false(no_proxy_match("10.0.0.0/8", "gw.example.com"));
	assert_false(no_proxy_match("10.0.0.0/33", "10.0.0.1"));
	assert_true(no_proxy_match("fd00::/8", "fd12::1"));
	assert_false(no_proxy_match("fd00::/8", "fe80::1"));
	assert_false(no_proxy_match("fd00::/8", "10.0.0.1"));
	assert_true(no_proxy_match("127.0.0.1", "127.0.0.1"));
	assert_false(no_proxy_match("127.0.0.1", "127.0.0.2"));
	assert_true(no_proxy_match("[::1]", "::1"));
	assert_true(no_proxy_match("::1", "::1"));
	assert_true(no_proxy_match(" a.test ,\t b.test ", "b.test"));
	assert_false(no_proxy_match("", "example.com"));
	assert_false(no_proxy_match(",,, ,", "example.com"));
	assert_false(no_proxy_match(NULL, "example.com"));
	assert_false(no_proxy_match(".", "example.com"));
}

static void
test_connect_request(void **state)
{
	struct url u;
	size_t len;
	char *req;

	parse_ok("http://proxy:3128", &u);
	req = proxy_connect_request(&u, "gw.example.com", 8443, NULL, &len);
	assert_non_null(req);
	assert_string_equal(req, "CONNECT gw.example.com:8443 HTTP/1.1\r\n"
	    "Host: gw.example.com:8443\r\nProxy-Connection: keep-alive\r\n\r\n");
	assert_int_equal(len, strlen(req));
	free(req);

	/* Aladdin:open sesame, RFC 7617's example. */
	parse_ok("http://Aladdin:open%20sesame@proxy:3128", &u);
	req = proxy_connect_request(&u, "::1", 443, NULL, &len);
	assert_non_null(req);
	assert_string_equal(req, "CONNECT [::1]:443 HTTP/1.1\r\nHost: [::1]:443\r\n"
	    "Proxy-Connection: keep-alive\r\n"
	    "Proxy-Authorization: Basic QWxhZGRpbjpvcGVuIHNlc2FtZQ==\r\n\r\n");
	free(req);

	/* A scheme's token instead of Basic; no header injection. */
	req = proxy_connect_request(&u, "gw", 443, "NTLM TlRMTVNTUAAB", &len);
	assert_non_null(req);
	assert_non_null(strstr(req, "\r\nProxy-Authorization: NTLM TlRMTVNTUAAB\r\n\r\n"));
	assert_null(strstr(req, "Basic"));
	free(req);
	assert_null(proxy_connect_request(&u, "gw", 443, "NTLM x\r\nX-Evil: 1", &len));
	url_clear(&u);
}

static int
answer(const char *head, enum proxy_auth want, struct proxy_answer *a, char *why)
{
	char sl[128];

	why[0] = '\0';
	return proxy_answer_parse(head, strlen(head), want, a, sl, sizeof(sl), why, 256);
}

static void
test_answer_parse(void **state)
{
	static struct proxy_answer a;
	static char big[PROXY_HEAD_MAX + 200];
	char why[256], sl[16];

	assert_int_equal(answer("HTTP/1.1 200 Connection established\r\n\r\n",
	    PROXY_AUTH_BASIC, &a, why), 0);
	assert_int_equal(a.status, 200);
	assert_int_equal(a.content_length, -1);
	assert_false(a.closes);

	/* squid's 407 to an NTLM type 1: the token, the length, keep-alive. */
	assert_int_equal(answer("HTTP/1.1 407 Proxy Authentication Required\r\n"
	    "Server: squid\r\nProxy-Authenticate: Negotiate\r\n"
	    "Proxy-Authenticate: NTLM TlRMTVNTUAACAAAA\r\n"
	    "proxy-authenticate: basic realm=\"Squid\"\r\n"
	    "Content-Length: 12\r\nProxy-Connection: keep-alive\r\n\r\n",
	    PROXY_AUTH_NTLM, &a, why), 0);
	assert_int_equal(a.status, 407);
	assert_int_equal(a.content_length, 12);
	assert_false(a.closes);
	assert_int_equal(a.offers, 7);
	assert_true(a.has_token);
	assert_string_equal(a.token, "TlRMTVNTUAACAAAA");

	/* The token of another scheme is not kept; an offer alone has none. */
	assert_int_equal(answer("HTTP/1.1 407 x\nProxy-Authenticate: NTLM abc=\n"
	    "Connection: close\n\n", PROXY_AUTH_NEGOTIATE, &a, why), 0);
	assert_false(a.has_token);
	assert_true(a.closes);
	assert_int_equal(answer("HTTP/1.0 407 x\r\nProxy-Authenticate: NTLM\r\n\r\n",
	    PROXY_AUTH_NTLM, &a, why), 0);
	assert_false(a.has_token);
	assert_true(a.closes);   /* HTTP/1.0 without keep-alive */

	/* Refused, with a reason. */
	assert_int_equal(answer("HTTP/2 200\r\n\r\n", PROXY_AUTH_BASIC, &a, why), -1);
	assert_string_equal(why, "no HTTP/1.x status line");
	assert_int_equal(answer("HTTP/1.1 200 OK\r\nno colon\r\n\r\n",
	    PROXY_AUTH_BASIC, &a, why), -1);
	assert_int_equal(answer("HTTP/1.1 407 x\r\nContent-Length: 1\r\n"
	    "Content-Length: 1\r\n\r\n", PROXY_AUTH_BASIC, &a, why), -1);
	assert_int_equal(answer("HTTP/1.1 407 x\r\nContent-Length: -1\r\n\r\n",
	    PROXY_AUTH_BASIC, &a, why), -1);
	assert_int_equal(answer("HTTP/1.1 407 x\r\nProxy-Authenticate: NTLM a b\r\n\r\n",
	    PROXY_AUTH_NTLM, &a, why), -1);
	assert_string_equal(why, "a ntlm token that is not base64");
	assert_int_equal(answer("HTTP/1.1 407 x\r\nProxy-Authenticate: NTLM a\r\n"
	    "Proxy-Authenticate: NTLM b\r\n\r\n", PROXY_AUTH_NTLM, &a, why), -1);
	snprintf(big, sizeof(big), "HTTP/1.1 407 x\r\nProxy-Authenticate: NTLM ");
	memset(big + strlen(big), 'A', PROXY_TOKEN_MAX + 1);
	assert_int_equal(answer(big, PROXY_AUTH_NTLM, &a, why), -1);
	assert_string_equal(why, "a ntlm token over 6144 bytes");
	assert_int_equal(proxy_answer_parse("HTTP/1.1 200 OK\r\n\0\r\n", 21,
	    PROXY_AUTH_BASIC, &a, sl, sizeof(sl), why, sizeof(why)), -1);
	assert_int_equal(proxy_answer_parse(big, PROXY_HEAD_MAX + 1, PROXY_AUTH_BASIC,
	    &a, sl, sizeof(sl), why, sizeof(why)), -1);
}

/* The authentication's steps: what it sends, and why it stops. */
static void
test_authn_steps(void **state)
{
	static struct proxy_answer a;
	struct proxy_authn *au;
	char why[300], *value;

	/* NTLM needs a user. */
	assert_null(proxy_authn_new(PROXY_AUTH_NTLM, "", "pw", "proxy", why, sizeof(why)));
	assert_non_null(strstr(why, "NTLM needs a user"));

	au = proxy_authn_new(PROXY_AUTH_NTLM, "CORP\\alice", "pw", "proxy", why,
	    sizeof(why));
	assert_non_null(au);
	assert_int_equal(proxy_authn_next(au, NULL, &value, why, sizeof(why)), 0);
	/* NEGOTIATE_MESSAGE: "NTLMSSP\0" then type 1 in base64. */
	assert_true(strncmp(value, "NTLM TlRMTVNTUAABAAAA", 21) == 0);
	free(value);
	/* A proxy that offers only Basic: named in the refusal. */
	assert_int_equal(answer("HTTP/1.1 407 x\r\nProxy-Authenticate: Basic "
	    "realm=\"x\"\r\nContent-Length: 0\r\n\r\n", PROXY_AUTH_NTLM, &a, why), 0);
	assert_int_equal(proxy_authn_next(au, &a, &value, why, sizeof(why)), 1);
	assert_string_equal(why, "the proxy does not offer NTLM (it offers basic)");
	/* Offered, but no challenge came with it. */
	assert_int_equal(answer("HTTP/1.1 407 x\r\nProxy-Authenticate: NTLM\r\n"
	    "Content-Length: 0\r\n\r\n", PROXY_AUTH_NTLM, &a, why), 0);
	assert_int_equal(proxy_authn_next(au, &a, &value, why, sizeof(why)), 1);
	assert_non_null(strstr(why, "without a challenge"));
	/* A challenge that is not a type-2 message: an error. */
	assert_int_equal(answer("HTTP/1.1 407 x\r\nProxy-Authenticate: NTLM "
	    "QUJDRA==\r\nContent-Length: 0\r\n\r\n", PROXY_AUTH_NTLM, &a, why), 0);
	assert_int_equal(proxy_authn_next(au, &a, &value, why, sizeof(why)), -1);
	assert_string_equal(why, "NTLM challenge: not an NTLMSSP type-2 message");
	proxy_authn_free(au);

	/* Basic: the URL's credentials once, then the refusal as it is. */
	au = proxy_authn_new(PROXY_AUTH_BASIC, NULL, NULL, "proxy", why, sizeof(why));
	assert_int_equal(proxy_authn_next(au, NULL, &value, why, sizeof(why)), 0);
	assert_null(value);
	assert_int_equal(proxy_authn_next(au, &a, &value, why, sizeof(why)), 1);
	assert_string_equal(why, "");
	proxy_authn_free(au);
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_url_parse),
		cmocka_unit_test(test_url_origin),
		cmocka_unit_test(test_no_proxy),
		cmocka_unit_test(test_connect_request),
		cmocka_unit_test(test_answer_parse),
		cmocka_unit_test(test_authn_steps),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
