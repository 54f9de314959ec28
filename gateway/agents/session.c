/*
 * session.c: an agent tunnel's handshake and lifecycle on the gateway
 * (see session.h for the phases).
 *
 * Each phase has its own handler and accepts only its own frame type; the
 * single setter session_set_phase logs every change.  Store transitions
 * (agent states) are persisted before the agent is told of them.
 *
 * Every store call goes to a store thread (store_worker.h, job_worker) and the
 * handshake continues in the job's continuation, so a slow database never
 * holds up the loop.  While a handshake job is out, the one frame an agent
 * may send ahead (REGISTER right after AUTH) is held and handled after it.
 */
#include "session.h"

#include <inttypes.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <event2/event.h>
#include <openssl/crypto.h>

#include "agentdir.h"
#include "agentkey.h"
#include "frame.h"
#include "gateway.h"
#include "hub.h"
#include "log.h"
#include "loop.h"
#include "metrics.h"
#include "mux.h"
#include "presence.h"
#include "runtime.h"
#include "settings.h"
#include "shares.h"
#include "store.h"
#include "store_worker.h"
#include "token.h"

enum session_phase {
	PHASE_AWAIT_HELLO,     /* nothing accepted but HELLO */
	PHASE_AWAIT_AUTH,      /* CHALLENGE sent; nothing accepted but AUTH */
	PHASE_AWAIT_REGISTER,  /* import token proven; nothing but REGISTER */
	PHASE_ESTABLISHED,     /* an authenticated agent */
	PHASE_CLOSING,         /* ERROR or REGISTERED sent; input ignored */
	PHASE_ENTRIES          /* must be last */
};

static const char *const phase_names[PHASE_ENTRIES] = {
	[PHASE_AWAIT_HELLO] = "await-hello",
	[PHASE_AWAIT_AUTH] = "await-auth",
	[PHASE_AWAIT_REGISTER] = "await-register",
	[PHASE_ESTABLISHED] = "established",
	[PHASE_CLOSING] = "closing",
};

struct session_job;

/* What only the handshake needs (~390 bytes): freed, wiped, once the
 * agent is established, so that an idle tunnel does not hold it. */
struct session_hs {
	struct frame_hello hello;
	uint8_t nonce[FRAME_NONCE_LEN];
	struct store_token import;    /* PHASE_AWAIT_REGISTER: the proven token */
	char key[8];                  /* WELCOME's "key": "current" or "next" */
	bool key_rotate;              /* an operator asked for a rotation */
	bool goes_on;                 /* REGISTER proved its key: the tunnel
	                               * goes on as the agent (docs/0044) */
};

/* A node key rotation under way on this tunnel (docs/interface.md, "Node
 * key rotation"): allocated only while one is, so an idle tunnel holds
 * nothing for it. */
enum rot_phase {
	ROT_ASKED,        /* KEY_ROTATE sent; waiting for KEY_PROOF */
	ROT_STAGING,      /* proof checked; the store stages the new key */
	ROT_STAGED,       /* KEY_ROTATED sent; waiting for KEY_SWITCHED */
	ROT_COMMITTING,   /* the store swaps the keys */
};

struct session_rotation {
	enum rot_phase phase;
	uint8_t nonce[FRAME_NONCE_LEN];      /* KEY_ROTATE's, for one proof */
	uint8_t new_pub[FRAME_PUBKEY_LEN];   /* the key proven */
};

/* What an established tunnel keeps of its agent's record (152 bytes, not
 * the store_agent's 456: no key, no last error, no token, no times; they
 * are used from the record at hand when it arrives). */
struct session_agent {
	char id[STORE_ID_MAX + 1];
	char cluster[STORE_ID_MAX + 1];
	char node[STORE_NAME_MAX + 1];
	enum agent_state state;
	bool urls_known;              /* the record holds the agent's URL list */
	bool skips_unknown;           /* its HELLO named its release */
	bool cas_known;               /* the record holds the CAs it trusts */
	uint64_t urls_hash;           /* of that list (urls_hash): an ACK
	                               * saying the same is not written again */
	uint64_t cas_hash;            /* of those (urls_hash), as urls_hash */
};

/* A verification round trip under way (a VERIFY outstanding): allocated
 * when the VERIFY goes, freed when it ends (answered, failed or timed
 * out), so that an idle tunnel holds neither this nor the timer's event
 * (~190 bytes of heap per tunnel). */
struct session_verify {
	struct event *timer;          /* its deadline (verify_timeout_ms) */
	uint8_t nonce[FRAME_VERIFY_NONCE_LEN];
	int64_t sent_ms;              /* gateway_now_ms when it went */
};

struct session {
	struct gateway *gw;
	struct loop *loop;            /* the loop it lives on (NULL: off any
	                               * loop, unit tests): its counts */
	const struct session_transport *io;   /* the tunnel (tunnel.c) */
	void *t;                              /* io's argument */
	enum session_phase phase;
	uint32_t version;             /* negotiated protocol version */
	/* Flags and small counts together: one struct session per tunnel
	 * (288 bytes, a 304-byte malloc chunk). */
	bool counted_handshake;       /* holds a slot (gateway_handshake_take) */
	bool counted_source;          /* and its source's share */
	bool hello_seen;              /* past the HELLO deadline's check */
	uint8_t deadline_passes;      /* extra passes the deadline now due
	                               * gave unread input (at most
	                               * SESSION_DEADLINE_PASSES) */
	bool closed;                  /* session_closed runs: it is going away */
	bool key_asked;               /* the agent asked for one (once a tunnel) */
	struct session_hs *hs;        /* until PHASE_ESTABLISHED, then NULL */
	struct session_agent agent;   /* PHASE_ESTABLISHED: the agent */
	/* Each exists only while it may fire: an idle established tunnel
	 * holds neither (docs/0018). */
	struct event *handshake_timer; /* until PHASE_ESTABLISHED */
	struct session_verify *verify; /* while a VERIFY is outstanding */
	struct mux *mux;              /* PHASE_ESTABLISHED: the agent's streams */
	int64_t began_ms;             /* monotonic: the handshake began */
	struct session_job *job;      /* the store call it waits for, or NULL */
	uint8_t *held;                /* a frame that came while it waits */
	size_t held_len;
	struct session_rotation *rot; /* a key rotation under way, or NULL */
	struct agentdir_place dir_at; /* its entry in gw->agents (generation 0:
	                               * none yet) */
};

/* What a session asks of the store thread. */
enum job_kind {
	JOB_TOKEN_GET,         /* in: id; out: token */
	JOB_AGENT_GET,         /* in: id; out: agent */
	JOB_REGISTER,          /* in: id (the import token), node, pubkey,
	                        * and with goes_on the version; out: agent,
	                        * created, started */
	JOB_TRANSITION,        /* in: id (the agent), ev, reason; out: agent */
	JOB_SEEN,              /* in: id (the agent), now, and with
	                        * has_reason its version in node */
	JOB_KEY_COMMIT,        /* in: id, pubkey (the staged key); out: agent */
	JOB_KEY_ABANDON,       /* in: id, pubkey (the staged key) */
	JOB_URLS,              /* in: id (the agent), urls */
	JOB_CAS,               /* in: id (the agent), urls holding its CAs */
};

/*
 * One store call and its continuation.  The store thread reads the inputs
 * and writes the results; the loop moves the agent counts by what the call
 * changed (moved_from/moved_to), then calls then(s, job) with the results,
 * unless the session went first (s NULL: the job is only freed).
 */
struct session_job {
	struct session *s;
	void (*then)(struct session *s, struct session_job *j);
	enum job_kind kind;
	char id[STORE_ID_MAX + 1];
	char node[STORE_NAME_MAX + 1];
	uint8_t pubkey[32];
	uint8_t sig[FRAME_SIG_LEN];   /* AUTH's signature, checked in then */
	uint8_t next_pub[FRAME_PUBKEY_LEN]; /* AUTH's pending key, or zero */
	uint8_t next_sig[FRAME_SIG_LEN];
	enum agent_event ev;
	char reason[STORE_ERROR_MAX + 1];
	char urls[STORE_URLS_MAX + 1];  /* JOB_URLS; JOB_CAS: the CAs */
	bool has_reason;
	int64_t now;
	int rc;
	char err[STORE_ERROR_MAX + 1];
	struct store_token token;
	struct store_agent agent;
	bool created;
	bool goes_on;                 /* JOB_REGISTER: the tunnel goes on as
	                               * the agent: store_agent_register_on */
	char version[FRAME_ID_MAX + 1]; /* with goes_on: HELLO's release */
	bool started;                 /* out: the registration also started
	                               * its verification and recorded it
	                               * seen (agent: as verifying) */
	bool moved;                   /* an agent changed state (or was made): */
	int moved_from, moved_to;     /* metrics_agent_moved's (-1: new) */
};

static void session_verify_fail(struct session *s, const char *reason);

static const char *
tr_peer(const struct session *s)
{
	return s->io->peer(s->t);
}

/* The verification's state goes (NULL: none): its timer with it. */
static void
session_verify_free(struct session *s)
{
	if (s->verify != NULL) {
		event_free(s->verify->timer);
		OPENSSL_cleanse(s->verify, sizeof(*s->verify));
		free(s->verify);
		s->verify = NULL;
	}
}

static void
session_hs_free(struct session *s)
{
	if (s->hs != NULL) {
		OPENSSL_cleanse(s->hs, sizeof(*s->hs));
		free(s->hs);
		s->hs = NULL;
	}
}

static void session_source_put(struct session *s);

