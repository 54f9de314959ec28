/*
 * metrics_render.c: the gateway's /metrics text: its own families (with
 * the gauges read from the hub in O(1)), the stream metrics and the
 * process metrics.
 */
#include "metrics.h"

#include "gateway.h"
#include "hub.h"
#include "mux_metrics.h"

char *
metrics_render(void *arg, size_t *len)
{
	struct gateway *gw = arg;
	struct prom_list lists[2];

	lists[0].n = metrics_families(&lists[0].ms,
	    gw->hub != NULL ? hub_count(gw->hub) : 0, gw->handshakes);
	lists[1].n = mux_metrics_families(&lists[1].ms);
	return prom_text(lists, 2, len);
}
