/*
 * httpbody.c: an HTTP answer's body in memory, bounded and wiped (see
 * httpbody.h).
 */
#include "httpbody.h"

#include <stdlib.h>
#include <string.h>

#include <openssl/crypto.h>

size_t
httpbody_write(char *ptr, size_t size, size_t nmemb, void *arg)
{
	struct httpbody *b = arg;
	size_t n = size * nmemb;
	char *nb;

	if (n > b->max - b->len) {
		b->too_big = true;
		return 0;
	}
	if ((nb = malloc(b->len + n + 1)) == NULL)
		return 0;
	if (b->buf != NULL) {
		memcpy(nb, b->buf, b->len);
		OPENSSL_cleanse(b->buf, b->len);
		free(b->buf);
	}
	b->buf = nb;
	memcpy(b->buf + b->len, ptr, n);
	b->len += n;
	b->buf[b->len] = '\0';
	return n;
}

void
httpbody_wipe(struct httpbody *b)
{
	if (b->buf != NULL) {
		OPENSSL_cleanse(b->buf, b->len);
		free(b->buf);
	}
	memset(b, 0, sizeof(*b));
}
