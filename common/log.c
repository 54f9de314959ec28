/* log.c: the single place that formats and filters log lines (see log.h). */
#include "log.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static const char *log_component = "tether";
static enum log_level log_min = LOG_LEVEL_INFO;

static const char *const level_names[] = {
	[LOG_LEVEL_DEBUG] = "debug",
	[LOG_LEVEL_INFO] = "info",
	[LOG_LEVEL_WARN] = "warn",
	[LOG_LEVEL_ERROR] = "error",
};

void
log_init(const char *component, enum log_level min_level)
{
	log_component = component;
	log_min = min_level;
}

int
log_level_parse(const char *name, enum log_level *out)
{
	for (size_t i = 0; i < sizeof(level_names) / sizeof(level_names[0]); i++) {
		if (strcmp(name, level_names[i]) == 0) {
			*out = (enum log_level)i;
			return 0;
		}
	}
	return -1;
}

static void
log_vline(enum log_level level, const char *func, const char *fmt, va_list ap)
{
	struct timespec ts;
	struct tm tm;
	char stamp[32];

	clock_gettime(CLOCK_REALTIME, &ts);
	gmtime_r(&ts.tv_sec, &tm);
	strftime(stamp, sizeof(stamp), "%Y-%m-%dT%H:%M:%S", &tm);
	/* One fprintf per line keeps lines whole when several processes share
	 * a terminal or a log file. */
	char msg[2048];
	vsnprintf(msg, sizeof(msg), fmt, ap);
	if (log_min == LOG_LEVEL_DEBUG)
		fprintf(stderr, "%s.%03ldZ %-5s [%s] %s: %s\n", stamp,
		    ts.tv_nsec / 1000000, level_names[level], log_component, func, msg);
	else
		fprintf(stderr, "%s.%03ldZ %-5s [%s] %s\n", stamp,
		    ts.tv_nsec / 1000000, level_names[level], log_component, msg);
}

void
log_msg(enum log_level level, const char *func, const char *fmt, ...)
{
	va_list ap;

	if (level < log_min)
		return;
	va_start(ap, fmt);
	log_vline(level, func, fmt, ap);
	va_end(ap);
}

void
log_fatal(const char *func, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	log_vline(LOG_LEVEL_ERROR, func, fmt, ap);
	va_end(ap);
	exit(1);
}
