/*
 * metrics_route.c: the gateway's /metrics text: its own families (with
 * the gauges read from the agent directory and the store's health in
 * O(1)), the stream metrics and the process metrics; and GET /metrics on
 * the main port as a route (route.h), for admin tokens (checked on the
 * store thread: answer_later.h).  The text is rendered on loop 0, whose
 * state it reads (the server's admission counts, the store listener's
 * and the lease's health), and sent
 * from the loop the scrape came to (answer_there.h, docs/0040).
 */
#include "metrics_route.h"

#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "access.h"
#include "agentdir.h"
#include "gateway.h"
#include "loop.h"
#include "looplink.h"
#include "metrics.h"
#include "mux_metrics.h"
#include "notices.h"
#include "prom_http.h"
#include "route.h"
#include "server.h"
#include "answer_later.h"
#include "answer_there.h"

/* Loops whose tunnels are counted apart (tether_loop_tunnels): as many as
 * a family shows label values apart. */
#define LOOPS_SHOWN (PROM_LABELS_MAX - 1)

/*
 * The per-loop series (docs/0040): each loop's handshakes, CPU,
 * tunnels (its `ntunnels`, an atomic its own loop keeps), connections and
 * tunnel sides (`nconns`, `tunnel_side`: atomics a
 * connection's owner keeps, loop.h), and what each
 * loop link carried (only the pairs that carried something: a family
 * shows PROM_LABELS_MAX - 1 label values apart).  Under metrics_lock.
 */
static void
render_loops(struct gateway *gw)
{
	unsigned n = server_loops(gw);

	for (unsigned i = 0; i < n; i++) {
		uint64_t handshakes;
		double cpu;

		server_loop_stats(gw, i, &handshakes, &cpu);
		metrics_loop(i, handshakes, cpu);
		if (i < LOOPS_SHOWN && gw->loops != NULL && i < gw->nloops) {
			metrics_loop_tunnels(i,
			    atomic_load_explicit(&gw->loops[i].ntunnels,
			    memory_order_relaxed));
			metrics_loop_weights(i,
			    atomic_load_explicit(&gw->loops[i].nconns,
			    memory_order_relaxed),
			    atomic_load_explicit(&gw->loops[i].tunnel_side,
			    memory_order_relaxed));
		}
	}
	for (unsigned from = 0; from < looplinks_loops(gw->looplinks); from++)
		for (unsigned to = 0; to < looplinks_loops(gw->looplinks); to++) {
			uint64_t streams, bytes;

			looplink_counts(gw->looplinks, from, to, &streams, &bytes);
			if (streams > 0 || bytes > 0)
				metrics_loop_link(from, to, streams, bytes);
		}
}

char *
metrics_render(void *arg, size_t *len)
{
	struct gateway *gw = arg;
	struct prom_list lists[2];
	uint32_t tls_handshaking, tls_waiting;
	uint64_t tls_shed;
	char why[384], *text;
	int store_up;

	server_tls_admission(gw, &tls_handshaking, &tls_waiting, &tls_shed);
	store_up = notices_store_problem(gw, why, sizeof(why)) == NULL;
	metrics_lock();
	metrics_tls_admission(tls_handshaking, tls_waiting, tls_shed);
	metrics_tls_shed_at_accept(server_tls_shed_at_accept(gw));
	render_loops(gw);
	metrics_store_up(store_up);
	lists[0].n = metrics_families(&lists[0].ms,
	    gw->agents != NULL ? agentdir_count(gw->agents) : 0, gw->handshakes);
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

/* GET /metrics: the admin check on the store thread, the text on the loop
 * (answer_later.h). */
struct metrics_ask {
	int status;                  /* access_admin's */
	char err[192];
};

static void
metrics_check(struct store *st, const char *authorization, void *arg)
{
	struct metrics_ask *m = arg;
	char principal[64];

	m->status = access_admin(st, authorization, principal,
	    sizeof(principal), m->err, sizeof(m->err));
}

/* On loop 0 (metrics_render's readers are its own). */
static void
metrics_text(struct gateway *gw, void *arg, struct route_response *r)
{
	(void)arg;
	r->body = metrics_render(gw, &r->body_len);
	r->status = r->body != NULL ? 200 : 500;
	r->content_type = PROM_CONTENT_TYPE;
}

/* Back on the loop that asked: refused, or the text made on loop 0. */
static void
metrics_answer(struct gateway *gw, void *arg, struct reply *t)
{
	struct metrics_ask *m = arg;

	if (m->status != 0) {
		struct route_response r = { 0 };

		route_respond_error(&r, m->status, "%s", m->err);
		reply_send(t, &r);
		free(m);
		return;
	}
	answer_there_ticket(gw, t, 0, metrics_text, free, m);
}

static void
metrics_request(struct gateway *gw, const struct route_request *req,
    struct route_response *r)
{
	struct metrics_ask *m;

	memset(r, 0, sizeof(*r));
	if (strcmp(req->method, "GET") != 0) {
		route_respond_error(r, 405, "/metrics is read with GET");
		return;
	}
	if ((m = calloc(1, sizeof(*m))) == NULL) {
		route_respond_error(r, 500, "out of memory");
		return;
	}
	answer_later_held(gw, req, r, metrics_check, metrics_answer, free, m);
}

const struct route metrics_route = {
	.name = "metrics",
	.matches = metrics_matches,
	.request = metrics_request,
};
