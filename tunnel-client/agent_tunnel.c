/*
 * agent_tunnel.c: one agent's tunnel to the gateway (see agent_tunnel.h):
 * the handshake state machine, keepalive, the multiplexer and the redial
 * with backoff and jitter.  Nothing here touches the disk or the process:
 * what must outlive the tunnel goes through the hooks.
 *
 * Keepalive: a tunnel silent for ping_interval gets a PING (once it is
 * established; before that the silence is only timed), and one that stays
 * silent for ping_timeout after it is abandoned at once (no close
 * handshake: nothing answers it) and dialled again.  Silent means no bytes
 * of the gateway read, not no whole message: a large message arriving
 * slowly (a DATA frame of a bulk transfer on a slow link, the PONG queued
 * behind it) keeps the tunnel, as on the gateway's side.  A stopped gateway or a
 * path that died without a RST is noticed this way, not only when TCP gives
 * up hours later; with the defaults (AGENT_PING_INTERVAL_MS, _TIMEOUT_MS)
 * an agent leaves a hung replica within about 10 s (docs/0026).  Each
 * tunnel has its own timer in libevent's min-heap: nothing walks every
 * tunnel.
 *
 * Drain (docs/0017): a gateway that is shutting down sends RECONNECT.  After
 * a random delay in [0, jitter_ms] the agent dials a new connection
 * (through the balancer, to another replica) before it lets the old one
 * go (make before break): the old connection is retired, keeps carrying
 * its streams (and answering pings, and taking streams the draining
 * replica still opens) and is closed once it has no stream left and the
 * new connection is established, or a dial since failed (the only gateway
 * is the one draining).  When RECONNECT said another replica is live
 * ("elsewhere"), a failed dial does not let it go: the balancer sent the
 * dial back to the draining replica before its health check noticed, and
 * the next dial (after the retry-after the refusal named) goes elsewhere;
 * the draining replica's own drain timeout bounds the wait.  So the agent
 * is reachable throughout a rolling restart.  At most one connection is
 * retired at a time.
 *
 * Moving gateways (docs/0031): the tunnel dials the URLs of a gwlist.h
 * list, the gateway's pushed ones then the join URL, moving to the next
 * one when a connection ends before it was established.  The list changes
 * only by a SETTINGS frame on the current, authenticated tunnel (never a
 * retired one, a redirect, a proxy's answer or a RECONNECT); the agent
 * answers SETTINGS_ACK with the list it now holds.  A CA rotation's
 * SETTINGS "ca" comes the same way only, and goes to hooks.ca (the files
 * are the agent's: catrust.h); the ACK says the CAs held.
 *
 * Told when to come back (docs/0033): a gateway that turns a dial away for
 * now (a 503 with Retry-After on the upgrade, or an ERROR frame with
 * retry_after_ms) has chosen the moment from its own queue, so the next
 * dial waits that long (at most AGENT_RETRY_AFTER_MAX_MS) plus a jitter
 * of its own below AGENT_RETRY_AFTER_JITTER_MS, instead of the
 * exponential backoff; a connection closed unread (the gateway's TLS
 * queue shed it) says nothing, and the backoff applies.
 *
 * Told ahead of time (docs/0035): a gateway that dies without a word
 * (kill -9, a crash: no RECONNECT, no ERROR) cannot say when to come back,
 * and every agent it held would redial within the same half second.  So
 * the gateway says beforehand, in SETTINGS "redial_spread_ms", how widely
 * to spread that redial (its tunnels over its handshake rate), and after
 * such a loss of an established tunnel the first redial is drawn
 * uniformly in [0, spread] (the CSPRNG); the backoff then goes on from its
 * start (not after the keepalive dropped a silent tunnel: those losses
 * are spread over the ping interval already).  The price: an agent alone
 * in losing its tunnel so (a reset on its path) waits too, half the
 * spread on average.  The spread is held in memory for the current
 * connection's gateway only (each WELCOME forgets it): one that does not
 * send it gets the backoff, as before.
 */
#include "agent_tunnel.h"
#include "url.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <event2/event.h>
#include <openssl/ssl.h>

#include "agent_metrics.h"
#include "agentkey.h"
#include "gwlist.h"
#include "log.h"
#include "mux.h"
#include "proxy.h"
#include "runtime.h"
#include "wsclient.h"
#include "wsface.h"
#include "wsmux.h"

#define MAX_MESSAGE_SLACK 4096   /* frame overhead beyond the largest DATA */

enum tunnel_phase {
	TUNNEL_DISCONNECTED,     /* no connection; a reconnect may be scheduled */
	TUNNEL_CONNECTING,       /* TCP/TLS/WebSocket handshake under way */
	TUNNEL_AWAIT_CHALLENGE,  /* HELLO sent */
	TUNNEL_AWAIT_REGISTERED, /* AUTH + REGISTER sent with the import token */
	TUNNEL_AWAIT_WELCOME,    /* AUTH sent with the agent key */
	TUNNEL_ESTABLISHED,      /* authenticated; following the agent's state */
	TUNNEL_ENTRIES           /* must be last */
};

static const char *const phase_names[TUNNEL_ENTRIES] = {
	[TUNNEL_DISCONNECTED] = "disconnected",
	[TUNNEL_CONNECTING] = "connecting",
	[TUNNEL_AWAIT_CHALLENGE] = "await-challenge",
	[TUNNEL_AWAIT_REGISTERED] = "await-registered",
	[TUNNEL_AWAIT_WELCOME] = "await-welcome",
	[TUNNEL_ESTABLISHED] = "established",
};

struct agent_tunnel {
	struct agent_tunnel_config cfg;  /* its strings are not used: copies below */
	struct gwlist urls;           /* where to dial, and which one now */
	char *ca_file, *no_proxy;     /* owned */
	SSL_CTX *tls_ctx;             /* one reference, shared by every dial */
	char node[FRAME_NODE_MAX + 1];
	char cluster[FRAME_ID_MAX + 1];
	char agent_id[FRAME_ID_MAX + 1];
	char import_id[TOKEN_ID_LEN + 1];

	struct event_base *base;
	struct wsface *ws;            /* the tunnel, while connected or connecting */
	struct mux *mux;              /* its streams, once connected */
	struct wsface *old_ws;        /* a retired connection finishing its streams */
	struct mux *old_mux;          /* its streams */
	bool old_dial_failed;         /* a dial since retiring it failed */
	bool old_elsewhere;           /* its replica said another one is live */
	bool move_elsewhere;          /* ... the pending RECONNECT said so */
	struct event *move_timer;     /* RECONNECT's jittered delay */
	struct event *retire_poll;    /* closes the retired connection once idle */
	struct event *reconnect_timer;
	struct event *keepalive;      /* the next ping or drop deadline */
	int64_t last_rx_ms;           /* monotonic: last heard from the gateway
	                               * (keepalive_heard, tunnel_keepalive) */
	int64_t ping_ms;              /* monotonic: the silence clock started; 0 none */
	bool ping_grace;              /* this ping's deadline gave input pending
	                               * one more pass (tunnel_keepalive) */
	uint32_t ping_seq;
	uint32_t dials;
	uint32_t told_ms;             /* the gateway's retry-after for this dial
	                               * (wsclient writes an upgrade's), 0 none */
	int64_t come_back_ms;         /* monotonic: no dial before, as told; 0 none */
	uint32_t told, early;         /* agent_tunnel_retry_after */
	bool heard_word;              /* this connection's gateway said it
	                               * leaves or refuses: ERROR, RECONNECT */
	bool dropped_silent;          /* the keepalive dropped this connection */
	bool spread_next;             /* lost unannounced: draw the next redial */
	int64_t lost_ms;              /* monotonic: that loss; 0 none pending */
	struct agent_spread spread;   /* agent_tunnel_spread */

