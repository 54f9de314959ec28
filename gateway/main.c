/*
 * main.c: tether-gateway's command line: `init` creates a data directory,
 * `serve` runs the daemon.  Start-up follows a fixed order: parse flags, load
 * and check everything, then listen; any failure before listening is fatal
 * with a message that says what to fix.
 */
#include <errno.h>
#include <getopt.h>
#include <limits.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <event2/event.h>
#include <jansson.h>
#include <openssl/crypto.h>

#include "access.h"
#include "agentdir.h"
#include "agentkey.h"
#include "api.h"
#include "ca.h"
#include "cacmd.h"
#include "certcmd.h"
#include "certreload.h"
#include "dial.h"
#include "face.h"
#include "fileio.h"
#include "gateway.h"
#include "hub.h"
#include "k8s.h"
#include "livestreams.h"
#include "log.h"
#include "loop.h"
#include "looplink.h"
#include "srccount.h"
#include "metrics.h"
#include "metrics_route.h"
#include "netaddr.h"
#include "notices.h"
#include "presence.h"
#include "prom_http.h"
#include "peer_link.h"
#include "peer_route.h"
#include "route.h"
#include "runtime.h"
#include "sdnotify.h"
#include "serve_options.h"
#include "server.h"
#include "shares.h"
#include "session.h"
#include "settings.h"
#include "store.h"
#include "store_worker.h"
#include "token.h"
#include "url.h"
#include "tunnel.h"
#include "ui.h"

#define MAX_HOSTNAMES 16
#define SHUTDOWN_GRACE_MS 2000
/* Store calls of agent sessions waiting for the store thread; past it a
 * handshake is answered "unavailable" and the agent retries.  A handshake
 * has one call out at a time, and --max-handshakes (256) bound them. */
#define STORE_QUEUE_CAP 4096

/*
 * The routes of the one listening port, in the order the server tries
 * them (route.h): the named paths first, the admin API (every other path)
 * last.  The transport knows none of them by name.
 */
static const struct route *const routes[] = {
	&tunnel_route,         /* /v1/connect: agent tunnels */
	&peer_route,           /* /v1/peer: links from other replicas */
	&k8s_route,            /* /k8s/..., /version, /api...: an exchange */
	&dial_route,           /* /v1/clusters/ID/dial: upgrades */
	&ui_route,             /* /ui/, /v1/status */
	&metrics_route,        /* /metrics */
	&api_route,            /* everything else */
	NULL
};

/* tether_agents starts from the agents already in the store.  0 or -1. */
static int
metrics_seed(struct gateway *gw)
{
	struct store_agent *as = NULL;
	size_t n = 0;

	metrics_init();
	if (store_agent_list(gw->store, NULL, &as, &n) != STORE_OK)
		return -1;
	for (size_t i = 0; i < n; i++)
		metrics_agent_moved(-1, (int)as[i].state);
	free(as);
	return 0;
}

/* What the hub asks of a session (hub.h), so that it needs no session.c. */
static const struct hub_ops hub_ops = {
	.node = session_node,
	.is_active = session_is_active,
	.send_settings = session_send_settings,
};

static const char usage_head[] =
"usage: tether-gateway init  --data-dir DIR [--hostname NAME]... [--url URL]\n"
"                            [--store URL]\n"
"       tether-gateway serve --data-dir DIR [--config FILE] [options]\n"
"       tether-gateway cert renew --data-dir DIR [--days N]\n"
"       tether-gateway ca rotate start|finish|status --data-dir DIR\n"
"       tether-gateway --help | --version\n"
"\n"
"Tether's gateway: agents on nodes behind NAT dial in over one authenticated\n"
"WebSocket; operators reach the nodes through it.\n"
"\n"
"init   creates DIR with a CA (ca.crt, ca.key), a server certificate signed by it\n"
"       for each --hostname plus localhost and 127.0.0.1, the SQLite store and\n"
"       admin.token (0600, the first admin token).  --url is the public URL that\n"
"       join documents and kubeconfigs carry (default https://127.0.0.1:8443).\n"
"       Prints the CA checksum nodes pin.  Refuses (exit 1) if DIR is initialised.\n"
"       --store postgres://USER@HOST:PORT/DB prepares that database (schema,\n"
"       the first admin token) instead of DIR/tether.db: several replicas share\n"
"       it, each with a copy of ca.crt, server.crt, server.key, peer.crt,\n"
"       peer.key (the replicas' own credential) and gateway.json.\n"
"\n"
"cert   renew: a new server.crt from DIR's CA (same names and key, new\n"
"       serial); SIGHUP makes a running gateway serve it ('cert --help').\n"
"\n"
"ca     rotate start|finish|status: a new CA without joining nodes again;\n"
"       agents follow over their tunnels ('ca --help').\n"
"\n"
"serve  serves HTTPS and the agent tunnels on one port (below).\n"
"\n";

static const char usage_tail[] =
"\n"
"Example:\n"
"  tether-gateway init --data-dir /var/lib/tether --hostname gw.example --url https://gw.example:8443\n"
"  tether-gateway serve --data-dir /var/lib/tether\n"
"  tetherctl --token-file /var/lib/tether/admin.token --cacert /var/lib/tether/ca.crt cluster list\n";

static void
usage(void)
{
	fputs(usage_head, stdout);
	opts_help(&serve_command, stdout);
	fputs(usage_tail, stdout);
}

static void __attribute__((noreturn))
usage_error(const char *fmt, const char *arg)
{
	fprintf(stderr, "tether-gateway: ");
	fprintf(stderr, fmt, arg);
	fprintf(stderr, "\nRun 'tether-gateway --help' for usage.\n");
	exit(2);
}

/* ---- init ---- */

