/*
 * agentkey.h: Ed25519 keys and the handshake proof.
 *
 * An agent generates its key on the node at join time; only the raw 32-byte
 * public key ever leaves the node.  The same sign/verify pair proves import
 * tokens (see token_import_key).
 *
 * The proof: the agent signs the transcript
 *   "tether-auth-v1" 0x00 version(4, big endian) cred(1) id 0x00 node 0x00 nonce(32)
 * The nonce is fresh per connection and never reused by the gateway, so a
 * recorded AUTH replays nowhere; binding the credential id, node name and
 * version stops a signature made for one context being used in another.
 */
#ifndef TETHER_AGENTKEY_H
#define TETHER_AGENTKEY_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <openssl/evp.h>

#define AGENTKEY_PUB_LEN 32
#define AGENTKEY_SIG_LEN 64
#define AGENTKEY_NONCE_LEN 32
#define AUTH_TRANSCRIPT_MAX 256

/* A fresh Ed25519 key from the CSPRNG, or NULL. */
EVP_PKEY *agentkey_generate(void);

/* Writes the private key as PKCS#8 PEM to path atomically with mode 0600.
 * Returns 0 or -1 with err. */
int agentkey_save(EVP_PKEY *key, const char *path, char *err, size_t errlen);

/* Loads a private key written by agentkey_save; NULL with err on failure
 * (missing file, not Ed25519, ...). */
EVP_PKEY *agentkey_load(const char *path, char *err, size_t errlen);

/* The raw public key.  Returns 0 or -1. */
int agentkey_public(EVP_PKEY *key, uint8_t pub[AGENTKEY_PUB_LEN]);

/* Builds the transcript above into out; returns its length or 0 if it does
 * not fit.  cred is enum frame_cred's value. */
size_t auth_transcript(uint8_t *out, size_t outlen, uint32_t version, int cred,
    const char *id, const char *node, const uint8_t nonce[AGENTKEY_NONCE_LEN]);

/*
 * Node key rotation (docs/interface.md, "Node key rotation").  The agent
 * proves it holds both its current key and the new one by signing, with
 * each, the transcript
 *   "tether-rotate-v1" 0x00 agent_id 0x00 node 0x00 nonce(32) old(32) new(32)
 * where nonce is the gateway's fresh KEY_ROTATE nonce.  The old key's
 * signature says "the node that owns this agent names this new key"; the
 * new key's says "whoever names it holds it" (no one can adopt a public key
 * whose private half they lack); the nonce stops a replay.
 */
#define ROTATE_TRANSCRIPT_MAX 256

/* Builds the transcript into out; its length, or 0 if it does not fit. */
size_t key_rotation_transcript(uint8_t *out, size_t outlen, const char *agent_id,
    const char *node, const uint8_t nonce[AGENTKEY_NONCE_LEN],
    const uint8_t old_pub[AGENTKEY_PUB_LEN], const uint8_t new_pub[AGENTKEY_PUB_LEN]);

/* The agent's half: both signatures over the transcript, made with
 * old_key and new_key (neither owned).  Returns 0 or -1. */
int key_rotation_prove(EVP_PKEY *old_key, EVP_PKEY *new_key, const char *agent_id,
    const char *node, const uint8_t nonce[AGENTKEY_NONCE_LEN],
    uint8_t old_sig[AGENTKEY_SIG_LEN], uint8_t new_sig[AGENTKEY_SIG_LEN]);

/* The gateway's half: true when old_sig verifies with old_pub and new_sig
 * with new_pub over the transcript, and the two keys differ.  Two
 * Ed25519 verifications (~0.1 ms). */
bool key_rotation_verify(const char *agent_id, const char *node,
    const uint8_t nonce[AGENTKEY_NONCE_LEN], const uint8_t old_pub[AGENTKEY_PUB_LEN],
    const uint8_t new_pub[AGENTKEY_PUB_LEN], const uint8_t old_sig[AGENTKEY_SIG_LEN],
    const uint8_t new_sig[AGENTKEY_SIG_LEN]);

/* Signs msg with key.  Returns 0 or -1. */
int agentkey_sign(EVP_PKEY *key, const uint8_t *msg, size_t len,
    uint8_t sig[AGENTKEY_SIG_LEN]);

/* Verifies sig over msg with the raw public key: strictly (RFC 8032 with
 * libsodium's checks: a public key or R of small order, an S not reduced
 * mod L, are refused).  About 0.1 ms; any thread.  In tether_auth_verify
 * (agentkey_verify.c, libsodium, docs/0046), which only the gateway and
 * the tests link; the same for key_rotation_verify. */
bool agentkey_verify(const uint8_t pub[AGENTKEY_PUB_LEN], const uint8_t *msg,
    size_t len, const uint8_t sig[AGENTKEY_SIG_LEN]);

/* Fills buf with n bytes from the CSPRNG (RAND_bytes).  Returns 0 or -1. */
int random_bytes(uint8_t *buf, size_t n);

/* Lowercase hex of n random bytes into out (2n+1 bytes).  Returns 0 or -1. */
int random_hex(char *out, size_t nbytes);

#endif
