/*
 * answer_there.c: an answer made on another loop and sent from the one
 * that asked (see answer_there.h).
 */
#include "answer_there.h"

#include <stdlib.h>

#include "gateway.h"
#include "loop.h"
#include "route.h"
#include "server.h"

/* One answer on its way: made on `to`, sent from home. */
struct there {
	struct gateway *gw;
	struct reply *t;                 /* home's: touched on home only */
	struct loop *home;
	answer_there_fn *make;
	void (*free_arg)(void *);
	void *arg;
	struct route_response r;         /* made on `to` */
};

static void
there_send(void *p)
{
	struct there *x = p;

	reply_send(x->t, &x->r);
	x->free_arg(x->arg);
	free(x);
}

/* Home stopped first: the answer is dropped. */
static void
there_orphan(void *p)
{
	struct there *x = p;

	answer_there_orphan(x->t);
	free(x->r.body);
	x->free_arg(x->arg);
	free(x);
}

static void
there_make(void *p)
{
	struct there *x = p;

	x->make(x->gw, x->arg, &x->r);
	(void)loop_call(x->home, there_send, x, there_orphan);
}

/* `to` stopped (shutdown): nothing made there. */
static void
there_dropped(void *p)
{
	struct there *x = p;

	route_respond_error(&x->r, 503, "the gateway is stopping");
	(void)loop_call(x->home, there_send, x, there_orphan);
}

/* Whether loop `to` is this thread's, or there are no loops to cross. */
static int
here(struct gateway *gw, unsigned to)
{
	struct loop *self = loop_self();

	return self == NULL || gw->loops == NULL || to >= gw->nloops ||
	    self == &gw->loops[to];
}

void
answer_there_orphan(struct reply *t)
{
	struct route_response none = { 0 };

	if (t != NULL && reply_client_gone(t))
		reply_send(t, &none);
}

void
answer_there_ticket(struct gateway *gw, struct reply *t, unsigned to,
    answer_there_fn *make, void (*free_arg)(void *arg), void *arg)
{
	struct there *x;

	if (here(gw, to) || (x = calloc(1, sizeof(*x))) == NULL) {
		struct route_response r = { 0 };

		if (here(gw, to))
			make(gw, arg, &r);
		else
			route_respond_error(&r, 500, "out of memory");
		reply_send(t, &r);
		free_arg(arg);
		return;
	}
	x->gw = gw;
	x->t = t;
	x->home = loop_self();
	x->make = make;
	x->free_arg = free_arg;
	x->arg = arg;
	(void)loop_call(&gw->loops[to], there_make, x, there_dropped);
}

void
answer_there(struct gateway *gw, const struct route_request *req,
    struct route_response *resp, unsigned to, answer_there_fn *make,
    void (*free_arg)(void *arg), void *arg)
{
	struct reply *t;

	if (here(gw, to)) {
		make(gw, arg, resp);
		free_arg(arg);
		return;
	}
	if ((t = reply_later(req)) == NULL) {
		route_respond_error(resp, 500, "out of memory");
		free_arg(arg);
		return;
	}
	answer_there_ticket(gw, t, to, make, free_arg, arg);
}
