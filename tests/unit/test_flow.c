/*
 * test_flow.c: the per-stream credit arithmetic (common/flow.c).
 *
 * The single-step tests pin each call's contract; the simulation at the end
 * runs two peers (one sending, one receiving) through long random sequences
 * and checks the two properties that matter: the bytes the receiver must
 * hold never exceed the window it granted, and the transfer never stalls.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdlib.h>
#include <string.h>

#include "flow.h"

#define KiB 1024u
#define MiB (1024u * 1024u)

/* ---- flow_init ---- */

static void
test_init_sets_credit_from_peer_window_and_rx_from_ours(void **state)
{
	struct flow f;

	(void)state;
	memset(&f, 0xa5, sizeof(f));
	flow_init(&f, 64 * KiB, 16 * KiB);
	assert_int_equal(f.tx_credit, 16 * KiB);
	assert_int_equal(f.rx_window, 64 * KiB);
	assert_int_equal(f.rx_expected, 64 * KiB);
	assert_int_equal(f.rx_consumed, 0);
	assert_int_equal(f.rx_buffered, 0);
}

static void
test_init_with_zero_peer_window_allows_nothing(void **state)
{
	struct flow f;

	(void)state;
	flow_init(&f, 64 * KiB, 0);   /* the opener, before OPEN_OK */
	assert_int_equal(flow_tx_allowed(&f, 1), 0);
	assert_int_equal(flow_tx_allowed(&f, 0), 0);
}

/* ---- sending ---- */

static void
test_tx_allowed_clamps_to_credit(void **state)
{
	struct flow f;

	(void)state;
	flow_init(&f, 64 * KiB, 16 * KiB);
	assert_int_equal(flow_tx_allowed(&f, 0), 0);
	assert_int_equal(flow_tx_allowed(&f, 10), 10);
	assert_int_equal(flow_tx_allowed(&f, 16 * KiB - 1), 16 * KiB - 1);
	assert_int_equal(flow_tx_allowed(&f, 16 * KiB), 16 * KiB);
	assert_int_equal(flow_tx_allowed(&f, 16 * KiB + 1), 16 * KiB);
	assert_int_equal(flow_tx_allowed(&f, SIZE_MAX), 16 * KiB);
	/* Asking does not spend. */
	assert_int_equal(f.tx_credit, 16 * KiB);
}

static void
test_tx_sent_debits_credit(void **state)
{
	struct flow f;

	(void)state;
	flow_init(&f, 64 * KiB, 16 * KiB);
	flow_tx_sent(&f, 6 * KiB);
	assert_int_equal(f.tx_credit, 10 * KiB);
	assert_int_equal(flow_tx_allowed(&f, 16 * KiB), 10 * KiB);
	flow_tx_sent(&f, 10 * KiB);
	assert_int_equal(f.tx_credit, 0);
	assert_int_equal(flow_tx_allowed(&f, 1), 0);
	/* Sending does not touch the receive side. */
	assert_int_equal(f.rx_expected, 64 * KiB);
}

static void
test_tx_sent_beyond_credit_stops_at_zero(void **state)
{
	struct flow f;

	(void)state;
	flow_init(&f, 64 * KiB, 1 * KiB);
	flow_tx_sent(&f, 2 * KiB);  /* a caller bug, but no wrap to 2^64 */
	assert_int_equal(f.tx_credit, 0);
}

static void
test_tx_grant_adds_credit(void **state)
{
	struct flow f;

	(void)state;
	flow_init(&f, 64 * KiB, 16 * KiB);
	flow_tx_sent(&f, 16 * KiB);
	assert_int_equal(flow_tx_grant(&f, 8 * KiB), 0);
	assert_int_equal(f.tx_credit, 8 * KiB);
	assert_int_equal(flow_tx_grant(&f, 1), 0);
	assert_int_equal(f.tx_credit, 8 * KiB + 1);
	assert_int_equal(flow_tx_allowed(&f, 64 * KiB), 8 * KiB + 1);
}

static void
test_tx_grant_of_zero_refused(void **state)
{
	struct flow f;

	(void)state;
	flow_init(&f, 64 * KiB, 16 * KiB);
	assert_int_equal(flow_tx_grant(&f, 0), -1);
	assert_int_equal(f.tx_credit, 16 * KiB);
}

