/*
 * metrics.h: the gateway's Prometheus metrics: what it counts, the hooks
 * the rest of the gateway calls (each O(1)), and the exposition served at
 * /metrics (admin token, main port) and on --metrics-listen (plain HTTP).
 *
 *   tether_build_info{version}                   1
 *   tether_agents{state}                         agents by state (all of them,
 *                                                connected or not; kept in
 *                                                memory, seeded from the store)
 *   tether_tunnels_connected                     authenticated agent tunnels
 *   tether_handshakes_in_progress                tunnels not yet authenticated
 *   tether_handshakes_total{result}              ok, or the refusal's code
 *   tether_registrations_total{result}           ok, register_refused, ...
 *   tether_k8s_requests_total{code}              /k8s answers by HTTP status
 *   tether_k8s_request_duration_seconds          histogram
 *   tether_store_duration_seconds{op}            histogram, per store call
 *   tether_loop_tls_handshakes_total{loop}, tether_loop_cpu_seconds_total{loop},
 *   tether_loop_tunnels{loop}                    per event loop (--workers)
 *   tether_loop_connections{loop}, tether_loop_tunnel_side_connections{loop}
 *   tether_loop_link_streams_total{from,to}, tether_loop_link_bytes_total{from,to}
 *                                                streams and payload bytes
 *                                                crossing between loops
 *   tether_store_up                              1 while this replica reaches
 *                                                its store (as /readyz says)
 *   tether_agents_offline{over}                  agents no replica holds, not
 *                                                revoked, last seen over 5m,
 *                                                1h, 1d ago (presence.c counts)
 *   tether_agents_by_version{version}            agents not revoked by release
 *                                                (presence.c counts)
 *   tether_agents_holding_new_ca                 agents not revoked whose
 *                                                SETTINGS_ACK named the CA
 *                                                handed out (presence.c)
 *   tether_ca_rotation_phase                     0 none, 1 overlap, 2 final
 *   tether_certificate_expiry_timestamp_seconds{cert}
 *                                                notAfter of the server
 *                                                certificate and of the CA
 *   the stream metrics (mux_metrics.h) and the process metrics (prom.h).
 */
#ifndef TETHER_GATEWAY_METRICS_H
#define TETHER_GATEWAY_METRICS_H

#include <stddef.h>
#include <stdint.h>

#include "prom.h"

struct gateway;

/* Sets the build info and every tether_agents state to 0 (once, at start);
 * the caller then seeds the agents already in the store with
 * metrics_agent_moved(-1, state), so that this file reads no store. */
void metrics_init(void);

/* An agent moved from one state to another (enum agent_state; -1: it did
 * not exist before), as a store call on the store thread said
 * (store.h).  Any loop (takes the metrics' lock). */
void metrics_agent_moved(int from, int to);

/* Held while the families are read (metrics_route.c): the store thread
 * writes tether_store_duration_seconds (metrics_store_timed). */
void metrics_lock(void);
void metrics_unlock(void);

/* A tunnel's handshake ended (registering 0) or its registration did
 * (registering 1): result "ok" or a code of ours (a bounded set).  Any
 * loop (takes the metrics' lock). */
void metrics_handshake(int registering, const char *result);

/* An upgrade's wait for a tunnel handshake slot (routes/tunnel.c,
 * --handshake-wait) ended: result "served", "expired", "abandoned" or
 * "stopped".  Any loop (takes the metrics' lock). */
void metrics_handshake_wait(const char *result);

/* A /k8s request was answered with status after seconds.  Any loop:
 * counted in the calling thread's own counts, no lock (the first answer
 * of a thread takes the metrics' lock once to list them); a scrape
 * (metrics_families) folds them in.  ~60 instructions. */
void metrics_k8s_request(int status, double seconds);

/*
 * A store call named op took seconds: one observation in
 * tether_store_duration_seconds{op}.  The store's timing hook (store.h's
 * store_timing_fn, handed in by main.c; arg unused), so that the store
 * knows no metric.  Any thread (under the metrics' lock).
 */
void metrics_store_timed(void *arg, const char *op, double seconds);

