/*
 * agentdir.c (tether-agentdir-bench): what a pick costs through the
 * process's agent directory (gateway/agents/agentdir.h) against the hub it
 * stands beside (hub.h), for CLUSTERS clusters of AGENTS agents each:
 * agentdir_pick and hub_pick from one thread, agentdir_find by id, and
 * agentdir_pick from THREADS threads at once (the directory's one mutex
 * contended, as loops will when tunnels live on every loop, docs/0040).
 *
 *   tether-agentdir-bench [CLUSTERS [AGENTS [THREADS [PICKS]]]]
 *
 * Defaults 100 10 2 1000000.  Prints one line per measure, ns per call
 * (the cluster or id key is formatted outside the timed loop).
 */
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "agentdir.h"
#include "hub.h"

/* The hub sees sessions only through hub_ops: every one active. */
struct session {
	const char *node;
};

static const char *
fake_node(const struct session *s)
{
	return s->node;
}

static int
fake_active(const struct session *s)
{
	(void)s;
	return 1;
}

static void
fake_settings(struct session *s)
{
	(void)s;
}

static const struct hub_ops ops = { fake_node, fake_active, fake_settings };

struct run {
	struct agentdir *d;
	char (*keys)[32];          /* cluster ids, one per pick slot */
	size_t nkeys;
	long picks;
	double ns;                 /* per pick, this thread */
};

static double
now_s(void)
{
	struct timespec t;

	clock_gettime(CLOCK_MONOTONIC, &t);
	return (double)t.tv_sec + (double)t.tv_nsec / 1e9;
}

static void *
pick_loop(void *arg)
{
	struct run *r = arg;
	struct agentdir_entry e;
	double t0 = now_s();
	long got = 0;

	for (long i = 0; i < r->picks; i++)
		got += agentdir_pick(r->d, r->keys[(size_t)i % r->nkeys], NULL,
		    AGENTDIR_NO_LOOP, &e, NULL);
	r->ns = (now_s() - t0) / (double)r->picks * 1e9;
	if (got != r->picks)
		fprintf(stderr, "agentdir-bench: %ld picks found nothing\n",
		    r->picks - got);
	return NULL;
}

int
main(int argc, char **argv)
{
	int nclusters = argc > 1 ? atoi(argv[1]) : 100;
	int per = argc > 2 ? atoi(argv[2]) : 10;
	int nthreads = argc > 3 ? atoi(argv[3]) : 2;
	long picks = argc > 4 ? atol(argv[4]) : 1000000;
	struct agentdir *d = agentdir_new();
	struct hub *h = hub_new(&ops);
	size_t n = (size_t)nclusters * (size_t)per;
	struct session *s = calloc(n > 0 ? n : 1, sizeof(*s));
	char (*ids)[32] = calloc(n > 0 ? n : 1, sizeof(*ids));
	char (*keys)[32] = calloc((size_t)nclusters, sizeof(*keys));
	struct run one, *runs = calloc((size_t)nthreads, sizeof(*runs));
	pthread_t *t = calloc((size_t)nthreads, sizeof(*t));
	struct agentdir_entry e;
	double t0, sum = 0;
	long got = 0;

	if (nclusters < 1 || per < 1 || nthreads < 1 || picks < 1 || d == NULL ||
	    h == NULL || s == NULL || ids == NULL || keys == NULL ||
	    runs == NULL || t == NULL) {
		fprintf(stderr, "usage: tether-agentdir-bench [CLUSTERS [AGENTS "
		    "[THREADS [PICKS]]]] (each >= 1)\n");
		return 2;
	}
	for (int c = 0; c < nclusters; c++) {
		snprintf(keys[c], sizeof(keys[c]), "c-%d", c);
		for (int a = 0; a < per; a++) {
			size_t k = (size_t)c * (size_t)per + (size_t)a;

			snprintf(ids[k], sizeof(ids[k]), "a-%zu", k);
			s[k].node = "n";
			(void)agentdir_add(d, ids[k], keys[c], "n", true, 0, NULL);
			(void)hub_add(h, ids[k], keys[c], &s[k]);
		}
	}
	one = (struct run){ .d = d, .keys = keys, .nkeys = (size_t)nclusters,
	    .picks = picks };
	pick_loop(&one);
	t0 = now_s();
	for (long i = 0; i < picks; i++)
		got += hub_pick(h, keys[(size_t)i % (size_t)nclusters], NULL, NULL) !=
		    NULL;
	printf("clusters %d agents_each %d: hub_pick %.0f ns, agentdir_pick "
	    "%.0f ns (one thread)\n", nclusters, per,
	    (now_s() - t0) / (double)picks * 1e9, one.ns);
	t0 = now_s();
	for (long i = 0; i < picks; i++)
		got += agentdir_find(d, ids[(size_t)i % n], &e);
	printf("agentdir_find %.0f ns (one thread)\n",
	    (now_s() - t0) / (double)picks * 1e9);
	for (int i = 0; i < nthreads; i++) {
		runs[i] = one;
		if (pthread_create(&t[i], NULL, pick_loop, &runs[i]) != 0)
			return 1;
	}
	for (int i = 0; i < nthreads; i++) {
		pthread_join(t[i], NULL);
		sum += runs[i].ns;
	}
	printf("agentdir_pick %.0f ns per pick per thread, %d threads at once\n",
	    sum / nthreads, nthreads);
	for (size_t k = 0; k < n; k++)
		hub_remove(h, ids[k], &s[k]);
	hub_free(h);
	agentdir_free(d);
	free(s);
	free(ids);
	free(keys);
	free(runs);
	free(t);
	return got > 0 ? 0 : 1;
}
