/*
 * fuzz_dial_query.c: libFuzzer target for what the dial endpoint reads
 * from a client before it opens anything: the request target's query,
 * percent-decoded by the request reader (gateway/transport/http.c), its parameters
 * (api_query_param, gateway/routes/apibody.c) and the target's syntax
 * (target_parse, common/hostname.c).  The input is the raw query.
 *
 * Checks beyond "no crash": a parameter value never holds '&'; an accepted
 * target is HOST:PORT of bytes that need no quoting anywhere (letters,
 * digits, '.', '-', ':', brackets), with a port from 1 to 65535, the same
 * port as its digits say.
 */
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "apibody.h"
#include "hostname.h"
#include "http.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void
check(int ok)
{
	if (!ok)
		abort();
}

static void
check_target(const char *t)
{
	char why[128];
	size_t hlen;
	unsigned int port;

	if (target_parse(t, strlen(t), &hlen, &port, why, sizeof(why)) != 0) {
		check(why[0] != '\0');
		return;
	}
	for (const char *p = t; *p != '\0'; p++)
		check((*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') ||
		    (*p >= '0' && *p <= '9') || *p == '.' || *p == '-' ||
		    *p == ':' || *p == '[' || *p == ']');
	check(port >= 1 && port <= 65535 && t[hlen] == ':');
	check((unsigned int)strtoul(t + hlen + 1, NULL, 10) == port);
}

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static const char head[] = "GET /v1/clusters/c-1/dial?";
	static const char tail[] = " HTTP/1.1\r\nHost: gw\r\n\r\n";
	const struct http_request *q;
	enum http_read_result res;
	struct http_reader *r;
	char *req, target[256], node[64];

	if (size > 4096)
		return 0;
	req = malloc(sizeof(head) + size + sizeof(tail));
	check(req != NULL);
	memcpy(req, head, sizeof(head) - 1);
	memcpy(req + sizeof(head) - 1, data, size);
	memcpy(req + sizeof(head) - 1 + size, tail, sizeof(tail) - 1);
	r = http_reader_new(64);
	check(r != NULL);
	http_reader_feed(r, req, sizeof(head) - 1 + size + sizeof(tail) - 1, &res);
	if (res == HTTP_READ_REQUEST) {
		q = http_reader_request(r);
		if (api_query_param(q->query, "target", target, sizeof(target)) == 0) {
			check(strchr(target, '&') == NULL);
			check_target(target);
		}
		if (api_query_param(q->query, "node", node, sizeof(node)) == 0)
			check(strchr(node, '&') == NULL);
	}
	/* And the raw bytes as a target, as a forward OPEN carries it. */
	if (size < sizeof(target) && memchr(data, '\0', size) == NULL) {
		memcpy(target, data, size);
		target[size] = '\0';
		check_target(target);
	}
	http_reader_free(r);
	free(req);
	return 0;
}
