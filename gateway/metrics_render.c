/*
 * metrics_render.c: the gateway's /metrics text: its own families (with
 * the gauges read from the hub in O(1)), the stream metrics and the
 * process metrics.
 */
#include "metrics.h"

#include <stdio.h>
#include <stdlib.h>

#include "gateway.h"
#include "hub.h"
#include "mux_metrics.h"

char *
metrics_render(void *arg, size_t *len)
{
	struct gateway *gw = arg;
	struct prom_metric *const *own, *const *mux;
	size_t nown = metrics_families(&own, gw->hub != NULL ? hub_count(gw->hub) : 0,
	    gw->handshakes);
	size_t nmux = mux_metrics_families(&mux);
	char *text = NULL;
	FILE *f;
	int r;

	if ((f = open_memstream(&text, len)) == NULL)
		return NULL;
	r = prom_write(f, own, nown);
	r |= prom_write(f, mux, nmux);
	r |= prom_write_process(f);
	if (fclose(f) != 0 || r != 0) {
		free(text);
		return NULL;
	}
	return text;
}
