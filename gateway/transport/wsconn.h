/*
 * wsconn.h: one server-side WebSocket connection on the gateway, after the
 * upgrade: the tunnel of an agent, or a dial client's stream(s).
 *
 * The same shape as the client side (common/wsclient.h) so that the stream
 * multiplexer runs over either: whole messages in, iovec messages out,
 * backpressure through pending bytes, pause_reading and on_drain.
 */
#ifndef TETHER_WSCONN_H
#define TETHER_WSCONN_H

#include <stddef.h>
#include <stdint.h>
#include <sys/queue.h>
#include <sys/uio.h>

struct bufferevent;
struct event_base;
struct evbuffer;
struct wsconn;

struct wsconn_handlers {
	/* One complete message; data is valid only during the call. */
	void (*on_message)(struct wsconn *c, const uint8_t *data, size_t len,
	    int binary, void *arg);
	/* Output pending fell to or below the low-water mark. */
	void (*on_drain)(struct wsconn *c, void *arg);
	/* The connection is gone (peer closed, error, or wsconn_close done).
	 * Called exactly once; the wsconn is freed right after it returns. */
	void (*on_close)(struct wsconn *c, void *arg);
	/* Optional.  A message over the limit (wsconn_set_max_message) arrived:
	 * it is skipped and the owner decides (say, an error of its own, then
	 * wsconn_close).  Without this handler: close with 1009. */
	void (*on_too_large)(struct wsconn *c, size_t limit, void *arg);
};

/* Sends one message (iovecs concatenated, unmasked).  Returns 0, or -1 if
 * the connection is closing or the message would pass the output cap
 * (wsconn_set_max_queue; the connection is then being dropped). */
int wsconn_sendv(struct wsconn *c, const struct iovec *iov, int iovcnt, int binary);
int wsconn_send(struct wsconn *c, const uint8_t *data, size_t len, int binary);
/* Sends one binary message: prefix (at most 32 bytes) then the first n
 * bytes of src, which are removed from src.  src's whole chains move into
 * the output without a copy (only a chain cut at n is copied).  Returns 0
 * or -1 as wsconn_sendv; src is left as it was on -1 unless the
 * connection is being dropped. */
int wsconn_send_buffer(struct wsconn *c, const uint8_t *prefix, size_t plen,
    struct evbuffer *src, size_t n);
/* Bytes queued for the socket, not yet written. */
size_t wsconn_pending(const struct wsconn *c);
/* Stops/resumes reading messages (backpressure). */
void wsconn_pause_reading(struct wsconn *c, int paused);
/* Keepalive: after interval_ms with nothing from the peer a ping goes out,
 * and if nothing at all arrives within timeout_ms after it the connection
 * is dropped (on_close follows from the loop).  Defaults 20 s and 30 s. */
void wsconn_set_keepalive(struct wsconn *c, uint32_t interval_ms, uint32_t timeout_ms);
/* Sets the on_drain threshold (default 0: when the output is empty). */
void wsconn_set_low_water(struct wsconn *c, size_t bytes);
/* Sends a close frame after what is queued, then closes; on_close follows
 * (never from inside this call). */
void wsconn_close(struct wsconn *c, uint16_t code, const char *reason);
/* Remote address, "IP:PORT". */
const char *wsconn_peer(const struct wsconn *c);
/* Largest message accepted from now on (larger: close with 1009). */
void wsconn_set_max_message(struct wsconn *c, size_t bytes);
/* Most bytes the output may hold (default 64 KiB).  A frame that would
 * queue more, whoever sent it (the owner, or a PONG we owe the peer), is
 * refused and the connection dropped at once, without a close frame: a
 * peer that sends without reading costs at most this much output. */
void wsconn_set_max_queue(struct wsconn *c, size_t bytes);

/* ---- for server.c: making and ending connections ---- */

/*
 * Every open wsconn of a server, and what they share: one timing wheel
 * (common/twheel.h) that drives every connection's keepalive (the ping
 * after interval_ms of silence, the drop after timeout_ms without an
 * answer) and its close deadline, ticked by one timer event, and one event
 * that runs the connections that asked to be served from the loop soon.
 * A connection then needs no event or timer of its own, and a byte heard
 * costs one store (docs/0018, "Pings, third pass").
 */
struct wsconn_set;

/* Makes an empty set on base whose wheel ticks every tick_ms (> 0): the
 * deadlines' granularity.  NULL when out of memory. */
struct wsconn_set *wsconn_set_new(struct event_base *base, uint32_t tick_ms);
/* The tick for keepalives of interval_ms and timeout_ms: an eighth of the
 * shorter one, within 10..250 ms. */
uint32_t wsconn_tick_for(uint32_t interval_ms, uint32_t timeout_ms);
/* Shutdown: ends every connection in the set now, on_close for each. */
void wsconn_destroy_all(struct wsconn_set *all);
/* Ends every connection (as wsconn_destroy_all), then frees the set.
 * NULL: nothing. */
void wsconn_set_free(struct wsconn_set *all);

/*
 * Takes over bev (a TLS connection whose 101 answer is already queued in its
 * output) as a WebSocket; bytes already in its input are the first frames.
 * Returns NULL when out of memory (bev is then still the caller's).
 */
struct wsconn *wsconn_new(struct wsconn_set *all, struct bufferevent *bev,
    const char *peer, const struct wsconn_handlers *h, void *arg);

#endif
