/*
 * gateway.h: the running gateway's shared context and its configuration.
 *
 * One struct gateway per running gateway (tether-gateway serve makes one).
 * It is the composition root: the server (TLS, HTTP and WebSocket on
 * libevent), the admin API, agent sessions and the hub of connected agents
 * all reach the store, the limits and each other through it.  Whatever a
 * gateway changes while it runs lives in it or in the objects it owns,
 * never in a file's statics, so that two gateways in one process share
 * nothing of it (test_gateways).  Still process-wide: the log and the
 * audit file with its once-per-pass batching (common/log.h, runtime.h),
 * and the metric families (metrics.c's, mux_metrics.h's): two gateways in
 * one process count into the same /metrics.
 */
#ifndef TETHER_GATEWAY_H
#define TETHER_GATEWAY_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "budget.h"
#include "ca.h"
#include "livestreams.h"
#include "mux.h"
#include "netaddr.h"
#include "retry_after.h"

struct event_base;
struct loop;
struct looplinks;
struct server;
struct store;
struct store_worker;
struct hub;
struct agentdir;
struct shares;
struct presence;
struct peers;
struct notices;
struct access_cache;
struct gw_face;
struct presence_table;
struct tunnel_wait;
struct srccount;

/* Limits and timings, each settable by a `serve` flag (see main.c). */
struct gateway_limits {
	uint32_t handshake_timeout_ms;  /* HELLO..WELCOME/REGISTERED must finish within */
	uint32_t max_handshakes;        /* unauthenticated tunnels at once */
	uint32_t max_tls_handshakes;    /* TLS handshakes under way at once */
	uint32_t max_tls_queue;         /* accepted connections waiting for one */
	uint32_t max_tls_per_source;    /* TLS slots + queue places of one source */
	uint32_t tls_hello_timeout_ms;  /* a TLS slot's ClientHello must come within */
	uint32_t tls_handshake_timeout_ms; /* its whole TLS handshake within */
	uint32_t max_handshakes_per_source; /* tunnel handshakes of one source */
	uint32_t handshake_wait_ms;     /* an upgrade past max_handshakes may wait
	                                   this long for a slot (0: 503 at once) */
	uint32_t hello_timeout_ms;      /* a new tunnel's HELLO must come within */
	uint32_t max_connections;       /* HTTP connections (not WebSockets) */
	uint32_t max_connections_per_source; /* of them, from one source */
	uint32_t max_frame_bytes;       /* largest frame after authentication */
	uint32_t max_handshake_frame;   /* largest frame before authentication */
	uint32_t max_queue_bytes;       /* output queued to one peer (tunnel, dial) */
	uint32_t max_handshake_queue;   /* the same before authentication */
	uint32_t verify_timeout_ms;     /* VERIFY -> VERIFY_OK round trip */
	uint32_t max_clock_skew_s;      /* agent clock vs gateway clock */
	uint32_t max_body_bytes;        /* admin API request body */
	uint32_t http_timeout_ms;       /* TLS handshake + request, or keep-alive idle */
	uint32_t ping_interval_ms;      /* WebSocket silence before the gateway pings */
	uint32_t ping_timeout_ms;       /* no answer to that ping: the peer is dropped */
	uint32_t redial_spread_min_ms;  /* the least redial spread agents are
	                                   told (SETTINGS, docs/0035) */
	uint32_t census_interval_ms;    /* the store's agent counts (presence.h) */
};

#define GATEWAY_DEFAULT_LIMITS { \
	.handshake_timeout_ms = 10000, \
	.max_handshakes = 256, \
	.max_tls_handshakes = 32, \
	.max_tls_queue = 4096, \
	.max_tls_per_source = 64, \
	.tls_hello_timeout_ms = 1000, \
	.tls_handshake_timeout_ms = 3000, \
	.max_handshakes_per_source = 32, \
	.handshake_wait_ms = 3000, \
	.hello_timeout_ms = 2000, \
	.max_connections = 8192, \
	.max_connections_per_source = 256, \
	.max_frame_bytes = 1 << 20, \
	.max_handshake_frame = 4096, \
	.max_queue_bytes = 8 << 20, \
	.max_handshake_queue = 64 << 10, \
	.verify_timeout_ms = 10000, \
	.max_clock_skew_s = 60, \
	.max_body_bytes = 65536, \
	.http_timeout_ms = 20000, \
	.ping_interval_ms = 20000, \
	.ping_timeout_ms = 30000, \
	.redial_spread_min_ms = RA_SPREAD_MIN_MS, \
	.census_interval_ms = 30000, \
}