/* The loop this session lives on (its index: 0 off any loop). */
static unsigned
session_loop_index(void)
{
	const struct loop *l = loop_self();

	return l != NULL ? l->index : 0;
}

struct hub *
session_hub(struct gateway *gw)
{
	const struct loop *l = loop_self();

	return l != NULL && l->gw == gw && l->hub != NULL ? l->hub : gw->hub;
}

/* The calling loop's base: a session's timers and multiplexer live on
 * the loop its tunnel landed on (gw->base off any loop). */
static struct event_base *
session_base(struct gateway *gw)
{
	const struct loop *l = loop_self();

	return l != NULL && l->gw == gw ? l->base : gw->base;
}

/* The hub of s's own loop: the calling loop's while s lives; at stop a
 * loop's leftovers may be closed on loop 0 once that loop was joined
 * (server.c), and still leave their own loop's hub. */
static struct hub *
session_own_hub(struct session *s)
{
	return s->loop != NULL && s->loop->hub != NULL ? s->loop->hub :
	    s->gw->hub;
}

/* The counts its loop shows the others (loop.h: where /v1/connect lands,
 * tether_loop_tunnels). */
static void
session_count_handshake(struct session *s, int delta)
{
	if (s->loop != NULL)
		atomic_fetch_add(&s->loop->nhandshakes, (unsigned)delta);
}

static void
session_count_tunnels(struct session *s)
{
	if (s->loop != NULL)
		atomic_store(&s->loop->ntunnels,
		    (unsigned)hub_count(session_own_hub(s)));
}

/* A broadcast over every loop's sessions (session_foreach_everywhere). */
struct foreach_all {
	struct gateway *gw;
	void (*fn)(struct session *s, void *arg);
	void *arg;
};

static void
foreach_here(void *arg)
{
	struct foreach_all *a = arg;

	hub_foreach(session_hub(a->gw), a->fn, a->arg);
}

size_t
session_foreach_everywhere(struct gateway *gw,
    void (*fn)(struct session *s, void *arg), void *arg)
{
	size_t held = gw->agents != NULL ? agentdir_count(gw->agents) : 0;
	struct foreach_all *a;

	if (gw->loops == NULL || (a = malloc(sizeof(*a))) == NULL) {
		/* No loops (unit tests), or out of memory: this loop's own. */
		hub_foreach(session_hub(gw), fn, arg);
		return gw->loops == NULL ? hub_count(session_hub(gw)) : held;
	}
	a->gw = gw;
	a->fn = fn;
	a->arg = arg;
	(void)loop_broadcast(gw->loops, gw->nloops, foreach_here, a, free);
	return held;
}

/* Tells the process's directory what may have changed: the node and
 * whether the agent may carry streams (a no-op before WELCOME added it, or
 * once a newer tunnel took the entry over).  One agentdir lookup. */
static void
session_dir_sync(struct session *s)
{
	if (s->dir_at.generation != 0)
		(void)agentdir_update(s->gw->agents, s->agent.id, s->dir_at,
		    s->agent.node, session_is_active(s));
}

static void
session_set_phase(struct session *s, enum session_phase next)
{
	debug("tunnel phase", KV_S("peer", tr_peer(s)),
	    KV_S("from", phase_names[s->phase]), KV_S("to", phase_names[next]));
	s->phase = next;
	session_dir_sync(s);
	if (next >= PHASE_ESTABLISHED && s->counted_handshake) {
		s->counted_handshake = 0;
		session_source_put(s);
		session_count_handshake(s, -1);
		gateway_handshake_free(s->gw, s->began_ms);
		gateway_handshake_ended(s->gw);
		if (s->handshake_timer != NULL)
			evtimer_del(s->handshake_timer);
	}
	/* Established for good: its timer is not needed again (not freed
	 * on the way to CLOSING, which its own callback may take). */
	if (next == PHASE_ESTABLISHED && s->handshake_timer != NULL) {
		event_free(s->handshake_timer);
		s->handshake_timer = NULL;
	}
	if (next == PHASE_ESTABLISHED)
		session_hs_free(s);
}

void
session_kick(struct session *s, const char *code, const char *reason)
{
	struct frame f;

	if (s->phase == PHASE_CLOSING)
		return;
	frame_make_error(&f, code, reason);
	/* "Come back later" (docs/interface.md, "Refusals"): and when. */
	if (strcmp(code, "unavailable") == 0 || strcmp(code, "timeout") == 0)
		f.u.error.retry_after_ms = gateway_retry_after_ms(s->gw, 0, 0, 0);
	s->io->send(s->t, &f);
	session_set_phase(s, PHASE_CLOSING);
	s->io->close(s->t);
}

void
session_drain(struct session *s, const char *reason, uint32_t jitter_ms)
{
	struct frame f;

	if (s->phase != PHASE_ESTABLISHED)
		return;
	memset(&f, 0, sizeof(f));
	f.type = FRAME_RECONNECT;
	snprintf(f.u.reconnect.reason, sizeof(f.u.reconnect.reason), "%s", reason);
	f.u.reconnect.jitter_ms = jitter_ms;
	/* Somewhere to go: the agent keeps this tunnel until its new one is
	 * up, even when a redial lands back here (docs/0017). */
	f.u.reconnect.elsewhere = presence_others_live(s->gw) ? 1 : 0;
	s->io->send(s->t, &f);
	info("drain: agent told to reconnect elsewhere", KV_S("agent", s->agent.id),
	    KV_U("streams", mux_stream_count(s->mux)), KV_U("jitter_ms", jitter_ms),
	    KV_U("elsewhere", f.u.reconnect.elsewhere));
}

void
session_protocol_error(struct session *s, const char *code, const char *reason)
{
	warn("tunnel protocol error", KV_S("peer", tr_peer(s)),
	    KV_S("phase", phase_names[s->phase]), KV_S("code", code),
	    KV_S("reason", reason));
	if (s->counted_handshake)
		metrics_handshake(s->phase == PHASE_AWAIT_REGISTER, code);
	session_kick(s, code, reason);
}

/*
 * The store could not write what this session needed (a registration, an
 * agent's state): the agent is told why and reconnects with backoff, which
 * tries again, so a full disk delays agents and loses none.
 */
static void
session_store_failed(struct session *s, const char *what, int rc,
    const char *err)
{
	char reason[160];

	error("tunnel: cannot store", KV_S("peer", tr_peer(s)),
	    KV_S("what", what),
	    KV_S("node", s->hs != NULL ? s->hs->hello.node : s->agent.node),
	    KV_S("err", err));
	snprintf(reason, sizeof(reason), "the gateway could not store %s%s", what,
	    rc == STORE_FULL ? ": its storage is full; try again later" : "");
	session_kick(s, "unavailable", reason);
}

/*
 * The store could not be read for this handshake (unreachable, failing, or
 * its queue full): nothing is known about the credential, so nothing is
 * refused for good.  The agent is told `unavailable` and retries with its
 * backoff (docs/interface.md, "Refusals").
 */
static void
session_store_unreadable(struct session *s, const char *what, const char *err)
{
	char reason[160];

	warn("tunnel: cannot read the store: the agent will retry",
	    KV_S("peer", tr_peer(s)), KV_S("what", what),
	    KV_S("node", s->hs != NULL ? s->hs->hello.node : s->agent.node),
	    KV_S("err", err));
	if (s->counted_handshake)
		metrics_handshake(s->phase == PHASE_AWAIT_REGISTER, "unavailable");
	snprintf(reason, sizeof(reason), "the gateway cannot read its store "
	    "(%s): try again later", what);
	session_kick(s, "unavailable", reason);
}

/* The handshake no longer counts against its source's share. */
static void
session_source_put(struct session *s)
{
	if (!s->counted_source)
		return;
	s->counted_source = 0;
	gateway_handshake_source_put(s->gw, tr_peer(s));
}

/*
 * A deadline is judged after what came in time was read.  A loop back from
 * a stall may run the expired timer before the socket's read (epoll timed
 * out while the process was stopped: the bytes show in the next pass),
 * and the socket's read defers the session's read callback (every
 * bufferevent does) to the pass after it: a HELLO that came in time would
 * be called missing.  So while input is pending the timer is re-armed for
 * 0 ms, up to SESSION_DEADLINE_PASSES times per deadline (the socket's
 * read, the deferred callback, one spare), and 1 returned; a peer that
 * keeps trickling bytes gains those passes, no time.
 */
#define SESSION_DEADLINE_PASSES 3

static int
session_deadline_grace(struct session *s)
{
	static const struct timeval now = { 0, 0 };

	if (s->deadline_passes >= SESSION_DEADLINE_PASSES ||
	    s->io->input_pending == NULL || !s->io->input_pending(s->t))
		return 0;
	s->deadline_passes++;
	evtimer_add(s->handshake_timer, &now);
	return 1;
}

static void
session_handshake_timeout(evutil_socket_t fd, short what, void *arg)
{
	struct session *s = arg;
	struct gateway_limits *l = &s->gw->limits;
	char reason[96];

	if (session_deadline_grace(s))
		return;
	/* First the HELLO deadline (--hello-timeout): a silent upgrade gives
	 * its handshake slot back within it; then the rest of the whole. */
	if (!s->hello_seen && s->phase == PHASE_AWAIT_HELLO) {
		snprintf(reason, sizeof(reason), "no HELLO within %u ms",
		    l->hello_timeout_ms < l->handshake_timeout_ms ?
		    l->hello_timeout_ms : l->handshake_timeout_ms);
		session_protocol_error(s, "timeout", reason);
		return;
	}
	if (!s->hello_seen && l->hello_timeout_ms < l->handshake_timeout_ms) {
		struct timeval tv = runtime_ms_timeval(l->handshake_timeout_ms -
		    l->hello_timeout_ms);

		s->hello_seen = 1;
		s->deadline_passes = 0;    /* the whole's own extra passes */
		evtimer_add(s->handshake_timer, &tv);
		return;
	}
	snprintf(reason, sizeof(reason), "handshake not finished within %u ms",
	    s->gw->limits.handshake_timeout_ms);
	session_protocol_error(s, "timeout", reason);
}

