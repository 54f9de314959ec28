/*
 * test_wsclient.c: the WebSocket client (common/wsclient.c, wsframe.c).
 *
 * ws_parse_header is held to RFC 6455 for every length encoding, both mask
 * settings, every protocol error it promises to report, and every
 * incomplete prefix of a valid header; ws_mask and ws_mask_copy must equal
 * a byte-by-byte reference for every length up to 100, every phase and
 * every alignment, without touching a byte outside the range.
 *
 * The client itself runs against a scripted server on loopback (plain
 * ws://, same event loop): upgrade checks, refusals and their reasons,
 * whole and fragmented messages, ping, close in both directions, protocol
 * errors, backpressure, and wsface_free from inside callbacks.
 *
 * Turns (wsturn.h): a server whose frames fill a read gets a turn of the
 * loop like any other connection on it, not the loop, and every message
 * still arrives, in order, across a pause and across the end of the
 * transport.  wsface_input_pending says 1 while messages wait (for the
 * next turn, the resume, or in the same read) and 0 once all is delivered.
 *
 * wsface_heard_ms moves with every read of the server's bytes, a whole
 * message or not: a frame sent in pieces moves it at each piece before
 * the message is delivered (the agent's keepalive counts it).
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/time.h>

#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/event.h>
#include <event2/listener.h>
#include <openssl/evp.h>
#include <openssl/sha.h>

#include "runtime.h"
#include "wsclient.h"
#include "wsface.h"
#include "wsframe.h"
#include "wshead.h"
#include "wsturn.h"

#define NELEM(a) (sizeof(a) / sizeof((a)[0]))

/* ---- ws_parse_header ------------------------------------------------------ */

/* Builds a header; returns its length. */
static size_t
build_header(uint8_t *b, int fin, int opcode, int masked, uint64_t len,
    const uint8_t mask[4])
{
	size_t n = 2;

	b[0] = (uint8_t)((fin ? 0x80 : 0) | opcode);
	if (len < 126)
		b[1] = (uint8_t)len;
	else if (len <= 0xffff) {
		b[1] = 126;
		b[2] = (uint8_t)(len >> 8);
		b[3] = (uint8_t)len;
		n = 4;
	} else {
		b[1] = 127;
		for (int i = 0; i < 8; i++)
			b[2 + i] = (uint8_t)(len >> (56 - 8 * i));
		n = 10;
	}
	if (masked) {
		b[1] |= 0x80;
		memcpy(b + n, mask, 4);
		n += 4;
	}
	return n;
}

/* Every prefix shorter than the header must ask for more, not fail. */
static void
assert_incomplete_prefixes(const uint8_t *b, size_t n, int expect_masked)
{
	struct ws_frame_header h;
	char err[128];

	for (size_t k = 0; k < n; k++) {
		err[0] = 'x';
		assert_int_equal(ws_parse_header(b, k, expect_masked, &h, err,
		    sizeof(err)), 0);
		assert_int_equal(err[0], '\0');
	}
}

static void
check_valid(int fin, int opcode, int masked, uint64_t len, size_t want_hl)
{
	static const uint8_t mask[4] = { 0xa1, 0x02, 0xf3, 0x44 };
	struct ws_frame_header h;
	uint8_t b[32];
	char err[128];
	size_t n;

	n = build_header(b, fin, opcode, masked, len, mask);
	assert_int_equal(n, want_hl);
	/* Trailing payload bytes must not change the answer. */
	memset(b + n, 0xee, sizeof(b) - n);
	memset(&h, 0x55, sizeof(h));
	assert_int_equal(ws_parse_header(b, sizeof(b), masked, &h, err,
	    sizeof(err)), (int)n);
	assert_int_equal(h.fin, fin);
	assert_int_equal(h.opcode, opcode);
	assert_int_equal(h.masked, masked);
	assert_true(h.payload_len == len);
	if (masked)
		assert_memory_equal(h.mask, mask, 4);
	/* Exactly the header is enough. */
	assert_int_equal(ws_parse_header(b, n, masked, &h, err, sizeof(err)),
	    (int)n);
	assert_incomplete_prefixes(b, n, masked);
}

static void
test_header_lengths(void **state)
{
	static const struct {
		uint64_t len;
		size_t hl;
	} cases[] = {
		{ 0, 2 }, { 1, 2 }, { 125, 2 },
		{ 126, 4 }, { 127, 4 }, { 65535, 4 },
		{ 65536, 10 }, { 0xffffffffULL, 10 }, { 0x100000000ULL, 10 },
		{ 0x7fffffffffffffffULL, 10 },
	};
	static const int data_ops[] = { 0x0, 0x1, 0x2 };

	for (size_t i = 0; i < NELEM(cases); i++) {
		for (size_t o = 0; o < NELEM(data_ops); o++) {
			for (int fin = 0; fin <= 1; fin++) {
				check_valid(fin, data_ops[o], 0, cases[i].len,
				    cases[i].hl);
				check_valid(fin, data_ops[o], 1, cases[i].len,
				    cases[i].hl + 4);
			}
		}
	}
}

static void
test_header_control(void **state)
{
	static const int ops[] = { 0x8, 0x9, 0xa };
	static const uint64_t lens[] = { 0, 2, 125 };

	for (size_t o = 0; o < NELEM(ops); o++)
		for (size_t l = 0; l < NELEM(lens); l++) {
			check_valid(1, ops[o], 0, lens[l], 2);
			check_valid(1, ops[o], 1, lens[l], 6);
		}
}

/* A length encoded in more bytes than needed is legal to parse. */
static void
test_header_nonminimal(void **state)
{
	struct ws_frame_header h;
	uint8_t b16[] = { 0x82, 126, 0x00, 0x05 };
	uint8_t b64[] = { 0x82, 127, 0, 0, 0, 0, 0, 0, 0x01, 0x00 };
	char err[128];

	assert_int_equal(ws_parse_header(b16, sizeof(b16), 0, &h, err,
	    sizeof(err)), 4);
	assert_true(h.payload_len == 5);
	assert_int_equal(ws_parse_header(b64, sizeof(b64), 0, &h, err,
	    sizeof(err)), 10);
	assert_true(h.payload_len == 256);
}

static void
expect_error(const uint8_t *b, size_t n, int expect_masked, const char *word)
{
	struct ws_frame_header h;
	char err[128];

	err[0] = '\0';
	assert_int_equal(ws_parse_header(b, n, expect_masked, &h, err,
	    sizeof(err)), -1);
	if (strstr(err, word) == NULL)
		fail_msg("error \"%s\" does not mention \"%s\"", err, word);
	/* No err buffer at all must be fine too. */
	assert_int_equal(ws_parse_header(b, n, expect_masked, &h, NULL, 0), -1);
}

static void
test_header_errors(void **state)
{
	uint8_t b[16];

	/* Reserved bits, each alone: refused from the first byte. */
	for (int bit = 0x10; bit <= 0x40; bit <<= 1) {
		b[0] = (uint8_t)(0x82 | bit);
		b[1] = 0;
		expect_error(b, 1, 0, "reserved");
		expect_error(b, 2, 0, "reserved");
	}
	/* Unknown opcodes. */
	for (int op = 0x3; op <= 0xf; op++) {
		if (op >= 0x8 && op <= 0xa)
			continue;
		b[0] = (uint8_t)(0x80 | op);
		b[1] = 0;
		expect_error(b, 1, 0, "opcode");
		expect_error(b, 2, 0, "opcode");
	}
	/* Fragmented control frames. */
	for (int op = 0x8; op <= 0xa; op++) {
		b[0] = (uint8_t)op;
		b[1] = 0;
		expect_error(b, 1, 0, "fragmented control");
	}
	/* Mask bit not as expected, either way. */
	b[0] = 0x82;
	b[1] = 0x80 | 5;
	expect_error(b, 2, 0, "masked frame from the server");
	b[1] = 5;
	expect_error(b, 2, 1, "unmasked frame from the client");
	/* Control frames over 125 bytes, in each length encoding. */
	for (int op = 0x8; op <= 0xa; op++) {
		b[0] = (uint8_t)(0x80 | op);
		b[1] = 126;
		expect_error(b, 2, 0, "longer than 125");
		b[1] = 127;
		expect_error(b, 2, 0, "longer than 125");
	}
	/* 64-bit length with the top bit set: seen from its first byte. */
	memset(b, 0, sizeof(b));
	b[0] = 0x82;
	b[1] = 127;
	b[2] = 0x80;
	expect_error(b, 3, 0, "most significant bit");
	expect_error(b, 10, 0, "most significant bit");
	b[1] = 0x80 | 127;
	expect_error(b, 14, 1, "most significant bit");
}

