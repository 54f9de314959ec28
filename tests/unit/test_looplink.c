/*
 * test_looplink.c: the stream links between loops (gateway/core/looplink.h,
 * docs/0040 step 5), two loops in two threads: loop 0 on the test's
 * thread opens streams to loop 1 (its own thread) and sends each 1 MiB in
 * blocks added by reference (their chains move across, freed by the far
 * thread: the cleanup callbacks run there).  One of eight readers never
 * drains: the seven others finish while it holds at most one window and
 * its sender has sent no more.  A RESET goes each way and names its code
 * on the other side.  Loop 0 closes its end with streams open: both sides
 * end them "tunnel_lost", the windows go back to the budget, and ASan
 * sees nothing leaked.
 *
 * The far side in the gateway (peer_route_loop_open, reach_on_loop): loop
 * 1 picks an agent whose tunnel (a real session, fake_tunnel.h) loop 0
 * holds (access_pick gives the way over the link, docs/0040 step 6) and
 * opens a stream to it; it reaches the agent, bytes cross
 * both hops with credit, the far half is quiet (not in the live streams)
 * and charges the principal one window only (the agent's side), the link
 * its own; an agent not on loop 0 is refused "agent_not_here".
 *
 * Frames written in one pass of a loop reach the other as one LINK
 * message, sent at the end of that pass: none before, one wake after.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <event2/buffer.h>
#include <event2/event.h>

#include "access.h"
#include "budget.h"
#include "fake_tunnel.h"
#include "frame.h"
#include "gateway.h"
#include "livestreams.h"
#include "loop.h"
#include "looplink.h"
#include "mux.h"
#include "peer_route.h"
#include "reach.h"
#include "session.h"
#include "shares.h"

#define NSTREAMS  8
#define STALLED   3                 /* the reader that never drains */
#define WINDOW    (64u << 10)
#define BLOCK     (16u << 10)
#define BYTES     (1u << 20)        /* per stream: 16 windows */
#define NOPEN     2                 /* streams open when loop 0 closes */

static struct loop *loops;
static struct looplinks *links;
static struct budget budget = BUDGET_DEFAULT;
static pthread_mutex_t budget_mu = PTHREAD_MUTEX_INITIALIZER;
static atomic_uint blocks_made, blocks_freed_far, blocks_freed_near;
static int expired;

/* ---- loop 0: the senders ---- */

struct tx {
	struct mux_stream *s;
	struct evbuffer *out;
	size_t sent, made;
	int opened, closed;
	char code[32];
	int send_forever;               /* the streams open at close */
};

static struct tx tx[NSTREAMS + 1 + NOPEN];

static uint8_t
pattern(size_t i, unsigned k)
{
	return (uint8_t)(i * 7 + k);
}

static void
block_free(const void *data, size_t len, void *arg)
{
	(void)len;
	(void)arg;
	if (loop_self() == &loops[1])
		atomic_fetch_add(&blocks_freed_far, 1);
	else
		atomic_fetch_add(&blocks_freed_near, 1);
	free((void *)data);
}

/* Adds the next block of t's bytes, by reference. */
static void
add_block(struct tx *t)
{
	unsigned k = (unsigned)(t - tx);
	uint8_t *b = malloc(BLOCK);

	assert_non_null(b);
	for (size_t i = 0; i < BLOCK; i++)
		b[i] = pattern(t->made + i, k);
	assert_int_equal(evbuffer_add_reference(t->out, b, BLOCK, block_free, NULL), 0);
	atomic_fetch_add(&blocks_made, 1);
	t->made += BLOCK;
}

static void
feed(struct tx *t)
{
	size_t n;

	while (t->s != NULL && !t->closed) {
		if (evbuffer_get_length(t->out) == 0) {
			if (t->made >= BYTES && !t->send_forever) {
				mux_stream_fin(t->s);
				return;
			}
			add_block(t);
		}
		if ((n = mux_stream_send_buffer(t->s, t->out)) == 0)
			return;          /* on_writable follows */
		t->sent += n;
	}
}

