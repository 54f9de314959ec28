/*
 * test_twheel.c: the timing wheel of the gateway's pings (common/twheel.c):
 * arm, re-arm, cancel, the order deadlines fire in, deadlines more than a
 * lap ahead (wrap), changes made from inside a firing, and a long gap.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <string.h>

#include "twheel.h"

#define TICK 100u

struct item {
	struct twheel_node node;   /* first: the node's address is the item's */
	int id;
};

/* What fired, in order, and what a firing does to the wheel. */
struct log {
	int ids[64];
	size_t n;
	struct twheel *w;
	struct item *cancel;       /* cancelled by the first firing */
	struct item *rearm;        /* re-armed by its own firing, once */
	uint64_t rearm_at;
};

static void
fire(struct twheel_node *n, void *arg)
{
	struct log *l = arg;
	struct item *it = (struct item *)n;

	assert_false(twheel_armed(n));
	assert_true(l->n < 64);
	l->ids[l->n++] = it->id;
	if (l->cancel != NULL) {
		twheel_cancel(l->w, &l->cancel->node);
		l->cancel = NULL;
	}
	if (l->rearm == it) {
		l->rearm = NULL;
		twheel_arm(l->w, n, l->rearm_at);
	}
}

static void
setup(struct twheel *w, struct log *l, struct item *items, int n)
{
	assert_int_equal(twheel_init(w, TICK, 8, 1000), 0);
	memset(l, 0, sizeof(*l));
	l->w = w;
	for (int i = 0; i < n; i++) {
		twheel_node_init(&items[i].node);
		items[i].id = i;
	}
}

static void
test_fires_once_at_its_tick_never_early(void **state)
{
	struct twheel w;
	struct log l;
	struct item it[1];

	(void)state;
	setup(&w, &l, it, 1);
	twheel_arm_in(&w, &it[0].node, 250);          /* due 1250: tick 13 */
	assert_true(twheel_armed(&it[0].node));
	assert_int_equal(w.count, 1);
	assert_int_equal(twheel_advance(&w, 1249, fire, &l), 0);
	assert_int_equal(l.n, 0);
	assert_int_equal(twheel_advance(&w, 1300, fire, &l), 1);
	assert_int_equal(l.n, 1);
	assert_false(twheel_armed(&it[0].node));
	assert_int_equal(w.count, 0);
	assert_int_equal(twheel_advance(&w, 5000, fire, &l), 0);
	assert_int_equal(l.n, 1);
	twheel_free(&w);
}

static void
test_rearm_moves_the_deadline(void **state)
{
	struct twheel w;
	struct log l;
	struct item it[1];

	(void)state;
	setup(&w, &l, it, 1);
	twheel_arm(&w, &it[0].node, 1200);
	twheel_arm(&w, &it[0].node, 1500);            /* later: not at 1200 */
	assert_int_equal(w.count, 1);
	assert_int_equal(twheel_advance(&w, 1400, fire, &l), 0);
	assert_int_equal(twheel_advance(&w, 1500, fire, &l), 1);
	twheel_arm(&w, &it[0].node, 2000);
	twheel_arm(&w, &it[0].node, 1600);            /* earlier */
	assert_int_equal(twheel_advance(&w, 1600, fire, &l), 1);
	assert_int_equal(w.count, 0);
	twheel_free(&w);
}

static void
test_cancel_disarms(void **state)
{
	struct twheel w;
	struct log l;
	struct item it[3];

	(void)state;
	setup(&w, &l, it, 3);
	for (int i = 0; i < 3; i++)
		twheel_arm(&w, &it[i].node, 1300);    /* one slot, one list */
	twheel_cancel(&w, &it[1].node);               /* the middle one */
	twheel_cancel(&w, &it[1].node);               /* twice: nothing */
	assert_false(twheel_armed(&it[1].node));
	assert_int_equal(w.count, 2);
	assert_int_equal(twheel_advance(&w, 1300, fire, &l), 2);
	assert_true((l.ids[0] == 0 && l.ids[1] == 2) || (l.ids[0] == 2 && l.ids[1] == 0));
	twheel_free(&w);
}

static void
test_fires_in_due_order(void **state)
{
	struct twheel w;
	struct log l;
	struct item it[5];
	const uint64_t due[5] = { 1700, 1150, 1500, 1800, 1300 };   /* one lap */

	(void)state;
	setup(&w, &l, it, 5);
	for (int i = 0; i < 5; i++)
		twheel_arm(&w, &it[i].node, due[i]);
	assert_int_equal(twheel_advance(&w, 1800, fire, &l), 5);
	assert_int_equal(l.ids[0], 1);
	assert_int_equal(l.ids[1], 4);
	assert_int_equal(l.ids[2], 2);
	assert_int_equal(l.ids[3], 0);
	assert_int_equal(l.ids[4], 3);
	twheel_free(&w);
}

