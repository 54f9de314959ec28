/*
 * agentdir.c: the process's directory of held agents (see agentdir.h).
 *
 * Two hash tables with chaining over the same entries, as hub.c has: by
 * agent id and by cluster, AGENTDIR_BUCKETS each (with 20,000 agents about
 * 5 per id chain).  One mutex guards both, the generation counter and the
 * pick rotors (one per calling loop, so one loop's turns are its own).
 */
#include "agentdir.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define AGENTDIR_BUCKETS 4096
#define AGENTDIR_ROTORS  64    /* loops 64 apart share a rotor */

struct agentdir_node {
	struct agentdir_node *next;    /* same id bucket */
	struct agentdir_node *cnext;   /* same cluster bucket */
	struct agentdir_entry e;
};

struct agentdir {
	pthread_mutex_t mu;
	struct agentdir_node *buckets[AGENTDIR_BUCKETS];   /* by agent id */
	struct agentdir_node *cbuckets[AGENTDIR_BUCKETS];  /* by cluster */
	size_t count;
	uint64_t generation;           /* the last one given */
	/* Spread picks over a cluster's agents: one per calling loop (index
	 * modulo AGENTDIR_ROTORS), the last for AGENTDIR_NO_LOOP. */
	unsigned rotors[AGENTDIR_ROTORS + 1];
};

static size_t
bucket(const char *s)
{
	uint32_t h = 2166136261u; /* FNV-1a */

	for (; *s != '\0'; s++)
		h = (h ^ (uint8_t)*s) * 16777619u;
	return h % AGENTDIR_BUCKETS;
}

struct agentdir *
agentdir_new(void)
{
	struct agentdir *d = calloc(1, sizeof(*d));

	if (d == NULL)
		return NULL;
	if (pthread_mutex_init(&d->mu, NULL) != 0) {
		free(d);
		return NULL;
	}
	return d;
}

void
agentdir_free(struct agentdir *d)
{
	if (d == NULL)
		return;
	for (size_t i = 0; i < AGENTDIR_BUCKETS; i++) {
		struct agentdir_node *n = d->buckets[i], *next;
		for (; n != NULL; n = next) {
			next = n->next;
			free(n);
		}
	}
	pthread_mutex_destroy(&d->mu);
	free(d);
}

/* Under mu: agent_id's node, or NULL. */
static struct agentdir_node *
lookup(struct agentdir *d, const char *agent_id)
{
	struct agentdir_node *n = d->buckets[bucket(agent_id)];

	while (n != NULL && strcmp(n->e.agent_id, agent_id) != 0)
		n = n->next;
	return n;
}

/* Under mu: 1 if n is still the tunnel at `at`. */
static int
is_at(const struct agentdir_node *n, struct agentdir_place at)
{
	return n != NULL && n->e.at.loop == at.loop &&
	    n->e.at.generation == at.generation;
}

uint64_t
agentdir_add(struct agentdir *d, const char *agent_id, const char *cluster,
    const char *node, bool active, unsigned loop, struct agentdir_place *old)
{
	struct agentdir_node *n;
	struct agentdir_place was = { 0, 0 };
	uint64_t gen;
	size_t b;

	pthread_mutex_lock(&d->mu);
	gen = ++d->generation;
	if ((n = lookup(d, agent_id)) != NULL) {
		was = n->e.at;
		/* The same agent: its cluster is its record's and stays. */
	} else {
		if ((n = calloc(1, sizeof(*n))) == NULL)
			abort(); /* a few hundred bytes: nothing sensible without them */
		snprintf(n->e.agent_id, sizeof(n->e.agent_id), "%s", agent_id);
		snprintf(n->e.cluster, sizeof(n->e.cluster), "%s", cluster);
		b = bucket(n->e.agent_id);
		n->next = d->buckets[b];
		d->buckets[b] = n;
		b = bucket(n->e.cluster);
		n->cnext = d->cbuckets[b];
		d->cbuckets[b] = n;
		d->count++;
	}
	snprintf(n->e.node, sizeof(n->e.node), "%s", node);
	n->e.active = active;
	n->e.since = (int64_t)time(NULL);
	n->e.at.loop = loop;
	n->e.at.generation = gen;
	pthread_mutex_unlock(&d->mu);
	if (old != NULL)
		*old = was;
	return gen;
}

