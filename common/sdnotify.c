/*
 * sdnotify.c: READY/STOPPING/STATUS and the watchdog for systemd (see
 * sdnotify.h).  sd_notify sends one small datagram on a unix socket the
 * service manager reads; it does not wait for an answer.
 */
#include "sdnotify.h"

#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>

#include <event2/event.h>
#include <systemd/sd-daemon.h>

#include "log.h"

static struct event *watchdog_timer;

static void
watchdog_tick(evutil_socket_t fd, short what, void *arg)
{
	(void)sd_notify(0, "WATCHDOG=1");
}

int
sdnotify_watchdog_start(struct event_base *base)
{
	uint64_t usec = 0;
	struct timeval tv;

	if (sd_watchdog_enabled(0, &usec) <= 0 || usec == 0)
		return 0;
	watchdog_timer = event_new(base, -1, EV_PERSIST, watchdog_tick, NULL);
	if (watchdog_timer == NULL)
		return -1;
	usec /= 2;
	tv.tv_sec = (time_t)(usec / 1000000);
	tv.tv_usec = (suseconds_t)(usec % 1000000);
	if (event_add(watchdog_timer, &tv) != 0) {
		event_free(watchdog_timer);
		watchdog_timer = NULL;
		return -1;
	}
	info("systemd watchdog", KV_U("interval_ms", usec / 1000));
	(void)sd_notify(0, "WATCHDOG=1");
	return 0;
}

void
sdnotify_watchdog_stop(void)
{
	if (watchdog_timer != NULL)
		event_free(watchdog_timer);
	watchdog_timer = NULL;
}

void
sdnotify_ready(const char *status)
{
	if (status != NULL)
		(void)sd_notifyf(0, "READY=1\nSTATUS=%s", status);
	else
		(void)sd_notify(0, "READY=1");
}

void
sdnotify_stopping(void)
{
	(void)sd_notify(0, "STOPPING=1");
}

void
sdnotify_status(const char *fmt, ...)
{
	char text[256];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(text, sizeof(text), fmt, ap);
	va_end(ap);
	(void)sd_notifyf(0, "STATUS=%s", text);
}
