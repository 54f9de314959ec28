/*
 * test_session.c: the tunnel handshake (gateway/agents/session.c) over a
 * fake transport (struct session_transport, tests/unit/support/
 * fake_tunnel.h), against a real SQLite store and the real store thread.  The happy paths: an import token's
 * HELLO/CHALLENGE/AUTH/REGISTER/REGISTERED, and an agent key's
 * HELLO/CHALLENGE/AUTH/WELCOME, then its verification to active.  Then
 * every refusal session.c can send, each asserting the ERROR frame's code
 * and that the transport was closed (and that nothing more is read).
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <event2/event.h>
#include <openssl/evp.h>

#include "agentdir.h"
#include "agentkey.h"
#include "carotate.h"
#include "face.h"
#include "fake_tunnel.h"
#include "frame.h"
#include "gateway.h"
#include "hub.h"
#include "session.h"
#include "store.h"
#include "store_worker.h"
#include "token.h"

static int
setup(void **state)
{
	*state = ft_new(16);
	return 0;
}

/* The store thread's queue holds one job. */
static int
setup_small_queue(void **state)
{
	*state = ft_new(1);
	return 0;
}

static int
teardown(void **state)
{
	ft_free(*state);
	return 0;
}

/* ---- happy paths ---- */

static void
test_import_registers(void **state)
{
	struct ft *f = *state;
	struct ft_tun *t = ft_tun_open(f);
	const struct frame_challenge *c;
	struct store_agent *list;
	struct token tok;
	EVP_PKEY *ik, *agent_key = agentkey_generate();
	uint8_t pub[32];
	size_t n;

	ft_make_import(f, &tok, gateway_now() + 3600, 1, false);
	assert_non_null(ik = token_import_key(&tok));
	assert_int_equal(f->gw.handshakes, 1);
	assert_int_equal(session_max_message(t->s), f->gw.limits.max_handshake_frame);
	assert_int_equal(session_max_queue(t->s), f->gw.limits.max_handshake_queue);
	c = ft_hello(t, FRAME_CRED_IMPORT, tok.id, "node-1");
	ft_auth(t, ik, FRAME_CRED_IMPORT, tok.id, "node-1", c->nonce);
	/* The agent sends REGISTER right behind AUTH: held while the token
	 * is looked up, then handled. */
	ft_register(t, agent_key, "node-1");
	ft_wait_sent(t, 2);
	assert_int_equal(t->nsent, 2);
	assert_int_equal(t->sent[1].type, FRAME_REGISTERED);
	assert_int_equal(t->closed, 1);
	assert_string_equal(t->sent[1].u.registered.cluster, f->cluster);
	/* It is in the store, with the key it sent. */
	assert_int_equal(store_agent_list(f->st, f->cluster, &list, &n), STORE_OK);
	assert_int_equal(n, 1);
	assert_string_equal(list[0].id, t->sent[1].u.registered.agent_id);
	assert_string_equal(list[0].node, "node-1");
	assert_int_equal(agentkey_public(agent_key, pub), 0);
	assert_memory_equal(list[0].pubkey, pub, 32);
	free(list);
	/* Registered is not connected: the hub holds nothing. */
	assert_int_equal(hub_count(f->gw.hub), 0);
	ft_tun_gone(t);
	assert_int_equal(f->gw.handshakes, 0);
	EVP_PKEY_free(ik);
	EVP_PKEY_free(agent_key);
	token_clear(&tok);
}

/* A newer agent proves its new key in REGISTER (docs/0044): REGISTERED
 * says the tunnel goes on, WELCOME follows on the same connection, and
 * the agent is held, verified and made active without a redial. */
static void
test_import_goes_on(void **state)
{
	struct ft *f = *state;
	struct ft_tun *t = ft_tun_open(f);
	const struct frame_challenge *c;
	struct frame ok = { .type = FRAME_VERIFY_OK };
	struct store_agent now;
	struct token tok;
	EVP_PKEY *ik, *agent_key = agentkey_generate();
	uint8_t nonce[FRAME_NONCE_LEN];

	ft_make_import(f, &tok, gateway_now() + 3600, 1, false);
	assert_non_null(ik = token_import_key(&tok));
	c = ft_hello(t, FRAME_CRED_IMPORT, tok.id, "node-1");
	memcpy(nonce, c->nonce, sizeof(nonce));
	ft_auth(t, ik, FRAME_CRED_IMPORT, tok.id, "node-1", nonce);
	ft_register_proven(t, agent_key, agent_key, tok.id, "node-1", nonce);
	ft_wait_sent(t, 3);
	assert_int_equal(t->closed, 0);
	assert_int_equal(t->sent[1].type, FRAME_REGISTERED);
	assert_int_equal(t->sent[1].u.registered.goes_on, 1);
	assert_int_equal(t->sent[2].type, FRAME_WELCOME);
	assert_string_equal(t->sent[2].u.welcome.agent_id, t->sent[1].u.registered.agent_id);
	assert_string_equal(t->sent[2].u.welcome.cluster, f->cluster);
	assert_string_equal(t->sent[2].u.welcome.state, "enroll");
	assert_string_equal(t->sent[2].u.welcome.key, "current");
	/* Established: the handshake's slot is free, the hub holds it. */
	assert_int_equal(f->gw.handshakes, 0);
	assert_ptr_equal(hub_find(f->gw.hub, t->sent[1].u.registered.agent_id), t->s);
	assert_int_equal(session_max_message(t->s), f->gw.limits.max_frame_bytes);
	/* Verified on this connection: enroll, verifying, active. */
	ft_wait_sent(t, 5);
	assert_int_equal(t->sent[3].type, FRAME_STATE);
	assert_string_equal(t->sent[3].u.state.state, "verifying");
	assert_int_equal(t->sent[4].type, FRAME_VERIFY);
	memcpy(ok.u.verify.nonce, t->sent[4].u.verify.nonce, FRAME_VERIFY_NONCE_LEN);
	ok.u.verify.time_ms = gateway_now_ms();
	ok.u.verify.version = TETHER_PROTOCOL_VERSION;
	ft_deliver(t, &ok);
	ft_wait_sent(t, 6);
	assert_string_equal(t->sent[5].u.state.state, "active");
	assert_true(session_is_active(t->s));
	assert_int_equal(store_agent_get(f->st, t->sent[1].u.registered.agent_id, &now),
	    STORE_OK);
	assert_int_equal(now.state, AGENT_ACTIVE);
	assert_true(now.last_seen > 0);
	/* The registration also started the verification and recorded the
	 * agent seen (docs/0045): one call, not three; VERIFY_OK's is the
	 * one transition left. */
	assert_int_equal(ft_store_calls(f, "agent_register_on"), 1);
	assert_int_equal(ft_store_calls(f, "agent_register"), 0);
	assert_int_equal(ft_store_calls(f, "agent_seen"), 0);
	assert_int_equal(ft_store_calls(f, "agent_transition"), 1);
	ft_tun_gone(t);
	assert_int_equal(hub_count(f->gw.hub), 0);
	EVP_PKEY_free(ik);
	EVP_PKEY_free(agent_key);
	token_clear(&tok);
}

