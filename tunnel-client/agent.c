/*
 * agent.c: `tether-client run`: the node's end of the tunnel (see agent.h).
 *
 * One libevent loop drives the tunnel's WebSocket (common/wsclient.c), the
 * streams' sockets and the reconnect
 * timer.  The tunnel's handshake is a small state machine:
 *
 *   DISCONNECTED --connect--> AWAIT_CHALLENGE --CHALLENGE/AUTH-->
 *     import token:  AWAIT_REGISTERED --REGISTERED--> (save credential) DISCONNECTED
 *     agent key:     AWAIT_WELCOME --WELCOME--> ESTABLISHED
 *
 * A refusal the gateway calls final (bad, expired or used-up token, revoked
 * agent, no common version) ends the process with exit 1 and the gateway's
 * reason; anything else (network loss, gateway restart) is retried with
 * exponential backoff and jitter, capped near 30 s.
 *
 * Keepalive: a tunnel silent for --ping-interval gets a PING (once it is
 * established; before that the silence is only timed), and one that stays
 * silent for --ping-timeout after it is closed and dialled again.  A stopped
 * gateway or a path that died without a RST is noticed this way, not only
 * when TCP gives up hours later.
 */
#include "agent.h"

#include <limits.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <event2/dns.h>
#include <event2/event.h>
#include <openssl/crypto.h>

#include "agent_metrics.h"
#include "agentkey.h"
#include "dialer.h"
#include "fileio.h"
#include "frame.h"
#include "log.h"
#include "mux.h"
#include "proxy.h"
#include "prom_http.h"
#include "runtime.h"
#include "sdnotify.h"
#include "state.h"
#include "token.h"
#include "url.h"
#include "wsclient.h"

#define BACKOFF_MIN_MS   500
#define BACKOFF_MAX_MS   30000
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

struct agent {
	const char *dir;
	struct agent_options opt;
	struct client_state st;
	EVP_PKEY *agent_key;          /* this node's Ed25519 key */
	EVP_PKEY *import_key;         /* derived from the import token, until registered */
	char import_id[TOKEN_ID_LEN + 1];
	char gw_host[256];
	int gw_port;
	char ca_path[PATH_MAX];
	char connect_url[300];        /* wss://HOST:PORT/v1/connect */

	struct event_base *base;
	struct evdns_base *dns;
	struct wsclient *ws;          /* the tunnel, while connected or connecting */
	struct mux *mux;              /* its streams, once established */
	struct dialer *dialer;
	struct event *reconnect_timer;
	struct event *keepalive;      /* the next ping or drop deadline */
	struct event *sigterm, *sigint;
	struct prom_http *metrics;    /* --metrics-listen, or NULL */
	int64_t last_rx_ms;           /* monotonic: the gateway's last message */
	int64_t ping_ms;              /* monotonic: the silence clock started; 0 none */
	uint32_t ping_seq;

	enum tunnel_phase phase;
	uint32_t backoff_ms;
	bool reconnect_now;           /* after REGISTERED: no backoff */
	char state[64];               /* the agent state the gateway last sent */
	char last_error[FRAME_REASON_MAX + 1];
	int exit_code;
	bool stopping;
};

static void agent_schedule_reconnect(struct agent *a);

static void
agent_set_phase(struct agent *a, enum tunnel_phase next)
{
	debug("tunnel phase", KV_S("from", phase_names[a->phase]),
	    KV_S("to", phase_names[next]));
	a->phase = next;
	agent_metrics_connected(next == TUNNEL_ESTABLISHED);
}

static void
agent_write_status(struct agent *a)
{
	client_status_write(a->dir, a->state, a->phase == TUNNEL_ESTABLISHED,
	    a->last_error);
	sdnotify_status("agent %s, tunnel %s%s%s", a->state,
	    a->phase == TUNNEL_ESTABLISHED ? "up" : "down",
	    a->last_error[0] != '\0' ? ": " : "", a->last_error);
}

static void
agent_stop(struct agent *a, int code)
{
	a->exit_code = code;
	a->stopping = true;
	event_base_loopbreak(a->base);
}