static void
session_verify_timeout(evutil_socket_t fd, short what, void *arg)
{
	struct session *s = arg;
	char reason[96];

	snprintf(reason, sizeof(reason), "no verification reply within %u ms",
	    s->gw->limits.verify_timeout_ms);
	session_verify_fail(s, reason);
}

struct session *
session_new(struct gateway *gw, const struct session_transport *io, void *t)
{
	struct session *s = calloc(1, sizeof(*s));
	struct timeval tv;

	if (s == NULL)
		return NULL;
	s->gw = gw;
	s->io = io;
	s->t = t;
	s->phase = PHASE_AWAIT_HELLO;
	s->hs = calloc(1, sizeof(*s->hs));
	s->handshake_timer = evtimer_new(session_base(gw), session_handshake_timeout, s);
	if (s->hs == NULL || s->handshake_timer == NULL) {
		if (s->handshake_timer != NULL)
			event_free(s->handshake_timer);
		free(s->hs);
		free(s);
		return NULL;
	}
	tv = runtime_ms_timeval(gw->limits.hello_timeout_ms <
	    gw->limits.handshake_timeout_ms ? gw->limits.hello_timeout_ms :
	    gw->limits.handshake_timeout_ms);
	evtimer_add(s->handshake_timer, &tv);
	/* The route (tunnel.c) took both under their caps: the session
	 * gives them back when its handshake ends. */
	s->counted_handshake = 1;
	s->counted_source = 1;
	s->began_ms = runtime_monotonic_ms();
	s->loop = loop_self() != NULL && loop_self()->gw == gw ? loop_self() : NULL;
	session_count_handshake(s, 1);
	debug("tunnel connected", KV_S("peer", io->peer(t)));
	return s;
}

size_t
session_max_message(const struct session *s)
{
	if (s->phase == PHASE_ESTABLISHED)
		return s->gw->limits.max_frame_bytes;
	return s->gw->limits.max_handshake_frame;
}

size_t
session_max_queue(const struct session *s)
{
	/* The multiplexer exists from WELCOME on: authenticated. */
	if (s->mux != NULL)
		return s->gw->limits.max_queue_bytes;
	return s->gw->limits.max_handshake_queue;
}

static void
session_send(struct session *s, const struct frame *f)
{
	s->io->send(s->t, f);
}

/* FNV-1a, 64 bits: tells a URL list from the one recorded without
 * keeping it (a few hundred bytes per tunnel). */
static uint64_t
urls_hash(const char *urls)
{
	uint64_t h = 0xcbf29ce484222325ULL;

	for (const unsigned char *p = (const unsigned char *)urls; *p != '\0'; p++)
		h = (h ^ *p) * 0x100000001b3ULL;
	return h;
}

/* Keeps what the tunnel needs of the agent's record a. */
static void
session_keep_agent(struct session *s, const struct store_agent *a)
{
	snprintf(s->agent.id, sizeof(s->agent.id), "%s", a->id);
	snprintf(s->agent.cluster, sizeof(s->agent.cluster), "%s", a->cluster);
	snprintf(s->agent.node, sizeof(s->agent.node), "%s", a->node);
	s->agent.state = a->state;
	s->agent.urls_known = a->urls_known;
	s->agent.urls_hash = urls_hash(a->urls);
	s->agent.cas_known = a->cas_known;
	s->agent.cas_hash = urls_hash(a->cas);
	session_dir_sync(s);
}

/* Tells the agent its state, from its record a (the one just kept). */
static void
session_send_state(struct session *s, const struct store_agent *a)
{
	struct frame f;

	memset(&f, 0, sizeof(f));
	f.type = FRAME_STATE;
	snprintf(f.u.state.state, sizeof(f.u.state.state), "%s",
	    agent_state_name(a->state));
	snprintf(f.u.state.last_error, sizeof(f.u.state.last_error), "%s",
	    a->last_error);
	session_send(s, &f);
}

/* ---- store calls, on the store thread ---- */

static void
job_work(struct store *st, void *arg)
{
	struct session_job *j = arg;
	enum agent_state was = AGENT_STATE_ENTRIES;

	switch (j->kind) {
	case JOB_TOKEN_GET:
		j->rc = store_token_get(st, j->id, &j->token);
		break;
	case JOB_AGENT_GET:
		j->rc = store_agent_get(st, j->id, &j->agent);
		break;
	case JOB_REGISTER:
		if (j->goes_on)
			j->rc = store_agent_register_on(st, j->id, j->node,
			    j->pubkey, j->version, j->now, &j->agent, &j->created,
			    &j->started, j->err, sizeof(j->err));
		else
			j->rc = store_agent_register(st, j->id, j->node,
			    j->pubkey, j->now, &j->agent, &j->created, j->err,
			    sizeof(j->err));
		j->moved = j->rc == STORE_OK && j->created;
		j->moved_from = -1;
		j->moved_to = (int)j->agent.state;
		break;
	case JOB_URLS:
		j->rc = store_agent_urls(st, j->id, j->urls, j->err, sizeof(j->err));
		if (j->rc != STORE_OK)
			warn("tunnel: cannot record the agent's URL list",
			    KV_S("agent", j->id), KV_S("err", j->err));
		break;
	case JOB_CAS:
		j->rc = store_agent_cas(st, j->id, j->urls, j->err, sizeof(j->err));
		if (j->rc != STORE_OK)
			warn("tunnel: cannot record the CAs the agent holds",
			    KV_S("agent", j->id), KV_S("err", j->err));
		break;
	case JOB_SEEN:
		j->rc = store_agent_seen(st, j->id, j->has_reason ? j->node : NULL,
		    j->now, j->err, sizeof(j->err));
		if (j->rc != STORE_OK)
			warn("tunnel: cannot record when the agent was seen",
			    KV_S("agent", j->id), KV_S("err", j->err));
		break;
	case JOB_KEY_COMMIT:
		j->rc = store_agent_key_commit(st, j->id, j->pubkey, j->now,
		    &j->agent, j->err, sizeof(j->err));
		break;
	case JOB_KEY_ABANDON:
		j->rc = store_agent_key_abandon(st, j->id, j->pubkey, j->err,
		    sizeof(j->err));
		break;
	case JOB_TRANSITION:
		j->rc = store_agent_transition(st, j->id, j->ev,
		    j->has_reason ? j->reason : NULL, j->now, &j->agent, &was,
		    j->err, sizeof(j->err));
		j->moved = j->rc == STORE_OK;
		j->moved_from = (int)was;
		j->moved_to = (int)j->agent.state;
		break;
	}
	/* The lookups log their failure themselves and return no reason. */
	if ((j->kind == JOB_TOKEN_GET || j->kind == JOB_AGENT_GET) &&
	    j->rc != STORE_OK && j->rc != STORE_NOTFOUND)
		snprintf(j->err, sizeof(j->err), "the store failed to answer");
}

static void session_release_held(struct session *s);

static void
job_done(void *arg)
{
	struct session_job *j = arg;
	struct session *s = j->s;

	if (j->moved)
		metrics_agent_moved(j->moved_from, j->moved_to);
	if (s != NULL) {
		s->job = NULL;
		j->then(s, j);
		session_release_held(s);
	}
	OPENSSL_cleanse(j, sizeof(*j));
	free(j);
}

static struct session_job *
job_new(enum job_kind kind, const char *id)
{
	struct session_job *j = calloc(1, sizeof(*j));

	if (j == NULL)
		return NULL;
	j->kind = kind;
	j->rc = STORE_ERR;        /* what a job that never ran reports */
	snprintf(j->err, sizeof(j->err), "the gateway is stopping");
	snprintf(j->id, sizeof(j->id), "%s", id);
	j->now = gateway_now();
	return j;
}

static void session_store_failed(struct session *s, const char *what, int rc,
    const char *err);

/*
 * Where a job runs.  An import token's lookup and a registration need no
 * order with anything else (the store's transaction keeps a registration
 * exact against any other, as it does across replicas), so they go to the
 * pool when there is one (--store-pool, docs/0035), to whichever
 * connection comes free.  An agent's own calls (its lookup, state changes,
 * last seen, URL and CA lists, key rotation) keep their order among
 * themselves: a tunnel that reconnects reads what its previous tunnel's
 * last change left.  With a pool they go to the connection the agent's id
 * picks (store_worker_submit_keyed): one agent's in order, agents beside
 * one another (docs/0041).  Without one, all on the ordered store thread.
 * Returns the worker; *key is the agent id to order by, or NULL.
 */
static struct store_worker *
job_worker(struct gateway *gw, enum job_kind kind, const char *id,
    const char **key)
{
	*key = NULL;
	if (gw->storep == NULL)
		return gw->storew;
	if (kind != JOB_TOKEN_GET && kind != JOB_REGISTER)
		*key = id;
	return gw->storep;
}

/*
 * Sends j to the store thread; then(s, j) follows on the loop.  s NULL: no
 * one waits (the session is closing), the call is made all the same.  On a
 * full queue the session is told to come back later.
 */
