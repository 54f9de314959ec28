/*
 * authcache.h: bearer tokens recently proven for a cluster.
 *
 * Every /k8s request and every dial would otherwise cost two store queries
 * (the token's record, then its scope); under load that was a quarter of
 * the gateway's CPU.  An entry remembers that token ID was good for CLUSTER
 * together with the token's record; the secret itself is still hashed and
 * compared, in constant time, on every request.  Entries live
 * AUTHCACHE_TTL_MS, and any revocation made through this gateway clears
 * them all at once, so a revoked token stops working immediately here and
 * within the TTL on other replicas sharing the store.
 */
#ifndef TETHER_AUTHCACHE_H
#define TETHER_AUTHCACHE_H

#include "store.h"

#define AUTHCACHE_TTL_MS 2000

/* 1 and *rec if (token_id, cluster) was proven within the TTL, else 0. */
int authcache_get(const char *token_id, const char *cluster, struct store_token *rec);
void authcache_put(const char *token_id, const char *cluster, const struct store_token *rec);
/* Forgets everything (after a revocation). */
void authcache_clear(void);

#endif
