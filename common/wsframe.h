/*
 * wsframe.h: what both ends of a WebSocket (RFC 6455) share: the opcodes,
 * the handshake's GUID and accept key, the frame header (written and
 * parsed) and payload masking.  The client (common/wsclient.c) and the
 * gateway's server side (gateway/transport/wsconn.c, gateway/transport/server.c) use these;
 * no libevent, so the fuzz build compiles it (common/wsframe.c).
 */
#ifndef TETHER_WSFRAME_H
#define TETHER_WSFRAME_H

#include <stddef.h>
#include <stdint.h>

enum ws_opcode {
	WS_OP_CONT = 0x0, WS_OP_TEXT = 0x1, WS_OP_BINARY = 0x2,
	WS_OP_CLOSE = 0x8, WS_OP_PING = 0x9, WS_OP_PONG = 0xa,
};
/* Control frames (CLOSE, PING, PONG) have this bit; data frames do not. */
#define WS_OP_CONTROL 0x8

#define WS_GUID       "258EAFA5-E914-47DA-95CA-C5AB0DC85B11"
#define WS_KEY_LEN    24          /* Sec-WebSocket-Key: base64 of 16 bytes */
#define WS_ACCEPT_LEN 28          /* Sec-WebSocket-Accept: base64 of a SHA-1 */
#define WS_HEADER_MAX 14          /* 2 + 8 length bytes + 4 mask bytes */

/*
 * Sec-WebSocket-Accept for key into out (WS_ACCEPT_LEN + 1 bytes, NUL
 * terminated).  Returns 0, or -1 (out untouched) unless key is the base64
 * of 16 bytes, as RFC 6455 requires.
 */
int ws_accept_key(const char *key, char out[WS_ACCEPT_LEN + 1]);

/*
 * Writes the header of one final (FIN) frame of opcode with a payload of
 * len bytes into hdr, masked with mask when mask is not NULL (a client's
 * frame) and unmasked when it is (a server's).  Returns its length, 2 to
 * WS_HEADER_MAX.
 */
size_t ws_header_put(uint8_t hdr[WS_HEADER_MAX], int opcode, uint64_t len,
    const uint8_t mask[4]);

/*
 * The frame-header parser: parses a frame header at buf[0..len).  Returns
 * the header length and fills the fields, 0 if more bytes are needed, or
 * -1 on a protocol error (reserved bits, bad opcode, a mask that is there
 * or not against expect_masked, a control frame over 125 bytes or
 * fragmented, a 64-bit length with the top bit set) with a reason in err.
 */
struct ws_frame_header {
	int fin;
	int opcode;          /* enum ws_opcode */
	int masked;
	uint8_t mask[4];
	uint64_t payload_len;
};
int ws_parse_header(const uint8_t *buf, size_t len, int expect_masked,
    struct ws_frame_header *h, char *err, size_t errlen);

/* XORs data with the 4-byte mask starting at mask offset `phase`, 8 bytes
 * at a time.  Returns the next phase. */
size_t ws_mask(uint8_t *data, size_t len, const uint8_t mask[4], size_t phase);
/* The same while copying: dst = src XOR mask, in one pass (dst may equal
 * src, but the two must not otherwise overlap).  Returns the next phase. */
size_t ws_mask_copy(uint8_t *dst, const uint8_t *src, size_t len,
    const uint8_t mask[4], size_t phase);

#endif
