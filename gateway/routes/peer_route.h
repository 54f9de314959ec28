/*
 * peer_route.h: the peer endpoint, GET /v1/peer (a route, route.h): a
 * WebSocket with subprotocol tether.peer.v1 from another replica only
 * (tlspeer.h), its id in the Tether-Replica header.  Also the only route
 * of --peer-listen.  The link itself is replicas/peer_link.h's.  Also
 * the far side of a stream opened over a link between two loops of this
 * process (core/looplink.h, docs/0040): the same check and splice.
 */
#ifndef TETHER_PEER_ROUTE_H
#define TETHER_PEER_ROUTE_H

struct frame_open;
struct gateway;
struct mux_stream;
struct route;

extern const struct route peer_route;

/* Makes this replica the far side of streams other replicas open over
 * their links (an OPEN names an agent held here: it is spliced to the
 * agent's tunnel, relay.h).  Once, before serving.  0, or -1 when out of
 * memory. */
int peer_route_init(struct gateway *gw);

/* The far side of a stream loop `from` opened over its link to the
 * calling loop (a looplink_open_fn; ctx is the gateway): as an OPEN from
 * another replica, the agent named must be on this loop and active; the
 * stream is spliced to it with relay_who.quiet (the near side audits and
 * lists it), or refused ("protocol", "agent_not_here", "agent_inactive"). */
void peer_route_loop_open(void *ctx, unsigned from, struct mux_stream *s,
    const struct frame_open *req);

#endif
