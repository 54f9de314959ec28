/*
 * ui.h: the status page at https://GATEWAY/ui/ and the one view behind it,
 * GET /v1/status.
 *
 * The page (gateway/routes/ui/: plain HTML, CSS and JS, embedded in the binary at
 * build time by gateway/routes/ui/embed.cmake) asks for a token, or takes it from
 * the URL fragment #token=... (never sent to the server), keeps it in
 * sessionStorage and polls /v1/status every 2 s.  Its answers carry a
 * strict Content-Security-Policy: everything from the gateway itself, no
 * inline script or style, no frames, no form submissions.
 */
#ifndef TETHER_UI_H
#define TETHER_UI_H

struct route;

/*
 * The status page's route (route.h): GET /ui -> 301 /ui/; /ui/ and
 * /ui/FILE -> the embedded files, else 404; and its view, GET /v1/status
 * with an admin token (every cluster) or a user token (the clusters it is
 * scoped to): {"principal", "admin", "time", "clusters": [{id, name,
 * agents, agents_connected}], "agents": [{id, cluster, node, state,
 * last_error, connected, connected_since, updated_at}], "streams": [{kind,
 * who, cluster, node, target, bytes_up, bytes_down, started_at,
 * age_seconds}]}.  A user sees the principal of its own streams only.
 * Cost of /v1/status: one read of the agents of the clusters shown,
 * O(agents), per call.  Another method than GET: 405.
 */
extern const struct route ui_route;

#endif
