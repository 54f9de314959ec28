/*
 * store_group.c: what the store thread alone sustains when N agents join at
 * once on SQLite, each job alone (one commit per store call, as before
 * group commit) against grouped (store_worker_submit_grouped, docs/0039),
 * in one run.  No TLS, no loop work beyond the done callbacks: the store's
 * ceiling, which tests/bench/store_pool.sh's end-to-end figure stays under
 * while the handshakes cost more than the store.
 *
 * Each agent makes the store calls a gateway session makes for a first
 * join (gateway/agents/session.c), one after the other, the next submitted
 * from the previous one's done callback as the session does: import token
 * lookup, registration, agent lookup, two transitions (verify, verified),
 * last seen, URL list.  All N start at once on a fresh database (one
 * cluster, one token of N uses).
 *
 * usage: tether-store-group [--agents N] [--dir DIR]   (defaults 1000, /tmp)
 * Prints one Markdown table row per mode and the ratio; exits 1 when a
 * call failed or a figure could not be taken.
 */
#include <getopt.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

#include <event2/event.h>

#include "log.h"
#include "store.h"
#include "store_worker.h"

#define TOKEN_ID  "5555555555555555"
#define NOW       1700000000
#define STEPS     7

struct bench;

/* One agent's join: its step, its identity, its record. */
struct agent {
	struct bench *b;
	int step;
	char node[32];
	uint8_t pub[32];
	int rc;
	char err[STORE_ERROR_MAX + 1];
	struct store_agent rec;
	struct store_token tok;
	bool created;
};

struct bench {
	struct event_base *base;
	struct store_worker *w;
	size_t left;              /* agents not joined yet */
	size_t registered;
	double registered_at;     /* when the last registration was answered */
	int failed;
};

static double
now_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static double
cpu_s(void)
{
	struct rusage ru;

	getrusage(RUSAGE_SELF, &ru);
	return (double)ru.ru_utime.tv_sec + (double)ru.ru_utime.tv_usec / 1e6 +
	    (double)ru.ru_stime.tv_sec + (double)ru.ru_stime.tv_usec / 1e6;
}

static void
step_work(struct store *s, void *arg)
{
	struct agent *a = arg;
	const size_t el = sizeof(a->err);

	switch (a->step) {
	case 0:
		a->rc = store_token_get(s, TOKEN_ID, &a->tok);
		break;
	case 1:
		a->rc = store_agent_register(s, TOKEN_ID, a->node, a->pub, NOW,
		    &a->rec, &a->created, a->err, el);
		break;
	case 2:
		a->rc = store_agent_get(s, a->rec.id, &a->rec);
		break;
	case 3:
		a->rc = store_agent_transition(s, a->rec.id, AGENT_EV_VERIFY, NULL,
		    NOW, &a->rec, NULL, a->err, el);
		break;
	case 4:
		a->rc = store_agent_transition(s, a->rec.id, AGENT_EV_VERIFY_OK,
		    NULL, NOW, &a->rec, NULL, a->err, el);
		break;
	case 5:
		a->rc = store_agent_seen(s, a->rec.id, "1.0", NOW, a->err, el);
		break;
	default:
		a->rc = store_agent_urls(s, a->rec.id, "https://gw.example",
		    a->err, el);
		break;
	}
}

static void step_done(void *arg);

static void
submit(struct agent *a)
{
	if (store_worker_submit_grouped(a->b->w, step_work, step_done, a) != 0) {
		fprintf(stderr, "store_group: the store queue refused a job\n");
		a->b->failed++;
		a->b->left--;
	}
}

static void
step_done(void *arg)
{
	struct agent *a = arg;
	struct bench *b = a->b;

	if (a->rc != STORE_OK) {
		fprintf(stderr, "store_group: step %d of %s: %d %s\n", a->step,
		    a->node, a->rc, a->err);
		b->failed++;
		b->left--;
		return;
	}
	if (a->step == 1) {
		b->registered++;
		b->registered_at = now_s();
	}
	if (++a->step == STEPS) {
		b->left--;
		return;
	}
	submit(a);
}

/* A fresh database in dir with a cluster and a token of n uses; its URL
 * into url.  0, or -1 after saying why. */
