/*
 * test_hub.c: the hub of connected agents (gateway/agents/hub.c) through
 * its seam, struct hub_ops, with sessions of the test's own making: an
 * agent added is found by id and counted in its cluster; a reconnecting
 * agent's newer session replaces the older one, which is handed back and
 * can no longer remove the entry; removal keeps the other entries of its
 * chains; hub_pick asks the ops about the sessions of the cluster only,
 * skips inactive ones (but says they are connected), filters by node and
 * rotates among several active agents.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "hub.h"

/* The hub sees sessions only through hub_ops: the test's own stand-in. */
struct session {
	const char *node;
	int active;
	int node_calls;        /* how often the hub asked for its node */
	int active_calls;      /* ... and whether it is active */
};

static const char *
fake_node(const struct session *s)
{
	((struct session *)s)->node_calls++;
	return s->node;
}

static int
fake_is_active(const struct session *s)
{
	((struct session *)s)->active_calls++;
	return s->active;
}

static const struct hub_ops ops = {
	.node = fake_node,
	.is_active = fake_is_active,
};

static int
setup(void **state)
{
	*state = hub_new(&ops);
	return *state == NULL ? -1 : 0;
}

static int
teardown(void **state)
{
	hub_free(*state);
	return 0;
}

static void
test_add_find_count(void **state)
{
	struct hub *h = *state;
	struct session a = { .node = "n1" }, b = { .node = "n2" }, c = { .node = "n1" };
	int64_t before = (int64_t)time(NULL);

	assert_int_equal(hub_count(h), 0);
	assert_null(hub_add(h, "a-1", "c-one", &a));
	assert_null(hub_add(h, "a-2", "c-one", &b));
	assert_null(hub_add(h, "a-3", "c-two", &c));
	assert_int_equal(hub_count(h), 3);
	assert_int_equal(hub_count_cluster(h, "c-one"), 2);
	assert_int_equal(hub_count_cluster(h, "c-two"), 1);
	assert_int_equal(hub_count_cluster(h, "c-none"), 0);
	assert_ptr_equal(hub_find(h, "a-1"), &a);
	assert_ptr_equal(hub_find(h, "a-2"), &b);
	assert_ptr_equal(hub_find(h, "a-3"), &c);
	assert_null(hub_find(h, "a-4"));
	assert_in_range(hub_connected_since(h, "a-2"), before, (int64_t)time(NULL));
	assert_int_equal(hub_connected_since(h, "a-4"), 0);
	/* Adding and finding ask nothing of the sessions. */
	assert_int_equal(a.node_calls + a.active_calls + b.node_calls +
	    b.active_calls + c.node_calls + c.active_calls, 0);
	hub_remove(h, "a-1", &a);
	hub_remove(h, "a-2", &b);
	hub_remove(h, "a-3", &c);
	assert_int_equal(hub_count(h), 0);
}

static void
test_replace(void **state)
{
	struct hub *h = *state;
	struct session old = { .node = "n1", .active = 1 };
	struct session newer = { .node = "n1", .active = 1 };

	assert_null(hub_add(h, "a-1", "c-one", &old));
	/* The agent reconnects: its older session is handed back. */
	assert_ptr_equal(hub_add(h, "a-1", "c-one", &newer), &old);
	assert_ptr_equal(hub_find(h, "a-1"), &newer);
	assert_int_equal(hub_count(h), 1);
	assert_int_equal(hub_count_cluster(h, "c-one"), 1);
	/* The replaced session closing later does not remove its successor. */
	hub_remove(h, "a-1", &old);
	assert_ptr_equal(hub_find(h, "a-1"), &newer);
	assert_int_equal(hub_count(h), 1);
	assert_ptr_equal(hub_pick(h, "c-one", NULL, NULL), &newer);
	hub_remove(h, "a-1", &newer);
	assert_null(hub_find(h, "a-1"));
	assert_int_equal(hub_count(h), 0);
	assert_int_equal(hub_count_cluster(h, "c-one"), 0);
	assert_null(hub_pick(h, "c-one", NULL, NULL));
}

/* Many agents share chains (1024 buckets): removing entries in the middle
 * of a chain keeps every other entry findable, counted and pickable. */
static void
test_remove_keeps_chains(void **state)
{
	enum { N = 3000 };
	struct hub *h = *state;
	struct session *s = calloc(N, sizeof(*s));
	char id[32];
	size_t left = N;

	assert_non_null(s);
	for (int i = 0; i < N; i++) {
		s[i].node = "n";
		snprintf(id, sizeof(id), "a-%d", i);
		assert_null(hub_add(h, id, i % 2 ? "c-odd" : "c-even", &s[i]));
	}
	assert_int_equal(hub_count(h), N);
	assert_int_equal(hub_count_cluster(h, "c-odd"), N / 2);
	for (int i = 0; i < N; i += 3) {
		snprintf(id, sizeof(id), "a-%d", i);
		hub_remove(h, id, &s[i]);
		left--;
	}
	assert_int_equal(hub_count(h), left);
	for (int i = 0; i < N; i++) {
		snprintf(id, sizeof(id), "a-%d", i);
		if (i % 3 == 0)
			assert_null(hub_find(h, id));
		else
			assert_ptr_equal(hub_find(h, id), &s[i]);
	}
	/* i odd and not a multiple of 3: i = 1, 5 (mod 6). */
	assert_int_equal(hub_count_cluster(h, "c-odd"), N / 3);
	assert_int_equal(hub_count_cluster(h, "c-even"), N / 3);
	for (int i = 0; i < N; i++) {
		snprintf(id, sizeof(id), "a-%d", i);
		hub_remove(h, id, &s[i]);
	}
	assert_int_equal(hub_count(h), 0);
	free(s);
}

