/*
 * test_httphead.c: common/httphead.c.  The request-head rewrite the agent
 * applies on streams to a service with a token: Authorization headers are
 * replaced by the node's bearer token, never duplicated, Connection and
 * Keep-Alive dropped (`Connection: close` again only when the head asked
 * to close, `Upgrade, close` for an upgrade), and everything else is kept
 * byte for byte; malformed heads and bad tokens are refused; the rewrite
 * from http_head_check_lines' table answers as the one that reads the
 * head, wherever the check accepts it.  The framing rules of
 * http_head_check: every ambiguous head is refused with its reason.  What
 * follows an answer head (http_answer_body): nothing after a 1xx, 204, 304
 * or an answer to HEAD; a 1xx or 204 that names a length or chunks, and a
 * 101 nobody asked for, refused.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <ctype.h>
#include <string.h>

#include "httphead.h"

#define TOKEN "node-secret-123"
#define CLOSE "Connection: close\r\n"

/* Where http_head_check_lines accepts head (len bytes), with a valid
 * token: http_head_set_bearer_lines answers as http_head_set_bearer does,
 * byte for byte (the agent's rewrite reads the check's line table). */
static void
check_lines_rewrite_agrees(const char *head, size_t len, const char *token)
{
	struct http_framing f;
	static struct http_lines lines;
	const char *why;
	char *a = NULL, *b = (char *)0x1;
	size_t alen = 0, blen = 99;
	int ra, rb;

	if (head == NULL || token == NULL || !http_token_valid(token, strlen(token)) ||
	    http_head_check_lines(head, len, &f, &lines, &why) != 0)
		return;
	ra = http_head_set_bearer(head, len, token, &a, &alen);
	rb = http_head_set_bearer_lines(head, len, &lines, token, strlen(token),
	    &b, &blen);
	if (lines.more) {
		assert_int_equal(rb, -1);
	} else {
		assert_int_equal(rb, ra);
	}
	if (rb == 0) {
		assert_int_equal(blen, alen);
		assert_memory_equal(b, a, alen);
	} else {
		assert_null(b);
		assert_int_equal(blen, 0);
	}
	free(a);
	free(b);
}

/* Rewrites head (a C string) with token and checks the result is want. */
static void
check_rewrite_with(const char *head, const char *token, const char *want)
{
	char *out = (char *)0x1;
	size_t outlen = 99;

	assert_int_equal(http_head_set_bearer(head, strlen(head), token, &out,
	    &outlen), 0);
	assert_non_null(out);
	assert_int_equal(outlen, strlen(want));
	assert_memory_equal(out, want, outlen);
	free(out);
	check_lines_rewrite_agrees(head, strlen(head), token);
}

static void
check_rewrite(const char *head, const char *want)
{
	check_rewrite_with(head, TOKEN, want);
}

static void
check_refused(const char *head, size_t len, const char *token)
{
	char *out = (char *)0x1;
	size_t outlen = 99;

	assert_int_equal(http_head_set_bearer(head, len, token, &out, &outlen), -1);
	assert_null(out);
	assert_int_equal(outlen, 0);
	check_lines_rewrite_agrees(head, len, token);
}

/* ---- http_head_length ---- */

static void
test_length_finds_the_empty_line(void **state)
{
	const char *h = "GET / HTTP/1.1\r\nHost: a\r\n\r\nBODY";
	const char *lf = "GET / HTTP/1.1\nHost: a\n\nBODY";

	(void)state;
	assert_int_equal(http_head_length(h, strlen(h)), strlen(h) - 4);
	assert_int_equal(http_head_length(lf, strlen(lf)), strlen(lf) - 4);
	/* Not yet whole: every prefix short of the empty line. */
	for (size_t i = 0; i < strlen(h) - 4; i++)
		assert_int_equal(http_head_length(h, i), 0);
	assert_int_equal(http_head_length("", 0), 0);
}

/* The scan http_head_length made before it looked from one LF to the
 * next with memchr: the first LF that an LF or a CRLF follows. */
static size_t
length_by_bytes(const char *buf, size_t len)
{
	for (size_t i = 0; i < len; i++) {
		if (buf[i] != '\n')
			continue;
		if (i + 1 < len && buf[i + 1] == '\n')
			return i + 2;
		if (i + 2 < len && buf[i + 1] == '\r' && buf[i + 2] == '\n')
			return i + 3;
	}
	return 0;
}

/* Every string of up to 8 bytes over CR, LF, 'a' and NUL, and longer
 * pseudo-random ones: the same end as the byte-by-byte scan. */