static int
init_admin_token(const char *dir, struct store *st, char *err, size_t errlen)
{
	struct token t;
	struct store_token rec;
	char text[TOKEN_STR_MAX + 1], path[PATH_MAX];
	int r = -1;

	memset(&rec, 0, sizeof(rec));
	if (token_generate(TOKEN_ADMIN, &t) != 0) {
		snprintf(err, errlen, "cannot generate the admin token");
		return -1;
	}
	snprintf(rec.id, sizeof(rec.id), "%s", t.id);
	rec.kind = TOKEN_ADMIN;
	snprintf(rec.name, sizeof(rec.name), "admin");
	token_hash(&t, rec.verifier);
	rec.uses_left = -1;
	rec.created_at = gateway_now();
	if (store_token_insert(st, &rec, err, errlen) != STORE_OK)
		goto out;
	token_format(&t, text);
	strcat(text, "\n");
	snprintf(path, sizeof(path), "%s/admin.token", dir);
	if (file_write_atomic(path, text, strlen(text), 0600, err, errlen) != 0)
		goto out;
	r = 0;
out:
	OPENSSL_cleanse(text, sizeof(text));
	token_clear(&t);
	return r;
}

static int
init_config(const char *dir, const char *url, char *err, size_t errlen)
{
	char path[PATH_MAX], *text;
	json_t *v = json_pack("{s:s}", "url", url);
	int r;

	snprintf(path, sizeof(path), "%s/gateway.json", dir);
	text = json_dumps(v, JSON_INDENT(2));
	json_decref(v);
	if (text == NULL) {
		snprintf(err, errlen, "out of memory");
		return -1;
	}
	r = file_write_atomic(path, text, strlen(text), 0644, err, errlen);
	free(text);
	return r;
}

static const char *const init_files[] = {
	"gateway.json", "admin.token", "tether.db", "tether.db-wal", "tether.db-shm",
	"server.crt", "server.key", "ca.crt", "ca.key", "peer.crt", "peer.key", NULL
};

static void
init_undo(const char *dir)
{
	char path[PATH_MAX + 64];

	for (size_t i = 0; init_files[i] != NULL; i++) {
		snprintf(path, sizeof(path), "%s/%s", dir, init_files[i]);
		unlink(path);
	}
}

static const char *const public_url_schemes[] = { "https", NULL };

/*
 * The public URL: https://HOST[:PORT] (url_parse's rules; an origin, no
 * user information, at most one trailing '/'), normalised into out
 * (outlen bytes, at most 199 characters).  0, or -1 with the reason.
 */
static int
public_url_check(const char *url, char *out, size_t outlen, char *why,
    size_t whylen)
{
	struct url u;
	int r = -1;

	if (url_parse(url, public_url_schemes, &u, why, whylen) != 0)
		return -1;
	if (outlen > 200)
		outlen = 200;
	if (u.has_userinfo || !url_is_origin(&u))
		snprintf(why, whylen, "has a user, path or query");
	else if (url_origin(&u, out, outlen) < 0)
		snprintf(why, whylen, "is too long");
	else
		r = 0;
	url_clear(&u);
	return r;
}

static int
cmd_init(int argc, char **argv)
{
	static const struct option opts[] = {
		{ "data-dir", required_argument, NULL, 'd' },
		{ "hostname", required_argument, NULL, 'n' },
		{ "url", required_argument, NULL, 'u' },
		{ "store", required_argument, NULL, 's' },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 },
	};
	const char *dir = NULL, *url = "https://127.0.0.1:8443", *store = NULL;
	const char *hostnames[MAX_HOSTNAMES];
	size_t nhost = 0;
	char err[512], path[PATH_MAX], checksum[CA_CHECKSUM_MAX], store_url[PATH_MAX + 16];
	char public_url[256], why[160];
	struct store *st = NULL;
	int c;

	while ((c = getopt_long(argc, argv, "", opts, NULL)) != -1) {
		switch (c) {
		case 'd': dir = optarg; break;
		case 'u': url = optarg; break;
		case 's': store = optarg; break;
		case 'n':
			if (nhost == MAX_HOSTNAMES)
				usage_error("at most 16 --hostname flags%s", "");
			hostnames[nhost++] = optarg;
			break;
		case 'h': usage(); return 0;
		default: usage_error("init: unknown flag%s", "");
		}
	}
	if (optind != argc)
		usage_error("init: unexpected argument \"%s\"", argv[optind]);
	if (dir == NULL)
		usage_error("init: --data-dir DIR is required%s", "");
	if (public_url_check(url, public_url, sizeof(public_url), why,
	    sizeof(why)) != 0) {
		snprintf(err, sizeof(err), "\"%.200s\" %s", url, why);
		usage_error("init: --url must be https://HOST[:PORT] without a path: %s",
		    err);
	}
	url = public_url;
	snprintf(path, sizeof(path), "%s/gateway.json", dir);
	for (size_t i = 0; init_files[i] != NULL; i++) {
		snprintf(path, sizeof(path), "%s/%s", dir, init_files[i]);
		if (file_exists(path)) {
			fprintf(stderr, "tether-gateway: %s is already initialised (%s exists); "
			    "nothing changed\n", dir, init_files[i]);
			return 1;
		}
	}
	if (dir_ensure(dir, 0700, err, sizeof(err)) != 0)
		goto fail;
	if (ca_create(dir, hostnames, nhost, err, sizeof(err)) != 0)
		goto fail;
	if (store != NULL)
		snprintf(store_url, sizeof(store_url), "%s", store);
	else
		snprintf(store_url, sizeof(store_url), "sqlite://%s/tether.db", dir);
	if (store_open(store_url, &st, err, sizeof(err)) != STORE_OK)
		goto fail;
	if (init_admin_token(dir, st, err, sizeof(err)) != 0 ||
	    init_config(dir, url, err, sizeof(err)) != 0)
		goto fail;
	store_close(st);
	st = NULL;
	snprintf(path, sizeof(path), "%s/ca.crt", dir);
	if (ca_checksum_file(path, checksum, err, sizeof(err)) != 0)
		goto fail;
	printf("initialised %s for %s\n", dir, url);
	printf("admin token in %s/admin.token (mode 0600)\n", dir);
	printf("ca_checksum %s\n", checksum);
	return 0;
fail:
	store_close(st);
	init_undo(dir);
	fprintf(stderr, "tether-gateway: init %s: %s\n", dir, err);
	return 1;
}

