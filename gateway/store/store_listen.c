/*
 * store_listen.c: LISTEN on the store's channel, driven by the event loop
 * (see store_listen.h).  With store_pg.c, the only files that include
 * libpq.
 *
 *   WAIT --timer--> CONNECTING --PQconnectPoll ok, LISTEN sent--> SUBSCRIBING
 *     ^                  |                                           |
 *     |                  | failed, or STORE_LISTEN_CONNECT_MS over   | LISTEN's answer
 *     +---- backoff -----+-------------------------------------------+-- LISTENING
 *                                           connection lost             |
 *     +-------------------------------------------------------------- --+
 */
#include "store_listen.h"

#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <event2/event.h>
#include <libpq-fe.h>

#include "log.h"
#include "runtime.h"
#include "store.h"
#include "store_backend.h"

enum listen_state { LS_WAIT, LS_CONNECTING, LS_SUBSCRIBING, LS_LISTENING };

struct store_listener {
	struct event_base *base;
	char *url;
	store_notice_fn *fn;
	void *arg;
	PGconn *conn;              /* NULL in LS_WAIT */
	struct event *io;          /* on PQsocket(conn); it may change while connecting */
	struct event *timer;       /* the next attempt, or the attempt's deadline */
	enum listen_state state;
	bool flushing;             /* LISTEN not all sent yet: waiting to write */
	uint32_t backoff_ms;
	bool lost_logged;          /* the outage was logged (once each) */
	char problem[256];
};

static void listen_on_io(evutil_socket_t fd, short what, void *arg);
static void listen_connect(struct store_listener *l);

static void
listen_arm_timer(struct store_listener *l, uint32_t ms)
{
	struct timeval tv = runtime_ms_timeval(ms);

	evtimer_add(l->timer, &tv);
}

static void
listen_close(struct store_listener *l)
{
	if (l->io != NULL)
		event_free(l->io);
	l->io = NULL;
	if (l->conn != NULL)
		PQfinish(l->conn);
	l->conn = NULL;
}

/* The attempt or the connection failed: why (the first line of msg), and
 * the next attempt after the backoff. */
static void
listen_fail(struct store_listener *l, const char *what, const char *msg)
{
	snprintf(l->problem, sizeof(l->problem), "%s: %.*s", what,
	    (int)strcspn(msg, "\n"), msg);
	if (!l->lost_logged)
		warn("store listener: not hearing other replicas' changes; "
		    "reconnecting", KV_S("err", l->problem));
	l->lost_logged = true;
	listen_close(l);
	l->state = LS_WAIT;
	l->backoff_ms = l->backoff_ms == 0 ? STORE_LISTEN_BACKOFF_MIN_MS :
	    (l->backoff_ms * 2 > STORE_LISTEN_BACKOFF_MAX_MS ?
	    STORE_LISTEN_BACKOFF_MAX_MS : l->backoff_ms * 2);
	listen_arm_timer(l, l->backoff_ms);
}

/* Waits for what (EV_READ / EV_WRITE) on the connection's socket, which
 * PQconnectPoll may have replaced since the last wait. */
static void
listen_wait(struct store_listener *l, short what)
{
	if (l->io != NULL)
		event_free(l->io);
	l->io = event_new(l->base, PQsocket(l->conn), what, listen_on_io, l);
	if (l->io == NULL || event_add(l->io, NULL) != 0)
		listen_fail(l, "store listener", "out of memory");
}

/* Sends what libpq holds of LISTEN; then waits for answers only. */
static void
listen_flush(struct store_listener *l)
{
	switch (PQflush(l->conn)) {
	case 0:
		l->flushing = false;
		listen_wait(l, EV_READ | EV_PERSIST);
		break;
	case 1:
		l->flushing = true;
		listen_wait(l, EV_WRITE);
		break;
	default:
		listen_fail(l, "LISTEN", PQerrorMessage(l->conn));
		break;
	}
}

static void
listen_subscribe(struct store_listener *l)
{
	if (PQsetnonblocking(l->conn, 1) != 0 ||
	    PQsendQuery(l->conn, "LISTEN " STORE_PG_CHANNEL) != 1) {
		listen_fail(l, "LISTEN", PQerrorMessage(l->conn));
		return;
	}
	l->state = LS_SUBSCRIBING;
	listen_flush(l);
}

static void
listen_connecting(struct store_listener *l)
{
	switch (PQconnectPoll(l->conn)) {
	case PGRES_POLLING_READING:
		listen_wait(l, EV_READ);
		break;
	case PGRES_POLLING_WRITING:
		listen_wait(l, EV_WRITE);
		break;
	case PGRES_POLLING_OK:
		listen_subscribe(l);
		break;
	default:
		listen_fail(l, "cannot connect to PostgreSQL",
		    PQerrorMessage(l->conn));
		break;
	}
}