struct gateway {
	struct event_base *base;
	struct server *server;          /* the listening port (server.c) */
	struct store *store;            /* loop 0's connection: start-up only
	                                   (open, migrate, seed the metrics, the
	                                   lease's claim) (store.h); no route
	                                   reads it: their reads run on storew */
	struct store_worker *storew;    /* the store thread: sessions, presence,
	                                   the admin API, the status page */
	struct store_worker *storep;    /* --store-pool (PostgreSQL), or NULL:
	                                   registrations and import-token lookups,
	                                   which need no order among them, and
	                                   agents' own calls, each agent's in
	                                   order on one connection (docs/0041) */
	struct hub *hub;                /* loop 0's sessions (hub.h): that
	                                   loop's own; every other reader
	                                   goes through agents */
	struct agentdir *agents;        /* the agents held, whole process
	                                   (agentdir.h: any thread) */
	struct gateway_limits limits;
	struct mux_config mux_config;   /* streams in agent tunnels (budget: &budget) */
	struct budget budget;           /* every stream's window, fairly shared */
	pthread_mutex_t budget_mu;      /* budget.mu with two loops or more:
	                                   the loop links charge windows from
	                                   every loop (main.c inits it) */
	struct shares *shares;          /* principals' accounts in it (shares.c:
	                                   a hash table; NULL until the first) */
	char data_dir[4096];
	char url[256];                  /* public URL for join documents */
	bool ca_pem_fixed;              /* --public-ca gave it: kept as it is */
	/* What the gateway shows that changes while it runs (the CA handed
	 * out, the rotation, the certificate served, the URL list): one
	 * immutable copy, read with gw_face_get/put from any thread, swapped
	 * whole by loop 0 under publish_mu (face.h). */
	pthread_mutex_t publish_mu;
	bool publish_ready;             /* publish_mu made (gw_face_init); set
	                                   before other threads run */
	struct gw_face *face;
	struct presence_table *remote_agents; /* the presence directory as
	                                   published under publish_mu
	                                   (presence.c); NULL: none */
	atomic_uint handshakes;         /* tunnels not yet authenticated, of
	                                   every loop: taken by CAS against
	                                   max_handshakes (gateway_handshake_take) */
	unsigned workers;               /* --workers: event loops, loop 0 (base)
	                                   and handshake loops (server.c); 0: 1 */
	struct loop *loops;             /* [nloops] (loop.h): loop 0 runs on base;
	                                   main.c makes them before the server
	                                   and frees them after; server_stop
	                                   stops 1..nloops-1 (their handshakes
	                                   come back).  NULL: not made */
	unsigned nloops;
	int landing_any;                /* --landing any or route (land,
	                                   docs/0040 2 (i-a)): a connection
	                                   whose handshake ran on loop k lives
	                                   there unless its request line's
	                                   route lands it (a tunnel by count,
	                                   a replica's on loop 0); 0 (zero):
	                                   every connection lives on loop 0 */
	int landing_route;              /* --landing route (the default,
	                                   docs/0040 step 8): /k8s and dials
	                                   land on their agent's loop too */
	struct looplinks *looplinks;    /* streams between the loops
	                                   (looplink.h, docs/0040): main.c
	                                   makes them with the loops and frees
	                                   them after the joins; NULL: one loop */
	struct event *trim_timer;       /* the heap check (gateway_heap_start);
	                                   freed by gateway_heap_stop */
	_Atomic int64_t trim_handshake_ms; /* monotonic: the last handshake
	                                   ended (any loop writes it) */
	atomic_bool trim_after_handshakes; /* one ended since the last trim */
	pthread_mutex_t hs_mu;          /* handshake_sources, any loop
	                                   (gateway_counts_init) */
	struct srccount *handshake_sources; /* tunnel handshakes per source,
	                                   under hs_mu (made on first use;
	                                   freed by gateway_counts_fini) */
	struct srccount *k8s_checks;    /* /k8s token checks waiting on the
	                                   store per source, of every loop:
	                                   the store thread is one (k8s.c
	                                   makes it; freed by main.c) */
	atomic_int k8s_checks_lock;     /* held (1) around every use of it,
	                                   from any loop (k8s.c); 0: free */
	atomic_int stopping;            /* SIGTERM received: draining, refuse new
	                                   tunnels; loop 0 sets it, any loop
	                                   reads it (docs/0040) */
	uint32_t drain_timeout_ms;      /* --drain-timeout: streams in flight may finish */
	uint32_t drain_grace_ms;        /* --drain-grace: the drain lasts at least this */
	uint32_t drain_jitter_ms;       /* RECONNECT's jitter: agents spread their moves */
	pthread_mutex_t ra_mu;          /* retry_after, any loop
	                                   (gateway_counts_init) */
	struct retry_after retry_after; /* when turned-away agents come back
	                                   (gateway_retry_after_ms) */
	/* Upgrades of /v1/connect waiting for a handshake slot (routes/tunnel.c,
	 * --handshake-wait): how many on every loop, the route's list off any
	 * loop (unit tests; each loop has its own, loop.h), and what
	 * gateway_handshake_free calls when a slot frees (NULL: nothing; set
	 * once by the route, read by any loop). */
	atomic_uint handshakes_waiting;
	struct tunnel_wait *tunnel_wait;
	void (*_Atomic handshake_freed)(struct gateway *gw);
	/* TLS handshakes (docs/0035): their rate, busy while connections wait
	 * in the TLS queue (server.c feeds it: gateway_tls_ended), which
	 * bounds what the queue admits; and the redial spread agents are told
	 * (gateway_redial_spread_ms, settings.c), from that rate or from what
	 * a handshake costs the loops' CPU, sampled.  Loop 0 only. */
	struct retry_after tls_rate;
	uint64_t tls_ended;             /* TLS handshakes ended since start */
	double spread_cpu_rate;         /* handshakes per CPU second, sampled
	                                   (a moving average); 0: none yet */
	double spread_cpu_s;            /* the loops' CPU at the last sample */
	uint64_t spread_ended;          /* tls_ended then */
	uint64_t spread_run_ns;         /* loop 0's thread: on a CPU, and */
	uint64_t spread_wait_ns;        /* runnable but waiting for one, then
	                                   (/proc/self/schedstat; 0: unread) */
	_Atomic uint32_t redial_spread_ms; /* what agents are told now; 0:
	                                   none (loop 0 writes, SETTINGS on
	                                   every loop read) */
	int64_t spread_told_ms;         /* monotonic: when it was last told
	                                   to every agent; 0: never */
	struct event *spread_timer;     /* settings.c's check, or NULL */
	int impersonate;                /* --impersonate: /k8s requests carry Impersonate-User */
	struct cidr_list trusted_proxies; /* --trusted-proxy: may send PROXY v2 headers */
	int require_proxy_header;         /* --require-proxy-header: and must */
	char replica_id[64];            /* --replica-id (default: HOST-PID) */
	char peer_url[256];             /* --peer-url, or "" */
	struct presence *_Atomic presence; /* the lease and tunnel records
	                                 * (presence.c): loop 0's; any loop
	                                 * reads whether it runs */
	int64_t lease_mine_ms;          /* the lease's end as this process last
	                                 * wrote it, 0: not held (presence.c; the
	                                 * store thread's once presence started) */
	struct peers *peers;            /* links to other replicas (replicas/peer_link.c), made on
	                                 * first use */
	struct notices *notices;        /* other replicas' changes, heard (notices.c) */
	struct access_cache *access_cache; /* tokens proven moments ago (access.h),
	                                 * loop 0's (loop k's: loop->access_cache);
	                                 * NULL: none, every check reads the store */
	_Atomic uint64_t access_revocations; /* bumped by every revocation, from
	                                 * any thread: each loop's cache drops
	                                 * what it proved before (access.c) */
	struct live_streams live_streams; /* operator streams open now on loop 0
	                                 * (loop k's: loop->live_streams;
	                                 * livestreams.h) */
	atomic_size_t answers_later;    /* requests waiting for the store thread
	                                 * (answer_later.h), of every loop */
	struct event *settings_timer;   /* a failed read's retry, or NULL */
	bool settings_stopped;          /* settings_stop ran: reads still out
	                                 * are only freed */
};