static void
tx_opened(struct mux_stream *s, int ok, const char *code, const char *reason,
    void *arg)
{
	struct tx *t = arg;

	assert_true(ok);
	t->opened = 1;
	feed(t);
}

static void
tx_data(struct mux_stream *s, const uint8_t *data, size_t len, void *arg)
{
	fail_msg("the reader sent bytes");
}

static void
tx_writable(struct mux_stream *s, void *arg)
{
	feed(arg);
}

static void
tx_close(struct mux_stream *s, const char *code, void *arg)
{
	struct tx *t = arg;

	t->closed = 1;
	t->s = NULL;
	snprintf(t->code, sizeof(t->code), "%s", code);
}

static const struct mux_stream_handlers tx_handlers = {
	.on_opened = tx_opened,
	.on_data = tx_data,
	.on_writable = tx_writable,
	.on_close = tx_close,
};

static void
tx_open(unsigned k, const char *target)
{
	struct frame_open req;
	char err[200];

	tx[k].out = evbuffer_new();
	assert_non_null(tx[k].out);
	frame_open_init(&req, target, NULL);
	tx[k].s = looplink_open(links, 1, &req, &tx_handlers, &tx[k], err, sizeof(err));
	if (tx[k].s == NULL)
		fail_msg("looplink_open: %s", err);
}

/* ---- loop 1: the readers (written on loop 1 only) ---- */

struct rx {
	struct mux_stream *s;
	unsigned k;
	size_t received, buffered;
	int stall, fin, closed, bad_pattern, wrong_thread;
	char code[32];
};

static struct rx rx[NSTREAMS + 1 + NOPEN];

static void
rx_data(struct mux_stream *s, const uint8_t *data, size_t len, void *arg)
{
	struct rx *r = arg;

	if (loop_self() != &loops[1])
		r->wrong_thread++;
	for (size_t i = 0; i < len; i++)
		if (data[i] != pattern(r->received + i, r->k))
			r->bad_pattern++;
	r->received += len;
	if (!r->stall)
		mux_stream_drained(s, len);
	r->buffered = mux_stream_buffered(s);
}

static void
rx_fin(struct mux_stream *s, void *arg)
{
	((struct rx *)arg)->fin = 1;
	mux_stream_fin(s);
}

/* A copy of what loop 1 saw, posted to loop 0. */
struct snap {
	struct rx rx[NSTREAMS + 1 + NOPEN];
	size_t streams;                 /* on loop 1's end of the link */
	int final;                      /* close_here's, after its close */
};

static struct snap *snap;

/* On loop 0: the latest copy replaces any before, but the final one. */
static void
snap_take(void *arg)
{
	if (snap != NULL && snap->final) {
		free(arg);
		return;
	}
	free(snap);
	snap = arg;
}

static void
snap_free(void *arg)
{
	free(arg);
}

/* On loop 1: copies rx and posts it to loop 0; arg non-NULL: the final. */
static void
snap_make(void *arg)
{
	struct snap *sn = calloc(1, sizeof(*sn));

	assert_non_null(sn);
	sn->final = arg != NULL;
	memcpy(sn->rx, rx, sizeof(rx));
	sn->streams = looplink_streams(links, 1, 0);
	assert_int_equal(loop_call(&loops[0], snap_take, sn, snap_free), 0);
}

static void
rx_close(struct mux_stream *s, const char *code, void *arg)
{
	struct rx *r = arg;

	r->closed = 1;
	r->s = NULL;
	snprintf(r->code, sizeof(r->code), "%s", code);
	if (strcmp(code, "done") != 0)
		snap_make(NULL);          /* loop 0 waits to hear of it */
}

static const struct mux_stream_handlers rx_handlers = {
	.on_data = rx_data,
	.on_fin = rx_fin,
	.on_close = rx_close,
};

