/*
 * prom_http.c: the plain-HTTP /metrics endpoint (see prom_http.h).
 *
 * A listener and one bufferevent per connection on the owner's loop; no
 * evhttp (libevent 2.1's evhttp has no whole-head deadline and no cap on
 * connections: a thousand dripped heads stayed open for good).  Each
 * connection reads one request head within HEAD_DEADLINE_MS of its accept,
 * gets one answer with `Connection: close`, and is closed once the answer
 * is written; past MAX_CONNS at once a new connection is closed at accept.
 */
#include "prom_http.h"

#include <errno.h>
#include <netinet/in.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/queue.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/event.h>
#include <event2/listener.h>
#include <event2/util.h>

#include "httphead.h"
#include "log.h"
#include "netaddr.h"

#define HEAD_MAX          8192   /* a request head, request line included */
#define HEAD_DEADLINE_MS  5000   /* from accept to the whole head */
#define WRITE_DEADLINE_MS 10000  /* for the answer to leave */
#define MAX_CONNS         64     /* at once; scrapes are one request each */
#define ACCEPT_PAUSE_MS   1000   /* after accept failed (out of fds) */
#define ACCEPT_LOG_MS     10000  /* at most one line per interval, counted */

struct prom_conn {
	struct prom_http *p;
	struct bufferevent *bev;
	struct event *deadline;           /* the head's, then the answer's */
	int answered;                     /* its answer is queued */
	LIST_ENTRY(prom_conn) link;
};

struct prom_http {
	struct evconnlistener *listener;
	struct event *resume;             /* re-enables the listener */
	prom_render_fn *render;
	void *arg;
	int port;
	unsigned conns;                   /* in live */
	LIST_HEAD(, prom_conn) live;
	uint64_t accept_errors;           /* since start */
	uint64_t accept_errors_logged;    /* as of the last line */
	int64_t accept_log_ms;            /* that line's time (monotonic) */
};

static int64_t
mono_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static void
conn_free(struct prom_conn *c)
{
	LIST_REMOVE(c, link);
	c->p->conns--;
	event_free(c->deadline);
	bufferevent_free(c->bev);
	free(c);
}

static void
on_resume(evutil_socket_t fd, short what, void *arg)
{
	struct prom_http *p = arg;

	(void)fd;
	(void)what;
	evconnlistener_enable(p->listener);
}

/* accept() failed (out of descriptors, most often): without this callback
 * libevent logs and retries at once, forever (a spinning loop writing
 * megabytes a second).  The listener pauses ACCEPT_PAUSE_MS instead, and
 * one line per ACCEPT_LOG_MS says how many failed. */
static void
on_accept_error(struct evconnlistener *l, void *arg)
{
	struct timeval tv = { ACCEPT_PAUSE_MS / 1000, (ACCEPT_PAUSE_MS % 1000) * 1000 };
	int err = EVUTIL_SOCKET_ERROR();
	struct prom_http *p = arg;
	int64_t now = mono_ms();

	evconnlistener_disable(l);
	evtimer_add(p->resume, &tv);
	p->accept_errors++;
	if (p->accept_log_ms != 0 && now - p->accept_log_ms < ACCEPT_LOG_MS)
		return;
	warn("metrics: accept failed: paused", KV_S("err", strerror(err)),
	    KV_I("pause_ms", ACCEPT_PAUSE_MS),
	    KV_U("count", p->accept_errors - p->accept_errors_logged),
	    KV_I("interval_ms", ACCEPT_LOG_MS));
	p->accept_errors_logged = p->accept_errors;
	p->accept_log_ms = now;
}

static void
free_text(const void *data, size_t len, void *arg)
{
	(void)len;
	(void)arg;
	free((void *)data);
}

/* Queues one answer; what the client sent is dropped; the write side ends
 * once the answer is written (on_written). */
