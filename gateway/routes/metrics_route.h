/*
 * metrics_route.h: the gateway's /metrics text (its own families from
 * core/metrics.h, the stream metrics and the process metrics), served on
 * --metrics-listen (prom_http.h) and as GET /metrics on the main port.
 */
#ifndef TETHER_METRICS_ROUTE_H
#define TETHER_METRICS_ROUTE_H

#include <stddef.h>

/* The exposition text, malloc'd, with *len; NULL when out of memory.  The
 * signature is prom_render_fn's (arg: the gateway).  Loop only. */
char *metrics_render(void *gw, size_t *len);

/* GET /metrics on the main port, for admin tokens (route.h). */
struct route;
extern const struct route metrics_route;

#endif