/* A key proof made with another key than the one registered is refused
 * before the store registers anything: no one adopts a public key whose
 * private half they lack (docs/0044). */
static void
test_register_proof_refused(void **state)
{
	struct ft *f = *state;
	struct ft_tun *t = ft_tun_open(f);
	const struct frame_challenge *c;
	struct store_agent *list;
	struct token tok;
	EVP_PKEY *ik, *agent_key = agentkey_generate(), *other = agentkey_generate();
	uint8_t nonce[FRAME_NONCE_LEN];
	size_t n;

	ft_make_import(f, &tok, 0, -1, false);
	assert_non_null(ik = token_import_key(&tok));
	c = ft_hello(t, FRAME_CRED_IMPORT, tok.id, "node-1");
	memcpy(nonce, c->nonce, sizeof(nonce));
	ft_auth(t, ik, FRAME_CRED_IMPORT, tok.id, "node-1", nonce);
	ft_register_proven(t, agent_key, other, tok.id, "node-1", nonce);
	ft_assert_refused(t, "auth_refused");
	assert_non_null(strstr(ft_last(t)->u.error.reason, "key proof"));
	assert_int_equal(store_agent_list(f->st, f->cluster, &list, &n), STORE_OK);
	assert_int_equal(n, 0);
	free(list);
	EVP_PKEY_free(ik);
	EVP_PKEY_free(agent_key);
	EVP_PKEY_free(other);
	token_clear(&tok);
}

static void
test_agent_welcome_and_verify(void **state)
{
	struct ft *f = *state;
	struct store_agent a, now;
	struct frame ok = { .type = FRAME_VERIFY_OK }, ping = { .type = FRAME_PING };
	struct agentdir_entry e;
	EVP_PKEY *key;
	struct ft_tun *t;

	ft_make_agent(f, "node-1", &key, &a);
	t = ft_agent_connect(f, &a, key);
	assert_string_equal(t->sent[1].u.welcome.state, "enroll");
	assert_int_equal(f->gw.handshakes, 0);
	assert_ptr_equal(hub_find(f->gw.hub, a.id), t->s);
	assert_string_equal(session_agent_id(t->s), a.id);
	assert_string_equal(session_node(t->s), "node-1");
	assert_string_equal(session_cluster(t->s), f->cluster);
	assert_int_equal(session_max_message(t->s), f->gw.limits.max_frame_bytes);
	assert_int_equal(session_max_queue(t->s), f->gw.limits.max_queue_bytes);
	assert_false(session_is_active(t->s));
	/* The process's directory holds it too, not active yet. */
	assert_int_equal(agentdir_find(f->gw.agents, a.id, &e), 1);
	assert_false(e.active);
	assert_string_equal(e.node, "node-1");
	assert_ptr_equal(session_here(&f->gw, &e), t->s);
	/* Enroll: the verification starts (stored first, then told). */
	ft_wait_sent(t, 4);
	assert_int_equal(t->sent[2].type, FRAME_STATE);
	assert_string_equal(t->sent[2].u.state.state, "verifying");
	assert_int_equal(t->sent[3].type, FRAME_VERIFY);
	/* The round trip's state exists while the VERIFY is out... */
	assert_true(session_verify_outstanding(t->s));
	memcpy(ok.u.verify.nonce, t->sent[3].u.verify.nonce, FRAME_VERIFY_NONCE_LEN);
	ok.u.verify.time_ms = gateway_now_ms();
	ok.u.verify.version = TETHER_PROTOCOL_VERSION;
	ft_deliver(t, &ok);
	/* ...and goes with its answer: an idle tunnel holds none. */
	assert_false(session_verify_outstanding(t->s));
	ft_wait_sent(t, 5);
	assert_int_equal(t->sent[4].type, FRAME_STATE);
	assert_string_equal(t->sent[4].u.state.state, "active");
	assert_true(session_is_active(t->s));
	assert_int_equal(store_agent_get(f->st, a.id, &now), STORE_OK);
	assert_int_equal(now.state, AGENT_ACTIVE);
	assert_ptr_equal(hub_pick(f->gw.hub, f->cluster, "node-1", NULL), t->s);
	/* Its state change reached the directory: now it is picked there. */
	assert_int_equal(agentdir_pick(f->gw.agents, f->cluster, "node-1",
	    AGENTDIR_NO_LOOP, &e, NULL), 1);
	assert_string_equal(e.agent_id, a.id);
	assert_ptr_equal(session_here(&f->gw, &e), t->s);
	/* PING gets its PONG, same sequence. */
	ping.u.ping.seq = 77;
	ft_deliver(t, &ping);
	assert_int_equal(ft_last(t)->type, FRAME_PONG);
	assert_int_equal(ft_last(t)->u.ping.seq, 77);
	assert_int_equal(t->closed, 0);
	/* The tunnel goes: the hub forgets it. */
	ft_tun_gone(t);
	assert_null(hub_find(f->gw.hub, a.id));
	assert_int_equal(agentdir_find(f->gw.agents, a.id, NULL), 0);
	EVP_PKEY_free(key);
}