static void
job_submit(struct gateway *gw, struct session *s, struct session_job *j,
    void (*then)(struct session *, struct session_job *), const char *what)
{
	struct store_worker *w;
	const char *key;

	if (j == NULL) {
		if (s != NULL)
			session_store_failed(s, what, STORE_ERR, "out of memory");
		return;
	}
	j->s = s;
	j->then = then;
	/* job_work writes its answers into j and reads none back: it may run
	 * in a group, and again alone if the group cannot commit. */
	w = job_worker(gw, j->kind, j->id, &key);
	if (store_worker_submit_keyed(w, key, true, job_work, job_done, j) == -1) {
		OPENSSL_cleanse(j, sizeof(*j));
		free(j);
		if (s != NULL)
			session_store_failed(s, what, STORE_ERR,
			    "too many store calls waiting");
		else
			warn("tunnel: store queue full; not recorded (healed "
			    "later: docs/0016)", KV_S("what", what));
		return;
	}
	if (s != NULL)
		s->job = j;
}

/* ---- phase handlers ---- */

static uint32_t
pick_version(const struct frame_hello *h)
{
	uint32_t best = 0;

	for (size_t i = 0; i < h->nversions; i++)
		if (h->versions[i] <= TETHER_PROTOCOL_VERSION && h->versions[i] > best)
			best = h->versions[i];
	return best;
}

static void
on_hello(struct session *s, const struct frame *in)
{
	struct frame out;

	s->hs->hello = in->u.hello;
	s->version = pick_version(&s->hs->hello);
	if (s->version == 0) {
		char reason[128];
		snprintf(reason, sizeof(reason), "no common protocol version: "
		    "gateway speaks 1..%d", TETHER_PROTOCOL_VERSION);
		session_protocol_error(s, "version", reason);
		return;
	}
	memset(&out, 0, sizeof(out));
	out.type = FRAME_CHALLENGE;
	out.u.challenge.version = s->version;
	if (random_bytes(s->hs->nonce, sizeof(s->hs->nonce)) != 0) {
		session_protocol_error(s, "internal", "no randomness for a challenge");
		return;
	}
	memcpy(out.u.challenge.nonce, s->hs->nonce, sizeof(s->hs->nonce));
	session_send(s, &out);
	session_set_phase(s, PHASE_AWAIT_AUTH);
}

/* The AUTH transcript of this handshake into msg (AUTH_TRANSCRIPT_MAX);
 * its length, or 0.  Each nonce proves one AUTH only: it is wiped. */
static size_t
session_transcript(struct session *s, uint8_t *msg)
{
	size_t len;

	len = auth_transcript(msg, AUTH_TRANSCRIPT_MAX, s->version,
	    (int)s->hs->hello.cred, s->hs->hello.id, s->hs->hello.node,
	    s->hs->nonce);
	OPENSSL_cleanse(s->hs->nonce, sizeof(s->hs->nonce));
	return len;
}

/* sig verifies with pub over this connection's transcript.  The nonce is
 * wiped, unless keep (an import token's proof: REGISTER's key proof signs
 * the same transcript, docs/0044). */
static bool
session_check_sig(struct session *s, const uint8_t pub[32], const uint8_t sig[64],
    bool keep)
{
	uint8_t msg[AUTH_TRANSCRIPT_MAX], nonce[FRAME_NONCE_LEN];
	size_t len;
	bool ok;

	memcpy(nonce, s->hs->nonce, sizeof(nonce));
	len = session_transcript(s, msg);
	ok = len > 0 && agentkey_verify(pub, msg, len, sig);
	if (keep)
		memcpy(s->hs->nonce, nonce, sizeof(nonce));
	OPENSSL_cleanse(nonce, sizeof(nonce));
	OPENSSL_cleanse(msg, sizeof(msg));
	return ok;
}

static void auth_import_found(struct session *s, struct session_job *j);

static void
auth_import(struct session *s, const struct frame *in)
{
	struct session_job *j = job_new(JOB_TOKEN_GET, s->hs->hello.id);

	if (j != NULL)
		memcpy(j->sig, in->u.auth.sig, sizeof(j->sig));
	job_submit(s->gw, s, j, auth_import_found, "the token lookup");
}

static void
auth_import_found(struct session *s, struct session_job *j)
{
	const char *why;

	if (j->rc != STORE_OK && j->rc != STORE_NOTFOUND) {
		session_store_unreadable(s, "the token lookup", j->err);
		return;
	}
	if (j->rc == STORE_OK)
		s->hs->import = j->token;
	if (j->rc == STORE_NOTFOUND || s->hs->import.kind != TOKEN_IMPORT) {
		session_protocol_error(s, "token_unknown", "unknown import token");
		return;
	}
	if (!session_check_sig(s, s->hs->import.verifier, j->sig, true)) {
		session_protocol_error(s, "auth_refused", "import token proof does not verify");
		return;
	}
	if (s->hs->import.revoked) {
		session_protocol_error(s, "token_revoked", "import token revoked");
		return;
	}
	/* Expiry only: the use count is the register transaction's to check,
	 * since a node whose REGISTERED was lost (the gateway or the node died
	 * after the commit) retries with the same key, spends no use, and must
	 * get its agent back even when that used the token up. */
	why = token_unusable_reason(s->hs->import.expires_at, -1, gateway_now());
	if (why != NULL) {
		char reason[64];
		snprintf(reason, sizeof(reason), "import token %s", why);
		session_protocol_error(s, "token_expired", reason);
		return;
	}
	metrics_handshake(0, "ok");
	session_set_phase(s, PHASE_AWAIT_REGISTER);
}

static void session_welcome(struct session *s,
    const struct store_agent *started);

/* ---- streams ---- */

/* Streams are opened by the gateway only. */
static void
agent_open_refused(struct mux *m, struct mux_stream *st, const struct frame_open *req,
    void *arg)
{
	mux_stream_refuse(st, "not_allowed", "agents cannot open streams");
}

static const struct mux_handlers tunnel_mux_handlers = {
	.on_open = agent_open_refused,
};

struct mux_stream *
session_open_stream(struct session *s, const char *principal, const char *target,
    const char *service, const struct mux_stream_handlers *h, void *arg,
    char *err, size_t errlen)
{
	struct budget_account *who;
	struct mux_stream *st;
	struct frame_open req;

	if (s->phase != PHASE_ESTABLISHED || s->mux == NULL ||
	    s->agent.state != AGENT_ACTIVE) {
		snprintf(err, errlen, "agent %s is not active", s->agent.id);
		return NULL;
	}
	who = shares_principal(s->gw, principal);
	if (who == NULL) {
		snprintf(err, errlen, "out of memory");
		return NULL;
	}
	frame_open_init(&req, target, service);
	st = mux_open(s->mux, who, &req, h, arg);
	shares_unpin(s->gw, who);      /* the stream's charge holds it now */
	if (st == NULL) {
		snprintf(err, errlen, "agent %s: %s", s->agent.id, mux_refusal(s->mux));
		debug("stream refused", KV_S("who", principal), KV_S("agent", s->agent.id),
		    KV_S("reason", mux_refusal(s->mux)));
	}
	return st;
}

void
session_on_drain(struct session *s)
{
	if (s->mux != NULL)
		mux_on_drain(s->mux);
}

const char *
session_node(const struct session *s)
{
	return s->agent.node;
}

const char *
session_cluster(const struct session *s)
{
	return s->agent.cluster;
}

const char *
session_agent_id(const struct session *s)
{
	return s->agent.id;
}

int
session_is_active(const struct session *s)
{
	return s->phase == PHASE_ESTABLISHED && s->agent.state == AGENT_ACTIVE;
}

int
session_verify_outstanding(const struct session *s)
{
	return s->verify != NULL;
}

struct session *
session_here(struct gateway *gw, const struct agentdir_entry *e)
{
	struct session *s;

	if (e->at.loop != session_loop_index())
		return NULL;
	s = hub_find(session_hub(gw), e->agent_id);
	return s != NULL && s->dir_at.generation == e->at.generation ? s : NULL;
}

bool
session_skips_unknown_frames(const struct session *s)
{
	return s->phase == PHASE_ESTABLISHED && s->agent.skips_unknown;
}

static void auth_agent_found(struct session *s, struct session_job *j);

static void
auth_agent(struct session *s, const struct frame *in)
{
	struct session_job *j = job_new(JOB_AGENT_GET, s->hs->hello.id);

	if (j != NULL) {
		memcpy(j->sig, in->u.auth.sig, sizeof(j->sig));
		memcpy(j->next_pub, in->u.auth.next_pubkey, sizeof(j->next_pub));
		memcpy(j->next_sig, in->u.auth.next_sig, sizeof(j->next_sig));
	}
	job_submit(s->gw, s, j, auth_agent_found, "the agent lookup");
}

static bool
all_zero(const uint8_t *b, size_t n)
{
	uint8_t acc = 0;

	for (size_t i = 0; i < n; i++)
		acc |= b[i];
	return acc == 0;
}

static bool
same_key(const uint8_t a[32], const uint8_t b[32])
{
	return CRYPTO_memcmp(a, b, 32) == 0;
}

/* Which of its keys an agent proved, and what the store is to do about a
 * staged one (docs/interface.md, "Node key rotation"). */
enum auth_key { AUTH_KEY_NONE, AUTH_KEY_CURRENT, AUTH_KEY_NEXT };
enum key_settle { SETTLE_NOTHING, SETTLE_COMMIT, SETTLE_ABANDON };

