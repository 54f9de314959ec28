/*
 * getanswer.c: one HTTP/1.x answer from raw bytes (see getanswer.h).  The
 * head's framing rules are http_head_check's and what follows the head is
 * http_answer_body's decision (RFC 9110: no body for 204 and 304, a 1xx
 * refused here); a chunked body is followed with http_body_end
 * (httphead.h) and decoded with ws_dechunk (wshead.h).
 */
#include "getanswer.h"

#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "httphead.h"
#include "wshead.h"

/* "HTTP/1.x DDD" then SP or CR: *status.  0 or -1. */
static int
parse_status(const char *head, size_t len, int *status)
{
	const char *p = head;

	if (len < 13 || memcmp(p, "HTTP/1.", 7) != 0 || (p[7] != '0' && p[7] != '1') ||
	    p[8] != ' ')
		return -1;
	p += 9;
	for (int i = 0; i < 3; i++)
		if (p[i] < '0' || p[i] > '9')
			return -1;
	if (p[0] == '0' || (p[3] != ' ' && p[3] != '\r'))
		return -1;
	*status = (p[0] - '0') * 100 + (p[1] - '0') * 10 + (p[2] - '0');
	return 0;
}

static int
refuse(char *whybuf, size_t whylen, const char *why)
{
	snprintf(whybuf, whylen, "%s", why);
	return -1;
}

static int
too_big(char *whybuf, size_t whylen, size_t max_body)
{
	snprintf(whybuf, whylen, "answer body larger than %zu bytes", max_body);
	return -1;
}

/* A Content-Length body: complete, or more needed, or too big. */
static int
length_body(char *body, size_t blen, int eof, size_t max_body,
    const struct http_framing *f, struct get_answer *a, char *whybuf,
    size_t whylen)
{
	if (f->length > max_body)
		return too_big(whybuf, whylen, max_body);
	if (blen < f->length) {
		if (eof)
			return refuse(whybuf, whylen, "connection closed before the "
			    "answer's body ended");
		return 0;
	}
	a->body = body;
	a->body_len = (size_t)f->length;
	return 1;
}

/* A chunked body: complete, or more needed, or malformed. */
static int
chunked_body(char *body, size_t blen, int eof, size_t max_body,
    const struct http_framing *f, struct get_answer *a, char *whybuf,
    size_t whylen)
{
	struct http_body_end e;
	size_t used, out;
	int done = 0, complete = 0;

	http_body_end_init(&e, f);
	used = http_body_end_feed(&e, body, blen, &done);
	if (used == (size_t)-1)
		return refuse(whybuf, whylen, "malformed chunked body");
	if (!done) {
		if (blen > max_body + GET_ANSWER_FRAMING_MAX)
			return too_big(whybuf, whylen, max_body);
		if (eof)
			return refuse(whybuf, whylen, "connection closed inside the "
			    "answer's chunked body");
		return 0;
	}
	out = ws_dechunk(body, used, &complete);
	if (!complete)
		return refuse(whybuf, whylen, "malformed chunked body");
	if (out > max_body)
		return too_big(whybuf, whylen, max_body);
	a->body = body;
	a->body_len = out;
	return 1;
}

int
get_answer_parse(char *buf, size_t len, int eof, size_t max_body,
    struct get_answer *a, char *whybuf, size_t whylen)
{
	struct http_framing f;
	const char *why;
	char *body;
	size_t hl, blen;

	memset(a, 0, sizeof(*a));
	hl = http_head_length(buf, len);
	if (hl == 0 || hl > GET_ANSWER_HEAD_MAX) {
		if (hl > GET_ANSWER_HEAD_MAX || len > GET_ANSWER_HEAD_MAX) {
			snprintf(whybuf, whylen, "answer head larger than %d bytes",
			    GET_ANSWER_HEAD_MAX);
			return -1;
		}
		if (!eof)
			return 0;
		return refuse(whybuf, whylen, len == 0 ? "connection closed without "
		    "an answer" : "connection closed inside the answer's head");
	}
	if (parse_status(buf, hl, &a->status) != 0)
		return refuse(whybuf, whylen, "the answer does not start with an "
		    "HTTP/1.x status line");
	if (http_head_check(buf, hl, &f, &why) != 0) {
		snprintf(whybuf, whylen, "malformed answer head: %s", why);
		return -1;
	}
	switch (http_answer_body(a->status, &f, 0, 0, &why)) {
	case HTTP_ANSWER_REFUSED:
		snprintf(whybuf, whylen, "malformed answer: %s", why);
		return -1;
	case HTTP_ANSWER_INTERIM:
	case HTTP_ANSWER_SWITCH:
		return refuse(whybuf, whylen, "an interim (1xx) answer to a GET");
	case HTTP_ANSWER_NONE:
		a->body = buf + hl;
		return 1;
	case HTTP_ANSWER_LENGTH:
		return length_body(buf + hl, len - hl, eof, max_body, &f, a, whybuf,
		    whylen);
	case HTTP_ANSWER_CHUNKED:
		return chunked_body(buf + hl, len - hl, eof, max_body, &f, a, whybuf,
		    whylen);
	case HTTP_ANSWER_TO_EOF:
		break;
	}
	body = buf + hl;
	blen = len - hl;
	/* No framing: the body runs to the end of the connection. */
	if (blen > max_body)
		return too_big(whybuf, whylen, max_body);
	if (!eof)
		return 0;
	a->body = body;
	a->body_len = blen;
	return 1;
}
