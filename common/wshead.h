/*
 * wshead.h: reading the gateway's answer to a WebSocket upgrade, on the
 * client side: the response head, and the body of a refusal (whose reason
 * the user is shown).  Pure functions over bytes, so that they can be
 * fuzzed without a network; wsclient.c does the I/O.
 */
#ifndef TETHER_WSHEAD_H
#define TETHER_WSHEAD_H

#include <stddef.h>

struct ws_response_head {
	int status;                /* the HTTP status code */
	int upgrade_ok;            /* Upgrade: websocket */
	int connection_ok;         /* Connection lists upgrade */
	int have_accept;
	char accept[64];           /* Sec-WebSocket-Accept */
	int have_protocol;
	char protocol[128];        /* Sec-WebSocket-Protocol */
	long long content_length;  /* -1: none */
	int chunked;               /* Transfer-Encoding lists chunked */
	long retry_after_s;        /* Retry-After in delta-seconds (at most
	                            * WS_RETRY_AFTER_MAX_S); -1: none, or an
	                            * HTTP date or malformed (ignored) */
};

/* The longest Retry-After kept: a larger value reads as this (a day). */
#define WS_RETRY_AFTER_MAX_S 86400

/*
 * Parses a response head: NUL-terminated, modified in place, lines ending
 * in "\r\n" or "\n".  The status line, with control characters replaced,
 * goes to status_line.  Returns 0, or -1 if the status line is not HTTP/1.x
 * with a three-digit status.
 */
int ws_response_parse_head(char *head, struct ws_response_head *h,
    char *status_line, size_t sllen);

/*
 * Decodes a chunked body in place, as far as it is complete: returns the
 * decoded length and sets *complete once the last (empty) chunk was seen.
 * Never reads past body[len - 1].
 */
size_t ws_dechunk(char *body, size_t len, int *complete);

/* The reason for a refusal: the body's {"error": ...} string, else its
 * first line, else the status line; printable ASCII only. */
void ws_refusal_reason(const char *body, size_t len, const char *status_line,
    char *out, size_t outlen);


#endif
