/*
 * test_token.c: tokens (auth/token.c): the string form and its strict
 * parser, hashing at rest, the import key derivation and usability checks.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <string.h>

#include <openssl/evp.h>
#include <openssl/hmac.h>

#include "agentkey.h"
#include "token.h"

#define SECRET_CHARS 43

/* A fresh token of kind and its string form. */
static void
make_token(enum token_kind kind, struct token *t, char s[TOKEN_STR_MAX])
{
	assert_int_equal(token_generate(kind, t), 0);
	token_format(t, s);
}

/* Where the secret starts in a token string. */
static const char *
secret_part(const char *s)
{
	const char *dot = strchr(s, '.');

	assert_non_null(dot);
	return dot + 1;
}

/*
 * Parses s, which must fail with a reason starting with want, and checks
 * the reason repeats no part of the secret.
 */
static void
expect_refused(const char *s, const char *secret, const char *want)
{
	struct token t;
	char err[256] = "";
	char head[11];

	memset(&t, 0xa5, sizeof(t));
	assert_int_equal(token_parse(s, &t, err, sizeof(err)), -1);
	if (strncmp(err, want, strlen(want)) != 0)
		fail_msg("\"%s\": reason \"%s\", want \"%s...\"", s, err, want);
	if (secret != NULL && strlen(secret) >= sizeof(head) - 1) {
		assert_null(strstr(err, secret));
		memcpy(head, secret, sizeof(head) - 1);
		head[sizeof(head) - 1] = '\0';
		assert_null(strstr(err, head));
	}
}

static void
test_round_trip(void **state)
{
	static const struct {
		enum token_kind kind;
		const char *prefix;
	} kinds[] = {
		{ TOKEN_ADMIN, "tta_" },
		{ TOKEN_IMPORT, "tti_" },
		{ TOKEN_USER, "ttu_" },
	};
	struct token t, p;
	char s[TOKEN_STR_MAX], err[256];
	size_t i, j;

	for (i = 0; i < sizeof(kinds) / sizeof(kinds[0]); i++) {
		make_token(kinds[i].kind, &t, s);
		assert_int_equal(strncmp(s, kinds[i].prefix, 4), 0);
		assert_int_equal(strlen(s), 4 + TOKEN_ID_LEN + 1 + SECRET_CHARS);
		assert_int_equal(strlen(t.id), TOKEN_ID_LEN);
		for (j = 0; j < TOKEN_ID_LEN; j++)
			assert_non_null(strchr("0123456789abcdef", t.id[j]));
		assert_int_equal(token_parse(s, &p, err, sizeof(err)), 0);
		assert_int_equal(p.kind, kinds[i].kind);
		assert_string_equal(p.id, t.id);
		assert_memory_equal(p.secret, t.secret, TOKEN_SECRET_LEN);
	}
}

/* Two tokens in a row never share an id or a secret. */
static void
test_generate_fresh(void **state)
{
	struct token a, b;

	assert_int_equal(token_generate(TOKEN_USER, &a), 0);
	assert_int_equal(token_generate(TOKEN_USER, &b), 0);
	assert_string_not_equal(a.id, b.id);
	assert_memory_not_equal(a.secret, b.secret, TOKEN_SECRET_LEN);
}

/*
 * The secret's encoding is the standard one: compare against OpenSSL's
 * base64 with the URL alphabet and no padding, over enough random secrets
 * to meet every character.
 */
static void
test_secret_encoding(void **state)
{
	struct token t;
	char s[TOKEN_STR_MAX];
	unsigned char std[64];
	int i, k, n;

	for (i = 0; i < 500; i++) {
		make_token(TOKEN_ADMIN, &t, s);
		n = EVP_EncodeBlock(std, t.secret, TOKEN_SECRET_LEN);
		assert_int_equal(n, 44);
		assert_int_equal(std[43], '=');
		std[43] = '\0';
		for (k = 0; k < 43; k++) {
			if (std[k] == '+')
				std[k] = '-';
			else if (std[k] == '/')
				std[k] = '_';
		}
		assert_string_equal(secret_part(s), (char *)std);
	}
}

