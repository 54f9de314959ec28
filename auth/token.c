/*
 * token.c: admin, import and user tokens (see token.h): generation, the
 * strict parser that untrusted Authorization headers reach, hashing at rest
 * and the Ed25519 key an import token stands for.
 *
 * Domain tags, fixed forever (changing one invalidates every stored token):
 *   token_hash        SHA-256("tether-token-v1" || secret)
 *   token_import_key  seed = HMAC-SHA256(key "tether-import-v1", secret)
 * Both tags are fixed-length and the secret is always 32 bytes, so the
 * concatenation is unambiguous.  Distinct tags keep the stored hash of a
 * secret and the import key derived from it unrelated.
 */
#include "token.h"

#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include <openssl/crypto.h>
#include <openssl/err.h>
#include <openssl/evp.h>

#include "agentkey.h"
#include "log.h"

#define TOKEN_HASH_TAG   "tether-token-v1"
#define TOKEN_IMPORT_TAG "tether-import-v1"

#define TOKEN_PREFIX_LEN 3
#define TOKEN_SECRET_B64 43 /* ceil(32 * 8 / 6), no padding */
/* "ttx" "_" id "." secret */
#define TOKEN_TEXT_LEN (TOKEN_PREFIX_LEN + 1 + TOKEN_ID_LEN + 1 + TOKEN_SECRET_B64)

static const struct {
	enum token_kind kind;
	const char *prefix;
} token_prefixes[] = {
	{ TOKEN_ADMIN, "tta" },
	{ TOKEN_IMPORT, "tti" },
	{ TOKEN_USER, "ttu" },
};

#define NPREFIXES (sizeof(token_prefixes) / sizeof(token_prefixes[0]))

static const char *
token_prefix(enum token_kind kind)
{
	size_t i;

	for (i = 0; i < NPREFIXES; i++) {
		if (token_prefixes[i].kind == kind)
			return token_prefixes[i].prefix;
	}
	return NULL;
}

/*
 * base64url without table lookups or branches on the value: the secret is
 * encoded and decoded here, and a data-dependent table index or branch could
 * leak it through cache timing.  Range tests use the sign of
 * (lo - 1 - x) & (x - hi - 1), negative only when lo <= x <= hi.
 */
static int
in_range_mask(int x, int lo, int hi)
{
	return ((lo - 1 - x) & (x - hi - 1)) >> 8; /* -1 if in range, else 0 */
}

static char
b64url_char(unsigned int v)
{
	int x = (int)(v & 0x3f);
	int c = x + 'A';

	c += in_range_mask(x, 26, 63) & ('a' - 26 - 'A');
	c += in_range_mask(x, 52, 63) & ('0' - 52 - ('a' - 26));
	c += in_range_mask(x, 62, 63) & ('-' - 62 - ('0' - 52));
	c += in_range_mask(x, 63, 63) & ('_' - 63 - ('-' - 62));
	return (char)c;
}

/* The 6-bit value of a base64url character, or -1. */
static int
b64url_value(unsigned char ch)
{
	int x = ch;
	int v = -1;

	/* Each term adds value + 1 when x is in its range. */
	v += in_range_mask(x, 'A', 'Z') & (x - 'A' + 1);
	v += in_range_mask(x, 'a', 'z') & (x - 'a' + 26 + 1);
	v += in_range_mask(x, '0', '9') & (x - '0' + 52 + 1);
	v += in_range_mask(x, '-', '-') & (62 + 1);
	v += in_range_mask(x, '_', '_') & (63 + 1);
	return v;
}

/* Encodes the 32-byte secret as 43 characters plus NUL. */
static void
secret_encode(const uint8_t in[TOKEN_SECRET_LEN], char out[TOKEN_SECRET_B64 + 1])
{
	uint32_t acc = 0;
	int bits = 0;
	size_t i, o = 0;

	for (i = 0; i < TOKEN_SECRET_LEN; i++) {
		acc = (acc << 8) | in[i];
		bits += 8;
		while (bits >= 6) {
			bits -= 6;
			out[o++] = b64url_char(acc >> bits);
		}
	}
	if (bits > 0)
		out[o++] = b64url_char(acc << (6 - bits));
	out[o] = '\0';
}

