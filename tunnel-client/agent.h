/*
 * agent.h: `tether-client run`: the agent's tunnel to the gateway.
 *
 * Connects with the credential in the state directory (registering first
 * when only an import token is there), keeps the tunnel up with exponential
 * backoff and jitter, follows the state the gateway assigns, and exits on
 * SIGINT/SIGTERM.  A tunnel that stays silent past the ping timeout (a
 * stopped gateway, a dead path that sends no RST) is dropped and redialled.
 */
#ifndef TETHER_AGENT_H
#define TETHER_AGENT_H

#include <stdint.h>

#include "agent_tunnel.h"

/* Limits of the streams this agent serves (`run` flags). */
struct agent_options {
	uint32_t stream_window;     /* credit granted per stream, bytes */
	uint32_t max_streams;       /* streams open at once */
	uint32_t dial_timeout_ms;   /* connecting to a target */
	const char *metrics_listen; /* serve /metrics there (plain HTTP), or NULL */
	const char *proxy_url;      /* HTTP CONNECT proxy (common/url.h), or NULL */
	const char *no_proxy;       /* hosts reached directly (common/proxy.h), or NULL */
	const char *proxy_ca_file;  /* CAs for an https:// proxy, or NULL: the system's */
	/* A TLS-inspecting proxy's CA, trusted for the gateway beside the CA
	 * pinned at join (loudly), or NULL */
	const char *trust_proxy_ca;
	int proxy_auth;             /* enum proxy_auth: basic, ntlm, negotiate */
	const char *proxy_user;     /* NTLM's DOMAIN\user, or NULL: the URL's */
	/* A file holding the proxy password (mode 0600 or stricter), or NULL:
	 * the URL's */
	const char *proxy_password_file;
	uint32_t ping_interval_ms;  /* tunnel silence before the agent pings */
	uint32_t ping_timeout_ms;   /* then silence before it drops and redials */
	uint32_t max_key_age_days;  /* ask for a key rotation past it; 0 never */
};

#define AGENT_DEFAULT_OPTIONS { \
	.stream_window = 1 << 20, \
	.max_streams = 1024, \
	.dial_timeout_ms = 10000, \
	.metrics_listen = NULL, \
	.proxy_url = NULL, \
	.no_proxy = NULL, \
	.proxy_ca_file = NULL, \
	.trust_proxy_ca = NULL, \
	.proxy_auth = 0, \
	.proxy_user = NULL, \
	.proxy_password_file = NULL, \
	.ping_interval_ms = AGENT_PING_INTERVAL_MS, \
	.ping_timeout_ms = AGENT_PING_TIMEOUT_MS, \
	.max_key_age_days = 365, \
}

/*
 * Runs until a signal or a final refusal.  Returns the process exit code:
 * 0 after a signal; AGENT_EXIT_REVOKED (77) when an operator revoked the
 * agent or its import token; 1 when not joined or refused for good by the
 * gateway (the reason logged; docs/interface.md lists the final codes).
 * A gateway or store that cannot answer is retried, never an exit.
 */
int agent_run(const char *state_dir, const struct agent_options *opt);

#endif
