/*
 * test_relay.c: gateway/routes/relay.c joining an operator's stream (one
 * stream of a tether.v1 connection, as tetherctl forward opens) to a
 * stream of an agent's tunnel, all in one process: the operator's
 * connection is a pair of multiplexers over a fake mux_io, the agent's
 * tunnel a real session (fake_tunnel.h) with the agent's multiplexer on
 * its far side.  Bytes cross intact both ways, past many windows; FIN
 * crosses and ends both streams "done"; credit is kept (a reader that does
 * not drain holds the sender to the windows between them); a stalled
 * reader does not stall another stream of the same tunnel; a RESET, a
 * refusal and a lost tunnel reach the other side; a RESET before the
 * agent answered is a refusal there.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <event2/buffer.h>

#include "fake_tunnel.h"
#include "livestreams.h"
#include "mux.h"
#include "reach.h"
#include "relay.h"
#include "session.h"

#define WINDOW (64u << 10)     /* every stream's window in this test */
#define ENDS_MAX 4

/* One end of a stream: what it sends, what it got, how it ended. */
struct end {
	struct mux_stream *st;     /* NULL once closed */
	uint8_t seed;              /* its bytes: (offset * 7 + seed) */
	uint8_t peer_seed;         /* the other end's */
	char target[64];           /* agent ends: what the OPEN asked for */
	int opened, ok;
	char code[32], reason[128];
	size_t to_send, sent;
	int fin_after, fin_sent;   /* FIN once to_send is sent */
	size_t got, held;          /* received; of which not drained yet */
	int stall;                 /* does not drain what it gets */
	int bad_bytes;
	int fin;                   /* the peer's FIN */
	int closed;
	char close_code[32];
};

struct wire {
	struct mux *m;             /* this side's multiplexer */
	struct evbuffer *out;      /* its messages, not yet carried */
};

struct ctx {
	struct ft *f;
	struct ft_tun *tun;        /* the agent's tunnel */
	struct mux *agent;         /* the agent's multiplexer */
	struct wire op, gw;        /* the operator's connection: both sides */
	struct end ops[ENDS_MAX];  /* the operator's streams */
	struct end agents[ENDS_MAX]; /* the agent's, in the order opened */
	int nagents;
	int refuse;                /* the agent refuses OPENs */
	int reset_open;            /* the agent resets OPENs before answering */
	char principal[32];
};

static uint8_t
pattern(size_t off, uint8_t seed)
{
	return (uint8_t)(off * 7 + seed);
}

/* ---- an end's handlers ---- */

static void
end_send(struct end *e)
{
	uint8_t buf[16384];

	while (e->st != NULL && e->sent < e->to_send) {
		size_t n = e->to_send - e->sent, k;

		if (n > sizeof(buf))
			n = sizeof(buf);
		for (size_t i = 0; i < n; i++)
			buf[i] = pattern(e->sent + i, e->seed);
		k = mux_stream_send(e->st, buf, n);
		e->sent += k;
		if (k < n)
			return;
	}
	if (e->st != NULL && e->fin_after && !e->fin_sent && e->sent == e->to_send) {
		e->fin_sent = 1;
		mux_stream_fin(e->st);
	}
}

static void
end_opened(struct mux_stream *s, int ok, const char *code, const char *reason,
    void *arg)
{
	struct end *e = arg;

	e->opened = 1;
	e->ok = ok;
	snprintf(e->code, sizeof(e->code), "%s", code != NULL ? code : "");
	snprintf(e->reason, sizeof(e->reason), "%s", reason != NULL ? reason : "");
	if (!ok)
		e->st = NULL;
}

static void
end_data(struct mux_stream *s, const uint8_t *data, size_t len, void *arg)
{
	struct end *e = arg;

	for (size_t i = 0; i < len; i++)
		e->bad_bytes += data[i] != pattern(e->got + i, e->peer_seed);
	e->got += len;
	if (e->stall)
		e->held += len;
	else
		mux_stream_drained(s, len);
}

static void
end_writable(struct mux_stream *s, void *arg)
{
	end_send(arg);
}

static void
end_fin(struct mux_stream *s, void *arg)
{
	struct end *e = arg;

	e->fin = 1;
}

