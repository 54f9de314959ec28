/*
 * hub.h: the gateway's registry of agents with an established tunnel.
 *
 * A session enters the hub once it is authenticated as an agent (WELCOME)
 * and leaves it when its tunnel closes.  One agent has at most one entry:
 * a reconnecting agent replaces its stale session, which is then closed.
 */
#ifndef TETHER_HUB_H
#define TETHER_HUB_H

#include <stddef.h>
#include <stdint.h>

struct hub;
struct session;

/* What the hub asks of the sessions it holds (kept, not copied): the
 * agent's node name, and whether it may carry streams now. */
struct hub_ops {
	const char *(*node)(const struct session *s);
	int (*is_active)(const struct session *s);
	/* Sends s the gateway's settings (a SETTINGS frame, or nothing). */
	void (*send_settings)(struct session *s);
};

struct hub *hub_new(const struct hub_ops *ops);
/* The hub must be empty (every session removed) before it is freed. */
void hub_free(struct hub *h);

/* Adds s under agent_id and returns the session it replaced, or NULL. */
struct session *hub_add(struct hub *h, const char *agent_id, const char *cluster,
    struct session *s);
/* Removes s if it is the entry for agent_id (a replaced session is not). */
void hub_remove(struct hub *h, const char *agent_id, struct session *s);
struct session *hub_find(struct hub *h, const char *agent_id);
/* When agent_id's current tunnel was established (Unix seconds), or 0 if
 * it is not connected. */
int64_t hub_connected_since(struct hub *h, const char *agent_id);
/* Connected agents of one cluster.  O(agents of the cluster). */
size_t hub_count_cluster(struct hub *h, const char *cluster);
size_t hub_count(struct hub *h);

/*
 * An active session of cluster (of node, when node is non-NULL), rotating
 * among several; NULL if none.  *connected (optional) tells whether any
 * matching agent is connected at all, active or not.  O(agents of the
 * cluster): called on every dial, forwarded stream and /k8s request.
 */
struct session *hub_pick(struct hub *h, const char *cluster, const char *node,
    int *connected);

/* Calls fn for every session (fn may not add or remove entries). */
void hub_foreach(struct hub *h, void (*fn)(struct session *, void *), void *arg);
/* Calls fn with every connected agent's id (fn may not add or remove
 * entries).  O(agents here). */
void hub_foreach_id(struct hub *h, void (*fn)(const char *agent_id, void *),
    void *arg);
/* Sends every session the gateway's settings (ops->send_settings); returns
 * how many sessions were asked.  O(agents here). */
size_t hub_send_settings(struct hub *h);

#endif