static void
test_pick(void **state)
{
	struct hub *h = *state;
	struct session idle = { .node = "n0", .active = 0 };
	struct session x = { .node = "n1", .active = 1 };
	struct session y = { .node = "n2", .active = 1 };
	struct session z = { .node = "n3", .active = 1 };
	struct session other = { .node = "n1", .active = 1 };
	int connected = -1, seen_x = 0, seen_y = 0;

	/* Nothing of the cluster: NULL, not connected. */
	assert_null(hub_pick(h, "c-one", NULL, &connected));
	assert_int_equal(connected, 0);
	/* Only an inactive agent: NULL, but connected. */
	assert_null(hub_add(h, "a-0", "c-one", &idle));
	connected = -1;
	assert_null(hub_pick(h, "c-one", NULL, &connected));
	assert_int_equal(connected, 1);
	assert_true(idle.active_calls > 0);
	connected = -1;
	assert_null(hub_pick(h, "c-one", "n0", &connected));
	assert_int_equal(connected, 1);
	assert_true(idle.node_calls > 0);
	/* A node nobody has: not connected. */
	connected = -1;
	assert_null(hub_pick(h, "c-one", "ghost", &connected));
	assert_int_equal(connected, 0);

	assert_null(hub_add(h, "a-1", "c-one", &x));
	assert_null(hub_add(h, "a-2", "c-one", &y));
	assert_null(hub_add(h, "a-9", "c-two", &other));
	/* By node: that one only, whatever the rotation. */
	for (int i = 0; i < 4; i++) {
		connected = 0;
		assert_ptr_equal(hub_pick(h, "c-one", "n2", &connected), &y);
		assert_int_equal(connected, 1);
	}
	/* Another cluster's agent of the same node name is never asked. */
	assert_int_equal(other.node_calls + other.active_calls, 0);
	/* Several active: each gets a turn, the inactive one none. */
	for (int i = 0; i < 6; i++) {
		struct session *p = hub_pick(h, "c-one", NULL, NULL);
		assert_true(p == &x || p == &y);
		seen_x += p == &x;
		seen_y += p == &y;
	}
	assert_int_equal(seen_x, 3);
	assert_int_equal(seen_y, 3);
	/* Three active: three turns visit all three. */
	assert_null(hub_add(h, "a-3", "c-one", &z));
	{
		struct session *a = hub_pick(h, "c-one", NULL, NULL);
		struct session *b = hub_pick(h, "c-one", NULL, NULL);
		struct session *c = hub_pick(h, "c-one", NULL, NULL);
		assert_true(a != b && b != c && a != c);
		assert_true(a != &idle && b != &idle && c != &idle);
	}
	/* An agent that stops being active is skipped at once. */
	x.active = 0;
	y.active = 0;
	for (int i = 0; i < 3; i++)
		assert_ptr_equal(hub_pick(h, "c-one", NULL, NULL), &z);
	assert_ptr_equal(hub_pick(h, "c-two", "n1", NULL), &other);
	hub_remove(h, "a-0", &idle);
	hub_remove(h, "a-1", &x);
	hub_remove(h, "a-2", &y);
	hub_remove(h, "a-3", &z);
	hub_remove(h, "a-9", &other);
}

static void
count_visit(struct session *s, void *arg)
{
	int *visits = arg;

	s->active++;           /* marks it: each once */
	(*visits)++;
}

static void
test_foreach(void **state)
{
	struct hub *h = *state;
	struct session a = { 0 }, b = { 0 }, c = { 0 };
	int visits = 0;

	hub_add(h, "a-1", "c-one", &a);
	hub_add(h, "a-2", "c-two", &b);
	hub_add(h, "a-3", "c-one", &c);
	hub_foreach(h, count_visit, &visits);
	assert_int_equal(visits, 3);
	assert_int_equal(a.active, 1);
	assert_int_equal(b.active, 1);
	assert_int_equal(c.active, 1);
	hub_remove(h, "a-1", &a);
	hub_remove(h, "a-2", &b);
	hub_remove(h, "a-3", &c);
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_add_find_count, setup, teardown),
		cmocka_unit_test_setup_teardown(test_replace, setup, teardown),
		cmocka_unit_test_setup_teardown(test_remove_keeps_chains, setup, teardown),
		cmocka_unit_test_setup_teardown(test_pick, setup, teardown),
		cmocka_unit_test_setup_teardown(test_foreach, setup, teardown),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