static void
test_length_agrees_with_a_byte_scan(void **state)
{
	static const char alpha[] = { '\r', '\n', 'a', '\0' };
	char buf[300];
	uint64_t x = 88172645463325252ull;

	(void)state;
	for (size_t len = 0; len <= 8; len++) {
		for (size_t code = 0; code < ((size_t)1 << (2 * len)); code++) {
			for (size_t i = 0; i < len; i++)
				buf[i] = alpha[(code >> (2 * i)) & 3];
			assert_int_equal(http_head_length(buf, len), length_by_bytes(buf, len));
		}
	}
	for (int round = 0; round < 20000; round++) {
		size_t len;

		x ^= x << 13;
		x ^= x >> 7;
		x ^= x << 17;
		len = (size_t)(x % sizeof(buf));
		for (size_t i = 0; i < len; i++) {
			x ^= x << 13;
			x ^= x >> 7;
			x ^= x << 17;
			/* Mostly text, a line end every ~10 bytes. */
			buf[i] = x % 10 == 0 ? '\n' : x % 10 == 1 ? '\r' : 'x';
		}
		assert_int_equal(http_head_length(buf, len), length_by_bytes(buf, len));
	}
}

/* ---- http_token_valid ---- */

static void
test_token_validity(void **state)
{
	char big[HTTP_TOKEN_MAX + 2];

	(void)state;
	assert_true(http_token_valid("abc.DEF-123_~+/=", 16));
	assert_false(http_token_valid("", 0));
	assert_false(http_token_valid(NULL, 3));
	assert_false(http_token_valid("a b", 3));
	assert_false(http_token_valid("a\r\nX: y", 7));
	assert_false(http_token_valid("a\tb", 3));
	assert_false(http_token_valid("a\x7f", 2));
	assert_false(http_token_valid("a\xc3\xa9", 3));
	memset(big, 'a', sizeof(big));
	assert_true(http_token_valid(big, HTTP_TOKEN_MAX));
	assert_false(http_token_valid(big, HTTP_TOKEN_MAX + 1));
}

/* ---- http_head_set_bearer ---- */

static void
test_no_authorization_adds_one_before_the_empty_line(void **state)
{
	(void)state;
	check_rewrite("GET /version HTTP/1.1\r\nHost: k\r\nAccept: */*\r\n"
	    "Connection: close\r\n\r\n",
	    "GET /version HTTP/1.1\r\nHost: k\r\nAccept: */*\r\n"
	    "Authorization: Bearer " TOKEN "\r\n" CLOSE "\r\n");
}

static void
test_request_line_only(void **state)
{
	(void)state;
	check_rewrite("GET / HTTP/1.1\r\n\r\n",
	    "GET / HTTP/1.1\r\nAuthorization: Bearer " TOKEN "\r\n\r\n");
}

static void
test_one_authorization_is_replaced_not_duplicated(void **state)
{
	(void)state;
	check_rewrite("GET /api HTTP/1.1\r\nHost: k\r\nAuthorization: Bearer "
	    "ttu_gateway.token\r\nAccept: */*\r\n\r\n",
	    "GET /api HTTP/1.1\r\nHost: k\r\nAccept: */*\r\n"
	    "Authorization: Bearer " TOKEN "\r\n\r\n");
}

static void
test_two_authorizations_both_removed(void **state)
{
	(void)state;
	check_rewrite("POST /x HTTP/1.1\r\nAuthorization: Basic dXNlcjpwdw==\r\n"
	    "Content-Length: 3\r\nAuthorization: Bearer other\r\n\r\n",
	    "POST /x HTTP/1.1\r\nContent-Length: 3\r\n"
	    "Authorization: Bearer " TOKEN "\r\n\r\n");
}

static void
test_mixed_case_names_and_no_space_after_colon(void **state)
{
	(void)state;
	check_rewrite("GET / HTTP/1.1\r\nauthorization: a\r\nAUTHORIZATION:b\r\n"
	    "AuThOrIzAtIoN:  c\r\nX-Authorization: keep\r\n"
	    "Authorization-Extra: keep\r\nProxy-Authorization: keep\r\n\r\n",
	    "GET / HTTP/1.1\r\nX-Authorization: keep\r\n"
	    "Authorization-Extra: keep\r\nProxy-Authorization: keep\r\n"
	    "Authorization: Bearer " TOKEN "\r\n\r\n");
}

static void
test_no_folding_other_headers_kept_byte_for_byte(void **state)
{
	(void)state;
	/* Odd but valid spacing and values that mention Authorization. */
	check_rewrite("GET /a?b=Authorization:%20x HTTP/1.1\r\nHost:k\r\n"
	    "X-Note:   Authorization: Bearer fake  \r\nEmpty:\r\n\r\n",
	    "GET /a?b=Authorization:%20x HTTP/1.1\r\nHost:k\r\n"
	    "X-Note:   Authorization: Bearer fake  \r\nEmpty:\r\n"
	    "Authorization: Bearer " TOKEN "\r\n\r\n");
}

static void
test_folded_authorization_removed_with_its_continuation(void **state)
{
	(void)state;
	check_rewrite("GET / HTTP/1.1\r\nAuthorization: Bearer\r\n  secret\r\n"
	    "\tmore\r\nX-Long: a\r\n b\r\n\r\n",
	    "GET / HTTP/1.1\r\nX-Long: a\r\n b\r\n"
	    "Authorization: Bearer " TOKEN "\r\n\r\n");
}