/* looplink_open_fn: an OPEN from loop 0; target "s<k>" or "stall<k>". */
static void
rx_open(void *ctx, unsigned from, struct mux_stream *s, const struct frame_open *req)
{
	unsigned k;
	int stall = strncmp(req->target, "stall", 5) == 0;

	assert_int_equal(from, 0);
	assert_ptr_equal(loop_self(), &loops[1]);
	k = (unsigned)atoi(req->target + (stall ? 5 : 1));
	assert_true(k < NSTREAMS + 1 + NOPEN);
	rx[k] = (struct rx){ .s = s, .k = k, .stall = stall };
	assert_int_equal(mux_stream_accept(s, NULL, &rx_handlers, &rx[k]), 0);
}

static void
rx_reset_stalled(void *arg)
{
	mux_stream_reset(rx[STALLED].s, "stall_gone");
	rx[STALLED].s = NULL;
}

/* On loop 1, after loop 0 closed: what it saw then (CLOSED came first),
 * then its own close (its end is gone already: nothing to do). */
static void
close_here(void *arg)
{
	snap_make(arg);
	looplink_close(links);
}

/* ---- loop 0's waits ---- */

static struct event *watchdog;

static void
watchdog_cb(evutil_socket_t fd, short what, void *arg)
{
	expired = 1;
}

/* Runs loop 0 until done() holds (fails after a watchdog of many seconds:
 * a wait that would never end, not a timing goal). */
static void
run_until(int (*done)(void))
{
	struct timeval tv = { 60, 0 };

	evtimer_add(watchdog, &tv);
	while (!done() && !expired)
		event_base_loop(loops[0].base, EVLOOP_ONCE);
	evtimer_del(watchdog);
	assert_false(expired);
}

static int
seven_done(void)
{
	int n = 0;

	for (unsigned k = 0; k < NSTREAMS; k++)
		n += tx[k].closed && strcmp(tx[k].code, "done") == 0;
	return n == NSTREAMS - 1;
}

static int
have_snap(void)
{
	return snap != NULL;
}

static int
have_final_snap(void)
{
	return snap != NULL && snap->final;
}

static int
stalled_closed(void)
{
	return tx[STALLED].closed;
}

static int
r_opened(void)
{
	return tx[NSTREAMS].opened;
}

static int
open_ones_sending(void)
{
	for (unsigned k = NSTREAMS + 1; k < NSTREAMS + 1 + NOPEN; k++)
		if (!tx[k].opened || tx[k].sent < WINDOW)
			return 0;
	return 1;
}

static void
take_snap(void)
{
	free(snap);
	snap = NULL;
	assert_int_equal(loop_call(&loops[1], snap_make, NULL, NULL), 0);
	run_until(have_snap);
}

