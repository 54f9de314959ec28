/*
 * agent_tunnel.h: one agent's tunnel to the gateway, on a loop it is given:
 * the handshake (HELLO, CHALLENGE, AUTH and REGISTER or WELCOME), VERIFY,
 * the agent state, keepalive pings, the streams' multiplexer, and redialling
 * with exponential backoff and jitter.
 *
 * `tether-client run` (agent.c) drives one of these and keeps what it
 * learns in the state directory; the swarm load generator
 * (tests/bench/swarm.c) drives thousands on one loop and keeps it in
 * memory.  The protocol lives only here.
 *
 * Handshake states:
 *
 *   DISCONNECTED --connect--> AWAIT_CHALLENGE --CHALLENGE/AUTH-->
 *     import token:  AWAIT_REGISTERED --REGISTERED--> (hooks.registered) DISCONNECTED
 *                    (REGISTERED "goes_on": AWAIT_WELCOME on the same
 *                    connection, docs/0044)
 *     agent key:     AWAIT_WELCOME --WELCOME--> ESTABLISHED
 *
 * A refusal the gateway calls final (bad, expired or used-up token, unknown
 * agent, no common version: docs/interface.md, "Refusals") stops the tunnel
 * (hooks.stopped with AGENT_EXIT_REFUSED; AGENT_EXIT_REVOKED when an
 * operator revoked the agent or its import token); anything else (network
 * loss, gateway restart, a gateway whose store cannot answer) is retried
 * with backoff.
 *
 * Cost: one struct agent_tunnel (~700 bytes) and four timers per tunnel, plus
 * the WebSocket client (its TLS connection) and the multiplexer while
 * connected; during a gateway's drain, at most one more of each (the
 * retired connection, docs/0017).
 */
#ifndef TETHER_AGENT_TUNNEL_H
#define TETHER_AGENT_TUNNEL_H

#include <stdbool.h>
#include <stdint.h>

#include <openssl/evp.h>

#include "backoff.h"
#include "frame.h"
#include "token.h"

/* The backoff and the gateway's retry-after: backoff.h (AGENT_BACKOFF_*,
 * AGENT_RETRY_AFTER_*), shared with `join`. */

/* A gateway tells, ahead of time, how widely its agents should spread the
 * first redial after losing it without a word (SETTINGS
 * "redial_spread_ms", docs/0035): the agent draws that redial uniformly in
 * [0, spread], the spread held at most AGENT_REDIAL_SPREAD_MAX_MS. */
#define AGENT_REDIAL_SPREAD_MAX_MS  300000

/* The keepalive's defaults (`run --ping-interval`, `--ping-timeout`): a
 * tunnel silent for the interval (no bytes of the gateway read, a whole
 * message or not) is pinged, and abandoned if nothing comes within the
 * timeout, so a hung gateway is left within their sum (10 s),
 * at the cost of one ping exchange per idle tunnel per interval
 * (docs/0026). */
#define AGENT_PING_INTERVAL_MS 6000
#define AGENT_PING_TIMEOUT_MS  4000

/* hooks.stopped's codes, which `tether-client run` exits with. */
#define AGENT_EXIT_REFUSED 1   /* a final refusal, or an error no retry fixes */
#define AGENT_EXIT_REVOKED 77  /* an operator revoked it (EX_NOPERM): the
                                * unit does not restart it */

struct event_base;
struct ssl_ctx_st;
struct mux;
struct mux_stream;
struct agent_tunnel;

