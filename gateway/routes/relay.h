/*
 * relay.h: one operator stream on the gateway, joined to one stream of an
 * agent's tunnel.
 *
 * The operator's side is either a raw dial WebSocket (binary messages are
 * the stream's bytes; an empty message means "no more from me", so
 * half-close works) or one stream of a multiplexed tether.v1 connection
 * (tetherctl forward).  Bytes move only as the receiving side grants
 * credit, and credit is returned to the sending side only once the bytes
 * were passed on, so the gateway holds at most one window per direction.
 *
 * Every relay ends with one audit line: who, cluster, node, target, bytes
 * each way, duration, and how it ended.  A relay is in its gateway's live
 * streams with its token and agent: a revocation of either (or of its
 * user) ends it, both sides reset with the code "revoked" (so the far
 * side of a peer link ends its half and says so too), and its audit line
 * says end=revoked with the revocation as reason (docs/0027).
 */
#ifndef TETHER_RELAY_H
#define TETHER_RELAY_H

struct gateway;
struct reach;
struct upgrade;
struct mux_stream;

struct relay_who {
	const char *principal;   /* "admin:<token id>" or "user:<name>" */
	/* The token it was opened with (a revocation of it ends the relay,
	 * livestreams.h); NULL or "" when not known (a peer link's far side). */
	const char *token_id;
	const char *cluster;
	const char *target;
	/* relay_start_stream only: a service of the agent ("kube-api") to
	 * open instead of target (which then names it for the audit), or NULL. */
	const char *service;
	/* Peer links (docs/0020), for the audit line: via, on the replica
	 * holding the agent's tunnel, names the replica that asked over its
	 * peer link (NULL or "" otherwise).  The line's replica= is the
	 * reach's (the one holding the tunnel, ours when local). */
	const char *via;
	/* The operator's address (ip:port) for the audit line's client=;
	 * NULL on a peer link (the asking replica's line has it). */
	const char *client;
	/* The far half of a stream that crossed from another loop of this
	 * process (core/looplink.h, docs/0040): no audit line and no entry in
	 * the live streams (the near half, where the operator is, has both),
	 * and the client side charged to the link's own account, never to
	 * the principal (the agent's side is, as always). */
	int quiet;
};

/*
 * Raw dial: opens a stream to agent (here or through a peer, reach.h);
 * answers the upgrade with 101 once the agent accepted, or 502 with the
 * agent's failure code.
 */
void relay_start_raw(struct gateway *gw, const struct reach *agent, struct upgrade *u,
    const struct relay_who *who);

/*
 * Multiplexed: the operator's stream cs (not yet answered) asked for
 * who->target; it is accepted once the agent accepted, or refused with the
 * agent's code.
 */
void relay_start_stream(struct gateway *gw, const struct reach *agent,
    struct mux_stream *cs, const struct relay_who *who);

#endif
