/*
 * commands.c: tetherctl's command groups (cluster, token, agent, user,
 * kubeconfig; connect and forward live in stream.c): their help, their
 * arguments, the admin API call each makes and how its answer is printed.
 */
#include "ctl.h"
#include "joincmd.h"

#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "duration.h"

#define DEFAULT_TTL_SECONDS (24 * 3600)
#define MAX_TTL_SECONDS     (INT64_C(10) * 366 * 24 * 3600)
#define MAX_USES            1000000
#define MAX_JOIN_ARGS       64      /* --allow/--service values passed on, x2 */

static const struct column cluster_columns[] = {
	{ "ID", "id" },
	{ "NAME", "name" },
	{ "AGENTS", "agents_connected" },
	{ "CREATED", "created_at" },
	{ NULL, NULL },
};

static const struct column cluster_created_columns[] = {
	{ "ID", "id" },
	{ "NAME", "name" },
	{ "CREATED", "created_at" },
	{ NULL, NULL },
};

static const struct column user_created_columns[] = {
	{ "NAME", "name" },
	{ "TOKEN ID", "token_id" },
	{ "CLUSTERS", "clusters" },
	{ "TOKEN", "token" },
	{ NULL, NULL },
};

static const struct column user_columns[] = {
	{ "NAME", "name" },
	{ "TOKEN ID", "token_id" },
	{ "CLUSTERS", "clusters" },
	{ "REVOKED", "revoked" },
	{ "CREATED", "created_at" },
	{ NULL, NULL },
};

static const struct column user_revoked_columns[] = {
	{ "NAME", "name" },
	{ "REVOKED TOKENS", "revoked_tokens" },
	{ NULL, NULL },
};

static const struct column agent_columns[] = {
	{ "ID", "id" },
	{ "CLUSTER", "cluster" },
	{ "NODE", "node" },
	{ "STATE", "state" },
	{ "CONNECTED", "connected" },
	{ "VERSION", "version" },
	{ "LAST SEEN", "last_seen" },
	{ "UPDATED", "updated_at" },
	{ "URLS", "urls" },
	{ "CAS", "cas" },
	{ "LAST ERROR", "last_error" },
	{ NULL, NULL },
};

static const struct column urls_columns[] = {
	{ "URLS", "urls" },
	{ NULL, NULL },
};

static const struct column ca_columns[] = {
	{ "PHASE", "phase" },
	{ "NEW CA", "new_ca" },
	{ "AGENTS", "agents" },
	{ "HOLDING", "holding_new_ca" },
	{ "CONNECTED", "connected" },
	{ "CONNECTED HOLDING", "connected_holding_new_ca" },
	{ NULL, NULL },
};

/* --- help --- */

static void
help_cluster(void)
{
	printf(
	    "usage: tetherctl cluster create NAME\n"
	    "       tetherctl cluster list\n"
	    "\n"
	    "A cluster groups the nodes (agents) that join it.\n"
	    "\n"
	    "  create NAME   create a cluster; prints its id (c-...)\n"
	    "  list          every cluster and how many agents are connected\n"
	    "\n"
	    "examples:\n"
	    "  tetherctl cluster create edge-berlin\n"
	    "  tetherctl cluster list -o json\n");
}

static void
help_token(void)
{
	printf(
	    "usage: tetherctl token create --cluster ID [--ttl DURATION] [--uses N]\n"
	    "           [--approval auto|manual] [--format json|command]\n"
	    "           [--allow HOST:PORT]... [--service NAME=URL]...\n"
	    "           [--node-name NAME]\n"
	    "\n"
	    "Creates an import token and prints the join document, one line of\n"
	    "JSON, that `tether-client join` reads on the node.  The token is\n"
	    "shown only here: treat the document as a secret.\n"
	    "\n"
	    "  --cluster ID        the cluster nodes join with it (required)\n"
	    "  --ttl DURATION      how long it stays valid: Ns, Nm, Nh or Nd\n"
	    "                      (default 24h)\n"
	    "  --uses N            how many nodes may join with it (default: the\n"
	    "                      gateway's)\n"
	    "  --approval MODE     auto (default), or manual: new agents wait in\n"
	    "                      pending-approval until `tetherctl agent approve`\n"
	    "  --format FORMAT     json (default): the join document; command: one\n"
	    "                      shell command to paste as root on the node, which\n"
	    "                      carries the document and the CA checksum, runs\n"
	    "                      `tether-client join` (state in\n"
	    "                      $TETHER_STATE_DIR, default " JOINCMD_STATE_DIR ")\n"
	    "                      and then `systemctl enable --now " JOINCMD_UNIT "`\n"
	    "  --allow HOST:PORT   with --format command: passed on to join;\n"
	    "                      repeatable\n"
	    "  --service NAME=URL  with --format command: passed on to join;\n"
	    "                      repeatable\n"
	    "  --node-name NAME    with --format command: passed on to join\n"
	    "                      (default there: the node's host name)\n"
	    "\n"
	    "examples:\n"
	    "  tetherctl token create --cluster c-0123456789ab --ttl 1h |\n"
	    "    ssh node1 tether-client join --state-dir /var/lib/tether-client \\\n"
	    "      --allow 127.0.0.1:22\n"
	    "  tetherctl token create --cluster c-0123456789ab --format command \\\n"
	    "    --allow 127.0.0.1:22\n");
}

