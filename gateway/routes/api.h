/*
 * api.h: the gateway's HTTP endpoints other than the tunnel: /healthz,
 * /readyz, /v1/ca and the admin API under /v1/ (JSON, bearer admin token;
 * who may is access.h's).
 *
 * Transport-free: server.c collects a request and writes back the response
 * (route.h), so every endpoint can be reasoned about as a function.
 */
#ifndef TETHER_API_H
#define TETHER_API_H

struct route;

/* The admin API as a request route (route.h): every path no other route
 * takes, so it stands last in the table. */
extern const struct route api_route;

#endif
