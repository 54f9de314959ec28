/*
 * metrics_route.h: the gateway's /metrics text (its own families from
 * core/metrics.h, the stream metrics and the process metrics), served on
 * --metrics-listen (prom_http.h) and as GET /metrics on the main port.
 */
#ifndef TETHER_METRICS_ROUTE_H
#define TETHER_METRICS_ROUTE_H

#include <stddef.h>

/* The exposition text, malloc'd, with *len; NULL when out of memory.  The
 * signature is prom_render_fn's (arg: the gateway).  Loop 0 only (it
 * reads loop 0's server, store listener and lease state): --metrics-listen
 * serves from loop 0, and the route renders there (docs/0040).  Each
 * loop's tunnels are its `ntunnels` (an atomic): no walk of the agents. */
char *metrics_render(void *gw, size_t *len);

/* GET /metrics on the main port, for admin tokens (route.h). */
struct route;
extern const struct route metrics_route;

#endif