static void
help_agent(void)
{
	printf(
	    "usage: tetherctl agent list [--cluster ID]\n"
	    "       tetherctl agent approve ID\n"
	    "       tetherctl agent verify ID\n"
	    "       tetherctl agent revoke ID\n"
	    "       tetherctl agent rotate-key ID\n"
	    "\n"
	    "An agent is one node's tunnel client, registered into a cluster.\n"
	    "States: pending-approval -> enroll -> verifying -> active; a failed\n"
	    "verification goes back to enroll with last_error set; revoked is\n"
	    "final.  Only active agents carry streams.\n"
	    "\n"
	    "  list      agents (of one cluster with --cluster), their node, state,\n"
	    "            last error, whether they are connected, their version,\n"
	    "            when they were last seen and the gateway URL list each one\n"
	    "            holds (urls: [] none, null an agent that never said: one\n"
	    "            older than the list; see `tetherctl gateway --help`)\n"
	    "  approve   let a pending-approval agent go on to enroll\n"
	    "  verify    verify an agent (again), e.g. after fixing last_error\n"
	    "  revoke    revoke for good: its tunnel closes at once and its key is\n"
	    "            refused from then on\n"
	    "  rotate-key  ask the agent to make a new key and prove both: the\n"
	    "            store swaps them, the old key is refused after; an agent\n"
	    "            offline now rotates at its next connection (the record's\n"
	    "            key.rotation: requested, staged, then none)\n"
	    "\n"
	    "Each of approve, verify, revoke and rotate-key prints the agent's new\n"
	    "record.\n"
	    "\n"
	    "examples:\n"
	    "  tetherctl agent list --cluster c-0123456789ab\n"
	    "  tetherctl agent approve a-0123456789ab\n");
}

static void
help_user(void)
{
	printf(
	    "usage: tetherctl user create NAME --cluster ID [--cluster ID]...\n"
	    "       tetherctl user list\n"
	    "       tetherctl user revoke NAME\n"
	    "       tetherctl user revoke-token TOKEN_ID\n"
	    "\n"
	    "A user token (ttu_...) lets a person or a tool reach the clusters it\n"
	    "is scoped to, and nothing else: `tetherctl connect` and `forward`\n"
	    "accept it (TETHER_TOKEN=ttu_...), the admin commands refuse it (403).\n"
	    "The gateway keeps only a hash of it.\n"
	    "\n"
	    "  create NAME   issue a new token to user NAME (1 to 63 characters of\n"
	    "                A-Z a-z 0-9 . _ @ -) for each --cluster given; the\n"
	    "                token is printed only this once\n"
	    "  list          every user token: its user, id, clusters and whether\n"
	    "                it is revoked (never the token itself)\n"
	    "  revoke NAME   revoke every token of user NAME at once; new\n"
	    "                connections with them are refused (401) from then on,\n"
	    "                and every stream they opened ends, on every replica\n"
	    "  revoke-token TOKEN_ID\n"
	    "                revoke one token (its id from `user list`), the same way\n"
	    "\n"
	    "A user may hold several tokens (one per kubeconfig, say); `tetherctl\n"
	    "kubeconfig --user NAME` issues one more.\n"
	    "\n"
	    "examples:\n"
	    "  tetherctl user create alice@example.com --cluster c-0123456789ab\n"
	    "  TETHER_TOKEN=ttu_... tetherctl connect --cluster c-0123456789ab "
	    "127.0.0.1:22\n"
	    "  tetherctl user revoke alice@example.com\n");
}

static void
help_kubeconfig(void)
{
	printf(
	    "usage: tetherctl kubeconfig --cluster ID [--user NAME]\n"
	    "\n"
	    "Issues a new user token scoped to cluster ID and prints a kubeconfig\n"
	    "(YAML, in every output mode) that carries it: server\n"
	    "URL/k8s/clusters/ID, the gateway's CA certificate, user NAME (default\n"
	    "kubectl) and a context made current.  The file holds a secret: keep\n"
	    "it like a password; `tetherctl user revoke NAME` ends it.\n"
	    "\n"
	    "kubectl reaches the cluster's kube-api service through the gateway\n"
	    "(docs/operations.md: \"kubectl through the gateway\"); the token\n"
	    "also works for `tetherctl connect`.\n"
	    "\n"
	    "example:\n"
	    "  tetherctl kubeconfig --cluster c-0123456789ab --user alice > alice.yaml\n"
	    "  kubectl --kubeconfig alice.yaml get --raw /version\n");
}

void
help_connect(void)
{
	printf(
	    "usage: tetherctl connect --cluster ID [--node NAME] HOST:PORT\n"
	    "\n"
	    "Bridges stdin/stdout to HOST:PORT as seen from the node; works as an\n"
	    "ssh ProxyCommand:\n"
	    "  ssh -o ProxyCommand='tetherctl connect --cluster c-0123456789ab "
	    "127.0.0.1:22' node1\n"
	    "\n"
	    "With no --node, any active agent of the cluster is used.  The node\n"
	    "must allow HOST:PORT (tether-client join --allow).  End of input is\n"
	    "passed on as a half-close, so the reply still arrives.  Exits 0 when\n"
	    "the stream ends; 1 with the reason when the gateway or the node\n"
	    "refuses (no agent: 503; target not allowed, refused, unreachable or\n"
	    "timed out: 502); 3 when the gateway cannot be reached or trusted.\n");
}

