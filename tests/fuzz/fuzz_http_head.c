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
 * The input's first byte picks the head length cut: all of it, or up to
 * its first empty line.
 */
#include <limits.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <http_parser.h>

#include "httphead.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

struct seen {
	int complete;
	int chunked;
	uint64_t length;
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

static const http_parser_settings settings = {
	.on_headers_complete = on_headers_complete,
};

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	const char *head = (const char *)data + 1;
	struct http_framing f;
	struct seen s = { 0 };
	const char *why = NULL;
	http_parser p;
	size_t len;

	if (size < 1)
		return 0;
	len = size - 1;
	if (data[0] & 1) {
		size_t hl = http_head_length(head, len);

		if (hl > 0)
			len = hl;
	}
	if (http_head_check(head, len, &f, &why) != 0) {
		check(why != NULL && why[0] != '\0');
		return 0;
	}
	check(why == NULL);
	check(!(f.chunked && f.has_length));
	http_parser_init(&p, len >= 5 && memcmp(head, "HTTP/", 5) == 0 ?
	    HTTP_RESPONSE : HTTP_REQUEST);
	p.data = &s;
	(void)http_parser_execute(&p, &settings, head, len);
	if (!s.complete)
		return 0;           /* http-parser refused it: stricter is fine */
	check(s.chunked == f.chunked);
	if (f.has_length)
		check(s.length == f.length);
	else if (!f.chunked)
		check(s.length == ULLONG_MAX);
	return 0;
}
