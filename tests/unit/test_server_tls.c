/*
 * test_server_tls.c: the server TLS contexts (gateway/transport/server.c,
 * server_tls_context_new): the certificate chain a handshake presents is
 * built once, when the context is made, not by OpenSSL's auto-chain at
 * every handshake (an X509_verify_cert, an ECDSA verify, per connection);
 * the chain on the wire stays what it was (the leaf, then ca.crt); and a
 * server.crt that carries its own chain (a CA rotation's cross-certificate)
 * is sent as written; and no handshake issues a session ticket
 * (docs/0042: nothing resumes, and two tickets cost a fifth of it).
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <openssl/bio.h>
#include <openssl/err.h>
#include <openssl/pem.h>
#include <openssl/ssl.h>
#include <openssl/x509.h>

#include "ca.h"
#include "carotate.h"
#include "server.h"

struct fixture {
	char dir[64];
};

static const char *const files[] = { "ca.crt", "ca.key", "server.crt",
    "server.key", "peer.crt", "peer.key", "ca.next.crt", "ca.next.key",
    "ca.cross.crt", "ca.old.crt" };

static int
setup(void **state)
{
	struct fixture *f = calloc(1, sizeof(*f));
	const char *hosts[] = { "127.0.0.1", "localhost" };
	char err[256] = "";

	if (f == NULL)
		return -1;
	snprintf(f->dir, sizeof(f->dir), "/tmp/test_server_tls.XXXXXX");
	if (mkdtemp(f->dir) == NULL) {
		free(f);
		return -1;
	}
	*state = f;
	if (ca_create(f->dir, hosts, 2, err, sizeof(err)) != 0)
		fail_msg("ca_create: %s", err);
	return 0;
}

static int
teardown(void **state)
{
	struct fixture *f = *state;
	char path[128];

	for (size_t i = 0; i < sizeof(files) / sizeof(files[0]); i++) {
		snprintf(path, sizeof(path), "%s/%s", f->dir, files[i]);
		unlink(path);
	}
	rmdir(f->dir);
	free(f);
	return 0;
}

static X509 *
load_cert(const struct fixture *f, const char *name)
{
	char path[128];
	FILE *fp;
	X509 *x;

	snprintf(path, sizeof(path), "%s/%s", f->dir, name);
	fp = fopen(path, "r");
	assert_non_null(fp);
	x = PEM_read_X509(fp, NULL, NULL, NULL);
	fclose(fp);
	assert_non_null(x);
	return x;
}

static SSL_CTX *
context(const struct fixture *f, int peer)
{
	char err[256] = "";
	SSL_CTX *ctx = server_tls_context_new(f->dir, peer, err, sizeof(err));

	if (ctx == NULL)
		fail_msg("server_tls_context_new: %s", err);
	return ctx;
}

/* The context's own chain (what follows the leaf): exactly want. */
static void
assert_context_chain(SSL_CTX *ctx, X509 *want)
{
	STACK_OF(X509) *chain = NULL;

	assert_int_equal(SSL_CTX_get0_chain_certs(ctx, &chain), 1);
	assert_non_null(chain);
	assert_int_equal(sk_X509_num(chain), 1);
	assert_int_equal(X509_cmp(sk_X509_value(chain, 0), want), 0);
}

/* Session tickets the client of handshake() received. */
static int tickets;
/* The certificate and key handshake()'s client presents; NULL: none. */
static const char *client_crt, *client_key;

static void
peer_client_cert(const char *crt, const char *key)
{
	client_crt = crt;
	client_key = key;
}

static int
on_ticket(SSL *ssl, SSL_SESSION *sess)
{
	(void)ssl;
	(void)sess;
	tickets++;
	return 0;                 /* not kept: OpenSSL frees it */
}

/* One TLS handshake in memory, a client against ctx, then a byte from
 * the server (a TLS 1.3 client reads its tickets, if any, before it); the
 * chain the client received (its reference, the caller frees it), and the
 * tickets it received in tickets. */
