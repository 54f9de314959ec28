/*
 * notices.c: cluster-wide effects (see notices.h).  The listener
 * (store_listen.c) hands the loop each notice; an agent's is acted on once
 * its record has been re-read on the store thread (store_worker.h), so the
 * loop never reads the store itself.
 */
#include "notices.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "access.h"
#include "agentdir.h"
#include "gateway.h"
#include "livestreams.h"
#include "log.h"
#include "loop.h"
#include "presence.h"
#include "session.h"
#include "settings.h"
#include "store.h"
#include "store_listen.h"
#include "store_worker.h"
#include "token.h"

#define AGENT_PREFIX "agent:"
#define TOKEN_PREFIX "token:"
#define TUNNEL_PREFIX "tunnel:"
#define SETTING_PREFIX "setting:"

struct notices {
	struct store_listener *listener;
};

/* Agents' records to re-read on the store thread, then act on.  n records
 * (ids in, records out), each with its read's result. */
struct reread {
	struct gateway *gw;
	size_t n, cap;
	struct {
		char id[STORE_ID_MAX + 1];
		int rc;
		struct store_agent rec;
	} a[];
};

static void
reread_work(struct store *st, void *arg)
{
	struct reread *r = arg;

	for (size_t i = 0; i < r->n; i++)
		r->a[i].rc = store_agent_get(st, r->a[i].id, &r->a[i].rec);
}

/* Ends the streams open on any loop of this process that the revocation
 * of `what` id took the right from, and forgets every proven token
 * (access_revoke_broadcast): O(live streams), no store call; the count is
 * logged once every loop ended its own. */
static void
notices_streams_end(struct gateway *gw, enum live_credential by,
    const char *what, const char *id)
{
	(void)access_revoke_broadcast(gw, &(struct revoke_what){ .by = by,
	    .match = id, .what = what, .name = id,
	    .log = "notices: a revocation ends the streams it opened here" },
	    NULL, NULL, NULL);
}

/* A re-read record on its way to the loop that holds the agent's tunnel
 * (docs/0040: a session is touched on its own loop only). */
struct record_tell {
	struct gateway *gw;
	struct agentdir_entry e;        /* the tunnel it was read for */
	struct store_agent rec;
};

/* On the tunnel's loop: its session, re-found by id and generation (gone
 * or replaced meanwhile: nothing to tell), is told. */
static void
record_tell_run(void *arg)
{
	struct record_tell *t = arg;
	struct session *s = session_here(t->gw, &t->e);

	if (s != NULL)
		session_record_changed(s, &t->rec);
	free(t);
}

/* Tells the session of e's tunnel its record changed: here when the
 * tunnel is on this loop, else by a message to its loop. */
static void
record_tell(struct gateway *gw, const struct agentdir_entry *e,
    const struct store_agent *rec)
{
	struct loop *self = loop_here(gw);
	struct record_tell *t;
	struct session *s;

	if (self == NULL || gw->loops == NULL || e->at.loop == self->index ||
	    e->at.loop >= gw->nloops) {
		if ((s = session_here(gw, e)) != NULL)
			session_record_changed(s, rec);
		return;
	}
	if ((t = malloc(sizeof(*t))) == NULL) {
		warn("notices: out of memory to tell an agent's loop of its record",
		    KV_S("agent", e->agent_id));
		return;
	}
	t->gw = gw;
	t->e = *e;
	t->rec = *rec;
	(void)loop_call(&gw->loops[e->at.loop], record_tell_run, t, free);
}

static void
reread_done(void *arg)
{
	struct reread *r = arg;
	struct agentdir_entry e;

	/* Stopped meanwhile (shutdown): the sessions are going away. */
	for (size_t i = 0; r->gw->notices != NULL && i < r->n; i++) {
		if (r->a[i].rc != STORE_OK)
			continue;
		/* Looked up again: the tunnel may have closed or been replaced. */
		if (r->a[i].rec.state == AGENT_REVOKED)
			notices_streams_end(r->gw, LIVE_BY_AGENT, "agent",
			    r->a[i].id);
		if (agentdir_find(r->gw->agents, r->a[i].id, &e))
			record_tell(r->gw, &e, &r->a[i].rec);
	}
	free(r);
}

static struct reread *
reread_new(struct gateway *gw, size_t n)
{
	struct reread *r = calloc(1, sizeof(*r) + n * sizeof(r->a[0]));

	if (r != NULL) {
		r->gw = gw;
		r->cap = n;
	}
	return r;
}

static void
reread_submit(struct gateway *gw, struct reread *r)
{
	if (r->n == 0 || store_worker_submit(gw->storew, reread_work,
	    reread_done, r) != 0) {
		if (r->n > 0)
			warn("notices: store queue full: agents changed elsewhere "
			    "are not re-read", KV_U("agents", r->n));
		free(r);
	}
}

