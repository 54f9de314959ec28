/*
 * agent.c: `tether-client run`: the node's end of the tunnel (see agent.h).
 *
 * One libevent loop drives the tunnel (agent_tunnel.c: the handshake,
 * keepalive, backoff and the streams' multiplexer), the dialer's sockets,
 * signals and the metrics listener.  This file is the process around the
 * tunnel: it loads the state directory, keeps in it what the tunnel learns
 * (the agent id after REGISTERED, the gateway's URL list and a CA
 * rotation's CAs after SETTINGS, status.json), and exits with
 * AGENT_EXIT_REVOKED (77) after an operator's revocation, 1 and the
 * gateway's reason after another final refusal, 0 after SIGINT/SIGTERM;
 * systemd's STATUS= says which (tether-client.service restarts it on any
 * exit but 77).
 */
#include "agent.h"

#include <limits.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <event2/dns.h>
#include <event2/event.h>
#include <openssl/crypto.h>
#include <openssl/ssl.h>

#include "agent_metrics.h"
#include "agent_tunnel.h"
#include "agentkey.h"
#include "catrust.h"
#include "dialer.h"
#include "fileio.h"
#include "log.h"
#include "proxy.h"
#include "prom_http.h"
#include "runtime.h"
#include "sdnotify.h"
#include "state.h"
#include "token.h"
#include "url.h"
#include "wsclient.h"
struct agent {
	const char *dir;
	struct agent_options opt;
	struct client_state st;
	EVP_PKEY *agent_key;          /* this node's Ed25519 key */
	EVP_PKEY *pending_key;        /* DIR/agent.key.pending: a rotation's
	                               * new key not yet settled, or NULL */
	time_t key_born;              /* agent.key's mtime: when it was made */
	struct event *key_age;        /* hourly: --max-key-age's check */
	bool key_asked;               /* asked on this connection */
	EVP_PKEY *import_key;         /* derived from the import token, until registered */
	char import_id[TOKEN_ID_LEN + 1];
	char gw_host[URL_HOST_MAX + 1]; /* matched against NO_PROXY */
	char ca_path[PATH_MAX];
	struct catrust ca;            /* DIR/ca.crt and ca.next.crt (catrust.h) */
	char *proxy_password;       /* from --proxy-password-file, or NULL */

	struct event_base *base;
	struct evdns_base *dns;
	struct agent_tunnel *tunnel;
	struct dialer *dialer;
	struct event *sigterm, *sigint;
	struct event *settle;         /* AGENT_SETTLE_MS after the tunnel came up */
	struct prom_http *metrics;    /* --metrics-listen, or NULL */

	char state[64];               /* the agent state the gateway last sent */
	char last_error[FRAME_REASON_MAX + 1];
	int exit_code;
	bool up;                      /* active and connected */
};

static void
agent_write_status(struct agent *a, bool connected)
{
	client_status_write(a->dir, a->state, connected, a->last_error,
	    a->tunnel != NULL ? agent_tunnel_gateway(a->tunnel) : a->st.gateway_url);
	sdnotify_status("agent %s, tunnel %s%s%s", a->state,
	    connected ? "up" : "down",
	    a->last_error[0] != '\0' ? ": " : "", a->last_error);
}

/* The last status: why the agent stops, and whether it comes back. */
static void
agent_write_stopped(struct agent *a)
{
	const char *why = a->last_error[0] != '\0' ? a->last_error : "see the log";

	client_status_write(a->dir, a->state, false, a->last_error,
	    a->tunnel != NULL ? agent_tunnel_gateway(a->tunnel) : a->st.gateway_url);
	if (a->exit_code == AGENT_EXIT_REVOKED)
		sdnotify_status("stopped for good: revoked by an operator (exit %d, "
		    "not restarted): %s", a->exit_code, why);
	else if (a->exit_code != 0)
		sdnotify_status("stopped (exit %d): %s", a->exit_code, why);
}

static void
agent_stop(struct agent *a, int code)
{
	a->exit_code = code;
	event_base_loopbreak(a->base);
}

/* ---- what the tunnel reports ---- */

