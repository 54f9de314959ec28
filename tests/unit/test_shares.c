/*
 * test_shares.c: the principals' accounts (gateway/core/shares.c) when
 * loops charge them at once (docs/0040, step 6).
 *
 * An account a lookup returned stays pinned until shares_unpin, even when
 * another lookup sweeps the idle ones before it is charged (without the
 * pin ASan sees the charge write a freed account).  Then three threads,
 * each a loop with its own slice of the memory budget, look principals
 * up, take windows and charge connections to them, set what those hold,
 * unpin, and later release, while a fourth looks up names of its own,
 * whose sweeps free whatever is idle: nothing is freed while charged or
 * pinned (ASan), nothing races (TSan: `make test-tsan`), and at the end
 * every count is back to 0 and the sweep frees every account.  And
 * thousands of principals: found, kept and freed as one, each lookup
 * looking at a few accounts, not at them all.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "budget.h"
#include "gateway.h"
#include "shares.h"

#define KiB 1024u

static struct gateway *
gw_new(void)
{
	struct gateway *gw = calloc(1, sizeof(*gw));

	assert_non_null(gw);
	gw->budget = (struct budget)BUDGET_DEFAULT;
	pthread_mutex_init(&gw->budget_mu, NULL);
	gw->budget.mu = &gw->budget_mu;
	return gw;
}

static void
gw_free(struct gateway *gw)
{
	shares_free_all(gw);
	pthread_mutex_destroy(&gw->budget_mu);
	free(gw);
}

static void
test_pinned_until_unpinned(void **state)
{
	struct gateway *gw = gw_new();
	struct budget_account *a, *b;
	struct budget_charge c;

	(void)state;
	a = shares_principal(gw, "user:a");
	assert_non_null(a);
	/* Another lookup sweeps: a, idle but pinned, stays. */
	b = shares_principal(gw, "user:b");
	shares_unpin(gw, b);
	assert_int_equal(shares_count(gw), 2);
	assert_int_equal(budget_take(&gw->budget, NULL, a, 64 * KiB, &c, NULL), 64 * KiB);
	assert_int_equal(a->used, 64 * KiB);
	shares_unpin(gw, a);
	/* Charged: kept; b (idle, unpinned) is swept by the next lookup. */
	assert_ptr_equal(shares_principal(gw, "user:a"), a);
	shares_unpin(gw, a);
	assert_int_equal(shares_count(gw), 1);
	budget_release(&gw->budget, &c);
	/* Idle and unpinned: the next lookup, of anyone, frees it. */
	shares_unpin(gw, shares_principal(gw, "user:c"));
	assert_int_equal(shares_count(gw), 1);
	shares_unpin(gw, NULL);                  /* nothing */
	gw_free(gw);
}

/* Many principals: each lookup finds its own account (the same one while
 * it lives, admin: or not, with its share), the idle ones go at the next
 * lookup and the charged ones stay, and what the lookups cost is O(1)
 * each: the accounts they looked at (compared, swept, moved by a
 * doubling) stay within a few per lookup, where walking the list looked
 * at about MANY * MANY of them. */
#define MANY 5000

static void
test_many_principals(void **state)
{
	struct gateway *gw = gw_new();
	static struct budget_account *acc[MANY];
	static struct budget_charge c[MANY];
	char name[32];
	size_t lookups = 0;

	(void)state;
	for (int i = 0; i < MANY; i++) {
		snprintf(name, sizeof(name), i % 7 == 0 ? "admin:t%d" : "user:u%d", i);
		acc[i] = shares_principal(gw, name);
		lookups++;
		assert_non_null(acc[i]);
		assert_int_equal(acc[i]->admin, i % 7 == 0);
		assert_int_equal(acc[i]->limit, gw->budget.principal_share);
	}
	assert_int_equal(shares_count(gw), MANY);
	/* Found again: the same account, each its own. */
	for (int i = 0; i < MANY; i++) {
		snprintf(name, sizeof(name), i % 7 == 0 ? "admin:t%d" : "user:u%d", i);
		assert_ptr_equal(shares_principal(gw, name), acc[i]);
		lookups++;
		shares_unpin(gw, acc[i]);
		if (i > 0)
			assert_ptr_not_equal(acc[i], acc[i - 1]);
	}
	/* The odd ones charged, then every pin given back: the next lookup
	 * frees the even ones and makes one account. */
	for (int i = 1; i < MANY; i += 2)
		assert_int_equal(budget_take(&gw->budget, NULL, acc[i], 4 * KiB,
		    &c[i], NULL), 4 * KiB);
	for (int i = 0; i < MANY; i++)
		shares_unpin(gw, acc[i]);
	shares_unpin(gw, shares_principal(gw, "user:next"));
	lookups++;
	assert_int_equal(shares_count(gw), MANY / 2 + 1);
	for (int i = 1; i < MANY; i += 2) {
		snprintf(name, sizeof(name), i % 7 == 0 ? "admin:t%d" : "user:u%d", i);
		assert_ptr_equal(shares_principal(gw, name), acc[i]);
		lookups++;
		shares_unpin(gw, acc[i]);
		assert_int_equal(acc[i]->used, 4 * KiB);
	}
	/* Released: freed by the next lookup, of anyone. */
	for (int i = 1; i < MANY; i += 2)
		budget_release(&gw->budget, &c[i]);
	shares_unpin(gw, shares_principal(gw, "user:last"));
	lookups++;
	assert_int_equal(shares_count(gw), 1);
	assert_true(shares_work(gw) <= 8 * lookups);
	gw_free(gw);
}

