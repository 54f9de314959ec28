/*
 * notices.h: cluster-wide effects (docs/0021).  What any replica changes
 * in a shared PostgreSQL store takes effect here within a second: a token
 * revoked anywhere empties this replica's caches of proven tokens, every
 * loop's (access_revoke_broadcast); an agent whose state changed anywhere and whose tunnel
 * this replica holds is re-read (on the store thread) and acted on
 * (session_record_changed: a revoked agent's tunnel closes, an approval or
 * a verification reaches the agent).  A revocation also ends the streams
 * open here that it took the right from (livestreams.h, docs/0027): a
 * token's at its notice, an agent's once its re-read record says
 * revoked; on every loop of this process (docs/0040), the count logged
 * once all of them ended theirs.
 * Heard through store_listen.h; after the listener was down (a store
 * restart), anything may have been missed: the token cache is emptied,
 * every agent held here is re-read, and so is the token of every stream
 * open on any loop here (gathered from each loop first: loop_gather; a
 * revoked one's streams end).
 *
 * Also the store's health for /readyz: whether this replica reaches its
 * store (the listener, the lease renewals of presence.h).
 *
 * A gateway setting changed anywhere ("setting:NAME", migration 8) is
 * read again and, if it differs, pushed to the agents held here
 * (agents/settings.h); so is it after the listener was down.
 *
 * Costs: per notice about a token, one emptying of the 512-slot cache; per
 * notice about an agent held here, one store read (a job on the store
 * thread); after a reconnect, one job reading every agent held here
 * (O(agents held) reads, one record each in memory until done).  A notice
 * about a tunnel (migration 5) or an agent, and a reconnect, also read the
 * presence directory again (presence_refresh: coalesced, at most one read
 * queued).  Ending a revocation's streams: O(live streams) on each loop,
 * one message to each, no store call.  After a reconnect, one more job reading each distinct
 * token of the open streams.  Nothing for a SQLite store (a single
 * gateway).
 */
#ifndef TETHER_NOTICES_H
#define TETHER_NOTICES_H

#include <stddef.h>

struct gateway;

/* Starts hearing url's store on gw->base (gw->storew must run).  0, or -1
 * with err (out of memory). */
int notices_start(struct gateway *gw, const char *url, char *err, size_t errlen);

/* Stops hearing; re-reads still out are only freed when they end.
 * Idempotent. */
void notices_stop(struct gateway *gw);

/* NULL while this replica reaches its store; else why not, for /readyz
 * ("the store listener: connection lost: ..."), written into buf. */
const char *notices_store_problem(struct gateway *gw, char *buf, size_t buflen);

#endif
