/*
 * fuzz_get_answer.c: libFuzzer target for common/getanswer.c, the
 * agent's reading of a gateway's (or anything's) answer to its HTTPS GET
 * during `tether-client join`.
 *
 * The input is copied into a buffer of exactly its length, so that
 * AddressSanitizer catches any read past the end; the first byte picks
 * eof and the body limit.  A complete answer's body must lie inside the
 * buffer and within the limit.
 */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "getanswer.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void
check(int ok)
{
	if (!ok)
		abort();
}

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct get_answer a;
	char why[256], *buf;
	size_t len, max;
	int r;

	if (size < 1)
		return 0;
	len = size - 1;
	max = (size_t)(data[0] >> 1) * 16;
	buf = malloc(len > 0 ? len : 1);
	check(buf != NULL);
	memcpy(buf, data + 1, len);
	why[0] = '\0';
	r = get_answer_parse(buf, len, data[0] & 1, max, &a, why, sizeof(why));
	check(r >= -1 && r <= 1);
	if (r == 1) {
		check(a.status >= 200 && a.status <= 999);
		check(a.body >= buf && a.body + a.body_len <= buf + len);
		check(a.body_len <= max);
	}
	if (r == -1)
		check(why[0] != '\0' && strlen(why) < sizeof(why));
	free(buf);
	return 0;
}
