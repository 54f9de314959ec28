/*
 * api.h: the gateway's HTTP endpoints other than the tunnel: /healthz,
 * /readyz, /v1/ca and the admin API under /v1/ (JSON, bearer admin token),
 * and the bearer-token checks the dial endpoint shares.
 *
 * Transport-free: server.c collects a request and writes back the response,
 * so every route can be reasoned about (and tested) as a function.
 */
#ifndef TETHER_API_H
#define TETHER_API_H

#include <stddef.h>

#include "store.h"
#include "token.h"

struct gateway;

struct api_request {
	const char *method;          /* "GET", "POST", ... */
	const char *path;            /* "/v1/clusters", no query */
	const char *query;           /* "cluster=c-1&x=y" (decoded), or "" */
	const char *authorization;   /* the Authorization header, or "" */
	const char *body;            /* may be NULL when body_len is 0 */
	size_t body_len;
	int body_too_large;          /* the body exceeded the limit and was cut */
};

struct api_response {
	int status;
	const char *content_type;    /* static string */
	char *body;                  /* malloc'd; the server frees it */
	size_t body_len;
	const char *headers;         /* more header lines, "Name: value\r\n"...
	                                (static), or NULL */
};

void api_handle(struct gateway *gw, const struct api_request *req,
    struct api_response *resp);

/* Answers with v as one line of JSON (v taken; NULL: 500), or with
 * {"error": reason}.  For routes kept in other files (ui.c). */
struct json_t;
void api_respond_json(struct api_response *r, int status, struct json_t *v);
void api_respond_error(struct api_response *r, int status, const char *reason);

/*
 * Checks a bearer token ("Bearer ...") for the admin API: it must be a
 * live admin token.  Returns 0 and who it is ("admin:<token id>"), or the
 * HTTP status to refuse with and a reason: 401 for a missing, malformed,
 * unknown, revoked or expired token, 403 for a valid token of another kind
 * ("an admin token is required").
 */
int api_authenticate(struct gateway *gw, const char *authorization,
    char *principal, size_t plen, char *err, size_t errlen);

/*
 * Checks a bearer token for something done in one cluster (the dial
 * endpoint; later /k8s/clusters/ID): an admin token reaches every cluster,
 * a user token only the clusters it is scoped to.  Whether the cluster
 * exists is the caller's to check afterwards, so that an unknown cluster
 * and a cluster out of scope look the same to a user token (403).  Returns
 * 0 and the principal ("admin:<token id>" or "user:<name>"), or 401 (as
 * for api_authenticate), 403 (a valid user token not scoped to cluster) or
 * 500 (the store failed), with a reason.
 */
int api_authorize_cluster(struct gateway *gw, const char *authorization,
    const char *cluster, char *principal, size_t plen, char *err,
    size_t errlen);

/*
 * If authorization carries a user token (by its id; the secret is checked
 * later, by api_authorize_cluster) scoped to exactly one cluster, copies
 * that cluster and returns 0; else -1.
 */
int api_user_token_cluster(struct gateway *gw, const char *authorization,
    char *cluster, size_t clen);

/* The id of the bearer token in authorization (public: it may be logged
 * and kept), or -1 if there is none. */
int api_bearer_id(const char *authorization, char id[TOKEN_ID_LEN + 1]);

/*
 * For a connection that outlives its request (tetherctl forward): whether
 * the token it was authorized with, by id, still reaches cluster: not
 * revoked or expired since, still scoped.  Returns 0, or 401/403/500 with a
 * reason, as api_authorize_cluster.
 */
int api_recheck_cluster(struct gateway *gw, const char *token_id,
    const char *cluster, char *err, size_t errlen);

/*
 * Who may look at what, for read-only views open to any token holder (the
 * status page, GET /v1/status): an admin token sees every cluster (*admin
 * 1); a user token the clusters it is scoped to, copied into clusters
 * (*nclusters of them, at most STORE_TOKEN_CLUSTERS_MAX).  Returns 0 and
 * the principal, or 401 (as api_authenticate) or 500, with a reason.
 */
int api_viewer(struct gateway *gw, const char *authorization, char *principal,
    size_t plen, int *admin, char (*clusters)[STORE_ID_MAX + 1], size_t *nclusters,
    char *err, size_t errlen);

/* A WebSocket upgrade on a path other than /v1/connect (see server.h:
 * struct upgrade).  Must lead to upgrade_accept or upgrade_refuse. */
struct upgrade;
void api_upgrade(struct gateway *gw, const struct api_request *req,
    struct upgrade *u);

#endif