void
help_forward(void)
{
	printf(
	    "usage: tetherctl forward --cluster ID [--node NAME] "
	    "[LHOST:]LPORT:HOST:PORT\n"
	    "\n"
	    "Listens on LHOST:LPORT (default 127.0.0.1); each connection becomes a\n"
	    "stream to HOST:PORT on the node.  All streams share one multiplexed\n"
	    "WebSocket to the gateway, so a new connection costs a round trip, not\n"
	    "a TLS handshake.  Runs until interrupted (exit 0) or until the gateway\n"
	    "connection is lost (exit 1).\n"
	    "\n"
	    "example:\n"
	    "  tetherctl forward --cluster c-0123456789ab 15432:127.0.0.1:5432 &\n"
	    "  psql -h 127.0.0.1 -p 15432 -U postgres\n");
}

static void
help_gateway(void)
{
	printf(
	    "usage: tetherctl gateway urls\n"
	    "       tetherctl gateway urls set URL [URL...]\n"
	    "       tetherctl gateway urls clear\n"
	    "\n"
	    "The gateway's public URL list: where agents dial it.  A node keeps\n"
	    "the URL it joined with; once a list is set, every connected agent\n"
	    "gets it over its tunnel within a second (every replica: it lives in\n"
	    "the store), keeps it in its state.json and dials it in order, then\n"
	    "its join URL, moving to the next URL when one fails.  An agent that\n"
	    "is offline gets the list the next time it connects.\n"
	    "\n"
	    "  urls            the list as set (-o json: {\"urls\":[...]})\n"
	    "  urls set URL... replace it: 1 to 8 URLs, each https://HOST[:PORT],\n"
	    "                  in the order agents should try them\n"
	    "  urls clear      no list: agents go back to their join URL\n"
	    "\n"
	    "`tetherctl agent list` shows the list each agent says it holds\n"
	    "(urls).  To move a gateway from A to B: serve B beside A, set the\n"
	    "list to B A, wait until every agent holds it, then retire A\n"
	    "(docs/operations.md, \"Moving the gateway\").\n"
	    "\n"
	    "examples:\n"
	    "  tetherctl gateway urls set https://gw-b.example.com "
	    "https://gw.example.com:8443\n"
	    "  tetherctl -o json agent list | jq '.[] | {node, urls}'\n");
}

static void
help_ca(void)
{
	printf(
	    "usage: tetherctl ca status\n"
	    "\n"
	    "How far a CA rotation has gone (docs/0033): the phase the answering\n"
	    "replica serves (none, overlap, final), the CA it hands out, the new\n"
	    "CA's checksum, and how many agents (not revoked; every replica's,\n"
	    "from the store) said they hold the new CA, in all and among those\n"
	    "connected now.  Finish the rotation ('tether-gateway ca rotate\n"
	    "finish' where ca.key is) when HOLDING is every agent you keep.\n"
	    "`tetherctl agent list -o json` shows each agent's CAs (\"cas\").\n"
	    "\n"
	    "  -o json   {\"phase\", \"ca\", \"new_ca\", \"old_ca\", \"handed_out\",\n"
	    "            \"agents\", \"holding_new_ca\", \"connected\",\n"
	    "            \"connected_holding_new_ca\"} (counts null in phase none)\n"
	    "\n"
	    "example:\n"
	    "  tetherctl ca status\n"
	    "  tetherctl -o json agent list | jq '.[] | {node, cas}'\n");
}

static void help_status(void);

int
ctl_group_help(const char *group)
{
	static const struct {
		const char *name;
		void (*help)(void);
	} groups[] = {
		{ "cluster", help_cluster },
		{ "token", help_token },
		{ "agent", help_agent },
		{ "user", help_user },
		{ "kubeconfig", help_kubeconfig },
		{ "connect", help_connect },
		{ "forward", help_forward },
		{ "gateway", help_gateway },
		{ "ca", help_ca },
		{ "status", help_status },
	};

	for (size_t i = 0; i < sizeof(groups) / sizeof(groups[0]); i++) {
		if (strcmp(group, groups[i].name) == 0) {
			groups[i].help();
			return 0;
		}
	}
	return -1;
}

/* 1 if --help or -h appears among the arguments (before any "--"). */
int
ctl_wants_help(int argc, char **argv)
{
	for (int i = 1; i < argc; i++) {
		if (strcmp(argv[i], "--") == 0)
			return 0;
		if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0)
			return 1;
	}
	return 0;
}

static int
getopt_error(const char *cmd, int c, char **argv)
{
	if (c == ':')
		return ctl_usage_error(cmd, "option %s needs a value",
		    argv[optind - 1]);
	return ctl_usage_error(cmd, "unknown option %s", argv[optind - 1]);
}

