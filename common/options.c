/*
 * options.c: flags, --help and the INI config file of a daemon command, all
 * from one table (see options.h).  The file is read with libinih through a
 * line-counting reader, so every error names FILE:LINE and the key.
 */
#include "options.h"

#include <errno.h>
#include <getopt.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include <ini.h>
#include <openssl/crypto.h>

#define HELP_COLUMN 30
#define HELP_WIDTH 79
#define OPT_VAL_CONFIG 1
#define OPT_VAL_HELP 2
#define OPT_VAL_BASE 1000

/* ---- values ---- */

static int
parse_bool(const char *s, uint32_t *out)
{
	static const char *const yes[] = { "true", "yes", "on", "1", NULL };
	static const char *const no[] = { "false", "no", "off", "0", NULL };

	for (size_t i = 0; yes[i] != NULL; i++) {
		if (strcasecmp(s, yes[i]) == 0) {
			*out = 1;
			return 0;
		}
		if (strcasecmp(s, no[i]) == 0) {
			*out = 0;
			return 0;
		}
	}
	return -1;
}

static void
choices_text(const char *const *choices, char *buf, size_t len)
{
	size_t off = 0;

	buf[0] = '\0';
	for (size_t i = 0; choices[i] != NULL && off < len; i++)
		off += (size_t)snprintf(buf + off, len - off, "%s%s",
		    i == 0 ? "" : choices[i + 1] == NULL ? " or " : ", ", choices[i]);
}

int
opts_check_value(const struct opt_spec *spec, const char *text, uint32_t *num,
    char *why, size_t whylen)
{
	char *end, list[256];
	unsigned long v;

	*num = 0;
	if (strlen(text) > OPT_VALUE_MAX) {
		snprintf(why, whylen, "value longer than %d bytes", OPT_VALUE_MAX);
		return -1;
	}
	switch (spec->type) {
	case OPT_U32:
		errno = 0;
		v = strtoul(text, &end, 10);
		if (errno != 0 || end == text || *end != '\0' || text[0] == '-' ||
		    text[0] == '+' || v < spec->min || v > spec->max) {
			snprintf(why, whylen, "wants a number from %u to %u, got \"%s\"",
			    spec->min, spec->max, text);
			return -1;
		}
		*num = (uint32_t)v;
		return 0;
	case OPT_BOOL:
		if (parse_bool(text, num) != 0) {
			snprintf(why, whylen, "wants true or false, got \"%s\"", text);
			return -1;
		}
		return 0;
	case OPT_CHOICE:
		for (uint32_t i = 0; spec->choices[i] != NULL; i++) {
			if (strcmp(text, spec->choices[i]) == 0) {
				*num = i;
				return 0;
			}
		}
		choices_text(spec->choices, list, sizeof(list));
		snprintf(why, whylen, "wants %s, got \"%s\"", list, text);
		return -1;
	case OPT_STRING:
		if (text[0] == '\0') {
			snprintf(why, whylen, "wants a value");
			return -1;
		}
		if (spec->check != NULL && spec->check(text, why, whylen) != 0)
			return -1;
		return 0;
	}
	snprintf(why, whylen, "unknown type");
	return -1;
}

/* Sets value id from text, replacing what was there.  -1 with why. */
static int
set_value(struct opt_set *set, size_t id, const char *text, enum opt_source src,
    char *why, size_t whylen)
{
	struct opt_value *v = &set->v[id];
	uint32_t num;
	char *copy;

	if (opts_check_value(&set->cmd->spec[id], text, &num, why, whylen) != 0)
		return -1;
	copy = strdup(text);
	if (copy == NULL) {
		snprintf(why, whylen, "out of memory");
		return -1;
	}
	if (v->text != NULL)
		OPENSSL_cleanse(v->text, strlen(v->text));
	free(v->text);
	v->text = copy;
	v->num = num;
	v->source = src;
	return 0;
}

static int
find_spec(const struct opt_command *cmd, const char *name)
{
	for (size_t i = 0; i < cmd->n; i++)
		if (strcmp(cmd->spec[i].name, name) == 0)
			return (int)i;
	return -1;
}

