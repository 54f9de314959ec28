/*
 * test_printable.c: text_printable (common/printable.c), the one function
 * that makes a peer's text safe to show on a terminal: only bytes 0x20 to
 * 0x7e survive, the copy is bounded and terminated, in place works.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <string.h>

#include "printable.h"

static void
test_printable(void **state)
{
	char out[16];
	const char hostile[] = "a\x1b[2J\r\n\x7f\xc2\x9b\xff b  ";

	text_printable(out, sizeof(out), hostile, sizeof(hostile) - 1);
	assert_string_equal(out, "a?[2J?????? b");
	text_printable(out, 4, "abcdef", 6);
	assert_string_equal(out, "abc");
	text_printable(out, sizeof(out), "x\0y", 3);
	assert_string_equal(out, "x?y");
	text_printable(out, sizeof(out), "", 0);
	assert_string_equal(out, "");
	strcpy(out, "q\"k=v\t");
	text_printable(out, sizeof(out), out, strlen(out));
	assert_string_equal(out, "q\"k=v?");
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_printable),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
