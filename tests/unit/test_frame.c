/*
 * test_frame.c: the tunnel frame codec (common/frame.c).
 *
 * Valid frames of every type must survive encode -> decode unchanged; every
 * malformed input we can name must be refused with a reason that names the
 * problem.  Most malformed frames are made by editing a valid one as msgpack
 * objects (drop a key, change one value, add an element), so each case
 * differs from a frame the codec accepts in exactly one thing.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <msgpack.h>

#include "frame.h"

#define NELEM(a) (sizeof(a) / sizeof((a)[0]))
#define HEADROOM 16 /* room a transport may prepend its header in */

static const enum frame_type all_types[] = {
	FRAME_HELLO, FRAME_CHALLENGE, FRAME_AUTH, FRAME_REGISTER,
	FRAME_REGISTERED, FRAME_WELCOME, FRAME_STATE, FRAME_VERIFY,
	FRAME_VERIFY_OK, FRAME_ERROR, FRAME_PING, FRAME_PONG, FRAME_RECONNECT,
	FRAME_SETTINGS, FRAME_SETTINGS_ACK, FRAME_KEY_ROTATE, FRAME_KEY_PROOF,
	FRAME_KEY_ROTATED, FRAME_KEY_SWITCHED, FRAME_OPEN,
	FRAME_OPEN_OK, FRAME_OPEN_FAIL, FRAME_DATA, FRAME_WINDOW, FRAME_FIN,
	FRAME_RESET,
};

#define SUM_A "sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"
#define SUM_B "sha256:ffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffffff"

static uint8_t pattern[FRAME_CA_DER_MAX + 1]; /* bin fields and small payloads */
static char long_str[1024];   /* 'a' * 1024, for over-long strings */

static void
fill(uint8_t *p, size_t n, uint8_t seed)
{
	for (size_t i = 0; i < n; i++)
		p[i] = (uint8_t)(seed + i * 7);
}

/* A valid frame of each type; fields are off their zero defaults so that a
 * field the codec loses shows up as a difference. */
static void
sample(enum frame_type type, struct frame *f)
{
	memset(f, 0, sizeof(*f));
	f->type = type;
	switch (type) {
	case FRAME_HELLO:
		f->u.hello.nversions = 2;
		f->u.hello.versions[0] = 1;
		f->u.hello.versions[1] = 7;
		strcpy(f->u.hello.node, "node-1.example_X");
		f->u.hello.cred = FRAME_CRED_AGENT;
		strcpy(f->u.hello.id, "ag_0123");
		break;
	case FRAME_CHALLENGE:
		f->u.challenge.version = 1;
		fill(f->u.challenge.nonce, FRAME_NONCE_LEN, 1);
		break;
	case FRAME_AUTH:
		fill(f->u.auth.sig, FRAME_SIG_LEN, 2);
		break;
	case FRAME_REGISTER:
		fill(f->u.reg.pubkey, FRAME_PUBKEY_LEN, 3);
		strcpy(f->u.reg.node, "worker-3");
		strcpy(f->u.reg.hostname, "worker-3.local");
		strcpy(f->u.reg.client_version, "0.1.0");
		fill(f->u.reg.key_sig, FRAME_SIG_LEN, 9);
		break;
	case FRAME_REGISTERED:
		strcpy(f->u.registered.agent_id, "ag_42");
		strcpy(f->u.registered.cluster, "prod");
		f->u.registered.goes_on = 1;
		break;
	case FRAME_WELCOME:
		strcpy(f->u.welcome.agent_id, "ag_42");
		strcpy(f->u.welcome.cluster, "prod");
		strcpy(f->u.welcome.state, "active");
		break;
	case FRAME_STATE:
		strcpy(f->u.state.state, "enroll");
		strcpy(f->u.state.last_error, "clock skew");
		break;
	case FRAME_VERIFY:
		fill(f->u.verify.nonce, FRAME_VERIFY_NONCE_LEN, 4);
		f->u.verify.time_ms = 1700000000123LL;
		break;
	case FRAME_VERIFY_OK:
		fill(f->u.verify.nonce, FRAME_VERIFY_NONCE_LEN, 5);
		f->u.verify.time_ms = 1700000000456LL;
		f->u.verify.version = 1;
		break;
	case FRAME_ERROR:
		strcpy(f->u.error.code, "auth");
		strcpy(f->u.error.reason, "bad signature");
		break;
	case FRAME_PING:
	case FRAME_PONG:
		f->u.ping.seq = 0x1122334455667788ULL;
		break;
	case FRAME_RECONNECT:
		strcpy(f->u.reconnect.reason, "gateway draining");
		f->u.reconnect.jitter_ms = 5000;
		break;
	case FRAME_SETTINGS:
	case FRAME_SETTINGS_ACK:
		f->u.settings.urls.present = true;
		f->u.settings.urls.n = 2;
		strcpy(f->u.settings.urls.url[0], "https://gw-b.example:8443");
		strcpy(f->u.settings.urls.url[1], "https://[::1]");
		f->u.settings.ca.present = true;
		if (type == FRAME_SETTINGS_ACK) {
			f->u.settings.ca.nheld = 2;
			strcpy(f->u.settings.ca.held[0], SUM_A);
			strcpy(f->u.settings.ca.held[1], SUM_B);
			break;
		}
		f->u.settings.redial_spread_ms = 12345;
		f->u.settings.ca.phase = FRAME_CA_OVERLAP;
		f->u.settings.ca.next_len = 600;
		fill(f->u.settings.ca.next, 600, 15);
		f->u.settings.ca.cross_len = 700;
		fill(f->u.settings.ca.cross, 700, 16);
		break;
	case FRAME_KEY_ROTATE:
		fill(f->u.key_rotate.nonce, FRAME_NONCE_LEN, 9);
		break;
	case FRAME_KEY_PROOF:
		fill(f->u.key_proof.pubkey, FRAME_PUBKEY_LEN, 10);
		fill(f->u.key_proof.old_pubkey, FRAME_PUBKEY_LEN, 11);
		fill(f->u.key_proof.old_sig, FRAME_SIG_LEN, 12);
		fill(f->u.key_proof.new_sig, FRAME_SIG_LEN, 13);
		break;
	case FRAME_KEY_ROTATED:
	case FRAME_KEY_SWITCHED:
		fill(f->u.key_done.pubkey, FRAME_PUBKEY_LEN, 14);
		break;
	case FRAME_OPEN:
		f->stream_id = 5;
		strcpy(f->u.open.target, "10.0.0.1:6443");
		f->u.open.window = 65536;
		break;
	case FRAME_OPEN_OK:
		f->stream_id = 5;
		f->u.open_ok_window = 262144;
		break;
	case FRAME_OPEN_FAIL:
		f->stream_id = 5;
		strcpy(f->u.open_fail.code, "denied");
		strcpy(f->u.open_fail.reason, "not in the allowlist");
		break;
	case FRAME_DATA:
		f->stream_id = 300;
		f->u.data.payload = pattern;
		f->u.data.len = 200;
		break;
	case FRAME_WINDOW:
		f->stream_id = 70000;
		f->u.window_credit = 4096;
		break;
	case FRAME_FIN:
		f->stream_id = 1;
		break;
	case FRAME_RESET:
		f->stream_id = UINT32_MAX;
		strcpy(f->u.reset_code, "timeout");
		break;
	}
}

static void
assert_reason(int rc, const char *err, const char *want)
{
	assert_int_equal(rc, -1);
	if (strstr(err, want) == NULL)
		fail_msg("reason \"%s\" does not contain \"%s\"", err, want);
}

static void
assert_frames_equal(const struct frame *a, const struct frame *b)
{
	assert_int_equal(a->type, b->type);
	if (a->type != FRAME_DATA) {
		assert_memory_equal(a, b, sizeof(*a));
		return;
	}
	assert_int_equal(a->stream_id, b->stream_id);
	assert_int_equal(a->u.data.len, b->u.data.len);
	if (a->u.data.len > 0)
		assert_memory_equal(a->u.data.payload, b->u.data.payload, a->u.data.len);
}

/* Encodes f (which must be valid) without headroom; the caller frees. */
static uint8_t *
encode_ok(const struct frame *f, size_t *len)
{
	uint8_t *out = NULL;

	assert_int_equal(frame_encode(f, 0, &out, len), 0);
	assert_non_null(out);
	return out;
}

static void
decode_ok(const uint8_t *buf, size_t len, struct frame *f)
{
	char err[256] = "";

	/* frame_decode fills the member of f->u its type uses; the rest is
	 * zeroed here so that whole frames compare (assert_frames_equal). */
	memset(f, 0, sizeof(*f));
	if (frame_decode(buf, len, f, err, sizeof(err)) != 0)
		fail_msg("decode failed: %s", err);
}

/* ---- round trips ---- */

static void
roundtrip(const struct frame *in)
{
	struct frame out;
	uint8_t *buf = NULL;
	size_t len = 0;

	assert_int_equal(frame_encode(in, HEADROOM, &buf, &len), 0);
	decode_ok(buf + HEADROOM, len, &out);
	assert_frames_equal(in, &out);
	free(buf);
}

/* Decoded over a frame full of other bytes, every type reads as itself:
 * frame_decode zeroes the member it fills (an optional field left out
 * is empty, not what was there), so it encodes back to the same bytes. */
static void
test_decode_over_garbage_every_type(void **state)
{
	struct frame f, got;
	uint8_t *buf = NULL, *again = NULL;
	size_t len = 0, len2 = 0;
	char err[256];

	(void)state;
	for (size_t i = 0; i < NELEM(all_types); i++) {
		sample(all_types[i], &f);
		assert_int_equal(frame_encode(&f, 0, &buf, &len), 0);
		memset(&got, 0xa5, sizeof(got));
		assert_int_equal(frame_decode(buf, len, &got, err, sizeof(err)), 0);
		assert_int_equal(got.type, f.type);
		assert_int_equal(got.stream_id, f.stream_id);
		assert_int_equal(frame_encode(&got, 0, &again, &len2), 0);
		assert_int_equal(len2, len);
		assert_memory_equal(again, buf, len);
		free(again);
		free(buf);
	}
	/* A refused frame leaves all of f zeroed. */
	memset(&got, 0xa5, sizeof(got));
	assert_int_equal(frame_decode((const uint8_t *)"\x91\xc1", 2, &got, err,
	    sizeof(err)), -1);
	memset(&f, 0, sizeof(f));
	assert_memory_equal(&got, &f, sizeof(f));
}

static void
test_roundtrip_every_type(void **state)
{
	struct frame f;

	for (size_t i = 0; i < NELEM(all_types); i++) {
		sample(all_types[i], &f);
		roundtrip(&f);
	}
}

/* Whole arrays: decode zeroes what follows the NUL, and frames are compared
 * byte for byte. */
#define CLEAR(a) memset((a), 0, sizeof(a))