/* The credential swap: persist the agent id, then forget the import token. */
static int
agent_registered(void *arg, const char *agent_id)
{
	struct agent *a = arg;
	char err[512], path[PATH_MAX];

	if (strlen(agent_id) >= sizeof(a->st.agent_id)) {
		error("gateway assigned an over-long agent id");
		return -1;
	}
	memcpy(a->st.agent_id, agent_id, strlen(agent_id) + 1);
	if (client_state_save(a->dir, &a->st, err, sizeof(err)) != 0) {
		error("registered but cannot save it", KV_S("agent", a->st.agent_id),
		    KV_S("err", err));
		return -1;
	}
	client_path(a->dir, "import.token", path, sizeof(path));
	if (unlink(path) != 0)
		warn("cannot remove the import token: remove it by hand",
		    KV_S("path", path));
	EVP_PKEY_free(a->import_key);
	a->import_key = NULL;
	OPENSSL_cleanse(a->import_id, sizeof(a->import_id));
	return 0;
}

/* Once the tunnel has been up and active for AGENT_SETTLE_MS, what
 * start-up (keys, certificates, the handshakes, the verification and what
 * follows it) used is given back (runtime_release_startup): an idle agent
 * keeps only what it still touches (docs/0025).  Again after each
 * reconnection, whose handshake touched it again. */
#define AGENT_SETTLE_MS 2000

static void
agent_on_settle(evutil_socket_t fd, short what, void *arg)
{
	size_t released;

	(void)fd;
	(void)what;
	(void)arg;
	released = runtime_release_startup(); /* the work; the line tells of it */
	debug("start-up memory released", KV_U("kib", released / 1024));
}

static void
agent_settle(struct agent *a, bool up)
{
	struct timeval tv = runtime_ms_timeval(AGENT_SETTLE_MS);

	if (up && !a->up)
		evtimer_add(a->settle, &tv);
	else if (!up)
		evtimer_del(a->settle);
	a->up = up;
}

static void agent_key_age_check(struct agent *a);
static void agent_ca_reread(struct agent *a);

static void
agent_status(void *arg, const char *state, bool connected, const char *last_error)
{
	struct agent *a = arg;

	snprintf(a->state, sizeof(a->state), "%s", state);
	snprintf(a->last_error, sizeof(a->last_error), "%s", last_error);
	agent_write_status(a, connected);
	if (!connected) {
		a->key_asked = false;
		agent_ca_reread(a);
	} else {
		agent_key_age_check(a);
	}
	agent_settle(a, connected && strcmp(state, "active") == 0);
}

/* The gateway's new URL list (SETTINGS over the tunnel): state.json is
 * rewritten whole and atomically (fileio.h), so a crash leaves the old list
 * or the new one; the tunnel dials from it once this returns 0. */
static int
agent_urls(void *arg, const char *const *urls, size_t n)
{
	struct agent *a = arg;
	struct client_state next = a->st;
	char err[512];

	if (n > CLIENT_MAX_URLS)
		return -1;
	for (size_t i = 0; i < n; i++) {
		if (strlen(urls[i]) >= sizeof(next.gateway_urls[i]))
			return -1;
		snprintf(next.gateway_urls[i], sizeof(next.gateway_urls[i]), "%s",
		    urls[i]);
	}
	next.ngateway_urls = n;
	if (client_state_save(a->dir, &next, err, sizeof(err)) != 0) {
		error("cannot save the gateway's URL list", KV_S("err", err));
		return -1;
	}
	a->st = next;
	return 0;
}

/* ---- CA rotation (docs/0033-key-and-ca-rotation.md) ---- */

static SSL_CTX *agent_tls_context(struct agent *a, bool quiet);

/* The tunnel dials trusting a->ca from now on. */
static void
agent_ca_dial_with(struct agent *a)
{
	SSL_CTX *ctx = agent_tls_context(a, true);

	if (ctx == NULL)
		return;   /* logged; the tunnel keeps the context it has */
	agent_tunnel_set_tls(a->tunnel, ctx);
	SSL_CTX_free(ctx);
}

/* state.json's ca_checksum names ca.crt's (also after a crash between
 * the promotion's rename and this write: the repeated "final" comes here). */
static void
agent_ca_checksum_save(struct agent *a)
{
	struct client_state next = a->st;
	char err[512];

	if (strcmp(a->st.ca_checksum, a->ca.ca_sum) == 0)
		return;
	snprintf(next.ca_checksum, sizeof(next.ca_checksum), "%s", a->ca.ca_sum);
	if (client_state_save(a->dir, &next, err, sizeof(err)) != 0) {
		error("CA rotation: cannot record the new CA's checksum in "
		    "state.json (ca.crt is the new CA)", KV_S("err", err));
		return;
	}
	a->st = next;
}

