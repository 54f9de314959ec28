/*
 * wsmux.c: the multiplexer's transport over a WebSocket face (wsmux.h).
 */
#include "wsmux.h"

static int
wsmux_sendv(void *io, const struct iovec *iov, int iovcnt)
{
	return wsface_sendv(io, iov, iovcnt, 1);
}

static size_t
wsmux_pending(void *io)
{
	return wsface_pending(io);
}

static int
wsmux_sendbuf(void *io, const uint8_t *hdr, size_t hdrlen, struct evbuffer *src,
    size_t n)
{
	return wsface_send_buffer(io, hdr, hdrlen, src, n);
}

const struct mux_io wsmux_io = {
	.sendv = wsmux_sendv,
	.pending = wsmux_pending,
	.sendbuf = wsmux_sendbuf,
};

struct mux *
wsmux_new(struct event_base *base, const struct mux_config *cfg, struct wsface *f,
    const struct mux_handlers *h, void *arg)
{
	return mux_new(base, cfg, &wsmux_io, f, h, arg);
}
