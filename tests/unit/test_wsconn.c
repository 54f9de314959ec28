/*
 * test_wsconn.c: the gateway's server-side WebSocket
 * (gateway/transport/wsconn.c), on a plain socketpair in one event loop
 * (without TLS its TLS helpers do nothing).
 *
 * Fairness: a peer whose input holds thousands of small frames gets a turn
 * of the loop like any other connection, not the loop.  A read used to
 * parse and deliver every frame it brought in one callback: a flood of
 * 30-byte OPENs took the loop for seconds on a loaded machine while an
 * operator's connect waited for its upgrade (test_peer_floods under load).
 * Here another socket becomes readable while the first message is
 * delivered; its callback must run after a turn's worth of messages, long
 * before the whole flood is delivered, and every message must still
 * arrive, in order.  An owner that closes during such a flood still gets
 * the close handshake: the turns go on, dropping data, until the peer's
 * close frame (a closing connection's turn used to end it, cut).  A PING
 * that finds the output full is answered once it drains, behind it.
 * wsface_heard_ms answers the wheel's time of the last read that brought
 * the peer's bytes, a partial frame too; silence, pausing and resuming
 * leave it where it was.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <string.h>
#include <unistd.h>

#include <sys/socket.h>

#include <event2/bufferevent.h>
#include <event2/event.h>

#include "runtime.h"
#include "wsconn.h"
#include "wsface.h"

#define FLOOD      2000        /* small frames waiting in one read */
#define TURN_MAX   128         /* what one turn may deliver, with slack */

struct flood {
	int other_fd;               /* written when the first message arrives */
	uint32_t delivered;
	uint32_t in_order;          /* messages whose payload was the next index */
	long seen_by_other;         /* delivered when the other socket ran; -1 */
	int closed;
	int status;                 /* on_close's */
	uint32_t close_at;          /* wsface_close after this many (0: never) */
	struct event_base *base;
};

static void
on_message(struct wsface *f, const uint8_t *data, size_t len, int binary, void *arg)
{
	struct flood *fl = arg;
	uint32_t i;

	(void)f;
	(void)binary;
	if (len == sizeof(i)) {
		memcpy(&i, data, sizeof(i));
		if (i == fl->delivered)
			fl->in_order++;
	}
	if (fl->delivered++ == 0 && fl->other_fd >= 0)
		assert_int_equal(write(fl->other_fd, "x", 1), 1);
	if (fl->close_at != 0 && fl->delivered == fl->close_at)
		wsface_close(f, 1000, "enough");
	if (fl->delivered == FLOOD && fl->seen_by_other >= 0)
		event_base_loopbreak(fl->base);
}

static void
on_close(struct wsface *f, int status, const char *reason, void *arg)
{
	struct flood *fl = arg;

	(void)f;
	(void)reason;
	fl->closed = 1;
	fl->status = status;
	if (fl->close_at != 0)
		event_base_loopbreak(fl->base);
}

static const struct wsface_handlers flood_handlers = {
	.on_message = on_message,
	.on_close = on_close,
};

static void
other_ready(evutil_socket_t fd, short what, void *arg)
{
	struct flood *fl = arg;
	char b;

	(void)what;
	assert_int_equal(read(fd, &b, 1), 1);
	fl->seen_by_other = fl->delivered;
	if (fl->delivered == FLOOD)
		event_base_loopbreak(fl->base);
}

/* A masked binary frame of 4 bytes, the index, as a client sends it. */
static size_t
client_frame(uint8_t *p, uint32_t i)
{
	static const uint8_t mask[4] = { 0x11, 0x22, 0x33, 0x44 };
	uint8_t b[4];

	memcpy(b, &i, sizeof(b));
	p[0] = 0x82;                /* FIN, binary */
	p[1] = 0x80 | 4;            /* masked, 4 bytes */
	memcpy(p + 2, mask, 4);
	for (int k = 0; k < 4; k++)
		p[6 + k] = b[k] ^ mask[k];
	return 10;
}

