/*
 * test_wsmux.c: the multiplexer's one adapter over a WebSocket face
 * (common/wsmux.c), over a fake face that records what it is asked.
 *
 * The fake face's output is an evbuffer: sendv appends the iovecs, and
 * send_buffer appends the prefix and moves the evbuffer's chains in, as
 * the gateway's side does.  The tests check that every frame leaves as one
 * binary message, that DATA taken from an evbuffer moves its chains
 * without a copy (the bytes in the output are at the addresses they had in
 * the source), and that the face's pending bytes are the multiplexer's
 * backpressure.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdlib.h>
#include <string.h>

#include <event2/buffer.h>
#include <event2/event.h>

#include "frame.h"
#include "mux.h"
#include "wsface.h"
#include "wsmux.h"

#define KiB 1024u

/* ---- the fake face ---- */

struct fake {
	struct wsface face;               /* first, as in wsconn and wsclient */
	struct evbuffer *out;             /* every message, back to back */
	size_t lens[64];                  /* each message's length */
	int nmsg;
	int sendv_calls, send_buffer_calls, text_messages;
	size_t pending;                   /* what pending() says */
};

static struct fake *
fake_of(struct wsface *f)
{
	return (struct fake *)f;
}

static int
fake_sendv(struct wsface *f, const struct iovec *iov, int iovcnt, int binary)
{
	struct fake *k = fake_of(f);
	size_t len = 0;

	k->sendv_calls++;
	if (!binary)
		k->text_messages++;
	for (int i = 0; i < iovcnt; i++) {
		assert_int_equal(evbuffer_add(k->out, iov[i].iov_base, iov[i].iov_len), 0);
		len += iov[i].iov_len;
	}
	assert_true(k->nmsg < 64);
	k->lens[k->nmsg++] = len;
	return 0;
}

static int
fake_send_buffer(struct wsface *f, const uint8_t *prefix, size_t plen,
    struct evbuffer *src, size_t n)
{
	struct fake *k = fake_of(f);

	k->send_buffer_calls++;
	assert_int_equal(evbuffer_add(k->out, prefix, plen), 0);
	assert_int_equal(evbuffer_remove_buffer(src, k->out, n), (int)n);
	assert_true(k->nmsg < 64);
	k->lens[k->nmsg++] = plen + n;
	return 0;
}

static size_t
fake_pending(const struct wsface *f)
{
	return ((const struct fake *)f)->pending;
}

static void fake_pause(struct wsface *f, int paused) { (void)f; (void)paused; }
static void fake_size(struct wsface *f, size_t bytes) { (void)f; (void)bytes; }
static void fake_close(struct wsface *f, uint16_t code, const char *reason)
{
	(void)f; (void)code; (void)reason;
}
static void fake_free(struct wsface *f) { (void)f; }
static const char *fake_peer(const struct wsface *f) { (void)f; return "fake"; }

static const struct wsface_ops fake_ops = {
	.sendv = fake_sendv,
	.send_buffer = fake_send_buffer,
	.pending = fake_pending,
	.pause_reading = fake_pause,
	.set_low_water = fake_size,
	.set_max_message = fake_size,
	.set_max_queue = fake_size,
	.close = fake_close,
	.free = fake_free,
	.peer = fake_peer,
};

/* The next message of k's output, decoded (its bytes copied out). */
static void
fake_next_frame(struct fake *k, int i, struct frame *f, uint8_t *buf)
{
	char err[200];

	assert_true(i < k->nmsg);
	assert_int_equal(evbuffer_remove(k->out, buf, k->lens[i]), (int)k->lens[i]);
	assert_int_equal(frame_decode(buf, k->lens[i], f, err, sizeof(err)), 0);
}

/* ---- a multiplexer on the fake face, one stream opened ---- */

struct rig {
	struct event_base *base;
	struct fake k;
	struct mux *m;
	struct mux_stream *s;
	int opened, writable, closed;
};

static struct rig rig;

static void
on_opened(struct mux_stream *s, int ok, const char *code, const char *reason,
    void *arg)
{
	rig.opened += ok;
}

static void
on_data(struct mux_stream *s, const uint8_t *data, size_t len, void *arg)
{
}

static void
on_writable(struct mux_stream *s, void *arg)
{
	rig.writable++;
}

static void
on_fin(struct mux_stream *s, void *arg)
{
}

static void
on_close(struct mux_stream *s, const char *code, void *arg)
{
	rig.closed++;
}

static const struct mux_stream_handlers stream_handlers = {
	on_opened, on_data, on_writable, on_fin, on_close,
};

static void
on_open(struct mux *m, struct mux_stream *s, const struct frame_open *req, void *arg)
{
	mux_stream_refuse(s, "not_allowed", "no");
}

static const struct mux_handlers mux_handlers = { .on_open = on_open };

