/*
 * test_bridge.c: the agent's bridge with a head filter (common/bridge.c,
 * the --service-token path of tunnel-client/dialer.c), over a real
 * multiplexer pair and a real socket.
 *
 * Two multiplexers are wired back to back in memory (the gateway's side
 * "gw", the agent's "ag"): each one's frames wait in a queue until pump()
 * hands them to the other, so a frame is never delivered inside the call
 * that sent it.  The agent side answers every OPEN with a bridge whose
 * head filter puts "Authorization: Bearer TOKEN" on each request head
 * (httphead.h, as dialer.c's dial_set_bearer and dial_request_body do),
 * attached to one end of a socketpair; the test reads the other end as
 * the upstream would.
 *
 * What it holds the bridge to: every head rewritten, bodies passed
 * unchanged, in order, across DATA frames cut anywhere; the stream's
 * credit back exactly as the bytes leave for the socket (at once when the
 * socket took them whole, only once the whole of a head has left when it
 * did not); a malformed head or body resets the stream with its code,
 * after the bytes before it were written.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/event.h>

#include "bridge.h"
#include "frame.h"
#include "httphead.h"
#include "mux.h"

#define TOKEN "node-token-123"
#define HEAD_MAX (64 * 1024)
#define WINDOW (256 * 1024)

/* ---- the wire between the two multiplexers ---- */

struct qmsg {
	struct qmsg *next;
	struct mux *to;
	int data;                   /* DATA as id and bytes, else f */
	uint32_t id;
	uint8_t *buf;
	size_t len;
	struct frame f;
};

static struct event_base *base;
static struct mux *gw, *ag;
static struct qmsg *qhead, **qtail = &qhead;

static void
enqueue(struct qmsg *m)
{
	m->next = NULL;
	*qtail = m;
	qtail = &m->next;
}

static int
io_sendv(void *io, const struct iovec *iov, int iovcnt)
{
	(void)io;
	(void)iov;
	(void)iovcnt;
	fail_msg("a stream frame went through sendv");
	return -1;
}

static size_t
io_pending(void *io)
{
	(void)io;
	return 0;
}

static int
io_senddata(void *io, uint32_t id, const uint8_t *data, struct evbuffer *src,
    size_t n)
{
	struct qmsg *m = calloc(1, sizeof(*m));

	assert_non_null(m);
	m->to = io == (void *)&gw ? ag : gw;
	m->data = 1;
	m->id = id;
	m->len = n;
	assert_non_null(m->buf = malloc(n));
	if (src != NULL)
		assert_int_equal(evbuffer_remove(src, m->buf, n), (int)n);
	else
		memcpy(m->buf, data, n);
	enqueue(m);
	return 0;
}

static int
io_sendframe(void *io, const struct frame *f)
{
	struct qmsg *m = calloc(1, sizeof(*m));

	assert_non_null(m);
	m->to = io == (void *)&gw ? ag : gw;
	m->f = *f;
	enqueue(m);
	return 0;
}

static const struct mux_io wire = {
	.sendv = io_sendv,
	.pending = io_pending,
	.senddata = io_senddata,
	.sendframe = io_sendframe,
};

/* Delivers every queued frame, and those that they cause. */
static void
pump(void)
{
	char err[256];
	struct qmsg *m;

	while ((m = qhead) != NULL) {
		qhead = m->next;
		if (qhead == NULL)
			qtail = &qhead;
		if (m->data)
			mux_on_data(m->to, m->id, m->buf, m->len);
		else
			assert_int_equal(mux_on_frame(m->to, &m->f, err, sizeof(err)), 0);
		free(m->buf);
		free(m);
	}
}

/* ---- the agent's side: a bridge with the head filter ---- */

struct agent_side {
	struct mux_stream *s;       /* the agent's end of the stream */
	struct bridge *b;
	int fd;                     /* the bridge's end of the socketpair */
	int upstream;               /* the test's end */
	int sndbuf;                 /* SO_SNDBUF of fd, when set */
	struct http_body_end body;
	int upgrade;
	int done;
	char end[64];
};

static struct agent_side ag_side;

static int
head_fn(const uint8_t *buf, size_t len, size_t *used, char **out,
    size_t *outlen, const char **code, void *arg)
{
	struct agent_side *a = arg;
	size_t n = http_head_length((const char *)buf, len);
	struct http_framing f;
	const char *why;

	if (n == 0)
		return 0;
	if (http_head_check((const char *)buf, n, &f, &why) != 0 ||
	    http_head_set_bearer((const char *)buf, n, TOKEN, out, outlen) != 0) {
		*code = "bad_request_head";
		return -1;
	}
	http_body_end_init(&a->body, &f);
	a->upgrade = f.upgrade;
	*used = n;
	return 1;
}

