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
#include "gateway.h"
#include "hub.h"
#include "log.h"
#include "presence.h"
#include "session.h"
#include "store.h"
#include "store_listen.h"
#include "store_worker.h"

#define AGENT_PREFIX "agent:"
#define TOKEN_PREFIX "token:"
#define TUNNEL_PREFIX "tunnel:"

struct notices {
	struct store_listener *listener;
};

/* Agents' records to re-read on the store thread, then act on.  n records
 * (ids in, records out), each with its read's result. */
struct reread {
	struct gateway *gw;
	size_t n;
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

static void
reread_done(void *arg)
{
	struct reread *r = arg;
	struct session *s;

	/* Stopped meanwhile (shutdown): the sessions are going away. */
	for (size_t i = 0; r->gw->notices != NULL && i < r->n; i++) {
		if (r->a[i].rc != STORE_OK)
			continue;
		/* Looked up again: the tunnel may have closed or been replaced. */
		if ((s = hub_find(r->gw->hub, r->a[i].id)) != NULL)
			session_record_changed(s, &r->a[i].rec);
	}
	free(r);
}

static struct reread *
reread_new(struct gateway *gw, size_t n)
{
	struct reread *r = calloc(1, sizeof(*r) + n * sizeof(r->a[0]));

	if (r != NULL)
		r->gw = gw;
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
reread_add(struct session *s, void *arg)
{
	struct reread *r = arg;

	snprintf(r->a[r->n].id, sizeof(r->a[r->n].id), "%s", session_agent_id(s));
	r->n++;
}

/* The listener (re)started: whatever was missed meanwhile. */
static void
notices_resync(struct gateway *gw)
{
	struct reread *r;

	access_revoked(gw);
	if (hub_count(gw->hub) == 0)
		return;
	if ((r = reread_new(gw, hub_count(gw->hub))) == NULL) {
		warn("notices: out of memory to re-read the agents held here");
		return;
	}
	hub_foreach(gw->hub, reread_add, r);
	info("notices: re-reading the agents held here", KV_U("agents", r->n));
	reread_submit(gw, r);
}

static void
notices_agent(struct gateway *gw, const char *id)
{
	struct reread *r;

	if (strlen(id) > STORE_ID_MAX || hub_find(gw->hub, id) == NULL)
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
	} else if (strncmp(payload, AGENT_PREFIX, strlen(AGENT_PREFIX)) == 0)
		notices_agent(gw, payload + strlen(AGENT_PREFIX));
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
