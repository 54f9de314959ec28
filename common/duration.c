/*
 * duration.c: "Ns", "Nm", "Nh", "Nd" into seconds (see duration.h).
 */
#include "duration.h"

#include <string.h>

int
duration_parse(const char *s, int64_t max_s, int64_t *out)
{
	int64_t v = 0, mult;
	size_t i, n = strlen(s);

	if (n < 2)
		return -1;
	switch (s[n - 1]) {
	case 's': mult = 1; break;
	case 'm': mult = 60; break;
	case 'h': mult = 3600; break;
	case 'd': mult = 86400; break;
	default: return -1;
	}
	for (i = 0; i + 1 < n; i++) {
		if (s[i] < '0' || s[i] > '9')
			return -1;
		v = v * 10 + (s[i] - '0');
		if (v > max_s)
			return -1;
	}
	v *= mult;
	if (v <= 0 || v > max_s)
		return -1;
	*out = v;
	return 0;
}