/*
 * An agent with a pending key signs AUTH with both: the pending one wins
 * when the store has it (staged, or already swapped in), and a staged key
 * is committed the first time the agent proves it, or abandoned when the
 * agent proves its current key without offering the staged one.  So after
 * a kill at any step one of the node's keys is accepted, and the next
 * handshake leaves exactly one valid.
 */
static enum auth_key
auth_which_key(struct session *s, const struct session_job *j,
    const struct store_agent *a, enum key_settle *settle)
{
	uint8_t msg[AUTH_TRANSCRIPT_MAX];
	size_t len = session_transcript(s, msg);
	bool offered = !all_zero(j->next_pub, sizeof(j->next_pub));
	bool staged_offered = offered && a->has_next &&
	    same_key(j->next_pub, a->next_pubkey);
	enum auth_key k = AUTH_KEY_NONE;

	*settle = SETTLE_NOTHING;
	if (len == 0)
		return AUTH_KEY_NONE;
	if ((staged_offered || (offered && same_key(j->next_pub, a->pubkey))) &&
	    agentkey_verify(j->next_pub, msg, len, j->next_sig)) {
		k = AUTH_KEY_NEXT;
		if (staged_offered)
			*settle = SETTLE_COMMIT;
	} else if (agentkey_verify(a->pubkey, msg, len, j->sig)) {
		k = AUTH_KEY_CURRENT;
		if (a->has_next)
			*settle = SETTLE_ABANDON;
	} else if (a->has_next && agentkey_verify(a->next_pubkey, msg, len, j->sig)) {
		/* It switched to the staged key; KEY_SWITCHED was lost. */
		k = AUTH_KEY_CURRENT;
		*settle = SETTLE_COMMIT;
	}
	OPENSSL_cleanse(msg, sizeof(msg));
	return k;
}

static void
auth_key_settled(struct session *s, struct session_job *j)
{
	if (j->rc == STORE_REFUSED) {
		session_protocol_error(s, "auth_refused", j->err);
		return;
	}
	if (j->rc != STORE_OK) {
		session_store_failed(s, "the agent's key", j->rc, j->err);
		return;
	}
	if (j->kind == JOB_KEY_COMMIT) {
		info("agent key rotated", KV_S("agent", s->agent.id),
		    KV_S("when", "at its handshake"));
		s->hs->key_rotate = j->agent.key_rotate;
	} else {
		info("agent key rotation abandoned: the agent kept its key",
		    KV_S("agent", s->agent.id));
	}
	session_welcome(s, NULL);
}

static void
auth_agent_found(struct session *s, struct session_job *j)
{
	enum key_settle settle;
	enum auth_key key;
	struct session_job *k;

	if (j->rc == STORE_NOTFOUND) {
		session_protocol_error(s, "auth_refused", "unknown agent");
		return;
	}
	if (j->rc != STORE_OK) {
		session_store_unreadable(s, "the agent lookup", j->err);
		return;
	}
	session_keep_agent(s, &j->agent);
	if ((key = auth_which_key(s, j, &j->agent, &settle)) == AUTH_KEY_NONE) {
		session_protocol_error(s, "auth_refused", "agent signature does not verify");
		return;
	}
	if (s->agent.state == AGENT_REVOKED) {
		session_protocol_error(s, "revoked", "agent revoked: its credential is refused");
		return;
	}
	if (strcmp(s->agent.node, s->hs->hello.node) != 0) {
		session_protocol_error(s, "auth_refused", "node name does not match the agent's");
		return;
	}
	snprintf(s->hs->key, sizeof(s->hs->key), "%s",
	    key == AUTH_KEY_NEXT ? "next" : "current");
	s->hs->key_rotate = j->agent.key_rotate;
	if (settle == SETTLE_NOTHING) {
		session_welcome(s, NULL);
		return;
	}
	k = job_new(settle == SETTLE_COMMIT ? JOB_KEY_COMMIT : JOB_KEY_ABANDON,
	    s->agent.id);
	if (k != NULL)
		memcpy(k->pubkey, j->agent.next_pubkey, sizeof(k->pubkey));
	job_submit(s->gw, s, k, auth_key_settled, "the agent's key");
}

static void
on_auth(struct session *s, const struct frame *in)
{
	if (s->hs->hello.cred == FRAME_CRED_IMPORT)
		auth_import(s, in);
	else
		auth_agent(s, in);
}

static void on_registered(struct session *s, struct session_job *j);

static void
on_register(struct session *s, const struct frame *in)
{
	struct session_job *j;

	if (strcmp(in->u.reg.node, s->hs->hello.node) != 0) {
		session_protocol_error(s, "protocol", "REGISTER node differs from HELLO");
		return;
	}
	/* A newer agent proves the key it registers and goes on as the
	 * agent here instead of redialling with it (docs/0044); an older one
	 * sends no proof, and the nonce has done its job either way. */
	if (!all_zero(in->u.reg.key_sig, sizeof(in->u.reg.key_sig))) {
		if (!session_check_sig(s, in->u.reg.pubkey, in->u.reg.key_sig, false)) {
			session_protocol_error(s, "auth_refused",
			    "REGISTER's key proof does not verify");
			return;
		}
		s->hs->goes_on = true;
	}
	OPENSSL_cleanse(s->hs->nonce, sizeof(s->hs->nonce));
	if ((j = job_new(JOB_REGISTER, s->hs->import.id)) != NULL) {
		snprintf(j->node, sizeof(j->node), "%s", in->u.reg.node);
		memcpy(j->pubkey, in->u.reg.pubkey, sizeof(j->pubkey));
		/* Going on, the tunnel's first writes (the start of the
		 * verification, last seen) go with the registration
		 * (docs/0045). */
		j->goes_on = s->hs->goes_on;
		snprintf(j->version, sizeof(j->version), "%s",
		    s->hs->hello.version);
	}
	job_submit(s->gw, s, j, on_registered, "the registration");
}

static void
on_registered(struct session *s, struct session_job *j)
{
	struct frame out;
	struct store_agent a = j->agent;
	bool created = j->created;

	if (j->rc == STORE_REFUSED) {
		session_protocol_error(s, "register_refused", j->err);
		return;
	}
	if (j->rc != STORE_OK) {
		session_store_failed(s, "the registration", j->rc, j->err);
		return;
	}
	if (a.state == AGENT_REVOKED) {
		session_protocol_error(s, "revoked", "this node's key belongs to a revoked "
		    "agent: join again with a fresh state directory");
		return;
	}
	/* Started (docs/0045): registered in enroll, then verifying in the
	 * same transaction; the agent hears both, one after the other. */
	if (j->started)
		a.state = AGENT_ENROLL;
	info("agent registered", KV_S("agent", a.id), KV_S("node", a.node),
	    KV_S("cluster", a.cluster), KV_S("token", s->hs->import.id),
	    KV_S("state", agent_state_name(a.state)),
	    KV_S("retried", created ? "false" : "true"));
	metrics_handshake(1, "ok");
	memset(&out, 0, sizeof(out));
	out.type = FRAME_REGISTERED;
	snprintf(out.u.registered.agent_id, sizeof(out.u.registered.agent_id), "%s", a.id);
	snprintf(out.u.registered.cluster, sizeof(out.u.registered.cluster), "%s", a.cluster);
	/* A staged key (a retry of an agent that rotated since) is settled by
	 * AUTH's rules: that agent redials. */
	out.u.registered.goes_on = s->hs->goes_on && !a.has_next;
	session_send(s, &out);
	if (out.u.registered.goes_on) {
		/* It proved the key now registered to a: as if it had
		 * redialled and proved it in AUTH (auth_agent_found). */
		session_keep_agent(s, &a);
		snprintf(s->hs->key, sizeof(s->hs->key), "current");
		s->hs->key_rotate = a.key_rotate;
		session_welcome(s, j->started ? &j->agent : NULL);
		return;
	}
	/* The import token did its one job: the agent reconnects as itself. */
	session_set_phase(s, PHASE_CLOSING);
	s->io->close(s->t);
}

/* ---- established: verification and state ---- */

static void
session_start_round_trip(struct session *s)
{
	struct session_verify *v = s->verify;
	struct frame f;
	struct timeval tv;

	if (v == NULL) {
		if ((v = calloc(1, sizeof(*v))) == NULL ||
		    (v->timer = evtimer_new(session_base(s->gw),
		    session_verify_timeout, s)) == NULL) {
			free(v);
			session_verify_fail(s, "out of memory for the verification");
			return;
		}
		s->verify = v;
	}
	memset(&f, 0, sizeof(f));
	f.type = FRAME_VERIFY;
	if (random_bytes(v->nonce, sizeof(v->nonce)) != 0) {
		session_verify_fail(s, "no randomness for verification");
		return;
	}
	memcpy(f.u.verify.nonce, v->nonce, sizeof(v->nonce));
	v->sent_ms = gateway_now_ms();
	f.u.verify.time_ms = v->sent_ms;
	session_send(s, &f);
	tv = runtime_ms_timeval(s->gw->limits.verify_timeout_ms);
	evtimer_add(v->timer, &tv);
}

void
session_verifying(struct session *s, const struct store_agent *a)
{
	session_keep_agent(s, a);
	info("agent verifying", KV_S("agent", s->agent.id));
	session_send_state(s, a);
	session_start_round_trip(s);
}

static void
session_verify_started(struct session *s, struct session_job *j)
{
	if (j->rc != STORE_OK) {
		session_store_failed(s, "the start of verification", j->rc, j->err);
		return;
	}
	session_verifying(s, &j->agent);
}

/* A transition of s's agent on the store thread; then(s, j) follows.
 * closing: s is going away, nothing follows. */
