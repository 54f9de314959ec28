/*
 * test_agentkey.c: Ed25519 agent keys (auth/agentkey.c): files on disk,
 * signatures, the handshake transcript and the CSPRNG helpers.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <openssl/evp.h>
#include <openssl/pem.h>

#include "agentkey.h"
#include "fileio.h"

struct fixture {
	char dir[64];
	char path[128];
};

static int
setup(void **state)
{
	struct fixture *f = calloc(1, sizeof(*f));

	if (f == NULL)
		return -1;
	snprintf(f->dir, sizeof(f->dir), "/tmp/test_agentkey.XXXXXX");
	if (mkdtemp(f->dir) == NULL) {
		free(f);
		return -1;
	}
	snprintf(f->path, sizeof(f->path), "%s/agent.key", f->dir);
	*state = f;
	return 0;
}

static int
teardown(void **state)
{
	struct fixture *f = *state;

	unlink(f->path);
	rmdir(f->dir);
	free(f);
	return 0;
}

static void
test_save_load(void **state)
{
	struct fixture *f = *state;
	EVP_PKEY *key = NULL, *loaded = NULL;
	uint8_t pub[AGENTKEY_PUB_LEN], pub2[AGENTKEY_PUB_LEN];
	uint8_t sig[AGENTKEY_SIG_LEN], msg[] = "hello";
	char err[256] = "";
	char *pem = NULL;
	struct stat st;

	key = agentkey_generate();
	assert_non_null(key);
	assert_int_equal(agentkey_save(key, f->path, err, sizeof(err)), 0);
	assert_int_equal(stat(f->path, &st), 0);
	assert_int_equal(st.st_mode & 07777, 0600);

	/* PKCS#8, not a legacy format */
	assert_int_equal(file_read_all(f->path, 4096, &pem, NULL, err,
	    sizeof(err)), 0);
	assert_non_null(strstr(pem, "-----BEGIN PRIVATE KEY-----"));
	free(pem);

	loaded = agentkey_load(f->path, err, sizeof(err));
	assert_non_null(loaded);
	assert_int_equal(agentkey_public(key, pub), 0);
	assert_int_equal(agentkey_public(loaded, pub2), 0);
	assert_memory_equal(pub, pub2, AGENTKEY_PUB_LEN);

	/* the loaded key signs for the same public key */
	assert_int_equal(agentkey_sign(loaded, msg, sizeof(msg), sig), 0);
	assert_true(agentkey_verify(pub, msg, sizeof(msg), sig));

	/* saving again replaces the file atomically, still 0600 */
	assert_int_equal(agentkey_save(loaded, f->path, err, sizeof(err)), 0);
	assert_int_equal(stat(f->path, &st), 0);
	assert_int_equal(st.st_mode & 07777, 0600);

	EVP_PKEY_free(loaded);
	EVP_PKEY_free(key);
}

static void
test_fresh_keys_differ(void **state)
{
	EVP_PKEY *a = agentkey_generate(), *b = agentkey_generate();
	uint8_t pa[AGENTKEY_PUB_LEN], pb[AGENTKEY_PUB_LEN];

	assert_non_null(a);
	assert_non_null(b);
	assert_int_equal(agentkey_public(a, pa), 0);
	assert_int_equal(agentkey_public(b, pb), 0);
	assert_memory_not_equal(pa, pb, AGENTKEY_PUB_LEN);
	EVP_PKEY_free(a);
	EVP_PKEY_free(b);
}

/* A key of small order proves nothing (docs/0046): under the identity
 * point as the public key, the signature R = identity, S = 0 satisfies
 * the plain equation for every message (OpenSSL's verification accepted
 * it), so anyone could "sign" as it.  Refused, whatever the message. */
static void
test_small_order_key_refused(void **state)
{
	uint8_t pub[AGENTKEY_PUB_LEN] = { 1 }, sig[AGENTKEY_SIG_LEN] = { 1 };
	const uint8_t msg[] = "tether-auth-v1 anything";

	(void)state;
	assert_false(agentkey_verify(pub, msg, sizeof(msg), sig));
	assert_false(agentkey_verify(pub, msg, 0, sig));
}

