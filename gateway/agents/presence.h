/*
 * presence.h: which replica holds which agent's tunnel (docs/0017).
 *
 * Each replica has an id (--replica-id, default HOST-PID), the URL its
 * peers reach it at (--peer-url) and a lease in the store that it renews
 * every PRESENCE_RENEW_MS; a replica that stops renewing (kill -9, a hung
 * host) is gone from presence once its lease ends, PRESENCE_LEASE_MS
 * later.  Each established tunnel is recorded against its replica when it
 * is established and forgotten when it closes.  Store calls: one per
 * renewal, one per tunnel up and down, each a job on the store thread
 * (store_worker.h), so the loop never waits on them; none on the stream
 * path.
 *
 * The presence directory (docs/0023): each renewal also reads, in the same
 * job, the agents whose tunnels other live replicas hold (cluster, node,
 * state, the holder's id and peer URL) and counts the other replicas
 * whose lease runs; it sorts the agents by (cluster, node) and indexes
 * them by agent id on the store thread, and loop 0 publishes the table
 * whole (refcounted, immutable, under gw->publish_mu: any loop reads it,
 * and a swap never frees a table a reader holds; docs/0040 step 4).
 * Costs: one query per PRESENCE_RENEW_MS; ~470 bytes per remote agent, two
 * arrays; a lookup is a lock and two atomics to hold the table, then a
 * binary search (and, for a pick, a walk of the matches), O(log n +
 * agents of the cluster), never a store call.  What it says is at most one
 * renewal (plus the store's answer time) old, and on PostgreSQL a tunnel
 * recorded, moved or forgotten anywhere (or an agent's state changed) is
 * heard at once (notices.h) and read again then: presence_refresh.  A
 * table not refreshed for PRESENCE_LEASE_MS (the store out of reach) is
 * not used.
 *
 * The census (issue 20): every --census-interval (30 s by default, the
 * 15th renewal; rounded up to whole renewals, at least every one), the
 * first renewal included, the renewal's job also counts the agents no
 * live replica holds by how long ago they were last seen
 * (store_agents_offline: one query, O(agents) in the database, three
 * numbers back) and the loop sets tether_agents_offline{over} from them:
 * no series per agent, and every replica reports the same cluster-wide
 * counts.  It counts the agents by release and those holding a rotation's
 * new CA the same way.  And it sets last_seen to now for every agent whose
 * tunnel this replica holds (store_agents_seen_here: one statement), so a
 * replica killed with -9 leaves its agents' last contact at most a census
 * interval (and the lease) old.
 */
#ifndef TETHER_PRESENCE_H
#define TETHER_PRESENCE_H

#include <stddef.h>
#include <stdint.h>

#include "store_worker.h"

#define PRESENCE_RENEW_MS 2000
#define PRESENCE_LEASE_MS 6000
#define PRESENCE_CLAIM_POLL_MS 250  /* start-up: a held id looked at again */
#define PRESENCE_DEAD_MS 3600000    /* start-up: replicas whose lease ended
                                     * this long ago are forgotten */

struct gateway;

/* Takes the lease (gw->replica_id, gw->peer_url) and starts renewing it on
 * gw->base.  A store that refuses now (a full disk) is logged and retried
 * at each renewal.  0, or -1 with err when out of memory. */
int presence_start(struct gateway *gw, char *err, size_t errlen);
/* Stops renewing and queues giving the lease and its tunnel records up (a
 * clean exit: the agents are gone from this replica at once), after every
 * job queued before; store_worker_stop runs it.  Idempotent. */
void presence_stop(struct gateway *gw);
/* NULL while the lease renews; else why the store is out of reach (the
 * last renewal failed, not for a full disk, or has not been answered
 * within PRESENCE_LEASE_MS).  Valid until the loop runs again. */
const char *presence_problem(struct gateway *gw);
/* An agent's tunnel was established here / closed here (queued; a store
 * failure is logged, not fatal). */
void presence_tunnel_up(struct gateway *gw, const char *agent_id);
void presence_tunnel_down(struct gateway *gw, const char *agent_id);
/*
 * presence_tunnel_down with the caller's own store call in the same job,
 * so that a closing tunnel queues one job, not two (its last_seen stamp:
 * a drain of N tunnels queued 2 N jobs on the store thread, past its cap
 * at a few thousand, docs/0017).  On the store thread work(st, arg) runs
 * right after the record's removal (whether that was written or not), on
 * the loop done(arg) right after presence's own answer, once.  The job is
 * grouped (store_worker_submit_grouped): work must be one that can run
 * twice.  For a call that would go to gw->storew unkeyed anyway: the
 * order of the two is kept, and that of everything queued around them.
 * Returns 0 (queued), or -1: nothing was queued (no presence: the caller
 * queues its call itself; a full queue: the removal is lost and logged
 * as presence_tunnel_down's, and so the caller's, queued alone, is).
 */
int presence_tunnel_down_with(struct gateway *gw, const char *agent_id,
    store_work_fn *work, store_done_fn *done, void *arg);
/*
 * presence_tunnel_up with the caller's own store call in the same job, so
 * that a tunnel coming up queues one job, not two (the agent's last_seen
 * stamp and release: a reconnect storm of N agents queued 2 N jobs on the
 * store thread, whose queue holds 4,096, docs/0017).  On the store thread
 * work(st, arg) runs right before the record is written (whether that is
 * then written or not: the stamp was queued first, and still comes
 * first), on the loop done(arg) right before presence's own answer, once.
 * Otherwise as presence_tunnel_down_with: grouped (work must be one that
 * can run twice), for a call that would go to gw->storew unkeyed anyway,
 * 0 (queued) or -1 (nothing queued: no presence, or a full queue, the
 * record lost and logged as presence_tunnel_up's).  Cost: one job (one
 * queue node, one answer on the loop) per tunnel coming up, where there
 * were two; the same two statements.
 */
int presence_tunnel_up_with(struct gateway *gw, const char *agent_id,
    store_work_fn *work, store_done_fn *done, void *arg);

/* Reads the directory again now (a job on the store thread): at most one
 * read queued, and one more once it is answered however often this is
 * called meanwhile. */
void presence_refresh(struct gateway *gw);

/* Whether another replica's lease ran at the last directory read (0 when
 * there is no directory, or it is too old to use): a draining replica's
 * agents have somewhere else to go (docs/0017).  O(1).  Any thread. */
int presence_others_live(struct gateway *gw);

struct store_remote_agent;
/* From the directory: an active agent of cluster (of node, when non-NULL)
 * whose tunnel another replica holds, rotating among several: 1 and a
 * copy in *out, or 0 if none.  *seen (optional) is set to 1 when a
 * matching agent is held elsewhere at all, active or not.  Any thread. */
int presence_remote_pick(struct gateway *gw, const char *cluster,
    const char *node, struct store_remote_agent *out, int *seen);
/* From the directory: agent_id's record if another live replica holds its
 * tunnel (whatever its state): 1 and a copy in *out (optional), else 0.
 * O(log n) (the agent-id index).  Any thread. */
int presence_remote_find(struct gateway *gw, const char *agent_id,
    struct store_remote_agent *out);

#endif
