/*
 * hub.c: connected agents by id (see hub.h).
 *
 * A hash table with chaining: 1000s of agents, looked up on every admin
 * call that reports "connected" and on every stream open later.
 */
#include "hub.h"

#include "session.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define HUB_BUCKETS 1024
#define HUB_ID_MAX 32

struct hub_entry {
	struct hub_entry *next;
	char agent_id[HUB_ID_MAX];
	char cluster[HUB_ID_MAX];
	struct session *session;
	int64_t since;             /* Unix seconds: when this tunnel came up */
};

struct hub {
	struct hub_entry *buckets[HUB_BUCKETS];
	size_t count;
	unsigned rotor;            /* spreads hub_pick over a cluster's agents */
};

static size_t
hub_bucket(const char *id)
{
	uint32_t h = 2166136261u; /* FNV-1a */

	for (; *id != '\0'; id++)
		h = (h ^ (uint8_t)*id) * 16777619u;
	return h % HUB_BUCKETS;
}

struct hub *
hub_new(void)
{
	return calloc(1, sizeof(struct hub));
}

void
hub_free(struct hub *h)
{
	if (h == NULL)
		return;
	for (size_t i = 0; i < HUB_BUCKETS; i++) {
		struct hub_entry *e = h->buckets[i], *next;
		for (; e != NULL; e = next) {
			next = e->next;
			free(e);
		}
	}
	free(h);
}

static struct hub_entry *
hub_lookup(struct hub *h, const char *agent_id)
{
	struct hub_entry *e = h->buckets[hub_bucket(agent_id)];

	while (e != NULL && strcmp(e->agent_id, agent_id) != 0)
		e = e->next;
	return e;
}

struct session *
hub_add(struct hub *h, const char *agent_id, const char *cluster, struct session *s)
{
	struct hub_entry *e = hub_lookup(h, agent_id);
	struct session *old;
	size_t b;

	if (e != NULL) {
		old = e->session;
		e->session = s;
		e->since = (int64_t)time(NULL);
		return old;
	}
	e = calloc(1, sizeof(*e));
	if (e == NULL)
		abort(); /* a few dozen bytes: nothing sensible to do without them */
	snprintf(e->agent_id, sizeof(e->agent_id), "%s", agent_id);
	snprintf(e->cluster, sizeof(e->cluster), "%s", cluster);
	e->session = s;
	e->since = (int64_t)time(NULL);
	b = hub_bucket(agent_id);
	e->next = h->buckets[b];
	h->buckets[b] = e;
	h->count++;
	return NULL;
}

void
hub_remove(struct hub *h, const char *agent_id, struct session *s)
{
	struct hub_entry **pp = &h->buckets[hub_bucket(agent_id)];

	for (; *pp != NULL; pp = &(*pp)->next) {
		struct hub_entry *e = *pp;
		if (strcmp(e->agent_id, agent_id) != 0)
			continue;
		if (e->session != s)
			return;
		*pp = e->next;
		free(e);
		h->count--;
		return;
	}
}

struct session *
hub_find(struct hub *h, const char *agent_id)
{
	struct hub_entry *e = hub_lookup(h, agent_id);

	return e != NULL ? e->session : NULL;
}

int64_t
hub_connected_since(struct hub *h, const char *agent_id)
{
	struct hub_entry *e = hub_lookup(h, agent_id);

	return e != NULL ? e->since : 0;
}

size_t
hub_count_cluster(struct hub *h, const char *cluster)
{
	size_t n = 0;

	for (size_t i = 0; i < HUB_BUCKETS; i++)
		for (struct hub_entry *e = h->buckets[i]; e != NULL; e = e->next)
			if (strcmp(e->cluster, cluster) == 0)
				n++;
	return n;
}

size_t
hub_count(struct hub *h)
{
	return h->count;
}

void
hub_foreach(struct hub *h, void (*fn)(struct session *, void *), void *arg)
{
	for (size_t i = 0; i < HUB_BUCKETS; i++)
		for (struct hub_entry *e = h->buckets[i]; e != NULL; e = e->next)
			fn(e->session, arg);
}

struct session *
hub_pick(struct hub *h, const char *cluster, const char *node, int *connected)
{
	struct session *first = NULL, *chosen = NULL;
	size_t nactive = 0, want;

	if (connected != NULL)
		*connected = 0;
	for (int pass = 0; pass < 2 && chosen == NULL; pass++) {
		size_t seen = 0;
		want = pass == 1 && nactive > 0 ? h->rotor++ % nactive : 0;
		for (size_t i = 0; i < HUB_BUCKETS && chosen == NULL; i++) {
			for (struct hub_entry *e = h->buckets[i]; e != NULL; e = e->next) {
				if (strcmp(e->cluster, cluster) != 0 ||
				    (node != NULL && strcmp(session_node(e->session), node) != 0))
					continue;
				if (connected != NULL)
					*connected = 1;
				if (!session_is_active(e->session))
					continue;
				if (pass == 0) {
					if (first == NULL)
						first = e->session;
					nactive++;
				} else if (seen++ == want) {
					chosen = e->session;
					break;
				}
			}
		}
		if (pass == 0 && nactive <= 1)
			return first;
	}
	return chosen;
}