static void
end_close(struct mux_stream *s, const char *code, void *arg)
{
	struct end *e = arg;

	e->closed++;
	snprintf(e->close_code, sizeof(e->close_code), "%s", code);
	e->st = NULL;
}

static const struct mux_stream_handlers end_handlers = {
	.on_opened = end_opened,
	.on_data = end_data,
	.on_writable = end_writable,
	.on_fin = end_fin,
	.on_close = end_close,
};

/* The stalled end reads again: drains what it holds. */
static void
end_release(struct end *e)
{
	e->stall = 0;
	if (e->st != NULL && e->held > 0)
		mux_stream_drained(e->st, e->held);
	e->held = 0;
}

/* ---- the agent ---- */

static void
agent_on_open(struct mux *m, struct mux_stream *st, const struct frame_open *req,
    void *arg)
{
	struct ctx *c = arg;
	struct end *e;

	if (c->refuse) {
		mux_stream_refuse(st, "refused", "connection refused by 127.0.0.1:22");
		return;
	}
	if (c->reset_open) {
		mux_stream_reset(st, "boom");
		return;
	}
	assert_true(c->nagents < ENDS_MAX);
	e = &c->agents[c->nagents];
	e->seed = (uint8_t)(100 + c->nagents);
	e->peer_seed = (uint8_t)(c->nagents + 1);
	c->nagents++;
	snprintf(e->target, sizeof(e->target), "%s", req->target);
	assert_int_equal(mux_stream_accept(st, NULL, &end_handlers, e), 0);
	e->st = st;
	e->opened = e->ok = 1;
}

static const struct mux_handlers agent_mux_handlers = { .on_open = agent_on_open };

/* ---- the gateway's side of the operator's connection ---- */

static void
gw_on_open(struct mux *m, struct mux_stream *cs, const struct frame_open *req,
    void *arg)
{
	struct ctx *c = arg;
	struct relay_who who = {
		.principal = c->principal,
		.cluster = c->f->cluster,
		.target = req->target,
	};
	struct reach r;

	reach_local(&r, &c->f->gw, c->tun->s);
	relay_start_stream(&c->f->gw, &r, cs, &who);
}

static const struct mux_handlers gw_mux_handlers = { .on_open = gw_on_open };
static const struct mux_handlers op_mux_handlers = { 0 };

/* ---- the operator's connection: a fake mux_io each way ---- */

static int
wire_sendv(void *arg, const struct iovec *iov, int iovcnt)
{
	struct wire *w = arg;

	return ft_queue_msg(w->out, iov, iovcnt);
}

static size_t
wire_pending(void *arg)
{
	struct wire *w = arg;

	return evbuffer_get_length(w->out);
}

static const struct mux_io wire_io = {
	.sendv = wire_sendv,
	.pending = wire_pending,
};

/* Carries what from queued now to to's multiplexer; returns how many. */
static size_t
wire_carry(struct wire *from, struct wire *to)
{
	size_t n = 0, left = evbuffer_get_length(from->out), len;
	uint8_t *buf;
	struct frame fr;
	char err[160];

	while (left > 0 && (len = ft_next_msg(from->out, &buf)) > 0) {
		left -= len + 4;
		assert_int_equal(frame_decode(buf, len, &fr, err, sizeof(err)), 0);
		assert_int_equal(mux_on_frame(to->m, &fr, err, sizeof(err)), 0);
		free(buf);
		n++;
	}
	if (evbuffer_get_length(from->out) == 0)
		mux_on_drain(from->m);
	return n;
}

/* Carries every message both ways, everywhere, until none is left. */
static void
pump(struct ctx *c)
{
	size_t n;
	int rounds = 0;

	do {
		n = ft_pump(c->f);
		if (c->op.m != NULL && c->gw.m != NULL)
			n += wire_carry(&c->op, &c->gw) + wire_carry(&c->gw, &c->op);
		assert_true(++rounds < 100000);
	} while (n > 0);
}

