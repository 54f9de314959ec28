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
 *
 * Per loop (docs/0040): a slice publishes to the process's figure by
 * granules and is exact itself; loops counting at once on their own
 * threads keep the process's figure within slices x granule of the exact
 * sum and every principal's exact; and a loop evicts only when it holds
 * more than its part of the pool that is over, its largest first.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <pthread.h>
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
	struct budget_slice sl;
	struct budget_account alice = { 0 }, bob = { 0 };
	struct budget_holder h1, h2, h3;

	(void)state;
	budget_slice_init(&sl, &b);
	budget_hold_init(&h1, &sl);
	budget_hold_init(&h2, &sl);
	budget_hold_init(&h3, &sl);
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
	struct budget_slice sl;
	struct budget_account alice = { 0 }, bob = { 0 };
	struct budget_holder a1, b1;

	(void)state;
	budget_slice_init(&sl, &b);
	budget_hold_init(&a1, &sl);
	budget_hold_init(&b1, &sl);
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
	struct budget_slice sl;
	struct budget_account alice = { 0 }, bob = { 0 };
	struct budget_holder hs[5];
	const size_t sizes[5] = { 1 * MiB, 3 * MiB, 2 * MiB, 5 * MiB, 0 };
	struct budget_account *who[5] = { &alice, &alice, &alice, &bob, &bob };
	int dropped = 0;

	(void)state;
	budget_slice_init(&sl, &b);
	for (int i = 0; i < 5; i++) {
		budget_hold_init(&hs[i], &sl);
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

/* ---- per loop: slices ---- */

static void
test_slice_publishes_by_granule(void **state)
{
	struct budget b = memory_budget();
	struct budget_slice sl;
	struct budget_holder h;

	(void)state;
	budget_slice_init(&sl, &b);
	budget_hold_init(&h, &sl);
	budget_hold_set(&h, BUDGET_GRANULE - 1);
	assert_int_equal(b.held, 0);                       /* not yet published */
	assert_int_equal(budget_slice_total(&sl), BUDGET_GRANULE - 1);  /* exact here */
	budget_hold_set(&h, BUDGET_GRANULE + 10);
	assert_int_equal(b.held, BUDGET_GRANULE + 10);
	budget_hold_set(&h, 20);                           /* down by less */
	assert_int_equal(b.held, BUDGET_GRANULE + 10);
	budget_hold_set(&h, 9);                            /* a granule: published */
	assert_int_equal(b.held, 9);
	budget_hold_set(&h, 0);                            /* idle: exact */
	assert_int_equal(b.held, 0);
	budget_slice_fini(&sl);
	budget_slice_fini(&sl);                            /* idempotent */
	assert_int_equal(b.slices, 0);
}

#define LOOPS 3
#define LOOP_HOLDERS 16
#define LOOP_STEPS 40000

/* One loop's thread: its slice and holders, charged to two shared
 * principals, set again and again; left holding at the end. */
struct loop_run {
	struct budget *b;
	struct budget_account *who[2];
	struct budget_slice slice;
	struct budget_holder h[LOOP_HOLDERS];
	unsigned seed;
	size_t max_error;         /* most its own total was off the slice's exact */
};

/* xorshift32: each thread's own sequence. */
static unsigned
next_rand(unsigned *x)
{
	*x ^= *x << 13;
	*x ^= *x >> 17;
	*x ^= *x << 5;
	return *x;
}

static void *
loop_counts(void *arg)
{
	struct loop_run *r = arg;

	budget_slice_init(&r->slice, r->b);
	for (int i = 0; i < LOOP_HOLDERS; i++) {
		budget_hold_init(&r->h[i], &r->slice);
		budget_hold_charge(&r->h[i], r->who[i % 2]);
	}
	for (int n = 0; n < LOOP_STEPS; n++) {
		unsigned i = (unsigned)next_rand(&r->seed) % LOOP_HOLDERS;
		size_t bytes = (size_t)next_rand(&r->seed) % (256 * KiB);
		size_t err;

		if (n % 997 == 0)            /* a connection moves to the other principal */
			budget_hold_charge(&r->h[i], r->who[(n / 997) % 2]);
		budget_hold_set(&r->h[i], bytes);
		err = r->slice.held > r->slice.published ?
		    r->slice.held - r->slice.published : r->slice.published - r->slice.held;
		if (err > r->max_error)
			r->max_error = err;
	}
	return NULL;
}

static void
test_loops_count_at_once(void **state)
{
	struct budget b = memory_budget();
	size_t parts[2][BUDGET_SLICES] = { { 0 } };
	struct budget_account alice = { .part = parts[0] }, bob = { .part = parts[1] };
	struct loop_run runs[LOOPS];
	pthread_t t[LOOPS];
	size_t exact = 0, exact_who[2] = { 0, 0 }, published;
	pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;

	(void)state;
	b.mu = &mu;                  /* several threads: the gateway sets it too */
	for (int l = 0; l < LOOPS; l++) {
		memset(&runs[l], 0, sizeof(runs[l]));
		runs[l].b = &b;
		runs[l].who[0] = &alice;
		runs[l].who[1] = &bob;
		runs[l].seed = 7u + (unsigned)l;
		assert_int_equal(pthread_create(&t[l], NULL, loop_counts, &runs[l]), 0);
	}
	for (int l = 0; l < LOOPS; l++)
		assert_int_equal(pthread_join(t[l], NULL), 0);
	for (int l = 0; l < LOOPS; l++) {
		size_t here[2] = { 0, 0 };

		assert_true(runs[l].max_error < BUDGET_GRANULE);
		for (int i = 0; i < LOOP_HOLDERS; i++) {
			const struct budget_holder *h = &runs[l].h[i];

			here[h->principal == &bob] += h->held;
		}
		assert_int_equal(here[0] + here[1], runs[l].slice.held);
		assert_int_equal(parts[0][runs[l].slice.index], here[0]);
		assert_int_equal(parts[1][runs[l].slice.index], here[1]);
		exact += runs[l].slice.held;
		exact_who[0] += here[0];
		exact_who[1] += here[1];
	}
	/* The principals are exact; the process within a granule per loop. */
	assert_int_equal(alice.held, exact_who[0]);
	assert_int_equal(bob.held, exact_who[1]);
	assert_int_equal(alice.holders + bob.holders, LOOPS * LOOP_HOLDERS);
	published = b.held;
	assert_true(published + LOOPS * BUDGET_GRANULE > exact &&
	    exact + LOOPS * BUDGET_GRANULE > published);
	for (int l = 0; l < LOOPS; l++) {
		for (int i = 0; i < LOOP_HOLDERS; i++)
			budget_hold_release(&runs[l].h[i]);
		budget_slice_fini(&runs[l].slice);
	}
	assert_int_equal(b.held, 0);
	assert_int_equal(alice.held, 0);
	assert_int_equal(bob.held, 0);
	assert_int_equal(alice.holders + bob.holders, 0);
	assert_int_equal(b.slices, 0);
}

/* Two loops, A and B, of a 10 MiB budget with 4 MiB shares: each loop's
 * part is 5 MiB of the process and 2 MiB of a principal. */
static void
test_eviction_within_the_loop_over_its_part(void **state)
{
	struct budget b = memory_budget();
	size_t parts[2][BUDGET_SLICES] = { { 0 } };
	struct budget_account alice = { .part = parts[0] }, bob = { .part = parts[1] };
	struct budget_slice A, B;
	struct budget_holder a[2], bh[3];

	(void)state;
	budget_slice_init(&A, &b);
	budget_slice_init(&B, &b);
	assert_int_not_equal(A.index, B.index);
	for (int i = 0; i < 2; i++)
		budget_hold_init(&a[i], &A);
	for (int i = 0; i < 3; i++)
		budget_hold_init(&bh[i], &B);
	budget_hold_charge(&a[0], &alice);
	budget_hold_charge(&a[1], &bob);
	budget_hold_charge(&bh[0], &alice);
	budget_hold_charge(&bh[1], &bob);
	budget_hold_charge(&bh[2], &bob);
	budget_hold_set(&a[0], 1 * MiB);
	budget_hold_set(&a[1], 4 * MiB);
	budget_hold_set(&bh[0], 3 * MiB);
	budget_hold_set(&bh[1], 2 * MiB);
	budget_hold_set(&bh[2], 1 * MiB + 1);
	/* 11 MiB + 1: the process is over.  A holds 5 MiB, its part: A's
	 * largest (4 MiB, larger than any of B's) is not dropped for the
	 * total; B (6 MiB) drops its own largest.  (Alice, 4 MiB, is at her
	 * share, not past it.) */
	assert_true(budget_slice_total(&A) > b.memory);
	assert_false(budget_slice_over(&A));
	assert_int_equal(budget_hold_over(&a[0]), BUDGET_OK);
	assert_true(budget_slice_over(&B));
	assert_int_equal(budget_hold_over(&bh[2]), BUDGET_TOTAL);
	assert_int_equal(budget_hold_part(&bh[2], BUDGET_TOTAL), 6 * MiB + 1);
	assert_int_equal(budget_hold_part(&bh[2], BUDGET_PRINCIPAL), 3 * MiB + 1);
	assert_ptr_equal(largest(bh, 3, BUDGET_TOTAL, NULL), &bh[0]);
	budget_hold_release(&bh[0]);             /* alice's 3 MiB on B */
	/* 8 MiB + 1: within the total.  Bob holds 7 MiB + 1 of a 4 MiB share:
	 * 4 MiB on A and 3 MiB + 1 on B, both over their 2 MiB part: each
	 * loop drops its own largest of bob's. */
	assert_false(budget_slice_over(&B));
	assert_int_equal(budget_hold_over(&a[0]), BUDGET_OK);   /* alice: 1 MiB */
	assert_int_equal(budget_hold_over(&a[1]), BUDGET_PRINCIPAL);
	assert_int_equal(budget_hold_over(&bh[1]), BUDGET_PRINCIPAL);
	assert_ptr_equal(largest(bh, 3, BUDGET_PRINCIPAL, &bob), &bh[1]);
	budget_hold_release(&bh[1]);             /* B: 1 MiB + 1 of bob's left */
	/* Bob: 5 MiB + 1, still over; B holds 1 MiB + 1 of it, under its
	 * part: B keeps it.  A (4 MiB) drops its largest of bob's. */
	assert_int_equal(budget_hold_over(&bh[2]), BUDGET_OK);
	assert_int_equal(budget_hold_over(&a[1]), BUDGET_PRINCIPAL);
	assert_ptr_equal(largest(a, 2, BUDGET_PRINCIPAL, &bob), &a[1]);
	budget_hold_release(&a[1]);
	assert_int_equal(bob.held, 1 * MiB + 1);
	assert_int_equal(budget_hold_over(&bh[2]), BUDGET_OK);
	for (int i = 0; i < 2; i++)
		budget_hold_release(&a[i]);
	for (int i = 0; i < 3; i++)
		budget_hold_release(&bh[i]);
	budget_slice_fini(&A);
	budget_slice_fini(&B);
	assert_int_equal(b.held, 0);
	assert_int_equal(parts[0][0] + parts[0][1] + parts[1][0] + parts[1][1], 0);
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
		cmocka_unit_test(test_slice_publishes_by_granule),
		cmocka_unit_test(test_loops_count_at_once),
		cmocka_unit_test(test_eviction_within_the_loop_over_its_part),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
