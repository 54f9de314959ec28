/*
 * test_http_stream.c: the request reader's pass-on mode (gateway/transport/http.c,
 * http_reader_stream), which the /k8s/ proxy relies on: a matching request
 * with a body is reported at its head, its decoded body goes to the sink
 * whatever its size, then the request completes; headers are kept whole;
 * the result never depends on how the input was split into reads; the
 * framing it reports is the parsed one, and heads with two readings are
 * refused (400) and marked as passed-on requests.  Also the reader's
 * reading of any request: the target's path and query decoded (or
 * refused), the headers as http-parser reads them, repeats joined or
 * refused, Expect: 100-continue heard only for a body.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "http.h"

struct sinkbuf {
	char data[4096];
	size_t len;
};

static int
match_k8s(const char *path)
{
	return strncmp(path, "/k8s/", 5) == 0;
}

static void
sink(void *arg, const char *data, size_t len)
{
	struct sinkbuf *b = arg;

	assert_true(b->len + len <= sizeof(b->data));
	memcpy(b->data + b->len, data, len);
	b->len += len;
}

/* Feeds req in pieces of at most step bytes; counts HEAD and REQUEST. */
static void
feed_split(struct http_reader *r, const char *req, size_t len, size_t step,
    int *heads, int *requests, size_t *consumed)
{
	size_t off = 0;

	*heads = *requests = 0;
	while (off < len && *requests == 0) {
		size_t n = len - off < step ? len - off : step, used = 0;

		while (used < n && *requests == 0) {
			enum http_read_result res;
			size_t k = http_reader_feed(r, req + off + used, n - used, &res);

			assert_int_not_equal(res, HTTP_READ_ERROR);
			used += k;
			if (res == HTTP_READ_HEAD)
				(*heads)++;
			else if (res == HTTP_READ_REQUEST)
				(*requests)++;
			else
				break;
		}
		off += used;
	}
	*consumed = off;
}

static const char chunked_req[] =
    "POST /k8s/clusters/c-1/api/v1/x?y=%41 HTTP/1.1\r\n"
    "Host: gw\r\n"
    "Authorization: Bearer secret\r\n"
    "X-Empty:\r\n"
    "Transfer-Encoding: chunked\r\n"
    "\r\n"
    "5\r\nhello\r\n"
    "7\r\n, world\r\n"
    "0\r\n\r\n"
    "GET /next HTTP/1.1\r\n\r\n";

static void
test_streamed_body_goes_to_the_sink_however_split(void **state)
{
	size_t len = strlen(chunked_req), first = strstr(chunked_req, "GET /next") - chunked_req;

	(void)state;
	for (size_t step = 1; step <= len; step++) {
		/* max_body 4: the body is larger, and must not be cut. */
		struct http_reader *r = http_reader_new(4);
		struct sinkbuf b = { .len = 0 };
		const struct http_request *q;
		int heads, requests;
		size_t consumed;

		assert_non_null(r);
		assert_int_equal(http_reader_stream(r, match_k8s, sink, &b), 0);
		feed_split(r, chunked_req, len, step, &heads, &requests, &consumed);
		assert_int_equal(heads, 1);
		assert_int_equal(requests, 1);
		assert_int_equal(consumed, first);
		assert_int_equal(b.len, 12);
		assert_memory_equal(b.data, "hello, world", 12);
		q = http_reader_request(r);
		assert_string_equal(q->target, "/k8s/clusters/c-1/api/v1/x?y=%41");
		assert_string_equal(q->query, "y=A");
		assert_int_equal(q->body_chunked, 1);
		assert_int_equal(q->body_too_large, 0);
		assert_int_equal(q->keep_alive, 1);
		/* name\0value\0 pairs, in order, an empty value included */
		static const char want[] = "Host\0gw\0Authorization\0Bearer secret\0"
		    "X-Empty\0\0Transfer-Encoding\0chunked\0";
		assert_int_equal(q->headers_len, sizeof(want) - 1);
		assert_memory_equal(q->headers, want, sizeof(want) - 1);
		/* The next request on the connection is read as usual. */
		http_reader_reset(r);
		feed_split(r, chunked_req + first, len - first, step, &heads, &requests,
		    &consumed);
		assert_int_equal(heads, 0);
		assert_int_equal(requests, 1);
		assert_string_equal(http_reader_request(r)->path, "/next");
		http_reader_free(r);
	}
}

