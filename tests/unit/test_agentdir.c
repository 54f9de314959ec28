/*
 * test_agentdir.c: the process's directory of held agents
 * (gateway/agents/agentdir.c): an agent added is found by id, counted
 * whole and in its cluster, with when it came up; a reconnect on another
 * loop takes the entry over with a new generation and hands back the old
 * (loop, generation), after which the old tunnel's remove and update are
 * no-ops; a remove keeps every other entry findable; agentdir_pick skips
 * inactive agents (saying they are connected), filters by node and gives
 * each active agent of a cluster its turn as the hub does, preferring the
 * calling loop's agents in turns of that loop's own (docs/0040 step 8);
 * agentdir_land names the loop a connection for a cluster should live
 * on; and threads adding and removing the same agents leave nothing
 * behind.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "agentdir.h"

static int
setup(void **state)
{
	*state = agentdir_new();
	return *state != NULL ? 0 : -1;
}

static int
teardown(void **state)
{
	agentdir_free(*state);
	return 0;
}

/* A pick from no loop (agentdir_pick with no preference). */
static int
pick_any(struct agentdir *d, const char *cluster, const char *node,
    struct agentdir_entry *out, int *connected)
{
	return agentdir_pick(d, cluster, node, AGENTDIR_NO_LOOP, out, connected);
}

static void
test_add_find_count(void **state)
{
	struct agentdir *d = *state;
	struct agentdir_entry e;
	struct agentdir_place old = { 7, 7 };
	int64_t before = (int64_t)time(NULL);
	uint64_t g;

	assert_int_equal(agentdir_find(d, "a-1", &e), 0);
	assert_int_equal(agentdir_since(d, "a-1"), 0);
	g = agentdir_add(d, "a-1", "c-one", "n1", true, 0, &old);
	assert_true(g != 0);
	assert_int_equal(old.generation, 0);        /* nothing replaced */
	(void)agentdir_add(d, "a-2", "c-one", "n2", false, 0, NULL);
	(void)agentdir_add(d, "a-3", "c-two", "n1", true, 0, NULL);

	assert_int_equal(agentdir_find(d, "a-1", &e), 1);
	assert_string_equal(e.agent_id, "a-1");
	assert_string_equal(e.cluster, "c-one");
	assert_string_equal(e.node, "n1");
	assert_true(e.active);
	assert_int_equal(e.at.loop, 0);
	assert_true(e.at.generation == g);
	assert_true(e.since >= before && e.since <= (int64_t)time(NULL));
	assert_true(agentdir_since(d, "a-1") == e.since);
	assert_int_equal(agentdir_find(d, "a-2", NULL), 1);
	assert_int_equal(agentdir_count(d), 3);
	assert_int_equal(agentdir_count_cluster(d, "c-one"), 2);
	assert_int_equal(agentdir_count_cluster(d, "c-two"), 1);
	assert_int_equal(agentdir_count_cluster(d, "c-none"), 0);
}

/* A reconnect lands on loop 1 while the old tunnel is on loop 0: the new
 * generation owns the entry; the old tunnel's update and remove (its
 * close, later) change nothing; the new one's remove removes it. */
static void
test_replace_across_loops(void **state)
{
	struct agentdir *d = *state;
	struct agentdir_place was, old, now;
	struct agentdir_entry e;

	was.loop = 0;
	was.generation = agentdir_add(d, "a-1", "c-one", "n1", true, 0, NULL);
	now.loop = 1;
	now.generation = agentdir_add(d, "a-1", "c-one", "n1", false, 1, &old);
	assert_int_equal(old.loop, was.loop);
	assert_true(old.generation == was.generation);
	assert_true(now.generation != was.generation && now.generation != 0);
	assert_int_equal(agentdir_count(d), 1);
	assert_int_equal(agentdir_count_cluster(d, "c-one"), 1);
	assert_int_equal(agentdir_find(d, "a-1", &e), 1);
	assert_int_equal(e.at.loop, 1);
	assert_true(e.at.generation == now.generation);
	assert_false(e.active);

	/* The stale tunnel: neither its update nor its remove counts. */
	assert_int_equal(agentdir_update(d, "a-1", was, "n9", true), 0);
	assert_int_equal(agentdir_remove(d, "a-1", was), 0);
	/* Same generation, wrong loop: not that tunnel either. */
	assert_int_equal(agentdir_remove(d, "a-1",
	    (struct agentdir_place){ 0, now.generation }), 0);
	assert_int_equal(agentdir_find(d, "a-1", &e), 1);
	assert_string_equal(e.node, "n1");
	assert_false(e.active);
	assert_int_equal(agentdir_count(d), 1);

	/* The current one's update and remove do. */
	assert_int_equal(agentdir_update(d, "a-1", now, "n1", true), 1);
	assert_int_equal(agentdir_find(d, "a-1", &e), 1);
	assert_true(e.active);
	assert_int_equal(agentdir_remove(d, "a-1", now), 1);
	assert_int_equal(agentdir_find(d, "a-1", NULL), 0);
	assert_int_equal(agentdir_count(d), 0);
	assert_int_equal(agentdir_count_cluster(d, "c-one"), 0);
	assert_int_equal(agentdir_remove(d, "a-1", now), 0);
	assert_int_equal(agentdir_update(d, "a-1", now, "n1", true), 0);
}