static void
test_bare_lf_line_ends_kept(void **state)
{
	(void)state;
	check_rewrite("GET / HTTP/1.1\nHost: k\nAuthorization: x\n\n",
	    "GET / HTTP/1.1\nHost: k\nAuthorization: Bearer " TOKEN "\r\n\n");
}

static void
test_upgrade_head(void **state)
{
	(void)state;
	check_rewrite("GET /api/v1/namespaces/d/pods/p/exec HTTP/1.1\r\n"
	    "Upgrade: websocket\r\nConnection: Upgrade\r\n\r\n",
	    "GET /api/v1/namespaces/d/pods/p/exec HTTP/1.1\r\n"
	    "Upgrade: websocket\r\n"
	    "Authorization: Bearer " TOKEN "\r\nConnection: Upgrade, close\r\n\r\n");
}

static void
test_malformed_heads_refused(void **state)
{
	static const char *bad[] = {
		"",                                        /* nothing */
		"\r\n\r\n",                                /* no request line */
		"GET\r\n\r\n",                             /* request line: no space */
		" GET / HTTP/1.1\r\n\r\n",                 /* leading space */
		"GET / HTTP/1.1\r\nHost k\r\n\r\n",        /* no colon */
		"GET / HTTP/1.1\r\n: v\r\n\r\n",           /* empty name */
		"GET / HTTP/1.1\r\nBad Name: v\r\n\r\n",   /* space in the name */
		"GET / HTTP/1.1\r\nAuthorization : x\r\n\r\n", /* space before : */
		"GET / HTTP/1.1\r\nAuth\"x: v\r\n\r\n",    /* not a token char */
		"GET / HTTP/1.1\r\n folded\r\n\r\n",       /* fold with no header */
		"GET / HTTP/1.1\r\nHost: k\r\n",           /* no empty line */
		"GET / HTTP/1.1\r\nHost: k\r\n\r\nX",      /* bytes after the head */
	};

	(void)state;
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
		check_refused(bad[i], strlen(bad[i]), TOKEN);
	/* A NUL inside. */
	check_refused("GET / HTTP/1.1\r\nA: \0b\r\n\r\n", 25, TOKEN);
	check_refused(NULL, 0, TOKEN);
}

static void
test_bad_tokens_refused(void **state)
{
	const char *h = "GET / HTTP/1.1\r\n\r\n";

	(void)state;
	check_refused(h, strlen(h), NULL);
	check_refused(h, strlen(h), "");
	check_refused(h, strlen(h), "a\r\nX-Injected: 1");
	check_refused(h, strlen(h), "two words");
}

static void
test_long_token_and_head(void **state)
{
	char token[HTTP_TOKEN_MAX + 1], *head, *want;
	size_t hl;

	(void)state;
	memset(token, 'T', HTTP_TOKEN_MAX);
	token[HTTP_TOKEN_MAX] = '\0';
	head = malloc(70000);
	want = malloc(80000);
	assert_non_null(head);
	assert_non_null(want);
	strcpy(head, "GET / HTTP/1.1\r\nX-Big: ");
	hl = strlen(head);
	memset(head + hl, 'v', 60000);
	strcpy(head + hl + 60000, "\r\nAuthorization: x\r\n\r\n");
	strcpy(want, head);
	strcpy(want + hl + 60000, "\r\nAuthorization: Bearer ");
	strcat(want + hl + 60000, token);
	strcat(want + hl + 60000, "\r\n\r\n");
	check_rewrite_with(head, token, want);
	free(head);
	free(want);
}

static void
test_connection_dropped_close_only_when_asked(void **state)
{
	(void)state;
	/* Whatever Connection names (here Content-Length) goes with it; no
	 * close asked: the connection may carry the next request. */
	check_rewrite("GET / HTTP/1.1\r\nConnection: keep-alive, Content-Length\r\n"
	    "Keep-Alive: timeout=5\r\nconnection: upgrade\r\n  , x\r\nHost: k\r\n\r\n",
	    "GET / HTTP/1.1\r\nHost: k\r\n"
	    "Authorization: Bearer " TOKEN "\r\n\r\n");
	/* close in a list, any case, around spaces: one Connection: close. */
	check_rewrite("GET / HTTP/1.1\r\nConnection: x-foo , CLOSE\t\r\nConnection: close\r\n"
	    "Host: k\r\n\r\n",
	    "GET / HTTP/1.1\r\nHost: k\r\n"
	    "Authorization: Bearer " TOKEN "\r\n" CLOSE "\r\n");
	/* A token that only contains "close" is not close. */
	check_rewrite("GET / HTTP/1.1\r\nConnection: closed, xclose\r\n\r\n",
	    "GET / HTTP/1.1\r\nAuthorization: Bearer " TOKEN "\r\n\r\n");
	check_rewrite("POST /x HTTP/1.1\r\nupgrade: x\r\nConnection: Upgrade, Content-Length\r\n"
	    "Content-Length: 3\r\n\r\n",
	    "POST /x HTTP/1.1\r\nupgrade: x\r\nContent-Length: 3\r\n"
	    "Authorization: Bearer " TOKEN "\r\nConnection: Upgrade, close\r\n\r\n");
}