/* ---- the config file ---- */

struct file_ctx {
	FILE *f;
	struct opt_set *set;
	unsigned char *seen;	/* keys given in the file */
	int line;		/* line number of the text last handed to inih */
	char err[512];		/* first error, "LINE: KEY: reason" */
};

/* fgets for inih that counts lines and refuses lines that do not fit. */
static char *
file_reader(char *buf, int num, void *arg)
{
	struct file_ctx *c = arg;
	size_t len;
	int ch;

	if (c->err[0] != '\0' || fgets(buf, num, c->f) == NULL)
		return NULL;
	c->line++;
	len = strlen(buf);
	if (len > 0 && buf[len - 1] != '\n' && !feof(c->f)) {
		snprintf(c->err, sizeof(c->err), "%d: line longer than %d bytes",
		    c->line, num - 3);
		while ((ch = fgetc(c->f)) != EOF && ch != '\n')
			;
		return NULL;
	}
	return buf;
}

static int
file_handler(void *arg, const char *section, const char *name, const char *value)
{
	struct file_ctx *c = arg;
	char why[384];
	int id;

	if (c->err[0] != '\0')
		return 0;
	if (section[0] != '\0') {
		snprintf(c->err, sizeof(c->err), "%d: %s: under section [%s], but "
		    "this file has no sections", c->line, name, section);
		return 0;
	}
	id = find_spec(c->set->cmd, name);
	if (id < 0) {
		snprintf(c->err, sizeof(c->err), "%d: unknown key \"%s\"", c->line, name);
		return 0;
	}
	if (c->seen[id]) {
		snprintf(c->err, sizeof(c->err), "%d: %s: key given twice", c->line, name);
		return 0;
	}
	c->seen[id] = 1;
	if (value[0] == '\0')
		return 1;	/* empty: the default */
	if (c->set->v[id].source == OPT_FROM_FLAG) {
		/* The flag wins, but the file must still be valid. */
		uint32_t num;

		if (opts_check_value(&c->set->cmd->spec[id], value, &num, why,
		    sizeof(why)) == 0)
			return 1;
	} else if (set_value(c->set, (size_t)id, value, OPT_FROM_FILE, why,
	    sizeof(why)) == 0) {
		return 1;
	}
	snprintf(c->err, sizeof(c->err), "%d: %s: %s", c->line, name, why);
	return 0;
}

static int
read_config(struct opt_set *set)
{
	struct file_ctx c = { .set = set };
	int r;

	c.f = fopen(set->config_path, "r");
	if (c.f == NULL) {
		fprintf(stderr, "%s: --config %s: %s\n", set->cmd->prog,
		    set->config_path, strerror(errno));
		return -1;
	}
	c.seen = calloc(set->cmd->n, 1);
	if (c.seen == NULL) {
		fclose(c.f);
		fprintf(stderr, "%s: out of memory\n", set->cmd->prog);
		return -1;
	}
	/* Continuation lines would turn an indented key into part of the
	 * previous value; stop at the first error so the line is right. */
	ini_allow_multiline = false;
	ini_stop_on_first_error = true;
	r = ini_parse_stream(file_reader, &c, file_handler, &c);
	if (c.err[0] == '\0' && r > 0)
		snprintf(c.err, sizeof(c.err), "%d: not a \"key = value\" line "
		    "or [section]", r);
	else if (c.err[0] == '\0' && ferror(c.f))
		snprintf(c.err, sizeof(c.err), "0: read error");
	fclose(c.f);
	free(c.seen);
	if (c.err[0] != '\0') {
		fprintf(stderr, "%s: %s:%s\n", set->cmd->prog, set->config_path, c.err);
		return -1;
	}
	return 0;
}

/* ---- argv ---- */

