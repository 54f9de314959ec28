/*
 * authcache.c: a small direct-mapped table of proven (token, cluster)
 * pairs (see authcache.h).  A collision simply replaces the older entry.
 */
#include "authcache.h"

#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include <openssl/crypto.h>

#define AUTHCACHE_SLOTS 512

struct authcache_entry {
	char token_id[TOKEN_ID_LEN + 1];
	char cluster[STORE_ID_MAX + 1];
	struct store_token rec;
	int64_t until_ms;            /* 0: empty */
};

static struct authcache_entry slots[AUTHCACHE_SLOTS];

static int64_t
now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static struct authcache_entry *
slot_for(const char *token_id, const char *cluster)
{
	uint32_t h = 2166136261u;  /* FNV-1a over "id\0cluster" */

	for (const char *p = token_id; *p != '\0'; p++)
		h = (h ^ (uint8_t)*p) * 16777619u;
	h = (h ^ 0) * 16777619u;
	for (const char *p = cluster; *p != '\0'; p++)
		h = (h ^ (uint8_t)*p) * 16777619u;
	return &slots[h % AUTHCACHE_SLOTS];
}

int
authcache_get(const char *token_id, const char *cluster, struct store_token *rec)
{
	struct authcache_entry *e = slot_for(token_id, cluster);

	if (e->until_ms == 0 || e->until_ms < now_ms() ||
	    strcmp(e->token_id, token_id) != 0 || strcmp(e->cluster, cluster) != 0)
		return 0;
	*rec = e->rec;
	return 1;
}

void
authcache_put(const char *token_id, const char *cluster, const struct store_token *rec)
{
	struct authcache_entry *e = slot_for(token_id, cluster);

	if (strlen(token_id) > TOKEN_ID_LEN || strlen(cluster) > STORE_ID_MAX)
		return;
	snprintf(e->token_id, sizeof(e->token_id), "%s", token_id);
	snprintf(e->cluster, sizeof(e->cluster), "%s", cluster);
	e->rec = *rec;
	e->until_ms = now_ms() + AUTHCACHE_TTL_MS;
}

void
authcache_clear(void)
{
	OPENSSL_cleanse(slots, sizeof(slots));
}
