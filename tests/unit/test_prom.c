/*
 * test_prom.c: the in-memory metrics and their text format (common/prom.c):
 * exact exposition lines, cumulative histogram buckets, label escaping, and
 * the cap that turns label values past PROM_LABELS_MAX - 1 into "other".
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "prom.h"

/* The text of one metric, malloc'd. */
static char *
text_of(struct prom_metric *m)
{
	char *buf = NULL;
	size_t len = 0;
	FILE *f = open_memstream(&buf, &len);
	struct prom_metric *const ms[] = { m };

	assert_non_null(f);
	assert_int_equal(prom_write(f, ms, 1), 0);
	assert_int_equal(fclose(f), 0);
	return buf;
}

static void
test_counter_without_label(void **state)
{
	static struct prom_metric m = { .name = "t_events_total", .help = "Events.",
	    .kind = PROM_COUNTER };
	char *t;

	(void)state;
	prom_inc(&m, NULL);
	prom_add(&m, NULL, 2);
	t = text_of(&m);
	assert_string_equal(t, "# HELP t_events_total Events.\n"
	    "# TYPE t_events_total counter\nt_events_total 3\n");
	free(t);
}

static void
test_presets_show_at_zero_and_values_keep_order(void **state)
{
	static const char *const preset[] = { "ok", "refused", NULL };
	static struct prom_metric m = { .name = "t_opened_total", .help = "Opened.",
	    .kind = PROM_COUNTER, .label = "result", .preset = preset };
	char *t;

	(void)state;
	prom_inc(&m, "timeout");
	prom_inc(&m, "ok");
	prom_inc(&m, "ok");
	t = text_of(&m);
	assert_non_null(strstr(t, "t_opened_total{result=\"ok\"} 2\n"
	    "t_opened_total{result=\"refused\"} 0\n"
	    "t_opened_total{result=\"timeout\"} 1\n"));
	free(t);
}

static void
test_gauge_fractions_and_negative(void **state)
{
	static struct prom_metric m = { .name = "t_level", .help = "Level.",
	    .kind = PROM_GAUGE };
	char *t;

	(void)state;
	prom_set(&m, NULL, 0.25);
	t = text_of(&m);
	assert_non_null(strstr(t, "t_level 0.25\n"));
	free(t);
	prom_add(&m, NULL, -1.25);
	assert_true(prom_get(&m, NULL) == -1);
	t = text_of(&m);
	assert_non_null(strstr(t, "t_level -1\n"));
	free(t);
}

static void
test_histogram_buckets_are_cumulative(void **state)
{
	static const double bounds[] = { 0.001, 0.01, 1 };
	static struct prom_metric m = { .name = "t_seconds", .help = "Time.",
	    .kind = PROM_HISTOGRAM, .label = "op", .bounds = bounds, .nbounds = 3 };
	char *t;

	(void)state;
	prom_observe(&m, "get", 0.0005);
	prom_observe(&m, "get", 0.001);     /* on the bound: counts in it */
	prom_observe(&m, "get", 0.5);
	prom_observe(&m, "get", 7);         /* past the last: +Inf only */
	t = text_of(&m);
	assert_non_null(strstr(t, "# TYPE t_seconds histogram\n"
	    "t_seconds_bucket{op=\"get\",le=\"0.001\"} 2\n"
	    "t_seconds_bucket{op=\"get\",le=\"0.01\"} 2\n"
	    "t_seconds_bucket{op=\"get\",le=\"1\"} 3\n"
	    "t_seconds_bucket{op=\"get\",le=\"+Inf\"} 4\n"
	    "t_seconds_sum{op=\"get\"} 7.5015"));
	assert_non_null(strstr(t, "t_seconds_count{op=\"get\"} 4\n"));
	free(t);
}

