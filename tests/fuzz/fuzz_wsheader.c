/*
 * fuzz_wsheader.c: libFuzzer target for ws_parse_header (common/wsframe.c),
 * the first code every byte a WebSocket server sends reaches on the
 * agent's side, and for ws_mask / ws_mask_copy.
 *
 * Beyond "no crash, no over-read" it holds the parser to its promises: a
 * refusal says why; an accepted header is one of the legal sizes, within
 * the input, obeys the RFC's limits, reads the same from exactly its own
 * bytes, and every shorter prefix asks for more bytes instead of failing;
 * "need more" only happens while fewer than 14 bytes are there.  Masking
 * the rest of the input with the header's mask must match a byte-by-byte
 * reference and undo itself.
 */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "wsclient.h"
#include "wsframe.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void
check(int ok)
{
	if (!ok)
		abort();
}

static void
check_header(const uint8_t *data, size_t size, int expect_masked)
{
	struct ws_frame_header h, again;
	char err[256];
	int r;

	r = ws_parse_header(data, size, expect_masked, &h, err, sizeof(err));
	if (r < 0) {
		check(err[0] != '\0');
		return;
	}
	if (r == 0) {
		check(size < 14);
		return;
	}
	check((size_t)r <= size);
	check(r == 2 || r == 4 || r == 10 || r == 6 || r == 8 || r == 14);
	check(h.masked == expect_masked);
	check(h.masked == ((data[1] & 0x80) != 0));
	check((h.payload_len >> 63) == 0);
	check(h.opcode == (data[0] & 0x0f));
	check(h.fin == ((data[0] & 0x80) != 0));
	if (h.opcode & 0x8)
		check(h.fin && h.payload_len <= 125);

	/* Exactly its own bytes are enough, and give the same answer. */
	check(ws_parse_header(data, (size_t)r, expect_masked, &again, err,
	    sizeof(err)) == r);
	check(again.fin == h.fin && again.opcode == h.opcode &&
	    again.masked == h.masked && again.payload_len == h.payload_len &&
	    memcmp(again.mask, h.mask, 4) == 0);
	/* Shorter: always "need more", never an error. */
	for (int k = 0; k < r; k++)
		check(ws_parse_header(data, (size_t)k, expect_masked, &again,
		    err, sizeof(err)) == 0);
}

static void
check_mask(const uint8_t *data, size_t size)
{
	uint8_t mask[4] = { 0x5a, 0xa5, 0x3c, 0xc3 };
	size_t phase, len;
	uint8_t *a, *b;

	if (size < 5)
		return;
	memcpy(mask, data, 4);
	phase = data[4] & 3;
	data += 5;
	len = size - 5;
	a = malloc(len + 1);
	b = malloc(len + 1);
	check(a != NULL && b != NULL);
	memcpy(a, data, len);
	for (size_t i = 0; i < len; i++)
		a[i] ^= mask[(phase + i) & 3];
	/* Copying, from an odd offset of the input. */
	check(ws_mask_copy(b, data, len, mask, phase) == ((phase + len) & 3));
	check(memcmp(a, b, len) == 0);
	/* In place: masking twice gives the input back. */
	check(ws_mask(b, len, mask, phase) == ((phase + len) & 3));
	check(len == 0 || memcmp(b, data, len) == 0);
	free(a);
	free(b);
}

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	check_header(data, size, 0);
	check_header(data, size, 1);
	check_mask(data, size);
	return 0;
}
