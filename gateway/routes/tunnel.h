/*
 * tunnel.h: the agent tunnel endpoint, GET /v1/connect upgraded to a
 * WebSocket with subprotocol tether.v1.
 *
 * A route (route.h): the server hands over a valid upgrade; if the gateway
 * takes another tunnel (not stopping, fewer than --max-handshakes still
 * authenticating, or one frees within --handshake-wait while the upgrade
 * waits its turn) the WebSocket is accepted and carries one session
 * (session.c), which reaches it through a struct session_transport.
 * Nothing else in the gateway knows about tunnels.  A plain request on
 * /v1/connect gets 400.
 */
#ifndef TETHER_TUNNEL_H
#define TETHER_TUNNEL_H

struct route;
struct route_landing;
struct gateway;

extern const struct route tunnel_route;

/*
 * Upgrades waiting on the calling loop for a handshake slot
 * (--handshake-wait, docs/0035) are answered 503 with a Retry-After now,
 * and the loop's list is freed.  Idempotent; that loop's thread only.
 */
void tunnel_wait_stop(struct gateway *gw);
/*
 * tunnel_wait_stop on every loop: loops 1..n-1 by a message (run before a
 * loop_stop sent after it), the caller's here and now.  At the drain's
 * start (the gateway takes no new tunnel) and before server_stop.  From
 * loop 0's thread (or off any loop without loops: unit tests).
 */
void tunnel_wait_stop_everywhere(struct gateway *gw);

/*
 * The loop a new /v1/connect lands on (docs/0040 section 2): the one with
 * the fewest tunnels plus tunnel handshakes (loop->ntunnels +
 * loop->nhandshakes), ties taken in turn; 0 with one loop, whatever the
 * request line says (at is unused).  Any thread (the handshake loop asks:
 * the tunnel route's land_loop).  Cost: two atomic loads per loop.
 */
unsigned tunnel_land_loop(struct gateway *gw, const struct route_landing *at);

#endif