static void
reread_add(const struct agentdir_entry *e, void *arg)
{
	struct reread *r = arg;

	/* An agent that connected since the count is left out: its
	 * handshake read its record after the listener came back. */
	if (r->n == r->cap)
		return;
	snprintf(r->a[r->n].id, sizeof(r->a[r->n].id), "%s", e->agent_id);
	r->n++;
}

/* The tokens of the streams open here, to re-read on the store thread
 * after the listener was down: a revocation missed meanwhile still ends
 * what it opened.  n distinct ids, each with whether it may go on. */
struct token_reread {
	struct gateway *gw;
	size_t n;
	struct {
		char id[TOKEN_ID_LEN + 1];
		int gone;             /* revoked, or no longer in the store */
	} t[];
};

static void
token_reread_work(struct store *st, void *arg)
{
	struct token_reread *r = arg;
	struct store_token rec;
	int rc;

	for (size_t i = 0; i < r->n; i++) {
		rc = store_token_get(st, r->t[i].id, &rec);
		r->t[i].gone = rc == STORE_NOTFOUND || (rc == STORE_OK && rec.revoked);
	}
}

static void
token_reread_done(void *arg)
{
	struct token_reread *r = arg;

	for (size_t i = 0; r->gw->notices != NULL && i < r->n; i++)
		if (r->t[i].gone)
			notices_streams_end(r->gw, LIVE_BY_TOKEN, "token", r->t[i].id);
	free(r);
}

/* The token ids of one loop's streams (token_gather's row): n ids,
 * cap = the streams live when it was made. */
struct token_ids {
	size_t n, cap;
	char (*id)[TOKEN_ID_LEN + 1];
};

static void
token_ids_add(const struct live_stream *ls, void *arg)
{
	struct token_ids *t = arg;

	if (t->n == t->cap || ls->token_id == NULL || ls->token_id[0] == '\0' ||
	    strlen(ls->token_id) > TOKEN_ID_LEN)
		return;
	snprintf(t->id[t->n], sizeof(t->id[t->n]), "%s", ls->token_id);
	t->n++;
}

static int
token_id_cmp(const void *a, const void *b)
{
	return strcmp(a, b);
}

/* The tokens of the streams open on every loop, gathered (loop_gather):
 * a row per loop, each filled by its loop. */
struct token_gather {
	struct gateway *gw;
	unsigned nloops;
	struct token_ids row[];
};

/* On each loop: a copy of its streams' token ids. */
static void
token_gather_fill(void *p)
{
	struct token_gather *g = p;
	struct loop *l = loop_here(g->gw);
	struct live_streams *ls = live_streams_here(g->gw);
	struct token_ids *t = &g->row[l != NULL ? l->index : 0];
	size_t live = live_stream_count(ls);

	if (live == 0 || (t->id = calloc(live, sizeof(t->id[0]))) == NULL) {
		if (live > 0)
			warn("notices: out of memory to re-read the tokens of "
			    "open streams");
		return;
	}
	t->cap = live;
	live_stream_foreach(ls, token_ids_add, t);
}

static void
token_gather_free(void *p)
{
	struct token_gather *g = p;

	for (unsigned i = 0; i < g->nloops; i++)
		free(g->row[i].id);
	free(g);
}

/* On loop 0, once every loop gave its ids: distinct ids, one read each
 * on the store thread. */
static void
token_gather_done(void *p)
{
	struct token_gather *g = p;
	struct token_reread *r;
	size_t all = 0, n = 0;

	for (unsigned i = 0; i < g->nloops; i++)
		all += g->row[i].n;
	if (all == 0 || g->gw->notices == NULL ||
	    (r = calloc(1, sizeof(*r) + all * sizeof(r->t[0]))) == NULL) {
		if (all > 0 && g->gw->notices != NULL)
			warn("notices: out of memory to re-read the tokens of open "
			    "streams");
		token_gather_free(g);
		return;
	}
	r->gw = g->gw;
	for (unsigned i = 0; i < g->nloops; i++)
		for (size_t k = 0; k < g->row[i].n; k++)
			memcpy(r->t[r->n++].id, g->row[i].id[k], sizeof(r->t[0].id));
	token_gather_free(g);
	qsort(r->t, r->n, sizeof(r->t[0]), token_id_cmp);
	for (size_t i = 0; i < r->n; i++)
		if (n == 0 || strcmp(r->t[n - 1].id, r->t[i].id) != 0)
			r->t[n++] = r->t[i];
	r->n = n;
	if (store_worker_submit(r->gw->storew, token_reread_work,
	    token_reread_done, r) != 0) {
		warn("notices: store queue full: the tokens of open streams are "
		    "not re-read", KV_U("tokens", r->n));
		free(r);
	}
}

