/*
 * loop.h: the gateway's event loops (--workers, docs/0032 and docs/0040)
 * and the one way a thread hands work to another loop: its inbox.
 *
 * Loop 0 runs on the thread that made the set, on the caller's base
 * (gw->base); loops 1..n-1 each have a thread and an event_base of their
 * own (signals blocked: they stay loop 0's).  Across loops nothing is
 * shared by pointer but a message's arg: loop_call gives it to the
 * receiver, which runs fn on its own thread, or, once it stopped, drop
 * frees it.  An inbox is a mutex-guarded list, an awake flag and an
 * eventfd (watched edge-triggered, never read) written only when a call
 * finds the loop asleep: a loop that is running its pass takes its list
 * again before it blocks (loop.c, "The wake rule", proves that no call is
 * left waiting), so a call into it costs no system call.  Each take runs
 * the list whole and in order, so one sender's messages run in the order
 * it sent them.
 * Today loops 1..n-1 run TLS handshakes only (transport/tlsloop.h); tunnels
 * and streams stay on loop 0 (docs/0040 step 2).
 */
#ifndef TETHER_LOOP_H
#define TETHER_LOOP_H

#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include "livestreams.h"

struct access_cache;
struct event;
struct event_base;
struct gateway;
struct hub;
struct loop_msg;
struct tunnel_wait;

/* One loop.  index, base, gw and thread are set before any thread starts
 * and never change; the inbox is the only part other threads touch. */
struct loop {
	unsigned index;               /* 0..n-1 */
	struct event_base *base;      /* loop 0's: the caller's; others' own */
	struct gateway *gw;           /* may be NULL (unit tests) */
	pthread_t thread;             /* the thread that runs it */
	int started;                  /* 1..n-1: the thread runs (joinable) */
	int owns_base;                /* 1..n-1: base is freed with the loop */
	/* The inbox: head, tail, closed and awake under mu (closed written
	 * on the loop's thread, or after it ended). */
	pthread_mutex_t mu;
	struct loop_msg *head, *tail; /* waiting, oldest first */
	int closed;                   /* stopped: calls are dropped at once */
	int awake;                    /* a take is sure to come before the
	                                 loop blocks (loop.c, the wake rule);
	                                 0: the next call writes efd */
	int efd;                      /* eventfd: a call found the loop asleep
	                                 (its counter never read: +1 a wake) */
	atomic_uint signalling;       /* callers between setting awake and
	                                 their efd write (written outside mu):
	                                 loops_free waits for 0 to close efd */
	struct event *wake;           /* efd readable, on base */
	struct event *pass;           /* activated by hand while awake: the
	                                 take at the end of the loop's pass
	                                 (a zero timeout every 8th) */
	unsigned takes;               /* takes in a row that found messages */
	struct loop_msg *own_head, *own_tail; /* its calls to itself: its
	                                 thread's only, no lock */
	struct event *later;          /* a zero timeout: runs the own list
	                                 after the loop's next dispatch */
	/* Tunnels (agents/session.c, routes/tunnel.c; docs/0040 step 7).
	 * hub and tunnel_wait are this loop's thread's only; the atomics
	 * are written here and read by any loop. */
	struct hub *hub;              /* the sessions of this loop (hub.h):
	                                 main.c makes it after loops_new and
	                                 frees it after the joins; NULL: the
	                                 gateway's gw->hub stands for it */
	struct tunnel_wait *tunnel_wait; /* upgrades waiting here for a
	                                 handshake slot (tunnel.c), or NULL */
	_Atomic int64_t wait_oldest_ms; /* monotonic: when the oldest of them
	                                 began to wait; 0: none waits here */
	atomic_uint ntunnels;         /* established tunnels here (its hub) */
	atomic_uint nhandshakes;      /* tunnel handshakes under way here */
	/* The landing's two counts (docs/0040 step 8; access_land_loop and
	 * access_land_dial read them, relaxed, from any loop).  One owner per
	 * counted connection at a time, which gives its places back exactly
	 * once, at its end, with loop_counts_put: server.c counts a connection
	 * from its landing (or its hconn_new), carries the places through the
	 * handshake job, the adopt record and the hconn, and gives them back
	 * in hconn_free or the path that closes it before it is a hconn; a
	 * dial's connection (a route with keeps_counts) hands them to its
	 * wsconn at its 101 (wsconn_keep_counts), which gives them back when
	 * it ends (ws_finish), so a tetherctl connect or forward is counted
	 * for as long as it lives ("Built: the counts follow the dial").  A
	 * tunnel's or a replica's link's 101 gives them back (ntunnels counts
	 * tunnels).  Cost: one relaxed add at the landing, one relaxed sub at
	 * the end, per count; no lock. */
	atomic_uint nconns;           /* connections living here: server.c's
	                                 hconns, those sent here not yet
	                                 arrived, and dials' WebSockets after
	                                 their 101: the client side */
	atomic_uint tunnel_side;      /* operator connections, on any loop,
	                                 whose streams' tunnel side runs here
	                                 (their agent's tunnel is here), as
	                                 --landing any weighed them when they
	                                 landed (/k8s and dials) */
	/* Streams and access (docs/0040 step 6: livestreams.c, access.c):
	 * loops 1..n-1's own, used on their thread only.  Loop 0's are the
	 * gateway's (gw->live_streams, gw->access_cache), as gw->base is
	 * loop 0's base: reach "this loop's"
	 * with live_streams_here (livestreams.h) and the like, never by
	 * index.  live_streams' count may be read from any thread. */
	struct live_streams live_streams; /* operator streams open here */
	struct access_cache *access_cache; /* made on first use (access.c),
	                                   freed by access_loops_free */
};