/* http_head_set_bearer_lines on heads the check accepts and the byte
 * rewrite refuses (an empty line before the request line, a request line
 * without a space or led by a space), on the most header lines the table
 * holds and one more (the caller's fallback), and on a head whose every
 * line is dropped: the same answers as http_head_set_bearer. */
static void
test_lines_rewrite_agrees_at_the_edges(void **state)
{
	static const char *heads[] = {
		"\r\nGET / HTTP/1.1\r\nHost: k\r\n\r\n",
		"\r\nGET / HTTP/1.1\r\n\r\n",
		"GET\r\nHost: k\r\n\r\n",
		"GET\r\n\r\n",
		" GET / HTTP/1.1\r\n\r\n",
		"\tGET / HTTP/1.1\r\nA: b\r\n\r\n",
		"G /\r\n\r\n",
		"GET / HTTP/1.1\r\nAuthorization: a\r\nConnection: close\r\n"
		    "Keep-Alive: 5\r\n\r\n",
		"GET / HTTP/1.1\r\nUpgrade: x\r\nauthorization: a\r\n\r\n",
		"GET / HTTP/1.1\r\nConnection:\r\nConnection: ,close,\r\nX: y\r\n\r\n",
	};
	char *big = malloc(16384);
	size_t n;

	(void)state;
	assert_non_null(big);
	for (size_t i = 0; i < sizeof(heads) / sizeof(heads[0]); i++)
		check_lines_rewrite_agrees(heads[i], strlen(heads[i]), TOKEN);
	for (int lines = HTTP_LINES_MAX - 1; lines <= HTTP_LINES_MAX + 1; lines++) {
		n = (size_t)snprintf(big, 64, "GET / HTTP/1.1\r\n");
		for (int i = 0; i < lines; i++)
			n += (size_t)snprintf(big + n, 64, i % 3 == 0 ?
			    "Authorization: t%d\r\n" : "X-%d: v\r\n", i);
		n += (size_t)snprintf(big + n, 64, "\r\n");
		check_lines_rewrite_agrees(big, n, TOKEN);
	}
	free(big);
}

/* ---- http_head_check ---- */

static void
check_framing(const char *head, size_t len, int want_chunked, int want_has_length,
    uint64_t want_length)
{
	struct http_framing f;
	const char *why = "unset";

	assert_int_equal(http_head_check(head, len, &f, &why), 0);
	assert_null(why);
	assert_int_equal(f.chunked, want_chunked);
	assert_int_equal(f.has_length, want_has_length);
	assert_int_equal(f.length, want_length);
}

static void
check_ambiguous(const char *head, size_t len, const char *want_why)
{
	struct http_framing f;
	const char *why = NULL;

	assert_int_equal(http_head_check(head, len, &f, &why), -1);
	assert_non_null(why);
	assert_string_equal(why, want_why);
}

#define CHECK_OK(h, c, hl, l) check_framing(h, strlen(h), c, hl, l)
#define CHECK_BAD(h, why) check_ambiguous(h, sizeof(h) - 1, why)

static void
test_check_accepts_one_framing(void **state)
{
	(void)state;
	CHECK_OK("GET / HTTP/1.1\r\nHost: k\r\n\r\n", 0, 0, 0);
	CHECK_OK("POST / HTTP/1.1\r\ncontent-length:  42 \r\n\r\n", 0, 1, 42);
	CHECK_OK("POST / HTTP/1.1\r\nTransfer-Encoding: CHUNKED\r\n\r\n", 1, 0, 0);
	CHECK_OK("HTTP/1.1 200 OK\r\nContent-Length: 0\r\nX: a\tb\r\n\r\n", 0, 1, 0);
	CHECK_OK("\r\nGET / HTTP/1.1\r\nContent-Length: 999999999999999999\r\n\r\n",
	    0, 1, 999999999999999999ULL);
	CHECK_OK("HTTP/1.1 100 Continue\r\n\r\n", 0, 0, 0);
}

/* http_head_check_lines says where each header line is: its start, its
 * name's length (up to its colon), its length up to its CR; past
 * HTTP_LINES_MAX lines, the first ones and `more`. */
