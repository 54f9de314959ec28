/*
 * ctl.h: what tetherctl's command handlers share: the global options (the
 * server, its CA, the admin token, the output format) and the handlers
 * themselves, one per command group (commands.c).
 */
#ifndef TETHER_CTL_H
#define TETHER_CTL_H

#include "api.h"
#include "output.h"

struct ctl {
	struct api api;
	enum output_format output;
	const char *server;          /* --server, TETHER_SERVER or the default */
	const char *cacert;          /* --cacert or TETHER_CACERT, or NULL */
	const char *token_file;      /* --token-file or TETHER_TOKEN_FILE */
};

/* Makes c ready for API calls: checks the server URL and the CA file, and
 * loads the admin token into c->api.token (from --token-file,
 * TETHER_TOKEN_FILE or TETHER_TOKEN).  Returns CTL_EXIT_OK, or
 * CTL_EXIT_USAGE after saying what is wrong (for a missing token, the three
 * ways to provide one). */
int ctl_ready(struct ctl *c);

/* Prints "tetherctl CMD: message" and a hint to --help; returns
 * CTL_EXIT_USAGE. */
int ctl_usage_error(const char *cmd, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

/* Command groups: argv[0] is the group's name.  Each returns an exit code. */
int cmd_cluster(struct ctl *c, int argc, char **argv);
int cmd_token(struct ctl *c, int argc, char **argv);
int cmd_agent(struct ctl *c, int argc, char **argv);
int cmd_user(struct ctl *c, int argc, char **argv);
int cmd_kubeconfig(struct ctl *c, int argc, char **argv);
int cmd_connect(struct ctl *c, int argc, char **argv);
int cmd_forward(struct ctl *c, int argc, char **argv);
/* `gateway urls [set URL...|clear]`: the public URL list agents dial. */
int cmd_gateway(struct ctl *c, int argc, char **argv);
/* `ca status`: how far a CA rotation has gone (GET /v1/ca/status). */
int cmd_ca(struct ctl *c, int argc, char **argv);
/* `status`: the answering replica's id and served certificate. */
int cmd_status(struct ctl *c, int argc, char **argv);

void help_connect(void);
void help_forward(void);
/* 1 if argv asks for --help. */
int ctl_wants_help(int argc, char **argv);

/* Prints a group's help on stdout; returns 0 if the group exists, else -1. */
int ctl_group_help(const char *group);

#endif
