/*
 * bridge.h: one stream of a tunnel joined to one TCP connection.
 *
 * The agent uses it for every target it dials, tetherctl forward for every
 * local connection it accepts.  Bytes read from the socket go out as DATA
 * only as far as the stream's credit allows (reading stops when it runs
 * out); DATA received goes into the socket's output buffer and credit is
 * returned only as that buffer drains into the socket.  A FIN becomes a
 * shutdown(SHUT_WR) once everything before it is written, and EOF on the
 * socket becomes a FIN, so half-closed connections work both ways.
 *
 * The bridge owns the bufferevent (and its socket) once attached, and ends
 * itself when both directions are done or the stream is reset; on_done then
 * reports how it ended, once.  After on_done the bridge must not be used;
 * its memory is freed by its own event on the loop (docs/0015), so on_done
 * may run inside any bridge call.
 *
 * Invariants asserted (sanitizer build): no bridge_attach, bridge_refuse
 * or bridge_abort after on_done; the head filter is set before
 * bridge_attach; a bridge is freed only once done, its stream and socket
 * dropped.  Costs one struct bridge and one event per stream.
 */
#ifndef TETHER_BRIDGE_H
#define TETHER_BRIDGE_H

#include <stddef.h>
#include <stdint.h>

struct bridge;
struct bufferevent;
struct mux;
struct mux_stream;

struct bridge_stats {
	uint64_t bytes_in;      /* from the socket into the stream */
	uint64_t bytes_out;     /* from the stream into the socket */
	const char *end;        /* "done", "reset:CODE", "socket_error", "tunnel_lost",
	                         * "refused:CODE", "rejected:CODE" (head filter) */
};

typedef void bridge_done_fn(struct bridge *b, const struct bridge_stats *st, void *arg);
typedef void bridge_opened_fn(struct bridge *b, int ok, const char *code,
    const char *reason, void *arg);

/*
 * Accepting side (agent): the peer opened s.  The bridge holds the stream
 * while the caller dials, then the caller calls bridge_attach with the
 * connected bufferevent or bridge_refuse.  on_done runs when it ends
 * (including a RESET or lost tunnel during the dial).
 */
struct bridge *bridge_accepting(struct mux_stream *s, bridge_done_fn *on_done, void *arg);
/* Accepts the stream and starts moving bytes.  Returns 0, or -1 if the
 * stream could not be accepted (the bridge is then done and bev freed). */
int bridge_attach(struct bridge *b, struct bufferevent *bev);
/* Refuses the stream (OPEN_FAIL code/reason); the bridge is freed, on_done
 * runs with end "refused:CODE". */
void bridge_refuse(struct bridge *b, const char *code, const char *reason);
/* True while the dial is pending and the stream still wants an answer. */
int bridge_pending(const struct bridge *b);

/*
 * Head filter (agent: a service with a token of its own).  The stream
 * carries HTTP requests one after another, each a head and a body; every
 * head is held (at most max bytes of it) until fn finds it whole, and what
 * fn returns is written to the socket in its place; the body after it
 * passes through the tail filter unchanged.
 * What one DATA frame yields (rewritten heads, body bytes) goes to a bare
 * socket with nothing queued in one sendmsg(2), and what it takes is
 * credited at once; the rest waits in the output buffer.  Credit for a
 * head's bytes goes back to the peer once all of its rewrite has left for
 * the socket (at most BRIDGE_HEADS_MAX rewritten heads may wait in the
 * output; one more resets the stream "too_many_requests_waiting"), so
 * flow control stays exact.
 *   fn(buf, len, ...) returns 1 with *used (the head's length in buf) and
 *   *out and *outlen (malloc'd; the bridge wipes and frees it), 0 when buf does
 *   not hold a whole head yet, -1 with *code to reset the stream.
 * Without a whole head in max bytes the stream is reset "head_too_large";
 * a FIN inside a head, or before the first one, "head_incomplete".  Set it
 * before bridge_attach.
 *   tail (may be NULL: after the first head everything passes) sees every
 *   stream byte after a head, in order: tail(data, len, &done, &code, arg)
 *   returns how many of them belong to the message (<= len) and sets
 *   *done when the message ended with them: the next bytes are a new head.
 *   Fewer than len without *done resets the stream with *code once those
 *   (and what came before them) have been handed to the socket.
 */
#define BRIDGE_HEADS_MAX 8   /* rewritten heads waiting in the output */
typedef int bridge_head_fn(const uint8_t *buf, size_t len, size_t *used,
    char **out, size_t *outlen, const char **code, void *arg);
typedef size_t bridge_tail_fn(const uint8_t *data, size_t len, int *done,
    const char **code, void *arg);
void bridge_set_head_filter(struct bridge *b, size_t max, bridge_head_fn *fn,
    bridge_tail_fn *tail, void *arg);

/*
 * Opening side (tetherctl forward): opens a stream to target over m for the
 * connection bev (owned from now on; reading starts once the stream is
 * open).  on_opened reports the answer; on a refusal the connection is
 * closed and on_done follows.  NULL if the stream could not be opened.
 */
struct bridge *bridge_open(struct mux *m, const char *target, struct bufferevent *bev,
    bridge_opened_fn *on_opened, bridge_done_fn *on_done, void *arg);

/* Ends the bridge now (RESET with code, socket closed). */
void bridge_abort(struct bridge *b, const char *code);

#endif
