/*
 * runtime.h: process-wide settings every Tether program makes first thing.
 */
#ifndef TETHER_RUNTIME_H
#define TETHER_RUNTIME_H

/*
 * Ignores SIGPIPE (a peer that goes away is an error return, not death),
 * makes jansson wipe every block it frees (JSON carries tokens), and
 * tunes malloc for bulk streams: buffers of 128 KiB to 1 MiB come and go for
 * every message, and glibc's defaults would map and unmap (or trim and
 * regrow) them each time, paying a page fault per 4 KiB.
 */
void runtime_init(void);

struct event_base;
/*
 * The process's one event loop.  epoll with a changelist: interest in
 * writability comes and goes with every message, and the changelist folds
 * those changes into one epoll_ctl per socket per loop iteration, or none.
 */
struct event_base *runtime_event_base(void);

/*
 * Runs what base still has queued, after its loop has stopped and the
 * owner has ended its objects: call it before event_base_free.  An object
 * ended on the loop is freed by its own active event (docs/0015: a
 * bridge, a multiplexer's ended streams, a WebSocket client); and
 * bufferevent_free only drops our reference: a deferred callback already
 * queued for the bufferevent (BEV_OPT_DEFER_CALLBACKS; say its peer's last
 * bytes were read in the loop pass that ended with the loop's break) holds
 * another, and the bufferevent, its SSL and its socket are freed when that
 * callback has run, then by the finalizers it queues.  The loop has
 * stopped, so without this pass none of that happens and event_base_free
 * drops the callbacks: the memory leaks.  Never blocks: only callbacks
 * already active run (and timers already due), at most 16 passes; an
 * object freed this way queues nothing new once its callbacks ran.
 */
void runtime_drain(struct event_base *base);

#include <stddef.h>
#include <stdint.h>
#include <sys/time.h>

/*
 * Raises the soft open-files limit (RLIMIT_NOFILE) to the hard one: every
 * tunnel, stream and dial is a descriptor, and the usual soft limit (1024)
 * caps a gateway at about a thousand agents.  Returns the soft limit now in
 * force (LONG_MAX when unlimited, -1 when it cannot be read); *was gets the
 * soft limit before (may be NULL).  The caller says what the limit means.
 */
long runtime_raise_nofile(long *was);

/* ms milliseconds as the struct timeval libevent's timers take. */
struct timeval runtime_ms_timeval(uint32_t ms);

/*
 * The same as a libevent "common timeout" of base: a timer of a duration
 * that thousands of events share (every tunnel's ping interval) goes into
 * that duration's queue, O(1) to add, re-add and remove, instead of
 * libevent's heap (O(log n), a cache miss per level: re-arming tens of
 * thousands of ping timers was the largest user-space cost of pinging
 * them).  For event_add and bufferevent_set_timeouts on base only.  A base
 * holds at most 256 such durations: past that, and for 0, the plain
 * timeval.  Cost: a walk of base's durations (a handful) per call.
 */
struct timeval runtime_common_timeval(struct event_base *base, uint32_t ms);

/*
 * Audit lines of one pass of base's loop leave in one write(2), at the end
 * of the pass (log_audit_hold; the first held line activates an event that
 * runs after the callbacks already active, or, when the pass's flush of
 * TLS records is scheduled already, is written right after that flush:
 * tls_write_after_flush, one event for both).  The gateway writes an audit
 * line per proxied request: one write per request was ~8 % of its CPU
 * under wrk.  Call on the thread that runs base's loop: the held lines and
 * the event are that thread's (each loop thread calls it for its own
 * base).  Returns 0, or -1 (out of memory: lines leave at once, as
 * before).  runtime_audit_per_pass(NULL) writes what this thread holds and
 * stops: call it before event_base_free, on the same thread.
 */
int runtime_audit_per_pass(struct event_base *base);

/*
 * Gives back what start-up used and a settled process does not: the free
 * memory malloc holds (malloc_trim) and this process's mappings of the
 * read-only segments of the program and its shared libraries (code and
 * constants, never written: madvise MADV_DONTNEED drops the page-table
 * entries; the pages stay in the page cache, and what is still used is
 * mapped back by the next touch, a minor fault per 64 KiB), and the pages
 * of their writable segments (RELRO'd tables) that /proc/self/pagemap
 * says were never written and that hold what the object's file holds at
 * their place (what a dropped page refaults to; under qemu-user the
 * pagemap is the host's and says nothing of ours).  Written pages are left
 * alone.  Single-threaded callers only: a page written by another thread
 * between the look and the release would be lost.  For a long-lived
 * process once its start-up (key loading, certificate parsing, a TLS
 * handshake) is done: the agent calls it when its tunnel becomes active
 * (docs/0025).  Returns the bytes released.  Cost: a walk of the loaded
 * objects, one madvise per read-only segment, and per page of a writable
 * one that pagemap calls unwritten a 4 KiB read of its file, a compare and
 * a madvise; then the refaults of what is still in use.
 */
size_t runtime_release_startup(void);

/* runtime_release_startup reading page states from the file pagemap (laid
 * out as /proc/self/pagemap) instead: a test's stand-in for a pagemap that
 * misreports pages, as qemu-user's does. */
size_t runtime_release_startup_with(const char *pagemap);

/* Milliseconds on CLOCK_MONOTONIC: for deadlines and ages, never for
 * times shown or stored (a wall-clock step does not move it). */
int64_t runtime_monotonic_ms(void);

/*
 * A test-only pause: when the environment's TETHER_TEST_STOP_AT names
 * step, logs "test hook: stopped at step" and stops the process
 * (SIGSTOP), for a test to kill -9 it there (tests/integration/
 * test_key_rotation.sh).  Nothing otherwise: one getenv per call, made
 * only at the rare steps that name one (a key rotation's).
 */
void runtime_test_stop(const char *step);

#endif
