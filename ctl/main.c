/*
 * main.c: tetherctl's entry point: global flags (which may come before or
 * after the command) and dispatch to the command groups
 * in commands.c.
 */
#include "ctl.h"

#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <curl/curl.h>

#include "runtime.h"

#define DEFAULT_SERVER "https://127.0.0.1:8443"

static void
usage(FILE *f)
{
	fprintf(f,
	    "usage: tetherctl [GLOBAL FLAGS] COMMAND [ARGS]\n"
	    "\n"
	    "The operator's CLI for a Tether gateway.\n"
	    "\n"
	    "commands:\n"
	    "  cluster create NAME           create a cluster\n"
	    "  cluster list                  list clusters\n"
	    "  token create --cluster ID [--ttl 24h] [--uses N] [--approval auto|manual]\n"
	    "           [--format json|command] [--allow HOST:PORT]...\n"
	    "           [--service NAME=URL]... [--node-name NAME]\n"
	    "                                print a join document for new nodes, or\n"
	    "                                the command that registers a node\n"
	    "  agent list [--cluster ID]     list agents\n"
	    "  agent approve|verify|revoke ID\n"
	    "                                change an agent's state\n"
	    "  user create NAME --cluster ID [--cluster ID]...\n"
	    "                                issue a user token scoped to clusters\n"
	    "  user list                     list user tokens\n"
	    "  user revoke NAME              revoke every token of a user\n"
	    "  kubeconfig --cluster ID [--user NAME]\n"
	    "                                print a kubeconfig with a new user token\n"
	    "  connect --cluster ID [--node NAME] HOST:PORT\n"
	    "                                bridge stdin/stdout to HOST:PORT on a node\n"
	    "  forward --cluster ID [--node NAME] [LHOST:]LPORT:HOST:PORT\n"
	    "                                forward a local port to HOST:PORT on a node\n"
	    "  gateway urls [set URL...|clear]\n"
	    "                                the public URL list agents dial\n"
	    "  ca status                     how far a CA rotation has gone\n"
	    "  status                        the answering replica and its certificate\n"
	    "\n"
	    "global flags (before or after the command):\n"
	    "  --server URL        the gateway (env TETHER_SERVER; default "
	    DEFAULT_SERVER ")\n"
	    "  --token-file FILE   a file holding the token (env TETHER_TOKEN_FILE),\n"
	    "                      or the token itself in env TETHER_TOKEN: an admin\n"
	    "                      token (tta_...) for everything, or a user token\n"
	    "                      (ttu_...) for connect and forward to its clusters\n"
	    "  --cacert FILE       the gateway's CA certificate, DATA_DIR/ca.crt\n"
	    "                      (env TETHER_CACERT; default: the system's CAs)\n"
	    "  -o json|table       output format (default: table on a terminal,\n"
	    "                      json otherwise); json prints one JSON value\n"
	    "  --help, --version\n"
	    "\n"
	    "exit codes: 0 success; 1 the server refused or failed (its reason on\n"
	    "stderr); 2 bad usage; 3 cannot reach or trust the server.\n"
	    "\n"
	    "`tetherctl COMMAND --help` explains one command.\n"
	    "\n"
	    "example:\n"
	    "  export TETHER_TOKEN_FILE=var/admin.token TETHER_CACERT=var/ca.crt\n"
	    "  tetherctl cluster create edge\n"
	    "  tetherctl token create --cluster c-0123456789ab |\n"
	    "    ssh node1 tether-client join --state-dir /var/lib/tether-client "
	    "--allow 127.0.0.1:22\n"
	    "  tetherctl agent list\n");
}


/* --- global flags --- */

/*
 * If argv[*i] is the global flag long (or short, if not NULL), stores its
 * value and advances *i.  Returns 1 if it was, 0 if not, -1 if the value is
 * missing.
 */
static int
take_flag(int argc, char **argv, int *i, const char *lng, const char *shrt,
    const char **val)
{
	const char *a = argv[*i];
	size_t n = strlen(lng);

	if (strcmp(a, lng) == 0 || (shrt != NULL && strcmp(a, shrt) == 0)) {
		if (*i + 1 >= argc)
			return -1;
		*val = argv[++*i];
		return 1;
	}
	if (strncmp(a, lng, n) == 0 && a[n] == '=') {
		*val = a + n + 1;
		return 1;
	}
	if (shrt != NULL && strncmp(a, shrt, 2) == 0 && a[2] != '\0') {
		*val = a + 2;   /* -ojson */
		return 1;
	}
	return 0;
}

/*
 * Moves the global flags out of argv, leaving the command and its own
 * arguments in cargv.  Returns -1 to continue, or an exit code.
 */