/* The variants sample() does not cover: limits and the other choices. */
static void
test_roundtrip_variants(void **state)
{
	struct frame f;

	sample(FRAME_HELLO, &f);
	f.u.hello.cred = FRAME_CRED_IMPORT;
	f.u.hello.nversions = FRAME_MAX_VERSIONS;
	for (size_t i = 0; i < FRAME_MAX_VERSIONS; i++)
		f.u.hello.versions[i] = i == 0 ? UINT32_MAX : (uint32_t)i;
	memset(f.u.hello.node, 'n', FRAME_NODE_MAX);
	f.u.hello.node[FRAME_NODE_MAX] = '\0';
	memset(f.u.hello.id, 'i', FRAME_ID_MAX);
	roundtrip(&f);

	sample(FRAME_REGISTER, &f);
	CLEAR(f.u.reg.hostname);
	CLEAR(f.u.reg.client_version);
	roundtrip(&f);
	/* An older agent's REGISTER (no key proof), an older gateway's
	 * REGISTERED (it closes): absent, zero (docs/0044). */
	CLEAR(f.u.reg.key_sig);
	roundtrip(&f);
	sample(FRAME_REGISTERED, &f);
	f.u.registered.goes_on = 0;
	roundtrip(&f);

	sample(FRAME_STATE, &f);
	memset(f.u.state.last_error, 'e', FRAME_REASON_MAX);
	roundtrip(&f);
	CLEAR(f.u.state.last_error);
	roundtrip(&f);

	sample(FRAME_VERIFY, &f);
	f.u.verify.time_ms = INT64_MIN;
	roundtrip(&f);
	f.u.verify.time_ms = INT64_MAX;
	roundtrip(&f);

	sample(FRAME_PING, &f);
	f.u.ping.seq = 0;
	roundtrip(&f);
	f.u.ping.seq = UINT64_MAX;
	roundtrip(&f);

	sample(FRAME_OPEN, &f);
	CLEAR(f.u.open.target);
	strcpy(f.u.open.service, "kube-api");
	f.u.open.window = 0;
	roundtrip(&f);
	memset(f.u.open.service, 's', FRAME_ID_MAX);
	roundtrip(&f);
	/* A peer link's OPEN (docs/0020): agent and principal, longest too. */
	strcpy(f.u.open.agent, "a-0123456789abcdef");
	strcpy(f.u.open.principal, "user:alice");
	roundtrip(&f);
	memset(f.u.open.agent, 'a', FRAME_ID_MAX);
	memset(f.u.open.principal, 'p', FRAME_PRINCIPAL_MAX);
	roundtrip(&f);

	sample(FRAME_ERROR, &f);
	CLEAR(f.u.error.reason);
	roundtrip(&f);
	f.u.error.retry_after_ms = 2500;   /* "come back later" (docs/0035) */
	roundtrip(&f);
	f.u.error.retry_after_ms = UINT32_MAX;
	roundtrip(&f);

	sample(FRAME_RECONNECT, &f);
	f.u.reconnect.elsewhere = 1;        /* another replica is live (docs/0017) */
	roundtrip(&f);

	sample(FRAME_DATA, &f);
	f.u.data.len = 0;
	f.u.data.payload = NULL;
	roundtrip(&f);

	sample(FRAME_WINDOW, &f);
	f.u.window_credit = UINT32_MAX;
	roundtrip(&f);

	/* SETTINGS: an empty list is a list ("use the join URL"), an absent
	 * key is no word at all; both survive, and differ. */
	sample(FRAME_SETTINGS, &f);
	f.u.settings.urls.n = 0;
	CLEAR(f.u.settings.urls.url);
	roundtrip(&f);
	f.u.settings.urls.present = false;
	roundtrip(&f);
	sample(FRAME_SETTINGS_ACK, &f);
	f.u.settings.urls.n = FRAME_MAX_URLS;
	for (size_t i = 0; i < FRAME_MAX_URLS; i++)
		memset(f.u.settings.urls.url[i], 'u', FRAME_URL_MAX);
	roundtrip(&f);

	/* SETTINGS "ca" (docs/0033): "final" with and without cross, the
	 * largest certificates, "ca" alone; the ACK with 1 and with the most
	 * checksums. */
	sample(FRAME_SETTINGS, &f);
	f.u.settings.ca.phase = FRAME_CA_FINAL;
	roundtrip(&f);
	f.u.settings.ca.cross_len = 0;
	CLEAR(f.u.settings.ca.cross);
	roundtrip(&f);
	sample(FRAME_SETTINGS, &f);
	f.u.settings.ca.next_len = FRAME_CA_DER_MAX;
	fill(f.u.settings.ca.next, FRAME_CA_DER_MAX, 17);
	f.u.settings.ca.cross_len = FRAME_CA_DER_MAX;
	fill(f.u.settings.ca.cross, FRAME_CA_DER_MAX, 18);
	roundtrip(&f);
	f.u.settings.ca.next_len = 1;
	CLEAR(f.u.settings.ca.next);
	f.u.settings.ca.next[0] = 0x30;
	roundtrip(&f);
	sample(FRAME_SETTINGS, &f);
	f.u.settings.urls.present = false;
	f.u.settings.urls.n = 0;
	CLEAR(f.u.settings.urls.url);
	roundtrip(&f);
	sample(FRAME_SETTINGS, &f);
	memset(&f.u.settings.ca, 0, sizeof(f.u.settings.ca));
	roundtrip(&f);
	sample(FRAME_SETTINGS_ACK, &f);
	f.u.settings.ca.nheld = 1;
	CLEAR(f.u.settings.ca.held[1]);
	roundtrip(&f);
	/* "redial_spread_ms" (docs/0035): alone, and at its largest. */
	memset(&f, 0, sizeof(f));
	f.type = FRAME_SETTINGS;
	f.u.settings.redial_spread_ms = 500;
	roundtrip(&f);
	f.u.settings.redial_spread_ms = UINT32_MAX;
	roundtrip(&f);
	sample(FRAME_SETTINGS_ACK, &f);
	f.u.settings.ca.nheld = FRAME_CA_MAX_HELD;
	for (size_t i = 0; i < FRAME_CA_MAX_HELD; i++)
		strcpy(f.u.settings.ca.held[i], i % 2 ? SUM_A : SUM_B);
	roundtrip(&f);

	/* Node key rotation: AUTH with a pending key's signature, WELCOME
	 * naming the key, KEY_ROTATE without a nonce (an agent's request). */
	sample(FRAME_AUTH, &f);
	fill(f.u.auth.next_pubkey, FRAME_PUBKEY_LEN, 20);
	fill(f.u.auth.next_sig, FRAME_SIG_LEN, 21);
	roundtrip(&f);
	sample(FRAME_WELCOME, &f);
	strcpy(f.u.welcome.key, "next");
	roundtrip(&f);
	sample(FRAME_KEY_ROTATE, &f);
	memset(f.u.key_rotate.nonce, 0, FRAME_NONCE_LEN);
	roundtrip(&f);
}

static void
test_encode_headroom(void **state)
{
	struct frame f;
	uint8_t *a, *b = NULL;
	size_t alen, blen = 0;

	sample(FRAME_HELLO, &f);
	a = encode_ok(&f, &alen);
	assert_int_equal(frame_encode(&f, 100, &b, &blen), 0);
	assert_int_equal(alen, blen);
	assert_memory_equal(a, b + 100, alen);
	free(a);
	free(b);
}

/* The wire format, pinned: a change here breaks every deployed peer. */
static void
test_golden_bytes(void **state)
{
	static const uint8_t fin[] = { 0x92, 0x19, 0x01 };
	static const uint8_t window[] = { 0x93, 0x18, 0x05, 0xcd, 0x10, 0x00 };
	static const uint8_t ping[] = { 0x92, 0x0b, 0x81, 0xa3, 's', 'e', 'q', 0x01 };
	static const uint8_t reset[] = { 0x93, 0x1a, 0xcc, 0x80, 0xa2, 'n', 'o' };
	/* An agent's OPEN carries no "agent"/"principal" keys (docs/0020). */
	static const uint8_t open[] = { 0x93, 0x14, 0x03, 0x83,
	    0xa6, 't', 'a', 'r', 'g', 'e', 't', 0xa3, 'x', ':', '1',
	    0xa7, 's', 'e', 'r', 'v', 'i', 'c', 'e', 0xa0,
	    0xa6, 'w', 'i', 'n', 'd', 'o', 'w', 0x07 };
	static const uint8_t open_peer[] = { 0x93, 0x14, 0x03, 0x85,
	    0xa6, 't', 'a', 'r', 'g', 'e', 't', 0xa3, 'x', ':', '1',
	    0xa7, 's', 'e', 'r', 'v', 'i', 'c', 'e', 0xa0,
	    0xa6, 'w', 'i', 'n', 'd', 'o', 'w', 0x07,
	    0xa5, 'a', 'g', 'e', 'n', 't', 0xa1, 'a',
	    0xa9, 'p', 'r', 'i', 'n', 'c', 'i', 'p', 'a', 'l', 0xa6, 'u', 's', 'e', 'r', ':', 'b' };
	/* An ERROR says when to come back only when it has a moment to say. */
	static const uint8_t error[] = { 0x92, 0x0a, 0x82,
	    0xa4, 'c', 'o', 'd', 'e', 0xa1, 'x', 0xa6, 'r', 'e', 'a', 's', 'o', 'n', 0xa0 };
	static const uint8_t error_later[] = { 0x92, 0x0a, 0x83,
	    0xa4, 'c', 'o', 'd', 'e', 0xa1, 'x', 0xa6, 'r', 'e', 'a', 's', 'o', 'n', 0xa0,
	    0xae, 'r', 'e', 't', 'r', 'y', '_', 'a', 'f', 't', 'e', 'r', '_', 'm', 's',
	    0xcd, 0x09, 0xc4 };
	/* RECONNECT says "elsewhere" only when another replica is live: an
	 * agent older than the key reads the same bytes as before. */
	static const uint8_t reconnect[] = { 0x92, 0x0d, 0x82,
	    0xa6, 'r', 'e', 'a', 's', 'o', 'n', 0xa0,
	    0xa9, 'j', 'i', 't', 't', 'e', 'r', '_', 'm', 's', 0x05 };
	static const uint8_t reconnect_elsewhere[] = { 0x92, 0x0d, 0x83,
	    0xa6, 'r', 'e', 'a', 's', 'o', 'n', 0xa0,
	    0xa9, 'j', 'i', 't', 't', 'e', 'r', '_', 'm', 's', 0x05,
	    0xa9, 'e', 'l', 's', 'e', 'w', 'h', 'e', 'r', 'e', 0x01 };
	struct frame f;
	uint8_t *out;
	size_t len;

	memset(&f, 0, sizeof(f));
	f.type = FRAME_RECONNECT;
	f.u.reconnect.jitter_ms = 5;
	out = encode_ok(&f, &len);
	assert_int_equal(len, sizeof(reconnect));
	assert_memory_equal(out, reconnect, len);
	free(out);
	f.u.reconnect.elsewhere = 1;
	out = encode_ok(&f, &len);
	assert_int_equal(len, sizeof(reconnect_elsewhere));
	assert_memory_equal(out, reconnect_elsewhere, len);
	free(out);

	memset(&f, 0, sizeof(f));
	f.type = FRAME_FIN;
	f.stream_id = 1;
	out = encode_ok(&f, &len);
	assert_int_equal(len, sizeof(fin));
	assert_memory_equal(out, fin, len);
	free(out);

	f.type = FRAME_WINDOW;
	f.stream_id = 5;
	f.u.window_credit = 4096;
	out = encode_ok(&f, &len);
	assert_int_equal(len, sizeof(window));
	assert_memory_equal(out, window, len);
	free(out);

	memset(&f, 0, sizeof(f));
	f.type = FRAME_PING;
	f.u.ping.seq = 1;
	out = encode_ok(&f, &len);
	assert_int_equal(len, sizeof(ping));
	assert_memory_equal(out, ping, len);
	free(out);

	memset(&f, 0, sizeof(f));
	f.type = FRAME_RESET;
	f.stream_id = 128;
	strcpy(f.u.reset_code, "no");
	out = encode_ok(&f, &len);
	assert_int_equal(len, sizeof(reset));
	assert_memory_equal(out, reset, len);
	free(out);

	/* REGISTERED says "goes_on" only when the gateway goes on (docs/0044):
	 * an agent older than the key reads the same bytes as before. */
	{
		static const uint8_t registered[] = { 0x92, 0x05, 0x82,
		    0xa8, 'a', 'g', 'e', 'n', 't', '_', 'i', 'd', 0xa1, 'a',
		    0xa7, 'c', 'l', 'u', 's', 't', 'e', 'r', 0xa1, 'c' };
		static const uint8_t registered_on[] = { 0x92, 0x05, 0x83,
		    0xa8, 'a', 'g', 'e', 'n', 't', '_', 'i', 'd', 0xa1, 'a',
		    0xa7, 'c', 'l', 'u', 's', 't', 'e', 'r', 0xa1, 'c',
		    0xa7, 'g', 'o', 'e', 's', '_', 'o', 'n', 0x01 };

		memset(&f, 0, sizeof(f));
		f.type = FRAME_REGISTERED;
		strcpy(f.u.registered.agent_id, "a");
		strcpy(f.u.registered.cluster, "c");
		out = encode_ok(&f, &len);
		assert_int_equal(len, sizeof(registered));
		assert_memory_equal(out, registered, len);
		free(out);
		f.u.registered.goes_on = 1;
		out = encode_ok(&f, &len);
		assert_int_equal(len, sizeof(registered_on));
		assert_memory_equal(out, registered_on, len);
		free(out);
	}

	/* SETTINGS: the list, or no key at all when it says nothing. */
	{
		static const uint8_t settings[] = { 0x92, 0x0e, 0x81,
		    0xa4, 'u', 'r', 'l', 's', 0x91,
		    0xa9, 'h', 't', 't', 'p', 's', ':', '/', '/', 'b' };
		static const uint8_t settings_none[] = { 0x92, 0x0e, 0x80 };

		memset(&f, 0, sizeof(f));
		f.type = FRAME_SETTINGS;
		out = encode_ok(&f, &len);
		assert_int_equal(len, sizeof(settings_none));
		assert_memory_equal(out, settings_none, len);
		free(out);
		f.u.settings.urls.present = true;
		f.u.settings.urls.n = 1;
		strcpy(f.u.settings.urls.url[0], "https://b");
		out = encode_ok(&f, &len);
		assert_int_equal(len, sizeof(settings));
		assert_memory_equal(out, settings, len);
		free(out);
	}

	/* SETTINGS "redial_spread_ms" (docs/0035): a uint, last; never in
	 * the ACK (the agent does not echo it). */
	{
		static const uint8_t spread[] = { 0x92, 0x0e, 0x81,
		    0xb0, 'r', 'e', 'd', 'i', 'a', 'l', '_', 's', 'p', 'r', 'e',
		    'a', 'd', '_', 'm', 's', 0xcd, 0x75, 0x30 };
		static const uint8_t ack_none[] = { 0x92, 0x0f, 0x80 };

		memset(&f, 0, sizeof(f));
		f.type = FRAME_SETTINGS;
		f.u.settings.redial_spread_ms = 30000;
		out = encode_ok(&f, &len);
		assert_int_equal(len, sizeof(spread));
		assert_memory_equal(out, spread, len);
		free(out);
		f.type = FRAME_SETTINGS_ACK;
		out = encode_ok(&f, &len);
		assert_int_equal(len, sizeof(ack_none));
		assert_memory_equal(out, ack_none, len);
		free(out);
	}

	/* SETTINGS "ca" (docs/interface.md, "Settings"): the members in
	 * this order, each only when there; the ACK's list. */
	{
		static const uint8_t ca_final[] = { 0x92, 0x0e, 0x81,
		    0xa2, 'c', 'a', 0x82,
		    0xa5, 'p', 'h', 'a', 's', 'e', 0xa5, 'f', 'i', 'n', 'a', 'l',
		    0xa4, 'n', 'e', 'x', 't', 0xc4, 0x01, 0x30 };
		static const uint8_t ack_head[] = { 0x92, 0x0f, 0x81,
		    0xa2, 'c', 'a', 0x81, 0xa4, 'h', 'e', 'l', 'd', 0x91, 0xd9, 71 };

		memset(&f, 0, sizeof(f));
		f.type = FRAME_SETTINGS;
		f.u.settings.ca.present = true;
		f.u.settings.ca.phase = FRAME_CA_FINAL;
		f.u.settings.ca.next_len = 1;
		f.u.settings.ca.next[0] = 0x30;
		out = encode_ok(&f, &len);
		assert_int_equal(len, sizeof(ca_final));
		assert_memory_equal(out, ca_final, len);
		free(out);
		memset(&f, 0, sizeof(f));
		f.type = FRAME_SETTINGS_ACK;
		f.u.settings.ca.present = true;
		f.u.settings.ca.nheld = 1;
		strcpy(f.u.settings.ca.held[0], SUM_A);
		out = encode_ok(&f, &len);
		assert_int_equal(len, sizeof(ack_head) + 71);
		assert_memory_equal(out, ack_head, sizeof(ack_head));
		assert_memory_equal(out + sizeof(ack_head), SUM_A, 71);
		free(out);
	}

	memset(&f, 0, sizeof(f));
	f.type = FRAME_OPEN;
	f.stream_id = 3;
	frame_open_init(&f.u.open, "x:1", NULL);
	f.u.open.window = 7;
	out = encode_ok(&f, &len);
	assert_int_equal(len, sizeof(open));
	assert_memory_equal(out, open, len);
	free(out);

	strcpy(f.u.open.agent, "a");
	strcpy(f.u.open.principal, "user:b");
	out = encode_ok(&f, &len);
	assert_int_equal(len, sizeof(open_peer));
	assert_memory_equal(out, open_peer, len);
	free(out);

	frame_make_error(&f, "x", "");
	out = encode_ok(&f, &len);
	assert_int_equal(len, sizeof(error));
	assert_memory_equal(out, error, len);
	free(out);
	f.u.error.retry_after_ms = 2500;
	out = encode_ok(&f, &len);
	assert_int_equal(len, sizeof(error_later));
	assert_memory_equal(out, error_later, len);
	free(out);
}

