/*
 * test_tlswrite.c: the batching write BIO (common/tlswrite.c) keeps one
 * flush list and flush event per thread (docs/0040: one event loop per
 * thread).  While a batch of loop A waits for A's pass, a record written on
 * loop B's thread waits for B's pass too (a process-wide list would send
 * it at once, or hand it to A's flush), and each loop's pass writes its
 * own batch, whole: the peer decrypts what was written.  Something that
 * rides a pass's flush (tls_write_after_flush) runs once, after its send.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <pthread.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <unistd.h>

#include <event2/bufferevent.h>
#include <event2/bufferevent_ssl.h>
#include <event2/event.h>
#include <openssl/evp.h>
#include <openssl/ssl.h>
#include <openssl/x509.h>

#include "tlswrite.h"

/* A TLS connection over a socket pair, handshake done: the client writes
 * through a bufferevent (made on the writing loop's thread), the server
 * end reads with SSL_read. */
struct tpair {
	int fd[2];          /* [0] client (writer), [1] server (reader) */
	SSL *c, *s;
};

static SSL_CTX *server_ctx, *client_ctx;

/* A self-signed P-256 certificate, made in memory. */
static int
setup(void **state)
{
	EVP_PKEY *key = EVP_PKEY_Q_keygen(NULL, NULL, "EC", "P-256");
	X509 *x = X509_new();

	(void)state;
	if (key == NULL || x == NULL)
		return -1;
	ASN1_INTEGER_set(X509_get_serialNumber(x), 1);
	X509_gmtime_adj(X509_getm_notBefore(x), 0);
	X509_gmtime_adj(X509_getm_notAfter(x), 3600);
	X509_NAME_add_entry_by_txt(X509_get_subject_name(x), "CN", MBSTRING_ASC,
	    (const unsigned char *)"test", -1, -1, 0);
	X509_set_issuer_name(x, X509_get_subject_name(x));
	X509_set_pubkey(x, key);
	if (X509_sign(x, key, EVP_sha256()) == 0)
		return -1;
	server_ctx = SSL_CTX_new(TLS_server_method());
	client_ctx = SSL_CTX_new(TLS_client_method());
	if (server_ctx == NULL || client_ctx == NULL ||
	    SSL_CTX_use_certificate(server_ctx, x) != 1 ||
	    SSL_CTX_use_PrivateKey(server_ctx, key) != 1)
		return -1;
	/* No session tickets: the server sends nothing after the handshake. */
	SSL_CTX_set_num_tickets(server_ctx, 0);
	X509_free(x);
	EVP_PKEY_free(key);
	return 0;
}

static int
teardown(void **state)
{
	(void)state;
	SSL_CTX_free(server_ctx);
	SSL_CTX_free(client_ctx);
	return 0;
}

static void
pair_open(struct tpair *p)
{
	int cdone = 0, sdone = 0;

	assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK, 0, p->fd), 0);
	assert_non_null(p->c = SSL_new(client_ctx));
	assert_non_null(p->s = SSL_new(server_ctx));
	assert_int_equal(SSL_set_fd(p->c, p->fd[0]), 1);
	assert_int_equal(SSL_set_fd(p->s, p->fd[1]), 1);
	SSL_set_connect_state(p->c);
	SSL_set_accept_state(p->s);
	for (int i = 0; i < 50 && !(cdone && sdone); i++) {
		if (!cdone)
			cdone = SSL_do_handshake(p->c) == 1;
		if (!sdone)
			sdone = SSL_do_handshake(p->s) == 1;
	}
	assert_true(cdone && sdone);
}

/* Bytes the reader's socket holds, not yet read. */
static int
pair_unread(const struct tpair *p)
{
	int n = -1;

	return ioctl(p->fd[1], FIONREAD, &n) == 0 ? n : -1;
}

/* The client's bufferevent on base, with the batching BIO, or NULL. */
static struct bufferevent *
pair_writer(struct event_base *base, struct tpair *p)
{
	struct bufferevent *bev = bufferevent_openssl_socket_new(base, p->fd[0],
	    p->c, BUFFEREVENT_SSL_OPEN, BEV_OPT_CLOSE_ON_FREE);

	if (bev == NULL || tls_write_batch(bev) != 1)
		return NULL;
	return bev;
}

/* The second loop, on its own thread: it writes one record into its batch
 * while the first loop's batch waits, and runs one pass. */
struct loop_b {
	struct tpair *p;
	int ok;             /* base, bufferevent and write made */
	int unread_before;  /* the reader's bytes before B's pass: 0 */
	int unread_after;   /* ... after it: the record */
	char got[8];        /* what the reader decrypted */
};

static void *
loop_b_main(void *arg)
{
	struct loop_b *b = arg;
	struct event_base *base = event_base_new();
	struct bufferevent *bev = base != NULL ? pair_writer(base, b->p) : NULL;
	int n;

	if (bev != NULL && tls_write_now(bev, "b", 1) == 1) {
		b->ok = 1;
		b->unread_before = pair_unread(b->p);
		event_base_loop(base, EVLOOP_NONBLOCK);
		b->unread_after = pair_unread(b->p);
		n = SSL_read(b->p->s, b->got, sizeof(b->got) - 1);
		b->got[n > 0 ? n : 0] = '\0';
	}
	if (bev != NULL)
		bufferevent_free(bev);   /* frees the SSL, closes fd[0] */
	else
		SSL_free(b->p->c);
	if (base != NULL) {
		event_base_loop(base, EVLOOP_NONBLOCK);
		event_base_free(base);
	}
	return NULL;
}