static void
test_passed_deadline_fires_at_next_tick(void **state)
{
	struct twheel w;
	struct log l;
	struct item it[1];

	(void)state;
	setup(&w, &l, it, 1);
	twheel_arm(&w, &it[0].node, 0);
	assert_int_equal(twheel_advance(&w, 1099, fire, &l), 0);
	assert_int_equal(twheel_advance(&w, 1100, fire, &l), 1);
	twheel_free(&w);
}

/* 8 slots of 100 ms: a deadline 2.5 laps ahead shares a slot with nearer
 * ones and must not fire when they do. */
static void
test_wrap_keeps_later_laps(void **state)
{
	struct twheel w;
	struct log l;
	struct item it[2];

	(void)state;
	setup(&w, &l, it, 2);
	twheel_arm(&w, &it[0].node, 1300);            /* tick 13, slot 5 */
	twheel_arm(&w, &it[1].node, 1300 + 3 * 800);  /* tick 37, slot 5 */
	for (uint64_t t = 1100; t <= 3600; t += 100) {
		twheel_advance(&w, t, fire, &l);
		assert_int_equal(l.n, t < 1300 ? 0 : 1);
	}
	assert_true(twheel_armed(&it[1].node));
	assert_int_equal(twheel_advance(&w, 3700, fire, &l), 1);
	assert_int_equal(l.ids[1], 1);
	assert_int_equal(w.count, 0);
	twheel_free(&w);
}

static void
test_changes_from_inside_a_firing(void **state)
{
	struct twheel w;
	struct log l;
	struct item it[3];

	(void)state;
	setup(&w, &l, it, 3);
	twheel_arm(&w, &it[0].node, 1200);
	twheel_arm(&w, &it[1].node, 1200);            /* same slot as it[0] */
	twheel_arm(&w, &it[2].node, 1400);
	/* The first to fire cancels the other of its slot, or it[2]: either
	 * way one of the others never fires.  it[0] re-arms itself. */
	l.rearm = &it[0];
	l.rearm_at = 1300;
	l.cancel = &it[2];
	assert_int_equal(twheel_advance(&w, 1250, fire, &l), 2);
	assert_int_equal(w.count, 1);                 /* it[0] again */
	assert_false(twheel_armed(&it[2].node));
	assert_int_equal(twheel_advance(&w, 2000, fire, &l), 1);
	assert_int_equal(l.ids[2], 0);
	/* Re-armed at a deadline already reached: the next tick, same call. */
	twheel_arm(&w, &it[1].node, 2100);
	l.rearm = &it[1];
	l.rearm_at = 0;
	assert_int_equal(twheel_advance(&w, 2300, fire, &l), 2);
	assert_int_equal(w.count, 0);
	twheel_free(&w);
}

static void
test_long_gap_fires_all_due_once(void **state)
{
	struct twheel w;
	struct log l;
	struct item it[4];

	(void)state;
	setup(&w, &l, it, 4);
	twheel_arm(&w, &it[0].node, 1200);
	twheel_arm(&w, &it[1].node, 1900);
	twheel_arm(&w, &it[2].node, 5000);
	twheel_arm(&w, &it[3].node, 9000);            /* after the gap */
	assert_int_equal(twheel_advance(&w, 6000, fire, &l), 3);
	assert_true(twheel_armed(&it[3].node));
	assert_int_equal(twheel_advance(&w, 8999, fire, &l), 0);
	assert_int_equal(twheel_advance(&w, 9000, fire, &l), 1);
	/* Time does not go back. */
	twheel_arm(&w, &it[0].node, 9500);
	assert_int_equal(twheel_advance(&w, 100, fire, &l), 0);
	assert_int_equal(twheel_now(&w), 9000);
	twheel_free(&w);
}

static void
test_sync_moves_only_an_empty_wheel(void **state)
{
	struct twheel w;
	struct log l;
	struct item it[1];

	(void)state;
	setup(&w, &l, it, 1);
	twheel_sync(&w, 50000);
	assert_int_equal(twheel_now(&w), 50000);
	twheel_arm_in(&w, &it[0].node, 300);
	twheel_sync(&w, 90000);                       /* not empty: no effect */
	assert_int_equal(twheel_now(&w), 50000);
	assert_int_equal(twheel_advance(&w, 50299, fire, &l), 0);
	assert_int_equal(twheel_advance(&w, 50300, fire, &l), 1);
	twheel_free(&w);
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_fires_once_at_its_tick_never_early),
		cmocka_unit_test(test_rearm_moves_the_deadline),
		cmocka_unit_test(test_cancel_disarms),
		cmocka_unit_test(test_fires_in_due_order),
		cmocka_unit_test(test_passed_deadline_fires_at_next_tick),
		cmocka_unit_test(test_wrap_keeps_later_laps),
		cmocka_unit_test(test_changes_from_inside_a_firing),
		cmocka_unit_test(test_long_gap_fires_all_due_once),
		cmocka_unit_test(test_sync_moves_only_an_empty_wheel),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