static void
test_check_lines_index(void **state)
{
	static const char head[] = "\r\nHTTP/1.1 200 OK\r\nContent-Length: 5\r\n"
	    "X-A:b\r\nVia:  \t x y\r\n\r\n";
	static struct http_lines lines;
	struct http_framing f;
	const char *why = "";
	char big[8192];
	size_t n;

	(void)state;
	assert_int_equal(http_head_check_lines(head, sizeof(head) - 1, &f,
	    &lines, &why), 0);
	assert_null(why);
	assert_true(f.has_length && f.length == 5);
	assert_int_equal(lines.n, 3);
	assert_false(lines.more);
	assert_int_equal(lines.at[0].off, 19);
	assert_memory_equal(head + lines.at[0].off, "Content-Length: 5\r\n", 19);
	assert_int_equal(lines.at[0].name, 14);
	assert_int_equal(lines.at[0].len, 17);
	assert_memory_equal(head + lines.at[1].off, "X-A:b\r\n", 7);
	assert_int_equal(lines.at[1].name, 3);
	assert_int_equal(lines.at[1].len, 5);
	assert_memory_equal(head + lines.at[2].off, "Via:  \t x y\r\n", 13);
	assert_int_equal(lines.at[2].name, 3);
	assert_int_equal(lines.at[2].len, 11);

	/* A refused head: -1 with its reason, as http_head_check says. */
	static const char folded[] = "GET / HTTP/1.1\r\nX: a\r\n Y: b\r\n\r\n";

	assert_int_equal(http_head_check_lines(folded, sizeof(folded) - 1, &f,
	    &lines, &why), -1);
	assert_string_equal(why, "an obs-fold (a header line starting with a "
	    "space or tab)");

	/* HTTP_LINES_MAX + 6 lines: the first HTTP_LINES_MAX, and more. */
	n = (size_t)snprintf(big, sizeof(big), "GET / HTTP/1.1\r\n");
	for (int i = 0; i < HTTP_LINES_MAX + 6; i++)
		n += (size_t)snprintf(big + n, sizeof(big) - n, "H%d: v\r\n", i);
	n += (size_t)snprintf(big + n, sizeof(big) - n, "\r\n");
	assert_true(n < sizeof(big));
	assert_int_equal(http_head_check_lines(big, n, &f, &lines, &why), 0);
	assert_int_equal(lines.n, HTTP_LINES_MAX);
	assert_true(lines.more);
	{
		char last[32];
		int ln = snprintf(last, sizeof(last), "H%d: v\r\n", HTTP_LINES_MAX - 1);

		assert_memory_equal(big + lines.at[HTTP_LINES_MAX - 1].off, last,
		    (size_t)ln);
	}
}

static void
test_check_refuses_ambiguous_heads(void **state)
{
	(void)state;
	CHECK_BAD("POST / HTTP/1.1\r\nContent-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\n",
	    "both Content-Length and Transfer-Encoding");
	CHECK_BAD("POST / HTTP/1.1\r\nContent-Length: 3\r\nContent-Length: 3\r\n\r\n",
	    "more than one Content-Length");
	CHECK_BAD("POST / HTTP/1.1\r\nContent-Length: 3, 3\r\n\r\n",
	    "a Content-Length that is not a number");
	CHECK_BAD("POST / HTTP/1.1\r\nContent-Length: +3\r\n\r\n",
	    "a Content-Length that is not a number");
	CHECK_BAD("POST / HTTP/1.1\r\nContent-Length:\r\n\r\n",
	    "a Content-Length that is not a number");
	CHECK_BAD("POST / HTTP/1.1\r\nContent-Length: 1234567890123456789\r\n\r\n",
	    "a Content-Length that is not a number");
	CHECK_BAD("POST / HTTP/1.1\r\nTransfer-Encoding: gzip, chunked\r\n\r\n",
	    "a Transfer-Encoding other than chunked");
	CHECK_BAD("HTTP/1.1 200 OK\r\nTransfer-Encoding: identity\r\n\r\n",
	    "a Transfer-Encoding other than chunked");
	CHECK_BAD("POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n\r\n",
	    "more than one Transfer-Encoding");
	/* http-parser reads these as a Transfer-Encoding that undoes chunked. */
	CHECK_BAD("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n"
	    "transfer-encodingx: y\r\n\r\n",
	    "a header name that extends Transfer-Encoding");
	CHECK_BAD("POST / HTTP/1.1\r\nTransfer-Encoding-Foo: chunked\r\n\r\n",
	    "a header name that extends Transfer-Encoding");
	CHECK_BAD("GET / HTTP/1.1\r\nX: a\r\n Impersonate-User: x\r\n\r\n",
	    "an obs-fold (a header line starting with a space or tab)");
	CHECK_BAD("GET / HTTP/1.1\r\n\tX: a\r\n\r\n",
	    "an obs-fold (a header line starting with a space or tab)");
	CHECK_BAD("GET / HTTP/1.1\nX: a\r\n\r\n", "a bare LF");
	CHECK_BAD("GET / HTTP/1.1\r\nX: a\n\r\n", "a bare LF");
	CHECK_BAD("GET / HTTP/1.1\r\n\n", "a bare LF");
	CHECK_BAD("GET / HTTP/1.1\r\nX: a\rImpersonate-User: x\r\n\r\n", "a bare CR");
	CHECK_BAD("GET / HTTP/1.1\r\nX: a\0b\r\n\r\n", "a NUL byte");
	CHECK_BAD("GET / HTTP/1.1\r\nX: a\x7f\r\n\r\n", "a control byte");
	CHECK_BAD("GET / HTTP/1.1\r\nImpersonate-User : x\r\n\r\n",
	    "a header name that is not a token");
	CHECK_BAD("GET / HTTP/1.1\r\nno colon\r\n\r\n",
	    "a header line without a name and a colon");
	CHECK_BAD("GET / HTTP/1.1\r\nX: a\r\n", "no empty line at the end of the head");
	CHECK_BAD("GET / HTTP/1.1\r\nX: a\r\n\r\nGET", "bytes after the empty line");
	CHECK_BAD("", "no empty line at the end of the head");
	CHECK_BAD("HTTP/1.1 200 OK\r\nTransfer-Encoding:chunked\t\r\n\r\n",
	    "a tab in Content-Length or Transfer-Encoding");
	CHECK_BAD("POST / HTTP/1.1\r\nContent-Length:\t3\r\n\r\n",
	    "a tab in Content-Length or Transfer-Encoding");
}

