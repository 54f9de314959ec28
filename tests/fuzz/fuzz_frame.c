/*
 * fuzz_frame.c: libFuzzer target for frame_decode, the first code every byte
 * a tunnel peer sends reaches.  Beyond "no crash, no over-read", it holds the
 * codec to its promises: a refusal always says why, and whatever decodes
 * re-encodes, decodes again to the same frame, and encodes to the same bytes.
 */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "frame.h"

#define HEADROOM 16

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void
check(int ok)
{
	if (!ok)
		abort();
}

static void
check_same(const struct frame *a, const struct frame *b)
{
	check(a->type == b->type);
	if (a->type != FRAME_DATA) {
		check(memcmp(a, b, sizeof(*a)) == 0);
		return;
	}
	check(a->stream_id == b->stream_id);
	check(a->u.data.len == b->u.data.len);
	check(a->u.data.len == 0 ||
	    memcmp(a->u.data.payload, b->u.data.payload, a->u.data.len) == 0);
}

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct frame f, g;
	char err[256];
	uint8_t *out = NULL, *again = NULL;
	size_t len = 0, len2 = 0;

	/* frame_decode fills only the type's member of u: the rest is ours. */
	memset(&f, 0, sizeof(f));
	memset(&g, 0, sizeof(g));
	if (frame_decode(data, size, &f, err, sizeof(err)) != 0) {
		check(err[0] != '\0');
		return 0;
	}
	if (f.type == FRAME_DATA) /* zero copy: the payload is the input's tail */
		check(f.u.data.payload + f.u.data.len == data + size);

	check(frame_encode(&f, HEADROOM, &out, &len) == 0);
	check(frame_decode(out + HEADROOM, len, &g, err, sizeof(err)) == 0);
	check_same(&f, &g);

	check(frame_encode(&g, 0, &again, &len2) == 0);
	check(len2 == len && memcmp(again, out + HEADROOM, len) == 0);
	free(again);
	free(out);
	return 0;
}
