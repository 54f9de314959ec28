/*
 * reach.c: a stream to an agent, on this loop, on another loop of this
 * replica, or through a peer link (see reach.h).
 */
#include "reach.h"

#include <stdio.h>
#include <string.h>

#include "frame.h"
#include "gateway.h"
#include "loop.h"
#include "looplink.h"
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

void
reach_on_loop(struct reach *r, struct gateway *gw, struct loop *l,
    const char *agent_id, const char *node)
{
	memset(r, 0, sizeof(*r));
	r->loop = l;
	snprintf(r->agent_id, sizeof(r->agent_id), "%s", agent_id);
	snprintf(r->node, sizeof(r->node), "%s", node);
	snprintf(r->replica, sizeof(r->replica), "%s", gw->replica_id);
}

void
reach_remote(struct reach *r, const struct store_remote_agent *ra)
{
	memset(r, 0, sizeof(*r));
	snprintf(r->agent_id, sizeof(r->agent_id), "%s", ra->agent_id);
	snprintf(r->node, sizeof(r->node), "%s", ra->node);
	snprintf(r->replica, sizeof(r->replica), "%s", ra->replica);
	snprintf(r->peer_url, sizeof(r->peer_url), "%s", ra->peer_url);
}

/* Over the link to the loop holding the tunnel: the OPEN names the agent
 * and the principal, as a peer link's does. */
static struct mux_stream *
loop_open_stream(struct gateway *gw, const struct reach *r, const char *principal,
    const char *target, const char *service, const struct mux_stream_handlers *h,
    void *arg, char *err, size_t errlen)
{
	struct frame_open req;

	if (gw->looplinks == NULL || strlen(r->agent_id) > FRAME_ID_MAX ||
	    strlen(principal) > FRAME_PRINCIPAL_MAX) {
		snprintf(err, errlen, "cannot reach agent %.63s on loop %u: %s",
		    r->agent_id, r->loop->index, gw->looplinks == NULL ?
		    "no links between loops" : "bad agent or principal");
		return NULL;
	}
	frame_open_init(&req, target, service);
	snprintf(req.agent, sizeof(req.agent), "%s", r->agent_id);
	snprintf(req.principal, sizeof(req.principal), "%s", principal);
	return looplink_open(gw->looplinks, r->loop->index, &req, h, arg, err, errlen);
}

struct mux_stream *
reach_open_stream(struct gateway *gw, const struct reach *r, const char *principal,
    const char *target, const char *service, const struct mux_stream_handlers *h,
    void *arg, char *err, size_t errlen)
{
	if (r->local != NULL)
		return session_open_stream(r->local, principal, target, service, h,
		    arg, err, errlen);
	if (r->loop != NULL)
		return loop_open_stream(gw, r, principal, target, service, h, arg,
		    err, errlen);
	return peer_link_open_stream(gw, r->replica, r->peer_url, r->agent_id,
	    principal, target, service, h, arg, err, errlen);
}
