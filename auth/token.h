/*
 * token.h: bearer and import tokens: generation, parsing, hashing, checks.
 *
 * A token is "<prefix>_<id>.<secret>":
 *   prefix  "tta" admin, "tti" import, "ttu" user
 *   id      16 lowercase hex characters (8 random bytes), public, the lookup key
 *   secret  43 characters of unpadded base64url (32 CSPRNG bytes)
 * e.g. tti_3f9a1c2b7d4e5f60.Zx9...  The id may appear in logs; the secret never.
 *
 * At rest:
 *   admin and user tokens: token_hash(secret), compared in constant time;
 *   import tokens: the Ed25519 public key derived from the secret
 *     (token_import_key), so that the agent proves possession by signing the
 *     handshake challenge and neither the secret nor anything replayable ever
 *     crosses the wire.
 */
#ifndef TETHER_TOKEN_H
#define TETHER_TOKEN_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <openssl/evp.h>

#define TOKEN_ID_LEN      16   /* hex characters */
#define TOKEN_SECRET_LEN  32   /* raw bytes */
#define TOKEN_HASH_LEN    32
#define TOKEN_STR_MAX     80   /* whole token string including NUL */

enum token_kind {
	TOKEN_ADMIN,
	TOKEN_IMPORT,
	TOKEN_USER,
};

struct token {
	enum token_kind kind;
	char id[TOKEN_ID_LEN + 1];
	uint8_t secret[TOKEN_SECRET_LEN];
};

/* Fills t with a fresh id and secret from the CSPRNG.  Returns 0 or -1. */
int token_generate(enum token_kind kind, struct token *t);

/* Formats t as its string form into out (TOKEN_STR_MAX bytes). */
void token_format(const struct token *t, char out[TOKEN_STR_MAX]);

/*
 * Parses a token string (surrounding whitespace allowed, e.g. from a file).
 * Returns 0, or -1 with a reason in err that never repeats the secret.
 */
int token_parse(const char *s, struct token *t, char *err, size_t errlen);

/* SHA-256 over a domain tag and the secret: what admin/user tokens store. */
void token_hash(const struct token *t, uint8_t out[TOKEN_HASH_LEN]);

/* Constant-time equality of two hashes. */
bool token_hash_equal(const uint8_t a[TOKEN_HASH_LEN], const uint8_t b[TOKEN_HASH_LEN]);

/*
 * The Ed25519 key pair an import token stands for: the private key is derived
 * from the secret (HMAC-SHA256 with a domain tag as the 32-byte seed).
 * Returns a new EVP_PKEY (caller frees) or NULL.
 */
EVP_PKEY *token_import_key(const struct token *t);

/* Why a token with these limits cannot be used at `now` (Unix seconds), or
 * NULL if it can: "expired", "used up".  uses_left < 0 means unlimited. */
const char *token_unusable_reason(int64_t expires_at, int64_t uses_left, int64_t now);

/* Wipes the secret. */
void token_clear(struct token *t);

#endif