/* ---- serve ---- */

/* public_ca: --public-ca, or NULL for the data directory's ca.crt. */
static int
load_config(struct gateway *gw, const char *public_ca, char *err, size_t errlen)
{
	char path[PATH_MAX + 64];
	json_error_t jerr;
	json_t *v;
	const char *url;
	char why[160];
	struct gw_face *face;

	snprintf(path, sizeof(path), "%s/gateway.json", gw->data_dir);
	v = json_load_file(path, JSON_REJECT_DUPLICATES, &jerr);
	if (v == NULL) {
		snprintf(err, errlen, "%s: %s (was the directory made by "
		    "'tether-gateway init'?)", path, jerr.text);
		return -1;
	}
	url = json_string_value(json_object_get(v, "url"));
	if (url == NULL) {
		snprintf(err, errlen, "%s: \"url\" must be https://HOST[:PORT]", path);
		json_decref(v);
		return -1;
	}
	if (public_url_check(url, gw->url, sizeof(gw->url), why, sizeof(why)) != 0) {
		snprintf(err, errlen, "%s: \"url\" must be https://HOST[:PORT]: %s",
		    path, why);
		json_decref(v);
		return -1;
	}
	json_decref(v);

	gw->ca_pem_fixed = public_ca != NULL;
	if (public_ca != NULL)
		snprintf(path, sizeof(path), "%s", public_ca);
	else
		snprintf(path, sizeof(path), "%s/ca.crt", gw->data_dir);
	/* Before any other thread: the face's first content. */
	if ((face = gw_face_edit(gw)) == NULL) {
		snprintf(err, errlen, "out of memory");
		return -1;
	}
	free(face->ca_pem);
	face->ca_pem = NULL;
	if (file_read_all(path, 65536, &face->ca_pem, &face->ca_pem_len, err,
	    errlen) != 0 || ca_checksum_pem(face->ca_pem, face->ca_pem_len,
	    face->ca_checksum, err, errlen) != 0) {
		gw_face_put(face);
		return -1;
	}
	gw_face_publish(gw, face);
	return 0;
}

/*
 * Shutdown is a drain (docs/0017): SIGTERM sets gw->stopping (/readyz 503,
 * new tunnels refused), tells every agent to reconnect elsewhere, and waits
 * until no tunnel is left or --drain-timeout is over; then what is left is
 * kicked and gets SHUTDOWN_GRACE_MS to close.  A second signal ends the
 * drain at once.  New connections are accepted and served for the whole
 * drain and for --drain-grace at least (a balancer sends them until its
 * check has seen /readyz 503); at its end the listeners close, and the
 * connections accepted are answered (at most SHUTDOWN_GRACE_MS) before the
 * loop stops.
 */
struct shutdown_state {
	struct gateway *gw;
	struct event *poll;
	int64_t drain_deadline_ms;    /* the drain ends (tunnels are kicked) */
	int64_t grace_end_ms;         /* new connections are served until then */
	int64_t deadline_ms;          /* closing: the loop stops at the latest */
	int kicked;
	int closing;                  /* no longer accepting (the drain ended) */
};

#define DRAIN_JITTER_MAX_MS 5000
#define SHUTDOWN_POLL_MS 20

/* Each runs on its session's loop (session_foreach_everywhere). */
static void
kick_for_shutdown(struct session *s, void *arg)
{
	session_kick(s, "shutdown", "gateway shutting down");
}

/* arg: the gateway, whose drain_jitter_ms on_signal set once before the
 * broadcast (the inbox's lock orders it for every loop). */
static void
drain_session(struct session *s, void *arg)
{
	struct gateway *gw = arg;

	session_drain(s, "gateway draining", gw->drain_jitter_ms);
}

/* The drain is over: no new connection is taken; what was accepted, the
 * tunnels kicked or leaving, get SHUTDOWN_GRACE_MS at most. */
static void
shutdown_close(struct shutdown_state *sd)
{
	if (sd->closing)
		return;
	sd->closing = 1;
	server_stop_accepting(sd->gw);
	sd->deadline_ms = gateway_now_ms() + SHUTDOWN_GRACE_MS;
}

static void
shutdown_kick(struct shutdown_state *sd)
{
	size_t left = agentdir_count(sd->gw->agents);

	if (left > 0)
		info("drain over: closing the tunnels left", KV_U("tunnels", left));
	sd->kicked = 1;
	(void)session_foreach_everywhere(sd->gw, kick_for_shutdown, NULL);
	shutdown_close(sd);
	sd->deadline_ms = gateway_now_ms() + SHUTDOWN_GRACE_MS;
}

/* Waits for the tunnels to leave and the operator streams to end (the
 * drain, --drain-grace at least), then for the connections accepted to be
 * answered and the tunnels kicked to close: at most SHUTDOWN_GRACE_MS
 * after the close or the kick. */
static void
shutdown_poll(evutil_socket_t fd, short what, void *arg)
{
	struct shutdown_state *sd = arg;
	struct gateway *gw = sd->gw;
	struct timeval tv = runtime_ms_timeval(SHUTDOWN_POLL_MS);
	int64_t now = gateway_now_ms();
	/* Until the drain is over, operator streams carried to agents on
	 * other replicas (docs/0023) hold the exit back too: no tunnel here
	 * keeps them. */
	int done = agentdir_count(gw->agents) == 0 && gw->handshakes == 0 &&
	    (sd->kicked || live_streams_count_all(gw) == 0);

	if (!sd->kicked && now >= sd->drain_deadline_ms)
		shutdown_kick(sd);
	if (done && now >= sd->grace_end_ms)
		shutdown_close(sd);
	/* A stream opened by a connection answered after the close has the
	 * rest of the drain, like any other: then it is kicked. */
	if (sd->closing && ((done && server_unanswered(gw) == 0) ||
	    ((done || sd->kicked) && now >= sd->deadline_ms))) {
		event_base_loopbreak(gw->base);
		return;
	}
	evtimer_add(sd->poll, &tv);
}