/*
 * Decodes exactly TOKEN_SECRET_B64 characters.  Refuses any character outside
 * the alphabet (padding included) and non-zero trailing bits, so that each
 * secret has exactly one spelling.  Returns 0 or -1.
 */
static int
secret_decode(const char *in, uint8_t out[TOKEN_SECRET_LEN])
{
	uint32_t acc = 0;
	int bits = 0, bad = 0, v;
	size_t i, o = 0;

	for (i = 0; i < TOKEN_SECRET_B64; i++) {
		v = b64url_value((unsigned char)in[i]);
		bad |= v; /* negative once any character is invalid */
		acc = (acc << 6) | (uint32_t)(v & 0x3f);
		bits += 6;
		if (bits >= 8) {
			bits -= 8;
			out[o++] = (uint8_t)(acc >> bits);
		}
	}
	/* 43 * 6 = 258: two bits left over, which must be zero. */
	bad |= -(int)((acc & ((1u << bits) - 1)) != 0);
	return bad < 0 ? -1 : 0;
}

static void
hex_encode(const uint8_t *in, size_t n, char *out)
{
	static const char digits[] = "0123456789abcdef";
	size_t i;

	for (i = 0; i < n; i++) {
		out[2 * i] = digits[in[i] >> 4];
		out[2 * i + 1] = digits[in[i] & 0x0f];
	}
	out[2 * n] = '\0';
}

int
token_generate(enum token_kind kind, struct token *t)
{
	uint8_t idbytes[TOKEN_ID_LEN / 2];

	memset(t, 0, sizeof(*t));
	if (token_prefix(kind) == NULL)
		return -1;
	t->kind = kind;
	if (random_bytes(idbytes, sizeof(idbytes)) != 0 ||
	    random_bytes(t->secret, sizeof(t->secret)) != 0) {
		token_clear(t);
		return -1;
	}
	hex_encode(idbytes, sizeof(idbytes), t->id);
	return 0;
}

void
token_format(const struct token *t, char out[TOKEN_STR_MAX])
{
	char secret[TOKEN_SECRET_B64 + 1];
	const char *prefix = token_prefix(t->kind);

	if (prefix == NULL) {
		/* Not a token we could have made: format nothing usable. */
		out[0] = '\0';
		return;
	}
	secret_encode(t->secret, secret);
	snprintf(out, TOKEN_STR_MAX, "%s_%s.%s", prefix, t->id, secret);
	OPENSSL_cleanse(secret, sizeof(secret));
}

static int
is_space(char c)
{
	return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' ||
	    c == '\f';
}

static int
is_lower_hex(char c)
{
	return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f');
}

static int
parse_prefix(const char *s, size_t len, enum token_kind *kind)
{
	size_t i;

	if (len < TOKEN_PREFIX_LEN + 1 || s[TOKEN_PREFIX_LEN] != '_')
		return -1;
	for (i = 0; i < NPREFIXES; i++) {
		if (memcmp(s, token_prefixes[i].prefix, TOKEN_PREFIX_LEN) == 0) {
			*kind = token_prefixes[i].kind;
			return 0;
		}
	}
	return -1;
}

static int
parse_id(const char *s, size_t len, char id[TOKEN_ID_LEN + 1])
{
	size_t i;

	if (len != TOKEN_ID_LEN)
		return -1;
	for (i = 0; i < TOKEN_ID_LEN; i++) {
		if (!is_lower_hex(s[i]))
			return -1;
	}
	memcpy(id, s, TOKEN_ID_LEN);
	id[TOKEN_ID_LEN] = '\0';
	return 0;
}

/*
 * Every reason is a fixed string: nothing from the input is echoed, so
 * neither the secret nor a mistyped piece of it reaches a log.
 */