	enum tunnel_phase phase;
	uint32_t backoff_ms;
	uint32_t backoff_cap_ms;      /* AGENT_BACKOFF_MAX_MS, or less after a
	                               * retryable refusal (on_error) */
	bool reconnect_now;           /* after REGISTERED: no backoff */
	bool was_established;         /* this connection got its WELCOME */
	bool stopped;
	bool rotating;                /* KEY_PROOF sent on this connection */
	char state[64];               /* the agent state the gateway last sent */
	char last_error[FRAME_REASON_MAX + 1];
};

static void tunnel_schedule_reconnect(struct agent_tunnel *t);
static int tunnel_dial(struct agent_tunnel *t);
static void ws_close(struct wsface *c, int http_status, const char *reason,
    void *arg);

static bool
tunnel_importing(const struct agent_tunnel *t)
{
	return t->agent_id[0] == '\0';
}

static void
tunnel_set_phase(struct agent_tunnel *t, enum tunnel_phase next)
{
	debug("tunnel phase", KV_S("from", phase_names[t->phase]),
	    KV_S("to", phase_names[next]));
	t->phase = next;
	agent_metrics_connected(next == TUNNEL_ESTABLISHED);
}

static void
tunnel_report(struct agent_tunnel *t)
{
	t->cfg.hooks->status(t->cfg.arg, t->state, t->phase == TUNNEL_ESTABLISHED,
	    t->last_error);
}

static void
tunnel_stop(struct agent_tunnel *t, int code)
{
	if (t->stopped)
		return;
	t->stopped = true;
	evtimer_del(t->reconnect_timer);
	t->cfg.hooks->stopped(t->cfg.arg, code);
}

/* Sends f on ws (the current connection or a retired one). */
static void
ws_send_frame(struct wsface *ws, const struct frame *f)
{
	uint8_t *buf;
	size_t len;

	if (ws == NULL)
		return;
	if (frame_encode(f, 0, &buf, &len) != 0) {
		error("cannot encode a frame", KV_S("frame", frame_type_name(f->type)));
		return;
	}
	wsface_send(ws, buf, len, 1);
	free(buf);
}

static void
tunnel_send(struct agent_tunnel *t, const struct frame *f)
{
	ws_send_frame(t->ws, f);
}

/* ---- handshake ---- */

static void
tunnel_send_hello(struct agent_tunnel *t)
{
	struct frame f;

	memset(&f, 0, sizeof(f));
	f.type = FRAME_HELLO;
	f.u.hello.versions[0] = TETHER_PROTOCOL_VERSION;
	f.u.hello.nversions = 1;
	snprintf(f.u.hello.node, sizeof(f.u.hello.node), "%s", t->node);
	f.u.hello.cred = tunnel_importing(t) ? FRAME_CRED_IMPORT : FRAME_CRED_AGENT;
	snprintf(f.u.hello.id, sizeof(f.u.hello.id), "%s",
	    tunnel_importing(t) ? t->import_id : t->agent_id);
	snprintf(f.u.hello.version, sizeof(f.u.hello.version), "%s", TETHER_VERSION);
	t->rotating = false;
	tunnel_send(t, &f);
	tunnel_set_phase(t, TUNNEL_AWAIT_CHALLENGE);
}

static void
on_challenge(struct agent_tunnel *t, const struct frame *in)
{
	bool import = tunnel_importing(t);
	int cred = import ? FRAME_CRED_IMPORT : FRAME_CRED_AGENT;
	const char *id = import ? t->import_id : t->agent_id;
	uint8_t msg[AUTH_TRANSCRIPT_MAX];
	struct frame f;
	size_t len;

	memset(&f, 0, sizeof(f));
	f.type = FRAME_AUTH;
	len = auth_transcript(msg, sizeof(msg), in->u.challenge.version, cred, id,
	    t->node, in->u.challenge.nonce);
	if (len == 0 || agentkey_sign(import ? t->cfg.import_key : t->cfg.agent_key,
	    msg, len, f.u.auth.sig) != 0) {
		error("cannot sign the challenge");
		tunnel_stop(t, AGENT_EXIT_REFUSED);
		return;
	}
	/* A rotation whose outcome this node did not learn: both keys sign,
	 * the gateway says in WELCOME which one it holds. */
	if (!import && t->cfg.pending_key != NULL &&
	    (agentkey_public(t->cfg.pending_key, f.u.auth.next_pubkey) != 0 ||
	    agentkey_sign(t->cfg.pending_key, msg, len, f.u.auth.next_sig) != 0)) {
		error("cannot sign the challenge with the pending key");
		memset(f.u.auth.next_pubkey, 0, sizeof(f.u.auth.next_pubkey));
		memset(f.u.auth.next_sig, 0, sizeof(f.u.auth.next_sig));
	}
	tunnel_send(t, &f);
	if (!import) {
		tunnel_set_phase(t, TUNNEL_AWAIT_WELCOME);
		return;
	}
	memset(&f, 0, sizeof(f));
	f.type = FRAME_REGISTER;
	if (agentkey_public(t->cfg.agent_key, f.u.reg.pubkey) != 0) {
		error("cannot read the agent's public key");
		tunnel_stop(t, AGENT_EXIT_REFUSED);
		return;
	}
	snprintf(f.u.reg.node, sizeof(f.u.reg.node), "%s", t->node);
	gethostname(f.u.reg.hostname, sizeof(f.u.reg.hostname) - 1);
	snprintf(f.u.reg.client_version, sizeof(f.u.reg.client_version), "%s", TETHER_VERSION);
	/* The new key's proof over the same transcript: a gateway that knows
	 * it goes on with this tunnel as the agent (REGISTERED "goes_on",
	 * then WELCOME); an older one skips it, closes, and the agent
	 * redials with the key (docs/0044).  Without a proof it redials. */
	if (agentkey_sign(t->cfg.agent_key, msg, len, f.u.reg.key_sig) != 0)
		memset(f.u.reg.key_sig, 0, sizeof(f.u.reg.key_sig));
	OPENSSL_cleanse(msg, sizeof(msg));
	tunnel_send(t, &f);
	tunnel_set_phase(t, TUNNEL_AWAIT_REGISTERED);
}

/* The credential swap: the owner keeps the agent id, then the tunnel
 * forgets the import token and waits for WELCOME on this connection
 * (REGISTERED "goes_on") or redials with the agent key. */
