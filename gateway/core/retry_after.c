/* retry_after.c: the come-back schedule for turned-away agents (see
 * retry_after.h). */
#include "retry_after.h"

/* Closes the current window if it is RA_WINDOW_MS old: one that was busy
 * throughout gives a sample of the rate (not one that a quiet spell
 * stretched: its handshakes ended before the gateway went quiet). */
static void
window_roll(struct retry_after *ra, int64_t now_ms)
{
	double r;

	if (ra->window_ms != 0 && now_ms - ra->window_ms < RA_WINDOW_MS)
		return;
	if (ra->window_ms != 0 && !ra->window_idle && ra->window_ended > 0 &&
	    now_ms - ra->window_ms <= 2 * RA_WINDOW_MS) {
		r = ra->window_ended * 1000.0 / (double)(now_ms - ra->window_ms);
		ra->measured = ra->measured == 0 ? r :
		    ra->measured + (r - ra->measured) / RA_WINDOW_WEIGHT;
	}
	ra->window_ms = now_ms;
	ra->window_ended = 0;
	ra->window_idle = 0;
}

void
retry_after_done(struct retry_after *ra, int64_t began_ms, int64_t now_ms,
    int busy)
{
	double took = now_ms > began_ms ? (double)(now_ms - began_ms) : 1.0;

	ra->mean_ms = ra->mean_ms == 0 ? took : ra->mean_ms + (took - ra->mean_ms) / 8;
	window_roll(ra, now_ms);
	ra->window_ended++;
	if (!busy)
		ra->window_idle = 1;
}

double
retry_after_rate(const struct retry_after *ra, uint32_t capacity,
    uint32_t timeout_ms)
{
	double mean = ra->mean_ms > 0 ? ra->mean_ms : RA_GUESS_MS;
	double rate = ra->measured > 0 ? ra->measured :
	    (double)capacity * 1000.0 / mean;
	double floor = timeout_ms > 0 ? (double)capacity * 1000.0 / timeout_ms : 1.0;

	if (rate < floor)
		rate = floor;
	return rate < 1.0 ? 1.0 : rate;
}

uint32_t
retry_after_next(struct retry_after *ra, int64_t now_ms, uint32_t ahead,
    uint32_t capacity, uint32_t timeout_ms, uint32_t jitter)
{
	double full = retry_after_rate(ra, capacity, timeout_ms);
	double gap = 1000.0 / (full * RA_SHARE_PCT / 100.0);
	double start = (double)now_ms + (double)ahead * 1000.0 / full;
	int64_t wait;

	if (start < (double)(now_ms + RA_MIN_MS))
		start = (double)(now_ms + RA_MIN_MS);
	if (ra->horizon_ms > start)
		start = ra->horizon_ms;
	/* The schedule never runs further than the longest wait. */
	if (start > (double)(now_ms + RA_MAX_MS))
		start = (double)(now_ms + RA_MAX_MS);
	ra->horizon_ms = start + gap;
	wait = (int64_t)(start - (double)now_ms) +
	    (gap >= 1.0 ? (int64_t)(jitter % (uint32_t)gap) : 0);
	if (wait > RA_MAX_MS)
		wait = RA_MAX_MS;
	return (uint32_t)wait;
}

uint32_t
retry_after_line(const struct retry_after *ra, uint32_t waiting,
    int64_t left_ms, uint32_t capacity, uint32_t timeout_ms)
{
	double most;

	if (left_ms <= 0 || waiting == 0)
		return 0;
	most = retry_after_rate(ra, capacity, timeout_ms) * (double)left_ms / 1000.0;
	return most < (double)waiting ? (uint32_t)most : waiting;
}

uint32_t
retry_after_spread_ms(uint32_t tunnels, double rate, uint32_t min_ms)
{
	double ms = (double)tunnels * 1000.0 / (rate > 1.0 ? rate : 1.0);
	double lo = min_ms != 0 ? min_ms : RA_SPREAD_MIN_MS;

	if (lo > RA_SPREAD_MAX_MS)
		lo = RA_SPREAD_MAX_MS;
	if (ms < lo)
		ms = lo;
	return ms > RA_SPREAD_MAX_MS ? RA_SPREAD_MAX_MS : (uint32_t)ms;
}

int
retry_after_spread_moved(uint32_t told, uint32_t now)
{
	return told == 0 || (uint64_t)now * 4 >= (uint64_t)told * 5 ||
	    (uint64_t)told >= (uint64_t)now * 2;
}

int
retry_after_spread_due(uint32_t told, uint32_t now, int64_t since_ms,
    uint32_t narrow_every_ms)
{
	if (!retry_after_spread_moved(told, now))
		return 0;
	if (told == 0 || now > told)
		return 1;
	return since_ms < 0 || since_ms >= (int64_t)narrow_every_ms;
}