/*
 * SETTINGS "ca" over the established tunnel (in NULL: the ACK's question
 * only): applied to the files (catrust_apply), the tunnel given the new
 * trust, and the CAs held now told back.
 */
static size_t
agent_ca(void *arg, const struct frame_ca *in,
    char held[FRAME_CA_MAX_HELD][FRAME_CA_SUM_LEN + 1])
{
	struct agent *a = arg;
	char why[256];
	int r = in != NULL ? catrust_apply(a->dir, &a->ca, in, why, sizeof(why)) : 0;

	if (r < 0)
		warn("CA rotation: the gateway's new CA is not believed: kept the "
		    "CAs this node has", KV_S("phase", in->phase ==
		    FRAME_CA_FINAL ? "final" : "overlap"), KV_S("err", why));
	if (r == 1 && a->ca.next != NULL)
		info("CA rotation: trusting the gateway's next CA as well from the "
		    "next connection (DIR/ca.next.crt)", KV_S("ca", a->ca.ca_sum),
		    KV_S("next", a->ca.next_sum));
	else if (r == 1)
		info("CA rotation finished: the new CA is this node's CA (DIR/ca.crt)",
		    KV_S("ca", a->ca.ca_sum));
	if (r == 1)
		agent_ca_dial_with(a);
	if (in != NULL && in->phase == FRAME_CA_FINAL && r >= 0)
		agent_ca_checksum_save(a);
	return catrust_held(&a->ca, held);
}

/*
 * While the tunnel is down, the CA files may have changed under the agent:
 * `tether-client join --rejoin` pinned a new CA after a rotation this node
 * missed.  Read again (two small files per failed dial), and dial with
 * them when they differ.
 */
static void
agent_ca_reread(struct agent *a)
{
	struct catrust now;
	char err[512];

	if (a->tunnel == NULL || catrust_load(a->dir, &now, err, sizeof(err)) < 0)
		return;
	if (strcmp(now.ca_sum, a->ca.ca_sum) == 0 &&
	    strcmp(now.next_sum, a->ca.next_sum) == 0) {
		catrust_clear(&now);
		return;
	}
	info("the CA files changed: dialling with them", KV_S("ca", now.ca_sum),
	    KV_S("next", now.next_sum));
	catrust_clear(&a->ca);
	a->ca = now;
	agent_ca_dial_with(a);
}

/* ---- node key rotation (docs/interface.md, "Node key rotation") ---- */

/* A new key, kept as DIR/agent.key.pending (atomically, 0600) before the
 * gateway hears of it: after a crash at any later step the node still
 * holds both, and its next handshake settles which one the gateway has. */
static EVP_PKEY *
agent_key_pending(void *arg)
{
	struct agent *a = arg;
	char path[PATH_MAX], err[512];
	EVP_PKEY *k = agentkey_generate();

	client_path(a->dir, "agent.key.pending", path, sizeof(path));
	if (k == NULL || agentkey_save(k, path, err, sizeof(err)) != 0) {
		error("key rotation: cannot keep the new key", KV_S("path", path),
		    KV_S("err", k == NULL ? "no key generated" : err));
		EVP_PKEY_free(k);
		return NULL;
	}
	EVP_PKEY_free(a->pending_key);
	a->pending_key = k;
	return k;
}

/* The pending key becomes agent.key (a durable rename), or goes. */
static EVP_PKEY *
agent_key_settle(void *arg, bool use_pending)
{
	struct agent *a = arg;
	char pending[PATH_MAX], current[PATH_MAX], err[512];

	client_path(a->dir, "agent.key.pending", pending, sizeof(pending));
	client_path(a->dir, "agent.key", current, sizeof(current));
	if (!use_pending) {
		if (unlink(pending) != 0)
			warn("key rotation: cannot remove the pending key",
			    KV_S("path", pending));
		EVP_PKEY_free(a->pending_key);
		a->pending_key = NULL;
		return a->agent_key;
	}
	if (file_rename_durable(pending, current, err, sizeof(err)) != 0) {
		error("key rotation: cannot make the new key the node's",
		    KV_S("err", err));
		return NULL;
	}
	EVP_PKEY_free(a->agent_key);
	a->agent_key = a->pending_key;
	a->pending_key = NULL;
	a->key_born = time(NULL);
	return a->agent_key;
}

