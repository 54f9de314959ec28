/*
 * gateway.c: what every part of the running gateway shares besides
 * struct gateway itself (see gateway.h): the wall clock, giving the
 * heap back (the process's one heap check: after a burst of handshakes,
 * and when much of it lies free), and when turned-away agents should
 * come back.  In the library,
 * not in main.c, so that everything that calls it links without the
 * command line.
 */
#include "gateway.h"

#include <malloc.h>
#include <stdio.h>
#include <time.h>

#include <event2/event.h>

#include "agentkey.h"
#include "log.h"
#include "loop.h"
#include "runtime.h"
#include "srccount.h"

/* The heap check's tick (gateway.h): a burst of handshakes settled, or
 * much of the heap lies free. */
static void
gateway_heap_check(evutil_socket_t fd, short what, void *arg)
{
	struct gateway *gw = arg;
	struct mallinfo2 mi;
	int released;

	(void)fd;
	(void)what;
	/* The trim is the work; the line only tells of it (no work inside a
	 * log field: a field is not made when its level is off). */
	if (gw->trim_after_handshakes && runtime_monotonic_ms() -
	    gw->trim_handshake_ms >= GATEWAY_TRIM_DELAY_MS) {
		gw->trim_after_handshakes = false;
		released = malloc_trim(0);
		debug("handshakes settled: heap trimmed", KV_I("released",
		    released), KV_U("handshakes",
		    atomic_load(&gw->handshakes)));
		return;
	}
	mi = mallinfo2();
	if (mi.fordblks > GATEWAY_TRIM_FREE) {
		released = malloc_trim(0);
		debug("heap trimmed", KV_U("free", mi.fordblks),
		    KV_I("released", released));
	}
}

int
gateway_heap_start(struct gateway *gw)
{
	struct timeval tv = runtime_ms_timeval(GATEWAY_TRIM_EVERY_MS);

	if (gw->trim_timer == NULL &&
	    (gw->trim_timer = event_new(gw->base, -1, EV_PERSIST,
	    gateway_heap_check, gw)) == NULL)
		return -1;
	return event_add(gw->trim_timer, &tv);
}

void
gateway_heap_stop(struct gateway *gw)
{
	if (gw->trim_timer != NULL)
		event_free(gw->trim_timer);
	gw->trim_timer = NULL;
}

void
gateway_handshake_ended(struct gateway *gw)
{
	gw->trim_handshake_ms = runtime_monotonic_ms();
	gw->trim_after_handshakes = true;
}

void
gateway_counts_init(struct gateway *gw)
{
	pthread_mutex_init(&gw->hs_mu, NULL);
	pthread_mutex_init(&gw->ra_mu, NULL);
}

void
gateway_counts_fini(struct gateway *gw)
{
	srccount_free(gw->handshake_sources);
	gw->handshake_sources = NULL;
	pthread_mutex_destroy(&gw->hs_mu);
	pthread_mutex_destroy(&gw->ra_mu);
}

int
gateway_handshake_take(struct gateway *gw)
{
	unsigned n = atomic_load(&gw->handshakes);

	do {
		if (n >= gw->limits.max_handshakes)
			return -1;
	} while (!atomic_compare_exchange_weak(&gw->handshakes, &n, n + 1));
	return 0;
}

int
gateway_handshake_source_take(struct gateway *gw, const char *peer)
{
	int rc = -1;

	pthread_mutex_lock(&gw->hs_mu);
	if (gw->handshake_sources == NULL)
		gw->handshake_sources = srccount_new();
	if (gw->handshake_sources != NULL)
		rc = srccount_take(gw->handshake_sources, peer,
		    gw->limits.max_handshakes_per_source);
	pthread_mutex_unlock(&gw->hs_mu);
	return rc;
}

void
gateway_handshake_source_put(struct gateway *gw, const char *peer)
{
	pthread_mutex_lock(&gw->hs_mu);
	srccount_put(gw->handshake_sources, peer);
	pthread_mutex_unlock(&gw->hs_mu);
}

void
gateway_handshake_free(struct gateway *gw, int64_t began_ms)
{
	unsigned was = atomic_fetch_sub(&gw->handshakes, 1);
	int busy = atomic_load(&gw->handshakes_waiting) > 0 ||
	    was >= gw->limits.max_handshakes;
	void (*freed)(struct gateway *) = atomic_load(&gw->handshake_freed);

	if (began_ms >= 0) {
		pthread_mutex_lock(&gw->ra_mu);
		retry_after_done(&gw->retry_after, began_ms,
		    runtime_monotonic_ms(), busy);
		pthread_mutex_unlock(&gw->ra_mu);
	}
	if (freed != NULL)
		freed(gw);
}

