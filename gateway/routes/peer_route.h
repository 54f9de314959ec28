/*
 * peer_route.h: the peer endpoint, GET /v1/peer (a route, route.h): a
 * WebSocket with subprotocol tether.peer.v1 from another replica only
 * (tlspeer.h), its id in the Tether-Replica header.  Also the only route
 * of --peer-listen.  The link itself is replicas/peer_link.h's.
 */
#ifndef TETHER_PEER_ROUTE_H
#define TETHER_PEER_ROUTE_H

struct gateway;
struct route;

extern const struct route peer_route;

/* Makes this replica the far side of streams other replicas open over
 * their links (an OPEN names an agent held here: it is spliced to the
 * agent's tunnel, relay.h).  Once, before serving.  0, or -1 when out of
 * memory. */
int peer_route_init(struct gateway *gw);

#endif
