/*
 * joindoc.c: strict parsing and formatting of the join document (see
 * joindoc.h), and the RFC 3339 timestamps it carries.
 *
 * The document arrives from whoever pasted it onto the node, so every field
 * is checked for its exact form.  Error reasons name the key at fault and
 * never echo the token: jansson's own messages quote the input near the
 * error ("near '\"tti_...'"), so they are replaced by our own.
 */
#include "joindoc.h"
#include "printable.h"
#include "url.h"

#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <jansson.h>

#define JOINDOC_TOKEN_PREFIX "tti_"

static const char *const joindoc_keys[] = {
	"gateway_url", "ca_checksum", "cluster", "token", "expires_at",
};
#define JOINDOC_NKEYS (sizeof(joindoc_keys) / sizeof(joindoc_keys[0]))

static int
is_lower_hex(const char *s, size_t n)
{
	for (size_t i = 0; i < n; i++) {
		if (!((s[i] >= '0' && s[i] <= '9') || (s[i] >= 'a' && s[i] <= 'f')))
			return 0;
	}
	return 1;
}

/* "sha256:" + 64 lowercase hex.  Local copy of ca_checksum_valid: auth/
 * links after common/, so common cannot call it. */
static int
checksum_valid(const char *s)
{
	if (strncmp(s, "sha256:", 7) != 0 || strlen(s) != 7 + 64)
		return 0;
	return is_lower_hex(s + 7, 64);
}

static int
cluster_valid(const char *s)
{
	if (strncmp(s, "c-", 2) != 0 || strlen(s) != 2 + 12)
		return 0;
	return is_lower_hex(s + 2, 12);
}

/* tti_ then the token's own characters (id, '.', base64url secret). */
static int
token_shape_valid(const char *s, size_t maxlen)
{
	size_t len = strlen(s);

	if (len >= maxlen || len <= strlen(JOINDOC_TOKEN_PREFIX))
		return 0;
	if (strncmp(s, JOINDOC_TOKEN_PREFIX, strlen(JOINDOC_TOKEN_PREFIX)) != 0)
		return 0;
	for (size_t i = 0; i < len; i++) {
		if (!isalnum((unsigned char)s[i]) && s[i] != '_' && s[i] != '-' &&
		    s[i] != '.')
			return 0;
	}
	return 1;
}

static const char *const gateway_url_schemes[] = { "https", NULL };

/*
 * https://HOST[:PORT][/] (url_parse's rules, an origin, no user
 * information) into out, normalised and without the trailing '/'.
 * Returns 0, or -1 with the reason in why (whylen bytes).
 */
static int
gateway_url_check(const char *text, char *out, size_t outlen, char *why,
    size_t whylen)
{
	struct url u;
	int r = -1;

	/* Tether writes the document itself, with the scheme in lower case. */
	if (strncmp(text, "https://", 8) != 0) {
		snprintf(why, whylen, "must start with https://");
		return -1;
	}
	if (url_parse(text, gateway_url_schemes, &u, why, whylen) != 0)
		return -1;
	if (u.has_userinfo || !url_is_origin(&u))
		snprintf(why, whylen, "must be https://HOST[:PORT] with no user, "
		    "path or query");
	else if (url_origin(&u, out, outlen) < 0)
		snprintf(why, whylen, "too long");
	else
		r = 0;
	url_clear(&u);
	return r;
}

static int
days_in_month(int year, int month)
{
	static const int days[] = { 31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31 };
	int leap = (year % 4 == 0 && year % 100 != 0) || year % 400 == 0;

	return month == 2 && leap ? 29 : days[month - 1];
}

/* n digits of s as an int, or -1. */
static int
digits(const char *s, int n)
{
	int v = 0;

	for (int i = 0; i < n; i++) {
		if (!isdigit((unsigned char)s[i]))
			return -1;
		v = v * 10 + (s[i] - '0');
	}
	return v;
}

