/*
 * dial.h: GET /v1/clusters/ID/dial?target=HOST:PORT[&node=NAME], the
 * operator's way into a node.
 *
 * Without a subprotocol the WebSocket carries the raw bytes of one stream
 * to target (binary messages; an empty one means end of data from that
 * side).  With subprotocol tether.v1 it carries many streams with the
 * tunnel's own frames (tetherctl forward): each OPEN names its target.
 *
 * Refusals are HTTP statuses with a JSON reason: 401 bad token, 403 a user
 * token not scoped to the cluster, 404 unknown cluster (to a token that
 * may reach it) or node, 503 no active agent connected, 502 the agent could not
 * reach the target (with its code: not_allowed, refused, unreachable,
 * timeout).
 */
#ifndef TETHER_DIAL_H
#define TETHER_DIAL_H

struct route;

/* The route (route.h): upgrades on /v1/clusters/ID/dial. */
extern const struct route dial_route;

#endif
