/*
 * api.h: the gateway's HTTP endpoints other than the tunnel: /healthz,
 * /readyz, /v1/ca and the admin API under /v1/ (JSON, bearer admin token;
 * who may is access.h's).
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

/* A WebSocket upgrade on a path other than /v1/connect (see server.h:
 * struct upgrade).  Must lead to upgrade_accept or upgrade_refuse. */
struct upgrade;
void api_upgrade(struct gateway *gw, const struct api_request *req,
    struct upgrade *u);

#endif
