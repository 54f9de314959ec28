/*
 * cli.h: how tether-client's commands (main.c, join.c, status.c) report a
 * bad command line: one message on stderr, a hint, exit code 2.
 */
#ifndef TETHER_CLIENT_CLI_H
#define TETHER_CLIENT_CLI_H

/* Prints "tether-client CMD: " fmt (with one %s for arg) and the --help
 * hint to stderr; cmd NULL for the top level.  Returns 2, the exit code. */
int client_usage_error(const char *cmd, const char *fmt, const char *arg);

/* Reports getopt_long's '?' (unknown option) or ':' (missing value) for
 * argv[optind - 1] through client_usage_error.  Returns 2. */
int client_getopt_error(const char *cmd, int c, char **argv);

#endif