/* The loop whose thread calls it, or NULL on a thread that is no loop's.
 * Cost: one thread-local read. */
struct loop *loop_self(void);

/* loop_self() when it is one of gw's loops, else NULL (a thread that runs
 * no loop of gw: unit tests without loops, the store thread).  O(1). */
struct loop *loop_here(const struct gateway *gw);

/* The event base of the calling loop of gw (loop_here's), or gw->base off
 * every loop of gw: where an object made now must put its events (it
 * lives on this loop).  O(1). */
struct event_base *loop_base_here(struct gateway *gw);

/*
 * Makes n loops (n >= 1): loop 0 on home (this thread's base, watched for
 * its inbox from now on), 1..n-1 each with a base and a thread, running.
 * gw is stored in each (may be NULL).  Returns the array, the caller's to
 * give to loops_free, or NULL with err (nothing left running).  From the
 * thread that runs home, which becomes loop 0's (loop_self()).
 */
struct loop *loops_new(struct event_base *home, unsigned n,
    struct gateway *gw, char *err, size_t errlen);

/*
 * Has fn(arg) run on to's thread, after every message this thread sent to
 * to before; or, when to has stopped (or memory is out), drop(arg) on the
 * calling thread, at once.  Either way arg is no longer the caller's: fn
 * or drop runs exactly once (drop may be NULL: nothing to free).  From any
 * thread, to itself included (fn runs on a later pass, never inline).
 * Returns 0 queued, -1 dropped.  Cost: one malloc and one lock; and
 * when to is asleep (blocked, or about to block, in its event loop with
 * nothing left to take) one eventfd write (after the lock; the receiver's
 * wake reads nothing back).  A call into a loop that is running a pass
 * begun by a wake costs no system call: it is taken at that pass's end.
 * A call into the caller's own loop takes no lock and writes nothing: a
 * zero timeout runs it after the loop's next poll (its epoll changes
 * made by then).
 */
int loop_call(struct loop *to, void (*fn)(void *arg), void *arg,
    void (*drop)(void *arg));

/*
 * loop_call(fn, arg) to each of loops[0..n-1], the caller's own included
 * (from its inbox, never inline): fn(arg) runs once on each loop that has
 * not stopped; arg is shared, so fn only reads it (or writes what it owns
 * by loop index).  Once every loop ran it or dropped it, done(arg) runs
 * exactly once, on the thread of the last one (the caller's when all were
 * dropped at once) (may be NULL).  Returns how
 * many loops will run fn (the others dropped it at once).  Cost: one
 * allocation for the count, then n loop_calls.
 */
unsigned loop_broadcast(struct loop *loops, unsigned n,
    void (*fn)(void *arg), void *arg, void (*done)(void *arg));

/*
 * A whole-process view (docs/0040: the status page, a revocation's
 * count): fill(arg) runs once on each of loops[0..n-1] that has not
 * stopped, from its inbox, where it copies what that loop owns into the
 * part of arg its loop index names (fill writes nothing else of arg);
 * once every loop ran it or dropped it, done(arg) runs on home's thread
 * (the caller's loop, normally), from its inbox.  If home has stopped by
 * then, drop(arg) runs instead (on the thread of the last loop; drop may
 * be NULL).  Returns 0, or -1 when out of memory (drop(arg) ran at once).
 * From any thread.  Cost: two allocations and n + 1 loop_calls.
 */
int loop_gather(struct loop *loops, unsigned n, struct loop *home,
    void (*fill)(void *arg), void (*done)(void *arg), void (*drop)(void *arg),
    void *arg);

/* Asks l (1..n-1) to stop: it runs what was sent to it before, then its
 * inbox closes (what comes after is dropped) and its thread returns;
 * loops_stop joins it.  Any thread.  Cost: one loop_call. */
void loop_stop(struct loop *l);

/* Gives back one connection's places in the landing's counts (see
 * nconns): one in conns->nconns and one in tunnel->tunnel_side (either
 * NULL: none there).  By the connection's one owner, once, at its end;
 * any thread.  Cost: a relaxed atomic sub per count. */
void loop_counts_put(struct loop *conns, struct loop *tunnel);

/* CPU seconds loop l's thread used since it started; any thread.  0 when
 * it cannot be read. */
double loop_cpu_seconds(const struct loop *l);

/*
 * Stops loops 1..n-1 (each runs what was sent to it before, then drops
 * whatever comes after) and joins their threads; then runs loop 0's inbox
 * on this thread until empty, so what they sent back is taken.  From loop
 * 0's thread.  Safe to call twice; loops NULL: nothing.  Blocks until
 * every thread returned (at shutdown only).
 */
void loops_stop(struct loop *loops, unsigned n);

/*
 * Stops and joins loops 1..n-1 if they still run (what they were sent
 * before runs), then closes every inbox (what is left in loop 0's is
 * dropped: loops_stop first to have loop 0 run it) and frees every loop:
 * bases of 1..n-1, eventfds, the array; no thread may call them after.
 * Loop 0's base stays the caller's; call before freeing it.  From loop
 * 0's thread.  NULL: nothing.
 */
void loops_free(struct loop *loops, unsigned n);

#endif
