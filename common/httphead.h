/*
 * httphead.h: pure helpers for an HTTP/1.x request head as raw bytes.
 *
 * The agent uses them on streams to a service that has a token of its own
 * (`join --service-token NAME=FILE`): the first request head of each stream
 * gets `Authorization: Bearer TOKEN` in place of any Authorization it
 * carried.  No I/O, no logging: a token never leaves these functions except
 * in the rewritten head.
 *
 * Lines end with CRLF or a bare LF (both are kept as they are); the head
 * ends with an empty line.
 */
#ifndef TETHER_HTTPHEAD_H
#define TETHER_HTTPHEAD_H

#include <stddef.h>

/* Bounds of a token: 1..HTTP_TOKEN_MAX visible ASCII bytes (0x21..0x7e). */
#define HTTP_TOKEN_MAX 8192

/*
 * Length of the complete head at the start of buf (request line, headers
 * and the empty line, its line end included), or 0 if buf does not hold a
 * whole head yet.
 */
size_t http_head_length(const char *buf, size_t len);

/* 1 if token (len bytes) may be sent as a bearer token, else 0. */
int http_token_valid(const char *token, size_t len);

/*
 * Rewrites one complete request head (exactly len bytes, ending with its
 * empty line): every Authorization header is removed (any case, with its
 * obsolete continuation lines), and `Authorization: Bearer TOKEN` CRLF is
 * added just before the empty line.  Everything else is kept byte for byte.
 *
 * Returns 0 with *out (malloc'd, caller frees; not NUL-terminated, *outlen
 * bytes), or -1 when the head is malformed (no request line, a header line
 * without a name and colon, a continuation line with no header before it,
 * a NUL byte, not ending exactly with the empty line) or the token is not
 * valid; *out is then NULL.
 */
int http_head_set_bearer(const char *head, size_t len, const char *token,
    char **out, size_t *outlen);

#endif
