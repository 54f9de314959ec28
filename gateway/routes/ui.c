/*
 * ui.c: the status page's files and its view, GET /v1/status (see ui.h),
 * whose store reads run on the store thread (answer_later.h) and whose
 * live streams are gathered from every loop (loop_gather, docs/0040).
 */
#include "ui.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "access.h"
#include "agentdir.h"
#include "face.h"
#include "gateway.h"
#include "joindoc.h"
#include "livestreams.h"
#include "loop.h"
#include "route.h"
#include "server.h"
#include "store.h"
#include "answer_later.h"
#include "answer_there.h"
#include "ui_assets.h"

/* Everything from the gateway itself; no inline script or style, no
 * frames, no form submissions (the sign-in form is handled by ui.js). */
#define UI_HEADERS \
	"Content-Security-Policy: default-src 'self'; script-src 'self'; " \
	"style-src 'self'; img-src 'self'; connect-src 'self'; base-uri 'none'; " \
	"form-action 'none'; frame-ancestors 'none'\r\n" \
	"X-Frame-Options: DENY\r\n" \
	"Referrer-Policy: no-referrer\r\n"

static const char *
content_type(const char *name)
{
	const char *dot = strrchr(name, '.');

	if (dot != NULL && strcmp(dot, ".html") == 0)
		return "text/html; charset=utf-8";
	if (dot != NULL && strcmp(dot, ".css") == 0)
		return "text/css; charset=utf-8";
	if (dot != NULL && strcmp(dot, ".js") == 0)
		return "text/javascript; charset=utf-8";
	return "application/octet-stream";
}

static void
respond_file(const struct ui_file *f, struct route_response *r)
{
	r->body = malloc(f->len + 1);
	if (r->body == NULL)
		return;                /* the server answers 500 */
	memcpy(r->body, f->data, f->len);
	r->body[f->len] = '\0';
	r->body_len = f->len;
	r->status = 200;
	r->content_type = content_type(f->name);
	r->headers = UI_HEADERS;
}

static void
ui_asset(const struct route_request *req, struct route_response *r)
{
	const char *name;

	if (strcmp(req->method, "GET") != 0 && strcmp(req->method, "HEAD") != 0) {
		route_respond_error(r, 405, "the status page is read with GET");
		return;
	}
	if (strcmp(req->path, "/ui") == 0) {
		route_respond_error(r, 301, "the status page is at /ui/");
		r->headers = "Location: /ui/\r\n";
		return;
	}
	name = req->path + 4;      /* after "/ui/" */
	if (*name == '\0')
		name = "index.html";
	for (size_t i = 0; i < ui_nfiles; i++) {
		if (strcmp(ui_files[i].name, name) == 0) {
			respond_file(&ui_files[i], r);
			return;
		}
	}
	route_respond_error(r, 404, "no such file in the status page");
}

/* ---- GET /v1/status ---- */

struct viewer {
	int admin;
	char principal[96];
	size_t nclusters;
	char clusters[STORE_TOKEN_CLUSTERS_MAX][STORE_ID_MAX + 1];
};

static int
viewer_sees(const struct viewer *v, const char *cluster)
{
	if (v->admin)
		return 1;
	for (size_t i = 0; i < v->nclusters; i++)
		if (strcmp(v->clusters[i], cluster) == 0)
			return 1;
	return 0;
}

static json_t *
time_or_null(int64_t t)
{
	char buf[32];

	if (t == 0)
		return json_null();
	rfc3339_format(t, buf);
	return json_string(buf);
}

/*
 * GET /v1/status in three parts: the viewer's check and the clusters and
 * agents it may see are read on the store thread (answer_later.h); the
 * connected agents (agentdir.h) are added on the loop that asked; each
 * loop lists its own live streams (loop_gather), and the loop that asked
 * answers once every loop did.  Cost while it is out: the viewer (~2 KiB),
 * the rows read, and one JSON array per loop.
 */
struct status_ask {
	struct viewer v;
	int status;                        /* access_viewer's, or 500 */
	char err[192];
	struct store_cluster *cs;          /* the clusters it sees */
	size_t ncs;
	struct store_agent *as;            /* their agents */
	size_t nas;
};

static void
status_ask_free(void *arg)
{
	struct status_ask *a = arg;

	free(a->cs);
	free(a->as);
	free(a);
}

/* Appends cluster's agents (NULL: all) to a->as.  0 or -1. */
static int
read_agents(struct store *st, struct status_ask *a, const char *cluster)
{
	struct store_agent *as = NULL, *grown;
	size_t n = 0;

	if (store_agent_list(st, cluster, &as, &n) != STORE_OK)
		return -1;
	if (n > 0 && (grown = realloc(a->as, (a->nas + n) * sizeof(*as))) == NULL) {
		free(as);
		return -1;
	}
	if (n > 0) {
		a->as = grown;
		memcpy(a->as + a->nas, as, n * sizeof(*as));
		a->nas += n;
	}
	free(as);
	return 0;
}

