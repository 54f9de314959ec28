/*
 * agentkey.c: Ed25519 agent keys, the handshake transcript and its
 * signature, and the CSPRNG helpers the rest of auth/ uses (see agentkey.h).
 */
#include "agentkey.h"

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <openssl/bio.h>
#include <openssl/crypto.h>
#include <openssl/err.h>
#include <openssl/pem.h>
#include <openssl/rand.h>

#include "fileio.h"

#define AUTH_TRANSCRIPT_TAG "tether-auth-v1"
#define AGENTKEY_FILE_MAX (16 * 1024) /* a PEM Ed25519 key is ~120 bytes */

EVP_PKEY *
agentkey_generate(void)
{
	EVP_PKEY *key;

	if ((key = EVP_PKEY_Q_keygen(NULL, NULL, "ED25519")) == NULL)
		ERR_clear_error();
	return key;
}

static int
is_ed25519(EVP_PKEY *key)
{
	return key != NULL && EVP_PKEY_get_id(key) == EVP_PKEY_ED25519;
}

int
agentkey_save(EVP_PKEY *key, const char *path, char *err, size_t errlen)
{
	BIO *bio = NULL;
	char *pem = NULL;
	long len;
	int r = -1;

	if (!is_ed25519(key)) {
		snprintf(err, errlen, "%s: not an Ed25519 key", path);
		goto out;
	}
	/* A secure-memory BIO: its buffer is wiped when freed. */
	if ((bio = BIO_new(BIO_s_secmem())) == NULL) {
		snprintf(err, errlen, "%s: out of memory", path);
		goto out;
	}
	if (PEM_write_bio_PKCS8PrivateKey(bio, key, NULL, NULL, 0, NULL,
	    NULL) != 1) {
		snprintf(err, errlen, "%s: cannot encode private key", path);
		goto out;
	}
	if ((len = BIO_get_mem_data(bio, &pem)) <= 0) {
		snprintf(err, errlen, "%s: cannot encode private key", path);
		goto out;
	}
	if (file_write_atomic(path, pem, (size_t)len, 0600, err, errlen) != 0)
		goto out;
	r = 0;
out:
	BIO_free(bio);
	ERR_clear_error();
	return r;
}

/* Never prompt on a terminal for a passphrase: agent keys have none. */
static int
no_passphrase(char *buf, int size, int rwflag, void *u)
{
	(void)buf;
	(void)size;
	(void)rwflag;
	(void)u;
	return -1;
}

EVP_PKEY *
agentkey_load(const char *path, char *err, size_t errlen)
{
	BIO *bio = NULL;
	char *pem = NULL;
	size_t len = 0;
	EVP_PKEY *key = NULL;

	if (file_read_all(path, AGENTKEY_FILE_MAX, &pem, &len, err, errlen) != 0)
		goto out;
	if (len > INT_MAX || (bio = BIO_new_mem_buf(pem, (int)len)) == NULL) {
		snprintf(err, errlen, "%s: out of memory", path);
		goto out;
	}
	if ((key = PEM_read_bio_PrivateKey(bio, NULL, no_passphrase,
	    NULL)) == NULL) {
		snprintf(err, errlen, "%s: not a PEM private key", path);
		goto out;
	}
	if (!is_ed25519(key)) {
		snprintf(err, errlen, "%s: not an Ed25519 key", path);
		EVP_PKEY_free(key);
		key = NULL;
		goto out;
	}
out:
	BIO_free(bio);
	if (pem != NULL) {
		OPENSSL_cleanse(pem, len);
		free(pem);
	}
	ERR_clear_error();
	return key;
}

int
agentkey_public(EVP_PKEY *key, uint8_t pub[AGENTKEY_PUB_LEN])
{
	size_t len = AGENTKEY_PUB_LEN;

	if (!is_ed25519(key) ||
	    EVP_PKEY_get_raw_public_key(key, pub, &len) != 1 ||
	    len != AGENTKEY_PUB_LEN) {
		ERR_clear_error();
		return -1;
	}
	return 0;
}

/* Appends n bytes at *off if they fit.  Returns 0 or -1. */
static int
put(uint8_t *out, size_t outlen, size_t *off, const void *p, size_t n)
{
	if (n > outlen - *off)
		return -1;
	memcpy(out + *off, p, n);
	*off += n;
	return 0;
}

size_t
auth_transcript(uint8_t *out, size_t outlen, uint32_t version, int cred,
    const char *id, const char *node, const uint8_t nonce[AGENTKEY_NONCE_LEN])
{
	uint8_t be[4], c, nul = 0;
	size_t off = 0;

	/* One byte on the wire: a value that would be truncated is refused. */
	if (out == NULL || id == NULL || node == NULL || nonce == NULL ||
	    cred < 0 || cred > UINT8_MAX)
		return 0;
	c = (uint8_t)cred;
	be[0] = (uint8_t)(version >> 24);
	be[1] = (uint8_t)(version >> 16);
	be[2] = (uint8_t)(version >> 8);
	be[3] = (uint8_t)version;
	/*
	 * id and node are NUL-terminated here, so neither can contain the
	 * separator and the encoding is unambiguous.
	 */
	if (put(out, outlen, &off, AUTH_TRANSCRIPT_TAG,
	    sizeof(AUTH_TRANSCRIPT_TAG)) != 0 || /* with its NUL */
	    put(out, outlen, &off, be, sizeof(be)) != 0 ||
	    put(out, outlen, &off, &c, 1) != 0 ||
	    put(out, outlen, &off, id, strlen(id)) != 0 ||
	    put(out, outlen, &off, &nul, 1) != 0 ||
	    put(out, outlen, &off, node, strlen(node)) != 0 ||
	    put(out, outlen, &off, &nul, 1) != 0 ||
	    put(out, outlen, &off, nonce, AGENTKEY_NONCE_LEN) != 0)
		return 0;
	return off;
}