/* What http_head_check says of one byte c in a header value, as the rule
 * reads byte by byte (bad_byte reads eight at a time). */
static const char *
value_byte_reason(unsigned char c)
{
	if (c == '\r')
		return "a bare CR";
	if (c == '\0')
		return "a NUL byte";
	if ((c < 0x20 && c != '\t') || c == 0x7f)
		return "a control byte";
	return NULL;
}

/* Every byte value at every place of values of 1 to 40 bytes, after a
 * long and a short name: every place in a sixteen-byte step (SSE2) and an
 * eight-byte word, in the bytes after the last whole one, and in lines
 * shorter than a word. */
static void
test_check_every_byte_everywhere_in_a_value(void **state)
{
	static const char *const pre[] = { "GET / HTTP/1.1\r\nX-Some-Name: ",
	    "GET / HTTP/1.1\r\nX:" };
	char head[128];
	struct http_framing f;
	const char *why, *want;

	(void)state;
	for (size_t p = 0; p < 2; p++)
	for (size_t vlen = 1; vlen <= 40; vlen++)
	for (int c = 0; c < 256; c++) {
		if (c == '\n')
			continue;
		for (size_t at = 0; at < vlen; at++) {
			size_t n = strlen(pre[p]);

			memcpy(head, pre[p], n);
			memset(head + n, 'v', vlen);
			head[n + at] = (char)c;
			memcpy(head + n + vlen, "\r\n\r\n", 4);
			n += vlen + 4;
			want = value_byte_reason((unsigned char)c);
			why = "unset";
			if (want == NULL) {
				assert_int_equal(http_head_check(head, n, &f, &why), 0);
				assert_null(why);
			} else {
				assert_int_equal(http_head_check(head, n, &f, &why), -1);
				assert_string_equal(why, want);
			}
		}
	}
}

/* Every printable byte in a header name: a token byte (RFC 9110 tchar)
 * or "a header name that is not a token". */
static void
test_check_every_byte_in_a_name(void **state)
{
	char head[64];
	struct http_framing f;
	const char *why;
	int n;

	(void)state;
	for (int c = 0x21; c < 0x7f; c++) {
		int tchar = isalnum(c) || strchr("!#$%&'*+-.^_`|~", c) != NULL;

		if (c == ':')
			continue;
		n = snprintf(head, sizeof(head), "GET / HTTP/1.1\r\nXab%cdef: v\r\n\r\n", c);
		why = "unset";
		assert_int_equal(http_head_check(head, (size_t)n, &f, &why), tchar ? 0 : -1);
		if (tchar)
			assert_null(why);
		else
			assert_string_equal(why, "a header name that is not a token");
	}
}

/* A line with more than one fault gets the reason of the first rule it
 * breaks, in the rules' order (no LF, a bare LF, then its first bad
 * byte), wherever in an eight-byte word the faults fall; a tab anywhere
 * in a value is no fault, and does not hide one after it. */