/* Peers may use wider encodings than ours; msgpack says they are equal. */
static void
test_decode_wide_encodings(void **state)
{
	static const uint8_t ping[] = {
		0x92, 0xcc, 0x0b, 0x81, 0xd9, 0x03, 's', 'e', 'q',
		0xcf, 0, 0, 0, 0, 0, 0, 0, 0x2a,
	};
	static const uint8_t data[] = {
		0x93, 0xd0, 0x17, 0xce, 0, 0, 0, 1, 0xc6, 0, 0, 0, 2, 'h', 'i',
	};
	struct frame f;

	decode_ok(ping, sizeof(ping), &f);
	assert_int_equal(f.type, FRAME_PING);
	assert_int_equal(f.u.ping.seq, 42);
	decode_ok(data, sizeof(data), &f);
	assert_int_equal(f.type, FRAME_DATA);
	assert_int_equal(f.stream_id, 1);
	assert_int_equal(f.u.data.len, 2);
	assert_ptr_equal(f.u.data.payload, data + 13);
}

/* ---- malformed frames, made by editing a valid one ---- */

enum op {
	DROP,      /* remove map key */
	SET,       /* replace map key's value */
	ADD,       /* append key: val to the map, even if present */
	ELEM,      /* replace array element idx */
	APPEND,    /* append val to the array */
	DROP_LAST, /* remove the array's last element */
};

struct edit {
	enum frame_type type;
	enum op op;
	const char *key;
	unsigned idx;
	msgpack_object val;
	const char *reason; /* NULL: must still decode */
};

#define NIL      { .type = MSGPACK_OBJECT_NIL }
#define UINT(v)  { .type = MSGPACK_OBJECT_POSITIVE_INTEGER, .via.u64 = (v) }
#define NEG(v)   { .type = MSGPACK_OBJECT_NEGATIVE_INTEGER, .via.i64 = (v) }
#define FLT(v)   { .type = MSGPACK_OBJECT_FLOAT64, .via.f64 = (v) }
#define BOOL(v)  { .type = MSGPACK_OBJECT_BOOLEAN, .via.boolean = (v) }
#define STRN(s, n) { .type = MSGPACK_OBJECT_STR, .via.str = { (n), (s) } }
#define STR(s)   STRN(s, sizeof(s) - 1)
#define LONG(n)  STRN(long_str, n)
#define BINN(n)  { .type = MSGPACK_OBJECT_BIN, .via.bin = { (n), (const char *)pattern } }
#define ARR(a)   { .type = MSGPACK_OBJECT_ARRAY, .via.array = { NELEM(a), (msgpack_object *)(a) } }
#define ARR0     { .type = MSGPACK_OBJECT_ARRAY, .via.array = { 0, NULL } }
#define MAP(m)   { .type = MSGPACK_OBJECT_MAP, .via.map = { NELEM(m), (msgpack_object_kv *)(m) } }

#define MISSING(t, k, r) { t, DROP, k, 0, NIL, r }
#define KEY(t, k, v, r)  { t, SET, k, 0, v, r }
#define EL(t, i, v, r)   { t, ELEM, NULL, i, v, r }

static const msgpack_object v_nine[] = {
	UINT(1), UINT(2), UINT(3), UINT(4), UINT(5), UINT(6), UINT(7), UINT(8), UINT(9),
};
static const msgpack_object v_eight[] = {
	UINT(1), UINT(2), UINT(3), UINT(4), UINT(5), UINT(6), UINT(7), UINT(8),
};
static const msgpack_object v_str[] = { UINT(1), STR("2") };
static const msgpack_object v_zero[] = { UINT(1), UINT(0) };
static const msgpack_object v_big[] = { UINT(1ULL << 32) };
static const msgpack_object v_neg[] = { NEG(-1) };
static const msgpack_object v_nested[] = { UINT(1), ARR0 };
static const msgpack_object u_nine[] = {
	STR("https://a"), STR("https://a"), STR("https://a"), STR("https://a"),
	STR("https://a"), STR("https://a"), STR("https://a"), STR("https://a"),
	STR("https://a"),
};
static const msgpack_object u_over[] = { LONG(256) };
static const msgpack_object u_max[] = { LONG(255) };
static const msgpack_object u_empty[] = { STR("https://a"), STR("") };
static const msgpack_object u_num[] = { UINT(443) };
static const msgpack_object u_nul[] = { STRN("https://a\0b", 11) };
#define SUM_A_OBJ STR(SUM_A)
#define MAP0     { .type = MSGPACK_OBJECT_MAP, .via.map = { 0, NULL } }
static const msgpack_object h_one[] = { SUM_A_OBJ };
static const msgpack_object h_five[] = { SUM_A_OBJ, SUM_A_OBJ, SUM_A_OBJ, SUM_A_OBJ, SUM_A_OBJ };
static const msgpack_object h_num[] = { UINT(1) };
static const msgpack_object h_long[] = { STR(SUM_A "0") };
static const msgpack_object h_short[] = { STR("sha256:0123") };
static const msgpack_object h_upper[] = {
	STR("sha256:0123456789ABCDEF0123456789abcdef0123456789abcdef0123456789abcdef") };
static const msgpack_object h_md5[] = {
	STR("md5:000123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef") };
static const msgpack_object h_nul[] = {
	STRN("sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcde\0", 71) };
static const msgpack_object_kv ca_final[] = {
	{ STR("phase"), STR("final") }, { STR("next"), BINN(300) } };
static const msgpack_object_kv ca_max[] = {
	{ STR("phase"), STR("overlap") }, { STR("next"), BINN(4096) },
	{ STR("cross"), BINN(4096) } };
static const msgpack_object_kv ca_future[] = {
	{ STR("phase"), STR("overlap") }, { STR("next"), BINN(30) },
	{ STR("cross"), BINN(31) }, { STR("grace_s"), UINT(86400) } };
static const msgpack_object_kv ca_no_phase[] = { { STR("next"), BINN(30) } };
static const msgpack_object_kv ca_bad_phase[] = {
	{ STR("phase"), STR("start") }, { STR("next"), BINN(30) } };
static const msgpack_object_kv ca_num_phase[] = {
	{ STR("phase"), UINT(1) }, { STR("next"), BINN(30) } };
static const msgpack_object_kv ca_no_next[] = { { STR("phase"), STR("final") } };
static const msgpack_object_kv ca_no_cross[] = {
	{ STR("phase"), STR("overlap") }, { STR("next"), BINN(30) } };
static const msgpack_object_kv ca_next_over[] = {
	{ STR("phase"), STR("final") }, { STR("next"), BINN(4097) } };
static const msgpack_object_kv ca_cross_over[] = {
	{ STR("phase"), STR("overlap") }, { STR("next"), BINN(30) },
	{ STR("cross"), BINN(4097) } };
static const msgpack_object_kv ca_next_empty[] = {
	{ STR("phase"), STR("final") }, { STR("next"), BINN(0) } };
static const msgpack_object_kv ca_next_str[] = {
	{ STR("phase"), STR("final") }, { STR("next"), STR("MIIB") } };
static const msgpack_object_kv ca_dup[] = {
	{ STR("phase"), STR("final") }, { STR("next"), BINN(30) },
	{ STR("next"), BINN(31) } };
static const msgpack_object_kv ca_held_in_settings[] = {
	{ STR("phase"), STR("final") }, { STR("next"), BINN(30) },
	{ STR("held"), ARR(h_one) } };
static const msgpack_object_kv ca_held_one[] = { { STR("held"), ARR(h_one) } };
static const msgpack_object_kv ca_held_none[] = { { STR("held"), ARR0 } };
static const msgpack_object_kv ca_held_five[] = { { STR("held"), ARR(h_five) } };
static const msgpack_object_kv ca_held_map[] = { { STR("held"), MAP0 } };
static const msgpack_object_kv ca_held_num[] = { { STR("held"), ARR(h_num) } };
static const msgpack_object_kv ca_held_long[] = { { STR("held"), ARR(h_long) } };
static const msgpack_object_kv ca_held_short[] = { { STR("held"), ARR(h_short) } };
static const msgpack_object_kv ca_held_upper[] = { { STR("held"), ARR(h_upper) } };
static const msgpack_object_kv ca_held_md5[] = { { STR("held"), ARR(h_md5) } };
static const msgpack_object_kv ca_held_nul[] = { { STR("held"), ARR(h_nul) } };
static const msgpack_object_kv kv_future[] = {
	{ STR("a"), ARR(v_nine) },
	{ UINT(7), NIL }, /* non-string keys deeper down are not ours to judge */
};