int
rfc3339_parse(const char *s, int64_t *out)
{
	struct tm tm;
	int year, mon, day, hour, min, sec;
	time_t t;

	/* YYYY-MM-DDTHH:MM:SSZ, exactly. */
	if (strlen(s) != 20 || s[4] != '-' || s[7] != '-' || s[10] != 'T' ||
	    s[13] != ':' || s[16] != ':' || s[19] != 'Z')
		return -1;
	if ((year = digits(s, 4)) < 1970 || (mon = digits(s + 5, 2)) < 1 ||
	    mon > 12 || (day = digits(s + 8, 2)) < 1 ||
	    day > days_in_month(year, mon) || (hour = digits(s + 11, 2)) < 0 ||
	    hour > 23 || (min = digits(s + 14, 2)) < 0 || min > 59 ||
	    (sec = digits(s + 17, 2)) < 0 || sec > 59)
		return -1;
	memset(&tm, 0, sizeof(tm));
	tm.tm_year = year - 1900;
	tm.tm_mon = mon - 1;
	tm.tm_mday = day;
	tm.tm_hour = hour;
	tm.tm_min = min;
	tm.tm_sec = sec;
	if ((t = timegm(&tm)) == (time_t)-1)
		return -1;
	*out = (int64_t)t;
	return 0;
}

void
rfc3339_format(int64_t t, char out[32])
{
	struct tm tm;
	time_t tt = (time_t)t;

	if (gmtime_r(&tt, &tm) == NULL ||
	    strftime(out, 32, "%Y-%m-%dT%H:%M:%SZ", &tm) == 0)
		snprintf(out, 32, "1970-01-01T00:00:00Z");
}

/* The name of a key for an error message: printable, bounded. */
static void
key_for_message(const char *key, char *out, size_t outlen)
{
	size_t n = strnlen(key, 32);

	text_printable(out, outlen, key, n);
}

/* A parse failure from jansson, described without quoting the input. */
static void
json_error_reason(const json_error_t *jerr, char *err, size_t errlen)
{
	const char *near;

	switch (json_error_code(jerr)) {
	case json_error_duplicate_key:
		/* jansson quotes the key; name it only if it is one of ours. */
		near = strstr(jerr->text, "near '\"");
		for (size_t i = 0; near != NULL && i < JOINDOC_NKEYS; i++) {
			char want[32];

			snprintf(want, sizeof(want), "near '\"%s\"'", joindoc_keys[i]);
			if (strcmp(near, want) == 0) {
				snprintf(err, errlen, "%s: key appears twice",
				    joindoc_keys[i]);
				return;
			}
		}
		snprintf(err, errlen, "a key appears twice (line %d, column %d)",
		    jerr->line, jerr->column);
		return;
	case json_error_end_of_input_expected:
		snprintf(err, errlen, "unexpected data after the JSON object "
		    "(line %d, column %d)", jerr->line, jerr->column);
		return;
	case json_error_premature_end_of_input:
		snprintf(err, errlen, "truncated JSON (line %d, column %d)",
		    jerr->line, jerr->column);
		return;
	case json_error_null_character:
	case json_error_null_byte_in_key:
		snprintf(err, errlen, "NUL character in a key (line %d, "
		    "column %d)", jerr->line, jerr->column);
		return;
	case json_error_invalid_utf8:
		snprintf(err, errlen, "invalid UTF-8 (line %d, column %d)",
		    jerr->line, jerr->column);
		return;
	default:
		snprintf(err, errlen, "not valid JSON (line %d, column %d)",
		    jerr->line, jerr->column);
		return;
	}
}

/* The string value of key, or NULL with a reason naming the key. */
static const char *
get_string(json_t *root, const char *key, char *err, size_t errlen)
{
	json_t *v = json_object_get(root, key);

	if (v == NULL) {
		snprintf(err, errlen, "%s: missing", key);
		return NULL;
	}
	if (!json_is_string(v)) {
		snprintf(err, errlen, "%s: must be a string", key);
		return NULL;
	}
	/* Parsed with JSON_ALLOW_NUL so that this names the key. */
	if (strlen(json_string_value(v)) != json_string_length(v)) {
		snprintf(err, errlen, "%s: contains a NUL character", key);
		return NULL;
	}
	return json_string_value(v);
}