/* Asks for a rotation, once per connection, when the key is older than
 * --max-key-age. */
static void
agent_key_age_check(struct agent *a)
{
	int64_t age = (int64_t)(time(NULL) - a->key_born);

	if (a->opt.max_key_age_days == 0 || a->key_asked || a->tunnel == NULL ||
	    age < (int64_t)a->opt.max_key_age_days * 86400)
		return;
	if (agent_tunnel_ask_rotation(a->tunnel) == 0) {
		a->key_asked = true;
		info("key older than --max-key-age: asking the gateway to rotate it",
		    KV_I("age_days", age / 86400),
		    KV_U("max_key_age_days", a->opt.max_key_age_days));
	}
}

static void
agent_on_key_age(evutil_socket_t fd, short what, void *arg)
{
	struct agent *a = arg;

	(void)fd;
	(void)what;
	a->key_asked = false;   /* hourly, until it is rotated */
	agent_key_age_check(a);
}

static void
agent_stopped(void *arg, int code)
{
	agent_stop(arg, code);
}

static void
agent_stream_open(struct mux *m, struct mux_stream *s, const struct frame_open *req,
    void *arg)
{
	struct agent *a = arg;

	dialer_on_open(m, s, req, a->dialer);
}

static const struct agent_tunnel_hooks agent_hooks = {
	.registered = agent_registered,
	.status = agent_status,
	.stopped = agent_stopped,
	.on_open = agent_stream_open,
	.urls = agent_urls,
	.ca = agent_ca,
	.key_pending = agent_key_pending,
	.key_settle = agent_key_settle,
};

static void
agent_on_signal(evutil_socket_t sig, short what, void *arg)
{
	struct agent *a = arg;

	info("stopping", KV_S("signal", strsignal((int)sig)));
	sdnotify_stopping();
	agent_stop(a, 0);
}

/* ---- start-up ---- */

/* Says which way the tunnel goes; the tunnel drops the proxy for each
 * gateway URL whose host NO_PROXY covers (the join URL's is told here). */
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
		return;
	}
	if (url_parse(a->opt.proxy_url, proxy_url_schemes, &u, why, sizeof(why)) == 0)
		url_display(&u, shown, sizeof(shown));
	else
		snprintf(shown, sizeof(shown), "(invalid: %s)", why);
	url_clear(&u);
	info("connecting through an HTTP CONNECT proxy", KV_S("proxy", shown));
}

/*
 * The proxy password from --proxy-password-file: its first line, the file
 * readable by its owner only (a password file others can read is refused,
 * not used).  0, or -1 after logging why.
 */
static int
agent_read_proxy_password(struct agent *a)
{
	char err[512];

	if (a->opt.proxy_password_file == NULL)
		return 0;
	if (file_read_private(a->opt.proxy_password_file, 1024, &a->proxy_password,
	    err, sizeof(err)) != 0) {
		error("cannot use --proxy-password-file", KV_S("err", err));
		return -1;
	}
	return 0;
}

