/*
 * cli.c: command-line errors of tether-client (see cli.h).
 */
#include "cli.h"

#include <getopt.h>
#include <stdio.h>

int
client_usage_error(const char *cmd, const char *fmt, const char *arg)
{
	fprintf(stderr, "tether-client%s%s: ", cmd != NULL ? " " : "",
	    cmd != NULL ? cmd : "");
	fprintf(stderr, fmt, arg);
	fprintf(stderr, "\nTry 'tether-client%s%s --help'.\n",
	    cmd != NULL ? " " : "", cmd != NULL ? cmd : "");
	return 2;
}

int
client_getopt_error(const char *cmd, int c, char **argv)
{
	const char *arg = argv[optind - 1];

	if (c == ':')
		return client_usage_error(cmd, "option %s needs a value", arg);
	return client_usage_error(cmd, "unknown option %s", arg);
}
