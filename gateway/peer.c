/*
 * peer.c: links between gateway replicas (see peer.h).  Not built yet: a
 * stream to an agent on another replica is refused with a reason.
 */
#include "peer.h"

#include <stdio.h>

struct mux_stream *
peer_open_stream(struct gateway *gw, const char *replica, const char *peer_url,
    const char *agent_id, const char *principal, const char *target, const char *service,
    const struct mux_stream_handlers *h, void *arg, char *err, size_t errlen)
{
	(void)gw; (void)replica; (void)peer_url; (void)agent_id; (void)principal;
	(void)target; (void)service; (void)h; (void)arg;
	snprintf(err, errlen, "peer links are not built yet");
	return NULL;
}