static int
setup(void **state)
{
	struct mux_config cfg = MUX_DEFAULT_CONFIG;
	struct frame_open req;
	struct frame f;
	uint8_t buf[1024];
	char err[200];

	memset(&rig, 0, sizeof(rig));
	rig.base = event_base_new();
	assert_non_null(rig.base);
	rig.k.face.ops = &fake_ops;
	rig.k.out = evbuffer_new();
	assert_non_null(rig.k.out);
	rig.m = wsmux_new(rig.base, &cfg, &rig.k.face, &mux_handlers, NULL);
	assert_non_null(rig.m);
	/* OPEN leaves as one binary message of its own. */
	frame_open_init(&req, "127.0.0.1:22", NULL);
	rig.s = mux_open(rig.m, NULL, &req, &stream_handlers, NULL);
	assert_non_null(rig.s);
	assert_int_equal(rig.k.nmsg, 1);
	fake_next_frame(&rig.k, 0, &f, buf);
	assert_int_equal(f.type, FRAME_OPEN);
	/* The peer accepts. */
	memset(&f, 0, sizeof(f));
	f.type = FRAME_OPEN_OK;
	f.stream_id = mux_stream_id(rig.s);
	f.u.open_ok_window = 1 << 20;
	assert_int_equal(mux_on_frame(rig.m, &f, err, sizeof(err)), 0);
	assert_int_equal(rig.opened, 1);
	return 0;
}

static int
teardown(void **state)
{
	mux_free(rig.m);
	evbuffer_free(rig.k.out);
	event_base_free(rig.base);
	return 0;
}

/* ---- tests ---- */

/* DATA from an evbuffer: one frame per chain through send_buffer, each
 * chain's bytes moved into the face's output where they were, not copied;
 * the source left empty.  Nothing went through sendv but the OPEN, and no
 * message was text. */
static void
test_send_buffer_moves_chains(void **state)
{
	struct evbuffer *src = evbuffer_new();
	struct evbuffer *staging[3];
	struct evbuffer_iovec v[3], got, out[16];
	int sendv_before = rig.k.sendv_calls, n;

	assert_non_null(src);
	/* Three chains of 8 KiB, as a relay's reads leave them. */
	for (int i = 0; i < 3; i++) {
		staging[i] = evbuffer_new();
		assert_non_null(staging[i]);
		assert_int_equal(evbuffer_expand(staging[i], 8 * KiB), 0);
		assert_int_equal(evbuffer_reserve_space(staging[i], 8 * KiB, &got, 1), 1);
		memset(got.iov_base, 'a' + i, 8 * KiB);
		got.iov_len = 8 * KiB;
		assert_int_equal(evbuffer_commit_space(staging[i], &got, 1), 0);
		assert_int_equal(evbuffer_add_buffer(src, staging[i]), 0);
		evbuffer_free(staging[i]);
	}
	assert_int_equal(evbuffer_peek(src, -1, NULL, v, 3), 3);
	assert_int_equal(mux_stream_send_buffer(rig.s, src), 24 * KiB);
	assert_int_equal(evbuffer_get_length(src), 0);
	assert_int_equal(rig.k.send_buffer_calls, 3);
	assert_int_equal(rig.k.sendv_calls, sendv_before);
	assert_int_equal(rig.k.text_messages, 0);
	/* Each chain's payload starts a chain of the output, at its old
	 * address (the next frame's header may follow it in the same chain). */
	n = evbuffer_peek(rig.k.out, -1, NULL, out, 16);
	assert_true(n > 0 && n <= 16);
	for (int i = 0; i < 3; i++) {
		int found = 0;

		for (int j = 0; j < n; j++)
			found |= out[j].iov_base == v[i].iov_base &&
			    out[j].iov_len >= 8 * KiB;
		assert_true(found);
	}
	evbuffer_free(src);
}

/* The face's pending bytes are the backpressure: at tx_high_water DATA
 * waits; below it again mux_on_drain lets the stream write. */
static void
test_pending_is_backpressure(void **state)
{
	static const uint8_t data[1000];
	int sends = rig.k.sendv_calls;

	rig.k.pending = 256 * KiB;
	assert_int_equal(mux_stream_send(rig.s, data, sizeof(data)), 0);
	assert_int_equal(rig.k.sendv_calls, sends);
	rig.k.pending = 0;
	mux_on_drain(rig.m);
	assert_true(rig.writable >= 1);
	assert_int_equal(mux_stream_send(rig.s, data, sizeof(data)), sizeof(data));
	assert_int_equal(rig.k.sendv_calls, sends + 1);
	assert_int_equal(rig.k.lens[rig.k.nmsg - 1] > sizeof(data), 1);
}

/* Control frames (a RESET) leave through sendv, binary, even when the
 * face is full. */
static void
test_control_frames_leave_at_once(void **state)
{
	struct frame f;
	uint8_t buf[1024];
	int first = rig.k.nmsg;

	rig.k.pending = 1u << 30;
	mux_stream_reset(rig.s, "cancelled");
	assert_int_equal(rig.k.nmsg, first + 1);
	fake_next_frame(&rig.k, first, &f, buf);
	assert_int_equal(f.type, FRAME_RESET);
	assert_int_equal(rig.k.text_messages, 0);
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_send_buffer_moves_chains, setup, teardown),
		cmocka_unit_test_setup_teardown(test_pending_is_backpressure, setup, teardown),
		cmocka_unit_test_setup_teardown(test_control_frames_leave_at_once, setup, teardown),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