/* A masked close frame with code 1000, as a client sends it. */
static size_t
client_close_frame(uint8_t *p)
{
	static const uint8_t mask[4] = { 0x55, 0x66, 0x77, 0x88 };

	p[0] = 0x88;                /* FIN, close */
	p[1] = 0x80 | 2;            /* masked, 2 bytes */
	memcpy(p + 2, mask, 4);
	p[6] = 0x03 ^ mask[0];      /* 1000 */
	p[7] = 0xe8 ^ mask[1];
	return 8;
}

/* The flood (and, with_close, a close frame behind it) is in the socket
 * pair ws before the loop first reads it; a connection of a new set takes
 * it all in one read (~20 KB): what a TLS read of up to a message's worth
 * does on the gateway. */
static struct wsconn_set *
flood_start(struct event_base *base, int ws[2], struct flood *fl, int with_close)
{
	static uint8_t wire[FLOOD * 10 + 8];
	struct wsconn_set *set;
	struct bufferevent *bev;
	size_t n = 0;

	assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM, 0, ws), 0);
	for (uint32_t i = 0; i < FLOOD; i++)
		n += client_frame(wire + n, i);
	if (with_close)
		n += client_close_frame(wire + n);
	assert_int_equal(write(ws[1], wire, n), (ssize_t)n);
	assert_non_null(set = wsconn_set_new(base, 250));
	bev = bufferevent_socket_new(base, ws[0], BEV_OPT_CLOSE_ON_FREE);
	assert_non_null(bev);
	assert_non_null(wsconn_new(set, bev, "flooder", &flood_handlers, fl));
	bufferevent_set_max_single_read(bev, n);
	return set;
}

static void
test_flood_shares_the_loop(void **state)
{
	struct flood fl = { .seen_by_other = -1 };
	struct event_base *base = event_base_new();
	struct wsconn_set *set;
	struct event *other;
	const struct timeval guard = { 60, 0 };
	int ws[2], ot[2];

	(void)state;
	assert_non_null(base);
	fl.base = base;
	assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM, 0, ot), 0);
	fl.other_fd = ot[1];
	set = flood_start(base, ws, &fl, 0);
	other = event_new(base, ot[0], EV_READ | EV_PERSIST, other_ready, &fl);
	assert_non_null(other);
	assert_int_equal(event_add(other, NULL), 0);

	/* A guard, not a goal: a loop that never ends fails below. */
	assert_int_equal(event_base_loopexit(base, &guard), 0);
	assert_int_equal(event_base_dispatch(base), 0);
	assert_int_equal(fl.delivered, FLOOD);
	assert_int_equal(fl.in_order, FLOOD);
	assert_false(fl.closed);
	/* The other socket became readable at the first message: it ran after
	 * one turn, not after the flood. */
	assert_true(fl.seen_by_other >= 1);
	assert_true(fl.seen_by_other <= TURN_MAX);

	event_free(other);
	wsconn_set_free(set);
	assert_true(fl.closed);
	close(ws[1]);
	close(ot[0]);
	close(ot[1]);
	event_base_free(base);
}

static void
test_close_during_flood(void **state)
{
	struct flood fl = { .other_fd = -1, .seen_by_other = -1, .close_at = 10 };
	struct event_base *base = event_base_new();
	struct wsconn_set *set;
	const struct timeval guard = { 60, 0 };
	int ws[2];

	(void)state;
	assert_non_null(base);
	fl.base = base;
	set = flood_start(base, ws, &fl, 1);

	assert_int_equal(event_base_loopexit(base, &guard), 0);
	assert_int_equal(event_base_dispatch(base), 0);
	/* Closed at the 10th: nothing delivered after; the peer's close frame
	 * behind the rest of the flood ended it (101), not a turn (0). */
	assert_true(fl.closed);
	assert_int_equal(fl.delivered, 10);
	assert_int_equal(fl.status, 101);

	wsconn_set_free(set);
	close(ws[1]);
	event_base_free(base);
}

struct split {
	uint8_t got[1000];
	size_t len;
	int messages;
	int closed;
};

static void
split_message(struct wsface *f, const uint8_t *data, size_t len, int binary, void *arg)
{
	struct split *sp = arg;

	(void)f;
	(void)binary;
	sp->messages++;
	sp->len = len;
	if (len <= sizeof(sp->got))
		memcpy(sp->got, data, len);
}

