/*
 * test_agent_keepalive.c: the agent's ping deadline
 * (tunnel-client/agent_tunnel.c, tunnel_keepalive) against a WebSocket that
 * is the test's own: wsclient_connect is wrapped at link time
 * (-Wl,--wrap=wsclient_connect, tests/CMakeLists.txt), so the tunnel dials a
 * face whose messages the test hands it and whose pending input
 * (wsface_input_pending) the test says.  The tunnel goes through its real
 * handshake (HELLO, CHALLENGE, AUTH, WELCOME) to ESTABLISHED, then idles
 * until it pings (interval 60 ms, timeout 120 ms).
 *
 * - The PONG came in time but is not read when the deadline is judged:
 *   the loop comes back from a stall past the deadline with the PONG in
 *   the socket (input pending), and its read (which notes the time,
 *   wsface_heard_ms, and delivers it) runs after the keepalive's older
 *   deadline: a 0 ms timer here, as a turn that ended with input left
 *   (wsturn.h) or a read callback deferred to the next pass.  The tunnel
 *   must stay and ping again an interval later (without the grace it was
 *   dropped: "no answer to a ping").
 * - Input pending that never becomes a message (a frame never finished):
 *   dropped all the same, one grace later; the grace is asked for once.
 * - Nothing pending: dropped at the deadline, as before.
 * - A large message arriving slowly (a DATA frame of a bulk transfer on a
 *   link of a few KB/s, the PONG queued behind it): its records keep
 *   coming (wsface_heard_ms moves, every 20 ms here) while no whole
 *   message does for three times interval + timeout.  Any bytes read
 *   count as hearing from the gateway: the tunnel stays, is not pinged
 *   again while they come, and pings once they stop (without it the
 *   busy tunnel was dropped at the ping's timeout and redialled).
 * - The gateway goes silent in the middle of such a message: dropped all
 *   the same, interval + timeout after the last bytes read.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <event2/event.h>
#include <openssl/ssl.h>

#include "agent_tunnel.h"
#include "agentkey.h"
#include "frame.h"
#include "runtime.h"
#include "wsclient.h"
#include "wsface.h"

#define PING_INTERVAL_MS 60
#define PING_TIMEOUT_MS  120

/* ---- the WebSocket the tunnel dials: the test's ---- */

struct fake_ws {
	struct wsface face;          /* first: the tunnel holds &face */
	const struct wsface_handlers *h;
	void *arg;
	int pending;                 /* what wsface_input_pending says */
	int64_t heard_ms;            /* what wsface_heard_ms says: the last
	                              * read of the gateway's bytes */
	int pending_asks;            /* how often the tunnel asked */
	int freed;                   /* wsface_free: the tunnel let go */
	int pings;                   /* PINGs the tunnel sent */
	uint64_t ping_seq;           /* the last one's */
	int64_t ping_at_ms;          /* monotonic: when it was sent */
	int64_t freed_at_ms;
	int last_type;               /* the last frame the tunnel sent */
	struct event *turn;          /* the WebSocket's next turn: delivers held */
	uint8_t *held;               /* a message read, not yet delivered */
	size_t held_len;
};

static struct {
	struct event_base *base;
	struct fake_ws *ws;          /* the tunnel's latest dial */
	int dials;
	int stopped;
	int stall_on_ping;           /* the first PING arms stall */
	struct event *stall;         /* the loop held past that PING's deadline */
	struct event *drip;          /* a message's records, one a tick */
	int drip_left;               /* records still to come */
	int drip_pong;               /* the last one brings the PONG */
	int dripped;                 /* records read so far */
	int64_t drip_last_ms;        /* when the last one was read */
} tst;

