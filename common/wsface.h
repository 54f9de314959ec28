/*
 * wsface.h: the one face of a WebSocket connection, whichever side made it:
 * the gateway's accepted upgrades (gateway/transport/wsconn.c) and the
 * dialled connections of the agent, tetherctl and the peer links
 * (common/wsclient.c) both hand their owners a struct wsface, so that code
 * over a WebSocket (the stream multiplexer's adapter, common/wsmux.h; a
 * peer link, whoever dialled it) is written once.
 *
 * A face is whole messages in (on_message), messages out (wsface_sendv,
 * wsface_send_buffer), backpressure by pending bytes, pause_reading and
 * on_drain, and one end (on_close).  Each operation is one indirect call
 * through the face's ops: per message, never per byte.
 *
 * Life cycle, the same on both sides: the face exists from the call that
 * made it (wsclient_connect, upgrade_accept) until on_close has returned
 * or its owner called wsface_free, whichever comes first.  on_close runs
 * at most once, from the loop, never inside a call the owner made
 * (docs/0015); the face is freed by its own side right after on_close
 * returns, so the owner must not use it after, nor call wsface_free in
 * on_close.  wsface_free ends it from the owner's side instead: no callback
 * follows, and its memory goes from the loop.
 */
#ifndef TETHER_WSFACE_H
#define TETHER_WSFACE_H

#include <stddef.h>
#include <stdint.h>
#include <sys/uio.h>

struct evbuffer;
struct wsface;

struct wsface_handlers {
	/* Optional; the dialled side only: the server accepted the upgrade
	 * (and the subprotocol, if asked).  An accepted face is open when
	 * made. */
	void (*on_open)(struct wsface *f, void *arg);
	/* One complete message; data is valid only during the call. */
	void (*on_message)(struct wsface *f, const uint8_t *data, size_t len,
	    int binary, void *arg);
	/* Output pending fell to or below the low-water mark
	 * (wsface_set_low_water): the owner may send more. */
	void (*on_drain)(struct wsface *f, void *arg);
	/*
	 * The connection ended; f is freed when this returns.  status: 101
	 * when a close handshake ended it (the peer's close frame; on the
	 * dialled side also our own close, answered or timed out; reason: the
	 * close reason there), 0 for a network, TLS or protocol failure, a
	 * timeout or an output over the cap, or (dialled side) the HTTP status
	 * of a refused upgrade, reason the answer's first line or JSON
	 * "error".  reason is never NULL.
	 */
	void (*on_close)(struct wsface *f, int status, const char *reason,
	    void *arg);
	/* Optional: the peer pinged (the pong is on its way).  A keepalive
	 * may count it as hearing from the peer. */
	void (*on_ping)(struct wsface *f, void *arg);
	/* Optional; the accepted side only: a message over the limit
	 * (wsface_set_max_message) arrived and is skipped; the owner decides
	 * (say, an error of its own, then wsface_close).  Without it, or on
	 * the dialled side: the connection fails (close code 1009). */
	void (*on_too_large)(struct wsface *f, size_t limit, void *arg);
};

struct budget_account;

/* What each side implements (wsconn.c, wsclient.c); owners call the
 * wsface_* functions below. */
struct wsface_ops {
	int (*sendv)(struct wsface *f, const struct iovec *iov, int iovcnt,
	    int binary);
	int (*send_buffer)(struct wsface *f, const uint8_t *prefix, size_t plen,
	    struct evbuffer *src, size_t n);
	size_t (*pending)(const struct wsface *f);
	void (*pause_reading)(struct wsface *f, int paused);
	void (*set_low_water)(struct wsface *f, size_t bytes);
	void (*set_max_message)(struct wsface *f, size_t bytes);
	void (*set_max_queue)(struct wsface *f, size_t bytes);
	/* NULL where connections are not counted (the dialled side). */
	void (*charge_to)(struct wsface *f, struct budget_account *who,
	    const char *name);
	void (*close)(struct wsface *f, uint16_t code, const char *reason);
	void (*free)(struct wsface *f);
	const char *(*peer)(const struct wsface *f);
	/* NULL: never. */
	int (*input_pending)(const struct wsface *f);
	/* NULL: not told (wsface_heard_ms answers 0); both sides tell. */
	int64_t (*heard_ms)(const struct wsface *f);
};

/* The first member of struct wsconn and struct wsclient: set by the side
 * that made the connection, read-only to its owner. */
struct wsface {
	const struct wsface_ops *ops;
	const struct wsface_handlers *h;  /* static: outlives the face */
	void *arg;
};

/* Sends one message made of the iovecs concatenated (masked on the
 * dialled side).  0, or -1 when the face is not open or the message would
 * pass the output cap (wsface_set_max_queue: the connection is then
 * being dropped). */
static inline int
wsface_sendv(struct wsface *f, const struct iovec *iov, int iovcnt, int binary)
{
	return f->ops->sendv(f, iov, iovcnt, binary);
}

