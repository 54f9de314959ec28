/*
 * fuzz_proxy_url.c: libFuzzer target for the proxy URL parser (url_parse,
 * from --proxy and HTTPS_PROXY) and NO_PROXY matching: the input is split
 * at its first newline into a URL / NO_PROXY list and a host.
 */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "proxy.h"
#include "url.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct url u;
	char why[256], *s, *host, *req;
	size_t len;

	if ((s = malloc(size + 1)) == NULL)
		return 0;
	memcpy(s, data, size);
	s[size] = '\0';
	host = strchr(s, '\n');
	if (host != NULL)
		*host++ = '\0';
	else
		host = s;
	if (url_parse(s, proxy_url_schemes, &u, why, sizeof(why)) == 0) {
		/* What parses must build a request without CR/LF injection. */
		char origin[URL_MAX + 32];

		/* The origin it writes parses back to the same host and port. */
		if (url_origin(&u, origin, sizeof(origin)) > 0) {
			struct url back;

			if (url_parse(origin, proxy_url_schemes, &back, why,
			    sizeof(why)) != 0 || strcmp(back.host, u.host) != 0 ||
			    back.port != u.port || !url_is_origin(&back))
				abort();
			url_clear(&back);
		}
		req = proxy_connect_request(&u, u.host, u.port, NULL, &len);
		if (req != NULL) {
			if (strstr(req, "\r\n\r\n") != req + len - 4)
				abort();
			free(req);
		}
		url_clear(&u);
	}
	(void)no_proxy_match(s, host);
	free(s);
	return 0;
}
