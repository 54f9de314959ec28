/*
 * serve_options.c: the table of `tether-gateway serve` settings (see
 * serve_options.h).  Every row is a flag, a config key and a --help entry.
 */
#include "serve_options.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "netaddr.h"
#include "url.h"

static const char *const log_levels[] = { "debug", "info", "warn", "error", NULL };
/* In the order of enum log_format (common/log.h). */
static const char *const log_formats[] = { "logfmt", "json", NULL };
/* In the order of enum serve_landing (serve_options.h). */
static const char *const landings[] = { "zero", "any", "route", NULL };

static int
check_store(const char *v, char *why, size_t whylen)
{
	if (strncmp(v, "sqlite://", 9) == 0 || strncmp(v, "postgresql://", 13) == 0 ||
	    strncmp(v, "postgres://", 11) == 0)
		return 0;
	snprintf(why, whylen, "wants sqlite://PATH or postgresql://...");
	return -1;
}

/* Replica ids name rows and log lines: a host name's alphabet. */
static int
check_replica_id(const char *v, char *why, size_t whylen)
{
	size_t len = strlen(v);

	if (len >= 1 && len <= 63 && strspn(v, "ABCDEFGHIJKLMNOPQRSTUVWXYZ"
	    "abcdefghijklmnopqrstuvwxyz0123456789._-") == len)
		return 0;
	snprintf(why, whylen, "wants 1 to 63 characters of A-Z a-z 0-9 . _ -");
	return -1;
}

static int
check_peer_url(const char *v, char *why, size_t whylen)
{
	static const char *const https[] = { "https", NULL };
	struct url u;
	int ok;

	if (strlen(v) > 255) {
		snprintf(why, whylen, "longer than 255 bytes");
		return -1;
	}
	if (url_parse(v, https, &u, why, whylen) != 0)
		return -1;
	ok = !u.has_userinfo && strcmp(u.path, "/") == 0;
	url_clear(&u);
	if (!ok)
		snprintf(why, whylen, "wants https://HOST[:PORT] without user or path");
	return ok ? 0 : -1;
}