static void
agent_send(struct agent *a, const struct frame *f)
{
	uint8_t *buf;
	size_t len;

	if (a->ws == NULL)
		return;
	if (frame_encode(f, 0, &buf, &len) != 0) {
		error("cannot encode a frame", KV_S("frame", frame_type_name(f->type)));
		return;
	}
	wsclient_send(a->ws, buf, len, 1);
	free(buf);
}

/* ---- handshake ---- */

static void
agent_send_hello(struct agent *a)
{
	struct frame f;

	memset(&f, 0, sizeof(f));
	f.type = FRAME_HELLO;
	f.u.hello.versions[0] = TETHER_PROTOCOL_VERSION;
	f.u.hello.nversions = 1;
	snprintf(f.u.hello.node, sizeof(f.u.hello.node), "%s", a->st.node);
	if (a->st.agent_id[0] != '\0') {
		f.u.hello.cred = FRAME_CRED_AGENT;
		snprintf(f.u.hello.id, sizeof(f.u.hello.id), "%s", a->st.agent_id);
	} else {
		f.u.hello.cred = FRAME_CRED_IMPORT;
		snprintf(f.u.hello.id, sizeof(f.u.hello.id), "%s", a->import_id);
	}
	agent_send(a, &f);
	agent_set_phase(a, TUNNEL_AWAIT_CHALLENGE);
}

static void
on_challenge(struct agent *a, const struct frame *in)
{
	bool import = a->st.agent_id[0] == '\0';
	int cred = import ? FRAME_CRED_IMPORT : FRAME_CRED_AGENT;
	const char *id = import ? a->import_id : a->st.agent_id;
	uint8_t msg[AUTH_TRANSCRIPT_MAX];
	struct frame f;
	size_t len;

	memset(&f, 0, sizeof(f));
	f.type = FRAME_AUTH;
	len = auth_transcript(msg, sizeof(msg), in->u.challenge.version, cred, id,
	    a->st.node, in->u.challenge.nonce);
	if (len == 0 || agentkey_sign(import ? a->import_key : a->agent_key, msg,
	    len, f.u.auth.sig) != 0) {
		error("cannot sign the challenge");
		agent_stop(a, 1);
		return;
	}
	agent_send(a, &f);
	if (!import) {
		agent_set_phase(a, TUNNEL_AWAIT_WELCOME);
		return;
	}
	memset(&f, 0, sizeof(f));
	f.type = FRAME_REGISTER;
	if (agentkey_public(a->agent_key, f.u.reg.pubkey) != 0) {
		error("cannot read the agent's public key");
		agent_stop(a, 1);
		return;
	}
	snprintf(f.u.reg.node, sizeof(f.u.reg.node), "%s", a->st.node);
	gethostname(f.u.reg.hostname, sizeof(f.u.reg.hostname) - 1);
	snprintf(f.u.reg.client_version, sizeof(f.u.reg.client_version), "%s", TETHER_VERSION);
	agent_send(a, &f);
	agent_set_phase(a, TUNNEL_AWAIT_REGISTERED);
}

/* The credential swap: persist the agent id, then forget the import token. */
static void
on_registered(struct agent *a, const struct frame *in)
{
	char err[512], path[PATH_MAX];

	agent_metrics_handshake("ok");
	if (strcmp(in->u.registered.cluster, a->st.cluster) != 0) {
		error("gateway registered this node into another cluster than it joined",
		    KV_S("registered_cluster", in->u.registered.cluster),
		    KV_S("cluster", a->st.cluster));
		agent_stop(a, 1);
		return;
	}
	if (strlen(in->u.registered.agent_id) >= sizeof(a->st.agent_id)) {
		error("gateway assigned an over-long agent id");
		agent_stop(a, 1);
		return;
	}
	memcpy(a->st.agent_id, in->u.registered.agent_id,
	    strlen(in->u.registered.agent_id) + 1);
	if (client_state_save(a->dir, &a->st, err, sizeof(err)) != 0) {
		error("registered but cannot save it", KV_S("agent", a->st.agent_id),
		    KV_S("err", err));
		agent_stop(a, 1);
		return;
	}
	client_path(a->dir, "import.token", path, sizeof(path));
	if (unlink(path) != 0)
		warn("cannot remove the import token: remove it by hand",
		    KV_S("path", path));
	EVP_PKEY_free(a->import_key);
	a->import_key = NULL;
	OPENSSL_cleanse(a->import_id, sizeof(a->import_id));
	info("registered: reconnecting with the agent key",
	    KV_S("agent", a->st.agent_id), KV_S("cluster", a->st.cluster));
	a->reconnect_now = true;
}

