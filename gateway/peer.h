/*
 * peer.h: links between gateway replicas (docs/0020-peer-links.md).
 *
 * Several replicas share one store; each holds the tunnels of the agents
 * that reached it.  A request that arrives at replica A for an agent whose
 * tunnel replica B holds is carried to B over the one link between A and
 * B: a mutually authenticated TLS WebSocket (subprotocol tether.peer.v1)
 * carrying a stream multiplexer (mux.h), so credit flows end to end.
 */
#ifndef TETHER_PEER_H
#define TETHER_PEER_H

#include <stddef.h>

struct gateway;
struct mux_stream;
struct mux_stream_handlers;

/* Opens a stream to agent_id, whose tunnel replica `replica` (reached at peer_url) holds, over the one
 * link between this replica and that one (dialed on first use; OPENs made while it connects wait, a
 * bounded number).  Same contract as session_open_stream: NULL with a reason when the link cannot take
 * another stream now; otherwise on_opened follows (refused with the far side's code/reason when the
 * agent is not there or not active, or "peer_unreachable" when the link fails). */
struct mux_stream *peer_open_stream(struct gateway *gw, const char *replica, const char *peer_url,
    const char *agent_id, const char *principal, const char *target, const char *service,
    const struct mux_stream_handlers *h, void *arg, char *err, size_t errlen);

/* The peer endpoint, GET /v1/peer (a route, route.h): a WebSocket with
 * subprotocol tether.peer.v1 from another replica only (tlspeer.h), its id
 * in the Tether-Replica header.  Also the only route of --peer-listen. */
struct route;
extern const struct route peer_route;

/* Ends every link (their streams end as in a link failure) and frees the
 * registry.  After server_stop (the accepted links end with it), before
 * the loop is freed. */
void peer_shutdown(struct gateway *gw);

#endif
