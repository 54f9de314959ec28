/*
 * ntlm.c: the client's NTLM messages with an NTLMv2 response (see ntlm.h;
 * MS-NLMP sections 2.2.1 and 3.3.2).
 */
/* MD4() is deprecated in OpenSSL 3 yet built into libcrypto; the EVP MD4
 * needs the legacy provider, a module a static agent cannot load. */
#define OPENSSL_SUPPRESS_DEPRECATED 1

#include "ntlm.h"

#include <stdio.h>
#include <string.h>
#include <time.h>

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/params.h>
#include <openssl/md4.h>

#define NTLMSSP_NEGOTIATE_UNICODE                  0x00000001u
#define NTLMSSP_NEGOTIATE_OEM                      0x00000002u
#define NTLMSSP_REQUEST_TARGET                     0x00000004u
#define NTLMSSP_NEGOTIATE_NTLM                     0x00000200u
#define NTLMSSP_NEGOTIATE_ALWAYS_SIGN              0x00008000u
#define NTLMSSP_NEGOTIATE_EXTENDED_SESSIONSECURITY 0x00080000u
#define NTLMSSP_NEGOTIATE_TARGET_INFO              0x00800000u

#define NEGOTIATE_FLAGS (NTLMSSP_NEGOTIATE_UNICODE | NTLMSSP_NEGOTIATE_OEM | \
    NTLMSSP_REQUEST_TARGET | NTLMSSP_NEGOTIATE_NTLM | \
    NTLMSSP_NEGOTIATE_ALWAYS_SIGN | NTLMSSP_NEGOTIATE_EXTENDED_SESSIONSECURITY)

#define AV_EOL       0
#define AV_TIMESTAMP 7

#define FILETIME_UNIX_EPOCH 116444736000000000ull /* 1970 in 100 ns since 1601 */

static const uint8_t signature[8] = { 'N', 'T', 'L', 'M', 'S', 'S', 'P', 0 };

static void
put16(uint8_t *p, uint16_t v)
{
	p[0] = (uint8_t)v;
	p[1] = (uint8_t)(v >> 8);
}

static void
put32(uint8_t *p, uint32_t v)
{
	put16(p, (uint16_t)v);
	put16(p + 2, (uint16_t)(v >> 16));
}

static void
put64(uint8_t *p, uint64_t v)
{
	put32(p, (uint32_t)v);
	put32(p + 4, (uint32_t)(v >> 32));
}

static uint16_t
get16(const uint8_t *p)
{
	return (uint16_t)(p[0] | p[1] << 8);
}

static uint32_t
get32(const uint8_t *p)
{
	return (uint32_t)get16(p) | (uint32_t)get16(p + 2) << 16;
}

static uint64_t
get64(const uint8_t *p)
{
	return (uint64_t)get32(p) | (uint64_t)get32(p + 4) << 32;
}

size_t
ntlm_negotiate(uint8_t *out, size_t outlen)
{
	if (outlen < 32)
		return 0;
	memset(out, 0, 32);
	memcpy(out, signature, 8);
	put32(out + 8, 1);
	put32(out + 12, NEGOTIATE_FLAGS);
	/* Domain and workstation fields: empty, offset 32. */
	put32(out + 20, 32);
	put32(out + 28, 32);
	return 32;
}

static void
why_set(char *why, size_t whylen, const char *what)
{
	if (whylen > 0)
		snprintf(why, whylen, "NTLM challenge: %s", what);
}

/* The AV pairs: inside the buffer, MsvAvEOL last; the timestamp noted. */
static int
read_target_info(struct ntlm_challenge *ch, char *why, size_t whylen)
{
	size_t i = 0, n = ch->target_info_len;

	while (i + 4 <= n) {
		uint16_t id = get16(ch->target_info + i), len = get16(ch->target_info + i + 2);

		if (i + 4 + len > n) {
			why_set(why, whylen, "an AV pair past the target info");
			return -1;
		}
		if (id == AV_EOL)
			return 0;
		if (id == AV_TIMESTAMP) {
			if (len != 8) {
				why_set(why, whylen, "a timestamp that is not 8 bytes");
				return -1;
			}
			ch->has_timestamp = 1;
			ch->timestamp = get64(ch->target_info + i + 4);
		}
		i += 4 + (size_t)len;
	}
	why_set(why, whylen, "target info without MsvAvEOL");
	return -1;
}

