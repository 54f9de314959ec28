/*
 * http.h: reading HTTP/1.1 requests, one at a time, from the bytes of one
 * connection.  Debian's http-parser does the syntax; this file adds what the
 * gateway needs on top: the limits (head size, body size), the few headers
 * the server acts on, the URL split into a decoded path and query, and one
 * result per call that says what the caller must do next.
 *
 * Transport-free (no libevent, no TLS) so that it can be fuzzed and tested
 * as a function of its input.
 *
 * Life of a reader: http_reader_feed() until it returns HTTP_READ_REQUEST
 * (answer it, then http_reader_reset() for the next request on the same
 * connection) or HTTP_READ_ERROR (answer http_reader_error()'s status and
 * close: the stream cannot be resynchronised).
 */
#ifndef TETHER_HTTP_H
#define TETHER_HTTP_H

#include <stddef.h>

/* Request line and headers together, CRLFs included; beyond: 431. */
#define HTTP_HEAD_MAX 16384

enum http_read_result {
	HTTP_READ_MORE,      /* all bytes consumed; the request is not complete */
	HTTP_READ_REQUEST,   /* a request is ready (http_reader_request) */
	HTTP_READ_ERROR,     /* malformed or over a limit (http_reader_error) */
	HTTP_READ_HEAD,      /* a streamed request's head is ready; its body
	                        follows through the sink (http_reader_stream) */
};

/*
 * A complete request.  Every string is NUL-terminated and "" when absent;
 * all of it is owned by the reader and valid until http_reader_reset or
 * http_reader_free.
 */
struct http_request {
	const char *method;          /* "GET", "POST", ... */
	const char *path;            /* percent-decoded, without the query */
	const char *query;           /* percent-decoded ('+' is a space) */
	const char *authorization;
	const char *upgrade;         /* the Upgrade header */
	const char *connection;      /* Connection headers, joined with ", " */
	const char *ws_key;          /* Sec-WebSocket-Key */
	const char *ws_version;      /* Sec-WebSocket-Version */
	const char *ws_protocol;     /* Sec-WebSocket-Protocol headers, joined */
	const char *replica;         /* Tether-Replica: a peer link's dialing
	                                replica (docs/0020) */
	const char *body;            /* NULL when body_len is 0 */
	size_t body_len;
	/*
	 * The body is over the limit: the request was cut there (the rest is
	 * not read, body holds what fitted) and keep_alive is 0, so the
	 * connection closes after the answer (413).
	 */
	int body_too_large;
	int keep_alive;              /* HTTP/1.1 without "Connection: close":
	                                another request may follow */
	int head_only;               /* HEAD: answer without a body */
	int http_minor;              /* HTTP/1.<minor> */
	/* For requests that are passed on (http_reader_stream): */
	const char *target;          /* the request target as sent, not decoded */
	const char *headers;         /* every header: "name\0value\0" pairs */
	size_t headers_len;
	int body_chunked;            /* Transfer-Encoding: chunked */
	int has_length;              /* Content-Length (one, digits only) */
	unsigned long long content_length;   /* its value */
};

struct http_reader;

/* Returns NULL when out of memory.  max_body: largest body accepted. */
struct http_reader *http_reader_new(size_t max_body);
void http_reader_free(struct http_reader *r);

/*
 * Parses data[0..len) and returns how many bytes belong to the current
 * request.  After HTTP_READ_REQUEST, the bytes past that count are the next
 * request (pipelining) or, after an upgrade, the new protocol's.  After
 * HTTP_READ_ERROR nothing more may be fed.
 */
size_t http_reader_feed(struct http_reader *r, const char *data, size_t len,
    enum http_read_result *res);

/* The request, after HTTP_READ_REQUEST. */
const struct http_request *http_reader_request(const struct http_reader *r);

/* After HTTP_READ_ERROR: the status to answer (400, 431) and why. */
int http_reader_error(const struct http_reader *r, const char **reason);

/*
 * 1 if the request being read is one passed on (http_reader_stream's match
 * accepted its path).  Also after HTTP_READ_ERROR, when enough of the
 * target was read to tell: http_reader_request then holds its method and
 * path, so the refusal can be answered and audited as the proxy does.
 */
int http_reader_streamed(const struct http_reader *r);

/* 1 if any byte of a request has been read since the last reset. */
int http_reader_started(const struct http_reader *r);

/*
 * 1 at most once per request, when its head is complete, asked for
 * "Expect: 100-continue" with a body that fits, and the body has not
 * arrived yet: the caller sends "HTTP/1.1 100 Continue" so that the client
 * sends the body.
 */
int http_reader_take_continue(struct http_reader *r);

/*
 * Requests whose decoded path match() accepts are passed on, not
 * answered here: their body is not limited by max_body and not kept.  One
 * with a body is reported twice: HTTP_READ_HEAD once its head is complete
 * (body still to come), then each piece of the decoded body goes to
 * sink(arg, ...) as it is fed, then HTTP_READ_REQUEST at its end.  One
 * without a body is reported once, as HTTP_READ_REQUEST.  Kept across
 * http_reader_reset.  Returns 0.
 */
int http_reader_stream(struct http_reader *r, int (*match)(const char *path),
    void (*sink)(void *arg, const char *data, size_t len), void *arg);

/* Forgets the request: ready for the next one on the same connection. */
void http_reader_reset(struct http_reader *r);

/* 1 if the comma-separated list (a header value) holds token, compared
 * without regard to case: "keep-alive, Upgrade" holds "upgrade". */
int http_token_list_has(const char *list, const char *token);

/*
 * The decoded path and query of the request line at the start of buf (len
 * bytes: the first bytes of a connection), as the reader would decode
 * them: the line up to its LF (a CR before it dropped), "METHOD SP target
 * SP HTTP/...", the target's path part percent-decoded into path (pathlen
 * bytes, NUL-terminated), its query part ('+' a space, "" when none) into
 * query (querylen bytes).  Returns 0, or -1 when buf holds no whole line,
 * the line is not of that shape, or the path or the query does not fit:
 * the caller then knows nothing of the request (docs/0040's landing sends
 * it to loop 0).  Reads buf only; no allocation but the decodes'.
 */
int http_line_target(const char *buf, size_t len, char *path, size_t pathlen,
    char *query, size_t querylen);

#endif