static void
test_link(void **state)
{
	struct event_base *base = event_base_new();
	struct mux_config cfg = MUX_DEFAULT_CONFIG;
	char err[200], name[16];

	(void)state;
	assert_non_null(base);
	budget.mu = &budget_mu;
	loops = loops_new(base, 2, NULL, err, sizeof(err));
	assert_non_null(loops);
	watchdog = evtimer_new(base, watchdog_cb, NULL);
	cfg.window = WINDOW;
	cfg.max_payload = BLOCK;
	cfg.tx_high_water = WINDOW;
	cfg.budget = &budget;
	links = looplinks_new(loops, 2, &cfg, rx_open, NULL, err, sizeof(err));
	assert_non_null(links);

	/* Eight streams; the stalled one's reader never drains. */
	for (unsigned k = 0; k < NSTREAMS; k++) {
		snprintf(name, sizeof(name), "%s%u", k == STALLED ? "stall" : "s", k);
		tx_open(k, name);
	}
	run_until(seven_done);
	take_snap();
	for (unsigned k = 0; k < NSTREAMS; k++) {
		const struct rx *r = &snap->rx[k];

		assert_int_equal(r->bad_pattern, 0);
		assert_int_equal(r->wrong_thread, 0);
		if (k == STALLED)
			continue;
		assert_int_equal(r->received, BYTES);
		assert_true(r->fin && r->closed);
		assert_string_equal(r->code, "done");
	}
	/* The stalled one: open, at most one window held on loop 1, and its
	 * sender sent no more than that (credit, not the link, stops it). */
	assert_false(tx[STALLED].closed);
	assert_false(snap->rx[STALLED].closed);
	assert_true(snap->rx[STALLED].received <= WINDOW);
	assert_true(snap->rx[STALLED].buffered <= WINDOW);
	assert_true(tx[STALLED].sent <= WINDOW);
	assert_int_equal(snap->streams, 1);
	assert_int_equal(looplink_streams(links, 0, 1), 1);
	/* What /metrics folds: eight streams opened 0>1, none 1>0; the seven
	 * done ones' bytes and the stalled one's at most a window went 0>1,
	 * no payload came back. */
	{
		uint64_t n, bytes;

		looplink_counts(links, 0, 1, &n, &bytes);
		assert_int_equal(n, NSTREAMS);
		assert_true(bytes >= (uint64_t)(NSTREAMS - 1) * BYTES);
		assert_true(bytes <= (uint64_t)(NSTREAMS - 1) * BYTES + WINDOW);
		looplink_counts(links, 1, 0, &n, &bytes);
		assert_int_equal(n, 0);
		assert_int_equal(bytes, 0);
		looplink_counts(links, 0, 0, &n, &bytes);
		assert_int_equal(n + bytes, 0);
		assert_int_equal(looplinks_loops(links), 2);
	}

	/* RESET from loop 1: loop 0's stream ends with its code. */
	assert_int_equal(loop_call(&loops[1], rx_reset_stalled, NULL, NULL), 0);
	run_until(stalled_closed);
	assert_string_equal(tx[STALLED].code, "stall_gone");

	/* RESET from loop 0: loop 1's ends with its code. */
	tx_open(NSTREAMS, "stall8");
	run_until(r_opened);
	free(snap);
	snap = NULL;
	mux_stream_reset(tx[NSTREAMS].s, "client_gone");
	tx[NSTREAMS].s = NULL;
	run_until(have_snap);
	assert_true(snap->rx[NSTREAMS].closed);
	assert_string_equal(snap->rx[NSTREAMS].code, "client_gone");

	/* Loop 0 closes its end with two streams open and sending. */
	for (unsigned k = NSTREAMS + 1; k < NSTREAMS + 1 + NOPEN; k++) {
		snprintf(name, sizeof(name), "stall%u", k);
		tx[k].send_forever = 1;
		tx_open(k, name);
	}
	run_until(open_ones_sending);
	looplink_close(links);
	for (unsigned k = NSTREAMS + 1; k < NSTREAMS + 1 + NOPEN; k++) {
		assert_true(tx[k].closed);
		assert_string_equal(tx[k].code, "tunnel_lost");
	}
	{
		char err2[200];
		struct frame_open req;

		frame_open_init(&req, "s0", NULL);
		assert_null(looplink_open(links, 1, &req, &tx_handlers, &tx[0], err2,
		    sizeof(err2)));
		assert_non_null(strstr(err2, "loop-link:0>1"));
	}
	/* Loop 1 heard of it (CLOSED), before its own close. */
	free(snap);
	snap = NULL;
	assert_int_equal(loop_call(&loops[1], close_here, links, NULL), 0);
	run_until(have_final_snap);
	for (unsigned k = NSTREAMS + 1; k < NSTREAMS + 1 + NOPEN; k++) {
		assert_true(snap->rx[k].closed);
		assert_string_equal(snap->rx[k].code, "tunnel_lost");
	}
	assert_int_equal(snap->streams, 0);

	loops_stop(loops, 2);
	looplinks_free(links);
	loops_free(loops, 2);
	event_free(watchdog);
	event_base_free(base);
	free(snap);
	for (unsigned k = 0; k < NSTREAMS + 1 + NOPEN; k++)
		if (tx[k].out != NULL)
			evbuffer_free(tx[k].out);
	/* Every window given back; every block freed, most of them by loop 1
	 * (the chains moved there whole). */
	assert_int_equal(budget.used, 0);
	assert_int_equal(atomic_load(&blocks_freed_far) + atomic_load(&blocks_freed_near),
	    atomic_load(&blocks_made));
	assert_true(atomic_load(&blocks_freed_far) >= (NSTREAMS - 1) * (BYTES / BLOCK));
}