/* Clusters and their agents, as the viewer may see them.  0 or -1. */
static int
read_clusters(struct store *st, struct status_ask *a)
{
	if (a->v.admin)
		return store_cluster_list(st, &a->cs, &a->ncs) == STORE_OK &&
		    read_agents(st, a, NULL) == 0 ? 0 : -1;
	if ((a->cs = calloc(a->v.nclusters + 1, sizeof(*a->cs))) == NULL)
		return -1;
	for (size_t i = 0; i < a->v.nclusters; i++) {
		if (store_cluster_get(st, a->v.clusters[i], &a->cs[a->ncs]) != STORE_OK)
			continue;      /* scoped to a cluster that is gone */
		if (read_agents(st, a, a->cs[a->ncs].id) != 0)
			return -1;
		a->ncs++;
	}
	return 0;
}

static void
status_read(struct store *st, const char *authorization, void *arg)
{
	struct status_ask *a = arg;

	a->status = access_viewer(st, authorization, a->v.principal,
	    sizeof(a->v.principal), &a->v.admin, a->v.clusters, &a->v.nclusters,
	    a->err, sizeof(a->err));
	if (a->status == 0 && read_clusters(st, a) != 0) {
		a->status = 500;
		snprintf(a->err, sizeof(a->err),
		    "store: cannot read clusters and agents");
	}
}

/* The agents read, with whether each is connected here, counting them per
 * cluster into counts. */
static void
add_agents(struct gateway *gw, const struct status_ask *a, json_t *arr,
    json_t *counts)
{
	for (size_t i = 0; i < a->nas; i++) {
		const struct store_agent *ag = &a->as[i];
		int64_t since = agentdir_since(gw->agents, ag->id);
		json_t *c = json_object_get(counts, ag->cluster);
		json_int_t all = json_integer_value(json_array_get(c, 0));
		json_int_t up = json_integer_value(json_array_get(c, 1));

		json_object_set_new(counts, ag->cluster,
		    json_pack("[I,I]", all + 1, up + (since != 0)));
		json_array_append_new(arr, json_pack("{s:s, s:s, s:s, s:s, s:s, s:b, s:o, s:o, s:o, s:o}",
		    "id", ag->id, "cluster", ag->cluster, "node", ag->node,
		    "state", agent_state_name(ag->state), "last_error", ag->last_error,
		    "connected", since != 0, "connected_since", time_or_null(since),
		    "updated_at", time_or_null(ag->updated_at),
		    "version", ag->version[0] != '\0' ? json_string(ag->version) : json_null(),
		    "last_seen", time_or_null(since != 0 ? gateway_now() : ag->last_seen)));
	}
}

static json_t *
cluster_row(const struct store_cluster *c, json_t *counts)
{
	json_t *n = json_object_get(counts, c->id);

	return json_pack("{s:s, s:s, s:I, s:I}", "id", c->id, "name", c->name,
	    "agents", json_integer_value(json_array_get(n, 0)),
	    "agents_connected", json_integer_value(json_array_get(n, 1)));
}

/* Clusters and their agents into out. */
static void
add_clusters(struct gateway *gw, const struct status_ask *a, json_t *out)
{
	json_t *clusters = json_array(), *agents = json_array(), *counts = json_object();

	add_agents(gw, a, agents, counts);
	for (size_t i = 0; i < a->ncs; i++)
		json_array_append_new(clusters, cluster_row(&a->cs[i], counts));
	json_object_set_new(out, "clusters", clusters);
	json_object_set_new(out, "agents", agents);
	json_decref(counts);
}

struct stream_walk {
	const struct viewer *v;
	json_t *arr;
	int64_t now;
};

static void
add_stream(const struct live_stream *ls, void *arg)
{
	struct stream_walk *w = arg;
	char started[32];
	const char *who = ls->principal;

	if (!viewer_sees(w->v, ls->cluster))
		return;
	/* A user sees who opened a stream only when it was that user. */
	if (!w->v->admin && strcmp(who, w->v->principal) != 0)
		who = "(another user)";
	rfc3339_format(ls->started, started);
	json_array_append_new(w->arr, json_pack("{s:s, s:s, s:s, s:s, s:s, s:I, s:I, s:s, s:I}",
	    "kind", ls->kind, "who", who, "cluster", ls->cluster, "node", ls->node,
	    "target", ls->target, "bytes_up", (json_int_t)*ls->up,
	    "bytes_down", (json_int_t)*ls->down, "started_at", started,
	    "age_seconds", (json_int_t)(w->now - ls->started)));
}

/* The status answer on its way through the loops: what the loop that
 * asked made, and one row of streams per loop, each written by its own. */
struct status_gather {
	struct gateway *gw;
	struct status_ask *a;
	struct reply *t;                   /* the asking loop's */
	json_t *out;                       /* the answer but its streams */
	int64_t now;
	int calling;                       /* inside loop_gather */
	unsigned n;
	json_t *rows[];                    /* [n]: loop i's streams, or NULL */
};