static void
on_signal(evutil_socket_t sig, short what, void *arg)
{
	struct shutdown_state *sd = arg;
	struct gateway *gw = sd->gw;
	uint32_t jitter = gw->drain_timeout_ms / 4;
	uint32_t grace = gw->drain_grace_ms < gw->drain_timeout_ms ?
	    gw->drain_grace_ms : gw->drain_timeout_ms;

	if (gw->stopping) {
		if (!sd->kicked) {
			info("second signal: ending the drain now");
			shutdown_kick(sd);
		}
		return;
	}
	gw->drain_jitter_ms = jitter < DRAIN_JITTER_MAX_MS ? jitter : DRAIN_JITTER_MAX_MS;
	info("stopping: draining", KV_S("signal", strsignal((int)sig)),
	    KV_U("tunnels", agentdir_count(gw->agents)),
	    KV_U("drain_timeout_ms", gw->drain_timeout_ms),
	    KV_U("drain_grace_ms", grace));
	gw->stopping = 1;
	tunnel_wait_stop_everywhere(gw);   /* upgrades waiting for a slot: come back later */
	sdnotify_stopping();
	sd->drain_deadline_ms = gateway_now_ms() + gw->drain_timeout_ms;
	sd->grace_end_ms = gateway_now_ms() + grace;
	if (gw->drain_timeout_ms == 0)
		shutdown_kick(sd);
	else
		(void)session_foreach_everywhere(gw, drain_session, gw);
	shutdown_poll(-1, 0, sd);
}

/* SIGHUP: logrotate moved the audit file away (write to a new one), and
 * the data directory may hold a new server certificate (certreload.h). */
static void
on_sighup(evutil_socket_t sig, short what, void *arg)
{
	struct certreload **certs = arg;
	char err[512];

	if (log_reopen_audit_file(err, sizeof(err)) != 0)
		error("cannot reopen the audit log: still writing the old file",
		    KV_S("err", err));
	else
		info("SIGHUP: audit log reopened");
	certreload_request(*certs, "SIGHUP");
}

/* Descriptors kept for what is not a tunnel: the listener, the store, the
 * logs, the metrics listener, DNS, the signal pipe. */
#define FD_RESERVE 64

/*
 * Raises the open-files limit to the hard one and says in one line what it
 * holds: every tunnel and every stream to a dial or forward client is a
 * descriptor.  A warning when it cannot even hold the connections the
 * admission limits let in at once (handshaking, TLS and waiting for TLS).
 */
static void
serve_fd_limit(const struct gateway *gw)
{
	long was, now = runtime_raise_nofile(&was);
	long room = now > FD_RESERVE ? now - FD_RESERVE : 0;

	if (now < 0) {
		warn("cannot read the open-files limit (RLIMIT_NOFILE)");
		return;
	}
	if (room < (long)gw->limits.max_handshakes + (long)gw->limits.max_tls_handshakes +
	    (long)gw->limits.max_tls_queue)
		warn("open-files limit too low for --max-handshakes, "
		    "--max-tls-handshakes and --max-tls-queue together: raise the "
		    "hard limit (LimitNOFILE= in the unit, limits.conf)",
		    KV_I("limit", now), KV_I("soft_was", was),
		    KV_U("max_handshakes", gw->limits.max_handshakes),
		    KV_U("max_tls_handshakes", gw->limits.max_tls_handshakes),
		    KV_U("max_tls_queue", gw->limits.max_tls_queue),
		    KV_I("tunnels_at_most", room));
	else
		info("open-files limit raised to the hard limit: each tunnel and "
		    "each dialled stream takes one", KV_I("limit", now),
		    KV_I("soft_was", was), KV_I("tunnels_at_most", room));
}

/*
 * What serve starts, kept together so that one path (serve_stop) undoes
 * whatever part of it was started, in the reverse order.
 */
struct serve {
	struct gateway gw;
	struct opt_set o;
	const char *store_url;          /* --store, or default_store */
	char default_store[PATH_MAX + 16];
	char host[256];                 /* --listen's */
	int port;
	struct shutdown_state sd;
	struct event *sigterm, *sigint, *sighup;
	struct prom_http *metrics_http; /* --metrics-listen's, or NULL */
	struct certreload *certs;       /* SIGHUP's and renewal's, once serving */
};

/* The limits of each tunnel, handshake and connection, from the options
 * (each checked by the options table already). */
static void
serve_limits(struct gateway_limits *l, const struct opt_set *o)
{
	l->handshake_timeout_ms = opts_num(o, SERVE_OPT_HANDSHAKE_TIMEOUT);
	l->max_handshakes = opts_num(o, SERVE_OPT_MAX_HANDSHAKES);
	l->max_tls_handshakes = opts_num(o, SERVE_OPT_MAX_TLS_HANDSHAKES);
	l->max_tls_queue = opts_num(o, SERVE_OPT_MAX_TLS_QUEUE);
	l->max_tls_per_source = opts_num(o, SERVE_OPT_MAX_TLS_PER_SOURCE);
	l->tls_hello_timeout_ms = opts_num(o, SERVE_OPT_TLS_HELLO_TIMEOUT);
	l->tls_handshake_timeout_ms = opts_num(o, SERVE_OPT_TLS_HANDSHAKE_TIMEOUT);
	l->max_handshakes_per_source = opts_num(o, SERVE_OPT_MAX_HANDSHAKES_PER_SOURCE);
	l->handshake_wait_ms = opts_num(o, SERVE_OPT_HANDSHAKE_WAIT);
	l->redial_spread_min_ms = opts_num(o, SERVE_OPT_REDIAL_SPREAD_MIN);
	l->hello_timeout_ms = opts_num(o, SERVE_OPT_HELLO_TIMEOUT);
	l->max_connections = opts_num(o, SERVE_OPT_MAX_CONNECTIONS);
	l->max_connections_per_source = opts_num(o, SERVE_OPT_MAX_CONNECTIONS_PER_SOURCE);
	l->max_frame_bytes = opts_num(o, SERVE_OPT_MAX_FRAME_SIZE);
	l->max_queue_bytes = opts_num(o, SERVE_OPT_MAX_QUEUE);
	l->verify_timeout_ms = opts_num(o, SERVE_OPT_VERIFY_TIMEOUT);
	l->max_clock_skew_s = opts_num(o, SERVE_OPT_MAX_CLOCK_SKEW);
	l->http_timeout_ms = opts_num(o, SERVE_OPT_HTTP_TIMEOUT);
	l->ping_interval_ms = opts_num(o, SERVE_OPT_PING_INTERVAL);
	l->ping_timeout_ms = opts_num(o, SERVE_OPT_PING_TIMEOUT);
	l->census_interval_ms = opts_num(o, SERVE_OPT_CENSUS_INTERVAL);
}

