/*
 * main.c: tether-client's entry point: global set-up and dispatch to the
 * subcommands join, run and status (join.c, agent.c).
 */
#include <errno.h>
#include <getopt.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>

#include <curl/curl.h>

#include "agent.h"
#include "join.h"
#include "log.h"
#include "runtime.h"

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
	    "  run --state-dir DIR [--log-level debug|info|warn|error]\n"
	    "        connect, register on first use, keep the tunnel up, serve streams\n"
	    "  status --state-dir DIR\n"
	    "        print {cluster, agent_id, state, connected, gateway_url, node}\n"
	    "        as JSON\n"
	    "\n"
	    "  --help      this text (`tether-client COMMAND --help` for one command)\n"
	    "  --version   print the version\n"
	    "\n"
	    "exit codes:\n"
	    "  join:   0 joined; 2 invalid document or arguments; 3 DIR already\n"
	    "          belongs to a cluster; 4 gateway unreachable or CA checksum\n"
	    "          mismatch; 1 DIR cannot be written\n"
	    "  run:    0 stopped by a signal; 1 not joined, refused or revoked\n"
	    "  status: 0 ok; 1 not joined\n"
	    "  any:    2 bad usage\n"
	    "\n"
	    "example:\n"
	    "  tetherctl token create --cluster c-0123456789ab |\n"
	    "    tether-client join --state-dir /var/lib/tether --allow 127.0.0.1:22\n"
	    "  tether-client run --state-dir /var/lib/tether\n");
}

static void
run_usage(void)
{
	fprintf(stdout,
	    "usage: tether-client run --state-dir DIR [--log-level LEVEL]\n"
	    "                         [--stream-window BYTES] [--max-streams N]\n"
	    "                         [--dial-timeout MS]\n"
	    "\n"
	    "Connects to the gateway DIR was joined to, registers on first use\n"
	    "(import token -> agent key), reconnects with backoff and serves the\n"
	    "streams the gateway opens to allowed targets.  Stops on SIGINT or\n"
	    "SIGTERM.  LEVEL: debug, info (default), warn, error.\n"
	    "  --stream-window BYTES  credit granted per stream (default 1048576;\n"
	    "                         bounds the memory a stream may hold here)\n"
	    "  --max-streams N        streams served at once (default 1024)\n"
	    "  --dial-timeout MS      connecting to a target (default 10000)\n"
	    "\n"
	    "exit: 0 after a signal; 1 not joined, refused or revoked; 2 bad usage.\n");
}

static int
usage_error(const char *cmd, const char *fmt, const char *arg)
{
	fprintf(stderr, "tether-client%s%s: ", cmd != NULL ? " " : "",
	    cmd != NULL ? cmd : "");
	fprintf(stderr, fmt, arg);
	fprintf(stderr, "\nTry 'tether-client%s%s --help'.\n",
	    cmd != NULL ? " " : "", cmd != NULL ? cmd : "");
	return 2;
}

/* A decimal number within [min, max].  Returns 0 or -1. */
static int
parse_limit(const char *s, uint32_t min, uint32_t max, uint32_t *out)
{
	char *end;
	unsigned long v;

	errno = 0;
	v = strtoul(s, &end, 10);
	if (errno != 0 || end == s || *end != '\0' || v < min || v > max)
		return -1;
	*out = (uint32_t)v;
	return 0;
}

static int
cmd_run(int argc, char **argv)
{
	static const struct option longopts[] = {
		{ "state-dir", required_argument, NULL, 'd' },
		{ "log-level", required_argument, NULL, 'l' },
		{ "stream-window", required_argument, NULL, 'w' },
		{ "max-streams", required_argument, NULL, 'm' },
		{ "dial-timeout", required_argument, NULL, 't' },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 },
	};
	struct agent_options opt = AGENT_DEFAULT_OPTIONS;
	enum log_level level = LOG_LEVEL_INFO;
	const char *dir = NULL;
	int c;

	opterr = 0;
	optind = 0;
	while ((c = getopt_long(argc, argv, ":h", longopts, NULL)) != -1) {
		switch (c) {
		case 'd':
			dir = optarg;
			break;
		case 'l':
			if (log_level_parse(optarg, &level) == -1)
				return usage_error("run", "--log-level %s: want debug, "
				    "info, warn or error", optarg);
			break;
		case 'w':
			if (parse_limit(optarg, 4096, 64u << 20, &opt.stream_window) != 0)
				return usage_error("run", "--stream-window %s: want "
				    "4096 to 67108864 bytes", optarg);
			break;
		case 'm':
			if (parse_limit(optarg, 1, 1000000, &opt.max_streams) != 0)
				return usage_error("run", "--max-streams %s: want 1 to "
				    "1000000", optarg);
			break;
		case 't':
			if (parse_limit(optarg, 100, 600000, &opt.dial_timeout_ms) != 0)
				return usage_error("run", "--dial-timeout %s: want 100 "
				    "to 600000 ms", optarg);
			break;
		case 'h':
			run_usage();
			return 0;
		case ':':
			return usage_error("run", "option %s needs a value",
			    argv[optind - 1]);
		default:
			return usage_error("run", "unknown option %s",
			    argv[optind - 1]);
		}
	}
	if (optind < argc)
		return usage_error("run", "unexpected argument %s", argv[optind]);
	if (dir == NULL || dir[0] == '\0')
		return usage_error("run", "%s is required", "--state-dir DIR");
	log_init("client", level);
	return agent_run(dir, &opt);
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
		printf("tether-client %s\n", TETHER_VERSION);
		return 0;
	}
	no_core_dumps();
	runtime_init();
	if (curl_global_init(CURL_GLOBAL_DEFAULT) != CURLE_OK) {
		fprintf(stderr, "tether-client: cannot initialise libcurl\n");
		return 1;
	}
	if (strcmp(cmd, "join") == 0)
		r = client_join(argc - 1, argv + 1);
	else if (strcmp(cmd, "run") == 0)
		r = cmd_run(argc - 1, argv + 1);
	else if (strcmp(cmd, "status") == 0)
		r = client_status(argc - 1, argv + 1);
	else
		r = usage_error(NULL, "unknown command %s", cmd);
	curl_global_cleanup();
	return r;
}