static void
test_tx_grant_up_to_max_window_accepted_beyond_refused(void **state)
{
	struct flow f;

	(void)state;
	flow_init(&f, 64 * KiB, FLOW_MAX_WINDOW - 10);
	/* Exactly FLOW_MAX_WINDOW (1 GiB) of credit is still legal... */
	assert_int_equal(flow_tx_grant(&f, 10), 0);
	assert_int_equal(f.tx_credit, FLOW_MAX_WINDOW);
	/* ...one byte more is a misbehaving peer, and changes nothing. */
	assert_int_equal(flow_tx_grant(&f, 1), -1);
	assert_int_equal(f.tx_credit, FLOW_MAX_WINDOW);
}

static void
test_tx_grant_huge_credit_refused_without_wrapping(void **state)
{
	struct flow f;

	(void)state;
	flow_init(&f, 64 * KiB, 0);
	assert_int_equal(flow_tx_grant(&f, UINT32_MAX), -1);
	assert_int_equal(flow_tx_grant(&f, FLOW_MAX_WINDOW + 1), -1);
	assert_int_equal(f.tx_credit, 0);
	/* Repeated legal grants that add up past the cap are refused too. */
	assert_int_equal(flow_tx_grant(&f, FLOW_MAX_WINDOW / 2), 0);
	assert_int_equal(flow_tx_grant(&f, FLOW_MAX_WINDOW / 2), 0);
	assert_int_equal(flow_tx_grant(&f, FLOW_MAX_WINDOW / 2), -1);
	assert_int_equal(f.tx_credit, FLOW_MAX_WINDOW);
}

/* ---- receiving ---- */

static void
test_rx_received_debits_expected_and_buffers(void **state)
{
	struct flow f;

	(void)state;
	flow_init(&f, 64 * KiB, 16 * KiB);
	assert_int_equal(flow_rx_received(&f, 10 * KiB), 0);
	assert_int_equal(f.rx_expected, 54 * KiB);
	assert_int_equal(f.rx_buffered, 10 * KiB);
	assert_int_equal(f.rx_consumed, 0);
	assert_int_equal(flow_rx_received(&f, 0), 0);   /* empty DATA */
	assert_int_equal(f.rx_expected, 54 * KiB);
	/* Receiving does not touch the send side. */
	assert_int_equal(f.tx_credit, 16 * KiB);
}

static void
test_rx_exactly_the_window_accepted(void **state)
{
	struct flow f;

	(void)state;
	flow_init(&f, 64 * KiB, 0);
	assert_int_equal(flow_rx_received(&f, 64 * KiB), 0);
	assert_int_equal(f.rx_expected, 0);
	assert_int_equal(f.rx_buffered, 64 * KiB);
}

static void
test_rx_overrun_refused_and_changes_nothing(void **state)
{
	struct flow f;

	(void)state;
	flow_init(&f, 64 * KiB, 0);
	/* One DATA bigger than the whole window. */
	assert_int_equal(flow_rx_received(&f, 64 * KiB + 1), -1);
	assert_int_equal(f.rx_expected, 64 * KiB);
	assert_int_equal(f.rx_buffered, 0);
	/* The window filled exactly, then one byte more. */
	assert_int_equal(flow_rx_received(&f, 60 * KiB), 0);
	assert_int_equal(flow_rx_received(&f, 4 * KiB + 1), -1);
	assert_int_equal(flow_rx_received(&f, 4 * KiB), 0);
	assert_int_equal(flow_rx_received(&f, 1), -1);
	assert_int_equal(f.rx_expected, 0);
	assert_int_equal(f.rx_buffered, 64 * KiB);
	/* Draining alone does not extend the peer's credit: only a grant does. */
	flow_rx_drained(&f, 64 * KiB);
	assert_int_equal(flow_rx_received(&f, 1), -1);
}

static void
test_rx_drained_moves_buffered_to_consumed(void **state)
{
	struct flow f;

	(void)state;
	flow_init(&f, 64 * KiB, 0);
	assert_int_equal(flow_rx_received(&f, 20 * KiB), 0);
	flow_rx_drained(&f, 5 * KiB);
	assert_int_equal(f.rx_buffered, 15 * KiB);
	assert_int_equal(f.rx_consumed, 5 * KiB);
	assert_int_equal(f.rx_expected, 44 * KiB);
	flow_rx_drained(&f, 15 * KiB);
	assert_int_equal(f.rx_buffered, 0);
	assert_int_equal(f.rx_consumed, 20 * KiB);
}

