/*
 * livestreams.c: a gateway's list of live operator streams (see
 * livestreams.h).
 */
#include "livestreams.h"

#include <stddef.h>

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
	l->n++;
}

void
live_stream_remove(struct live_stream *ls)
{
	struct live_streams *l = ls->list;

	if (l == NULL)
		return;
	TAILQ_REMOVE(&l->head, ls, link);
	ls->list = NULL;
	l->n--;
}

size_t
live_stream_count(const struct live_streams *l)
{
	return l->n;
}

void
live_stream_foreach(const struct live_streams *l,
    void (*fn)(const struct live_stream *, void *), void *arg)
{
	const struct live_stream *ls;

	TAILQ_FOREACH(ls, &l->head, link)
		fn(ls, arg);
}
