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

static int
bound_port(evutil_socket_t fd)
{
	struct sockaddr_storage ss;
	socklen_t len = sizeof(ss);

	if (getsockname(fd, (struct sockaddr *)&ss, &len) != 0)
		return -1;
	if (ss.ss_family == AF_INET6)
		return ntohs(((struct sockaddr_in6 *)&ss)->sin6_port);
	return ntohs(((struct sockaddr_in *)&ss)->sin_port);
}

/* "IPv4:PORT" or "[IPv6]:PORT", port 0 allowed.  Returns 0 or -1. */
static int
parse_addr(const char *addr, struct sockaddr_storage *ss, int *sslen)
{
	const char *colon = strrchr(addr, ':');
	char host[64], *end;
	size_t n;
	long port;

	if (colon == NULL || colon == addr || (n = (size_t)(colon - addr)) >= sizeof(host))
		return -1;
	port = strtol(colon + 1, &end, 10);
	if (*end != '\0' || end == colon + 1 || port < 0 || port > 65535)
		return -1;
	if (addr[0] == '[' && addr[n - 1] == ']') {
		memcpy(host, addr + 1, n - 2);
		host[n - 2] = '\0';
	} else {
		memcpy(host, addr, n);
		host[n] = '\0';
	}
	memset(ss, 0, sizeof(*ss));
	if (evutil_inet_pton(AF_INET, host, &((struct sockaddr_in *)ss)->sin_addr) == 1) {
		((struct sockaddr_in *)ss)->sin_family = AF_INET;
		((struct sockaddr_in *)ss)->sin_port = htons((uint16_t)port);
		*sslen = sizeof(struct sockaddr_in);
		return 0;
	}
	if (evutil_inet_pton(AF_INET6, host, &((struct sockaddr_in6 *)ss)->sin6_addr) == 1) {
		((struct sockaddr_in6 *)ss)->sin6_family = AF_INET6;
		((struct sockaddr_in6 *)ss)->sin6_port = htons((uint16_t)port);
		*sslen = sizeof(struct sockaddr_in6);
		return 0;
	}
	return -1;
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
	if (parse_addr(addr, &ss, &sslen) != 0) {
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
	p->port = bound_port(evconnlistener_get_fd(l));
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