static int
check_keys(json_t *root, char *err, size_t errlen)
{
	const char *key;
	json_t *v;

	json_object_foreach(root, key, v) {
		size_t i;

		for (i = 0; i < JOINDOC_NKEYS; i++) {
			if (strcmp(key, joindoc_keys[i]) == 0)
				break;
		}
		if (i == JOINDOC_NKEYS) {
			char raw[40], name[48];

			/* Name the key, unless it might carry a token. */
			key_for_message(key, raw, sizeof(raw));
			if (strstr(key, JOINDOC_TOKEN_PREFIX) != NULL)
				snprintf(name, sizeof(name), "(name not shown)");
			else
				snprintf(name, sizeof(name), "\"%s\"", raw);
			snprintf(err, errlen, "unknown key %s (a join document has "
			    "exactly gateway_url, ca_checksum, cluster, token, "
			    "expires_at)", name);
			return -1;
		}
	}
	return 0;
}

static int
fill_doc(json_t *root, struct joindoc *doc, char *err, size_t errlen)
{
	const char *s;
	char why[160];

	if ((s = get_string(root, "gateway_url", err, errlen)) == NULL)
		return -1;
	if (gateway_url_check(s, doc->gateway_url, sizeof(doc->gateway_url),
	    why, sizeof(why)) == -1) {
		snprintf(err, errlen, "gateway_url: %s", why);
		return -1;
	}
	if ((s = get_string(root, "ca_checksum", err, errlen)) == NULL)
		return -1;
	if (!checksum_valid(s)) {
		snprintf(err, errlen, "ca_checksum: must be sha256: followed by "
		    "64 lowercase hex digits");
		return -1;
	}
	snprintf(doc->ca_checksum, sizeof(doc->ca_checksum), "%s", s);
	if ((s = get_string(root, "cluster", err, errlen)) == NULL)
		return -1;
	if (!cluster_valid(s)) {
		snprintf(err, errlen, "cluster: must be c- followed by 12 "
		    "lowercase hex digits");
		return -1;
	}
	snprintf(doc->cluster, sizeof(doc->cluster), "%s", s);
	if ((s = get_string(root, "token", err, errlen)) == NULL)
		return -1;
	if (!token_shape_valid(s, sizeof(doc->token))) {
		snprintf(err, errlen, "token: not an import token (want "
		    JOINDOC_TOKEN_PREFIX "...)");
		return -1;
	}
	snprintf(doc->token, sizeof(doc->token), "%s", s);
	if ((s = get_string(root, "expires_at", err, errlen)) == NULL)
		return -1;
	if (rfc3339_parse(s, &doc->expires_at) == -1) {
		snprintf(err, errlen, "expires_at: must be a UTC time like "
		    "2026-11-22T10:00:00Z");
		return -1;
	}
	return 0;
}

int
joindoc_parse(const char *json, size_t len, struct joindoc *doc, char *err,
    size_t errlen)
{
	json_error_t jerr;
	json_t *root = NULL;
	int r = -1;

	memset(doc, 0, sizeof(*doc));
	if (len > JOINDOC_MAX_BYTES) {
		snprintf(err, errlen, "larger than %d bytes", JOINDOC_MAX_BYTES);
		goto out;
	}
	root = json_loadb(json, len, JSON_REJECT_DUPLICATES | JSON_DECODE_ANY |
	    JSON_ALLOW_NUL, &jerr);
	if (root == NULL) {
		json_error_reason(&jerr, err, errlen);
		goto out;
	}
	if (!json_is_object(root)) {
		snprintf(err, errlen, "not a JSON object");
		goto out;
	}
	if (check_keys(root, err, errlen) == -1 ||
	    fill_doc(root, doc, err, errlen) == -1)
		goto out;
	r = 0;
out:
	json_decref(root);
	if (r == -1)
		joindoc_clear(doc);
	return r;
}

char *
joindoc_format(const struct joindoc *doc)
{
	char when[32];
	json_t *root;
	char *s;

	rfc3339_format(doc->expires_at, when);
	root = json_pack("{s:s, s:s, s:s, s:s, s:s}",
	    "gateway_url", doc->gateway_url,
	    "ca_checksum", doc->ca_checksum,
	    "cluster", doc->cluster,
	    "token", doc->token,
	    "expires_at", when);
	if (root == NULL)
		return NULL;
	s = json_dumps(root, JSON_COMPACT | JSON_PRESERVE_ORDER);
	json_decref(root);
	return s;
}

void
joindoc_clear(struct joindoc *doc)
{
	explicit_bzero(doc->token, sizeof(doc->token));
}
