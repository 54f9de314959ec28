/*
 * apibody.h: what a client sends the admin API and the dial endpoint, read
 * without the store or any I/O: the JSON bodies of the POST routes and
 * query parameters.  Pure functions of their input, so that
 * tests/fuzz/fuzz_api_body.c and fuzz_dial_query.c can run them on any
 * bytes; gateway/routes/api.c and dial.c act on the results.
 */
#ifndef TETHER_APIBODY_H
#define TETHER_APIBODY_H

#include <stddef.h>

#include <jansson.h>

#include "store.h"

#define API_TTL_DEFAULT  (24 * 3600)
#define API_TTL_MIN      1
#define API_TTL_MAX      (366 * 24 * 3600)
#define API_USES_MAX     1000000
#define API_KUBECONFIG_DEFAULT_USER "kubectl"
#define API_URLS_MAX     8     /* FRAME_MAX_URLS: a SETTINGS frame's */
#define API_URL_MAX      255   /* FRAME_URL_MAX */

enum api_body_kind {
	API_BODY_CLUSTER,	/* POST /v1/clusters {"name"} */
	API_BODY_TOKENS,	/* POST /v1/clusters/ID/tokens {"ttl_seconds","uses","approval"} */
	API_BODY_USER,		/* POST /v1/users {"name","clusters"} */
	API_BODY_KUBECONFIG,	/* POST /v1/clusters/ID/kubeconfig {"user"} */
	API_BODY_URLS,		/* POST /v1/gateway/urls {"urls"} */
	API_BODY_KINDS
};

/* A parsed body.  The strings point into root (api_body_free frees both).
 * Values are checked for their JSON type and range only: names and ids are
 * checked by the store. */
struct api_body {
	json_t *root;
	const char *name;		/* CLUSTER, USER: required */
	const char *user;		/* KUBECONFIG: default "kubectl" */
	long long ttl_seconds;		/* TOKENS: API_TTL_MIN..MAX, default a day */
	long long uses;			/* TOKENS: 1..API_USES_MAX, default 1 */
	int approval_manual;		/* TOKENS: "approval": "manual" (default "auto") */
	const char *clusters[STORE_TOKEN_CLUSTERS_MAX];	/* USER: 1..MAX ids */
	size_t nclusters;
	/* URLS: 0..API_URLS_MAX gateway URLs (api_gateway_url_valid), none
	 * twice, joined by spaces as the store keeps them (required, [] too) */
	char urls[STORE_URLS_MAX + 1];
	size_t nurls;
};

/*
 * Parses body (len bytes; too_large: the request was cut at the size
 * limit) as the JSON object kind wants: only its keys, no key twice, each
 * value of its type and range.  Returns 0 with *out filled (free with
 * api_body_free), or the HTTP status to answer (400, 413) with the reason
 * in why; *out is then empty.
 */
int api_body_parse(enum api_body_kind kind, const char *body, size_t len,
    int too_large, struct api_body *out, char *why, size_t whylen);
void api_body_free(struct api_body *b);

/*
 * Whether url is a gateway URL agents can dial: https://HOST[:PORT], an
 * origin (common/url.c's rules: no user, path, query or fragment), at most
 * API_URL_MAX bytes.  1, or 0 with the reason in why.
 */
int api_gateway_url_valid(const char *url, char *why, size_t whylen);

/*
 * The value of key in a decoded query "a=b&c=d", copied into out.  Returns
 * 0 if found once, -1 if absent, -2 if it appears more than once or does
 * not fit in out (refuse the request: never guess which one was meant).
 */
int api_query_param(const char *query, const char *key, char *out,
    size_t outlen);

#endif