static void
test_rx_drained_more_than_buffered_is_clamped(void **state)
{
	struct flow f;

	(void)state;
	flow_init(&f, 64 * KiB, 0);
	assert_int_equal(flow_rx_received(&f, 4 * KiB), 0);
	flow_rx_drained(&f, 10 * KiB);
	assert_int_equal(f.rx_buffered, 0);
	assert_int_equal(f.rx_consumed, 4 * KiB);
	/* Invariant: what the peer may send + what we hold + what we owe back
	 * is always the window. */
	assert_int_equal(f.rx_expected + f.rx_buffered + f.rx_consumed, 64 * KiB);
}

static void
test_take_grant_zero_until_half_window_consumed(void **state)
{
	struct flow f;

	(void)state;
	flow_init(&f, 64 * KiB, 0);
	assert_int_equal(flow_rx_take_grant(&f), 0);        /* nothing yet */
	assert_int_equal(flow_rx_received(&f, 64 * KiB), 0);
	assert_int_equal(flow_rx_take_grant(&f), 0);        /* received, not drained */
	flow_rx_drained(&f, 32 * KiB - 1);
	assert_int_equal(flow_rx_take_grant(&f), 0);        /* one byte short of half */
	assert_int_equal(f.rx_consumed, 32 * KiB - 1);      /* ...and kept */
	assert_int_equal(f.rx_expected, 0);
	flow_rx_drained(&f, 1);
	assert_int_equal(flow_rx_take_grant(&f), 32 * KiB); /* exactly half */
	assert_int_equal(f.rx_consumed, 0);
	assert_int_equal(f.rx_expected, 32 * KiB);
	assert_int_equal(flow_rx_take_grant(&f), 0);        /* granted once only */
	assert_int_equal(f.rx_expected + f.rx_buffered + f.rx_consumed, 64 * KiB);
}

static void
test_take_grant_returns_everything_consumed(void **state)
{
	struct flow f;

	(void)state;
	flow_init(&f, 64 * KiB, 0);
	assert_int_equal(flow_rx_received(&f, 50 * KiB), 0);
	flow_rx_drained(&f, 48 * KiB);
	/* Past half: the whole 48 KiB goes back, not just 32 KiB. */
	assert_int_equal(flow_rx_take_grant(&f), 48 * KiB);
	assert_int_equal(f.rx_expected, 14 * KiB + 48 * KiB);
	assert_int_equal(f.rx_buffered, 2 * KiB);
	/* The peer may now send the extra credit without overrunning. */
	assert_int_equal(flow_rx_received(&f, 62 * KiB), 0);
	assert_int_equal(flow_rx_received(&f, 1), -1);
}

static void
test_take_grant_with_odd_and_tiny_windows(void **state)
{
	struct flow f;

	(void)state;
	/* 3-byte window: half is 1 byte (rounded down). */
	flow_init(&f, 3, 0);
	assert_int_equal(flow_rx_received(&f, 3), 0);
	flow_rx_drained(&f, 1);
	assert_int_equal(flow_rx_take_grant(&f), 1);
	/* 1-byte window: every drained byte goes straight back. */
	flow_init(&f, 1, 0);
	assert_int_equal(flow_rx_take_grant(&f), 0);
	assert_int_equal(flow_rx_received(&f, 1), 0);
	assert_int_equal(flow_rx_take_grant(&f), 0);
	flow_rx_drained(&f, 1);
	assert_int_equal(flow_rx_take_grant(&f), 1);
	assert_int_equal(flow_rx_received(&f, 1), 0);
	assert_int_equal(flow_rx_received(&f, 1), -1);
}

static void
test_take_grant_with_max_window(void **state)
{
	struct flow f;

	(void)state;
	flow_init(&f, FLOW_MAX_WINDOW, 0);   /* 1 GiB */
	assert_int_equal(flow_rx_received(&f, FLOW_MAX_WINDOW), 0);
	flow_rx_drained(&f, FLOW_MAX_WINDOW);
	assert_int_equal(flow_rx_take_grant(&f), FLOW_MAX_WINDOW);
	/* The sending side takes that grant on a fresh stream. */
	struct flow tx;
	flow_init(&tx, 64 * KiB, 0);
	assert_int_equal(flow_tx_grant(&tx, FLOW_MAX_WINDOW), 0);
}