static void
test_header_empty(void **state)
{
	struct ws_frame_header h;
	char err[8] = "x";

	assert_int_equal(ws_parse_header(NULL, 0, 0, &h, err, sizeof(err)), 0);
	assert_int_equal(err[0], '\0');
}

/* ---- ws_mask ------------------------------------------------------------- */

static void
reference_mask(uint8_t *d, size_t len, const uint8_t mask[4], size_t phase)
{
	for (size_t i = 0; i < len; i++)
		d[i] ^= mask[(phase + i) % 4];
}

static void
test_mask(void **state)
{
	static const uint8_t mask[4] = { 0x12, 0x9a, 0xff, 0x01 };
	uint8_t buf[128 + 16], want[128 + 16], src[128 + 16], dst[128 + 16];

	for (size_t len = 0; len <= 100; len++)
		for (size_t phase = 0; phase < 4; phase++)
			for (size_t off = 0; off < 8; off++) {
				for (size_t i = 0; i < sizeof(buf); i++)
					buf[i] = src[i] = (uint8_t)(i * 31 + len);
				memcpy(want, buf, sizeof(buf));
				reference_mask(want + off, len, mask, phase);

				/* In place, at every alignment. */
				assert_int_equal(ws_mask(buf + off, len, mask,
				    phase), (phase + len) % 4);
				assert_memory_equal(buf, want, sizeof(buf));

				/* Copying, source and destination at
				 * different alignments. */
				memset(dst, 0xcc, sizeof(dst));
				assert_int_equal(ws_mask_copy(dst + (7 - off),
				    src + off, len, mask, phase), (phase + len) % 4);
				assert_memory_equal(dst + (7 - off), want + off, len);
				for (size_t i = 0; i < 7 - off; i++)
					assert_int_equal(dst[i], 0xcc);
				for (size_t i = 7 - off + len; i < sizeof(dst); i++)
					assert_int_equal(dst[i], 0xcc);
			}
}

/* Masking in pieces continues the phase: the result equals one pass. */
static void
test_mask_pieces(void **state)
{
	static const uint8_t mask[4] = { 0xde, 0xad, 0xbe, 0xef };
	uint8_t a[1000], b[1000];
	size_t phase = 0, done = 0, step = 1;

	for (size_t i = 0; i < sizeof(a); i++)
		a[i] = b[i] = (uint8_t)(i ^ (i >> 3));
	reference_mask(a, sizeof(a), mask, 0);
	while (done < sizeof(b)) {
		size_t n = step < sizeof(b) - done ? step : sizeof(b) - done;
		phase = ws_mask(b + done, n, mask, phase);
		done += n;
		step = step * 3 % 37 + 1;
	}
	assert_memory_equal(a, b, sizeof(a));
}

/* ---- the client against a scripted server ------------------------------ */

#define GUID "258EAFA5-E914-47DA-95CA-C5AB0DC85B11"

struct got_frame {
	int opcode;
	size_t len;
	uint8_t data[256];
};

struct server {
	struct event_base *base;
	struct evconnlistener *lis;
	struct bufferevent *bev;
	int port;
	/* Script. */
	const char *response;      /* literal response; NULL: a good 101 */
	const char *protocol;      /* Sec-WebSocket-Protocol to answer */
	int bad_accept;
	int echo_close;            /* answer a client close with a close */
	void (*after_upgrade)(struct server *);
	/* Record. */
	int upgraded;
	char request[4096];
	struct got_frame frames[16];
	int nframes;
	size_t bytes_in;           /* payload bytes received */
};

struct client {
	struct event_base *base;
	struct wsface *c;
	int opened, closed, status;
	char reason[256];
	int nmsg;
	size_t lens[32];
	int binary[32];
	uint8_t *msgs[32];
	int drains;
	int pings;                   /* on_ping calls */
	int free_in_message;       /* wsface_free in the first on_message */
	int pause_in_open;
	int close_in_open;
	int free_in_open;
	int paused_now;
	int msgs_while_paused;
	size_t max_queue;          /* wsclient_config.max_queue (0: default) */
	uint32_t retry_after_ms;   /* wsclient_config.retry_after_ms */
	/* A flood (flood_message): messages counted, not kept. */
	int flood;
	uint32_t flood_got;        /* messages delivered */
	uint32_t flood_in_order;   /* those whose payload was the next index */
	int other_fd;              /* written at the first message (-1: none) */
	long other_saw;            /* flood_got when the other socket ran; -1 */
	uint32_t pause_at;         /* pause after this many (0: never) */
	struct event *resume;      /* then resumes from this timer */
	/* wsface_input_pending: in the first on_message (not a flood), in
	 * the other socket's callback (between two turns), and just before
	 * the resume (messages held while paused); -1 until asked. */
	int pending_first, pending_between, pending_paused;
};

static struct server srv;
static struct client cli;

static void
server_raw(const void *p, size_t n)
{
	assert_int_equal(bufferevent_write(srv.bev, p, n), 0);
}

static void
server_frame(int fin, int opcode, const void *data, size_t len)
{
	uint8_t h[16];
	size_t n = build_header(h, fin, opcode, 0, len, NULL);

	server_raw(h, n);
	if (len > 0)
		server_raw(data, len);
}

static void
server_close_frame(uint16_t code, const char *reason)
{
	uint8_t b[128];
	size_t n = strlen(reason);

	b[0] = (uint8_t)(code >> 8);
	b[1] = (uint8_t)code;
	memcpy(b + 2, reason, n);
	server_frame(1, 0x8, b, 2 + n);
}

static void
key_accept(const char *req, char out[64])
{
	const char *k = strcasestr(req, "Sec-WebSocket-Key:");
	unsigned char sha[SHA_DIGEST_LENGTH];
	char buf[128];
	size_t n;

	assert_non_null(k);
	k += strlen("Sec-WebSocket-Key:");
	k += strspn(k, " ");
	n = strcspn(k, "\r");
	assert_int_equal(n, 24);
	snprintf(buf, sizeof(buf), "%.*s%s", (int)n, k, GUID);
	SHA1((unsigned char *)buf, strlen(buf), sha);
	EVP_EncodeBlock((unsigned char *)out, sha, sizeof(sha));
}

static void
server_upgrade(struct evbuffer *in)
{
	struct evbuffer_ptr end = evbuffer_search(in, "\r\n\r\n", 4, NULL);
	char accept[64];

	if (end.pos < 0)
		return;
	assert_true((size_t)end.pos + 4 < sizeof(srv.request));
	evbuffer_remove(in, srv.request, (size_t)end.pos + 4);
	srv.request[end.pos + 4] = '\0';
	srv.upgraded = 1;
	if (srv.response != NULL)
		server_raw(srv.response, strlen(srv.response));
	else {
		key_accept(srv.request, accept);
		if (srv.bad_accept)
			accept[0] ^= 1;
		evbuffer_add_printf(bufferevent_get_output(srv.bev),
		    "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\n"
		    "Connection: Upgrade\r\nSec-WebSocket-Accept: %s\r\n", accept);
		if (srv.protocol != NULL)
			evbuffer_add_printf(bufferevent_get_output(srv.bev),
			    "Sec-WebSocket-Protocol: %s\r\n", srv.protocol);
		server_raw("\r\n", 2);
	}
	if (srv.after_upgrade != NULL)
		srv.after_upgrade(&srv);
}