static void
test_whitespace(void **state)
{
	struct token t, p;
	char s[TOKEN_STR_MAX], buf[TOKEN_STR_MAX + 16], err[256];

	make_token(TOKEN_IMPORT, &t, s);
	snprintf(buf, sizeof(buf), "%s\n", s);
	assert_int_equal(token_parse(buf, &p, err, sizeof(err)), 0);
	assert_memory_equal(p.secret, t.secret, TOKEN_SECRET_LEN);
	snprintf(buf, sizeof(buf), " \t%s \r\n", s);
	assert_int_equal(token_parse(buf, &p, err, sizeof(err)), 0);
	assert_string_equal(p.id, t.id);

	/* Whitespace inside is not whitespace around. */
	snprintf(buf, sizeof(buf), "%s", s);
	buf[30] = ' ';
	expect_refused(buf, NULL, "token:");
	expect_refused("", NULL, "token: empty");
	expect_refused(" \n", NULL, "token: empty");
}

static void
test_bad_prefix(void **state)
{
	static const char *prefixes[] = {
		"ttx_", "TTI_", "Tti_", "tt_", "ttii_", "tti-", "tti", "xtti_",
		"_",
	};
	struct token t;
	char s[TOKEN_STR_MAX], buf[TOKEN_STR_MAX + 16];
	const char *rest;
	size_t i;

	make_token(TOKEN_IMPORT, &t, s);
	rest = s + 4;
	for (i = 0; i < sizeof(prefixes) / sizeof(prefixes[0]); i++) {
		snprintf(buf, sizeof(buf), "%s%s", prefixes[i], rest);
		expect_refused(buf, secret_part(s), "token: unknown prefix");
	}
	expect_refused("tti", NULL, "token: unknown prefix");
}

static void
test_bad_id(void **state)
{
	struct token t;
	char s[TOKEN_STR_MAX], buf[TOKEN_STR_MAX + 16], err[256];
	const char *secret;

	make_token(TOKEN_USER, &t, s);
	secret = secret_part(s);

	/* 15 and 17 characters */
	snprintf(buf, sizeof(buf), "ttu_%.15s.%s", t.id, secret);
	expect_refused(buf, secret, "token: malformed id");
	snprintf(buf, sizeof(buf), "ttu_%s0.%s", t.id, secret);
	expect_refused(buf, secret, "token: malformed id");
	/* empty */
	snprintf(buf, sizeof(buf), "ttu_.%s", secret);
	expect_refused(buf, secret, "token: malformed id");
	/* uppercase hex and a non-hex letter */
	snprintf(buf, sizeof(buf), "ttu_0123456789ABCDEF.%s", secret);
	expect_refused(buf, secret, "token: malformed id");
	snprintf(buf, sizeof(buf), "ttu_0123456789abcdeg.%s", secret);
	expect_refused(buf, secret, "token: malformed id");
	snprintf(buf, sizeof(buf), "ttu_0123456789abcde .%s", secret);
	expect_refused(buf, secret, "token: malformed id");
	/* a valid one, for contrast */
	snprintf(buf, sizeof(buf), "ttu_0123456789abcdef.%s", secret);
	assert_int_equal(token_parse(buf, &t, err, sizeof(err)), 0);
}

static void
test_missing_dot(void **state)
{
	struct token t;
	char s[TOKEN_STR_MAX], buf[TOKEN_STR_MAX + 16];
	const char *secret;

	make_token(TOKEN_ADMIN, &t, s);
	secret = secret_part(s);
	snprintf(buf, sizeof(buf), "tta_%s%s", t.id, secret);
	expect_refused(buf, secret, "token: missing '.'");
	snprintf(buf, sizeof(buf), "tta_%s_%s", t.id, secret);
	expect_refused(buf, secret, "token: missing '.'");
	snprintf(buf, sizeof(buf), "tta_%s", t.id);
	expect_refused(buf, NULL, "token: missing '.'");
}