static int
fake_sendv(struct wsface *f, const struct iovec *iov, int iovcnt, int binary)
{
	struct fake_ws *w = (struct fake_ws *)f;
	struct frame fr;
	char err[160];

	assert_int_equal(iovcnt, 1);
	assert_true(binary);
	assert_int_equal(frame_decode(iov[0].iov_base, iov[0].iov_len, &fr, err,
	    sizeof(err)), 0);
	w->last_type = fr.type;
	if (fr.type == FRAME_PING) {
		w->pings++;
		w->ping_seq = fr.u.ping.seq;
		w->ping_at_ms = runtime_monotonic_ms();
		if (w->pings == 1 && tst.stall_on_ping) {
			/* Armed in the pass that arms the deadline, on the
			 * same clock: it comes first. */
			struct timeval tv = runtime_ms_timeval(PING_TIMEOUT_MS - 30);

			assert_int_equal(evtimer_add(tst.stall, &tv), 0);
		}
	}
	return 0;
}

static int
fake_send_buffer(struct wsface *f, const uint8_t *prefix, size_t plen,
    struct evbuffer *src, size_t n)
{
	fail_msg("no stream here: nothing sends a buffer");
	return -1;
}

static size_t
fake_pending(const struct wsface *f)
{
	return 0;
}

static void
fake_pause_reading(struct wsface *f, int paused)
{
}

static void
fake_set_size(struct wsface *f, size_t bytes)
{
}

static void
fake_close(struct wsface *f, uint16_t code, const char *reason)
{
	fail_msg("the tunnel closed its WebSocket: %u %s", code, reason);
}

static void
fake_free(struct wsface *f)
{
	struct fake_ws *w = (struct fake_ws *)f;

	assert_int_equal(w->freed, 0);
	w->freed = 1;
	w->freed_at_ms = runtime_monotonic_ms();
	evtimer_del(w->turn);     /* nothing is delivered after the free */
}

static const char *
fake_peer(const struct wsface *f)
{
	return "fake";
}

static int
fake_input_pending(const struct wsface *f)
{
	struct fake_ws *w = (struct fake_ws *)(uintptr_t)f;

	w->pending_asks++;
	return w->pending;
}

static int64_t
fake_heard_ms(const struct wsface *f)
{
	return ((const struct fake_ws *)(uintptr_t)f)->heard_ms;
}

static const struct wsface_ops fake_ops = {
	.sendv = fake_sendv,
	.send_buffer = fake_send_buffer,
	.pending = fake_pending,
	.pause_reading = fake_pause_reading,
	.set_low_water = fake_set_size,
	.set_max_message = fake_set_size,
	.set_max_queue = fake_set_size,
	.close = fake_close,
	.free = fake_free,
	.peer = fake_peer,
	.input_pending = fake_input_pending,
	.heard_ms = fake_heard_ms,
};

/* A message to the tunnel, read now (as wsclient's read callback, which
 * notes the time: wsface_heard_ms). */
static void
deliver(struct fake_ws *w, const struct frame *f)
{
	uint8_t *buf;
	size_t len;

	assert_int_equal(frame_encode(f, 0, &buf, &len), 0);
	w->heard_ms = runtime_monotonic_ms();
	w->h->on_message(&w->face, buf, len, 1, w->arg);
	free(buf);
}

/* The WebSocket's read of the held message (the socket's read callback,
 * which notes the time), and its delivery. */
static void
fake_turn(evutil_socket_t fd, short what, void *arg)
{
	struct fake_ws *w = arg;

	assert_non_null(w->held);
	w->pending = 0;
	w->heard_ms = runtime_monotonic_ms();
	w->h->on_message(&w->face, w->held, w->held_len, 1, w->arg);
	free(w->held);
	w->held = NULL;
}

struct wsface *__wrap_wsclient_connect(struct event_base *base,
    const struct wsclient_config *cfg, const struct wsface_handlers *h,
    void *arg, char *err, size_t errlen);

struct wsface *
__wrap_wsclient_connect(struct event_base *base,
    const struct wsclient_config *cfg, const struct wsface_handlers *h,
    void *arg, char *err, size_t errlen)
{
	struct fake_ws *w = calloc(1, sizeof(*w));

	assert_non_null(w);
	w->face.ops = &fake_ops;
	w->face.h = h;
	w->face.arg = arg;
	w->h = h;
	w->arg = arg;
	assert_non_null(w->turn = evtimer_new(base, fake_turn, w));
	/* Earlier dials' fakes are the test's to free: one at a time here. */
	assert_null(tst.ws);
	tst.ws = w;
	tst.dials++;
	return &w->face;
}