static size_t
tail_fn(const uint8_t *data, size_t len, int *done, const char **code, void *arg)
{
	struct agent_side *a = arg;
	size_t n;

	*done = 0;
	if (a->upgrade)
		return len;
	n = http_body_end_feed(&a->body, (const char *)data, len, done);
	if (n == (size_t)-1) {
		*done = 0;
		*code = "bad_request_body";
		return 0;
	}
	return n;
}

static void
on_done(struct bridge *b, const struct bridge_stats *st, void *arg)
{
	struct agent_side *a = arg;

	(void)b;
	a->done++;
	snprintf(a->end, sizeof(a->end), "%s", st->end);
	a->s = NULL;
}

static void
on_open(struct mux *m, struct mux_stream *s, const struct frame_open *req,
    void *arg)
{
	struct agent_side *a = arg;
	struct bufferevent *bev;
	int sv[2];

	(void)m;
	assert_string_equal(req->service, "kube-api");
	assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
	if (a->sndbuf > 0)
		assert_int_equal(setsockopt(sv[0], SOL_SOCKET, SO_SNDBUF, &a->sndbuf,
		    sizeof(a->sndbuf)), 0);
	assert_int_equal(evutil_make_socket_nonblocking(sv[0]), 0);
	assert_int_equal(evutil_make_socket_nonblocking(sv[1]), 0);
	a->fd = sv[0];
	a->upstream = sv[1];
	a->s = s;
	assert_non_null(a->b = bridge_accepting(s, on_done, a));
	bridge_set_head_filter(a->b, HEAD_MAX, head_fn, tail_fn, a);
	assert_non_null(bev = bufferevent_socket_new(base, sv[0], BEV_OPT_CLOSE_ON_FREE));
	assert_int_equal(bridge_attach(a->b, bev), 0);
}

static const struct mux_handlers ag_handlers = { .on_open = on_open };

/* ---- the gateway's side: a stream that sends requests ---- */

struct gw_side {
	struct mux_stream *s;
	int opened, closed;
	char close_code[FRAME_CODE_MAX + 1];
};

static struct gw_side gw_side;

static void
g_opened(struct mux_stream *s, int ok, const char *code, const char *reason,
    void *arg)
{
	struct gw_side *g = arg;

	(void)s;
	(void)reason;
	assert_true(ok);
	assert_null(code);
	g->opened++;
}

static void
g_data(struct mux_stream *s, const uint8_t *data, size_t len, void *arg)
{
	(void)data;
	mux_stream_drained(s, len);
	(void)arg;
}

static void
g_writable(struct mux_stream *s, void *arg)
{
	(void)s;
	(void)arg;
}

static void
g_fin(struct mux_stream *s, void *arg)
{
	(void)s;
	(void)arg;
}

static void
g_close(struct mux_stream *s, const char *code, void *arg)
{
	struct gw_side *g = arg;

	(void)s;
	g->closed++;
	snprintf(g->close_code, sizeof(g->close_code), "%s", code);
	g->s = NULL;
}

static const struct mux_stream_handlers gw_stream = {
	.on_opened = g_opened,
	.on_data = g_data,
	.on_writable = g_writable,
	.on_fin = g_fin,
	.on_close = g_close,
};

static int
setup(void **state)
{
	struct mux_config cfg = {
		.window = WINDOW, .max_streams = 16, .max_payload = 128 * 1024,
		.tx_high_water = 1 << 20,
	};

	(void)state;
	memset(&ag_side, 0, sizeof(ag_side));
	memset(&gw_side, 0, sizeof(gw_side));
	ag_side.fd = ag_side.upstream = -1;
	assert_non_null(base = event_base_new());
	cfg.odd_ids = 1;
	assert_non_null(gw = mux_new(base, &cfg, &wire, &gw, NULL, NULL));
	cfg.odd_ids = 0;
	assert_non_null(ag = mux_new(base, &cfg, &wire, &ag, &ag_handlers, &ag_side));
	return 0;
}

/* Opens the stream (the agent's socket gets sndbuf when > 0). */
static void
open_stream(int sndbuf)
{
	struct frame_open req;

	ag_side.sndbuf = sndbuf;
	frame_open_init(&req, NULL, "kube-api");
	assert_non_null(gw_side.s = mux_open(gw, NULL, &req, &gw_stream, &gw_side));
	pump();
	assert_int_equal(gw_side.opened, 1);
	assert_non_null(ag_side.s);
}