/* A failed verification (a wrong version in VERIFY_OK) is not a refusal:
 * the agent is told it is back to enroll, with why, and stays connected. */
static void
test_verify_version_mismatch(void **state)
{
	struct ft *f = *state;
	struct store_agent a;
	struct frame ok = { .type = FRAME_VERIFY_OK };
	EVP_PKEY *key;
	struct ft_tun *t;

	ft_make_agent(f, "node-1", &key, &a);
	t = ft_agent_connect(f, &a, key);
	ft_wait_sent(t, 4);
	assert_int_equal(t->sent[3].type, FRAME_VERIFY);
	memcpy(ok.u.verify.nonce, t->sent[3].u.verify.nonce, FRAME_VERIFY_NONCE_LEN);
	ok.u.verify.time_ms = gateway_now_ms();
	ok.u.verify.version = TETHER_PROTOCOL_VERSION + 1;
	ft_deliver(t, &ok);
	ft_wait_sent(t, 5);
	assert_int_equal(t->sent[4].type, FRAME_STATE);
	assert_string_equal(t->sent[4].u.state.state, "enroll");
	assert_non_null(strstr(t->sent[4].u.state.last_error, "protocol version"));
	assert_int_equal(t->closed, 0);
	assert_false(session_is_active(t->s));
	EVP_PKEY_free(key);
}

/* A VERIFY left unanswered past verify_timeout_ms fails the verification
 * (the agent is told it is back to enroll, and stays connected); its state
 * went in its own timer's callback, and a verification asked for later
 * takes it again and runs to active. */
static void
test_verify_timeout_then_again(void **state)
{
	struct ft *f = *state;
	struct store_agent a;
	struct frame ok = { .type = FRAME_VERIFY_OK };
	EVP_PKEY *key;
	struct ft_tun *t;

	f->gw.limits.verify_timeout_ms = 20;
	ft_make_agent(f, "node-1", &key, &a);
	t = ft_agent_connect(f, &a, key);
	ft_wait_sent(t, 4);
	assert_int_equal(t->sent[3].type, FRAME_VERIFY);
	assert_true(session_verify_outstanding(t->s));
	ft_wait_sent(t, 5);
	assert_int_equal(t->sent[4].type, FRAME_STATE);
	assert_string_equal(t->sent[4].u.state.state, "enroll");
	assert_non_null(strstr(t->sent[4].u.state.last_error,
	    "no verification reply within 20 ms"));
	assert_false(session_verify_outstanding(t->s));
	assert_int_equal(t->closed, 0);
	/* Asked for again (heard through the store): a new round trip. */
	ft_transition(f, &a, AGENT_EV_VERIFY);
	session_record_changed(t->s, &a);
	assert_int_equal(t->nsent, 7);
	assert_string_equal(t->sent[5].u.state.state, "verifying");
	assert_int_equal(t->sent[6].type, FRAME_VERIFY);
	assert_true(session_verify_outstanding(t->s));
	assert_memory_not_equal(t->sent[6].u.verify.nonce,
	    t->sent[3].u.verify.nonce, FRAME_VERIFY_NONCE_LEN);
	f->gw.limits.verify_timeout_ms = 10000;
	memcpy(ok.u.verify.nonce, t->sent[6].u.verify.nonce, FRAME_VERIFY_NONCE_LEN);
	ok.u.verify.time_ms = gateway_now_ms();
	ok.u.verify.version = TETHER_PROTOCOL_VERSION;
	ft_deliver(t, &ok);
	assert_false(session_verify_outstanding(t->s));
	ft_wait_sent(t, 8);
	assert_string_equal(t->sent[7].u.state.state, "active");
	assert_true(session_is_active(t->s));
	EVP_PKEY_free(key);
}

/* An active agent gets WELCOME(active) and no verification. */
static void
test_agent_active_welcome(void **state)
{
	struct ft *f = *state;
	struct store_agent a;
	EVP_PKEY *key;
	struct ft_tun *t;

	ft_make_agent(f, "node-1", &key, &a);
	ft_transition(f, &a, AGENT_EV_VERIFY);
	ft_transition(f, &a, AGENT_EV_VERIFY_OK);
	t = ft_agent_connect(f, &a, key);
	assert_string_equal(t->sent[1].u.welcome.state, "active");
	assert_true(session_is_active(t->s));
	assert_int_equal(t->nsent, 2);
	EVP_PKEY_free(key);
}

/* ---- CA rotation: SETTINGS "ca" (docs/0033) ---- */

/* An active agent whose HELLO names a release, up to WELCOME. */
static struct ft_tun *
connect_released(struct ft *f, const struct store_agent *a, EVP_PKEY *key)
{
	struct ft_tun *t = ft_tun_open(f);
	struct frame h;

	ft_make_hello(&h, FRAME_CRED_AGENT, a->id, a->node);
	snprintf(h.u.hello.version, sizeof(h.u.hello.version), "9.9.9");
	ft_deliver(t, &h);
	assert_int_equal(t->sent[0].type, FRAME_CHALLENGE);
	ft_auth(t, key, FRAME_CRED_AGENT, a->id, a->node,
	    t->sent[0].u.challenge.nonce);
	ft_wait_sent(t, 2);
	assert_int_equal(t->sent[1].type, FRAME_WELCOME);
	return t;
}