static void
test_streamed_request_without_body_is_one_request(void **state)
{
	static const char req[] = "GET /k8s/clusters/c-1/version HTTP/1.1\r\n"
	    "Connection: Upgrade\r\nUpgrade: SPDY/3.1\r\n\r\nraw bytes";
	struct http_reader *r = http_reader_new(4);
	struct sinkbuf b = { .len = 0 };
	int heads, requests;
	size_t consumed;

	(void)state;
	assert_int_equal(http_reader_stream(r, match_k8s, sink, &b), 0);
	feed_split(r, req, strlen(req), strlen(req), &heads, &requests, &consumed);
	assert_int_equal(heads, 0);
	assert_int_equal(requests, 1);
	/* The upgrade's raw bytes stay unread. */
	assert_int_equal(consumed, strlen(req) - strlen("raw bytes"));
	assert_string_equal(http_reader_request(r)->upgrade, "SPDY/3.1");
	http_reader_free(r);
}

static void
test_other_paths_keep_the_body_limit(void **state)
{
	static const char req[] = "POST /v1/clusters HTTP/1.1\r\n"
	    "Content-Length: 10\r\n\r\n0123456789";
	struct http_reader *r = http_reader_new(4);
	struct sinkbuf b = { .len = 0 };
	enum http_read_result res;

	(void)state;
	assert_int_equal(http_reader_stream(r, match_k8s, sink, &b), 0);
	http_reader_feed(r, req, strlen(req), &res);
	assert_int_equal(res, HTTP_READ_REQUEST);
	assert_int_equal(http_reader_request(r)->body_too_large, 1);
	assert_int_equal(b.len, 0);
	http_reader_free(r);
}

/* Feeds req one byte at a time; returns the first result that is not
 * HTTP_READ_MORE (or HTTP_READ_MORE if none). */
static enum http_read_result
feed_bytewise(struct http_reader *r, const char *req, size_t len)
{
	enum http_read_result res = HTTP_READ_MORE;

	for (size_t off = 0; off < len; ) {
		size_t n = http_reader_feed(r, req + off, 1, &res);

		if (res != HTTP_READ_MORE)
			return res;
		off += n;
	}
	return res;
}

static void
test_streamed_length_is_reported_not_copied(void **state)
{
	static const char req[] = "POST /k8s/clusters/c-1/api HTTP/1.1\r\n"
	    "Connection: keep-alive, Content-Length\r\nContent-Length:  3 \r\n\r\nabc";
	struct http_reader *r = http_reader_new(4);
	struct sinkbuf b = { .len = 0 };
	enum http_read_result res;

	(void)state;
	assert_int_equal(http_reader_stream(r, match_k8s, sink, &b), 0);
	res = feed_bytewise(r, req, strlen(req));
	assert_int_equal(res, HTTP_READ_HEAD);
	assert_int_equal(http_reader_request(r)->has_length, 1);
	assert_int_equal(http_reader_request(r)->content_length, 3);
	assert_int_equal(http_reader_request(r)->body_chunked, 0);
	http_reader_free(r);
}

/* Every ambiguous head is refused whole, with a 400 that says why, however
 * it was split; on a passed-on path the reader says so and keeps the
 * method and path for the refusal's Status and audit line. */
