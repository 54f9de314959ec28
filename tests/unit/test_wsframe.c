/*
 * test_wsframe.c: what both WebSocket ends share (common/wsframe.c): the
 * accept key (RFC 6455's own example), and headers written by
 * ws_header_put reading back through ws_parse_header at each length form.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <string.h>

#include "wsframe.h"

static void
test_accept_key(void **state)
{
	char out[WS_ACCEPT_LEN + 1];

	(void)state;
	/* RFC 6455, section 1.3. */
	assert_int_equal(ws_accept_key("dGhlIHNhbXBsZSBub25jZQ==", out), 0);
	assert_string_equal(out, "s3pPLMBiTxaQ9kYGzzhZRbK+xOo=");
	/* Not the base64 of 16 bytes. */
	assert_int_equal(ws_accept_key("dGhlIHNhbXBsZSBub25jZQ=", out), -1);
	assert_int_equal(ws_accept_key("dGhlIHNhbXBsZSBub25jZQAA", out), -1);
	assert_int_equal(ws_accept_key("!!!!!!!!!!!!!!!!!!!!!!==", out), -1);
	assert_int_equal(ws_accept_key("", out), -1);
}

static void
test_header_roundtrip(void **state)
{
	static const uint64_t lens[] = { 0, 1, 125, 126, 65535, 65536,
	    (uint64_t)1 << 40 };
	static const size_t want_unmasked[] = { 2, 2, 2, 4, 4, 10, 10 };
	const uint8_t mask[4] = { 1, 2, 3, 4 };
	uint8_t hdr[WS_HEADER_MAX];
	struct ws_frame_header h;
	char err[128];

	(void)state;
	for (size_t i = 0; i < sizeof(lens) / sizeof(lens[0]); i++) {
		size_t n = ws_header_put(hdr, WS_OP_BINARY, lens[i], NULL);

		assert_int_equal(n, want_unmasked[i]);
		assert_int_equal(ws_parse_header(hdr, n, 0, &h, err, sizeof(err)), (int)n);
		assert_int_equal(h.fin, 1);
		assert_int_equal(h.opcode, WS_OP_BINARY);
		assert_int_equal(h.masked, 0);
		assert_true(h.payload_len == lens[i]);
		/* One byte short: more is needed. */
		assert_int_equal(ws_parse_header(hdr, n - 1, 0, &h, err, sizeof(err)), 0);

		n = ws_header_put(hdr, WS_OP_TEXT, lens[i], mask);
		assert_int_equal(n, want_unmasked[i] + 4);
		assert_int_equal(ws_parse_header(hdr, n, 1, &h, err, sizeof(err)), (int)n);
		assert_int_equal(h.masked, 1);
		assert_memory_equal(h.mask, mask, 4);
		assert_true(h.payload_len == lens[i]);
		/* A masked frame where an unmasked one is due is refused. */
		assert_int_equal(ws_parse_header(hdr, n, 0, &h, err, sizeof(err)), -1);
		assert_non_null(strstr(err, "masked"));
	}
	assert_int_equal(ws_header_put(hdr, WS_OP_PING, 0, NULL), 2);
	assert_int_equal(ws_parse_header(hdr, 2, 0, &h, err, sizeof(err)), 2);
	assert_true((h.opcode & WS_OP_CONTROL) != 0);
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_accept_key),
		cmocka_unit_test(test_header_roundtrip),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