/* ---- the far side in the gateway ---- */

#define FAR_BYTES (256u << 10)      /* 4 windows */

/* Loop 1's stream (written on loop 1; copied to loop 0 in far_report). */
struct far_op {
	struct mux_stream *s;
	size_t sent;
	int opened, ok, closed, fin_sent;
	int pick_status, pick_local;      /* access_pick's on loop 1 */
	int pick_loop;                    /* its reach.loop's index, -1: none */
	char code[32], close_code[32];
};

static struct far_op far_ops[2];
static struct far_op far_seen[2];   /* loop 0's copy */
static int far_reports;
static int far_go_fin;              /* loop 1: FIN once everything is sent */

/* The agent's end (loop 0). */
static struct {
	struct mux_stream *s;
	size_t got;
	int bad, fin, closed;
	char target[64], close_code[32];
} agent_end;

static struct ft *far_f;
static char far_agent_id[STORE_ID_MAX + 1], far_node[STORE_NAME_MAX + 1];

static void
far_report_take(void *arg)
{
	memcpy(far_seen, arg, sizeof(far_seen));
	free(arg);
	far_reports++;
}

/* On loop 1: what its streams saw, to loop 0. */
static void
far_report(void)
{
	struct far_op *copy = malloc(sizeof(far_ops));

	assert_non_null(copy);
	memcpy(copy, far_ops, sizeof(far_ops));
	assert_int_equal(loop_call(&loops[0], far_report_take, copy, snap_free), 0);
}

static void
far_send(struct far_op *o)
{
	uint8_t buf[BLOCK];
	size_t n;

	while (o->s != NULL && o->sent < FAR_BYTES) {
		for (size_t i = 0; i < sizeof(buf); i++)
			buf[i] = pattern(o->sent + i, 5);
		if ((n = mux_stream_send(o->s, buf, sizeof(buf))) == 0)
			return;
		o->sent += n;
	}
	if (o->s != NULL && o->sent >= FAR_BYTES && far_go_fin && !o->fin_sent) {
		o->fin_sent = 1;
		mux_stream_fin(o->s);
	}
}

static void
far_opened(struct mux_stream *s, int ok, const char *code, const char *reason,
    void *arg)
{
	struct far_op *o = arg;

	o->opened = 1;
	o->ok = ok;
	snprintf(o->code, sizeof(o->code), "%s", code != NULL ? code : "");
	if (!ok)
		o->s = NULL;
	far_send(o);
	far_report();
}

static void
far_writable(struct mux_stream *s, void *arg)
{
	far_send(arg);
}

static void
far_fin(struct mux_stream *s, void *arg)
{
}

static void
far_close(struct mux_stream *s, const char *code, void *arg)
{
	struct far_op *o = arg;

	o->closed = 1;
	o->s = NULL;
	snprintf(o->close_code, sizeof(o->close_code), "%s", code);
	far_report();
}

static const struct mux_stream_handlers far_handlers = {
	.on_opened = far_opened,
	.on_data = tx_data,
	.on_writable = far_writable,
	.on_fin = far_fin,
	.on_close = far_close,
};

/* On loop 1: opens far_ops[0] to the agent on loop 0, as access_pick
 * reaches it from here, far_ops[1] to an agent loop 0 does not hold. */