static void
test_ambiguous_heads_refused(void **state)
{
	static const char *const heads[] = {
		"POST /k8s/clusters/c-1/x HTTP/1.1\r\nContent-Length: 3\r\n"
		    "Transfer-Encoding: chunked\r\n\r\n",
		"POST /k8s/clusters/c-1/x HTTP/1.1\r\nContent-Length: 3\r\n"
		    "Content-Length: 3\r\n\r\n",
		"POST /k8s/clusters/c-1/x HTTP/1.1\r\nContent-Length: 3x\r\n\r\n",
		"POST /k8s/clusters/c-1/x HTTP/1.1\r\nTransfer-Encoding: gzip, chunked\r\n\r\n",
		"GET /k8s/clusters/c-1/x HTTP/1.1\r\nX: a\r\n Impersonate-User: x\r\n\r\n",
		"GET /k8s/clusters/c-1/x HTTP/1.1\nX: a\n\n",
		"GET /k8s/clusters/c-1/x HTTP/1.1\r\nX: a\rb\r\n\r\n",
		/* HTTP/0.9: http-parser reads it without framing. */
		"POST /k8s/clusters/c-1/x\r\nTransfer-Encoding: chunked\r\n\r\n",
	};

	(void)state;
	for (size_t i = 0; i < sizeof(heads) / sizeof(heads[0]); i++) {
		for (int split = 0; split < 2; split++) {
			struct http_reader *r = http_reader_new(4);
			struct sinkbuf b = { .len = 0 };
			enum http_read_result res;
			const char *reason;

			assert_int_equal(http_reader_stream(r, match_k8s, sink, &b), 0);
			if (split)
				res = feed_bytewise(r, heads[i], strlen(heads[i]));
			else
				http_reader_feed(r, heads[i], strlen(heads[i]), &res);
			assert_int_equal(res, HTTP_READ_ERROR);
			assert_int_equal(http_reader_error(r, &reason), 400);
			assert_true(reason[0] != '\0');
			assert_int_equal(http_reader_streamed(r), 1);
			assert_string_equal(http_reader_request(r)->path, "/k8s/clusters/c-1/x");
			assert_int_equal(b.len, 0);
			http_reader_free(r);
		}
	}
}

/* The target is split and decoded as http_parser_parse_url splits it,
 * and each request on a connection reads as itself: what an earlier one
 * had (a longer path, a query, a header) is never seen in a later one,
 * whose buffers the reader keeps (http_reader_reset). */
static void
test_targets_split_and_each_request_its_own(void **state)
{
	static const struct { const char *target, *path, *query, *auth; } t[] = {
		{ "/a/b?c=d", "/a/b", "c=d", "Bearer one" },
		{ "/", "/", "", "" },
		{ "/a?b?c#d?e", "/a", "b?c", "" },
		{ "/a#b?c", "/a", "", "Bearer two" },
		{ "/a?", "/a", "", "" },
		{ "/%41%2fb?x+y=%20", "/A/b", "x y= ", "" },
		{ "//x/y", "//x/y", "", "" },
		{ "http://h:1/p/q?r=s#f", "/p/q", "r=s", "" },
		{ "/k8s/clusters/c-1/api/v1/namespaces/default/pods?watch=1",
		    "/k8s/clusters/c-1/api/v1/namespaces/default/pods", "watch=1",
		    "Bearer three" },
		{ "/s", "/s", "", "" },
		/* '+' is a space in the query only; an escape after plain
		 * bytes; a query of one '+'. */
		{ "/a+b?c+d", "/a+b", "c d", "" },
		{ "/abc%43d?q%3d1", "/abcCd", "q=1", "" },
		{ "/p?+", "/p", " ", "" },
	};
	struct http_reader *r = http_reader_new(64);
	char req[256];

	(void)state;
	for (size_t i = 0; i < sizeof(t) / sizeof(t[0]); i++) {
		const struct http_request *q;
		enum http_read_result res;
		int n;

		if (t[i].auth[0] != '\0')
			n = snprintf(req, sizeof(req), "GET %s HTTP/1.1\r\nHost: h\r\n"
			    "Authorization: %s\r\n\r\n", t[i].target, t[i].auth);
		else
			n = snprintf(req, sizeof(req), "GET %s HTTP/1.1\r\nHost: h\r\n\r\n",
			    t[i].target);
		assert_int_equal(http_reader_feed(r, req, (size_t)n, &res), (size_t)n);
		assert_int_equal(res, HTTP_READ_REQUEST);
		q = http_reader_request(r);
		assert_string_equal(q->target, t[i].target);
		assert_string_equal(q->path, t[i].path);
		assert_string_equal(q->query, t[i].query);
		assert_string_equal(q->authorization, t[i].auth);
		assert_int_equal(q->headers_len, strlen("Host") + strlen("h") + 2 +
		    (t[i].auth[0] != '\0' ? strlen("Authorization") +
		    strlen(t[i].auth) + 2 : 0));
		http_reader_reset(r);
	}
	http_reader_free(r);
}

