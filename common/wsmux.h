/*
 * wsmux.h: a stream multiplexer (mux.h) over a WebSocket face (wsface.h),
 * the one adapter every tunnel uses: the agent's and the gateway's ends of
 * a tunnel, tetherctl forward and the gateway's dial, the peer links
 * between replicas.  Each frame is one binary message; DATA taken from an
 * evbuffer (mux_stream_send_buffer) goes through wsface_send_buffer, so the
 * accepted side moves whole chains without a copy.  One indirect call per
 * frame beyond the multiplexer's own.
 */
#ifndef TETHER_WSMUX_H
#define TETHER_WSMUX_H

#include "mux.h"
#include "wsface.h"

/* The adapter: its io_arg is the struct wsface *. */
extern const struct mux_io wsmux_io;

/* mux_new over the face f (which must outlive the multiplexer: its owner
 * frees the multiplexer in on_close, or before wsface_free).  NULL on no
 * memory. */
struct mux *wsmux_new(struct event_base *base, const struct mux_config *cfg,
    struct wsface *f, const struct mux_handlers *h, void *arg);

#endif
