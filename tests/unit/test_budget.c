/*
 * test_budget.c: the stream memory budget and its fair shares
 * (common/budget.c).
 *
 * Single steps pin the window rule (full while a pool is at least half
 * free, then proportional to what is left, never below the minimum, never
 * more than is free), which pool refuses and why, the admin reserve, and
 * release.  The scenarios at the end fill a budget the way the gateway
 * does: one principal opening streams until refused must leave another
 * principal on another tunnel its full windows; an admin gets in through
 * the reserve when users have spent the rest; and windows always shrink
 * before any stream is refused.
 *
 * The memory budget (held bytes, docs/0036): holders count in the
 * process's total and their principal's; moving, releasing and setting
 * again keep every count exact; which pool is over; and the largest-first
 * choice walks holders the way the gateway's eviction does, within the
 * pool that is over.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <string.h>

#include "budget.h"

#define KiB 1024u
#define MiB (1024u * 1024u)

/* A small budget: 64 MiB, 8 of them reserved, 32 per tunnel, 16 per
 * principal, windows of 1 MiB shrinking to 16 KiB at least. */
static struct budget
small_budget(void)
{
	struct budget b = {
		.total = 64 * MiB, .reserve = 8 * MiB, .tunnel_share = 32 * MiB,
		.principal_share = 16 * MiB, .min_window = 16 * KiB,
	};
	return b;
}

static struct budget_account
account(size_t limit, int admin)
{
	struct budget_account a = { .used = 0, .limit = limit, .admin = admin };
	return a;
}

/* ---- the window rule ---- */

static void
test_full_window_while_half_free(void **state)
{
	struct budget b = small_budget();
	struct budget_account t = account(b.tunnel_share, 0);
	struct budget_account p = account(b.principal_share, 0);
	enum budget_refusal why = BUDGET_TOTAL;

	(void)state;
	assert_int_equal(budget_window(&b, &t, &p, 1 * MiB, &why), 1 * MiB);
	assert_int_equal(why, BUDGET_OK);
	p.used = 8 * MiB;              /* exactly half of its 16 MiB */
	assert_int_equal(budget_window(&b, &t, &p, 1 * MiB, NULL), 1 * MiB);
}

static void
test_window_shrinks_with_what_is_left(void **state)
{
	struct budget b = small_budget();
	struct budget_account t = account(b.tunnel_share, 0);
	struct budget_account p = account(b.principal_share, 0);

	(void)state;
	p.used = 12 * MiB;             /* 4 of 16 left: half of the half */
	assert_int_equal(budget_window(&b, &t, &p, 1 * MiB, NULL), 512 * KiB);
	p.used = 14 * MiB;             /* 2 left: a quarter */
	assert_int_equal(budget_window(&b, &t, &p, 1 * MiB, NULL), 256 * KiB);
	/* The tighter pool wins: the tunnel at 28 of 32 MiB. */
	p.used = 0;
	t.used = 28 * MiB;
	assert_int_equal(budget_window(&b, &t, &p, 1 * MiB, NULL), 256 * KiB);
}

static void
test_window_never_below_minimum_until_refused(void **state)
{
	struct budget b = small_budget();
	struct budget_account p = account(b.principal_share, 0);
	enum budget_refusal why = BUDGET_OK;

	(void)state;
	p.used = 16 * MiB - 100 * KiB; /* proportional: 12.5 KiB, floored to 16 */
	assert_int_equal(budget_window(&b, NULL, &p, 1 * MiB, &why), 16 * KiB);
	assert_int_equal(why, BUDGET_OK);
	p.used = 16 * MiB - 16 * KiB;  /* exactly the minimum left */
	assert_int_equal(budget_window(&b, NULL, &p, 1 * MiB, NULL), 16 * KiB);
	p.used = 16 * MiB - 16 * KiB + 1;
	assert_int_equal(budget_window(&b, NULL, &p, 1 * MiB, &why), 0);
	assert_int_equal(why, BUDGET_PRINCIPAL);
}

static void
test_small_request_is_not_raised_to_minimum(void **state)
{
	struct budget b = small_budget();

	(void)state;
	assert_int_equal(budget_window(&b, NULL, NULL, 4 * KiB, NULL), 4 * KiB);
	b.used = b.total - b.reserve - 4 * KiB;
	assert_int_equal(budget_window(&b, NULL, NULL, 4 * KiB, NULL), 4 * KiB);
}