/* Calls the API and prints the answer, which must be of the given type. */
static int
call_and_print(struct ctl *c, const char *method, const char *path,
    json_t *body, json_type want, const struct column *cols)
{
	json_t *resp = NULL;
	int r;

	if ((r = ctl_ready(c)) != CTL_EXIT_OK)
		return r;
	if ((r = api_call(&c->api, method, path, body, &resp)) != CTL_EXIT_OK)
		return r;
	if (json_typeof(resp) != want) {
		fprintf(stderr, "tetherctl: unexpected answer from the server to "
		    "%s %s\n", method, path);
		r = CTL_EXIT_SERVER;
	} else if (output_print(c->output, resp, cols) == -1) {
		fprintf(stderr, "tetherctl: cannot print the server's answer\n");
		r = CTL_EXIT_SERVER;
	}
	json_decref(resp);
	return r;
}

/* --- cluster --- */

static int
cluster_create(struct ctl *c, int argc, char **argv)
{
	json_t *body;
	int r;

	if (argc != 2)
		return ctl_usage_error("cluster", "create takes exactly one NAME");
	if (argv[1][0] == '\0' || argv[1][0] == '-')
		return ctl_usage_error("cluster", "invalid cluster name \"%s\"",
		    argv[1]);
	if ((body = json_pack("{s:s}", "name", argv[1])) == NULL)
		return ctl_usage_error("cluster", "the name must be UTF-8");
	r = call_and_print(c, "POST", "/v1/clusters", body, JSON_OBJECT,
	    cluster_created_columns);
	json_decref(body);
	return r;
}

int
cmd_cluster(struct ctl *c, int argc, char **argv)
{
	if (ctl_wants_help(argc, argv)) {
		help_cluster();
		return CTL_EXIT_OK;
	}
	if (argc < 2)
		return ctl_usage_error("cluster", "missing subcommand (create or "
		    "list)");
	if (strcmp(argv[1], "create") == 0)
		return cluster_create(c, argc - 1, argv + 1);
	if (strcmp(argv[1], "list") == 0) {
		if (argc != 2)
			return ctl_usage_error("cluster", "list takes no arguments");
		return call_and_print(c, "GET", "/v1/clusters", NULL, JSON_ARRAY,
		    cluster_columns);
	}
	return ctl_usage_error("cluster", "unknown subcommand %s", argv[1]);
}

/* --- token --- */

static int
parse_uses(const char *s, int64_t *out)
{
	char *end;
	long long v;

	errno = 0;
	v = strtoll(s, &end, 10);
	if (s[0] < '0' || s[0] > '9' || *end != '\0' || errno != 0 || v < 1 ||
	    v > MAX_USES)
		return -1;
	*out = v;
	return 0;
}

/* Prints the join document resp as --format asked: the document as is, one
 * line in every output mode (it is meant to be piped into `tether-client
 * join`), or the registration command (joincmd.h).  Returns an exit code. */
static int
token_print(json_t *resp, bool command, char *const *join_args, size_t nargs)
{
	char *line;

	if (!command) {
		if (output_json(resp) == -1) {
			fprintf(stderr, "tetherctl: cannot print the join document\n");
			return CTL_EXIT_SERVER;
		}
		if (isatty(STDOUT_FILENO))
			fprintf(stderr, "tetherctl: feed this document to "
			    "`tether-client join --state-dir DIR` on the node; it "
			    "holds a secret shown only this once\n");
		return CTL_EXIT_OK;
	}
	if ((line = joincmd_format(resp, join_args, nargs)) == NULL) {
		fprintf(stderr, "tetherctl: cannot format the registration command "
		    "(no ca_checksum in the server's answer, or out of memory)\n");
		return CTL_EXIT_SERVER;
	}
	printf("%s\n", line);
	if (isatty(STDOUT_FILENO))
		fprintf(stderr, "tetherctl: paste this command as root on the node; "
		    "it holds a secret shown only this once\n");
	explicit_bzero(line, strlen(line));
	free(line);
	return CTL_EXIT_OK;
}