static const struct opt_spec serve_specs[SERVE_OPT_COUNT] = {
	[SERVE_OPT_DATA_DIR] = { .name = "data-dir", .type = OPT_STRING, .arg = "DIR",
	    .help = "the directory 'tether-gateway init' made (CA, certificate, "
	    "gateway.json, the SQLite store)", .required = 1 },
	[SERVE_OPT_LISTEN] = { .name = "listen", .type = OPT_STRING, .arg = "HOST:PORT",
	    .def = "0.0.0.0:8443", .check = netaddr_check,
	    .help = "HTTPS and agent tunnels on one port (port 0: any free port)" },
	[SERVE_OPT_PLAIN_LISTEN] = { .name = "plain-listen", .type = OPT_STRING,
	    .arg = "HOST:PORT", .def_help = "off: TLS only", .check = netaddr_check,
	    .help = "also serve plain HTTP (no TLS) there, for a load balancer "
	    "that terminates TLS; only --trusted-proxy sources may connect" },
	[SERVE_OPT_TRUSTED_PROXY] = { .name = "trusted-proxy", .type = OPT_STRING,
	    .arg = "CIDR", .def_help = "none: no PROXY header taken", .check = cidr_list_check, .repeat = 1,
	    .help = "a load balancer's source network, trusted to send a PROXY "
	    "protocol v2 header with the client's address (repeatable, or "
	    "comma-separated; a header from any other source is refused)" },
	[SERVE_OPT_REQUIRE_PROXY_HEADER] = { .name = "require-proxy-header",
	    .type = OPT_BOOL, .def = "false",
	    .help = "a connection from a --trusted-proxy source must start with a "
	    "PROXY header (else it is refused), so no client behind a balancer "
	    "that sends none can choose the logged address" },
	[SERVE_OPT_PUBLIC_CA] = { .name = "public-ca", .type = OPT_STRING,
	    .arg = "FILE", .def_help = "DATA_DIR/ca.crt",
	    .help = "the CA of the certificate clients see at the public URL (a "
	    "TLS-terminating balancer's): served at /v1/ca, its checksum in join "
	    "documents and kubeconfigs" },
	[SERVE_OPT_REPLICA_ID] = { .name = "replica-id", .type = OPT_STRING,
	    .arg = "ID", .def_help = "HOST-PID, the host name and process id", .check = check_replica_id,
	    .help = "this replica's name among those sharing the store; its "
	    "agents' tunnels are recorded against it (docs/0017)" },
	[SERVE_OPT_PEER_URL] = { .name = "peer-url", .type = OPT_STRING,
	    .arg = "URL", .def_help = "none: not recorded", .check = check_peer_url,
	    .help = "https://HOST:PORT where the other replicas reach this one, "
	    "recorded with its lease" },
	[SERVE_OPT_PEER_LISTEN] = { .name = "peer-listen", .type = OPT_STRING,
	    .arg = "HOST:PORT", .def_help = "off: peers use the main port", .check = netaddr_check,
	    .help = "also serve the peer endpoint (links from the other replicas, "
	    "docs/0020) there, alone, requiring a replica's certificate at the TLS "
	    "handshake; --peer-url then names this port" },
	[SERVE_OPT_STORE] = { .name = "store", .type = OPT_STRING, .arg = "URL",
	    .def_help = "sqlite://DATA_DIR/tether.db", .check = check_store,
	    .help = "the store: sqlite://PATH or postgresql://..." },
	[SERVE_OPT_WORKERS] = { .name = "workers", .type = OPT_U32, .arg = "N",
	    .def_help = "the CPUs this process may use", .min = 1, .max = 64,
	    .help = "event loops, each running TLS handshakes and, with --landing "
	    "route or any, its share of the connections, tunnels and streams "
	    "(docs/0032, docs/0040)" },
	[SERVE_OPT_LANDING] = { .name = "landing", .type = OPT_CHOICE,
	    .arg = "WHERE", .def = "any", .choices = landings,
	    .help = "where an HTTPS connection lives once its TLS handshake is "
	    "done (docs/0040): route: a /k8s request or a dial on the loop of "
	    "an agent of its cluster, an agent's tunnel on the loop holding the "
	    "fewest, a replica's link on the first, any other on the loop that "
	    "ran the handshake; any: as route, but /k8s lands on the loop that "
	    "leaves the loops most even, counting each loop's connections "
	    "(dials included, until they end) and, at half of one each, those "
	    "whose agent's tunnel it holds (their streams may cross between "
	    "loops), and a dial on its agent's loop unless that loop's count "
	    "so weighed is above the handshake loop's by more than two "
	    "connections or a quarter; "
	    "zero: every one on the first loop (the others only run TLS "
	    "handshakes)" },
	[SERVE_OPT_STORE_POOL] = { .name = "store-pool", .type = OPT_U32, .arg = "N",
	    .def = "8", .max = 64,
	    .help = "PostgreSQL only: connections, each on a thread of its own, "
	    "that run the registrations and import-token lookups of tunnel "
	    "handshakes at once (0: they wait their turn on the store thread; "
	    "docs/0035, docs/0038)" },
	[SERVE_OPT_HANDSHAKE_TIMEOUT] = { .name = "handshake-timeout", .type = OPT_U32,
	    .arg = "MS", .def = "10000", .min = 100, .max = 600000,
	    .help = "tunnel handshake deadline" },
	[SERVE_OPT_MAX_HANDSHAKES] = { .name = "max-handshakes", .type = OPT_U32,
	    .arg = "N", .def = "256", .min = 1, .max = 1000000,
	    .help = "unauthenticated tunnels at once; past it an upgrade waits "
	    "for a slot (--handshake-wait) or gets 503 with Retry-After" },
	[SERVE_OPT_MAX_TLS_HANDSHAKES] = { .name = "max-tls-handshakes", .type = OPT_U32,
	    .arg = "N", .def = "32", .min = 1, .max = 1000000,
	    .help = "TLS handshakes under way at once; connections accepted past "
	    "it wait, unread, for a free slot" },
	[SERVE_OPT_MAX_TLS_QUEUE] = { .name = "max-tls-queue", .type = OPT_U32,
	    .arg = "N", .def = "4096", .min = 1, .max = 1000000,
	    .help = "connections waiting for a TLS handshake slot; past it new "
	    "ones wait in the kernel's listen backlog; one whose client closed, or "
	    "that waited over half of --handshake-timeout, is closed unread" },
	[SERVE_OPT_MAX_TLS_PER_SOURCE] = { .name = "max-tls-per-source", .type = OPT_U32,
	    .arg = "N", .def = "64", .min = 1, .max = 1000000,
	    .help = "TLS handshake slots and queue places one source address "
	    "holds at once; past it its new connections are closed unread" },
	[SERVE_OPT_TLS_HELLO_TIMEOUT] = { .name = "tls-hello-timeout", .type = OPT_U32,
	    .arg = "MS", .def = "1000", .min = 50, .max = 600000,
	    .help = "a connection given a TLS handshake slot must have sent its "
	    "ClientHello within this, or it is closed and the slot goes on" },
	[SERVE_OPT_TLS_HANDSHAKE_TIMEOUT] = { .name = "tls-handshake-timeout", .type = OPT_U32,
	    .arg = "MS", .def = "3000", .min = 50, .max = 600000,
	    .help = "the whole TLS handshake, from taking a slot" },
	[SERVE_OPT_MAX_HANDSHAKES_PER_SOURCE] = { .name = "max-handshakes-per-source",
	    .type = OPT_U32, .arg = "N", .def = "32", .min = 1, .max = 1000000,
	    .help = "tunnel handshakes one source address holds at once; past it "
	    "its upgrades get 503" },
	[SERVE_OPT_HANDSHAKE_WAIT] = { .name = "handshake-wait", .type = OPT_U32,
	    .arg = "MS", .def = "3000", .min = 0, .max = 60000,
	    .help = "an upgrade past --max-handshakes waits up to this long for a "
	    "slot (first come, first served; at most --max-tls-queue wait); then "
	    "503 with Retry-After (0: 503 at once)" },
	[SERVE_OPT_REDIAL_SPREAD_MIN] = { .name = "redial-spread-min", .type = OPT_U32,
	    .arg = "MS", .def = "500", .min = 100, .max = 300000,
	    .help = "the least redial spread agents are told (SETTINGS): one that "
	    "loses this gateway without a word draws its first redial in "
	    "[0, spread], spread = its tunnels over the handshakes it finishes "
	    "per second, at most 300000 (docs/0035)" },
	[SERVE_OPT_HELLO_TIMEOUT] = { .name = "hello-timeout", .type = OPT_U32,
	    .arg = "MS", .def = "2000", .min = 50, .max = 600000,
	    .help = "a new tunnel must send HELLO within this (then the rest of "
	    "--handshake-timeout)" },
	[SERVE_OPT_MAX_CONNECTIONS] = { .name = "max-connections", .type = OPT_U32,
	    .arg = "N", .def = "8192", .min = 1, .max = 1000000,
	    .help = "HTTP connections at once (requests, keep-alive, not yet a "
	    "WebSocket); past it new ones are closed at accept, so that tunnels, "
	    "the admin API and metrics keep descriptors" },
	[SERVE_OPT_MAX_CONNECTIONS_PER_SOURCE] = { .name = "max-connections-per-source",
	    .type = OPT_U32, .arg = "N", .def = "256", .min = 1, .max = 1000000,
	    .help = "of them, from one source address (a --trusted-proxy's own "
	    "connections count only in the total)" },
	[SERVE_OPT_MAX_FRAME_SIZE] = { .name = "max-frame-size", .type = OPT_U32,
	    .arg = "BYTES", .def = "1048576", .min = 4096, .max = 64u << 20,
	    .help = "largest tunnel frame" },
	[SERVE_OPT_MAX_QUEUE] = { .name = "max-queue", .type = OPT_U32,
	    .arg = "BYTES", .def = "8388608", .min = 65536, .max = 1u << 30,
	    .help = "output queued to one peer (tunnel, dial), replies included; "
	    "past it the peer is dropped" },
	[SERVE_OPT_VERIFY_TIMEOUT] = { .name = "verify-timeout", .type = OPT_U32,
	    .arg = "MS", .def = "10000", .min = 100, .max = 600000,
	    .help = "verification round trip deadline" },
	[SERVE_OPT_MAX_CLOCK_SKEW] = { .name = "max-clock-skew", .type = OPT_U32,
	    .arg = "SECONDS", .def = "60", .min = 1, .max = 86400,
	    .help = "allowed agent clock skew" },
	[SERVE_OPT_HTTP_TIMEOUT] = { .name = "http-timeout", .type = OPT_U32,
	    .arg = "MS", .def = "20000", .min = 100, .max = 600000,
	    .help = "TLS handshake plus one HTTP request, or an idle keep-alive "
	    "connection, must not take longer (and a /k8s request's token "
	    "check: then 503)" },
	[SERVE_OPT_PING_INTERVAL] = { .name = "ping-interval", .type = OPT_U32,
	    .arg = "MS", .def = "20000", .min = 100, .max = 600000,
	    .help = "a WebSocket (agent tunnel, connect, forward) silent this long "
	    "is pinged" },
	[SERVE_OPT_PING_TIMEOUT] = { .name = "ping-timeout", .type = OPT_U32,
	    .arg = "MS", .def = "30000", .min = 100, .max = 600000,
	    .help = "and dropped if nothing answers within this (its streams end "
	    "with an error)" },
	[SERVE_OPT_DRAIN_TIMEOUT] = { .name = "drain-timeout", .type = OPT_U32,
	    .arg = "MS", .def = "25000", .min = 0, .max = 3600000,
	    .help = "after SIGTERM, streams in flight get this long to finish "
	    "while agents move to another replica (0: close at once)" },
	[SERVE_OPT_DRAIN_GRACE] = { .name = "drain-grace", .type = OPT_U32,
	    .arg = "MS", .def = "2000", .min = 0, .max = 600000,
	    .help = "after SIGTERM, new connections are still accepted and served "
	    "this long at least (the balancer's health check must see /readyz "
	    "503 first: its interval times its fall count; at most "
	    "--drain-timeout)" },
	[SERVE_OPT_STREAM_WINDOW] = { .name = "stream-window", .type = OPT_U32,
	    .arg = "BYTES", .def = "1048576", .min = 4096, .max = 64u << 20,
	    .help = "flow-control window per stream" },
	[SERVE_OPT_MAX_STREAMS] = { .name = "max-streams", .type = OPT_U32,
	    .arg = "N", .def = "1024", .min = 1, .max = 1000000,
	    .help = "streams per agent tunnel" },
	[SERVE_OPT_STREAM_BUDGET] = { .name = "stream-budget", .type = OPT_U32,
	    .arg = "BYTES", .def = "268435456", .min = 1u << 20, .max = 4095u << 20,
	    .help = "all streams' windows together; past half of a budget or share, "
	    "new streams get smaller windows" },
	[SERVE_OPT_ADMIN_RESERVE] = { .name = "admin-reserve", .type = OPT_U32,
	    .arg = "BYTES", .def = "33554432", .min = 0, .max = 4095u << 20,
	    .help = "of the stream budget, for streams of admin tokens only "
	    "(less than --stream-budget)" },
	[SERVE_OPT_TUNNEL_SHARE] = { .name = "tunnel-share", .type = OPT_U32,
	    .arg = "BYTES", .def = "134217728", .min = 1u << 20, .max = 4095u << 20,
	    .help = "most of the stream budget the streams of one agent tunnel or "
	    "one forward connection may hold" },
	[SERVE_OPT_PRINCIPAL_SHARE] = { .name = "principal-share", .type = OPT_U32,
	    .arg = "BYTES", .def = "67108864", .min = 1u << 20, .max = 4095u << 20,
	    .help = "most of the stream budget the streams of one user (or one admin "
	    "token) may hold" },
	[SERVE_OPT_MIN_STREAM_WINDOW] = { .name = "min-stream-window", .type = OPT_U32,
	    .arg = "BYTES", .def = "16384", .min = 4096, .max = 64u << 20,
	    .help = "smallest window a stream gets under pressure; a stream is "
	    "refused (busy) only when not even this much is left" },
	[SERVE_OPT_MEMORY_BUDGET] = { .name = "memory-budget", .type = OPT_U32,
	    .arg = "BYTES", .def = "268435456", .min = 1u << 20, .max = 4095u << 20,
	    .help = "output queued to and input buffered from every WebSocket "
	    "connection together; past it the largest holders are dropped" },
	[SERVE_OPT_MEMORY_SHARE] = { .name = "memory-share", .type = OPT_U32,
	    .arg = "BYTES", .def = "67108864", .min = 1u << 20, .max = 4095u << 20,
	    .help = "most of the memory budget the connections of one user (or "
	    "one admin token) may hold; past it their largest is dropped" },
	[SERVE_OPT_IMPERSONATE] = { .name = "impersonate", .type = OPT_BOOL,
	    .def = "false",
	    .help = "/k8s requests carry Impersonate-User: <gateway user> (clients' "
	    "Impersonate-* headers are always dropped)" },
	[SERVE_OPT_LOG_LEVEL] = { .name = "log-level", .type = OPT_CHOICE,
	    .arg = "LEVEL", .def = "info", .choices = log_levels,
	    .help = "least severe level logged" },
	[SERVE_OPT_LOG_FORMAT] = { .name = "log-format", .type = OPT_CHOICE,
	    .arg = "FORMAT", .def = "logfmt", .choices = log_formats,
	    .help = "one line per event on stderr, every value quoted and "
	    "escaped (docs/0008)" },
	[SERVE_OPT_AUDIT_LOG] = { .name = "audit-log", .type = OPT_STRING,
	    .arg = "PATH", .def_help = "stderr, with the log",
	    .help = "audit lines (streams, /k8s requests) to PATH, created 0640 and "
	    "appended to; reopened on SIGHUP" },
	[SERVE_OPT_METRICS_LISTEN] = { .name = "metrics-listen", .type = OPT_STRING,
	    .arg = "HOST:PORT", .def_help = "off: not served", .check = netaddr_check,
	    .help = "also serve Prometheus /metrics there, plain HTTP without a "
	    "token (the main port serves /metrics to admin tokens)" },
	[SERVE_OPT_CERT_RENEW_BEFORE] = { .name = "cert-renew-before", .type = OPT_U32,
	    .arg = "DAYS", .def = "45", .min = 0, .max = 3650,
	    .help = "renew server.crt by itself (as 'cert renew' does, then as on "
	    "SIGHUP) when it expires within DAYS days; needs ca.key in the data "
	    "directory; 0: never" },
	[SERVE_OPT_CENSUS_INTERVAL] = { .name = "census-interval", .type = OPT_U32,
	    .arg = "MS", .def = "30000", .min = 2000, .max = 3600000,
	    .help = "how often the store counts the agents (tether_agents_offline, "
	    "_by_version, _holding_new_ca) and stamps last_seen on those this "
	    "replica holds; in lease renewals (2 s), rounded up" },
};

const struct opt_command serve_command = {
	.prog = "tether-gateway serve",
	.synopsis = "usage: tether-gateway serve --data-dir DIR [--config FILE] [options]",
	.about =
	    "Serves HTTPS and the agent tunnels on one port.\n",
	.footer =
	    "SIGTERM or SIGINT: drain: /readyz answers 503, no new tunnel is\n"
	    "accepted, agents are told to reconnect elsewhere, streams in flight\n"
	    "get --drain-timeout to finish; new connections are served for\n"
	    "--drain-grace at least, then no more are accepted, those accepted\n"
	    "are answered, and the rest is closed, exit 0.\n"
	    "SIGHUP: reopen the --audit-log file (after logrotate moved it) and\n"
	    "serve server.crt and server.key as they are now in the data directory\n"
	    "(after 'tether-gateway cert renew'): new handshakes get them, tunnels\n"
	    "and streams open stay; a bad new file is logged and the old one kept.\n",
	.spec = serve_specs,
	.n = SERVE_OPT_COUNT,
};
