/*
 * livestreams.c: the list of live operator streams (see livestreams.h).
 */
#include "livestreams.h"

#include <stddef.h>

static TAILQ_HEAD(, live_stream) streams = TAILQ_HEAD_INITIALIZER(streams);
static size_t nstreams;

void
live_stream_add(struct live_stream *ls)
{
	if (ls->listed)
		return;
	TAILQ_INSERT_TAIL(&streams, ls, link);
	ls->listed = 1;
	nstreams++;
}

void
live_stream_remove(struct live_stream *ls)
{
	if (!ls->listed)
		return;
	TAILQ_REMOVE(&streams, ls, link);
	ls->listed = 0;
	nstreams--;
}

size_t
live_stream_count(void)
{
	return nstreams;
}

void
live_stream_foreach(void (*fn)(const struct live_stream *, void *), void *arg)
{
	const struct live_stream *ls;

	TAILQ_FOREACH(ls, &streams, link)
		fn(ls, arg);
}