static int
fresh_store(const char *dir, const char *mode, size_t n, char *url,
    size_t urllen)
{
	char err[STORE_ERROR_MAX + 1], path[512];
	struct store *s;
	struct store_cluster c;
	struct store_token t = { .id = TOKEN_ID, .kind = TOKEN_IMPORT,
	    .created_at = NOW };

	snprintf(path, sizeof(path), "%s/store_group-%ld-%s.db", dir,
	    (long)getpid(), mode);
	snprintf(url, urllen, "sqlite://%s", path);
	t.uses_left = (int64_t)n;
	if (store_open(url, &s, err, sizeof(err)) != STORE_OK ||
	    store_cluster_create(s, "bench", NOW, &c, err, sizeof(err)) !=
	    STORE_OK) {
		fprintf(stderr, "store_group: %s\n", err);
		return -1;
	}
	snprintf(t.cluster, sizeof(t.cluster), "%s", c.id);
	if (store_token_insert(s, &t, err, sizeof(err)) != STORE_OK) {
		fprintf(stderr, "store_group: %s\n", err);
		store_close(s);
		return -1;
	}
	store_close(s);
	return 0;
}

static void
remove_store(const char *url)
{
	const char *path = url + strlen("sqlite://");
	char p[600];

	unlink(path);
	snprintf(p, sizeof(p), "%s-wal", path);
	unlink(p);
	snprintf(p, sizeof(p), "%s-shm", path);
	unlink(p);
}

/* Runs n joins at once; *reg_s: seconds until the last registration was
 * answered, *all_s until every join was, *cpu: process CPU seconds. */
static int
run(const char *dir, bool grouped, size_t n, double *reg_s, double *all_s,
    double *cpu)
{
	char url[600], err[STORE_ERROR_MAX + 1];
	struct bench b = { .left = n };
	struct agent *agents;
	double t0, c0;
	int rc = 0;

	if (fresh_store(dir, grouped ? "grouped" : "alone", n, url,
	    sizeof(url)) != 0)
		return -1;
	if ((agents = calloc(n, sizeof(*agents))) == NULL ||
	    (b.base = event_base_new()) == NULL ||
	    store_worker_start(b.base, url, n + 1, NULL, NULL, &b.w, err,
	    sizeof(err)) != 0) {
		fprintf(stderr, "store_group: cannot start: %s\n", err);
		free(agents);
		return -1;
	}
	if (!grouped)
		store_worker_set_group(b.w, 1, 0);
	t0 = now_s();
	c0 = cpu_s();
	for (size_t i = 0; i < n; i++) {
		agents[i].b = &b;
		snprintf(agents[i].node, sizeof(agents[i].node), "node-%zu", i);
		memcpy(agents[i].pub, &i, sizeof(i));
		agents[i].pub[31] = 0xa5;
		submit(&agents[i]);
	}
	while (b.left > 0)
		if (event_base_loop(b.base, EVLOOP_ONCE) != 0) {
			rc = -1;
			break;
		}
	*all_s = now_s() - t0;
	*reg_s = b.registered_at - t0;
	*cpu = cpu_s() - c0;
	store_worker_stop(b.w);
	event_base_free(b.base);
	free(agents);
	remove_store(url);
	if (b.failed > 0 || b.registered != n) {
		fprintf(stderr, "store_group: %d joins failed\n", b.failed);
		rc = -1;
	}
	return rc;
}

static void
usage(void)
{
	fprintf(stderr, "usage: tether-store-group [--agents N] [--dir DIR]\n");
	exit(2);
}

int
main(int argc, char **argv)
{
	static const struct option opts[] = {
		{ "agents", required_argument, NULL, 'n' },
		{ "dir", required_argument, NULL, 'd' },
		{ NULL, 0, NULL, 0 },
	};
	const char *dir = "/tmp";
	size_t n = 1000;
	double reg[2], all[2], cpu[2];
	char *end;
	int c;

	while ((c = getopt_long(argc, argv, "", opts, NULL)) != -1) {
		switch (c) {
		case 'n':
			n = strtoul(optarg, &end, 10);
			if (*end != '\0' || n == 0 || n > 1000000)
				usage();
			break;
		case 'd':
			dir = optarg;
			break;
		default:
			usage();
		}
	}
	log_init("store_group", LOG_LEVEL_WARN);
	for (int g = 0; g < 2; g++)
		if (run(dir, g == 1, n, &reg[g], &all[g], &cpu[g]) != 0)
			return 1;
	printf("| agents | alone: registered (s) | joined (s) | registrations/s "
	    "| CPU (s) | grouped: registered (s) | joined (s) | "
	    "registrations/s | CPU (s) | ratio |\n");
	printf("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n");
	printf("| %zu | %.2f | %.2f | %.0f | %.2f | %.2f | %.2f | %.0f | %.2f | "
	    "%.2f |\n", n, reg[0], all[0], (double)n / reg[0], cpu[0], reg[1],
	    all[1], (double)n / reg[1], cpu[1], reg[0] / reg[1]);
	return 0;
}
