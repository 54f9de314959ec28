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

/* Ends the streams open here that the revocation of `what` id took the
 * right from (livestreams.h): O(live streams), no store call. */
static void
notices_streams_end(struct gateway *gw, enum live_credential by,
    const char *what, const char *id)
{
	char reason[160];
	size_t n;

	snprintf(reason, sizeof(reason), "%s %s revoked", what, id);
	if ((n = live_stream_end_matching(&gw->live_streams, by, id, reason)) > 0)
		info("notices: a revocation ends the streams it opened here",
		    KV_S(what, id), KV_U("streams", n));
}

static void
reread_done(void *arg)
{
	struct reread *r = arg;
	struct agentdir_entry e;
	struct session *s;

	/* Stopped meanwhile (shutdown): the sessions are going away. */
	for (size_t i = 0; r->gw->notices != NULL && i < r->n; i++) {
		if (r->a[i].rc != STORE_OK)
			continue;
		/* Looked up again: the tunnel may have closed or been replaced. */
		if (r->a[i].rec.state == AGENT_REVOKED)
			notices_streams_end(r->gw, LIVE_BY_AGENT, "agent",
			    r->a[i].id);
		if (agentdir_find(r->gw->agents, r->a[i].id, &e) &&
		    (s = session_here(r->gw, &e)) != NULL)
			session_record_changed(s, &r->a[i].rec);
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

static void
token_reread_add(const struct live_stream *ls, void *arg)
{
	struct token_reread *r = arg;

	if (ls->token_id == NULL || ls->token_id[0] == '\0' ||
	    strlen(ls->token_id) > TOKEN_ID_LEN)
		return;
	snprintf(r->t[r->n].id, sizeof(r->t[r->n].id), "%s", ls->token_id);
	r->n++;
}

static int
token_id_cmp(const void *a, const void *b)
{
	return strcmp(a, b);
}

/* Re-reads the tokens of every stream open here (distinct ids: one read
 * each, on the store thread). */
static void
notices_resync_streams(struct gateway *gw)
{
	size_t live = live_stream_count(&gw->live_streams), n = 0;
	struct token_reread *r;

	if (live == 0)
		return;
	if ((r = calloc(1, sizeof(*r) + live * sizeof(r->t[0]))) == NULL) {
		warn("notices: out of memory to re-read the tokens of open streams");
		return;
	}
	r->gw = gw;
	live_stream_foreach(&gw->live_streams, token_reread_add, r);
	qsort(r->t, r->n, sizeof(r->t[0]), token_id_cmp);
	for (size_t i = 0; i < r->n; i++)
		if (n == 0 || strcmp(r->t[n - 1].id, r->t[i].id) != 0)
			r->t[n++] = r->t[i];
	r->n = n;
	if (r->n == 0 || store_worker_submit(gw->storew, token_reread_work,
	    token_reread_done, r) != 0) {
		if (r->n > 0)
			warn("notices: store queue full: the tokens of open streams "
			    "are not re-read", KV_U("tokens", r->n));
		free(r);
	}
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
		/* Cheap and rare: the whole cache, whoever's token it was. */
		access_revoked(gw);
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