static int
token_create(struct ctl *c, int argc, char **argv)
{
	static const struct option longopts[] = {
		{ "cluster", required_argument, NULL, 'c' },
		{ "ttl", required_argument, NULL, 't' },
		{ "uses", required_argument, NULL, 'u' },
		{ "approval", required_argument, NULL, 'a' },
		{ "format", required_argument, NULL, 'f' },
		{ "allow", required_argument, NULL, 'A' },
		{ "service", required_argument, NULL, 'S' },
		{ "node-name", required_argument, NULL, 'N' },
		{ NULL, 0, NULL, 0 },
	};
	const char *cluster = NULL, *approval = "auto";
	int64_t ttl = DEFAULT_TTL_SECONDS, uses = -1;
	char *join_args[MAX_JOIN_ARGS];
	size_t nargs = 0;
	bool command = false;
	char path[512];
	json_t *body = NULL, *resp = NULL;
	char *id = NULL;
	int ch, r;

	opterr = 0;
	optind = 0;
	while ((ch = getopt_long(argc, argv, ":", longopts, NULL)) != -1) {
		switch (ch) {
		case 'c':
			cluster = optarg;
			break;
		case 't':
			if (duration_parse(optarg, MAX_TTL_SECONDS, &ttl) == -1)
				return ctl_usage_error("token", "--ttl %s: want a "
				    "positive duration like 90s, 30m, 24h or 7d", optarg);
			break;
		case 'u':
			if (parse_uses(optarg, &uses) == -1)
				return ctl_usage_error("token", "--uses %s: want a "
				    "number from 1 to %d", optarg, MAX_USES);
			break;
		case 'a':
			if (strcmp(optarg, "auto") != 0 && strcmp(optarg, "manual") != 0)
				return ctl_usage_error("token", "--approval %s: want "
				    "auto or manual", optarg);
			approval = optarg;
			break;
		case 'f':
			if (strcmp(optarg, "json") != 0 && strcmp(optarg, "command") != 0)
				return ctl_usage_error("token", "--format %s: want "
				    "json or command", optarg);
			command = strcmp(optarg, "command") == 0;
			break;
		case 'A':
		case 'S':
		case 'N':
			if (nargs + 2 > MAX_JOIN_ARGS)
				return ctl_usage_error("token", "at most %d --allow, "
				    "--service and --node-name flags", MAX_JOIN_ARGS / 2);
			join_args[nargs++] = ch == 'A' ? "--allow" :
			    ch == 'S' ? "--service" : "--node-name";
			join_args[nargs++] = optarg;
			break;
		default:
			return getopt_error("token", ch, argv);
		}
	}
	if (optind < argc)
		return ctl_usage_error("token", "unexpected argument %s",
		    argv[optind]);
	if (cluster == NULL || cluster[0] == '\0')
		return ctl_usage_error("token", "--cluster ID is required");
	if (nargs > 0 && !command)
		return ctl_usage_error("token", "--allow, --service and --node-name "
		    "go with --format command (with a document, give them to join)");
	if ((r = ctl_ready(c)) != CTL_EXIT_OK)
		return r;
	r = CTL_EXIT_SERVER;
	if ((id = api_escape(cluster)) == NULL ||
	    (size_t)snprintf(path, sizeof(path), "/v1/clusters/%s/tokens", id) >=
	    sizeof(path)) {
		r = ctl_usage_error("token", "--cluster: ID too long");
		goto out;
	}
	body = json_pack("{s:I, s:s}", "ttl_seconds", (json_int_t)ttl,
	    "approval", approval);
	if (body == NULL || (uses > 0 &&
	    json_object_set_new(body, "uses", json_integer(uses)) == -1)) {
		fprintf(stderr, "tetherctl: out of memory\n");
		goto out;
	}
	if ((r = api_call(&c->api, "POST", path, body, &resp)) != CTL_EXIT_OK)
		goto out;
	if (!json_is_object(resp)) {
		fprintf(stderr, "tetherctl: unexpected answer from the server to "
		    "POST %s\n", path);
		r = CTL_EXIT_SERVER;
		goto out;
	}
	r = token_print(resp, command, join_args, nargs);
out:
	json_decref(resp);
	json_decref(body);
	free(id);
	return r;
}

int
cmd_token(struct ctl *c, int argc, char **argv)
{
	if (ctl_wants_help(argc, argv)) {
		help_token();
		return CTL_EXIT_OK;
	}
	if (argc < 2)
		return ctl_usage_error("token", "missing subcommand (create)");
	if (strcmp(argv[1], "create") == 0)
		return token_create(c, argc - 1, argv + 1);
	return ctl_usage_error("token", "unknown subcommand %s", argv[1]);
}

/* --- agent --- */

static int
agent_list(struct ctl *c, int argc, char **argv)
{
	static const struct option longopts[] = {
		{ "cluster", required_argument, NULL, 'c' },
		{ NULL, 0, NULL, 0 },
	};
	const char *cluster = NULL;
	char path[512];
	char *id = NULL;
	int ch, r;

	opterr = 0;
	optind = 0;
	while ((ch = getopt_long(argc, argv, ":", longopts, NULL)) != -1) {
		if (ch != 'c')
			return getopt_error("agent", ch, argv);
		cluster = optarg;
	}
	if (optind < argc)
		return ctl_usage_error("agent", "unexpected argument %s",
		    argv[optind]);
	if (cluster == NULL) {
		snprintf(path, sizeof(path), "/v1/agents");
	} else {
		if (cluster[0] == '\0')
			return ctl_usage_error("agent", "--cluster needs an ID");
		if ((id = api_escape(cluster)) == NULL ||
		    (size_t)snprintf(path, sizeof(path), "/v1/agents?cluster=%s",
		    id) >= sizeof(path)) {
			free(id);
			return ctl_usage_error("agent", "--cluster: ID too long");
		}
	}
	r = call_and_print(c, "GET", path, NULL, JSON_ARRAY, agent_columns);
	free(id);
	return r;
}

/* approve, verify, revoke, rotate-key: POST /v1/agents/ID/ACTION. */
static int
agent_action(struct ctl *c, const char *action, int argc, char **argv)
{
	char path[512];
	json_t *body;
	char *id;
	int r;

	if (argc != 2)
		return ctl_usage_error("agent", "%s takes exactly one agent ID",
		    action);
	if (argv[1][0] == '\0' || argv[1][0] == '-')
		return ctl_usage_error("agent", "invalid agent ID \"%s\"", argv[1]);
	if ((id = api_escape(argv[1])) == NULL ||
	    (size_t)snprintf(path, sizeof(path), "/v1/agents/%s/%s", id,
	    action) >= sizeof(path)) {
		free(id);
		return ctl_usage_error("agent", "agent ID too long");
	}
	free(id);
	if ((body = json_object()) == NULL) {
		fprintf(stderr, "tetherctl: out of memory\n");
		return CTL_EXIT_SERVER;
	}
	r = call_and_print(c, "POST", path, body, JSON_OBJECT, agent_columns);
	json_decref(body);
	return r;
}