static void
test_refusal_names_the_tightest_pool(void **state)
{
	struct budget b = small_budget();
	struct budget_account t = account(b.tunnel_share, 0);
	struct budget_account p = account(b.principal_share, 0);
	enum budget_refusal why;

	(void)state;
	t.used = t.limit;
	assert_int_equal(budget_window(&b, &t, &p, 1 * MiB, &why), 0);
	assert_int_equal(why, BUDGET_TUNNEL);
	t.used = 0;
	b.used = b.total - b.reserve;
	assert_int_equal(budget_window(&b, &t, &p, 1 * MiB, &why), 0);
	assert_int_equal(why, BUDGET_TOTAL);
	assert_non_null(strstr(budget_refusal_str(BUDGET_TOTAL), "budget is spent"));
	assert_non_null(strstr(budget_refusal_str(BUDGET_TUNNEL), "tunnel"));
	assert_non_null(strstr(budget_refusal_str(BUDGET_PRINCIPAL), "share"));
}

static void
test_no_limit_accounts_and_null_accounts(void **state)
{
	struct budget b = { .total = 4 * MiB, .min_window = 16 * KiB };
	struct budget_account t = account(0, 0);    /* no share of its own */

	(void)state;
	t.used = 3 * MiB;
	b.used = 1 * MiB;
	assert_int_equal(budget_window(&b, &t, NULL, 1 * MiB, NULL), 1 * MiB);
	b.used = 4 * MiB;
	assert_int_equal(budget_window(&b, &t, NULL, 1 * MiB, NULL), 0);
}

/* ---- the reserve ---- */

static void
test_reserve_is_for_admins_only(void **state)
{
	struct budget b = small_budget();
	struct budget_account user = account(b.principal_share, 0);
	struct budget_account admin = account(b.principal_share, 1);
	enum budget_refusal why;

	(void)state;
	b.used = b.total - b.reserve;          /* users spent all they may */
	assert_int_equal(budget_window(&b, NULL, &user, 1 * MiB, &why), 0);
	assert_int_equal(why, BUDGET_TOTAL);
	/* 8 MiB left of 64 for the admin: under half free, so it shrinks. */
	assert_int_equal(budget_window(&b, NULL, &admin, 1 * MiB, NULL), 256 * KiB);
	b.used = b.total;
	assert_int_equal(budget_window(&b, NULL, &admin, 1 * MiB, &why), 0);
	assert_int_equal(why, BUDGET_TOTAL);
}

/* ---- take and release ---- */

static void
test_take_charges_every_pool_and_release_returns_it(void **state)
{
	struct budget b = small_budget();
	struct budget_account t = account(b.tunnel_share, 0);
	struct budget_account p = account(b.principal_share, 0);
	struct budget_charge c;

	(void)state;
	assert_int_equal(budget_take(&b, &t, &p, 1 * MiB, &c, NULL), 1 * MiB);
	assert_int_equal(b.used, 1 * MiB);
	assert_int_equal(t.used, 1 * MiB);
	assert_int_equal(p.used, 1 * MiB);
	assert_int_equal(c.bytes, 1 * MiB);
	budget_release(&b, &c);
	assert_int_equal(b.used, 0);
	assert_int_equal(t.used, 0);
	assert_int_equal(p.used, 0);
	budget_release(&b, &c);                /* idempotent */
	assert_int_equal(b.used, 0);
}

static void
test_refused_take_charges_nothing(void **state)
{
	struct budget b = small_budget();
	struct budget_account p = account(b.principal_share, 0);
	struct budget_charge c;
	enum budget_refusal why;

	(void)state;
	p.used = p.limit;
	assert_int_equal(budget_take(&b, NULL, &p, 1 * MiB, &c, &why), 0);
	assert_int_equal(why, BUDGET_PRINCIPAL);
	assert_int_equal(c.bytes, 0);
	assert_int_equal(b.used, 0);
	budget_release(&b, &c);
	assert_int_equal(p.used, p.limit);
}

/* ---- scenarios ---- */

/* One user opens streams on one tunnel until refused: it is held to its
 * share, its windows shrank before the refusal, and another user on
 * another tunnel still gets full windows. */