static void
status_gather_free(struct status_gather *g)
{
	for (unsigned i = 0; i < g->n; i++)
		json_decref(g->rows[i]);
	json_decref(g->out);
	status_ask_free(g->a);
	free(g);
}

/* On each loop: its streams that the viewer may see, into its row. */
static void
status_fill(void *arg)
{
	struct status_gather *g = arg;
	const struct loop *self = loop_self();
	/* This loop's own list (livestreams.h). */
	const struct live_streams *l = live_streams_here(g->gw);
	unsigned i = self != NULL ? self->index : 0;
	struct stream_walk w = { .v = &g->a->v, .arr = json_array(), .now = g->now };

	if (l != NULL && w.arr != NULL)
		live_stream_foreach(l, add_stream, &w);
	if (i < g->n)
		g->rows[i] = w.arr;
	else
		json_decref(w.arr);
}

/* On the loop that asked, after every loop: the rows in loop order, then
 * the answer. */
static void
status_done(void *arg)
{
	struct status_gather *g = arg;
	struct route_response r = { 0 };
	json_t *streams = json_array();

	for (unsigned i = 0; i < g->n && streams != NULL; i++)
		if (g->rows[i] != NULL)
			json_array_extend(streams, g->rows[i]);
	json_object_set_new(g->out, "streams", streams);
	route_respond_json(&r, 200, g->out);
	g->out = NULL;                     /* route_respond_json took it */
	reply_send(g->t, &r);
	status_gather_free(g);
}

/* Out of memory inside loop_gather (g->calling: the caller answers), or
 * the loop that asked stopped (shutdown): nobody waits. */
static void
status_orphan(void *arg)
{
	struct status_gather *g = arg;

	if (g->calling)
		return;
	answer_there_orphan(g->t);
	status_gather_free(g);
}

/* Back on the loop that asked, with what the store part read. */
static void
status_answer(struct gateway *gw, void *arg, struct reply *t)
{
	struct status_ask *a = arg;
	struct loop *self = loop_self();
	unsigned n = self != NULL && gw->loops != NULL ? gw->nloops : 1;
	struct route_response r = { 0 };
	const struct gw_face *face;
	struct status_gather *g;
	json_t *out;

	if (a->status != 0) {
		route_respond_error(&r, a->status, "%s", a->err);
		goto now;
	}
	out = json_pack("{s:s, s:b, s:o}", "principal", a->v.principal,
	    "admin", a->v.admin, "time", time_or_null(gateway_now()));
	if (out == NULL ||
	    (g = calloc(1, sizeof(*g) + n * sizeof(g->rows[0]))) == NULL) {
		json_decref(out);
		route_respond_error(&r, 500, "out of memory");
		goto now;
	}
	add_clusters(gw, a, out);
	/* The server certificate this replica serves (docs/0030). */
	face = gw_face_get(gw);
	json_object_set_new(out, "certificate", json_pack("{s:s, s:o, s:s}",
	    "serial", face->cert.serial, "not_after",
	    time_or_null((int64_t)face->cert.not_after), "replica", gw->replica_id));
	gw_face_put(face);
	*g = (struct status_gather){ .gw = gw, .a = a, .t = t, .out = out,
	    .now = gateway_now(), .n = n };
	if (n == 1 || self == NULL) {
		status_fill(g);
		status_done(g);
	} else {
		/* This loop cannot stop while it runs this: done or a later
		 * drop comes after, from its inbox. */
		g->calling = 1;
		if (loop_gather(gw->loops, n, self, status_fill, status_done,
		    status_orphan, g) == 0) {
			g->calling = 0;
			return;
		}
		status_gather_free(g);         /* a with it */
		route_respond_error(&r, 500, "out of memory");
		reply_send(t, &r);
	}
	return;
now:
	reply_send(t, &r);
	status_ask_free(a);
}

static void
ui_status(struct gateway *gw, const struct route_request *req, struct route_response *r)
{
	struct status_ask *a = calloc(1, sizeof(*a));

	if (a == NULL) {
		route_respond_error(r, 500, "out of memory");
		return;
	}
	answer_later_held(gw, req, r, status_read, status_answer,
	    status_ask_free, a);
}

static int
ui_matches(const char *path)
{
	return strcmp(path, "/ui") == 0 || strncmp(path, "/ui/", 4) == 0 ||
	    strcmp(path, "/v1/status") == 0;
}

static void
ui_request(struct gateway *gw, const struct route_request *req,
    struct route_response *r)
{
	memset(r, 0, sizeof(*r));
	if (strcmp(req->path, "/v1/status") != 0)
		ui_asset(req, r);
	else if (strcmp(req->method, "GET") == 0)
		ui_status(gw, req, r);
	else
		route_respond_error(r, 405, "/v1/status is read with GET");
}

const struct route ui_route = {
	.name = "ui",
	.matches = ui_matches,
	.request = ui_request,
};