int
ntlm_parse_challenge(const uint8_t *msg, size_t len, struct ntlm_challenge *ch,
    char *why, size_t whylen)
{
	uint32_t off;
	uint16_t tlen;

	memset(ch, 0, sizeof(*ch));
	if (len > NTLM_CHALLENGE_MAX) {
		why_set(why, whylen, "over 4096 bytes");
		return -1;
	}
	if (len < 48 || memcmp(msg, signature, 8) != 0 || get32(msg + 8) != 2) {
		why_set(why, whylen, "not an NTLMSSP type-2 message");
		return -1;
	}
	ch->flags = get32(msg + 20);
	if (!(ch->flags & NTLMSSP_NEGOTIATE_UNICODE)) {
		why_set(why, whylen, "the proxy does not offer Unicode");
		return -1;
	}
	memcpy(ch->server_challenge, msg + 24, 8);
	tlen = get16(msg + 40);
	off = get32(msg + 44);
	if (tlen == 0)
		return 0;   /* old servers send none: the blob carries no AV pairs */
	if (off > len || tlen > len - off) {
		why_set(why, whylen, "target info past the message");
		return -1;
	}
	if (tlen > NTLM_TARGET_INFO_MAX) {
		why_set(why, whylen, "target info over 2048 bytes");
		return -1;
	}
	memcpy(ch->target_info, msg + off, tlen);
	ch->target_info_len = tlen;
	return read_target_info(ch, why, whylen);
}

int
ntlm_split_user(const char *in, char domain[NTLM_NAME_MAX], char user[NTLM_NAME_MAX])
{
	const char *bs = strchr(in, '\\');
	size_t dlen = bs != NULL ? (size_t)(bs - in) : 0;
	const char *u = bs != NULL ? bs + 1 : in;

	if (dlen >= NTLM_NAME_MAX || strlen(u) >= NTLM_NAME_MAX || u[0] == '\0')
		return -1;
	memcpy(domain, in, dlen);
	domain[dlen] = '\0';
	strcpy(user, u);
	return 0;
}

/* UTF-8 to UTF-16LE, upper-casing ASCII letters when asked.  The length
 * written, or -1 for bad UTF-8 or no room. */
static long
utf16le(const char *s, int upper, uint8_t *out, size_t outlen)
{
	const unsigned char *p = (const unsigned char *)s;
	size_t o = 0;

	while (*p != '\0') {
		uint32_t cp;
		int more;

		if (*p < 0x80) {
			cp = *p;
			more = 0;
		} else if ((*p & 0xe0) == 0xc0) {
			cp = *p & 0x1f;
			more = 1;
		} else if ((*p & 0xf0) == 0xe0) {
			cp = *p & 0x0f;
			more = 2;
		} else if ((*p & 0xf8) == 0xf0) {
			cp = *p & 0x07;
			more = 3;
		} else
			return -1;
		p++;
		for (int i = 0; i < more; i++, p++) {
			if ((*p & 0xc0) != 0x80)
				return -1;
			cp = cp << 6 | (*p & 0x3f);
		}
		if (cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff))
			return -1;
		if (upper && cp >= 'a' && cp <= 'z')
			cp -= 'a' - 'A';
		if (cp >= 0x10000) {
			if (o + 4 > outlen)
				return -1;
			cp -= 0x10000;
			put16(out + o, (uint16_t)(0xd800 | cp >> 10));
			put16(out + o + 2, (uint16_t)(0xdc00 | (cp & 0x3ff)));
			o += 4;
		} else {
			if (o + 2 > outlen)
				return -1;
			put16(out + o, (uint16_t)cp);
			o += 2;
		}
	}
	return (long)o;
}

static int
hmac_md5(const uint8_t key[16], const uint8_t *d1, size_t l1, const uint8_t *d2,
    size_t l2, uint8_t out[16])
{
	EVP_MAC *mac = EVP_MAC_fetch(NULL, "HMAC", NULL);
	EVP_MAC_CTX *ctx = mac != NULL ? EVP_MAC_CTX_new(mac) : NULL;
	OSSL_PARAM params[] = {
		OSSL_PARAM_construct_utf8_string("digest", (char *)"MD5", 0),
		OSSL_PARAM_construct_end(),
	};
	size_t n = 0;
	int ok = ctx != NULL && EVP_MAC_init(ctx, key, 16, params) == 1 &&
	    EVP_MAC_update(ctx, d1, l1) == 1 &&
	    (l2 == 0 || EVP_MAC_update(ctx, d2, l2) == 1) &&
	    EVP_MAC_final(ctx, out, &n, 16) == 1 && n == 16;

	EVP_MAC_CTX_free(ctx);
	EVP_MAC_free(mac);
	return ok ? 0 : -1;
}

