/*
 * sdnotify.h: telling systemd how a daemon is doing (Type=notify units in
 * config/systemd/), with sd_notify(3)'s datagram protocol spoken directly
 * (no libsystemd; sdnotify.c says what is covered): READY=1 once it serves,
 * STATUS= lines, STOPPING=1 when it begins to stop, and WATCHDOG=1 from the
 * event loop at half the unit's WatchdogSec, so a loop that hangs is killed
 * and restarted.  Without systemd (no NOTIFY_SOCKET) every call is a no-op.
 * One event loop per process, so the watchdog timer is process-wide.
 */
#ifndef TETHER_SDNOTIFY_H
#define TETHER_SDNOTIFY_H

struct event_base;

/*
 * Sends msg (KEY=VALUE lines) as one datagram to $NOTIFY_SOCKET (a path,
 * or "@name": an abstract socket).  Returns 1 when sent, 0 when there is
 * no NOTIFY_SOCKET, -1 when it is not a unix socket address or the send
 * failed.  Never blocks for long: a datagram, no answer.
 */
int sdnotify_send(const char *msg);

/*
 * Starts the watchdog on base if the service manager asked for one
 * (WATCHDOG_USEC, and WATCHDOG_PID naming this process if set): a timer
 * that sends WATCHDOG=1 every WATCHDOG_USEC/2.  Returns 0 (also when no
 * watchdog is wanted) or -1 if the timer cannot be made.
 */
int sdnotify_watchdog_start(struct event_base *base);

/* Stops and frees the watchdog timer; call before freeing its base. */
void sdnotify_watchdog_stop(void);

/* READY=1 with a STATUS= line (status may be NULL). */
void sdnotify_ready(const char *status);

/* STOPPING=1. */
void sdnotify_stopping(void);

/* STATUS=<printf text>, shown by `systemctl status`. */
void sdnotify_status(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

#endif
