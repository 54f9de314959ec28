/*
 * fuzz_wshead.c: libFuzzer target for common/wshead.c, the client's reading
 * of a gateway's answer to an upgrade (status line and headers, a chunked
 * refusal body, the refusal reason shown to the user).
 *
 * The body is copied into a buffer of exactly its length, with no NUL after
 * it, so that AddressSanitizer catches any read past the end.
 */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "wshead.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void
check(int ok)
{
	if (!ok)
		abort();
}

static void
check_printable(const char *s)
{
	for (; *s != '\0'; s++)
		check((unsigned char)*s >= 0x20 && (unsigned char)*s < 0x7f);
}

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct ws_response_head h;
	char status[128], reason[256], *buf;
	size_t len, out;
	int complete;

	if (size < 1)
		return 0;
	len = size - 1;

	/* The head: NUL-terminated, as wsclient.c hands it over. */
	buf = malloc(len + 1);
	check(buf != NULL);
	memcpy(buf, data + 1, len);
	buf[len] = '\0';
	status[0] = '\0';
	if (ws_response_parse_head(buf, &h, status, sizeof(status)) == 0)
		check(h.status >= 0 && h.status <= 999);
	check_printable(status);
	free(buf);

	/* A chunked body: exactly len bytes. */
	buf = malloc(len > 0 ? len : 1);
	check(buf != NULL);
	memcpy(buf, data + 1, len);
	out = ws_dechunk(buf, len, &complete);
	check(out <= len);
	ws_refusal_reason(buf, out, data[0] & 1 ? "HTTP/1.1 502 Bad Gateway" : "",
	    reason, sizeof(reason));
	check_printable(reason);
	free(buf);
	return 0;
}
