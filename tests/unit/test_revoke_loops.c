/*
 * test_revoke_loops.c: live streams per loop and a revocation's effects on
 * every loop (docs/0040 step 6), three loops in three threads: each loop's
 * streams go into its own list (live_streams_here: loop 0's is the
 * gateway's), the process's count adds them up (live_streams_count_all,
 * read from loop 0); access_revoke_broadcast ends the matching streams of
 * every loop, each on its own loop's thread, leaves the others alone, and
 * hands the total to the loop that asked (loop 0, then loop 2).  Without
 * loops it ends the gateway's own and answers before it returns.
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

#include <event2/event.h>

#include "access.h"
#include "gateway.h"
#include "livestreams.h"
#include "loop.h"

#define NLOOPS 3

static struct gateway gw;
static struct loop *loops;

/* Per loop: a stream of token "tok-a" and one of "tok-b". */
static struct live_stream streams[NLOOPS][2];
/* Written by each stream's own loop: the loop its end ran on (-1: none). */
static int ended_on[NLOOPS][2];
static char ended_reason[NLOOPS][2][64];
static int listed_right[NLOOPS];       /* live_streams_here was the loop's */

/* A broadcast's answer. */
static struct {
	int calls;
	size_t ended;
	pthread_t on;
} answer;

static atomic_int reports;

static void
report(void *arg)
{
	(void)arg;
	atomic_fetch_add(&reports, 1);
}

/* Runs loop 0 (this thread) until n reports came in. */
static void
wait_reports(int n)
{
	while (atomic_load(&reports) < n)
		assert_int_equal(event_base_loop(gw.base, EVLOOP_ONCE), 0);
}

static void
stream_end(struct live_stream *ls, const char *reason)
{
	ptrdiff_t k = ls - &streams[0][0];
	struct loop *l = loop_self();

	ended_on[k / 2][k % 2] = l != NULL ? (int)l->index : -1;
	snprintf(ended_reason[k / 2][k % 2], sizeof(ended_reason[0][0]), "%s",
	    reason);
}

/* On loop i: its two streams into its own list; reported to loop 0. */
static void
add_here(void *arg)
{
	unsigned i = loop_self()->index;
	struct live_streams *l = live_streams_here(&gw);

	(void)arg;
	listed_right[i] = l == (i == 0 ? &gw.live_streams : &loops[i].live_streams);
	for (int k = 0; k < 2; k++) {
		streams[i][k] = (struct live_stream){ .kind = "connect",
		    .principal = "user:alice", .token_id = k == 0 ? "tok-a" : "tok-b",
		    .agent_id = "a-1", .end = stream_end };
		live_stream_add(l, &streams[i][k]);
	}
	assert_int_equal(loop_call(&loops[0], report, NULL, NULL), 0);
}

static void
remove_here(void *arg)
{
	unsigned i = loop_self()->index;

	(void)arg;
	live_stream_remove(&streams[i][0]);
	live_stream_remove(&streams[i][1]);
	assert_int_equal(loop_call(&loops[0], report, NULL, NULL), 0);
}

static void
revoke_answered(void *arg, size_t ended)
{
	(void)arg;
	answer.calls++;
	answer.ended = ended;
	answer.on = pthread_self();
	if (loop_self() != &loops[0])
		assert_int_equal(loop_call(&loops[0], report, NULL, NULL), 0);
}

/* On loop 2: revokes a token of another name, none of ours. */
static void
revoke_from_2(void *arg)
{
	(void)arg;
	assert_int_equal(access_revoke_broadcast(&gw, &(struct revoke_what){
	    .by = LIVE_BY_TOKEN, .match = "tok-b", .what = "token" },
	    revoke_answered, NULL, NULL), 0);
}

static int
setup(void **state)
{
	char err[128];

	(void)state;
	memset(&gw, 0, sizeof(gw));
	memset(ended_on, 0xff, sizeof(ended_on));
	memset(&answer, 0, sizeof(answer));
	atomic_store(&reports, 0);
	if ((gw.base = event_base_new()) == NULL)
		return -1;
	if ((loops = loops_new(gw.base, NLOOPS, &gw, err, sizeof(err))) == NULL)
		return -1;
	gw.loops = loops;
	gw.nloops = NLOOPS;
	return 0;
}

