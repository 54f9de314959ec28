/*
 * hub.c: connected agents by id (see hub.h).
 *
 * Two hash tables with chaining over the same entries: by agent id (every
 * admin call that reports "connected", every session that enters or
 * leaves) and by cluster (every dial and /k8s request picks an agent of
 * one cluster).  Each lookup costs O(entries in one chain): about 1 by id,
 * about the cluster's agents by cluster, with 1000s of agents.
 */
#include "hub.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define HUB_BUCKETS 1024
#define HUB_ID_MAX 32

struct hub_entry {
	struct hub_entry *next;    /* same id bucket */
	struct hub_entry *cnext;   /* same cluster bucket */
	char agent_id[HUB_ID_MAX];
	char cluster[HUB_ID_MAX];
	struct session *session;
	int64_t since;             /* Unix seconds: when this tunnel came up */
};

struct hub {
	const struct hub_ops *ops;
	struct hub_entry *buckets[HUB_BUCKETS];    /* by agent id */
	struct hub_entry *cbuckets[HUB_BUCKETS];   /* by cluster */
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
hub_new(const struct hub_ops *ops)
{
	struct hub *h = calloc(1, sizeof(struct hub));

	if (h != NULL)
		h->ops = ops;
	return h;
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
	b = hub_bucket(e->cluster);
	e->cnext = h->cbuckets[b];
	h->cbuckets[b] = e;
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
		for (pp = &h->cbuckets[hub_bucket(e->cluster)]; *pp != e;
		    pp = &(*pp)->cnext)
			;
		*pp = e->cnext;
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

	for (struct hub_entry *e = h->cbuckets[hub_bucket(cluster)]; e != NULL;
	    e = e->cnext)
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

void
hub_foreach_id(struct hub *h, void (*fn)(const char *agent_id, void *), void *arg)
{
	for (size_t i = 0; i < HUB_BUCKETS; i++)
		for (struct hub_entry *e = h->buckets[i]; e != NULL; e = e->next)
			fn(e->agent_id, arg);
}

size_t
hub_send_settings(struct hub *h)
{
	size_t n = 0;

	for (size_t i = 0; i < HUB_BUCKETS; i++)
		for (struct hub_entry *e = h->buckets[i]; e != NULL; e = e->next, n++)
			h->ops->send_settings(e->session);
	return n;
}

/* 1 if e is an agent of cluster (of node, when non-NULL). */
static int
hub_matches(const struct hub *h, const struct hub_entry *e, const char *cluster,
    const char *node)
{
	return strcmp(e->cluster, cluster) == 0 &&
	    (node == NULL || strcmp(h->ops->node(e->session), node) == 0);
}

struct session *
hub_pick(struct hub *h, const char *cluster, const char *node, int *connected)
{
	struct hub_entry *chain = h->cbuckets[hub_bucket(cluster)];
	struct session *first = NULL;
	size_t nactive = 0, want;

	if (connected != NULL)
		*connected = 0;
	/* Two walks of one cluster's chain: count the active agents, then
	 * take the rotor's turn among them. */
	for (struct hub_entry *e = chain; e != NULL; e = e->cnext) {
		if (!hub_matches(h, e, cluster, node))
			continue;
		if (connected != NULL)
			*connected = 1;
		if (!h->ops->is_active(e->session))
			continue;
		if (first == NULL)
			first = e->session;
		nactive++;
	}
	if (nactive <= 1)
		return first;
	want = h->rotor++ % nactive;
	for (struct hub_entry *e = chain; e != NULL; e = e->cnext)
		if (hub_matches(h, e, cluster, node) && h->ops->is_active(e->session) &&
		    want-- == 0)
			return e->session;
	return NULL;
}