static void
on_registered(struct agent_tunnel *t, const struct frame *in)
{
	agent_metrics_handshake("ok");
	if (strcmp(in->u.registered.cluster, t->cluster) != 0) {
		error("gateway registered this node into another cluster than it joined",
		    KV_S("registered_cluster", in->u.registered.cluster),
		    KV_S("cluster", t->cluster));
		tunnel_stop(t, AGENT_EXIT_REFUSED);
		return;
	}
	if (in->u.registered.agent_id[0] == '\0' ||
	    strlen(in->u.registered.agent_id) >= sizeof(t->agent_id)) {
		error("gateway assigned an empty or over-long agent id");
		tunnel_stop(t, AGENT_EXIT_REFUSED);
		return;
	}
	if (t->cfg.hooks->registered(t->cfg.arg, in->u.registered.agent_id) != 0) {
		tunnel_stop(t, AGENT_EXIT_REFUSED);
		return;
	}
	snprintf(t->agent_id, sizeof(t->agent_id), "%s", in->u.registered.agent_id);
	t->cfg.import_key = NULL;
	OPENSSL_cleanse(t->import_id, sizeof(t->import_id));
	if (in->u.registered.goes_on) {
		info("registered: going on as the agent on this connection",
		    KV_S("agent", t->agent_id), KV_S("cluster", t->cluster));
		tunnel_set_phase(t, TUNNEL_AWAIT_WELCOME);
		return;
	}
	info("registered: reconnecting with the agent key",
	    KV_S("agent", t->agent_id), KV_S("cluster", t->cluster));
	t->reconnect_now = true;
}

static void
tunnel_follow_state(struct agent_tunnel *t, const char *state, const char *last_error)
{
	if (strcmp(t->state, state) != 0 || strcmp(t->last_error, last_error) != 0) {
		if (last_error[0] != '\0')
			info("agent state", KV_S("state", state),
			    KV_S("last_error", last_error));
		else if (strcmp(state, "pending-approval") == 0)
			info("agent state: waiting for an operator (tetherctl agent approve)",
			    KV_S("state", state));
		else
			info("agent state", KV_S("state", state));
	}
	snprintf(t->state, sizeof(t->state), "%s", state);
	snprintf(t->last_error, sizeof(t->last_error), "%s", last_error);
	tunnel_report(t);
}

/* Keeps or drops the pending key by WELCOME's word. */
static void
tunnel_settle_key(struct agent_tunnel *t, const char *key)
{
	bool next = strcmp(key, "next") == 0;
	EVP_PKEY *now;

	if (t->cfg.pending_key == NULL || t->cfg.hooks->key_settle == NULL)
		return;
	now = t->cfg.hooks->key_settle(t->cfg.arg, next);
	if (now == NULL)
		return;   /* both stay; the next handshake settles it again */
	t->cfg.agent_key = now;
	t->cfg.pending_key = NULL;
	if (next)
		info("key rotated: the gateway holds the new key");
	else
		info("key rotation undone: the gateway holds the current key");
}

static void
on_welcome(struct agent_tunnel *t, const struct frame *in)
{
	agent_metrics_handshake("ok");
	tunnel_settle_key(t, in->u.welcome.key);
	tunnel_set_phase(t, TUNNEL_ESTABLISHED);
	t->was_established = true;
	t->backoff_ms = 0;
	t->spread.spread_ms = 0;      /* this gateway's SETTINGS say it again */
	info("connected", KV_S("gateway", gwlist_current(&t->urls)),
	    KV_S("agent", in->u.welcome.agent_id));
	tunnel_follow_state(t, in->u.welcome.state, "");
}