static int
agent_load_credentials(struct agent *a)
{
	char path[PATH_MAX], err[512], *text = NULL;
	struct token t;
	struct stat sb;
	int r = -1;

	client_path(a->dir, "agent.key", path, sizeof(path));
	a->agent_key = agentkey_load(path, err, sizeof(err));
	if (a->agent_key == NULL) {
		error("not joined: no agent key", KV_S("state_dir", a->dir), KV_S("err", err));
		return -1;
	}
	a->key_born = stat(path, &sb) == 0 ? sb.st_mtime : time(NULL);
	/* A rotation cut short: the first handshake settles it. */
	client_path(a->dir, "agent.key.pending", path, sizeof(path));
	if (file_exists(path)) {
		a->pending_key = agentkey_load(path, err, sizeof(err));
		if (a->pending_key == NULL)
			warn("key rotation: unreadable pending key ignored",
			    KV_S("path", path), KV_S("err", err));
		else
			info("key rotation: a pending key from a rotation cut short; "
			    "the gateway's answer settles it");
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
	a->sigterm = evsignal_new(a->base, SIGTERM, agent_on_signal, a);
	a->sigint = evsignal_new(a->base, SIGINT, agent_on_signal, a);
	a->settle = evtimer_new(a->base, agent_on_settle, a);
	a->key_age = event_new(a->base, -1, EV_PERSIST, agent_on_key_age, a);
	if (a->dns == NULL || a->dialer == NULL || a->sigterm == NULL || a->sigint == NULL ||
	    a->settle == NULL || a->key_age == NULL ||
	    event_add(a->key_age, &(struct timeval){ 3600, 0 }) != 0 ||
	    evsignal_add(a->sigterm, NULL) != 0 || evsignal_add(a->sigint, NULL) != 0)
		return -1;
	return 0;
}

/* The open-files limit raised to the hard one: every stream the agent
 * serves dials its target, one descriptor each. */
static void
agent_fd_limit(const struct agent *a)
{
	long was, now = runtime_raise_nofile(&was);

	if (now >= 0 && now < (long)a->opt.max_streams + 64)
		warn("open-files limit too low for --max-streams: raise the hard "
		    "limit (LimitNOFILE= in the unit, limits.conf)", KV_I("limit", now),
		    KV_I("soft_was", was), KV_U("max_streams", a->opt.max_streams));
	else
		debug("open-files limit", KV_I("limit", now), KV_I("soft_was", was));
}

/*
 * The TLS context every dial to the gateway uses: the CA pinned at join
 * (DIR/ca.crt), during a CA rotation's overlap the next one as well
 * (DIR/ca.next.crt, catrust.h), plus, when the operator asked for it, a
 * TLS-inspecting proxy's CA (then the proxy can read the tunnel: said
 * loudly at every start, not again when a rotation makes a new context:
 * quiet).  NULL after logging why.
 */
static SSL_CTX *
agent_tls_context(struct agent *a, bool quiet)
{
	char err[512], next[PATH_MAX];
	SSL_CTX *ctx = wsclient_tls_context(a->ca_path, err, sizeof(err));

	if (ctx == NULL) {
		error("cannot load the gateway's CA", KV_S("err", err));
		return NULL;
	}
	if (a->ca.next != NULL &&
	    (client_path(a->dir, "ca.next.crt", next, sizeof(next)) != 0 ||
	    wsclient_tls_trust_more(ctx, next, err, sizeof(err)) != 0)) {
		error("cannot load the gateway's next CA", KV_S("err", err));
		SSL_CTX_free(ctx);
		return NULL;
	}
	if (a->opt.trust_proxy_ca == NULL)
		return ctx;
	if (wsclient_tls_trust_more(ctx, a->opt.trust_proxy_ca, err, sizeof(err)) != 0) {
		error("cannot load --trust-proxy-ca", KV_S("err", err));
		SSL_CTX_free(ctx);
		return NULL;
	}
	if (!quiet)
		warn("TRUSTING A TLS-INSPECTING PROXY'S CA FOR THE GATEWAY: whoever "
		    "holds its key can read and change this node's tunnel; prefer "
		    "exempting the gateway from TLS inspection",
		    KV_S("trust_proxy_ca", a->opt.trust_proxy_ca),
		    KV_S("gateway", a->st.gateway_url));
	return ctx;
}

/* The tunnel, dialling now.  0, or -1 with exit_code set. */
static int
agent_start_tunnel(struct agent *a)
{
	SSL_CTX *ctx = agent_tls_context(a, false);
	const char *urls[CLIENT_MAX_URLS];
	struct agent_tunnel_config cfg = {
		.gateway_url = a->st.gateway_url,
		.gateway_urls = urls,
		.ngateway_urls = a->st.ngateway_urls,
		.no_proxy = a->opt.no_proxy,
		.ca_file = a->ca_path,
		.tls_ctx = ctx,
		.node = a->st.node,
		.cluster = a->st.cluster,
		.agent_id = a->st.agent_id,
		.agent_key = a->agent_key,
		.import_key = a->import_key,
		.pending_key = a->pending_key,
		.import_id = a->import_id,
		.proxy_url = a->opt.proxy_url,
		.proxy_ca_file = a->opt.proxy_ca_file,
		.proxy_auth = a->opt.proxy_auth,
		.proxy_user = a->opt.proxy_user,
		.proxy_password = a->proxy_password,
		.stream_window = a->opt.stream_window,
		.max_streams = a->opt.max_streams,
		.ping_interval_ms = a->opt.ping_interval_ms,
		.ping_timeout_ms = a->opt.ping_timeout_ms,
		.hooks = &agent_hooks,
		.arg = a,
	};

	if (ctx == NULL) {
		a->exit_code = 1;
		return -1;
	}
	for (size_t i = 0; i < a->st.ngateway_urls; i++)
		urls[i] = a->st.gateway_urls[i];
	a->tunnel = agent_tunnel_new(a->base, &cfg);
	SSL_CTX_free(ctx);	/* the tunnel holds its own reference */
	if (a->tunnel == NULL) {
		error("out of memory");
		a->exit_code = 1;
		return -1;
	}
	return agent_tunnel_start(a->tunnel);
}

static void
agent_free(struct agent *a)
{
	agent_tunnel_free(a->tunnel);
	prom_http_free(a->metrics);
	dialer_free(a->dialer);
	if (a->sigterm != NULL)
		event_free(a->sigterm);
	if (a->sigint != NULL)
		event_free(a->sigint);
	if (a->settle != NULL)
		event_free(a->settle);
	if (a->key_age != NULL)
		event_free(a->key_age);
	if (a->dns != NULL)
		evdns_base_free(a->dns, 0);
	sdnotify_watchdog_stop();
	if (a->base != NULL) {
		/* What was ended above is freed by its own events. */
		runtime_drain(a->base);
		event_base_free(a->base);
	}
	if (a->proxy_password != NULL) {
		OPENSSL_cleanse(a->proxy_password, strlen(a->proxy_password));
		free(a->proxy_password);
	}
	EVP_PKEY_free(a->agent_key);
	EVP_PKEY_free(a->pending_key);
	EVP_PKEY_free(a->import_key);
	catrust_clear(&a->ca);
}

int
agent_run(const char *state_dir, const struct agent_options *opt)
{
	struct agent a;
	char err[512], connect_url[URL_MAX];
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
	if (agent_tunnel_url(a.st.gateway_url, connect_url, sizeof(connect_url),
	    a.gw_host, sizeof(a.gw_host), err, sizeof(err)) != 0) {
		error("gateway_url is not https://HOST[:PORT]", KV_S("state_dir", state_dir),
		    KV_S("gateway_url", a.st.gateway_url), KV_S("err", err));
		return 1;
	}
	/* An agent killed while writing status.json left a temporary file. */
	file_sweep_temps(state_dir);
	client_path(state_dir, "ca.crt", a.ca_path, sizeof(a.ca_path));
	r = catrust_load(state_dir, &a.ca, err, sizeof(err));
	if (r < 0) {
		error("cannot read the gateway's CA", KV_S("err", err));
		agent_free(&a);
		return 1;
	}
	if (r == 1)
		warn("ca.next.crt is not a certificate: ignored (the gateway sends "
		    "it again during a CA rotation)", KV_S("err", err));
	else if (a.ca.next != NULL)
		info("CA rotation under way: trusting ca.crt and ca.next.crt",
		    KV_S("ca", a.ca.ca_sum), KV_S("next", a.ca.next_sum));
	if (agent_load_credentials(&a) != 0 || agent_read_proxy_password(&a) != 0) {
		agent_free(&a);
		return 1;
	}
	agent_fd_limit(&a);
	if (agent_start_loop(&a) != 0) {
		error("cannot start the event loop");
		agent_free(&a);
		return 1;
	}
	info("tether-client starting", KV_S("version", TETHER_VERSION),
	    KV_S("node", a.st.node), KV_S("cluster", a.st.cluster),
	    KV_S("gateway", a.st.gateway_url),
	    KV_U("gateway_urls", a.st.ngateway_urls));
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
	agent_write_status(&a, false);
	agent_choose_proxy(&a);
	if (sdnotify_watchdog_start(a.base) != 0) {
		error("cannot start the systemd watchdog timer");
		agent_free(&a);
		return 1;
	}
	sdnotify_ready("connecting");
	if (agent_start_tunnel(&a) == 0)
		event_base_dispatch(a.base);
	agent_write_stopped(&a);
	r = a.exit_code;
	agent_free(&a);
	return r;
}
