/*
 * srccount.h: how many of something each source address holds (TLS
 * handshake slots, tunnel handshakes, unauthenticated connections), so
 * that one source cannot take a whole shared pool (docs/0028).
 *
 * A source is the address part of a peer string as the gateway logs it
 * ("127.0.0.2:41234" -> "127.0.0.2", "[::1]:80" -> "[::1]"): behind a
 * --trusted-proxy that is the client's address from the PROXY header.
 * Not thread-safe: one table per loop.
 */
#ifndef TETHER_SRCCOUNT_H
#define TETHER_SRCCOUNT_H

#include <stddef.h>
#include <stdint.h>

struct srccount;

/* An empty table, or NULL when out of memory.  Free with srccount_free. */
struct srccount *srccount_new(void);
/* Frees the table and every entry.  NULL is fine. */
void srccount_free(struct srccount *t);
/* What peer's source holds now (0 if nothing).  Cost: one hash lookup. */
uint32_t srccount_get(const struct srccount *t, const char *peer);
/* Counts one more for peer's source unless it already holds cap (then -1,
 * nothing counted); -1 too when out of memory.  0 when counted: the
 * caller owes exactly one srccount_put with the same peer string. */
int srccount_take(struct srccount *t, const char *peer, uint32_t cap);
/* Gives one back (an entry that reaches 0 is freed).  A peer that holds
 * nothing is ignored. */
void srccount_put(struct srccount *t, const char *peer);
/* Sources holding something now (for logs and tests). */
size_t srccount_sources(const struct srccount *t);

#endif