/* ---- two peers over a simulated link ---- */

static uint64_t rng_state;

static uint64_t
rnd(void)
{
	/* xorshift64*: the same sequence on every libc. */
	rng_state ^= rng_state >> 12;
	rng_state ^= rng_state << 25;
	rng_state ^= rng_state >> 27;
	return rng_state * 2685821657736338717ull;
}

static size_t
rnd_upto(size_t n)   /* 1..n, n > 0 */
{
	return 1 + (size_t)(rnd() % n);
}

/* A FIFO of byte counts: DATA frames one way, WINDOW credits the other. */
struct fifo {
	uint64_t *v;
	size_t cap, head, n;
	uint64_t sum;
};

static void
fifo_push(struct fifo *q, uint64_t x)
{
	assert_true(q->n < q->cap);
	q->v[(q->head + q->n) % q->cap] = x;
	q->n++;
	q->sum += x;
}

static uint64_t
fifo_pop(struct fifo *q)
{
	uint64_t x = q->v[q->head];

	assert_true(q->n > 0);
	q->head = (q->head + 1) % q->cap;
	q->n--;
	q->sum -= x;
	return x;
}

struct sim_stats {
	uint64_t grants, stalls_on_credit, max_in_flight;
};

/*
 * Moves `total` bytes from a sender to a receiver granting `window`, picking
 * at random among the steps possible at each point: send (up to the credit),
 * deliver the oldest DATA, drain some of what the receiver holds, take a
 * grant, deliver the oldest WINDOW.  `drain_bias` (0..100) sets how eager the
 * receiver is to drain.  Fails if no step is possible before all is done.
 */
static void
simulate(uint64_t seed, uint32_t window, uint64_t total, unsigned drain_bias,
    struct sim_stats *st)
{
	struct flow tx, rx;
	struct fifo data = { 0 }, credit = { 0 };
	uint64_t to_send = total, delivered = 0, drained = 0;
	uint64_t steps = 0;

	rng_state = seed;
	memset(st, 0, sizeof(*st));
	flow_init(&tx, 1234, window);   /* tx's own rx window plays no part */
	flow_init(&rx, window, 1234);
	/* Every entry carries >= 1 byte, so neither queue holds more than
	 * window entries. */
	data.cap = credit.cap = (size_t)window + 1;
	data.v = calloc(data.cap, sizeof(*data.v));
	credit.v = calloc(credit.cap, sizeof(*credit.v));
	assert_non_null(data.v);
	assert_non_null(credit.v);

	while (drained < total) {
		struct flow peek = rx;
		int can_send = to_send > 0 && flow_tx_allowed(&tx, (size_t)to_send) > 0;
		int can_deliver = data.n > 0;
		int can_drain = rx.rx_buffered > 0;
		int can_grant = flow_rx_take_grant(&peek) > 0;
		int can_credit = credit.n > 0;
		unsigned pick;

		/* Never deadlocked: something can always move. */
		assert_true(can_send || can_deliver || can_drain || can_grant || can_credit);
		assert_true(++steps < 50u * 1000 * 1000);
		if (to_send > 0 && !can_send)
			st->stalls_on_credit++;

		pick = (unsigned)(rnd() % 100);
		if (pick < 30 && can_send) {
			size_t n = flow_tx_allowed(&tx, rnd_upto((size_t)(to_send < 2ull * window ?
			    to_send : 2ull * window)));
			flow_tx_sent(&tx, n);
			fifo_push(&data, n);
			to_send -= n;
		} else if (pick < 60 && can_deliver) {
			uint64_t n = fifo_pop(&data);
			assert_int_equal(flow_rx_received(&rx, (size_t)n), 0);
			delivered += n;
		} else if (pick < 60 + drain_bias * 25 / 100 && can_drain) {
			size_t n = rnd_upto((size_t)rx.rx_buffered);
			flow_rx_drained(&rx, n);
			drained += n;
		} else if (pick < 92 && can_grant) {
			uint32_t g = flow_rx_take_grant(&rx);
			assert_true(g > 0);
			fifo_push(&credit, g);
			st->grants++;
		} else if (can_credit) {
			assert_int_equal(flow_tx_grant(&tx, (uint32_t)fifo_pop(&credit)), 0);
		}

		/* Bytes the receiver may have to hold at once: in flight plus
		 * buffered plus drained-but-not-yet-granted.  Never beyond the
		 * window; in fact, with the credit on its way back, exactly it. */
		uint64_t in_flight = data.sum + rx.rx_buffered;
		assert_true(in_flight <= window);
		assert_true(data.sum + rx.rx_buffered + rx.rx_consumed <= window);
		assert_int_equal(tx.tx_credit + data.sum + credit.sum +
		    rx.rx_buffered + rx.rx_consumed, window);
		assert_int_equal(rx.rx_expected + rx.rx_buffered + rx.rx_consumed, window);
		if (in_flight > st->max_in_flight)
			st->max_in_flight = in_flight;
	}
	assert_int_equal(to_send, 0);
	assert_int_equal(delivered, total);
	assert_int_equal(data.n, 0);
	free(data.v);
	free(credit.v);
}

