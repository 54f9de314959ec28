/*
 * test_tlsread.c: the read-ahead BIO (common/tlsread.c) of a TLS
 * bufferevent whose reader drains it with tls_read_available, as the
 * tunnels' WebSocket phase does.  A message that arrives after the socket
 * was emptied is read in the loop pass that the socket wakes, not one pass
 * later: a request/answer exchange (the /k8s path) paid a whole second
 * pass of the loop for every message that crossed the tunnel.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/bufferevent_ssl.h>
#include <event2/event.h>
#include <openssl/evp.h>
#include <openssl/ssl.h>
#include <openssl/x509.h>

#include "tlsread.h"

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
	/* No session tickets: the reader's socket holds only our records. */
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

/* The reader: a TLS bufferevent with the read-ahead BIO, whose read
 * callback takes its input and then what else OpenSSL holds. */
struct reader {
	struct bufferevent *bev;
	char got[64];
	size_t len;
	int calls;
};

static void
take_input(struct reader *r)
{
	struct evbuffer *in = bufferevent_get_input(r->bev);
	size_t n = evbuffer_get_length(in);

	if (n > sizeof(r->got) - 1 - r->len)
		n = sizeof(r->got) - 1 - r->len;
	evbuffer_remove(in, r->got + r->len, n);
	r->len += n;
	r->got[r->len] = '\0';
}

static void
reader_cb(struct bufferevent *bev, void *arg)
{
	struct reader *r = arg;

	(void)bev;
	r->calls++;
	take_input(r);
	/* As wsconn and wsturn do: the rest of what the socket gave. */
	tls_read_available(r->bev, 1u << 20);
	take_input(r);
}

/* One message of the writer, then one pass of the reader's loop: the
 * pass its bytes wake (EVLOOP_ONCE returns after the pass that ran a
 * callback; the socket is readable already, so it does not wait). */
static void
send_and_pass(SSL *writer, struct event_base *base, const char *msg)
{
	assert_int_equal(SSL_write(writer, msg, (int)strlen(msg)), (int)strlen(msg));
	assert_int_equal(event_base_loop(base, EVLOOP_ONCE), 0);
}

static void
test_each_message_in_its_wakeup_pass(void **state)
{
	struct reader r = { .len = 0 };
	struct event_base *base;
	SSL *c, *s;
	int fd[2], cdone = 0, sdone = 0;

	(void)state;
	assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK, 0, fd), 0);
	assert_non_null(c = SSL_new(client_ctx));
	assert_non_null(s = SSL_new(server_ctx));
	assert_int_equal(SSL_set_fd(c, fd[0]), 1);
	assert_int_equal(SSL_set_fd(s, fd[1]), 1);
	SSL_set_connect_state(c);
	SSL_set_accept_state(s);
	for (int i = 0; i < 50 && !(cdone && sdone); i++) {
		if (!cdone)
			cdone = SSL_do_handshake(c) == 1;
		if (!sdone)
			sdone = SSL_do_handshake(s) == 1;
	}
	assert_true(cdone && sdone);

	assert_non_null(base = event_base_new());
	assert_non_null(r.bev = bufferevent_openssl_socket_new(base, fd[1], s,
	    BUFFEREVENT_SSL_OPEN, BEV_OPT_CLOSE_ON_FREE));
	tls_read_ahead(r.bev);
	bufferevent_setcb(r.bev, reader_cb, NULL, NULL, &r);
	assert_int_equal(bufferevent_enable(r.bev, EV_READ), 0);

	send_and_pass(c, base, "one");
	assert_string_equal(r.got, "one");
	/* The socket was emptied in that pass; the next message is read in
	 * the pass its bytes wake, each time. */
	send_and_pass(c, base, "two");
	assert_string_equal(r.got, "onetwo");
	send_and_pass(c, base, "three");
	assert_string_equal(r.got, "onetwothree");
	assert_int_equal(r.calls, 3);
	/* Passes that find nothing to read change nothing of that. */
	assert_int_equal(event_base_loop(base, EVLOOP_NONBLOCK), 0);
	send_and_pass(c, base, "four");
	assert_string_equal(r.got, "onetwothreefour");

	bufferevent_free(r.bev);   /* frees s, closes fd[1] */
	SSL_free(c);
	close(fd[0]);
	event_base_free(base);
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_each_message_in_its_wakeup_pass),
	};

	return cmocka_run_group_tests(tests, setup, teardown);
}