/*
 * The headers, read from the whole head once it is checked, are as
 * http-parser reads them, however the head was split into reads: each
 * value from its first byte that is not a blank to its CR (trailing
 * blanks kept, an empty one empty), names as sent, empty lines before the
 * request line skipped; list headers joined with ", "; a repeated
 * Authorization refused (400, the header named), in the head or in a
 * trailer; Expect: 100-continue heard for a body that fits, not for one
 * without a body.
 */
static void
test_headers_as_http_parser_reads_them(void **state)
{
	static const char req[] = "\r\nPOST /a HTTP/1.1\r\n"
	    "X-Tight:v\r\nX-Blanks: \t lead and trail \t\r\nX-Empty:\r\n"
	    "X-Blank: \t\r\nconnection: keep-alive\r\nUPGRADE: a\r\n"
	    "Connection: Upgrade\r\nupgrade: b\r\nAuthorization: Bearer x y\r\n"
	    "Sec-WebSocket-Protocol: p1\r\nExpect: 100-continue\r\n"
	    "Content-Length: 2\r\n\r\nok";
	static const char want[] = "X-Tight\0v\0X-Blanks\0lead and trail \t\0"
	    "X-Empty\0\0X-Blank\0\0connection\0keep-alive\0UPGRADE\0a\0"
	    "Connection\0Upgrade\0upgrade\0b\0Authorization\0Bearer x y\0"
	    "Sec-WebSocket-Protocol\0p1\0Expect\0" "100-continue\0"
	    "Content-Length\0" "2\0";
	size_t len = strlen(req), body = strlen(req) - 2;

	(void)state;
	for (size_t step = 1; step <= len; step++) {
		struct http_reader *r = http_reader_new(64);
		const struct http_request *q;
		enum http_read_result res = HTTP_READ_MORE;
		size_t off = 0;
		int cont = 0;

		/* Up to the body: the head is whole, the body not yet here. */
		while (off < body) {
			size_t n = body - off < step ? body - off : step;

			off += http_reader_feed(r, req + off, n, &res);
			assert_int_equal(res, HTTP_READ_MORE);
			cont += http_reader_take_continue(r);
		}
		assert_int_equal(cont, 1);
		off += http_reader_feed(r, req + off, len - off, &res);
		assert_int_equal(res, HTTP_READ_REQUEST);
		assert_int_equal(off, len);
		q = http_reader_request(r);
		assert_int_equal(q->headers_len, sizeof(want) - 1);
		assert_memory_equal(q->headers, want, sizeof(want) - 1);
		assert_string_equal(q->connection, "keep-alive, Upgrade");
		assert_string_equal(q->upgrade, "a, b");
		assert_string_equal(q->authorization, "Bearer x y");
		assert_string_equal(q->ws_protocol, "p1");
		assert_string_equal(q->ws_key, "");
		assert_int_equal(q->body_len, 2);
		http_reader_free(r);
	}
}