int
cmd_agent(struct ctl *c, int argc, char **argv)
{
	static const char *const actions[] = { "approve", "verify", "revoke",
	    "rotate-key" };

	if (ctl_wants_help(argc, argv)) {
		help_agent();
		return CTL_EXIT_OK;
	}
	if (argc < 2)
		return ctl_usage_error("agent", "missing subcommand (list, "
		    "approve, verify, revoke or rotate-key)");
	if (strcmp(argv[1], "list") == 0)
		return agent_list(c, argc - 1, argv + 1);
	for (size_t i = 0; i < sizeof(actions) / sizeof(actions[0]); i++) {
		if (strcmp(argv[1], actions[i]) == 0)
			return agent_action(c, actions[i], argc - 1, argv + 1);
	}
	return ctl_usage_error("agent", "unknown subcommand %s", argv[1]);
}


/* --- gateway --- */

#define GATEWAY_URLS_MAX 8    /* the gateway's API_URLS_MAX */

/* urls set URL...: the URLs in one body; the gateway checks each. */
static int
gateway_urls_set(struct ctl *c, int argc, char **argv)
{
	json_t *body, *arr;
	int r;

	if (argc < 1)
		return ctl_usage_error("gateway", "urls set needs at least one URL "
		    "(`urls clear` for none)");
	if (argc > GATEWAY_URLS_MAX)
		return ctl_usage_error("gateway", "urls set takes at most %d URLs",
		    GATEWAY_URLS_MAX);
	if ((arr = json_array()) == NULL) {
		fprintf(stderr, "tetherctl: out of memory\n");
		return CTL_EXIT_SERVER;
	}
	for (int i = 0; i < argc; i++) {
		if (strncmp(argv[i], "https://", 8) != 0) {
			json_decref(arr);
			return ctl_usage_error("gateway", "%s is not "
			    "https://HOST[:PORT]", argv[i]);
		}
		json_array_append_new(arr, json_string(argv[i]));
	}
	if ((body = json_pack("{s:o}", "urls", arr)) == NULL) {
		fprintf(stderr, "tetherctl: out of memory\n");
		return CTL_EXIT_SERVER;
	}
	r = call_and_print(c, "POST", "/v1/gateway/urls", body, JSON_OBJECT,
	    urls_columns);
	json_decref(body);
	return r;
}

int
cmd_gateway(struct ctl *c, int argc, char **argv)
{
	json_t *body;
	int r;

	if (ctl_wants_help(argc, argv)) {
		help_gateway();
		return CTL_EXIT_OK;
	}
	if (argc < 2 || strcmp(argv[1], "urls") != 0)
		return ctl_usage_error("gateway", argc < 2 ? "missing subcommand "
		    "(urls)" : "unknown subcommand %s", argc < 2 ? "" : argv[1]);
	if (argc == 2)
		return call_and_print(c, "GET", "/v1/gateway/urls", NULL,
		    JSON_OBJECT, urls_columns);
	if (strcmp(argv[2], "set") == 0)
		return gateway_urls_set(c, argc - 3, argv + 3);
	if (strcmp(argv[2], "clear") == 0 && argc == 3) {
		if ((body = json_pack("{s:[]}", "urls")) == NULL) {
			fprintf(stderr, "tetherctl: out of memory\n");
			return CTL_EXIT_SERVER;
		}
		r = call_and_print(c, "POST", "/v1/gateway/urls", body,
		    JSON_OBJECT, urls_columns);
		json_decref(body);
		return r;
	}
	return ctl_usage_error("gateway", "unknown: urls %s (urls, urls set "
	    "URL..., urls clear)", argv[2]);
}

/* --- ca --- */

int
cmd_ca(struct ctl *c, int argc, char **argv)
{
	if (ctl_wants_help(argc, argv)) {
		help_ca();
		return CTL_EXIT_OK;
	}
	if (argc != 2 || strcmp(argv[1], "status") != 0)
		return ctl_usage_error("ca", argc < 2 ? "missing subcommand "
		    "(status)" : "unknown: %s (status)", argc < 2 ? "" : argv[1]);
	return call_and_print(c, "GET", "/v1/ca/status", NULL, JSON_OBJECT,
	    ca_columns);
}

/* --- user --- */

#define USER_NAME_MAX 63

/* The gateway's rule for user names (store_user_name_valid), checked here
 * too so that a typo is a usage error (exit 2) before any request. */
static int
user_name_ok(const char *name)
{
	size_t n = strlen(name);

	return n > 0 && n <= USER_NAME_MAX && strspn(name,
	    "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"
	    "0123456789._@-") == n;
}

static int
bad_user_name(const char *group)
{
	/* The name is not echoed: it may hold control characters. */
	return ctl_usage_error(group, "invalid user name: use 1 to %d "
	    "characters of A-Z a-z 0-9 . _ @ -", USER_NAME_MAX);
}