static const struct edit edits[] = {
	/* SETTINGS and its ACK: every key optional, a list of bounded URLs */
	MISSING(FRAME_SETTINGS, "urls", NULL),
	KEY(FRAME_SETTINGS, "urls", ARR0, NULL),
	KEY(FRAME_SETTINGS, "urls", ARR(u_max), NULL),
	KEY(FRAME_SETTINGS, "urls", ARR(u_nine), "SETTINGS: \"urls\" lists more than 8 URLs (9)"),
	KEY(FRAME_SETTINGS, "urls", ARR(u_over), "SETTINGS: \"urls\" is too long (256 > 255 bytes)"),
	KEY(FRAME_SETTINGS, "urls", ARR(u_empty), "SETTINGS: \"urls\" lists an empty URL"),
	KEY(FRAME_SETTINGS, "urls", ARR(u_num), "SETTINGS: \"urls\" is not a string"),
	KEY(FRAME_SETTINGS, "urls", ARR(u_nul), "SETTINGS: \"urls\" contains a NUL byte"),
	KEY(FRAME_SETTINGS, "urls", STR("https://a"), "SETTINGS: \"urls\" is not an array"),
	KEY(FRAME_SETTINGS_ACK, "urls", NIL, "SETTINGS_ACK: \"urls\" is not an array"),
	{ FRAME_SETTINGS, ADD, "ca_bundle", 0, STR("-----BEGIN"), NULL },

	/* SETTINGS "redial_spread_ms" (docs/0035): optional, a u32; an
	 * ACK's is a key it does not have (skipped). */
	MISSING(FRAME_SETTINGS, "redial_spread_ms", NULL),
	KEY(FRAME_SETTINGS, "redial_spread_ms", UINT(0), NULL),
	KEY(FRAME_SETTINGS, "redial_spread_ms", STR("1"), "SETTINGS: \"redial_spread_ms\" is not an integer"),
	KEY(FRAME_SETTINGS, "redial_spread_ms", NEG(-1), "SETTINGS: \"redial_spread_ms\" is negative"),
	KEY(FRAME_SETTINGS, "redial_spread_ms", UINT(1ULL << 32), "SETTINGS: \"redial_spread_ms\" is out of range"),
	{ FRAME_SETTINGS_ACK, ADD, "redial_spread_ms", 0, UINT(500), NULL },

	/* SETTINGS "ca": each direction's members, bounded, nothing else */
	MISSING(FRAME_SETTINGS, "ca", NULL),
	MISSING(FRAME_SETTINGS_ACK, "ca", NULL),
	KEY(FRAME_SETTINGS, "ca", MAP(ca_final), NULL),
	KEY(FRAME_SETTINGS, "ca", MAP(ca_max), NULL),
	KEY(FRAME_SETTINGS, "ca", MAP(ca_future), NULL),
	KEY(FRAME_SETTINGS, "ca", NIL, "SETTINGS: \"ca\" is not a map"),
	KEY(FRAME_SETTINGS, "ca", BINN(10), "SETTINGS: \"ca\" is not a map"),
	KEY(FRAME_SETTINGS, "ca", MAP0, "SETTINGS: \"ca\" needs a \"phase\""),
	KEY(FRAME_SETTINGS, "ca", MAP(ca_no_phase), "SETTINGS: \"ca\" needs a \"phase\""),
	KEY(FRAME_SETTINGS, "ca", MAP(ca_bad_phase), "SETTINGS: \"ca.phase\" must be \"overlap\" or \"final\""),
	KEY(FRAME_SETTINGS, "ca", MAP(ca_num_phase), "SETTINGS: \"ca.phase\" must be \"overlap\" or \"final\""),
	KEY(FRAME_SETTINGS, "ca", MAP(ca_no_next), "SETTINGS: \"ca\" needs \"next\""),
	KEY(FRAME_SETTINGS, "ca", MAP(ca_no_cross), "SETTINGS: \"ca\" needs \"cross\" in \"overlap\""),
	KEY(FRAME_SETTINGS, "ca", MAP(ca_next_over), "SETTINGS: \"ca.next\" is too long (4097 > 4096 bytes)"),
	KEY(FRAME_SETTINGS, "ca", MAP(ca_cross_over), "SETTINGS: \"ca.cross\" is too long (4097 > 4096 bytes)"),
	KEY(FRAME_SETTINGS, "ca", MAP(ca_next_empty), "SETTINGS: \"ca.next\" is empty"),
	KEY(FRAME_SETTINGS, "ca", MAP(ca_next_str), "SETTINGS: \"ca.next\" is not binary"),
	KEY(FRAME_SETTINGS, "ca", MAP(ca_dup), "SETTINGS: duplicate key \"next\""),
	KEY(FRAME_SETTINGS, "ca", MAP(ca_held_in_settings), "SETTINGS: \"ca\" has \"held\" (SETTINGS_ACK's)"),
	KEY(FRAME_SETTINGS_ACK, "ca", MAP(ca_held_one), NULL),
	KEY(FRAME_SETTINGS_ACK, "ca", MAP(ca_final), "SETTINGS_ACK: \"ca\" has SETTINGS' members in an ACK"),
	KEY(FRAME_SETTINGS_ACK, "ca", MAP0, "SETTINGS_ACK: \"ca\" needs \"held\""),
	KEY(FRAME_SETTINGS_ACK, "ca", MAP(ca_held_none), "SETTINGS_ACK: \"ca.held\" must list 1 to 4 CAs, got 0"),
	KEY(FRAME_SETTINGS_ACK, "ca", MAP(ca_held_five), "SETTINGS_ACK: \"ca.held\" must list 1 to 4 CAs, got 5"),
	KEY(FRAME_SETTINGS_ACK, "ca", MAP(ca_held_map), "SETTINGS_ACK: \"ca.held\" is not an array"),
	KEY(FRAME_SETTINGS_ACK, "ca", MAP(ca_held_num), "SETTINGS_ACK: \"ca.held\" is not a string"),
	KEY(FRAME_SETTINGS_ACK, "ca", MAP(ca_held_long), "SETTINGS_ACK: \"ca.held\" is too long (72 > 71 bytes)"),
	KEY(FRAME_SETTINGS_ACK, "ca", MAP(ca_held_short), "SETTINGS_ACK: \"ca\" \"held\" lists a malformed checksum"),
	KEY(FRAME_SETTINGS_ACK, "ca", MAP(ca_held_upper), "SETTINGS_ACK: \"ca\" \"held\" lists a malformed checksum"),
	KEY(FRAME_SETTINGS_ACK, "ca", MAP(ca_held_md5), "SETTINGS_ACK: \"ca\" \"held\" lists a malformed checksum"),
	KEY(FRAME_SETTINGS_ACK, "ca", MAP(ca_held_nul), "SETTINGS_ACK: \"ca.held\" contains a NUL byte"),

	/* the array */
	EL(FRAME_HELLO, 0, STR("1"), "frame type is not a positive integer"),
	EL(FRAME_HELLO, 0, NEG(-1), "frame type is not a positive integer"),
	EL(FRAME_HELLO, 0, FLT(1.0), "frame type is not a positive integer"),
	EL(FRAME_HELLO, 0, UINT(0), "unknown frame type 0"),
	EL(FRAME_HELLO, 0, UINT(28), "unknown frame type 28"),
	EL(FRAME_HELLO, 0, UINT(27), "unknown frame type 27"),
	EL(FRAME_HELLO, 0, UINT(UINT64_MAX), "unknown frame type 18446744073709551615"),
	EL(FRAME_HELLO, 0, UINT(FRAME_CHALLENGE), "CHALLENGE: missing key \"version\""),
	EL(FRAME_FIN, 0, UINT(FRAME_HELLO), "HELLO: body is not a map"),
	{ FRAME_HELLO, APPEND, NULL, 0, NIL, "HELLO: expected 2 elements, got 3" },
	{ FRAME_HELLO, DROP_LAST, NULL, 0, NIL, "HELLO: expected 2 elements, got 1" },
	{ FRAME_OPEN, DROP_LAST, NULL, 0, NIL, "OPEN: expected 3 elements, got 2" },
	{ FRAME_DATA, DROP_LAST, NULL, 0, NIL, "DATA: expected 3 elements, got 2" },
	{ FRAME_DATA, APPEND, NULL, 0, BINN(1), "DATA: expected 3 elements, got 4" },
	{ FRAME_FIN, APPEND, NULL, 0, UINT(1), "FIN: expected 2 elements, got 3" },
	{ FRAME_FIN, DROP_LAST, NULL, 0, NIL, "FIN: expected 2 elements, got 1" },
	{ FRAME_WINDOW, APPEND, NULL, 0, UINT(1), "WINDOW: expected 3 elements, got 4" },
	{ FRAME_RESET, DROP_LAST, NULL, 0, NIL, "RESET: expected 3 elements, got 2" },
	EL(FRAME_HELLO, 1, NIL, "HELLO: body is not a map"),
	EL(FRAME_PING, 1, ARR0, "PING: body is not a map"),
	EL(FRAME_OPEN, 2, STR("x"), "OPEN: body is not a map"),

	/* every required key */
	MISSING(FRAME_HELLO, "versions", "HELLO: missing key \"versions\""),
	MISSING(FRAME_HELLO, "node", "HELLO: missing key \"node\""),
	MISSING(FRAME_HELLO, "cred", "HELLO: missing key \"cred\""),
	MISSING(FRAME_HELLO, "id", "HELLO: missing key \"id\""),
	MISSING(FRAME_CHALLENGE, "version", "CHALLENGE: missing key \"version\""),
	MISSING(FRAME_CHALLENGE, "nonce", "CHALLENGE: missing key \"nonce\""),
	MISSING(FRAME_AUTH, "sig", "AUTH: missing key \"sig\""),
	MISSING(FRAME_REGISTER, "pubkey", "REGISTER: missing key \"pubkey\""),
	MISSING(FRAME_REGISTER, "node", "REGISTER: missing key \"node\""),
	MISSING(FRAME_REGISTERED, "agent_id", "REGISTERED: missing key \"agent_id\""),
	MISSING(FRAME_REGISTERED, "cluster", "REGISTERED: missing key \"cluster\""),
	MISSING(FRAME_WELCOME, "agent_id", "WELCOME: missing key \"agent_id\""),
	MISSING(FRAME_WELCOME, "cluster", "WELCOME: missing key \"cluster\""),
	MISSING(FRAME_WELCOME, "state", "WELCOME: missing key \"state\""),
	MISSING(FRAME_STATE, "state", "STATE: missing key \"state\""),
	MISSING(FRAME_VERIFY, "nonce", "VERIFY: missing key \"nonce\""),
	MISSING(FRAME_VERIFY, "time_ms", "VERIFY: missing key \"time_ms\""),
	MISSING(FRAME_VERIFY_OK, "nonce", "VERIFY_OK: missing key \"nonce\""),
	MISSING(FRAME_VERIFY_OK, "time_ms", "VERIFY_OK: missing key \"time_ms\""),
	MISSING(FRAME_VERIFY_OK, "version", "VERIFY_OK: missing key \"version\""),
	MISSING(FRAME_ERROR, "code", "ERROR: missing key \"code\""),
	MISSING(FRAME_ERROR, "reason", "ERROR: missing key \"reason\""),
	MISSING(FRAME_PING, "seq", "PING: missing key \"seq\""),
	MISSING(FRAME_PONG, "seq", "PONG: missing key \"seq\""),
	MISSING(FRAME_RECONNECT, "reason", "RECONNECT: missing key \"reason\""),
	MISSING(FRAME_RECONNECT, "jitter_ms", "RECONNECT: missing key \"jitter_ms\""),
	MISSING(FRAME_OPEN, "window", "OPEN: missing key \"window\""),
	MISSING(FRAME_OPEN_OK, "window", "OPEN_OK: missing key \"window\""),
	MISSING(FRAME_OPEN_FAIL, "code", "OPEN_FAIL: missing key \"code\""),
	MISSING(FRAME_OPEN_FAIL, "reason", "OPEN_FAIL: missing key \"reason\""),
	/* the optional ones */
	MISSING(FRAME_REGISTER, "hostname", NULL),
	MISSING(FRAME_REGISTER, "client_version", NULL),
	MISSING(FRAME_STATE, "last_error", NULL),
	MISSING(FRAME_OPEN, "service", NULL),
	MISSING(FRAME_OPEN, "target", "OPEN: needs exactly one of \"target\" and \"service\""),

	/* map keys */
	{ FRAME_HELLO, ADD, "node", 0, STR("other"), "HELLO: duplicate key \"node\"" },
	{ FRAME_PING, ADD, "seq", 0, UINT(1), "PING: duplicate key \"seq\"" },
	{ FRAME_OPEN, ADD, "window", 0, UINT(1), "OPEN: duplicate key \"window\"" },
	{ FRAME_HELLO, ADD, "future", 0, MAP(kv_future), NULL },
	{ FRAME_PING, ADD, "", 0, NIL, NULL },
	{ FRAME_VERIFY, ADD, "version", 0, UINT(0), NULL }, /* VERIFY_OK's key */

	/* HELLO */
	KEY(FRAME_HELLO, "versions", NIL, "HELLO: \"versions\" is not an array"),
	KEY(FRAME_HELLO, "versions", UINT(1), "HELLO: \"versions\" is not an array"),
	KEY(FRAME_HELLO, "versions", ARR0, "HELLO: \"versions\" must list 1 to 8 versions, got 0"),
	KEY(FRAME_HELLO, "versions", ARR(v_nine), "HELLO: \"versions\" must list 1 to 8 versions, got 9"),
	KEY(FRAME_HELLO, "versions", ARR(v_eight), NULL),
	KEY(FRAME_HELLO, "versions", ARR(v_str), "HELLO: \"versions\" is not an integer"),
	KEY(FRAME_HELLO, "versions", ARR(v_nested), "HELLO: \"versions\" is not an integer"),
	KEY(FRAME_HELLO, "versions", ARR(v_zero), "HELLO: \"versions\" lists version 0"),
	KEY(FRAME_HELLO, "versions", ARR(v_big), "HELLO: \"versions\" is out of range"),
	KEY(FRAME_HELLO, "versions", ARR(v_neg), "HELLO: \"versions\" is negative"),
	KEY(FRAME_HELLO, "node", NIL, "HELLO: \"node\" is not a string"),
	KEY(FRAME_HELLO, "node", UINT(1), "HELLO: \"node\" is not a string"),
	KEY(FRAME_HELLO, "node", BINN(4), "HELLO: \"node\" is not a string"),
	KEY(FRAME_HELLO, "node", LONG(64), "HELLO: \"node\" is too long (64 > 63 bytes)"),
	KEY(FRAME_HELLO, "node", LONG(1000), "HELLO: \"node\" is too long (1000 > 63 bytes)"),
	KEY(FRAME_HELLO, "node", LONG(63), NULL),
	KEY(FRAME_HELLO, "node", STR(""), "HELLO: \"node\" is empty"),
	KEY(FRAME_HELLO, "node", STR("-lead"), "HELLO: \"node\" is not a valid node name"),
	KEY(FRAME_HELLO, "node", STR(".hidden"), "HELLO: \"node\" is not a valid node name"),
	KEY(FRAME_HELLO, "node", STR(".."), "HELLO: \"node\" is not a valid node name"),
	KEY(FRAME_HELLO, "node", STR("a b"), "HELLO: \"node\" is not a valid node name"),
	KEY(FRAME_HELLO, "node", STR("a/b"), "HELLO: \"node\" is not a valid node name"),
	KEY(FRAME_HELLO, "node", STR("a:b"), "HELLO: \"node\" is not a valid node name"),
	KEY(FRAME_HELLO, "node", STR("a\nb"), "HELLO: \"node\" is not a valid node name"),
	KEY(FRAME_HELLO, "node", STR("caf\xc3\xa9"), "HELLO: \"node\" is not a valid node name"),
	KEY(FRAME_HELLO, "node", STRN("ab\0c", 4), "HELLO: \"node\" contains a NUL byte"),
	KEY(FRAME_HELLO, "node", STR("a"), NULL),
	KEY(FRAME_HELLO, "node", STR("0-x.Y_z-"), NULL),
	KEY(FRAME_HELLO, "cred", STR("root"), "HELLO: \"cred\" must be \"import\" or \"agent\""),
	KEY(FRAME_HELLO, "cred", STR("Agent"), "HELLO: \"cred\" must be \"import\" or \"agent\""),
	KEY(FRAME_HELLO, "cred", STRN("agent\0", 6), "HELLO: \"cred\" must be \"import\" or \"agent\""),
	KEY(FRAME_HELLO, "cred", STR(""), "HELLO: \"cred\" must be \"import\" or \"agent\""),
	KEY(FRAME_HELLO, "cred", UINT(FRAME_CRED_AGENT), "HELLO: \"cred\" must be \"import\" or \"agent\""),
	KEY(FRAME_HELLO, "cred", STR("import"), NULL),
	KEY(FRAME_HELLO, "id", STR(""), "HELLO: \"id\" is empty"),
	KEY(FRAME_HELLO, "id", LONG(64), "HELLO: \"id\" is too long (64 > 63 bytes)"),
	KEY(FRAME_HELLO, "id", BOOL(true), "HELLO: \"id\" is not a string"),

	/* CHALLENGE, AUTH */
	KEY(FRAME_CHALLENGE, "version", UINT(0), "CHALLENGE: \"version\" must not be 0"),
	KEY(FRAME_CHALLENGE, "version", UINT(1ULL << 32), "CHALLENGE: \"version\" is out of range"),
	KEY(FRAME_CHALLENGE, "version", NEG(-1), "CHALLENGE: \"version\" is negative"),
	KEY(FRAME_CHALLENGE, "version", FLT(1.0), "CHALLENGE: \"version\" is not an integer"),
	KEY(FRAME_CHALLENGE, "version", STR("1"), "CHALLENGE: \"version\" is not an integer"),
	KEY(FRAME_CHALLENGE, "nonce", BINN(31), "CHALLENGE: \"nonce\" must be 32 bytes, got 31"),
	KEY(FRAME_CHALLENGE, "nonce", BINN(33), "CHALLENGE: \"nonce\" must be 32 bytes, got 33"),
	KEY(FRAME_CHALLENGE, "nonce", BINN(0), "CHALLENGE: \"nonce\" must be 32 bytes, got 0"),
	KEY(FRAME_CHALLENGE, "nonce", LONG(32), "CHALLENGE: \"nonce\" is not binary"),
	KEY(FRAME_AUTH, "sig", BINN(63), "AUTH: \"sig\" must be 64 bytes, got 63"),
	KEY(FRAME_AUTH, "sig", BINN(65), "AUTH: \"sig\" must be 64 bytes, got 65"),
	KEY(FRAME_AUTH, "sig", NIL, "AUTH: \"sig\" is not binary"),

	/* REGISTER, REGISTERED, WELCOME, STATE */
	KEY(FRAME_REGISTER, "pubkey", BINN(31), "REGISTER: \"pubkey\" must be 32 bytes, got 31"),
	KEY(FRAME_REGISTER, "pubkey", BINN(64), "REGISTER: \"pubkey\" must be 32 bytes, got 64"),
	KEY(FRAME_REGISTER, "node", STR("-x"), "REGISTER: \"node\" is not a valid node name"),
	KEY(FRAME_REGISTER, "node", STR(""), "REGISTER: \"node\" is empty"),
	KEY(FRAME_REGISTER, "hostname", LONG(64), "REGISTER: \"hostname\" is too long (64 > 63 bytes)"),
	KEY(FRAME_REGISTER, "hostname", NIL, "REGISTER: \"hostname\" is not a string"),
	KEY(FRAME_REGISTER, "client_version", LONG(64), "REGISTER: \"client_version\" is too long"),
	KEY(FRAME_REGISTERED, "agent_id", STR(""), "REGISTERED: \"agent_id\" is empty"),
	KEY(FRAME_REGISTERED, "cluster", LONG(64), "REGISTERED: \"cluster\" is too long (64 > 63 bytes)"),
	KEY(FRAME_WELCOME, "cluster", STR(""), "WELCOME: \"cluster\" is empty"),
	KEY(FRAME_WELCOME, "state", STR(""), "WELCOME: \"state\" is empty"),
	KEY(FRAME_WELCOME, "state", LONG(32), "WELCOME: \"state\" is too long (32 > 31 bytes)"),
	KEY(FRAME_WELCOME, "state", LONG(31), NULL),
	KEY(FRAME_STATE, "state", UINT(3), "STATE: \"state\" is not a string"),
	KEY(FRAME_STATE, "last_error", LONG(256), "STATE: \"last_error\" is too long (256 > 255 bytes)"),
	KEY(FRAME_STATE, "last_error", LONG(255), NULL),

	/* VERIFY, VERIFY_OK */
	KEY(FRAME_VERIFY, "nonce", BINN(32), "VERIFY: \"nonce\" must be 16 bytes, got 32"),
	KEY(FRAME_VERIFY, "time_ms", STR("now"), "VERIFY: \"time_ms\" is not an integer"),
	KEY(FRAME_VERIFY, "time_ms", UINT(UINT64_MAX), "VERIFY: \"time_ms\" is out of range"),
	KEY(FRAME_VERIFY, "time_ms", UINT(INT64_MAX), NULL),
	KEY(FRAME_VERIFY, "time_ms", NEG(INT64_MIN), NULL),
	KEY(FRAME_VERIFY_OK, "nonce", BINN(15), "VERIFY_OK: \"nonce\" must be 16 bytes, got 15"),
	KEY(FRAME_VERIFY_OK, "version", UINT(0), "VERIFY_OK: \"version\" must not be 0"),
	KEY(FRAME_VERIFY_OK, "version", NEG(-1), "VERIFY_OK: \"version\" is negative"),

	/* ERROR, PING, PONG */
	KEY(FRAME_ERROR, "code", STR(""), "ERROR: \"code\" is empty"),
	KEY(FRAME_ERROR, "code", LONG(32), "ERROR: \"code\" is too long (32 > 31 bytes)"),
	KEY(FRAME_ERROR, "reason", LONG(256), "ERROR: \"reason\" is too long (256 > 255 bytes)"),
	KEY(FRAME_ERROR, "reason", NIL, "ERROR: \"reason\" is not a string"),
	KEY(FRAME_ERROR, "reason", STR(""), NULL),
	{ FRAME_ERROR, ADD, "retry_after_ms", 0, STR("1"), "ERROR: \"retry_after_ms\" is not an integer" },
	{ FRAME_ERROR, ADD, "retry_after_ms", 0, NEG(-1), "ERROR: \"retry_after_ms\" is negative" },
	{ FRAME_ERROR, ADD, "retry_after_ms", 0, UINT(1ULL << 32), "ERROR: \"retry_after_ms\" is out of range" },
	{ FRAME_ERROR, ADD, "retry_after_ms", 0, UINT(2500), NULL },
	KEY(FRAME_PING, "seq", NEG(-1), "PING: \"seq\" is negative"),
	KEY(FRAME_PING, "seq", FLT(2.5), "PING: \"seq\" is not an integer"),
	KEY(FRAME_PING, "seq", UINT(UINT64_MAX), NULL),
	KEY(FRAME_PONG, "seq", NIL, "PONG: \"seq\" is not an integer"),

	/* stream ids, for every stream frame */
	EL(FRAME_OPEN, 1, UINT(0), "OPEN: stream id must not be 0"),
	EL(FRAME_OPEN_OK, 1, UINT(0), "OPEN_OK: stream id must not be 0"),
	EL(FRAME_OPEN_FAIL, 1, UINT(0), "OPEN_FAIL: stream id must not be 0"),
	EL(FRAME_DATA, 1, UINT(0), "DATA: stream id must not be 0"),
	EL(FRAME_WINDOW, 1, UINT(0), "WINDOW: stream id must not be 0"),
	EL(FRAME_FIN, 1, UINT(0), "FIN: stream id must not be 0"),
	EL(FRAME_RESET, 1, UINT(0), "RESET: stream id must not be 0"),
	EL(FRAME_DATA, 1, UINT(1ULL << 32), "DATA: stream id is out of range"),
	EL(FRAME_FIN, 1, NEG(-1), "FIN: stream id is negative"),
	EL(FRAME_WINDOW, 1, STR("1"), "WINDOW: stream id is not an integer"),
	EL(FRAME_OPEN, 1, NIL, "OPEN: stream id is not an integer"),
	EL(FRAME_DATA, 1, UINT(UINT32_MAX), NULL),

	/* OPEN, OPEN_OK, OPEN_FAIL */
	KEY(FRAME_OPEN, "service", STR("kube-api"), "OPEN: needs exactly one of \"target\" and \"service\""),
	KEY(FRAME_OPEN, "target", STR(""), "OPEN: needs exactly one of \"target\" and \"service\""),
	KEY(FRAME_OPEN, "target", LONG(256), "OPEN: \"target\" is too long (256 > 255 bytes)"),
	KEY(FRAME_OPEN, "target", LONG(255), NULL),
	KEY(FRAME_OPEN, "service", LONG(64), "OPEN: \"service\" is too long (64 > 63 bytes)"),
	KEY(FRAME_OPEN, "window", NEG(-1), "OPEN: \"window\" is negative"),
	KEY(FRAME_OPEN, "window", UINT(1ULL << 32), "OPEN: \"window\" is out of range"),
	KEY(FRAME_OPEN, "window", UINT(0), NULL),
	{ FRAME_OPEN, ADD, "agent", 0, STR("a-1"), NULL },
	{ FRAME_OPEN, ADD, "agent", 0, LONG(64), "OPEN: \"agent\" is too long (64 > 63 bytes)" },
	{ FRAME_OPEN, ADD, "agent", 0, UINT(1), "OPEN: \"agent\" is not a string" },
	{ FRAME_OPEN, ADD, "principal", 0, LONG(127), NULL },
	{ FRAME_OPEN, ADD, "principal", 0, LONG(128), "OPEN: \"principal\" is too long (128 > 127 bytes)" },
	KEY(FRAME_OPEN_OK, "window", STR("big"), "OPEN_OK: \"window\" is not an integer"),
	KEY(FRAME_OPEN_FAIL, "code", STR(""), "OPEN_FAIL: \"code\" is empty"),
	KEY(FRAME_OPEN_FAIL, "reason", LONG(256), "OPEN_FAIL: \"reason\" is too long"),

	/* DATA, WINDOW, RESET */
	EL(FRAME_DATA, 2, STR("abc"), "DATA: payload is not binary"),
	EL(FRAME_DATA, 2, NIL, "DATA: payload is not binary"),
	EL(FRAME_DATA, 2, BINN(0), NULL),
	EL(FRAME_WINDOW, 2, UINT(0), "WINDOW: credit must not be 0"),
	EL(FRAME_WINDOW, 2, UINT(1ULL << 32), "WINDOW: credit is out of range"),
	EL(FRAME_WINDOW, 2, NEG(-4096), "WINDOW: credit is negative"),
	EL(FRAME_WINDOW, 2, STR("1"), "WINDOW: credit is not an integer"),
	EL(FRAME_WINDOW, 2, UINT(UINT32_MAX), NULL),
	EL(FRAME_RESET, 2, STR(""), "RESET: code is empty"),
	EL(FRAME_RESET, 2, LONG(32), "RESET: code is too long (32 > 31 bytes)"),
	EL(FRAME_RESET, 2, UINT(1), "RESET: code is not a string"),
	EL(FRAME_RESET, 2, STRN("a\0", 2), "RESET: code contains a NUL byte"),
};