static void
test_sign_verify(void **state)
{
	EVP_PKEY *key = agentkey_generate();
	uint8_t pub[AGENTKEY_PUB_LEN], sig[AGENTKEY_SIG_LEN];
	uint8_t msg[100], bad[100], badsig[AGENTKEY_SIG_LEN];
	uint8_t badpub[AGENTKEY_PUB_LEN];
	size_t i;

	assert_non_null(key);
	assert_int_equal(agentkey_public(key, pub), 0);
	assert_int_equal(random_bytes(msg, sizeof(msg)), 0);
	assert_int_equal(agentkey_sign(key, msg, sizeof(msg), sig), 0);
	assert_true(agentkey_verify(pub, msg, sizeof(msg), sig));

	/* Any flipped bit anywhere makes verification fail. */
	for (i = 0; i < sizeof(msg) * 8; i += 7) {
		memcpy(bad, msg, sizeof(msg));
		bad[i / 8] ^= (uint8_t)(1u << (i % 8));
		assert_false(agentkey_verify(pub, bad, sizeof(bad), sig));
	}
	for (i = 0; i < sizeof(sig) * 8; i++) {
		memcpy(badsig, sig, sizeof(sig));
		badsig[i / 8] ^= (uint8_t)(1u << (i % 8));
		assert_false(agentkey_verify(pub, msg, sizeof(msg), badsig));
	}
	for (i = 0; i < sizeof(pub) * 8; i++) {
		memcpy(badpub, pub, sizeof(pub));
		badpub[i / 8] ^= (uint8_t)(1u << (i % 8));
		assert_false(agentkey_verify(badpub, msg, sizeof(msg), sig));
	}
	/* a shorter message is a different message */
	assert_false(agentkey_verify(pub, msg, sizeof(msg) - 1, sig));

	/* the empty message signs and verifies too */
	assert_int_equal(agentkey_sign(key, msg, 0, sig), 0);
	assert_true(agentkey_verify(pub, msg, 0, sig));
	EVP_PKEY_free(key);
}

/* Builds the transcript the header documents, byte by byte. */
static size_t
expected_transcript(uint8_t *out, uint32_t version, int cred, const char *id,
    const char *node, const uint8_t *nonce)
{
	size_t off = 0;

	memcpy(out, "tether-auth-v1", 15); /* with its NUL */
	off = 15;
	out[off++] = (uint8_t)(version >> 24);
	out[off++] = (uint8_t)(version >> 16);
	out[off++] = (uint8_t)(version >> 8);
	out[off++] = (uint8_t)version;
	out[off++] = (uint8_t)cred;
	memcpy(out + off, id, strlen(id) + 1);
	off += strlen(id) + 1;
	memcpy(out + off, node, strlen(node) + 1);
	off += strlen(node) + 1;
	memcpy(out + off, nonce, AGENTKEY_NONCE_LEN);
	return off + AGENTKEY_NONCE_LEN;
}

static void
assert_transcripts_differ(const uint8_t *a, size_t alen, const uint8_t *b,
    size_t blen)
{
	assert_true(alen > 0 && blen > 0);
	if (alen == blen && memcmp(a, b, alen) == 0)
		fail_msg("transcripts equal");
}

