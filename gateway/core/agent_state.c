/*
 * agent_state.c: the agent lifecycle as data.
 *
 * Every allowed move is one cell of the transition table below; a cell
 * holding REFUSE is a move that does not exist.  Keeping the whole lifecycle
 * in one table means the rules can be read (and tested) at a glance, and
 * agent_state_next stays the single place a transition is decided.
 */
#include <stdio.h>
#include <string.h>

#include "agent_state.h"

#define REFUSE (-1)

/* Indexed [current state][event]: the next state, or REFUSE. */
static const int transitions[AGENT_STATE_ENTRIES][AGENT_EV_ENTRIES] = {
	[AGENT_PENDING_APPROVAL] = {
		[AGENT_EV_APPROVE]     = AGENT_ENROLL,
		[AGENT_EV_VERIFY]      = REFUSE,
		[AGENT_EV_VERIFY_OK]   = REFUSE,
		[AGENT_EV_VERIFY_FAIL] = REFUSE,
		[AGENT_EV_REVOKE]      = AGENT_REVOKED,
	},
	[AGENT_ENROLL] = {
		[AGENT_EV_APPROVE]     = REFUSE,
		[AGENT_EV_VERIFY]      = AGENT_VERIFYING,
		[AGENT_EV_VERIFY_OK]   = REFUSE,
		[AGENT_EV_VERIFY_FAIL] = REFUSE,
		[AGENT_EV_REVOKE]      = AGENT_REVOKED,
	},
	[AGENT_VERIFYING] = {
		[AGENT_EV_APPROVE]     = REFUSE,
		[AGENT_EV_VERIFY]      = REFUSE,
		[AGENT_EV_VERIFY_OK]   = AGENT_ACTIVE,
		[AGENT_EV_VERIFY_FAIL] = AGENT_ENROLL,
		[AGENT_EV_REVOKE]      = AGENT_REVOKED,
	},
	[AGENT_ACTIVE] = {
		[AGENT_EV_APPROVE]     = REFUSE,
		[AGENT_EV_VERIFY]      = AGENT_VERIFYING,
		[AGENT_EV_VERIFY_OK]   = REFUSE,
		[AGENT_EV_VERIFY_FAIL] = REFUSE,
		[AGENT_EV_REVOKE]      = AGENT_REVOKED,
	},
	/* Final: nothing leaves revoked, not even a second revoke. */
	[AGENT_REVOKED] = {
		[AGENT_EV_APPROVE]     = REFUSE,
		[AGENT_EV_VERIFY]      = REFUSE,
		[AGENT_EV_VERIFY_OK]   = REFUSE,
		[AGENT_EV_VERIFY_FAIL] = REFUSE,
		[AGENT_EV_REVOKE]      = REFUSE,
	},
};

/* Wire and CLI names, as in docs/interface.md. */
static const char *const state_names[AGENT_STATE_ENTRIES] = {
	[AGENT_PENDING_APPROVAL] = "pending-approval",
	[AGENT_ENROLL]           = "enroll",
	[AGENT_VERIFYING]        = "verifying",
	[AGENT_ACTIVE]           = "active",
	[AGENT_REVOKED]          = "revoked",
};

/* How a refusal describes the agent: "cannot verify: agent awaits approval". */
static const char *const state_phrases[AGENT_STATE_ENTRIES] = {
	[AGENT_PENDING_APPROVAL] = "awaits approval",
	[AGENT_ENROLL]           = "is enrolling",
	[AGENT_VERIFYING]        = "is verifying",
	[AGENT_ACTIVE]           = "is active",
	[AGENT_REVOKED]          = "is revoked",
};

static const char *const event_names[AGENT_EV_ENTRIES] = {
	[AGENT_EV_APPROVE]     = "approve",
	[AGENT_EV_VERIFY]      = "verify",
	[AGENT_EV_VERIFY_OK]   = "verify-ok",
	[AGENT_EV_VERIFY_FAIL] = "verify-fail",
	[AGENT_EV_REVOKE]      = "revoke",
};

/* The verb a refusal uses: "cannot complete verification: ...". */
static const char *const event_verbs[AGENT_EV_ENTRIES] = {
	[AGENT_EV_APPROVE]     = "approve",
	[AGENT_EV_VERIFY]      = "verify",
	[AGENT_EV_VERIFY_OK]   = "complete verification",
	[AGENT_EV_VERIFY_FAIL] = "fail verification",
	[AGENT_EV_REVOKE]      = "revoke",
};

/* Casts through unsigned so that a negative enum value is also rejected. */
static int
state_valid(enum agent_state s)
{
	return (unsigned)s < AGENT_STATE_ENTRIES;
}

static int
event_valid(enum agent_event ev)
{
	return (unsigned)ev < AGENT_EV_ENTRIES;
}

const char *
agent_state_name(enum agent_state s)
{
	return state_valid(s) ? state_names[s] : "unknown";
}

const char *
agent_event_name(enum agent_event ev)
{
	return event_valid(ev) ? event_names[ev] : "unknown";
}

int
agent_state_parse(const char *name, enum agent_state *out)
{
	int i;

	if (name == NULL)
		return -1;
	for (i = 0; i < AGENT_STATE_ENTRIES; i++) {
		if (strcmp(name, state_names[i]) == 0) {
			*out = (enum agent_state)i;
			return 0;
		}
	}
	return -1;
}

/* err may be NULL or empty when the caller only wants the verdict. */
static void
set_reason(char *err, size_t errlen, enum agent_state cur, enum agent_event ev)
{
	if (err == NULL || errlen == 0)
		return;
	if (!state_valid(cur))
		snprintf(err, errlen, "unknown agent state %d", (int)cur);
	else if (!event_valid(ev))
		snprintf(err, errlen, "unknown agent event %d", (int)ev);
	else if (cur == AGENT_REVOKED)
		/* Final, so the event does not matter. */
		snprintf(err, errlen, "agent is revoked");
	else
		snprintf(err, errlen, "cannot %s: agent %s", event_verbs[ev],
		    state_phrases[cur]);
}

int
agent_state_next(enum agent_state cur, enum agent_event ev,
    enum agent_state *next, char *err, size_t errlen)
{
	int to;

	if (!state_valid(cur) || !event_valid(ev)) {
		set_reason(err, errlen, cur, ev);
		return -1;
	}
	to = transitions[cur][ev];
	if (to == REFUSE) {
		set_reason(err, errlen, cur, ev);
		return -1;
	}
	*next = (enum agent_state)to;
	return 0;
}
