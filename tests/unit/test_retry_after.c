/*
 * test_retry_after.c: the come-back schedule for turned-away agents
 * (gateway/core/retry_after.c, docs/0035): the rate is capacity over the
 * mean time a handshake holds its slot (RA_GUESS_MS before any ended,
 * never below the every-slot-times-out floor) until busy windows measure
 * it; each refusal gets its own slot, spaced by the rate at RA_SHARE_PCT,
 * after the connections waiting ahead (served at the full rate), with no
 * drift; the jitter stays inside the slot; waits stay within
 * [RA_MIN_MS, RA_MAX_MS]; a quiet gateway's old horizon holds nobody back;
 * a wave of waits that ran out together is not counted ahead of itself.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <string.h>

#include "retry_after.h"

#define T0 1000000   /* any monotonic ms */

static void
test_rate(void **state)
{
	struct retry_after ra;
	double r;

	memset(&ra, 0, sizeof(ra));
	/* Nothing ended yet: each handshake assumed to take RA_GUESS_MS. */
	assert_true(retry_after_rate(&ra, 16, 10000) == 16 * 1000.0 / RA_GUESS_MS);
	/* Never below 1. */
	assert_true(retry_after_rate(&ra, 0, 10000) == 1.0);
	/* Handshakes of 40 ms: 4 slots free up 100 times a second. */
	for (int i = 0; i < 200; i++)
		retry_after_done(&ra, T0 + i, T0 + i + 40, 0);
	r = retry_after_rate(&ra, 4, 10000);
	assert_true(r > 99.0 && r < 101.0);
	/* Slow handshakes: never below capacity per timeout. */
	memset(&ra, 0, sizeof(ra));
	retry_after_done(&ra, T0, T0 + 100000, 0);
	assert_true(retry_after_rate(&ra, 50, 10000) == 5.0);
}

/* The rate measured on the fly: handshakes ended per second in windows
 * where the gateway was busy throughout; not in a window where one ended
 * while it was not (that is the demand), nor in one a quiet spell
 * stretched. */
static void
test_measured_rate(void **state)
{
	struct retry_after ra;
	int64_t t = T0;
	double r;

	memset(&ra, 0, sizeof(ra));
	/* Handshakes of 1 s each would say 8 slots free 8 times a second... */
	retry_after_done(&ra, t - 1000, t, 1);
	/* ...but busy, 300 end each second (one every 10/3 ms) for 2 s. */
	for (int i = 1; i <= 600; i++)
		retry_after_done(&ra, t - 1000, t + i * 10 / 3, 1);
	r = retry_after_rate(&ra, 8, 10000);
	assert_true(r > 285.0 && r < 315.0);
	/* Not busy: 10 a second is the demand, not what the gateway can do. */
	t += 2000;
	for (int i = 1; i <= 20; i++)
		retry_after_done(&ra, t - 5, t + i * 100, 0);
	r = retry_after_rate(&ra, 8, 10000);
	assert_true(r > 285.0 && r < 315.0);
	/* A busy window stretched by a quiet minute gives no sample. */
	t += 2000;
	retry_after_done(&ra, t - 5, t, 1);
	retry_after_done(&ra, t - 5, t + 60000, 1);
	retry_after_done(&ra, t - 5, t + 60001, 1);
	r = retry_after_rate(&ra, 8, 10000);
	assert_true(r > 285.0 && r < 315.0);
	/* Busy again at 100 a second: the average follows. */
	t += 61000;
	for (int i = 1; i <= 800; i++)
		retry_after_done(&ra, t - 5, t + i * 10, 1);
	r = retry_after_rate(&ra, 8, 10000);
	assert_true(r > 95.0 && r < 110.0);
}

/* Each refusal its own slot: successive waits grow by the slot width. */
static void
test_slots_spread(void **state)
{
	struct retry_after ra;
	uint32_t prev = 0, w;
	double gap;

	memset(&ra, 0, sizeof(ra));
	retry_after_done(&ra, T0, T0 + 40, 0);   /* 4 slots: 100/s */
	gap = 1000.0 / (retry_after_rate(&ra, 4, 10000) * RA_SHARE_PCT / 100.0);
	for (int i = 0; i < 300; i++) {
		w = retry_after_next(&ra, T0 + 2000, 0, 4, 10000, 0);
		assert_true(w >= RA_MIN_MS);
		if (i > 0)
			assert_true(w >= prev + (uint32_t)gap - 1 &&
			    w <= prev + (uint32_t)gap + 1);
		prev = w;
	}
	/* No drift: the 300th slot is 299 slots after the first. */
	assert_true(prev >= RA_MIN_MS + (uint32_t)(299 * gap) - 2 &&
	    prev <= RA_MIN_MS + (uint32_t)(299 * gap) + 2);
}

/* Connections already queued go first; jitter stays within the slot. */
static void
test_ahead_and_jitter(void **state)
{
	struct retry_after a, b;
	uint32_t wa, wb;

	memset(&a, 0, sizeof(a));
	memset(&b, 0, sizeof(b));
	/* 20 slots of RA_GUESS_MS: 100/s, handed out at 90/s (11.1 ms); the
	 * ones ahead are served at the full rate. */
	wa = retry_after_next(&a, T0, 750, 20, 10000, 0);
	assert_true(wa >= 7490 && wa <= 7510);     /* 750 ahead: 7.5 s */
	wb = retry_after_next(&b, T0, 0, 20, 10000, 11);
	assert_int_equal(wb, RA_MIN_MS + 0);       /* 11 % 11 */
	wb = retry_after_next(&b, T0, 0, 20, 10000, 10);
	assert_true(wb >= RA_MIN_MS + 11 + 10 - 1 && wb <= RA_MIN_MS + 11 + 10 + 1);
}