static struct option *
long_options(const struct opt_command *cmd)
{
	struct option *o = calloc(cmd->n + 3, sizeof(*o));

	if (o == NULL)
		return NULL;
	for (size_t i = 0; i < cmd->n; i++) {
		o[i].name = cmd->spec[i].name;
		o[i].has_arg = cmd->spec[i].type == OPT_BOOL ? optional_argument :
		    required_argument;
		o[i].val = OPT_VAL_BASE + (int)i;
	}
	o[cmd->n] = (struct option){ "config", required_argument, NULL, OPT_VAL_CONFIG };
	o[cmd->n + 1] = (struct option){ "help", no_argument, NULL, OPT_VAL_HELP };
	return o;
}

/* Returns OPTS_OK, OPTS_HELP or OPTS_USAGE (message printed). */
static int
parse_argv(struct opt_set *set, int argc, char **argv)
{
	const struct opt_command *cmd = set->cmd;
	struct option *longopts = long_options(cmd);
	char why[384];
	int c, r = OPTS_OK;

	if (longopts == NULL) {
		fprintf(stderr, "%s: out of memory\n", cmd->prog);
		return OPTS_USAGE;
	}
	opterr = 0;
	optind = 0;
	while (r == OPTS_OK && (c = getopt_long(argc, argv, ":h", longopts, NULL)) != -1) {
		if (c == 'h' || c == OPT_VAL_HELP) {
			opts_help(cmd, stdout);
			r = OPTS_HELP;
		} else if (c == OPT_VAL_CONFIG) {
			free(set->config_path);
			set->config_path = strdup(optarg);
			if (set->config_path == NULL) {
				fprintf(stderr, "%s: out of memory\n", cmd->prog);
				r = OPTS_USAGE;
			}
		} else if (c >= OPT_VAL_BASE && (size_t)(c - OPT_VAL_BASE) < cmd->n) {
			size_t id = (size_t)(c - OPT_VAL_BASE);
			const char *text = optarg != NULL ? optarg : "true";
			char joined[OPT_VALUE_MAX + 2];

			if (cmd->spec[id].repeat && set->v[id].source == OPT_FROM_FLAG) {
				snprintf(joined, sizeof(joined), "%s,%s",
				    set->v[id].text, text);
				text = joined;
			}
			if (set_value(set, id, text, OPT_FROM_FLAG, why, sizeof(why)) != 0) {
				fprintf(stderr, "%s: --%s: %s\n", cmd->prog,
				    cmd->spec[id].name, why);
				r = OPTS_USAGE;
			}
		} else if (c == ':') {
			fprintf(stderr, "%s: %s needs a value\n", cmd->prog, argv[optind - 1]);
			r = OPTS_USAGE;
		} else {
			fprintf(stderr, "%s: unknown option %s\n", cmd->prog, argv[optind - 1]);
			r = OPTS_USAGE;
		}
	}
	if (r == OPTS_OK && optind < argc) {
		fprintf(stderr, "%s: unexpected argument \"%s\"\n", cmd->prog, argv[optind]);
		r = OPTS_USAGE;
	}
	free(longopts);
	return r;
}

static int
set_defaults(struct opt_set *set)
{
	char why[384];

	for (size_t i = 0; i < set->cmd->n; i++) {
		if (set->cmd->spec[i].def == NULL)
			continue;
		if (set_value(set, i, set->cmd->spec[i].def, OPT_FROM_DEFAULT, why,
		    sizeof(why)) != 0) {
			fprintf(stderr, "%s: built-in default of %s: %s\n",
			    set->cmd->prog, set->cmd->spec[i].name, why);
			return -1;
		}
	}
	return 0;
}

int
opts_parse(const struct opt_command *cmd, int argc, char **argv, struct opt_set *set)
{
	int r;

	memset(set, 0, sizeof(*set));
	set->cmd = cmd;
	set->v = calloc(cmd->n, sizeof(*set->v));
	if (set->v == NULL) {
		fprintf(stderr, "%s: out of memory\n", cmd->prog);
		return OPTS_USAGE;
	}
	if (set_defaults(set) != 0) {
		opts_free(set);
		return OPTS_USAGE;
	}
	r = parse_argv(set, argc, argv);
	if (r == OPTS_OK && set->config_path != NULL && read_config(set) != 0)
		r = OPTS_USAGE;
	for (size_t i = 0; r == OPTS_OK && i < cmd->n; i++) {
		if (cmd->spec[i].required && set->v[i].text == NULL) {
			fprintf(stderr, "%s: --%s %s is required (flag or config key %s)\n",
			    cmd->prog, cmd->spec[i].name,
			    cmd->spec[i].arg != NULL ? cmd->spec[i].arg : "", cmd->spec[i].name);
			r = OPTS_USAGE;
		}
	}
	if (r == OPTS_USAGE)
		fprintf(stderr, "Run '%s --help' for usage.\n", cmd->prog);
	if (r != OPTS_OK)
		opts_free(set);
	return r;
}