/* LISTEN answered: from now on every committed change is heard. */
static void
listen_established(struct store_listener *l)
{
	l->state = LS_LISTENING;
	l->backoff_ms = 0;
	l->problem[0] = '\0';
	evtimer_del(l->timer);
	if (l->lost_logged)
		info("store listener: hearing other replicas' changes again");
	l->lost_logged = false;
	l->fn(NULL, l->arg);
}

/* Reads what arrived: LISTEN's answer, then notices. */
static void
listen_read(struct store_listener *l)
{
	PGnotify *n;
	PGresult *res;

	if (PQconsumeInput(l->conn) == 0 ||
	    PQstatus(l->conn) == CONNECTION_BAD) {
		listen_fail(l, "connection lost", PQerrorMessage(l->conn));
		return;
	}
	while (l->state == LS_SUBSCRIBING && !PQisBusy(l->conn)) {
		if ((res = PQgetResult(l->conn)) == NULL) {
			listen_established(l);
			break;
		}
		if (PQresultStatus(res) != PGRES_COMMAND_OK) {
			listen_fail(l, "LISTEN", PQresultErrorMessage(res));
			PQclear(res);
			return;
		}
		PQclear(res);
	}
	while (l->state == LS_LISTENING && (n = PQnotifies(l->conn)) != NULL) {
		l->fn(n->extra, l->arg);
		PQfreemem(n);
	}
}

static void
listen_on_io(evutil_socket_t fd, short what, void *arg)
{
	struct store_listener *l = arg;

	(void)fd;
	(void)what;
	if (l->state == LS_CONNECTING)
		listen_connecting(l);
	else if (l->flushing)
		listen_flush(l);
	else
		listen_read(l);
}

static void
listen_quiet(void *arg, const char *msg)
{
	(void)arg;
	(void)msg;
}

static void
listen_connect(struct store_listener *l)
{
	/* The URL last, so that what it sets wins.  Keepalives notice a
	 * server that vanished without closing (a host gone) in ~25 s. */
	const char *const keys[] = { "application_name", "keepalives_idle",
	    "keepalives_interval", "keepalives_count", "options", "dbname", NULL };
	const char *const values[] = { "tether-gateway-listen", "10", "5", "3",
	    "-c statement_timeout=5000 -c lock_timeout=2000", l->url, NULL };

	l->flushing = false;
	l->conn = PQconnectStartParams(keys, values, 1);
	if (l->conn == NULL || PQstatus(l->conn) == CONNECTION_BAD) {
		listen_fail(l, "cannot connect to PostgreSQL", l->conn != NULL ?
		    PQerrorMessage(l->conn) : "out of memory");
		return;
	}
	/* The server's farewell (a shutdown's FATAL) is not for stderr: the
	 * lost connection is logged once, with its reason. */
	PQsetNoticeProcessor(l->conn, listen_quiet, NULL);
	l->state = LS_CONNECTING;
	if (!l->lost_logged)
		snprintf(l->problem, sizeof(l->problem), "connecting");
	listen_arm_timer(l, STORE_LISTEN_CONNECT_MS);
	/* Just started: as if PQconnectPoll had said "writing". */
	listen_wait(l, EV_WRITE);
}

static void
listen_on_timer(evutil_socket_t fd, short what, void *arg)
{
	struct store_listener *l = arg;

	(void)fd;
	(void)what;
	if (l->state == LS_WAIT)
		listen_connect(l);
	else if (l->state != LS_LISTENING)
		listen_fail(l, "cannot connect to PostgreSQL", "timed out");
}

int
store_listen_start(struct event_base *base, const char *url,
    store_notice_fn *fn, void *arg, struct store_listener **out, char *err,
    size_t errlen)
{
	struct store_listener *l;

	*out = NULL;
	if (!store_url_is_postgres(url))
		return 0;
	if ((l = calloc(1, sizeof(*l))) == NULL || (l->url = strdup(url)) == NULL ||
	    (l->timer = evtimer_new(base, listen_on_timer, l)) == NULL) {
		if (l != NULL)
			free(l->url);
		free(l);
		snprintf(err, errlen, "out of memory");
		return -1;
	}
	l->base = base;
	l->fn = fn;
	l->arg = arg;
	listen_connect(l);
	*out = l;
	return 0;
}

const char *
store_listen_problem(const struct store_listener *l)
{
	if (l == NULL || l->state == LS_LISTENING)
		return NULL;
	return l->problem[0] != '\0' ? l->problem : "connecting";
}

void
store_listen_stop(struct store_listener *l)
{
	if (l == NULL)
		return;
	listen_close(l);
	event_free(l->timer);
	free(l->url);
	free(l);
}