struct agent_tunnel_hooks {
	/* REGISTERED: the gateway made this node agent agent_id (in the
	 * cluster the tunnel was given).  Keep it; return 0 to go on as the
	 * agent (on this connection when the gateway says so, else by
	 * redialling with the agent key at once), or -1 to stop
	 * (hooks.stopped follows). */
	int (*registered)(void *arg, const char *agent_id);
	/* The agent state, the tunnel's connectedness or the last error
	 * changed (also called when nothing changed; cheap to repeat). */
	void (*status)(void *arg, const char *state, bool connected,
	    const char *last_error);
	/* The tunnel stopped for good: AGENT_EXIT_REVOKED after an operator's
	 * revocation, AGENT_EXIT_REFUSED after another final refusal or an
	 * error no retry fixes.  It will not redial; free it with agent_tunnel_free,
	 * but not from inside this hook. */
	void (*stopped)(void *arg, int code);
	/* The gateway opens a stream and the agent is active: answer with
	 * mux_stream_accept or mux_stream_refuse (mux.h). */
	void (*on_open)(struct mux *m, struct mux_stream *s,
	    const struct frame_open *req, void *arg);
	/* Optional: the gateway answered our agent_tunnel_ping(seq). */
	void (*pong)(void *arg, uint32_t seq);
	/* Optional: the gateway pushed a new URL list (SETTINGS "urls" over
	 * this authenticated tunnel, the only way a list comes in; each URL
	 * checked by agent_tunnel_url, duplicates dropped; n 0: "none, dial
	 * the join URL").  Keep it where it outlives the process, atomically,
	 * and return 0; -1 if it could not be kept: the tunnel goes on with
	 * the list it had (and tells the gateway so).  NULL: the list lives in
	 * the tunnel's memory only.  Called only when the list changed. */
	int (*urls)(void *arg, const char *const *urls, size_t n);
	/*
	 * Optional: the CAs this agent trusts, and a CA rotation's step
	 * (SETTINGS "ca" over this authenticated tunnel, the only way one
	 * comes in; in NULL when a SETTINGS said nothing of CAs).  Check in
	 * against the pinned CA and keep what is believed (catrust.h), give
	 * the tunnel the trust to dial with from now on
	 * (agent_tunnel_set_tls), fill held with the checksums of the CAs
	 * trusted now and return how many (SETTINGS_ACK "ca"; 0: the ACK
	 * says nothing of CAs).  NULL: "ca" is ignored.
	 */
	size_t (*ca)(void *arg, const struct frame_ca *in,
	    char held[FRAME_CA_MAX_HELD][FRAME_CA_SUM_LEN + 1]);
	/*
	 * Optional, both or neither (without them KEY_ROTATE is ignored):
	 * node key rotation (docs/interface.md, "Node key rotation").
	 * key_pending makes a new key and keeps it durably as the pending
	 * one before the tunnel proves it; NULL when it cannot.  key_settle
	 * makes the pending key the node's key (use_pending) or drops it,
	 * durably, and returns the node's key now; NULL when the change
	 * could not be made (nothing changed).  Both keys stay the owner's.
	 */
	EVP_PKEY *(*key_pending)(void *arg);
	EVP_PKEY *(*key_settle)(void *arg, bool use_pending);
};

struct agent_tunnel_config {
	const char *gateway_url;    /* https://HOST[:PORT] (agent_tunnel_url):
	                             * the URL the node joined with */
	/* The gateway's URL list as last pushed (state.json), dialled before
	 * gateway_url, in order (gwlist.h); NULL and 0 for none */
	const char *const *gateway_urls;
	size_t ngateway_urls;
	const char *ca_file;        /* the gateway's CA (PEM) */
	/* A TLS context for ca_file (wsclient_tls_context) shared with other
	 * tunnels (a reference is taken), or NULL: the tunnel makes its own
	 * at start and keeps it for every redial. */
	struct ssl_ctx_st *tls_ctx;
	const char *node;
	const char *cluster;        /* the cluster the node joined */
	const char *agent_id;       /* "" until registered */
	EVP_PKEY *agent_key;        /* this node's Ed25519 key (not owned) */
	EVP_PKEY *import_key;       /* from the import token until registered,
	                             * else NULL (not owned) */
	EVP_PKEY *pending_key;      /* a rotation's new key whose outcome the
	                             * node did not learn, or NULL (not owned):
	                             * AUTH offers both, WELCOME settles it */
	const char *import_id;      /* the import token's id, or "" */
	const char *proxy_url;      /* HTTP CONNECT proxy, or NULL */
	const char *no_proxy;       /* gateway hosts dialled directly despite
	                             * proxy_url (proxy.h's NO_PROXY), or NULL */
	const char *proxy_ca_file;
	int proxy_auth;             /* enum proxy_auth (common/proxy.h) */
	const char *proxy_user;     /* for NTLM, or NULL: the URL's */
	const char *proxy_password; /* for NTLM, or NULL: the URL's (not owned) */
	uint32_t stream_window;
	uint32_t max_streams;
	uint32_t ping_interval_ms;  /* silence before the agent pings */
	uint32_t ping_timeout_ms;   /* then silence before it redials */
	const struct agent_tunnel_hooks *hooks;
	void *arg;                  /* given to every hook */
	/* The gateway's retry-after is only counted, the backoff applies as
	 * if none came: tether-swarm's --ignore-retry-after, for a storm
	 * benchmark's "before" figure.  false everywhere else. */
	bool ignore_retry_after;
	/* The same for the redial spread: the backoff applies after an
	 * unannounced loss as if no spread had been told (tether-swarm's
	 * --ignore-redial-spread, a test's control). */
	bool ignore_redial_spread;
};

