/*
 * test_join_retry.c: what `tether-client join` decides when the gateway
 * does not answer as hoped: which failures of a request are tried again
 * (tunnel-client/fetch.c fetch_retryable: the way there and a server not
 * serving yet, never a refusal), the waits between tries
 * (tunnel-client/backoff.c, the agent's own: exponential with jitter, or
 * the gateway's Retry-After bounded plus jitter), and --timeout's
 * durations (common/duration.c, shared with tetherctl's --ttl).
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdbool.h>

#include "backoff.h"
#include "duration.h"
#include "fetch.h"

static bool
retryable(enum fetch_step step, int status)
{
	struct fetch_result r = { .step = step, .status = status };

	return fetch_retryable(&r);
}

/* The way to the gateway, and a gateway not serving yet: tried again. */
static void
test_transient(void **state)
{
	(void)state;
	assert_true(retryable(FETCH_LOOKUP, 0));      /* DNS: no answer, no name */
	assert_true(retryable(FETCH_CONNECT, 0));     /* refused, timed out */
	assert_true(retryable(FETCH_PROXY, 0));       /* CONNECT cut */
	assert_true(retryable(FETCH_TLS, 0));         /* handshake cut, shed */
	assert_true(retryable(FETCH_ANSWER, 0));      /* answer cut short */
	assert_true(retryable(FETCH_STATUS, 503));
	assert_true(retryable(FETCH_STATUS, 502));
	assert_true(retryable(FETCH_STATUS, 500));
	assert_true(retryable(FETCH_STATUS, 504));
	assert_true(retryable(FETCH_STATUS, 429));
	assert_true(retryable(FETCH_STATUS, 408));
	assert_true(retryable(FETCH_PROXY_REFUSED, 502));  /* proxy lost its way */
	assert_true(retryable(FETCH_PROXY_REFUSED, 503));
}

/* What no retry changes: final at once. */
static void
test_final(void **state)
{
	(void)state;
	assert_false(retryable(FETCH_TLS_REFUSED, 0));   /* does not verify */
	assert_false(retryable(FETCH_MALFORMED, 0));     /* not HTTP, too big */
	assert_false(retryable(FETCH_LOCAL, 0));         /* ours: a bad URL */
	assert_false(retryable(FETCH_PROXY_AUTH, 0));    /* 407, no credentials */
	assert_false(retryable(FETCH_PROXY_REFUSED, 403));
	assert_false(retryable(FETCH_PROXY_REFUSED, 407));
	assert_false(retryable(FETCH_STATUS, 404));      /* not a gateway */
	assert_false(retryable(FETCH_STATUS, 403));
	assert_false(retryable(FETCH_STATUS, 401));
	assert_false(retryable(FETCH_STATUS, 400));
	assert_false(retryable(FETCH_STATUS, 301));      /* no redirects */
	assert_false(retryable(FETCH_STATUS, 600));
}

/* The backoff starts at AGENT_BACKOFF_MIN_MS, doubles to the cap, and each
 * wait lies in [backoff/2, backoff]. */
static void
test_backoff_next(void **state)
{
	uint32_t b = 0, want = AGENT_BACKOFF_MIN_MS, d;

	(void)state;
	for (int i = 0; i < 12; i++) {
		d = backoff_next(&b, 0);
		assert_int_equal(b, want);
		assert_true(d >= b / 2 && d <= b);
		want = want * 2 > AGENT_BACKOFF_MAX_MS ? AGENT_BACKOFF_MAX_MS :
		    want * 2;
	}
	assert_int_equal(b, AGENT_BACKOFF_MAX_MS);
	/* A smaller cap (the agent's after "unavailable"). */
	b = 4000;
	d = backoff_next(&b, AGENT_BACKOFF_RETRY_MAX_MS);
	assert_int_equal(b, AGENT_BACKOFF_RETRY_MAX_MS);
	assert_true(d >= b / 2 && d <= b);
}

/* The draws spread: 64 first waits are not all the same. */
static void
test_backoff_jitter(void **state)
{
	uint32_t first = 0, b = 0;
	bool differ = false;

	(void)state;
	first = backoff_next(&b, 0);
	for (int i = 0; i < 64 && !differ; i++) {
		b = 0;
		differ = backoff_next(&b, 0) != first;
	}
	assert_true(differ);
}

/* The gateway's moment, bounded, plus a jitter below a second. */
static void
test_backoff_told(void **state)
{
	uint32_t told = 0, d;

	(void)state;
	for (int i = 0; i < 32; i++) {
		d = backoff_told(2000, &told);
		assert_int_equal(told, 2000);
		assert_true(d >= 2000 && d < 2000 + AGENT_RETRY_AFTER_JITTER_MS);
	}
	d = backoff_told(86400000, &told);    /* a day: a gateway's mistake */
	assert_int_equal(told, AGENT_RETRY_AFTER_MAX_MS);
	assert_true(d >= AGENT_RETRY_AFTER_MAX_MS &&
	    d < AGENT_RETRY_AFTER_MAX_MS + AGENT_RETRY_AFTER_JITTER_MS);
	d = backoff_told(1000, NULL);
	assert_true(d >= 1000 && d < 2000);
}

static void
test_duration(void **state)
{
	int64_t v = -1;

	(void)state;
	assert_int_equal(duration_parse("90s", 3600, &v), 0);
	assert_int_equal(v, 90);
	assert_int_equal(duration_parse("10m", 3600, &v), 0);
	assert_int_equal(v, 600);
	assert_int_equal(duration_parse("1h", 3600, &v), 0);
	assert_int_equal(v, 3600);
	assert_int_equal(duration_parse("2d", 86400 * 7, &v), 0);
	assert_int_equal(v, 172800);
	v = -1;
	assert_int_equal(duration_parse("2h", 3600, &v), -1);    /* over max */
	assert_int_equal(duration_parse("0s", 3600, &v), -1);
	assert_int_equal(duration_parse("0", 3600, &v), -1);     /* the caller's */
	assert_int_equal(duration_parse("10", 3600, &v), -1);    /* no unit */
	assert_int_equal(duration_parse("m", 3600, &v), -1);
	assert_int_equal(duration_parse("-5s", 3600, &v), -1);
	assert_int_equal(duration_parse("5 s", 3600, &v), -1);
	assert_int_equal(duration_parse("5w", 3600, &v), -1);
	assert_int_equal(duration_parse("99999999999999999999s", 3600, &v), -1);
	assert_int_equal(v, -1);
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_transient),
		cmocka_unit_test(test_final),
		cmocka_unit_test(test_backoff_next),
		cmocka_unit_test(test_backoff_jitter),
		cmocka_unit_test(test_backoff_told),
		cmocka_unit_test(test_duration),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