/* Without a rotation (and no URL list read) no SETTINGS; in the overlap
 * the new CA and its cross-certificate follow WELCOME; the agent's ACK
 * is recorded in the store once (the same ACK again writes nothing). */
/* The CA rotation the gateway shows becomes rot (NULL: none), published
 * as certreload.c does (face.h). */
static void
set_rotation(struct ft *f, const struct ca_rotation *rot)
{
	struct gw_face *face = gw_face_edit(&f->gw);

	assert_non_null(face);
	free(face->ca_rotation);
	face->ca_rotation = NULL;
	if (rot != NULL) {
		assert_non_null(face->ca_rotation = malloc(sizeof(*rot)));
		*face->ca_rotation = *rot;
	}
	gw_face_publish(&f->gw, face);
}

static void
test_ca_settings(void **state)
{
	struct ft *f = *state;
	struct ca_rotation *rot = calloc(1, sizeof(*rot));
	struct frame ack = { .type = FRAME_SETTINGS_ACK };
	const char *sum1 = "sha256:1111111111111111111111111111111111111111111111111111111111111111";
	const char *sum2 = "sha256:2222222222222222222222222222222222222222222222222222222222222222";
	struct store_agent a, got;
	EVP_PKEY *key;
	struct ft_tun *t;
	int i;

	assert_non_null(rot);
	ft_make_agent(f, "node-1", &key, &a);
	ft_make_active(f, &a);
	t = connect_released(f, &a, key);
	assert_int_equal(t->nsent, 2);
	ft_tun_gone(t);

	rot->phase = CA_PHASE_OVERLAP;
	memset(rot->next, 0x4e, 700);
	rot->next_len = 700;
	memset(rot->cross, 0x43, 650);
	rot->cross_len = 650;
	set_rotation(f, rot);
	t = connect_released(f, &a, key);
	ft_wait_sent(t, 3);
	assert_int_equal(t->sent[2].type, FRAME_SETTINGS);
	assert_false(t->sent[2].u.settings.urls.present);
	assert_true(t->sent[2].u.settings.ca.present);
	assert_int_equal(t->sent[2].u.settings.ca.phase, FRAME_CA_OVERLAP);
	assert_int_equal(t->sent[2].u.settings.ca.next_len, 700);
	assert_memory_equal(t->sent[2].u.settings.ca.next, rot->next, 700);
	assert_int_equal(t->sent[2].u.settings.ca.cross_len, 650);
	assert_memory_equal(t->sent[2].u.settings.ca.cross, rot->cross, 650);

	ack.u.settings.ca.present = true;
	ack.u.settings.ca.nheld = 2;
	snprintf(ack.u.settings.ca.held[0], sizeof(ack.u.settings.ca.held[0]),
	    "%s", sum1);
	snprintf(ack.u.settings.ca.held[1], sizeof(ack.u.settings.ca.held[1]),
	    "%s", sum2);
	ft_deliver(t, &ack);
	for (i = 0; i < 200; i++) {
		assert_int_equal(store_agent_get(f->st, a.id, &got), STORE_OK);
		if (got.cas_known)
			break;
		ft_loop_once(f);
	}
	assert_true(got.cas_known);
	assert_non_null(strstr(got.cas, sum1));
	assert_non_null(strstr(got.cas, sum2));
	assert_int_equal(t->closed, 0);

	/* Final: the new CA alone, no cross-certificate. */
	rot->phase = CA_PHASE_FINAL;
	set_rotation(f, rot);
	assert_int_equal(hub_send_settings(f->gw.hub), 1);
	ft_wait_sent(t, 4);
	assert_int_equal(t->sent[3].u.settings.ca.phase, FRAME_CA_FINAL);
	assert_int_equal(t->sent[3].u.settings.ca.next_len, 700);
	assert_int_equal(t->sent[3].u.settings.ca.cross_len, 0);
	ft_tun_gone(t);
	set_rotation(f, NULL);
	free(rot);
	EVP_PKEY_free(key);
}

/* ---- refusals before any store call ---- */

static void
test_malformed(void **state)
{
	struct ft *f = *state;
	struct ft_tun *t = ft_tun_open(f);
	const uint8_t junk[] = { 0xc1, 0x00, 0x17 };

	session_on_message(t->s, junk, sizeof(junk));
	ft_assert_refused(t, "malformed");
	assert_non_null(strstr(ft_last(t)->u.error.reason, "malformed frame"));
}

static void
test_out_of_phase(void **state)
{
	struct ft *f = *state;
	struct ft_tun *t1 = ft_tun_open(f), *t2 = ft_tun_open(f), *t3 = ft_tun_open(f);
	struct frame a = { .type = FRAME_AUTH }, ping = { .type = FRAME_PING };
	struct frame h;

	/* AUTH before HELLO. */
	ft_deliver(t1, &a);
	ft_assert_refused(t1, "out_of_phase");
	assert_non_null(strstr(ft_last(t1)->u.error.reason, "AUTH not allowed in phase "
	    "await-hello (expected HELLO)"));
	/* A stream frame's cousin, PING, before authentication. */
	ft_deliver(t2, &ping);
	ft_assert_refused(t2, "out_of_phase");
	/* A second HELLO where AUTH is due. */
	ft_make_hello(&h, FRAME_CRED_AGENT, "a-000000000000", "node-1");
	(void)ft_hello(t3, FRAME_CRED_AGENT, "a-000000000000", "node-1");
	ft_deliver(t3, &h);
	ft_assert_refused(t3, "out_of_phase");
	assert_non_null(strstr(ft_last(t3)->u.error.reason, "expected AUTH"));
}

