/*
 * presence.c: this replica's lease and its tunnels' records in the store
 * (see presence.h).
 */
#include "presence.h"

#include <stdio.h>
#include <stdlib.h>

#include <event2/event.h>

#include "gateway.h"
#include "log.h"
#include "runtime.h"
#include "store.h"

struct presence {
	struct event *renew;       /* every PRESENCE_RENEW_MS */
	int failing;               /* the last renewal failed (logged once) */
};

static void
presence_renew(evutil_socket_t fd, short what, void *arg)
{
	struct gateway *gw = arg;
	struct presence *p = gw->presence;
	struct timeval tv = runtime_ms_timeval(PRESENCE_RENEW_MS);
	char err[STORE_ERROR_MAX + 1];

	if (store_replica_renew(gw->store, gw->replica_id, gw->peer_url,
	    gateway_now_ms() + PRESENCE_LEASE_MS, err, sizeof(err)) != STORE_OK) {
		if (!p->failing)
			warn("presence: cannot renew this replica's lease: other "
			    "replicas will see its agents as gone",
			    KV_S("replica", gw->replica_id), KV_S("err", err));
		p->failing = 1;
	} else if (p->failing) {
		info("presence: lease renewed again", KV_S("replica", gw->replica_id));
		p->failing = 0;
	}
	evtimer_add(p->renew, &tv);
}

int
presence_start(struct gateway *gw, char *err, size_t errlen)
{
	struct presence *p = calloc(1, sizeof(*p));

	if (p == NULL || (p->renew = evtimer_new(gw->base, presence_renew, gw)) == NULL) {
		free(p);
		snprintf(err, errlen, "out of memory");
		return -1;
	}
	gw->presence = p;
	/* A store that cannot take the lease now (a full disk) does not stop
	 * the gateway: it serves what needs no write and the renewals retry. */
	presence_renew(-1, 0, gw);
	return 0;
}

void
presence_stop(struct gateway *gw)
{
	struct presence *p = gw->presence;
	char err[STORE_ERROR_MAX + 1];

	if (p == NULL)
		return;
	event_free(p->renew);
	free(p);
	gw->presence = NULL;
	if (store_replica_drop(gw->store, gw->replica_id, err, sizeof(err)) != STORE_OK)
		warn("presence: cannot give up this replica's lease: it ends by "
		    "itself", KV_S("replica", gw->replica_id), KV_S("err", err));
}

void
presence_tunnel_up(struct gateway *gw, const char *agent_id)
{
	char err[STORE_ERROR_MAX + 1];

	if (gw->presence == NULL)
		return;
	if (store_tunnel_record(gw->store, agent_id, gw->replica_id,
	    gateway_now_ms(), err, sizeof(err)) != STORE_OK)
		warn("presence: cannot record the tunnel", KV_S("agent", agent_id),
		    KV_S("err", err));
}

void
presence_tunnel_down(struct gateway *gw, const char *agent_id)
{
	char err[STORE_ERROR_MAX + 1];

	if (gw->presence == NULL)
		return;
	if (store_tunnel_forget(gw->store, agent_id, gw->replica_id, err,
	    sizeof(err)) != STORE_OK)
		warn("presence: cannot forget the tunnel", KV_S("agent", agent_id),
		    KV_S("err", err));
}
