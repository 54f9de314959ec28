/*
 * mux_metrics.h: the stream metrics of a process, fed by every multiplexer
 * whose mux_config has `counted` set (an agent tunnel on the gateway, the
 * tunnel on the agent; not `tetherctl forward`'s connection to the
 * gateway, whose streams are the same streams seen again).
 *
 *   tether_streams_open                     gauge
 *   tether_streams_opened_total{result}     ok, or why not (not_allowed,
 *                                           refused, unreachable, timeout, ...)
 *   tether_stream_bytes_total{direction}    payload sent into / received
 *                                           from tunnels
 *   tether_stream_blocked_seconds_total     time streams waited for credit
 *                                           or for room in the tunnel
 *
 * Each call is O(1): a relaxed atomic add, from any thread (multiplexers
 * on every loop count into the same figures, docs/0040 step 7).
 */
#ifndef TETHER_MUX_METRICS_H
#define TETHER_MUX_METRICS_H

#include <stddef.h>

struct prom_metric;

/* A stream was opened (result "ok") or refused (the refusal's code; codes
 * outside the known set, say from a peer, count as "other"). */
void mux_metrics_opened(const char *result);
/* Streams open now: +1 or -1. */
void mux_metrics_open_delta(int delta);
/* Stream payload bytes: sent 1 (into the tunnel) or 0 (received). */
void mux_metrics_bytes(int sent, size_t n);
/* A stream waited this long on flow control. */
void mux_metrics_blocked(double seconds);

/* The families, for exposition: the counts copied into them now; returns
 * their count, *out the array.  Callers that may run at once on two
 * threads hold one lock over this call and the reading (the gateway's
 * metrics_lock). */
size_t mux_metrics_families(struct prom_metric *const **out);

#endif