/* Prints a new user token's record, the secret with it, in either mode. */
static int
print_secret_record(struct ctl *c, json_t *resp, const struct column *cols)
{
	if (output_print(c->output, resp, cols) == -1) {
		fprintf(stderr, "tetherctl: cannot print the server's answer\n");
		return CTL_EXIT_SERVER;
	}
	if (isatty(STDOUT_FILENO))
		fprintf(stderr, "tetherctl: the token is shown only this once; "
		    "the gateway keeps only its hash\n");
	return CTL_EXIT_OK;
}

static int
user_create(struct ctl *c, int argc, char **argv)
{
	static const struct option longopts[] = {
		{ "cluster", required_argument, NULL, 'c' },
		{ NULL, 0, NULL, 0 },
	};
	json_t *body = NULL, *clusters = NULL, *resp = NULL;
	const char *name;
	int ch, r = CTL_EXIT_SERVER;

	if ((clusters = json_array()) == NULL) {
		fprintf(stderr, "tetherctl: out of memory\n");
		return CTL_EXIT_SERVER;
	}
	opterr = 0;
	optind = 0;
	while ((ch = getopt_long(argc, argv, ":", longopts, NULL)) != -1) {
		if (ch != 'c') {
			r = getopt_error("user", ch, argv);
			goto out;
		}
		if (optarg[0] == '\0') {
			r = ctl_usage_error("user", "--cluster needs an ID");
			goto out;
		}
		if (json_array_append_new(clusters, json_string(optarg)) != 0) {
			r = ctl_usage_error("user", "--cluster %s: not UTF-8", optarg);
			goto out;
		}
	}
	if (optind + 1 != argc) {
		r = ctl_usage_error("user", "create takes exactly one NAME");
		goto out;
	}
	name = argv[optind];
	if (!user_name_ok(name)) {
		r = bad_user_name("user");
		goto out;
	}
	if (json_array_size(clusters) == 0) {
		r = ctl_usage_error("user", "at least one --cluster ID is required");
		goto out;
	}
	if ((r = ctl_ready(c)) != CTL_EXIT_OK)
		goto out;
	if ((body = json_pack("{s:s, s:O}", "name", name, "clusters",
	    clusters)) == NULL) {
		fprintf(stderr, "tetherctl: out of memory\n");
		r = CTL_EXIT_SERVER;
		goto out;
	}
	if ((r = api_call(&c->api, "POST", "/v1/users", body, &resp)) !=
	    CTL_EXIT_OK)
		goto out;
	if (!json_is_object(resp)) {
		fprintf(stderr, "tetherctl: unexpected answer from the server to "
		    "POST /v1/users\n");
		r = CTL_EXIT_SERVER;
		goto out;
	}
	r = print_secret_record(c, resp, user_created_columns);
out:
	json_decref(resp);
	json_decref(body);
	json_decref(clusters);
	return r;
}

static int
user_revoke(struct ctl *c, int argc, char **argv)
{
	char path[512];
	json_t *body;
	char *name;
	int r;

	if (argc != 2)
		return ctl_usage_error("user", "revoke takes exactly one NAME");
	if (!user_name_ok(argv[1]))
		return bad_user_name("user");
	if ((name = api_escape(argv[1])) == NULL ||
	    (size_t)snprintf(path, sizeof(path), "/v1/users/%s/revoke", name) >=
	    sizeof(path)) {
		free(name);
		fprintf(stderr, "tetherctl: out of memory\n");
		return CTL_EXIT_SERVER;
	}
	free(name);
	if ((body = json_object()) == NULL) {
		fprintf(stderr, "tetherctl: out of memory\n");
		return CTL_EXIT_SERVER;
	}
	r = call_and_print(c, "POST", path, body, JSON_OBJECT,
	    user_revoked_columns);
	json_decref(body);
	return r;
}

/* revoke-token TOKEN_ID: POST /v1/tokens/TOKEN_ID/revoke. */
static int
user_revoke_token(struct ctl *c, int argc, char **argv)
{
	char path[128];
	json_t *body;
	size_t len;
	int r;

	if (argc != 2)
		return ctl_usage_error("user", "revoke-token takes exactly one TOKEN_ID");
	len = strlen(argv[1]);
	if (len != 16 || strspn(argv[1], "0123456789abcdef") != len)
		return ctl_usage_error("user", "revoke-token: %s is not a token id "
		    "(16 hex digits, as `tetherctl user list` shows)", argv[1]);
	snprintf(path, sizeof(path), "/v1/tokens/%s/revoke", argv[1]);
	if ((body = json_object()) == NULL) {
		fprintf(stderr, "tetherctl: out of memory\n");
		return CTL_EXIT_SERVER;
	}
	r = call_and_print(c, "POST", path, body, JSON_OBJECT, user_columns);
	json_decref(body);
	return r;
}

int
cmd_user(struct ctl *c, int argc, char **argv)
{
	if (ctl_wants_help(argc, argv)) {
		help_user();
		return CTL_EXIT_OK;
	}
	if (argc < 2)
		return ctl_usage_error("user", "missing subcommand (create, list, "
		    "revoke or revoke-token)");
	if (strcmp(argv[1], "create") == 0)
		return user_create(c, argc - 1, argv + 1);
	if (strcmp(argv[1], "list") == 0) {
		if (argc != 2)
			return ctl_usage_error("user", "list takes no arguments");
		return call_and_print(c, "GET", "/v1/users", NULL, JSON_ARRAY,
		    user_columns);
	}
	if (strcmp(argv[1], "revoke") == 0)
		return user_revoke(c, argc - 1, argv + 1);
	if (strcmp(argv[1], "revoke-token") == 0)
		return user_revoke_token(c, argc - 1, argv + 1);
	return ctl_usage_error("user", "unknown subcommand %s", argv[1]);
}