static void
test_flush_per_thread(void **state)
{
	struct tpair pa, pb;
	struct loop_b b = { .p = &pb };
	struct event_base *base;
	struct bufferevent *bev;
	pthread_t t;
	char got[8];
	int n;

	(void)state;
	pair_open(&pa);
	pair_open(&pb);
	assert_int_equal(pair_unread(&pa), 0);
	assert_int_equal(pair_unread(&pb), 0);
	/* Loop A (this thread): a record waits for A's pass. */
	assert_non_null(base = event_base_new());
	assert_non_null(bev = pair_writer(base, &pa));
	assert_int_equal(tls_write_now(bev, "a", 1), 1);
	assert_int_equal(pair_unread(&pa), 0);
	/* Loop B: its record waits for B's pass, which writes it (and not
	 * A's). */
	assert_int_equal(pthread_create(&t, NULL, loop_b_main, &b), 0);
	assert_int_equal(pthread_join(t, NULL), 0);
	assert_true(b.ok);
	assert_int_equal(b.unread_before, 0);
	assert_true(b.unread_after > 0);
	assert_string_equal(b.got, "b");
	assert_int_equal(pair_unread(&pa), 0);
	/* A's pass writes A's record. */
	event_base_loop(base, EVLOOP_NONBLOCK);
	assert_true(pair_unread(&pa) > 0);
	n = SSL_read(pa.s, got, sizeof(got) - 1);
	assert_int_equal(n, 1);
	got[n] = '\0';
	assert_string_equal(got, "a");
	bufferevent_free(bev);
	event_base_loop(base, EVLOOP_NONBLOCK);
	event_base_free(base);
	SSL_free(pa.s);
	SSL_free(pb.s);
	close(pa.fd[1]);
	close(pb.fd[1]);
}

/* What tls_write_after_flush's fn saw when it ran. */
static struct tpair *after_pair;
static int after_runs;
static int after_unread;     /* the reader's bytes then */

static void
after_fn(void)
{
	after_runs++;
	after_unread = pair_unread(after_pair);
}

static void
other_fn(void)
{
}

/* tls_write_after_flush: fn rides a flush that is scheduled (on that
 * base only), runs once right after its send, in the same pass; with no
 * flush scheduled, or another fn waiting, the caller is told to schedule
 * its own; a flush taken back (its batch freed) runs fn then. */
static void
test_after_flush(void **state)
{
	struct tpair pa;
	struct event_base *base, *other;
	struct bufferevent *bev;

	(void)state;
	pair_open(&pa);
	after_pair = &pa;
	after_runs = 0;
	assert_non_null(base = event_base_new());
	assert_non_null(other = event_base_new());
	assert_non_null(bev = pair_writer(base, &pa));
	/* Nothing scheduled: not taken. */
	assert_int_equal(tls_write_after_flush(base, after_fn), 0);
	assert_int_equal(tls_write_now(bev, "a", 1), 1);
	/* Scheduled on base: taken (twice the same fn is one run), not on
	 * another base, not for another fn meanwhile. */
	assert_int_equal(tls_write_after_flush(other, after_fn), 0);
	assert_int_equal(tls_write_after_flush(base, after_fn), 1);
	assert_int_equal(tls_write_after_flush(base, after_fn), 1);
	assert_int_equal(tls_write_after_flush(base, other_fn), 0);
	assert_int_equal(after_runs, 0);
	event_base_loop(base, EVLOOP_NONBLOCK);
	/* Once, after the record was sent. */
	assert_int_equal(after_runs, 1);
	assert_true(after_unread > 0);
	event_base_loop(base, EVLOOP_NONBLOCK);
	assert_int_equal(after_runs, 1);
	/* The flush was run: nothing scheduled now. */
	assert_int_equal(tls_write_after_flush(base, after_fn), 0);

	/* The flush taken back, its only batch freed while it waits (the
	 * batching BIO replaced: as when its SSL goes): fn runs then, once. */
	assert_int_equal(tls_write_now(bev, "b", 1), 1);
	assert_int_equal(tls_write_after_flush(base, after_fn), 1);
	SSL_set0_wbio(bufferevent_openssl_get_ssl(bev),
	    BIO_new_socket(pa.fd[0], BIO_NOCLOSE));
	assert_int_equal(after_runs, 2);
	assert_int_equal(tls_write_after_flush(base, after_fn), 0);
	event_base_loop(base, EVLOOP_NONBLOCK);
	assert_int_equal(after_runs, 2);
	bufferevent_free(bev);   /* frees the SSL, closes fd[0] */
	event_base_loop(base, EVLOOP_NONBLOCK);
	event_base_free(base);
	event_base_free(other);
	SSL_free(pa.s);
	close(pa.fd[1]);
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_flush_per_thread),
		cmocka_unit_test(test_after_flush),
	};

	return cmocka_run_group_tests(tests, setup, teardown);
}
