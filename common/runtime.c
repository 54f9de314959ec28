/* runtime.c: process-wide settings (see runtime.h). */
#include "runtime.h"

#include <malloc.h>
#include <signal.h>

#include <event2/event.h>

void
runtime_init(void)
{
	signal(SIGPIPE, SIG_IGN);
	/* Keep message-sized buffers in the heap and the heap's top in place:
	 * memory is still bounded by the flow-control windows. */
	mallopt(M_MMAP_THRESHOLD, 8 << 20);
	mallopt(M_TRIM_THRESHOLD, 32 << 20);
}

struct event_base *
runtime_event_base(void)
{
	struct event_config *cfg = event_config_new();
	struct event_base *base;

	if (cfg == NULL)
		return NULL;
	event_config_set_flag(cfg, EVENT_BASE_FLAG_EPOLL_USE_CHANGELIST);
	base = event_base_new_with_config(cfg);
	event_config_free(cfg);
	return base;
}