static void
session_transition(struct session *s, enum agent_event ev, const char *reason,
    void (*then)(struct session *, struct session_job *), bool closing,
    const char *what)
{
	struct session_job *j = job_new(JOB_TRANSITION, s->agent.id);

	if (j != NULL) {
		j->ev = ev;
		if (reason != NULL) {
			snprintf(j->reason, sizeof(j->reason), "%s", reason);
			j->has_reason = true;
		}
	}
	job_submit(s->gw, closing ? NULL : s, j, then, what);
}

static void session_verify_ended(struct session *s, struct session_job *j);

static void
session_verify_end(struct session *s, enum agent_event ev, const char *reason)
{
	/* Its timer's own callback may be the caller: libevent lets a
	 * callback free its event. */
	session_verify_free(s);
	/* A session closing during verification fails it, but waits for
	 * nothing: it is freed right after. */
	session_transition(s, ev, reason, session_verify_ended, s->closed,
	    "the verification result");
}

static void
session_verify_ended(struct session *s, struct session_job *j)
{
	const struct store_agent a = j->agent;
	enum agent_event ev = j->ev;
	const char *reason = j->reason;

	if (j->rc != STORE_OK) {
		session_store_failed(s, "the verification result", j->rc, j->err);
		return;
	}
	session_keep_agent(s, &a);
	if (ev == AGENT_EV_VERIFY_OK)
		info("agent active", KV_S("agent", a.id));
	else
		warn("agent verification failed: back to enroll", KV_S("agent", a.id),
		    KV_S("reason", reason));
	if (s->phase == PHASE_ESTABLISHED)
		session_send_state(s, &a);
}

static void
session_verify_fail(struct session *s, const char *reason)
{
	session_verify_end(s, AGENT_EV_VERIFY_FAIL, reason);
}

static void
on_verify_ok(struct session *s, const struct frame *in)
{
	const struct frame_verify *v = &in->u.verify;
	int64_t now = gateway_now_ms(), midpoint, skew, sent_ms;
	char reason[160];

	if (s->verify == NULL ||
	    CRYPTO_memcmp(v->nonce, s->verify->nonce, sizeof(s->verify->nonce)) != 0) {
		session_protocol_error(s, "protocol", "VERIFY_OK answers no outstanding VERIFY");
		return;
	}
	if (v->version != s->version) {
		snprintf(reason, sizeof(reason), "agent reports protocol version %u, "
		    "negotiated %u", v->version, s->version);
		session_verify_fail(s, reason);
		return;
	}
	sent_ms = s->verify->sent_ms;
	midpoint = sent_ms + (now - sent_ms) / 2;
	skew = v->time_ms - midpoint;
	if (llabs(skew) > (int64_t)s->gw->limits.max_clock_skew_s * 1000) {
		snprintf(reason, sizeof(reason), "clock skew %" PRId64 " ms exceeds %u s",
		    skew, s->gw->limits.max_clock_skew_s);
		session_verify_fail(s, reason);
		return;
	}
	debug("agent verified", KV_S("agent", s->agent.id),
	    KV_I("round_trip_ms", now - sent_ms), KV_I("skew_ms", skew));
	session_verify_end(s, AGENT_EV_VERIFY_OK, NULL);
}

static void
seen_then(struct session *s, struct session_job *j)
{
	(void)s;
	(void)j;
}

/* A store call recording that agent_id was seen now, with its release
 * version; NULL when out of memory.  No session waits for it: a session
 * has one call out at a time, and this one may run beside it. */
static struct session_job *
seen_job(const char *agent_id, const char *version)
{
	struct session_job *j = job_new(JOB_SEEN, agent_id);

	if (j != NULL) {
		snprintf(j->node, sizeof(j->node), "%s", version);
		j->has_reason = true;
	}
	return j;
}

/* Queues seen (seen_job; NULL: nothing), alone. */
static void
session_record_seen(struct gateway *gw, struct session_job *seen)
{
	job_submit(gw, NULL, seen, seen_then, "when the agent was seen");
}

/* The agent's tunnel here is up: its presence record is written, after
 * seen (seen_job, taken when the handshake ended; NULL: none, the
 * registration recorded it).  Where the stamp goes to the ordered store
 * thread too (no pool), it rides in presence's job, first
 * (presence_tunnel_up_with): one job per tunnel coming up, not two (a
 * reconnect storm of N agents queued 2 N on a queue of 4,096, docs/0017),
 * the same statements in the same order.  With a pool the two stay two
 * jobs: the stamp goes keyed, in order with the agent's own calls on its
 * pool connection (docs/0041), the record to the ordered thread, in order
 * with the renewals and the records' sync; one job cannot be on both. */
static void
session_record_up(struct gateway *gw, const char *agent_id,
    struct session_job *seen)
{
	const char *key;

	if (seen == NULL || job_worker(gw, JOB_SEEN, agent_id, &key) != gw->storew ||
	    key != NULL) {
		session_record_seen(gw, seen);
		presence_tunnel_up(gw, agent_id);
		return;
	}
	seen->then = seen_then;
	if (presence_tunnel_up_with(gw, agent_id, job_work, job_done, seen) != 0)
		session_record_seen(gw, seen);
}

/* The agent's tunnel here closed: its presence record goes and its
 * last_seen is stamped.  Where the stamp goes to the ordered store thread
 * too (no pool), it rides in presence's job (presence_tunnel_down_with):
 * one job per closing tunnel, not two (a drain of 4,000 tunnels queued
 * 8,000 and lost stamps at the queue's cap, docs/0016).  With a pool it
 * goes keyed, in order with the agent's own calls, as a job of its own. */
static void
session_record_gone(struct gateway *gw, const char *agent_id)
{
	struct session_job *j = job_new(JOB_SEEN, agent_id);
	const char *key;

	if (j != NULL && job_worker(gw, JOB_SEEN, agent_id, &key) == gw->storew &&
	    key == NULL) {
		j->then = seen_then;
		if (presence_tunnel_down_with(gw, agent_id, job_work, job_done,
		    j) == 0)
			return;
	} else
		presence_tunnel_down(gw, agent_id);
	job_submit(gw, NULL, j, seen_then, "when the agent was seen");
}

void
session_send_settings(struct session *s)
{
	struct frame f;

	/* An agent too old to know SETTINGS would drop its tunnel over it
	 * (docs/interface.md, "Compatibility between releases"). */
	if (!session_skips_unknown_frames(s) || !settings_any(s->gw))
		return;
	settings_frame(s->gw, &f);
	session_send(s, &f);
}

/* SETTINGS_ACK "ca": the CAs the agent trusts now, recorded when they
 * are not what the store says already. */
static void
on_cas_ack(struct session *s, const struct frame_ca *ca)
{
	struct session_job *j;
	char cas[STORE_CAS_MAX + 1];

	if (settings_cas_join(ca, cas, sizeof(cas)) != 0) {
		warn("tunnel: the agent's CA list is too long to record",
		    KV_S("agent", s->agent.id));
		return;
	}
	if (s->agent.cas_known && s->agent.cas_hash == urls_hash(cas))
		return;
	if ((j = job_new(JOB_CAS, s->agent.id)) == NULL)
		return;
	snprintf(j->urls, sizeof(j->urls), "%s", cas);
	s->agent.cas_known = true;
	s->agent.cas_hash = urls_hash(cas);
	info("agent holds the CAs", KV_S("agent", s->agent.id), KV_S("cas", cas));
	job_submit(s->gw, NULL, j, seen_then, "the CAs the agent holds");
}

/* SETTINGS_ACK: what the agent now holds, recorded when it is not what
 * the store says already (so a reconnect writes nothing). */
static void
on_settings_ack(struct session *s, const struct frame *in)
{
	struct session_job *j;
	char urls[STORE_URLS_MAX + 1];

	if (in->u.settings.ca.present)
		on_cas_ack(s, &in->u.settings.ca);
	if (!in->u.settings.urls.present)
		return;
	if (settings_urls_join(&in->u.settings.urls, urls, sizeof(urls)) != 0) {
		warn("tunnel: the agent's URL list is too long to record",
		    KV_S("agent", s->agent.id));
		return;
	}
	if (s->agent.urls_known && s->agent.urls_hash == urls_hash(urls))
		return;
	if ((j = job_new(JOB_URLS, s->agent.id)) == NULL)
		return;
	snprintf(j->urls, sizeof(j->urls), "%s", urls);
	s->agent.urls_known = true;
	s->agent.urls_hash = urls_hash(urls);
	info("agent holds the gateway URL list", KV_S("agent", s->agent.id),
	    KV_S("urls", urls));
	job_submit(s->gw, NULL, j, seen_then, "the agent's URL list");
}

/* A tunnel replaced by one on another loop (docs/0040 section 2,
 * "Placement over time"): the new loop names the old tunnel by agent id
 * and generation; the old loop kicks it if it is still there. */
struct kick_replaced {
	char agent_id[STORE_ID_MAX + 1];
	uint64_t generation;
	struct gateway *gw;
};

static void
kick_replaced_here(void *arg)
{
	struct kick_replaced *k = arg;
	struct session *s = hub_find(session_hub(k->gw), k->agent_id);

	if (s != NULL && s->dir_at.generation == k->generation) {
		info("agent reconnected on another loop: closing its previous "
		    "tunnel", KV_S("agent", k->agent_id));
		session_kick(s, "replaced", "a newer tunnel of this agent took over");
	}
	free(k);
}

static void
session_kick_elsewhere(struct gateway *gw, const char *agent_id,
    struct agentdir_place at)
{
	struct kick_replaced *k;

