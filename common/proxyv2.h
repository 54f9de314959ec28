/*
 * proxyv2.h: the PROXY protocol version 2 header a load balancer puts in
 * front of a connection to say whose connection it is (haproxy's
 * send-proxy-v2).  The sources trusted to send one are a struct cidr_list
 * (netaddr.h).
 *
 * The header is untrusted bytes: the parser reads only the 16-byte fixed
 * part and the address block it announces, refuses a block longer than
 * PROXY_V2_MAX - 16, and never reads past len.  TLVs after the addresses
 * are skipped unread.
 */
#ifndef TETHER_PROXYV2_H
#define TETHER_PROXYV2_H

#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>

#define PROXY_V2_SIG_LEN  12
#define PROXY_V2_HEAD_LEN 16     /* signature, ver/cmd, family, length */
#define PROXY_V2_MAX      1024   /* the most header bytes accepted (TLVs too) */
#define PROXY_V2_FIRST_BYTE 0x0d /* no TLS record or HTTP method starts so */

extern const uint8_t proxy_v2_sig[PROXY_V2_SIG_LEN];

struct proxy_v2 {
	int local;                    /* LOCAL (a balancer's health check):
	                               * the connection's own address stands */
	struct sockaddr_storage src;  /* PROXY over TCP4/TCP6: the client */
	size_t len;                   /* the header's whole length */
};

/*
 * Reads a header from buf[0..len).  Returns 1 with *out filled when the
 * whole header is there (out->len bytes of buf, the rest is the client's);
 * 0 when more bytes are needed (*need: the total to have, at most
 * PROXY_V2_MAX); -1 with a reason in err when it is not a valid header or
 * not one this gateway accepts (UDP, UNIX, over-long).
 */
int proxy_v2_parse(const uint8_t *buf, size_t len, struct proxy_v2 *out,
    size_t *need, char *err, size_t errlen);

#endif
