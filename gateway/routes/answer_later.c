/*
 * answer_later.c: a request route's store part on the store thread, its
 * answer part on the loop (see answer_later.h).
 */
#include "answer_later.h"

#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include <openssl/crypto.h>

#include "gateway.h"
#include "route.h"
#include "server.h"
#include "store_worker.h"

/* One request out: its ticket and the route's parts.  ~64 bytes. */
struct answer_later_job {
	struct gateway *gw;
	struct reply *reply;
	char *authorization;       /* the request's, wiped after the store part */
	answer_later_store_fn *store;
	answer_later_answer_fn *answer;      /* or: */
	answer_later_hold_fn *hold;          /* takes the ticket and arg */
	void (*free_arg)(void *);
	void *arg;
};

static void
job_work(struct store *st, void *p)
{
	struct answer_later_job *j = p;

	j->store(st, j->authorization, j->arg);
	OPENSSL_cleanse(j->authorization, strlen(j->authorization));
}

static void
job_done(void *p)
{
	struct answer_later_job *j = p;
	struct route_response r = { 0 };

	j->gw->answers_later--;
	if (j->hold != NULL) {
		j->hold(j->gw, j->arg, j->reply);
	} else {
		j->answer(j->gw, j->arg, &r);
		reply_send(j->reply, &r);
		j->free_arg(j->arg);
	}
	free(j->authorization);
	free(j);
}

/* answer_later and answer_later_held: one of answer and hold is set. */
static void
later(struct gateway *gw, const struct route_request *req,
    struct route_response *resp, answer_later_store_fn *store,
    answer_later_answer_fn *answer, answer_later_hold_fn *hold,
    void (*free_arg)(void *arg), void *arg)
{
	struct answer_later_job *j;

	/* Taken before it is known to fit, so that two loops at once cannot
	 * both pass the cap; given back when it does not fit or is refused. */
	if (atomic_fetch_add(&gw->answers_later, 1) >= ANSWER_LATER_MAX) {
		gw->answers_later--;
		route_respond_error(resp, 503, "the store is busy: %d requests wait "
		    "for it already; retry shortly", ANSWER_LATER_MAX);
		free_arg(arg);
		return;
	}
	if ((j = calloc(1, sizeof(*j))) == NULL ||
	    (j->authorization = strdup(req->authorization)) == NULL ||
	    (j->reply = reply_later(req)) == NULL) {
		if (j != NULL)
			free(j->authorization);
		free(j);
		gw->answers_later--;
		route_respond_error(resp, 500, "out of memory");
		free_arg(arg);
		return;
	}
	j->gw = gw;
	j->store = store;
	j->answer = answer;
	j->hold = hold;
	j->free_arg = free_arg;
	j->arg = arg;
	if (store_worker_submit(gw->storew, job_work, job_done, j) != 0) {
		struct route_response busy = { 0 };

		route_respond_error(&busy, 503, "the store's queue is full: "
		    "retry shortly");
		reply_send(j->reply, &busy);
		gw->answers_later--;
		free_arg(arg);
		OPENSSL_cleanse(j->authorization, strlen(j->authorization));
		free(j->authorization);
		free(j);
		return;
	}
}

void
answer_later(struct gateway *gw, const struct route_request *req,
    struct route_response *resp, answer_later_store_fn *store,
    answer_later_answer_fn *answer, void (*free_arg)(void *arg), void *arg)
{
	later(gw, req, resp, store, answer, NULL, free_arg, arg);
}

void
answer_later_held(struct gateway *gw, const struct route_request *req,
    struct route_response *resp, answer_later_store_fn *store,
    answer_later_hold_fn *hold, void (*free_arg)(void *arg), void *arg)
{
	later(gw, req, resp, store, NULL, hold, free_arg, arg);
}

size_t
answer_later_pending(const struct gateway *gw)
{
	return gw->answers_later;
}