uint32_t
gateway_retry_after_ms(struct gateway *gw, uint32_t queued, uint32_t waiting,
    int64_t waiting_left_ms)
{
	uint32_t r = 0, ms, ahead;

	(void)random_bytes((uint8_t *)&r, sizeof(r));  /* jitter: 0 will do */
	if (gw->stopping)
		return RA_MIN_MS + (gw->drain_jitter_ms > 0 ?
		    r % (gw->drain_jitter_ms + 1) : 0);
	pthread_mutex_lock(&gw->ra_mu);
	ahead = queued + retry_after_line(&gw->retry_after, waiting,
	    waiting_left_ms, gw->limits.max_handshakes,
	    gw->limits.handshake_timeout_ms);
	ms = retry_after_next(&gw->retry_after, runtime_monotonic_ms(), ahead,
	    gw->limits.max_handshakes, gw->limits.handshake_timeout_ms, r);
	pthread_mutex_unlock(&gw->ra_mu);
	return ms;
}

void
gateway_tls_ended(struct gateway *gw, int64_t began_ms, int busy)
{
	gw->tls_ended++;
	retry_after_done(&gw->tls_rate, began_ms, runtime_monotonic_ms(), busy);
}

double
gateway_tls_rate(const struct gateway *gw)
{
	return retry_after_rate(&gw->tls_rate, gw->limits.max_tls_handshakes,
	    gw->limits.tls_handshake_timeout_ms);
}

/* Loop 0's thread (the process's first): ns on a CPU and ns runnable but
 * waiting for one, since it started.  -1 where the kernel does not say. */
static int
sched_times(uint64_t *run_ns, uint64_t *wait_ns)
{
	FILE *f = fopen("/proc/self/schedstat", "re");
	unsigned long long run, wait;
	int n;

	if (f == NULL)
		return -1;
	n = fscanf(f, "%llu %llu", &run, &wait);
	fclose(f);
	if (n != 2)
		return -1;
	*run_ns = run;
	*wait_ns = wait;
	return 0;
}

/* Handshakes per CPU second of the loops since the last sample (the first
 * from the start, which counts the start-up's CPU too), times the share of
 * a CPU loop 0 got when it wanted one, averaged in once
 * GATEWAY_SPREAD_SAMPLE ended. */
static void
spread_sample(struct gateway *gw)
{
	uint64_t n = gw->tls_ended - gw->spread_ended, run = 0, wait = 0;
	double cpu = 0, r, share = 1.0, dr, dw;

	if (n < GATEWAY_SPREAD_SAMPLE || gw->loops == NULL)
		return;
	for (unsigned i = 0; i < gw->nloops; i++)
		cpu += loop_cpu_seconds(&gw->loops[i]);
	if (cpu <= gw->spread_cpu_s)
		return;
	if (sched_times(&run, &wait) == 0 && run >= gw->spread_run_ns &&
	    wait >= gw->spread_wait_ns) {
		dr = (double)(run - gw->spread_run_ns);
		dw = (double)(wait - gw->spread_wait_ns);
		if (dr > 0)
			share = dr / (dr + dw);
		gw->spread_run_ns = run;
		gw->spread_wait_ns = wait;
	}
	r = (double)n / (cpu - gw->spread_cpu_s) * share;
	gw->spread_cpu_rate = gw->spread_cpu_rate == 0 ? r :
	    gw->spread_cpu_rate + (r - gw->spread_cpu_rate) / 4;
	gw->spread_cpu_s = cpu;
	gw->spread_ended = gw->tls_ended;
}

uint32_t
gateway_redial_spread_ms(struct gateway *gw, uint32_t tunnels)
{
	unsigned loops = gw->nloops > 0 ? gw->nloops : 1;
	double rate;

	spread_sample(gw);
	if (gw->tls_rate.measured > 0)
		rate = gw->tls_rate.measured;
	else if (gw->spread_cpu_rate > 0)
		rate = gw->spread_cpu_rate * loops;
	else
		rate = GATEWAY_SPREAD_GUESS * loops;
	return retry_after_spread_ms(tunnels, rate, gw->limits.redial_spread_min_ms);
}

int64_t
gateway_now(void)
{
	return (int64_t)time(NULL);
}

int64_t
gateway_now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_REALTIME, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}
