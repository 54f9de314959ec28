/*
 * test_wsturn.c: a WebSocket connection's turn (common/wsturn.c) never
 * leaves TLS records behind where no socket event announces them.
 *
 * With tls_read_ahead, one read(2) takes every record the socket holds
 * into tlsread's BIO; the bufferevent's own read then decrypts one record
 * (WS_READ_SMALL) and calls back.  A pull that found the input already
 * holding its limit returned without a word, the turn ended "nothing
 * more", and a message of two or three records (32 KiB through
 * `tetherctl connect`) waited in the BIO for an unrelated socket event: a
 * keepalive ping 20 s later.  Here the reading end is a real OpenSSL
 * bufferevent on a socket pair, the writer a plain SSL; each case drives
 * the read callback's steps (ws_turn_read, ws_turn_pull, ws_turn_end) as
 * wsconn.c and wsclient.c do, and the next turns as their 0 ms timer does.
 *
 * The read callback runs once a record is whole, never for a record
 * begun: what the agent's keepalive counts as hearing from the gateway
 * (wsclient's read_cb notes the time, wsface_heard_ms) is a record
 * decrypted, so a large message arriving slowly counts at each of its
 * records, and bytes that never make a record count for nothing.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <string.h>
#include <sys/ioctl.h>
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
#include "wsturn.h"

#define MAX_MESSAGE (1u << 20)

static SSL_CTX *server_ctx, *client_ctx;

/* A TLS connection over a socket pair, handshake done: the writer is a
 * plain SSL, the reader a bufferevent with tlsread's BIO and a turn. */
struct reader {
	int fd[2];              /* [0] writer, [1] reader */
	SSL *w;
	struct event_base *base;
	struct bufferevent *bev;
	struct ws_turn turn;
	size_t taken;           /* bytes the "parser" took from the input */
	int calls;              /* read callbacks so far */
	int yielded;            /* the last turn ended with "come back" */
};

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
	/* No session tickets: the server reads nothing but the test's data. */
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

/* What the products' parsers do with a turn's input, reduced: take it
 * all (the frames' framing is not what is tested here). */
static void
reader_take(struct reader *r)
{
	struct evbuffer *in = bufferevent_get_input(r->bev);

	r->taken += evbuffer_get_length(in);
	evbuffer_drain(in, evbuffer_get_length(in));
}

/* The read callback, as wsconn.c's and wsclient.c's: size the reads,
 * pull one turn's worth (unless waiting for its turn), parse, end the
 * turn. */
static void
reader_read_cb(struct bufferevent *bev, void *arg)
{
	struct reader *r = arg;

	r->calls++;
	ws_turn_read(&r->turn, bev);
	if (!r->turn.yielded)
		ws_turn_pull(&r->turn, bev, MAX_MESSAGE);
	reader_take(r);
	r->yielded = ws_turn_end(&r->turn, bev, 0, 1);
}

/* The connection's next turn (its 0 ms timer, in the products). */
static void
reader_next_turn(struct reader *r)
{
	ws_turn_pull(&r->turn, r->bev, MAX_MESSAGE);
	reader_take(r);
	r->yielded = ws_turn_end(&r->turn, r->bev, 0, 1);
}

static void
reader_open(struct reader *r)
{
	SSL *s;
	int wdone = 0, sdone = 0;

	memset(r, 0, sizeof(*r));
	assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK, 0, r->fd), 0);
	assert_non_null(r->w = SSL_new(client_ctx));
	assert_non_null(s = SSL_new(server_ctx));
	assert_int_equal(SSL_set_fd(r->w, r->fd[0]), 1);
	assert_int_equal(SSL_set_fd(s, r->fd[1]), 1);
	SSL_set_connect_state(r->w);
	SSL_set_accept_state(s);
	for (int i = 0; i < 50 && !(wdone && sdone); i++) {
		if (!wdone)
			wdone = SSL_do_handshake(r->w) == 1;
		if (!sdone)
			sdone = SSL_do_handshake(s) == 1;
	}
	assert_true(wdone && sdone);
	assert_non_null(r->base = event_base_new());
	/* Owns s and fd[1] from here (freed with the bufferevent). */
	assert_non_null(r->bev = bufferevent_openssl_socket_new(r->base, r->fd[1], s,
	    BUFFEREVENT_SSL_OPEN, BEV_OPT_CLOSE_ON_FREE));
	bufferevent_setcb(r->bev, reader_read_cb, NULL, NULL, r);
	bufferevent_setwatermark(r->bev, EV_READ | EV_WRITE, 0, 0);
	ws_turn_start(&r->turn, r->bev);
	tls_read_ahead(r->bev);
	bufferevent_enable(r->bev, EV_READ);
}

static void
reader_close(struct reader *r)
{
	bufferevent_free(r->bev);
	event_base_free(r->base);
	SSL_free(r->w);
	close(r->fd[0]);
}

/* Writes n bytes as records (OpenSSL cuts them at 16 KiB). */
static void
writer_send(struct reader *r, size_t n)
{
	static uint8_t data[256 << 10];

	assert_true(n <= sizeof(data));
	memset(data, 'x', n);
	assert_int_equal(SSL_write(r->w, data, (int)n), (int)n);
}