/* Many agents share chains (4096 buckets): removing every other one keeps
 * the rest findable, counted and pickable. */
static void
test_remove_keeps_others(void **state)
{
	struct agentdir *d = *state;
	static struct agentdir_place at[10000];
	char id[32];
	int connected;

	for (int i = 0; i < 10000; i++) {
		snprintf(id, sizeof(id), "a-%d", i);
		at[i].loop = (unsigned)i % 3;
		at[i].generation = agentdir_add(d, id, i % 2 ? "c-odd" : "c-even",
		    "n", true, at[i].loop, NULL);
	}
	for (int i = 0; i < 10000; i += 2) {
		snprintf(id, sizeof(id), "a-%d", i);
		assert_int_equal(agentdir_remove(d, id, at[i]), 1);
	}
	assert_int_equal(agentdir_count(d), 5000);
	assert_int_equal(agentdir_count_cluster(d, "c-even"), 0);
	assert_int_equal(agentdir_count_cluster(d, "c-odd"), 5000);
	for (int i = 0; i < 10000; i++) {
		snprintf(id, sizeof(id), "a-%d", i);
		assert_int_equal(agentdir_find(d, id, NULL), i % 2);
	}
	assert_int_equal(pick_any(d, "c-even", NULL, NULL, &connected), 0);
	assert_int_equal(connected, 0);
	assert_int_equal(pick_any(d, "c-odd", NULL, NULL, &connected), 1);
	assert_int_equal(connected, 1);
}

static void
count_one(const struct agentdir_entry *e, void *arg)
{
	int *seen = arg;

	assert_int_equal(e->agent_id[0], 'a');
	seen[e->agent_id[2] - '0']++;
}

static void
test_foreach(void **state)
{
	struct agentdir *d = *state;
	int seen[10] = { 0 };

	assert_int_equal(agentdir_foreach(d, count_one, seen), 0);
	(void)agentdir_add(d, "a-1", "c-one", "n1", true, 0, NULL);
	(void)agentdir_add(d, "a-2", "c-two", "n1", true, 1, NULL);
	(void)agentdir_add(d, "a-2", "c-two", "n1", true, 0, NULL);
	assert_int_equal(agentdir_foreach(d, count_one, seen), 2);
	assert_int_equal(seen[1], 1);
	assert_int_equal(seen[2], 1);
}

/* As hub_pick: inactive agents are connected but not picked; a node picks
 * that node only; several active agents take turns evenly. */
