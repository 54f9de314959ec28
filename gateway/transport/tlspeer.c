/*
 * tlspeer.c: the TLS rule by which replicas recognise each other (see
 * tlspeer.h): a certificate chaining to ca.crt that is a peer credential.
 */
#include "tlspeer.h"

#include <stdint.h>
#include <stdio.h>
#include <unistd.h>

#include <openssl/err.h>
#include <openssl/ssl.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>

#include "ca.h"

#define SESSION_ID_CONTEXT "tether-gateway"

/*
 * TLSPEER_ASK mode marks an SSL whose chain failed any check (the callback
 * lets the handshake go on, tlspeer_is_replica says no) in the SSL's own
 * application data (SSL_set_app_data: ex_data index 0, which OpenSSL keeps
 * for the application without allocating an index): the mark lives and
 * dies with its connection, and this file keeps no state.  Nothing else in
 * the gateway uses an SSL's application data (nor does libevent).
 */
#define BAD_CHAIN ((void *)(uintptr_t)1)

/* The leaf is a replica's peer credential (ca.h), not a server's. */
static int
leaf_is_peer(X509 *leaf)
{
	return leaf != NULL && ca_is_peer_cert(leaf);
}

static SSL *
ssl_of(X509_STORE_CTX *x)
{
	return X509_STORE_CTX_get_ex_data(x, SSL_get_ex_data_X509_STORE_CTX_idx());
}

/* TLSPEER_ASK: never fails the handshake; remembers a failed check. */
static int
verify_ask(int ok, X509_STORE_CTX *x)
{
	SSL *ssl = ssl_of(x);

	if (ssl != NULL && (!ok || (X509_STORE_CTX_get_error_depth(x) == 0 &&
	    !leaf_is_peer(X509_STORE_CTX_get_current_cert(x)))))
		SSL_set_app_data(ssl, BAD_CHAIN);
	return 1;
}

/* TLSPEER_REQUIRE: the chain must verify and the leaf be a peer
 * credential.  TLSPEER_DIAL: the chain must verify.  The name in the
 * certificate is not checked (a replica's peer URL may name any of its
 * addresses). */
static int
verify_chain(int ok, X509_STORE_CTX *x, int want_peer)
{
	int depth = X509_STORE_CTX_get_error_depth(x);
	int e = X509_STORE_CTX_get_error(x);

	if (!ok) {
		if (depth != 0 || (e != X509_V_ERR_HOSTNAME_MISMATCH &&
		    e != X509_V_ERR_IP_ADDRESS_MISMATCH))
			return 0;
		X509_STORE_CTX_set_error(x, X509_V_OK);
	}
	if (want_peer && depth == 0 &&
	    !leaf_is_peer(X509_STORE_CTX_get_current_cert(x))) {
		X509_STORE_CTX_set_error(x, X509_V_ERR_APPLICATION_VERIFICATION);
		return 0;
	}
	return 1;
}

static int
verify_require(int ok, X509_STORE_CTX *x)
{
	return verify_chain(ok, x, 1);
}

static int
verify_dial(int ok, X509_STORE_CTX *x)
{
	return verify_chain(ok, x, 0);
}

int
tlspeer_setup(SSL_CTX *ctx, const char *data_dir, enum tlspeer_mode mode,
    char *err, size_t errlen)
{
	char ca[4200];
	unsigned long e;

	for (int i = 0; i < 2; i++) {
		/* A CA rotation's overlap (auth/carotate.h): replicas' peer
		 * credentials from the new CA are trusted too.  Read again
		 * with the rest on SIGHUP; after the finish ca.crt alone. */
		snprintf(ca, sizeof(ca), "%s/%s", data_dir,
		    i == 0 ? "ca.crt" : "ca.next.crt");
		if (i == 1 && access(ca, F_OK) != 0)
			break;
		if (SSL_CTX_load_verify_locations(ctx, ca, NULL) != 1) {
			e = ERR_get_error();
			ERR_clear_error();
			snprintf(err, errlen, "cannot load %s: %s", ca,
			    e != 0 ? ERR_reason_error_string(e) : "unknown error");
			return -1;
		}
	}
	/* Each side checks the other's certificate itself (leaf_is_peer,
	 * the chain): OpenSSL's purpose check would want serverAuth from a
	 * peer credential on the listener's side of a handshake. */
	if (SSL_CTX_set_purpose(ctx, X509_PURPOSE_ANY) != 1 ||
	    SSL_CTX_set_session_id_context(ctx, (const unsigned char *)SESSION_ID_CONTEXT,
	    sizeof(SESSION_ID_CONTEXT) - 1) != 1) {
		ERR_clear_error();
		snprintf(err, errlen, "TLS: cannot set the peer verification");
		return -1;
	}
	if (mode == TLSPEER_ASK)
		SSL_CTX_set_verify(ctx, SSL_VERIFY_PEER, verify_ask);
	else if (mode == TLSPEER_REQUIRE)
		SSL_CTX_set_verify(ctx, SSL_VERIFY_PEER | SSL_VERIFY_FAIL_IF_NO_PEER_CERT,
		    verify_require);
	else
		SSL_CTX_set_verify(ctx, SSL_VERIFY_PEER, verify_dial);
	return 0;
}

int
tlspeer_is_replica(const SSL *ssl)
{
	X509 *peer;

	if (ssl == NULL || (peer = SSL_get0_peer_certificate(ssl)) == NULL)
		return 0;
	if (SSL_get_verify_result(ssl) != X509_V_OK)
		return 0;
	if (SSL_get_app_data(ssl) == BAD_CHAIN)
		return 0;
	return leaf_is_peer(peer);
}
