/*
 * fuzz_http_answer.c: libFuzzer target for the answer-head path of
 * /k8s/clusters/ID (gateway/k8s.c): a node's answer head is read by
 * http-parser in response mode, told at the head's end that no body
 * follows when http_answer_bodiless says so, checked by http_head_check,
 * and what follows it is decided by http_answer_body (common/httphead.c).
 *
 * The input's first byte is the request: bit 0 a HEAD, bit 1 one that
 * asked to upgrade; the rest is the node's bytes (a head, then whatever
 * follows).  Beyond "no crash, no over-read", it checks RFC 9110's rules
 * on every head both accept:
 *   - a 1xx, 204 or 304, or an answer to HEAD, never has a body: the
 *     parser completes the message at the head's last byte, and the kind
 *     is never a length, chunks or until-EOF;
 *   - a 1xx or 204 with Content-Length or Transfer-Encoding is refused;
 *   - a 101 switches only for a request that asked to upgrade and when it
 *     names the protocol; a 1xx other than 101 is interim;
 *   - a kind of length or chunks is what the parser read too, and a reason
 *     is given exactly when refused.
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
	int head_request;
	int headers_complete;
	int message_complete;
	int bodiless;
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

	s->headers_complete = 1;
	s->bodiless = http_answer_bodiless(p->status_code, s->head_request);
	return s->bodiless;
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

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	const char *in = (const char *)data + 1, *why = NULL;
	struct seen s = { 0 };
	struct http_framing f;
	enum http_answer_kind kind;
	http_parser p;
	size_t len, hl;
	int upgrade_request, status;

	if (size < 1)
		return 0;
	s.head_request = data[0] & 1;
	upgrade_request = (data[0] >> 1) & 1;
	len = size - 1;
	hl = http_head_length(in, len);
	if (hl == 0)
		return 0;
	http_parser_init(&p, HTTP_RESPONSE);
	p.data = &s;
	/* The head exactly: a bodiless answer is complete at its last byte. */
	(void)http_parser_execute(&p, &settings, in, hl);
	if (!s.headers_complete || p.http_major != 1 ||
	    (HTTP_PARSER_ERRNO(&p) != HPE_OK && HTTP_PARSER_ERRNO(&p) != HPE_PAUSED))
		return 0;              /* refused by the parser: stricter is fine */
	status = p.status_code;
	if (s.bodiless)
		check(s.message_complete);
	if (http_head_check(in, hl, &f, &why) != 0)
		return 0;
	why = NULL;
	kind = http_answer_body(status, &f, s.head_request, upgrade_request, &why);
	check((kind == HTTP_ANSWER_REFUSED) == (why != NULL && why[0] != '\0'));
	if (kind == HTTP_ANSWER_REFUSED)
		return 0;
	if (status / 100 == 1 || status == 204 || status == 304 || s.head_request)
		check(kind == HTTP_ANSWER_INTERIM || kind == HTTP_ANSWER_SWITCH ||
		    kind == HTTP_ANSWER_NONE);
	if ((status / 100 == 1 || status == 204) && (f.has_length || f.chunked))
		check(0);
	if (kind == HTTP_ANSWER_SWITCH)
		check(status == 101 && upgrade_request && f.upgrade);
	if (kind == HTTP_ANSWER_INTERIM)
		check(status / 100 == 1 && status != 101);
	check(s.bodiless == (kind == HTTP_ANSWER_INTERIM ||
	    kind == HTTP_ANSWER_SWITCH || kind == HTTP_ANSWER_NONE));
	if (kind == HTTP_ANSWER_CHUNKED)
		check((p.flags & F_CHUNKED) != 0);
	if (kind == HTTP_ANSWER_LENGTH)
		check(f.has_length && p.content_length == f.length);
	if (kind == HTTP_ANSWER_TO_EOF)
		check(!f.has_length && !f.chunked);
	/* What follows a bodiless head is never taken as its body: the
	 * parser, resumed, reads it as the next message (or refuses it). */
	if (s.bodiless && hl < len) {
		s.message_complete = 0;
		s.headers_complete = 0;
		http_parser_pause(&p, 0);
		(void)http_parser_execute(&p, &settings, in + hl, len - hl);
	}
	return 0;
}