/* Frames from the client: masked, recorded unmasked. */
static void
server_frames(struct evbuffer *in)
{
	for (;;) {
		size_t avail = evbuffer_get_length(in), n = avail < 14 ? avail : 14;
		struct ws_frame_header h;
		char err[128];
		uint8_t *p;
		int hl;

		if (avail < 2)
			return;
		p = evbuffer_pullup(in, (ev_ssize_t)n);
		hl = ws_parse_header(p, n, 1, &h, err, sizeof(err));
		if (hl < 0)
			fail_msg("client sent a bad frame: %s", err);
		if (hl == 0 || avail < hl + h.payload_len)
			return;
		p = evbuffer_pullup(in, (ev_ssize_t)(hl + h.payload_len));
		ws_mask(p + hl, h.payload_len, h.mask, 0);
		srv.bytes_in += h.payload_len;
		if (srv.nframes < (int)NELEM(srv.frames)) {
			struct got_frame *g = &srv.frames[srv.nframes++];
			g->opcode = h.opcode;
			g->len = h.payload_len;
			memcpy(g->data, p + hl, h.payload_len < sizeof(g->data) ?
			    h.payload_len : sizeof(g->data));
		}
		if (h.opcode == 0x8 && srv.echo_close)
			server_frame(1, 0x8, p + hl, h.payload_len);
		evbuffer_drain(in, hl + h.payload_len);
	}
}

static void
server_read(struct bufferevent *bev, void *arg)
{
	struct evbuffer *in = bufferevent_get_input(bev);

	if (!srv.upgraded)
		server_upgrade(in);
	if (srv.upgraded && srv.response == NULL)
		server_frames(in);
}

static void
server_event(struct bufferevent *bev, short what, void *arg)
{
	if (what & (BEV_EVENT_EOF | BEV_EVENT_ERROR)) {
		bufferevent_free(srv.bev);
		srv.bev = NULL;
	}
}

static void
server_accept(struct evconnlistener *lis, evutil_socket_t fd,
    struct sockaddr *sa, int salen, void *arg)
{
	assert_null(srv.bev);
	srv.bev = bufferevent_socket_new(srv.base, fd, BEV_OPT_CLOSE_ON_FREE);
	assert_non_null(srv.bev);
	bufferevent_setcb(srv.bev, server_read, NULL, server_event, NULL);
	bufferevent_enable(srv.bev, EV_READ | EV_WRITE);
}

/* Closes the server's side once what it queued is written. */
static void
server_hangup_written(struct bufferevent *bev, void *arg)
{
	if (evbuffer_get_length(bufferevent_get_output(bev)) == 0) {
		bufferevent_free(srv.bev);
		srv.bev = NULL;
	}
}

static void
server_hangup(void)
{
	bufferevent_setcb(srv.bev, server_read, server_hangup_written,
	    server_event, NULL);
	bufferevent_disable(srv.bev, EV_READ);
}

static void
on_open(struct wsface *c, void *arg)
{
	cli.opened++;
	if (cli.pause_in_open) {
		wsface_pause_reading(c, 1);
		cli.paused_now = 1;
	}
	if (cli.close_in_open)
		wsface_close(c, 1000, "client done");
	if (cli.free_in_open) {
		wsface_free(c);
		cli.c = NULL;
		event_base_loopexit(cli.base, &(struct timeval){ 0, 100000 });
	}
}

static void flood_message(struct wsface *c, const uint8_t *data, size_t len);

static void
on_message(struct wsface *c, const uint8_t *data, size_t len, int binary,
    void *arg)
{
	int i;

	if (cli.flood) {
		flood_message(c, data, len);
		return;
	}
	i = cli.nmsg++;

	assert_true(i < (int)NELEM(cli.msgs));
	if (i == 0)
		cli.pending_first = wsface_input_pending(c);
	if (cli.paused_now)
		cli.msgs_while_paused++;
	cli.lens[i] = len;
	cli.binary[i] = binary;
	cli.msgs[i] = malloc(len ? len : 1);
	assert_non_null(cli.msgs[i]);
	memcpy(cli.msgs[i], data, len);
	if (cli.free_in_message) {
		wsface_free(c);
		cli.c = NULL;
		event_base_loopexit(cli.base, &(struct timeval){ 0, 100000 });
	}
}

static void
on_drain(struct wsface *c, void *arg)
{
	cli.drains++;
}

static void
on_ping(struct wsface *c, void *arg)
{
	cli.pings++;
}

static void
on_close(struct wsface *c, int status, const char *reason, void *arg)
{
	assert_int_equal(cli.closed, 0);
	cli.closed++;
	cli.status = status;
	snprintf(cli.reason, sizeof(cli.reason), "%s", reason);
	cli.c = NULL;      /* freed when this returns (wsface.h) */
	/* Let the server see the end of the connection before stopping. */
	event_base_loopexit(cli.base, &(struct timeval){ 0, 20000 });
}

static const struct wsface_handlers callbacks = {
	.on_open = on_open, .on_message = on_message, .on_drain = on_drain,
	.on_close = on_close, .on_ping = on_ping,
};

static int
setup(void **state)
{
	struct sockaddr_in sin;
	socklen_t sl = sizeof(sin);

	memset(&srv, 0, sizeof(srv));
	memset(&cli, 0, sizeof(cli));
	cli.pending_first = cli.pending_between = cli.pending_paused = -1;
	srv.base = cli.base = event_base_new();
	assert_non_null(srv.base);
	memset(&sin, 0, sizeof(sin));
	sin.sin_family = AF_INET;
	sin.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	srv.lis = evconnlistener_new_bind(srv.base, server_accept, NULL,
	    LEV_OPT_CLOSE_ON_FREE | LEV_OPT_REUSEABLE, 8,
	    (struct sockaddr *)&sin, sizeof(sin));
	assert_non_null(srv.lis);
	getsockname(evconnlistener_get_fd(srv.lis), (struct sockaddr *)&sin, &sl);
	srv.port = ntohs(sin.sin_port);
	srv.echo_close = 1;
	return 0;
}

static int
teardown(void **state)
{
	if (cli.c != NULL)
		wsface_free(cli.c);
	for (int i = 0; i < cli.nmsg; i++)
		free(cli.msgs[i]);
	if (srv.bev != NULL)
		bufferevent_free(srv.bev);
	evconnlistener_free(srv.lis);
	runtime_drain(srv.base);   /* a freed client's memory goes from the loop */
	event_base_free(srv.base);
	return 0;
}

/* Connects to the scripted server and runs the loop until on_close (or
 * the safety timeout). */
static void
run_client(const char *path, const char *subprotocol, size_t max_message,
    size_t low_water)
{
	struct wsclient_config cfg = { 0 };
	char url[128], err[256];

	snprintf(url, sizeof(url), "ws://127.0.0.1:%d%s", srv.port, path);
	cfg.url = url;
	cfg.subprotocol = subprotocol;
	cfg.bearer_token = "tok123";
	cfg.max_message = max_message;
	cfg.low_water = low_water;
	cfg.max_queue = cli.max_queue;
	cfg.connect_timeout_ms = 3000;
	cfg.retry_after_ms = &cli.retry_after_ms;
	cli.c = wsclient_connect(cli.base, &cfg, &callbacks, NULL, err, sizeof(err));
	if (cli.c == NULL)
		fail_msg("wsclient_connect: %s", err);
	event_base_loopexit(cli.base, &(struct timeval){ 10, 0 });
	event_base_dispatch(cli.base);
}