static void
test_two_peers_random_64KiB_window_bounded_and_never_stalls(void **state)
{
	struct sim_stats st;

	(void)state;
	/* 16 MiB through a 64 KiB window: 256 windows' worth. */
	simulate(0x5eed0001, 64 * KiB, 16 * MiB, 50, &st);
	assert_true(st.grants >= 16 * MiB / (64 * KiB));   /* credit flowed back */
	assert_true(st.stalls_on_credit > 0);              /* the window did bind */
	assert_true(st.max_in_flight > 32 * KiB);          /* and was used */
}

static void
test_two_peers_random_slow_reader_bounded_and_never_stalls(void **state)
{
	struct sim_stats st;

	(void)state;
	/* A receiver that rarely drains: the sender must wait, not overrun. */
	simulate(0x5eed0002, 16 * KiB, 4 * MiB, 4, &st);
	assert_true(st.stalls_on_credit > 0);
	assert_int_equal(st.max_in_flight, 16 * KiB);      /* filled right up */
}

static void
test_two_peers_random_tiny_windows_never_stall(void **state)
{
	static const uint32_t windows[] = { 1, 2, 3, 7, 100, 4 * KiB + 1 };
	struct sim_stats st;

	(void)state;
	for (size_t i = 0; i < sizeof(windows) / sizeof(windows[0]); i++)
		simulate(0x5eed0100 + i, windows[i], 64 * KiB + 13, 50, &st);
}

static void
test_two_peers_many_seeds(void **state)
{
	struct sim_stats st;

	(void)state;
	for (uint64_t seed = 1; seed <= 40; seed++)
		simulate(seed * 0x9e3779b97f4a7c15ull, (uint32_t)(1 + seed * 997),
		    256 * KiB, (unsigned)(seed * 7 % 100), &st);
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_init_sets_credit_from_peer_window_and_rx_from_ours),
		cmocka_unit_test(test_init_with_zero_peer_window_allows_nothing),
		cmocka_unit_test(test_tx_allowed_clamps_to_credit),
		cmocka_unit_test(test_tx_sent_debits_credit),
		cmocka_unit_test(test_tx_sent_beyond_credit_stops_at_zero),
		cmocka_unit_test(test_tx_grant_adds_credit),
		cmocka_unit_test(test_tx_grant_of_zero_refused),
		cmocka_unit_test(test_tx_grant_up_to_max_window_accepted_beyond_refused),
		cmocka_unit_test(test_tx_grant_huge_credit_refused_without_wrapping),
		cmocka_unit_test(test_rx_received_debits_expected_and_buffers),
		cmocka_unit_test(test_rx_exactly_the_window_accepted),
		cmocka_unit_test(test_rx_overrun_refused_and_changes_nothing),
		cmocka_unit_test(test_rx_drained_moves_buffered_to_consumed),
		cmocka_unit_test(test_rx_drained_more_than_buffered_is_clamped),
		cmocka_unit_test(test_take_grant_zero_until_half_window_consumed),
		cmocka_unit_test(test_take_grant_returns_everything_consumed),
		cmocka_unit_test(test_take_grant_with_odd_and_tiny_windows),
		cmocka_unit_test(test_take_grant_with_max_window),
		cmocka_unit_test(test_two_peers_random_64KiB_window_bounded_and_never_stalls),
		cmocka_unit_test(test_two_peers_random_slow_reader_bounded_and_never_stalls),
		cmocka_unit_test(test_two_peers_random_tiny_windows_never_stall),
		cmocka_unit_test(test_two_peers_many_seeds),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
