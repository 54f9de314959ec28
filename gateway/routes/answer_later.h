/*
 * answer_later.h: a request route whose answer needs the store, without
 * the loop waiting for the database (docs/0022).  The route's work is cut
 * in two: a store part, run on the store thread (store_worker.h) with its
 * own connection, and an answer part, run on the loop once the store part
 * is done, which acts on what lives on the loop (the hub, sessions, the
 * cache of proven tokens) and writes the answer.  The answer goes out
 * through a reply ticket (server.h: "Replies later"): if the client left
 * meanwhile, the answer part still runs (what the store changed is acted
 * on) and its answer is dropped.
 *
 * Used by the admin API (api.c), the status page's data (ui.c) and
 * GET /metrics (metrics_route.c).
 *
 * Costs: one job node and one ticket per request while it is out; at most
 * ANSWER_LATER_MAX requests out at once per gateway (past it, or when the store
 * thread's queue is full, 503 with a reason): a client looping on the
 * admin API fills this cap, never the queue agents' handshakes share.
 */
#ifndef TETHER_ANSWER_LATER_H
#define TETHER_ANSWER_LATER_H

#include <stddef.h>

struct gateway;
struct reply;
struct store;
struct route_request;
struct route_response;

#define ANSWER_LATER_MAX 256

/* On the store thread: may touch only arg and st.  authorization: the
 * request's Authorization header ("" if none), copied, wiped once this
 * returns (the check of who asks belongs in the store part: it reads the
 * token). */
typedef void answer_later_store_fn(struct store *st, const char *authorization,
    void *arg);
/* On the loop: fills r (route.h's route_respond_*). */
typedef void answer_later_answer_fn(struct gateway *gw, void *arg,
    struct route_response *r);

/*
 * From a request route's call: runs store(st, arg) on the store thread,
 * then answer(gw, arg, &resp) on the loop, sends resp and calls
 * free_arg(arg).  When that cannot start (ANSWER_LATER_MAX out, the
 * store's queue full, out of memory), answers now through resp (503 or
 * 500 with the reason) and frees arg; neither part runs.  Loop only.
 */
void answer_later(struct gateway *gw, const struct route_request *req,
    struct route_response *resp, answer_later_store_fn *store,
    answer_later_answer_fn *answer, void (*free_arg)(void *arg), void *arg);

/* On the loop, instead of an answer part: takes the reply ticket t (server.h)
 * and answers it, now or later, exactly once, on this same loop
 * (reply_send), then frees arg itself: for an answer that waits for other
 * loops first (docs/0040: an admin action run on its session's loop, the
 * status page's gather, /metrics rendered on loop 0). */
typedef void answer_later_hold_fn(struct gateway *gw, void *arg,
    struct reply *t);

/*
 * answer_later whose answer part is hold: the same caps, refusals and
 * store part; once the store part is done, hold(gw, arg, t) runs on the
 * loop that asked and owns arg and t from then on (answer_later never
 * frees arg after that).  free_arg frees arg only where neither part runs.
 * Loop only.
 */
void answer_later_held(struct gateway *gw, const struct route_request *req,
    struct route_response *resp, answer_later_store_fn *store,
    answer_later_hold_fn *hold, void (*free_arg)(void *arg), void *arg);

/* gw's requests out now, of every loop (gw->answers_later, an atomic:
 * any thread). */
size_t answer_later_pending(const struct gateway *gw);

#endif