static uint8_t big[200000];

static void
script_messages(struct server *s)
{
	static const uint8_t ping[] = "are you there";

	for (size_t i = 0; i < sizeof(big); i++)
		big[i] = (uint8_t)(i * 7 + (i >> 9));
	server_frame(1, 0x2, big, sizeof(big));          /* 64-bit length */
	server_frame(1, 0x1, "hello", 5);                /* text */
	server_frame(0, 0x2, "frag", 4);                 /* fragmented ... */
	server_frame(1, 0x9, ping, sizeof(ping) - 1);    /* ... a ping inside */
	server_frame(0, 0x0, "ment", 4);
	server_frame(1, 0x0, "ed!", 3);
	server_frame(1, 0x2, NULL, 0);                   /* empty message */
	server_frame(1, 0xa, "unsolicited", 11);         /* a pong: ignored */
	server_close_frame(1000, "bye now");
}

static void
test_client_messages(void **state)
{
	srv.protocol = "tether.v1";
	srv.after_upgrade = script_messages;
	run_client("/v1/connect?x=1", "tether.v1", 0, 0);

	/* The request. */
	assert_non_null(strstr(srv.request, "GET /v1/connect?x=1 HTTP/1.1\r\n"));
	assert_non_null(strcasestr(srv.request, "\r\nHost: 127.0.0.1:"));
	assert_non_null(strcasestr(srv.request, "\r\nUpgrade: websocket\r\n"));
	assert_non_null(strcasestr(srv.request, "\r\nSec-WebSocket-Version: 13\r\n"));
	assert_non_null(strcasestr(srv.request, "\r\nSec-WebSocket-Protocol: tether.v1\r\n"));
	assert_non_null(strcasestr(srv.request, "\r\nAuthorization: Bearer tok123\r\n"));

	assert_int_equal(cli.opened, 1);
	assert_int_equal(cli.nmsg, 4);
	assert_int_equal(cli.lens[0], sizeof(big));
	assert_memory_equal(cli.msgs[0], big, sizeof(big));
	assert_true(cli.binary[0]);
	assert_int_equal(cli.lens[1], 5);
	assert_memory_equal(cli.msgs[1], "hello", 5);
	assert_false(cli.binary[1]);
	assert_int_equal(cli.lens[2], 11);
	assert_memory_equal(cli.msgs[2], "fragmented!", 11);
	assert_true(cli.binary[2]);
	assert_int_equal(cli.lens[3], 0);

	/* The pong echoed the ping (on_ping told of it once, the pong not);
	 * the close was echoed with its code. */
	assert_int_equal(cli.pings, 1);
	assert_int_equal(srv.nframes, 2);
	assert_int_equal(srv.frames[0].opcode, 0xa);
	assert_int_equal(srv.frames[0].len, 13);
	assert_memory_equal(srv.frames[0].data, "are you there", 13);
	assert_int_equal(srv.frames[1].opcode, 0x8);
	assert_int_equal(srv.frames[1].len, 2);
	assert_int_equal(srv.frames[1].data[0] << 8 | srv.frames[1].data[1], 1000);

	assert_int_equal(cli.closed, 1);
	assert_int_equal(cli.status, 101);
	assert_string_equal(cli.reason, "bye now");
}

/* A server that pings without reading: the PONGs it earns count against
 * the client's output cap, and the client hangs up once they reach it. */
static void
script_ping_flood(struct server *s)
{
	uint8_t payload[125];

	memset(payload, 'p', sizeof(payload));
	bufferevent_disable(s->bev, EV_READ);
	for (int i = 0; i < 200000; i++)     /* 25 MiB of pings */
		server_frame(1, 0x9, payload, sizeof(payload));
}

static void
test_client_ping_flood(void **state)
{
	srv.after_upgrade = script_ping_flood;
	cli.max_queue = 64 * 1024;
	run_client("/", NULL, 0, 0);
	assert_int_equal(cli.closed, 1);
	assert_int_equal(cli.status, 0);
	assert_non_null(strstr(cli.reason, "does not read: output queue over 65536 bytes"));
}

/* A message bigger than the input's high-water mark (4 MiB) must still
 * arrive whole, not stall with the reading suspended. */
static uint8_t *huge;
#define HUGE_LEN ((size_t)9 * 1024 * 1024 + 123)

static void
script_huge(struct server *s)
{
	server_frame(1, 0x2, huge, HUGE_LEN);
	server_frame(1, 0x2, "after", 5);
	server_close_frame(1000, "big done");
}

static void
test_client_huge_message(void **state)
{
	huge = malloc(HUGE_LEN);
	assert_non_null(huge);
	for (size_t i = 0; i < HUGE_LEN; i++)
		huge[i] = (uint8_t)(i * 131 + (i >> 13));
	srv.after_upgrade = script_huge;
	run_client("/", NULL, 16 * 1024 * 1024, 0);
	assert_int_equal(cli.nmsg, 2);
	assert_int_equal(cli.lens[0], HUGE_LEN);
	assert_memory_equal(cli.msgs[0], huge, HUGE_LEN);
	assert_int_equal(cli.lens[1], 5);
	assert_int_equal(cli.status, 101);
	assert_string_equal(cli.reason, "big done");
	free(huge);
}

/* wsface_send_buffer: a prefix, then the first n bytes of an evbuffer of
 * two chains (the second cut), then of more chains than one frame masks
 * piece by piece (pulled up): each one binary message, what was sent gone
 * from the evbuffer. */
static void
send_buffers(struct wsface *c)
{
	struct evbuffer *src = evbuffer_new();

	assert_non_null(src);
	evbuffer_add_reference(src, "0123456789", 10, NULL, NULL);
	evbuffer_add_reference(src, "abcdefghij", 10, NULL, NULL);
	assert_int_equal(evbuffer_peek(src, -1, NULL, NULL, 0), 2);
	assert_int_equal(wsface_send_buffer(c, (const uint8_t *)"pre:", 4, src, 15), 0);
	assert_int_equal(evbuffer_get_length(src), 5);
	evbuffer_drain(src, 5);
	for (int i = 0; i < 20; i++)
		evbuffer_add_reference(src, "xyz", 3, NULL, NULL);
	assert_int_equal(evbuffer_peek(src, -1, NULL, NULL, 0), 20);
	assert_int_equal(wsface_send_buffer(c, NULL, 0, src, 60), 0);
	assert_int_equal(evbuffer_get_length(src), 0);
	/* More than src holds: refused, src untouched. */
	evbuffer_add(src, "q", 1);
	assert_int_equal(wsface_send_buffer(c, NULL, 0, src, 2), -1);
	assert_int_equal(evbuffer_get_length(src), 1);
	evbuffer_free(src);
}

/* Sending: iovecs concatenated and masked; large messages; on_drain. */
static void
send_in_open(struct wsface *c, void *arg)
{
	struct iovec iov[3] = {
		{ (void *)"head-", 5 }, { big, 70000 }, { (void *)"-tail", 5 },
	};

	cli.opened++;
	for (size_t i = 0; i < sizeof(big); i++)
		big[i] = (uint8_t)(i * 13 + 1);
	assert_int_equal(wsface_sendv(c, iov, 3, 1), 0);
	assert_int_equal(wsface_send(c, (const uint8_t *)"abc", 3, 0), 0);
	assert_int_equal(wsface_send(c, NULL, 0, 1), 0);
	assert_true(wsface_pending(c) > 70000);
	send_buffers(c);
}