/*
 * The tunnel's URL, wss://HOST[:PORT]/v1/connect, into connect_url (len
 * bytes), from the gateway's URL: https://HOST[:PORT], an origin by
 * common/url.c's rules.  host (hostlen bytes, or NULL) receives HOST, for
 * NO_PROXY.  0, or -1 with the reason in why.
 */
int agent_tunnel_url(const char *gateway_url, char *connect_url, size_t len,
    char *host, size_t hostlen, char *why, size_t whylen);

/* A tunnel on base, not yet dialling; the strings are copied, the keys
 * borrowed.  NULL on allocation failure or a gateway URL (joined or
 * listed) that agent_tunnel_url refuses (check them first to say why). */
struct agent_tunnel *agent_tunnel_new(struct event_base *base,
    const struct agent_tunnel_config *cfg);
/* Dials now (later dials follow by themselves).  Returns 0, or -1 when the
 * URL or the CA file is unusable (then hooks.stopped has been called). */
int agent_tunnel_start(struct agent_tunnel *t);
/* Closes the connection if any; no hook is called after this. */
void agent_tunnel_free(struct agent_tunnel *t);

/* Sends a PING with seq if established; hooks.pong follows.  0 or -1. */
int agent_tunnel_ping(struct agent_tunnel *t, uint32_t seq);
/* Asks the gateway for a key rotation (KEY_ROTATE without a nonce) when
 * established and none is under way.  0 if asked, -1 if not. */
int agent_tunnel_ask_rotation(struct agent_tunnel *t);
/* The TLS context for every dial from now on (the tunnel takes a
 * reference and drops the one it had; a connection already open keeps
 * its own): the CAs a rotation added or promoted (catrust.h). */
void agent_tunnel_set_tls(struct agent_tunnel *t, struct ssl_ctx_st *ctx);
/* Closes the connection as if the gateway had dropped it: the tunnel
 * redials with backoff. */
void agent_tunnel_drop(struct agent_tunnel *t);

/* Established (authenticated, following the agent state). */
bool agent_tunnel_established(const struct agent_tunnel *t);
/* The agent state the gateway last sent ("unknown" before any). */
const char *agent_tunnel_state(const struct agent_tunnel *t);
/* The gateway URL dialled now, or last (gwlist.h). */
const char *agent_tunnel_gateway(const struct agent_tunnel *t);
/* Connections dialled so far. */
uint32_t agent_tunnel_dials(const struct agent_tunnel *t);
/* Times the gateway said when to come back (told), and dials made before
 * the moment it said (early: 0 unless ignore_retry_after, bounded by
 * AGENT_RETRY_AFTER_MAX_MS), measured on the monotonic clock from the
 * refusal to the next dial. */
void agent_tunnel_retry_after(const struct agent_tunnel *t, uint32_t *told,
    uint32_t *early);
/*
 * The redial spread (docs/0035): the one the gateway told last (0: none,
 * an older gateway; AGENT_REDIAL_SPREAD_MAX_MS at most); how many redials
 * after an unannounced loss were drawn in [0, spread] (draws), the sum
 * and the largest of the delays drawn, and the sum of the waits measured
 * on the monotonic clock from the loss to the redial's dial (waited_ms:
 * with ignore_redial_spread, the backoff's waits, counted the same way).
 */
struct agent_spread {
	uint32_t spread_ms;
	uint32_t draws;
	uint64_t drawn_ms;
	uint32_t max_drawn_ms;
	uint32_t losses;           /* unannounced losses of an established tunnel */
	uint64_t waited_ms;        /* over those losses' first redials */
};
void agent_tunnel_spread(const struct agent_tunnel *t, struct agent_spread *out);
/* The tunnel's multiplexer while established, else NULL. */
struct mux *agent_tunnel_mux(const struct agent_tunnel *t);

#endif