int
agentdir_remove(struct agentdir *d, const char *agent_id,
    struct agentdir_place at)
{
	struct agentdir_node **pp, *n;

	pthread_mutex_lock(&d->mu);
	for (pp = &d->buckets[bucket(agent_id)]; *pp != NULL; pp = &(*pp)->next)
		if (strcmp((*pp)->e.agent_id, agent_id) == 0)
			break;
	if (!is_at(*pp, at)) {
		pthread_mutex_unlock(&d->mu);
		return 0;
	}
	n = *pp;
	*pp = n->next;
	for (pp = &d->cbuckets[bucket(n->e.cluster)]; *pp != n; pp = &(*pp)->cnext)
		;
	*pp = n->cnext;
	d->count--;
	pthread_mutex_unlock(&d->mu);
	free(n);
	return 1;
}

int
agentdir_update(struct agentdir *d, const char *agent_id,
    struct agentdir_place at, const char *node, bool active)
{
	struct agentdir_node *n;
	int ok;

	pthread_mutex_lock(&d->mu);
	n = lookup(d, agent_id);
	if ((ok = is_at(n, at))) {
		snprintf(n->e.node, sizeof(n->e.node), "%s", node);
		n->e.active = active;
	}
	pthread_mutex_unlock(&d->mu);
	return ok;
}

int
agentdir_find(struct agentdir *d, const char *agent_id,
    struct agentdir_entry *out)
{
	struct agentdir_node *n;

	pthread_mutex_lock(&d->mu);
	if ((n = lookup(d, agent_id)) != NULL && out != NULL)
		*out = n->e;
	pthread_mutex_unlock(&d->mu);
	return n != NULL;
}

int64_t
agentdir_since(struct agentdir *d, const char *agent_id)
{
	struct agentdir_node *n;
	int64_t since;

	pthread_mutex_lock(&d->mu);
	n = lookup(d, agent_id);
	since = n != NULL ? n->e.since : 0;
	pthread_mutex_unlock(&d->mu);
	return since;
}

size_t
agentdir_count(struct agentdir *d)
{
	size_t n;

	pthread_mutex_lock(&d->mu);
	n = d->count;
	pthread_mutex_unlock(&d->mu);
	return n;
}

size_t
agentdir_count_cluster(struct agentdir *d, const char *cluster)
{
	size_t k = 0;

	pthread_mutex_lock(&d->mu);
	for (struct agentdir_node *n = d->cbuckets[bucket(cluster)]; n != NULL;
	    n = n->cnext)
		k += strcmp(n->e.cluster, cluster) == 0;
	pthread_mutex_unlock(&d->mu);
	return k;
}

/* 1 if e is an agent of cluster (of node, when non-NULL). */
static int
matches(const struct agentdir_entry *e, const char *cluster, const char *node)
{
	return strcmp(e->cluster, cluster) == 0 &&
	    (node == NULL || strcmp(e->node, node) == 0);
}

/* The rotor of picks from loop near. */
static unsigned *
rotor_of(struct agentdir *d, unsigned near)
{
	return &d->rotors[near == AGENTDIR_NO_LOOP ? AGENTDIR_ROTORS :
	    near % AGENTDIR_ROTORS];
}

/* 1 if n may be picked from loop near: active, matching and, when
 * near_only, on that loop. */
static int
takes(const struct agentdir_node *n, const char *cluster, const char *node,
    unsigned near, int near_only)
{
	return n->e.active && matches(&n->e, cluster, node) &&
	    (!near_only || n->e.at.loop == near);
}

