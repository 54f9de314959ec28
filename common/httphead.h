/*
 * httphead.h: pure helpers for an HTTP/1.x request head as raw bytes.
 *
 * The agent uses them on streams to a service that has a token of its own
 * (`join --service-token NAME=FILE`): every request head of the stream
 * gets `Authorization: Bearer TOKEN` in place of any Authorization it
 * carried, and its framing says where its body ends and the next head
 * begins.  No I/O, no logging: a token never leaves these functions except
 * in the rewritten head.
 *
 * Lines end with CRLF or a bare LF (both are kept as they are); the head
 * ends with an empty line.
 *
 * http_head_check is the one set of framing rules for every head the
 * gateway passes on: a client's request to /k8s/clusters/ID and the
 * node's answer to it (docs/0007); http_answer_body says what follows an
 * answer's head (RFC 9110: which statuses have no body, when a 101 may
 * switch protocols).
 */
#ifndef TETHER_HTTPHEAD_H
#define TETHER_HTTPHEAD_H

#include <stddef.h>
#include <stdint.h>

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
 * empty line) for a service with a token of its own: every Authorization,
 * Connection and Keep-Alive header is removed (any case, with its obsolete
 * continuation lines), and `Authorization: Bearer TOKEN` CRLF is added just
 * before the empty line, then `Connection: Upgrade, close` CRLF when the
 * head has an Upgrade header, else `Connection: close` CRLF when one of its
 * Connection headers listed `close`, else nothing (the connection may carry
 * the next request, which gets the same rewrite).  Everything else is kept
 * byte for byte.
 *
 * Returns 0 with *out (malloc'd, caller frees; not NUL-terminated, *outlen
 * bytes), or -1 when the head is malformed (no request line, a header line
 * without a name and colon, a continuation line with no header before it,
 * a NUL byte, not ending exactly with the empty line) or the token is not
 * valid; *out is then NULL.
 */
int http_head_set_bearer(const char *head, size_t len, const char *token,
    char **out, size_t *outlen);

/* What a head says about the body after it (http_head_check). */
struct http_framing {
	int chunked;            /* Transfer-Encoding: chunked */
	int has_length;         /* a Content-Length header */
	uint64_t length;        /* its value */
	int upgrade;            /* an Upgrade header */
};

/* Longest chunk-size line (with extensions) or trailer line accepted. */
#define HTTP_CHUNK_LINE_MAX 16384

/* Longest Content-Length value accepted (digits): no overflow. */
#define HTTP_LENGTH_DIGITS 18

/*
 * Checks that one complete head (exactly len bytes: start line, header
 * lines, the empty line) frames its message in one way only:
 *   - every line ends with CRLF: no bare CR or LF, and no NUL or other
 *     control byte (HT is allowed in values) anywhere;
 *   - no obs-fold (a header line that starts with SP or HT);
 *   - each header line is a token, a colon, then the value;
 *   - at most one Content-Length, its value digits only (1 to
 *     HTTP_LENGTH_DIGITS of them, around optional spaces);
 *   - no tab in a Content-Length or Transfer-Encoding value;
 *   - Transfer-Encoding at most once, and exactly "chunked" (any case);
 *   - not both Content-Length and Transfer-Encoding.
 * Returns 0 with *f filled, or -1 with *why (a static string saying which
 * rule the head broke).  Costs one pass over the head; no allocation.
 */
int http_head_check(const char *head, size_t len, struct http_framing *f,
    const char **why);

/* Where the header lines of a head are (http_head_check_lines): line i's
 * name is head[off, off + name), its colon at off + name, its value up to
 * its CR at off + len (the value's leading spaces and tabs included).  In
 * the head's order; the start line and the empty line are not among them. */
#define HTTP_LINES_MAX 64
struct http_lines {
	unsigned n;             /* lines in at[] */
	int more;               /* the head had more than HTTP_LINES_MAX */
	struct { uint32_t off, name, len; } at[HTTP_LINES_MAX];
};

/*
 * http_head_check, and where its header lines are (*lines, filled when it
 * returns 0): a caller that reads the headers again needs no scan for
 * line ends and colons.  Past HTTP_LINES_MAX lines lines->more is 1 and
 * at[] holds the first ones: the caller reads the head itself.  Costs
 * http_head_check's pass and a store per line.
 */