static void
answer(struct prom_conn *c, int status, const char *reason, int head_only,
    char *text, size_t len, const char *type)
{
	struct evbuffer *out = bufferevent_get_output(c->bev);
	struct timeval tv = { WRITE_DEADLINE_MS / 1000, 0 };

	c->answered = 1;
	evtimer_add(c->deadline, &tv);
	evbuffer_drain(bufferevent_get_input(c->bev),
	    evbuffer_get_length(bufferevent_get_input(c->bev)));

	/* Every answer: never read as another type than it says. */
	evbuffer_add_printf(out, "HTTP/1.1 %d %s\r\nContent-Type: %s\r\n"
	    "Content-Length: %zu\r\nX-Content-Type-Options: nosniff\r\n"
	    "Connection: close\r\n\r\n", status, reason, type, len);
	if (head_only || len == 0)
		free(text);
	else if (evbuffer_add_reference(out, text, len, free_text, NULL) != 0)
		free(text);
}

static void
answer_text(struct prom_conn *c, int status, const char *reason,
    int head_only, const char *msg)
{
	answer(c, status, reason, head_only, strdup(msg), strlen(msg),
	    "text/plain; charset=utf-8");
}

/* One complete head of len bytes: GET or HEAD /metrics[?query]. */
static void
serve(struct prom_conn *c, const char *head, size_t len)
{
	const char *sp1 = memchr(head, ' ', len), *sp2, *q;
	size_t plen;
	int head_only;
	char *text;
	size_t tlen = 0;

	sp2 = sp1 == NULL ? NULL : memchr(sp1 + 1, ' ', len - (size_t)(sp1 + 1 - head));
	if (sp1 == NULL || sp2 == NULL || memchr(head, '\n', (size_t)(sp2 - head)) != NULL) {
		answer_text(c, 400, "Bad Request", 0, "malformed request line\n");
		return;
	}
	head_only = sp1 - head == 4 && memcmp(head, "HEAD", 4) == 0;
	if (!head_only && !(sp1 - head == 3 && memcmp(head, "GET", 3) == 0)) {
		answer_text(c, 405, "Method Not Allowed", 0, "GET or HEAD only\n");
		return;
	}
	q = memchr(sp1 + 1, '?', (size_t)(sp2 - sp1 - 1));
	plen = (size_t)((q != NULL ? q : sp2) - (sp1 + 1));
	if (plen != strlen("/metrics") || memcmp(sp1 + 1, "/metrics", plen) != 0) {
		answer_text(c, 404, "Not Found", head_only, "no such path: try /metrics\n");
		return;
	}
	if ((text = c->p->render(c->p->arg, &tlen)) == NULL) {
		answer_text(c, 500, "Internal Server Error", head_only,
		    "cannot collect the metrics\n");
		return;
	}
	answer(c, 200, "OK", head_only, text, tlen, PROM_CONTENT_TYPE);
}

static void
on_read(struct bufferevent *bev, void *arg)
{
	struct prom_conn *c = arg;
	struct evbuffer *in = bufferevent_get_input(bev);
	size_t have = evbuffer_get_length(in), hlen;
	const char *buf;

	if (c->answered) {              /* what follows the one request */
		evbuffer_drain(in, evbuffer_get_length(in));
		return;
	}
	if (have > HEAD_MAX)
		have = HEAD_MAX;
	buf = (const char *)evbuffer_pullup(in, (ev_ssize_t)have);
	hlen = buf == NULL ? 0 : http_head_length(buf, have);
	if (hlen > 0) {
		serve(c, buf, hlen);
		return;
	}
	if (have >= HEAD_MAX)
		answer_text(c, 431, "Request Header Fields Too Large", 0,
		    "request head over 8 KiB\n");
}

/* The answer is written: the write side ends, and the connection goes at
 * the client's EOF (closing with its bytes unread could reset the answer
 * away) or at the deadline. */
static void
on_written(struct bufferevent *bev, void *arg)
{
	struct prom_conn *c = arg;

	if (c->answered)
		shutdown(bufferevent_getfd(bev), SHUT_WR);
}

