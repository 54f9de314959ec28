/*
 * fake_tunnel.c: a gateway with fake agent tunnels for unit tests (see
 * fake_tunnel.h).
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include "fake_tunnel.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <event2/buffer.h>
#include <event2/event.h>

#include "agentdir.h"
#include "agentkey.h"
#include "face.h"
#include "hub.h"
#include "mux.h"
#include "session.h"
#include "shares.h"
#include "store_worker.h"

/* How long one wait may take before the test fails instead of hanging (an
 * established tunnel has no handshake timer to end it).  Not a timing
 * goal: every wait ends in milliseconds unless the behaviour is broken. */
#define WATCHDOG_S 15

/* ---- the transport ---- */

static int
tun_send(void *arg, const struct frame *fr)
{
	struct ft_tun *t = arg;

	if (t->closed)
		t->sends_after_close++;
	assert_true(t->nsent < FT_SENT_MAX);
	t->sent[t->nsent++] = *fr;
	return 0;
}

static void
tun_close(void *arg)
{
	struct ft_tun *t = arg;

	t->closed++;
}

static const char *
tun_peer(const void *arg)
{
	return "192.0.2.7:40000";
}

int
ft_queue_msg(struct evbuffer *q, const struct iovec *iov, int iovcnt)
{
	uint32_t len = 0;

	for (int i = 0; i < iovcnt; i++)
		len += (uint32_t)iov[i].iov_len;
	if (evbuffer_add(q, &len, sizeof(len)) != 0)
		return -1;
	for (int i = 0; i < iovcnt; i++)
		if (evbuffer_add(q, iov[i].iov_base, iov[i].iov_len) != 0)
			return -1;
	return 0;
}

size_t
ft_next_msg(struct evbuffer *q, uint8_t **buf)
{
	uint32_t len;

	if (evbuffer_get_length(q) < sizeof(len))
		return 0;
	assert_int_equal(evbuffer_remove(q, &len, sizeof(len)), sizeof(len));
	*buf = malloc(len > 0 ? len : 1);
	assert_non_null(*buf);
	assert_int_equal(evbuffer_remove(q, *buf, len), (int)len);
	return len;
}

/* The session's mux: queued for the agent's side. */
static int
tun_sendv(void *arg, const struct iovec *iov, int iovcnt)
{
	struct ft_tun *t = arg;

	return ft_queue_msg(t->to_agent, iov, iovcnt);
}

static size_t
tun_pending(void *arg)
{
	struct ft_tun *t = arg;

	return evbuffer_get_length(t->to_agent);
}

static const struct mux_io tun_bulk = {
	.sendv = tun_sendv,
	.pending = tun_pending,
};

static const struct session_transport tun_io = {
	.send = tun_send,
	.close = tun_close,
	.peer = tun_peer,
	.bulk = &tun_bulk,
};

/* The agent's mux: queued for the session. */
static int
agent_sendv(void *arg, const struct iovec *iov, int iovcnt)
{
	struct ft_tun *t = arg;

	return ft_queue_msg(t->to_gateway, iov, iovcnt);
}

static size_t
agent_pending(void *arg)
{
	struct ft_tun *t = arg;

	return evbuffer_get_length(t->to_gateway);
}

static const struct mux_io agent_io = {
	.sendv = agent_sendv,
	.pending = agent_pending,
};

static const struct hub_ops ft_hub_ops = {
	.node = session_node,
	.is_active = session_is_active,
	.send_settings = session_send_settings,
};

/* ---- the gateway ---- */

static void
on_watchdog(evutil_socket_t fd, short what, void *arg)
{
	struct ft *f = arg;

	f->expired = 1;
}

/* The store thread's timing hook: counts its calls by name. */
static void
count_op(void *arg, const char *op, double seconds)
{
	struct ft *f = arg;
	int i;

	(void)seconds;
	pthread_mutex_lock(&f->ops_mu);
	for (i = 0; i < f->nops && strcmp(f->ops[i].op, op) != 0; i++)
		;
	if (i == f->nops && f->nops < FT_OPS_MAX)
		snprintf(f->ops[f->nops++].op, sizeof(f->ops[0].op), "%s", op);
	if (i < f->nops)
		f->ops[i].n++;
	pthread_mutex_unlock(&f->ops_mu);
}

