/*
 * agent_metrics.h: tether-client's Prometheus metrics, served on
 * `run --metrics-listen ADDR` (plain HTTP, /metrics):
 *
 *   tether_build_info{version}          1
 *   tether_tunnels_connected            1 while the tunnel is established
 *   tether_handshakes_total{result}     ok, or the gateway's refusal code
 *   the stream metrics (mux_metrics.h) and the process metrics (prom.h).
 */
#ifndef TETHER_AGENT_METRICS_H
#define TETHER_AGENT_METRICS_H

#include <stddef.h>

/* The tunnel is established (1) or gone (0). */
void agent_metrics_connected(int up);
/* A handshake ended: "ok" or the code of the gateway's ERROR frame (codes
 * outside the known set count as "other": they come from the peer). */
void agent_metrics_handshake(const char *result);
/* The exposition text (prom_render_fn; arg unused). */
char *agent_metrics_render(void *arg, size_t *len);

#endif