static void
test_version(void **state)
{
	struct ft *f = *state;
	struct ft_tun *t = ft_tun_open(f);
	struct frame h;

	ft_make_hello(&h, FRAME_CRED_AGENT, "a-000000000000", "node-1");
	h.u.hello.versions[0] = TETHER_PROTOCOL_VERSION + 1;
	h.u.hello.versions[1] = TETHER_PROTOCOL_VERSION + 7;
	h.u.hello.nversions = 2;
	ft_deliver(t, &h);
	ft_assert_refused(t, "version");
	assert_int_equal(t->nsent, 1);   /* no CHALLENGE */
}

static void
test_timeout(void **state)
{
	struct ft *f = *state;
	struct ft_tun *t;

	f->gw.limits.handshake_timeout_ms = 20;
	t = ft_tun_open(f);
	(void)ft_hello(t, FRAME_CRED_AGENT, "a-000000000000", "node-1");
	ft_assert_refused(t, "timeout");
}

/* What tunnel.c does with a text message or one over session_max_message. */
static void
test_protocol_error_kicks(void **state)
{
	struct ft *f = *state;
	struct ft_tun *t = ft_tun_open(f);

	session_protocol_error(t->s, "too_large", "message over 4096 bytes");
	ft_assert_refused(t, "too_large");
	assert_string_equal(ft_last(t)->u.error.reason, "message over 4096 bytes");
	/* Once closing, another refusal sends nothing more. */
	session_protocol_error(t->s, "protocol", "again");
	assert_int_equal(t->nsent, 1);
	assert_int_equal(t->closed, 1);
}

/* ---- import token refusals ---- */

/* HELLO and a signed AUTH with tok's key (or key, when non-NULL). */
static void
import_auth(struct ft_tun *t, const struct token *tok, EVP_PKEY *key)
{
	const struct frame_challenge *c = ft_hello(t, FRAME_CRED_IMPORT, tok->id, "node-1");
	EVP_PKEY *k = key != NULL ? key : token_import_key(tok);

	assert_non_null(k);
	ft_auth(t, k, FRAME_CRED_IMPORT, tok->id, "node-1", c->nonce);
	if (key == NULL)
		EVP_PKEY_free(k);
}

static void
test_token_unknown(void **state)
{
	struct ft *f = *state;
	struct ft_tun *t1 = ft_tun_open(f), *t2 = ft_tun_open(f);
	struct store_token admin = { 0 };
	struct token tok, atok;
	char err[STORE_ERROR_MAX + 1];

	/* Never stored. */
	assert_int_equal(token_generate(TOKEN_IMPORT, &tok), 0);
	import_auth(t1, &tok, NULL);
	ft_assert_refused(t1, "token_unknown");
	/* Stored, but an admin token's id is no import token. */
	assert_int_equal(token_generate(TOKEN_ADMIN, &atok), 0);
	snprintf(admin.id, sizeof(admin.id), "%s", atok.id);
	admin.kind = TOKEN_ADMIN;
	admin.uses_left = -1;
	token_hash(&atok, admin.verifier);
	assert_int_equal(store_token_insert(f->st, &admin, err, sizeof(err)), STORE_OK);
	import_auth(t2, &atok, NULL);
	ft_assert_refused(t2, "token_unknown");
	token_clear(&tok);
	token_clear(&atok);
}

static void
test_import_bad_proof(void **state)
{
	struct ft *f = *state;
	struct ft_tun *t1 = ft_tun_open(f), *t2 = ft_tun_open(f);
	struct token tok;
	EVP_PKEY *other = agentkey_generate(), *ik;
	const struct frame_challenge *c;
	uint8_t stale[FRAME_NONCE_LEN] = { 0 };

	ft_make_import(f, &tok, 0, -1, false);
	/* Signed by a key that is not the token's. */
	import_auth(t1, &tok, other);
	ft_assert_refused(t1, "auth_refused");
	assert_non_null(strstr(ft_last(t1)->u.error.reason, "does not verify"));
	/* The token's key, but over another nonce than the one challenged. */
	c = ft_hello(t2, FRAME_CRED_IMPORT, tok.id, "node-1");
	assert_memory_not_equal(c->nonce, stale, sizeof(stale));
	assert_non_null(ik = token_import_key(&tok));
	ft_auth(t2, ik, FRAME_CRED_IMPORT, tok.id, "node-1", stale);
	ft_assert_refused(t2, "auth_refused");
	EVP_PKEY_free(ik);
	EVP_PKEY_free(other);
	token_clear(&tok);
}

static void
test_import_revoked(void **state)
{
	struct ft *f = *state;
	struct ft_tun *t = ft_tun_open(f);
	struct token tok;

	ft_make_import(f, &tok, 0, -1, true);
	import_auth(t, &tok, NULL);
	ft_assert_refused(t, "token_revoked");
	token_clear(&tok);
}

static void
test_import_expired(void **state)
{
	struct ft *f = *state;
	struct ft_tun *t = ft_tun_open(f);
	struct token tok;

	ft_make_import(f, &tok, gateway_now() - 10, -1, false);
	import_auth(t, &tok, NULL);
	ft_assert_refused(t, "token_expired");
	assert_string_equal(ft_last(t)->u.error.reason, "import token expired");
	token_clear(&tok);
}

/* A token with no use left passes AUTH (a retried registration of a node
 * whose REGISTERED was lost spends none) and is refused at REGISTER. */
static void
test_import_used_up(void **state)
{
	struct ft *f = *state;
	struct ft_tun *t = ft_tun_open(f);
	struct token tok;
	EVP_PKEY *key = agentkey_generate();

	ft_make_import(f, &tok, 0, 0, false);
	import_auth(t, &tok, NULL);
	ft_register(t, key, "node-1");
	ft_assert_refused(t, "register_refused");
	assert_non_null(strstr(ft_last(t)->u.error.reason, "used up"));
	EVP_PKEY_free(key);
	token_clear(&tok);
}