static void
agent_follow_state(struct agent *a, const char *state, const char *last_error)
{
	if (strcmp(a->state, state) != 0 || strcmp(a->last_error, last_error) != 0) {
		if (last_error[0] != '\0')
			info("agent state", KV_S("state", state),
			    KV_S("last_error", last_error));
		else if (strcmp(state, "pending-approval") == 0)
			info("agent state: waiting for an operator (tetherctl agent approve)",
			    KV_S("state", state));
		else
			info("agent state", KV_S("state", state));
	}
	snprintf(a->state, sizeof(a->state), "%s", state);
	snprintf(a->last_error, sizeof(a->last_error), "%s", last_error);
	agent_write_status(a);
}

static void
on_welcome(struct agent *a, const struct frame *in)
{
	agent_metrics_handshake("ok");
	agent_set_phase(a, TUNNEL_ESTABLISHED);
	a->backoff_ms = 0;
	info("connected", KV_S("gateway", a->st.gateway_url),
	    KV_S("agent", in->u.welcome.agent_id));
	agent_follow_state(a, in->u.welcome.state, "");
}

static void
on_verify(struct agent *a, const struct frame *in)
{
	struct frame f;
	struct timespec ts;

	memset(&f, 0, sizeof(f));
	f.type = FRAME_VERIFY_OK;
	memcpy(f.u.verify.nonce, in->u.verify.nonce, sizeof(f.u.verify.nonce));
	clock_gettime(CLOCK_REALTIME, &ts);
	f.u.verify.time_ms = (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
	f.u.verify.version = TETHER_PROTOCOL_VERSION;
	agent_send(a, &f);
}

/* Refusals that no retry can fix. */
static bool
error_is_final(const char *code)
{
	static const char *const final_codes[] = {
		"token_unknown", "token_expired", "token_used_up", "token_revoked",
		"register_refused", "auth_refused", "revoked", "version", NULL
	};

	for (size_t i = 0; final_codes[i] != NULL; i++)
		if (strcmp(code, final_codes[i]) == 0)
			return true;
	return false;
}

static void
on_error(struct agent *a, const struct frame *in)
{
	const char *code = in->u.error.code, *reason = in->u.error.reason;

	if (a->phase != TUNNEL_ESTABLISHED)
		agent_metrics_handshake(code);

	if (error_is_final(code)) {
		error("gateway refused", KV_S("code", code), KV_S("reason", reason));
		snprintf(a->last_error, sizeof(a->last_error), "%s", reason);
		if (strcmp(code, "revoked") == 0)
			snprintf(a->state, sizeof(a->state), "revoked");
		a->phase = TUNNEL_DISCONNECTED;
		agent_write_status(a);
		agent_stop(a, 1);
		return;
	}
	warn("gateway closed the tunnel", KV_S("code", code), KV_S("reason", reason));
	if (strcmp(code, "shutdown") == 0)
		a->backoff_ms = 0;
}

static void
agent_protocol_error(struct agent *a, const char *reason)
{
	struct frame f;

	warn("protocol error from gateway", KV_S("reason", reason));
	frame_make_error(&f, "protocol", reason);
	agent_send(a, &f);
	if (a->ws != NULL)
		wsclient_close(a->ws, 1002, "protocol error");
}

static void
agent_on_message(struct agent *a, const uint8_t *buf, size_t len)
{
	struct frame f;
	char err[160], reason[200];

	if (frame_decode(buf, len, &f, err, sizeof(err)) != 0) {
		snprintf(reason, sizeof(reason), "malformed frame: %s", err);
		agent_protocol_error(a, reason);
		return;
	}
	if (f.type == FRAME_ERROR) {
		on_error(a, &f);
		return;
	}
	switch (a->phase) {
	case TUNNEL_AWAIT_CHALLENGE:
		if (f.type == FRAME_CHALLENGE)
			return on_challenge(a, &f);
		break;
	case TUNNEL_AWAIT_REGISTERED:
		if (f.type == FRAME_REGISTERED)
			return on_registered(a, &f);
		break;
	case TUNNEL_AWAIT_WELCOME:
		if (f.type == FRAME_WELCOME)
			return on_welcome(a, &f);
		break;
	case TUNNEL_ESTABLISHED:
		if (f.type == FRAME_STATE)
			return agent_follow_state(a, f.u.state.state, f.u.state.last_error);
		if (f.type == FRAME_VERIFY)
			return on_verify(a, &f);
		if (f.type == FRAME_PING) {
			struct frame pong = { .type = FRAME_PONG };
			pong.u.ping.seq = f.u.ping.seq;
			return agent_send(a, &pong);
		}
		if (f.type == FRAME_PONG)
			return;
		if (f.type >= FRAME_OPEN && a->mux != NULL) {
			if (mux_on_frame(a->mux, &f, err, sizeof(err)) != 0)
				agent_protocol_error(a, err);
			return;
		}
		break;
	default:
		break;
	}
	snprintf(reason, sizeof(reason), "unexpected %s frame in phase %s",
	    frame_type_name(f.type), phase_names[a->phase]);
	agent_protocol_error(a, reason);
}

/* ---- keepalive ---- */

static int64_t
monotonic_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static void
keepalive_arm(struct agent *a, int64_t in_ms)
{
	struct timeval tv = runtime_ms_timeval(in_ms < 0 ? 0 : (uint32_t)in_ms);

	evtimer_add(a->keepalive, &tv);
}

/* Something arrived from the gateway: the silence, and any ping, is over. */
static void
keepalive_heard(struct agent *a)
{
	a->last_rx_ms = monotonic_ms();
	a->ping_ms = 0;
}

/* Fires at the next deadline (messages only move the deadlines, so it may
 * fire early and re-arm): silence past the interval sends a PING, silence
 * past the timeout after that drops the tunnel. */
static void
agent_keepalive(evutil_socket_t fd, short what, void *arg)
{
	struct agent *a = arg;
	int64_t now = monotonic_ms(), due;

	if (a->ws == NULL || a->phase == TUNNEL_DISCONNECTED ||
	    a->phase == TUNNEL_CONNECTING)
		return;
	if (a->ping_ms != 0) {
		due = a->ping_ms + a->opt.ping_timeout_ms;
		if (now >= due) {
			warn("tunnel: no answer to a ping: dropping it and "
			    "reconnecting", KV_U("ping_timeout_ms",
			    a->opt.ping_timeout_ms));
			a->ping_ms = 0;
			/* on_close follows once the close frame is out or
			 * the wait for the gateway's answer ends. */
			wsclient_close(a->ws, 1001, "ping timeout");
			return;
		}
	} else {
		due = a->last_rx_ms + a->opt.ping_interval_ms;
		if (now >= due) {
			a->ping_ms = now;
			due = now + a->opt.ping_timeout_ms;
			if (a->phase == TUNNEL_ESTABLISHED) {
				struct frame ping = { .type = FRAME_PING };

				ping.u.ping.seq = ++a->ping_seq;
				agent_send(a, &ping);
			}
		}
	}
	keepalive_arm(a, due - now);
}

/* ---- the tunnel's transport ---- */

static int
tunnel_sendv(void *io, const struct iovec *iov, int iovcnt)
{
	struct agent *a = io;

	return a->ws != NULL ? wsclient_sendv(a->ws, iov, iovcnt, 1) : -1;
}

static size_t
tunnel_pending(void *io)
{
	struct agent *a = io;

	return a->ws != NULL ? wsclient_pending(a->ws) : 0;
}

static const struct mux_io tunnel_io = {
	.sendv = tunnel_sendv,
	.pending = tunnel_pending,
};

/* Until the agent is active it starts no services and carries no stream. */
static void
agent_stream_open(struct mux *m, struct mux_stream *s, const struct frame_open *req,
    void *arg)
{
	struct agent *a = arg;
	char reason[96];

	if (strcmp(a->state, "active") != 0) {
		snprintf(reason, sizeof(reason), "agent is %s, not active", a->state);
		mux_stream_refuse(s, "not_active", reason);
		return;
	}
	dialer_on_open(m, s, req, a->dialer);
}

static const struct mux_handlers agent_mux_handlers = {
	.on_open = agent_stream_open,
};

static void
ws_open(struct wsclient *c, void *arg)
{
	struct agent *a = arg;
	struct mux_config cfg = MUX_DEFAULT_CONFIG;

	cfg.odd_ids = 0;
	cfg.window = a->opt.stream_window;
	cfg.max_streams = a->opt.max_streams;
	cfg.counted = 1;
	a->mux = mux_new(&cfg, &tunnel_io, a, &agent_mux_handlers, a);
	if (a->mux == NULL) {
		error("out of memory");
		wsclient_close(c, 1011, "out of memory");
		return;
	}
	keepalive_heard(a);
	keepalive_arm(a, a->opt.ping_interval_ms);
	agent_send_hello(a);
}

static void
ws_message(struct wsclient *c, const uint8_t *data, size_t len, int binary, void *arg)
{
	struct agent *a = arg;

	keepalive_heard(a);
	if (!binary) {
		agent_protocol_error(a, "text message on the tunnel");
		return;
	}
	agent_on_message(a, data, len);
}

static void
ws_drain(struct wsclient *c, void *arg)
{
	struct agent *a = arg;

	if (a->mux != NULL)
		mux_on_drain(a->mux);
}

static void
ws_close(struct wsclient *c, int http_status, const char *reason, void *arg)
{
	struct agent *a = arg;
	bool was_up = a->phase == TUNNEL_ESTABLISHED;

	evtimer_del(a->keepalive);
	/* Every stream of the tunnel ends with it. */
	mux_free(a->mux);
	a->mux = NULL;
	wsclient_free(c);
	a->ws = NULL;
	if (a->phase == TUNNEL_CONNECTING || http_status != 101)
		warn("cannot open the tunnel", KV_S("gateway", a->st.gateway_url),
		    KV_S("reason", reason), KV_I("http_status", http_status));
	else if (was_up)
		warn("tunnel lost", KV_S("reason", reason));
	agent_set_phase(a, TUNNEL_DISCONNECTED);
	agent_write_status(a);
	if (!a->stopping)
		agent_schedule_reconnect(a);
}

static const struct wsclient_callbacks ws_callbacks = {
	.on_open = ws_open,
	.on_message = ws_message,
	.on_drain = ws_drain,
	.on_close = ws_close,
};

static void
agent_connect(evutil_socket_t fd, short what, void *arg)
{
	struct agent *a = arg;
	struct wsclient_config cfg;
	char err[256];

	memset(&cfg, 0, sizeof(cfg));
	cfg.url = a->connect_url;
	cfg.subprotocol = TETHER_SUBPROTOCOL;
	cfg.ca_file = a->ca_path;
	cfg.max_message = (1 << 20) + MAX_MESSAGE_SLACK;
	cfg.low_water = 128 * 1024;
	cfg.proxy_url = a->opt.proxy_url;
	cfg.proxy_ca_file = a->opt.proxy_ca_file;
	agent_set_phase(a, TUNNEL_CONNECTING);
	debug("connecting", KV_S("url", a->connect_url));
	a->ws = wsclient_connect(a->base, &cfg, &ws_callbacks, a, err, sizeof(err));
	if (a->ws == NULL) {
		error("cannot connect", KV_S("gateway", a->st.gateway_url), KV_S("err", err));
		agent_stop(a, 1);
	}
}

/* Exponential backoff with jitter: the delay doubles up to BACKOFF_MAX_MS
 * and each wait is drawn from [delay/2, delay] so that agents cut off
 * together do not all come back in the same instant. */
static void
agent_schedule_reconnect(struct agent *a)
{
	struct timeval tv;
	uint32_t delay, jitter = 0;

	if (a->reconnect_now) {
		a->reconnect_now = false;
		delay = 0;
	} else {
		a->backoff_ms = a->backoff_ms == 0 ? BACKOFF_MIN_MS :
		    (a->backoff_ms * 2 > BACKOFF_MAX_MS ? BACKOFF_MAX_MS : a->backoff_ms * 2);
		random_bytes((uint8_t *)&jitter, sizeof(jitter));
		delay = a->backoff_ms / 2 + jitter % (a->backoff_ms / 2 + 1);
		info("reconnecting", KV_U("delay_ms", delay));
	}
	tv = runtime_ms_timeval(delay);
	evtimer_add(a->reconnect_timer, &tv);
}

static void
agent_on_signal(evutil_socket_t sig, short what, void *arg)
{
	struct agent *a = arg;

	info("stopping", KV_S("signal", strsignal((int)sig)));
	sdnotify_stopping();
	agent_stop(a, 0);
}

/* ---- start-up ---- */

/* Drops the proxy when NO_PROXY covers the gateway; says which way it goes. */
static void
agent_choose_proxy(struct agent *a)
{
	struct url u;
	char why[256], shown[300];

	if (a->opt.proxy_url == NULL)
		return;
	if (no_proxy_match(a->opt.no_proxy, a->gw_host)) {
		info("gateway host is in no-proxy: connecting directly",
		    KV_S("host", a->gw_host));
		a->opt.proxy_url = NULL;
		return;
	}
	if (url_parse(a->opt.proxy_url, proxy_url_schemes, &u, why, sizeof(why)) == 0)
		url_display(&u, shown, sizeof(shown));
	else
		snprintf(shown, sizeof(shown), "(invalid: %s)", why);
	url_clear(&u);
	info("connecting through an HTTP CONNECT proxy", KV_S("proxy", shown));
}

static int
parse_gateway_url(struct agent *a)
{
	const char *p = a->st.gateway_url + strlen("https://");
	const char *colon, *end;

	if (strncmp(a->st.gateway_url, "https://", 8) != 0)
		return -1;
	if (*p == '[') {
		end = strchr(p, ']');
		if (end == NULL)
			return -1;
		snprintf(a->gw_host, sizeof(a->gw_host), "%.*s", (int)(end - p - 1), p + 1);
		colon = end[1] == ':' ? end + 1 : NULL;
	} else {
		colon = strchr(p, ':');
		snprintf(a->gw_host, sizeof(a->gw_host), "%.*s",
		    (int)(colon != NULL ? (size_t)(colon - p) : strcspn(p, "/")), p);
	}
	a->gw_port = colon != NULL ? atoi(colon + 1) : 443;
	return a->gw_port > 0 && a->gw_port < 65536 && a->gw_host[0] ? 0 : -1;
}

static int
agent_load_credentials(struct agent *a)
{
	char path[PATH_MAX], err[512], *text = NULL;
	struct token t;
	int r = -1;

	client_path(a->dir, "agent.key", path, sizeof(path));
	a->agent_key = agentkey_load(path, err, sizeof(err));
	if (a->agent_key == NULL) {
		error("not joined: no agent key", KV_S("state_dir", a->dir), KV_S("err", err));
		return -1;
	}
	if (a->st.agent_id[0] != '\0')
		return 0;
	client_path(a->dir, "import.token", path, sizeof(path));
	if (file_read_all(path, 1024, &text, NULL, err, sizeof(err)) != 0) {
		error("not registered and no import token to register with: "
		    "join again with a fresh token", KV_S("state_dir", a->dir),
		    KV_S("err", err));
		return -1;
	}
	if (token_parse(text, &t, err, sizeof(err)) != 0 || t.kind != TOKEN_IMPORT) {
		error("import.token is not an import token", KV_S("path", path));
		goto out;
	}
	a->import_key = token_import_key(&t);
	snprintf(a->import_id, sizeof(a->import_id), "%s", t.id);
	r = a->import_key != NULL ? 0 : -1;
out:
	token_clear(&t);
	OPENSSL_cleanse(text, strlen(text));
	free(text);
	return r;
}

static int
agent_start_loop(struct agent *a)
{
	char err[512];

	a->base = runtime_event_base();
	if (a->base == NULL)
		return -1;
	a->dns = evdns_base_new(a->base, EVDNS_BASE_INITIALIZE_NAMESERVERS);
	if (a->dns == NULL)
		a->dns = evdns_base_new(a->base, 0);  /* no resolv.conf: IPs only */
	a->dialer = dialer_new(a->base, a->dns, &a->st, a->dir, a->opt.dial_timeout_ms,
	    err, sizeof(err));
	if (a->dialer == NULL) {
		error("cannot start the dialer", KV_S("err", err));
		return -1;
	}
	a->reconnect_timer = evtimer_new(a->base, agent_connect, a);
	a->keepalive = evtimer_new(a->base, agent_keepalive, a);
	a->sigterm = evsignal_new(a->base, SIGTERM, agent_on_signal, a);
	a->sigint = evsignal_new(a->base, SIGINT, agent_on_signal, a);
	if (a->dns == NULL || a->dialer == NULL || a->reconnect_timer == NULL ||
	    a->keepalive == NULL ||
	    a->sigterm == NULL || a->sigint == NULL ||
	    evsignal_add(a->sigterm, NULL) != 0 || evsignal_add(a->sigint, NULL) != 0)
		return -1;
	return 0;
}

static void
agent_free(struct agent *a)
{
	mux_free(a->mux);
	a->mux = NULL;
	prom_http_free(a->metrics);
	dialer_free(a->dialer);
	if (a->ws != NULL)
		wsclient_free(a->ws);
	if (a->reconnect_timer != NULL)
		event_free(a->reconnect_timer);
	if (a->keepalive != NULL)
		event_free(a->keepalive);
	if (a->sigterm != NULL)
		event_free(a->sigterm);
	if (a->sigint != NULL)
		event_free(a->sigint);
	if (a->dns != NULL)
		evdns_base_free(a->dns, 0);
	sdnotify_watchdog_stop();
	if (a->base != NULL)
		event_base_free(a->base);
	EVP_PKEY_free(a->agent_key);
	EVP_PKEY_free(a->import_key);
}

int
agent_run(const char *state_dir, const struct agent_options *opt)
{
	struct agent a;
	char err[512];
	int r;

	memset(&a, 0, sizeof(a));
	a.dir = state_dir;
	a.opt = *opt;
	snprintf(a.state, sizeof(a.state), "unknown");
	r = client_state_load(state_dir, &a.st, err, sizeof(err));
	if (r != 0) {
		if (r == 1)
			error("not joined: run 'tether-client join --state-dir DIR' "
			    "with a join document first", KV_S("state_dir", state_dir));
		else
			error("cannot read the state", KV_S("state_dir", state_dir),
			    KV_S("err", err));
		return 1;
	}
	if (parse_gateway_url(&a) != 0) {
		error("gateway_url is not https://HOST[:PORT]", KV_S("state_dir", state_dir),
		    KV_S("gateway_url", a.st.gateway_url));
		return 1;
	}
	/* An agent killed while writing status.json left a temporary file. */
	file_sweep_temps(state_dir);
	client_path(state_dir, "ca.crt", a.ca_path, sizeof(a.ca_path));
	snprintf(a.connect_url, sizeof(a.connect_url), "wss://%s/v1/connect",
	    a.st.gateway_url + strlen("https://"));
	if (agent_load_credentials(&a) != 0) {
		agent_free(&a);
		return 1;
	}
	if (agent_start_loop(&a) != 0) {
		error("cannot start the event loop");
		agent_free(&a);
		return 1;
	}
	info("tether-client starting", KV_S("version", TETHER_VERSION),
	    KV_S("node", a.st.node), KV_S("cluster", a.st.cluster),
	    KV_S("gateway", a.st.gateway_url));
	if (opt->metrics_listen != NULL) {
		a.metrics = prom_http_start(a.base, opt->metrics_listen,
		    agent_metrics_render, NULL, err, sizeof(err));
		if (a.metrics == NULL) {
			error("cannot serve the metrics", KV_S("err", err));
			agent_free(&a);
			return 1;
		}
		info("metrics listening", KV_S("url_path", "/metrics"),
		    KV_S("listen", opt->metrics_listen), KV_I("port", prom_http_port(a.metrics)));
	}
	agent_write_status(&a);
	agent_choose_proxy(&a);
	if (sdnotify_watchdog_start(a.base) != 0) {
		error("cannot start the systemd watchdog timer");
		agent_free(&a);
		return 1;
	}
	sdnotify_ready("connecting");
	agent_connect(-1, 0, &a);
	event_base_dispatch(a.base);
	a.phase = TUNNEL_DISCONNECTED;
	agent_write_status(&a);
	r = a.exit_code;
	agent_free(&a);
	return r;
}