/* This replica's name (--replica-id, else HOST-PID: the host name, at
 * most 48 bytes of it, and the process id, so that two processes on one
 * host never share an id; "gateway-PID" without a host name) and the URL
 * other replicas reach it at (--peer-url, or ""). */
static void
serve_replica(struct gateway *gw, const struct opt_set *o)
{
	const char *id = opts_str(o, SERVE_OPT_REPLICA_ID);
	const char *peer_url = opts_str(o, SERVE_OPT_PEER_URL);
	char host[256] = "";

	if (id != NULL)
		snprintf(gw->replica_id, sizeof(gw->replica_id), "%s", id);
	else {
		if (gethostname(host, sizeof(host) - 1) != 0 || host[0] == '\0')
			snprintf(host, sizeof(host), "gateway");
		snprintf(gw->replica_id, sizeof(gw->replica_id), "%.48s-%ld", host,
		    (long)getpid());
	}
	if (peer_url != NULL)
		snprintf(gw->peer_url, sizeof(gw->peer_url), "%s", peer_url);
}

/*
 * The streams in agent tunnels: their window, how many a tunnel holds,
 * the budget every window is charged to and its shares; the memory budget
 * of what connections hold (docs/0036).  Returns 0, or -1
 * when --admin-reserve is not less than --stream-budget (the one pair of
 * options the table cannot check alone).
 */
static int
serve_streams(struct gateway *gw, const struct opt_set *o)
{
	gw->mux_config.window = opts_num(o, SERVE_OPT_STREAM_WINDOW);
	gw->mux_config.max_streams = opts_num(o, SERVE_OPT_MAX_STREAMS);
	gw->mux_config.odd_ids = 1;
	gw->mux_config.counted = 1;   /* agent tunnels feed the stream metrics */
	gw->mux_config.budget = &gw->budget;
	gw->budget.total = opts_num(o, SERVE_OPT_STREAM_BUDGET);
	gw->budget.reserve = opts_num(o, SERVE_OPT_ADMIN_RESERVE);
	gw->budget.tunnel_share = opts_num(o, SERVE_OPT_TUNNEL_SHARE);
	gw->budget.principal_share = opts_num(o, SERVE_OPT_PRINCIPAL_SHARE);
	gw->budget.min_window = opts_num(o, SERVE_OPT_MIN_STREAM_WINDOW);
	gw->budget.memory = opts_num(o, SERVE_OPT_MEMORY_BUDGET);
	gw->budget.memory_share = opts_num(o, SERVE_OPT_MEMORY_SHARE);
	return gw->budget.reserve < gw->budget.total ? 0 : -1;
}

/* --workers, or the CPUs this process may run on (its affinity mask:
 * a cgroup's cpuset or taskset shows there), at most the option's own
 * maximum; 1 when that cannot be read. */
static unsigned
serve_workers(const struct opt_set *o)
{
	cpu_set_t set;
	int n;

	if (opts_num(o, SERVE_OPT_WORKERS) > 0)
		return opts_num(o, SERVE_OPT_WORKERS);
	if (sched_getaffinity(0, sizeof(set), &set) != 0 ||
	    (n = CPU_COUNT(&set)) < 1)
		return 1;
	return n > 64 ? 64 : (unsigned)n;
}

/*
 * What serve's options set before anything starts: the limits, the
 * replica, the streams, the data directory, the store's URL and where
 * --listen listens.  Bad options (--admin-reserve not less than
 * --stream-budget) exit 2 here, as the options table's own do.
 */
static void
serve_settings(struct serve *sv)
{
	struct gateway *gw = &sv->gw;
	const char *dir = opts_str(&sv->o, SERVE_OPT_DATA_DIR);

	serve_limits(&gw->limits, &sv->o);
	gw->workers = serve_workers(&sv->o);
	gw->landing_any = opts_num(&sv->o, SERVE_OPT_LANDING) != SERVE_LANDING_ZERO;
	gw->landing_route = opts_num(&sv->o, SERVE_OPT_LANDING) ==
	    SERVE_LANDING_ROUTE;
	gw->drain_timeout_ms = opts_num(&sv->o, SERVE_OPT_DRAIN_TIMEOUT);
	gw->drain_grace_ms = opts_num(&sv->o, SERVE_OPT_DRAIN_GRACE);
	gw->impersonate = (int)opts_num(&sv->o, SERVE_OPT_IMPERSONATE);
	gw->require_proxy_header = (int)opts_num(&sv->o,
	    SERVE_OPT_REQUIRE_PROXY_HEADER);
	serve_replica(gw, &sv->o);
	if (serve_streams(gw, &sv->o) != 0) {
		opts_free(&sv->o);
		usage_error("serve: --admin-reserve must be less than --stream-budget%s", "");
	}
	/* Checked by the table already. */
	(void)netaddr_split(opts_str(&sv->o, SERVE_OPT_LISTEN), sv->host,
	    sizeof(sv->host), &sv->port);
	snprintf(gw->data_dir, sizeof(gw->data_dir), "%s", dir);
	sv->store_url = opts_str(&sv->o, SERVE_OPT_STORE);
	if (sv->store_url == NULL) {
		snprintf(sv->default_store, sizeof(sv->default_store),
		    "sqlite://%s/tether.db", dir);
		sv->store_url = sv->default_store;
	}
}

/* The log's level and format, and the audit file (--audit-log).  0, or -1
 * after saying why. */
