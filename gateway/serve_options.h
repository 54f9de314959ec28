/*
 * serve_options.h: the settings of `tether-gateway serve`, one table that is
 * the flags, the keys of --config FILE and --help (common/options.h).
 * Add a setting: a SERVE_OPT_ id here, a row in serve_options.c, a key in
 * config/gateway.conf.example.
 */
#ifndef TETHER_SERVE_OPTIONS_H
#define TETHER_SERVE_OPTIONS_H

#include <stddef.h>

#include "options.h"

enum serve_opt {
	SERVE_OPT_DATA_DIR,
	SERVE_OPT_LISTEN,
	SERVE_OPT_PLAIN_LISTEN,
	SERVE_OPT_TRUSTED_PROXY,
	SERVE_OPT_PUBLIC_CA,
	SERVE_OPT_STORE,
	SERVE_OPT_HANDSHAKE_TIMEOUT,
	SERVE_OPT_MAX_HANDSHAKES,
	SERVE_OPT_MAX_TLS_HANDSHAKES,
	SERVE_OPT_MAX_TLS_QUEUE,
	SERVE_OPT_MAX_FRAME_SIZE,
	SERVE_OPT_MAX_QUEUE,
	SERVE_OPT_VERIFY_TIMEOUT,
	SERVE_OPT_MAX_CLOCK_SKEW,
	SERVE_OPT_HTTP_TIMEOUT,
	SERVE_OPT_PING_INTERVAL,
	SERVE_OPT_PING_TIMEOUT,
	SERVE_OPT_DRAIN_TIMEOUT,
	SERVE_OPT_STREAM_WINDOW,
	SERVE_OPT_MAX_STREAMS,
	SERVE_OPT_STREAM_BUDGET,
	SERVE_OPT_ADMIN_RESERVE,
	SERVE_OPT_TUNNEL_SHARE,
	SERVE_OPT_PRINCIPAL_SHARE,
	SERVE_OPT_MIN_STREAM_WINDOW,
	SERVE_OPT_IMPERSONATE,
	SERVE_OPT_LOG_LEVEL,
	SERVE_OPT_LOG_FORMAT,
	SERVE_OPT_AUDIT_LOG,
	SERVE_OPT_METRICS_LISTEN,
	SERVE_OPT_COUNT
};

/* The command: table, synopsis and the text around the option list. */
extern const struct opt_command serve_command;


#endif
