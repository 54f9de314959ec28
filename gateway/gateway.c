/*
 * gateway.c: what every part of the running gateway shares besides
 * struct gateway itself (see gateway.h): the wall clock.  In the library,
 * not in main.c, so that everything that calls it links without the
 * command line.
 */
#include "gateway.h"

#include <time.h>

int64_t
gateway_now(void)
{
	return (int64_t)time(NULL);
}

int64_t
gateway_now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_REALTIME, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}