static void
test_bad_secret(void **state)
{
	struct token t;
	char s[TOKEN_STR_MAX], buf[TOKEN_STR_MAX + 16], secret[64], err[256];
	const char *len_reason = "token: secret must be 43";
	const char *bad_reason = "token: malformed secret";
	static const char invalid[] = { '+', '/', '=', '.', '!', ' ', '\x80', '\xff' };
	size_t i;

	make_token(TOKEN_IMPORT, &t, s);
	snprintf(secret, sizeof(secret), "%s", secret_part(s));

	/* short, long, empty, padded */
	snprintf(buf, sizeof(buf), "tti_%s.%.42s", t.id, secret);
	expect_refused(buf, secret, len_reason);
	snprintf(buf, sizeof(buf), "tti_%s.%sA", t.id, secret);
	expect_refused(buf, secret, len_reason);
	snprintf(buf, sizeof(buf), "tti_%s.", t.id);
	expect_refused(buf, NULL, len_reason);
	snprintf(buf, sizeof(buf), "tti_%s.%s=", t.id, secret);
	expect_refused(buf, secret, len_reason);
	/* 43 characters, but the last one padding */
	snprintf(buf, sizeof(buf), "tti_%s.%.42s=", t.id, secret);
	expect_refused(buf, secret, bad_reason);

	/* a character outside the base64url alphabet, anywhere */
	for (i = 0; i < sizeof(invalid); i++) {
		snprintf(buf, sizeof(buf), "tti_%s.%s", t.id, secret);
		buf[4 + TOKEN_ID_LEN + 1 + (i * 5) % 43] = invalid[i];
		expect_refused(buf, secret, bad_reason);
	}

	/*
	 * The last character carries two bits beyond the 32 bytes; they must
	 * be zero so each secret has one spelling.  'B' is 000001.
	 */
	snprintf(buf, sizeof(buf), "tti_%s.%.42sB", t.id, secret);
	expect_refused(buf, secret, bad_reason);
	snprintf(buf, sizeof(buf), "tti_%s.%.42sA", t.id, secret);
	assert_int_equal(token_parse(buf, &t, err, sizeof(err)), 0);
}

/* A failed parse leaves the caller's struct alone. */
static void
test_failure_leaves_output(void **state)
{
	struct token t, before;
	char err[256];

	memset(&t, 0x5a, sizeof(t));
	before = t;
	assert_int_equal(token_parse("ttu_0123456789abcdef.short", &t, err,
	    sizeof(err)), -1);
	assert_memory_equal(&t, &before, sizeof(t));
}

static void
test_hash(void **state)
{
	struct token a, b;
	uint8_t ha[TOKEN_HASH_LEN], ha2[TOKEN_HASH_LEN], hb[TOKEN_HASH_LEN];
	uint8_t want[TOKEN_HASH_LEN], input[64];
	unsigned int n = 0;
	const char *tag = "tether-token-v1";

	assert_int_equal(token_generate(TOKEN_ADMIN, &a), 0);
	assert_int_equal(token_generate(TOKEN_ADMIN, &b), 0);
	token_hash(&a, ha);
	token_hash(&a, ha2);
	token_hash(&b, hb);
	assert_memory_equal(ha, ha2, TOKEN_HASH_LEN);
	assert_memory_not_equal(ha, hb, TOKEN_HASH_LEN);
	assert_true(token_hash_equal(ha, ha2));
	assert_false(token_hash_equal(ha, hb));

	/* The stored form is SHA-256(tag || secret): pinned here because
	 * changing it would orphan every token already in a store. */
	memcpy(input, tag, strlen(tag));
	memcpy(input + strlen(tag), a.secret, TOKEN_SECRET_LEN);
	assert_int_equal(EVP_Digest(input, strlen(tag) + TOKEN_SECRET_LEN, want,
	    &n, EVP_sha256(), NULL), 1);
	assert_memory_equal(ha, want, TOKEN_HASH_LEN);

	/* The id is not hashed: only the secret matters. */
	memcpy(b.secret, a.secret, TOKEN_SECRET_LEN);
	token_hash(&b, hb);
	assert_memory_equal(ha, hb, TOKEN_HASH_LEN);
}

static void
test_hash_equal_each_byte(void **state)
{
	uint8_t a[TOKEN_HASH_LEN], b[TOKEN_HASH_LEN];
	size_t i;

	memset(a, 0x11, sizeof(a));
	for (i = 0; i < TOKEN_HASH_LEN; i++) {
		memcpy(b, a, sizeof(b));
		assert_true(token_hash_equal(a, b));
		b[i] ^= 0x80;
		assert_false(token_hash_equal(a, b));
	}
}

static void
import_pub(const struct token *t, uint8_t pub[AGENTKEY_PUB_LEN])
{
	EVP_PKEY *key = token_import_key(t);

	assert_non_null(key);
	assert_int_equal(agentkey_public(key, pub), 0);
	EVP_PKEY_free(key);
}