static void
split_close(struct wsface *f, int status, const char *reason, void *arg)
{
	struct split *sp = arg;

	(void)f;
	(void)status;
	(void)reason;
	sp->closed = 1;
}

static const struct wsface_handlers split_handlers = {
	.on_message = split_message,
	.on_close = split_close,
};

/* Runs base until nothing is ready now. */
static void
run_ready(struct event_base *base)
{
	for (int i = 0; i < 8; i++)
		assert_true(event_base_loop(base, EVLOOP_NONBLOCK) >= 0);
}

static void
test_split_frame_plain(void **state)
{
	static const uint8_t mask[4] = { 0xa1, 0xb2, 0xc3, 0xd4 };
	uint8_t frame[4 + 4 + 1000], payload[1000];
	struct split sp = { .len = 0 };
	struct event_base *base = event_base_new();
	struct wsconn_set *set;
	struct bufferevent *bev;
	int ws[2];

	(void)state;
	assert_non_null(base);
	assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM, 0, ws), 0);
	for (size_t i = 0; i < sizeof(payload); i++)
		payload[i] = (uint8_t)(i * 7);
	frame[0] = 0x82;               /* FIN, binary */
	frame[1] = 0x80 | 126;         /* masked, 16-bit length */
	frame[2] = sizeof(payload) >> 8;
	frame[3] = sizeof(payload) & 0xff;
	memcpy(frame + 4, mask, 4);
	for (size_t i = 0; i < sizeof(payload); i++)
		frame[8 + i] = payload[i] ^ mask[i % 4];

	assert_non_null(set = wsconn_set_new(base, 250));
	bev = bufferevent_socket_new(base, ws[0], BEV_OPT_CLOSE_ON_FREE);
	assert_non_null(bev);
	assert_non_null(wsconn_new(set, bev, "split", &split_handlers, &sp));
	/* The first half is read (and kept) before the second is sent. */
	assert_int_equal(write(ws[1], frame, 500), 500);
	run_ready(base);
	assert_int_equal(sp.messages, 0);
	assert_int_equal(write(ws[1], frame + 500, sizeof(frame) - 500),
	    (ssize_t)(sizeof(frame) - 500));
	run_ready(base);
	assert_false(sp.closed);
	assert_int_equal(sp.messages, 1);
	assert_int_equal(sp.len, sizeof(payload));
	assert_memory_equal(sp.got, payload, sizeof(payload));

	wsconn_set_free(set);
	close(ws[1]);
	event_base_free(base);
}

/*
 * A PING that finds the output over WS_PONG_ROOM (the peer does not read)
 * is owed: its PONG waits until the output drains, then goes behind what
 * was queued.  Two PINGs while owed leave one PONG, the latest's payload.
 * The owed PONG is the connection's only while owed (made for it, freed
 * when it goes, or with the connection: LeakSanitizer checks the last).
 */
struct pong_peer {
	int closed;
};

static void
pong_message(struct wsface *f, const uint8_t *data, size_t len, int binary, void *arg)
{
	(void)f;
	(void)data;
	(void)len;
	(void)binary;
	(void)arg;
}

static void
pong_close(struct wsface *f, int status, const char *reason, void *arg)
{
	struct pong_peer *pp = arg;

	(void)f;
	(void)status;
	(void)reason;
	pp->closed = 1;
}

static const struct wsface_handlers pong_handlers = {
	.on_message = pong_message,
	.on_close = pong_close,
};

/* A masked PING frame with payload p (at most 125 bytes). */
static size_t
client_ping(uint8_t *out, const char *p)
{
	static const uint8_t mask[4] = { 0x0f, 0x1e, 0x2d, 0x3c };
	size_t n = strlen(p);

	out[0] = 0x89;              /* FIN, ping */
	out[1] = (uint8_t)(0x80 | n);
	memcpy(out + 2, mask, 4);
	for (size_t i = 0; i < n; i++)
		out[6 + i] = (uint8_t)p[i] ^ mask[i % 4];
	return 6 + n;
}

#define PONG_BIG (48u << 10)     /* over WS_PONG_ROOM, under the 64 KiB output cap */

/* The server's connection ws[0] queues PONG_BIG bytes its peer ws[1] has
 * not read: the socket pair's buffers are small, the rest waits in the
 * output. */
