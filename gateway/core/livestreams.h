/*
 * livestreams.h: the operator streams open right now (connect, forward and
 * /k8s requests), for the status page (GET /v1/status).
 *
 * A relay or a /k8s exchange embeds one struct live_stream, points it at
 * its own fields and enters it while it lives: adding and removing are O(1) (a doubly linked
 * list); listing is O(streams).  One list per process.
 */
#ifndef TETHER_LIVESTREAMS_H
#define TETHER_LIVESTREAMS_H

#include <stddef.h>
#include <stdint.h>
#include <sys/queue.h>

struct live_stream {
	TAILQ_ENTRY(live_stream) link;
	int listed;                  /* in the list now */
	const char *kind;            /* "connect", "forward" or "k8s" */
	const char *principal;       /* "admin:<token id>" or "user:<name>" */
	const char *cluster, *node, *target;   /* target: HOST:PORT, or a /k8s path */
	const uint64_t *up, *down;   /* bytes client->agent, agent->client so far */
	int64_t started;             /* Unix seconds */
};

/* Enters ls (its fields must stay valid until live_stream_remove). */
void live_stream_add(struct live_stream *ls);
/* Leaves the list; idempotent. */
void live_stream_remove(struct live_stream *ls);
/* How many are live now.  O(1). */
size_t live_stream_count(void);
/* Calls fn for every live stream, oldest first (fn may not add or remove). */
void live_stream_foreach(void (*fn)(const struct live_stream *, void *), void *arg);

#endif