/* Counts folded in at once read as the same observations one by one. */
static void
test_histogram_counts_folded_in(void **state)
{
	static const double bounds[] = { 0.001, 0.01, 1 };
	static struct prom_metric m = { .name = "t_seconds", .help = "Time.",
	    .kind = PROM_HISTOGRAM, .bounds = bounds, .nbounds = 3 };
	const uint64_t first[] = { 2, 0, 1 }, then[] = { 0, 1, 0 };
	char *t;

	(void)state;
	/* 0.0005, 0.001, 0.5 and 7 (above the last bound), then 0.005. */
	prom_observe_counts(&m, NULL, first, 4, 7.5015);
	prom_observe_counts(&m, NULL, then, 1, 0.005);
	t = text_of(&m);
	assert_non_null(strstr(t, "# TYPE t_seconds histogram\n"
	    "t_seconds_bucket{le=\"0.001\"} 2\n"
	    "t_seconds_bucket{le=\"0.01\"} 3\n"
	    "t_seconds_bucket{le=\"1\"} 4\n"
	    "t_seconds_bucket{le=\"+Inf\"} 5\n"
	    "t_seconds_sum 7.5065"));
	assert_non_null(strstr(t, "t_seconds_count 5\n"));
	free(t);
}

static void
test_label_values_are_capped_and_escaped(void **state)
{
	static struct prom_metric m = { .name = "t_codes_total", .help = "Codes.",
	    .kind = PROM_COUNTER, .label = "code" };
	char v[16], *t;

	(void)state;
	for (int i = 0; i < 1000; i++) {
		snprintf(v, sizeof(v), "v%d", i);
		prom_inc(&m, v);
	}
	prom_inc(&m, "a\"b\\c\nd");
	assert_int_equal(m.nvalues, PROM_LABELS_MAX);
	/* 23 values kept, the other 977 and the odd one in "other". */
	assert_true(prom_get(&m, "v0") == 1);
	assert_true(prom_get(&m, "other") == 978);
	t = text_of(&m);
	assert_non_null(strstr(t, "t_codes_total{code=\"other\"} 978\n"));
	free(t);

	prom_reset(&m);
	prom_inc(&m, "a\"b\\c\nd");
	t = text_of(&m);
	assert_non_null(strstr(t, "t_codes_total{code=\"a\\\"b\\\\c\\nd\"} 1\n"));
	free(t);
}

static void
test_two_labels(void **state)
{
	static struct prom_metric m = { .name = "t_link_total", .help = "Links.",
	    .kind = PROM_COUNTER, .label = "from", .label2 = "to" };
	char *t;

	(void)state;
	prom_set(&m, "0,1", 5);
	prom_set(&m, "1,0", 7);
	prom_inc(&m, "solo");
	t = text_of(&m);
	assert_non_null(strstr(t, "t_link_total{from=\"0\",to=\"1\"} 5\n"));
	assert_non_null(strstr(t, "t_link_total{from=\"1\",to=\"0\"} 7\n"));
	assert_non_null(strstr(t, "t_link_total{from=\"solo\"} 1\n"));
	free(t);
}

static void
test_process_metrics_are_written(void **state)
{
	char *buf = NULL;
	size_t len = 0;
	FILE *f = open_memstream(&buf, &len);

	(void)state;
	assert_int_equal(prom_write_process(f), 0);
	fclose(f);
	assert_non_null(strstr(buf, "\nprocess_resident_memory_bytes "));
	assert_non_null(strstr(buf, "\nprocess_open_fds "));
	assert_non_null(strstr(buf, "\nprocess_max_fds "));
	assert_non_null(strstr(buf, "\nprocess_start_time_seconds 1"));
	assert_null(strstr(buf, "process_start_time_seconds -1"));
	free(buf);
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_counter_without_label),
		cmocka_unit_test(test_presets_show_at_zero_and_values_keep_order),
		cmocka_unit_test(test_gauge_fractions_and_negative),
		cmocka_unit_test(test_histogram_buckets_are_cumulative),
		cmocka_unit_test(test_histogram_counts_folded_in),
		cmocka_unit_test(test_label_values_are_capped_and_escaped),
		cmocka_unit_test(test_two_labels),
		cmocka_unit_test(test_process_metrics_are_written),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
