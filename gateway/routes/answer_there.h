/*
 * answer_there.h: an answer made on another loop (docs/0040).  A request
 * route runs on whichever loop its connection landed on; what some
 * answers read lives on one loop only (loop 0's: its server's admission
 * counts, the store listener's and the lease's health, the stream metrics
 * its tunnels count).  The answer is made there and sent from the loop
 * that asked, through the request's reply ticket (server.h: "Replies
 * later").
 *
 * Cost: none when the asking loop is the one named (the answer is made at
 * once); else one allocation and two loop_calls per request.
 */
#ifndef TETHER_ANSWER_THERE_H
#define TETHER_ANSWER_THERE_H

struct gateway;
struct reply;
struct route_request;
struct route_response;

/* On loop `to`: fills resp (route.h's route_respond_*); reads arg only. */
typedef void answer_there_fn(struct gateway *gw, void *arg,
    struct route_response *resp);

/*
 * From a request route's call: make(gw, arg, resp) on loop `to` (index in
 * gw->loops), the answer sent from this loop; free_arg(arg) once it went
 * (or could not: it runs exactly once).  On loop `to` itself, off any
 * loop, or without gw->loops: make fills resp now, as the route's own
 * answer.  Out of memory: 500 through resp.  Loop only.
 */
void answer_there(struct gateway *gw, const struct route_request *req,
    struct route_response *resp, unsigned to, answer_there_fn *make,
    void (*free_arg)(void *arg), void *arg);

/*
 * The same for an answer whose ticket t the route holds already
 * (answer_later_held): the answer goes through t, now when this is loop
 * `to`, else once made there.  If `to` has stopped, 503.  If this loop
 * stops before the answer comes back (shutdown), nobody waits for it: it
 * is freed, and t with answer_there_orphan.
 */
void answer_there_ticket(struct gateway *gw, struct reply *t, unsigned to,
    answer_there_fn *make, void (*free_arg)(void *arg), void *arg);

/*
 * The loop that holds ticket t stopped before t's answer came back
 * (shutdown), told on whatever thread learns it: frees t when its
 * connection is gone (reply_client_gone: a loop closes its connections
 * before its inbox, so that is the order of a clean stop); else leaves it
 * (a few bytes), never touching a connection of another thread.  NULL: no-op.
 */
void answer_there_orphan(struct reply *t);

#endif