static void
fake_ws_free(struct fake_ws *w)
{
	if (w == NULL)
		return;
	event_free(w->turn);
	free(w->held);
	free(w);
}

/* ---- the tunnel ---- */

static int
hook_registered(void *arg, const char *agent_id)
{
	fail_msg("an agent with a key does not register");
	return -1;
}

static void
hook_status(void *arg, const char *state, bool connected, const char *last_error)
{
}

static void
hook_stopped(void *arg, int code)
{
	tst.stopped++;
}

static void
hook_on_open(struct mux *m, struct mux_stream *s, const struct frame_open *req,
    void *arg)
{
	fail_msg("no stream here");
}

static const struct agent_tunnel_hooks hooks = {
	.registered = hook_registered,
	.status = hook_status,
	.stopped = hook_stopped,
	.on_open = hook_on_open,
};

struct fixture {
	EVP_PKEY *key;
	SSL_CTX *ctx;
	struct agent_tunnel *t;
};

/* Runs the loop one pass at a time until done() or limit_ms. */
static void
run_until(int (*done)(void), int limit_ms)
{
	int64_t end = runtime_monotonic_ms() + limit_ms;

	while (!done() && runtime_monotonic_ms() < end)
		event_base_loop(tst.base, EVLOOP_ONCE);
}

static int
pinged_once(void)
{
	return tst.ws->pings >= 1;
}

static int
pinged_twice_or_freed(void)
{
	return tst.ws->pings >= 2 || tst.ws->freed;
}

static int
freed(void)
{
	return tst.ws->freed;
}

static void stall_then_read(evutil_socket_t fd, short what, void *arg);
static void drip_record(evutil_socket_t fd, short what, void *arg);

/* A tunnel established on a fake WebSocket, idle, its first PING just
 * sent (and with stall, the loop to be held past its deadline). */
static int
setup_tunnel(void **state, int stall)
{
	static struct fixture fx;
	struct agent_tunnel_config cfg;
	struct frame f;

	memset(&tst, 0, sizeof(tst));
	memset(&fx, 0, sizeof(fx));
	assert_non_null(tst.base = event_base_new());
	assert_non_null(tst.stall = evtimer_new(tst.base, stall_then_read, NULL));
	assert_non_null(tst.drip = event_new(tst.base, -1, EV_PERSIST,
	    drip_record, NULL));
	tst.stall_on_ping = stall;
	assert_non_null(fx.key = agentkey_generate());
	assert_non_null(fx.ctx = SSL_CTX_new(TLS_client_method()));
	memset(&cfg, 0, sizeof(cfg));
	cfg.gateway_url = "https://127.0.0.1:9";
	cfg.ca_file = "/nonexistent/ca.crt";   /* tls_ctx given: never read */
	cfg.tls_ctx = fx.ctx;
	cfg.node = "n1";
	cfg.cluster = "c1";
	cfg.agent_id = "a1";
	cfg.agent_key = fx.key;
	cfg.import_id = "";
	cfg.stream_window = 256 * 1024;
	cfg.max_streams = 16;
	cfg.ping_interval_ms = PING_INTERVAL_MS;
	cfg.ping_timeout_ms = PING_TIMEOUT_MS;
	cfg.hooks = &hooks;
	assert_non_null(fx.t = agent_tunnel_new(tst.base, &cfg));
	assert_int_equal(agent_tunnel_start(fx.t), 0);
	assert_int_equal(tst.dials, 1);

	/* The handshake, answered by hand. */
	tst.ws->h->on_open(&tst.ws->face, tst.ws->arg);
	assert_int_equal(tst.ws->last_type, FRAME_HELLO);
	memset(&f, 0, sizeof(f));
	f.type = FRAME_CHALLENGE;
	f.u.challenge.version = TETHER_PROTOCOL_VERSION;
	memset(f.u.challenge.nonce, 7, sizeof(f.u.challenge.nonce));
	deliver(tst.ws, &f);
	assert_int_equal(tst.ws->last_type, FRAME_AUTH);
	memset(&f, 0, sizeof(f));
	f.type = FRAME_WELCOME;
	strcpy(f.u.welcome.agent_id, "a1");
	strcpy(f.u.welcome.cluster, "c1");
	strcpy(f.u.welcome.state, "active");
	deliver(tst.ws, &f);
	assert_true(agent_tunnel_established(fx.t));

	/* Silent for the interval: it pings. */
	run_until(pinged_once, 5000);
	assert_int_equal(tst.ws->pings, 1);
	assert_int_equal(tst.ws->freed, 0);
	*state = &fx;
	return 0;
}