/* Written down to the low-water mark: close. */
static void
close_in_drain(struct wsface *c, void *arg)
{
	assert_true(wsface_pending(c) <= 1024);
	if (cli.drains++ > 0)
		return;
	wsface_close(c, 4000, "done sending");
	/* After close nothing more can be sent. */
	assert_int_equal(wsface_send(c, (const uint8_t *)"x", 1, 1), -1);
}

static void
test_client_send(void **state)
{
	struct wsface_handlers cb = callbacks;
	struct wsclient_config cfg = { 0 };
	char url[128], err[256];

	cb.on_open = send_in_open;
	cb.on_drain = close_in_drain;
	snprintf(url, sizeof(url), "ws://127.0.0.1:%d/", srv.port);
	cfg.url = url;
	cfg.low_water = 1024;
	cli.c = wsclient_connect(cli.base, &cfg, &cb, NULL, err, sizeof(err));
	assert_non_null(cli.c);
	event_base_loopexit(cli.base, &(struct timeval){ 10, 0 });
	event_base_dispatch(cli.base);

	assert_int_equal(srv.nframes, 6);
	assert_int_equal(srv.frames[0].opcode, 0x2);
	assert_int_equal(srv.frames[0].len, 70010);
	assert_memory_equal(srv.frames[0].data, "head-", 5);
	assert_memory_equal(srv.frames[0].data + 5, big, sizeof(srv.frames[0].data) - 5);
	assert_int_equal(srv.frames[1].opcode, 0x1);
	assert_memory_equal(srv.frames[1].data, "abc", 3);
	assert_int_equal(srv.frames[2].len, 0);
	assert_int_equal(srv.frames[3].opcode, 0x2);
	assert_int_equal(srv.frames[3].len, 19);
	assert_memory_equal(srv.frames[3].data, "pre:0123456789abcde", 19);
	assert_int_equal(srv.frames[4].opcode, 0x2);
	assert_int_equal(srv.frames[4].len, 60);
	for (int i = 0; i < 20; i++)
		assert_memory_equal(srv.frames[4].data + 3 * i, "xyz", 3);
	assert_int_equal(srv.frames[5].opcode, 0x8);
	assert_int_equal(srv.frames[5].data[0] << 8 | srv.frames[5].data[1], 4000);
	assert_memory_equal(srv.frames[5].data + 2, "done sending", 12);
	assert_true(cli.drains >= 1);
	/* The server answered our close: a clean close. */
	assert_int_equal(cli.status, 101);
}

/* Our close, and a server that never answers it: still closes. */
static void
test_client_close_unanswered(void **state)
{
	srv.echo_close = 0;
	cli.close_in_open = 1;
	run_client("/", NULL, 0, 0);
	assert_int_equal(cli.closed, 1);
	assert_int_equal(cli.status, 101);
	assert_string_equal(cli.reason, "client done");
	assert_int_equal(srv.nframes, 1);
	assert_int_equal(srv.frames[0].opcode, 0x8);
}

static void
expect_refusal(const char *response, int status, const char *reason)
{
	srv.response = response;
	run_client("/v1/nothing", "tether.v1", 0, 0);
	assert_int_equal(cli.opened, 0);
	assert_int_equal(cli.closed, 1);
	assert_int_equal(cli.status, status);
	assert_string_equal(cli.reason, reason);
}

static void
test_refused_json(void **state)
{
	expect_refusal("HTTP/1.1 404 Not Found\r\nContent-Type: application/json\r\n"
	    "Content-Length: 33\r\n\r\n{\"error\":\"no such thing\",\"x\":1}\n\n",
	    404, "no such thing");
}

static void
test_refused_text(void **state)
{
	expect_refusal("HTTP/1.1 403 Forbidden\r\nContent-Length: 25\r\n\r\n"
	    "\n  go away\r\nsecond line\r\n", 403, "go away");
}

static void
test_refused_empty(void **state)
{
	expect_refusal("HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\n\r\n",
	    400, "HTTP/1.1 400 Bad Request");
}

/* A refusal's Retry-After (delta seconds) reaches the caller in ms, capped;
 * an HTTP date or a malformed value leaves it alone (docs/0035). */
static void
expect_retry_after(const char *header, uint32_t ms)
{
	static char response[256];

	snprintf(response, sizeof(response), "HTTP/1.1 503 Service Unavailable\r\n"
	    "%s\r\nContent-Length: 0\r\n\r\n", header);
	cli.retry_after_ms = 0;
	expect_refusal(response, 503, "HTTP/1.1 503 Service Unavailable");
	assert_int_equal(cli.retry_after_ms, ms);
}

static void
test_refused_retry_after(void **state)
{
	expect_retry_after("Retry-After: 7", 7000);
}

static void
test_refused_retry_after_capped(void **state)
{
	expect_retry_after("retry-after:  99999999999 ", WS_RETRY_AFTER_MAX_S * 1000);
}

static void
test_refused_retry_after_date(void **state)
{
	expect_retry_after("Retry-After: Wed, 21 Oct 2015 07:28:00 GMT", 0);
}

static void
test_refused_retry_after_malformed(void **state)
{
	expect_retry_after("Retry-After: -3", 0);
}

static void
test_refused_retry_after_none(void **state)
{
	expect_retry_after("X-Other: 3", 0);
}

/* Content-Length bounds the body: bytes beyond it are not the reason. */
static void
test_refused_length_bound(void **state)
{
	expect_refusal("HTTP/1.1 401 Unauthorized\r\nContent-Length: 4\r\n\r\n"
	    "nopeEXTRA", 401, "nope");
}

/* Neither length nor chunking: the body ends with the connection. */
static void
script_hangup(struct server *s)
{
	server_hangup();
}

static void
test_refused_until_eof(void **state)
{
	srv.after_upgrade = script_hangup;
	expect_refusal("HTTP/1.0 503 Service Unavailable\r\n\r\n"
	    "{\"error\":\"draining\"}", 503, "draining");
}

/* Neither, and no hang-up: the connect timeout ends the wait, and the
 * reason is what arrived. */
static void
test_refused_body_timeout(void **state)
{
	struct timeval t0, t1;

	gettimeofday(&t0, NULL);
	expect_refusal("HTTP/1.1 502 Bad Gateway\r\n\r\nupstream down\n",
	    502, "upstream down");
	gettimeofday(&t1, NULL);
	assert_true(t1.tv_sec - t0.tv_sec < 9); /* the 3 s connect timeout */
}

static void
test_refused_chunked(void **state)
{
	expect_refusal("HTTP/1.1 429 Too Many\r\nTransfer-Encoding: chunked\r\n\r\n"
	    "8\r\n{\"error\"\r\n9\r\n:\"slow\"}\n\r\n0\r\n\r\n", 429, "slow");
}

static void
test_bad_accept(void **state)
{
	srv.bad_accept = 1;
	run_client("/", NULL, 0, 0);
	assert_int_equal(cli.opened, 0);
	assert_int_equal(cli.status, 0);
	assert_non_null(strstr(cli.reason, "Sec-WebSocket-Accept"));
}

static void
test_subprotocol_refused(void **state)
{
	srv.protocol = NULL;
	run_client("/", "tether.v1", 0, 0);
	assert_int_equal(cli.opened, 0);
	assert_non_null(strstr(cli.reason, "subprotocol tether.v1"));
}

static void
test_subprotocol_unasked(void **state)
{
	srv.protocol = "other";
	run_client("/", NULL, 0, 0);
	assert_int_equal(cli.opened, 0);
	assert_non_null(strstr(cli.reason, "subprotocol"));
}

