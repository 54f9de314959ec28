/*
 * test_options.c: the one-table flags/config machinery (common/options.c):
 * values are checked by type in flags and files alike, a flag beats the
 * file's key which beats the default, empty keys mean the default, and the
 * real tables of both daemons have valid defaults and unique names.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "options.h"
#include "run_options.h"
#include "serve_options.h"

enum { T_NAME, T_COUNT, T_ON, T_LEVEL, T_N };

static const char *const levels[] = { "low", "high", NULL };

static const struct opt_spec specs[T_N] = {
	[T_NAME] = { .name = "name", .type = OPT_STRING, .arg = "S", .help = "a name" },
	[T_COUNT] = { .name = "count", .type = OPT_U32, .def = "5", .min = 1, .max = 10,
	    .help = "a count" },
	[T_ON] = { .name = "on", .type = OPT_BOOL, .def = "false", .help = "a switch" },
	[T_LEVEL] = { .name = "level", .type = OPT_CHOICE, .def = "low", .choices = levels,
	    .help = "a level" },
};

static const struct opt_command cmd = {
	.prog = "test", .synopsis = "usage: test", .spec = specs, .n = T_N,
};

static char path[64];

static void
write_file(const char *text)
{
	FILE *f;

	snprintf(path, sizeof(path), "/tmp/test_options.%d.conf", (int)getpid());
	f = fopen(path, "w");
	assert_non_null(f);
	fputs(text, f);
	fclose(f);
}

static int
parse(struct opt_set *set, int argc, const char **argv)
{
	return opts_parse(&cmd, argc, (char **)argv, set);
}

static void
test_check_value(void **state)
{
	uint32_t n;
	char why[256];

	assert_int_equal(opts_check_value(&specs[T_COUNT], "10", &n, why, sizeof(why)), 0);
	assert_int_equal(n, 10);
	assert_int_equal(opts_check_value(&specs[T_COUNT], "11", &n, why, sizeof(why)), -1);
	assert_string_equal(why, "wants a number from 1 to 10, got \"11\"");
	assert_int_equal(opts_check_value(&specs[T_COUNT], "-1", &n, why, sizeof(why)), -1);
	assert_int_equal(opts_check_value(&specs[T_COUNT], "3x", &n, why, sizeof(why)), -1);
	assert_int_equal(opts_check_value(&specs[T_COUNT], "", &n, why, sizeof(why)), -1);
	assert_int_equal(opts_check_value(&specs[T_ON], "Yes", &n, why, sizeof(why)), 0);
	assert_int_equal(n, 1);
	assert_int_equal(opts_check_value(&specs[T_ON], "off", &n, why, sizeof(why)), 0);
	assert_int_equal(n, 0);
	assert_int_equal(opts_check_value(&specs[T_ON], "2", &n, why, sizeof(why)), -1);
	assert_int_equal(opts_check_value(&specs[T_LEVEL], "high", &n, why, sizeof(why)), 0);
	assert_int_equal(n, 1);
	assert_int_equal(opts_check_value(&specs[T_LEVEL], "mid", &n, why, sizeof(why)), -1);
	assert_string_equal(why, "wants low or high, got \"mid\"");
}

static void
test_precedence(void **state)
{
	struct opt_set set;
	const char *argv[] = { "test", "--config", NULL, "--count=7", NULL };

	/* Defaults. */
	assert_int_equal(parse(&set, 1, argv), OPTS_OK);
	assert_null(opts_str(&set, T_NAME));
	assert_int_equal(opts_num(&set, T_COUNT), 5);
	assert_int_equal(opts_source(&set, T_COUNT), OPT_FROM_DEFAULT);
	opts_free(&set);

	/* The file sets count and name; the flag beats its count; an empty
	 * value keeps the default. */
	write_file("; comment\nname = from-file\ncount = 9\n  on = true\nlevel =\n");
	argv[2] = path;
	assert_int_equal(parse(&set, 4, argv), OPTS_OK);
	assert_string_equal(opts_str(&set, T_NAME), "from-file");
	assert_int_equal(opts_source(&set, T_NAME), OPT_FROM_FILE);
	assert_int_equal(opts_num(&set, T_COUNT), 7);
	assert_int_equal(opts_source(&set, T_COUNT), OPT_FROM_FLAG);
	assert_int_equal(opts_num(&set, T_ON), 1);
	assert_int_equal(opts_num(&set, T_LEVEL), 0);
	assert_int_equal(opts_source(&set, T_LEVEL), OPT_FROM_DEFAULT);
	opts_free(&set);
	unlink(path);
}

static void
test_bool_flag(void **state)
{
	struct opt_set set;
	const char *argv[] = { "test", "--on", NULL };
	const char *argv2[] = { "test", "--on=false", NULL };

	assert_int_equal(parse(&set, 2, argv), OPTS_OK);
	assert_int_equal(opts_num(&set, T_ON), 1);
	opts_free(&set);
	assert_int_equal(parse(&set, 2, argv2), OPTS_OK);
	assert_int_equal(opts_num(&set, T_ON), 0);
	opts_free(&set);
}

static void
test_refusals(void **state)
{
	struct opt_set set;
	const char *bad_flag[] = { "test", "--count", "0", NULL };
	const char *unknown[] = { "test", "--nope", NULL };
	const char *stray[] = { "test", "word", NULL };
	const char *file[] = { "test", "--config", NULL, "--count", "3", NULL };

	assert_int_equal(parse(&set, 3, bad_flag), OPTS_USAGE);
	assert_int_equal(parse(&set, 2, unknown), OPTS_USAGE);
	assert_int_equal(parse(&set, 2, stray), OPTS_USAGE);
	/* A bad key fails even though the flag overrides it. */
	write_file("count = 99\n");
	file[2] = path;
	assert_int_equal(parse(&set, 5, file), OPTS_USAGE);
	write_file("count = 3\ncolor = red\n");
	assert_int_equal(parse(&set, 3, file), OPTS_USAGE);
	unlink(path);
	file[2] = "/nonexistent/x.conf";
	assert_int_equal(parse(&set, 3, file), OPTS_USAGE);
}

/* The daemons' own tables: defaults pass their own checks, names unique. */
static void
check_table(const struct opt_command *c)
{
	char why[256];
	uint32_t n;

	for (size_t i = 0; i < c->n; i++) {
		assert_non_null(c->spec[i].name);
		assert_non_null(c->spec[i].help);
		if (c->spec[i].def != NULL)
			assert_int_equal(opts_check_value(&c->spec[i], c->spec[i].def,
			    &n, why, sizeof(why)), 0);
		for (size_t j = i + 1; j < c->n; j++)
			assert_string_not_equal(c->spec[i].name, c->spec[j].name);
	}
}

static void
test_tables(void **state)
{
	check_table(&serve_command);
	check_table(&run_command);
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_check_value),
		cmocka_unit_test(test_precedence),
		cmocka_unit_test(test_bool_flag),
		cmocka_unit_test(test_refusals),
		cmocka_unit_test(test_tables),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