static void
far_open(void *arg)
{
	struct gateway *gw = &far_f->gw;
	struct access_grant g = { .principal = "user:alice" };
	struct reach r;
	char err[200];

	(void)arg;
	snprintf(g.cluster, sizeof(g.cluster), "%s", far_f->cluster);
	far_ops[0].pick_status = access_pick(gw, &g, &r, err, sizeof(err));
	far_ops[0].pick_local = r.local != NULL;
	far_ops[0].pick_loop = r.loop != NULL ? (int)r.loop->index : -1;
	if (far_ops[0].pick_status != 0)
		fail_msg("access_pick on loop 1: %s", err);
	for (int i = 0; i < 2; i++) {
		if (i == 1)
			reach_on_loop(&r, gw, &loops[0], "nobody", far_node);
		far_ops[i].s = reach_open_stream(gw, &r, "user:alice", "127.0.0.1:22",
		    NULL, &far_handlers, &far_ops[i], err, sizeof(err));
		if (far_ops[i].s == NULL)
			fail_msg("reach_open_stream: %s", err);
	}
}

static void
far_fin_now(void *arg)
{
	far_go_fin = 1;
	far_send(&far_ops[0]);
}

static void
agent_data(struct mux_stream *s, const uint8_t *data, size_t len, void *arg)
{
	for (size_t i = 0; i < len; i++)
		agent_end.bad += data[i] != pattern(agent_end.got + i, 5);
	agent_end.got += len;
	mux_stream_drained(s, len);
}

static void
agent_fin(struct mux_stream *s, void *arg)
{
	agent_end.fin = 1;
	mux_stream_fin(s);
}

static void
agent_close(struct mux_stream *s, const char *code, void *arg)
{
	agent_end.closed = 1;
	agent_end.s = NULL;
	snprintf(agent_end.close_code, sizeof(agent_end.close_code), "%s", code);
}

static const struct mux_stream_handlers agent_handlers = {
	.on_data = agent_data,
	.on_fin = agent_fin,
	.on_close = agent_close,
};

static void
agent_on_open(struct mux *m, struct mux_stream *s, const struct frame_open *req,
    void *arg)
{
	snprintf(agent_end.target, sizeof(agent_end.target), "%s", req->target);
	agent_end.s = s;
	assert_int_equal(mux_stream_accept(s, NULL, &agent_handlers, NULL), 0);
}

static const struct mux_handlers agent_mux_handlers = { .on_open = agent_on_open };

/* Runs loop 0 (the tunnel's) until done() holds: its tunnel's messages
 * carried, else a wait for the next event (ft's watchdog fails a wait
 * that would never end). */
static void
far_wait(struct ft_tun *t, int (*done)(void))
{
	while (!done()) {
		if (ft_pump(far_f) > 0 || evbuffer_get_length(t->to_agent) > 0 ||
		    evbuffer_get_length(t->to_gateway) > 0)
			continue;
		ft_loop_once(far_f);
	}
}

static int
far_both_answered(void)
{
	return far_seen[0].opened && far_seen[1].opened;
}

static int
agent_got_all(void)
{
	return agent_end.got == FAR_BYTES;
}

static int
far_done(void)
{
	return far_seen[0].closed && agent_end.closed;
}

static size_t
budget_used(struct budget *b)
{
	size_t used;

	pthread_mutex_lock(b->mu);
	used = b->used;
	pthread_mutex_unlock(b->mu);
	return used;
}

static void
far_close_here(void *arg)
{
	looplink_close(arg);
}

