/*
 * joincmd.c: the registration command of `tetherctl token create --format
 * command` (see joincmd.h).
 */
#include "joincmd.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <openssl/crypto.h>
#include <openssl/evp.h>

/* A growing string; on allocation failure buf is freed and set to NULL and
 * every later append is a no-op. */
struct sbuf {
	char *buf;
	size_t len, cap;
};

static void
sbuf_add(struct sbuf *b, const char *s, size_t n)
{
	char *nb;
	size_t ncap;

	if (b->buf == NULL)
		return;
	if (b->len + n + 1 > b->cap) {
		ncap = (b->len + n + 1) * 2;
		if ((nb = malloc(ncap)) == NULL) {
			OPENSSL_clear_free(b->buf, b->cap);
			b->buf = NULL;
			return;
		}
		memcpy(nb, b->buf, b->len);
		OPENSSL_clear_free(b->buf, b->cap);   /* it may hold the token */
		b->buf = nb;
		b->cap = ncap;
	}
	memcpy(b->buf + b->len, s, n);
	b->len += n;
	b->buf[b->len] = '\0';
}

static void
sbuf_str(struct sbuf *b, const char *s)
{
	sbuf_add(b, s, strlen(s));
}

/* Appends s in single quotes; a quote inside becomes '\'' so that the shell
 * reads every byte literally. */
static void
sbuf_quoted(struct sbuf *b, const char *s)
{
	const char *q;

	sbuf_add(b, "'", 1);
	while ((q = strchr(s, '\'')) != NULL) {
		sbuf_add(b, s, (size_t)(q - s));
		sbuf_add(b, "'\\''", 4);
		s = q + 1;
	}
	sbuf_str(b, s);
	sbuf_add(b, "'", 1);
}

/* The document as base64 without line breaks (caller wipes and frees). */
static char *
doc_base64(json_t *doc, size_t *cap)
{
	char *json, *b64 = NULL;
	size_t n;

	if ((json = json_dumps(doc, JSON_COMPACT)) == NULL)
		return NULL;
	n = strlen(json);
	*cap = 4 * ((n + 2) / 3) + 1;
	if ((b64 = malloc(*cap)) != NULL)
		EVP_EncodeBlock((unsigned char *)b64, (unsigned char *)json, (int)n);
	OPENSSL_clear_free(json, n);
	return b64;
}

char *
joincmd_format(json_t *doc, char *const *join_args, size_t nargs)
{
	const char *sum = json_string_value(json_object_get(doc, "ca_checksum"));
	struct sbuf b = { NULL, 0, 256 };
	char *b64;
	size_t b64cap = 0;

	if (sum == NULL || (b.buf = calloc(1, b.cap)) == NULL)
		return NULL;
	if ((b64 = doc_base64(doc, &b64cap)) == NULL) {
		free(b.buf);
		return NULL;
	}
	sbuf_str(&b, "printf %s ");
	sbuf_quoted(&b, b64);
	sbuf_str(&b, " | base64 -d | tether-client join --state-dir "
	    "\"${TETHER_STATE_DIR:-" JOINCMD_STATE_DIR "}\" --ca-checksum ");
	sbuf_quoted(&b, sum);
	for (size_t i = 0; i < nargs; i++) {
		sbuf_str(&b, " ");
		sbuf_quoted(&b, join_args[i]);
	}
	sbuf_str(&b, " && systemctl enable --now " JOINCMD_UNIT);
	OPENSSL_clear_free(b64, b64cap);
	return b.buf;
}
