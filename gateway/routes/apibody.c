/*
 * apibody.c: the admin API's request bodies and query parameters, read as
 * pure functions of their bytes (see apibody.h).  Cost: one jansson parse
 * of a body the server already bounded (max_body_bytes).
 */
#include "apibody.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "url.h"

static const char *const allowed_keys[API_BODY_KINDS][4] = {
	[API_BODY_CLUSTER] = { "name", NULL },
	[API_BODY_TOKENS] = { "ttl_seconds", "uses", "approval", NULL },
	[API_BODY_USER] = { "name", "clusters", NULL },
	[API_BODY_KUBECONFIG] = { "user", NULL },
	[API_BODY_URLS] = { "urls", NULL },
};

static int
refuse(char *why, size_t whylen, int status, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

static int
refuse(char *why, size_t whylen, int status, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(why, whylen, fmt, ap);
	va_end(ap);
	return status;
}

/* The body as a JSON object with only allowed keys, or NULL with why. */
static json_t *
body_object(const char *body, size_t len, const char *const *allowed,
    char *why, size_t whylen)
{
	json_error_t jerr;
	const char *key;
	json_t *v, *val;

	if (len == 0)
		return json_object();
	v = json_loadb(body, len, JSON_REJECT_DUPLICATES, &jerr);
	if (v == NULL) {
		refuse(why, whylen, 400, "invalid JSON body: %s (line %d, column %d)",
		    jerr.text, jerr.line, jerr.column);
		return NULL;
	}
	if (!json_is_object(v)) {
		json_decref(v);
		refuse(why, whylen, 400, "request body must be a JSON object");
		return NULL;
	}
	json_object_foreach(v, key, val) {
		size_t i;

		for (i = 0; allowed[i] != NULL; i++)
			if (strcmp(allowed[i], key) == 0)
				break;
		if (allowed[i] == NULL) {
			refuse(why, whylen, 400, "unknown field \"%.64s\"", key);
			json_decref(v);
			return NULL;
		}
	}
	return v;
}

/* An optional integer field within [min, max]. */
static int
int_field(json_t *o, const char *key, long long def, long long min,
    long long max, long long *out, char *why, size_t whylen)
{
	json_t *v = json_object_get(o, key);

	if (v == NULL) {
		*out = def;
		return 0;
	}
	if (!json_is_integer(v) || json_integer_value(v) < min ||
	    json_integer_value(v) > max)
		return refuse(why, whylen, 400, "field \"%s\" must be an integer "
		    "from %lld to %lld", key, min, max);
	*out = json_integer_value(v);
	return 0;
}

static int
parse_tokens(struct api_body *b, char *why, size_t whylen)
{
	const char *approval = "auto";
	json_t *v;
	int status;

	if ((status = int_field(b->root, "ttl_seconds", API_TTL_DEFAULT,
	    API_TTL_MIN, API_TTL_MAX, &b->ttl_seconds, why, whylen)) != 0 ||
	    (status = int_field(b->root, "uses", 1, 1, API_USES_MAX, &b->uses,
	    why, whylen)) != 0)
		return status;
	if ((v = json_object_get(b->root, "approval")) != NULL) {
		approval = json_string_value(v);
		if (approval == NULL || (strcmp(approval, "auto") != 0 &&
		    strcmp(approval, "manual") != 0))
			return refuse(why, whylen, 400, "field \"approval\" must be "
			    "\"auto\" or \"manual\"");
	}
	b->approval_manual = strcmp(approval, "manual") == 0;
	return 0;
}

/* "clusters": a non-empty array of at most STORE_TOKEN_CLUSTERS_MAX strings. */
static int
parse_clusters(struct api_body *b, char *why, size_t whylen)
{
	json_t *arr = json_object_get(b->root, "clusters"), *v;
	size_t i, n;

	if (!json_is_array(arr) || (n = json_array_size(arr)) == 0)
		return refuse(why, whylen, 400, "field \"clusters\" (a non-empty "
		    "array of cluster ids) is required");
	if (n > STORE_TOKEN_CLUSTERS_MAX)
		return refuse(why, whylen, 400, "field \"clusters\": at most %d "
		    "clusters per token", STORE_TOKEN_CLUSTERS_MAX);
	json_array_foreach(arr, i, v) {
		if ((b->clusters[i] = json_string_value(v)) == NULL)
			return refuse(why, whylen, 400, "field \"clusters\" must hold "
			    "strings (cluster ids)");
	}
	b->nclusters = n;
	return 0;
}

static const char *const gateway_url_schemes[] = { "https", NULL };

int
api_gateway_url_valid(const char *url, char *why, size_t whylen)
{
	struct url u;
	int ok = 0;

	if (strlen(url) > API_URL_MAX) {
		snprintf(why, whylen, "longer than %d bytes", API_URL_MAX);
		return 0;
	}
	if (url_parse(url, gateway_url_schemes, &u, why, whylen) != 0)
		return 0;
	if (u.has_userinfo || !url_is_origin(&u))
		snprintf(why, whylen, "has a user, path, query or fragment "
		    "(want https://HOST[:PORT])");
	else
		ok = 1;
	url_clear(&u);
	return ok;
}

/* "urls": an array of 0..API_URLS_MAX distinct gateway URLs, joined. */
static int
parse_urls(struct api_body *b, char *why, size_t whylen)
{
	json_t *arr = json_object_get(b->root, "urls"), *v;
	char reason[160];
	size_t i, used = 0;

	if (!json_is_array(arr))
		return refuse(why, whylen, 400, "field \"urls\" (an array of "
		    "https://HOST[:PORT], [] for none) is required");
	if (json_array_size(arr) > API_URLS_MAX)
		return refuse(why, whylen, 400, "field \"urls\": at most %d URLs",
		    API_URLS_MAX);
	json_array_foreach(arr, i, v) {
		const char *url = json_string_value(v);
		int n;

		if (url == NULL)
			return refuse(why, whylen, 400, "field \"urls\" must hold "
			    "strings");
		if (!api_gateway_url_valid(url, reason, sizeof(reason)))
			return refuse(why, whylen, 400, "field \"urls\": %.64s: %s",
			    url, reason);
		for (size_t j = 0; j < i; j++)
			if (strcmp(json_string_value(json_array_get(arr, j)), url) == 0)
				return refuse(why, whylen, 400, "field \"urls\": "
				    "%.64s given twice", url);
		n = snprintf(b->urls + used, sizeof(b->urls) - used, "%s%s",
		    i > 0 ? " " : "", url);
		if (n < 0 || (size_t)n >= sizeof(b->urls) - used)
			return refuse(why, whylen, 400, "field \"urls\": longer than "
			    "%d bytes in all", STORE_URLS_MAX);
		used += (size_t)n;
	}
	b->nurls = json_array_size(arr);
	return 0;
}

static int
parse_kind(enum api_body_kind kind, struct api_body *b, char *why, size_t whylen)
{
	json_t *v;

	switch (kind) {
	case API_BODY_CLUSTER:
	case API_BODY_USER:
		if ((b->name = json_string_value(json_object_get(b->root, "name"))) == NULL)
			return refuse(why, whylen, 400, "field \"name\" (a string) is required");
		return kind == API_BODY_USER ? parse_clusters(b, why, whylen) : 0;
	case API_BODY_TOKENS:
		return parse_tokens(b, why, whylen);
	case API_BODY_URLS:
		return parse_urls(b, why, whylen);
	case API_BODY_KUBECONFIG:
		b->user = API_KUBECONFIG_DEFAULT_USER;
		if ((v = json_object_get(b->root, "user")) != NULL &&
		    (b->user = json_string_value(v)) == NULL)
			return refuse(why, whylen, 400, "field \"user\" must be a string");
		return 0;
	default:
		return refuse(why, whylen, 400, "no such body");
	}
}

int
api_body_parse(enum api_body_kind kind, const char *body, size_t len,
    int too_large, struct api_body *out, char *why, size_t whylen)
{
	int status;

	memset(out, 0, sizeof(*out));
	if (kind < 0 || kind >= API_BODY_KINDS)
		return refuse(why, whylen, 400, "no such body");
	if (too_large)
		return refuse(why, whylen, 413, "request body too large");
	if ((out->root = body_object(body, len, allowed_keys[kind], why, whylen)) == NULL)
		return 400;
	if ((status = parse_kind(kind, out, why, whylen)) != 0) {
		api_body_free(out);
		return status;
	}
	return 0;
}

void
api_body_free(struct api_body *b)
{
	json_decref(b->root);
	memset(b, 0, sizeof(*b));
}

int
api_query_param(const char *query, const char *key, char *out, size_t outlen)
{
	size_t klen = strlen(key);
	int found = -1;

	out[0] = '\0';
	for (const char *p = query; p != NULL && *p != '\0';) {
		const char *end = strchr(p, '&');
		size_t n = end != NULL ? (size_t)(end - p) : strlen(p);

		if (n > klen && strncmp(p, key, klen) == 0 && p[klen] == '=') {
			if (found == 0 || n - klen - 1 >= outlen) {
				out[0] = '\0';
				return -2;
			}
			memcpy(out, p + klen + 1, n - klen - 1);
			out[n - klen - 1] = '\0';
			found = 0;
		}
		p = end != NULL ? end + 1 : NULL;
	}
	return found;
}