/* Re-reads the tokens of every stream open on any loop (gathered first,
 * then distinct ids: one read each, on the store thread). */
static void
notices_resync_streams(struct gateway *gw)
{
	struct loop *home = loop_here(gw);
	unsigned n = home != NULL && gw->loops != NULL ? gw->nloops : 1;
	struct token_gather *g;

	if (live_streams_count_all(gw) == 0)
		return;
	if ((g = calloc(1, sizeof(*g) + n * sizeof(g->row[0]))) == NULL) {
		warn("notices: out of memory to re-read the tokens of open streams");
		return;
	}
	g->gw = gw;
	g->nloops = n;
	if (home == NULL || gw->loops == NULL) {
		token_gather_fill(g);
		token_gather_done(g);
		return;
	}
	(void)loop_gather(gw->loops, gw->nloops, home, token_gather_fill,
	    token_gather_done, token_gather_free, g);
}

/* The listener (re)started: whatever was missed meanwhile. */
static void
notices_resync(struct gateway *gw)
{
	struct reread *r;
	size_t n;

	access_revoked(gw);
	notices_resync_streams(gw);
	settings_refresh(gw);
	if ((n = agentdir_count(gw->agents)) == 0)
		return;
	if ((r = reread_new(gw, n)) == NULL) {
		warn("notices: out of memory to re-read the agents held here");
		return;
	}
	(void)agentdir_foreach(gw->agents, reread_add, r);
	info("notices: re-reading the agents held here", KV_U("agents", r->n));
	reread_submit(gw, r);
}

static void
notices_agent(struct gateway *gw, const char *id)
{
	struct reread *r;

	if (strlen(id) > STORE_ID_MAX || !agentdir_find(gw->agents, id, NULL))
		return;     /* not held here: whoever holds it acts */
	if ((r = reread_new(gw, 1)) == NULL) {
		warn("notices: out of memory to re-read an agent", KV_S("agent", id));
		return;
	}
	snprintf(r->a[0].id, sizeof(r->a[0].id), "%s", id);
	r->n = 1;
	reread_submit(gw, r);
}

static void
notices_on_notice(const char *payload, void *arg)
{
	struct gateway *gw = arg;

	/* Where agents are and in which state (the presence directory,
	 * docs/0023): read again at once, coalesced. */
	if (payload == NULL || strncmp(payload, TUNNEL_PREFIX,
	    strlen(TUNNEL_PREFIX)) == 0 || strncmp(payload, AGENT_PREFIX,
	    strlen(AGENT_PREFIX)) == 0)
		presence_refresh(gw);
	if (payload == NULL)
		notices_resync(gw);
	else if (strncmp(payload, TOKEN_PREFIX, strlen(TOKEN_PREFIX)) == 0) {
		/* Cheap and rare: every loop's whole cache, whoever's token
		 * it was (notices_streams_end). */
		info("notices: a token was revoked: proven tokens forgotten",
		    KV_S("token", payload + strlen(TOKEN_PREFIX)));
		notices_streams_end(gw, LIVE_BY_TOKEN, "token",
		    payload + strlen(TOKEN_PREFIX));
	} else if (strncmp(payload, AGENT_PREFIX, strlen(AGENT_PREFIX)) == 0)
		notices_agent(gw, payload + strlen(AGENT_PREFIX));
	else if (strncmp(payload, SETTING_PREFIX, strlen(SETTING_PREFIX)) == 0)
		/* A gateway setting changed (docs/0031): read again, and
		 * pushed to the agents here if it differs. */
		settings_refresh(gw);
}

int
notices_start(struct gateway *gw, const char *url, char *err, size_t errlen)
{
	struct notices *n = calloc(1, sizeof(*n));

	if (n == NULL) {
		snprintf(err, errlen, "out of memory");
		return -1;
	}
	gw->notices = n;
	if (store_listen_start(gw->base, url, notices_on_notice, gw,
	    &n->listener, err, errlen) != 0) {
		notices_stop(gw);
		return -1;
	}
	return 0;
}

void
notices_stop(struct gateway *gw)
{
	struct notices *n = gw->notices;

	if (n == NULL)
		return;
	store_listen_stop(n->listener);
	free(n);
	gw->notices = NULL;
}

const char *
notices_store_problem(struct gateway *gw, char *buf, size_t buflen)
{
	const char *why;

	if (gw->notices != NULL &&
	    (why = store_listen_problem(gw->notices->listener)) != NULL) {
		snprintf(buf, buflen, "the store listener: %s", why);
		return buf;
	}
	if ((why = presence_problem(gw)) != NULL) {
		snprintf(buf, buflen, "the lease renewal: %s", why);
		return buf;
	}
	return NULL;
}