/* --- status --- */

static const struct column status_columns[] = {
	{ "REPLICA", "replica" },
	{ "CERT SERIAL", "serial" },
	{ "CERT EXPIRES", "not_after" },
	{ NULL, NULL },
};

static void
help_status(void)
{
	printf(
	    "usage: tetherctl status\n"
	    "\n"
	    "The replica that answers (--server): its id and the server certificate\n"
	    "it serves new TLS handshakes with, serial and notAfter (RFC 3339), as\n"
	    "GET /v1/status's \"certificate\" says.  -o json:\n"
	    "  {\"replica\":\"gw-1\",\"serial\":\"4F...\",\"not_after\":\"2028-11-27T06:50:00Z\"}\n"
	    "After 'tether-gateway cert renew' and SIGHUP it shows the new serial.\n");
}

int
cmd_status(struct ctl *c, int argc, char **argv)
{
	json_t *resp = NULL, *cert;
	int r;

	if (ctl_wants_help(argc, argv)) {
		help_status();
		return CTL_EXIT_OK;
	}
	if (argc != 1)
		return ctl_usage_error("status", "status takes no arguments");
	if ((r = ctl_ready(c)) != CTL_EXIT_OK)
		return r;
	if ((r = api_call(&c->api, "GET", "/v1/status", NULL, &resp)) != CTL_EXIT_OK)
		return r;
	cert = json_object_get(resp, "certificate");
	if (!json_is_object(cert)) {
		fprintf(stderr, "tetherctl: the server's /v1/status says nothing of "
		    "its certificate (an older gateway?)\n");
		r = CTL_EXIT_SERVER;
	} else if (output_print(c->output, cert, status_columns) == -1) {
		fprintf(stderr, "tetherctl: cannot print the server's answer\n");
		r = CTL_EXIT_SERVER;
	}
	json_decref(resp);
	return r;
}

/* --- kubeconfig --- */

/* POSTs for a kubeconfig and writes it to stdout as is; wipes it after. */
static int
kubeconfig_fetch(struct ctl *c, const char *cluster, const char *user)
{
	char path[512];
	json_t *body = NULL;
	char *id = NULL, *yaml = NULL;
	size_t len = 0;
	int r = CTL_EXIT_SERVER;

	if ((id = api_escape(cluster)) == NULL ||
	    (size_t)snprintf(path, sizeof(path), "/v1/clusters/%s/kubeconfig",
	    id) >= sizeof(path)) {
		r = ctl_usage_error("kubeconfig", "--cluster: ID too long");
		goto out;
	}
	body = user != NULL ? json_pack("{s:s}", "user", user) : json_object();
	if (body == NULL) {
		fprintf(stderr, "tetherctl: out of memory\n");
		goto out;
	}
	if ((r = api_call_raw(&c->api, "POST", path, body, &yaml, &len)) !=
	    CTL_EXIT_OK)
		goto out;
	if (len == 0 || fwrite(yaml, 1, len, stdout) != len ||
	    fflush(stdout) != 0) {
		fprintf(stderr, "tetherctl: %s\n", len == 0 ?
		    "the server sent an empty kubeconfig" :
		    "cannot write the kubeconfig to standard output");
		r = CTL_EXIT_SERVER;
		goto out;
	}
	if (isatty(STDOUT_FILENO))
		fprintf(stderr, "tetherctl: this kubeconfig holds a new token "
		    "shown only this once: redirect it to a file\n");
	r = CTL_EXIT_OK;
out:
	if (yaml != NULL) {
		explicit_bzero(yaml, len);
		free(yaml);
	}
	json_decref(body);
	free(id);
	return r;
}

int
cmd_kubeconfig(struct ctl *c, int argc, char **argv)
{
	static const struct option longopts[] = {
		{ "cluster", required_argument, NULL, 'c' },
		{ "user", required_argument, NULL, 'u' },
		{ NULL, 0, NULL, 0 },
	};
	const char *cluster = NULL, *user = NULL;
	int ch, r;

	if (ctl_wants_help(argc, argv)) {
		help_kubeconfig();
		return CTL_EXIT_OK;
	}
	opterr = 0;
	optind = 0;
	while ((ch = getopt_long(argc, argv, ":", longopts, NULL)) != -1) {
		switch (ch) {
		case 'c':
			cluster = optarg;
			break;
		case 'u':
			user = optarg;
			break;
		default:
			return getopt_error("kubeconfig", ch, argv);
		}
	}
	if (optind < argc)
		return ctl_usage_error("kubeconfig", "unexpected argument %s",
		    argv[optind]);
	if (cluster == NULL || cluster[0] == '\0')
		return ctl_usage_error("kubeconfig", "--cluster ID is required");
	if (user != NULL && !user_name_ok(user))
		return bad_user_name("kubeconfig");
	/* YAML whatever -o says: it is a file for kubectl, not a record. */
	if ((r = ctl_ready(c)) != CTL_EXIT_OK)
		return r;
	return kubeconfig_fetch(c, cluster, user);
}