static void
test_transcript(void **state)
{
	uint8_t nonce[AGENTKEY_NONCE_LEN], nonce2[AGENTKEY_NONCE_LEN];
	uint8_t base[AUTH_TRANSCRIPT_MAX], other[AUTH_TRANSCRIPT_MAX];
	uint8_t want[AUTH_TRANSCRIPT_MAX];
	size_t blen, olen, wlen;

	assert_int_equal(random_bytes(nonce, sizeof(nonce)), 0);
	memcpy(nonce2, nonce, sizeof(nonce));
	nonce2[AGENTKEY_NONCE_LEN - 1] ^= 1;

	blen = auth_transcript(base, sizeof(base), 1, 2, "ag_0123", "node-a", nonce);
	wlen = expected_transcript(want, 1, 2, "ag_0123", "node-a", nonce);
	assert_int_equal(blen, wlen);
	assert_memory_equal(base, want, wlen);

	/* the same inputs give the same bytes */
	olen = auth_transcript(other, sizeof(other), 1, 2, "ag_0123", "node-a", nonce);
	assert_int_equal(olen, blen);
	assert_memory_equal(other, base, blen);

	olen = auth_transcript(other, sizeof(other), 2, 2, "ag_0123", "node-a", nonce);
	assert_transcripts_differ(base, blen, other, olen);
	olen = auth_transcript(other, sizeof(other), 1, 1, "ag_0123", "node-a", nonce);
	assert_transcripts_differ(base, blen, other, olen);
	olen = auth_transcript(other, sizeof(other), 1, 2, "ag_0124", "node-a", nonce);
	assert_transcripts_differ(base, blen, other, olen);
	olen = auth_transcript(other, sizeof(other), 1, 2, "ag_0123", "node-b", nonce);
	assert_transcripts_differ(base, blen, other, olen);
	olen = auth_transcript(other, sizeof(other), 1, 2, "ag_0123", "node-a", nonce2);
	assert_transcripts_differ(base, blen, other, olen);
	/* moving a character across the id/node boundary changes the bytes */
	olen = auth_transcript(other, sizeof(other), 1, 2, "ag_0123n", "ode-a", nonce);
	assert_transcripts_differ(base, blen, other, olen);
}

static void
test_transcript_fit(void **state)
{
	uint8_t nonce[AGENTKEY_NONCE_LEN] = { 0 };
	uint8_t buf[AUTH_TRANSCRIPT_MAX];
	char longid[AUTH_TRANSCRIPT_MAX + 1];
	size_t len;

	len = auth_transcript(buf, sizeof(buf), 1, 1, "id", "node", nonce);
	assert_true(len > 0);
	/* exactly enough room, then one byte short */
	assert_int_equal(auth_transcript(buf, len, 1, 1, "id", "node", nonce), len);
	assert_int_equal(auth_transcript(buf, len - 1, 1, 1, "id", "node", nonce), 0);
	assert_int_equal(auth_transcript(buf, 0, 1, 1, "id", "node", nonce), 0);

	memset(longid, 'x', sizeof(longid) - 1);
	longid[sizeof(longid) - 1] = '\0';
	assert_int_equal(auth_transcript(buf, sizeof(buf), 1, 1, longid, "n",
	    nonce), 0);
	assert_int_equal(auth_transcript(buf, sizeof(buf), 1, 1, "i", longid,
	    nonce), 0);

	/* a credential kind that does not fit its one byte */
	assert_int_equal(auth_transcript(buf, sizeof(buf), 1, 256, "id", "n",
	    nonce), 0);
	assert_int_equal(auth_transcript(buf, sizeof(buf), 1, -1, "id", "n",
	    nonce), 0);
}

/* The rotation proof: both keys sign the one transcript; any other
 * nonce, agent, node, key pair or a swapped signature is refused. */