static int
str_obj_is(const msgpack_object *o, const char *s)
{
	return o->type == MSGPACK_OBJECT_STR && o->via.str.size == strlen(s) &&
	    memcmp(o->via.str.ptr, s, o->via.str.size) == 0;
}

static void
edit_map(const struct edit *e, msgpack_object *map, msgpack_object_kv *kvs,
    size_t cap)
{
	uint32_t n = 0;
	int found = 0;

	for (uint32_t i = 0; i < map->via.map.size; i++) {
		msgpack_object_kv kv = map->via.map.ptr[i];

		if (e->op != ADD && str_obj_is(&kv.key, e->key)) {
			found = 1;
			if (e->op == DROP)
				continue;
			kv.val = e->val;
		}
		assert_true(n < cap);
		kvs[n++] = kv;
	}
	if (e->op == ADD) {
		msgpack_object key = STRN(e->key, (uint32_t)strlen(e->key));

		assert_true(n < cap);
		kvs[n].key = key;
		kvs[n++].val = e->val;
	} else if (!found) {
		fail_msg("%s has no key \"%s\" to edit", frame_type_name(e->type), e->key);
	}
	map->via.map.ptr = kvs;
	map->via.map.size = n;
}

/* Encodes e's frame type's sample with e applied into out (initialised here). */
static void
apply_edit(const struct edit *e, msgpack_sbuffer *out)
{
	msgpack_object elems[8], root, *map = NULL;
	msgpack_object_kv kvs[16];
	msgpack_unpacked up;
	msgpack_packer pk;
	struct frame f;
	size_t len, off = 0;
	uint8_t *enc;

	sample(e->type, &f);
	enc = encode_ok(&f, &len);
	msgpack_unpacked_init(&up);
	assert_int_equal(msgpack_unpack_next(&up, (const char *)enc, len, &off),
	    MSGPACK_UNPACK_SUCCESS);
	root = up.data;
	assert_true(root.via.array.size < NELEM(elems));
	memcpy(elems, root.via.array.ptr, root.via.array.size * sizeof(elems[0]));
	root.via.array.ptr = elems;
	for (uint32_t i = 0; i < root.via.array.size; i++) {
		if (elems[i].type == MSGPACK_OBJECT_MAP)
			map = &elems[i];
	}
	switch (e->op) {
	case ELEM:
		assert_true(e->idx < root.via.array.size);
		elems[e->idx] = e->val;
		break;
	case APPEND:
		elems[root.via.array.size++] = e->val;
		break;
	case DROP_LAST:
		root.via.array.size--;
		break;
	case DROP:
	case SET:
	case ADD:
		assert_non_null(map);
		edit_map(e, map, kvs, NELEM(kvs));
		break;
	}
	msgpack_sbuffer_init(out);
	msgpack_packer_init(&pk, out, msgpack_sbuffer_write);
	assert_int_equal(msgpack_pack_object(&pk, root), 0);
	msgpack_unpacked_destroy(&up);
	free(enc);
}

