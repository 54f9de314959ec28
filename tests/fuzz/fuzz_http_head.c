/*
 * fuzz_http_head.c: libFuzzer target for the answer heads a node sends
 * through /k8s/clusters/ID (and the same rules for requests): gateway/k8s.c
 * reads them with http-parser in response mode and accepts one only if
 * http_head_check (common/httphead.c) finds one framing in it.
 *
 * Beyond "no crash, no over-read, no leak", it checks that the two agree:
 * whenever http_head_check accepts a head, http-parser, run over the same
 * bytes (as an answer when the head starts with "HTTP/", else as a
 * request), either refuses it or reads the same framing: chunked exactly
 * when the check says chunked, and the same Content-Length.  A head on
 * which they disagreed would let the node (or a client) make the gateway
 * and the next hop see different message ends.
 *
 * And http_head_check_lines, on a head the check accepts, accepts it too,
 * with the same framing, and indexes its header lines as a plain scan of
 * the head finds them (each line's start, its first colon, its CR; the
 * first HTTP_LINES_MAX of them, and `more` past that).  The agent's bearer
 * rewrite from that index (http_head_set_bearer_lines) answers as the one
 * that reads the head (http_head_set_bearer), byte for byte.
 *
 * The input's first byte picks the head length cut: all of it, or up to
 * its first empty line.  In the second case the bytes after the head are a
 * request's body and what may follow it: http_body_end (the agent's
 * one-request rule for token services) must end the body exactly where
 * http-parser does, whenever both accept it.
 */
#include <limits.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <http_parser.h>

#include "httphead.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void check(int ok);

/* http_head_check_lines on a head http_head_check accepted (framing f):
 * the same answer, and its index as a scan line by line finds it. */
static void
check_lines(const char *head, size_t len, const struct http_framing *f)
{
	static struct http_lines lines;
	struct http_framing f2;
	const char *why = "", *at = head, *end = head + len;
	unsigned i = 0;
	int start = 1;

	check(http_head_check_lines(head, len, &f2, &lines, &why) == 0);
	check(why == NULL && memcmp(f, &f2, sizeof(f2)) == 0);
	check(lines.n <= HTTP_LINES_MAX);
	while (at < end) {
		const char *cr = memchr(at, '\r', (size_t)(end - at)), *colon;

		check(cr != NULL);
		if (start) {
			start = cr == at;
			at = cr + 2;
			continue;
		}
		if (cr == at)
			break;                  /* the empty line */
		colon = memchr(at, ':', (size_t)(cr - at));
		check(colon != NULL);
		if (i < HTTP_LINES_MAX) {
			check(i < lines.n);
			check(lines.at[i].off == (uint32_t)(at - head));
			check(lines.at[i].name == (uint32_t)(colon - at));
			check(lines.at[i].len == (uint32_t)(cr - at));
		}
		i++;
		at = cr + 2;
	}
	check(lines.n == (i < HTTP_LINES_MAX ? i : HTTP_LINES_MAX));
	check(lines.more == (i > HTTP_LINES_MAX));
	if (!lines.more) {
		char *a = NULL, *b = NULL;
		size_t alen = 0, blen = 0;
		int ra = http_head_set_bearer(head, len, "tok", &a, &alen);
		int rb = http_head_set_bearer_lines(head, len, &lines, "tok", 3, &b,
		    &blen);

		check(ra == rb && alen == blen &&
		    (ra != 0 || memcmp(a, b, alen) == 0));
		free(a);
		free(b);
	}
}

struct seen {
	int complete;
	int chunked;
	uint64_t length;
	int message_complete;
};

static void
check(int ok)
{
	if (!ok)
		abort();
}

static int
on_headers_complete(http_parser *p)
{
	struct seen *s = p->data;

	s->complete = 1;
	s->chunked = (p->flags & F_CHUNKED) != 0;
	s->length = p->content_length;
	http_parser_pause(p, 1);
	return 0;
}

static int
on_message_complete(http_parser *p)
{
	struct seen *s = p->data;

	s->message_complete = 1;
	http_parser_pause(p, 1);
	return 0;
}

static const http_parser_settings settings = {
	.on_headers_complete = on_headers_complete,
	.on_message_complete = on_message_complete,
};

/* A request's body in rest[0..len): both find the same end.  The parser
 * is paused on the head's last byte (last), not yet taken. */
static void
check_body_end(http_parser *p, struct seen *s, const struct http_framing *f,
    const char *last, const char *rest, size_t len)
{
	struct http_body_end e;
	size_t n, taken;
	int done = 0;

	http_body_end_init(&e, f);
	n = http_body_end_feed(&e, rest, len, &done);
	if (n == (size_t)-1)
		return;                 /* refused: stricter is fine */
	check(n <= len);
	check(done || n == len);
	http_parser_pause(p, 0);
	if (http_parser_execute(p, &settings, last, 1) != 1)
		return;
	taken = 0;
	if (!s->message_complete) {
		if (HTTP_PARSER_ERRNO(p) != HPE_OK)
			return;
		taken = http_parser_execute(p, &settings, rest, len);
	}
	if (!s->message_complete || HTTP_PARSER_ERRNO(p) != HPE_PAUSED)
		return;                 /* http-parser refused it, or wants more */
	check(done);
	check(n == taken);
}

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	const char *head = (const char *)data + 1;
	struct http_framing f;
	struct seen s = { 0 };
	const char *why = NULL;
	http_parser p;
	const char *rest = NULL;
	size_t len, rlen = 0;

	if (size < 1)
		return 0;
	len = size - 1;
	if (data[0] & 1) {
		size_t hl = http_head_length(head, len);

		if (hl > 0) {
			rest = head + hl;
			rlen = len - hl;
			len = hl;
		}
	}
	if (http_head_check(head, len, &f, &why) != 0) {
		check(why != NULL && why[0] != '\0');
		return 0;
	}
	check(why == NULL);
	check_lines(head, len, &f);
	check(!(f.chunked && f.has_length));
	http_parser_init(&p, len >= 5 && memcmp(head, "HTTP/", 5) == 0 ?
	    HTTP_RESPONSE : HTTP_REQUEST);
	p.data = &s;
	(void)http_parser_execute(&p, &settings, head, len);
	/* Refused by http-parser (stricter is fine), or not HTTP/1.x, which
	 * the gateway refuses (http-parser reads HTTP/0.9 without framing). */
	if (!s.complete || p.http_major != 1)
		return 0;
	check(s.chunked == f.chunked);
	if (f.has_length)
		check(s.length == f.length);
	else if (!f.chunked)
		check(s.length == ULLONG_MAX);
	if (p.type == HTTP_REQUEST && rlen > 0 && !p.upgrade)
		check_body_end(&p, &s, &f, head + len - 1, rest, rlen);
	return 0;
}
