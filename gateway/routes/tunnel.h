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
struct gateway;

extern const struct route tunnel_route;

/*
 * Upgrades waiting for a handshake slot (--handshake-wait, docs/0035) are
 * answered 503 with a Retry-After now, and the list is freed: at the
 * drain's start (the gateway takes no new tunnel) and before server_stop.
 * Idempotent; loop thread only.
 */
void tunnel_wait_stop(struct gateway *gw);

#endif