/*
 * The one owner of giving the heap back (malloc_trim): glibc keeps freed
 * chunks in the middle of the heap, and two kinds of burst leave many.
 * One timer on gw->base checks every GATEWAY_TRIM_EVERY_MS and trims
 *  - once no tunnel handshake has ended for GATEWAY_TRIM_DELAY_MS after
 *    some did (a ramp's TLS state, records and read chains, which idle
 *    tunnels never reuse: ~35 KiB of resident memory per idle tunnel
 *    before, ~20 after, docs/0018), and
 *  - whenever more than GATEWAY_TRIM_FREE bytes lie free (mallinfo2): the
 *    buffers of connections a flood made and the caps dropped (100
 *    pinging connections left 45 MiB so, docs/0036).
 * The trim is process-wide: loop 0 runs it for every loop (--workers).
 * gateway_heap_start: 0, or -1 when out of memory (nothing is trimmed
 * then).  Cost: one mallinfo2 (a walk of the arenas' bins) per tick, a
 * trim rarely.  gateway_heap_stop stops and frees it; safe when never
 * started.
 */
#define GATEWAY_TRIM_EVERY_MS 2000
#define GATEWAY_TRIM_DELAY_MS 2000
#define GATEWAY_TRIM_FREE     (16u << 20)
int gateway_heap_start(struct gateway *gw);
void gateway_heap_stop(struct gateway *gw);
/* A tunnel handshake ended (authenticated or not): noted for the heap
 * check.  Any loop.  Cost: two atomic stores. */
