/*
 * test_api_act.c: an admin action on a session carried to the session's
 * loop and back (gateway/routes/api_act.h, docs/0040).  A real session
 * (fake_tunnel.h) lives on loop 0, the test's thread; the action is asked
 * from loop 1 (its own thread), as an admin request served there would.
 *
 * - verify from loop 1: the session on loop 0 sends STATE (verifying) and
 *   VERIFY, and the answer part runs back on loop 1 saying it was told;
 * - a stale generation (the tunnel seen was replaced): nothing is sent,
 *   told 0, as for an agent that is not held;
 * - revoke from loop 1: the session sends ERROR "revoked" and closes;
 * - the session's loop stopped: told 0, the answer part still runs, on
 *   the asking loop, and the act is freed there (ASan).
 * Called on loop 1 without the hop, session_here finds nothing there (the
 * session is loop 0's): the first and third cases fail.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include <openssl/evp.h>

#include "agentdir.h"
#include "api_act.h"
#include "fake_tunnel.h"
#include "frame.h"
#include "gateway.h"
#include "loop.h"
#include "session.h"

static struct ft *f;
static struct loop *loops;

/* What the answer part saw; written by whichever loop runs it, read by
 * the test's thread once `ran` is set (seq_cst: the fields before it are
 * seen). */
static struct {
	int told;
	int orphan;
	unsigned loop;            /* the loop back ran on; 99: none */
	pthread_t thread;
	atomic_int ran;
} seen;

static void
nothing(void *arg)
{
	(void)arg;
}

static void
back(struct api_act *act)
{
	const struct loop *self = loop_self();

	seen.told = act->told;
	seen.orphan = act->orphan;
	seen.loop = self != NULL ? self->index : 99;
	seen.thread = pthread_self();
	free(act);
	atomic_store(&seen.ran, 1);
	/* Wakes loop 0, which the test runs until this ran. */
	(void)loop_call(&loops[0], nothing, NULL, NULL);
}

/* On the asking loop: the action, as api.c starts it. */
static void
ask(void *arg)
{
	api_act_run(&f->gw, arg, back, NULL);
}

/* An act of kind on agent_id's tunnel as the directory has it now. */
static struct api_act *
act_new(enum api_act_kind kind, const char *agent_id)
{
	struct api_act *act = calloc(1, sizeof(*act));

	assert_non_null(act);
	act->kind = kind;
	assert_true(agentdir_find(f->gw.agents, agent_id, &act->at));
	return act;
}

/* Asks act from loop `from` and runs loop 0 until the answer part ran. */
static void
ask_from(unsigned from, struct api_act *act)
{
	atomic_store(&seen.ran, 0);
	seen.loop = 99;
	assert_int_equal(loop_call(&loops[from], ask, act, NULL), 0);
	while (!atomic_load(&seen.ran))
		ft_loop_once(f);
}

/* An active agent's tunnel on loop 0; *a its record. */
static struct ft_tun *
connect_agent(const char *node, struct store_agent *a)
{
	struct ft_tun *t;
	EVP_PKEY *key;

	ft_make_agent(f, node, &key, a);
	ft_make_active(f, a);
	t = ft_agent_connect(f, a, key);
	EVP_PKEY_free(key);
	assert_true(session_is_active(t->s));
	return t;
}

static void
test_across_loops(void **state)
{
	struct store_agent a1, a2;
	const char *id1 = a1.id, *id2 = a2.id;
	struct ft_tun *t1, *t2;
	struct api_act *act;
	char err[200];
	int sent;

	(void)state;
	f = ft_new(16);
	t1 = connect_agent("node-1", &a1);
	t2 = connect_agent("node-2", &a2);
	loops = loops_new(f->gw.base, 2, &f->gw, err, sizeof(err));
	assert_non_null(loops);
	f->gw.loops = loops;
	f->gw.nloops = 2;

	/* verify, asked on loop 1, told on loop 0, answered on loop 1. */
	sent = t1->nsent;
	act = act_new(API_ACT_VERIFY, id1);
	act->a = a1;
	act->a.state = AGENT_VERIFYING;
	ask_from(1, act);
	assert_int_equal(seen.told, 1);
	assert_int_equal(seen.orphan, 0);
	assert_int_equal(seen.loop, 1);
	assert_false(pthread_equal(seen.thread, pthread_self()));
	assert_int_equal(t1->nsent, sent + 2);
	assert_int_equal(t1->sent[sent].type, FRAME_STATE);
	assert_int_equal(ft_last(t1)->type, FRAME_VERIFY);

	/* The tunnel seen was replaced meanwhile: nothing is told. */
	sent = t2->nsent;
	act = act_new(API_ACT_REVOKE, id2);
	act->at.at.generation++;
	ask_from(1, act);
	assert_int_equal(seen.told, 0);
	assert_int_equal(seen.loop, 1);
	assert_int_equal(t2->nsent, sent);
	assert_int_equal(t2->closed, 0);

	/* revoke, asked on loop 1: the session kicks its agent. */
	ask_from(1, act_new(API_ACT_REVOKE, id2));
	assert_int_equal(seen.told, 1);
	assert_int_equal(seen.loop, 1);
	assert_int_equal(ft_last(t2)->type, FRAME_ERROR);
	assert_string_equal(ft_last(t2)->u.error.code, "revoked");
	assert_int_equal(t2->closed, 1);

	/* The session's loop stopped: told nothing, answered on the asking
	 * loop (here loop 0, asking about a tunnel placed on loop 1). */
	loop_stop(&loops[1]);
	act = act_new(API_ACT_ROTATE_KEY, id1);
	act->at.at.loop = 1;
	sent = t1->nsent;
	ask_from(0, act);
	assert_int_equal(seen.told, 0);
	assert_int_equal(seen.orphan, 0);
	assert_int_equal(seen.loop, 0);
	assert_int_equal(t1->nsent, sent);

	loops_stop(loops, 2);
	loops_free(loops, 2);
	f->gw.loops = NULL;
	f->gw.nloops = 0;
	ft_free(f);
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_across_loops),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
