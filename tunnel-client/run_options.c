/*
 * run_options.c: the table of `tether-client run` settings (see
 * run_options.h).  Every row is a flag, a config key and a --help entry.
 */
#include "run_options.h"

#include <stddef.h>
#include <stdio.h>

#include "proxy.h"
#include "url.h"

#include "agent_tunnel.h"
#include "netaddr.h"

#define STR_(x) #x
#define STR(x) STR_(x)

static const char *const log_levels[] = { "debug", "info", "warn", "error", NULL };
/* In the order of enum log_format (common/log.h). */
static const char *const log_formats[] = { "logfmt", "json", NULL };

static int
check_proxy(const char *v, char *why, size_t whylen)
{
	struct url u;
	int r = url_parse(v, proxy_url_schemes, &u, why, whylen);

	url_clear(&u);
	return r;
}

static const struct opt_spec run_specs[RUN_OPT_COUNT] = {
	[RUN_OPT_STATE_DIR] = { .name = "state-dir", .type = OPT_STRING, .arg = "DIR",
	    .help = "the directory 'tether-client join' wrote", .required = 1 },
	[RUN_OPT_STREAM_WINDOW] = { .name = "stream-window", .type = OPT_U32,
	    .arg = "BYTES", .def = "1048576", .min = 4096, .max = 64u << 20,
	    .help = "credit granted per stream (bounds the memory a stream may "
	    "hold here)" },
	[RUN_OPT_MAX_STREAMS] = { .name = "max-streams", .type = OPT_U32,
	    .arg = "N", .def = "1024", .min = 1, .max = 1000000,
	    .help = "streams served at once" },
	[RUN_OPT_DIAL_TIMEOUT] = { .name = "dial-timeout", .type = OPT_U32,
	    .arg = "MS", .def = "10000", .min = 100, .max = 600000,
	    .help = "connecting to a target" },
	[RUN_OPT_PING_INTERVAL] = { .name = "ping-interval", .type = OPT_U32,
	    .arg = "MS", .def = STR(AGENT_PING_INTERVAL_MS), .min = 100, .max = 600000,
	    .help = "a tunnel silent this long (no bytes of the gateway read) "
	    "is pinged" },
	[RUN_OPT_PING_TIMEOUT] = { .name = "ping-timeout", .type = OPT_U32,
	    .arg = "MS", .def = STR(AGENT_PING_TIMEOUT_MS), .min = 100, .max = 600000,
	    .help = "and, if nothing arrives within this, dropped and dialled again "
	    "(a hung gateway is left within the sum)" },
	[RUN_OPT_LOG_LEVEL] = { .name = "log-level", .type = OPT_CHOICE,
	    .arg = "LEVEL", .def = "info", .choices = log_levels,
	    .help = "least severe level logged" },
	[RUN_OPT_LOG_FORMAT] = { .name = "log-format", .type = OPT_CHOICE,
	    .arg = "FORMAT", .def = "logfmt", .choices = log_formats,
	    .help = "one line per event on stderr, every value quoted and "
	    "escaped" },
	[RUN_OPT_METRICS_LISTEN] = { .name = "metrics-listen", .type = OPT_STRING,
	    .arg = "HOST:PORT", .def_help = "off: not served", .check = netaddr_check,
	    .help = "serve Prometheus /metrics there, plain HTTP without a token" },
	[RUN_OPT_PROXY] = { .name = "proxy", .type = OPT_STRING, .arg = "URL",
	    .check = check_proxy, .def_help = "$https_proxy or $HTTPS_PROXY",
	    .help = "reach the gateway through this HTTP CONNECT proxy: "
	    "http[s]://[USER:PASSWORD@]HOST[:PORT] (percent-encode special "
	    "characters of USER and PASSWORD)" },
	[RUN_OPT_NO_PROXY] = { .name = "no-proxy", .type = OPT_STRING, .arg = "LIST",
	    .def_help = "$no_proxy or $NO_PROXY",
	    .help = "gateway hosts reached without the proxy: names (example.com "
	    "covers its subdomains, as .example.com does), addresses, CIDR blocks, "
	    "or *, separated by commas" },
	[RUN_OPT_PROXY_CACERT] = { .name = "proxy-cacert", .type = OPT_STRING,
	    .arg = "FILE", .def_help = "the system's CAs",
	    .help = "PEM CA certificates that verify an https:// proxy" },
	[RUN_OPT_TRUST_PROXY_CA] = { .name = "trust-proxy-ca", .type = OPT_STRING,
	    .arg = "FILE", .def_help = "off: only the CA pinned at join",
	    .help = "also accept gateway certificates issued by this CA (PEM): "
	    "a TLS-inspecting proxy's, on purpose; it can then read the tunnel, "
	    "and a warning says so at every start" },
	[RUN_OPT_PROXY_AUTH] = { .name = "proxy-auth", .type = OPT_CHOICE,
	    .arg = "SCHEME", .def = "basic", .choices = proxy_auth_names,
	    .help = "how to authenticate to the proxy: basic (the URL's USER and "
	    "PASSWORD), ntlm (NTLMv2 with --proxy-user and the password), "
	    "negotiate (Kerberos: the node's keytab or credential cache)" },
	[RUN_OPT_PROXY_USER] = { .name = "proxy-user", .type = OPT_STRING,
	    .arg = "DOMAIN\\USER", .def_help = "the proxy URL's USER",
	    .help = "the NTLM user: DOMAIN\\USER or USER@DOMAIN" },
	[RUN_OPT_PROXY_PASSWORD_FILE] = { .name = "proxy-password-file",
	    .type = OPT_STRING, .arg = "FILE", .def_help = "the proxy URL's PASSWORD",
	    .help = "read the proxy password from FILE's first line; FILE must "
	    "not be readable by group or others" },
	[RUN_OPT_MAX_KEY_AGE] = { .name = "max-key-age", .type = OPT_U32,
	    .arg = "DAYS", .def = "365", .min = 0, .max = 36500,
	    .help = "once the node's key is this old (its file's age), the agent "
	    "asks the gateway to rotate it, and again hourly until it is; 0: never" },
};

const struct opt_command run_command = {
	.prog = "tether-client run",
	.synopsis = "usage: tether-client run --state-dir DIR [--config FILE] [options]",
	.about =
	    "Connects to the gateway DIR was joined to, registers on first use\n"
	    "(import token -> agent key), reconnects with backoff and serves the\n"
	    "streams the gateway opens to allowed targets.  Stops on SIGINT or\n"
	    "SIGTERM.\n",
	.footer = "exit: 0 after a signal; 1 not joined or refused for good; 2 bad usage;\n"
	    "77 revoked by an operator.\n",
	.spec = run_specs,
	.n = RUN_OPT_COUNT,
};
