/*
 * dialer.h: the agent's answer to the gateway's OPEN: check the target
 * against this node's allowlist (deny by default), dial it without blocking
 * the loop, and bridge the stream to the connection.
 *
 * OPEN_FAIL codes tell the operator what happened:
 *   not_allowed      the target is not in the allowlist from `join --allow`
 *   unknown_service  no such --service on this node
 *   refused          the target refused the connection
 *   unreachable      no route, or the name does not resolve
 *   timeout          no answer within the dial timeout
 *   tls              an https service failed the TLS handshake (certificate)
 *
 * A service with a token (join --service-token) gets the node's bearer
 * token on the first request head of each stream; a stream that does not
 * start with a valid head within 64 KiB is reset with the code
 * bad_request_head, head_too_large or head_incomplete (a FIN first).
 */
#ifndef TETHER_DIALER_H
#define TETHER_DIALER_H

#include <stddef.h>
#include <stdint.h>

struct event_base;
struct evdns_base;
struct mux;
struct mux_stream;
struct frame_open;
struct client_state;
struct dialer;

/* state_dir: where join put service CAs (service-NAME-ca.crt) and tokens
 * (service-NAME.token, read now).  NULL with err on failure. */
struct dialer *dialer_new(struct event_base *base, struct evdns_base *dns,
    const struct client_state *st, const char *state_dir,
    uint32_t dial_timeout_ms, char *err, size_t errlen);
/* Aborts every dial under way; bridged streams end with their tunnel. */
void dialer_free(struct dialer *d);
/* The mux's on_open handler. */
void dialer_on_open(struct mux *m, struct mux_stream *s,
    const struct frame_open *req, void *arg);
/* Streams being dialed or carrying bytes. */
unsigned dialer_active(const struct dialer *d);

#endif