static void
test_check_reasons_in_order(void **state)
{
	static const char pre[] = "GET / HTTP/1.1\r\nX-Name: ";
	char head[128];
	struct http_framing f;
	const char *why;

	(void)state;
	CHECK_BAD("GET / HTTP/1.1\r\nX: a\0b\n\r\n", "a bare LF");
	CHECK_BAD("GET / HTTP/1.1\r\nX: a\x01\rb\n\r\n", "a bare LF");
	CHECK_BAD("GET / HTTP/1.1\r\nX: a\0b", "no empty line at the end of the head");
	CHECK_BAD("GET / HTTP/1.1\r\nX: a\r", "no empty line at the end of the head");
	CHECK_BAD("GET / HTTP/1.1\r\nX: a\r\r\n\r\n", "a bare CR");
	CHECK_BAD("GET / HTTP/1.1\r\nX: a\x7f\0\r\n\r\n", "a control byte");
	CHECK_BAD("GET /\x01 HTTP/1.1\r\n\r\n", "a control byte");
	CHECK_BAD("GET / HTTP/1.1\r\nX: a\r\n\r\n\r", "bytes after the empty line");
	for (size_t vlen = 1; vlen <= 40; vlen++)
	for (size_t tab = 0; tab < vlen; tab++)
	for (size_t bad = tab; bad <= vlen; bad++) {
		size_t n = sizeof(pre) - 1;

		memcpy(head, pre, n);
		memset(head + n, 'v', vlen);
		head[n + tab] = '\t';
		if (bad > tab && bad < vlen)
			head[n + bad] = '\0';
		memcpy(head + n + vlen, "\r\n\r\n", 4);
		n += vlen + 4;
		why = "unset";
		if (bad > tab && bad < vlen) {
			assert_int_equal(http_head_check(head, n, &f, &why), -1);
			assert_string_equal(why, "a NUL byte");
		} else {
			assert_int_equal(http_head_check(head, n, &f, &why), 0);
			assert_null(why);
		}
	}
}

/* ---- http_body_end ---- */

/* Feeds body_and_more (a C string) whole and byte by byte: both must find
 * the body's end after want bytes (or refuse it when want is -1). */
static void
check_body_end(const char *head, const char *body_and_more, long want)
{
	struct http_framing f;
	struct http_body_end e;
	const char *why;
	size_t len = strlen(body_and_more), n, total = 0;
	int done = 0;

	assert_int_equal(http_head_check(head, strlen(head), &f, &why), 0);
	http_body_end_init(&e, &f);
	n = http_body_end_feed(&e, body_and_more, len, &done);
	if (want < 0) {
		assert_true(n == (size_t)-1);
	} else {
		assert_int_equal(n, (size_t)want);
		assert_int_equal(done, 1);
	}
	http_body_end_init(&e, &f);
	done = 0;
	for (size_t i = 0; i < len && !done; i++) {
		n = http_body_end_feed(&e, body_and_more + i, 1, &done);
		if (n == (size_t)-1) {
			assert_true(want < 0);
			return;
		}
		total += n;
	}
	assert_true(want >= 0);
	assert_int_equal(total, (size_t)want);
	assert_int_equal(done, 1);
}

static void
test_body_end_found_for_each_framing(void **state)
{
	static const char cl[] = "POST / HTTP/1.1\r\nContent-Length: 5\r\n\r\n";
	static const char te[] = "POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n";
	static const char none[] = "GET / HTTP/1.1\r\nHost: k\r\n\r\n";
	static const char next[] = "GET /api/v1/secrets HTTP/1.1\r\n\r\n";
	char buf[256];

	(void)state;
	snprintf(buf, sizeof(buf), "hello%s", next);
	check_body_end(cl, buf, 5);
	check_body_end(none, next, 0);
	snprintf(buf, sizeof(buf), "5\r\nhello\r\nA;ext=1\r\n0123456789\r\n0\r\n\r\n%s", next);
	check_body_end(te, buf, (long)(strlen(buf) - strlen(next)));
	snprintf(buf, sizeof(buf), "0\r\nX-Trailer: a\r\n\r\n%s", next);
	check_body_end(te, buf, (long)(strlen(buf) - strlen(next)));
	/* A request hidden in chunk data is data, not a request. */
	snprintf(buf, sizeof(buf), "%zx\r\n%s\r\n0\r\n\r\nX", strlen(next), next);
	check_body_end(te, buf, (long)strlen(buf) - 1);
	check_body_end(te, "g\r\n", -1);                 /* not hex */
	check_body_end(te, "\r\n", -1);                  /* no size */
	check_body_end(te, "5\nhello", -1);               /* bare LF */
	check_body_end(te, "5\r\nhelloXY", -1);          /* no CRLF after data */
	check_body_end(te, "1000000000000000\r\n", -1);  /* 16 hex digits */
	check_body_end(te, "0\r\n\n", -1);               /* bare LF at the end */
}

/* kind of status with framing f, for a plain GET (or HEAD, or an upgrade). */
static enum http_answer_kind
answer(int status, int chunked, int has_length, int upgrade_hdr, int head,
    int upgrade_req)
{
	struct http_framing f = { .chunked = chunked, .has_length = has_length,
	    .length = has_length ? 10 : 0, .upgrade = upgrade_hdr };
	const char *why = NULL;
	enum http_answer_kind k = http_answer_body(status, &f, head, upgrade_req,
	    &why);

	assert_int_equal(k == HTTP_ANSWER_REFUSED, why != NULL);
	return k;
}