static void
test_rotation_proof(void **state)
{
	EVP_PKEY *old = agentkey_generate(), *new = agentkey_generate(),
	    *other = agentkey_generate();
	uint8_t nonce[AGENTKEY_NONCE_LEN], nonce2[AGENTKEY_NONCE_LEN];
	uint8_t op[AGENTKEY_PUB_LEN], np[AGENTKEY_PUB_LEN], xp[AGENTKEY_PUB_LEN];
	uint8_t os[AGENTKEY_SIG_LEN], ns[AGENTKEY_SIG_LEN], xs[AGENTKEY_SIG_LEN];

	(void)state;
	assert_non_null(old);
	assert_non_null(new);
	assert_non_null(other);
	memset(nonce, 0x5a, sizeof(nonce));
	memset(nonce2, 0x5b, sizeof(nonce2));
	assert_int_equal(agentkey_public(old, op), 0);
	assert_int_equal(agentkey_public(new, np), 0);
	assert_int_equal(agentkey_public(other, xp), 0);
	assert_int_equal(key_rotation_prove(old, new, "a-1", "n1", nonce, os, ns), 0);

	assert_true(key_rotation_verify("a-1", "n1", nonce, op, np, os, ns));
	assert_false(key_rotation_verify("a-1", "n1", nonce2, op, np, os, ns));
	assert_false(key_rotation_verify("a-2", "n1", nonce, op, np, os, ns));
	assert_false(key_rotation_verify("a-1", "n2", nonce, op, np, os, ns));
	assert_false(key_rotation_verify("a-1", "n1", nonce, np, op, ns, os));
	assert_false(key_rotation_verify("a-1", "n1", nonce, op, np, ns, os));
	assert_false(key_rotation_verify("a-1", "n1", nonce, op, xp, os, ns));
	/* A key one does not hold cannot be named: its signature is missing. */
	assert_int_equal(key_rotation_prove(old, other, "a-1", "n1", nonce, os, xs), 0);
	assert_false(key_rotation_verify("a-1", "n1", nonce, op, xp, os, ns));
	assert_true(key_rotation_verify("a-1", "n1", nonce, op, xp, os, xs));
	/* Nor may the new key stand in for the old one's signature. */
	assert_int_equal(key_rotation_prove(new, new, "a-1", "n1", nonce, os, ns), 0);
	assert_false(key_rotation_verify("a-1", "n1", nonce, np, np, os, ns));
	assert_false(key_rotation_verify("a-1", "n1", nonce, op, np, os, ns));
	/* Missing keys are refused, not crashed on. */
	assert_int_equal(key_rotation_prove(NULL, new, "a-1", "n1", nonce, os, ns), -1);
	EVP_PKEY_free(old);
	EVP_PKEY_free(new);
	EVP_PKEY_free(other);
}

/* The transcript names every field: changing any one changes it. */
static void
test_rotation_transcript(void **state)
{
	uint8_t nonce[AGENTKEY_NONCE_LEN] = { 1 }, o[32] = { 2 }, n[32] = { 3 };
	uint8_t a[ROTATE_TRANSCRIPT_MAX], b[ROTATE_TRANSCRIPT_MAX];
	size_t la, lb;

	(void)state;
	la = key_rotation_transcript(a, sizeof(a), "a-1", "n1", nonce, o, n);
	assert_true(la > 0);
	lb = key_rotation_transcript(b, sizeof(b), "a-1n", "1", nonce, o, n);
	assert_false(la == lb && memcmp(a, b, la) == 0);
	lb = key_rotation_transcript(b, sizeof(b), "a-1", "n1", nonce, n, o);
	assert_false(la == lb && memcmp(a, b, la) == 0);
	assert_int_equal(key_rotation_transcript(b, la - 1, "a-1", "n1", nonce, o, n), 0);
	assert_int_equal(key_rotation_transcript(b, la, "a-1", "n1", nonce, o, n), la);
}

static void
test_load_missing(void **state)
{
	struct fixture *f = *state;
	char err[256] = "";

	assert_null(agentkey_load(f->path, err, sizeof(err)));
	assert_true(strlen(err) > 0);
	assert_non_null(strstr(err, f->path));
}

static void
write_file(const char *path, const void *data, size_t len)
{
	char err[256];

	if (file_write_atomic(path, data, len, 0600, err, sizeof(err)) != 0)
		fail_msg("%s", err);
}