/* Bytes the reader's socket holds, not yet read. */
static int
socket_unread(const struct reader *r)
{
	int n = -1;

	return ioctl(r->fd[1], FIONREAD, &n) == 0 ? n : -1;
}

/* Serves the socket's event once, then the turns the connection asked
 * for; returns how many turns that took. */
static int
serve(struct reader *r)
{
	int turns = 0;

	assert_int_equal(event_base_loop(r->base, EVLOOP_ONCE), 0);
	assert_true(r->calls > 0);
	while (r->yielded && turns < 100) {
		reader_next_turn(r);
		turns++;
	}
	return turns;
}

/* A message of three records, all in the socket when the loop polls: the
 * socket event takes all of it into the BIO, the bufferevent's own read
 * gives one record, and the turn says "more" (the bug: it said nothing
 * and the rest waited for another socket event).  The next turns bring
 * it all, then reading is on again. */
static void
test_records_read_ahead_get_a_turn(void **state)
{
	struct reader r;

	(void)state;
	reader_open(&r);
	writer_send(&r, 40000);
	assert_int_equal(event_base_loop(r.base, EVLOOP_ONCE), 0);
	assert_int_equal(r.calls, 1);
	/* The premise: nothing left to announce the rest. */
	assert_int_equal(socket_unread(&r), 0);
	assert_true(r.taken < 40000);
	assert_true(tls_read_held(r.bev));
	assert_int_equal(r.yielded, 1);
	for (int turns = 0; r.yielded && turns < 100; turns++)
		reader_next_turn(&r);
	assert_int_equal(r.taken, 40000);
	assert_false(tls_read_held(r.bev));
	assert_int_equal(r.yielded, 0);
	assert_true(bufferevent_get_enabled(r.bev) & EV_READ);
	reader_close(&r);
}

/* The same at the bulk size (reads reserve WS_READ_BULK, the limit is a
 * whole message): 64 KiB + 1 and 150,000 bytes each arrive whole. */
static void
test_bulk_messages_arrive_whole(void **state)
{
	static const size_t sizes[] = { 65537, 150000 };
	struct reader r;

	(void)state;
	reader_open(&r);
	r.turn.data_in = WS_READ_BULK;     /* as after a bulk message */
	for (size_t i = 0; i < sizeof(sizes) / sizeof(sizes[0]); i++) {
		r.taken = 0;
		writer_send(&r, sizes[i]);
		(void)serve(&r);
		assert_int_equal(socket_unread(&r), 0);
		assert_int_equal(r.taken, sizes[i]);
		assert_false(tls_read_held(r.bev));
		r.turn.data_in = WS_READ_BULK;
	}
	reader_close(&r);
}

/* One record, taken whole by the bufferevent's own read: the input holds
 * the limit but TLS holds nothing, so no turn is spent on it. */
static void
test_one_record_needs_no_turn(void **state)
{
	struct reader r;

	(void)state;
	reader_open(&r);
	writer_send(&r, WS_READ_SMALL);
	assert_int_equal(serve(&r), 0);
	assert_int_equal(r.taken, WS_READ_SMALL);
	assert_false(tls_read_held(r.bev));
	assert_int_equal(r.yielded, 0);
	reader_close(&r);
}

/* One record's bytes reach the socket in two halves: the first is read
 * (the socket is left empty) and calls back nothing, the second completes
 * the record and calls back once, with all of it. */
static void
test_record_in_pieces_calls_back_once_whole(void **state)
{
	struct reader r;
	BIO *mem = BIO_new(BIO_s_mem());
	static uint8_t wire[20000];
	int n;

	(void)state;
	assert_non_null(mem);
	reader_open(&r);
	SSL_set0_wbio(r.w, mem);        /* the writer's records, held here */
	writer_send(&r, 10000);         /* one record */
	n = BIO_read(mem, wire, sizeof(wire));
	assert_true(n > 10000 && n < 10100);
	assert_int_equal(BIO_pending(mem), 0);

	assert_int_equal(write(r.fd[0], wire, (size_t)n / 2), n / 2);
	assert_int_equal(event_base_loop(r.base, EVLOOP_ONCE), 0);
	assert_int_equal(socket_unread(&r), 0);     /* it was read */
	assert_int_equal(r.calls, 0);               /* a record begun: nothing */
	assert_int_equal(r.taken, 0);

	assert_int_equal(write(r.fd[0], wire + n / 2, (size_t)(n - n / 2)),
	    n - n / 2);
	assert_int_equal(event_base_loop(r.base, EVLOOP_ONCE), 0);
	assert_int_equal(r.calls, 1);
	assert_int_equal(r.taken, 10000);
	reader_close(&r);
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_records_read_ahead_get_a_turn),
		cmocka_unit_test(test_bulk_messages_arrive_whole),
		cmocka_unit_test(test_one_record_needs_no_turn),
		cmocka_unit_test(test_record_in_pieces_calls_back_once_whole),
	};

	return cmocka_run_group_tests(tests, setup, teardown);
}
