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
 * Life cycle: wsclient_connect -> on_open (101 accepted) -> on_message... ->
 * on_close exactly once (after which the caller must call wsclient_free,
 * and may do so from inside on_close).  Every callback runs on the loop.
 * wsclient_free ends the client at once (no callback after it) and its
 * memory goes from the loop, after the calls on the stack have returned
 * (docs/0015): an owner that frees it after its loop has stopped runs
 * runtime_drain (runtime.h) before event_base_free.
 *
 * Invariants asserted (sanitizer build): on_close at most once; no
 * callback after wsclient_free; wsclient_free once per client.
 */
#ifndef TETHER_WSCLIENT_H
#define TETHER_WSCLIENT_H

#include <stddef.h>
#include <stdint.h>
#include <sys/uio.h>

struct event_base;
struct wsclient;
struct ssl_ctx_st;  /* OpenSSL's SSL_CTX */

struct wsclient_callbacks {
	/* The server accepted the upgrade (and the subprotocol, if asked). */
	void (*on_open)(struct wsclient *c, void *arg);
	/* One complete message.  data is valid only during the call. */
	void (*on_message)(struct wsclient *c, const uint8_t *data, size_t len,
	    int binary, void *arg);
	/* Output queued in the socket buffer fell to or below the low-water
	 * mark (wsclient_config.low_water): the caller may send more. */
	void (*on_drain)(struct wsclient *c, void *arg);
	/*
	 * The connection ended: refused upgrade (http_status is the HTTP status,
	 * reason the response body's first line or its JSON "error"), TLS or
	 * network failure (http_status 0), a close frame from the server
	 * (http_status 101, reason its close reason), or a protocol error.
	 */
	void (*on_close)(struct wsclient *c, int http_status, const char *reason,
	    void *arg);
	/* Optional (NULL: not told): the server pinged (a WebSocket ping;
	 * the pong is sent already).  A keepalive may count it as hearing
	 * from the server, so that both ends do not ping a quiet link. */
	void (*on_ping)(struct wsclient *c, void *arg);
};

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
	size_t low_water;           /* on_drain threshold, bytes (0: when empty) */
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
};

/*
 * A client TLS context verifying servers against ca_file (NULL: the system
 * store), TLS 1.2 at least, for wsclient_config.tls_ctx.  NULL with a
 * reason in err.  Free with SSL_CTX_free.
 */
struct ssl_ctx_st *wsclient_tls_context(const char *ca_file, char *err,
    size_t errlen);

/*
 * Adds the CA certificates of the PEM file ca_file to what ctx (from
 * wsclient_tls_context) trusts: the agent's --trust-proxy-ca, a
 * TLS-inspecting proxy's CA pinned on purpose beside the gateway's.  Host
 * names are still checked.  0, or -1 with a reason in err.
 */
int wsclient_tls_trust_more(struct ssl_ctx_st *ctx, const char *ca_file,
    char *err, size_t errlen);

/*
 * Starts connecting.  Returns the client, or NULL with a reason in err
 * (bad URL, unreadable CA file); network errors arrive later via on_close.
 */
struct wsclient *wsclient_connect(struct event_base *base,
    const struct wsclient_config *cfg, const struct wsclient_callbacks *cb,
    void *arg, char *err, size_t errlen);

/* Sends one message made of the iovecs concatenated (e.g. a DATA frame's
 * header and its payload), masked.  Returns 0, or -1 if not open or if it
 * would pass max_queue (the connection is then ending). */
int wsclient_sendv(struct wsclient *c, const struct iovec *iov, int iovcnt,
    int binary);
int wsclient_send(struct wsclient *c, const uint8_t *data, size_t len, int binary);

/* Bytes queued for the socket and not yet written. */
size_t wsclient_pending(const struct wsclient *c);

/* Stops or resumes reading from the socket (backpressure). */
void wsclient_pause_reading(struct wsclient *c, int paused);

/* Sends a close frame, then closes; on_close follows. */
void wsclient_close(struct wsclient *c, uint16_t code, const char *reason);

/* Ends the client: no callback is made after this, and its memory is
 * freed from the loop.  Safe inside any callback; once per client. */
void wsclient_free(struct wsclient *c);

#endif