int
agentkey_sign(EVP_PKEY *key, const uint8_t *msg, size_t len,
    uint8_t sig[AGENTKEY_SIG_LEN])
{
	EVP_MD_CTX *ctx = NULL;
	size_t siglen = AGENTKEY_SIG_LEN;
	int r = -1;

	if (!is_ed25519(key))
		goto out;
	if ((ctx = EVP_MD_CTX_new()) == NULL)
		goto out;
	/* Ed25519 hashes internally: no digest is named. */
	if (EVP_DigestSignInit(ctx, NULL, NULL, NULL, key) != 1)
		goto out;
	if (EVP_DigestSign(ctx, sig, &siglen, msg, len) != 1 ||
	    siglen != AGENTKEY_SIG_LEN)
		goto out;
	r = 0;
out:
	EVP_MD_CTX_free(ctx);
	ERR_clear_error();
	return r;
}

int
random_bytes(uint8_t *buf, size_t n)
{
	if (n > INT_MAX)
		return -1;
	if (RAND_bytes(buf, (int)n) != 1) {
		ERR_clear_error();
		return -1;
	}
	return 0;
}

int
random_hex(char *out, size_t nbytes)
{
	static const char digits[] = "0123456789abcdef";
	uint8_t chunk[64];
	size_t done = 0, n, i;

	while (done < nbytes) {
		n = nbytes - done < sizeof(chunk) ? nbytes - done : sizeof(chunk);
		if (random_bytes(chunk, n) != 0) {
			out[0] = '\0';
			return -1;
		}
		for (i = 0; i < n; i++) {
			out[2 * (done + i)] = digits[chunk[i] >> 4];
			out[2 * (done + i) + 1] = digits[chunk[i] & 0x0f];
		}
		done += n;
	}
	out[2 * nbytes] = '\0';
	OPENSSL_cleanse(chunk, sizeof(chunk));
	return 0;
}

#define ROTATE_TRANSCRIPT_TAG "tether-rotate-v1"

size_t
key_rotation_transcript(uint8_t *out, size_t outlen, const char *agent_id,
    const char *node, const uint8_t nonce[AGENTKEY_NONCE_LEN],
    const uint8_t old_pub[AGENTKEY_PUB_LEN], const uint8_t new_pub[AGENTKEY_PUB_LEN])
{
	uint8_t nul = 0;
	size_t off = 0;

	if (out == NULL || agent_id == NULL || node == NULL || nonce == NULL ||
	    old_pub == NULL || new_pub == NULL)
		return 0;
	/* NUL-terminated names: neither can hold the separator. */
	if (put(out, outlen, &off, ROTATE_TRANSCRIPT_TAG,
	    sizeof(ROTATE_TRANSCRIPT_TAG)) != 0 ||
	    put(out, outlen, &off, agent_id, strlen(agent_id)) != 0 ||
	    put(out, outlen, &off, &nul, 1) != 0 ||
	    put(out, outlen, &off, node, strlen(node)) != 0 ||
	    put(out, outlen, &off, &nul, 1) != 0 ||
	    put(out, outlen, &off, nonce, AGENTKEY_NONCE_LEN) != 0 ||
	    put(out, outlen, &off, old_pub, AGENTKEY_PUB_LEN) != 0 ||
	    put(out, outlen, &off, new_pub, AGENTKEY_PUB_LEN) != 0)
		return 0;
	return off;
}

int
key_rotation_prove(EVP_PKEY *old_key, EVP_PKEY *new_key, const char *agent_id,
    const char *node, const uint8_t nonce[AGENTKEY_NONCE_LEN],
    uint8_t old_sig[AGENTKEY_SIG_LEN], uint8_t new_sig[AGENTKEY_SIG_LEN])
{
	uint8_t old_pub[AGENTKEY_PUB_LEN], new_pub[AGENTKEY_PUB_LEN];
	uint8_t msg[ROTATE_TRANSCRIPT_MAX];
	size_t len;

	if (old_key == NULL || new_key == NULL ||
	    agentkey_public(old_key, old_pub) != 0 ||
	    agentkey_public(new_key, new_pub) != 0)
		return -1;
	len = key_rotation_transcript(msg, sizeof(msg), agent_id, node, nonce,
	    old_pub, new_pub);
	if (len == 0 || agentkey_sign(old_key, msg, len, old_sig) != 0 ||
	    agentkey_sign(new_key, msg, len, new_sig) != 0)
		return -1;
	return 0;
}