static void
test_answer_bodiless_statuses(void **state)
{
	assert_true(http_answer_bodiless(100, 0));
	assert_true(http_answer_bodiless(101, 0));
	assert_true(http_answer_bodiless(103, 0));
	assert_true(http_answer_bodiless(204, 0));
	assert_true(http_answer_bodiless(304, 0));
	assert_true(http_answer_bodiless(200, 1));
	assert_false(http_answer_bodiless(200, 0));
	assert_false(http_answer_bodiless(205, 0));
	assert_false(http_answer_bodiless(404, 0));
	/* 304 may say how long a 200 would be; no body follows. */
	assert_int_equal(answer(304, 0, 1, 0, 0, 0), HTTP_ANSWER_NONE);
	assert_int_equal(answer(304, 1, 0, 0, 0, 0), HTTP_ANSWER_NONE);
	assert_int_equal(answer(204, 0, 0, 0, 0, 0), HTTP_ANSWER_NONE);
	assert_int_equal(answer(200, 0, 1, 0, 1, 0), HTTP_ANSWER_NONE);
	assert_int_equal(answer(200, 1, 0, 0, 1, 0), HTTP_ANSWER_NONE);
	assert_int_equal(answer(100, 0, 0, 0, 0, 0), HTTP_ANSWER_INTERIM);
	assert_int_equal(answer(103, 0, 0, 0, 0, 1), HTTP_ANSWER_INTERIM);
	assert_int_equal(answer(200, 0, 1, 0, 0, 0), HTTP_ANSWER_LENGTH);
	assert_int_equal(answer(200, 1, 0, 0, 0, 0), HTTP_ANSWER_CHUNKED);
	assert_int_equal(answer(200, 0, 0, 0, 0, 0), HTTP_ANSWER_TO_EOF);
}

static void
test_answer_refusals(void **state)
{
	/* RFC 9110 8.6, 15.3.5; RFC 9112 6.1. */
	assert_int_equal(answer(204, 0, 1, 0, 0, 0), HTTP_ANSWER_REFUSED);
	assert_int_equal(answer(204, 1, 0, 0, 0, 0), HTTP_ANSWER_REFUSED);
	assert_int_equal(answer(204, 0, 1, 0, 1, 0), HTTP_ANSWER_REFUSED);
	assert_int_equal(answer(100, 0, 1, 0, 0, 0), HTTP_ANSWER_REFUSED);
	assert_int_equal(answer(103, 1, 0, 0, 0, 0), HTTP_ANSWER_REFUSED);
	/* A 101 only for a request that asked to upgrade, naming the protocol. */
	assert_int_equal(answer(101, 0, 0, 1, 0, 0), HTTP_ANSWER_REFUSED);
	assert_int_equal(answer(101, 0, 0, 0, 0, 1), HTTP_ANSWER_REFUSED);
	assert_int_equal(answer(101, 0, 1, 1, 0, 1), HTTP_ANSWER_REFUSED);
	assert_int_equal(answer(101, 0, 0, 1, 0, 1), HTTP_ANSWER_SWITCH);
	assert_int_equal(answer(99, 0, 0, 0, 0, 0), HTTP_ANSWER_REFUSED);
	assert_int_equal(answer(1000, 0, 0, 0, 0, 0), HTTP_ANSWER_REFUSED);
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_length_finds_the_empty_line),
		cmocka_unit_test(test_length_agrees_with_a_byte_scan),
		cmocka_unit_test(test_token_validity),
		cmocka_unit_test(test_no_authorization_adds_one_before_the_empty_line),
		cmocka_unit_test(test_request_line_only),
		cmocka_unit_test(test_one_authorization_is_replaced_not_duplicated),
		cmocka_unit_test(test_two_authorizations_both_removed),
		cmocka_unit_test(test_mixed_case_names_and_no_space_after_colon),
		cmocka_unit_test(test_no_folding_other_headers_kept_byte_for_byte),
		cmocka_unit_test(test_folded_authorization_removed_with_its_continuation),
		cmocka_unit_test(test_bare_lf_line_ends_kept),
		cmocka_unit_test(test_upgrade_head),
		cmocka_unit_test(test_malformed_heads_refused),
		cmocka_unit_test(test_bad_tokens_refused),
		cmocka_unit_test(test_long_token_and_head),
		cmocka_unit_test(test_connection_dropped_close_only_when_asked),
		cmocka_unit_test(test_lines_rewrite_agrees_at_the_edges),
		cmocka_unit_test(test_check_accepts_one_framing),
		cmocka_unit_test(test_check_lines_index),
		cmocka_unit_test(test_check_refuses_ambiguous_heads),
		cmocka_unit_test(test_check_every_byte_everywhere_in_a_value),
		cmocka_unit_test(test_check_every_byte_in_a_name),
		cmocka_unit_test(test_check_reasons_in_order),
		cmocka_unit_test(test_body_end_found_for_each_framing),
		cmocka_unit_test(test_answer_bodiless_statuses),
		cmocka_unit_test(test_answer_refusals),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