static void
test_malformed_response(void **state)
{
	srv.response = "SSH-2.0-OpenSSH\r\n\r\n";
	run_client("/", NULL, 0, 0);
	assert_int_equal(cli.status, 0);
	assert_non_null(strstr(cli.reason, "malformed"));
}

/* Protocol errors after open: a close with the right code, then on_close. */
static const uint8_t *bad_bytes;
static size_t bad_len;

static void
script_bad(struct server *s)
{
	server_frame(1, 0x2, "ok", 2);
	server_raw(bad_bytes, bad_len);
}

static void
expect_protocol_error(const uint8_t *bytes, size_t len, size_t max_message,
    uint16_t code, const char *word)
{
	bad_bytes = bytes;
	bad_len = len;
	srv.after_upgrade = script_bad;
	run_client("/", NULL, max_message, 0);
	assert_int_equal(cli.nmsg, 1);
	assert_int_equal(cli.closed, 1);
	assert_int_equal(cli.status, 0);
	if (strstr(cli.reason, word) == NULL)
		fail_msg("reason \"%s\" does not mention \"%s\"", cli.reason, word);
	assert_int_equal(srv.nframes, 1);
	assert_int_equal(srv.frames[0].opcode, 0x8);
	assert_int_equal(srv.frames[0].data[0] << 8 | srv.frames[0].data[1], code);
}

static void
test_error_masked(void **state)
{
	static const uint8_t b[] = { 0x82, 0x82, 1, 2, 3, 4, 'h', 'i' };
	expect_protocol_error(b, sizeof(b), 0, 1002, "masked");
}

static void
test_error_reserved(void **state)
{
	static const uint8_t b[] = { 0xc2, 0x00 };
	expect_protocol_error(b, sizeof(b), 0, 1002, "reserved");
}

static void
test_error_continuation(void **state)
{
	static const uint8_t b[] = { 0x80, 0x01, 'x' };
	expect_protocol_error(b, sizeof(b), 0, 1002, "continuation");
}

static void
test_error_interleaved(void **state)
{
	static const uint8_t b[] = { 0x02, 0x01, 'x', 0x82, 0x01, 'y' };
	expect_protocol_error(b, sizeof(b), 0, 1002, "fragmented");
}

static void
test_error_too_big(void **state)
{
	static const uint8_t b[] = { 0x82, 126, 0x04, 0x00 }; /* 1024 bytes */
	expect_protocol_error(b, sizeof(b), 1000, 1009, "over 1000 bytes");
}

static void
test_error_too_big_fragments(void **state)
{
	static uint8_t b[2 * (4 + 600)];

	build_header(b, 0, 0x2, 0, 600, NULL);
	build_header(b + 604, 1, 0x0, 0, 600, NULL);
	expect_protocol_error(b, sizeof(b), 1000, 1009, "over 1000 bytes");
}

static void
test_error_close_one_byte(void **state)
{
	static const uint8_t b[] = { 0x88, 0x01, 0x03 };
	expect_protocol_error(b, sizeof(b), 0, 1002, "1-byte");
}

/* The server hangs up after a message, without a close frame. */
static void
script_message_hangup(struct server *s)
{
	server_frame(1, 0x2, "last words", 10);
	server_hangup();
}

static void
test_eof_without_close(void **state)
{
	srv.after_upgrade = script_message_hangup;
	run_client("/", NULL, 0, 0);
	assert_int_equal(cli.nmsg, 1);
	assert_memory_equal(cli.msgs[0], "last words", 10);
	assert_int_equal(cli.status, 0);
	assert_non_null(strstr(cli.reason, "without a close frame"));
}

/* ---- turns: a flooding server shares the loop --------------------------- */

#define FLOOD      2000        /* small frames waiting in one read */
#define TURN_MAX   128         /* what one turn may deliver, with slack */

static void
flood_message(struct wsface *c, const uint8_t *data, size_t len)
{
	uint32_t i;

	if (cli.paused_now)
		cli.msgs_while_paused++;
	if (len == sizeof(i)) {
		memcpy(&i, data, sizeof(i));
		if (i == cli.flood_got)
			cli.flood_in_order++;
	}
	if (cli.flood_got++ == 0 && cli.other_fd >= 0)
		assert_int_equal(write(cli.other_fd, "x", 1), 1);
	if (cli.pause_at != 0 && cli.flood_got == cli.pause_at) {
		struct timeval tv = { 0, 50000 };

		wsface_pause_reading(c, 1);
		cli.paused_now = 1;
		assert_int_equal(evtimer_add(cli.resume, &tv), 0);
	}
}

static void
flood_resume(evutil_socket_t fd, short what, void *arg)
{
	cli.paused_now = 0;
	cli.pending_paused = wsface_input_pending(cli.c);
	wsface_pause_reading(cli.c, 0);
}

static void
other_ready(evutil_socket_t fd, short what, void *arg)
{
	char b;

	assert_int_equal(read(fd, &b, 1), 1);
	cli.other_saw = cli.flood_got;
	cli.pending_between = wsface_input_pending(cli.c);
}

/* FLOOD 4-byte binary messages, the index in each: 12 KB, queued in one
 * go right behind the 101, so the client's first read takes them all. */
static void
server_flood(void)
{
	for (uint32_t i = 0; i < FLOOD; i++)
		server_frame(1, 0x2, &i, sizeof(i));
}

static void
script_flood(struct server *s)
{
	server_flood();
	server_close_frame(1000, "flood done");
}

static void
script_flood_hangup(struct server *s)
{
	server_flood();
	server_hangup();
}

/* Runs the client against script with the flood counters set up and
 * another socket that becomes readable at the first message. */
static void
run_flood(void (*script)(struct server *), uint32_t pause_at)
{
	struct event *other;
	int ot[2];

	assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM, 0, ot), 0);
	cli.flood = 1;
	cli.other_fd = ot[1];
	cli.other_saw = -1;
	cli.pause_at = pause_at;
	assert_non_null(cli.resume = evtimer_new(cli.base, flood_resume, NULL));
	other = event_new(cli.base, ot[0], EV_READ | EV_PERSIST, other_ready, NULL);
	assert_non_null(other);
	assert_int_equal(event_add(other, NULL), 0);
	srv.after_upgrade = script;
	run_client("/", NULL, 0, 0);
	event_free(other);
	event_free(cli.resume);
	close(ot[0]);
	close(ot[1]);
	assert_int_equal(cli.flood_got, FLOOD);
	assert_int_equal(cli.flood_in_order, FLOOD);
}

/* A read parsed whole in one callback delivered all 2,000 messages before
 * anything else on the loop ran; now the other socket, readable since the
 * first message, runs after one turn. */
static void
test_flood_shares_the_loop(void **state)
{
	run_flood(script_flood, 0);
	if (cli.other_saw < 1 || cli.other_saw > TURN_MAX)
		fail_msg("the other socket ran after %ld messages, not within "
		    "a turn (%d)", cli.other_saw, TURN_MAX);
	/* Between the turns the rest is input the owner has not had. */
	assert_int_equal(cli.pending_between, 1);
	assert_int_equal(cli.status, 101);
	assert_string_equal(cli.reason, "flood done");
}

/* The server hangs up right after its flood: the turns go on over what
 * arrived, and the end is told after the last message. */
static void
test_flood_then_hangup(void **state)
{
	run_flood(script_flood_hangup, 0);
	assert_int_equal(cli.status, 0);
	assert_non_null(strstr(cli.reason, "without a close frame"));
}

/* Paused inside a turn (the second): nothing is delivered while paused,
 * everything after the resume, in order. */
static void
test_flood_paused(void **state)
{
	run_flood(script_flood, WS_FRAMES_PER_TURN + 10);
	assert_int_equal(cli.msgs_while_paused, 0);
	assert_int_equal(cli.pending_paused, 1);   /* held while paused */
	assert_int_equal(cli.status, 101);
}

