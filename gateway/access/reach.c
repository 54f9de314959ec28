/*
 * reach.c: a stream to an agent, on this replica or through a peer link
 * (see reach.h).
 */
#include "reach.h"

#include <stdio.h>
#include <string.h>

#include "gateway.h"
#include "peer_link.h"
#include "session.h"

void
reach_local(struct reach *r, struct gateway *gw, struct session *s)
{
	memset(r, 0, sizeof(*r));
	r->local = s;
	snprintf(r->agent_id, sizeof(r->agent_id), "%s", session_agent_id(s));
	snprintf(r->node, sizeof(r->node), "%s", session_node(s));
	snprintf(r->replica, sizeof(r->replica), "%s", gw->replica_id);
}

struct mux_stream *
reach_open_stream(struct gateway *gw, const struct reach *r, const char *principal,
    const char *target, const char *service, const struct mux_stream_handlers *h,
    void *arg, char *err, size_t errlen)
{
	if (r->local != NULL)
		return session_open_stream(r->local, principal, target, service, h,
		    arg, err, errlen);
	return peer_link_open_stream(gw, r->replica, r->peer_url, r->agent_id,
	    principal, target, service, h, arg, err, errlen);
}
