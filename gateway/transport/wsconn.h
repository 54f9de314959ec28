/*
 * wsconn.h: one server-side WebSocket connection on the gateway, after the
 * upgrade: the tunnel of an agent, a dial client's stream(s), a replica's
 * peer link.
 *
 * Its owner holds it as a struct wsface (common/wsface.h), the face the
 * client side (common/wsclient.h) shows too, so that the stream
 * multiplexer's adapter (common/wsmux.h) and a peer link run over either.
 * Accepted faces: the keepalive is the connection's own (wsconn_set_keepalive,
 * set by server.c), on_too_large is heard, wsface_free closes with 1001.
 */
#ifndef TETHER_WSCONN_H
#define TETHER_WSCONN_H

#include <stddef.h>
#include <stdint.h>
#include <sys/queue.h>

#include "wsface.h"

struct bufferevent;
struct event_base;
struct evbuffer;
struct wsconn;

/* ---- for server.c: making and ending connections ---- */

/* Keepalive: after interval_ms with nothing from the peer a ping goes out,
 * and if nothing at all arrives within timeout_ms after it the connection
 * is dropped (on_close follows from the loop).  Defaults 20 s and 30 s. */
void wsconn_set_keepalive(struct wsconn *c, uint32_t interval_ms, uint32_t timeout_ms);
/* c's face, what its owner holds (upgrade_accept returns it). */
struct wsface *wsconn_face(struct wsconn *c);

/*
 * Every open wsconn of a server, and what they share: one timing wheel
 * (common/twheel.h) that drives every connection's keepalive (the ping
 * after interval_ms of silence, the drop after timeout_ms without an
 * answer) and its close deadline, ticked by one timer event, and one event
 * that runs the connections that asked to be served from the loop soon.
 * A connection then needs no event or timer of its own, and a byte heard
 * costs one store (docs/0018, "Pings, third pass").
 */
struct wsconn_set;

/* Makes an empty set on base whose wheel ticks every tick_ms (> 0): the
 * deadlines' granularity.  NULL when out of memory. */
struct wsconn_set *wsconn_set_new(struct event_base *base, uint32_t tick_ms);
/* Counts what each connection made from now on holds (queued output and
 * input buffers) in b's memory budget (budget.h, docs/0036), as one slice
 * of it (the set is one loop's): past b->memory, or a principal's
 * b->memory_share (wsface_charge_to), while this set holds more than its
 * part (1/slices), its largest holders are dropped from the loop, with a
 * warning line each, until it is back within (what they held goes back to
 * the system with the gateway's heap check, core/gateway.h).  Once, before
 * any connection; b outlives the set.  Without it nothing is counted. */
struct budget;
void wsconn_set_budget(struct wsconn_set *all, struct budget *b);
/* The set's connections live on loops[index] of the gateway's loops
 * (core/loop.h), where wsconn_keep_counts counts them.  Once, before any
 * connection; loops outlive the set.  Without it nothing is counted. */
struct loop;
void wsconn_set_loops(struct wsconn_set *all, struct loop *loops,
    unsigned index);
/* The tick for keepalives of interval_ms and timeout_ms: an eighth of the
 * shorter one, within 10..250 ms. */
uint32_t wsconn_tick_for(uint32_t interval_ms, uint32_t timeout_ms);
/* Shutdown: ends every connection in the set now, on_close for each. */
void wsconn_destroy_all(struct wsconn_set *all);
/* Ends every connection (as wsconn_destroy_all), then frees the set.
 * NULL: nothing. */
void wsconn_set_free(struct wsconn_set *all);

/*
 * Takes over bev (a TLS connection whose 101 answer is already queued in its
 * output) as a WebSocket; bytes already in its input are the first frames.
 * h (static) and arg are the face's handlers.  Returns NULL when out of
 * memory (bev is then still the caller's).
 */
struct wsconn *wsconn_new(struct wsconn_set *all, struct bufferevent *bev,
    const char *peer, const struct wsface_handlers *h, void *arg);

/*
 * A dial's connection past its 101 (docs/0040 step 8, "Built: the counts
 * follow the dial"): c becomes the one owner of its places in the
 * landing's counts (loop.h, nconns): one in its set's loop's nconns and,
 * when tunnel is not NULL (one of the same loops), one in
 * tunnel->tunnel_side, and gives them back once, when it ends (before
 * on_close).  Returns 1, or 0 when the set has no loops
 * (wsconn_set_loops): then the caller still holds its places.  At most
 * once per connection, just after wsconn_new.  O(1); no memory (two bytes
 * of the struct's padding).
 */
int wsconn_keep_counts(struct wsconn *c, struct loop *tunnel);

#endif