/* The gateway's families, with the two gauges read from elsewhere set
 * (tether_tunnels_connected, tether_handshakes_in_progress) and every
 * thread's /k8s answers folded in.  Under metrics_lock.  Returns their
 * count. */
size_t metrics_families(struct prom_metric *const **out, size_t tunnels_now,
    size_t handshakes_now);

/* The agents offline for longer than over ("5m", "1h" or "1d": the
 * values shown from the start, at 0) are n, as the store last counted
 * (presence.c).  Loop thread. */
void metrics_agents_offline(const char *over, int64_t n);
/* The agents by release: counts[i] agents named versions[i] ("" is shown
 * as "unknown"), n at most 23; replaces every value of
 * tether_agents_by_version.  O(n). */
void metrics_agents_by_version(const char *const *versions, const int64_t *counts,
    size_t n);

/* Whether this replica reaches its store (1) or not (0), as /readyz says
 * (notices_store_problem), set before each exposition. */
void metrics_store_up(int up);

/*
 * Reads the certificates the gateway serves with (PEM files: server_pem,
 * the first certificate of the chain, and ca_pem) and sets
 * tether_certificate_expiry_timestamp_seconds{cert="server"|"ca"} to each
 * one's notAfter (Unix s).  Called at start and again whenever the files
 * are loaded again; a file that cannot be read leaves its series as it
 * was (none before the first read: no alert on a made-up 0).  Returns 0,
 * or -1 with err naming the first file that failed (both are tried).
 * Loop thread; reads two small files.
 */
int metrics_certificates(const char *server_pem, const char *ca_pem,
    char *err, size_t errlen);

/* tether_certificate_expiry_timestamp_seconds{cert="server"} = not_after
 * (Unix s): the certificate now served, after a reload or a renewal. */
void metrics_server_certificate(int64_t not_after);
/* ...{cert="ca"}: ca.crt, as read again on SIGHUP (a CA rotation's
 * finish replaces it). */
void metrics_ca_certificate(int64_t not_after);
/* tether_ca_rotation_phase = phase (enum ca_phase: 0 none, 1 overlap,
 * 2 final), as certreload.c last read it. */
void metrics_ca_rotation(int phase);
/* tether_agents_holding_new_ca = n (presence.c's periodic count). */
void metrics_agents_holding_new_ca(int64_t n);
/* ...{cert="peer"}: the replicas' peer credential (peer.crt) as read at
 * start, on SIGHUP and after a renewal. */
void metrics_peer_certificate(int64_t not_after);

/* The TLS admission's gauges and counter, set before each exposition
 * (server_tls_admission). */
void metrics_tls_admission(uint32_t in_progress, uint32_t waiting, uint64_t shed);
/* Of the shed, those closed at accept (server_tls_shed_at_accept). */
void metrics_tls_shed_at_accept(uint64_t shed);
/* Event loop number loop (--workers): its TLS handshakes finished and its
 * thread's CPU seconds, both since start (server_loop_stats).  Under
 * metrics_lock. */
void metrics_loop(unsigned loop, uint64_t tls_handshakes, double cpu_seconds);
/* tether_loop_tunnels{loop} = n: the authenticated tunnels loop
 * carries now.  Under metrics_lock. */
void metrics_loop_tunnels(unsigned loop, size_t n);
/* tether_loop_connections{loop} and tether_loop_tunnel_side_connections
 * {loop}: the HTTP connections and dials loop holds now (loop->nconns)
 * and the operator connections whose tunnel side --landing any weighed on
 * it (loop->tunnel_side).  Under metrics_lock. */
void metrics_loop_weights(unsigned loop, size_t connections,
    size_t tunnel_side);
/* tether_loop_link_streams_total{from,to} and _bytes_total{from,to}: what
 * the link from loop `from` to loop `to` carried since start
 * (looplink_counts).  Set only for links that carried something: at most
 * PROM_LABELS_MAX - 1 pairs are shown apart (past that, "other").  Under
 * metrics_lock. */
void metrics_loop_link(unsigned from, unsigned to, uint64_t streams,
    uint64_t bytes);

#endif
