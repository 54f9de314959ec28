/*
 * backoff.h: when the agent tries the gateway again, the one rule for the
 * tunnel's redial (agent_tunnel.c) and for `join`'s retries (join.c):
 * exponential backoff with jitter after a fault that said nothing, or the
 * moment the gateway named (a 503's Retry-After, an ERROR's
 * retry_after_ms), bounded, plus a jitter of the agent's own.  The draws
 * come from the CSPRNG (random_bytes), so agents cut off together spread
 * out.  Pure arithmetic on the caller's state: no clock, no I/O.
 */
#ifndef TETHER_CLIENT_BACKOFF_H
#define TETHER_CLIENT_BACKOFF_H

#include <stdint.h>

#define AGENT_BACKOFF_MIN_MS 500
#define AGENT_BACKOFF_MAX_MS 30000
/* The cap after a gateway answered "unavailable" or "timeout": it is up
 * and waits for its store, so the agent comes back within seconds of the
 * store's return, not after a network-sized backoff. */
#define AGENT_BACKOFF_RETRY_MAX_MS 5000
/* A gateway that turns a dial away for now says when to come back
 * (Retry-After, an ERROR's retry_after_ms: docs/interface.md): the agent
 * waits that long, at most AGENT_RETRY_AFTER_MAX_MS (a gateway's mistake
 * cannot park it for a day), plus its own jitter in
 * [0, AGENT_RETRY_AFTER_JITTER_MS): the header's whole seconds spread over
 * the second that follows. */
#define AGENT_RETRY_AFTER_MAX_MS    60000
#define AGENT_RETRY_AFTER_JITTER_MS 1000

/*
 * The next wait of the exponential backoff.  *backoff_ms (0 before the
 * first fault; the caller sets it back to 0 after a success) becomes
 * AGENT_BACKOFF_MIN_MS, then doubles on each call up to cap_ms (0:
 * AGENT_BACKOFF_MAX_MS); the wait returned is drawn uniformly from
 * [*backoff_ms / 2, *backoff_ms].
 */
uint32_t backoff_next(uint32_t *backoff_ms, uint32_t cap_ms);

/*
 * The wait for a gateway that said to come back in told_ms: told_ms bounded
 * by AGENT_RETRY_AFTER_MAX_MS, plus a jitter drawn from
 * [0, AGENT_RETRY_AFTER_JITTER_MS).  *bounded (if not NULL) gets the
 * bounded told_ms: the moment before which the gateway asked not to come
 * back.
 */
uint32_t backoff_told(uint32_t told_ms, uint32_t *bounded);

#endif
