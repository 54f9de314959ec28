/*
 * run_options.h: the settings of `tether-client run`, one table that is the
 * flags, the keys of --config FILE and --help (common/options.h).
 * Add a setting: a RUN_OPT_ id here, a row in run_options.c, a key in
 * config/client.conf.example.
 */
#ifndef TETHER_RUN_OPTIONS_H
#define TETHER_RUN_OPTIONS_H

#include "options.h"

enum run_opt {
	RUN_OPT_STATE_DIR,
	RUN_OPT_STREAM_WINDOW,
	RUN_OPT_MAX_STREAMS,
	RUN_OPT_DIAL_TIMEOUT,
	RUN_OPT_PING_INTERVAL,
	RUN_OPT_PING_TIMEOUT,
	RUN_OPT_LOG_LEVEL,
	RUN_OPT_LOG_FORMAT,
	RUN_OPT_METRICS_LISTEN,
	RUN_OPT_PROXY,
	RUN_OPT_NO_PROXY,
	RUN_OPT_PROXY_CACERT,
	RUN_OPT_TRUST_PROXY_CA,
	RUN_OPT_PROXY_AUTH,
	RUN_OPT_PROXY_USER,
	RUN_OPT_PROXY_PASSWORD_FILE,
	RUN_OPT_MAX_KEY_AGE,
	RUN_OPT_COUNT
};

/* The command: table, synopsis and the text around the option list. */
extern const struct opt_command run_command;

#endif
