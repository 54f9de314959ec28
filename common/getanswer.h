/*
 * getanswer.h: reading one HTTP/1.x answer from raw bytes, for the agent's
 * own HTTPS requests (`tether-client join` asks the gateway for its CA and
 * its health; tunnel-client/fetch.c does the I/O).  Pure: no I/O, no
 * logging, no allocation; the bytes are untrusted (tests/fuzz/
 * fuzz_get_answer.c).
 *
 * Bounded: the head is at most GET_ANSWER_HEAD_MAX bytes and the body at
 * most the caller's max_body, so a reader that stops at
 * GET_ANSWER_HEAD_MAX + max_body + GET_ANSWER_FRAMING_MAX bytes has
 * seen enough to decide.  Framing follows http_head_check (httphead.h):
 * Content-Length, chunked, or (neither) the body runs to the end of the
 * connection.
 */
#ifndef TETHER_GETANSWER_H
#define TETHER_GETANSWER_H

#include <stddef.h>

/* Longest answer head accepted (status line, headers, empty line). */
#define GET_ANSWER_HEAD_MAX (16 * 1024)
/* Room for chunk framing on top of max_body bytes of chunk data. */
#define GET_ANSWER_FRAMING_MAX (4 * 1024)

struct get_answer {
	int status;         /* 100..999 */
	char *body;         /* points into the caller's buffer (decoded) */
	size_t body_len;
};

/*
 * Reads the answer at the start of buf[0..len).  eof says the peer closed
 * (no more bytes will come).  Returns 1 when the answer is complete (*a
 * filled; a chunked body is decoded in place, so buf is changed and must
 * not be parsed again), 0 when more bytes are needed (buf unchanged), or
 * -1 with why (a static reason or one written into whybuf, whylen bytes)
 * when it is malformed, its head is over GET_ANSWER_HEAD_MAX bytes, its
 * body over max_body bytes, or the peer closed before its end.  An
 * interim (1xx) answer is refused: a GET never asks for one.
 */
int get_answer_parse(char *buf, size_t len, int eof, size_t max_body,
    struct get_answer *a, char *whybuf, size_t whylen);

#endif