/* The schedule never promises past RA_MAX_MS, and a quiet gateway's old
 * horizon does not hold back the next storm's first agents. */
static void
test_bounds_and_horizon(void **state)
{
	struct retry_after ra;
	uint32_t w = 0;

	memset(&ra, 0, sizeof(ra));
	for (int i = 0; i < 5000; i++)
		w = retry_after_next(&ra, T0, 0, 1, 1000000, UINT32_MAX);
	assert_int_equal(w, RA_MAX_MS);
	w = retry_after_next(&ra, T0 + 10 * RA_MAX_MS, 0, 1, 1000000, 0);
	assert_int_equal(w, RA_MIN_MS);
}

/* A wave of waits that ran out together (--handshake-wait, tunnel.c
 * wait_expire turns them away one after another): each agent of it gets a
 * slot of its own, and the rest of the wave, still in line as it is told,
 * is not ahead of it (those agents get the slots after its own), so the
 * last comes back after the wave's slots: N slots, not the wave at the
 * full rate and then N slots (about twice: 8.4 s instead of 5.4 s here,
 * and past RA_MAX_MS for a wave of a few thousand).  Upgrades in line with
 * time left count as far as the rate can serve them in it. */
static void
test_wave_of_expired_waits(void **state)
{
	struct retry_after ra;
	const uint32_t n = 400;
	uint32_t w = 0, ahead, last;
	double gap;

	memset(&ra, 0, sizeof(ra));
	/* 20 slots of RA_GUESS_MS: 100/s, slots handed out at 90/s. */
	gap = 1000.0 / (retry_after_rate(&ra, 20, 10000) * RA_SHARE_PCT / 100.0);
	for (uint32_t i = 0; i < n; i++) {
		/* As gateway_retry_after_ms counts what is ahead: none in the
		 * TLS queue; in line the rest of the wave, whose last waiter
		 * has run out too. */
		ahead = retry_after_line(&ra, n - 1 - i, 0, 20, 10000);
		w = retry_after_next(&ra, T0, ahead, 20, 10000, 0);
	}
	last = RA_MIN_MS + (uint32_t)((n - 1) * gap);
	assert_true(w >= last - 2 && w <= last + 2);
	/* In line with 500 ms left: the rate serves 50 of them in it. */
	assert_int_equal(retry_after_line(&ra, 1000, 500, 20, 10000), 50);
	assert_int_equal(retry_after_line(&ra, 30, 500, 20, 10000), 30);
	assert_int_equal(retry_after_line(&ra, 30, 0, 20, 10000), 0);
	assert_int_equal(retry_after_line(&ra, 30, -5, 20, 10000), 0);
	assert_int_equal(retry_after_line(&ra, 0, 500, 20, 10000), 0);
}

/* The redial spread: tunnels over the rate, bounded; retold only when it
 * grew by a quarter or halved (or was never told). */
static void
test_spread(void **state)
{
	(void)state;
	assert_int_equal(retry_after_spread_ms(19800, 200.0, 0), 99000);
	assert_int_equal(retry_after_spread_ms(100, 1000.0, 0), RA_SPREAD_MIN_MS);
	assert_int_equal(retry_after_spread_ms(0, 0.0, 0), RA_SPREAD_MIN_MS);
	assert_int_equal(retry_after_spread_ms(100, 1000.0, 4000), 4000);
	assert_int_equal(retry_after_spread_ms(100, 0.0, 0), 100000);
	assert_int_equal(retry_after_spread_ms(UINT32_MAX, 1.0, 0), RA_SPREAD_MAX_MS);
	assert_int_equal(retry_after_spread_ms(1, 1.0, UINT32_MAX), RA_SPREAD_MAX_MS);
	assert_true(retry_after_spread_moved(0, 500));
	assert_false(retry_after_spread_moved(500, 500));
	assert_false(retry_after_spread_moved(500, 624));
	assert_true(retry_after_spread_moved(500, 625));
	assert_true(retry_after_spread_moved(500, 1000));
	assert_false(retry_after_spread_moved(1000, 501));
	assert_true(retry_after_spread_moved(1000, 500));
	assert_true(retry_after_spread_moved(RA_SPREAD_MAX_MS, RA_SPREAD_MIN_MS));
	/* Wider: told at its tick whatever the last tell's age. */
	assert_true(retry_after_spread_due(0, 500, -1, 30000));
	assert_true(retry_after_spread_due(500, 13000, 1000, 30000));
	assert_true(retry_after_spread_due(500, 625, 0, 30000));
	assert_false(retry_after_spread_due(500, 624, 60000, 30000));
	/* Narrower: once the last tell is old enough, or none reached anyone. */
	assert_false(retry_after_spread_due(13000, 500, 29999, 30000));
	assert_true(retry_after_spread_due(13000, 500, 30000, 30000));
	assert_true(retry_after_spread_due(13000, 500, -1, 30000));
	assert_false(retry_after_spread_due(1000, 501, -1, 30000));
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_rate),
		cmocka_unit_test(test_measured_rate),
		cmocka_unit_test(test_slots_spread),
		cmocka_unit_test(test_ahead_and_jitter),
		cmocka_unit_test(test_bounds_and_horizon),
		cmocka_unit_test(test_wave_of_expired_waits),
		cmocka_unit_test(test_spread),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
