/*
 * test_srccount.c: the count per source address (common/srccount.c): the
 * port is not part of a source (IPv4 and bracketed IPv6), a source stops at
 * its cap while others go on, entries go when they fall to 0, and a put for
 * a source holding nothing is ignored.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>

#include "srccount.h"

static void
test_port_is_not_part_of_the_source(void **state)
{
	struct srccount *t = srccount_new();

	assert_non_null(t);
	assert_int_equal(srccount_take(t, "127.0.0.2:1000", 10), 0);
	assert_int_equal(srccount_take(t, "127.0.0.2:2000", 10), 0);
	assert_int_equal(srccount_get(t, "127.0.0.2:3000"), 2);
	assert_int_equal(srccount_take(t, "[::1]:1000", 10), 0);
	assert_int_equal(srccount_get(t, "[::1]:443"), 1);
	assert_int_equal(srccount_get(t, "127.0.0.3:1000"), 0);
	assert_int_equal(srccount_sources(t), 2);
	srccount_free(t);
}

static void
test_cap_stops_one_source_only(void **state)
{
	struct srccount *t = srccount_new();

	for (int i = 0; i < 8; i++)
		assert_int_equal(srccount_take(t, "10.0.0.1:1", 8), 0);
	assert_int_equal(srccount_take(t, "10.0.0.1:2", 8), -1);
	assert_int_equal(srccount_get(t, "10.0.0.1:2"), 8);
	assert_int_equal(srccount_take(t, "10.0.0.2:1", 8), 0);
	assert_int_equal(srccount_take(t, "10.0.0.3:1", 0), -1);
	srccount_put(t, "10.0.0.1:5");
	assert_int_equal(srccount_take(t, "10.0.0.1:2", 8), 0);
	srccount_free(t);
}

static void
test_entries_go_at_zero(void **state)
{
	struct srccount *t = srccount_new();

	/* Many sources, many sharing buckets: each one counted apart. */
	for (int i = 0; i < 3000; i++) {
		char peer[32];

		snprintf(peer, sizeof(peer), "10.%d.%d.1:80", i / 256, i % 256);
		assert_int_equal(srccount_take(t, peer, 1), 0);
	}
	assert_int_equal(srccount_sources(t), 3000);
	for (int i = 0; i < 3000; i++) {
		char peer[32];

		snprintf(peer, sizeof(peer), "10.%d.%d.1:81", i / 256, i % 256);
		srccount_put(t, peer);
	}
	assert_int_equal(srccount_sources(t), 0);
	srccount_put(t, "10.0.0.1:80");          /* holds nothing: ignored */
	assert_int_equal(srccount_get(t, "10.0.0.1:80"), 0);
	srccount_free(t);
	srccount_free(NULL);
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_port_is_not_part_of_the_source),
		cmocka_unit_test(test_cap_stops_one_source_only),
		cmocka_unit_test(test_entries_go_at_zero),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
