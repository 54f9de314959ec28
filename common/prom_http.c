/*
 * prom_http.c: the plain-HTTP /metrics endpoint (see prom_http.h).
 */
#include "prom_http.h"

#include <errno.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include <event2/buffer.h>
#include <event2/event.h>
#include <event2/http.h>
#include <event2/keyvalq_struct.h>
#include <event2/listener.h>
#include <event2/util.h>

#include "netaddr.h"

#define HEADERS_MAX   8192
#define IDLE_SECONDS  10

struct prom_http {
	struct evhttp *http;
	prom_render_fn *render;
	void *arg;
	int port;
};

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
	if (p->http != NULL)
		evhttp_free(p->http);
	free(p);
}
