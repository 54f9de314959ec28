/*
 * prom_http.h: a plain-HTTP endpoint that serves /metrics only, for
 * `--metrics-listen ADDR` (gateway and agent): no TLS and no token, so bind
 * it to an address only the monitoring system reaches.
 *
 * On the process's loop: one request per connection (GET or HEAD, a head of
 * at most 8 KiB, whole within 5 s of the accept, else the connection is
 * closed), answered with `Connection: close`; at most 64 connections at
 * once (more are closed at accept); accept failures pause the listener for
 * a second and are logged once per 10 s with a count.
 */
#ifndef TETHER_PROM_HTTP_H
#define TETHER_PROM_HTTP_H

#include <stddef.h>

struct event_base;
struct prom_http;

/*
 * The text of one scrape: malloc'd (the endpoint frees it) with *len set,
 * or NULL when it cannot be made (the scrape gets 500).
 */
typedef char *prom_render_fn(void *arg, size_t *len);

/*
 * Listens on addr ("IPv4:PORT" or "[IPv6]:PORT"; port 0: any free one) on
 * base and answers GET/HEAD /metrics with render's text; any other path
 * 404, any other method 405.  Returns NULL with err on failure.
 */
struct prom_http *prom_http_start(struct event_base *base, const char *addr,
    prom_render_fn *render, void *arg, char *err, size_t errlen);
/* The port actually bound. */
int prom_http_port(const struct prom_http *p);
/* Closes the listener and its connections.  NULL is fine. */
void prom_http_free(struct prom_http *p);

/* The Content-Type of the text format. */
#define PROM_CONTENT_TYPE "text/plain; version=0.0.4; charset=utf-8"

#endif
