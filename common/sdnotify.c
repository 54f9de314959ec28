/*
 * sdnotify.c: READY/STOPPING/STATUS and the watchdog for systemd (see
 * sdnotify.h), without libsystemd.  The protocol is sd_notify(3)'s: one
 * datagram of newline-separated KEY=VALUE lines sent to the AF_UNIX
 * socket named by NOTIFY_SOCKET (a path, or "@name" for an abstract
 * socket), with no answer; WATCHDOG_USEC (and WATCHDOG_PID, when set,
 * naming this process) asks for WATCHDOG=1 keep-alives.  Linking
 * libsystemd for this pulled in gcrypt, lzma, zstd and lz4
 * (docs/0025-lean-static-agent.md).
 * Not supported: NOTIFY_SOCKET=vsock:... (VMs' managers), file
 * descriptor passing.
 */
#include "sdnotify.h"

#include <errno.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <event2/event.h>

#include "log.h"

static struct event *watchdog_timer;

int
sdnotify_send(const char *msg)
{
	const char *path = getenv("NOTIFY_SOCKET");
	struct sockaddr_un sa;
	socklen_t salen;
	size_t n;
	ssize_t sent;
	int fd;

	if (path == NULL || path[0] == '\0')
		return 0;
	n = strlen(path);
	if ((path[0] != '/' && path[0] != '@') || n >= sizeof(sa.sun_path))
		return -1;
	memset(&sa, 0, sizeof(sa));
	sa.sun_family = AF_UNIX;
	memcpy(sa.sun_path, path, n);
	if (path[0] == '@') {
		/* Abstract: a leading NUL, and the name's exact length. */
		sa.sun_path[0] = '\0';
		salen = (socklen_t)(offsetof(struct sockaddr_un, sun_path) + n);
	} else
		salen = (socklen_t)(offsetof(struct sockaddr_un, sun_path) + n + 1);
	if ((fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0)) == -1)
		return -1;
	do
		sent = sendto(fd, msg, strlen(msg), MSG_NOSIGNAL,
		    (struct sockaddr *)&sa, salen);
	while (sent == -1 && errno == EINTR);
	close(fd);
	return sent == (ssize_t)strlen(msg) ? 1 : -1;
}

/* WATCHDOG_USEC in microseconds when it is meant for this process, else 0. */
static uint64_t
watchdog_usec(void)
{
	const char *s = getenv("WATCHDOG_USEC"), *pid = getenv("WATCHDOG_PID");
	unsigned long long v;
	char *end;

	if (s == NULL || s[0] < '0' || s[0] > '9')
		return 0;
	errno = 0;
	v = strtoull(s, &end, 10);
	if (errno != 0 || *end != '\0')
		return 0;
	if (pid != NULL && pid[0] != '\0') {
		long p = strtol(pid, &end, 10);

		if (*end != '\0' || p != (long)getpid())
			return 0;
	}
	return (uint64_t)v;
}

static void
watchdog_tick(evutil_socket_t fd, short what, void *arg)
{
	(void)sdnotify_send("WATCHDOG=1");
}

int
sdnotify_watchdog_start(struct event_base *base)
{
	uint64_t usec = watchdog_usec();
	struct timeval tv;

	if (usec == 0)
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
	(void)sdnotify_send("WATCHDOG=1");
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
	char msg[320];

	if (status != NULL)
		snprintf(msg, sizeof(msg), "READY=1\nSTATUS=%s", status);
	else
		snprintf(msg, sizeof(msg), "READY=1");
	(void)sdnotify_send(msg);
}

void
sdnotify_stopping(void)
{
	(void)sdnotify_send("STOPPING=1");
}

void
sdnotify_status(const char *fmt, ...)
{
	char text[256], msg[264];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(text, sizeof(text), fmt, ap);
	va_end(ap);
	snprintf(msg, sizeof(msg), "STATUS=%s", text);
	(void)sdnotify_send(msg);
}
