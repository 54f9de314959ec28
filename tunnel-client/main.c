/*
 * main.c: tether-client's entry point: global set-up and dispatch to the
 * subcommands join, run and status (join.c, agent.c, status.c).
 */
#include <errno.h>
#include <getopt.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>

#include "agent.h"
#include "cli.h"
#include "join.h"
#include "status.h"
#include "log.h"
#include "proxy.h"
#include "run_options.h"
#include "url.h"
#include "runtime.h"

/* The Debian architecture this binary is for, and how it was linked
 * (cmake/AgentStatic.cmake defines TETHER_STATIC). */
#if defined(__x86_64__)
#define BUILD_ARCH "amd64"
#elif defined(__aarch64__)
#define BUILD_ARCH "arm64"
#elif defined(__arm__) && defined(__ARM_PCS_VFP)
#define BUILD_ARCH "armhf"
#elif defined(__arm__)
#define BUILD_ARCH "armel"
#elif defined(__i386__)
#define BUILD_ARCH "i386"
#else
#define BUILD_ARCH "unknown-arch"
#endif
#ifdef TETHER_STATIC
#define BUILD_LINK "static"
#else
#define BUILD_LINK "dynamic"
#endif

static void
usage(FILE *f)
{
	fprintf(f,
	    "usage: tether-client COMMAND [FLAGS]\n"
	    "\n"
	    "The tunnel client on a node: it joins a Tether gateway once, then keeps\n"
	    "an outbound tunnel to it through which the gateway reaches only the\n"
	    "targets this node allows.\n"
	    "\n"
	    "commands:\n"
	    "  join --state-dir DIR [--node-name NAME] [--allow HOST:PORT]...\n"
	    "       [--service NAME=URL]...\n"
	    "        read a join document on stdin, check it and the gateway's CA,\n"
	    "        and write DIR.  --allow lists the only targets the gateway may\n"
	    "        open (HOST:* for every port of HOST; none by default);\n"
	    "        --service kube-api=https://HOST:PORT names the Kubernetes API.\n"
	    "  run --state-dir DIR [--config FILE] [options]\n"
	    "        connect, register on first use, keep the tunnel up, serve streams\n"
	    "        (`tether-client run --help` lists the options)\n"
	    "  status --state-dir DIR\n"
	    "        print {cluster, agent_id, state, connected, gateway_url, node}\n"
	    "        as JSON\n"
	    "\n"
	    "  --help      this text (`tether-client COMMAND --help` for one command)\n"
	    "  --version   print the version, the architecture and whether the\n"
	    "              binary is static\n"
	    "\n"
	    "exit codes:\n"
	    "  join:   0 joined; 2 invalid document or arguments; 3 DIR already\n"
	    "          belongs to a cluster; 4 gateway still unreachable at\n"
	    "          --timeout (default 30s: a transient fault is retried until\n"
	    "          then) or CA checksum mismatch; 1 DIR cannot be written\n"
	    "  run:    0 stopped by a signal; 1 not joined, refused or revoked\n"
	    "  status: 0 ok; 1 not joined\n"
	    "  any:    2 bad usage\n"
	    "\n"
	    "example:\n"
	    "  tetherctl token create --cluster c-0123456789ab |\n"
	    "    tether-client join --state-dir /var/lib/tether --allow 127.0.0.1:22\n"
	    "  tether-client run --state-dir /var/lib/tether\n");
}

/* The first of the environment variables names that is set and not empty. */
static const char *
env_first(const char *a, const char *b, const char **which)
{
	const char *v = getenv(a);

	*which = a;
	if (v == NULL || v[0] == '\0') {
		v = getenv(b);
		*which = b;
	}
	return v != NULL && v[0] != '\0' ? v : NULL;
}

/* The proxy: --proxy / the proxy key, else https_proxy / HTTPS_PROXY; the
 * same for NO_PROXY.  0, or -1 after saying what is wrong. */