static void
test_edited_frames(void **state)
{
	for (size_t i = 0; i < NELEM(edits); i++) {
		const struct edit *e = &edits[i];
		char err[256] = "";
		msgpack_sbuffer sb;
		struct frame f;
		int rc, want_rc;

		apply_edit(e, &sb);
		rc = frame_decode((const uint8_t *)sb.data, sb.size, &f, err, sizeof(err));
		if (e->reason == NULL && rc != 0)
			fail_msg("edit %zu (%s): should decode, got \"%s\"", i,
			    frame_type_name(e->type), err);
		/* A type this version does not know is told apart, so that a
		 * peer may skip a newer one's frames. */
		want_rc = e->reason != NULL && strncmp(e->reason,
		    "unknown frame type", 18) == 0 ? FRAME_UNKNOWN_TYPE : -1;
		if (e->reason != NULL && (rc != want_rc || strstr(err, e->reason) == NULL))
			fail_msg("edit %zu (%s): want %d \"%s\", got %d \"%s\"", i,
			    frame_type_name(e->type), want_rc, e->reason, rc, err);
		if (rc == 0) {
			/* whatever decodes must also encode */
			uint8_t *out;
			size_t len;

			out = encode_ok(&f, &len);
			free(out);
		}
		msgpack_sbuffer_destroy(&sb);
	}
}

static void
test_unknown_keys_skipped(void **state)
{
	static const struct edit add = { FRAME_HELLO, ADD, "x-future", 0, MAP(kv_future), NULL };
	struct frame want, got;
	msgpack_sbuffer sb;

	apply_edit(&add, &sb);
	decode_ok((const uint8_t *)sb.data, sb.size, &got);
	sample(FRAME_HELLO, &want);
	assert_frames_equal(&want, &got);
	msgpack_sbuffer_destroy(&sb);
}

/* ---- malformed bytes ---- */

static void
expect_bytes_fail(const uint8_t *buf, size_t len, const char *reason)
{
	char err[256] = "";
	struct frame f;

	assert_reason(frame_decode(buf, len, &f, err, sizeof(err)), err, reason);
}

static void
test_not_a_frame(void **state)
{
	static const uint8_t one[] = { 0x01 };
	static const uint8_t map[] = { 0x80 };
	static const uint8_t str[] = { 0xa1, 'x' };
	static const uint8_t nil[] = { 0xc0 };
	static const uint8_t empty_array[] = { 0x90 };
	static const uint8_t reserved[] = { 0xc1 };
	static const uint8_t reserved_inside[] = { 0x92, 0x0b, 0xc1 };
	/* [11, {1: 2, "seq": 1}] */
	static const uint8_t int_key[] = {
		0x92, 0x0b, 0x82, 0x01, 0x02, 0xa3, 's', 'e', 'q', 0x01,
	};
	/* [11, {"seq": fixext1}] */
	static const uint8_t ext_val[] = {
		0x92, 0x0b, 0x81, 0xa3, 's', 'e', 'q', 0xd4, 0x01, 0x00,
	};

	expect_bytes_fail(one, 0, "empty frame");
	expect_bytes_fail(NULL, 0, "empty frame");
	expect_bytes_fail(NULL, 5, "empty frame");
	expect_bytes_fail(one, sizeof(one), "frame is not an array");
	expect_bytes_fail(map, sizeof(map), "frame is not an array");
	expect_bytes_fail(str, sizeof(str), "frame is not an array");
	expect_bytes_fail(nil, sizeof(nil), "frame is not an array");
	expect_bytes_fail(empty_array, sizeof(empty_array), "frame is an empty array");
	expect_bytes_fail(reserved, sizeof(reserved), "malformed msgpack (byte 0xc1)");
	expect_bytes_fail(reserved_inside, sizeof(reserved_inside), "malformed msgpack (byte 0xc1)");
	expect_bytes_fail(int_key, sizeof(int_key), "PING: map key is not a string");
	expect_bytes_fail(ext_val, sizeof(ext_val), "PING: \"seq\" is not an integer");
}

static void
test_trailing_bytes(void **state)
{
	struct frame f;
	uint8_t *enc, *buf;
	size_t len;

	sample(FRAME_PING, &f);
	enc = encode_ok(&f, &len);
	buf = malloc(len + 2);
	assert_non_null(buf);
	memcpy(buf, enc, len);
	buf[len] = 0xc0;
	buf[len + 1] = 0x00;
	expect_bytes_fail(buf, len + 1, "1 trailing bytes after the frame");
	expect_bytes_fail(buf, len + 2, "2 trailing bytes after the frame");
	/* a whole second frame is still trailing bytes */
	free(buf);
	buf = malloc(2 * len);
	assert_non_null(buf);
	memcpy(buf, enc, len);
	memcpy(buf + len, enc, len);
	expect_bytes_fail(buf, 2 * len, "trailing bytes after the frame");
	free(buf);
	free(enc);
}

/* Counts and lengths that promise more than the input holds must not make
 * the decoder allocate or read what is not there. */
static void
test_lying_lengths(void **state)
{
	static const uint8_t array32[] = { 0xdd, 0xff, 0xff, 0xff, 0xff };
	static const uint8_t array16[] = { 0xdc, 0xff, 0xff, 0x0b };
	static const uint8_t map32[] = { 0x92, 0x0b, 0xdf, 0xff, 0xff, 0xff, 0xff };
	static const uint8_t bin32[] = { 0x93, 0x17, 0x01, 0xc6, 0xff, 0xff, 0xff, 0xff, 0 };
	static const uint8_t str8[] = { 0x92, 0x0b, 0x81, 0xd9, 0x10, 's' };
	static const uint8_t uint64[] = { 0x92, 0xcf, 0, 0, 0 };
	static const uint8_t ext32[] = { 0x92, 0x0b, 0xc9, 0x00, 0x00, 0x00, 0x09, 0x01 };
	static const uint8_t fixarray[] = { 0x9f, 0x0b };

	expect_bytes_fail(array32, sizeof(array32), "truncated msgpack");
	expect_bytes_fail(array16, sizeof(array16), "truncated msgpack");
	expect_bytes_fail(map32, sizeof(map32), "truncated msgpack");
	expect_bytes_fail(bin32, sizeof(bin32), "truncated msgpack");
	expect_bytes_fail(str8, sizeof(str8), "truncated msgpack");
	expect_bytes_fail(uint64, sizeof(uint64), "truncated msgpack");
	expect_bytes_fail(ext32, sizeof(ext32), "truncated msgpack");
	expect_bytes_fail(fixarray, sizeof(fixarray), "truncated msgpack");
}