/* The node is registered in the cluster with another key. */
static void
test_import_node_taken(void **state)
{
	struct ft *f = *state;
	struct ft_tun *t = ft_tun_open(f);
	struct store_agent a;
	struct token tok;
	EVP_PKEY *key, *other = agentkey_generate();

	ft_make_agent(f, "node-1", &key, &a);
	ft_make_import(f, &tok, 0, -1, false);
	import_auth(t, &tok, NULL);
	ft_register(t, other, "node-1");
	ft_assert_refused(t, "register_refused");
	assert_non_null(strstr(ft_last(t)->u.error.reason, "already registered"));
	EVP_PKEY_free(key);
	EVP_PKEY_free(other);
	token_clear(&tok);
}

/* A node whose key belongs to a revoked agent registers again with it. */
static void
test_import_key_revoked(void **state)
{
	struct ft *f = *state;
	struct ft_tun *t = ft_tun_open(f);
	struct store_agent a;
	struct token tok;
	EVP_PKEY *key;

	ft_make_agent(f, "node-1", &key, &a);
	ft_transition(f, &a, AGENT_EV_REVOKE);
	ft_make_import(f, &tok, 0, -1, false);
	import_auth(t, &tok, NULL);
	ft_register(t, key, "node-1");
	ft_assert_refused(t, "revoked");
	EVP_PKEY_free(key);
	token_clear(&tok);
}

static void
test_register_node_differs(void **state)
{
	struct ft *f = *state;
	struct ft_tun *t = ft_tun_open(f);
	struct token tok;
	EVP_PKEY *key = agentkey_generate();

	ft_make_import(f, &tok, 0, -1, false);
	import_auth(t, &tok, NULL);
	ft_register(t, key, "node-2");
	ft_assert_refused(t, "protocol");
	assert_non_null(strstr(ft_last(t)->u.error.reason, "differs from HELLO"));
	EVP_PKEY_free(key);
	token_clear(&tok);
}

/* Only one frame may wait for the store's answer. */
static void
test_second_frame_while_waiting(void **state)
{
	struct ft *f = *state;
	struct ft_tun *t = ft_tun_open(f);
	struct token tok;
	EVP_PKEY *key = agentkey_generate();

	ft_make_import(f, &tok, 0, -1, false);
	import_auth(t, &tok, NULL);
	ft_register(t, key, "node-1");
	ft_register(t, key, "node-1");
	assert_int_equal(t->closed, 1);
	ft_assert_refused(t, "out_of_phase");
	assert_non_null(strstr(ft_last(t)->u.error.reason, "second frame"));
	EVP_PKEY_free(key);
	token_clear(&tok);
}

/* ---- agent key refusals ---- */

static void
test_agent_unknown(void **state)
{
	struct ft *f = *state;
	struct ft_tun *t = ft_tun_open(f);
	const struct frame_challenge *c;
	EVP_PKEY *key = agentkey_generate();

	c = ft_hello(t, FRAME_CRED_AGENT, "a-0123456789ab", "node-1");
	ft_auth(t, key, FRAME_CRED_AGENT, "a-0123456789ab", "node-1", c->nonce);
	ft_assert_refused(t, "auth_refused");
	assert_string_equal(ft_last(t)->u.error.reason, "unknown agent");
	EVP_PKEY_free(key);
}

static void
test_agent_bad_signature(void **state)
{
	struct ft *f = *state;
	struct ft_tun *t = ft_tun_open(f);
	const struct frame_challenge *c;
	struct store_agent a;
	EVP_PKEY *key, *other = agentkey_generate();

	ft_make_agent(f, "node-1", &key, &a);
	c = ft_hello(t, FRAME_CRED_AGENT, a.id, "node-1");
	ft_auth(t, other, FRAME_CRED_AGENT, a.id, "node-1", c->nonce);
	ft_assert_refused(t, "auth_refused");
	assert_string_equal(ft_last(t)->u.error.reason, "agent signature does not verify");
	assert_null(hub_find(f->gw.hub, a.id));
	EVP_PKEY_free(key);
	EVP_PKEY_free(other);
}

/* The right key, but HELLO names another node than the agent's. */
static void
test_agent_node_mismatch(void **state)
{
	struct ft *f = *state;
	struct ft_tun *t = ft_tun_open(f);
	const struct frame_challenge *c;
	struct store_agent a;
	EVP_PKEY *key;

	ft_make_agent(f, "node-1", &key, &a);
	c = ft_hello(t, FRAME_CRED_AGENT, a.id, "node-2");
	ft_auth(t, key, FRAME_CRED_AGENT, a.id, "node-2", c->nonce);
	ft_assert_refused(t, "auth_refused");
	assert_string_equal(ft_last(t)->u.error.reason,
	    "node name does not match the agent's");
	assert_null(hub_find(f->gw.hub, a.id));
	EVP_PKEY_free(key);
}

static void
test_agent_revoked(void **state)
{
	struct ft *f = *state;
	struct ft_tun *t = ft_tun_open(f);
	const struct frame_challenge *c;
	struct store_agent a;
	EVP_PKEY *key;

	ft_make_agent(f, "node-1", &key, &a);
	ft_transition(f, &a, AGENT_EV_REVOKE);
	c = ft_hello(t, FRAME_CRED_AGENT, a.id, "node-1");
	ft_auth(t, key, FRAME_CRED_AGENT, a.id, "node-1", c->nonce);
	ft_assert_refused(t, "revoked");
	assert_null(hub_find(f->gw.hub, a.id));
	EVP_PKEY_free(key);
}

/* ---- refusals once established ---- */

