/*
 * route.c: the answers every request route writes the same way (see
 * route.h): a copied text, one line of JSON, an {"error": reason}.
 */
#include "route.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "printable.h"

void
route_respond_text(struct route_response *r, int status, const char *type,
    const char *text, size_t len)
{
	r->status = status;
	r->content_type = type;
	r->body = malloc(len + 1);
	if (r->body == NULL) {
		r->body_len = 0;
		return;
	}
	memcpy(r->body, text, len);
	r->body[len] = '\0';
	r->body_len = len;
}

void
route_respond_json(struct route_response *r, int status, json_t *v)
{
	char *s = v != NULL ? json_dumps(v, JSON_COMPACT | JSON_ENCODE_ANY) : NULL;

	json_decref(v);
	if (s == NULL) {
		route_respond_text(r, 500, "application/json",
		    "{\"error\":\"out of memory\"}\n", 26);
		return;
	}
	/* One line per response: the JSON and a newline, as curl users expect. */
	route_respond_text(r, status, "application/json", s, strlen(s));
	free(s);
	if (r->body != NULL) {
		char *p = realloc(r->body, r->body_len + 2);
		if (p != NULL) {
			p[r->body_len++] = '\n';
			p[r->body_len] = '\0';
			r->body = p;
		}
	}
}

void
route_respond_error(struct route_response *r, int status, const char *fmt, ...)
{
	char reason[512];
	va_list ap;
	json_t *v;

	va_start(ap, fmt);
	vsnprintf(reason, sizeof(reason), fmt, ap);
	va_end(ap);
	/* JSON text is UTF-8: a reason that echoes a client's invalid bytes
	 * (an id in the path) is sent with those bytes as '?'. */
	if ((v = json_pack("{s:s}", "error", reason)) == NULL) {
		text_printable(reason, sizeof(reason), reason, strlen(reason));
		v = json_pack("{s:s}", "error", reason);
	}
	route_respond_json(r, status, v);
}