static void
test_deep_nesting(void **state)
{
	/* [11, {"seq": 1, "x": [[[...]]]}], nested far past msgpack-c's 32 */
	static const uint8_t head[] = {
		0x92, 0x0b, 0x82, 0xa3, 's', 'e', 'q', 0x01, 0xa1, 'x',
	};
	uint8_t buf[sizeof(head) + 200];

	memcpy(buf, head, sizeof(head));
	memset(buf + sizeof(head), 0x91, 199);
	buf[sizeof(buf) - 1] = 0x90;
	expect_bytes_fail(buf, sizeof(buf), "nested too deeply");
}

/* Every proper prefix of every valid frame fails, and says why. */
static void
test_truncated_every_length(void **state)
{
	struct frame f;

	for (size_t i = 0; i < NELEM(all_types); i++) {
		uint8_t *enc, *copy;
		size_t len;

		sample(all_types[i], &f);
		if (f.type == FRAME_DATA)
			f.u.data.len = 300; /* a bin16 header to cut, too */
		enc = encode_ok(&f, &len);
		for (size_t n = 0; n < len; n++) {
			/* a copy of exactly n bytes, so ASan sees any over-read */
			copy = malloc(n > 0 ? n : 1);
			assert_non_null(copy);
			memcpy(copy, enc, n);
			expect_bytes_fail(copy, n, n == 0 ? "empty frame" : "truncated msgpack");
			free(copy);
		}
		free(enc);
	}
}

static void
test_err_buffer(void **state)
{
	static const uint8_t map[] = { 0x80 };
	char err[8];
	struct frame f;

	assert_int_equal(frame_decode(map, sizeof(map), &f, NULL, 0), -1);
	assert_int_equal(frame_decode(map, sizeof(map), &f, err, 0), -1);
	memset(err, 'x', sizeof(err));
	assert_int_equal(frame_decode(map, sizeof(map), &f, err, sizeof(err)), -1);
	assert_string_equal(err, "frame i");
	memset(err, 'x', sizeof(err));
	assert_int_equal(frame_decode(map, sizeof(map), &f, err, 1), -1);
	assert_int_equal(err[0], '\0');
	assert_int_equal(err[1], 'x');
}

/* ---- DATA's zero-copy path ---- */

static void
test_data_header(void **state)
{
	static const uint32_t ids[] = {
		1, 127, 128, 255, 256, 65535, 65536, UINT32_MAX,
	};
	static const size_t lens[] = { 0, 1, 31, 32, 255, 256, 65535, 65536, 70000 };
	uint8_t *buf = malloc(FRAME_DATA_HEADER_MAX + 70000);

	assert_non_null(buf);
	fill(buf + FRAME_DATA_HEADER_MAX, 70000, 9);
	for (size_t i = 0; i < NELEM(ids); i++) {
		for (size_t j = 0; j < NELEM(lens); j++) {
			uint8_t hdr[FRAME_DATA_HEADER_MAX];
			msgpack_sbuffer sb;
			msgpack_packer pk;
			struct frame f;
			size_t hlen;
			uint8_t *start;

			hlen = frame_data_header(hdr, ids[i], lens[j]);
			assert_in_range(hlen, 4, FRAME_DATA_HEADER_MAX);

			/* the smallest encoding: what msgpack-c's packer writes */
			msgpack_sbuffer_init(&sb);
			msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
			msgpack_pack_array(&pk, 3);
			msgpack_pack_uint32(&pk, FRAME_DATA);
			msgpack_pack_uint32(&pk, ids[i]);
			msgpack_pack_bin(&pk, lens[j]);
			assert_int_equal(sb.size, hlen);
			assert_memory_equal(sb.data, hdr, hlen);
			msgpack_sbuffer_destroy(&sb);

			/* header right before the payload, as a sender lays it out */
			start = buf + FRAME_DATA_HEADER_MAX - hlen;
			memcpy(start, hdr, hlen);
			decode_ok(start, hlen + lens[j], &f);
			assert_int_equal(f.type, FRAME_DATA);
			assert_int_equal(f.stream_id, ids[i]);
			assert_int_equal(f.u.data.len, lens[j]);
			assert_ptr_equal(f.u.data.payload, start + hlen);
		}
	}
	free(buf);
}

/* A DATA frame as bytes: the array's header (arr), the type's encoding
 * (typ), the stream id's (one of the tags below), then a bin header of
 * the tag btag for n bytes of payload. */
static size_t
data_bytes(uint8_t *p, int arr, int typ, uint8_t idtag, uint64_t id,
    uint8_t btag, size_t n)
{
	size_t k = 0, w;

	if (arr == 0)
		p[k++] = 0x93;
	else {
		p[k++] = 0xdc;            /* array 16 */
		p[k++] = 0;
		p[k++] = 3;
	}
	if (typ == 0)
		p[k++] = FRAME_DATA;
	else {
		p[k++] = 0xcc;            /* uint 8 */
		p[k++] = FRAME_DATA;
	}
	w = idtag == 0 ? 0 : idtag == 0xcc || idtag == 0xd0 ? 1 :
	    idtag == 0xcd || idtag == 0xd1 ? 2 : idtag == 0xce || idtag == 0xd2 ? 4 : 8;
	if (idtag == 0)
		p[k++] = (uint8_t)id;     /* positive fixint */
	else {
		p[k++] = idtag;
		for (size_t i = w; i > 0; i--)
			p[k + i - 1] = (uint8_t)(id >> (8 * (w - i)));
		k += w;
	}
	w = btag == 0xc4 ? 1 : btag == 0xc5 ? 2 : 4;
	p[k++] = btag;
	for (size_t i = w; i > 0; i--)
		p[k + i - 1] = (uint8_t)(n >> (8 * (w - i)));
	return k + w;
}

/*
 * DATA in frame_data_header's encodings is read without msgpack-c
 * (frame.c's decode_data); in any other encoding msgpack-c reads it.  The
 * two agree: the same frame from an id in uint 8/16/32/64 or int 8/16/32/64,
 * a type as uint 8, an array 16, and a bin of a wider header than needed;
 * and what the short way does not take (an id of 0, a frame a byte short
 * or long) is refused with the general way's reason.
 */
static void
test_data_every_encoding_agrees(void **state)
{
	static const uint8_t idtags[] = { 0, 0xcc, 0xcd, 0xce, 0xcf, 0xd0, 0xd1, 0xd2, 0xd3 };
	static const uint8_t btags[] = { 0xc4, 0xc5, 0xc6 };
	static const uint64_t ids[] = { 1, 0x7f, 0x80, 0xff, 0x100, 0xffff, 0x10000, UINT32_MAX };
	static const size_t lens[] = { 0, 1, 200, 255 };
	uint8_t buf[64 + 300];
	char err[256];
	struct frame f;

	(void)state;
	fill(buf, sizeof(buf), 5);
	for (size_t a = 0; a < NELEM(ids); a++)
	for (size_t b = 0; b < NELEM(idtags); b++)
	for (size_t c = 0; c < NELEM(btags); c++)
	for (size_t d = 0; d < NELEM(lens); d++)
	for (int shape = 0; shape < 4; shape++) {
		uint8_t idtag = idtags[b];
		uint64_t id = ids[a];
		size_t hl;

		/* the id in an encoding wide enough (signed: non-negative) */
		if ((idtag == 0 && id > 0x7f) ||
		    ((idtag == 0xcc) && id > 0xff) || (idtag == 0xd0 && id > 0x7f) ||
		    ((idtag == 0xcd) && id > 0xffff) || (idtag == 0xd1 && id > 0x7fff) ||
		    ((idtag == 0xce) && id > UINT32_MAX) || (idtag == 0xd2 && id > INT32_MAX))
			continue;
		hl = data_bytes(buf, shape & 1, shape & 2, idtag, id, btags[c], lens[d]);
		decode_ok(buf, hl + lens[d], &f);
		assert_int_equal(f.type, FRAME_DATA);
		assert_int_equal(f.stream_id, id);
		assert_int_equal(f.u.data.len, lens[d]);
		assert_ptr_equal(f.u.data.payload, buf + hl);
		/* a byte short, a byte over: refused, with a reason */
		memset(&f, 0, sizeof(f));
		assert_int_equal(frame_decode(buf, hl + lens[d] - 1, &f, err, sizeof(err)), -1);
		assert_string_equal(err, "truncated msgpack");
		assert_int_equal(frame_decode(buf, hl + lens[d] + 1, &f, err, sizeof(err)), -1);
		assert_string_equal(err, "1 trailing bytes after the frame");
	}
	/* an id of 0, in the encodings the short way reads */
	for (size_t b = 0; b < 4; b++) {
		size_t hl = data_bytes(buf, 0, 0, idtags[b], 0, 0xc4, 3);

		assert_int_equal(frame_decode(buf, hl + 3, &f, err, sizeof(err)), -1);
		assert_string_equal(err, "DATA: stream id must not be 0");
	}
}

static void
test_data_header_invalid(void **state)
{
	uint8_t hdr[FRAME_DATA_HEADER_MAX];

	assert_int_equal(frame_data_header(hdr, 0, 10), 0);
	assert_int_equal(frame_data_header(hdr, 1, (size_t)UINT32_MAX + 1), 0);
	assert_int_equal(frame_data_header(hdr, 1, UINT32_MAX), 8);
}

static void
test_data_large(void **state)
{
	const size_t n = 1024 * 1024;
	uint8_t *payload = malloc(n), *out = NULL, hdr[FRAME_DATA_HEADER_MAX];
	struct frame f, got;
	size_t len = 0, hlen;

	assert_non_null(payload);
	fill(payload, n, 11);
	memset(&f, 0, sizeof(f));
	f.type = FRAME_DATA;
	f.stream_id = 123456;
	f.u.data.payload = payload;
	f.u.data.len = n;
	assert_int_equal(frame_encode(&f, HEADROOM, &out, &len), 0);
	hlen = frame_data_header(hdr, f.stream_id, n);
	assert_int_equal(len, hlen + n);
	assert_memory_equal(out + HEADROOM, hdr, hlen);

	decode_ok(out + HEADROOM, len, &got);
	assert_int_equal(got.stream_id, 123456);
	assert_int_equal(got.u.data.len, n);
	assert_ptr_equal(got.u.data.payload, out + HEADROOM + hlen);
	assert_memory_equal(got.u.data.payload, payload, n);
	free(out);
	free(payload);
}

/* ---- the encoder refuses what the decoder would ---- */

static void
expect_encode_fail(const struct frame *f, const char *what)
{
	uint8_t *out = NULL;
	size_t len = 0;

	if (frame_encode(f, HEADROOM, &out, &len) != -1)
		fail_msg("encode accepted %s", what);
	assert_null(out);
}

