/*
 * status.c: `tether-client status` (see status.h): what state.json says,
 * and what the running agent's status.json says about the tunnel.
 */
#include "status.h"

#include <errno.h>
#include <getopt.h>
#include <limits.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>

#include <jansson.h>

#include "catrust.h"
#include "cli.h"
#include "fileio.h"
#include "state.h"

void
client_status_usage(void)
{
	fprintf(stdout,
	    "usage: tether-client status --state-dir DIR\n"
	    "\n"
	    "Prints one JSON object: cluster, agent_id, state, connected,\n"
	    "gateway_url, node, last_error, gateway_urls, current_gateway_url,\n"
	    "cas.\n"
	    "state is \"not-registered\" before the first `run`, \"not-running\"\n"
	    "when no agent is running, else the state the gateway assigned\n"
	    "(pending-approval, enroll, verifying, active, revoked).\n"
	    "gateway_url is the URL the node joined with; gateway_urls the list\n"
	    "the gateway pushed over the tunnel (tetherctl gateway urls set),\n"
	    "dialled first, in order, before gateway_url ([] until one came);\n"
	    "current_gateway_url the one the running agent dials or holds now\n"
	    "(\"\" when none runs).\n"
	    "cas: the checksums of the gateway CAs this node trusts: DIR/ca.crt's,\n"
	    "then, during a CA rotation's overlap, DIR/ca.next.crt's (docs/0033).\n"
	    "\n"
	    "exit: 0 ok; 1 DIR is not joined or unreadable; 2 bad usage.\n");
}

struct agent_status {
	bool present;
	bool running;
	bool connected;
	char state[32];
	char last_error[256];
	char gateway[256];        /* the URL the agent dials or holds now */
};

static void
read_status(const char *dir, struct agent_status *as)
{
	char path[PATH_MAX], err[256];
	json_t *root = NULL, *v;
	json_error_t jerr;
	char *buf = NULL;
	size_t len;
	json_int_t pid;

	memset(as, 0, sizeof(*as));
	if (client_path(dir, "status.json", path, sizeof(path)) == -1 ||
	    !file_exists(path))
		return;
	if (file_read_all(path, 64 * 1024, &buf, &len, err, sizeof(err)) == -1 ||
	    (root = json_loadb(buf, len, 0, &jerr)) == NULL ||
	    !json_is_object(root))
		goto out;
	as->present = true;
	if ((v = json_object_get(root, "pid")) != NULL && json_is_integer(v) &&
	    (pid = json_integer_value(v)) > 0 && pid <= INT_MAX &&
	    (kill((pid_t)pid, 0) == 0 || errno == EPERM))
		as->running = true;
	if ((v = json_object_get(root, "connected")) != NULL && json_is_true(v))
		as->connected = true;
	if ((v = json_object_get(root, "state")) != NULL && json_is_string(v))
		snprintf(as->state, sizeof(as->state), "%s", json_string_value(v));
	if ((v = json_object_get(root, "last_error")) != NULL &&
	    json_is_string(v))
		snprintf(as->last_error, sizeof(as->last_error), "%s",
		    json_string_value(v));
	if ((v = json_object_get(root, "gateway")) != NULL && json_is_string(v))
		snprintf(as->gateway, sizeof(as->gateway), "%s",
		    json_string_value(v));
out:
	json_decref(root);
	free(buf);
}

/* The CAs held, as SETTINGS_ACK tells the gateway: [] if unreadable. */
static json_t *
cas_json(const char *dir)
{
	char held[FRAME_CA_MAX_HELD][FRAME_CA_SUM_LEN + 1], err[512];
	json_t *cas = json_array();
	struct catrust t;
	size_t n;

	if (cas == NULL || catrust_load(dir, &t, err, sizeof(err)) < 0)
		return cas;
	n = catrust_held(&t, held);
	for (size_t i = 0; i < n; i++)
		json_array_append_new(cas, json_string(held[i]));
	catrust_clear(&t);
	return cas;
}

static int
status_print(const char *dir, const struct client_state *st,
    const struct agent_status *as)
{
	const char *state;
	json_t *root, *urls, *cas;
	char *text;

	if (as->running && as->state[0] != '\0')
		state = as->state;
	else if (st->agent_id[0] == '\0')
		state = "not-registered";
	else
		state = "not-running";
	if ((urls = json_array()) == NULL)
		return 1;
	if ((cas = cas_json(dir)) == NULL) {
		json_decref(urls);
		return 1;
	}
	for (size_t i = 0; i < st->ngateway_urls; i++)
		json_array_append_new(urls, json_string(st->gateway_urls[i]));
	root = json_pack("{s:s, s:s, s:s, s:b, s:s, s:s, s:s, s:o, s:s, s:o}",
	    "cluster", st->cluster,
	    "agent_id", st->agent_id,
	    "state", state,
	    "connected", as->running && as->connected,
	    "gateway_url", st->gateway_url,
	    "node", st->node,
	    "last_error", as->last_error,
	    "gateway_urls", urls,
	    "current_gateway_url", as->running ? as->gateway : "",
	    "cas", cas);
	if (root == NULL ||
	    (text = json_dumps(root, JSON_COMPACT | JSON_PRESERVE_ORDER)) == NULL) {
		json_decref(root);
		fprintf(stderr, "tether-client status: cannot format the status\n");
		return 1;
	}
	printf("%s\n", text);
	free(text);
	json_decref(root);
	return 0;
}

int
client_status(int argc, char **argv)
{
	static const struct option longopts[] = {
		{ "state-dir", required_argument, NULL, 'd' },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 },
	};
	struct client_state st;
	struct agent_status as;
	const char *dir = NULL;
	char err[512];
	int c, r;

	opterr = 0;
	optind = 0;
	while ((c = getopt_long(argc, argv, ":h", longopts, NULL)) != -1) {
		switch (c) {
		case 'd':
			dir = optarg;
			break;
		case 'h':
			client_status_usage();
			return 0;
		default:
			return client_getopt_error("status", c, argv);
		}
	}
	if (optind < argc)
		return client_usage_error("status", "unexpected argument %s", argv[optind]);
	if (dir == NULL || dir[0] == '\0')
		return client_usage_error("status", "%s is required", "--state-dir DIR");
	r = client_state_load(dir, &st, err, sizeof(err));
	if (r == 1) {
		fprintf(stderr, "tether-client status: %s is not joined\n", dir);
		return 1;
	}
	if (r == -1) {
		fprintf(stderr, "tether-client status: %s\n", err);
		return 1;
	}
	read_status(dir, &as);
	return status_print(dir, &st, &as);
}
