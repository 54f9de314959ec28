/*
 * api_act.h: an admin action on an agent's session (approve, verify,
 * revoke, rotate-key: api.c), run on the loop that holds the session
 * (docs/0040 section 4: a session lives and dies on its tunnel's loop).
 *
 * The asking loop fills a struct api_act, a copy of what the session is
 * told and of the agent directory's entry it saw (agent id, loop,
 * generation), never a session pointer; api_act_run carries it to the
 * entry's loop by loop_call, which finds the session there by agent id and
 * generation (session_here) and tells it, then carries it back: back runs
 * on the asking loop with act->told saying whether a session was told.  A
 * session gone meanwhile (closed, or replaced by a newer tunnel) is told
 * nothing, as when it is not held at all: the agent learns the change at
 * its next handshake.  The same holds when the session's loop has stopped.
 *
 * Cost: two loop_calls (two mallocs, two locks, at most two eventfd
 * writes) per action on a held agent; the act itself ~3 KiB while out.
 */
#ifndef TETHER_API_ACT_H
#define TETHER_API_ACT_H

#include "agentdir.h"
#include "store.h"

struct gateway;
struct loop;

enum api_act_kind {
	API_ACT_APPROVE,     /* approved (and a VERIFY followed: verifying) */
	API_ACT_VERIFY,      /* its verification was stored */
	API_ACT_REVOKE,      /* revoked: the tunnel closes */
	API_ACT_ROTATE_KEY,  /* a key rotation was requested */
};

struct api_act {
	/* in: filled by the asking loop */
	enum api_act_kind kind;
	struct agentdir_entry at;      /* the tunnel seen: id, loop, generation */
	int verifying;                 /* approve: a VERIFY transition followed, */
	int verified;                  /* ... and was stored (a is its record) */
	struct store_agent approved;   /* approve: the record before the VERIFY */
	struct store_agent a;          /* the record as the store part left it */
	/* out: set on the session's loop */
	int told;                      /* a session was found there and told */
	/* the asking side's, never touched on the session's loop */
	struct gateway *gw;
	struct loop *home;             /* where back runs; NULL: off any loop */
	int orphan;                    /* home stopped: back only frees */
	void (*back)(struct api_act *act);
	void *ctx;
};

/*
 * Tells act->at's session on its loop (gw->loops[act->at.at.loop]) what
 * act says, then runs back(act) on the calling loop, from its inbox (a
 * later pass, never inside this call); back owns act then.  If the
 * calling loop stopped meanwhile (shutdown), back runs elsewhere with
 * act->orphan set: it must only free what it owns.  Off any loop, or
 * without gw->loops (unit tests with one thread), both run inline, back
 * inside this call.
 */
void api_act_run(struct gateway *gw, struct api_act *act,
    void (*back)(struct api_act *act), void *ctx);

/*
 * The session part alone, on the calling loop: finds act->at's session
 * here (session_here) and tells it; sets act->told.  api_act_run's far
 * side; for tests.
 */
void api_act_here(struct gateway *gw, struct api_act *act);

#endif