static void
test_one_principal_cannot_starve_another(void **state)
{
	struct budget b = BUDGET_DEFAULT;
	struct budget_account t1 = account(b.tunnel_share, 0), t2 = account(b.tunnel_share, 0);
	struct budget_account alice = account(b.principal_share, 0);
	struct budget_account bob = account(b.principal_share, 0);
	static struct budget_charge c[4096];
	uint32_t w, last = 1 * MiB;
	int n = 0, full = 0;

	(void)state;
	while ((w = budget_take(&b, &t1, &alice, 1 * MiB, &c[n], NULL)) > 0) {
		assert_true(w <= last);          /* never grows back while filling */
		assert_true(w >= b.min_window);
		full += w == 1 * MiB;
		last = w;
		n++;
		assert_true(n < 4096);
	}
	assert_true(alice.used <= b.principal_share);
	assert_true(alice.used > b.principal_share - b.min_window);
	assert_int_equal(full, (int)(b.principal_share / 2 / MiB) + 1);
	assert_true(n > 3 * full);               /* many more, smaller streams */
	assert_int_equal(budget_window(&b, &t2, &bob, 1 * MiB, NULL), 1 * MiB);
	for (int i = 0; i < n; i++)
		budget_release(&b, &c[i]);
	assert_int_equal(b.used, 0);
	assert_int_equal(t1.used, 0);
	assert_int_equal(alice.used, 0);
}

/* Users, each within its share, fill the budget but for the reserve: the
 * next user is refused, an admin still gets a stream. */
static void
test_admin_gets_in_when_users_spent_the_rest(void **state)
{
	struct budget b = BUDGET_DEFAULT;
	struct budget_account t = account(0, 0);
	struct budget_account users[16], admin = account(b.principal_share, 1);
	struct budget_charge c;
	enum budget_refusal why;

	(void)state;
	for (int i = 0; i < 16; i++) {
		users[i] = account(b.principal_share, 0);
		while (budget_take(&b, &t, &users[i], 1 * MiB, &c, NULL) > 0)
			;
	}
	assert_true(b.used <= b.total - b.reserve);
	users[0] = account(b.principal_share, 0);
	assert_int_equal(budget_window(&b, &t, &users[0], 1 * MiB, &why), 0);
	assert_int_equal(why, BUDGET_TOTAL);
	assert_true(budget_window(&b, &t, &admin, 1 * MiB, NULL) >= b.min_window);
}


/* ---- the memory budget ---- */

static struct budget
memory_budget(void)
{
	struct budget b = { .memory = 10 * MiB, .memory_share = 4 * MiB };

	return b;
}

static void
test_holders_count_in_process_and_principal(void **state)
{
	struct budget b = memory_budget();
	struct budget_account alice = { 0 }, bob = { 0 };
	struct budget_holder h1, h2, h3;

	(void)state;
	budget_hold_init(&h1, &b);
	budget_hold_init(&h2, &b);
	budget_hold_init(&h3, &b);
	budget_hold_set(&h1, 1 * MiB);          /* before it has a principal */
	budget_hold_charge(&h1, &alice);
	budget_hold_charge(&h2, &alice);
	budget_hold_charge(&h3, &bob);
	budget_hold_set(&h2, 2 * MiB);
	budget_hold_set(&h3, 3 * MiB);
	assert_int_equal(b.held, 6 * MiB);
	assert_int_equal(alice.held, 3 * MiB);
	assert_int_equal(alice.holders, 2);
	assert_int_equal(bob.held, 3 * MiB);
	/* Shrinking, moving to another principal, releasing. */
	budget_hold_set(&h2, 512 * KiB);
	assert_int_equal(alice.held, 1 * MiB + 512 * KiB);
	budget_hold_charge(&h1, &bob);
	assert_int_equal(alice.held, 512 * KiB);
	assert_int_equal(alice.holders, 1);
	assert_int_equal(bob.held, 4 * MiB);
	assert_int_equal(bob.holders, 2);
	budget_hold_release(&h3);
	budget_hold_release(&h3);                /* idempotent */
	assert_int_equal(bob.held, 1 * MiB);
	assert_int_equal(bob.holders, 1);
	assert_int_equal(b.held, 1 * MiB + 512 * KiB);
	budget_hold_release(&h1);
	budget_hold_release(&h2);
	assert_int_equal(b.held, 0);
	assert_int_equal(alice.held, 0);
	assert_int_equal(alice.holders, 0);
	assert_int_equal(bob.holders, 0);
}

static void
test_uncounted_holder_changes_nothing(void **state)
{
	struct budget_account a = { 0 };
	struct budget_holder h;

	(void)state;
	budget_hold_init(&h, NULL);
	budget_hold_charge(&h, &a);
	budget_hold_set(&h, 5 * MiB);
	assert_int_equal(a.held, 0);
	assert_int_equal(budget_hold_over(&h), BUDGET_OK);
	budget_hold_release(&h);
	assert_int_equal(a.holders, 0);
}

