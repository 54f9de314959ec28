/*
 * agent_state.h: the agent lifecycle as states and transitions.
 *
 *   pending-approval --approve--> enroll --verify--> verifying --ok--> active
 *                                   ^                    |               |
 *                                   +------fail----------+               |
 *                                   verifying <-------verify-------------+
 *   any state but revoked --revoke--> revoked (final)
 *
 * agent_state_next is the only place a transition is decided; the store
 * persists the result before the gateway acts on it.
 */
#ifndef TETHER_AGENT_STATE_H
#define TETHER_AGENT_STATE_H

#include <stddef.h>

enum agent_state {
	AGENT_PENDING_APPROVAL, /* registered with a manual-approval token */
	AGENT_ENROLL,           /* registered, not (or no longer) verified */
	AGENT_VERIFYING,        /* a verification round trip is under way */
	AGENT_ACTIVE,           /* verified: may carry streams */
	AGENT_REVOKED,          /* final: credential refused, tunnel closed */
	AGENT_STATE_ENTRIES     /* must be last */
};

enum agent_event {
	AGENT_EV_APPROVE,      /* operator approved: pending-approval -> enroll */
	AGENT_EV_VERIFY,       /* start verification: enroll|active -> verifying */
	AGENT_EV_VERIFY_OK,    /* verifying -> active */
	AGENT_EV_VERIFY_FAIL,  /* verifying -> enroll, with last_error */
	AGENT_EV_REVOKE,       /* any but revoked -> revoked */
	AGENT_EV_ENTRIES       /* must be last */
};

/* "pending-approval", "enroll", ... as in docs/interface.md. */
const char *agent_state_name(enum agent_state s);
const char *agent_event_name(enum agent_event ev);
/* Returns 0 and *out, or -1 for an unknown name. */
int agent_state_parse(const char *name, enum agent_state *out);

/*
 * Decides the transition.  Returns 0 with *next, or -1 with a reason in err
 * ("cannot approve: agent is active") when ev is not allowed in cur.
 */
int agent_state_next(enum agent_state cur, enum agent_event ev,
    enum agent_state *next, char *err, size_t errlen);

#endif
