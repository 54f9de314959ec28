/*
 * tlspeer.h: how one gateway replica recognises another over TLS
 * (docs/0020-peer-links.md).
 *
 * Every replica holds the same ca.crt and a peer credential, peer.crt and
 * peer.key (made by init, renewed by `tether-gateway cert renew`).  A
 * replica is whoever presents a certificate that chains to ca.crt AND is
 * a peer credential (ca_is_peer_cert: CN tether-replica, clientAuth
 * alone): only the CA issues those, and only replicas hold their keys.
 * The server certificate faces the internet and is not one: server.key
 * alone opens no peer link (docs/0030).  Another certificate signed by
 * the same CA is not a replica either.  No bearer token is involved.
 * During a CA rotation's overlap (ca.next.crt there, auth/carotate.h) a
 * chain to either CA is accepted; after the finish only to ca.crt (the
 * new one).
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
	/* The --peer-listen listener: no certificate, or not a replica's,
	 * fails the handshake. */
	TLSPEER_REQUIRE,
	/* The dialing replica: the far side (a replica's main or peer port,
	 * which present the server certificate) must chain to ca.crt; its
	 * name is not checked (a peer URL may name any of its addresses). */
	TLSPEER_DIAL,
};

/*
 * Sets ctx (its own certificate and key already loaded: server.crt and
 * server.key for a listener, peer.crt and peer.key to dial) to verify the other side against data_dir/ca.crt
 * with the rule above.  Server contexts also get a session id context
 * (resumption with client certificates needs one).  In TLSPEER_ASK mode a
 * failed check is marked in the SSL's application data (SSL_set_app_data),
 * which no other code may use on ctx's SSLs.  0, or -1 with err.
 */
int tlspeer_setup(struct ssl_ctx_st *ctx, const char *data_dir, enum tlspeer_mode mode,
    char *err, size_t errlen);

/* 1 if the other side of ssl (handshake done) proved a replica's
 * certificate: it chained to ca.crt and is a peer credential. */
int tlspeer_is_replica(const struct ssl_st *ssl);

#endif