#define LOOPS 3
#define INFLIGHT 8
#define STEPS 20000
#define NAMES 6

static const char *const names[NAMES] = {
	"user:alice", "user:bob", "user:carol", "admin:t1", "user:dave", "user:erin",
};

/* One loop: its slice, and INFLIGHT streams-with-connections at a time,
 * each a window charged and a holder charged to the principal. */
struct loop_run {
	struct gateway *gw;
	struct budget_slice slice;
	struct budget_charge charge[INFLIGHT];
	struct budget_holder hold[INFLIGHT];
	unsigned seed;
	unsigned taken;           /* windows granted */
	unsigned failed;          /* lookups that returned NULL */
};

static atomic_int loops_done;

static unsigned
next_rand(unsigned *x)
{
	*x ^= *x << 13;
	*x ^= *x >> 17;
	*x ^= *x << 5;
	return *x;
}

static void *
loop_charges(void *arg)
{
	struct loop_run *r = arg;

	budget_slice_init(&r->slice, &r->gw->budget);
	for (int i = 0; i < INFLIGHT; i++)
		budget_hold_init(&r->hold[i], &r->slice);
	for (int n = 0; n < STEPS; n++) {
		int i = n % INFLIGHT;
		struct budget_account *who;

		/* The stream that had this place ends: its charge, its
		 * connection's holding. */
		budget_release(&r->gw->budget, &r->charge[i]);
		budget_hold_release(&r->hold[i]);
		who = shares_principal(r->gw, names[next_rand(&r->seed) % NAMES]);
		if (who == NULL) {
			r->failed++;
			continue;
		}
		if (budget_take(&r->gw->budget, NULL, who, 64 * KiB, &r->charge[i],
		    NULL) > 0)
			r->taken++;
		budget_hold_charge(&r->hold[i], who);
		budget_hold_set(&r->hold[i], next_rand(&r->seed) % (128 * KiB));
		shares_unpin(r->gw, who);
		budget_hold_set(&r->hold[i], next_rand(&r->seed) % (128 * KiB));
	}
	for (int i = 0; i < INFLIGHT; i++) {
		budget_release(&r->gw->budget, &r->charge[i]);
		budget_hold_release(&r->hold[i]);
	}
	budget_slice_fini(&r->slice);
	atomic_fetch_add(&loops_done, 1);
	return NULL;
}

/* Another loop, looking up names of its own: each lookup sweeps. */
static void *
loop_sweeps(void *arg)
{
	struct gateway *gw = arg;
	char name[32];
	unsigned n = 0;

	while (atomic_load(&loops_done) < LOOPS) {
		snprintf(name, sizeof(name), "user:gc%u", n++ % 4);
		shares_unpin(gw, shares_principal(gw, name));
	}
	return NULL;
}

static void
test_loops_charge_while_another_sweeps(void **state)
{
	struct gateway *gw = gw_new();
	struct loop_run runs[LOOPS];
	pthread_t t[LOOPS], gc;

	(void)state;
	atomic_store(&loops_done, 0);
	assert_int_equal(pthread_create(&gc, NULL, loop_sweeps, gw), 0);
	for (int l = 0; l < LOOPS; l++) {
		memset(&runs[l], 0, sizeof(runs[l]));
		runs[l].gw = gw;
		runs[l].seed = 11u + (unsigned)l;
		assert_int_equal(pthread_create(&t[l], NULL, loop_charges, &runs[l]), 0);
	}
	for (int l = 0; l < LOOPS; l++)
		assert_int_equal(pthread_join(t[l], NULL), 0);
	assert_int_equal(pthread_join(gc, NULL), 0);
	for (int l = 0; l < LOOPS; l++) {
		assert_int_equal(runs[l].failed, 0);
		assert_int_equal(runs[l].taken, STEPS);
	}
	/* Everything given back: the process's counts are 0, and a lookup's
	 * sweep leaves only the account it returned. */
	assert_int_equal(gw->budget.used, 0);
	assert_int_equal(gw->budget.held, 0);
	assert_int_equal(gw->budget.slices, 0);
	shares_unpin(gw, shares_principal(gw, "user:last"));
	assert_int_equal(shares_count(gw), 1);
	gw_free(gw);
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_pinned_until_unpinned),
		cmocka_unit_test(test_many_principals),
		cmocka_unit_test(test_loops_charge_while_another_sweeps),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
