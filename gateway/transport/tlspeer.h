/*
 * tlspeer.h: how one gateway replica recognises another over TLS
 * (docs/0020-peer-links.md).
 *
 * Every replica holds the same ca.crt, server.crt and server.key (copied
 * from init).  A replica is whoever presents a certificate that chains to
 * ca.crt AND whose public key is the one in our own server.crt: only
 * holders of server.key can prove that key in the handshake.  Another
 * certificate signed by the same CA (an operator's, a future agent's) is
 * not a replica.  No bearer token is involved.
 *
 * Cost: one public-key compare per handshake that presents a certificate.
 */
#ifndef TETHER_TLSPEER_H
#define TETHER_TLSPEER_H

#include <stddef.h>

struct ssl_ctx_st;
struct ssl_st;

enum tlspeer_mode {
	/* The main listener: asks for a certificate, accepts any answer (or
	 * none) at the handshake; routes ask tlspeer_is_replica later. */
	TLSPEER_ASK,
	/* The --peer-listen listener, and the dialing replica (which verifies
	 * the far side's certificate the same way): no certificate, or not a
	 * replica's, fails the handshake. */
	TLSPEER_REQUIRE,
};

/*
 * Sets ctx (its own certificate and key already loaded: the replica's
 * server.crt/server.key) to verify the other side against data_dir/ca.crt
 * with the rule above.  Server contexts also get a session id context
 * (resumption with client certificates needs one).  In TLSPEER_ASK mode a
 * failed check is marked in the SSL's application data (SSL_set_app_data),
 * which no other code may use on ctx's SSLs.  0, or -1 with err.
 */
int tlspeer_setup(struct ssl_ctx_st *ctx, const char *data_dir, enum tlspeer_mode mode,
    char *err, size_t errlen);

/* 1 if the other side of ssl (handshake done) proved a replica's
 * certificate: it chained to ca.crt and its key is ours. */
int tlspeer_is_replica(const struct ssl_st *ssl);

#endif
