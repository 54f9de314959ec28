/*
 * fuzz_http_request.c: libFuzzer target for gateway/transport/http.c, the code that
 * turns a TLS connection's first bytes into requests (http-parser underneath
 * is Debian's; what is fuzzed here is ours: the callbacks that collect URL
 * and header pieces, the limits, the URL split and percent-decoding).
 *
 * Beyond "no crash, no over-read, no leak", it checks that the result does
 * not depend on how the bytes were split into reads: the input is parsed
 * once in one piece and once in pieces of sizes drawn from its first byte,
 * and both must yield the same requests and the same error status.  (Not
 * always the same reason: of two faults in one head, the one reported first
 * can depend on where a read ended.)  And no request the reader accepts has
 * a head that http_head_check refuses (ambiguous framing: CL and TE,
 * several CLs, obs-fold, bare CR or LF, NUL...): its framing fields are
 * the check's.
 */
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "http.h"
#include "httphead.h"

#define MAX_BODY 64

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

struct transcript {
	char *p;
	size_t len, cap;
};

static void
check(int ok)
{
	if (!ok)
		abort();
}

static void
put(struct transcript *t, const void *data, size_t len)
{
	if (t->len + len + 1 > t->cap) {
		t->cap = (t->len + len + 1) * 2;
		t->p = realloc(t->p, t->cap);
		check(t->p != NULL);
	}
	memcpy(t->p + t->len, data, len);
	t->len += len;
}

static void
put_str(struct transcript *t, const char *s)
{
	check(s != NULL);
	put(t, s, strlen(s) + 1);
}

static void
record_request(struct transcript *t, const struct http_request *q)
{
	char nums[64];

	put_str(t, "REQUEST");
	put_str(t, q->method);
	put_str(t, q->path);
	put_str(t, q->query);
	put_str(t, q->authorization);
	put_str(t, q->upgrade);
	put_str(t, q->connection);
	put_str(t, q->ws_key);
	put_str(t, q->ws_version);
	put_str(t, q->ws_protocol);
	check(q->path[0] == '/');
	check(q->body_len <= MAX_BODY);
	check((q->body == NULL) == (q->body_len == 0));
	if (q->body_len > 0)
		put(t, q->body, q->body_len);
	snprintf(nums, sizeof(nums), "%zu %d %d %d %d %d %d %llu", q->body_len,
	    q->body_too_large, q->keep_alive, q->head_only, q->http_minor,
	    q->body_chunked, q->has_length, q->content_length);
	put_str(t, nums);
	/* Exercise the token matcher on what a client controls. */
	(void)http_token_list_has(q->connection, "upgrade");
	(void)http_token_list_has(q->ws_protocol, "tether.v1");
}

/* Parses data in pieces (piece sizes from seed; 0: all at once). */
static void
run(const uint8_t *data, size_t size, unsigned seed, struct transcript *t)
{
	struct http_reader *r = http_reader_new(MAX_BODY);
	size_t off = 0;

	check(r != NULL);
	while (off < size) {
		size_t piece = size - off, n;
		enum http_read_result res;

		if (seed != 0) {
			seed = seed * 1103515245u + 12345u;
			piece = 1 + (seed >> 16) % 61;
			if (piece > size - off)
				piece = size - off;
		}
		n = http_reader_feed(r, (const char *)data + off, piece, &res);
		check(n <= piece);
		off += n;
		(void)http_reader_take_continue(r);
		if (res == HTTP_READ_ERROR) {
			const char *reason;
			int status = http_reader_error(r, &reason);

			check(status == 400 || status == 431);
			check(reason[0] != '\0');
			put_str(t, "ERROR");
			put_str(t, status == 400 ? "400" : "431");
			break;
		}
		if (res == HTTP_READ_REQUEST) {
			const struct http_request *q = http_reader_request(r);

			record_request(t, q);
			if (!q->keep_alive)
				break;
			http_reader_reset(r);
			continue;
		}
		check(n == piece);
	}
	http_reader_free(r);
}

/* The first request, if the reader accepted its head, has a head that
 * frames it in one way only, and the reader reports that framing. */
static void
check_first_head(const uint8_t *data, size_t size)
{
	struct http_reader *r = http_reader_new(MAX_BODY);
	const char *h = (const char *)data;
	size_t skip = 0, hl, n;
	enum http_read_result res;
	struct http_framing f;
	const char *why;

	check(r != NULL);
	/* Empty lines before the request line belong to its head. */
	while (size - skip >= 2 && h[skip] == '\r' && h[skip + 1] == '\n')
		skip += 2;
	hl = http_head_length(h + skip, size - skip);
	hl = hl > 0 ? skip + hl : 0;
	n = http_reader_feed(r, h, size, &res);
	check(n <= size);
	if (res == HTTP_READ_REQUEST || res == HTTP_READ_HEAD) {
		const struct http_request *q = http_reader_request(r);

		/* n may stop just before the head's last byte (413). */
		check(hl > 0 && hl <= n + 1);
		check(http_head_check(h, hl, &f, &why) == 0);
		check(q->has_length == f.has_length);
		check(q->body_chunked == f.chunked);
		check(!q->has_length || q->content_length == f.length);
	}
	http_reader_free(r);
}

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct transcript whole = { 0 }, split = { 0 };

	if (size < 1)
		return 0;
	check_first_head(data + 1, size - 1);
	run(data + 1, size - 1, 0, &whole);
	run(data + 1, size - 1, data[0] | 1u, &split);
	check(whole.len == split.len);
	check(whole.len == 0 || memcmp(whole.p, split.p, whole.len) == 0);
	free(whole.p);
	free(split.p);
	return 0;
}
