/*
 * wsframe.c: what both ends of a WebSocket share (see wsframe.h): the
 * accept key, the frame header written and parsed, and payload masking.
 *
 * Kept apart from wsclient.c because it depends on nothing but libc: the
 * fuzz build (which links no libevent) compiles it, and the unit tests call
 * it directly.  The header parser is the first code that server bytes reach
 * on a tunnel, so it refuses everything RFC 6455 calls a protocol error that
 * can be seen in a header, as early as the bytes that show it arrive.
 *
 * Masking is the client's per-byte cost on every byte it sends; it works 8
 * bytes at a time on a 64-bit copy of the mask (memcpy keeps unaligned
 * pointers legal, and compilers turn it into plain loads and stores).
 */
#include "wsframe.h"

#include <openssl/evp.h>
#include <openssl/sha.h>

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

static int
header_error(char *err, size_t errlen, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static int
header_error(char *err, size_t errlen, const char *fmt, ...)
{
	va_list ap;

	if (err != NULL && errlen > 0) {
		va_start(ap, fmt);
		vsnprintf(err, errlen, fmt, ap);
		va_end(ap);
	}
	return -1;
}

static int
opcode_known(int opcode)
{
	switch (opcode) {
	case WS_OP_CONT: case WS_OP_TEXT: case WS_OP_BINARY:
	case WS_OP_CLOSE: case WS_OP_PING: case WS_OP_PONG:
		return 1;
	default:
		return 0;
	}
}

int
ws_parse_header(const uint8_t *buf, size_t len, int expect_masked,
    struct ws_frame_header *h, char *err, size_t errlen)
{
	size_t need = 2, off = 2;
	unsigned len7;
	uint64_t plen;
	int opcode, fin, masked;

	if (err != NULL && errlen > 0)
		err[0] = '\0';
	if (len < 1)
		return 0;

	/* The first byte alone can already be wrong: refuse it now rather
	 * than wait for bytes a broken peer may never send. */
	fin = (buf[0] & 0x80) != 0;
	opcode = buf[0] & 0x0f;
	if (buf[0] & 0x70)
		return header_error(err, errlen,
		    "reserved bits 0x%02x set, but no extension was negotiated",
		    buf[0] & 0x70);
	if (!opcode_known(opcode))
		return header_error(err, errlen, "unknown opcode 0x%x", opcode);
	if ((opcode & WS_OP_CONTROL) && !fin)
		return header_error(err, errlen,
		    "fragmented control frame (opcode 0x%x)", opcode);
	if (len < 2)
		return 0;

	masked = (buf[1] & 0x80) != 0;
	len7 = buf[1] & 0x7f;
	if (masked && !expect_masked)
		return header_error(err, errlen, "masked frame from the server");
	if (!masked && expect_masked)
		return header_error(err, errlen, "unmasked frame from the client");
	if ((opcode & WS_OP_CONTROL) && len7 > 125)
		return header_error(err, errlen,
		    "control frame (opcode 0x%x) longer than 125 bytes", opcode);

	if (len7 == 126)
		need += 2;
	else if (len7 == 127)
		need += 8;
	if (masked)
		need += 4;
	/* The top bit of a 64-bit length is in the third byte: check it even
	 * if the rest of the header has not arrived. */
	if (len7 == 127 && len >= 3 && (buf[2] & 0x80))
		return header_error(err, errlen,
		    "64-bit payload length with the most significant bit set");
	if (len < need)
		return 0;

	if (len7 == 126) {
		plen = (uint64_t)buf[2] << 8 | buf[3];
		off = 4;
	} else if (len7 == 127) {
		plen = 0;
		for (int i = 0; i < 8; i++)
			plen = plen << 8 | buf[2 + i];
		off = 10;
	} else
		plen = len7;

	h->fin = fin;
	h->opcode = opcode;
	h->masked = masked;
	memset(h->mask, 0, sizeof(h->mask));
	if (masked)
		memcpy(h->mask, buf + off, 4);
	h->payload_len = plen;
	return (int)need;
}

size_t
ws_mask_copy(uint8_t *dst, const uint8_t *src, size_t len,
    const uint8_t mask[4], size_t phase)
{
	uint8_t m[8];
	uint64_t m64, a, b;
	size_t i = 0;

	phase &= 3;
	for (int k = 0; k < 8; k++)
		m[k] = mask[(phase + (size_t)k) & 3];
	memcpy(&m64, m, sizeof(m64));

	/* Two words per turn gives the compiler room to pipeline (or
	 * vectorise) without making the tail handling any harder. */
	for (; len - i >= 16; i += 16) {
		memcpy(&a, src + i, 8);
		memcpy(&b, src + i + 8, 8);
		a ^= m64;
		b ^= m64;
		memcpy(dst + i, &a, 8);
		memcpy(dst + i + 8, &b, 8);
	}
	for (; len - i >= 8; i += 8) {
		memcpy(&a, src + i, 8);
		a ^= m64;
		memcpy(dst + i, &a, 8);
	}
	/* i is a multiple of 8 here, so m[i & 7] continues the phase. */
	for (; i < len; i++)
		dst[i] = src[i] ^ m[i & 7];
	return (phase + len) & 3;
}

size_t
ws_mask(uint8_t *data, size_t len, const uint8_t mask[4], size_t phase)
{
	return ws_mask_copy(data, data, len, mask, phase);
}

int
ws_accept_key(const char *key, char out[WS_ACCEPT_LEN + 1])
{
	unsigned char raw[18 + 3], digest[SHA_DIGEST_LENGTH];
	char buf[WS_KEY_LEN + sizeof(WS_GUID)];

	if (strlen(key) != WS_KEY_LEN || strcmp(key + 22, "==") != 0 ||
	    EVP_DecodeBlock(raw, (const unsigned char *)key, WS_KEY_LEN) != 18)
		return -1;
	memcpy(buf, key, WS_KEY_LEN);
	memcpy(buf + WS_KEY_LEN, WS_GUID, sizeof(WS_GUID));
	SHA1((const unsigned char *)buf, strlen(buf), digest);
	EVP_EncodeBlock((unsigned char *)out, digest, sizeof(digest));
	return 0;
}

size_t
ws_header_put(uint8_t hdr[WS_HEADER_MAX], int opcode, uint64_t len,
    const uint8_t mask[4])
{
	uint8_t maskbit = mask != NULL ? 0x80 : 0;
	size_t n;

	hdr[0] = (uint8_t)(0x80 | opcode);
	if (len < 126) {
		hdr[1] = (uint8_t)(maskbit | len);
		n = 2;
	} else if (len <= 0xffff) {
		hdr[1] = maskbit | 126;
		hdr[2] = (uint8_t)(len >> 8);
		hdr[3] = (uint8_t)len;
		n = 4;
	} else {
		hdr[1] = maskbit | 127;
		for (int i = 0; i < 8; i++)
			hdr[2 + i] = (uint8_t)(len >> (56 - 8 * i));
		n = 10;
	}
	if (mask != NULL) {
		memcpy(hdr + n, mask, 4);
		n += 4;
	}
	return n;
}