static void
test_established_protocol(void **state)
{
	struct ft *f = *state;
	struct store_agent a;
	struct frame h, stray = { .type = FRAME_VERIFY_OK };
	struct frame open = { .type = FRAME_OPEN, .stream_id = 1 };
	EVP_PKEY *key;
	struct ft_tun *t1, *t2, *t3;

	ft_make_agent(f, "node-1", &key, &a);
	ft_transition(f, &a, AGENT_EV_VERIFY);
	ft_transition(f, &a, AGENT_EV_VERIFY_OK);
	/* A handshake frame after WELCOME. */
	t1 = ft_agent_connect(f, &a, key);
	ft_make_hello(&h, FRAME_CRED_AGENT, a.id, "node-1");
	ft_deliver(t1, &h);
	ft_assert_refused(t1, "protocol");
	assert_non_null(strstr(ft_last(t1)->u.error.reason, "unexpected HELLO"));
	ft_tun_gone(t1);
	/* A VERIFY_OK nobody asked for. */
	t2 = ft_agent_connect(f, &a, key);
	stray.u.verify.time_ms = gateway_now_ms();
	stray.u.verify.version = TETHER_PROTOCOL_VERSION;
	ft_deliver(t2, &stray);
	ft_assert_refused(t2, "protocol");
	assert_non_null(strstr(ft_last(t2)->u.error.reason, "no outstanding VERIFY"));
	ft_tun_gone(t2);
	/* An OPEN with a stream id only the gateway may use. */
	t3 = ft_agent_connect(f, &a, key);
	frame_open_init(&open.u.open, "127.0.0.1:80", NULL);
	open.u.open.window = 65536;
	ft_deliver(t3, &open);
	ft_assert_refused(t3, "protocol");
	assert_non_null(strstr(ft_last(t3)->u.error.reason, "stream id 1"));
	ft_tun_gone(t3);
	assert_int_equal(hub_count(f->gw.hub), 0);
	EVP_PKEY_free(key);
}

/* A reconnecting agent's new tunnel takes over; the old one is told. */
static void
test_replaced(void **state)
{
	struct ft *f = *state;
	struct store_agent a;
	EVP_PKEY *key;
	struct ft_tun *old, *newer;
	struct agentdir_entry e, e2;

	ft_make_agent(f, "node-1", &key, &a);
	ft_transition(f, &a, AGENT_EV_VERIFY);
	ft_transition(f, &a, AGENT_EV_VERIFY_OK);
	old = ft_agent_connect(f, &a, key);
	assert_int_equal(agentdir_find(f->gw.agents, a.id, &e), 1);
	newer = ft_agent_connect(f, &a, key);
	ft_assert_refused(old, "replaced");
	assert_int_equal(newer->closed, 0);
	assert_ptr_equal(hub_find(f->gw.hub, a.id), newer->s);
	/* A new generation: the old one names no session any more. */
	assert_int_equal(agentdir_find(f->gw.agents, a.id, &e2), 1);
	assert_true(e2.at.generation != e.at.generation);
	assert_null(session_here(&f->gw, &e));
	assert_ptr_equal(session_here(&f->gw, &e2), newer->s);
	/* The old tunnel's end leaves its successor in the hub and the
	 * directory, active. */
	ft_tun_gone(old);
	assert_ptr_equal(hub_find(f->gw.hub, a.id), newer->s);
	assert_int_equal(hub_count(f->gw.hub), 1);
	assert_int_equal(agentdir_find(f->gw.agents, a.id, &e), 1);
	assert_true(e.at.generation == e2.at.generation);
	assert_true(e.active);
	assert_int_equal(agentdir_count(f->gw.agents), 1);
	EVP_PKEY_free(key);
}

/* Revoked in the store (here or on another replica) while connected. */
static void
test_revoked_while_connected(void **state)
{
	struct ft *f = *state;
	struct store_agent a;
	EVP_PKEY *key;
	struct ft_tun *t;

	ft_make_agent(f, "node-1", &key, &a);
	ft_transition(f, &a, AGENT_EV_VERIFY);
	ft_transition(f, &a, AGENT_EV_VERIFY_OK);
	t = ft_agent_connect(f, &a, key);
	ft_transition(f, &a, AGENT_EV_REVOKE);
	session_record_changed(t->s, &a);
	ft_assert_refused(t, "revoked");
	assert_false(session_is_active(t->s));
	EVP_PKEY_free(key);
}

/* ---- established: what the gateway tells an agent ---- */

/* A draining gateway tells an agent to move once it is established (a
 * handshake under way is told at its WELCOME), never before. */
static void
test_drain(void **state)
{
	struct ft *f = *state;
	struct store_agent a;
	EVP_PKEY *key;
	struct ft_tun *t, *early = ft_tun_open(f);

	ft_make_agent(f, "node-1", &key, &a);
	ft_make_active(f, &a);
	session_drain(early->s, "gateway draining", 500);
	assert_int_equal(early->nsent, 0);
	f->gw.stopping = 1;
	f->gw.drain_jitter_ms = 700;
	t = ft_agent_connect(f, &a, key);
	assert_int_equal(t->nsent, 3);
	assert_int_equal(t->sent[2].type, FRAME_RECONNECT);
	assert_int_equal(t->sent[2].u.reconnect.jitter_ms, 700);
	/* No other replica's lease known (no presence here): nowhere else. */
	assert_int_equal(t->sent[2].u.reconnect.elsewhere, 0);
	session_drain(t->s, "again", 9);
	assert_int_equal(ft_last(t)->type, FRAME_RECONNECT);
	assert_string_equal(ft_last(t)->u.reconnect.reason, "again");
	assert_int_equal(t->closed, 0);
	EVP_PKEY_free(key);
}

/* A verification asked for on another replica (heard through the store)
 * runs here: the agent is told, then verified. */
