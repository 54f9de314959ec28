/*
 * gateway.c: what every part of the running gateway shares besides
 * struct gateway itself (see gateway.h): the wall clock, and giving the
 * heap back after a burst of handshakes.  In the library,
 * not in main.c, so that everything that calls it links without the
 * command line.
 */
#include "gateway.h"

#include <malloc.h>
#include <time.h>

#include <event2/event.h>

#include "log.h"
#include "runtime.h"

static void
gateway_trim(evutil_socket_t fd, short what, void *arg)
{
	struct gateway *gw = arg;

	debug("handshakes settled: heap trimmed", KV_I("released",
	    malloc_trim(0)), KV_U("handshakes", gw->handshakes));
}

void
gateway_handshake_ended(struct gateway *gw)
{
	struct timeval tv = runtime_ms_timeval(GATEWAY_TRIM_DELAY_MS);

	if (gw->base == NULL)
		return;
	if (gw->trim_timer == NULL &&
	    (gw->trim_timer = evtimer_new(gw->base, gateway_trim, gw)) == NULL)
		return;
	evtimer_add(gw->trim_timer, &tv);
}

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