static int
setup(void **state)
{
	return setup_tunnel(state, 0);
}

static int
setup_stall(void **state)
{
	return setup_tunnel(state, 1);
}

static int
teardown(void **state)
{
	struct fixture *fx = *state;

	agent_tunnel_free(fx->t);
	event_free(tst.stall);
	event_free(tst.drip);
	fake_ws_free(tst.ws);
	runtime_drain(tst.base);
	event_base_free(tst.base);
	SSL_CTX_free(fx->ctx);
	EVP_PKEY_free(fx->key);
	return 0;
}

/* 90 ms after the PING the loop is held past its deadline (a stall: the
 * PONG reaches the socket meanwhile, input pending), then its read and
 * delivery are left to a 0 ms timer, as a turn that ended with input left
 * (wsturn.h) leaves them: due after the keepalive's deadline, so it runs
 * after it. */
static void
stall_then_read(evutil_socket_t fd, short what, void *arg)
{
	struct fake_ws *w = tst.ws;
	struct frame pong = { .type = FRAME_PONG };
	static const struct timeval now = { 0, 0 };
	struct timespec nap = { 0, 1000000 };

	while (runtime_monotonic_ms() < w->ping_at_ms + PING_TIMEOUT_MS + 20)
		nanosleep(&nap, NULL);
	event_base_update_cache_time(tst.base);  /* the loop's clock after it */
	pong.u.ping.seq = w->ping_seq;
	assert_int_equal(frame_encode(&pong, 0, &w->held, &w->held_len), 0);
	w->pending = 1;
	evtimer_add(w->turn, &now);
}

static void
test_pong_read_not_delivered(void **state)
{
	struct fake_ws *w = tst.ws;

	run_until(pinged_twice_or_freed, 5000);
	/* The PONG was delivered, the tunnel kept, and an interval of silence
	 * after it brought the next PING on the same WebSocket. */
	if (w->freed)
		fail_msg("the tunnel was dropped %lld ms after its PING, its "
		    "PONG read and not yet delivered", (long long)(w->freed_at_ms -
		    w->ping_at_ms));
	assert_null(w->held);
	assert_int_equal(w->pings, 2);
	assert_int_equal(tst.dials, 1);
	assert_true(agent_tunnel_established(((struct fixture *)*state)->t));
	assert_int_equal(w->pending_asks, 1);
}

static void
test_pending_never_delivered(void **state)
{
	struct fake_ws *w = tst.ws;

	w->pending = 1;          /* a frame begun, never finished */
	run_until(freed, 5000);
	assert_int_equal(w->freed, 1);
	assert_true(w->freed_at_ms - w->ping_at_ms >= PING_TIMEOUT_MS);
	assert_int_equal(w->pending_asks, 1);   /* one grace, then judged */
	assert_false(agent_tunnel_established(((struct fixture *)*state)->t));
	assert_int_equal(tst.stopped, 0);       /* it redials, with backoff */
}

static void
test_nothing_pending(void **state)
{
	struct fake_ws *w = tst.ws;

	run_until(freed, 5000);
	assert_int_equal(w->freed, 1);
	assert_true(w->freed_at_ms - w->ping_at_ms >= PING_TIMEOUT_MS);
	assert_int_equal(w->pending_asks, 1);
	assert_false(agent_tunnel_established(((struct fixture *)*state)->t));
}

/* A large message from the gateway arriving slowly, as wsclient reads
 * it: each tick one more TLS record of it is read (its read callback
 * notes the time: wsface_heard_ms) and the message is not whole yet
 * (input pending).  With drip_pong the last record completes it, and the
 * PONG queued behind it is delivered (the DATA frame itself would go to a
 * stream: there is none here, and only its bytes matter). */