const char *
opts_str(const struct opt_set *set, int id)
{
	return set->v[id].text;
}

uint32_t
opts_num(const struct opt_set *set, int id)
{
	return set->v[id].num;
}

enum opt_source
opts_source(const struct opt_set *set, int id)
{
	return set->v[id].source;
}

void
opts_free(struct opt_set *set)
{
	if (set->v != NULL) {
		for (size_t i = 0; i < set->cmd->n; i++) {
			/* Values may be secrets (a proxy URL's password). */
			if (set->v[i].text != NULL)
				OPENSSL_cleanse(set->v[i].text, strlen(set->v[i].text));
			free(set->v[i].text);
		}
		free(set->v);
	}
	free(set->config_path);
	set->v = NULL;
	set->config_path = NULL;
}

/* ---- --help ---- */

/* Writes text word-wrapped from column col, the first line already at pos. */
static void
wrap(FILE *f, const char *text, size_t pos, size_t col)
{
	const char *p = text;

	while (*p != '\0') {
		size_t w = strcspn(p, " ");

		if (pos > col && pos + 1 + w > HELP_WIDTH) {
			fprintf(f, "\n%*s", (int)col, "");
			pos = col;
		} else if (pos > col) {
			fputc(' ', f);
			pos++;
		}
		fprintf(f, "%.*s", (int)w, p);
		pos += w;
		p += w;
		while (*p == ' ')
			p++;
	}
	fputc('\n', f);
}

void
opts_help(const struct opt_command *cmd, FILE *f)
{
	char head[128], text[1024], list[256];

	fprintf(f, "%s\n", cmd->synopsis);
	if (cmd->about != NULL)
		fprintf(f, "\n%s", cmd->about);
	fprintf(f, "\noptions (each is also a key of the --config FILE; flags win):\n");
	for (size_t i = 0; i < cmd->n; i++) {
		const struct opt_spec *s = &cmd->spec[i];
		int len;

		if (s->type == OPT_BOOL)
			len = snprintf(head, sizeof(head), "  --%s[=BOOL]", s->name);
		else
			len = snprintf(head, sizeof(head), "  --%s %s", s->name,
			    s->arg != NULL ? s->arg : "VALUE");
		fputs(head, f);
		if (len >= HELP_COLUMN - 1) {
			fprintf(f, "\n%*s", HELP_COLUMN, "");
			len = HELP_COLUMN;
		} else {
			fprintf(f, "%*s", HELP_COLUMN - len, "");
		}
		if (s->type == OPT_CHOICE) {
			choices_text(s->choices, list, sizeof(list));
			snprintf(text, sizeof(text), "%s: %s", s->help, list);
		} else {
			snprintf(text, sizeof(text), "%s", s->help);
		}
		if (s->required)
			snprintf(text + strlen(text), sizeof(text) - strlen(text), " (required)");
		else if (s->def != NULL)
			snprintf(text + strlen(text), sizeof(text) - strlen(text),
			    " (default %s)", s->def);
		else if (s->def_help != NULL)
			snprintf(text + strlen(text), sizeof(text) - strlen(text),
			    " (default %s)", s->def_help);
		wrap(f, text, HELP_COLUMN, HELP_COLUMN);
	}
	fprintf(f, "  --config FILE%*sread settings from FILE (key = value lines)\n",
	    HELP_COLUMN - 15, "");
	fprintf(f, "  --help%*sthis text\n", HELP_COLUMN - 8, "");
	if (cmd->footer != NULL)
		fprintf(f, "\n%s", cmd->footer);
}
