/*
 * agentdir.h: the whole process's directory of the agents whose tunnels it
 * holds, whichever loop each tunnel lives on (docs/0040 section 1 and step
 * 4).
 *
 * Each loop keeps its own sessions in its hub (hub.h: pointers, that
 * loop's thread only).  The directory holds copies of what other threads
 * need to know about them: agent id, cluster, node, whether the agent may
 * carry streams now, when its tunnel came up, and where it lives: the
 * loop's index and a generation.  The generation is new at every add
 * (process-wide, never 0, never reused), so an entry names one tunnel:
 * a reconnecting agent's add takes the entry over and hands back the old
 * (loop, generation), and the old session's later remove or update, which
 * names its own generation, is a no-op.  Nothing here points at a session:
 * a reader that must act on the tunnel asks its loop by agent id (today,
 * with tunnels on loop 0 only, session_here in session.h).
 *
 * Every call takes one mutex (held for one hash lookup, or one cluster's
 * chain for a pick and a cluster count, or the whole table for a foreach);
 * any thread may call any function.  Entries are found by id (a hash
 * table, O(1)) and by cluster (a second table over the same entries,
 * O(agents of the cluster)); ~200 bytes per agent.
 */
#ifndef TETHER_AGENTDIR_H
#define TETHER_AGENTDIR_H

#include <limits.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "store.h"

struct agentdir;

/* Where a tunnel lives: its loop (struct loop's index) and the
 * generation its add was given (0: none). */
struct agentdir_place {
	unsigned loop;
	uint64_t generation;
};

/* A copy of one entry (readers get copies: the entry may go at once). */
struct agentdir_entry {
	char agent_id[STORE_ID_MAX + 1];
	char cluster[STORE_ID_MAX + 1];
	char node[STORE_NAME_MAX + 1];
	bool active;                  /* established and ACTIVE: may carry streams */
	int64_t since;                /* Unix seconds: when this tunnel came up */
	struct agentdir_place at;
};

/* An empty directory, or NULL when out of memory. */
struct agentdir *agentdir_new(void);
/* Frees d and whatever entries it still holds (at a clean stop it is
 * empty: every session removed itself).  NULL is a no-op. */
void agentdir_free(struct agentdir *d);

/*
 * agent_id's tunnel is now the one on loop `loop` (cluster, node, active as
 * given; since = now).  Returns the new entry's generation (never 0) and,
 * when old is non-NULL, sets *old to the place of the tunnel it replaced
 * (generation 0: there was none), which its loop should close.  Ids and
 * names longer than the store's are cut.  O(1); aborts when out of memory
 * (a few hundred bytes).
 */
uint64_t agentdir_add(struct agentdir *d, const char *agent_id,
    const char *cluster, const char *node, bool active, unsigned loop,
    struct agentdir_place *old);
/* Removes agent_id's entry if it is still the one at `at` (same loop and
 * generation): 1 removed, 0 not (absent, or taken over since: a stale
 * remove is a no-op).  O(1). */
int agentdir_remove(struct agentdir *d, const char *agent_id,
    struct agentdir_place at);
/* Sets the node and whether the agent is active, if the entry is still
 * the one at `at`: 1 set, 0 not (stale or absent).  O(1). */
int agentdir_update(struct agentdir *d, const char *agent_id,
    struct agentdir_place at, const char *node, bool active);

/* 1 and *out (optional) a copy of agent_id's entry, or 0 if no tunnel of
 * it is here.  O(1). */
int agentdir_find(struct agentdir *d, const char *agent_id,
    struct agentdir_entry *out);
/* When agent_id's current tunnel came up (Unix seconds), 0 if none. */
int64_t agentdir_since(struct agentdir *d, const char *agent_id);
/* Agents held: all, or of one cluster (O(agents of the cluster)). */
size_t agentdir_count(struct agentdir *d);
size_t agentdir_count_cluster(struct agentdir *d, const char *cluster);

/* agentdir_pick's near when the caller is on no loop: no preference. */
#define AGENTDIR_NO_LOOP UINT_MAX

/*
 * An active agent of cluster (of node, when node is non-NULL): one whose
 * tunnel is on loop `near` when the cluster has one there (the caller's
 * loop: its streams then cross no loop link, docs/0040 step 8), else any;
 * among several, taking turns as the hub did (a rotor per calling loop,
 * loops 64 apart sharing one, and one for AGENTDIR_NO_LOOP: n picks from one
 * loop over the k agents it may take give each n/k, +-1, whatever other
 * loops pick meanwhile).  A node names its agent wherever it lives: the
 * preference only chooses among the agents that match.  1 and a copy in
 * *out (optional), or 0 if none.  *connected (optional) says whether any
 * matching agent is held at all, active or not.  O(agents of the cluster)
 * under the mutex: every dial, forwarded stream and /k8s request calls it.
 */
int agentdir_pick(struct agentdir *d, const char *cluster, const char *node,
    unsigned near, struct agentdir_entry *out, int *connected);

/*
 * Where a connection for cluster (node, when non-NULL) should live so its
 * streams cross no loop link (docs/0040 step 8's landing): `near` itself
 * when an active matching agent's tunnel is there (its rotor untouched:
 * the pick on that loop takes the turn), else the loop of the agent a
 * pick from `near` takes now (near's rotor turns, so landings spread over
 * the cluster's agents).  1 and *loop, or 0 (no active matching agent
 * held: the caller keeps its own choice).  O(agents of the cluster) under
 * the mutex, as agentdir_pick; no copy of the entry.
 */
int agentdir_land(struct agentdir *d, const char *cluster, const char *node,
    unsigned near, unsigned *loop);

/*
 * The loops that hold an active agent of cluster (of node, when
 * non-NULL): bit i of *mask for loop i (loops 0..63; an agent on a loop
 * past 63 sets none).  Returns how many active matching agents there are
 * (0: none held; *mask 0).  No rotor turns (--landing any's weighing,
 * access_land_loop, only looks).  O(agents of the cluster) under the
 * mutex, as agentdir_land.
 */
size_t agentdir_loops(struct agentdir *d, const char *cluster,
    const char *node, uint64_t *mask);

/* Calls fn with a copy of every entry, under the mutex: fn must be short
 * and must not call agentdir (it would wait for itself).  Returns how many
 * entries fn saw.  O(agents). */
size_t agentdir_foreach(struct agentdir *d,
    void (*fn)(const struct agentdir_entry *e, void *arg), void *arg);

#endif
