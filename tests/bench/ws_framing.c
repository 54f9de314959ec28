/*
 * ws_framing.c: how fast can the agent's side frame WebSocket payload?
 *
 * The agent (a WebSocket client) must mask everything it sends and parse
 * everything it receives.  This measures, on one core, with 128 KiB
 * messages held in memory (no sockets, no TLS):
 *   - a byte-at-a-time mask loop, the shape of libwebsockets' client path;
 *   - Debian's wslay (frame API) sending masked and receiving unmasked;
 *   - Tether's ws_mask_copy (8 bytes at a time).  Tether's receive path has
 *     no per-byte step at all: ws_parse_header reads the header in place
 *     and the payload is handed on as a pointer into the input buffer.
 * Built and run by ws_framing.sh; reported, never pass/fail.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <wslay/wslay.h>

#include "wsclient.h"
#include "wsframe.h"

#define MSG   (128 * 1024)
#define TOTAL (4ull << 30)   /* bytes per measurement */

static uint8_t src[MSG], dst[MSG + 64];
static size_t dst_used;

static double
now(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec + ts.tv_nsec / 1e9;
}

static void
report(const char *what, double secs)
{
	printf("%-44s %8.0f MB/s\n", what, TOTAL / secs / 1e6);
}

/* The per-byte shape: one byte, one mask index, per iteration. */
static void __attribute__((noinline))
mask_bytewise(uint8_t *out, const uint8_t *in, size_t len, const uint8_t m[4], size_t *phase)
{
	size_t p = *phase;

	for (size_t i = 0; i < len; i++) {
		out[i] = in[i] ^ m[p];
		p = (p + 1) & 3;
	}
	*phase = p;
}

static ssize_t
wslay_send_cb(const uint8_t *data, size_t len, int flags, void *user)
{
	if (dst_used + len > sizeof(dst))
		dst_used = 0;
	memcpy(dst + dst_used, data, len);
	dst_used += len;
	return (ssize_t)len;
}

static const uint8_t *rx_buf;
static size_t rx_len, rx_off;

static ssize_t
wslay_recv_cb(uint8_t *buf, size_t len, int flags, void *user)
{
	size_t n = rx_len - rx_off < len ? rx_len - rx_off : len;

	if (n == 0)
		return -1;
	memcpy(buf, rx_buf + rx_off, n);
	rx_off += n;
	return (ssize_t)n;
}

static int
wslay_genmask_cb(uint8_t *buf, size_t len, void *user)
{
	memset(buf, 0x5a, len);
	return 0;
}

int
main(void)
{
	const uint8_t mask[4] = { 1, 2, 3, 4 };
	struct wslay_frame_callbacks cb = { wslay_send_cb, wslay_recv_cb, wslay_genmask_cb };
	wslay_frame_context_ptr ctx;
	static uint8_t frame[MSG + 16];
	size_t phase = 0, n = TOTAL / MSG;
	double t;

	memset(src, 0xa5, sizeof(src));

	t = now();
	for (size_t i = 0; i < n; i++)
		mask_bytewise(dst, src, MSG, mask, &phase);
	report("byte-at-a-time mask (libwebsockets' shape)", now() - t);

	t = now();
	for (size_t i = 0; i < n; i++)
		ws_mask_copy(dst, src, MSG, mask, 0);
	report("Tether ws_mask_copy (send, masked)", now() - t);

	wslay_frame_context_init(&ctx, &cb, NULL);
	t = now();
	for (size_t i = 0; i < n; i++) {
		struct wslay_frame_iocb io = { 1, 0, WSLAY_BINARY_FRAME, MSG, 1, src, MSG };
		while (io.data_length > 0) {
			ssize_t r = wslay_frame_send(ctx, &io);
			if (r < 0)
				return 1;
			io.data += r;
			io.data_length -= (size_t)r;
		}
	}
	report("wslay_frame_send (send, masked)", now() - t);

	/* An unmasked server frame, received from memory. */
	frame[0] = 0x82;
	frame[1] = 127;
	for (int i = 0; i < 8; i++)
		frame[2 + i] = (uint8_t)((uint64_t)MSG >> (56 - 8 * i));
	memcpy(frame + 10, src, MSG);
	rx_buf = frame;
	rx_len = MSG + 10;
	t = now();
	for (size_t i = 0; i < n; i++) {
		struct wslay_frame_iocb io;
		size_t got = 0;
		rx_off = 0;
		while (got < MSG) {
			ssize_t r = wslay_frame_recv(ctx, &io);
			if (r < 0)
				return 1;
			got += (size_t)r;
		}
	}
	report("wslay_frame_recv (receive, unmasked)", now() - t);
	wslay_frame_context_free(ctx);

	return 0;
}