struct ft *
ft_new(size_t cap)
{
	struct ft *f = calloc(1, sizeof(*f));
	struct gateway_limits limits = GATEWAY_DEFAULT_LIMITS;
	struct mux_config mc = MUX_DEFAULT_CONFIG;
	struct store_cluster c;
	char url[160], err[STORE_ERROR_MAX + 1];

	assert_non_null(f);
	snprintf(f->dir, sizeof(f->dir), "/tmp/tether-unit-XXXXXX");
	assert_non_null(mkdtemp(f->dir));
	snprintf(url, sizeof(url), "sqlite://%s/tether.db", f->dir);
	assert_int_equal(store_open(url, &f->st, err, sizeof(err)), STORE_OK);
	f->gw.limits = limits;
	gateway_counts_init(&f->gw);
	mc.odd_ids = 1;
	f->gw.mux_config = mc;
	snprintf(f->gw.replica_id, sizeof(f->gw.replica_id), "r-here");
	f->gw.store = f->st;      /* start-up calls (presence_start) */
	assert_non_null(f->gw.base = event_base_new());
	assert_non_null(f->gw.hub = hub_new(&ft_hub_ops));
	assert_non_null(f->gw.agents = agentdir_new());
	assert_int_equal(gw_face_init(&f->gw), 0);
	assert_non_null(f->watchdog = evtimer_new(f->gw.base, on_watchdog, f));
	assert_int_equal(pthread_mutex_init(&f->ops_mu, NULL), 0);
	assert_int_equal(store_worker_start(f->gw.base, url, cap, count_op, f,
	    &f->gw.storew, err, sizeof(err)), 0);
	assert_int_equal(store_cluster_create(f->st, "one", gateway_now(), &c, err,
	    sizeof(err)), STORE_OK);
	snprintf(f->cluster, sizeof(f->cluster), "%s", c.id);
	return f;
}

int
ft_store_calls(struct ft *f, const char *op)
{
	int n = 0;

	pthread_mutex_lock(&f->ops_mu);
	for (int i = 0; i < f->nops; i++)
		if (strcmp(f->ops[i].op, op) == 0)
			n = f->ops[i].n;
	pthread_mutex_unlock(&f->ops_mu);
	return n;
}

void
ft_free(struct ft *f)
{
	char p[256];

	/* What each tunnel does when its transport goes. */
	for (int i = 0; i < f->ntun; i++)
		if (f->tun[i].s != NULL)
			ft_tun_gone(&f->tun[i]);
	for (int i = 0; i < f->ntun; i++) {
		evbuffer_free(f->tun[i].to_agent);
		evbuffer_free(f->tun[i].to_gateway);
	}
	assert_int_equal(hub_count(f->gw.hub), 0);
	assert_int_equal(agentdir_count(f->gw.agents), 0);
	assert_int_equal(f->gw.handshakes, 0);
	event_free(f->watchdog);
	store_worker_stop(f->gw.storew);
	hub_free(f->gw.hub);
	agentdir_free(f->gw.agents);
	gw_face_fini(&f->gw);
	shares_free_all(&f->gw);
	if (f->gw.trim_timer != NULL)
		event_free(f->gw.trim_timer);
	gateway_counts_fini(&f->gw);
	event_base_free(f->gw.base);
	store_close(f->st);
	snprintf(p, sizeof(p), "rm -rf %s", f->dir);
	assert_int_equal(system(p), 0);
	pthread_mutex_destroy(&f->ops_mu);
	free(f);
}

/* ---- tunnels ---- */

struct ft_tun *
ft_tun_open(struct ft *f)
{
	struct ft_tun *t;

	assert_true(f->ntun < FT_TUNS_MAX);
	t = &f->tun[f->ntun++];
	t->ft = f;
	assert_non_null(t->to_agent = evbuffer_new());
	assert_non_null(t->to_gateway = evbuffer_new());
	/* What the route takes before it makes a session (tunnel.c). */
	assert_int_equal(gateway_handshake_take(&f->gw), 0);
	assert_int_equal(gateway_handshake_source_take(&f->gw, tun_peer(t)), 0);
	assert_non_null(t->s = session_new(&f->gw, &tun_io, t));
	return t;
}

void
ft_tun_gone(struct ft_tun *t)
{
	session_closed(t->s);
	t->s = NULL;
	mux_free(t->agent);
	t->agent = NULL;
}

void
ft_deliver(struct ft_tun *t, const struct frame *fr)
{
	uint8_t *buf;
	size_t len;

	assert_int_equal(frame_encode(fr, 0, &buf, &len), 0);
	session_on_message(t->s, buf, len);
	free(buf);
}

void
ft_loop_once(struct ft *f)
{
	struct timeval tv = { WATCHDOG_S, 0 };

	f->expired = 0;
	evtimer_add(f->watchdog, &tv);
	assert_int_equal(event_base_loop(f->gw.base, EVLOOP_ONCE), 0);
	evtimer_del(f->watchdog);
	assert_false(f->expired);
}