static struct wsface *
pong_start(struct event_base *base, struct wsconn_set *set, int ws[2],
    struct pong_peer *pp)
{
	static uint8_t big[PONG_BIG];
	struct bufferevent *bev;
	struct wsconn *c;
	struct wsface *f;
	int small = 4096;

	assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM, 0, ws), 0);
	assert_int_equal(setsockopt(ws[0], SOL_SOCKET, SO_SNDBUF, &small, sizeof(small)), 0);
	assert_int_equal(setsockopt(ws[1], SOL_SOCKET, SO_RCVBUF, &small, sizeof(small)), 0);
	assert_int_equal(evutil_make_socket_nonblocking(ws[0]), 0);
	bev = bufferevent_socket_new(base, ws[0], BEV_OPT_CLOSE_ON_FREE);
	assert_non_null(bev);
	assert_non_null(c = wsconn_new(set, bev, "pong", &pong_handlers, pp));
	f = wsconn_face(c);
	assert_int_equal(wsface_send(f, big, sizeof(big), 1), 0);
	run_ready(base);
	return f;
}

/* Reads ws[1] (running base between reads) until a PONG frame is whole:
 * returns its payload's length (copied to payload) and the data bytes
 * that came before it. */
static size_t
read_until_pong(struct event_base *base, int fd, uint8_t *payload, size_t *before)
{
	static uint8_t in[PONG_BIG + 4096];
	size_t have = 0, at = 0;

	assert_int_equal(evutil_make_socket_nonblocking(fd), 0);
	*before = 0;
	for (int rounds = 0; rounds < 100000; rounds++) {
		ssize_t r = read(fd, in + have, sizeof(in) - have);
		if (r > 0)
			have += (size_t)r;
		run_ready(base);
		/* Walk the whole frames read so far (server frames: unmasked). */
		while (have - at >= 2) {
			size_t len = in[at + 1] & 0x7f, hdr = 2;
			if (len == 126) {
				if (have - at < 4)
					break;
				len = (size_t)in[at + 2] << 8 | in[at + 3];
				hdr = 4;
			} else if (len == 127) {
				if (have - at < 10)
					break;
				len = 0;
				for (int k = 0; k < 8; k++)
					len = len << 8 | in[at + 2 + k];
				hdr = 10;
			}
			if (have - at < hdr + len)
				break;
			if ((in[at] & 0x0f) == 0x0a) {
				memcpy(payload, in + at + hdr, len);
				return len;
			}
			*before += len;
			at += hdr + len;
		}
	}
	fail_msg("no PONG after %zu bytes", have);
	return 0;
}

static void
test_pong_owed_until_drained(void **state)
{
	struct event_base *base = event_base_new();
	struct pong_peer pp = { 0 };
	struct wsconn_set *set;
	uint8_t ping[2 + 4 + 125], got[125];
	size_t before, n;
	int ws[2];

	(void)state;
	assert_non_null(base);
	assert_non_null(set = wsconn_set_new(base, 250));
	(void)pong_start(base, set, ws, &pp);
	/* Two PINGs while the output is full: one PONG, the latest's. */
	n = client_ping(ping, "abc");
	assert_int_equal(write(ws[1], ping, n), (ssize_t)n);
	run_ready(base);
	n = client_ping(ping, "wxyz");
	assert_int_equal(write(ws[1], ping, n), (ssize_t)n);
	run_ready(base);
	n = read_until_pong(base, ws[1], got, &before);
	assert_int_equal(n, 4);
	assert_memory_equal(got, "wxyz", 4);
	assert_int_equal(before, PONG_BIG);     /* behind the queued message */
	assert_false(pp.closed);
	/* Nothing owed now: a PING is answered at once, once. */
	n = client_ping(ping, "again");
	assert_int_equal(write(ws[1], ping, n), (ssize_t)n);
	run_ready(base);
	n = read_until_pong(base, ws[1], got, &before);
	assert_int_equal(n, 5);
	assert_memory_equal(got, "again", 5);
	assert_int_equal(before, 0);
	wsconn_set_free(set);
	close(ws[1]);
	event_base_free(base);
}