static void
test_repeated_single_headers_refused(void **state)
{
	static const struct { const char *req, *reason; } t[] = {
		{ "GET /a HTTP/1.1\r\nAuthorization: a\r\nX: y\r\n"
		    "authorization: b\r\n\r\n", "duplicate Authorization header" },
		{ "GET /a HTTP/1.1\r\nSec-WebSocket-Key: a\r\n"
		    "Sec-WebSocket-Key: a\r\n\r\n", "duplicate Sec-WebSocket-Key header" },
		{ "GET /a HTTP/1.1\r\nTether-Replica: r\r\n"
		    "TETHER-REPLICA: r\r\n\r\n", "duplicate Tether-Replica header" },
		/* In a trailer, after a body: the same rule. */
		{ "POST /a HTTP/1.1\r\nAuthorization: a\r\n"
		    "Transfer-Encoding: chunked\r\n\r\n1\r\nx\r\n0\r\n"
		    "Authorization: b\r\n\r\n", "duplicate Authorization header" },
	};

	(void)state;
	for (size_t i = 0; i < sizeof(t) / sizeof(t[0]); i++) {
		for (int split = 0; split < 2; split++) {
			struct http_reader *r = http_reader_new(64);
			enum http_read_result res;
			const char *reason;

			if (split)
				res = feed_bytewise(r, t[i].req, strlen(t[i].req));
			else
				http_reader_feed(r, t[i].req, strlen(t[i].req), &res);
			assert_int_equal(res, HTTP_READ_ERROR);
			assert_int_equal(http_reader_error(r, &reason), 400);
			assert_string_equal(reason, t[i].reason);
			http_reader_free(r);
		}
	}
}

/* No body, no 100 Continue, even when asked. */
static void
test_no_continue_without_a_body(void **state)
{
	static const char req[] = "GET /a HTTP/1.1\r\nExpect: 100-continue\r\n\r\n";
	struct http_reader *r = http_reader_new(64);
	enum http_read_result res;

	(void)state;
	assert_int_equal(http_reader_feed(r, req, strlen(req), &res), strlen(req));
	assert_int_equal(res, HTTP_READ_REQUEST);
	assert_int_equal(http_reader_take_continue(r), 0);
	http_reader_free(r);
}

/* A malformed escape or an encoded NUL, in the path or in the query:
 * 400 with the part named, wherever it falls. */
static void
test_malformed_percent_encoding_refused(void **state)
{
	static const struct { const char *target, *reason; } t[] = {
		{ "/a%4", "malformed percent-encoding in the path" },
		{ "/a%zz/b", "malformed percent-encoding in the path" },
		{ "/plain/then%00", "malformed percent-encoding in the path" },
		{ "/a?b=%", "malformed percent-encoding in the query" },
		{ "/a?b+c=%0g", "malformed percent-encoding in the query" },
		{ "/a?%00", "malformed percent-encoding in the query" },
	};
	char req[128];

	(void)state;
	for (size_t i = 0; i < sizeof(t) / sizeof(t[0]); i++) {
		struct http_reader *r = http_reader_new(64);
		enum http_read_result res;
		const char *reason;
		int n = snprintf(req, sizeof(req), "GET %s HTTP/1.1\r\nHost: h\r\n\r\n",
		    t[i].target);

		http_reader_feed(r, req, (size_t)n, &res);
		assert_int_equal(res, HTTP_READ_ERROR);
		assert_int_equal(http_reader_error(r, &reason), 400);
		assert_string_equal(reason, t[i].reason);
		http_reader_free(r);
	}
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_streamed_body_goes_to_the_sink_however_split),
		cmocka_unit_test(test_streamed_request_without_body_is_one_request),
		cmocka_unit_test(test_other_paths_keep_the_body_limit),
		cmocka_unit_test(test_streamed_length_is_reported_not_copied),
		cmocka_unit_test(test_ambiguous_heads_refused),
		cmocka_unit_test(test_targets_split_and_each_request_its_own),
		cmocka_unit_test(test_malformed_percent_encoding_refused),
		cmocka_unit_test(test_headers_as_http_parser_reads_them),
		cmocka_unit_test(test_repeated_single_headers_refused),
		cmocka_unit_test(test_no_continue_without_a_body),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
