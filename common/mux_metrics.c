/*
 * mux_metrics.c: the stream metrics (see mux_metrics.h).
 */
#include "mux_metrics.h"

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

void
mux_metrics_opened(const char *result)
{
	size_t i;

	for (i = 0; results[i] != NULL; i++)
		if (result != NULL && strcmp(results[i], result) == 0)
			break;
	prom_inc(&streams_opened, results[i] != NULL ? results[i] : "other");
}

void
mux_metrics_open_delta(int delta)
{
	prom_add(&streams_open, NULL, delta);
}

void
mux_metrics_bytes(int sent, size_t n)
{
	prom_add(&stream_bytes, sent ? "sent" : "received", (double)n);
}

void
mux_metrics_blocked(double seconds)
{
	prom_add(&stream_blocked, NULL, seconds);
}

size_t
mux_metrics_families(struct prom_metric *const **out)
{
	*out = families;
	return sizeof(families) / sizeof(families[0]);
}