static void
test_pick(void **state)
{
	struct agentdir *d = *state;
	struct agentdir_entry e;
	struct agentdir_place px;
	int connected = 7, got[3] = { 0 };

	assert_int_equal(pick_any(d, "c-one", NULL, &e, &connected), 0);
	assert_int_equal(connected, 0);
	px.loop = 0;
	px.generation = agentdir_add(d, "x", "c-one", "n1", false, 0, NULL);
	assert_int_equal(pick_any(d, "c-one", NULL, &e, &connected), 0);
	assert_int_equal(connected, 1);
	assert_int_equal(pick_any(d, "c-one", "n1", &e, &connected), 0);
	assert_int_equal(connected, 1);
	assert_int_equal(pick_any(d, "c-one", "ghost", &e, &connected), 0);
	assert_int_equal(connected, 0);

	(void)agentdir_add(d, "y", "c-one", "n2", true, 1, NULL);
	(void)agentdir_add(d, "z", "c-one", "n3", true, 0, NULL);
	(void)agentdir_add(d, "other", "c-two", "n1", true, 0, NULL);
	for (int i = 0; i < 5; i++) {
		assert_int_equal(pick_any(d, "c-one", "n2", &e, &connected), 1);
		assert_string_equal(e.agent_id, "y");
		assert_int_equal(e.at.loop, 1);
	}
	/* Two active of c-one: each every other time, never x or other. */
	for (int i = 0; i < 100; i++) {
		assert_int_equal(pick_any(d, "c-one", NULL, &e, NULL), 1);
		assert_true(strcmp(e.agent_id, "y") == 0 || strcmp(e.agent_id, "z") == 0);
		got[e.agent_id[0] - 'x']++;
	}
	assert_int_equal(got[1], 50);
	assert_int_equal(got[2], 50);
	/* x becomes active: three take turns, 300 picks give each 100. */
	assert_int_equal(agentdir_update(d, "x", px, "n1", true), 1);
	memset(got, 0, sizeof(got));
	for (int i = 0; i < 300; i++) {
		assert_int_equal(pick_any(d, "c-one", NULL, &e, NULL), 1);
		got[e.agent_id[0] - 'x']++;
	}
	assert_int_equal(got[0], 100);
	assert_int_equal(got[1], 100);
	assert_int_equal(got[2], 100);
	assert_int_equal(pick_any(d, "c-two", "n1", &e, NULL), 1);
	assert_string_equal(e.agent_id, "other");
}

/* Index of e among the names of ids (NULL-terminated); fails if absent. */
static int
which(const struct agentdir_entry *e, const char *const *ids)
{
	for (int i = 0; ids[i] != NULL; i++)
		if (strcmp(e->agent_id, ids[i]) == 0)
			return i;
	fail_msg("picked %s, not one of the expected agents", e->agent_id);
	return -1;
}

/* docs/0040 step 8: a pick from loop L takes an active agent on L when the
 * cluster has one there, in turns of L's own that picks from another loop
 * do not disturb; from a loop with none, every active agent in turn; a
 * node is exact wherever it lives. */
static void
test_pick_near(void **state)
{
	static const char *const all[] = { "a0", "b0", "c1", "d1", NULL };
	struct agentdir *d = *state;
	struct agentdir_entry e;
	struct agentdir_place pc;
	int got[4], connected;

	(void)agentdir_add(d, "a0", "c", "na", true, 0, NULL);
	(void)agentdir_add(d, "b0", "c", "nb", true, 0, NULL);
	pc.loop = 1;
	pc.generation = agentdir_add(d, "c1", "c", "nc", true, 1, NULL);
	(void)agentdir_add(d, "d1", "c", "nd", true, 1, NULL);
	(void)agentdir_add(d, "i1", "c", "ni", false, 1, NULL);
	(void)agentdir_add(d, "o1", "other", "na", true, 1, NULL);

	/* Loops 0 and 1 pick in alternation: each sees its own two agents,
	 * half each (with one rotor for both, loop 0 took every other turn:
	 * always the same agent). */
	memset(got, 0, sizeof(got));
	for (int i = 0; i < 200; i++) {
		assert_int_equal(agentdir_pick(d, "c", NULL, 0, &e, &connected), 1);
		assert_int_equal(e.at.loop, 0);
		got[which(&e, all)]++;
		assert_int_equal(agentdir_pick(d, "c", NULL, 1, &e, NULL), 1);
		assert_int_equal(e.at.loop, 1);
		got[which(&e, all)]++;
	}
	assert_int_equal(connected, 1);
	assert_int_equal(got[0], 100);
	assert_int_equal(got[1], 100);
	assert_int_equal(got[2], 100);
	assert_int_equal(got[3], 100);

	/* From loop 2 (no agent of c there): all four active in turn. */
	memset(got, 0, sizeof(got));
	for (int i = 0; i < 400; i++) {
		assert_int_equal(agentdir_pick(d, "c", NULL, 2, &e, NULL), 1);
		got[which(&e, all)]++;
	}
	for (int i = 0; i < 4; i++)
		assert_int_equal(got[i], 100);

	/* A node is that node's agent, on whichever loop. */
	for (int i = 0; i < 3; i++) {
		assert_int_equal(agentdir_pick(d, "c", "nc", 0, &e, NULL), 1);
		assert_string_equal(e.agent_id, "c1");
		assert_int_equal(agentdir_pick(d, "c", "na", 1, &e, NULL), 1);
		assert_string_equal(e.agent_id, "a0");
	}
	/* An inactive agent on the loop is no reason to stay: i1 is never
	 * taken, and with c1 inactive loop 1's only choice is d1. */
	assert_int_equal(agentdir_update(d, "c1", pc, "nc", false), 1);
	for (int i = 0; i < 5; i++) {
		assert_int_equal(agentdir_pick(d, "c", NULL, 1, &e, NULL), 1);
		assert_string_equal(e.agent_id, "d1");
	}
	assert_int_equal(agentdir_pick(d, "c", "ni", 1, &e, &connected), 0);
	assert_int_equal(connected, 1);
}

