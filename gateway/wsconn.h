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
#include <sys/uio.h>

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
};

/* Sends one message (iovecs concatenated, unmasked).  Returns 0, or -1 if
 * the connection is closing. */
int wsconn_sendv(struct wsconn *c, const struct iovec *iov, int iovcnt, int binary);
int wsconn_send(struct wsconn *c, const uint8_t *data, size_t len, int binary);
/* Bytes queued for the socket, not yet written. */
size_t wsconn_pending(const struct wsconn *c);
/* Stops/resumes reading messages (backpressure). */
void wsconn_pause_reading(struct wsconn *c, int paused);
/* Sets the on_drain threshold (default 0: when the output is empty). */
void wsconn_set_low_water(struct wsconn *c, size_t bytes);
/* Sends a close frame after what is queued, then closes; on_close follows
 * (never from inside this call). */
void wsconn_close(struct wsconn *c, uint16_t code, const char *reason);
/* Remote address, "IP:PORT". */
const char *wsconn_peer(const struct wsconn *c);
/* Largest message accepted from now on (larger: close with 1009). */
void wsconn_set_max_message(struct wsconn *c, size_t bytes);

#endif