	if (gw->loops == NULL || at.loop >= gw->nloops ||
	    (k = calloc(1, sizeof(*k))) == NULL) {
		warn("agent reconnected: cannot reach its previous tunnel's loop",
		    KV_S("agent", agent_id), KV_U("loop", at.loop));
		return;
	}
	snprintf(k->agent_id, sizeof(k->agent_id), "%s", agent_id);
	k->generation = at.generation;
	k->gw = gw;
	/* A stopped loop's sessions are closing anyway. */
	(void)loop_call(&gw->loops[at.loop], kick_replaced_here, k, free);
}

/*
 * The agent is in: WELCOME, the hub and the directory, its tunnel's
 * record, and the verification an agent in enroll needs.  started: the
 * registration already started it and recorded the agent seen
 * (store_agent_register_on), the record as verifying; NULL: this does.
 */
static void
session_welcome(struct session *s, const struct store_agent *started)
{
	struct frame out;
	struct session *old;
	struct agentdir_place was;
	struct session_job *seen = NULL;
	char key[sizeof(s->hs->key)];
	bool rotate = s->hs->key_rotate;

	/* Before the handshake's memory goes with PHASE_ESTABLISHED; queued
	 * with the tunnel's record (session_record_up). */
	if (started == NULL)
		seen = seen_job(s->agent.id, s->hs->hello.version);
	memcpy(key, s->hs->key, sizeof(key));
	s->agent.skips_unknown = s->hs->hello.version[0] != '\0';

	metrics_handshake(0, "ok");
	session_set_phase(s, PHASE_ESTABLISHED);
	s->mux = mux_new(session_base(s->gw), &s->gw->mux_config, s->io->bulk,
	    s->io->bulk_arg != NULL ? s->io->bulk_arg(s->t) : s->t,
	    &tunnel_mux_handlers, s);
	if (s->mux == NULL) {
		session_record_seen(s->gw, seen);
		session_protocol_error(s, "internal", "out of memory");
		return;
	}
	old = hub_add(session_own_hub(s), s->agent.id, s->agent.cluster, s);
	session_count_tunnels(s);
	/* The process's directory: a newer generation takes the entry over.
	 * A replaced tunnel on this loop is the hub's old; one on another
	 * loop is kicked there (session_kick_replaced). */
	s->dir_at.loop = session_loop_index();
	s->dir_at.generation = agentdir_add(s->gw->agents, s->agent.id,
	    s->agent.cluster, s->agent.node, session_is_active(s),
	    s->dir_at.loop, &was);
	if (old != NULL) {
		info("agent reconnected: closing its previous tunnel",
		    KV_S("agent", s->agent.id));
		session_kick(old, "replaced", "a newer tunnel of this agent took over");
	} else if (was.generation != 0 && was.loop != s->dir_at.loop) {
		session_kick_elsewhere(s->gw, s->agent.id, was);
	}
	session_record_up(s->gw, s->agent.id, seen);
	memset(&out, 0, sizeof(out));
	out.type = FRAME_WELCOME;
	snprintf(out.u.welcome.agent_id, sizeof(out.u.welcome.agent_id), "%s", s->agent.id);
	snprintf(out.u.welcome.cluster, sizeof(out.u.welcome.cluster), "%s", s->agent.cluster);
	snprintf(out.u.welcome.state, sizeof(out.u.welcome.state), "%s",
	    agent_state_name(s->agent.state));
	snprintf(out.u.welcome.key, sizeof(out.u.welcome.key), "%s", key);
	session_send(s, &out);
	info("agent connected", KV_S("agent", s->agent.id),
	    KV_S("peer", tr_peer(s)), KV_S("node", s->agent.node),
	    KV_S("cluster", s->agent.cluster),
	    KV_S("state", agent_state_name(s->agent.state)));
	session_send_settings(s);
	if (started != NULL) {
		session_verifying(s, started);
	} else if (s->agent.state == AGENT_ENROLL) {
		session_transition(s, AGENT_EV_VERIFY, NULL, session_verify_started,
		    false, "the start of verification");
	} else if (s->agent.state == AGENT_VERIFYING) {
		/* A verification cut short (gateway restart): run it again. */
		session_start_round_trip(s);
	}
	if (rotate)
		session_rotate_key(s, "an operator asked (tetherctl agent rotate-key)");
	if (s->gw->stopping)
		session_drain(s, "gateway draining", s->gw->drain_jitter_ms);
}

void
session_agent_changed(struct session *s, const struct store_agent *a)
{
	if (s->phase != PHASE_ESTABLISHED)
		return;
	session_keep_agent(s, a);
	session_send_state(s, a);
}

void
session_record_changed(struct session *s, const struct store_agent *a)
{
	enum agent_state was = s->agent.state;

	if (s->phase == PHASE_ESTABLISHED && a->key_rotate &&
	    a->state != AGENT_REVOKED)
		session_rotate_key(s, "an operator asked (tetherctl agent rotate-key)");
	if (s->phase != PHASE_ESTABLISHED || a->state == was)
		return;
	if (a->state == AGENT_REVOKED) {
		info("agent revoked in the store: closing its tunnel",
		    KV_S("agent", a->id));
		session_kick(s, "revoked", "agent revoked by an operator");
		return;
	}
	/* A store call of this session is out: its answer brings the record
	 * it needs, and a verification under way decides for itself. */
	if (s->job != NULL || s->verify != NULL)
		return;
	info("agent changed in the store", KV_S("agent", a->id),
	    KV_S("from", agent_state_name(was)),
	    KV_S("to", agent_state_name(a->state)));
	if (a->state == AGENT_VERIFYING) {
		/* Verification asked for on another replica: it runs here. */
		session_verifying(s, a);
		return;
	}
	session_agent_changed(s, a);
	if (was == AGENT_PENDING_APPROVAL && a->state == AGENT_ENROLL)
		/* Approved on another replica: verify, as approve does here. */
		session_transition(s, AGENT_EV_VERIFY, NULL, session_verify_started,
		    false, "the start of verification");
}

/* ---- node key rotation (docs/interface.md, "Node key rotation") ---- */

static void
rotation_free(struct session *s)
{
	if (s->rot == NULL)
		return;
	OPENSSL_cleanse(s->rot, sizeof(*s->rot));
	free(s->rot);
	s->rot = NULL;
}

/* The rotation cannot go on: the tunnel closes, and the agent's next
 * handshake settles what the store holds (auth_which_key). */
static void
rotation_failed(struct session *s, const char *reason)
{
	warn("agent key rotation failed", KV_S("agent", s->agent.id),
	    KV_S("reason", reason));
	session_kick(s, "key_refused", reason);
}

/* A rotation's store call.  It is not the session's one handshake call
 * (s->job): a verification may be out beside it, so it finds its session
 * again by the agent's id when it is done. */
struct key_job {
	struct gateway *gw;
	bool commit;                  /* else stage */
	char id[STORE_ID_MAX + 1];
	uint8_t old_pub[FRAME_PUBKEY_LEN], new_pub[FRAME_PUBKEY_LEN];
	int64_t now;
	int rc;
	char err[STORE_ERROR_MAX + 1];
};

static void
key_job_work(struct store *st, void *arg)
{
	struct key_job *k = arg;

	if (k->commit)
		k->rc = store_agent_key_commit(st, k->id, k->new_pub, k->now, NULL,
		    k->err, sizeof(k->err));
	else
		k->rc = store_agent_key_stage(st, k->id, k->old_pub, k->new_pub,
		    k->err, sizeof(k->err));
}

static void
key_job_done(void *arg)
{
	struct key_job *k = arg;
	struct session *s = hub_find(session_hub(k->gw), k->id);
	struct frame f;

	if (s == NULL || s->phase != PHASE_ESTABLISHED || s->rot == NULL ||
	    !same_key(s->rot->new_pub, k->new_pub)) {
		info("agent key rotation: the tunnel went first; the agent's next "
		    "handshake settles it", KV_S("agent", k->id));
	} else if (k->rc != STORE_OK) {
		rotation_failed(s, k->rc == STORE_REFUSED ? k->err :
		    "the gateway could not store the agent's key");
	} else if (k->commit) {
		info("agent key rotated", KV_S("agent", s->agent.id),
		    KV_S("when", "over its tunnel"));
		rotation_free(s);
		runtime_test_stop("gateway-committed");
	} else {
		runtime_test_stop("gateway-staged");
		s->rot->phase = ROT_STAGED;
		memset(&f, 0, sizeof(f));
		f.type = FRAME_KEY_ROTATED;
		memcpy(f.u.key_done.pubkey, k->new_pub, sizeof(f.u.key_done.pubkey));
		session_send(s, &f);
	}
	OPENSSL_cleanse(k, sizeof(*k));
	free(k);
}

static void
key_job_submit(struct session *s, bool commit, const uint8_t *old_pub,
    const uint8_t *new_pub)
{
	struct key_job *k = calloc(1, sizeof(*k));

	if (k == NULL) {
		rotation_failed(s, "out of memory");
		return;
	}
	k->gw = s->gw;
	k->commit = commit;
	snprintf(k->id, sizeof(k->id), "%s", s->agent.id);
	if (old_pub != NULL)
		memcpy(k->old_pub, old_pub, sizeof(k->old_pub));
	memcpy(k->new_pub, new_pub, sizeof(k->new_pub));
	k->now = gateway_now();
	/* Not groupable: its work is not one that can run twice.  In the
	 * agent's order, as its other calls (job_worker). */
	if (store_worker_submit_keyed(s->gw->storep != NULL ? s->gw->storep :
	    s->gw->storew, k->id, false, key_job_work, key_job_done, k) == -1) {
		free(k);
		rotation_failed(s, "too many store calls waiting");
	}
}