static int
teardown(void **state)
{
	(void)state;
	mux_free(gw);
	mux_free(ag);
	/* What they sent last goes nowhere: both are gone. */
	while (qhead != NULL) {
		struct qmsg *m = qhead;
		qhead = m->next;
		free(m->buf);
		free(m);
	}
	qtail = &qhead;
	event_base_loop(base, EVLOOP_NONBLOCK);   /* the bridges' reaps */
	if (ag_side.upstream >= 0)
		close(ag_side.upstream);
	event_base_free(base);
	return 0;
}

/* The gateway sends s on the stream, in one DATA frame, and it arrives. */
static void
send_data(const char *s, size_t len)
{
	assert_int_equal(mux_stream_send(gw_side.s, (const uint8_t *)s, len), len);
	pump();
}

static void
send_str(const char *s)
{
	send_data(s, strlen(s));
}

/* Reads what the upstream end holds now (the loop run between reads, so
 * that the bridge's output buffer drains too) until want bytes are in, and
 * then checks that no more came (the end of the stream may).  Returns a malloc'd NUL-terminated copy. */
static char *
read_upstream(size_t want)
{
	char *buf = malloc(want + 1);
	size_t have = 0;
	ssize_t n;
	int idle = 0;

	assert_non_null(buf);
	while (have < want && idle < 10000) {
		n = read(ag_side.upstream, buf + have, want - have);
		if (n > 0) {
			have += (size_t)n;
			idle = 0;
		} else {
			assert_true(n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK));
			idle++;
		}
		event_base_loop(base, EVLOOP_NONBLOCK);
		pump();
	}
	assert_int_equal(have, want);
	event_base_loop(base, EVLOOP_NONBLOCK);
	n = read(ag_side.upstream, buf, 1);   /* nothing more, or the end */
	assert_true(n == 0 || (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)));
	buf[want] = '\0';
	return buf;
}

static void
expect_upstream(const char *want)
{
	char *got = read_upstream(strlen(want));

	assert_string_equal(got, want);
	free(got);
}

#define GET1 "GET /version HTTP/1.1\r\nHost: k\r\nAuthorization: Bearer ttu_user\r\n\r\n"
#define GET1_OUT "GET /version HTTP/1.1\r\nHost: k\r\nAuthorization: Bearer " TOKEN "\r\n\r\n"
#define POST2 "POST /api HTTP/1.1\r\nHost: k\r\nContent-Length: 5\r\n\r\nhello"
#define POST2_OUT "POST /api HTTP/1.1\r\nHost: k\r\nContent-Length: 5\r\nAuthorization: Bearer " TOKEN "\r\n\r\nhello"

/* Heads whole in their DATA frame, a body beside its head, two requests in
 * one frame: each head rewritten, in order, and each frame's credit back
 * before the loop runs (the socket took the bytes with the DATA's own
 * call). */
static void
test_heads_whole(void **state)
{
	(void)state;
	open_stream(0);
	send_str(GET1);
	assert_int_equal(mux_stream_buffered(ag_side.s), 0);
	expect_upstream(GET1_OUT);
	send_str(POST2);
	assert_int_equal(mux_stream_buffered(ag_side.s), 0);
	expect_upstream(POST2_OUT);
	send_str(GET1 POST2 GET1);
	assert_int_equal(mux_stream_buffered(ag_side.s), 0);
	expect_upstream(GET1_OUT POST2_OUT GET1_OUT);
	assert_int_equal(ag_side.done, 0);
}

/* A request cut into frames anywhere, byte by byte at the worst: the same
 * bytes reach the upstream, and no credit is left over at the end. */
static void
test_heads_cut(void **state)
{
	static const char req[] = GET1 POST2 GET1;
	size_t len = sizeof(req) - 1;

	(void)state;
	open_stream(0);
	for (size_t cut = 1; cut < len; cut += 7) {
		send_data(req, cut);
		send_data(req + cut, len - cut);
		expect_upstream(GET1_OUT POST2_OUT GET1_OUT);
		assert_int_equal(mux_stream_buffered(ag_side.s), 0);
	}
	for (size_t i = 0; i < len; i++)
		send_data(req + i, 1);
	expect_upstream(GET1_OUT POST2_OUT GET1_OUT);
	assert_int_equal(mux_stream_buffered(ag_side.s), 0);
	assert_int_equal(ag_side.done, 0);
}