static int
proxy_settings(const struct opt_set *o, struct agent_options *opt)
{
	const char *which = NULL;
	char why[256];

	opt->proxy_url = opts_str(o, RUN_OPT_PROXY);
	if (opt->proxy_url == NULL) {
		opt->proxy_url = env_first("https_proxy", "HTTPS_PROXY", &which);
		if (opt->proxy_url != NULL) {
			struct url u;
			int r = url_parse(opt->proxy_url, proxy_url_schemes, &u, why,
			    sizeof(why));

			url_clear(&u);
			if (r != 0) {
				fprintf(stderr, "tether-client run: environment variable "
				    "%s: %s\n", which, why);
				return -1;
			}
		}
	}
	opt->no_proxy = opts_str(o, RUN_OPT_NO_PROXY);
	if (opt->no_proxy == NULL)
		opt->no_proxy = env_first("no_proxy", "NO_PROXY", &which);
	opt->proxy_ca_file = opts_str(o, RUN_OPT_PROXY_CACERT);
	opt->trust_proxy_ca = opts_str(o, RUN_OPT_TRUST_PROXY_CA);
	opt->proxy_auth = (int)opts_num(o, RUN_OPT_PROXY_AUTH);
	opt->proxy_user = opts_str(o, RUN_OPT_PROXY_USER);
	opt->proxy_password_file = opts_str(o, RUN_OPT_PROXY_PASSWORD_FILE);
	if (opt->proxy_auth == PROXY_AUTH_NTLM && opt->proxy_url != NULL &&
	    opt->proxy_user == NULL) {
		struct url u;
		int has_user = url_parse(opt->proxy_url, proxy_url_schemes, &u, why,
		    sizeof(why)) == 0 && u.user[0] != '\0';

		url_clear(&u);
		if (!has_user) {
			fprintf(stderr, "tether-client run: --proxy-auth ntlm needs a "
			    "user: --proxy-user DOMAIN\\USER, or the proxy URL's\n");
			return -1;
		}
	}
	return 0;
}

static int
cmd_run(int argc, char **argv)
{
	struct agent_options opt = AGENT_DEFAULT_OPTIONS;
	struct opt_set o;
	int r;

	switch (opts_parse(&run_command, argc, argv, &o)) {
	case OPTS_OK: break;
	case OPTS_HELP: return 0;
	default: return 2;
	}
	opt.stream_window = opts_num(&o, RUN_OPT_STREAM_WINDOW);
	opt.max_streams = opts_num(&o, RUN_OPT_MAX_STREAMS);
	opt.dial_timeout_ms = opts_num(&o, RUN_OPT_DIAL_TIMEOUT);
	opt.metrics_listen = opts_str(&o, RUN_OPT_METRICS_LISTEN);
	opt.ping_interval_ms = opts_num(&o, RUN_OPT_PING_INTERVAL);
	opt.ping_timeout_ms = opts_num(&o, RUN_OPT_PING_TIMEOUT);
	opt.max_key_age_days = opts_num(&o, RUN_OPT_MAX_KEY_AGE);
	if (proxy_settings(&o, &opt) != 0) {
		opts_free(&o);
		return 2;
	}
	log_init("client", (enum log_level)opts_num(&o, RUN_OPT_LOG_LEVEL));
	log_set_format((enum log_format)opts_num(&o, RUN_OPT_LOG_FORMAT));
	r = agent_run(opts_str(&o, RUN_OPT_STATE_DIR), &opt);
	opts_free(&o);
	return r;
}

/* Keys live in this process's memory: no core dumps. */
static void
no_core_dumps(void)
{
	struct rlimit rl = { 0, 0 };

	(void)setrlimit(RLIMIT_CORE, &rl);
}

int
main(int argc, char **argv)
{
	const char *cmd;
	int r;

	if (argc < 2) {
		usage(stderr);
		return 2;
	}
	cmd = argv[1];
	if (strcmp(cmd, "--help") == 0 || strcmp(cmd, "-h") == 0 ||
	    strcmp(cmd, "help") == 0) {
		usage(stdout);
		return 0;
	}
	if (strcmp(cmd, "--version") == 0 || strcmp(cmd, "version") == 0) {
		printf("tether-client %s (%s, %s)\n", TETHER_VERSION, BUILD_ARCH,
		    BUILD_LINK);
		return 0;
	}
	no_core_dumps();
	runtime_init();
	if (strcmp(cmd, "join") == 0)
		r = client_join(argc - 1, argv + 1);
	else if (strcmp(cmd, "run") == 0)
		r = cmd_run(argc - 1, argv + 1);
	else if (strcmp(cmd, "status") == 0)
		r = client_status(argc - 1, argv + 1);
	else
		r = client_usage_error(NULL, "unknown command %s", cmd);
	return r;
}
