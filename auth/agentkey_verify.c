/*
 * agentkey_verify.c: the gateway's half of the Ed25519 proofs (see
 * agentkey.h): a signature checked against a raw public key, and a key
 * rotation's two.
 *
 * Verified with libsodium rather than OpenSSL (docs/0046): about twice
 * as fast here (a join verifies two, a quarter of the gateway's CPU per
 * join with OpenSSL), no key object made and freed per call, and strict:
 * a public key or an R of small order, or an S not reduced, is refused,
 * so no key for which anyone can forge a signature ever proves anything.
 * Signing stays with OpenSSL (agentkey.c); an Ed25519 signature is the
 * same bytes whoever checks it.  Only tether_auth_verify holds this file,
 * and only the gateway and the tests link it: the agent, built static
 * for three architectures, never verifies and does not carry libsodium.
 */
#include "agentkey.h"

#include <pthread.h>

#include <openssl/crypto.h>
#include <sodium.h>

static pthread_once_t sodium_once = PTHREAD_ONCE_INIT;
static int sodium_ready = -1;

/* sodium_init takes a lock at every call: once per process instead. */
static void
sodium_start(void)
{
	sodium_ready = sodium_init();
}

bool
agentkey_verify(const uint8_t pub[AGENTKEY_PUB_LEN], const uint8_t *msg,
    size_t len, const uint8_t sig[AGENTKEY_SIG_LEN])
{
	static const uint8_t empty[1];

	if (pthread_once(&sodium_once, sodium_start) != 0 || sodium_ready < 0)
		return false;
	return crypto_sign_verify_detached(sig, msg != NULL ? msg : empty,
	    len, pub) == 0;
}

bool
key_rotation_verify(const char *agent_id, const char *node,
    const uint8_t nonce[AGENTKEY_NONCE_LEN], const uint8_t old_pub[AGENTKEY_PUB_LEN],
    const uint8_t new_pub[AGENTKEY_PUB_LEN], const uint8_t old_sig[AGENTKEY_SIG_LEN],
    const uint8_t new_sig[AGENTKEY_SIG_LEN])
{
	uint8_t msg[ROTATE_TRANSCRIPT_MAX];
	size_t len;

	/* A "rotation" to the same key would prove nothing new. */
	if (CRYPTO_memcmp(old_pub, new_pub, AGENTKEY_PUB_LEN) == 0)
		return false;
	len = key_rotation_transcript(msg, sizeof(msg), agent_id, node, nonce,
	    old_pub, new_pub);
	return len > 0 && agentkey_verify(old_pub, msg, len, old_sig) &&
	    agentkey_verify(new_pub, msg, len, new_sig);
}