static int
setup(void **state)
{
	struct ctx *c = calloc(1, sizeof(*c));
	struct mux_config mc = MUX_DEFAULT_CONFIG;
	struct store_agent a;
	EVP_PKEY *key;

	assert_non_null(c);
	c->f = ft_new(16);
	c->f->gw.mux_config.window = WINDOW;
	ft_make_agent(c->f, "node-1", &key, &a);
	ft_make_active(c->f, &a);
	c->tun = ft_agent_connect(c->f, &a, key);
	EVP_PKEY_free(key);
	assert_true(session_is_active(c->tun->s));
	c->agent = ft_tun_attach(c->tun, WINDOW, &agent_mux_handlers, c);
	snprintf(c->principal, sizeof(c->principal), "user:alice");
	mc.window = WINDOW;
	assert_non_null(c->op.out = evbuffer_new());
	assert_non_null(c->gw.out = evbuffer_new());
	assert_non_null(c->op.m = mux_new(c->f->gw.base, &mc, &wire_io, &c->op,
	    &op_mux_handlers, c));
	mc.odd_ids = 1;
	assert_non_null(c->gw.m = mux_new(c->f->gw.base, &mc, &wire_io, &c->gw,
	    &gw_mux_handlers, c));
	*state = c;
	return 0;
}

static int
teardown(void **state)
{
	struct ctx *c = *state;

	/* The operator's connection goes, then the tunnel (ft_free). */
	mux_free(c->op.m);
	mux_free(c->gw.m);
	ft_free(c->f);
	evbuffer_free(c->op.out);
	evbuffer_free(c->gw.out);
	free(c);
	return 0;
}

/* The operator opens stream i to target; the relay and the agent answer. */
static struct end *
op_open(struct ctx *c, int i)
{
	struct end *e = &c->ops[i];
	struct frame_open req;

	frame_open_init(&req, "127.0.0.1:22", NULL);
	e->seed = (uint8_t)(i + 1);
	e->peer_seed = (uint8_t)(100 + c->nagents);
	assert_non_null(e->st = mux_open(c->op.m, NULL, &req, &end_handlers, e));
	pump(c);
	assert_int_equal(e->opened, 1);
	return e;
}

static void
test_joined(void **state)
{
	struct ctx *c = *state;
	struct end *op = op_open(c, 0), *ag = &c->agents[0];
	const size_t up = 5 * WINDOW + 123, down = 7 * WINDOW + 45;

	assert_int_equal(op->ok, 1);
	assert_int_equal(c->nagents, 1);
	assert_string_equal(ag->target, "127.0.0.1:22");
	/* One relay, listed for the status page while it lives. */
	assert_int_equal(live_stream_count(&c->f->gw.live_streams), 1);
	op->to_send = up;
	op->fin_after = 1;
	ag->to_send = down;
	ag->fin_after = 1;
	end_send(op);
	end_send(ag);
	pump(c);
	assert_int_equal(ag->got, up);
	assert_int_equal(op->got, down);
	assert_int_equal(ag->bad_bytes + op->bad_bytes, 0);
	assert_int_equal(ag->fin, 1);
	assert_int_equal(op->fin, 1);
	/* FIN both ways: both ends closed "done", nothing left open. */
	assert_int_equal(op->closed, 1);
	assert_string_equal(op->close_code, "done");
	assert_int_equal(ag->closed, 1);
	assert_string_equal(ag->close_code, "done");
	assert_int_equal(mux_stream_count(c->gw.m), 0);
	assert_int_equal(mux_stream_count(c->agent), 0);
	assert_int_equal(live_stream_count(&c->f->gw.live_streams), 0);
}

/* Credit is kept: an agent that does not read holds the operator to the
 * windows between them (the agent's stream and the relay's buffer, one
 * window each); once it reads, the rest follows. */
static void
test_credit(void **state)
{
	struct ctx *c = *state;
	struct end *op = op_open(c, 0), *ag = &c->agents[0];
	const size_t total = 16 * WINDOW;

	ag->stall = 1;
	op->to_send = total;
	end_send(op);
	pump(c);
	assert_true(ag->got > 0);
	assert_true(ag->got <= WINDOW);
	assert_true(op->sent <= 2 * WINDOW);
	assert_true(op->sent < total);
	assert_true(mux_stream_buffered(ag->st) <= WINDOW);
	end_release(ag);
	pump(c);
	assert_int_equal(op->sent, total);
	assert_int_equal(ag->got, total);
	assert_int_equal(ag->bad_bytes, 0);
}