static void
test_import_key(void **state)
{
	struct token a, b;
	uint8_t pa[AGENTKEY_PUB_LEN], pa2[AGENTKEY_PUB_LEN], pb[AGENTKEY_PUB_LEN];
	uint8_t seed[32], want[AGENTKEY_PUB_LEN];
	uint8_t msg[] = "challenge transcript";
	uint8_t sig[AGENTKEY_SIG_LEN];
	unsigned int n = 0;
	size_t wlen = sizeof(want);
	EVP_PKEY *key = NULL, *ref = NULL;

	assert_int_equal(token_generate(TOKEN_IMPORT, &a), 0);
	assert_int_equal(token_generate(TOKEN_IMPORT, &b), 0);
	import_pub(&a, pa);
	import_pub(&a, pa2);
	import_pub(&b, pb);
	assert_memory_equal(pa, pa2, AGENTKEY_PUB_LEN);
	assert_memory_not_equal(pa, pb, AGENTKEY_PUB_LEN);

	/* A signature by the derived key verifies with its public half. */
	key = token_import_key(&a);
	assert_non_null(key);
	assert_int_equal(agentkey_sign(key, msg, sizeof(msg), sig), 0);
	assert_true(agentkey_verify(pa, msg, sizeof(msg), sig));
	assert_false(agentkey_verify(pb, msg, sizeof(msg), sig));
	EVP_PKEY_free(key);

	/* The seed is HMAC-SHA256(key "tether-import-v1", secret): pinned. */
	assert_non_null(HMAC(EVP_sha256(), "tether-import-v1", 16, a.secret,
	    TOKEN_SECRET_LEN, seed, &n));
	assert_int_equal(n, 32);
	ref = EVP_PKEY_new_raw_private_key(EVP_PKEY_ED25519, NULL, seed, 32);
	assert_non_null(ref);
	assert_int_equal(EVP_PKEY_get_raw_public_key(ref, want, &wlen), 1);
	assert_memory_equal(pa, want, AGENTKEY_PUB_LEN);
	EVP_PKEY_free(ref);

	/* The hash at rest and the import key are unrelated. */
	token_hash(&a, seed);
	assert_memory_not_equal(seed, want, 32);
}

static void
test_unusable_reason(void **state)
{
	const int64_t now = 1700000000;

	/* usable */
	assert_null(token_unusable_reason(now + 60, 3, now));
	assert_null(token_unusable_reason(now + 1, 1, now));
	/* unlimited uses, never expiring */
	assert_null(token_unusable_reason(now + 60, -1, now));
	assert_null(token_unusable_reason(0, 5, now));
	assert_null(token_unusable_reason(0, -1, now));
	/* expired: at the instant and after */
	assert_string_equal(token_unusable_reason(now, 3, now), "expired");
	assert_string_equal(token_unusable_reason(now - 1, -1, now), "expired");
	/* used up */
	assert_string_equal(token_unusable_reason(now + 60, 0, now), "used up");
	assert_string_equal(token_unusable_reason(0, 0, now), "used up");
	/* both: either reason is a refusal */
	assert_non_null(token_unusable_reason(now - 1, 0, now));
}

static void
test_clear(void **state)
{
	struct token t;
	uint8_t zero[TOKEN_SECRET_LEN] = { 0 };

	assert_int_equal(token_generate(TOKEN_USER, &t), 0);
	token_clear(&t);
	assert_memory_equal(t.secret, zero, TOKEN_SECRET_LEN);
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_round_trip),
		cmocka_unit_test(test_generate_fresh),
		cmocka_unit_test(test_secret_encoding),
		cmocka_unit_test(test_whitespace),
		cmocka_unit_test(test_bad_prefix),
		cmocka_unit_test(test_bad_id),
		cmocka_unit_test(test_missing_dot),
		cmocka_unit_test(test_bad_secret),
		cmocka_unit_test(test_failure_leaves_output),
		cmocka_unit_test(test_hash),
		cmocka_unit_test(test_hash_equal_each_byte),
		cmocka_unit_test(test_import_key),
		cmocka_unit_test(test_unusable_reason),
		cmocka_unit_test(test_clear),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
