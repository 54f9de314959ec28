/*
 * livestreams.h: the operator streams open right now (connect, forward and
 * /k8s requests), for the status page (GET /v1/status) and the drain.
 *
 * A relay or a /k8s exchange embeds one struct live_stream, points it at
 * its own fields and enters it in its gateway's list while it lives:
 * adding and removing are O(1) (a doubly linked list); listing is
 * O(streams).  One list per loop (docs/0040 step 6): loop 0's is
 * gw->live_streams, loop k's loop->live_streams (loop.h); a stream is in
 * the list of the loop it lives on (live_streams_here when it is made),
 * and only that loop's thread adds, removes, walks or ends it.  The count
 * alone may be read from any thread (live_streams_count_all).
 *
 * It is also the index a revocation ends streams by (docs/0027): each
 * entry names the credential it was opened with (its token id, its
 * principal) and the agent it reaches, and carries a way to end it.
 */
#ifndef TETHER_LIVESTREAMS_H
#define TETHER_LIVESTREAMS_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/queue.h>

struct gateway;

struct live_stream {
	TAILQ_ENTRY(live_stream) link;
	struct live_streams *list;   /* the list it is in now, or NULL */
	const char *kind;            /* "connect", "forward" or "k8s" */
	const char *principal;       /* "admin:<token id>" or "user:<name>" */
	const char *cluster, *node, *target;   /* target: HOST:PORT, or a /k8s path */
	const uint64_t *up, *down;   /* bytes client->agent, agent->client so far */
	int64_t started;             /* Unix seconds */
	/* What a revocation matches (live_stream_end_matching), "" or NULL
	 * when not known here: the far side of a peer link knows the
	 * principal and the agent, not the token. */
	const char *token_id;        /* the token it was opened with */
	const char *agent_id;        /* the agent it reaches */
	/* Ends the stream for reason ("token T revoked"): the owner marks it
	 * ended at once (its audit line will say end=revoked) and ends it
	 * from its own event on the loop, never inside this call (the
	 * lifecycle rule, docs/0015), so it neither frees nor leaves the list
	 * here.  Called at most once per stream.  NULL: cannot be ended. */
	void (*end)(struct live_stream *ls, const char *reason);
	int ending;                  /* end was called (livestreams.c's) */
};

/* What a revocation names. */
enum live_credential {
	LIVE_BY_TOKEN,       /* id: a token id */
	LIVE_BY_PRINCIPAL,   /* id: "user:<name>" or "admin:<token id>" */
	LIVE_BY_AGENT,       /* id: an agent id */
};

/* The live streams of one loop.  All zeroes is an empty list (a struct
 * gateway or a struct loop needs no call to make it).  n is written by the
 * owning loop only, and read by any thread. */
struct live_streams {
	TAILQ_HEAD(, live_stream) head;
	atomic_size_t n;
};

/* The list of the loop that calls it: loop_here(gw)'s (loop.h) for loops
 * 1..n-1, gw->live_streams on loop 0 or off every loop of gw (unit tests
 * without loops).  O(1). */
struct live_streams *live_streams_here(struct gateway *gw);

/* How many streams are live on every loop of gw together (the drain's
 * poll), from any thread: a sum of relaxed loads, each loop's exact at
 * some moment of the call.  O(loops). */
size_t live_streams_count_all(const struct gateway *gw);

/* Enters ls in l (its fields must stay valid until live_stream_remove); a
 * stream already in a list stays where it is. */
void live_stream_add(struct live_streams *l, struct live_stream *ls);
/* Leaves the list it is in; idempotent. */
void live_stream_remove(struct live_stream *ls);
/* How many are live in l now.  O(1), any thread. */
size_t live_stream_count(const struct live_streams *l);
/* Calls fn for every live stream of l, oldest first (fn may not add or
 * remove). */
void live_stream_foreach(const struct live_streams *l,
    void (*fn)(const struct live_stream *, void *), void *arg);
/* Ends every stream of l that `by` matches id (an empty id matches none),
 * calling its end once with reason; streams already ending are skipped.
 * Returns how many were told to end now.  O(live streams), no allocation,
 * no store call: made for the loop, on a revocation's notice. */
size_t live_stream_end_matching(struct live_streams *l, enum live_credential by,
    const char *id, const char *reason);

#endif