static void
test_far_side(void **state)
{
	struct mux_config cfg = MUX_DEFAULT_CONFIG;
	struct store_agent a;
	struct ft_tun *t;
	struct gateway *gw;
	EVP_PKEY *key;
	char err[200];

	(void)state;
	far_f = ft_new(16);
	gw = &far_f->gw;
	gw->mux_config.window = WINDOW;
	gw->budget = (struct budget)BUDGET_DEFAULT;
	gw->budget.mu = &budget_mu;
	gw->mux_config.budget = &gw->budget;
	ft_make_agent(far_f, "node-1", &key, &a);
	ft_make_active(far_f, &a);
	t = ft_agent_connect(far_f, &a, key);
	EVP_PKEY_free(key);
	assert_true(session_is_active(t->s));
	ft_tun_attach(t, WINDOW, &agent_mux_handlers, NULL);
	snprintf(far_agent_id, sizeof(far_agent_id), "%s", session_agent_id(t->s));
	snprintf(far_node, sizeof(far_node), "%s", session_node(t->s));

	loops = loops_new(gw->base, 2, gw, err, sizeof(err));
	assert_non_null(loops);
	cfg.window = WINDOW;
	cfg.max_payload = BLOCK;
	cfg.tx_high_water = WINDOW;
	cfg.budget = &gw->budget;
	gw->looplinks = looplinks_new(loops, 2, &cfg, peer_route_loop_open, gw,
	    err, sizeof(err));
	assert_non_null(gw->looplinks);

	gw->loops = loops;
	gw->nloops = 2;
	assert_int_equal(loop_call(&loops[1], far_open, NULL, NULL), 0);
	far_wait(t, far_both_answered);
	/* Picked on loop 1: the agent on loop 0, over the link. */
	assert_int_equal(far_seen[0].pick_status, 0);
	assert_false(far_seen[0].pick_local);
	assert_int_equal(far_seen[0].pick_loop, 0);
	assert_true(far_seen[0].ok);
	assert_false(far_seen[1].ok);
	assert_string_equal(far_seen[1].code, "agent_not_here");
	far_wait(t, agent_got_all);
	assert_string_equal(agent_end.target, "127.0.0.1:22");
	assert_int_equal(agent_end.bad, 0);
	/* Mid-stream: the far half is not listed; the principal holds the
	 * agent side's window only; the process holds three (the agent's
	 * stream, both ends of the link). */
	assert_int_equal(live_stream_count(&gw->live_streams), 0);
	assert_int_equal(shares_principal(gw, "user:alice")->used, WINDOW);
	assert_int_equal(budget_used(&gw->budget), 3 * WINDOW);

	assert_int_equal(loop_call(&loops[1], far_fin_now, NULL, NULL), 0);
	far_wait(t, far_done);
	/* Its DATA was copied into the link (mux_stream_send: link_sendv),
	 * counted as one sent by reference is. */
	{
		uint64_t n, bytes;

		looplink_counts(gw->looplinks, 1, 0, &n, &bytes);
		assert_int_equal(bytes, FAR_BYTES);
	}
	assert_string_equal(far_seen[0].close_code, "done");
	assert_string_equal(agent_end.close_code, "done");
	assert_true(agent_end.fin);
	assert_int_equal(shares_principal(gw, "user:alice")->used, 0);
	assert_int_equal(budget_used(&gw->budget), 0);

	assert_int_equal(loop_call(&loops[1], far_close_here, gw->looplinks, NULL), 0);
	looplink_close(gw->looplinks);
	loops_stop(loops, 2);
	looplinks_free(gw->looplinks);
	gw->looplinks = NULL;
	gw->loops = NULL;
	gw->nloops = 0;
	loops_free(loops, 2);
	loops = NULL;
	ft_free(far_f);
}

/* ---- one LINK per pass (test_one_link_per_pass) ---- */

static atomic_size_t pass_received;
static int pass_opened;

static void
pass_rx_data(struct mux_stream *s, const uint8_t *data, size_t len, void *arg)
{
	(void)s;
	(void)data;
	(void)arg;
	atomic_fetch_add(&pass_received, len);
}

static void
pass_close(struct mux_stream *s, const char *code, void *arg)
{
	(void)s;
	(void)code;
	(void)arg;
}

static const struct mux_stream_handlers pass_rx_handlers = {
	.on_data = pass_rx_data,
	.on_close = pass_close,
};

static void
pass_open(void *ctx, unsigned from, struct mux_stream *s,
    const struct frame_open *req)
{
	(void)ctx;
	(void)from;
	(void)req;
	assert_int_equal(mux_stream_accept(s, NULL, &pass_rx_handlers, NULL), 0);
}

static void
pass_opened_cb(struct mux_stream *s, int ok, const char *code,
    const char *reason, void *arg)
{
	(void)s;
	(void)code;
	(void)reason;
	(void)arg;
	assert_true(ok);
	pass_opened = 1;
}

static const struct mux_stream_handlers pass_tx_handlers = {
	.on_opened = pass_opened_cb,
	.on_close = pass_close,
};