void
ft_wait_sent(struct ft_tun *t, int n)
{
	while (t->nsent < n && !t->closed)
		ft_loop_once(t->ft);
}

const struct frame *
ft_last(const struct ft_tun *t)
{
	assert_true(t->nsent > 0);
	return &t->sent[t->nsent - 1];
}

void
ft_assert_refused(struct ft_tun *t, const char *code)
{
	struct frame ping = { .type = FRAME_PING };
	int n;

	while (!t->closed)
		ft_loop_once(t->ft);
	assert_int_equal(t->closed, 1);
	assert_int_equal(ft_last(t)->type, FRAME_ERROR);
	assert_string_equal(ft_last(t)->u.error.code, code);
	assert_int_equal(t->sends_after_close, 0);
	n = t->nsent;
	ft_deliver(t, &ping);
	assert_int_equal(t->nsent, n);
	assert_int_equal(t->closed, 1);
}

/* ---- the handshake's frames ---- */

void
ft_make_hello(struct frame *h, enum frame_cred cred, const char *id, const char *node)
{
	memset(h, 0, sizeof(*h));
	h->type = FRAME_HELLO;
	h->u.hello.versions[0] = TETHER_PROTOCOL_VERSION;
	h->u.hello.nversions = 1;
	h->u.hello.cred = cred;
	snprintf(h->u.hello.id, sizeof(h->u.hello.id), "%s", id);
	snprintf(h->u.hello.node, sizeof(h->u.hello.node), "%s", node);
}

const struct frame_challenge *
ft_hello(struct ft_tun *t, enum frame_cred cred, const char *id, const char *node)
{
	struct frame h;

	ft_make_hello(&h, cred, id, node);
	ft_deliver(t, &h);
	assert_int_equal(t->nsent, 1);
	assert_int_equal(t->sent[0].type, FRAME_CHALLENGE);
	assert_int_equal(t->sent[0].u.challenge.version, TETHER_PROTOCOL_VERSION);
	assert_int_equal(t->closed, 0);
	return &t->sent[0].u.challenge;
}

void
ft_auth(struct ft_tun *t, EVP_PKEY *key, enum frame_cred cred, const char *id,
    const char *node, const uint8_t nonce[FRAME_NONCE_LEN])
{
	struct frame a = { .type = FRAME_AUTH };
	uint8_t msg[AUTH_TRANSCRIPT_MAX];
	size_t len;

	len = auth_transcript(msg, sizeof(msg), TETHER_PROTOCOL_VERSION, (int)cred,
	    id, node, nonce);
	assert_true(len > 0);
	assert_int_equal(agentkey_sign(key, msg, len, a.u.auth.sig), 0);
	ft_deliver(t, &a);
}

void
ft_register(struct ft_tun *t, EVP_PKEY *agent_key, const char *node)
{
	struct frame r = { .type = FRAME_REGISTER };

	assert_int_equal(agentkey_public(agent_key, r.u.reg.pubkey), 0);
	snprintf(r.u.reg.node, sizeof(r.u.reg.node), "%s", node);
	ft_deliver(t, &r);
}

void
ft_register_proven(struct ft_tun *t, EVP_PKEY *agent_key, EVP_PKEY *prover,
    const char *id, const char *node, const uint8_t nonce[FRAME_NONCE_LEN])
{
	struct frame r = { .type = FRAME_REGISTER };
	uint8_t msg[AUTH_TRANSCRIPT_MAX];
	size_t len;

	len = auth_transcript(msg, sizeof(msg), TETHER_PROTOCOL_VERSION,
	    FRAME_CRED_IMPORT, id, node, nonce);
	assert_true(len > 0);
	assert_int_equal(agentkey_sign(prover, msg, len, r.u.reg.key_sig), 0);
	assert_int_equal(agentkey_public(agent_key, r.u.reg.pubkey), 0);
	snprintf(r.u.reg.node, sizeof(r.u.reg.node), "%s", node);
	ft_deliver(t, &r);
}

/* ---- the store's records ---- */

void
ft_make_import(struct ft *f, struct token *tok, int64_t expires_at,
    int64_t uses_left, bool revoked)
{
	struct store_token rec = { 0 };
	char err[STORE_ERROR_MAX + 1];
	EVP_PKEY *k;

	assert_int_equal(token_generate(TOKEN_IMPORT, tok), 0);
	snprintf(rec.id, sizeof(rec.id), "%s", tok->id);
	rec.kind = TOKEN_IMPORT;
	snprintf(rec.cluster, sizeof(rec.cluster), "%s", f->cluster);
	assert_non_null(k = token_import_key(tok));
	assert_int_equal(agentkey_public(k, rec.verifier), 0);
	EVP_PKEY_free(k);
	rec.expires_at = expires_at;
	rec.uses_left = uses_left;
	rec.revoked = revoked;
	rec.created_at = gateway_now();
	assert_int_equal(store_token_insert(f->st, &rec, err, sizeof(err)), STORE_OK);
}

