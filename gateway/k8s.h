/*
 * k8s.h: /k8s/clusters/ID/<rest>: HTTP requests passed through an agent's
 * tunnel to its "kube-api" service, a stream reused by the requests of one
 * client connection, so that
 * kubectl works with the kubeconfig `tetherctl kubeconfig` issues
 * (docs/0007-k8s-proxy.md).
 *
 * server.c hands a request to k8s_start as soon as its head is read and
 * then feeds the exchange (server.h: "Proxied requests"); everything else
 * (who may, which agent, the upstream request, relaying the answer, the
 * audit line) is here.
 */
#ifndef TETHER_K8S_H
#define TETHER_K8S_H

#include <stddef.h>

/* Requests whose decoded path starts with this are proxied. */
#define K8S_PREFIX "/k8s/"
/* The agent service a proxied request reaches. */
#define K8S_SERVICE "kube-api"

struct gateway;
struct hconn;
struct http_request;
struct evbuffer;
struct k8s_exchange;

/*
 * 1 for a path this proxies: under K8S_PREFIX, and the Kubernetes API's
 * own root paths (/version, /api, /apis, /openapi and below), which
 * `kubectl get --raw` sends without the server URL's path: those reach the
 * one cluster the bearer (user) token is scoped to, if it is exactly one.
 */
int k8s_matches(const char *path);

/*
 * Starts the exchange for rq (its head; rq is valid only during the call).
 * Returns it, or NULL when the request was answered at once (an error
 * Status through proxy_reply).
 */
struct k8s_exchange *k8s_start(struct gateway *gw, struct hconn *h,
    const struct http_request *rq);
/*
 * A request for a path this proxies that the reader refused (status and
 * reason from http_reader_error: ambiguous framing, malformed, too large):
 * answered with a Status (then the connection closes) and audited.  rq
 * holds what was read of it (method, path).
 */
void k8s_refuse_unreadable(struct hconn *h, const struct http_request *rq,
    int status, const char *reason);
/* A piece of the decoded request body, and its end. */
void k8s_body(struct k8s_exchange *x, const char *data, size_t len);
void k8s_body_end(struct k8s_exchange *x);
/* 0 while the bytes queued toward the agent are over their bound: the
 * server stops reading until proxy_resume_input. */
int k8s_wants_body(struct k8s_exchange *x);
/* After a 101: takes what it can of in.  Returns 0 if it took everything,
 * 1 if it is full (proxy_resume_input follows). */
int k8s_raw_input(struct k8s_exchange *x, struct evbuffer *in);
/* The client's connection, with an idle agent stream parked on it, ends:
 * the stream is reset. */
struct k8s_link;
void k8s_parked_gone(struct k8s_link *l);
/* The client's connection is gone (freed by the server after this). */
void k8s_client_gone(struct k8s_exchange *x);

#endif
