/*
 * test_getanswer.c: the agent's reading of an HTTP answer
 * (common/getanswer.c): each framing complete and incomplete, the size
 * limits of head and body, and malformed answers refused with a reason.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "getanswer.h"

/* Parses a copy of s (the parser may decode in place). */
static int
parse(const char *s, int eof, size_t max, struct get_answer *a, char *why,
    char *copy)
{
	size_t len = strlen(s);

	memcpy(copy, s, len + 1);
	why[0] = '\0';
	return get_answer_parse(copy, len, eof, max, a, why, 256);
}

static void
test_content_length(void **state)
{
	struct get_answer a;
	char why[256], copy[512];
	const char *ok = "HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhello";

	(void)state;
	assert_int_equal(parse(ok, 0, 64, &a, why, copy), 1);
	assert_int_equal(a.status, 200);
	assert_int_equal(a.body_len, 5);
	assert_memory_equal(a.body, "hello", 5);
	/* Short: more wanted; at EOF, refused. */
	assert_int_equal(parse("HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhel",
	    0, 64, &a, why, copy), 0);
	assert_int_equal(parse("HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhel",
	    1, 64, &a, why, copy), -1);
	assert_non_null(strstr(why, "closed before"));
	/* Over the limit, before any of the body came. */
	assert_int_equal(parse("HTTP/1.1 200 OK\r\nContent-Length: 65\r\n\r\n",
	    0, 64, &a, why, copy), -1);
	assert_non_null(strstr(why, "larger than 64 bytes"));
}

static void
test_chunked(void **state)
{
	struct get_answer a;
	char why[256], copy[512];
	const char *ok = "HTTP/1.1 404 Not Found\r\nTransfer-Encoding: chunked\r\n\r\n"
	    "3\r\nabc\r\n2;x=y\r\nde\r\n0\r\n\r\n";

	(void)state;
	assert_int_equal(parse(ok, 0, 64, &a, why, copy), 1);
	assert_int_equal(a.status, 404);
	assert_int_equal(a.body_len, 5);
	assert_memory_equal(a.body, "abcde", 5);
	assert_int_equal(parse("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
	    "3\r\nabc\r\n", 0, 64, &a, why, copy), 0);
	assert_int_equal(parse("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
	    "3\r\nabc\r\n", 1, 64, &a, why, copy), -1);
	assert_int_equal(parse("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
	    "zz\r\nabc\r\n0\r\n\r\n", 0, 64, &a, why, copy), -1);
	assert_non_null(strstr(why, "chunked"));
	/* Decoded over the limit. */
	assert_int_equal(parse("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
	    "5\r\nabcde\r\n0\r\n\r\n", 0, 4, &a, why, copy), -1);
	assert_non_null(strstr(why, "larger than 4 bytes"));
}

static void
test_to_eof(void **state)
{
	struct get_answer a;
	char why[256], copy[512];

	(void)state;
	assert_int_equal(parse("HTTP/1.0 200 OK\r\n\r\nall of it", 0, 64, &a, why,
	    copy), 0);
	assert_int_equal(parse("HTTP/1.0 200 OK\r\n\r\nall of it", 1, 64, &a, why,
	    copy), 1);
	assert_int_equal(a.body_len, 9);
	assert_int_equal(parse("HTTP/1.0 200 OK\r\n\r\nall of it", 0, 8, &a, why,
	    copy), -1);
	assert_non_null(strstr(why, "larger than 8 bytes"));
	assert_int_equal(parse("HTTP/1.1 204 No Content\r\n\r\n", 0, 8, &a, why,
	    copy), 1);
	assert_int_equal(a.body_len, 0);
}

static void
test_malformed(void **state)
{
	static const char *bad[] = {
		"HTTP/2 200 OK\r\n\r\n",
		"HTTP/1.1 20 OK\r\n\r\n",
		"HTTP/1.1 200OK\r\n\r\n",
		"ICY 200 OK\r\n\r\n",
		"HTTP/1.1 200 OK\r\nContent-Length: 1\r\nContent-Length: 1\r\n\r\nx",
		"HTTP/1.1 200 OK\r\nContent-Length: 1\r\nTransfer-Encoding: chunked\r\n\r\n",
		"HTTP/1.1 200 OK\nContent-Length: 0\n\n",
		"HTTP/1.1 100 Continue\r\n\r\n",
	};
	struct get_answer a;
	char why[256], copy[512];

	(void)state;
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		assert_int_equal(parse(bad[i], 0, 64, &a, why, copy), -1);
		assert_true(why[0] != '\0');
	}
	assert_int_equal(parse("", 1, 64, &a, why, copy), -1);
	assert_non_null(strstr(why, "without an answer"));
	assert_int_equal(parse("HTTP/1.1 200 OK\r\n", 1, 64, &a, why, copy), -1);
	assert_non_null(strstr(why, "inside the answer's head"));
}

static void
test_head_limit(void **state)
{
	size_t n = GET_ANSWER_HEAD_MAX + 2;
	char *buf = malloc(n), why[256];
	struct get_answer a;

	(void)state;
	assert_non_null(buf);
	memset(buf, 'a', n);
	memcpy(buf, "HTTP/1.1 200 OK\r\nX: ", 20);
	assert_int_equal(get_answer_parse(buf, n, 0, 64, &a, why, sizeof(why)), -1);
	assert_non_null(strstr(why, "head larger than"));
	free(buf);
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_content_length),
		cmocka_unit_test(test_chunked),
		cmocka_unit_test(test_to_eof),
		cmocka_unit_test(test_malformed),
		cmocka_unit_test(test_head_limit),
	};
	return cmocka_run_group_tests(tests, NULL, NULL);
}
