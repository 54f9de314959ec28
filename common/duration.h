/*
 * duration.h: a duration as people write one on a command line ("90s",
 * "10m", "24h", "7d"), for tetherctl's --ttl and tether-client join's
 * --timeout.  Pure.
 */
#ifndef TETHER_DURATION_H
#define TETHER_DURATION_H

#include <stdint.h>

/*
 * s is digits then one unit, s, m, h or d.  Returns 0 with the seconds in
 * *out, or -1 (nothing else, a value of 0, or over max_s seconds).
 */
int duration_parse(const char *s, int64_t max_s, int64_t *out);

#endif