/* agentdir_land: the loop itself when an active agent is there, without
 * taking that loop's turn from its picks; else the loops of the agents in
 * turn; nothing for an unknown cluster or one with no active agent. */
static void
test_land(void **state)
{
	struct agentdir *d = *state;
	struct agentdir_entry e;
	unsigned loop = 77, lands[3] = { 0 };
	char first[STORE_ID_MAX + 1];

	assert_int_equal(agentdir_land(d, "c", NULL, 0, &loop), 0);
	assert_int_equal(loop, 77);
	(void)agentdir_add(d, "i1", "c", "ni", false, 1, NULL);
	assert_int_equal(agentdir_land(d, "c", NULL, 0, &loop), 0);

	(void)agentdir_add(d, "a0", "c", "na", true, 0, NULL);
	(void)agentdir_add(d, "b0", "c", "nb", true, 0, NULL);
	(void)agentdir_add(d, "c1", "c", "nc", true, 1, NULL);
	(void)agentdir_add(d, "d2", "c", "nd", true, 2, NULL);
	/* From loop 0: stays, and its picks still alternate a0, b0. */
	assert_int_equal(agentdir_pick(d, "c", NULL, 0, &e, NULL), 1);
	snprintf(first, sizeof(first), "%s", e.agent_id);
	for (int i = 0; i < 10; i++) {
		assert_int_equal(agentdir_land(d, "c", NULL, 0, &loop), 1);
		assert_int_equal(loop, 0);
		assert_int_equal(agentdir_pick(d, "c", NULL, 0, &e, NULL), 1);
		assert_string_not_equal(e.agent_id, first);
		snprintf(first, sizeof(first), "%s", e.agent_id);
	}
	/* From loop 1 (c1 there): stays; c1 gone inactive, i1 too: by turns
	 * to a0's and b0's loop 0 and d2's loop 2. */
	assert_int_equal(agentdir_land(d, "c", NULL, 1, &loop), 1);
	assert_int_equal(loop, 1);
	assert_int_equal(agentdir_find(d, "c1", &e), 1);
	assert_int_equal(agentdir_update(d, "c1", e.at, "nc", false), 1);
	for (int i = 0; i < 300; i++) {
		assert_int_equal(agentdir_land(d, "c", NULL, 1, &loop), 1);
		assert_true(loop == 0 || loop == 2);
		lands[loop]++;
	}
	assert_int_equal(lands[0], 200);
	assert_int_equal(lands[2], 100);
	/* A node lands on its agent's loop; an inactive or unknown one
	 * nowhere; another cluster's agents are no answer. */
	assert_int_equal(agentdir_land(d, "c", "nd", 0, &loop), 1);
	assert_int_equal(loop, 2);
	assert_int_equal(agentdir_land(d, "c", "ni", 0, &loop), 0);
	assert_int_equal(agentdir_land(d, "c", "ghost", 0, &loop), 0);
	assert_int_equal(agentdir_land(d, "nope", NULL, 1, &loop), 0);
}

/* agentdir_loops: the loops holding an active matching agent, as a mask,
 * and how many such agents; no rotor turns (the picks from loop 1 still
 * alternate after it). */