/* A socket that takes part of what comes: a head of ~60 KB over a socket
 * with a small send buffer, then a 150 KB body and another request.  The
 * head's credit is held until all of it has left; every byte arrives in
 * order; the credit comes back exactly (the multiplexer checks it never
 * goes over the window). */
static void
test_socket_short(void **state)
{
	size_t pad = 60000, body = 150000, hl, total, out_len;
	char *head, *bodybuf, *want, *got;
	char line[64];
	int n;

	(void)state;
	open_stream(4096);
	assert_non_null(head = malloc(pad + 256));
	n = snprintf(head, 256, "PUT /big HTTP/1.1\r\nContent-Length: %zu\r\nX-Pad: ", body);
	hl = (size_t)n;
	memset(head + hl, 'p', pad);
	hl += pad;
	memcpy(head + hl, "\r\n\r\n", 4);
	hl += 4;
	send_data(head, hl);
	/* Not all of the head fit: its credit waits. */
	assert_int_equal(mux_stream_buffered(ag_side.s), hl);
	assert_non_null(bodybuf = malloc(body));
	for (size_t i = 0; i < body; i++)
		bodybuf[i] = (char)('a' + i % 26);
	send_data(bodybuf, 100000);
	send_data(bodybuf + 100000, body - 100000);
	assert_true(mux_stream_buffered(ag_side.s) > hl);
	send_str(GET1);
	/* The rewrite: the head less its empty line, the bearer, the end. */
	out_len = (hl - 2) + strlen("Authorization: Bearer " TOKEN "\r\n") + 2 +
	    body + strlen(GET1_OUT);
	assert_non_null(want = malloc(out_len + 1));
	total = 0;
	memcpy(want, head, hl - 2);
	total += hl - 2;
	snprintf(line, sizeof(line), "Authorization: Bearer %s\r\n\r\n", TOKEN);
	memcpy(want + total, line, strlen(line));
	total += strlen(line);
	memcpy(want + total, bodybuf, body);
	total += body;
	memcpy(want + total, GET1_OUT, strlen(GET1_OUT));
	total += strlen(GET1_OUT);
	assert_int_equal(total, out_len);
	got = read_upstream(out_len);
	assert_memory_equal(got, want, out_len);
	assert_int_equal(mux_stream_buffered(ag_side.s), 0);
	assert_int_equal(ag_side.done, 0);
	free(got);
	free(want);
	free(bodybuf);
	free(head);
}

/* Hostile input still ends the stream with its reason: a malformed chunk
 * size after a good head (the head reached the upstream first), a head
 * with a bare LF, a head over HEAD_MAX. */
static void
test_rejects(void **state)
{
	(void)state;
	open_stream(0);
	send_str("POST /c HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n");
	assert_int_equal(ag_side.done, 1);
	assert_string_equal(ag_side.end, "rejected:bad_request_body");
	assert_int_equal(gw_side.closed, 1);
	assert_string_equal(gw_side.close_code, "bad_request_body");
	expect_upstream("POST /c HTTP/1.1\r\nTransfer-Encoding: chunked\r\n"
	    "Authorization: Bearer " TOKEN "\r\n\r\n");
}

static void
test_reject_bad_head(void **state)
{
	(void)state;
	open_stream(0);
	send_str("GET / HTTP/1.1\nHost: k\r\n\r\n");
	assert_int_equal(ag_side.done, 1);
	assert_string_equal(ag_side.end, "rejected:bad_request_head");
	assert_string_equal(gw_side.close_code, "bad_request_head");
}

static void
test_reject_head_too_large(void **state)
{
	char *big = malloc(HEAD_MAX);

	(void)state;
	assert_non_null(big);
	open_stream(0);
	memcpy(big, "GET / HTTP/1.1\r\nX: ", 19);
	memset(big + 19, 'x', HEAD_MAX - 19);
	send_data(big, HEAD_MAX / 2);
	assert_int_equal(ag_side.done, 0);
	send_data(big + HEAD_MAX / 2, HEAD_MAX / 2);
	assert_int_equal(ag_side.done, 1);
	assert_string_equal(ag_side.end, "rejected:head_too_large");
	assert_string_equal(gw_side.close_code, "head_too_large");
	free(big);
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_heads_whole, setup, teardown),
		cmocka_unit_test_setup_teardown(test_heads_cut, setup, teardown),
		cmocka_unit_test_setup_teardown(test_socket_short, setup, teardown),
		cmocka_unit_test_setup_teardown(test_rejects, setup, teardown),
		cmocka_unit_test_setup_teardown(test_reject_bad_head, setup, teardown),
		cmocka_unit_test_setup_teardown(test_reject_head_too_large, setup, teardown),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