static int
parse_globals(struct ctl *c, int argc, char **argv, int *cargc, char **cargv,
    const char **output)
{
	static const struct {
		const char *lng, *shrt;
	} flags[] = {
		{ "--server", NULL },
		{ "--token-file", NULL },
		{ "--cacert", NULL },
		{ "--output", "-o" },
	};
	const char **vals[] = { &c->server, &c->token_file, &c->cacert, output };
	bool rest = false;

	*cargc = 0;
	for (int i = 1; i < argc; i++) {
		int t = 0;

		if (!rest && strcmp(argv[i], "--") == 0)
			rest = true;
		for (size_t f = 0; !rest && f < sizeof(flags) / sizeof(flags[0]); f++) {
			if ((t = take_flag(argc, argv, &i, flags[f].lng, flags[f].shrt,
			    vals[f])) == -1)
				return ctl_usage_error(NULL, "option %s needs a value",
				    argv[i]);
			if (t == 1)
				break;
		}
		if (t == 1)
			continue;
		if (*cargc == 0 && !rest) {
			if (strcmp(argv[i], "--help") == 0 ||
			    strcmp(argv[i], "-h") == 0) {
				usage(stdout);
				return CTL_EXIT_OK;
			}
			if (strcmp(argv[i], "--version") == 0) {
				printf("tetherctl %s\n", TETHER_VERSION);
				return CTL_EXIT_OK;
			}
			if (argv[i][0] == '-')
				return ctl_usage_error(NULL, "unknown option %s", argv[i]);
		}
		cargv[(*cargc)++] = argv[i];
	}
	cargv[*cargc] = NULL;
	return -1;
}

/* Resolves flags and environment into c.  Returns -1 or an exit code. */
static int
apply_defaults(struct ctl *c, const char *output)
{
	const char *env;

	if (c->server == NULL)
		c->server = (env = getenv("TETHER_SERVER")) != NULL &&
		    env[0] != '\0' ? env : DEFAULT_SERVER;
	if (c->cacert == NULL && (env = getenv("TETHER_CACERT")) != NULL &&
	    env[0] != '\0')
		c->cacert = env;
	if (c->token_file == NULL && (env = getenv("TETHER_TOKEN_FILE")) != NULL &&
	    env[0] != '\0')
		c->token_file = env;
	if (output == NULL)
		c->output = isatty(STDOUT_FILENO) ? OUTPUT_TABLE : OUTPUT_JSON;
	else if (strcmp(output, "json") == 0)
		c->output = OUTPUT_JSON;
	else if (strcmp(output, "table") == 0)
		c->output = OUTPUT_TABLE;
	else
		return ctl_usage_error(NULL, "-o %s: want json or table", output);
	return -1;
}

static int
dispatch(struct ctl *c, int argc, char **argv)
{
	static const struct {
		const char *name;
		int (*fn)(struct ctl *, int, char **);
	} cmds[] = {
		{ "cluster", cmd_cluster },
		{ "token", cmd_token },
		{ "agent", cmd_agent },
		{ "user", cmd_user },
		{ "kubeconfig", cmd_kubeconfig },
		{ "connect", cmd_connect },
		{ "forward", cmd_forward },
		{ "gateway", cmd_gateway },
		{ "ca", cmd_ca },
		{ "status", cmd_status },
	};

	if (strcmp(argv[0], "help") == 0) {
		if (argc == 1) {
			usage(stdout);
			return CTL_EXIT_OK;
		}
		if (ctl_group_help(argv[1]) == -1)
			return ctl_usage_error(NULL, "no help for %s", argv[1]);
		return CTL_EXIT_OK;
	}
	for (size_t i = 0; i < sizeof(cmds) / sizeof(cmds[0]); i++) {
		if (strcmp(argv[0], cmds[i].name) == 0)
			return cmds[i].fn(c, argc, argv);
	}
	return ctl_usage_error(NULL, "unknown command %s", argv[0]);
}

int
main(int argc, char **argv)
{
	struct ctl c;
	const char *output = NULL;
	char **cargv = NULL;
	int cargc, r;

	memset(&c, 0, sizeof(c));
	runtime_init();
	if ((cargv = calloc((size_t)argc + 1, sizeof(*cargv))) == NULL) {
		fprintf(stderr, "tetherctl: out of memory\n");
		return CTL_EXIT_SERVER;
	}
	if ((r = parse_globals(&c, argc, argv, &cargc, cargv, &output)) != -1)
		goto out;
	if ((r = apply_defaults(&c, output)) != -1)
		goto out;
	if (cargc == 0) {
		usage(stderr);
		r = CTL_EXIT_USAGE;
		goto out;
	}
	if (curl_global_init(CURL_GLOBAL_DEFAULT) != CURLE_OK) {
		fprintf(stderr, "tetherctl: cannot initialise libcurl\n");
		r = CTL_EXIT_SERVER;
		goto out;
	}
	r = dispatch(&c, cargc, cargv);
	curl_global_cleanup();
out:
	if (c.api.token != NULL) {
		explicit_bzero(c.api.token, strlen(c.api.token));
		free(c.api.token);
	}
	free(cargv);
	fflush(stdout);
	if (ferror(stdout) && r == CTL_EXIT_OK)
		r = CTL_EXIT_SERVER;
	return r;
}
