/*
 * ntlm.h: NTLM authentication to an HTTP proxy (MS-NLMP), the client's
 * three messages: NEGOTIATE (type 1) out, CHALLENGE (type 2) in, and
 * AUTHENTICATE (type 3) out with an NTLMv2 response (never NTLMv1 or LM).
 * Pure functions over bytes; common/wsclient.c carries them in
 * Proxy-Authorization and Proxy-Authenticate headers (base64).
 *
 * Crypto is OpenSSL's: HMAC-MD5 through EVP_MAC, and MD4 for the NT hash
 * through the low-level MD4() (deprecated in OpenSSL 3 but built in, where
 * the EVP MD4 needs the legacy provider module, which a static binary
 * cannot load): docs/0024.
 */
#ifndef TETHER_NTLM_H
#define TETHER_NTLM_H

#include <stddef.h>
#include <stdint.h>

#define NTLM_CHALLENGE_MAX   4096   /* a type-2 message we accept */
#define NTLM_TARGET_INFO_MAX 2048   /* its AV pairs */
#define NTLM_NAME_MAX        256    /* domain and user, bytes of UTF-8 */

/* What the proxy's CHALLENGE carries that the answer needs. */
struct ntlm_challenge {
	uint8_t server_challenge[8];
	uint32_t flags;
	uint8_t target_info[NTLM_TARGET_INFO_MAX];
	size_t target_info_len;
	int has_timestamp;          /* MsvAvTimestamp in target_info */
	uint64_t timestamp;         /* its value (FILETIME) */
};

/* The NEGOTIATE message (32 bytes) into out (at least 32).  Returns its
 * length. */
size_t ntlm_negotiate(uint8_t *out, size_t outlen);

/*
 * Parses a CHALLENGE message of len bytes (at most NTLM_CHALLENGE_MAX):
 * signature, type 2, the server challenge, flags, and the target info
 * (none is taken as empty), whose AV pairs must lie inside the message and
 * end with MsvAvEOL.
 * Unicode must be offered (NTLMv2 names are UTF-16LE).  Returns 0, or -1
 * with a reason in why.
 */
int ntlm_parse_challenge(const uint8_t *msg, size_t len, struct ntlm_challenge *ch,
    char *why, size_t whylen);

/*
 * Splits "DOMAIN\\user" into domain and user ("user@domain" and a bare
 * "user" go whole into user, with an empty domain: the UPN form).  Each at
 * most NTLM_NAME_MAX - 1 bytes.  0, or -1 if too long or empty.
 */
int ntlm_split_user(const char *in, char domain[NTLM_NAME_MAX],
    char user[NTLM_NAME_MAX]);

/* NTOWFv2 (MS-NLMP 3.3.2): HMAC-MD5(MD4(UTF-16LE(password)),
 * UTF-16LE(upper(user) domain)).  user and domain are UTF-8 (upper-cased as
 * ASCII).  0, or -1 (bad UTF-8, crypto failure).  out is a secret. */
int ntlm_ntowfv2(const char *domain, const char *user, const char *password,
    uint8_t out[16]);

/*
 * The AUTHENTICATE message for ch, from the NTLMv2 key (ntlm_ntowfv2),
 * domain and user, an 8-byte client challenge (random) and the time as
 * FILETIME (used when the challenge carries no timestamp).  Writes at most
 * outlen bytes to out; returns the length, or 0 if outlen is too small
 * (64 + 2 * (domain + user) + 24 + 48 + target info is enough) or on a
 * crypto failure.
 */
size_t ntlm_authenticate(const struct ntlm_challenge *ch, const uint8_t ntowfv2[16],
    const char *domain, const char *user, const uint8_t client_challenge[8],
    uint64_t now_filetime, uint8_t *out, size_t outlen);

/* The current time as FILETIME (100 ns since 1601-01-01). */
uint64_t ntlm_filetime_now(void);

#endif
