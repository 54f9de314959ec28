/*
 * gwlist.h: the gateway URLs an agent dials, in order, and which one it is
 * on (docs/0031-moving-the-gateway.md).
 *
 * The list is the operator's (SETTINGS "urls" over the tunnel, kept in
 * state.json's gateway_urls) followed by the URL the node joined with, when
 * it is not one of them: the join URL stays the last resort, so a list with
 * a typo, or one naming only gateways this node cannot reach, never strands
 * it.  With no list pushed, the join URL alone.
 *
 * The agent dials the current URL; a connection that ends before its
 * tunnel was established moves it to the next one, wrapping around
 * (agent_tunnel.c keeps its backoff between dials); a tunnel lost after it
 * was established is redialled on the same URL first.
 *
 * Strings are the list's own copies: a few hundred bytes per agent.
 */
#ifndef TETHER_GWLIST_H
#define TETHER_GWLIST_H

#include <stdbool.h>
#include <stddef.h>

#include "frame.h"

#define GWLIST_MAX (FRAME_MAX_URLS + 1)

struct gwlist {
	char *url[GWLIST_MAX];  /* pushed[0..npushed), then the join URL if
	                         * not among them */
	size_t n;
	size_t npushed;         /* what the gateway pushed (duplicates gone) */
	size_t cur;             /* the one dialled now, < n */
	char *join;             /* the join URL */
};

/*
 * Makes l the pushed URLs (at most FRAME_MAX_URLS, duplicates dropped,
 * syntax checked by the caller) followed by join (non-empty).  The URL
 * dialled now stays current when it is still in the list; otherwise the
 * first one is.  l must be zeroed before its first use.  0, or -1 when out
 * of memory (l unchanged).
 */
int gwlist_set(struct gwlist *l, const char *const *pushed, size_t npushed,
    const char *join);

/* Frees l's strings; l may be set again after. */
void gwlist_clear(struct gwlist *l);

/* The URL to dial now (never NULL once set). */
const char *gwlist_current(const struct gwlist *l);

/* Moves to the next URL (the first after the last). */
void gwlist_next(struct gwlist *l);

/* Whether urls[0..n) holds, after dropping duplicates, exactly the pushed
 * list l keeps, in the same order. */
bool gwlist_same_pushed(const struct gwlist *l, const char *const *urls,
    size_t n);

#endif
