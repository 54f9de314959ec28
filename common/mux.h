/*
 * mux.h: many byte streams inside one tunnel, each with its own credit-based
 * flow control (flow.h), so that one slow reader never stalls the others.
 *
 * The multiplexer owns no socket: decoded stream frames come in through
 * mux_on_frame, encoded frames leave through the mux_io callbacks, and the
 * owner calls mux_on_drain when the transport has room again.  Both ends of
 * a tunnel (agent and gateway) and both ends of a `tetherctl forward`
 * connection run this same code.
 *
 * Stream ids never collide: the side that accepted the WebSocket (the
 * gateway) numbers the streams it opens 1, 3, 5, ...; the side that dialed
 * it numbers its own 2, 4, 6, ...  After 2^31 streams the numbering wraps
 * and skips 0 and every id a stream still holds.
 *
 * Ordering: control frames (OPEN, OPEN_OK, OPEN_FAIL, WINDOW, FIN, RESET)
 * are handed to the transport at once; DATA is handed over only while the
 * transport holds less than tx_high_water bytes, so a control frame waits
 * behind at most that much bulk data.
 *
 * Stream life: opening -> open -> (FIN each way) -> closed, or RESET at any
 * time.  on_close runs exactly once for every stream the peer or the tunnel
 * ends; a stream ended by our own mux_stream_reset/refuse gets no on_close.
 * Either way the stream must not be used once the calls on the stack have
 * returned: the multiplexer's own event frees ended streams from the loop
 * (docs/0015).  Until then its memory stays valid and mux_stream_* calls on
 * it do nothing, so a handler may end a stream inside any callback.
 *
 * Invariants asserted (sanitizer build): a stream ends once (one on_close
 * at most); stream ids never collide; no frame reaches an ended stream;
 * only ended streams wait to be freed.
 */
#ifndef TETHER_MUX_H
#define TETHER_MUX_H

#include <stddef.h>
#include <stdint.h>
#include <sys/uio.h>

#include "frame.h"

struct budget;
struct budget_account;
struct event_base;
struct evbuffer;
struct mux;
struct mux_stream;

struct mux_config {
	uint32_t window;            /* credit granted to the peer per stream (the
	                             * most: less when the budget is under pressure) */
	uint32_t max_streams;       /* streams open at once in this tunnel */
	size_t max_payload;         /* largest DATA payload sent */
	size_t tx_high_water;       /* feed DATA only while transport pending < this */
	int odd_ids;                /* 1 on the gateway side of the WebSocket */
	int counted;                /* feeds the stream metrics (mux_metrics.h) */
	/* The stream memory budget the receive windows are charged to, and
	 * whose tunnel_share this multiplexer gets (budget.h); NULL: the
	 * process-wide default (mux_set_process_budget), with no shares. */
	struct budget *budget;
};

#define MUX_DEFAULT_CONFIG { \
	.window = 1 << 20, \
	.max_streams = 1024, \
	.max_payload = 128 * 1024, \
	.tx_high_water = 256 * 1024, \
	.odd_ids = 0, \
	.budget = NULL, \
}

struct mux_io {
	/* Sends one binary message made of the iovecs.  Returns 0 or -1. */
	int (*sendv)(void *io, const struct iovec *iov, int iovcnt);
	/* Bytes the transport holds, not yet written to its socket. */
	size_t (*pending)(void *io);
	/* Optional.  Sends one binary message: hdr, then the first n bytes of
	 * src, removed from src (its whole chains moved, not copied).
	 * Returns 0 or -1. */
	int (*sendbuf)(void *io, const uint8_t *hdr, size_t hdrlen,
	    struct evbuffer *src, size_t n);
	/* Optional, for a transport inside the process that need not encode
	 * a DATA frame (the loop link, gateway/core/looplink.h): one DATA
	 * frame as its stream id and payload, which the receiving side hands
	 * to mux_on_data.  src non-NULL: the first n bytes of src, removed
	 * from it (its chains moved, as sendbuf); else a copy of data[0..n).
	 * When set, DATA never goes through sendv or sendbuf.  Returns 0 or
	 * -1. */
	int (*senddata)(void *io, uint32_t stream_id, const uint8_t *data,
	    struct evbuffer *src, size_t n);
	/* Optional, as senddata: any other stream frame (OPEN .. RESET) as the
	 * struct, never encoded; its type's member of f->u is set, the rest
	 * of the union not (the far side hands an equal frame to
	 * mux_on_frame).  When set, such frames never go through sendv.
	 * Returns 0 or -1. */
	int (*sendframe)(void *io, const struct frame *f);
};

struct mux_stream_handlers {
	/* Our OPEN was answered: ok, or refused with code and reason. */
	void (*on_opened)(struct mux_stream *s, int ok, const char *code,
	    const char *reason, void *arg);
	/* DATA from the peer.  The bytes are the handler's to keep; it calls
	 * mux_stream_drained() as they leave its own buffers. */
	void (*on_data)(struct mux_stream *s, const uint8_t *data, size_t len,
	    void *arg);
	/* mux_stream_send may accept more now (credit or transport room). */
	void (*on_writable)(struct mux_stream *s, void *arg);
	/* The peer will send no more (FIN). */
	void (*on_fin)(struct mux_stream *s, void *arg);
	/* The stream ended: code "done" (FIN both ways), the peer's RESET code,
	 * "tunnel_lost", or "flow_control"/"protocol" when the peer broke the
	 * rules on this stream (it was reset).  The stream is freed when this
	 * returns. */
	void (*on_close)(struct mux_stream *s, const char *code, void *arg);
};