#define DRIP_MS 20

static void
drip_record(evutil_socket_t fd, short what, void *arg)
{
	struct fake_ws *w = tst.ws;
	struct frame pong = { .type = FRAME_PONG };

	if (w->freed || tst.drip_left == 0) {
		event_del(tst.drip);
		return;
	}
	w->heard_ms = tst.drip_last_ms = runtime_monotonic_ms();
	w->pending = 1;
	tst.dripped++;
	if (--tst.drip_left > 0 || !tst.drip_pong)
		return;
	w->pending = 0;
	pong.u.ping.seq = w->ping_seq;
	deliver(w, &pong);
}

static void
start_drip(int records, int pong)
{
	struct timeval tv = runtime_ms_timeval(DRIP_MS);

	tst.drip_left = records;
	tst.drip_pong = pong;
	assert_int_equal(event_add(tst.drip, &tv), 0);
}

static int
drip_over_or_freed(void)
{
	return tst.drip_left == 0 || tst.ws->freed;
}

/* Records for three times interval + timeout after the PING, no whole
 * message until the last: the tunnel stays, unpinged while they come. */
#define SLOW_RECORDS (3 * (PING_INTERVAL_MS + PING_TIMEOUT_MS) / DRIP_MS)

static void
test_slow_message_keeps_tunnel(void **state)
{
	struct fake_ws *w = tst.ws;
	int64_t pong_ms;

	start_drip(SLOW_RECORDS, 1);
	run_until(drip_over_or_freed, 5000);
	if (w->freed)
		fail_msg("the tunnel was dropped %lld ms after its PING, %d records "
		    "of a message read since (one every %d ms), the last %lld ms "
		    "before", (long long)(w->freed_at_ms - w->ping_at_ms),
		    tst.dripped, DRIP_MS, (long long)(w->freed_at_ms -
		    tst.drip_last_ms));
	assert_int_equal(tst.dripped, SLOW_RECORDS);
	assert_true(tst.drip_last_ms - w->ping_at_ms >=
	    2 * (PING_INTERVAL_MS + PING_TIMEOUT_MS));
	/* Bytes kept coming: no second PING, the same connection. */
	assert_int_equal(w->pings, 1);
	assert_int_equal(tst.dials, 1);
	assert_true(agent_tunnel_established(((struct fixture *)*state)->t));

	/* Silent after it: pinged again, an interval later, as ever. */
	pong_ms = tst.drip_last_ms;
	run_until(pinged_twice_or_freed, 5000);
	assert_int_equal(w->freed, 0);
	assert_int_equal(w->pings, 2);
	assert_true(w->ping_at_ms - pong_ms >= PING_INTERVAL_MS);
}

/* The gateway stops in the middle of a slow message: the last bytes read
 * start the silence; an interval later the PING, a timeout after that the
 * drop (one grace asked for: the frame begun is input pending). */
static void
test_slow_message_then_silence(void **state)
{
	struct fake_ws *w = tst.ws;

	start_drip(SLOW_RECORDS / 3, 0);
	run_until(freed, 5000);
	assert_int_equal(w->freed, 1);
	assert_int_equal(tst.dripped, SLOW_RECORDS / 3);
	assert_int_equal(w->pings, 2);
	assert_true(w->ping_at_ms - tst.drip_last_ms >= PING_INTERVAL_MS);
	assert_true(w->freed_at_ms - tst.drip_last_ms >=
	    PING_INTERVAL_MS + PING_TIMEOUT_MS);
	assert_int_equal(w->pending_asks, 1);
	assert_false(agent_tunnel_established(((struct fixture *)*state)->t));
	assert_int_equal(tst.dials, 1);     /* the redial waits for its backoff */
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_pong_read_not_delivered, setup_stall, teardown),
		cmocka_unit_test_setup_teardown(test_pending_never_delivered, setup, teardown),
		cmocka_unit_test_setup_teardown(test_nothing_pending, setup, teardown),
		cmocka_unit_test_setup_teardown(test_slow_message_keeps_tunnel, setup, teardown),
		cmocka_unit_test_setup_teardown(test_slow_message_then_silence, setup, teardown),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
