/*
 * wsclient.h: a WebSocket client (RFC 6455) over TLS on a libevent loop,
 * built for bulk throughput on the agent's and tetherctl's side of a tunnel.
 *
 * libwebsockets' client masks and parses payload one byte at a time
 * (~300-450 MB/s), which would cap every tunnel far below a direct TCP
 * connection; this client parses frame headers in place, hands whole
 * messages to the caller without copying when they are contiguous, and
 * masks 8 bytes at a time while copying into the output buffer.
 *
 * The caller holds the connection as a struct wsface (wsface.h), the face
 * the gateway's accepted connections show too: everything after the dial
 * (sending, backpressure, closing, freeing) is wsface_*.
 *
 * Life cycle: wsclient_connect -> on_open (101 accepted) -> on_message... ->
 * on_close exactly once, after which the face is freed; or wsface_free
 * before that, which ends the client at once (no callback after it).
 * Every callback runs on the loop.  The memory goes from the loop, after
 * the calls on the stack have returned (docs/0015): an owner that frees it
 * after its loop has stopped runs runtime_drain (runtime.h) before
 * event_base_free.  wsface_peer names the URL's host.
 *
 * Invariants asserted (sanitizer build): on_close at most once; no
 * callback after wsface_free; wsface_free once per client, never after
 * on_close.
 */
#ifndef TETHER_WSCLIENT_H
#define TETHER_WSCLIENT_H

#include <stddef.h>
#include <stdint.h>

#include "wsface.h"

struct event_base;
struct ssl_ctx_st;  /* OpenSSL's SSL_CTX */

struct wsclient_config {
	const char *url;            /* wss://HOST[:PORT]/PATH[?QUERY] (ws:// too) */
	const char *subprotocol;    /* requested Sec-WebSocket-Protocol, or NULL */
	const char *ca_file;        /* PEM CA bundle to verify the server; NULL = system */
	/* A TLS context from wsclient_tls_context to use instead of making one
	 * from ca_file (the client takes a reference): making one costs about
	 * a millisecond of CPU and tens of KiB, so many connections to the
	 * same gateway (redials, the swarm's agents) share one.  NULL: own. */
	struct ssl_ctx_st *tls_ctx;
	const char *bearer_token;   /* sent as "Authorization: Bearer ...", or NULL */
	const char *header;         /* one more request header, "Name: value"
	                             * (a replica's Tether-Replica), or NULL */
	size_t max_message;         /* larger incoming messages are a protocol error */
	size_t max_queue;           /* most output queued, every frame counted (PONGs
	                             * too); a frame past it ends the connection
	                             * (on_close, status 0).  0 = 8 MiB */
	size_t low_water;           /* on_drain threshold, bytes (0: when empty);
	                             * max_message, max_queue and low_water
	                             * change later through the face */
	uint32_t connect_timeout_ms;/* TCP + TLS + upgrade; 0 = 10000 */
	/* An HTTP CONNECT proxy, http[s]://[user[:password]@]host[:port]
	 * (common/url.h), or NULL.  The timeout covers the proxy too; a
	 * refusal ends in on_close with status 0 and the proxy's status line. */
	const char *proxy_url;
	const char *proxy_ca_file;  /* PEM CAs for an https:// proxy; NULL = system */
	/* How to authenticate to the proxy: an enum proxy_auth (common/proxy.h;
	 * 0: Basic with the URL's credentials), and the user and password for
	 * NTLM (NULL: the URL's).  The password is not kept past connect. */
	int proxy_auth;
	const char *proxy_user;
	const char *proxy_password;
	/* Or NULL: where a refused upgrade's Retry-After goes, in ms (delta
	 * seconds times 1000, at most WS_RETRY_AFTER_MAX_S s), written before
	 * on_close; left alone when the answer has none.  The caller's memory,
	 * which must outlive the client. */
	uint32_t *retry_after_ms;
};

/*
 * A client TLS context verifying servers against ca_file (NULL: the system
 * store), TLS 1.2 at least, for wsclient_config.tls_ctx.  NULL with a
 * reason in err.  Free with SSL_CTX_free.
 */
struct ssl_ctx_st *wsclient_tls_context(const char *ca_file, char *err,
    size_t errlen);

/*
 * Writes "what: OpenSSL's reason for the last failure" (or just what, when
 * OpenSSL queued none) into buf, and clears OpenSSL's error queue of this
 * thread.  The one wording of TLS failures on the client side.
 */
void wsclient_tls_reason(char *buf, size_t len, const char *what);

/*
 * Adds the CA certificates of the PEM file ca_file to what ctx (from
 * wsclient_tls_context) trusts: the agent's --trust-proxy-ca, a
 * TLS-inspecting proxy's CA pinned on purpose beside the gateway's.  Host
 * names are still checked.  0, or -1 with a reason in err.
 */
int wsclient_tls_trust_more(struct ssl_ctx_st *ctx, const char *ca_file,
    char *err, size_t errlen);

/*
 * Starts connecting.  Returns the client's face (h, which must outlive it,
 * called with arg: on_open when the server accepts, on_close when it refuses or the
 * dial fails), or NULL with a reason in err (bad URL, unreadable CA file);
 * network errors arrive later via on_close.  Messages are refused until
 * on_open.
 */
struct wsface *wsclient_connect(struct event_base *base,
    const struct wsclient_config *cfg, const struct wsface_handlers *h,
    void *arg, char *err, size_t errlen);

#endif