struct mux_handlers {
	/* The peer asks to open a stream: answer with mux_stream_accept or
	 * mux_stream_refuse, now or later. */
	void (*on_open)(struct mux *m, struct mux_stream *s,
	    const struct frame_open *req, void *arg);
};

/* A multiplexer on base (its event frees ended streams; base is required).
 * NULL on no memory.  Costs one struct mux, a 16-bucket table and an event. */
struct mux *mux_new(struct event_base *base, const struct mux_config *cfg,
    const struct mux_io *io, void *io_arg, const struct mux_handlers *h,
    void *arg);
/* Moves m onto another transport: from now on its frames leave through io
 * with io_arg.  For a multiplexer made before its connection is up (a
 * peer link's, whose OPENs wait in a queue of its own until then). */
void mux_set_io(struct mux *m, const struct mux_io *io, void *io_arg);
/* Ends every stream (on_close "tunnel_lost") and frees the multiplexer and
 * its ended streams at once.  Its owner calls it from a callback of its own
 * (the transport's close), never from inside a mux call or handler. */
void mux_free(struct mux *m);
/* The same, but the streams still waiting for the peer's answer to their
 * OPEN are refused with code and reason (a link that never came up:
 * "peer_unreachable" and why). */
void mux_free_as(struct mux *m, const char *code, const char *reason);

/*
 * A stream frame (OPEN .. RESET) from the peer.  Returns 0, or -1 with a
 * reason when the peer broke the protocol badly enough that the tunnel
 * should close (a frame for a stream id it may not use).  Problems confined
 * to one stream (window overrun, DATA after FIN) reset that stream only.
 */
int mux_on_frame(struct mux *m, const struct frame *f, char *err, size_t errlen);
/* A DATA frame that came as its stream id and payload (mux_io.senddata's
 * far end): what mux_on_frame does with DATA, with no struct frame to fill
 * (len > 0).  Returns 0 (a DATA frame never closes the tunnel). */
int mux_on_data(struct mux *m, uint32_t stream_id, const uint8_t *data,
    size_t len);
/* The transport drained below tx_high_water: streams blocked on it resume. */
void mux_on_drain(struct mux *m);

/*
 * Opens a stream as req says: its target ("host:port") or service, and on
 * a link between replicas its agent and principal (frame.h); req->window
 * is ignored.  The receive window is charged to the budget, this tunnel's
 * share and who's share (a principal's account, or NULL); it is cfg.window
 * or smaller under pressure.  NULL when the tunnel's stream limit or a
 * share is reached: mux_refusal says which.
 */
struct mux_stream *mux_open(struct mux *m, struct budget_account *who,
    const struct frame_open *req, const struct mux_stream_handlers *h, void *arg);
/* Why the last mux_open or mux_stream_accept of m refused. */
const char *mux_refusal(const struct mux *m);
/* Registers handlers while the answer to the peer's OPEN is pending (say,
 * while the target is dialed): on_close then reports a peer RESET or a lost
 * tunnel in the meantime. */
void mux_stream_hold(struct mux_stream *s, const struct mux_stream_handlers *h,
    void *arg);
/* Answers the peer's OPEN (h NULL: keep the held handlers), the window
 * charged as in mux_open.  accept returns 0, or -1 if the budget refuses
 * (the stream is then refused with "busy" and gone). */
int mux_stream_accept(struct mux_stream *s, struct budget_account *who,
    const struct mux_stream_handlers *h, void *arg);
void mux_stream_refuse(struct mux_stream *s, const char *code, const char *reason);

/* Sends up to len bytes; returns how many were taken (0 when blocked; then
 * on_writable follows). */
size_t mux_stream_send(struct mux_stream *s, const uint8_t *data, size_t len);
/* The same from the front of src, which loses what was sent: at most one
 * frame per chain of src, so that a chain the frame takes whole moves into
 * the transport without a copy (io->sendbuf; without it, copied as by
 * mux_stream_send).  A stream's owner that keeps bytes aside in one
 * evbuffer chain per received piece copies them once, not three times. */
size_t mux_stream_send_buffer(struct mux_stream *s, struct evbuffer *src);
/* Our side will send no more. */
void mux_stream_fin(struct mux_stream *s);
/* Ends the stream now and tells the peer. */
void mux_stream_reset(struct mux_stream *s, const char *code);
/* n bytes received on s have left our buffers: may return credit. */
void mux_stream_drained(struct mux_stream *s, size_t n);

uint32_t mux_stream_id(const struct mux_stream *s);

/* Tests only: the id the next stream we open starts the search from (of
 * our parity), to reach the wrap without opening 2^31 streams. */
void mux_test_set_next_id(struct mux *m, uint32_t id);
/* The loop the stream's multiplexer runs on (for a stream's owner that
 * defers its own end, as bridge.c does). */
struct event_base *mux_stream_base(const struct mux_stream *s);
size_t mux_stream_count(const struct mux *m);
/* Bytes received on s and not yet drained (bounded by the window). */
size_t mux_stream_buffered(const struct mux_stream *s);

/* Cap on the receive windows of the streams of every multiplexer made
 * without a budget of its own (default 256 MiB): windows shrink past half
 * of it, and new streams are refused with "busy" when it is spent. */
void mux_set_process_budget(size_t bytes);

#endif