void
ft_make_agent(struct ft *f, const char *node, EVP_PKEY **key, struct store_agent *a)
{
	struct token tok;
	uint8_t pub[32];
	bool created;
	char err[STORE_ERROR_MAX + 1];

	ft_make_import(f, &tok, 0, -1, false);
	assert_non_null(*key = agentkey_generate());
	assert_int_equal(agentkey_public(*key, pub), 0);
	assert_int_equal(store_agent_register(f->st, tok.id, node, pub, gateway_now(),
	    a, &created, err, sizeof(err)), STORE_OK);
	assert_true(created);
	assert_int_equal(a->state, AGENT_ENROLL);
	token_clear(&tok);
}

void
ft_transition(struct ft *f, struct store_agent *a, enum agent_event ev)
{
	char err[STORE_ERROR_MAX + 1];

	assert_int_equal(store_agent_transition(f->st, a->id, ev, NULL, gateway_now(),
	    a, NULL, err, sizeof(err)), STORE_OK);
}

void
ft_make_active(struct ft *f, struct store_agent *a)
{
	ft_transition(f, a, AGENT_EV_VERIFY);
	ft_transition(f, a, AGENT_EV_VERIFY_OK);
	assert_int_equal(a->state, AGENT_ACTIVE);
}

struct ft_tun *
ft_agent_connect(struct ft *f, const struct store_agent *a, EVP_PKEY *key)
{
	struct ft_tun *t = ft_tun_open(f);
	const struct frame_challenge *c = ft_hello(t, FRAME_CRED_AGENT, a->id, a->node);

	ft_auth(t, key, FRAME_CRED_AGENT, a->id, a->node, c->nonce);
	ft_wait_sent(t, 2);
	assert_int_equal(t->closed, 0);
	assert_int_equal(t->sent[1].type, FRAME_WELCOME);
	assert_string_equal(t->sent[1].u.welcome.agent_id, a->id);
	assert_string_equal(t->sent[1].u.welcome.cluster, a->cluster);
	return t;
}

/* ---- streams end to end ---- */

struct mux *
ft_tun_attach(struct ft_tun *t, uint32_t window, const struct mux_handlers *h,
    void *arg)
{
	struct mux_config mc = MUX_DEFAULT_CONFIG;

	if (window > 0)
		mc.window = window;
	assert_non_null(t->agent = mux_new(t->ft->gw.base, &mc, &agent_io, t, h, arg));
	return t->agent;
}

/* Hands the messages queued in t now to the agent's mux, and the agent's
 * to the session; returns how many. */
static size_t
pump_tun(struct ft_tun *t)
{
	size_t n = 0, toa = evbuffer_get_length(t->to_agent);
	size_t tog = evbuffer_get_length(t->to_gateway);
	uint8_t *buf;
	size_t len;
	struct frame fr;
	char err[160];

	/* Only what was queued before this call: what it causes waits. */
	while (t->agent != NULL && toa > 0 && (len = ft_next_msg(t->to_agent, &buf)) > 0) {
		toa -= len + 4;
		assert_int_equal(frame_decode(buf, len, &fr, err, sizeof(err)), 0);
		assert_int_equal(mux_on_frame(t->agent, &fr, err, sizeof(err)), 0);
		free(buf);
		n++;
	}
	while (t->s != NULL && tog > 0 && (len = ft_next_msg(t->to_gateway, &buf)) > 0) {
		tog -= len + 4;
		session_on_message(t->s, buf, len);
		free(buf);
		n++;
	}
	if (t->s != NULL && evbuffer_get_length(t->to_agent) == 0)
		session_on_drain(t->s);
	if (t->agent != NULL && evbuffer_get_length(t->to_gateway) == 0)
		mux_on_drain(t->agent);
	return n;
}

size_t
ft_pump(struct ft *f)
{
	size_t n = 0;

	for (int i = 0; i < f->ntun; i++)
		if (f->tun[i].agent != NULL && f->tun[i].s != NULL)
			n += pump_tun(&f->tun[i]);
	assert_true(event_base_loop(f->gw.base, EVLOOP_NONBLOCK) >= 0);
	return n;
}
