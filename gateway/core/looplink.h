/*
 * looplink.h: an in-process stream link between every ordered pair of the
 * gateway's loops (docs/0040 section 2 (ii)): the peer link's idea
 * (replicas/peer_link.h, common/mux.h) without the socket.
 *
 * Each loop holds one multiplexer per other loop, made at start and always
 * up (stream ids odd on the lower loop).  What a multiplexer on loop A
 * sends to loop B is appended to the half A>B (a mutex, an evbuffer, a
 * record per frame, a byte count), never encoded: a DATA frame as its
 * stream id and payload (mux_io.senddata; a payload sent by reference
 * moves its evbuffer chains, no copy), any other as its type, stream id
 * and struct member (mux_io.sendframe).  The first frame into an empty
 * half makes one message to B's inbox (loop.h) due, sent at the end of
 * A's pass (a pass's frames to B cost B one wake, if asleep, and one
 * take), and B takes the half
 * whole under its mutex, then hands each frame to its own multiplexer:
 * DATA by mux_on_data, the others made again for mux_on_frame.  A's
 * multiplexer sees the half's bytes as its transport's pending bytes, so
 * it feeds DATA only below tx_high_water; once B has taken a half that A
 * found full, B posts a message back and A's blocked streams resume.
 * Credit is the multiplexer's, per stream: a reader that stops draining
 * stops its own stream after one window and no other.
 *
 * Budget: a stream's receive window is charged to cfg->budget (the
 * process's, whose mutex must be set: windows are charged from every
 * loop) and to the link's own account "loop-link:A>B" (its multiplexer's
 * tunnel share), never to a principal: the principal pays where the
 * stream began and where it reaches the agent, as for peer links.
 *
 * Threads: every call but looplinks_new/free is made on a loop of the set
 * (loop_self()) and acts on that loop's ends only.  A stream handle never
 * leaves its loop.  Frames sent to a loop whose end closed are dropped,
 * never decoded.  Nothing here calls event_active on another loop's event.
 *
 * Costs: per pair of loops two halves and two multiplexers (~1 KiB with
 * no streams); per crossing stream one more window (each side's receive
 * window); per DATA frame no encoding or decoding, its payload moved (or
 * copied once, when the sender copies: mux_stream_send), read in place on
 * the receiving side unless split over chains (then copied into a buffer
 * of the loop's); per other frame its member copied twice (an OPEN's 516
 * bytes); one lock per
 * frame sent, none per pending() check below tx_high_water; per busy pass
 * and direction one loop_call (a malloc, a lock, and an eventfd write
 * only when the far loop is asleep: loop.h), made by an event at the end
 * of the writer's pass (an event_active and a scan of its n - 1 ends).
 */
#ifndef TETHER_LOOPLINK_H
#define TETHER_LOOPLINK_H

#include <stddef.h>
#include <stdint.h>

struct frame_open;
struct loop;
struct looplinks;
struct mux_config;
struct mux_stream;
struct mux_stream_handlers;

/* The far side of a stream: loop `from` opened s on its link to the
 * calling loop with OPEN req.  The handler answers it now or later
 * (mux_stream_accept, or mux_stream_refuse).  On the receiving loop. */
typedef void looplink_open_fn(void *ctx, unsigned from, struct mux_stream *s,
    const struct frame_open *req);

/*
 * Makes the links between loops[0..n-1] (n >= 2): a multiplexer per
 * ordered pair, configured as cfg (window, max_streams, max_payload,
 * tx_high_water, budget; odd_ids and counted are set here), each on its
 * loop's base.  OPENs arriving on any link go to on_open(ctx, ...).
 * Returns the set, the caller's to give to looplinks_free, or NULL with
 * err.  From the thread that made the loops, before any loop uses a link
 * (a loop learns of the set through a message, which orders it).
 */
struct looplinks *looplinks_new(struct loop *loops, unsigned n,
    const struct mux_config *cfg, looplink_open_fn *on_open, void *ctx,
    char *err, size_t errlen);

/*
 * Opens a stream from the calling loop to loop `to`, as req says (its
 * target or service, and the agent and principal the far side checks);
 * req->window is ignored.  Same contract as mux_open: NULL with a reason
 * in err (no such loop, the link closed, its stream limit or budget
 * reached); otherwise h->on_opened follows on this loop.  On a loop of
 * ls.  O(1) beyond mux_open.
 */
struct mux_stream *looplink_open(struct looplinks *ls, unsigned to,
    const struct frame_open *req, const struct mux_stream_handlers *h,
    void *arg, char *err, size_t errlen);

/*
 * Closes the calling loop's ends: its multiplexers are freed (their
 * streams end with on_close "tunnel_lost"), frames still coming to it are
 * dropped, and each other loop is told, so its streams on the link to
 * this one end "tunnel_lost" too and what it sends here is dropped.  On a
 * loop of ls, from a callback of its own (not inside a mux handler), at
 * stop (docs/0040 section 4, step 3).  Twice: a no-op.
 */
void looplink_close(struct looplinks *ls);

/*
 * Streams open on the link from loop `from` to loop `to` (from's end), or
 * 0 once closed.  On loop `from` only.
 */
size_t looplink_streams(const struct looplinks *ls, unsigned from, unsigned to);

/*
 * What the link from loop `from` to loop `to` carried since start: the
 * streams opened from `from`'s end, and the DATA payload bytes sent
 * from -> to (both directions of a stream count, each on its own half).
 * Both 0 for ls NULL, from == to or a loop out of range.  Any thread
 * (relaxed atomics: /metrics folds them).  O(1).
 */
void looplink_counts(const struct looplinks *ls, unsigned from, unsigned to,
    uint64_t *streams, uint64_t *bytes);

/* The loops ls links (0 for NULL).  Any thread. */
unsigned looplinks_loops(const struct looplinks *ls);

/*
 * Frees the set: any multiplexer a loop did not close is freed here (its
 * streams' on_close runs on this thread), then the halves with the frames
 * they still hold (moved chains' cleanup callbacks run here).  After the
 * loops' threads were joined (loops_stop) and before their bases are
 * freed (loops_free).  NULL: nothing.
 */
void looplinks_free(struct looplinks *ls);

#endif
