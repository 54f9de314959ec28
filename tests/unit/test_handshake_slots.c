/*
 * test_handshake_slots.c: the tunnel handshake counts every loop shares
 * (gateway/core/gateway.c, docs/0040 step 7): --max-handshakes taken by
 * CAS (gateway_handshake_take), the per-source share under hs_mu
 * (gateway_handshake_source_take), and the come-back schedule under ra_mu,
 * from four threads at once: no thread ever sees more holders than the
 * cap, and every slot comes back.  Run under ThreadSanitizer too.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <pthread.h>
#include <stdatomic.h>
#include <string.h>

#include "gateway.h"
#include "runtime.h"

#define THREADS 4
#define ROUNDS  20000
#define CAP     3

struct race {
	struct gateway *gw;
	atomic_uint held;             /* holders now, counted by the test */
	atomic_uint most;             /* the most seen at once */
	atomic_uint taken;            /* successful takes */
	atomic_uint refused;
	int by_source;                /* 1: the per-source share, 0: slots */
};

static void
note_most(struct race *r, unsigned now)
{
	unsigned m = atomic_load(&r->most);

	while (now > m && !atomic_compare_exchange_weak(&r->most, &m, now))
		;
}

static void *
racer(void *arg)
{
	struct race *r = arg;
	const char *peer = "192.0.2.9:4000";

	for (int i = 0; i < ROUNDS; i++) {
		int rc = r->by_source ?
		    gateway_handshake_source_take(r->gw, peer) :
		    gateway_handshake_take(r->gw);

		if (rc != 0) {
			atomic_fetch_add(&r->refused, 1);
			continue;
		}
		note_most(r, atomic_fetch_add(&r->held, 1) + 1);
		atomic_fetch_add(&r->taken, 1);
		/* The schedule is fed and read by every thread too. */
		(void)gateway_retry_after_ms(r->gw, 0, 3, 100);
		atomic_fetch_sub(&r->held, 1);
		if (r->by_source)
			gateway_handshake_source_put(r->gw, peer);
		else
			gateway_handshake_free(r->gw, runtime_monotonic_ms() - 5);
	}
	return NULL;
}

static void
run_race(struct gateway *gw, struct race *r)
{
	pthread_t t[THREADS];
	int by_source = r->by_source;

	memset(r, 0, sizeof(*r));
	r->gw = gw;
	r->by_source = by_source;
	for (int i = 0; i < THREADS; i++)
		assert_int_equal(pthread_create(&t[i], NULL, racer, r), 0);
	for (int i = 0; i < THREADS; i++)
		assert_int_equal(pthread_join(t[i], NULL), 0);
}

static void
test_slots_capped(void **state)
{
	struct gateway gw = { .limits = GATEWAY_DEFAULT_LIMITS };
	struct race r = { .by_source = 0 };

	(void)state;
	gw.limits.max_handshakes = CAP;
	gateway_counts_init(&gw);
	run_race(&gw, &r);
	/* Never more than the cap at once, and all came back. */
	assert_true(atomic_load(&r.most) <= CAP);
	assert_true(atomic_load(&r.most) >= 1);
	assert_int_equal(atomic_load(&r.taken) + atomic_load(&r.refused),
	    THREADS * ROUNDS);
	assert_int_equal(atomic_load(&gw.handshakes), 0);
	/* Full: refused without counting. */
	for (int i = 0; i < CAP; i++)
		assert_int_equal(gateway_handshake_take(&gw), 0);
	assert_int_equal(gateway_handshake_take(&gw), -1);
	assert_int_equal(atomic_load(&gw.handshakes), CAP);
	for (int i = 0; i < CAP; i++)
		gateway_handshake_free(&gw, -1);
	assert_int_equal(atomic_load(&gw.handshakes), 0);
	gateway_counts_fini(&gw);
}

static void
test_source_capped(void **state)
{
	struct gateway gw = { .limits = GATEWAY_DEFAULT_LIMITS };
	struct race r = { .by_source = 1 };

	(void)state;
	gw.limits.max_handshakes_per_source = CAP;
	gateway_counts_init(&gw);
	run_race(&gw, &r);
	assert_true(atomic_load(&r.most) <= CAP);
	assert_true(atomic_load(&r.most) >= 1);
	/* Another source has its own share; the first's is all back. */
	for (int i = 0; i < CAP; i++)
		assert_int_equal(gateway_handshake_source_take(&gw, "192.0.2.9:1"), 0);
	assert_int_equal(gateway_handshake_source_take(&gw, "192.0.2.9:2"), -1);
	assert_int_equal(gateway_handshake_source_take(&gw, "198.51.100.1:1"), 0);
	gateway_counts_fini(&gw);
}

/* A slot given back calls the route's hook once, on the freeing thread. */
static atomic_uint hook_calls;

static void
hook(struct gateway *gw)
{
	(void)gw;
	atomic_fetch_add(&hook_calls, 1);
}

static void
test_free_tells_hook(void **state)
{
	struct gateway gw = { .limits = GATEWAY_DEFAULT_LIMITS };

	(void)state;
	gateway_counts_init(&gw);
	atomic_store(&gw.handshake_freed, hook);
	assert_int_equal(gateway_handshake_take(&gw), 0);
	assert_int_equal(gateway_handshake_take(&gw), 0);
	gateway_handshake_free(&gw, runtime_monotonic_ms());
	gateway_handshake_free(&gw, -1);
	assert_int_equal(atomic_load(&hook_calls), 2);
	assert_int_equal(atomic_load(&gw.handshakes), 0);
	gateway_counts_fini(&gw);
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_slots_capped),
		cmocka_unit_test(test_source_capped),
		cmocka_unit_test(test_free_tells_hook),
	};

	runtime_init();
	return cmocka_run_group_tests(tests, NULL, NULL);
}