/* A connection that ends with a PONG still owed frees it (LeakSanitizer). */
static void
test_pong_owed_at_the_end(void **state)
{
	struct event_base *base = event_base_new();
	struct pong_peer pp = { 0 };
	struct wsconn_set *set;
	uint8_t ping[2 + 4 + 125];
	size_t n;
	int ws[2];

	(void)state;
	assert_non_null(base);
	assert_non_null(set = wsconn_set_new(base, 250));
	(void)pong_start(base, set, ws, &pp);
	n = client_ping(ping, "abc");
	assert_int_equal(write(ws[1], ping, n), (ssize_t)n);
	run_ready(base);
	wsconn_set_free(set);
	close(ws[1]);
	event_base_free(base);
}

/*
 * The accepted side answers wsface_heard_ms (wsface.h): the face's making
 * first (the upgrade request was the peer's last word), then the wheel's
 * time of each read callback, a frame's first half included.  The loop
 * runs with nothing to read past a few of the wheel's ticks: silence does
 * not move it, nor does pausing and resuming the reading; the half frame
 * read after that moves it to the wheel's time then, which is at least
 * the last tick's.
 */
static void
test_heard_ms_moves_with_reads(void **state)
{
	static const uint8_t mask[4] = { 0xa1, 0xb2, 0xc3, 0xd4 };
	uint8_t frame[4 + 4 + 1000];
	struct split sp = { .len = 0 };
	struct event_base *base = event_base_new();
	struct wsconn_set *set;
	struct bufferevent *bev;
	struct wsface *f;
	struct wsconn *c;
	int64_t made, quiet_until, heard;
	int ws[2];

	(void)state;
	assert_non_null(base);
	assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM, 0, ws), 0);
	frame[0] = 0x82;               /* FIN, binary */
	frame[1] = 0x80 | 126;         /* masked, 16-bit length */
	frame[2] = 1000 >> 8;
	frame[3] = 1000 & 0xff;
	memcpy(frame + 4, mask, 4);
	for (size_t i = 0; i < 1000; i++)
		frame[8 + i] = (uint8_t)i ^ mask[i % 4];

	assert_non_null(set = wsconn_set_new(base, 10));
	bev = bufferevent_socket_new(base, ws[0], BEV_OPT_CLOSE_ON_FREE);
	assert_non_null(bev);
	assert_non_null(c = wsconn_new(set, bev, "heard", &split_handlers, &sp));
	f = wsconn_face(c);
	made = wsface_heard_ms(f);
	assert_true(made > 0);
	assert_true(made <= runtime_monotonic_ms());

	/* Silence: the wheel ticks (every 10 ms, the only event) past
	 * made + 30, then once more, so its time is at least that. */
	quiet_until = made + 30;
	while (runtime_monotonic_ms() < quiet_until)
		assert_true(event_base_loop(base, EVLOOP_ONCE) >= 0);
	assert_true(event_base_loop(base, EVLOOP_ONCE) >= 0);
	assert_int_equal(wsface_heard_ms(f), made);
	/* Not reading, then reading again, is not hearing. */
	wsface_pause_reading(f, 1);
	run_ready(base);
	wsface_pause_reading(f, 0);
	run_ready(base);
	assert_int_equal(wsface_heard_ms(f), made);

	/* Half a frame: heard, though no message is whole. */
	assert_int_equal(write(ws[1], frame, 500), 500);
	run_ready(base);
	assert_int_equal(sp.messages, 0);
	heard = wsface_heard_ms(f);
	assert_true(heard >= quiet_until);
	assert_true(heard <= runtime_monotonic_ms());
	/* The rest: the message arrives whole. */
	assert_int_equal(write(ws[1], frame + 500, sizeof(frame) - 500),
	    (ssize_t)(sizeof(frame) - 500));
	run_ready(base);
	assert_int_equal(sp.messages, 1);
	assert_true(wsface_heard_ms(f) >= heard);
	assert_false(sp.closed);

	wsconn_set_free(set);
	close(ws[1]);
	event_base_free(base);
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_flood_shares_the_loop),
		cmocka_unit_test(test_close_during_flood),
		cmocka_unit_test(test_split_frame_plain),
		cmocka_unit_test(test_pong_owed_until_drained),
		cmocka_unit_test(test_pong_owed_at_the_end),
		cmocka_unit_test(test_heard_ms_moves_with_reads),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