int
ntlm_ntowfv2(const char *domain, const char *user, const char *password,
    uint8_t out[16])
{
	uint8_t pw[2 * 512], ud[4 * NTLM_NAME_MAX], nt[16];
	long pl, ul, dl;
	int r = -1;

	pl = utf16le(password, 0, pw, sizeof(pw));
	ul = utf16le(user, 1, ud, sizeof(ud));
	dl = ul < 0 ? -1 : utf16le(domain, 0, ud + ul, sizeof(ud) - (size_t)ul);
	if (pl >= 0 && ul >= 0 && dl >= 0 && MD4(pw, (size_t)pl, nt) != NULL)
		r = hmac_md5(nt, ud, (size_t)(ul + dl), NULL, 0, out);
	OPENSSL_cleanse(pw, sizeof(pw));
	OPENSSL_cleanse(nt, sizeof(nt));
	return r;
}

/* A security buffer field: length, max length, offset. */
static void
put_field(uint8_t *f, size_t len, size_t off)
{
	put16(f, (uint16_t)len);
	put16(f + 2, (uint16_t)len);
	put32(f + 4, (uint32_t)off);
}

size_t
ntlm_authenticate(const struct ntlm_challenge *ch, const uint8_t ntowfv2[16],
    const char *domain, const char *user, const uint8_t client_challenge[8],
    uint64_t now_filetime, uint8_t *out, size_t outlen)
{
	size_t blob_len = 28 + ch->target_info_len + 4, nt_len = 16 + blob_len;
	size_t off = 64, lm_off, nt_off, d_off, u_off;
	uint8_t *blob;
	long dl, ul;

	if (outlen < off + 24 + nt_len)
		return 0;
	memset(out, 0, off);
	memcpy(out, signature, 8);
	put32(out + 8, 3);
	/* The NT response: NTProofStr, then the blob it proves. */
	lm_off = off;
	nt_off = lm_off + 24;
	blob = out + nt_off + 16;
	memset(blob, 0, blob_len);
	blob[0] = 1;
	blob[1] = 1;
	put64(blob + 8, ch->has_timestamp ? ch->timestamp : now_filetime);
	memcpy(blob + 16, client_challenge, 8);
	memcpy(blob + 28, ch->target_info, ch->target_info_len);
	if (hmac_md5(ntowfv2, ch->server_challenge, 8, blob, blob_len, out + nt_off) != 0)
		return 0;
	/* The LMv2 response, or Z(24) when the proxy sent a timestamp
	 * (MS-NLMP 3.3.2). */
	memset(out + lm_off, 0, 24);
	if (!ch->has_timestamp) {
		if (hmac_md5(ntowfv2, ch->server_challenge, 8, client_challenge, 8,
		    out + lm_off) != 0)
			return 0;
		memcpy(out + lm_off + 16, client_challenge, 8);
	}
	d_off = nt_off + nt_len;
	if ((dl = utf16le(domain, 0, out + d_off, outlen - d_off)) < 0)
		return 0;
	u_off = d_off + (size_t)dl;
	if ((ul = utf16le(user, 0, out + u_off, outlen - u_off)) < 0)
		return 0;
	put_field(out + 12, 24, lm_off);
	put_field(out + 20, nt_len, nt_off);
	put_field(out + 28, (size_t)dl, d_off);
	put_field(out + 36, (size_t)ul, u_off);
	put_field(out + 44, 0, u_off + (size_t)ul);   /* workstation */
	put_field(out + 52, 0, u_off + (size_t)ul);   /* session key */
	put32(out + 60, (NEGOTIATE_FLAGS & ~NTLMSSP_NEGOTIATE_OEM) |
	    NTLMSSP_NEGOTIATE_TARGET_INFO);
	return u_off + (size_t)ul;
}

uint64_t
ntlm_filetime_now(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_REALTIME, &ts);
	return FILETIME_UNIX_EPOCH + (uint64_t)ts.tv_sec * 10000000u +
	    (uint64_t)ts.tv_nsec / 100u;
}