static int
serve_logs(const struct opt_set *o)
{
	const char *audit = opts_str(o, SERVE_OPT_AUDIT_LOG);
	char err[512];

	log_init("gateway", (enum log_level)opts_num(o, SERVE_OPT_LOG_LEVEL));
	log_set_format((enum log_format)opts_num(o, SERVE_OPT_LOG_FORMAT));
	if (audit != NULL && log_set_audit_file(audit, err, sizeof(err)) != 0) {
		error("cannot open the audit log", KV_S("err", err));
		return -1;
	}
	return 0;
}

/*
 * What the gateway holds before it listens: the trusted proxies, the data
 * directory's configuration and CA, the loop's store connection (metrics
 * seeded from it, store calls timed), the hub, the cache of proven tokens,
 * the loop and the store thread.  Returns 0, or -1 after saying why.
 */
static int
serve_open(struct serve *sv)
{
	struct gateway *gw = &sv->gw;
	const char *proxies = opts_str(&sv->o, SERVE_OPT_TRUSTED_PROXY);
	char err[512];

	if (proxies != NULL &&
	    cidr_list_parse(proxies, &gw->trusted_proxies, err, sizeof(err)) != 0) {
		error("bad --trusted-proxy", KV_S("err", err));   /* checked already */
		return -1;
	}
	if (gw->require_proxy_header && gw->trusted_proxies.n == 0) {
		error("--require-proxy-header needs --trusted-proxy (the sources "
		    "that must send one)");
		return -1;
	}
	if (gw_face_init(gw) != 0) {
		error("out of memory");
		return -1;
	}
	if (load_config(gw, opts_str(&sv->o, SERVE_OPT_PUBLIC_CA), err,
	    sizeof(err)) != 0) {
		error("cannot load the data directory", KV_S("err", err));
		return -1;
	}
	if (store_open(sv->store_url, &gw->store, err, sizeof(err)) != STORE_OK) {
		error("cannot open the store", KV_S("store", sv->store_url),
		    KV_S("err", err));
		return -1;
	}
	store_set_timing(gw->store, metrics_store_timed, NULL);
	if (metrics_seed(gw) != 0) {
		error("cannot start the metrics",
		    KV_S("err", "cannot count the agents in the store"));
		return -1;
	}
	gw->hub = hub_new(&hub_ops);
	gw->agents = agentdir_new();
	gw->access_cache = access_cache_new();
	gw->base = runtime_event_base();
	if (gw->hub == NULL || gw->agents == NULL || gw->access_cache == NULL ||
	    gw->base == NULL ||
	    peer_route_init(gw) != 0) {
		error("out of memory");
		return -1;
	}
	/* An audit line per proxied request: a pass's lines leave together. */
	if (runtime_audit_per_pass(gw->base) != 0)
		warn("audit lines leave one write each (out of memory)");
	if (store_worker_start(gw->base, sv->store_url, STORE_QUEUE_CAP,
	    metrics_store_timed, NULL, &gw->storew, err, sizeof(err)) != 0) {
		error("cannot start the store thread", KV_S("err", err));
		return -1;
	}
	/* SQLite writes one at a time whatever the threads: no pool there. */
	if (store_url_is_postgres(sv->store_url) &&
	    opts_num(&sv->o, SERVE_OPT_STORE_POOL) > 0 &&
	    store_worker_start_pool(gw->base, sv->store_url, STORE_QUEUE_CAP,
	    opts_num(&sv->o, SERVE_OPT_STORE_POOL), metrics_store_timed, NULL,
	    &gw->storep, err, sizeof(err)) != 0) {
		error("cannot start the store pool (--store-pool)", KV_S("err", err));
		return -1;
	}
	return 0;
}

/* SIGTERM and SIGINT start the drain (on_signal), SIGHUP reopens the
 * audit log.  0, or -1 after saying why. */
static int
serve_signals(struct serve *sv)
{
	struct event_base *base = sv->gw.base;

	sv->sd.gw = &sv->gw;
	sv->sigterm = evsignal_new(base, SIGTERM, on_signal, &sv->sd);
	sv->sigint = evsignal_new(base, SIGINT, on_signal, &sv->sd);
	sv->sighup = evsignal_new(base, SIGHUP, on_sighup, &sv->certs);
	sv->sd.poll = evtimer_new(base, shutdown_poll, &sv->sd);
	if (sv->sigterm == NULL || sv->sigint == NULL || sv->sighup == NULL ||
	    sv->sd.poll == NULL || evsignal_add(sv->sigterm, NULL) != 0 ||
	    evsignal_add(sv->sigint, NULL) != 0 ||
	    evsignal_add(sv->sighup, NULL) != 0) {
		error("cannot install signal handlers");
		return -1;
	}
	return 0;
}

/*
 * One more listener when its option is given: --plain-listen (plain HTTP
 * behind a TLS-terminating balancer) or --peer-listen (replicas' links
 * only).  0 (also when the option is not given), or -1 after saying why.
 */
static int
serve_listen_more(struct gateway *gw, const struct opt_set *o, int which)
{
	const char *hostport = opts_str(o, which);
	char host[256], err[512];
	int port;

	if (hostport == NULL)
		return 0;
	/* Checked by the table already. */
	(void)netaddr_split(hostport, host, sizeof(host), &port);
	if (which == SERVE_OPT_PLAIN_LISTEN) {
		if (server_listen_plain(gw, host, port, err, sizeof(err)) != 0) {
			error("cannot start the plain HTTP listener", KV_S("err", err));
			return -1;
		}
		info("plain HTTP listening for a TLS-terminating balancer",
		    KV_S("host", host), KV_I("port", server_plain_port(gw)),
		    KV_U("trusted_proxies", gw->trusted_proxies.n));
		return 0;
	}
	if (server_listen_mtls(gw, host, port, err, sizeof(err)) != 0) {
		error("cannot start the peer listener", KV_S("err", err));
		return -1;
	}
	info("peer links listening (replicas' certificates only)",
	    KV_S("host", host), KV_I("port", server_mtls_port(gw)));
	return 0;
}

