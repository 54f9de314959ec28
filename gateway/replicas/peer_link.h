/*
 * peer_link.h: links between gateway replicas (docs/0020-peer-links.md).
 *
 * Several replicas share one store; each holds the tunnels of the agents
 * that reached it.  A request that arrives at replica A for an agent whose
 * tunnel replica B holds is carried to B over the one link between A and
 * B: a mutually authenticated TLS WebSocket (subprotocol tether.peer.v1)
 * carrying a stream multiplexer (mux.h), so credit flows end to end.
 *
 * This layer knows links, not agents: what the far side does with an OPEN
 * is the handler the /v1/peer route sets (routes/peer_route.c), the way
 * hub_ops hands the hub what it may not know.
 */
#ifndef TETHER_PEER_LINK_H
#define TETHER_PEER_LINK_H

#include <stddef.h>

#define PEER_PATH        "/v1/peer"
#define PEER_SUBPROTOCOL "tether.peer.v1"
#define PEER_HEADER      "Tether-Replica"   /* the dialing replica's id */

struct gateway;
struct mux_stream;
struct mux_stream_handlers;
struct frame_open;
struct upgrade;

/* The far side of a stream: replica `replica` opened s on its link with
 * OPEN req.  The handler answers it (mux_stream_refuse, or accepts it by
 * splicing it to a stream of its own).  Loop only. */
typedef void peer_link_open_fn(struct gateway *gw, const char *replica,
    struct mux_stream *s, const struct frame_open *req);

/* Sets the handler of OPENs arriving on any link (once, before serving).
 * 0, or -1 when out of memory.  Without one, OPENs are refused. */
int peer_link_set_open_handler(struct gateway *gw, peer_link_open_fn *on_open);

/* Opens a stream to agent_id, whose tunnel replica `replica` (reached at peer_url) holds, over the one
 * link between this replica and that one (dialed on first use; OPENs made while it connects wait, a
 * bounded number).  Same contract as session_open_stream: NULL with a reason when the link cannot take
 * another stream now; otherwise on_opened follows (refused with the far side's code/reason when the
 * agent is not there or not active, or "peer_unreachable" when the link fails). */
struct mux_stream *peer_link_open_stream(struct gateway *gw, const char *replica, const char *peer_url,
    const char *agent_id, const char *principal, const char *target, const char *service,
    const struct mux_stream_handlers *h, void *arg, char *err, size_t errlen);

/* Takes the upgrade u, a replica's dial checked by the route as coming
 * from a replica, as the link to `replica` (its id from PEER_HEADER).
 * Refuses u (400 a bad id or our own, 409 when both dialed and ours wins,
 * 503 past the link cap) or accepts it, replacing an up link.  Loop only. */
void peer_link_accept(struct gateway *gw, const char *replica, struct upgrade *u);

/* The certificate in the data directory changed (SIGHUP, cert renew):
 * links dialed from now on present the new one (the dialing TLS context is
 * made again at the next dial); links up keep theirs.  Loop only. */
void peer_link_tls_renewed(struct gateway *gw);

/* Ends every link (their streams end as in a link failure) and frees the
 * registry.  After server_stop (the accepted links end with it), before
 * the loop is freed. */
void peer_link_shutdown(struct gateway *gw);

#endif
