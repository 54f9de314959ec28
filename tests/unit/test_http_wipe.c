/*
 * test_http_wipe.c: the request reader's strings (gateway/transport/http.c)
 * hold the client's token (the Authorization header, the head as read,
 * every header whole) and are wiped: no block the reader frees or hands
 * to realloc holds a byte string of the token (free and realloc are
 * wrapped, -Wl,--wrap, tests/CMakeLists.txt: each block is read before it
 * goes), including the blocks left behind as the head grows piece by piece
 * and a head too large to be kept; and the buffers kept for the
 * connection's next request hold nothing of the last one after
 * http_reader_reset (a shorter token after a longer one leaves no tail of
 * it; a decoded query leaves no tail of its encoded form).
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <malloc.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "http.h"

/* The token the blocks are searched for (>= 16 bytes, none of it '\0'). */
static const char *watch_for;
static int freed_holding;        /* blocks freed or moved holding it */
static int blocks_seen;          /* blocks read while watching */

void *__real_realloc(void *p, size_t n);
void __real_free(void *p);
void *__wrap_realloc(void *p, size_t n);
void __wrap_free(void *p);

/* Reads p's block (its usable size) for watch_for. */
static void
look_at(void *p)
{
	size_t size, tlen;

	if (p == NULL || watch_for == NULL)
		return;
	blocks_seen++;
	size = malloc_usable_size(p);
	tlen = strlen(watch_for);
	for (size_t i = 0; i + tlen <= size; i++)
		if (memcmp((char *)p + i, watch_for, tlen) == 0) {
			freed_holding++;
			return;
		}
}

void *
__wrap_realloc(void *p, size_t n)
{
	look_at(p);                      /* it may free p as it is */
	return __real_realloc(p, n);
}

void
__wrap_free(void *p)
{
	look_at(p);
	__real_free(p);
}

static void
watch(const char *token)
{
	watch_for = token;
	freed_holding = 0;
	blocks_seen = 0;
}

/* Feeds req in pieces of step bytes until the request is read. */
static const struct http_request *
feed(struct http_reader *r, const char *req, size_t step)
{
	size_t len = strlen(req), off = 0;

	while (off < len) {
		enum http_read_result res;
		size_t n = len - off < step ? len - off : step;
		size_t k = http_reader_feed(r, req + off, n, &res);

		assert_int_not_equal(res, HTTP_READ_ERROR);
		off += k;
		if (res == HTTP_READ_REQUEST) {
			assert_int_equal(off, len);
			return http_reader_request(r);
		}
		assert_int_equal(k, n);
	}
	fail_msg("request not complete");
	return NULL;
}

#define TOKEN "tthr_0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJ"

/* The detector sees a block that holds the token as it is freed (through
 * a volatile pointer: a compiler may drop a malloc and free it can see). */
static void
test_detector_sees_a_token(void **state)
{
	void (*volatile release)(void *) = free;
	char *p = malloc(128);

	(void)state;
	assert_non_null(p);
	memset(p, 'x', 128);
	memcpy(p + 40, TOKEN, strlen(TOKEN));
	watch(TOKEN);
	release(p);
	assert_int_equal(blocks_seen, 1);
	assert_int_equal(freed_holding, 1);
	watch(NULL);
}

/* Fed 5 bytes at a time, the head as read grows block by block with the
 * token in it (64, 128, 256, 512 bytes); with the next request's head too
 * large to keep (its strings freed at the reset, its body the token) and
 * the reader freed at the end: no block goes holding the token. */
static void
test_freed_blocks_hold_no_token(void **state)
{
	static char big[8192];
	struct http_reader *r;
	const struct http_request *rq;
	int n;

	(void)state;
	watch(TOKEN);
	r = http_reader_new(1 << 20);
	assert_non_null(r);
	rq = feed(r, "GET /api/nodes?x=1 HTTP/1.1\r\nHost: gw\r\n"
	    "Authorization: Bearer " TOKEN "\r\n"
	    "X-Other: some value that makes the head longer than 256 bytes, "
	    "so that the head as read moves three times before it is whole, "
	    "and every header whole (name, value) is in its own string too\r\n"
	    "\r\n", 5);
	assert_string_equal(rq->authorization, "Bearer " TOKEN);
	http_reader_reset(r);
	n = snprintf(big, sizeof(big), "POST /api/x HTTP/1.1\r\nHost: gw\r\n"
	    "Authorization: Bearer " TOKEN "\r\nX-Pad: %06000d\r\n"
	    "Content-Length: %zu\r\n\r\n" TOKEN, 0, strlen(TOKEN));
	assert_true(n > 6000 && (size_t)n < sizeof(big));
	rq = feed(r, big, 700);
	assert_string_equal(rq->authorization, "Bearer " TOKEN);
	assert_int_equal(rq->body_len, strlen(TOKEN));
	http_reader_reset(r);            /* > 4 KiB: freed, not kept */
	rq = feed(r, "GET / HTTP/1.1\r\nAuthorization: Bearer " TOKEN "\r\n\r\n",
	    3);
	http_reader_free(r);
	assert_true(blocks_seen >= 10);
	assert_int_equal(freed_holding, 0);
	watch(NULL);
}

/* A request's kept buffers after the reset: its token, its headers and
 * its query wiped, and a shorter token next leaves none of the longer. */
static void
test_reset_wipes_kept_buffers(void **state)
{
	static const char zeros[256];
	struct http_reader *r = http_reader_new(1 << 20);
	const struct http_request *rq;
	const char *auth, *headers, *query;
	size_t auth_len, headers_len, short_len;

	(void)state;
	assert_non_null(r);
	rq = feed(r, "GET /a?q=%41%42%43%44%45%46%47%48 HTTP/1.1\r\n"
	    "Authorization: Bearer " TOKEN "\r\n\r\n", 1024);
	assert_string_equal(rq->query, "q=ABCDEFGH");
	auth = rq->authorization;
	auth_len = strlen(auth);
	headers = rq->headers;
	headers_len = rq->headers_len;
	query = rq->query;
	/* The decoded query's tail, past its NUL, is no longer the encoded
	 * form (26 bytes as sent, 10 decoded). */
	assert_memory_equal(query + 10, zeros, 26 - 10);

	/* Kept (at most 4 KiB each): still ours to read after the reset. */
	http_reader_reset(r);
	assert_memory_equal(auth, zeros, auth_len);
	assert_memory_equal(headers, zeros, headers_len);
	assert_memory_equal(query, zeros, 10);

	rq = feed(r, "GET / HTTP/1.1\r\nAuthorization: Bearer short\r\n\r\n", 1024);
	assert_ptr_equal(rq->authorization, auth);   /* the same buffer */
	assert_string_equal(rq->authorization, "Bearer short");
	short_len = strlen(rq->authorization);
	assert_memory_equal(auth + short_len, zeros, auth_len - short_len);
	http_reader_free(r);
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_detector_sees_a_token),
		cmocka_unit_test(test_freed_blocks_hold_no_token),
		cmocka_unit_test(test_reset_wipes_kept_buffers),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
