/* wshead.c: the client's reading of an upgrade answer (see wshead.h). */
#include "wshead.h"
#include "printable.h"

#include <ctype.h>
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include <jansson.h>

static char *
trim(char *s)
{
	char *e;

	while (*s == ' ' || *s == '\t')
		s++;
	e = s + strlen(s);
	while (e > s && (e[-1] == ' ' || e[-1] == '\t'))
		*--e = '\0';
	return s;
}

/* Does a comma-separated header value list `token` (any case)? */
static int
has_token(const char *value, const char *token)
{
	size_t tl = strlen(token);

	while (*value != '\0') {
		const char *end;
		size_t n;

		value += strspn(value, " \t,");
		end = value + strcspn(value, ",");
		n = (size_t)(end - value);
		while (n > 0 && (value[n - 1] == ' ' || value[n - 1] == '\t'))
			n--;
		if (n == tl && strncasecmp(value, token, tl) == 0)
			return 1;
		value = end;
	}
	return 0;
}

/* Retry-After's delta-seconds form (RFC 9110 10.2.3): digits only,
 * capped at WS_RETRY_AFTER_MAX_S; -1 for anything else (an HTTP date is
 * not worth a clock comparison here: the caller's own backoff applies). */
static long
delta_seconds(const char *value)
{
	long v = 0;

	if (*value == '\0' || strspn(value, "0123456789") != strlen(value))
		return -1;
	for (; *value != '\0'; value++) {
		v = v * 10 + (*value - '0');
		if (v > WS_RETRY_AFTER_MAX_S)
			return WS_RETRY_AFTER_MAX_S;
	}
	return v;
}

static void
head_field(struct ws_response_head *h, const char *name, char *value)
{
	if (strcasecmp(name, "Upgrade") == 0)
		h->upgrade_ok = strcasecmp(value, "websocket") == 0;
	else if (strcasecmp(name, "Connection") == 0)
		h->connection_ok = has_token(value, "upgrade");
	else if (strcasecmp(name, "Sec-WebSocket-Accept") == 0) {
		h->have_accept = 1;
		snprintf(h->accept, sizeof(h->accept), "%s", value);
	} else if (strcasecmp(name, "Sec-WebSocket-Protocol") == 0) {
		h->have_protocol = 1;
		snprintf(h->protocol, sizeof(h->protocol), "%s", value);
	} else if (strcasecmp(name, "Content-Length") == 0) {
		char *end;
		errno = 0;
		h->content_length = strtoll(value, &end, 10);
		if (errno != 0 || end == value || *end != '\0' ||
		    h->content_length < 0)
			h->content_length = -1;
	} else if (strcasecmp(name, "Transfer-Encoding") == 0)
		h->chunked = has_token(value, "chunked");
	else if (strcasecmp(name, "Retry-After") == 0)
		h->retry_after_s = delta_seconds(value);
}

int
ws_response_parse_head(char *head, struct ws_response_head *h, char *status_line,
    size_t sllen)
{
	char *line, *next, *colon;

	memset(h, 0, sizeof(*h));
	h->content_length = -1;
	h->retry_after_s = -1;
	next = head;
	line = strsep(&next, "\n");
	line[strcspn(line, "\r")] = '\0';
	text_printable(status_line, sllen, line, strlen(line));
	if (strncmp(line, "HTTP/1.", 7) != 0 || strlen(line) < 12 ||
	    line[8] != ' ' || !isdigit((unsigned char)line[9]) ||
	    !isdigit((unsigned char)line[10]) || !isdigit((unsigned char)line[11]) ||
	    (line[12] != ' ' && line[12] != '\0'))
		return -1;
	h->status = (line[9] - '0') * 100 + (line[10] - '0') * 10 + (line[11] - '0');
	while (next != NULL) {
		line = strsep(&next, "\n");
		line[strcspn(line, "\r")] = '\0';
		if (*line == '\0')
			continue;
		if ((colon = strchr(line, ':')) == NULL)
			continue; /* not a header line: nothing we need */
		*colon = '\0';
		head_field(h, trim(line), trim(colon + 1));
	}
	return 0;
}

size_t
ws_dechunk(char *body, size_t len, int *complete)
{
	size_t in = 0, out = 0;

	*complete = 0;
	while (in < len) {
		size_t n = 0, eol = in;
		int digits = 0;

		/* The chunk size in hex, read within len (the buffer need not
		 * be NUL-terminated), refusing sizes that would overflow. */
		while (eol < len && isxdigit((unsigned char)body[eol])) {
			int d = isdigit((unsigned char)body[eol]) ? body[eol] - '0' :
			    (tolower((unsigned char)body[eol]) - 'a' + 10);
			if (n > (SIZE_MAX - (size_t)d) / 16)
				return out;
			n = n * 16 + (size_t)d;
			eol++;
			digits++;
		}
		if (digits == 0)
			break;
		while (eol < len && body[eol] != '\n')
			eol++;
		if (eol >= len)
			break;
		if (n == 0) {
			*complete = 1;
			break;
		}
		in = eol + 1;
		if (n > len - in)
			n = len - in;
		memmove(body + out, body + in, n);
		out += n;
		in += n;
		if (in < len && body[in] == '\r')
			in++;
		if (in < len && body[in] == '\n')
			in++;
	}
	return out;
}

/* The reason for a refusal: {"error":"..."}, else the body's first line,
 * else the status line. */
void
ws_refusal_reason(const char *body, size_t len, const char *status_line,
    char *out, size_t outlen)
{
	json_error_t jerr;
	json_t *doc, *e;
	size_t start = 0, end;

	if (len > 0 && (doc = json_loadb(body, len, 0, &jerr)) != NULL) {
		e = json_is_object(doc) ? json_object_get(doc, "error") : NULL;
		if (json_is_string(e) && json_string_length(e) > 0) {
			text_printable(out, outlen, json_string_value(e),
			    json_string_length(e));
			json_decref(doc);
			return;
		}
		json_decref(doc);
	}
	while (start < len && isspace((unsigned char)body[start]))
		start++;
	end = start;
	while (end < len && body[end] != '\r' && body[end] != '\n')
		end++;
	if (end > start)
		text_printable(out, outlen, body + start, end - start);
	else
		snprintf(out, outlen, "%s", status_line);
}