int http_head_check_lines(const char *head, size_t len, struct http_framing *f,
    struct http_lines *lines, const char **why);

/*
 * http_head_set_bearer's rewrite, byte for byte, of a head that
 * http_head_check_lines accepted (exactly len bytes; lines: what it found),
 * read from the line table: no second pass for line ends, names and
 * colons.  token (toklen bytes) must be one that http_token_valid
 * accepted: it is not checked again (a caller that sends the same token
 * on every request checks it once).  Returns 0 with *out (malloc'd, caller
 * frees; *outlen bytes), or -1 with *out NULL where http_head_set_bearer
 * refuses too (an empty line before the request line, a request line
 * without a space or starting with a space or tab), when lines->more is
 * set (the caller uses http_head_set_bearer), or on no memory.  Costs one
 * look at each header line's name and a copy of the head.
 */
int http_head_set_bearer_lines(const char *head, size_t len,
    const struct http_lines *lines, const char *token, size_t toklen,
    char **out, size_t *outlen);

/* What follows an answer's head (http_answer_body). */
enum http_answer_kind {
	HTTP_ANSWER_REFUSED,    /* framed against RFC 9110: not passed on */
	HTTP_ANSWER_INTERIM,    /* a 1xx but 101: no body; the answer's head follows */
	HTTP_ANSWER_SWITCH,     /* 101 to a request that asked to upgrade: raw bytes */
	HTTP_ANSWER_NONE,       /* complete at its head (204, 304, to a HEAD) */
	HTTP_ANSWER_LENGTH,     /* Content-Length bytes */
	HTTP_ANSWER_CHUNKED,    /* chunks */
	HTTP_ANSWER_TO_EOF      /* until the connection closes */
};

/*
 * 1 when an answer with this status, to a request with this method, has
 * no body whatever its headers say (RFC 9110 6.4.1: any 1xx, 204 and 304,
 * and every answer to HEAD), else 0.  head_request: the request's method
 * was HEAD.  What a response parser is told at the end of the head.
 */
int http_answer_bodiless(int status, int head_request);

/*
 * What follows an answer head that passed http_head_check (f is what it
 * found), for a request that was a HEAD (head_request) and asked to
 * upgrade (upgrade_request: an Upgrade header and Connection: upgrade):
 *   - a 1xx or a 204 with Content-Length or Transfer-Encoding (RFC 9110
 *     8.6, 15.3.5; RFC 9112 6.1: a server must not send them) is refused;
 *   - a 101 is refused unless the request asked to upgrade and the answer
 *     names the protocol (an Upgrade header), else it switches;
 *   - another 1xx is interim; a 204, a 304 or an answer to HEAD has no
 *     body (a 304's Content-Length describes what a 200 would carry);
 *   - else chunks, a length, or bytes until the connection closes.
 * status outside 100..999 is refused.  Returns the kind; *why (a static
 * string) is set only when refused.  Pure: no allocation.
 */
enum http_answer_kind http_answer_body(int status, const struct http_framing *f,
    int head_request, int upgrade_request, const char **why);

/*
 * Where a request's body ends, found as its bytes arrive (the agent's
 * rule for a service with a token: each request's body, then its next
 * head): a length counts down,
 * chunks are followed through their sizes, extensions and trailers.  No
 * allocation; a few words of state.
 */
struct http_body_end {
	int state;              /* internal */
	uint64_t left;          /* bytes left: of the body, or of a chunk */
	size_t line;            /* bytes of the current size or trailer line */
};

/* Starts at the first byte after a head that f describes. */
void http_body_end_init(struct http_body_end *e, const struct http_framing *f);

/*
 * Takes data[0..len) and returns how many of its bytes belong to the body
 * (<= len): fewer than len only when the body ends inside data.  *done is
 * 1 once the body's last byte was taken (at once for a body of length 0
 * or none).  Returns (size_t)-1 when chunk framing is malformed (a size
 * that is not hex or over 15 digits, a missing CRLF, a size or trailer
 * line over HTTP_CHUNK_LINE_MAX bytes).
 */
size_t http_body_end_feed(struct http_body_end *e, const char *data,
    size_t len, int *done);

#endif