static void
on_verify(struct agent_tunnel *t, const struct frame *in)
{
	struct frame f;
	struct timespec ts;

	memset(&f, 0, sizeof(f));
	f.type = FRAME_VERIFY_OK;
	memcpy(f.u.verify.nonce, in->u.verify.nonce, sizeof(f.u.verify.nonce));
	clock_gettime(CLOCK_REALTIME, &ts);
	f.u.verify.time_ms = (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
	f.u.verify.version = TETHER_PROTOCOL_VERSION;
	tunnel_send(t, &f);
}

/* ---- node key rotation (docs/interface.md, "Node key rotation") ---- */

static void tunnel_protocol_error(struct agent_tunnel *t, const char *reason);

/* KEY_ROTATE with a nonce: a new key, kept pending on disk, then both
 * signatures over the gateway's nonce. */
static void
on_key_rotate(struct agent_tunnel *t, const struct frame *in)
{
	struct frame f;
	EVP_PKEY *next;

	if (t->cfg.hooks->key_pending == NULL || t->cfg.hooks->key_settle == NULL ||
	    t->rotating || t->cfg.pending_key != NULL) {
		debug("key rotation asked for while one is under way: ignored");
		return;
	}
	if ((next = t->cfg.hooks->key_pending(t->cfg.arg)) == NULL)
		return;   /* logged; the gateway's next request tries again */
	t->cfg.pending_key = next;
	runtime_test_stop("agent-pending");
	memset(&f, 0, sizeof(f));
	f.type = FRAME_KEY_PROOF;
	if (agentkey_public(next, f.u.key_proof.pubkey) != 0 ||
	    agentkey_public(t->cfg.agent_key, f.u.key_proof.old_pubkey) != 0 ||
	    key_rotation_prove(t->cfg.agent_key, next, t->agent_id, t->node,
	    in->u.key_rotate.nonce, f.u.key_proof.old_sig,
	    f.u.key_proof.new_sig) != 0) {
		error("cannot prove the new key");
		return;
	}
	t->rotating = true;
	info("key rotation: new key proven to the gateway");
	tunnel_send(t, &f);
	runtime_test_stop("agent-proof-sent");
}

/* KEY_ROTATED: the gateway staged the new key; the node takes it. */
static void
on_key_rotated(struct agent_tunnel *t, const struct frame *in)
{
	uint8_t pub[AGENTKEY_PUB_LEN];
	struct frame f;
	EVP_PKEY *now;

	if (!t->rotating || t->cfg.pending_key == NULL ||
	    agentkey_public(t->cfg.pending_key, pub) != 0 ||
	    memcmp(pub, in->u.key_done.pubkey, sizeof(pub)) != 0) {
		tunnel_protocol_error(t, "KEY_ROTATED names no key of ours");
		return;
	}
	runtime_test_stop("agent-rotated");
	if ((now = t->cfg.hooks->key_settle(t->cfg.arg, true)) == NULL) {
		/* The gateway holds both: the next handshake settles it. */
		agent_tunnel_drop(t);
		return;
	}
	t->cfg.agent_key = now;
	t->cfg.pending_key = NULL;
	t->rotating = false;
	info("key rotated: the node uses its new key");
	runtime_test_stop("agent-switched");
	memset(&f, 0, sizeof(f));
	f.type = FRAME_KEY_SWITCHED;
	memcpy(f.u.key_done.pubkey, pub, sizeof(f.u.key_done.pubkey));
	tunnel_send(t, &f);
}

int
agent_tunnel_ask_rotation(struct agent_tunnel *t)
{
	struct frame f;

	if (t->phase != TUNNEL_ESTABLISHED || t->rotating ||
	    t->cfg.pending_key != NULL || t->cfg.hooks->key_pending == NULL)
		return -1;
	memset(&f, 0, sizeof(f));
	f.type = FRAME_KEY_ROTATE;
	tunnel_send(t, &f);
	return 0;
}

/* In this list: a code no retry can fix, sent only once the gateway has
 * read the credential (docs/interface.md, "Refusals").  Any other code is
 * retried. */
static bool
code_in(const char *code, const char *const *list)
{
	for (size_t i = 0; list[i] != NULL; i++)
		if (strcmp(code, list[i]) == 0)
			return true;
	return false;
}

static const char *const final_codes[] = {
	"token_unknown", "token_expired", "token_used_up", "token_revoked",
	"register_refused", "auth_refused", "revoked", "version", NULL
};
/* Final, and an operator's doing: the process is not restarted. */
static const char *const revoked_codes[] = { "revoked", "token_revoked", NULL };
/* The gateway is up and asks to come back soon (its store is away). */
static const char *const soon_codes[] = { "unavailable", "timeout", NULL };

static void
on_error(struct agent_tunnel *t, const struct frame *in)
{
	const char *code = in->u.error.code, *reason = in->u.error.reason;

	if (t->phase != TUNNEL_ESTABLISHED)
		agent_metrics_handshake(code);

	if (code_in(code, final_codes)) {
		bool revoked = code_in(code, revoked_codes);

		error("gateway refused", KV_S("code", code), KV_S("reason", reason),
		    KV_S("retry", revoked ? "never: revoked by an operator" :
		    "no: a new credential is needed"));
		snprintf(t->last_error, sizeof(t->last_error), "%s", reason);
		if (strcmp(code, "revoked") == 0)
			snprintf(t->state, sizeof(t->state), "revoked");
		tunnel_set_phase(t, TUNNEL_DISCONNECTED);
		tunnel_report(t);
		tunnel_stop(t, revoked ? AGENT_EXIT_REVOKED : AGENT_EXIT_REFUSED);
		return;
	}
	t->heard_word = true;
	warn("gateway closed the tunnel", KV_S("code", code), KV_S("reason", reason));
	if (strcmp(code, "shutdown") == 0)
		t->backoff_ms = 0;
	if (code_in(code, soon_codes))
		t->backoff_cap_ms = AGENT_BACKOFF_RETRY_MAX_MS;
	if (in->u.error.retry_after_ms != 0)
		t->told_ms = in->u.error.retry_after_ms;
}

/* ---- settings pushed by the gateway ---- */

/*
 * Tells the gateway what this agent holds now: every setting it knows.
 * The CAs (hooks.ca) are asked for here, so that SETTINGS "ca" in, when
 * not NULL, is applied first.
 */
static void
tunnel_send_settings_ack(struct agent_tunnel *t, const struct frame_ca *ca_in)
{
	struct frame f;
	struct frame_ca *ca = &f.u.settings.ca;

	memset(&f, 0, sizeof(f));
	f.type = FRAME_SETTINGS_ACK;
	f.u.settings.urls.present = true;
	f.u.settings.urls.n = t->urls.npushed;
	for (size_t i = 0; i < t->urls.npushed; i++)
		snprintf(f.u.settings.urls.url[i], sizeof(f.u.settings.urls.url[i]),
		    "%s", t->urls.url[i]);
	if (t->cfg.hooks->ca != NULL) {
		ca->nheld = t->cfg.hooks->ca(t->cfg.arg, ca_in, ca->held);
		ca->present = ca->nheld > 0 && ca->nheld <= FRAME_CA_MAX_HELD;
		if (!ca->present)
			memset(ca, 0, sizeof(*ca));
	}
	tunnel_send(t, &f);
}

/*
 * SETTINGS "urls": checked, kept (hooks.urls: state.json) when it differs
 * from the list held, then dialled from the next connection on.  A list
 * with a URL this agent cannot dial is refused whole, not cut.
 */
static void
on_settings_urls(struct agent_tunnel *t, const struct frame_urls *in)
{
	const char *urls[FRAME_MAX_URLS];
	char connect_url[URL_MAX], why[160];

	for (size_t i = 0; i < in->n; i++) {
		if (agent_tunnel_url(in->url[i], connect_url, sizeof(connect_url),
		    NULL, 0, why, sizeof(why)) != 0) {
			warn("gateway sent a URL list this agent cannot use: kept "
			    "the one it has", KV_S("url", in->url[i]),
			    KV_S("err", why));
			return;
		}
		urls[i] = in->url[i];
	}
	if (gwlist_same_pushed(&t->urls, urls, in->n))
		return;
	if (t->cfg.hooks->urls != NULL &&
	    t->cfg.hooks->urls(t->cfg.arg, urls, in->n) != 0) {
		warn("cannot keep the gateway's new URL list: kept the one it has");
		return;
	}
	if (gwlist_set(&t->urls, urls, in->n, t->urls.join) != 0) {
		error("out of memory for the gateway's URL list");
		return;
	}
	info("gateway URL list updated", KV_U("urls", t->urls.npushed),
	    KV_S("first", t->urls.npushed > 0 ? t->urls.url[0] : ""),
	    KV_S("join_url", t->urls.join));
}

static void
on_settings(struct agent_tunnel *t, const struct frame *in)
{
	uint32_t spread = in->u.settings.redial_spread_ms;

	if (spread != 0) {
		t->spread.spread_ms = spread > AGENT_REDIAL_SPREAD_MAX_MS ?
		    AGENT_REDIAL_SPREAD_MAX_MS : spread;
		debug("gateway's redial spread", KV_U("spread_ms", t->spread.spread_ms));
	}
	if (in->u.settings.urls.present)
		on_settings_urls(t, &in->u.settings.urls);
	tunnel_send_settings_ack(t, in->u.settings.ca.present ?
	    &in->u.settings.ca : NULL);
}

/* ---- drain: moving to another replica ---- */

#define RETIRE_POLL_MS 200

static void
on_reconnect(struct agent_tunnel *t, const struct frame *in)
{
	uint32_t r = 0, delay;
	struct timeval tv;

	t->heard_word = true;   /* announced: no redial spread if it closes */
	if (evtimer_pending(t->move_timer, NULL))
		return;
	random_bytes((uint8_t *)&r, sizeof(r));
	delay = in->u.reconnect.jitter_ms == 0 ? 0 :
	    r % (in->u.reconnect.jitter_ms + 1);
	t->move_elsewhere = in->u.reconnect.elsewhere != 0;
	info("gateway asks to reconnect elsewhere", KV_S("reason",
	    in->u.reconnect.reason), KV_U("delay_ms", delay),
	    KV_U("streams", t->mux != NULL ? mux_stream_count(t->mux) : 0),
	    KV_U("elsewhere", in->u.reconnect.elsewhere));
	tv = runtime_ms_timeval(delay);
	evtimer_add(t->move_timer, &tv);
}

static void
retire_poll_arm(struct agent_tunnel *t)
{
	struct timeval tv = runtime_ms_timeval(RETIRE_POLL_MS);

	evtimer_add(t->retire_poll, &tv);
}

/* The retired connection closes once its last stream has ended and the
 * new one is established (or could not be). */
static void
tunnel_retire_poll(evutil_socket_t fd, short what, void *arg)
{
	struct agent_tunnel *t = arg;

	if (t->old_ws == NULL)
		return;
	if ((t->old_mux == NULL || mux_stream_count(t->old_mux) == 0) &&
	    (t->phase == TUNNEL_ESTABLISHED || t->old_dial_failed)) {
		info("previous tunnel: its streams are done: closing it");
		wsface_close(t->old_ws, 1000, "moved");
		return;
	}
	retire_poll_arm(t);
}

static void
tunnel_free_retired(struct agent_tunnel *t)
{
	mux_free(t->old_mux);   /* streams left: "tunnel_lost" */
	t->old_mux = NULL;
	if (t->old_ws != NULL)
		wsface_free(t->old_ws);
	t->old_ws = NULL;
	evtimer_del(t->retire_poll);
}

/* RECONNECT's delay is over: retire the connection, dial anew. */
static void
tunnel_move(evutil_socket_t fd, short what, void *arg)
{
	struct agent_tunnel *t = arg;
	size_t streams;

	if (t->ws == NULL || t->phase != TUNNEL_ESTABLISHED || t->stopped)
		return;   /* already reconnecting */
	/* A connection retired before is dropped: at most one is kept. */
	tunnel_free_retired(t);
	streams = t->mux != NULL ? mux_stream_count(t->mux) : 0;
	if (streams > 0)
		info("reconnecting elsewhere; the streams in flight stay on the "
		    "previous tunnel", KV_U("streams", streams));
	else
		info("reconnecting elsewhere; the previous tunnel stays until "
		    "the new one is up");
	t->old_dial_failed = false;
	t->old_elsewhere = t->move_elsewhere;
	t->old_ws = t->ws;
	t->old_mux = t->mux;
	t->ws = NULL;
	t->mux = NULL;
	evtimer_del(t->keepalive);
	tunnel_set_phase(t, TUNNEL_DISCONNECTED);
	tunnel_report(t);
	retire_poll_arm(t);
	t->backoff_ms = 0;
	(void)tunnel_dial(t);
}

/* The retired connection carries only its streams' frames and pings. */
static void
old_on_message(struct agent_tunnel *t, const uint8_t *buf, size_t len)
{
	struct frame f;
	char err[160];
	int rc = frame_decode(buf, len, &f, err, sizeof(err));

	if (rc == FRAME_UNKNOWN_TYPE) {
		debug("previous tunnel: frame of an unknown type skipped",
		    KV_S("err", err));
		return;
	}
	if (rc != 0) {
		warn("previous tunnel: malformed frame: closing it", KV_S("err", err));
		wsface_close(t->old_ws, 1002, "protocol error");
		return;
	}
	if (f.type == FRAME_PING) {
		struct frame pong = { .type = FRAME_PONG };

		pong.u.ping.seq = f.u.ping.seq;
		ws_send_frame(t->old_ws, &pong);
	} else if (f.type >= FRAME_OPEN && t->old_mux != NULL) {
		if (mux_on_frame(t->old_mux, &f, err, sizeof(err)) != 0) {
			warn("previous tunnel: protocol error: closing it",
			    KV_S("err", err));
			wsface_close(t->old_ws, 1002, "protocol error");
		}
	} else if (f.type == FRAME_ERROR) {
		info("previous tunnel: gateway closes it", KV_S("code", f.u.error.code),
		    KV_S("reason", f.u.error.reason));
	}
}

static void
tunnel_protocol_error(struct agent_tunnel *t, const char *reason)
{
	struct frame f;

	warn("protocol error from gateway", KV_S("reason", reason));
	frame_make_error(&f, "protocol", reason);
	tunnel_send(t, &f);
	if (t->ws != NULL)
		wsface_close(t->ws, 1002, "protocol error");
}

static void
on_established_frame(struct agent_tunnel *t, const struct frame *f)
{
	char err[160];

	if (f->type == FRAME_STATE) {
		tunnel_follow_state(t, f->u.state.state, f->u.state.last_error);
	} else if (f->type == FRAME_VERIFY) {
		on_verify(t, f);
	} else if (f->type == FRAME_PING) {
		struct frame pong = { .type = FRAME_PONG };

		pong.u.ping.seq = f->u.ping.seq;
		tunnel_send(t, &pong);
	} else if (f->type == FRAME_PONG) {
		if (t->cfg.hooks->pong != NULL)
			t->cfg.hooks->pong(t->cfg.arg, f->u.ping.seq);
	} else if (f->type == FRAME_RECONNECT) {
		on_reconnect(t, f);
	} else if (f->type == FRAME_SETTINGS) {
		on_settings(t, f);
	} else if (f->type == FRAME_KEY_ROTATE) {
		on_key_rotate(t, f);
	} else if (f->type == FRAME_KEY_ROTATED) {
		on_key_rotated(t, f);
	} else if (mux_on_frame(t->mux, f, err, sizeof(err)) != 0) {
		tunnel_protocol_error(t, err);
	}
}

static void
tunnel_on_message(struct agent_tunnel *t, const uint8_t *buf, size_t len)
{
	struct frame f;
	char err[160], reason[200];
	int rc = frame_decode(buf, len, &f, err, sizeof(err));

	if (rc == FRAME_UNKNOWN_TYPE) {
		/* A newer gateway's frame: skipped, in any phase. */
		debug("frame of an unknown type skipped", KV_S("err", err));
		return;
	}
	if (rc != 0) {
		snprintf(reason, sizeof(reason), "malformed frame: %s", err);
		tunnel_protocol_error(t, reason);
		return;
	}
	if (f.type == FRAME_ERROR) {
		on_error(t, &f);
		return;
	}
	if (t->phase == TUNNEL_AWAIT_CHALLENGE && f.type == FRAME_CHALLENGE)
		return on_challenge(t, &f);
	if (t->phase == TUNNEL_AWAIT_REGISTERED && f.type == FRAME_REGISTERED)
		return on_registered(t, &f);
	if (t->phase == TUNNEL_AWAIT_WELCOME && f.type == FRAME_WELCOME)
		return on_welcome(t, &f);
	if (t->phase == TUNNEL_ESTABLISHED && (f.type == FRAME_STATE ||
	    f.type == FRAME_VERIFY || f.type == FRAME_PING || f.type == FRAME_PONG ||
	    f.type == FRAME_RECONNECT || f.type == FRAME_SETTINGS ||
	    f.type == FRAME_RECONNECT || f.type == FRAME_KEY_ROTATE ||
	    f.type == FRAME_KEY_ROTATED ||
	    (f.type >= FRAME_OPEN && t->mux != NULL)))
		return on_established_frame(t, &f);
	snprintf(reason, sizeof(reason), "unexpected %s frame in phase %s",
	    frame_type_name(f.type), phase_names[t->phase]);
	tunnel_protocol_error(t, reason);
}

/* ---- keepalive ---- */

static void
keepalive_arm(struct agent_tunnel *t, int64_t in_ms)
{
	struct timeval tv = runtime_ms_timeval(in_ms < 0 ? 0 : (uint32_t)in_ms);

	evtimer_add(t->keepalive, &tv);
}

/* A message (or the gateway's ping) arrived on ws, the current
 * connection: the silence, and any ping, is over.  Its time is the read
 * that brought it (wsface_heard_ms, no clock read here), or now for a
 * face that does not tell. */
static void
keepalive_heard(struct agent_tunnel *t, struct wsface *ws)
{
	int64_t at = wsface_heard_ms(ws);

	if (at == 0)
		at = runtime_monotonic_ms();
	if (at > t->last_rx_ms)
		t->last_rx_ms = at;
	t->ping_ms = 0;
}

/* Fires at the next deadline (messages and reads only move the
 * deadlines, so it may fire early and re-arm): silence past the interval
 * sends a PING, silence past the timeout after that drops the tunnel.
 * Deadlines are judged on runtime_monotonic_ms, not on libevent's clock: a
 * timer that runs before its deadline by that clock (libevent's own may
 * lag it, or round) only re-arms for what is left.
 *
 * Silence is the time since the connection last read the gateway's bytes
 * (wsface_heard_ms, which wsclient notes per read callback, asked here
 * only), a whole message or not: a large message arriving slowly over a
 * slow link is the gateway talking, and a tunnel dropped for it would be
 * dropped again each time it is used.  Over TLS the read that counts is
 * a record decrypted: authenticated with the session's keys, so it came
 * from the gateway itself; raw bytes off the socket would not say so
 * (another hop, a balancer or a proxy, may send them; a record begun
 * proves nothing until it is whole).  A record is 16 KiB at most: the
 * link must bring one per interval + timeout (~1.6 KB/s at the
 * defaults).  A read since the PING answers it (its stamp is at or after
 * the PING: an older one was counted before the PING was decided).
 *
 * An answer may have come in time and still not be read when the
 * deadline is judged: its bytes reached the socket after the loop polled
 * (the loop held past the deadline in a callback of the same pass).  So
 * a deadline that finds input pending (wsface_input_pending) waits one
 * more millisecond, once per ping (the next poll's read callbacks run
 * first), then judges; as the gateway does (wsconn.c, ws_due).  An answer
 * read in time whose delivery waits for the WebSocket's next turn (a
 * frame not whole in its first pull, wsturn.h: a 0 ms timer) counts from
 * its read already. */
static void
tunnel_keepalive(evutil_socket_t fd, short what, void *arg)
{
	struct agent_tunnel *t = arg;
	int64_t now = runtime_monotonic_ms(), due, heard;
	struct wsface *ws;

	if (t->ws == NULL || t->phase == TUNNEL_DISCONNECTED ||
	    t->phase == TUNNEL_CONNECTING)
		return;
	heard = wsface_heard_ms(t->ws);
	if (heard > t->last_rx_ms) {
		t->last_rx_ms = heard;
		t->ping_ms = 0;
	}
	if (t->ping_ms != 0) {
		due = t->ping_ms + t->cfg.ping_timeout_ms;
		if (now >= due && !t->ping_grace && wsface_input_pending(t->ws)) {
			t->ping_grace = true;
			keepalive_arm(t, 1);
			return;
		}
		if (now >= due) {
			warn("tunnel: no answer to a ping: dropping it and "
			    "reconnecting", KV_U("ping_timeout_ms",
			    t->cfg.ping_timeout_ms), KV_I("silent_ms",
			    now - t->last_rx_ms));
			t->ping_ms = 0;
			t->dropped_silent = true;
			/* A gateway that answers no ping answers no close
			 * either: the connection goes now, as if it had
			 * closed (its streams end, the redial is scheduled). */
			ws = t->ws;
			ws_close(ws, 101, "ping timeout", t);
			wsface_free(ws);
			return;
		}
	} else {
		due = t->last_rx_ms + t->cfg.ping_interval_ms;
		if (now >= due) {
			t->ping_ms = now;
			t->ping_grace = false;
			due = now + t->cfg.ping_timeout_ms;
			if (t->phase == TUNNEL_ESTABLISHED) {
				struct frame ping = { .type = FRAME_PING };

				ping.u.ping.seq = ++t->ping_seq;
				tunnel_send(t, &ping);
			}
		}
	}
	keepalive_arm(t, due - now);
}

/* ---- the WebSocket ---- */

/* A multiplexer sends on its own WebSocket (wsmux.h), which outlives it:
 * ws_close, tunnel_free_retired and agent_tunnel_free free the
 * multiplexer first. */

/* Until the agent is active it starts no services and carries no stream. */
static void
tunnel_stream_open(struct mux *m, struct mux_stream *s, const struct frame_open *req,
    void *arg)
{
	struct agent_tunnel *t = arg;
	char reason[96];

	if (strcmp(t->state, "active") != 0) {
		snprintf(reason, sizeof(reason), "agent is %s, not active", t->state);
		mux_stream_refuse(s, "not_active", reason);
		return;
	}
	t->cfg.hooks->on_open(m, s, req, t->cfg.arg);
}

static const struct mux_handlers tunnel_mux_handlers = {
	.on_open = tunnel_stream_open,
};

static void
ws_open(struct wsface *c, void *arg)
{
	struct agent_tunnel *t = arg;
	struct mux_config cfg = MUX_DEFAULT_CONFIG;

	cfg.odd_ids = 0;
	cfg.window = t->cfg.stream_window;
	cfg.max_streams = t->cfg.max_streams;
	cfg.counted = 1;
	t->mux = wsmux_new(t->base, &cfg, c, &tunnel_mux_handlers, t);
	if (t->mux == NULL) {
		error("out of memory");
		wsface_close(c, 1011, "out of memory");
		return;
	}
	keepalive_heard(t, c);
	keepalive_arm(t, t->cfg.ping_interval_ms);
	tunnel_send_hello(t);
}

static void
ws_message(struct wsface *c, const uint8_t *data, size_t len, int binary, void *arg)
{
	struct agent_tunnel *t = arg;

	if (c == t->old_ws) {
		if (binary)
			old_on_message(t, data, len);
		return;
	}
	keepalive_heard(t, c);
	if (!binary) {
		tunnel_protocol_error(t, "text message on the tunnel");
		return;
	}
	tunnel_on_message(t, data, len);
}

/* The gateway's own keepalive ping proves it alive as well as a message:
 * the agent's ping then waits for another interval of silence, so a quiet
 * tunnel carries one ping exchange per interval, not one from each end. */
static void
ws_ping(struct wsface *c, void *arg)
{
	struct agent_tunnel *t = arg;

	if (c == t->ws)      /* a retired connection's pings prove nothing */
		keepalive_heard(t, c);
}

static void
ws_drain(struct wsface *c, void *arg)
{
	struct agent_tunnel *t = arg;

	if (c == t->old_ws) {
		if (t->old_mux != NULL)
			mux_on_drain(t->old_mux);
	} else if (c == t->ws && t->mux != NULL) {
		mux_on_drain(t->mux);
	}
}

static void
ws_close(struct wsface *c, int http_status, const char *reason, void *arg)
{
	struct agent_tunnel *t = arg;
	bool was_up = t->phase == TUNNEL_ESTABLISHED;

	/* c is freed when this returns (as on_close), or by tunnel_keepalive
	 * right after: its multiplexer goes first. */
	if (c == t->old_ws) {
		info("previous tunnel closed", KV_S("reason", reason));
		t->old_ws = NULL;
		tunnel_free_retired(t);
		return;
	}
	evtimer_del(t->keepalive);
	/* Every stream of the tunnel ends with it. */
	mux_free(t->mux);
	t->mux = NULL;
	t->ws = NULL;
	if (t->phase == TUNNEL_CONNECTING || http_status != 101) {
		warn("cannot open the tunnel", KV_S("gateway", gwlist_current(&t->urls)),
		    KV_S("reason", reason), KV_I("http_status", http_status));
		/* The retired one may go when idle, unless its replica said
		 * another is live: then this dial most likely came back to the
		 * draining one (the balancer has not noticed yet), and the next
		 * reaches the other.  Its drain's end bounds the wait. */
		if (t->old_ws != NULL && t->old_elsewhere)
			info("the previous tunnel stays: another replica is live "
			    "and the next dial can reach it");
		else
			t->old_dial_failed = true;
		/* What `status` says until a WELCOME clears it: a TLS failure
		 * names its likely cause and recovery (wsclient.c). */
		if (reason != NULL && reason[0] != '\0')
			snprintf(t->last_error, sizeof(t->last_error), "%s", reason);
	}
	else if (was_up)
		warn("tunnel lost", KV_S("reason", reason));
	/* Lost without a word from the gateway: the spread it told applies.
	 * Not to a silence the keepalive ended: each agent's silence clock
	 * starts at its own last message, so those are spread already (over
	 * the ping interval), and a hung replica is left as soon as may be. */
	if (was_up && !t->heard_word && !t->dropped_silent) {
		t->spread.losses++;
		t->lost_ms = runtime_monotonic_ms();
		t->spread_next = t->spread.spread_ms != 0 &&
		    !t->cfg.ignore_redial_spread;
	}
	/* Never established on this URL: the next one is dialled (a
	 * registration's planned redial stays where it registered). */
	if (!t->was_established && !t->reconnect_now && t->urls.n > 1) {
		gwlist_next(&t->urls);
		info("next gateway URL", KV_S("gateway", gwlist_current(&t->urls)));
	}
	tunnel_set_phase(t, TUNNEL_DISCONNECTED);
	tunnel_report(t);
	if (!t->stopped)
		tunnel_schedule_reconnect(t);
}

static const struct wsface_handlers ws_callbacks = {
	.on_open = ws_open,
	.on_message = ws_message,
	.on_ping = ws_ping,
	.on_drain = ws_drain,
	.on_close = ws_close,
};

static int
tunnel_dial(struct agent_tunnel *t)
{
	struct wsclient_config cfg;
	char err[256], connect_url[URL_MAX], host[URL_HOST_MAX + 1];

	/* Every URL in the list was checked when it came in. */
	if (agent_tunnel_url(gwlist_current(&t->urls), connect_url,
	    sizeof(connect_url), host, sizeof(host), err, sizeof(err)) != 0) {
		error("cannot dial the gateway URL", KV_S("gateway",
		    gwlist_current(&t->urls)), KV_S("err", err));
		tunnel_stop(t, AGENT_EXIT_REFUSED);
		return -1;
	}
	memset(&cfg, 0, sizeof(cfg));
	cfg.url = connect_url;
	cfg.subprotocol = TETHER_SUBPROTOCOL;
	cfg.ca_file = t->ca_file;
	cfg.tls_ctx = t->tls_ctx;
	cfg.max_message = (1 << 20) + MAX_MESSAGE_SLACK;
	cfg.low_water = 128 * 1024;
	cfg.proxy_url = no_proxy_match(t->no_proxy, host) ? NULL : t->cfg.proxy_url;
	cfg.proxy_ca_file = t->cfg.proxy_ca_file;
	cfg.proxy_auth = t->cfg.proxy_auth;
	cfg.proxy_user = t->cfg.proxy_user;
	cfg.proxy_password = t->cfg.proxy_password;
	cfg.retry_after_ms = &t->told_ms;
	tunnel_set_phase(t, TUNNEL_CONNECTING);
	debug("connecting", KV_S("url", connect_url),
	    KV_S("proxy", cfg.proxy_url != NULL ? "yes" : "no"));
	t->dials++;
	t->was_established = false;
	t->heard_word = false;
	t->dropped_silent = false;
	if (t->lost_ms != 0) {
		t->spread.waited_ms += (uint64_t)(runtime_monotonic_ms() - t->lost_ms);
		t->lost_ms = 0;
	}
	if (t->come_back_ms != 0 && runtime_monotonic_ms() < t->come_back_ms)
		t->early++;
	t->come_back_ms = 0;
	t->told_ms = 0;
	t->ws = wsclient_connect(t->base, &cfg, &ws_callbacks, t, err, sizeof(err));
	if (t->ws == NULL) {
		error("cannot connect", KV_S("gateway", gwlist_current(&t->urls)), KV_S("err", err));
		tunnel_set_phase(t, TUNNEL_DISCONNECTED);
		tunnel_stop(t, AGENT_EXIT_REFUSED);
		return -1;
	}
	return 0;
}

/* The loop's cached clock, which timers run on, lags the real one when a
 * pass is long (a swarm of agents on one loop): a wait the gateway asked
 * for is checked against the real clock and finished if need be. */
static void
tunnel_on_reconnect(evutil_socket_t fd, short what, void *arg)
{
	struct agent_tunnel *t = arg;
	int64_t left = t->come_back_ms - runtime_monotonic_ms();
	struct timeval tv;

	if (t->come_back_ms != 0 && left > 0 && !t->cfg.ignore_retry_after) {
		tv = runtime_ms_timeval((uint32_t)left);
		evtimer_add(t->reconnect_timer, &tv);
		return;
	}
	(void)tunnel_dial(t);
}

/* The gateway said when to come back: that, bounded, plus our own jitter.
 * The exponential backoff stays where it was for the next network error. */
static uint32_t
told_delay(struct agent_tunnel *t)
{
	uint32_t told, delay = backoff_told(t->told_ms, &told);

	t->told++;
	t->come_back_ms = runtime_monotonic_ms() + told;
	t->told_ms = 0;
	t->backoff_cap_ms = 0;
	return delay;
}

/* Exponential backoff with jitter: the delay doubles up to
 * AGENT_BACKOFF_MAX_MS and each wait is drawn from [delay/2, delay] so that
 * agents cut off together do not all come back in the same instant.  A
 * gateway's retry-after comes first (told_delay). */
static void
tunnel_schedule_reconnect(struct agent_tunnel *t)
{
	struct timeval tv;
	uint32_t delay, jitter = 0;

	if (t->reconnect_now) {
		t->reconnect_now = false;
		delay = 0;
	} else if (t->told_ms != 0 && !t->cfg.ignore_retry_after) {
		uint32_t told = t->told_ms;

		delay = told_delay(t);
		info("reconnecting", KV_U("delay_ms", delay),
		    KV_U("retry_after_ms", told));
	} else if (t->spread_next) {
		random_bytes((uint8_t *)&jitter, sizeof(jitter));
		delay = jitter % (t->spread.spread_ms + 1);
		t->spread.draws++;
		t->spread.drawn_ms += delay;
		if (delay > t->spread.max_drawn_ms)
			t->spread.max_drawn_ms = delay;
		info("reconnecting", KV_U("delay_ms", delay),
		    KV_U("redial_spread_ms", t->spread.spread_ms));
	} else {
		if (t->told_ms != 0) {   /* ignored (a benchmark's "before") */
			t->told++;
			t->come_back_ms = runtime_monotonic_ms() + t->told_ms;
			t->told_ms = 0;
		}
		delay = backoff_next(&t->backoff_ms, t->backoff_cap_ms);
		t->backoff_cap_ms = 0;   /* one refusal, one shorter wait */
		info("reconnecting", KV_U("delay_ms", delay));
	}
	t->spread_next = false;   /* one draw per loss; then the backoff */
	tv = runtime_ms_timeval(delay);
	evtimer_add(t->reconnect_timer, &tv);
}

/* ---- the interface ---- */

static const char *const gateway_url_schemes[] = { "https", NULL };

int
agent_tunnel_url(const char *gateway_url, char *connect_url, size_t len,
    char *host, size_t hostlen, char *why, size_t whylen)
{
	char authority[URL_HOST_MAX + 16];
	struct url u;
	int r = -1;

	if (url_parse(gateway_url, gateway_url_schemes, &u, why, whylen) != 0)
		return -1;
	if (u.has_userinfo || !url_is_origin(&u))
		snprintf(why, whylen, "has a user, path or query");
	else if (url_authority(&u, authority, sizeof(authority)) < 0 ||
	    (size_t)snprintf(connect_url, len, "wss://%s/v1/connect",
	    authority) >= len)
		snprintf(why, whylen, "too long");
	else {
		if (host != NULL)
			snprintf(host, hostlen, "%s", u.host);
		r = 0;
	}
	url_clear(&u);
	return r;
}

struct agent_tunnel *
agent_tunnel_new(struct event_base *base, const struct agent_tunnel_config *cfg)
{
	struct agent_tunnel *t = calloc(1, sizeof(*t));
	char url[URL_MAX], why[160];
	bool urls_ok = cfg->ngateway_urls <= FRAME_MAX_URLS;

	if (t == NULL)
		return NULL;
	t->cfg = *cfg;
	t->base = base;
	for (size_t i = 0; i < cfg->ngateway_urls && urls_ok; i++)
		urls_ok = agent_tunnel_url(cfg->gateway_urls[i], url, sizeof(url),
		    NULL, 0, why, sizeof(why)) == 0;
	if (urls_ok && agent_tunnel_url(cfg->gateway_url, url, sizeof(url),
	    NULL, 0, why, sizeof(why)) == 0)
		(void)gwlist_set(&t->urls, cfg->gateway_urls, cfg->ngateway_urls,
		    cfg->gateway_url);
	t->ca_file = strdup(cfg->ca_file);
	t->no_proxy = cfg->no_proxy != NULL ? strdup(cfg->no_proxy) : NULL;
	snprintf(t->node, sizeof(t->node), "%s", cfg->node);
	snprintf(t->cluster, sizeof(t->cluster), "%s", cfg->cluster);
	snprintf(t->agent_id, sizeof(t->agent_id), "%s", cfg->agent_id);
	snprintf(t->import_id, sizeof(t->import_id), "%s",
	    cfg->import_id != NULL ? cfg->import_id : "");
	snprintf(t->state, sizeof(t->state), "unknown");
	if (cfg->tls_ctx != NULL && SSL_CTX_up_ref(cfg->tls_ctx) == 1)
		t->tls_ctx = cfg->tls_ctx;
	t->reconnect_timer = evtimer_new(base, tunnel_on_reconnect, t);
	t->keepalive = evtimer_new(base, tunnel_keepalive, t);
	t->move_timer = evtimer_new(base, tunnel_move, t);
	t->retire_poll = evtimer_new(base, tunnel_retire_poll, t);
	if (t->reconnect_timer == NULL || t->keepalive == NULL ||
	    t->move_timer == NULL || t->retire_poll == NULL || t->urls.n == 0 ||
	    t->ca_file == NULL || (cfg->no_proxy != NULL && t->no_proxy == NULL)) {
		agent_tunnel_free(t);
		return NULL;
	}
	return t;
}

int
agent_tunnel_start(struct agent_tunnel *t)
{
	char err[320];

	if (t->tls_ctx == NULL &&
	    (t->tls_ctx = wsclient_tls_context(t->ca_file, err, sizeof(err))) == NULL) {
		error("cannot set up TLS", KV_S("gateway", gwlist_current(&t->urls)), KV_S("err", err));
		tunnel_stop(t, AGENT_EXIT_REFUSED);
		return -1;
	}
	return tunnel_dial(t);
}

void
agent_tunnel_free(struct agent_tunnel *t)
{
	if (t == NULL)
		return;
	mux_free(t->mux);
	if (t->ws != NULL)
		wsface_free(t->ws);
	if (t->retire_poll != NULL)
		tunnel_free_retired(t);
	if (t->reconnect_timer != NULL)
		event_free(t->reconnect_timer);
	if (t->keepalive != NULL)
		event_free(t->keepalive);
	if (t->move_timer != NULL)
		event_free(t->move_timer);
	if (t->retire_poll != NULL)
		event_free(t->retire_poll);
	OPENSSL_cleanse(t->import_id, sizeof(t->import_id));
	SSL_CTX_free(t->tls_ctx);
	gwlist_clear(&t->urls);
	free(t->ca_file);
	free(t->no_proxy);
	free(t);
}

int
agent_tunnel_ping(struct agent_tunnel *t, uint32_t seq)
{
	struct frame ping = { .type = FRAME_PING };

	if (t->phase != TUNNEL_ESTABLISHED || t->ws == NULL)
		return -1;
	ping.u.ping.seq = seq;
	tunnel_send(t, &ping);
	return 0;
}

void
agent_tunnel_set_tls(struct agent_tunnel *t, struct ssl_ctx_st *ctx)
{
	if (ctx == NULL || SSL_CTX_up_ref(ctx) != 1)
		return;
	SSL_CTX_free(t->tls_ctx);
	t->tls_ctx = ctx;
}

void
agent_tunnel_drop(struct agent_tunnel *t)
{
	if (t->ws != NULL)
		wsface_close(t->ws, 1001, "dropped");
}

bool
agent_tunnel_established(const struct agent_tunnel *t)
{
	return t->phase == TUNNEL_ESTABLISHED;
}

const char *
agent_tunnel_state(const struct agent_tunnel *t)
{
	return t->state;
}

const char *
agent_tunnel_gateway(const struct agent_tunnel *t)
{
	return gwlist_current(&t->urls);
}

uint32_t
agent_tunnel_dials(const struct agent_tunnel *t)
{
	return t->dials;
}

void
agent_tunnel_retry_after(const struct agent_tunnel *t, uint32_t *told,
    uint32_t *early)
{
	*told = t->told;
	*early = t->early;
}

void
agent_tunnel_spread(const struct agent_tunnel *t, struct agent_spread *out)
{
	*out = t->spread;
}

struct mux *
agent_tunnel_mux(const struct agent_tunnel *t)
{
	return t->phase == TUNNEL_ESTABLISHED ? t->mux : NULL;
}
