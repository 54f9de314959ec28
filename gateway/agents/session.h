/*
 * session.h: one agent tunnel as seen by the gateway: the handshake phases,
 * then the agent's lifecycle (verification, state changes) over it.
 *
 * Handshake phases, each accepting only its own frames (anything else gets
 * an ERROR frame with a reason and the tunnel closes):
 *
 *   AWAIT_HELLO --HELLO--> AWAIT_AUTH --AUTH(import)--> AWAIT_REGISTER
 *                                  \                         |REGISTER
 *                                   \--AUTH(agent)--> ESTABLISHED   REGISTERED, close
 *
 * and a REGISTER carrying its new key's proof (a newer agent, docs/0044):
 *   AWAIT_REGISTER --REGISTER--> REGISTERED "goes_on", WELCOME, ESTABLISHED
 *
 * A session is owned by its tunnel (tunnel.c): created when the WebSocket
 * is established, freed by session_closed when it goes away.  It reaches
 * the tunnel only through the struct session_transport it was given, so
 * this file knows no WebSocket and no server.
 */
#ifndef TETHER_SESSION_H
#define TETHER_SESSION_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct gateway;
struct mux_io;
struct session;
struct store_agent;
struct frame;

/* What a session may do to its tunnel; t is the tunnel. */
struct session_transport {
	/* Queues one frame.  0, or -1 when it cannot be encoded or would pass
	 * the output cap (session_max_queue; the tunnel is then dropped). */
	int (*send)(void *t, const struct frame *f);
	/* Closes once queued frames are written; session_closed follows
	 * later, never from inside this call. */
	void (*close)(void *t);
	/* Remote address for logs. */
	const char *(*peer)(const void *t);
	/* The stream multiplexer's bulk path, called with bulk_arg(t) (t
	 * itself when bulk_arg is NULL): the session hands both to its mux as
	 * they are, so a stream's frames go from the mux to the tunnel without
	 * coming back through session.c (the tunnel's is the WebSocket
	 * adapter over its face, common/wsmux.h). */
	const struct mux_io *bulk;
	void *(*bulk_arg)(void *t);
	/* Optional (NULL: never): 1 when input arrived that the session has
	 * not been given yet (wsface_input_pending).  A handshake deadline
	 * that finds some gives it one more pass of the loop before judging. */
	int (*input_pending)(const void *t);
};

/* A new session on tunnel t (io is kept, not copied), on the calling
 * loop (its timers, its multiplexer, its hub).  The caller took a
 * handshake slot (gateway_handshake_take) and its source's share
 * (gateway_handshake_source_take with io->peer(t)): the session gives
 * both back when its handshake ends.  NULL when out of memory: the caller
 * still holds both. */
struct session *session_new(struct gateway *gw, const struct session_transport *io,
    void *t);
/* One complete WebSocket message (a frame, not yet decoded). */
void session_on_message(struct session *s, const uint8_t *buf, size_t len);
/* A text message or an oversized one: a protocol error for this tunnel. */
void session_protocol_error(struct session *s, const char *code, const char *reason);
/* The transport is gone: leaves the hub, ends a running verification, frees s. */
void session_closed(struct session *s);
/* Largest message accepted now: small until authenticated. */
size_t session_max_message(const struct session *s);
/* Most output the tunnel may queue now, every frame counted (PONG, ERROR,
 * OPEN_FAIL included): --max-queue once authenticated, the small
 * max_handshake_queue before. */
size_t session_max_queue(const struct session *s);

/*
 * Operator actions on an established session (admin API).  The caller has
 * already persisted the agent's new record; these tell the agent and act on it.
 */
void session_agent_changed(struct session *s, const struct store_agent *a);
/* The agent's verification was persisted (a, now verifying): tells the
 * agent and sends the VERIFY.  The caller made the transition (the admin
 * API, on the store thread). */
void session_verifying(struct session *s, const struct store_agent *a);
/*
 * The agent's record changed in the store, here or on another replica
 * (heard through the store, docs/0021); a is the record as read since.  A
 * revoked agent's tunnel closes; an agent approved elsewhere is told and
 * verified, as approve does here; a verification started elsewhere runs
 * here; another new state is told to the agent.  Nothing when a says what
 * the session already knows (its own change, heard back).
 */
