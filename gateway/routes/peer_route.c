/*
 * peer_route.c: GET /v1/peer, the route another replica's link arrives on
 * (see peer_route.h), and the far side of a stream it carries.
 *
 * The route checks that the dialer is a replica (tlspeer.h: a certificate
 * with the gateway's own key) and speaks tether.peer.v1, then hands the
 * upgrade to the link registry (replicas/peer_link.h).  An OPEN that comes
 * over any link names the agent and the principal; the agent's tunnel must
 * be here and active, and the stream is then spliced to a new stream on it
 * by relay_start_stream, exactly like a `tetherctl forward` stream, so
 * credit flows end to end.  A stream from another loop of this process
 * (core/looplink.h) gets the same check and splice, quiet; on loop 0 one
 * for an agent another replica holds (access_pick sends those there: the
 * peer links are loop 0's) is spliced to a stream on the peer link.
 */
#include "peer_route.h"

#include <stdio.h>
#include <string.h>

#include "agentdir.h"
#include "frame.h"
#include "gateway.h"
#include "http.h"
#include "log.h"
#include "loop.h"
#include "mux.h"
#include "peer_link.h"
#include "presence.h"
#include "reach.h"
#include "relay.h"
#include "route.h"
#include "server.h"
#include "session.h"

/* Whether e's tunnel is on another loop that a link reaches. */
static int
far_loop(struct gateway *gw, const struct agentdir_entry *e)
{
	const struct loop *l = loop_self();

	return gw->looplinks != NULL && gw->loops != NULL && l != NULL &&
	    e->at.loop != l->index && e->at.loop < gw->nloops;
}

/* Who the stream is for, as the OPEN says (via: the replica it came
 * from, or NULL from another loop: quiet, the near side logs it). */
static void
far_who(struct relay_who *who, const struct frame_open *req,
    const char *cluster, const char *via)
{
	who->principal = req->principal;
	who->cluster = cluster;
	who->target = req->target[0] != '\0' ? req->target : req->service;
	who->service = req->service[0] != '\0' ? req->service : NULL;
	who->via = via;
	who->quiet = via == NULL;
}

/* An OPEN naming an agent here, from replica `via` (NULL: from another
 * loop of this process, quiet). */
static void
far_open(struct gateway *gw, const char *via, struct mux_stream *s,
    const struct frame_open *req)
{
	struct agentdir_entry e;
	struct store_remote_agent ra;
	struct session *agent;
	int found;
	struct reach here;
	struct relay_who who = { 0 };
	char reason[FRAME_REASON_MAX + 1];

	if (req->agent[0] == '\0' || req->principal[0] == '\0') {
		mux_stream_refuse(s, "protocol", via != NULL ? "an OPEN on a peer "
		    "link names the agent and the principal" : "an OPEN on a loop "
		    "link names the agent and the principal");
		return;
	}
	found = agentdir_find(gw->agents, req->agent, &e);
	agent = found ? session_here(gw, &e) : NULL;
	/* From a replica, for an agent on another loop of this one (docs/0040
	 * step 7): spliced to a stream over the loop link, whose far side
	 * runs this check again there, quietly. */
	if (agent == NULL && found && via != NULL && far_loop(gw, &e)) {
		if (!e.active) {
			snprintf(reason, sizeof(reason), "agent %s is not active",
			    req->agent);
			mux_stream_refuse(s, "agent_inactive", reason);
			return;
		}
		far_who(&who, req, e.cluster, via);
		reach_on_loop(&here, gw, &gw->loops[e.at.loop], e.agent_id, e.node);
		relay_start_stream(gw, &here, s, &who);
		return;
	}
	/* From another loop of this process (loop 0 holds the peer links,
	 * docs/0040), for an agent another replica holds: spliced to a
	 * stream over the peer link, quietly (the near loop audits it). */
	if (agent == NULL && !found && via == NULL && (loop_self() == NULL ||
	    loop_self()->index == 0) && presence_remote_find(gw, req->agent, &ra)) {
		far_who(&who, req, ra.cluster, NULL);
		reach_remote(&here, &ra);
		relay_start_stream(gw, &here, s, &who);
		return;
	}
	if (agent == NULL) {
		if (via != NULL)
			snprintf(reason, sizeof(reason), "agent %s has no tunnel on "
			    "replica %s", req->agent, gw->replica_id);
		else
			snprintf(reason, sizeof(reason), "agent %s has no tunnel on "
			    "loop %u of replica %s", req->agent, loop_self()->index,
			    gw->replica_id);
		mux_stream_refuse(s, "agent_not_here", reason);
		return;
	}
	if (!session_is_active(agent)) {
		snprintf(reason, sizeof(reason), "agent %s is not active", req->agent);
		mux_stream_refuse(s, "agent_inactive", reason);
		return;
	}
	far_who(&who, req, session_cluster(agent), via);
	reach_local(&here, gw, agent);
	relay_start_stream(gw, &here, s, &who);
}

/* An OPEN from replica `replica` (peer_link_open_fn). */
static void
peer_on_open(struct gateway *gw, const char *replica, struct mux_stream *s,
    const struct frame_open *req)
{
	far_open(gw, replica, s, req);
}

void
peer_route_loop_open(void *ctx, unsigned from, struct mux_stream *s,
    const struct frame_open *req)
{
	(void)from;
	far_open(ctx, NULL, s, req);
}

int
peer_route_init(struct gateway *gw)
{
	return peer_link_set_open_handler(gw, peer_on_open);
}

static int
peer_matches(const char *path)
{
	return strcmp(path, PEER_PATH) == 0;
}

static void
peer_request(struct gateway *gw, const struct route_request *req,
    struct route_response *r)
{
	route_respond_error(r, 400, "%s takes a WebSocket upgrade with the "
	    "subprotocol %s, from another replica", PEER_PATH, PEER_SUBPROTOCOL);
}

static void
peer_upgrade(struct gateway *gw, const struct route_request *req, struct upgrade *u)
{
	if (!req->from_replica) {
		warn("peer link refused: not a replica", KV_S("peer", upgrade_peer(u)));
		upgrade_refuse(u, 403, PEER_PATH " takes only the gateway's replicas: "
		    "no certificate with the gateway's own key was presented");
		return;
	}
	if (!http_token_list_has(upgrade_offered_protocols(u), PEER_SUBPROTOCOL)) {
		upgrade_refuse(u, 400, PEER_PATH " needs the WebSocket subprotocol "
		    PEER_SUBPROTOCOL);
		return;
	}
	peer_link_accept(gw, req->replica != NULL ? req->replica : "", u);
}

const struct route peer_route = {
	.name = "peer",
	.matches = peer_matches,
	.home_loop = 1,
	.request = peer_request,
	.upgrade = peer_upgrade,
	.mtls_port = 1,
};
