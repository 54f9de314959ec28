/*
 * api_act.c: an admin action carried to its session's loop and back (see
 * api_act.h).
 */
#include "api_act.h"

#include <stddef.h>

#include "gateway.h"
#include "log.h"
#include "loop.h"
#include "session.h"

void
api_act_here(struct gateway *gw, struct api_act *act)
{
	struct session *s = session_here(gw, &act->at);

	act->told = s != NULL;
	if (s == NULL)
		return;
	switch (act->kind) {
	case API_ACT_APPROVE:
		if (act->verifying) {
			session_agent_changed(s, &act->approved);
			if (act->verified)
				session_verifying(s, &act->a);
		}
		break;
	case API_ACT_VERIFY:
		session_verifying(s, &act->a);
		break;
	case API_ACT_REVOKE:
		session_kick(s, "revoked", "agent revoked by an operator");
		break;
	case API_ACT_ROTATE_KEY:
		session_rotate_key(s, "an operator asked (tetherctl agent rotate-key)");
		break;
	}
}

/* Back on the asking loop. */
static void
act_back(void *arg)
{
	struct api_act *act = arg;

	act->back(act);
}

/* The asking loop stopped before the act came back: nobody waits for the
 * answer (its connection goes with that loop); back runs with orphan set,
 * which frees what it owns and answers nothing.  On the session's loop's
 * thread, or the stopping one. */
static void
act_orphan(void *arg)
{
	struct api_act *act = arg;

	act->orphan = 1;
	act->back(act);
}

/* Sends act home; if home stopped, act_orphan. */
static void
act_return(struct api_act *act)
{
	(void)loop_call(act->home, act_back, act, act_orphan);
}

/* On the session's loop. */
static void
act_there(void *arg)
{
	struct api_act *act = arg;

	api_act_here(act->gw, act);
	act_return(act);
}

/* The session's loop stopped: told nothing, sent home as such (on the
 * caller's thread at once, or the stopping loop's). */
static void
act_dropped(void *arg)
{
	struct api_act *act = arg;

	act->told = 0;
	act_return(act);
}

void
api_act_run(struct gateway *gw, struct api_act *act,
    void (*back)(struct api_act *act), void *ctx)
{
	act->gw = gw;
	act->back = back;
	act->ctx = ctx;
	act->told = 0;
	act->orphan = 0;
	act->home = loop_self();
	if (act->home == NULL || gw->loops == NULL ||
	    act->at.at.loop >= gw->nloops) {
		/* One thread (unit tests): session_here says whether the
		 * session is on it. */
		api_act_here(gw, act);
		back(act);
		return;
	}
	(void)loop_call(&gw->loops[act->at.at.loop], act_there, act, act_dropped);
}
