/*
 * httpbody.h: an HTTP answer's body collected in memory, as libcurl hands
 * it over (CURLOPT_WRITEFUNCTION), for tetherctl and `tether-client join`.
 *
 * Bounded: past max bytes the write refuses (libcurl then fails the
 * transfer) and too_big says why.  Answers may hold secrets (tokens,
 * kubeconfigs), so every copy is wiped before its memory is freed: the
 * buffer grows by copy, not realloc, which costs O(len) per write; answers
 * here are a few KB.
 */
#ifndef TETHER_HTTPBODY_H
#define TETHER_HTTPBODY_H

#include <stdbool.h>
#include <stddef.h>

struct httpbody {
	char *buf;        /* NUL-terminated (not counted in len); NULL if empty */
	size_t len;
	size_t max;       /* set before the transfer */
	bool too_big;
};

/* libcurl's write callback (arg: a struct httpbody).  Returns n, or 0 when
 * the body would pass max (too_big set) or memory runs out. */
size_t httpbody_write(char *ptr, size_t size, size_t nmemb, void *arg);
/* Wipes and frees the buffer; the struct is zeroed (max too). */
void httpbody_wipe(struct httpbody *b);

#endif
