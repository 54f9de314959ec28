/*
 * fuzz_proxyv2.c: libFuzzer target for the PROXY v2 header parser and the
 * trusted source list parser (common/proxyv2.c): the first byte picks
 * which; a header the parser accepts must lie inside the input.
 */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "netaddr.h"
#include "proxyv2.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct proxy_v2 p;
	struct cidr_list l;
	char err[256], *s;
	size_t need;
	int r;

	if (size == 0)
		return 0;
	if (data[0] == 'C') {
		if ((s = malloc(size)) == NULL)
			return 0;
		memcpy(s, data + 1, size - 1);
		s[size - 1] = '\0';
		if (cidr_list_parse(s, &l, err, sizeof(err)) == 0 && l.n == 0)
			abort();
		free(s);
		return 0;
	}
	r = proxy_v2_parse(data, size, &p, &need, err, sizeof(err));
	if (r == 1 && (p.len > size || p.len > PROXY_V2_MAX))
		abort();
	if (r == 0 && (need <= size || need > PROXY_V2_MAX))
		abort();
	return 0;
}
