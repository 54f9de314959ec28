/*
 * k8s.h: /k8s/clusters/ID/<rest>: HTTP requests passed through an agent's
 * tunnel to its "kube-api" service, a stream reused by the requests of one
 * client connection, so that
 * kubectl works with the kubeconfig `tetherctl kubeconfig` issues
 * (docs/0007-k8s-proxy.md).
 *
 * The server hands a request over as soon as its head is read and then
 * feeds the exchange (route.h: struct route_exchange; server.h:
 * "Exchanges"); the upstream request, relaying the answer, reusing an idle
 * agent stream and the audit line are here; who may and which agent is
 * access.c's.
 */
#ifndef TETHER_K8S_H
#define TETHER_K8S_H

#include <stddef.h>

/* Requests whose decoded path starts with this are proxied. */
#define K8S_PREFIX "/k8s/"
/* The agent service a proxied request reaches. */
#define K8S_SERVICE "kube-api"

struct route;

/*
 * The route (route.h), an exchange: paths under K8S_PREFIX, and the
 * Kubernetes API's own root paths (/version, /api, /apis, /openapi and
 * below), which `kubectl get --raw` sends without the server URL's path:
 * those reach the one cluster the bearer (user) token is scoped to, if it
 * is exactly one.  Who may, and which agent, is access.h's to say.
 */
extern const struct route k8s_route;

#endif