/* The same with one piece. */
static inline int
wsface_send(struct wsface *f, const uint8_t *data, size_t len, int binary)
{
	struct iovec iov = { (void *)(uintptr_t)data, len };

	return f->ops->sendv(f, &iov, 1, binary);
}

/*
 * Sends one binary message: prefix (at most 32 bytes), then the first n
 * bytes of src, which leave src.  The accepted side moves src's whole
 * chains into its output without a copy (a chain cut at n is copied); the
 * dialled side masks them into its output (the one copy masking needs).
 * 0, or -1 as wsface_sendv; src is left as it was on -1 unless the
 * connection is being dropped.
 */
static inline int
wsface_send_buffer(struct wsface *f, const uint8_t *prefix, size_t plen,
    struct evbuffer *src, size_t n)
{
	return f->ops->send_buffer(f, prefix, plen, src, n);
}

/* Bytes queued for the socket, not yet written. */
static inline size_t
wsface_pending(const struct wsface *f)
{
	return f->ops->pending(f);
}

/* Stops or resumes delivering messages and reading (backpressure). */
static inline void
wsface_pause_reading(struct wsface *f, int paused)
{
	f->ops->pause_reading(f, paused);
}

/* on_drain fires when pending falls to bytes (0: when empty). */
static inline void
wsface_set_low_water(struct wsface *f, size_t bytes)
{
	f->ops->set_low_water(f, bytes);
}

/* Largest message taken from now on (larger: on_too_large, or the
 * connection fails). */
static inline void
wsface_set_max_message(struct wsface *f, size_t bytes)
{
	f->ops->set_max_message(f, bytes);
}

/* Most bytes the output may hold, every frame counted (the pongs owed
 * too): a frame past it drops the connection at once (on_close follows
 * from the loop), so a peer that sends without reading costs at most this
 * much. */
static inline void
wsface_set_max_queue(struct wsface *f, size_t bytes)
{
	f->ops->set_max_queue(f, bytes);
}

/* Counts what the connection holds (queued output, input buffers) in
 * principal who's share of the memory budget as well as the process's
 * (budget.h, docs/0036); name (copied) names who in the line that says
 * why it was dropped.  who is kept while the connection lives (it counts
 * as a holder of the account).  A no-op on the dialled side. */
static inline void
wsface_charge_to(struct wsface *f, struct budget_account *who, const char *name)
{
	if (f->ops->charge_to != NULL)
		f->ops->charge_to(f, who, name);
}

/* Sends a close frame after what is queued, then closes; on_close follows
 * from the loop (a face not yet open just ends).  Once closing, does
 * nothing. */
static inline void
wsface_close(struct wsface *f, uint16_t code, const char *reason)
{
	f->ops->close(f, code, reason);
}

/* The owner lets go: no callback after this call; a connection still open
 * ends (the accepted side sends a close frame, 1001, after what is queued;
 * the dialled side drops at once).  Once per face, never after on_close;
 * safe inside any other callback of f. */
static inline void
wsface_free(struct wsface *f)
{
	f->ops->free(f);
}

/* 1 when input arrived that the owner has not been given yet: bytes in
 * the socket, in TLS, in the input buffer, or messages held back (paused,
 * or waiting for their turn of the loop).  A deadline may be judged before
 * input that came in time is delivered: on the accepted side the loop
 * back from a stall runs the timer before the read callback (deferred to
 * the next pass); on the dialled side a turn that ended with input left
 * delivers the rest from a 0 ms timer (wsturn.h).  A deadline that finds
 * input pending gives it one more pass before judging.  Costs a poll() of
 * the socket when nothing else is pending; both sides implement it. */
static inline int
wsface_input_pending(const struct wsface *f)
{
	return f->ops->input_pending != NULL ? f->ops->input_pending(f) : 0;
}

/* When the connection last read bytes of its peer: runtime_monotonic_ms
 * of the last read callback that brought any, a whole message or not (a
 * TLS record decrypted; on a plain socket, bytes read off it).  The
 * dialled side: the clock read then; 0 before the first read.  The
 * accepted side: its set's wheel time then (the wheel's last tick: at
 * most a tick of 10-250 ms behind the clock, wsconn_tick_for, plus
 * however late the loop runs it), and the face's making before its first
 * read (the upgrade request was the peer's last word).  Pausing and
 * resuming the reading moves it on neither side.  A keepalive counts it
 * as hearing from the peer: a large message arriving slowly is not
 * silence.  Costs the dialled side one clock read per read callback, the
 * accepted side one store, nothing per byte; this call, a load. */
static inline int64_t
wsface_heard_ms(const struct wsface *f)
{
	return f->ops->heard_ms != NULL ? f->ops->heard_ms(f) : 0;
}

/* Who is at the other end: "IP:PORT" accepted, the URL's host dialled. */
static inline const char *
wsface_peer(const struct wsface *f)
{
	return f->ops->peer(f);
}

#endif