static void
test_encode_rejects(void **state)
{
	struct frame f;

	sample(FRAME_PING, &f);
	f.type = (enum frame_type)0;
	expect_encode_fail(&f, "type 0");
	f.type = (enum frame_type)28;
	expect_encode_fail(&f, "type 28");
	f.type = (enum frame_type)27;
	expect_encode_fail(&f, "type 27");
	f.type = (enum frame_type)-1;
	expect_encode_fail(&f, "type -1");

	sample(FRAME_HELLO, &f);
	f.u.hello.nversions = 0;
	expect_encode_fail(&f, "no versions");
	f.u.hello.nversions = FRAME_MAX_VERSIONS + 1;
	expect_encode_fail(&f, "too many versions");
	sample(FRAME_HELLO, &f);
	f.u.hello.versions[1] = 0;
	expect_encode_fail(&f, "version 0");
	sample(FRAME_HELLO, &f);
	strcpy(f.u.hello.node, "-x");
	expect_encode_fail(&f, "node -x");
	f.u.hello.node[0] = '\0';
	expect_encode_fail(&f, "empty node");
	memset(f.u.hello.node, 'a', sizeof(f.u.hello.node));
	expect_encode_fail(&f, "unterminated node");
	sample(FRAME_HELLO, &f);
	f.u.hello.cred = (enum frame_cred)0;
	expect_encode_fail(&f, "cred 0");
	f.u.hello.cred = (enum frame_cred)3;
	expect_encode_fail(&f, "cred 3");
	sample(FRAME_HELLO, &f);
	f.u.hello.id[0] = '\0';
	expect_encode_fail(&f, "empty id");

	sample(FRAME_CHALLENGE, &f);
	f.u.challenge.version = 0;
	expect_encode_fail(&f, "CHALLENGE version 0");
	sample(FRAME_VERIFY_OK, &f);
	f.u.verify.version = 0;
	expect_encode_fail(&f, "VERIFY_OK version 0");
	sample(FRAME_WELCOME, &f);
	memset(f.u.welcome.state, 's', sizeof(f.u.welcome.state));
	expect_encode_fail(&f, "unterminated state");
	sample(FRAME_ERROR, &f);
	f.u.error.code[0] = '\0';
	expect_encode_fail(&f, "empty ERROR code");
	sample(FRAME_ERROR, &f);
	memset(f.u.error.reason, 'r', sizeof(f.u.error.reason));
	expect_encode_fail(&f, "unterminated reason");

	for (size_t i = 0; i < NELEM(all_types); i++) {
		sample(all_types[i], &f);
		if (f.stream_id == 0)
			continue; /* a control frame */
		f.stream_id = 0;
		expect_encode_fail(&f, frame_type_name(f.type));
	}
	sample(FRAME_OPEN, &f);
	f.u.open.target[0] = '\0';
	expect_encode_fail(&f, "OPEN with neither target nor service");
	sample(FRAME_OPEN, &f);
	strcpy(f.u.open.service, "kube-api");
	expect_encode_fail(&f, "OPEN with target and service");
	sample(FRAME_WINDOW, &f);
	f.u.window_credit = 0;
	expect_encode_fail(&f, "WINDOW credit 0");
	sample(FRAME_SETTINGS, &f);
	f.u.settings.urls.n = FRAME_MAX_URLS + 1;
	expect_encode_fail(&f, "SETTINGS with 9 URLs");
	sample(FRAME_SETTINGS, &f);
	f.u.settings.urls.url[1][0] = '\0';
	expect_encode_fail(&f, "SETTINGS with an empty URL");
	sample(FRAME_SETTINGS, &f);
	memset(f.u.settings.urls.url[0], 'u', sizeof(f.u.settings.urls.url[0]));
	expect_encode_fail(&f, "SETTINGS with an unterminated URL");
	sample(FRAME_SETTINGS, &f);
	f.u.settings.urls.present = false;
	expect_encode_fail(&f, "SETTINGS with URLs but no key");
	sample(FRAME_SETTINGS, &f);
	f.u.settings.ca.present = false;
	expect_encode_fail(&f, "SETTINGS with a CA but no key");
	sample(FRAME_SETTINGS, &f);
	f.u.settings.ca.next_len = FRAME_CA_DER_MAX + 1;
	expect_encode_fail(&f, "SETTINGS with next over 4096 bytes");
	sample(FRAME_SETTINGS, &f);
	f.u.settings.ca.cross_len = 0;
	expect_encode_fail(&f, "SETTINGS overlap without cross");
	sample(FRAME_SETTINGS, &f);
	f.u.settings.ca.phase = (enum frame_ca_phase)3;
	expect_encode_fail(&f, "SETTINGS with phase 3");
	sample(FRAME_SETTINGS, &f);
	f.u.settings.ca.nheld = 1;
	strcpy(f.u.settings.ca.held[0], SUM_A);
	expect_encode_fail(&f, "SETTINGS with held");
	sample(FRAME_SETTINGS_ACK, &f);
	f.u.settings.ca.nheld = 0;
	expect_encode_fail(&f, "SETTINGS_ACK with no CA held");
	sample(FRAME_SETTINGS_ACK, &f);
	f.u.settings.ca.nheld = FRAME_CA_MAX_HELD + 1;
	expect_encode_fail(&f, "SETTINGS_ACK with 5 CAs held");
	sample(FRAME_SETTINGS_ACK, &f);
	f.u.settings.ca.held[1][10] = 'X';
	expect_encode_fail(&f, "SETTINGS_ACK with a malformed checksum");
	sample(FRAME_SETTINGS_ACK, &f);
	f.u.settings.ca.phase = FRAME_CA_FINAL;
	expect_encode_fail(&f, "SETTINGS_ACK with a phase");
	sample(FRAME_RESET, &f);
	f.u.reset_code[0] = '\0';
	expect_encode_fail(&f, "empty RESET code");
	sample(FRAME_DATA, &f);
	f.u.data.payload = NULL;
	expect_encode_fail(&f, "DATA with a NULL payload");
	sample(FRAME_DATA, &f);
	f.u.data.len = (size_t)UINT32_MAX + 1;
	expect_encode_fail(&f, "DATA over 4 GiB");
}

static void
test_encode_bad_args(void **state)
{
	struct frame f;
	uint8_t *out = NULL;
	size_t len = 0;

	sample(FRAME_PING, &f);
	assert_int_equal(frame_encode(NULL, 0, &out, &len), -1);
	assert_int_equal(frame_encode(&f, 0, NULL, &len), -1);
	assert_int_equal(frame_encode(&f, 0, &out, NULL), -1);
	assert_int_equal(frame_encode(&f, SIZE_MAX, &out, &len), -1);
}

/* ---- names and builders ---- */

static void
test_type_names(void **state)
{
	assert_string_equal(frame_type_name(FRAME_HELLO), "HELLO");
	assert_string_equal(frame_type_name(FRAME_VERIFY_OK), "VERIFY_OK");
	assert_string_equal(frame_type_name(FRAME_PONG), "PONG");
	assert_string_equal(frame_type_name(FRAME_OPEN_FAIL), "OPEN_FAIL");
	assert_string_equal(frame_type_name(FRAME_DATA), "DATA");
	assert_string_equal(frame_type_name(FRAME_RESET), "RESET");
	assert_string_equal(frame_type_name(0), "UNKNOWN");
	assert_string_equal(frame_type_name(FRAME_RECONNECT), "RECONNECT");
	assert_string_equal(frame_type_name(FRAME_SETTINGS), "SETTINGS");
	assert_string_equal(frame_type_name(FRAME_SETTINGS_ACK), "SETTINGS_ACK");
	assert_string_equal(frame_type_name(FRAME_KEY_ROTATE), "KEY_ROTATE");
	assert_string_equal(frame_type_name(FRAME_KEY_SWITCHED), "KEY_SWITCHED");
	assert_string_equal(frame_type_name(28), "UNKNOWN");
	assert_string_equal(frame_type_name(27), "UNKNOWN");
	assert_string_equal(frame_type_name(-1), "UNKNOWN");
	assert_string_equal(frame_type_name(1 << 30), "UNKNOWN");
	for (size_t i = 0; i < NELEM(all_types); i++)
		assert_string_not_equal(frame_type_name(all_types[i]), "UNKNOWN");
}

static void
test_make_error(void **state)
{
	struct frame f, got;
	uint8_t *out;
	size_t len;

	frame_make_error(&f, "version", "no common protocol version");
	assert_int_equal(f.type, FRAME_ERROR);
	assert_string_equal(f.u.error.code, "version");
	assert_string_equal(f.u.error.reason, "no common protocol version");
	out = encode_ok(&f, &len);
	decode_ok(out, len, &got);
	assert_frames_equal(&f, &got);
	free(out);

	/* too long: truncated, still sendable */
	frame_make_error(&f, long_str, long_str);
	assert_int_equal(strlen(f.u.error.code), FRAME_CODE_MAX);
	assert_int_equal(strlen(f.u.error.reason), FRAME_REASON_MAX);
	out = encode_ok(&f, &len);
	free(out);

	frame_make_error(&f, NULL, NULL);
	assert_string_equal(f.u.error.reason, "");
	out = encode_ok(&f, &len);
	free(out);
	frame_make_error(&f, "", "x");
	out = encode_ok(&f, &len);
	free(out);
}

/* ---- one zone per thread ---- */

#define BIG_ELEMENTS 3000   /* msgpack objects: far past an 8 KiB zone chunk */

/* sample(FRAME_HELLO) with one more key, "x-future", whose value is an
 * array of BIG_ELEMENTS small integers (skipped, as an unknown key). */
static void
big_hello(msgpack_sbuffer *sb)
{
	static const char *const keys[] = { "versions", "node", "cred", "id", "x-future" };
	msgpack_packer pk;

	msgpack_sbuffer_init(sb);
	msgpack_packer_init(&pk, sb, msgpack_sbuffer_write);
	msgpack_pack_array(&pk, 2);
	msgpack_pack_int(&pk, FRAME_HELLO);
	msgpack_pack_map(&pk, NELEM(keys));
	for (size_t i = 0; i < NELEM(keys); i++) {
		msgpack_pack_str_with_body(&pk, keys[i], strlen(keys[i]));
		switch (i) {
		case 0:
			msgpack_pack_array(&pk, 2);
			msgpack_pack_int(&pk, 1);
			msgpack_pack_int(&pk, 7);
			break;
		case 1:
			msgpack_pack_str_with_body(&pk, "node-1.example_X", 16);
			break;
		case 2:
			msgpack_pack_str_with_body(&pk, "agent", 5);
			break;
		case 3:
			msgpack_pack_str_with_body(&pk, "ag_0123", 7);
			break;
		default:
			msgpack_pack_array(&pk, BIG_ELEMENTS);
			for (int k = 0; k < BIG_ELEMENTS; k++)
				msgpack_pack_int(&pk, k & 0x7f);
		}
	}
}

/* Decodes, in turn, a frame that needs many zone chunks, a DATA frame, a
 * frame msgpack-c refuses half way (nesting), and the big one again; 0
 * when each decodes as it should (no cmocka here: it may run on another
 * thread). */
static void *
zone_rounds(void *arg)
{
	static const uint8_t data[] = { 0x93, 0x17, 0x05, 0xc4, 0x03, 'a', 'b', 'c' };
	uint8_t deep[10 + 200] = { 0x92, 0x0b, 0x82, 0xa3, 's', 'e', 'q', 0x01, 0xa1, 'x' };
	struct frame want, got;
	msgpack_sbuffer sb;
	char err[256];
	intptr_t bad = 0;

	(void)arg;
	memset(deep + 10, 0x91, 199);
	deep[sizeof(deep) - 1] = 0x90;
	big_hello(&sb);
	sample(FRAME_HELLO, &want);
	for (int round = 0; round < 3; round++) {
		memset(&got, 0, sizeof(got));
		bad += frame_decode((const uint8_t *)sb.data, sb.size, &got, err,
		    sizeof(err)) != 0 || memcmp(&want, &got, sizeof(got)) != 0;
		bad += frame_decode(data, sizeof(data), &got, err, sizeof(err)) != 0 ||
		    got.type != FRAME_DATA || got.stream_id != 5 ||
		    got.u.data.len != 3 || got.u.data.payload != data + 5;
		bad += frame_decode(deep, sizeof(deep), &got, err, sizeof(err)) == 0 ||
		    strstr(err, "nested too deeply") == NULL;
	}
	msgpack_sbuffer_destroy(&sb);
	return (void *)bad;
}

/* frame_decode keeps one msgpack zone per thread from frame to frame:
 * what a frame left in it (many chunks, a refused frame's objects) does
 * not show in the next, and a thread that ends frees its zone (the
 * sanitizer build's leak check fails the test otherwise). */
static void
test_zone_per_thread(void **state)
{
	pthread_t t;
	void *bad = (void *)1;

	assert_null(zone_rounds(NULL));
	assert_int_equal(pthread_create(&t, NULL, zone_rounds, NULL), 0);
	assert_int_equal(pthread_join(t, &bad), 0);
	assert_null(bad);
	assert_null(zone_rounds(NULL));
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_roundtrip_every_type),
		cmocka_unit_test(test_decode_over_garbage_every_type),
		cmocka_unit_test(test_roundtrip_variants),
		cmocka_unit_test(test_encode_headroom),
		cmocka_unit_test(test_golden_bytes),
		cmocka_unit_test(test_decode_wide_encodings),
		cmocka_unit_test(test_edited_frames),
		cmocka_unit_test(test_unknown_keys_skipped),
		cmocka_unit_test(test_not_a_frame),
		cmocka_unit_test(test_trailing_bytes),
		cmocka_unit_test(test_lying_lengths),
		cmocka_unit_test(test_deep_nesting),
		cmocka_unit_test(test_truncated_every_length),
		cmocka_unit_test(test_err_buffer),
		cmocka_unit_test(test_data_header),
		cmocka_unit_test(test_data_header_invalid),
		cmocka_unit_test(test_data_every_encoding_agrees),
		cmocka_unit_test(test_data_large),
		cmocka_unit_test(test_encode_rejects),
		cmocka_unit_test(test_encode_bad_args),
		cmocka_unit_test(test_type_names),
		cmocka_unit_test(test_make_error),
		cmocka_unit_test(test_zone_per_thread),
	};

	memset(long_str, 'a', sizeof(long_str) - 1);
	fill(pattern, sizeof(pattern), 0);
	return cmocka_run_group_tests(tests, NULL, NULL);
}
