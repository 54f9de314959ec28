/*
 * reach.h: the way to one agent's tunnel, wherever it is (docs/0023).
 *
 * Several replicas share one store and each holds the tunnels of the
 * agents that reached it.  access_pick (access.h) fills a struct reach
 * with the agent it picked: a session here (local), an agent whose tunnel
 * another loop of this process holds (docs/0040: reached over the link
 * between the two loops, core/looplink.h), or an agent whose tunnel
 * another replica holds (from the presence directory, presence.h), with
 * that replica's id and peer URL.  Routes and relays open streams only
 * through reach_open_stream and never ask which of the three it is; the
 * audit names r->replica either way.
 */
#ifndef TETHER_REACH_H
#define TETHER_REACH_H

#include <stddef.h>

#include "store.h"

struct gateway;
struct loop;
struct session;
struct mux_stream;
struct mux_stream_handlers;

struct reach {
	struct session *local;                 /* the agent's tunnel on this loop, or NULL */
	struct loop *loop;                     /* else the loop holding it, or, for an
	                                          agent on a peer reached from loop k,
	                                          loop 0 (the peer links are loop 0's,
	                                          docs/0040); NULL: on a peer, from here */
	char agent_id[STORE_ID_MAX + 1];
	char node[STORE_NAME_MAX + 1];
	char replica[64];                      /* the replica holding the tunnel (ours when local) */
	char peer_url[256];                    /* "" when local */
};

/* Fills r for session s, whose tunnel this replica (gw) holds.  r->local
 * is valid until the loop runs again. */
void reach_local(struct reach *r, struct gateway *gw, struct session *s);

/* Fills r for agent_id (of node), whose tunnel loop l of this replica
 * holds: reached over the link from the calling loop to l.  From a loop
 * other than l. */
void reach_on_loop(struct reach *r, struct gateway *gw, struct loop *l,
    const char *agent_id, const char *node);

/* Fills r for ra, an agent whose tunnel another replica holds (the
 * presence directory): reached through the peer link to ra->replica. */
void reach_remote(struct reach *r, const struct store_remote_agent *ra);

/*
 * Opens a stream to target (HOST:PORT) or service on r's agent for
 * principal: session_open_stream when the tunnel is on this loop,
 * looplink_open to r->loop (the OPEN names the agent and the principal;
 * the far loop checks the agent is there and active), else
 * peer_link_open_stream to r->replica.  Same contract as all three: NULL
 * with a reason in err when no stream can be opened now; otherwise
 * h->on_opened follows (or on_close, refused).  O(1) beyond theirs.
 */
struct mux_stream *reach_open_stream(struct gateway *gw, const struct reach *r,
    const char *principal, const char *target, const char *service,
    const struct mux_stream_handlers *h, void *arg, char *err, size_t errlen);

#endif