static void
test_loops(void **state)
{
	struct agentdir *d = *state;
	struct agentdir_entry e;
	char first[STORE_ID_MAX + 1];
	uint64_t mask = 77;

	assert_int_equal(agentdir_loops(d, "c", NULL, &mask), 0);
	assert_true(mask == 0);
	(void)agentdir_add(d, "i1", "c", "ni", false, 1, NULL);
	assert_int_equal(agentdir_loops(d, "c", NULL, &mask), 0);
	assert_true(mask == 0);
	(void)agentdir_add(d, "a1", "c", "na", true, 1, NULL);
	(void)agentdir_add(d, "b1", "c", "nb", true, 1, NULL);
	(void)agentdir_add(d, "c3", "c", "nc", true, 3, NULL);
	(void)agentdir_add(d, "x0", "other", "nx", true, 0, NULL);
	(void)agentdir_add(d, "far", "c", "nf", true, 70, NULL);
	assert_int_equal(agentdir_loops(d, "c", NULL, &mask), 4);
	assert_true(mask == ((UINT64_C(1) << 1) | (UINT64_C(1) << 3)));
	assert_int_equal(agentdir_loops(d, "c", "nc", &mask), 1);
	assert_true(mask == UINT64_C(1) << 3);
	assert_int_equal(agentdir_loops(d, "c", "ni", &mask), 0);
	assert_true(mask == 0);
	assert_int_equal(agentdir_pick(d, "c", NULL, 1, &e, NULL), 1);
	snprintf(first, sizeof(first), "%s", e.agent_id);
	for (int i = 0; i < 4; i++) {
		assert_int_equal(agentdir_loops(d, "c", NULL, &mask), 4);
		assert_int_equal(agentdir_pick(d, "c", NULL, 1, &e, NULL), 1);
		assert_string_not_equal(e.agent_id, first);
		snprintf(first, sizeof(first), "%s", e.agent_id);
	}
}

/* Two loops' threads connect and disconnect the same agents at once, each
 * removing by its own (loop, generation): however they interleave, a
 * remove never takes the other loop's entry, and nothing is left. */
#define RACE_AGENTS 64
#define RACE_ROUNDS 2000

struct racer {
	struct agentdir *d;
	unsigned loop;
	unsigned removed;
};

static void *
race(void *arg)
{
	struct racer *r = arg;
	char id[32];

	for (int i = 0; i < RACE_ROUNDS; i++) {
		struct agentdir_place at = { r->loop, 0 };
		struct agentdir_entry e;

		snprintf(id, sizeof(id), "a-%d", i % RACE_AGENTS);
		at.generation = agentdir_add(r->d, id, "c-one", "n", true, r->loop,
		    NULL);
		/* Whoever holds the entry now, it is a whole entry. */
		if (agentdir_find(r->d, id, &e))
			assert_string_equal(e.cluster, "c-one");
		r->removed += (unsigned)agentdir_remove(r->d, id, at);
	}
	return NULL;
}

static void
test_threads(void **state)
{
	struct agentdir *d = *state;
	struct racer r[2] = { { d, 0, 0 }, { d, 1, 0 } };
	pthread_t t[2];

	for (int i = 0; i < 2; i++)
		assert_int_equal(pthread_create(&t[i], NULL, race, &r[i]), 0);
	for (int i = 0; i < 2; i++)
		assert_int_equal(pthread_join(t[i], NULL), 0);
	assert_int_equal(agentdir_count(d), 0);
	assert_true(r[0].removed + r[1].removed <= 2 * RACE_ROUNDS);
	assert_true(r[0].removed > 0 && r[1].removed > 0);
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_add_find_count, setup, teardown),
		cmocka_unit_test_setup_teardown(test_replace_across_loops, setup, teardown),
		cmocka_unit_test_setup_teardown(test_remove_keeps_others, setup, teardown),
		cmocka_unit_test_setup_teardown(test_foreach, setup, teardown),
		cmocka_unit_test_setup_teardown(test_pick, setup, teardown),
		cmocka_unit_test_setup_teardown(test_pick_near, setup, teardown),
		cmocka_unit_test_setup_teardown(test_land, setup, teardown),
		cmocka_unit_test_setup_teardown(test_loops, setup, teardown),
		cmocka_unit_test_setup_teardown(test_threads, setup, teardown),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