/* --metrics-listen: /metrics in plain HTTP without a token.  0 (also when
 * not given), or -1 after saying why. */
static int
serve_metrics(struct serve *sv)
{
	const char *listen = opts_str(&sv->o, SERVE_OPT_METRICS_LISTEN);
	char err[512];

	if (listen == NULL)
		return 0;
	sv->metrics_http = prom_http_start(sv->gw.base, listen, metrics_render,
	    &sv->gw, err, sizeof(err));
	if (sv->metrics_http == NULL) {
		error("cannot serve the metrics", KV_S("err", err));
		return -1;
	}
	info("metrics listening", KV_S("url_path", "/metrics"),
	    KV_S("listen", listen), KV_I("port", prom_http_port(sv->metrics_http)));
	return 0;
}

/* The expiry of the certificate served and of its CA, for /metrics (read
 * again wherever the files are loaded again).  The server loaded them just
 * now; a failure here is only logged. */
static void
serve_certificates_seen(struct gateway *gw)
{
	char server_pem[PATH_MAX + 16], ca_pem[PATH_MAX + 16], err[400];

	snprintf(server_pem, sizeof(server_pem), "%s/server.crt", gw->data_dir);
	snprintf(ca_pem, sizeof(ca_pem), "%s/ca.crt", gw->data_dir);
	if (metrics_certificates(server_pem, ca_pem, err, sizeof(err)) != 0)
		warn("cannot read a certificate's expiry for /metrics",
		    KV_S("err", err));
}

/*
 * The links between the loops (docs/0040 section 2 (ii)), with two loops
 * or more: windows are then charged from every loop, so the budget takes
 * its mutex first.  Returns 0 (also with one loop: nothing to make), or
 * -1 after saying why.
 */
static int
serve_links(struct gateway *gw)
{
	char err[256];

	if (gw->nloops < 2)
		return 0;
	pthread_mutex_init(&gw->budget_mu, NULL);
	gw->budget.mu = &gw->budget_mu;
	gw->looplinks = looplinks_new(gw->loops, gw->nloops, &gw->mux_config,
	    peer_route_loop_open, gw, err, sizeof(err));
	if (gw->looplinks == NULL) {
		error("cannot link the loops (--workers)", KV_S("err", err));
		return -1;
	}
	return 0;
}

/* A loop's ends of the links close on its own thread. */
static void
links_close_here(void *arg)
{
	looplink_close(arg);
}

/*
 * Stop, step 3 of docs/0040 section 4 for the links: each loop closes its
 * ends (loops 1..n-1 by a message, which runs before the stop loops_stop
 * sends them; loop 0 here), so streams crossing end "tunnel_lost" on both
 * sides.  From loop 0's thread, outside any callback.
 */
static void
serve_links_close(struct gateway *gw)
{
	if (gw->looplinks == NULL)
		return;
	for (unsigned i = 1; i < gw->nloops; i++)
		(void)loop_call(&gw->loops[i], links_close_here, gw->looplinks, NULL);
	looplink_close(gw->looplinks);
}

/* After the joins (loops_stop: safe twice), before the loops' bases go:
 * the links, then the budget's mutex. */
static void
serve_links_free(struct gateway *gw)
{
	if (gw->looplinks != NULL) {
		loops_stop(gw->loops, gw->nloops);
		looplinks_free(gw->looplinks);
		gw->looplinks = NULL;
	}
	if (gw->budget.mu != NULL) {
		gw->budget.mu = NULL;
		pthread_mutex_destroy(&gw->budget_mu);
	}
}

/*
 * A hub per loop (docs/0040 step 7): loop 0's is gw->hub, 1..n-1 get
 * their own, each used by its loop's thread only once a tunnel lands
 * there (the inbox's lock orders this store before).  0, or -1 after
 * saying why.
 */
static int
serve_hubs(struct gateway *gw)
{
	gw->loops[0].hub = gw->hub;
	for (unsigned i = 1; i < gw->nloops; i++)
		if ((gw->loops[i].hub = hub_new(&hub_ops)) == NULL) {
			error("out of memory");
			return -1;
		}
	return 0;
}

/* After the joins (every session closed on its loop), before the loops
 * go: the hubs of loops 1..n-1 (loop 0's is gw->hub). */
static void
serve_hubs_free(struct gateway *gw)
{
	for (unsigned i = 1; gw->loops != NULL && i < gw->nloops; i++) {
		hub_free(gw->loops[i].hub);
		gw->loops[i].hub = NULL;
	}
}

/*
 * Presence, hearing other replicas, then every listener: the main port
 * (logged with what identifies this gateway), the optional ones, the
 * metrics.  Returns 0, or -1 after saying why.
 */
static int
serve_listen(struct serve *sv)
{
	struct gateway *gw = &sv->gw;
	const char *store_url = sv->store_url;
	char err[512];

	if (presence_start(gw, err, sizeof(err)) != 0) {
		error("cannot start presence", KV_S("replica", gw->replica_id),
		    KV_S("err", err));
		return -1;
	}
	if (notices_start(gw, store_url, err, sizeof(err)) != 0) {
		error("cannot start hearing other replicas", KV_S("err", err));
		return -1;
	}
	/* The URL list agents are told (SETTINGS), read on the store thread. */
	settings_refresh(gw);
	/* The loops (loop 0 on gw->base), before the listener: every loop
	 * runs once the port takes connections. */
	gw->nloops = gw->workers > 0 ? gw->workers : 1;
	gw->loops = loops_new(gw->base, gw->nloops, gw, err, sizeof(err));
	if (gw->loops == NULL) {
		error("cannot start the loops (--workers)", KV_S("err", err));
		return -1;
	}
	if (serve_hubs(gw) != 0 || serve_links(gw) != 0)
		return -1;
	if (server_start(gw, routes, sv->host, sv->port, err, sizeof(err)) != 0) {
		error("cannot start the server", KV_S("err", err));
		return -1;
	}
	serve_certificates_seen(gw);
	/* The redial spread agents are told (SETTINGS), checked from now on. */
	if (settings_spread_start(gw) != 0)
		warn("cannot start the redial spread's check: agents are told none");
	if (gateway_heap_start(gw) != 0)
		warn("cannot start the heap check: freed memory stays with the process");
	if (serve_listen_more(gw, &sv->o, SERVE_OPT_PLAIN_LISTEN) != 0 ||
	    serve_listen_more(gw, &sv->o, SERVE_OPT_PEER_LISTEN) != 0)
		return -1;
	sv->certs = certreload_start(gw, (unsigned)opts_num(&sv->o,
	    SERVE_OPT_CERT_RENEW_BEFORE));
	if (sv->certs == NULL)
		return -1;
	info("tether-gateway listening", KV_S("version", TETHER_VERSION),
	    KV_S("host", sv->host), KV_I("port", server_port(gw)),
	    KV_S("url", gw->url), KV_S("store", strncmp(store_url, "sqlite://",
	    9) == 0 ? store_url : "(configured)"),
	    KV_S("ca_checksum", gw_face_now(gw)->ca_checksum),
	    KV_S("replica", gw->replica_id),
	    KV_U("workers", server_loops(gw)));
	return serve_metrics(sv);
}