/* Two streams of one tunnel: the operator stops reading one; the other
 * carries all its bytes meanwhile. */
static void
test_stalled_reader(void **state)
{
	struct ctx *c = *state;
	struct end *op1 = op_open(c, 0), *ag1 = &c->agents[0];
	struct end *op2 = op_open(c, 1), *ag2 = &c->agents[1];
	const size_t total = 16 * WINDOW;

	assert_int_equal(c->nagents, 2);
	op1->stall = 1;
	ag1->to_send = total;
	ag2->to_send = total;
	end_send(ag1);
	end_send(ag2);
	pump(c);
	assert_int_equal(op2->got, total);
	assert_int_equal(op2->bad_bytes, 0);
	assert_true(op1->got <= WINDOW);
	assert_true(ag1->sent <= 2 * WINDOW);
	end_release(op1);
	pump(c);
	assert_int_equal(op1->got, total);
	assert_int_equal(op1->bad_bytes, 0);
}

static void
test_resets(void **state)
{
	struct ctx *c = *state;
	struct end *op1 = op_open(c, 0), *ag1 = &c->agents[0];
	struct end *op2 = op_open(c, 1), *ag2 = &c->agents[1];

	/* The operator resets: the agent's stream is reset. */
	mux_stream_reset(op1->st, "cancelled");
	op1->st = NULL;
	pump(c);
	assert_int_equal(ag1->closed, 1);
	assert_string_equal(ag1->close_code, "client_gone");
	/* The agent resets: the operator sees its code. */
	mux_stream_reset(ag2->st, "boom");
	ag2->st = NULL;
	pump(c);
	assert_int_equal(op2->closed, 1);
	assert_string_equal(op2->close_code, "boom");
	assert_int_equal(mux_stream_count(c->gw.m), 0);
	assert_int_equal(mux_stream_count(c->agent), 0);
	assert_int_equal(live_stream_count(&c->f->gw.live_streams), 0);
}

static void
test_refused(void **state)
{
	struct ctx *c = *state;
	struct end *op;

	c->refuse = 1;
	op = op_open(c, 0);
	assert_int_equal(op->ok, 0);
	assert_string_equal(op->code, "refused");
	assert_string_equal(op->reason, "connection refused by 127.0.0.1:22");
	assert_int_equal(mux_stream_count(c->gw.m), 0);
	assert_int_equal(live_stream_count(&c->f->gw.live_streams), 0);
}

/* The agent resets the stream before answering its OPEN (mux.h: a RESET
 * may come at any time; on the gateway's side it is on_close of a stream
 * still opening): the operator's stream is refused with its code, not
 * left opening -- a raw client's upgrade would wait unanswered. */
static void
test_reset_before_answer(void **state)
{
	struct ctx *c = *state;
	struct end *op;

	c->reset_open = 1;
	op = op_open(c, 0);
	assert_int_equal(op->ok, 0);
	assert_string_equal(op->code, "boom");
	assert_int_equal(op->closed, 0);
	assert_int_equal(mux_stream_count(c->gw.m), 0);
	assert_int_equal(mux_stream_count(c->agent), 0);
	assert_int_equal(live_stream_count(&c->f->gw.live_streams), 0);
}

/* The agent's tunnel goes: the operator's stream ends with it. */
static void
test_tunnel_lost(void **state)
{
	struct ctx *c = *state;
	struct end *op = op_open(c, 0);

	assert_int_equal(op->ok, 1);
	ft_tun_gone(c->tun);
	pump(c);
	assert_int_equal(op->closed, 1);
	assert_string_equal(op->close_code, "tunnel_lost");
	assert_int_equal(live_stream_count(&c->f->gw.live_streams), 0);
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_joined, setup, teardown),
		cmocka_unit_test_setup_teardown(test_credit, setup, teardown),
		cmocka_unit_test_setup_teardown(test_stalled_reader, setup, teardown),
		cmocka_unit_test_setup_teardown(test_resets, setup, teardown),
		cmocka_unit_test_setup_teardown(test_refused, setup, teardown),
		cmocka_unit_test_setup_teardown(test_reset_before_answer, setup, teardown),
		cmocka_unit_test_setup_teardown(test_tunnel_lost, setup, teardown),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
