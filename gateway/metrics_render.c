/*
 * metrics_render.c: the gateway's /metrics text: its own families (with
 * the gauges read from the hub in O(1)), the stream metrics and the
 * process metrics; and GET /metrics on the main port as a route (route.h),
 * for admin tokens.
 */
#include "metrics.h"

#include <string.h>

#include "access.h"
#include "gateway.h"
#include "hub.h"
#include "mux_metrics.h"
#include "prom_http.h"
#include "route.h"
#include "server.h"

char *
metrics_render(void *arg, size_t *len)
{
	struct gateway *gw = arg;
	struct prom_list lists[2];
	uint32_t tls_handshaking, tls_waiting;
	uint64_t tls_shed;
	char *text;

	server_tls_admission(gw, &tls_handshaking, &tls_waiting, &tls_shed);
	metrics_lock();
	metrics_tls_admission(tls_handshaking, tls_waiting, tls_shed);
	lists[0].n = metrics_families(&lists[0].ms,
	    gw->hub != NULL ? hub_count(gw->hub) : 0, gw->handshakes);
	lists[1].n = mux_metrics_families(&lists[1].ms);
	text = prom_text(lists, 2, len);
	metrics_unlock();
	return text;
}

static int
metrics_matches(const char *path)
{
	return strcmp(path, "/metrics") == 0;
}

static void
metrics_request(struct gateway *gw, const struct route_request *req,
    struct route_response *r)
{
	char principal[64], err[192];
	int status;

	memset(r, 0, sizeof(*r));
	if (strcmp(req->method, "GET") != 0) {
		route_respond_error(r, 405, "/metrics is read with GET");
		return;
	}
	status = access_admin(gw, req->authorization, principal,
	    sizeof(principal), err, sizeof(err));
	if (status != 0) {
		route_respond_error(r, status, "%s", err);
		return;
	}
	r->body = metrics_render(gw, &r->body_len);
	r->status = r->body != NULL ? 200 : 500;
	r->content_type = PROM_CONTENT_TYPE;
}

const struct route metrics_route = {
	.name = "metrics",
	.matches = metrics_matches,
	.request = metrics_request,
};