static int
teardown(void **state)
{
	(void)state;
	loops_stop(loops, NLOOPS);
	loops_free(loops, NLOOPS);
	loops = NULL;
	event_base_free(gw.base);
	return 0;
}

static void
test_broadcast(void **state)
{
	(void)state;
	for (unsigned i = 0; i < NLOOPS; i++)
		assert_int_equal(loop_call(&loops[i], add_here, NULL, NULL), 0);
	wait_reports(NLOOPS);
	for (unsigned i = 0; i < NLOOPS; i++)
		assert_true(listed_right[i]);
	assert_int_equal(live_stream_count(&gw.live_streams), 2);
	assert_int_equal(live_streams_count_all(&gw), 2 * NLOOPS);

	/* From loop 0: tok-a's stream on each loop ends there; done on 0. */
	assert_int_equal(access_revoke_broadcast(&gw, &(struct revoke_what){
	    .by = LIVE_BY_TOKEN, .match = "tok-a", .what = "token",
	    .log = "test: a revocation ended streams" },
	    revoke_answered, NULL, NULL), 0);
	assert_int_equal(answer.calls, 0);       /* never inside the call */
	while (answer.calls == 0)
		assert_int_equal(event_base_loop(gw.base, EVLOOP_ONCE), 0);
	assert_int_equal(answer.ended, NLOOPS);
	assert_true(pthread_equal(answer.on, pthread_self()));
	for (unsigned i = 0; i < NLOOPS; i++) {
		assert_int_equal(ended_on[i][0], (int)i);
		assert_string_equal(ended_reason[i][0], "token tok-a revoked");
		assert_int_equal(ended_on[i][1], -1);
	}

	/* From loop 2: tok-b's, the total back on loop 2. */
	assert_int_equal(loop_call(&loops[2], revoke_from_2, NULL, NULL), 0);
	wait_reports(NLOOPS + 1);
	assert_int_equal(answer.calls, 2);
	assert_int_equal(answer.ended, NLOOPS);
	assert_true(pthread_equal(answer.on, loops[2].thread));
	for (unsigned i = 0; i < NLOOPS; i++)
		assert_int_equal(ended_on[i][1], (int)i);

	/* Again: streams already ending are not told twice. */
	assert_int_equal(access_revoke_broadcast(&gw, &(struct revoke_what){
	    .by = LIVE_BY_TOKEN, .match = "tok-a", .what = "token" },
	    revoke_answered, NULL, NULL), 0);
	while (answer.calls == 2)
		assert_int_equal(event_base_loop(gw.base, EVLOOP_ONCE), 0);
	assert_int_equal(answer.ended, 0);

	for (unsigned i = 0; i < NLOOPS; i++)
		assert_int_equal(loop_call(&loops[i], remove_here, NULL, NULL), 0);
	wait_reports(2 * NLOOPS + 1);
	assert_int_equal(live_streams_count_all(&gw), 0);
}

static int lone_ended;

static void
lone_end(struct live_stream *ls, const char *reason)
{
	(void)ls;
	lone_ended += strcmp(reason, "user bob revoked") == 0;
}

/* No loops of its own (another gateway's thread): the gateway's own
 * list, answered at once. */
static void
test_no_loops(void **state)
{
	struct gateway lone = { 0 };
	struct live_stream s = { .kind = "k8s", .principal = "user:bob",
	    .token_id = "tok-c", .end = lone_end };

	(void)state;
	live_stream_add(live_streams_here(&lone), &s);
	assert_int_equal(live_stream_count(&lone.live_streams), 1);
	assert_int_equal(access_revoke_broadcast(&lone, &(struct revoke_what){
	    .by = LIVE_BY_PRINCIPAL, .match = "user:bob", .what = "user",
	    .name = "bob" }, revoke_answered, NULL, NULL), 0);
	assert_int_equal(answer.calls, 1);
	assert_int_equal(answer.ended, 1);
	assert_int_equal(lone_ended, 1);
	live_stream_remove(&s);
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_broadcast, setup, teardown),
		cmocka_unit_test_setup_teardown(test_no_loops, setup, teardown),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