static int
pass_is_open(void)
{
	return pass_opened;
}


/* The eventfd writes made to l since the last look (its counter, read
 * and so reset; the loop never reads it). */
static uint64_t
wakes_of(const struct loop *l)
{
	uint64_t count = 0;

	if (read(l->efd, &count, sizeof(count)) != (ssize_t)sizeof(count))
		return 0;                            /* EAGAIN: none */
	return count;
}

/* Waits (a deadline, not a timing goal) until l's next call wakes it. */
static void
until_asleep(struct loop *l)
{
	struct timespec until, now;
	int awake = 1;

	clock_gettime(CLOCK_MONOTONIC, &until);
	until.tv_sec += 10;
	for (;;) {
		pthread_mutex_lock(&l->mu);
		awake = l->awake;
		pthread_mutex_unlock(&l->mu);
		if (!awake)
			return;
		clock_gettime(CLOCK_MONOTONIC, &now);
		assert_true(now.tv_sec < until.tv_sec ||
		    (now.tv_sec == until.tv_sec && now.tv_nsec < until.tv_nsec));
		sched_yield();
	}
}

/* Waits (a deadline, not a timing goal) until loop 1 received n bytes. */
static void
until_received(size_t n)
{
	struct timespec until, now;

	clock_gettime(CLOCK_MONOTONIC, &until);
	until.tv_sec += 10;
	while (atomic_load(&pass_received) < n) {
		clock_gettime(CLOCK_MONOTONIC, &now);
		assert_true(now.tv_sec < until.tv_sec ||
		    (now.tv_sec == until.tv_sec && now.tv_nsec < until.tv_nsec));
		sched_yield();
	}
	assert_int_equal(atomic_load(&pass_received), n);
}

static void
close_far(void *arg)
{
	looplink_close(arg);
}

/* Frames written in one pass of loop 0 go to loop 1 as one LINK message,
 * sent at the end of that pass: none before it ends, then one wake of
 * the sleeping loop 1, which takes all three frames. */
static void
test_one_link_per_pass(void **state)
{
	struct event_base *base = event_base_new();
	struct mux_config cfg = MUX_DEFAULT_CONFIG;
	struct frame_open req;
	struct mux_stream *s;
	char err[200];

	(void)state;
	assert_non_null(base);
	budget.mu = &budget_mu;
	loops = loops_new(base, 2, NULL, err, sizeof(err));
	assert_non_null(loops);
	watchdog = evtimer_new(base, watchdog_cb, NULL);
	cfg.budget = &budget;
	links = looplinks_new(loops, 2, &cfg, pass_open, NULL, err, sizeof(err));
	assert_non_null(links);
	frame_open_init(&req, "one-pass", NULL);
	s = looplink_open(links, 1, &req, &pass_tx_handlers, NULL, err,
	    sizeof(err));
	assert_non_null(s);
	run_until(pass_is_open);
	until_asleep(&loops[1]);
	(void)wakes_of(&loops[1]);
	/* This thread is loop 0's, between two of its passes: what it sends
	 * now is due at the end of the pass that runs next. */
	for (int i = 0; i < 3; i++)
		assert_int_equal(mux_stream_send(s, (const uint8_t *)"abc", 3), 3);
	assert_int_equal(wakes_of(&loops[1]), 0);
	/* Loop 0's pass: its end sends the LINK; loop 1 takes it on its own
	 * thread (nothing comes back to wake loop 0). */
	assert_int_equal(event_base_loop(base, EVLOOP_NONBLOCK), 0);
	until_received(9);
	assert_int_equal(wakes_of(&loops[1]), 1);

	assert_int_equal(loop_call(&loops[1], close_far, links, NULL), 0);
	looplink_close(links);
	loops_stop(loops, 2);
	looplinks_free(links);
	loops_free(loops, 2);
	event_free(watchdog);
	event_base_free(base);
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_link),
		cmocka_unit_test(test_far_side),
		cmocka_unit_test(test_one_link_per_pass),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