/* EOF or an error. */
static void
on_event(struct bufferevent *bev, short what, void *arg)
{
	(void)bev;
	(void)what;
	conn_free(arg);
}

/* The head did not come whole within HEAD_DEADLINE_MS of the accept (a
 * dripped head included), or the answer did not leave in time. */
static void
on_deadline(evutil_socket_t fd, short what, void *arg)
{
	(void)fd;
	(void)what;
	conn_free(arg);
}

static void
on_accept(struct evconnlistener *l, evutil_socket_t fd, struct sockaddr *sa,
    int salen, void *arg)
{
	struct prom_http *p = arg;
	struct timeval tv = { HEAD_DEADLINE_MS / 1000, (HEAD_DEADLINE_MS % 1000) * 1000 };
	struct prom_conn *c;

	(void)sa;
	(void)salen;
	if (p->conns >= MAX_CONNS || (c = calloc(1, sizeof(*c))) == NULL) {
		evutil_closesocket(fd);
		return;
	}
	c->bev = bufferevent_socket_new(evconnlistener_get_base(l), fd,
	    BEV_OPT_CLOSE_ON_FREE);
	c->deadline = evtimer_new(evconnlistener_get_base(l), on_deadline, c);
	if (c->bev == NULL || c->deadline == NULL) {
		if (c->bev != NULL)
			bufferevent_free(c->bev);
		else
			evutil_closesocket(fd);
		if (c->deadline != NULL)
			event_free(c->deadline);
		free(c);
		return;
	}
	c->p = p;
	LIST_INSERT_HEAD(&p->live, c, link);
	p->conns++;
	bufferevent_setcb(c->bev, on_read, on_written, on_event, c);
	/* The deadline runs from the accept, not from the last byte (as a
	 * bufferevent's read timeout would): a head dripped a byte at a time
	 * still ends at HEAD_DEADLINE_MS. */
	evtimer_add(c->deadline, &tv);
	bufferevent_setwatermark(c->bev, EV_READ, 0, HEAD_MAX + 1);
	bufferevent_enable(c->bev, EV_READ);
}

struct prom_http *
prom_http_start(struct event_base *base, const char *addr, prom_render_fn *render,
    void *arg, char *err, size_t errlen)
{
	struct prom_http *p = calloc(1, sizeof(*p));
	struct sockaddr_storage ss;
	int sslen = 0;

	if (p == NULL) {
		snprintf(err, errlen, "out of memory");
		return NULL;
	}
	LIST_INIT(&p->live);
	p->render = render;
	p->arg = arg;
	if (netaddr_parse(addr, &ss, &sslen) != 0) {
		snprintf(err, errlen, "--metrics-listen wants IPv4:PORT or [IPv6]:PORT, "
		    "got \"%s\"", addr);
		goto fail;
	}
	if ((p->resume = evtimer_new(base, on_resume, p)) == NULL) {
		snprintf(err, errlen, "out of memory");
		goto fail;
	}
	p->listener = evconnlistener_new_bind(base, on_accept, p,
	    LEV_OPT_CLOSE_ON_FREE | LEV_OPT_REUSEABLE | LEV_OPT_CLOSE_ON_EXEC, 128,
	    (struct sockaddr *)&ss, sslen);
	if (p->listener == NULL) {
		snprintf(err, errlen, "cannot listen on %s: %s", addr, strerror(errno));
		goto fail;
	}
	p->port = netaddr_bound_port(evconnlistener_get_fd(p->listener));
	evconnlistener_set_error_cb(p->listener, on_accept_error);
	return p;
fail:
	prom_http_free(p);
	return NULL;
}

int
prom_http_port(const struct prom_http *p)
{
	return p->port;
}

void
prom_http_free(struct prom_http *p)
{
	if (p == NULL)
		return;
	while (!LIST_EMPTY(&p->live))
		conn_free(LIST_FIRST(&p->live));
	if (p->listener != NULL)
		evconnlistener_free(p->listener);
	if (p->resume != NULL)
		event_free(p->resume);
	free(p);
}
