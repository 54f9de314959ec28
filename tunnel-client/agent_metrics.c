/*
 * agent_metrics.c: tether-client's metrics (see agent_metrics.h).
 */
#include "agent_metrics.h"

#include <string.h>

#include "mux_metrics.h"
#include "prom.h"

static const char *const version_values[] = { TETHER_VERSION, NULL };
/* The ERROR codes a gateway sends during a handshake. */
static const char *const handshake_results[] = {
	"ok", "token_unknown", "token_expired", "token_used_up", "token_revoked",
	"register_refused", "auth_refused", "revoked", "version", "timeout",
	"protocol", "internal", "shutdown", "replaced", "other", NULL
};

static struct prom_metric build_info = {
	.name = "tether_build_info", .kind = PROM_GAUGE,
	.help = "Always 1; the version of this tether-client.",
	.label = "version", .preset = version_values,
};
static struct prom_metric connected = {
	.name = "tether_tunnels_connected", .kind = PROM_GAUGE,
	.help = "1 while the tunnel to the gateway is established.",
};
static struct prom_metric handshakes = {
	.name = "tether_handshakes_total", .kind = PROM_COUNTER,
	.help = "Handshakes with the gateway ended, by result (ok or its refusal code).",
	.label = "result", .preset = handshake_results,
};

void
agent_metrics_connected(int up)
{
	prom_set(&connected, NULL, up ? 1 : 0);
}

void
agent_metrics_handshake(const char *result)
{
	size_t i;

	for (i = 0; handshake_results[i] != NULL; i++)
		if (strcmp(handshake_results[i], result) == 0)
			break;
	prom_inc(&handshakes, handshake_results[i] != NULL ? result : "other");
}

char *
agent_metrics_render(void *arg, size_t *len)
{
	static struct prom_metric *const own[] = { &build_info, &connected, &handshakes };
	struct prom_list lists[2] = { { own, sizeof(own) / sizeof(own[0]) } };

	prom_set(&build_info, TETHER_VERSION, 1);
	lists[1].n = mux_metrics_families(&lists[1].ms);
	return prom_text(lists, 2, len);
}