/*
 * Undoes whatever serve started, whichever step failed: every part
 * accepts never having started.  The order matters where said.
 */
static void
serve_stop(struct serve *sv)
{
	struct gateway *gw = &sv->gw;
	char err[512];

	prom_http_free(sv->metrics_http);
	certreload_free(sv->certs);
	notices_stop(gw);
	settings_stop(gw);
	/* First: one statement forgets every tunnel here, not one per tunnel. */
	presence_stop(gw);
	tunnel_wait_stop_everywhere(gw);
	/* Each loop closes its connections, then its ends of the links
	 * (docs/0040 section 4, stop step 3): messages, run in this order. */
	server_stop_loops(gw);
	serve_links_close(gw);
	server_stop(gw);
	/* After the accepted links ended with the server's connections. */
	peer_link_shutdown(gw);
	/* After the sessions (their last state changes are queued), before
	 * the loop that its eventfd watch belongs to. */
	store_worker_stop(gw->storep);
	store_worker_stop(gw->storew);
	if (sv->sigterm != NULL)
		event_free(sv->sigterm);
	if (sv->sigint != NULL)
		event_free(sv->sigint);
	if (sv->sighup != NULL)
		event_free(sv->sighup);
	if (sv->sd.poll != NULL)
		event_free(sv->sd.poll);
	sdnotify_watchdog_stop();
	gateway_heap_stop(gw);
	srccount_free(gw->k8s_checks);
	gw->k8s_checks = NULL;
	/* Every held audit line is written before the loop goes. */
	(void)runtime_audit_per_pass(NULL);
	/* Their threads stopped with the server; loop 0's inbox watch is on
	 * gw->base: before it goes.  The links' multiplexers are on the
	 * loops' bases: before them. */
	serve_links_free(gw);
	loops_stop(gw->loops, gw->nloops);
	serve_hubs_free(gw);
	/* After the store threads (a check's answer orphaned by its loop's
	 * stop counts out of that loop's cache). */
	access_loops_free(gw);
	loops_free(gw->loops, gw->nloops);
	gw->loops = NULL;
	if (gw->base != NULL)
		event_base_free(gw->base);
	hub_free(gw->hub);
	agentdir_free(gw->agents);
	access_cache_free(gw->access_cache);
	shares_free_all(gw);
	store_close(gw->store);
	(void)log_set_audit_file(NULL, err, sizeof(err));
	gw_face_fini(gw);
	gateway_counts_fini(gw);
	opts_free(&sv->o);
}

/* serve: settings, logs, open, signals, listen, then the loop until the
 * drain ends it.  Exit status 0 after a clean stop, 1 when a step failed,
 * 2 for bad options. */
static int
cmd_serve(int argc, char **argv)
{
	struct serve sv = { .gw = { .limits = GATEWAY_DEFAULT_LIMITS,
	    .mux_config = MUX_DEFAULT_CONFIG } };
	int rc = 1;

	switch (opts_parse(&serve_command, argc, argv, &sv.o)) {
	case OPTS_OK: break;
	case OPTS_HELP: return 0;
	default: return 2;
	}
	gateway_counts_init(&sv.gw);
	serve_settings(&sv);
	if (serve_logs(&sv.o) != 0)
		goto out;
	serve_fd_limit(&sv.gw);
	if (serve_open(&sv) != 0 || serve_signals(&sv) != 0 ||
	    serve_listen(&sv) != 0)
		goto out;
	if (sdnotify_watchdog_start(sv.gw.base) != 0) {
		error("cannot start the systemd watchdog timer");
		goto out;
	}
	sdnotify_ready("serving");
	event_base_dispatch(sv.gw.base);
	info("stopped");
	rc = 0;
out:
	serve_stop(&sv);
	return rc;
}

int
main(int argc, char **argv)
{
	struct rlimit nocore = { 0, 0 };

	/* Memory holds key material: no core dumps. */
	setrlimit(RLIMIT_CORE, &nocore);
	runtime_init();
	log_init("gateway", LOG_LEVEL_INFO);
	if (argc < 2)
		usage_error("a command is required: init or serve%s", "");
	if (strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0 ||
	    strcmp(argv[1], "help") == 0) {
		usage();
		return 0;
	}
	if (strcmp(argv[1], "--version") == 0) {
		printf("tether-gateway %s\n", TETHER_VERSION);
		return 0;
	}
	if (strcmp(argv[1], "init") == 0)
		return cmd_init(argc - 1, argv + 1);
	if (strcmp(argv[1], "serve") == 0)
		return cmd_serve(argc - 1, argv + 1);
	if (strcmp(argv[1], "cert") == 0)
		return cmd_cert(argc - 1, argv + 1);
	if (strcmp(argv[1], "ca") == 0)
		return cmd_ca(argc - 1, argv + 1);
	usage_error("unknown command \"%s\": use init, serve, cert or ca", argv[1]);
}