int
token_parse(const char *s, struct token *t, char *err, size_t errlen)
{
	struct token tmp;
	const char *end, *dot, *secret;
	size_t len;
	int r = -1;

	memset(&tmp, 0, sizeof(tmp));
	if (s == NULL) {
		snprintf(err, errlen, "token: empty");
		goto out;
	}
	while (is_space(*s))
		s++;
	end = s + strlen(s);
	while (end > s && is_space(end[-1]))
		end--;
	len = (size_t)(end - s);
	if (len == 0) {
		snprintf(err, errlen, "token: empty");
		goto out;
	}
	if (parse_prefix(s, len, &tmp.kind) != 0) {
		snprintf(err, errlen, "token: unknown prefix");
		goto out;
	}
	s += TOKEN_PREFIX_LEN + 1;
	len -= TOKEN_PREFIX_LEN + 1;
	if ((dot = memchr(s, '.', len)) == NULL) {
		snprintf(err, errlen, "token: missing '.' between id and secret");
		goto out;
	}
	if (parse_id(s, (size_t)(dot - s), tmp.id) != 0) {
		snprintf(err, errlen, "token: malformed id");
		goto out;
	}
	secret = dot + 1;
	if ((size_t)(end - secret) != TOKEN_SECRET_B64) {
		snprintf(err, errlen, "token: secret must be %d base64url characters",
		    TOKEN_SECRET_B64);
		goto out;
	}
	if (secret_decode(secret, tmp.secret) != 0) {
		snprintf(err, errlen, "token: malformed secret");
		goto out;
	}
	*t = tmp;
	r = 0;
out:
	OPENSSL_cleanse(&tmp, sizeof(tmp));
	return r;
}

/* SHA-256 fetched from the provider once, not at every hash: EVP_sha256()
 * makes OpenSSL 3 look the algorithm up (and free it) at every
 * EVP_DigestInit_ex, and the gateway hashes a bearer token per proxied
 * request.  Kept for the life of the process. */
static EVP_MD *sha256_md;
static pthread_once_t sha256_once = PTHREAD_ONCE_INIT;

static void
sha256_fetch(void)
{
	sha256_md = EVP_MD_fetch(NULL, "SHA256", NULL);
}

void
token_hash(const struct token *t, uint8_t out[TOKEN_HASH_LEN])
{
	EVP_MD_CTX *ctx = NULL;
	unsigned int n = 0;

	/*
	 * This cannot fail short of memory exhaustion or a broken library;
	 * the interface has no error return and any fallback value could make
	 * two different tokens compare equal, so stop instead.
	 */
	if (pthread_once(&sha256_once, sha256_fetch) != 0 || sha256_md == NULL ||
	    (ctx = EVP_MD_CTX_new()) == NULL ||
	    EVP_DigestInit_ex2(ctx, sha256_md, NULL) != 1 ||
	    EVP_DigestUpdate(ctx, TOKEN_HASH_TAG, strlen(TOKEN_HASH_TAG)) != 1 ||
	    EVP_DigestUpdate(ctx, t->secret, sizeof(t->secret)) != 1 ||
	    EVP_DigestFinal_ex(ctx, out, &n) != 1 || n != TOKEN_HASH_LEN)
		fatal("SHA-256 failed");
	EVP_MD_CTX_free(ctx);
}

bool
token_hash_equal(const uint8_t a[TOKEN_HASH_LEN], const uint8_t b[TOKEN_HASH_LEN])
{
	return CRYPTO_memcmp(a, b, TOKEN_HASH_LEN) == 0;
}

EVP_PKEY *
token_import_key(const struct token *t)
{
	uint8_t seed[32];
	size_t n = 0;
	EVP_PKEY *key = NULL;

	if (EVP_Q_mac(NULL, "HMAC", NULL, "SHA256", NULL, TOKEN_IMPORT_TAG,
	    strlen(TOKEN_IMPORT_TAG), t->secret, sizeof(t->secret), seed,
	    sizeof(seed), &n) == NULL || n != sizeof(seed)) {
		ERR_clear_error();
		goto out;
	}
	if ((key = EVP_PKEY_new_raw_private_key(EVP_PKEY_ED25519, NULL, seed,
	    sizeof(seed))) == NULL)
		ERR_clear_error();
out:
	OPENSSL_cleanse(seed, sizeof(seed));
	return key;
}

const char *
token_unusable_reason(int64_t expires_at, int64_t uses_left, int64_t now)
{
	if (expires_at != 0 && now >= expires_at)
		return "expired";
	if (uses_left == 0)
		return "used up";
	return NULL;
}

void
token_clear(struct token *t)
{
	OPENSSL_cleanse(t->secret, sizeof(t->secret));
}