static void
test_over_names_the_pool(void **state)
{
	struct budget b = memory_budget();
	struct budget_account alice = { 0 }, bob = { 0 };
	struct budget_holder a1, b1;

	(void)state;
	budget_hold_init(&a1, &b);
	budget_hold_init(&b1, &b);
	budget_hold_charge(&a1, &alice);
	budget_hold_charge(&b1, &bob);
	budget_hold_set(&a1, 4 * MiB);           /* at the share: not past it */
	assert_int_equal(budget_hold_over(&a1), BUDGET_OK);
	budget_hold_set(&a1, 4 * MiB + 1);
	assert_int_equal(budget_hold_over(&a1), BUDGET_PRINCIPAL);
	assert_int_equal(budget_hold_over(&b1), BUDGET_OK);
	budget_hold_set(&b1, 6 * MiB);           /* 10 MiB + 1: the total */
	assert_int_equal(budget_hold_over(&b1), BUDGET_TOTAL);
	assert_int_equal(budget_hold_over(&a1), BUDGET_TOTAL);
	b.memory = 0;                            /* 0: not limited */
	b.memory_share = 0;
	assert_int_equal(budget_hold_over(&a1), BUDGET_OK);
	budget_hold_release(&a1);
	budget_hold_release(&b1);
}

/* Picks the victim among hs as the gateway does: every holder through
 * budget_pick. */
static const struct budget_holder *
largest(struct budget_holder *hs, size_t n, enum budget_refusal pool,
    const struct budget_account *principal)
{
	const struct budget_holder *best = NULL;

	for (size_t i = 0; i < n; i++)
		best = budget_pick(best, &hs[i], pool, principal);
	return best;
}

static void
test_largest_first_within_the_pool(void **state)
{
	struct budget b = memory_budget();
	struct budget_account alice = { 0 }, bob = { 0 };
	struct budget_holder hs[5];
	const size_t sizes[5] = { 1 * MiB, 3 * MiB, 2 * MiB, 5 * MiB, 0 };
	struct budget_account *who[5] = { &alice, &alice, &alice, &bob, &bob };
	int dropped = 0;

	(void)state;
	for (int i = 0; i < 5; i++) {
		budget_hold_init(&hs[i], &b);
		budget_hold_charge(&hs[i], who[i]);
		budget_hold_set(&hs[i], sizes[i]);
	}
	/* 11 MiB held: past the total, the largest of all goes (bob's). */
	assert_int_equal(budget_hold_over(&hs[0]), BUDGET_TOTAL);
	assert_ptr_equal(largest(hs, 5, BUDGET_TOTAL, NULL), &hs[3]);
	budget_hold_release(&hs[3]);
	/* 6 MiB: within the total; alice (6 MiB) is past her share of 4:
	 * her largest go, bob's never, until she is within it. */
	while (budget_hold_over(&hs[0]) == BUDGET_PRINCIPAL) {
		const struct budget_holder *v = largest(hs, 5, BUDGET_PRINCIPAL, &alice);

		assert_non_null(v);
		assert_ptr_equal(v->principal, &alice);
		budget_hold_release((struct budget_holder *)v);
		dropped++;
	}
	assert_int_equal(dropped, 1);            /* the 3 MiB one: 3 left */
	assert_int_equal(hs[1].held, 0);
	assert_int_equal(alice.held, 3 * MiB);
	/* Ties keep the first; holders of nothing are never picked. */
	budget_hold_set(&hs[0], 2 * MiB);
	assert_ptr_equal(largest(hs, 5, BUDGET_PRINCIPAL, &alice), &hs[0]);
	assert_null(largest(hs + 4, 1, BUDGET_TOTAL, NULL));
	for (int i = 0; i < 5; i++)
		budget_hold_release(&hs[i]);
	assert_int_equal(b.held, 0);
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_full_window_while_half_free),
		cmocka_unit_test(test_window_shrinks_with_what_is_left),
		cmocka_unit_test(test_window_never_below_minimum_until_refused),
		cmocka_unit_test(test_small_request_is_not_raised_to_minimum),
		cmocka_unit_test(test_refusal_names_the_tightest_pool),
		cmocka_unit_test(test_no_limit_accounts_and_null_accounts),
		cmocka_unit_test(test_reserve_is_for_admins_only),
		cmocka_unit_test(test_take_charges_every_pool_and_release_returns_it),
		cmocka_unit_test(test_refused_take_charges_nothing),
		cmocka_unit_test(test_one_principal_cannot_starve_another),
		cmocka_unit_test(test_admin_gets_in_when_users_spent_the_rest),
		cmocka_unit_test(test_holders_count_in_process_and_principal),
		cmocka_unit_test(test_uncounted_holder_changes_nothing),
		cmocka_unit_test(test_over_names_the_pool),
		cmocka_unit_test(test_largest_first_within_the_pool),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
