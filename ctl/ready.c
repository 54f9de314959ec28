/*
 * ready.c: what every tetherctl command needs before it calls the API (the
 * server's URL, the CA file, the admin or user token), and how a command
 * reports a bad command line.  main.c and commands.c both use it.
 */
#include "ctl.h"

#include <ctype.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "fileio.h"
#include "token.h"
#include "url.h"

#define TOKEN_FILE_MAX 4096

int
ctl_usage_error(const char *cmd, const char *fmt, ...)
{
	va_list ap;

	fprintf(stderr, "tetherctl%s%s: ", cmd != NULL ? " " : "",
	    cmd != NULL ? cmd : "");
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fprintf(stderr, "\nTry 'tetherctl%s%s --help'.\n", cmd != NULL ? " " : "",
	    cmd != NULL ? cmd : "");
	return CTL_EXIT_USAGE;
}

/* --- the admin token --- */

static int
token_chars_valid(const char *s)
{
	size_t n = strlen(s);

	if (n == 0 || n >= TOKEN_STR_MAX)
		return 0;
	for (size_t i = 0; i < n; i++) {
		if (!isalnum((unsigned char)s[i]) && s[i] != '_' && s[i] != '-' &&
		    s[i] != '.')
			return 0;
	}
	return 1;
}

/* A copy of s without surrounding whitespace (caller frees), or NULL. */
static char *
trimmed_copy(const char *s)
{
	size_t n;

	while (isspace((unsigned char)*s))
		s++;
	n = strlen(s);
	while (n > 0 && isspace((unsigned char)s[n - 1]))
		n--;
	return strndup(s, n);
}

static int
missing_token(void)
{
	fprintf(stderr,
	    "tetherctl: no admin token (or, for connect and forward, user token);\n"
	    "provide it in one of three ways:\n"
	    "  --token-file FILE          a file holding it (the gateway's first\n"
	    "                             admin token is DATA_DIR/admin.token)\n"
	    "  TETHER_TOKEN_FILE=FILE     the same, from the environment\n"
	    "  TETHER_TOKEN=TOKEN         the token itself, from the environment\n"
	    "Try 'tetherctl --help'.\n");
	return CTL_EXIT_USAGE;
}

static int
load_token(struct ctl *c)
{
	char err[512];
	char *raw = NULL, *tok = NULL;
	const char *env, *from;
	size_t len = 0;
	int r = CTL_EXIT_USAGE;

	if (c->token_file != NULL) {
		from = c->token_file;
		if (file_read_all(c->token_file, TOKEN_FILE_MAX, &raw, &len, err,
		    sizeof(err)) == -1) {
			fprintf(stderr, "tetherctl: cannot read the token file: %s\n",
			    err);
			goto out;
		}
		tok = trimmed_copy(raw);
	} else if ((env = getenv("TETHER_TOKEN")) != NULL && env[0] != '\0') {
		from = "TETHER_TOKEN";
		tok = trimmed_copy(env);
	} else
		return missing_token();
	if (tok == NULL) {
		fprintf(stderr, "tetherctl: out of memory\n");
		goto out;
	}
	if (!token_chars_valid(tok)) {
		fprintf(stderr, "tetherctl: %s does not hold a token (want one line "
		    "like tta_<id>.<secret> or ttu_<id>.<secret>)\n", from);
		goto out;
	}
	c->api.token = tok;
	tok = NULL;
	r = CTL_EXIT_OK;
out:
	if (raw != NULL) {
		explicit_bzero(raw, len);
		free(raw);
	}
	if (tok != NULL) {
		explicit_bzero(tok, strlen(tok));
		free(tok);
	}
	return r;
}

static const char *const server_url_schemes[] = { "https", NULL };

/* --server: https://HOST[:PORT] (common/url.c's rules, an origin), kept
 * normalised in c->api.server. */
static int
check_server(struct ctl *c)
{
	char why[160];
	struct url u;
	int r = CTL_EXIT_USAGE;

	if (url_parse(c->server, server_url_schemes, &u, why, sizeof(why)) != 0)
		;
	else if (u.has_userinfo || !url_is_origin(&u))
		snprintf(why, sizeof(why), "has a user, path or query");
	else if (url_origin(&u, c->api.server, sizeof(c->api.server)) < 0)
		snprintf(why, sizeof(why), "is too long");
	else
		r = CTL_EXIT_OK;
	url_clear(&u);
	if (r != CTL_EXIT_OK)
		fprintf(stderr, "tetherctl: --server %s: want https://HOST[:PORT]: %s\n"
		    "Try 'tetherctl --help'.\n", c->server, why);
	return r;
}

int
ctl_ready(struct ctl *c)
{
	int r;

	if (c->api.token != NULL)
		return CTL_EXIT_OK;
	if ((r = check_server(c)) != CTL_EXIT_OK)
		return r;
	if (c->cacert != NULL) {
		if (access(c->cacert, R_OK) == -1) {
			fprintf(stderr, "tetherctl: cannot read the CA file %s\n"
			    "Try 'tetherctl --help'.\n", c->cacert);
			return CTL_EXIT_USAGE;
		}
		c->api.cacert = c->cacert;
	}
	return load_token(c);
}
