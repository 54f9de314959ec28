/*
 * test_agent_state.c: the agent state machine, every (state, event) pair.
 *
 * The expected table is written out again here on purpose, independently
 * of agent_state.c, so that a changed cell there shows up as a failure.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <string.h>

#include "agent_state.h"

#define NO (-1)

static const int expected[AGENT_STATE_ENTRIES][AGENT_EV_ENTRIES] = {
	/*                        approve       verify           verify-ok     verify-fail   revoke */
	[AGENT_PENDING_APPROVAL] = { AGENT_ENROLL, NO,              NO,           NO,           AGENT_REVOKED },
	[AGENT_ENROLL]           = { NO,           AGENT_VERIFYING, NO,           NO,           AGENT_REVOKED },
	[AGENT_VERIFYING]        = { NO,           NO,              AGENT_ACTIVE, AGENT_ENROLL, AGENT_REVOKED },
	[AGENT_ACTIVE]           = { NO,           AGENT_VERIFYING, NO,           NO,           AGENT_REVOKED },
	[AGENT_REVOKED]          = { NO,           NO,              NO,           NO,           NO },
};

static void
test_full_table(void **state)
{
	enum agent_state next;
	char err[128];
	int s, ev, rc;

	(void)state;
	for (s = 0; s < AGENT_STATE_ENTRIES; s++) {
		for (ev = 0; ev < AGENT_EV_ENTRIES; ev++) {
			next = (enum agent_state)99;
			err[0] = '\0';
			rc = agent_state_next((enum agent_state)s,
			    (enum agent_event)ev, &next, err, sizeof(err));
			if (expected[s][ev] == NO) {
				assert_int_equal(rc, -1);
				/* A refusal always says why, and leaves
				 * *next alone. */
				assert_true(strlen(err) > 0);
				assert_int_equal(next, 99);
			} else {
				assert_int_equal(rc, 0);
				assert_int_equal(next, expected[s][ev]);
			}
		}
	}
}

static void
expect_reason(enum agent_state s, enum agent_event ev, const char *want)
{
	enum agent_state next;
	char err[128];

	assert_int_equal(agent_state_next(s, ev, &next, err, sizeof(err)), -1);
	assert_string_equal(err, want);
}

static void
test_reasons(void **state)
{
	(void)state;
	expect_reason(AGENT_ACTIVE, AGENT_EV_APPROVE,
	    "cannot approve: agent is active");
	expect_reason(AGENT_PENDING_APPROVAL, AGENT_EV_VERIFY,
	    "cannot verify: agent awaits approval");
	expect_reason(AGENT_ENROLL, AGENT_EV_VERIFY_OK,
	    "cannot complete verification: agent is enrolling");
	expect_reason(AGENT_ACTIVE, AGENT_EV_VERIFY_FAIL,
	    "cannot fail verification: agent is active");
	expect_reason(AGENT_VERIFYING, AGENT_EV_VERIFY,
	    "cannot verify: agent is verifying");
	expect_reason(AGENT_REVOKED, AGENT_EV_APPROVE, "agent is revoked");
	expect_reason(AGENT_REVOKED, AGENT_EV_REVOKE, "agent is revoked");
}

static void
test_out_of_range(void **state)
{
	enum agent_state next;
	char err[64];

	(void)state;
	assert_int_equal(agent_state_next(AGENT_STATE_ENTRIES, AGENT_EV_REVOKE,
	    &next, err, sizeof(err)), -1);
	assert_non_null(strstr(err, "unknown agent state"));
	assert_int_equal(agent_state_next(AGENT_ENROLL, AGENT_EV_ENTRIES,
	    &next, err, sizeof(err)), -1);
	assert_non_null(strstr(err, "unknown agent event"));
	assert_int_equal(agent_state_next((enum agent_state)-1, AGENT_EV_VERIFY,
	    &next, err, sizeof(err)), -1);
	/* A caller that only wants the verdict may pass no buffer. */
	assert_int_equal(agent_state_next(AGENT_REVOKED, AGENT_EV_VERIFY,
	    &next, NULL, 0), -1);
	assert_int_equal(agent_state_next(AGENT_ENROLL, AGENT_EV_VERIFY,
	    &next, NULL, 0), 0);
	assert_int_equal(next, AGENT_VERIFYING);
}

static void
test_names(void **state)
{
	static const char *const want[AGENT_STATE_ENTRIES] = {
		"pending-approval", "enroll", "verifying", "active", "revoked",
	};
	enum agent_state parsed;
	int s;

	(void)state;
	for (s = 0; s < AGENT_STATE_ENTRIES; s++) {
		assert_string_equal(agent_state_name((enum agent_state)s), want[s]);
		assert_int_equal(agent_state_parse(want[s], &parsed), 0);
		assert_int_equal(parsed, s);
	}
	assert_string_equal(agent_state_name(AGENT_STATE_ENTRIES), "unknown");

	assert_string_equal(agent_event_name(AGENT_EV_APPROVE), "approve");
	assert_string_equal(agent_event_name(AGENT_EV_VERIFY), "verify");
	assert_string_equal(agent_event_name(AGENT_EV_VERIFY_OK), "verify-ok");
	assert_string_equal(agent_event_name(AGENT_EV_VERIFY_FAIL), "verify-fail");
	assert_string_equal(agent_event_name(AGENT_EV_REVOKE), "revoke");
	assert_string_equal(agent_event_name(AGENT_EV_ENTRIES), "unknown");
}

static void
test_unknown_names(void **state)
{
	static const char *const bad[] = {
		"", "Active", "ACTIVE", "pending", "pending_approval",
		"active ", " active", "unknown", "revoke",
	};
	enum agent_state parsed = AGENT_ACTIVE;
	size_t i;

	(void)state;
	for (i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		assert_int_equal(agent_state_parse(bad[i], &parsed), -1);
		assert_int_equal(parsed, AGENT_ACTIVE);
	}
	assert_int_equal(agent_state_parse(NULL, &parsed), -1);
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_full_table),
		cmocka_unit_test(test_reasons),
		cmocka_unit_test(test_out_of_range),
		cmocka_unit_test(test_names),
		cmocka_unit_test(test_unknown_names),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