/* Paused in on_open: nothing is delivered until the resume. */
static void
script_three(struct server *s)
{
	server_frame(1, 0x2, "one", 3);
	server_frame(1, 0x2, "two", 3);
	server_frame(1, 0x2, "three", 5);
	server_close_frame(1000, "");
}

static void
resume_cb(evutil_socket_t fd, short what, void *arg)
{
	assert_int_equal(cli.nmsg, 0);
	cli.paused_now = 0;
	wsface_pause_reading(cli.c, 0);
}

static void
test_pause(void **state)
{
	struct event *ev = evtimer_new(cli.base, resume_cb, NULL);
	struct timeval tv = { 0, 200000 };

	assert_non_null(ev);
	evtimer_add(ev, &tv);
	cli.pause_in_open = 1;
	srv.after_upgrade = script_three;
	run_client("/", NULL, 0, 0);
	event_free(ev);
	assert_int_equal(cli.msgs_while_paused, 0);
	assert_int_equal(cli.nmsg, 3);
	assert_memory_equal(cli.msgs[2], "three", 5);
	assert_int_equal(cli.status, 101);
	assert_string_equal(cli.reason, "closed by the server (code 1000)");
}

/* wsface_free inside on_message, with more messages already buffered:
 * no further callbacks, nothing touched after the free (ASan). */
static void
test_free_in_message(void **state)
{
	cli.free_in_message = 1;
	srv.after_upgrade = script_three;
	run_client("/", NULL, 0, 0);
	assert_int_equal(cli.nmsg, 1);
	assert_int_equal(cli.closed, 0);
	/* The two messages after it were read with it: pending. */
	assert_int_equal(cli.pending_first, 1);
}

static void
script_one(struct server *s)
{
	server_frame(1, 0x2, "one", 3);
}

/* The only message, delivered: nothing is pending, in the input, in the
 * socket (wsface_input_pending's poll) or in a turn to come. */
static void
test_input_pending_quiet(void **state)
{
	cli.free_in_message = 1;
	srv.after_upgrade = script_one;
	run_client("/", NULL, 0, 0);
	assert_int_equal(cli.nmsg, 1);
	assert_int_equal(cli.pending_first, 0);
}

static void
test_free_in_open(void **state)
{
	cli.free_in_open = 1;
	srv.after_upgrade = script_three;
	run_client("/", NULL, 0, 0);
	assert_int_equal(cli.opened, 1);
	assert_int_equal(cli.nmsg, 0);
	assert_int_equal(cli.closed, 0);
}

static void
step_limit(evutil_socket_t fd, short what, void *arg)
{
	*(int *)arg = 1;
}

/* Runs the loop a pass at a time until done(), or fails after 5 s (a
 * timer of its own: a pass waits for an event). */
static void
step_until(int (*done)(void))
{
	struct timeval tv = { 5, 0 };
	int over = 0;
	struct event *limit = evtimer_new(cli.base, step_limit, &over);

	assert_non_null(limit);
	assert_int_equal(evtimer_add(limit, &tv), 0);
	while (!done() && !over)
		event_base_loop(cli.base, EVLOOP_ONCE);
	event_free(limit);
	assert_true(done());
}

static int64_t heard_before;

static int
heard_moved(void)
{
	return wsface_heard_ms(cli.c) > heard_before;
}

static int
opened(void)
{
	return cli.opened > 0;
}

static int
got_message(void)
{
	return cli.nmsg > 0;
}

/* Waits for the clock to pass ms: a read after it has a later stamp. */
static void
clock_past(int64_t ms)
{
	struct timespec nap = { 0, 200000 };

	while (runtime_monotonic_ms() <= ms)
		nanosleep(&nap, NULL);
}

/* A 3,000-byte message sent in three pieces, the clock moved on between
 * them: each piece read moves wsface_heard_ms, before the message is
 * whole; the message then arrives whole. */
static void
test_heard_partial_frame(void **state)
{
	struct wsclient_config cfg = { 0 };
	char url[128], err[256];
	uint8_t h[16], payload[3000];
	size_t hl;

	snprintf(url, sizeof(url), "ws://127.0.0.1:%d/", srv.port);
	cfg.url = url;
	cli.c = wsclient_connect(cli.base, &cfg, &callbacks, NULL, err, sizeof(err));
	assert_non_null(cli.c);
	assert_int_equal(wsface_heard_ms(cli.c), 0);       /* nothing read yet */
	step_until(opened);
	memset(payload, 'd', sizeof(payload));
	hl = build_header(h, 1, 0x2, 0, sizeof(payload), NULL);
	for (int piece = 0; piece < 3; piece++) {
		int64_t sent;

		heard_before = wsface_heard_ms(cli.c);
		clock_past(heard_before);
		sent = runtime_monotonic_ms();
		if (piece == 0)
			server_raw(h, hl);
		server_raw(payload + piece * 1000, 1000);
		if (piece < 2) {
			step_until(heard_moved);
			assert_true(wsface_heard_ms(cli.c) >= sent);
			assert_int_equal(cli.nmsg, 0);     /* not whole yet */
			assert_int_equal(wsface_input_pending(cli.c), 1);
		} else {
			step_until(got_message);
			assert_true(wsface_heard_ms(cli.c) >= sent);
		}
	}
	assert_int_equal(cli.nmsg, 1);
	assert_int_equal(cli.lens[0], sizeof(payload));
	assert_memory_equal(cli.msgs[0], payload, sizeof(payload));
}

/* Freed right after connect, before anything happened. */
static void
test_free_at_once(void **state)
{
	struct wsclient_config cfg = { 0 };
	char url[128], err[256];

	snprintf(url, sizeof(url), "ws://127.0.0.1:%d/", srv.port);
	cfg.url = url;
	cli.c = wsclient_connect(cli.base, &cfg, &callbacks, NULL, err, sizeof(err));
	assert_non_null(cli.c);
	wsface_free(cli.c);
	cli.c = NULL;
	event_base_loopexit(cli.base, &(struct timeval){ 0, 100000 });
	event_base_dispatch(cli.base);
	assert_int_equal(cli.closed, 0);
}

/* Freed while a name is being resolved (localhost, from /etc/hosts, may
 * resolve at once: either way nothing may leak or fire). */
static void
test_free_resolving(void **state)
{
	struct wsclient_config cfg = { 0 };
	char url[128], err[256];

	snprintf(url, sizeof(url), "ws://localhost:%d/", srv.port);
	cfg.url = url;
	cli.c = wsclient_connect(cli.base, &cfg, &callbacks, NULL, err, sizeof(err));
	assert_non_null(cli.c);
	wsface_free(cli.c);
	cli.c = NULL;
	event_base_loopexit(cli.base, &(struct timeval){ 0, 100000 });
	event_base_dispatch(cli.base);
	assert_int_equal(cli.closed, 0);
}

/* wsface_close before the upgrade: on_close follows, from the loop. */
static void
test_close_before_open(void **state)
{
	struct wsclient_config cfg = { 0 };
	char url[128], err[256];

	snprintf(url, sizeof(url), "ws://127.0.0.1:%d/", srv.port);
	cfg.url = url;
	cli.c = wsclient_connect(cli.base, &cfg, &callbacks, NULL, err, sizeof(err));
	assert_non_null(cli.c);
	wsface_close(cli.c, 1000, "never mind");
	assert_int_equal(cli.closed, 0); /* not from inside the call */
	event_base_loopexit(cli.base, &(struct timeval){ 5, 0 });
	event_base_dispatch(cli.base);
	assert_int_equal(cli.closed, 1);
	assert_int_equal(cli.status, 0);
	assert_non_null(strstr(cli.reason, "never mind"));
}

