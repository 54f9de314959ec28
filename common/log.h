/*
 * log.h: one line per event on stderr, "TIME LEVEL [component] message".
 *
 * Every daemon message goes through here so that the format, the level filter
 * and the rule "secrets are never logged" live in one place.  Callers pass
 * identifiers (agent ids, token ids), never token or key material.
 */
#ifndef TETHER_LOG_H
#define TETHER_LOG_H

#include <stdarg.h>

enum log_level {
	LOG_LEVEL_DEBUG,
	LOG_LEVEL_INFO,
	LOG_LEVEL_WARN,
	LOG_LEVEL_ERROR,
};

/* Component name printed on every line ("gateway", "client", ...). */
void log_init(const char *component, enum log_level min_level);
/* Parses "debug", "info", "warn", "error"; returns -1 on anything else. */
int log_level_parse(const char *name, enum log_level *out);

void log_msg(enum log_level level, const char *func, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* Logs at error level and exits 1.  Only for start-up and broken invariants,
 * never for one peer's misbehaviour. */
void log_fatal(const char *func, const char *fmt, ...)
    __attribute__((format(printf, 2, 3), noreturn));

#define debug(...) log_msg(LOG_LEVEL_DEBUG, __func__, __VA_ARGS__)
#define info(...)  log_msg(LOG_LEVEL_INFO, __func__, __VA_ARGS__)
#define warn(...)  log_msg(LOG_LEVEL_WARN, __func__, __VA_ARGS__)
#define error(...) log_msg(LOG_LEVEL_ERROR, __func__, __VA_ARGS__)
#define fatal(...) log_fatal(__func__, __VA_ARGS__)

#endif