void gateway_handshake_ended(struct gateway *gw);

/*
 * The locks of the counts any loop shares (hs_mu, ra_mu): init before any
 * thread uses gw, fini after the last (it also frees handshake_sources).
 */
void gateway_counts_init(struct gateway *gw);
void gateway_counts_fini(struct gateway *gw);

/*
 * Takes one of the max_handshakes tunnel handshake slots (one CAS on
 * gw->handshakes): 0 taken (the caller owes one gateway_handshake_free),
 * -1 every slot is taken.  Any thread.  Cost: an atomic or a few.
 */
int gateway_handshake_take(struct gateway *gw);

/*
 * Counts one more tunnel handshake for peer's source unless it holds
 * max_handshakes_per_source already (docs/0028): 0 counted (the caller
 * owes one gateway_handshake_source_put with the same peer), -1 not (at
 * its share, or out of memory).  Any thread; under hs_mu.  One hash
 * lookup.
 */
int gateway_handshake_source_take(struct gateway *gw, const char *peer);
void gateway_handshake_source_put(struct gateway *gw, const char *peer);

/*
 * Gives back a slot gateway_handshake_take gave.  began_ms >= 0: a
 * handshake began then (monotonic) and ended now, either way: its time
 * and whether the gateway was busy (every slot taken, or upgrades
 * waiting) feed the come-back schedule's rate (retry_after_done, under
 * ra_mu); began_ms < 0: no handshake ran on it (the upgrade failed), the
 * schedule is not fed.  Then gw->handshake_freed, if set, is told (on
 * this thread).  Any loop's thread.  Cost: O(1).
 */
void gateway_handshake_free(struct gateway *gw, int64_t began_ms);

/*
 * How long an agent turned away now should wait before it dials again, in
 * ms (docs/0035): while draining, a random delay in [RA_MIN_MS,
 * RA_MIN_MS + drain_jitter_ms] (it will land on another replica); else
 * its slot in the come-back schedule (retry_after.h) behind the `queued`
 * connections in the TLS queue and those of the `waiting` upgrades in line
 * for a slot that can take one before the line's last waiter runs out
 * (waiting_left_ms from now: retry_after_line; the rest are told later
 * slots of their own), at the rate its handshake slots free up (session.c
 * feeds it each handshake's time).  Within [RA_MIN_MS, RA_MAX_MS].
 * Any loop's thread (the schedule is under ra_mu).  Cost: O(1) and 4
 * random bytes.
 */
uint32_t gateway_retry_after_ms(struct gateway *gw, uint32_t queued,
    uint32_t waiting, int64_t waiting_left_ms);

/*
 * A TLS handshake that took its slot at began_ms (monotonic) ended, either
 * way; busy: connections were waiting in the TLS queue (the gateway, not
 * the demand, was the limit).  Feeds gw->tls_rate.  Loop 0 only.  O(1).
 */
void gateway_tls_ended(struct gateway *gw, int64_t began_ms, int busy);

/*
 * TLS handshakes the gateway finishes per second: measured over busy
 * windows, or before one max_tls_handshakes over the mean time a
 * handshake held its slot (retry_after_rate).  Loop 0 only.  O(1).
 */
double gateway_tls_rate(const struct gateway *gw);

/*
 * The redial spread to tell agents when `tunnels` are held (docs/0035):
 * retry_after_spread_ms at the TLS rate measured while busy, or, before
 * any busy window, at the handshakes one CPU second of the loops finished
 * (sampled here once GATEWAY_SPREAD_SAMPLE handshakes ended since the last
 * sample: an under-estimate, the loops do more than handshakes) times the
 * loops, times the share of the CPU loop 0 got when it wanted one in that
 * sample (on a CPU over on a CPU or waiting in the run queue, the kernel's
 * schedstat: a machine shared with other work finishes fewer handshakes a
 * second than their CPU cost says; 1 where it cannot be read), or
 * GATEWAY_SPREAD_GUESS per loop before any sample.  At least
 * limits.redial_spread_min_ms.  Loop 0 only.  Cost: one CPU clock read
 * per loop, and a read of /proc/self/schedstat per sample.
 */
#define GATEWAY_SPREAD_SAMPLE 64
#define GATEWAY_SPREAD_GUESS  200.0
uint32_t gateway_redial_spread_ms(struct gateway *gw, uint32_t tunnels);

/* Unix time in seconds and milliseconds (wall clock). */
int64_t gateway_now(void);
int64_t gateway_now_ms(void);

#endif
