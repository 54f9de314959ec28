/*
 * store_worker.h: store calls off the event loop.  One thread with its own
 * store connection runs jobs in the order they were submitted and posts
 * each result back to the loop, so that a database answering in
 * milliseconds (PostgreSQL across a network), or stalling, never holds up
 * tunnels, streams and pings (docs/0016).
 *
 * A job is two functions and an argument the caller owns: work(store, arg)
 * runs on the store thread and may only touch arg and the store; done(arg)
 * runs later on the loop, and frees arg.  To cancel (the session that asked
 * went away), the caller clears what done would reach through arg; the job
 * still runs and done is still called, once.
 *
 * A pool (store_worker_start_pool) is the same with several threads, each
 * with its own connection, taking jobs as they come free: jobs run at once
 * and finish in any order, so only jobs that need no order between them
 * go there (docs/0033: a PostgreSQL far away answers N registrations in
 * the time of one).
 *
 * A keyed job (store_worker_submit_keyed) runs on the one thread its key
 * picks: the jobs of one key run one after another in the order submitted,
 * on one connection, while other keys' run beside them (an agent's calls,
 * docs/0041).
 *
 * A job submitted grouped (store_worker_submit_grouped) may share one
 * transaction and one commit with the jobs queued beside it, on a store
 * that runs groups (SQLite: its commit is what a call costs, docs/0039);
 * each of its store calls still commits or fails alone, and done runs only
 * once the group is committed.
 *
 * Each job is answered on its home loop: the loop that submitted it
 * (loop_self(), core/loop.h; none: the loop of base).  Each loop sees its
 * own answers in the order one store thread ran them; another loop's go
 * through that loop's inbox (loop_call: one malloc, one lock per job).  A
 * job whose home has stopped is not answered there: its done runs in
 * store_worker_stop, after the other done callbacks (docs/0040 step 3).
 *
 * Costs: one thread and one store connection each, one eventfd; at most
 * cap jobs waiting (a submit past it is refused), each a small node.
 */
#ifndef TETHER_STORE_WORKER_H
#define TETHER_STORE_WORKER_H

#include <stdbool.h>
#include <stddef.h>

#include "store.h"

struct event_base;
struct store_worker;

typedef void store_work_fn(struct store *s, void *arg);
typedef void store_done_fn(void *arg);

/*
 * Opens the thread's own connection to url (the store is already migrated
 * by the loop's), hands it timing (store_set_timing; NULL: none, else
 * called on the store thread) and starts the thread; done callbacks run on
 * base.  Returns 0, or -1 with err.
 */
int store_worker_start(struct event_base *base, const char *url, size_t cap,
    store_timing_fn *timing, void *timing_arg, struct store_worker **out,
    char *err, size_t errlen);
/* The same with nthreads threads (0 counts as 1), each opening its own
 * connection: jobs run at once, in no order. */
int store_worker_start_pool(struct event_base *base, const char *url,
    size_t cap, size_t nthreads, store_timing_fn *timing, void *timing_arg,
    struct store_worker **out, char *err, size_t errlen);
/* Its threads (1 for store_worker_start). */
size_t store_worker_threads(const struct store_worker *w);

/*
 * Queues a job.  Returns 0, or -1 when cap jobs are already waiting (or
 * out of memory): nothing was queued and done will not be called.
 * Loop thread only.
 */
int store_worker_submit(struct store_worker *w, store_work_fn *work,
    store_done_fn *done, void *arg);

/*
 * The same for a job that may run in a group (see above).  Its work must
 * be one that can run twice: when its group cannot commit (a full disk),
 * nothing of it was kept and it runs again, alone; work then starts from
 * arg as submitted (it writes its answers there, never reads them back)
 * and its store calls are made again.  Loop thread only.
 */
int store_worker_submit_grouped(struct store_worker *w, store_work_fn *work,
    store_done_fn *done, void *arg);

/*
 * Queues a job on the thread key picks (store_worker_shard(key, threads));
 * key NULL: as store_worker_submit (groupable false) or
 * store_worker_submit_grouped (true).  A job of one key never runs before
 * nor beside an earlier job of the same key; in a pool it may run before
 * an earlier shared or other-keyed job.  key is read during the call only.
 * Returns 0, or -1 as store_worker_submit.  Loop thread only.
 */
int store_worker_submit_keyed(struct store_worker *w, const char *key,
    bool groupable, store_work_fn *work, store_done_fn *done, void *arg);

/*
 * The thread of nthreads a key picks: the same key always the same
 * thread, keys spread evenly (a 64-bit FNV-1a hash, modulo nthreads); 0
 * when nthreads is 0 or 1.  Pure; any thread.
 */
size_t store_worker_shard(const char *key, size_t nthreads);

/*
 * Bounds w's groups: at most max_jobs jobs (0 or 1: no groups, each job
 * alone as store_worker_submit's), a group taking no further job once it
 * has held the store hold_ms.  The defaults (64 jobs, 10 ms) serve the
 * gateway; tests and benchmarks set others.  Loop thread.
 */
void store_worker_set_group(struct store_worker *w, size_t max_jobs,
    unsigned hold_ms);

/* Jobs queued or running (loop thread). */
size_t store_worker_pending(const struct store_worker *w);

/*
 * Lets the threads run every job queued so far (the last state changes of
 * sessions closed at shutdown), stops it, then calls done for each job, in
 * order, and for each job whose home loop had stopped.  Closes the
 * connection and frees w.  Loop thread, once the loop has stopped (done
 * runs here, not from the loop), and once every other home loop has been
 * stopped and joined (loops_stop: a stopped loop's inbox hands its jobs
 * back to w).  NULL is allowed.
 */
void store_worker_stop(struct store_worker *w);

#endif