static void
test_load_not_ed25519(void **state)
{
	struct fixture *f = *state;
	EVP_PKEY *ec = NULL;
	BIO *bio = NULL;
	char *pem = NULL, err[256] = "";
	long len;

	ec = EVP_PKEY_Q_keygen(NULL, NULL, "EC", "P-256");
	assert_non_null(ec);
	bio = BIO_new(BIO_s_mem());
	assert_non_null(bio);
	assert_int_equal(PEM_write_bio_PKCS8PrivateKey(bio, ec, NULL, NULL, 0,
	    NULL, NULL), 1);
	len = BIO_get_mem_data(bio, &pem);
	assert_true(len > 0);
	write_file(f->path, pem, (size_t)len);
	BIO_free(bio);
	EVP_PKEY_free(ec);

	assert_null(agentkey_load(f->path, err, sizeof(err)));
	assert_non_null(strstr(err, "not an Ed25519 key"));

	/* and an EC key is refused for saving as an agent key */
	ec = EVP_PKEY_Q_keygen(NULL, NULL, "EC", "P-256");
	assert_non_null(ec);
	err[0] = '\0';
	assert_int_equal(agentkey_save(ec, f->path, err, sizeof(err)), -1);
	assert_true(strlen(err) > 0);
	EVP_PKEY_free(ec);
}

static void
test_load_garbage(void **state)
{
	struct fixture *f = *state;
	static const char junk[] = "-----BEGIN PRIVATE KEY-----\nnot base64!\n"
	    "-----END PRIVATE KEY-----\n";
	char err[256] = "";

	write_file(f->path, junk, sizeof(junk) - 1);
	assert_null(agentkey_load(f->path, err, sizeof(err)));
	assert_true(strlen(err) > 0);

	write_file(f->path, "", 0);
	err[0] = '\0';
	assert_null(agentkey_load(f->path, err, sizeof(err)));
	assert_true(strlen(err) > 0);
}

/* A key someone else saved encrypted never prompts for a passphrase. */
static void
test_load_encrypted(void **state)
{
	struct fixture *f = *state;
	EVP_PKEY *key = agentkey_generate();
	BIO *bio = NULL;
	char *pem = NULL, err[256] = "";
	long len;

	assert_non_null(key);
	bio = BIO_new(BIO_s_mem());
	assert_non_null(bio);
	assert_int_equal(PEM_write_bio_PKCS8PrivateKey(bio, key,
	    EVP_aes_256_cbc(), "pass", 4, NULL, NULL), 1);
	len = BIO_get_mem_data(bio, &pem);
	write_file(f->path, pem, (size_t)len);
	BIO_free(bio);
	EVP_PKEY_free(key);

	assert_null(agentkey_load(f->path, err, sizeof(err)));
	assert_true(strlen(err) > 0);
}

static void
test_random_hex(void **state)
{
	char a[2 * 100 + 1], b[2 * 100 + 1];
	size_t i;

	assert_int_equal(random_hex(a, 100), 0);
	assert_int_equal(random_hex(b, 100), 0);
	assert_int_equal(strlen(a), 200);
	for (i = 0; i < 200; i++)
		assert_non_null(strchr("0123456789abcdef", a[i]));
	assert_string_not_equal(a, b);
	assert_int_equal(random_hex(a, 0), 0);
	assert_string_equal(a, "");
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_save_load, setup, teardown),
		cmocka_unit_test(test_fresh_keys_differ),
		cmocka_unit_test(test_sign_verify),
		cmocka_unit_test(test_small_order_key_refused),
		cmocka_unit_test(test_transcript),
		cmocka_unit_test(test_transcript_fit),
		cmocka_unit_test(test_rotation_proof),
		cmocka_unit_test(test_rotation_transcript),
		cmocka_unit_test_setup_teardown(test_load_missing, setup, teardown),
		cmocka_unit_test_setup_teardown(test_load_not_ed25519, setup,
		    teardown),
		cmocka_unit_test_setup_teardown(test_load_garbage, setup, teardown),
		cmocka_unit_test_setup_teardown(test_load_encrypted, setup,
		    teardown),
		cmocka_unit_test(test_random_hex),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
