/*
 * shares.c (tether-shares-bench): what a principal's lookup costs
 * (gateway/core/shares.h, shares_principal and shares_unpin) with N
 * principals holding streams, each charged a window so none is swept:
 * LOOKUPS lookups of names drawn among them (formatted outside the timed
 * loop), from one thread, the budget's mutex taken as with two loops.
 *
 *   tether-shares-bench [N [LOOKUPS]]
 *
 * Defaults 10000 1000000.  Prints ns per lookup and accounts looked at per
 * lookup (shares_work).
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "budget.h"
#include "gateway.h"
#include "shares.h"

static double
now_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

int
main(int argc, char **argv)
{
	size_t n = argc > 1 ? strtoul(argv[1], NULL, 10) : 10000;
	size_t lookups = argc > 2 ? strtoul(argv[2], NULL, 10) : 1000000;
	struct gateway *gw = calloc(1, sizeof(*gw));
	struct budget_charge *c = calloc(n > 0 ? n : 1, sizeof(*c));
	char (*names)[32] = calloc(n > 0 ? n : 1, sizeof(*names));
	size_t *pick = calloc(lookups > 0 ? lookups : 1, sizeof(*pick));
	size_t work0;
	unsigned x = 2463534242u;
	double t0, t;

	if (gw == NULL || c == NULL || names == NULL || pick == NULL || n == 0) {
		fprintf(stderr, "usage: tether-shares-bench [N>0 [LOOKUPS]]\n");
		return 2;
	}
	gw->budget = (struct budget)BUDGET_DEFAULT;
	gw->budget.total = n * 4096 * 2;
	gw->budget.reserve = 0;
	pthread_mutex_init(&gw->budget_mu, NULL);
	gw->budget.mu = &gw->budget_mu;
	for (size_t i = 0; i < n; i++) {
		struct budget_account *a;

		snprintf(names[i], sizeof(names[i]), "user:u%zu", i);
		a = shares_principal(gw, names[i]);
		if (a == NULL || budget_take(&gw->budget, NULL, a, 4096, &c[i],
		    NULL) != 4096) {
			fprintf(stderr, "cannot charge %s\n", names[i]);
			return 1;
		}
		shares_unpin(gw, a);
	}
	for (size_t i = 0; i < lookups; i++) {
		x ^= x << 13;
		x ^= x >> 17;
		x ^= x << 5;
		pick[i] = x % n;
	}
	work0 = shares_work(gw);
	t0 = now_s();
	for (size_t i = 0; i < lookups; i++)
		shares_unpin(gw, shares_principal(gw, names[pick[i]]));
	t = now_s() - t0;
	printf("principals=%zu lookups=%zu ns_per_lookup=%.1f looked_per_lookup=%.2f\n",
	    n, lookups, t * 1e9 / (double)lookups,
	    (double)(shares_work(gw) - work0) / (double)lookups);
	for (size_t i = 0; i < n; i++)
		budget_release(&gw->budget, &c[i]);
	shares_free_all(gw);
	pthread_mutex_destroy(&gw->budget_mu);
	free(gw);
	free(c);
	free(names);
	free(pick);
	return 0;
}