void
session_rotate_key(struct session *s, const char *why)
{
	struct frame f;

	if (s->phase != PHASE_ESTABLISHED || s->rot != NULL)
		return;
	if (!session_skips_unknown_frames(s)) {
		/* Too old to know KEY_ROTATE: it would drop its tunnel over it
		 * (docs/interface.md, "Compatibility between releases"). */
		info("agent key rotation: this agent's release cannot rotate its "
		    "key (it named none in HELLO); upgrade it", KV_S("agent", s->agent.id),
		    KV_S("why", why));
		return;
	}
	if ((s->rot = calloc(1, sizeof(*s->rot))) == NULL) {
		warn("agent key rotation: out of memory", KV_S("agent", s->agent.id));
		return;
	}
	if (random_bytes(s->rot->nonce, sizeof(s->rot->nonce)) != 0) {
		warn("agent key rotation: no randomness", KV_S("agent", s->agent.id));
		rotation_free(s);
		return;
	}
	memset(&f, 0, sizeof(f));
	f.type = FRAME_KEY_ROTATE;
	memcpy(f.u.key_rotate.nonce, s->rot->nonce, sizeof(f.u.key_rotate.nonce));
	session_send(s, &f);
	info("agent key rotation started", KV_S("agent", s->agent.id),
	    KV_S("why", why));
}

static void
on_key_proof(struct session *s, const struct frame *in)
{
	const struct frame_key_proof *p = &in->u.key_proof;
	bool ok;

	if (s->rot == NULL || s->rot->phase != ROT_ASKED) {
		session_protocol_error(s, "protocol", "KEY_PROOF answers no KEY_ROTATE");
		return;
	}
	ok = key_rotation_verify(s->agent.id, s->agent.node, s->rot->nonce,
	    p->old_pubkey, p->pubkey, p->old_sig, p->new_sig);
	/* One proof per nonce. */
	OPENSSL_cleanse(s->rot->nonce, sizeof(s->rot->nonce));
	if (!ok) {
		rotation_failed(s, "the key rotation proof does not verify");
		return;
	}
	memcpy(s->rot->new_pub, p->pubkey, sizeof(s->rot->new_pub));
	runtime_test_stop("gateway-proof");
	s->rot->phase = ROT_STAGING;
	/* The store checks that old_pubkey is the agent's key. */
	key_job_submit(s, false, p->old_pubkey, p->pubkey);
}

static void
on_key_switched(struct session *s, const struct frame *in)
{
	if (s->rot == NULL || s->rot->phase != ROT_STAGED ||
	    !same_key(s->rot->new_pub, in->u.key_done.pubkey)) {
		session_protocol_error(s, "protocol", "KEY_SWITCHED names no staged key");
		return;
	}
	runtime_test_stop("gateway-switched");
	s->rot->phase = ROT_COMMITTING;
	key_job_submit(s, true, NULL, s->rot->new_pub);
}

static void
on_established(struct session *s, const struct frame *in)
{
	struct frame out;

	switch (in->type) {
	case FRAME_VERIFY_OK:
		on_verify_ok(s, in);
		return;
	case FRAME_PING:
		memset(&out, 0, sizeof(out));
		out.type = FRAME_PONG;
		out.u.ping.seq = in->u.ping.seq;
		session_send(s, &out);
		return;
	case FRAME_PONG:
		return;
	case FRAME_KEY_ROTATE:
		/* Once a tunnel: an agent cannot make the store write at will. */
		if (s->key_asked) {
			debug("agent asked for a key rotation again: ignored",
			    KV_S("agent", s->agent.id));
			return;
		}
		s->key_asked = true;
		session_rotate_key(s, "the agent asked (its key reached --max-key-age)");
		return;
	case FRAME_KEY_PROOF:
		on_key_proof(s, in);
		return;
	case FRAME_KEY_SWITCHED:
		on_key_switched(s, in);
		return;
	case FRAME_SETTINGS_ACK:
		on_settings_ack(s, in);
		return;
	case FRAME_ERROR:
		warn("agent reports an error", KV_S("agent", s->agent.id),
		    KV_S("code", in->u.error.code), KV_S("reason", in->u.error.reason));
		return;
	case FRAME_OPEN:
	case FRAME_OPEN_OK:
	case FRAME_OPEN_FAIL:
	case FRAME_DATA:
	case FRAME_WINDOW:
	case FRAME_FIN:
	case FRAME_RESET: {
		char err[160];
		if (mux_on_frame(s->mux, in, err, sizeof(err)) != 0)
			session_protocol_error(s, "protocol", err);
		return;
	}
	default:
		break;
	}
	char reason[96];
	snprintf(reason, sizeof(reason), "unexpected %s frame", frame_type_name(in->type));
	session_protocol_error(s, "protocol", reason);
}

/* The frame each handshake phase accepts (0: see on_established). */
static const enum frame_type phase_accepts[PHASE_ENTRIES] = {
	[PHASE_AWAIT_HELLO] = FRAME_HELLO,
	[PHASE_AWAIT_AUTH] = FRAME_AUTH,
	[PHASE_AWAIT_REGISTER] = FRAME_REGISTER,
};

static void (*const phase_handlers[PHASE_ENTRIES])(struct session *, const struct frame *) = {
	[PHASE_AWAIT_HELLO] = on_hello,
	[PHASE_AWAIT_AUTH] = on_auth,
	[PHASE_AWAIT_REGISTER] = on_register,
	[PHASE_ESTABLISHED] = on_established,
};

/*
 * Keeps a handshake frame that came while the session waits for the store
 * (REGISTER right after AUTH): one, no longer than a handshake frame.
 * Returns 0, or -1 after refusing the session.
 */
static int
session_hold(struct session *s, const uint8_t *buf, size_t len)
{
	if (s->held != NULL) {
		session_protocol_error(s, "out_of_phase",
		    "a second frame before the gateway answered the first");
		return -1;
	}
	if ((s->held = malloc(len > 0 ? len : 1)) == NULL) {
		session_protocol_error(s, "internal", "out of memory");
		return -1;
	}
	memcpy(s->held, buf, len);
	s->held_len = len;
	return 0;
}

/* Handles the held frame, now that the store has answered. */
static void
session_release_held(struct session *s)
{
	uint8_t *buf = s->held;

	if (buf == NULL || s->job != NULL)
		return;
	s->held = NULL;
	session_on_message(s, buf, s->held_len);
	free(buf);
}

void
session_on_message(struct session *s, const uint8_t *buf, size_t len)
{
	struct frame f;
	char err[160];
	char reason[200];
	int rc;

	if (s->phase == PHASE_CLOSING)
		return;
	if (s->job != NULL && s->phase != PHASE_ESTABLISHED) {
		(void)session_hold(s, buf, len);
		return;
	}
	rc = frame_decode(buf, len, &f, err, sizeof(err));
	if (rc == FRAME_UNKNOWN_TYPE && s->phase == PHASE_ESTABLISHED) {
		/* A newer agent's frame: skipped, its streams go on. */
		debug("tunnel: frame of an unknown type skipped",
		    KV_S("agent", s->agent.id), KV_S("err", err));
		return;
	}
	if (rc != 0) {
		snprintf(reason, sizeof(reason), "malformed frame: %s", err);
		session_protocol_error(s, "malformed", reason);
		return;
	}
	if (s->phase != PHASE_ESTABLISHED && f.type != phase_accepts[s->phase]) {
		snprintf(reason, sizeof(reason), "%s not allowed in phase %s (expected %s)",
		    frame_type_name(f.type), phase_names[s->phase],
		    frame_type_name(phase_accepts[s->phase]));
		session_protocol_error(s, "out_of_phase", reason);
		return;
	}
	phase_handlers[s->phase](s, &f);
}

void
session_closed(struct session *s)
{
	int current = 0;

	/* Only the hub's current session speaks for the agent: a replaced one
	 * must not fail the verification its successor is running. */
	s->closed = true;
	/* A store call still out finishes without it. */
	if (s->job != NULL)
		s->job->s = NULL;
	s->job = NULL;
	free(s->held);
	s->held = NULL;
	/* A replaced tunnel's generation is stale: a no-op for it, and it
	 * speaks no more for the agent, whichever loop its successor is on. */
	if (s->dir_at.generation != 0) {
		current = agentdir_remove(s->gw->agents, s->agent.id, s->dir_at);
		s->dir_at.generation = 0;
	}
	if (s->agent.id[0] != '\0' && hub_find(session_own_hub(s),
	    s->agent.id) == s) {
		if (current && s->verify != NULL)
			session_verify_fail(s, "agent disconnected during verification");
		if (current)
			info("agent disconnected", KV_S("agent", s->agent.id));
		hub_remove(session_own_hub(s), s->agent.id, s);
		session_count_tunnels(s);
		if (current)
			session_record_gone(s->gw, s->agent.id);
	}
	/* Every stream of the tunnel ends now: their clients see it at once. */
	mux_free(s->mux);
	s->mux = NULL;
	if (s->counted_handshake) {
		metrics_handshake(s->phase == PHASE_AWAIT_REGISTER, "closed");
		session_source_put(s);
		session_count_handshake(s, -1);
		gateway_handshake_free(s->gw, s->began_ms);
		gateway_handshake_ended(s->gw);
	}
	if (s->handshake_timer != NULL)
		event_free(s->handshake_timer);
	session_verify_free(s);
	session_hs_free(s);
	rotation_free(s);
	OPENSSL_cleanse(s, sizeof(*s));
	free(s);
}
