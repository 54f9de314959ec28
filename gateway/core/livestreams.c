/*
 * livestreams.c: a loop's list of live operator streams (see
 * livestreams.h).
 */
#include "livestreams.h"

#include <stddef.h>
#include <string.h>

#include "gateway.h"
#include "loop.h"

struct live_streams *
live_streams_here(struct gateway *gw)
{
	struct loop *l = loop_here(gw);

	return l != NULL && l->index > 0 ? &l->live_streams : &gw->live_streams;
}

size_t
live_streams_count_all(const struct gateway *gw)
{
	size_t n = live_stream_count(&gw->live_streams);

	for (unsigned i = 1; gw->loops != NULL && i < gw->nloops; i++)
		n += live_stream_count(&gw->loops[i].live_streams);
	return n;
}

void
live_stream_add(struct live_streams *l, struct live_stream *ls)
{
	if (ls->list != NULL)
		return;
	/* A zeroed list is empty: made a TAILQ at its first entry. */
	if (l->head.tqh_last == NULL)
		TAILQ_INIT(&l->head);
	TAILQ_INSERT_TAIL(&l->head, ls, link);
	ls->list = l;
	atomic_store_explicit(&l->n, atomic_load_explicit(&l->n,
	    memory_order_relaxed) + 1, memory_order_relaxed);
}

void
live_stream_remove(struct live_stream *ls)
{
	struct live_streams *l = ls->list;

	if (l == NULL)
		return;
	TAILQ_REMOVE(&l->head, ls, link);
	ls->list = NULL;
	atomic_store_explicit(&l->n, atomic_load_explicit(&l->n,
	    memory_order_relaxed) - 1, memory_order_relaxed);
}

size_t
live_stream_count(const struct live_streams *l)
{
	return atomic_load_explicit(&l->n, memory_order_relaxed);
}

void
live_stream_foreach(const struct live_streams *l,
    void (*fn)(const struct live_stream *, void *), void *arg)
{
	const struct live_stream *ls;

	TAILQ_FOREACH(ls, &l->head, link)
		fn(ls, arg);
}

static int
live_stream_matches(const struct live_stream *ls, enum live_credential by,
    const char *id)
{
	const char *have = NULL;

	switch (by) {
	case LIVE_BY_TOKEN: have = ls->token_id; break;
	case LIVE_BY_PRINCIPAL: have = ls->principal; break;
	case LIVE_BY_AGENT: have = ls->agent_id; break;
	}
	return have != NULL && have[0] != '\0' && strcmp(have, id) == 0;
}

size_t
live_stream_end_matching(struct live_streams *l, enum live_credential by,
    const char *id, const char *reason)
{
	struct live_stream *ls;
	size_t n = 0;

	if (id == NULL || id[0] == '\0' || l->head.tqh_last == NULL)
		return 0;
	/* end neither frees nor leaves the list (livestreams.h): a plain walk. */
	TAILQ_FOREACH(ls, &l->head, link) {
		if (ls->end == NULL || ls->ending || !live_stream_matches(ls, by, id))
			continue;
		ls->ending = 1;
		ls->end(ls, reason);
		n++;
	}
	return n;
}
