/*
 * mux_metrics.c: the stream metrics (see mux_metrics.h).
 */
#include "mux_metrics.h"

#include <stdatomic.h>
#include <stdint.h>
#include <string.h>

#include "prom.h"

/* Every code a stream refusal may carry in this code base. */
static const char *const results[] = {
	"ok", "not_allowed", "refused", "unreachable", "timeout", "unknown_service",
	"tls", "busy", "too_many_streams", "not_active", "no_agent", "unauthorized",
	"tunnel_lost", "internal", "other", NULL
};
static const char *const directions[] = { "sent", "received", NULL };

static struct prom_metric streams_open = {
	.name = "tether_streams_open", .kind = PROM_GAUGE,
	.help = "Streams open in agent tunnels.",
};
static struct prom_metric streams_opened = {
	.name = "tether_streams_opened_total", .kind = PROM_COUNTER,
	.help = "Streams opened (result ok) or refused, by result.",
	.label = "result", .preset = results,
};
static struct prom_metric stream_bytes = {
	.name = "tether_stream_bytes_total", .kind = PROM_COUNTER,
	.help = "Stream payload bytes sent into or received from agent tunnels.",
	.label = "direction", .preset = directions,
};
static struct prom_metric stream_blocked = {
	.name = "tether_stream_blocked_seconds_total", .kind = PROM_COUNTER,
	.help = "Time streams waited on flow control (peer credit or a full tunnel).",
};

static struct prom_metric *const families[] = {
	&streams_open, &streams_opened, &stream_bytes, &stream_blocked,
};

#define NRESULTS (sizeof(results) / sizeof(results[0]) - 1)

/* The counts themselves: relaxed atomics, so that multiplexers on every
 * loop count without a lock (docs/0040 step 7); copied into the families
 * when they are read (mux_metrics_families). */
static _Atomic int64_t open_now;
static _Atomic uint64_t opened[NRESULTS];
static _Atomic uint64_t bytes[2];             /* [1] sent, [0] received */
static _Atomic uint64_t blocked_ns;

void
mux_metrics_opened(const char *result)
{
	size_t i;

	for (i = 0; results[i] != NULL; i++)
		if (result != NULL && strcmp(results[i], result) == 0)
			break;
	if (results[i] == NULL)
		i = NRESULTS - 1;                     /* "other" */
	atomic_fetch_add_explicit(&opened[i], 1, memory_order_relaxed);
}

void
mux_metrics_open_delta(int delta)
{
	atomic_fetch_add_explicit(&open_now, delta, memory_order_relaxed);
}

void
mux_metrics_bytes(int sent, size_t n)
{
	atomic_fetch_add_explicit(&bytes[sent ? 1 : 0], n, memory_order_relaxed);
}

void
mux_metrics_blocked(double seconds)
{
	if (seconds > 0)
		atomic_fetch_add_explicit(&blocked_ns, (uint64_t)(seconds * 1e9),
		    memory_order_relaxed);
}

size_t
mux_metrics_families(struct prom_metric *const **out)
{
	prom_set(&streams_open, NULL, (double)atomic_load_explicit(&open_now,
	    memory_order_relaxed));
	for (size_t i = 0; i < NRESULTS; i++)
		prom_set(&streams_opened, results[i], (double)atomic_load_explicit(
		    &opened[i], memory_order_relaxed));
	prom_set(&stream_bytes, "sent", (double)atomic_load_explicit(&bytes[1],
	    memory_order_relaxed));
	prom_set(&stream_bytes, "received", (double)atomic_load_explicit(
	    &bytes[0], memory_order_relaxed));
	prom_set(&stream_blocked, NULL, (double)atomic_load_explicit(&blocked_ns,
	    memory_order_relaxed) / 1e9);
	*out = families;
	return sizeof(families) / sizeof(families[0]);
}