void session_record_changed(struct session *s, const struct store_agent *a);
/* Sends an established agent the gateway's settings (SETTINGS, from
 * settings.h) once there are any (the URL list read from the store, a CA
 * rotation); no-op otherwise, and for an agent whose HELLO named no
 * release.  The agent answers SETTINGS_ACK, whose URL list and CAs held
 * are recorded in the store when they differ from the agent's record. */
void session_send_settings(struct session *s);
/* Sends ERROR(code, reason) and closes the tunnel; for "unavailable" and
 * "timeout" the frame also says when to come back (retry_after_ms,
 * gateway_retry_after_ms). */
void session_kick(struct session *s, const char *code, const char *reason);

/*
 * Starts a node key rotation on an established tunnel (KEY_ROTATE with a
 * fresh nonce; docs/interface.md, "Node key rotation"); why is for the
 * log.  No-op when one is under way or the tunnel is not established.
 * The proof, the store's stage and swap follow on their own.
 */
void session_rotate_key(struct session *s, const char *why);

/*
 * The gateway is draining: tells an established agent to move (RECONNECT
 * with reason, jitter_ms, and elsewhere when another replica's lease runs:
 * presence_others_live); its streams in flight carry on.  A session
 * that is still in its handshake gets it once established.  No-op otherwise.
 */
void session_drain(struct session *s, const char *reason, uint32_t jitter_ms);

/* The tunnel's transport has room again (streams blocked on it resume). */
void session_on_drain(struct session *s);
/* The agent's node name, and whether it may carry streams now. */
const char *session_node(const struct session *s);
/* The agent's cluster id (established sessions; "" before). */
const char *session_cluster(const struct session *s);
/* The agent's id ("" before it is known). */
const char *session_agent_id(const struct session *s);
int session_is_active(const struct session *s);
/* 1 while a VERIFY is outstanding: only then does s hold the round trip's
 * state (its timer, nonce and time sent), which goes when it ends
 * (answered, failed, timed out); 0 otherwise.  O(1). */
int session_verify_outstanding(const struct session *s);

struct hub;
/*
 * The hub of the calling loop's sessions (docs/0040 step 7): loop_self()'s,
 * or gw->hub off any loop or where the loop has none (unit tests).  Its
 * loop's thread only.  O(1).
 */
struct hub *session_hub(struct gateway *gw);
/*
 * Has fn(s, arg) run for every established session of every loop of gw,
 * each on its own loop's thread, from its inbox (loop_broadcast: never
 * inline, the caller's loop included); arg is shared and must outlive the
 * broadcast (gw itself, or a constant).  Without loops (gw->loops NULL:
 * unit tests) at once over gw->hub.  fn may kick or drain s; it may not
 * add a session.  Returns how many agents the process holds now
 * (agentdir_count): those fn will be called for, give or take the ones
 * coming and going meanwhile.  Any loop's thread.  Cost: one allocation
 * and one loop_call per loop, then O(sessions) on each.
 */
size_t session_foreach_everywhere(struct gateway *gw,
    void (*fn)(struct session *s, void *arg), void *arg);

struct agentdir_entry;
/*
 * The session of e's tunnel when it lives on the calling loop and is still
 * the one e names (same generation); NULL otherwise: gone, replaced, or on
 * another loop, which the caller reaches by agent id through that loop's
 * inbox instead (docs/0040; with tunnels on loop 0 only, readers there
 * always find it here).  e comes from agentdir_find or agentdir_pick.
 * Valid until the loop runs again.  O(1): one hub lookup.
 */
struct session *session_here(struct gateway *gw, const struct agentdir_entry *e);
/*
 * Whether the established agent skips a frame of a type it does not know:
 * true when its HELLO named its release ("version").  Every release that
 * names one skips unknown frames; older agents (692108b and before) do
 * neither, and take an unknown frame for a protocol error.  A frame type
 * added after protocol 1's first set (1-13, 20-26) goes only to a session
 * for which this is true (docs/interface.md, "Compatibility").
 */
bool session_skips_unknown_frames(const struct session *s);

struct mux_stream;
struct mux_stream_handlers;
/*
 * Opens a stream to target (HOST:PORT) or service on the agent for
 * principal ("user:NAME", "admin:TOKEN_ID"), its window charged to the
 * stream budget, this tunnel's share and the principal's (shares.h).  NULL
 * with a reason in err when the agent is not active, its tunnel is at its
 * stream limit or a share is spent.
 */
struct mux_stream *session_open_stream(struct session *s, const char *principal,
    const char *target, const char *service, const struct mux_stream_handlers *h,
    void *arg, char *err, size_t errlen);

#endif