static void
test_verify_asked_elsewhere(void **state)
{
	struct ft *f = *state;
	struct store_agent a;
	EVP_PKEY *key;
	struct ft_tun *t;

	ft_make_agent(f, "node-1", &key, &a);
	ft_make_active(f, &a);
	t = ft_agent_connect(f, &a, key);
	assert_int_equal(t->nsent, 2);
	/* Its own record, heard back unchanged: nothing. */
	session_record_changed(t->s, &a);
	assert_int_equal(t->nsent, 2);
	ft_transition(f, &a, AGENT_EV_VERIFY);
	session_record_changed(t->s, &a);
	assert_int_equal(t->nsent, 4);
	assert_int_equal(t->sent[2].type, FRAME_STATE);
	assert_string_equal(t->sent[2].u.state.state, "verifying");
	assert_int_equal(t->sent[3].type, FRAME_VERIFY);
	assert_false(session_is_active(t->s));
	EVP_PKEY_free(key);
}

/* ---- the store cannot take the call ---- */

/* A job that blocks the store thread until the test writes a byte. */
struct blocker {
	int started[2];        /* the thread says it runs */
	int release[2];        /* the test lets it go */
	int done;
};

static void
block_work(struct store *st, void *arg)
{
	struct blocker *b = arg;
	char c = 'x';

	/* The store thread: no cmocka asserts here. */
	if (write(b->started[1], &c, 1) != 1 || read(b->release[0], &c, 1) != 1)
		abort();
}

static void
block_done(void *arg)
{
	struct blocker *b = arg;

	b->done++;
}

static void
test_store_queue_full(void **state)
{
	struct ft *f = *state;
	struct blocker b = { 0 };
	struct store_agent a;
	EVP_PKEY *key;
	const struct frame_challenge *c;
	struct ft_tun *t;
	char ch;

	ft_make_agent(f, "node-1", &key, &a);
	assert_int_equal(pipe(b.started), 0);
	assert_int_equal(pipe(b.release), 0);
	/* One job runs (blocked), one waits: the queue (cap 1) is full. */
	assert_int_equal(store_worker_submit(f->gw.storew, block_work, block_done, &b), 0);
	assert_int_equal(read(b.started[0], &ch, 1), 1);
	assert_int_equal(store_worker_submit(f->gw.storew, block_work, block_done, &b), 0);
	t = ft_tun_open(f);
	c = ft_hello(t, FRAME_CRED_AGENT, a.id, "node-1");
	ft_auth(t, key, FRAME_CRED_AGENT, a.id, "node-1", c->nonce);
	/* Refused at once (nothing could be queued).  The store thread goes
	 * on before anything is asserted: a failing assert must not leave it
	 * blocked for the teardown. */
	assert_int_equal(write(b.release[1], "xx", 2), 2);
	while (b.done < 2)
		ft_loop_once(f);
	for (int i = 0; i < 2; i++) {
		close(b.started[i]);
		close(b.release[i]);
	}
	EVP_PKEY_free(key);
	ft_assert_refused(t, "unavailable");
	assert_non_null(strstr(ft_last(t)->u.error.reason, "could not store"));
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_import_registers, setup, teardown),
		cmocka_unit_test_setup_teardown(test_import_goes_on, setup, teardown),
		cmocka_unit_test_setup_teardown(test_register_proof_refused, setup, teardown),
		cmocka_unit_test_setup_teardown(test_agent_welcome_and_verify, setup, teardown),
		cmocka_unit_test_setup_teardown(test_verify_version_mismatch, setup, teardown),
		cmocka_unit_test_setup_teardown(test_verify_timeout_then_again, setup, teardown),
		cmocka_unit_test_setup_teardown(test_agent_active_welcome, setup, teardown),
		cmocka_unit_test_setup_teardown(test_ca_settings, setup, teardown),
		cmocka_unit_test_setup_teardown(test_malformed, setup, teardown),
		cmocka_unit_test_setup_teardown(test_out_of_phase, setup, teardown),
		cmocka_unit_test_setup_teardown(test_version, setup, teardown),
		cmocka_unit_test_setup_teardown(test_timeout, setup, teardown),
		cmocka_unit_test_setup_teardown(test_protocol_error_kicks, setup, teardown),
		cmocka_unit_test_setup_teardown(test_token_unknown, setup, teardown),
		cmocka_unit_test_setup_teardown(test_import_bad_proof, setup, teardown),
		cmocka_unit_test_setup_teardown(test_import_revoked, setup, teardown),
		cmocka_unit_test_setup_teardown(test_import_expired, setup, teardown),
		cmocka_unit_test_setup_teardown(test_import_used_up, setup, teardown),
		cmocka_unit_test_setup_teardown(test_import_node_taken, setup, teardown),
		cmocka_unit_test_setup_teardown(test_import_key_revoked, setup, teardown),
		cmocka_unit_test_setup_teardown(test_register_node_differs, setup, teardown),
		cmocka_unit_test_setup_teardown(test_second_frame_while_waiting, setup, teardown),
		cmocka_unit_test_setup_teardown(test_agent_unknown, setup, teardown),
		cmocka_unit_test_setup_teardown(test_agent_bad_signature, setup, teardown),
		cmocka_unit_test_setup_teardown(test_agent_node_mismatch, setup, teardown),
		cmocka_unit_test_setup_teardown(test_agent_revoked, setup, teardown),
		cmocka_unit_test_setup_teardown(test_established_protocol, setup, teardown),
		cmocka_unit_test_setup_teardown(test_replaced, setup, teardown),
		cmocka_unit_test_setup_teardown(test_revoked_while_connected, setup, teardown),
		cmocka_unit_test_setup_teardown(test_drain, setup, teardown),
		cmocka_unit_test_setup_teardown(test_verify_asked_elsewhere, setup, teardown),
		cmocka_unit_test_setup_teardown(test_store_queue_full, setup_small_queue,
		    teardown),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
