/*
 * httphead.c: request-head helpers (see httphead.h).
 */
#include "httphead.h"

#include <stdlib.h>
#include <string.h>
#include <strings.h>

#define BEARER_PREFIX "Authorization: Bearer "

size_t
http_head_length(const char *buf, size_t len)
{
	for (size_t i = 0; i < len; i++) {
		if (buf[i] != '\n')
			continue;
		if (i + 1 < len && buf[i + 1] == '\n')
			return i + 2;
		if (i + 2 < len && buf[i + 1] == '\r' && buf[i + 2] == '\n')
			return i + 3;
	}
	return 0;
}

int
http_token_valid(const char *token, size_t len)
{
	if (token == NULL || len == 0 || len > HTTP_TOKEN_MAX)
		return 0;
	for (size_t i = 0; i < len; i++)
		if ((unsigned char)token[i] < 0x21 || (unsigned char)token[i] > 0x7e)
			return 0;
	return 1;
}

/* RFC 9110 tchar: what a field name is made of. */
static int
is_tchar(unsigned char c)
{
	return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') ||
	    (c >= 'A' && c <= 'Z') || (c != '\0' && strchr("!#$%&'*+-.^_`|~", c) != NULL);
}

int
http_head_set_bearer(const char *head, size_t len, const char *token,
    char **out, size_t *outlen)
{
	size_t toklen, pos, cap, n = 0;
	int first = 1, have_header = 0, drop = 0;
	char *buf;

	*out = NULL;
	*outlen = 0;
	if (token == NULL || !http_token_valid(token, toklen = strlen(token)))
		return -1;
	if (head == NULL || len == 0 || http_head_length(head, len) != len ||
	    memchr(head, '\0', len) != NULL)
		return -1;
	cap = len + sizeof(BEARER_PREFIX) - 1 + toklen + 2;
	if ((buf = malloc(cap)) == NULL)
		return -1;
	for (pos = 0; pos < len;) {
		const char *line = head + pos;
		const char *nl = memchr(line, '\n', len - pos);
		size_t full = (size_t)(nl - line) + 1;   /* with its line end */
		size_t body = (size_t)(nl - line);        /* without it */
		const char *colon;

		if (body > 0 && line[body - 1] == '\r')
			body--;
		pos += full;
		if (first) {
			/* The request line: METHOD SP TARGET SP VERSION. */
			if (body == 0 || line[0] == ' ' || line[0] == '\t' ||
			    memchr(line, ' ', body) == NULL)
				goto bad;
			first = 0;
		} else if (body == 0) {
			/* The empty line: always the last (http_head_length). */
			memcpy(buf + n, BEARER_PREFIX, sizeof(BEARER_PREFIX) - 1);
			n += sizeof(BEARER_PREFIX) - 1;
			memcpy(buf + n, token, toklen);
			n += toklen;
			memcpy(buf + n, "\r\n", 2);
			n += 2;
		} else if (line[0] == ' ' || line[0] == '\t') {
			/* obs-fold: part of the header before it. */
			if (!have_header)
				goto bad;
			if (drop)
				continue;
		} else {
			colon = memchr(line, ':', body);
			if (colon == NULL || colon == line)
				goto bad;
			for (const char *p = line; p < colon; p++)
				if (!is_tchar((unsigned char)*p))
					goto bad;
			have_header = 1;
			drop = colon - line == 13 && strncasecmp(line, "authorization", 13) == 0;
			if (drop)
				continue;
		}
		memcpy(buf + n, line, full);
		n += full;
	}
	*out = buf;
	*outlen = n;
	return 0;
bad:
	free(buf);
	return -1;
}