static STACK_OF(X509) *
handshake(SSL_CTX *ctx)
{
	char byte;
	SSL_CTX *cctx = SSL_CTX_new(TLS_client_method());
	SSL *c, *s;
	BIO *cb = NULL, *sb = NULL;
	STACK_OF(X509) *got;
	int cdone = 0, sdone = 0;

	assert_non_null(cctx);
	tickets = 0;
	SSL_CTX_set_session_cache_mode(cctx, SSL_SESS_CACHE_CLIENT);
	SSL_CTX_sess_set_new_cb(cctx, on_ticket);
	if (client_crt != NULL) {
		assert_int_equal(SSL_CTX_use_certificate_file(cctx, client_crt,
		    SSL_FILETYPE_PEM), 1);
		assert_int_equal(SSL_CTX_use_PrivateKey_file(cctx, client_key,
		    SSL_FILETYPE_PEM), 1);
	}
	c = SSL_new(cctx);
	s = SSL_new(ctx);
	assert_non_null(c);
	assert_non_null(s);
	assert_int_equal(BIO_new_bio_pair(&cb, 0, &sb, 0), 1);
	SSL_set_bio(c, cb, cb);
	SSL_set_bio(s, sb, sb);
	SSL_set_connect_state(c);
	SSL_set_accept_state(s);
	for (int i = 0; i < 20 && !(cdone && sdone); i++) {
		if (!cdone)
			cdone = SSL_do_handshake(c) == 1;
		if (!sdone)
			sdone = SSL_do_handshake(s) == 1;
	}
	assert_true(cdone && sdone);
	assert_int_equal(SSL_write(s, "x", 1), 1);
	assert_int_equal(SSL_read(c, &byte, 1), 1);
	got = SSL_get_peer_cert_chain(c);
	assert_non_null(got);
	got = X509_chain_up_ref(got);
	assert_non_null(got);
	SSL_free(c);
	SSL_free(s);
	SSL_CTX_free(cctx);
	return got;
}

/* server.crt holds the leaf alone: the context carries ca.crt as its chain
 * from the start (without this, auto-chain searched for it at every
 * handshake), on the main port's context and --peer-listen's. */
static void
test_chain_built_once(void **state)
{
	struct fixture *f = *state;
	X509 *ca = load_cert(f, "ca.crt");
	SSL_CTX *mainctx = context(f, 0), *peer = context(f, 1);

	assert_context_chain(mainctx, ca);
	assert_context_chain(peer, ca);
	SSL_CTX_free(mainctx);
	SSL_CTX_free(peer);
	X509_free(ca);
}

/* What a client receives is what auto-chain sent: the leaf, then ca.crt. */
static void
test_chain_on_the_wire(void **state)
{
	struct fixture *f = *state;
	X509 *ca = load_cert(f, "ca.crt"), *leaf = load_cert(f, "server.crt");
	SSL_CTX *ctx = context(f, 0);
	STACK_OF(X509) *got = handshake(ctx);

	assert_int_equal(sk_X509_num(got), 2);
	assert_int_equal(X509_cmp(sk_X509_value(got, 0), leaf), 0);
	assert_int_equal(X509_cmp(sk_X509_value(got, 1), ca), 0);
	sk_X509_pop_free(got, X509_free);
	SSL_CTX_free(ctx);
	X509_free(ca);
	X509_free(leaf);
}

/* No session ticket after a handshake, on the main port's context or
 * --peer-listen's: the client has nothing to resume with (OpenSSL's
 * default sent two, each a session serialized, sealed and sent). */
static void
test_no_session_tickets(void **state)
{
	struct fixture *f = *state;
	char crt[128], key[128];

	snprintf(crt, sizeof(crt), "%s/peer.crt", f->dir);
	snprintf(key, sizeof(key), "%s/peer.key", f->dir);
	for (int peer = 0; peer < 2; peer++) {
		SSL_CTX *ctx = context(f, peer);
		STACK_OF(X509) *got;

		/* --peer-listen asks for a replica's certificate. */
		if (peer)
			peer_client_cert(crt, key);
		got = handshake(ctx);
		peer_client_cert(NULL, NULL);
		assert_int_equal(tickets, 0);
		sk_X509_pop_free(got, X509_free);
		SSL_CTX_free(ctx);
	}
}

/* A CA rotation's overlap: server.crt is the leaf then the
 * cross-certificate; that chain is kept as written (ca.next.crt in the
 * store does not replace it) and sent as written. */
static void
test_rotation_chain_kept(void **state)
{
	struct fixture *f = *state;
	struct ca_rotation *r = calloc(1, sizeof(*r));
	char err[512] = "";
	X509 *cross, *leaf;
	SSL_CTX *ctx;
	STACK_OF(X509) *got;

	assert_non_null(r);
	if (ca_rotate_start(f->dir, r, err, sizeof(err)) != 0)
		fail_msg("ca_rotate_start: %s", err);
	free(r);
	cross = load_cert(f, "ca.cross.crt");
	leaf = load_cert(f, "server.crt");
	ctx = context(f, 0);
	assert_context_chain(ctx, cross);
	got = handshake(ctx);
	assert_int_equal(sk_X509_num(got), 2);
	assert_int_equal(X509_cmp(sk_X509_value(got, 0), leaf), 0);
	assert_int_equal(X509_cmp(sk_X509_value(got, 1), cross), 0);
	sk_X509_pop_free(got, X509_free);
	SSL_CTX_free(ctx);
	X509_free(cross);
	X509_free(leaf);
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_chain_built_once, setup, teardown),
		cmocka_unit_test_setup_teardown(test_chain_on_the_wire, setup, teardown),
		cmocka_unit_test_setup_teardown(test_no_session_tickets, setup,
		    teardown),
		cmocka_unit_test_setup_teardown(test_rotation_chain_kept, setup,
		    teardown),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
