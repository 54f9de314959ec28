/*
 * prom_http.c: the plain-HTTP /metrics endpoint (see prom_http.h).
 */
#include "prom_http.h"

#include <errno.h>
#include <netinet/in.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>

#include <event2/buffer.h>
#include <event2/event.h>
#include <event2/http.h>
#include <event2/keyvalq_struct.h>
#include <event2/listener.h>
#include <event2/util.h>

#include "log.h"
#include "netaddr.h"

#define HEADERS_MAX   8192
#define IDLE_SECONDS  10
#define ACCEPT_PAUSE_MS 1000    /* after accept failed (out of fds) */
#define ACCEPT_LOG_MS   10000   /* at most one line per interval, counted */

struct prom_http {
	struct evhttp *http;
	struct evconnlistener *listener;
	struct event *resume;             /* re-enables the listener */
	prom_render_fn *render;
	void *arg;
	int port;
	uint64_t accept_errors;           /* since start */
	uint64_t accept_errors_logged;    /* as of the last line */
	int64_t accept_log_ms;            /* that line's time (monotonic) */
	struct prom_http *next;           /* in live_endpoints */
};

/* The live endpoints: libevent hands the listener's error callback the
 * evhttp (evhttp_bind_listener took the listener's argument), and this is
 * how the endpoint is found from it.  Loop thread only; one or two. */
static struct prom_http *live_endpoints;

static int64_t
mono_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static void
on_resume(evutil_socket_t fd, short what, void *arg)
{
	struct prom_http *p = arg;

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
	struct prom_http *p = live_endpoints;
	int64_t now = mono_ms();

	while (p != NULL && p->http != arg)
		p = p->next;
	evconnlistener_disable(l);
	if (p == NULL)
		return;
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
	free((void *)data);
}

static void
on_request(struct evhttp_request *req, void *arg)
{
	struct prom_http *p = arg;
	const char *path = evhttp_uri_get_path(evhttp_request_get_evhttp_uri(req));
	struct evbuffer *out = evhttp_request_get_output_buffer(req);
	char *text;
	size_t len = 0;

	/* Every answer: never read as another type than it says. */
	evhttp_add_header(evhttp_request_get_output_headers(req),
	    "X-Content-Type-Options", "nosniff");
	if (path == NULL || strcmp(path, "/metrics") != 0) {
		evbuffer_add_printf(out, "no such path: try /metrics\n");
		evhttp_send_reply(req, 404, "Not Found", out);
		return;
	}
	text = p->render(p->arg, &len);
	if (text == NULL) {
		evbuffer_add_printf(out, "cannot collect the metrics\n");
		evhttp_send_reply(req, 500, "Internal Server Error", out);
		return;
	}
	evhttp_add_header(evhttp_request_get_output_headers(req), "Content-Type",
	    PROM_CONTENT_TYPE);
	if (evbuffer_add_reference(out, text, len, free_text, NULL) != 0) {
		free(text);
		evhttp_send_reply(req, 500, "Internal Server Error", NULL);
		return;
	}
	evhttp_send_reply(req, 200, "OK", out);
}

struct prom_http *
prom_http_start(struct event_base *base, const char *addr, prom_render_fn *render,
    void *arg, char *err, size_t errlen)
{
	struct prom_http *p = calloc(1, sizeof(*p));
	struct sockaddr_storage ss;
	int sslen = 0;
	struct evconnlistener *l;

	if (p == NULL || (p->http = evhttp_new(base)) == NULL) {
		snprintf(err, errlen, "out of memory");
		free(p);
		return NULL;
	}
	p->render = render;
	p->arg = arg;
	if (netaddr_parse(addr, &ss, &sslen) != 0) {
		snprintf(err, errlen, "--metrics-listen wants IPv4:PORT or [IPv6]:PORT, "
		    "got \"%s\"", addr);
		goto fail;
	}
	l = evconnlistener_new_bind(base, NULL, NULL, LEV_OPT_CLOSE_ON_FREE |
	    LEV_OPT_REUSEABLE | LEV_OPT_CLOSE_ON_EXEC, 128, (struct sockaddr *)&ss, sslen);
	if (l == NULL) {
		snprintf(err, errlen, "cannot listen on %s: %s", addr, strerror(errno));
		goto fail;
	}
	if (evhttp_bind_listener(p->http, l) == NULL) {
		evconnlistener_free(l);
		snprintf(err, errlen, "cannot serve HTTP on %s", addr);
		goto fail;
	}
	p->port = netaddr_bound_port(evconnlistener_get_fd(l));
	p->listener = l;
	if ((p->resume = evtimer_new(base, on_resume, p)) == NULL) {
		snprintf(err, errlen, "out of memory");
		goto fail;
	}
	evconnlistener_set_error_cb(l, on_accept_error);
	p->next = live_endpoints;
	live_endpoints = p;
	evhttp_set_allowed_methods(p->http, EVHTTP_REQ_GET | EVHTTP_REQ_HEAD);
	evhttp_set_max_headers_size(p->http, HEADERS_MAX);
	evhttp_set_max_body_size(p->http, 0);
	evhttp_set_timeout(p->http, IDLE_SECONDS);
	evhttp_set_gencb(p->http, on_request, p);
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
	for (struct prom_http **q = &live_endpoints; *q != NULL; q = &(*q)->next) {
		if (*q == p) {
			*q = p->next;
			break;
		}
	}
	if (p->resume != NULL)
		event_free(p->resume);
	if (p->http != NULL)
		evhttp_free(p->http);
	free(p);
}