/*
 * Under mu: the pick from loop near (agentdir_pick), or NULL; *seen as
 * agentdir_pick's *connected.  The rotor turns when there was a choice
 * and turn_near (the pool was near's own agents) or turn_all (it was all
 * the cluster's active agents) says so.  Two walks of one cluster's
 * chain: count the agents each pool holds, then take the rotor's turn in
 * the pool.
 */
static struct agentdir_node *
pick_locked(struct agentdir *d, const char *cluster, const char *node,
    unsigned near, int turn_near, int turn_all, int *seen)
{
	struct agentdir_node *chain = d->cbuckets[bucket(cluster)];
	struct agentdir_node *first = NULL, *first_near = NULL;
	size_t nactive = 0, nnear = 0, k, want;
	int near_only, turn;
	unsigned *rotor;

	*seen = 0;
	for (struct agentdir_node *n = chain; n != NULL; n = n->cnext) {
		if (!matches(&n->e, cluster, node))
			continue;
		*seen = 1;
		if (!n->e.active)
			continue;
		if (first == NULL)
			first = n;
		nactive++;
		if (near != AGENTDIR_NO_LOOP && n->e.at.loop == near) {
			if (first_near == NULL)
				first_near = n;
			nnear++;
		}
	}
	near_only = nnear > 0;
	turn = near_only ? turn_near : turn_all;
	k = near_only ? nnear : nactive;
	if (k <= 1)
		return near_only ? first_near : first;
	rotor = rotor_of(d, near);
	want = (turn ? (*rotor)++ : *rotor) % k;
	for (struct agentdir_node *n = chain; n != NULL; n = n->cnext)
		if (takes(n, cluster, node, near, near_only) && want-- == 0)
			return n;
	return NULL; /* not reached: the chain holds k such agents */
}

int
agentdir_pick(struct agentdir *d, const char *cluster, const char *node,
    unsigned near, struct agentdir_entry *out, int *connected)
{
	struct agentdir_node *got;
	int seen;

	pthread_mutex_lock(&d->mu);
	got = pick_locked(d, cluster, node, near, 1, 1, &seen);
	if (got != NULL && out != NULL)
		*out = got->e;
	pthread_mutex_unlock(&d->mu);
	if (connected != NULL)
		*connected = seen;
	return got != NULL;
}

int
agentdir_land(struct agentdir *d, const char *cluster, const char *node,
    unsigned near, unsigned *loop)
{
	struct agentdir_node *got;
	int seen;

	pthread_mutex_lock(&d->mu);
	/* An agent on near: stay, and leave near's turn to the pick there
	 * (turning it here too would skip every other agent of near). */
	got = pick_locked(d, cluster, node, near, 0, 1, &seen);
	if (got != NULL)
		*loop = got->e.at.loop;
	pthread_mutex_unlock(&d->mu);
	return got != NULL;
}

size_t
agentdir_loops(struct agentdir *d, const char *cluster, const char *node,
    uint64_t *mask)
{
	size_t n = 0;

	*mask = 0;
	pthread_mutex_lock(&d->mu);
	for (struct agentdir_node *a = d->cbuckets[bucket(cluster)]; a != NULL;
	    a = a->cnext) {
		if (!a->e.active || !matches(&a->e, cluster, node))
			continue;
		n++;
		if (a->e.at.loop < 64)
			*mask |= UINT64_C(1) << a->e.at.loop;
	}
	pthread_mutex_unlock(&d->mu);
	return n;
}

size_t
agentdir_foreach(struct agentdir *d,
    void (*fn)(const struct agentdir_entry *e, void *arg), void *arg)
{
	size_t k = 0;

	pthread_mutex_lock(&d->mu);
	for (size_t i = 0; i < AGENTDIR_BUCKETS; i++)
		for (struct agentdir_node *n = d->buckets[i]; n != NULL;
		    n = n->next, k++)
			fn(&n->e, arg);
	pthread_mutex_unlock(&d->mu);
	return k;
}
