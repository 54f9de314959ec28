/*
 * options.h: one table per daemon command drives its flags, its --help and
 * its INI config file (--config FILE, read with Debian's libinih).
 *
 * A command describes each setting once (struct opt_spec: name, type,
 * default, help).  The same name is the long flag (--max-queue) and the
 * config key (max-queue = ...).  opts_parse() reads argv, then the config
 * file; a flag given on the command line overrides the file's key.  Values
 * are checked by type (and an optional check function) in both places, so a
 * bad value in a file is reported as FILE:LINE: KEY: reason.
 *
 * The tables: gateway/serve_options.c (tether-gateway serve) and
 * tunnel-client/run_options.c (tether-client run).  Adding a setting there
 * adds the flag, the key and the --help line; the example files in config/
 * must list it too (tests/integration/test_config.sh checks).
 */
#ifndef TETHER_OPTIONS_H
#define TETHER_OPTIONS_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

enum opt_type {
	OPT_STRING,	/* any non-empty text up to OPT_VALUE_MAX bytes */
	OPT_U32,	/* decimal in [min, max] */
	OPT_BOOL,	/* flag alone or =true/false; key: true/false/yes/no/on/off/1/0 */
	OPT_CHOICE,	/* one of choices[] */
};

#define OPT_VALUE_MAX 1024

/*
 * Checks a string value beyond its type: 0 if acceptable, else -1 with a
 * reason in why ("wants HOST:PORT").
 */
typedef int (*opt_check_fn)(const char *value, char *why, size_t whylen);

/* One setting.  Tables are static const arrays indexed by the command's enum. */
struct opt_spec {
	const char *name;	/* flag without "--" and config key */
	enum opt_type type;
	const char *def;	/* default as text; NULL: none (see def_help) */
	const char *arg;	/* placeholder in --help: "MS", "HOST:PORT" */
	const char *help;	/* one sentence, no default in it */
	const char *def_help;	/* shown instead of def when def is NULL, or NULL */
	uint32_t min, max;	/* OPT_U32 */
	const char *const *choices;	/* OPT_CHOICE, NULL-terminated */
	opt_check_fn check;	/* OPT_STRING, or NULL */
	int required;		/* must be set by flag or key */
	int repeat;		/* OPT_STRING: the flag may be given again, the
				 * values joined with ','; a key takes the list */
};

/* A command: its table and the text around the generated option list. */
struct opt_command {
	const char *prog;	/* "tether-gateway serve" */
	const char *synopsis;	/* usage line(s) */
	const char *about;	/* paragraph after the usage line */
	const char *footer;	/* text after the options (signals, exit codes) */
	const struct opt_spec *spec;
	size_t n;
};

enum opt_source { OPT_FROM_DEFAULT, OPT_FROM_FILE, OPT_FROM_FLAG };

struct opt_value {
	char *text;		/* owned; NULL when unset */
	uint32_t num;		/* OPT_U32, OPT_BOOL (0/1), OPT_CHOICE (index) */
	enum opt_source source;
};

/* Parsed values of one command.  Memory: n values plus their text. */
struct opt_set {
	const struct opt_command *cmd;
	struct opt_value *v;
	char *config_path;	/* --config FILE, or NULL */
};

enum { OPTS_OK = 0, OPTS_HELP = 1, OPTS_USAGE = 2 };

/*
 * Parses argv (argv[0] is the command name) and then --config FILE if one
 * was given: flags win over keys, keys over defaults.  Empty values in the
 * file mean "the default".  Returns OPTS_OK with *set filled (free with
 * opts_free), OPTS_HELP after printing --help to stdout, or OPTS_USAGE after
 * printing the reason to stderr (set is freed already in both cases).
 */
int opts_parse(const struct opt_command *cmd, int argc, char **argv,
    struct opt_set *set);

/* Text of setting id, or NULL when it is unset and has no default. */
const char *opts_str(const struct opt_set *set, int id);
/* Number of an OPT_U32, 0/1 of an OPT_BOOL, index of an OPT_CHOICE. */
uint32_t opts_num(const struct opt_set *set, int id);
/* Where setting id's value came from. */
enum opt_source opts_source(const struct opt_set *set, int id);

void opts_free(struct opt_set *set);

/* Writes --help: synopsis, about, one entry per setting, footer. */
void opts_help(const struct opt_command *cmd, FILE *f);

/*
 * Checks one value of spec as a flag or key would be: 0 and *num set, or -1
 * with the reason in why.  Exposed for unit tests.
 */
int opts_check_value(const struct opt_spec *spec, const char *text,
    uint32_t *num, char *why, size_t whylen);

#endif