static void
test_bad_config(void **state)
{
	static const char *bad[] = {
		"http://example.com/", "wss://", "wss:///path", "wss://[::1/x",
		"wss://[::1]x/", "wss://host:0/", "wss://host:65536/",
		"wss://host:12a/", "wss://host:/", "wss://user@host/",
		"wss://ho st/", "wss://host/pa th", "wss://[not-v6]/",
		"wss://host\r\nX: y/",
	};
	struct wsclient_config cfg = { 0 };
	char err[256];

	for (size_t i = 0; i < NELEM(bad); i++) {
		cfg.url = bad[i];
		err[0] = '\0';
		if (wsclient_connect(cli.base, &cfg, &callbacks, NULL, err,
		    sizeof(err)) != NULL)
			fail_msg("accepted bad URL %s", bad[i]);
		assert_true(err[0] != '\0');
	}
	cfg.url = "wss://127.0.0.1/";
	cfg.ca_file = "/nonexistent/ca.pem";
	assert_null(wsclient_connect(cli.base, &cfg, &callbacks, NULL, err,
	    sizeof(err)));
	assert_non_null(strstr(err, "/nonexistent/ca.pem"));
	cfg.ca_file = NULL;
	cfg.url = "ws://127.0.0.1/";
	cfg.bearer_token = "a\r\nInjected: yes";
	assert_null(wsclient_connect(cli.base, &cfg, &callbacks, NULL, err,
	    sizeof(err)));
}

/* URL forms that must be accepted (the connection itself fails later). */
static void
test_good_urls(void **state)
{
	static const char *good[] = {
		"wss://example.com", "wss://example.com:8443/a/b?c=d#frag",
		"ws://[::1]:9/", "WSS://[fe80::1]", "ws://10.0.0.1?q",
	};
	struct wsclient_config cfg = { 0 };
	char err[256];

	for (size_t i = 0; i < NELEM(good); i++) {
		struct wsface *c;

		cfg.url = good[i];
		cfg.connect_timeout_ms = 1;
		c = wsclient_connect(cli.base, &cfg, &callbacks, NULL, err,
		    sizeof(err));
		if (c == NULL)
			fail_msg("refused good URL %s: %s", good[i], err);
		wsface_free(c);
	}
	/* Lookups cancelled by the frees finish on the loop. */
	event_base_loopexit(cli.base, &(struct timeval){ 0, 200000 });
	event_base_dispatch(cli.base);
	assert_int_equal(cli.closed, 0);
}

static void
test_connect_refused(void **state)
{
	struct wsclient_config cfg = { 0 };
	char url[128], err[256];

	/* The listener's port, closed. */
	evconnlistener_disable(srv.lis);
	snprintf(url, sizeof(url), "ws://127.0.0.1:%d/", srv.port);
	evconnlistener_free(srv.lis);
	srv.lis = NULL;
	cfg.url = url;
	cli.c = wsclient_connect(cli.base, &cfg, &callbacks, NULL, err, sizeof(err));
	assert_non_null(cli.c);
	event_base_loopexit(cli.base, &(struct timeval){ 5, 0 });
	event_base_dispatch(cli.base);
	assert_int_equal(cli.closed, 1);
	assert_int_equal(cli.status, 0);
	assert_non_null(strstr(cli.reason, "refused"));
	/* teardown frees the listener: give it one to free. */
	{
		struct sockaddr_in sin = { .sin_family = AF_INET };
		sin.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
		srv.lis = evconnlistener_new_bind(srv.base, server_accept, NULL,
		    LEV_OPT_CLOSE_ON_FREE, 8, (struct sockaddr *)&sin, sizeof(sin));
		assert_non_null(srv.lis);
	}
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_header_lengths),
		cmocka_unit_test(test_header_control),
		cmocka_unit_test(test_header_nonminimal),
		cmocka_unit_test(test_header_errors),
		cmocka_unit_test(test_header_empty),
		cmocka_unit_test(test_mask),
		cmocka_unit_test(test_mask_pieces),
		cmocka_unit_test_setup_teardown(test_client_messages, setup, teardown),
		cmocka_unit_test_setup_teardown(test_client_huge_message, setup, teardown),
		cmocka_unit_test_setup_teardown(test_client_ping_flood, setup, teardown),
		cmocka_unit_test_setup_teardown(test_client_send, setup, teardown),
		cmocka_unit_test_setup_teardown(test_client_close_unanswered, setup, teardown),
		cmocka_unit_test_setup_teardown(test_refused_json, setup, teardown),
		cmocka_unit_test_setup_teardown(test_refused_text, setup, teardown),
		cmocka_unit_test_setup_teardown(test_refused_empty, setup, teardown),
		cmocka_unit_test_setup_teardown(test_refused_length_bound, setup, teardown),
		cmocka_unit_test_setup_teardown(test_refused_retry_after, setup, teardown),
		cmocka_unit_test_setup_teardown(test_refused_retry_after_capped, setup, teardown),
		cmocka_unit_test_setup_teardown(test_refused_retry_after_date, setup, teardown),
		cmocka_unit_test_setup_teardown(test_refused_retry_after_malformed, setup, teardown),
		cmocka_unit_test_setup_teardown(test_refused_retry_after_none, setup, teardown),
		cmocka_unit_test_setup_teardown(test_refused_until_eof, setup, teardown),
		cmocka_unit_test_setup_teardown(test_refused_body_timeout, setup, teardown),
		cmocka_unit_test_setup_teardown(test_refused_chunked, setup, teardown),
		cmocka_unit_test_setup_teardown(test_bad_accept, setup, teardown),
		cmocka_unit_test_setup_teardown(test_subprotocol_refused, setup, teardown),
		cmocka_unit_test_setup_teardown(test_subprotocol_unasked, setup, teardown),
		cmocka_unit_test_setup_teardown(test_malformed_response, setup, teardown),
		cmocka_unit_test_setup_teardown(test_error_masked, setup, teardown),
		cmocka_unit_test_setup_teardown(test_error_reserved, setup, teardown),
		cmocka_unit_test_setup_teardown(test_error_continuation, setup, teardown),
		cmocka_unit_test_setup_teardown(test_error_interleaved, setup, teardown),
		cmocka_unit_test_setup_teardown(test_error_too_big, setup, teardown),
		cmocka_unit_test_setup_teardown(test_error_too_big_fragments, setup, teardown),
		cmocka_unit_test_setup_teardown(test_error_close_one_byte, setup, teardown),
		cmocka_unit_test_setup_teardown(test_eof_without_close, setup, teardown),
		cmocka_unit_test_setup_teardown(test_pause, setup, teardown),
		cmocka_unit_test_setup_teardown(test_flood_shares_the_loop, setup, teardown),
		cmocka_unit_test_setup_teardown(test_flood_then_hangup, setup, teardown),
		cmocka_unit_test_setup_teardown(test_flood_paused, setup, teardown),
		cmocka_unit_test_setup_teardown(test_free_in_message, setup, teardown),
		cmocka_unit_test_setup_teardown(test_input_pending_quiet, setup, teardown),
		cmocka_unit_test_setup_teardown(test_heard_partial_frame, setup, teardown),
		cmocka_unit_test_setup_teardown(test_free_in_open, setup, teardown),
		cmocka_unit_test_setup_teardown(test_free_at_once, setup, teardown),
		cmocka_unit_test_setup_teardown(test_free_resolving, setup, teardown),
		cmocka_unit_test_setup_teardown(test_close_before_open, setup, teardown),
		cmocka_unit_test_setup_teardown(test_bad_config, setup, teardown),
		cmocka_unit_test_setup_teardown(test_good_urls, setup, teardown),
		cmocka_unit_test_setup_teardown(test_connect_refused, setup, teardown),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
