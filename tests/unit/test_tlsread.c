/*
 * test_tlsread.c: the read-ahead BIO (common/tlsread.c) of a TLS
 * bufferevent whose reader drains it with tls_read_available, as the
 * tunnels' WebSocket phase does.  A message that arrives after the socket
 * was emptied is read in the loop pass that the socket wakes, not one pass
 * later: a request/answer exchange (the /k8s path) paid a whole second
 * pass of the loop for every message that crossed the tunnel.  And a
 * drain ends once the socket's last record is decrypted: no SSL_read (nor
 * read(2)) that could only say "would block", in that pass or in a later
 * one that no socket event began (a resume), which leaves newer bytes to
 * the socket's own event.  A busy connection keeps OpenSSL's record
 * buffers from record to record; once idle it holds none again.  A TLS
 * 1.3 KeyUpdate met mid-drain, and close_notify behind data, keep their
 * meaning.  A socket event's read reserves room for what it takes, not
 * for every record read ahead.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <unistd.h>

#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/bufferevent_ssl.h>
#include <event2/event.h>
#include <openssl/bio.h>
#include <openssl/crypto.h>
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
	short events;           /* what the event callback heard */
	struct event_base *base;
	int in_event;           /* the last read callback ran inside an event's
	                           callback (not a deferred one) */
	int free_in_cb;         /* the read callback frees the bufferevent */
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
	if (r->base != NULL)
		r->in_event = event_base_get_running_event(r->base) != NULL;
	if (r->free_in_cb) {
		bufferevent_free(r->bev);
		r->bev = NULL;
		return;
	}
	take_input(r);
	/* As wsconn and wsturn do: the rest of what the socket gave. */
	tls_read_available(r->bev, 1u << 20);
	take_input(r);
}

static void
reader_event_cb(struct bufferevent *bev, short what, void *arg)
{
	struct reader *r = arg;

	(void)bev;
	r->events |= what;
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

/* A handshake done over a socket pair (fd[0] the writer's, fd[1] the
 * reader's), then the reader's bufferevent with the read-ahead BIO. */
static SSL *
pair_open_opts(struct reader *r, struct event_base *base, int fd[2], int options)
{
	SSL *c, *s;
	int cdone = 0, sdone = 0;

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

	assert_non_null(r->bev = bufferevent_openssl_socket_new(base, fd[1], s,
	    BUFFEREVENT_SSL_OPEN, options));
	tls_read_ahead(r->bev);
	bufferevent_setcb(r->bev, reader_cb, NULL, reader_event_cb, r);
	assert_int_equal(bufferevent_enable(r->bev, EV_READ), 0);
	return c;
}

static SSL *
pair_open(struct reader *r, struct event_base *base, int fd[2])
{
	return pair_open_opts(r, base, fd, BEV_OPT_CLOSE_ON_FREE);
}

static void
test_each_message_in_its_wakeup_pass(void **state)
{
	struct reader r = { .len = 0 };
	struct event_base *base;
	SSL *c;
	int fd[2];

	(void)state;
	assert_non_null(base = event_base_new());
	c = pair_open(&r, base, fd);

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

/* Asks OpenSSL made of the read BIO (BIO_read calls), counted. */
static long bio_asks;

static long
count_asks(BIO *b, int oper, const char *argp, size_t len, int argi,
    long argl, int ret, size_t *processed)
{
	(void)b; (void)argp; (void)len; (void)argi; (void)argl; (void)processed;
	if (oper == BIO_CB_READ)
		bio_asks++;
	return ret;
}

/* Bytes in the reader's socket that no read(2) has taken. */
static int
socket_holds(int fd)
{
	int n = -1;

	assert_int_equal(ioctl(fd, FIONREAD, &n), 0);
	return n;
}

static void
test_drain_ends_when_the_socket_is_used_up(void **state)
{
	struct reader r = { .len = 0 };
	struct event_base *base;
	SSL *c;
	int fd[2];

	(void)state;
	assert_non_null(base = event_base_new());
	c = pair_open(&r, base, fd);
	BIO_set_callback_ex(SSL_get_rbio(bufferevent_openssl_get_ssl(r.bev)),
	    count_asks);

	/* Three records in the socket at once: the bufferevent's own read
	 * decrypts the first, the reader's drain the other two.  Each record
	 * is two asks (its header, then its body), served by one read(2);
	 * no seventh ask, which could only have said "would block". */
	assert_int_equal(SSL_write(c, "a", 1), 1);
	assert_int_equal(SSL_write(c, "b", 1), 1);
	assert_int_equal(SSL_write(c, "c", 1), 1);
	bio_asks = 0;
	assert_int_equal(event_base_loop(base, EVLOOP_ONCE), 0);
	assert_string_equal(r.got, "abc");
	assert_int_equal(r.calls, 1);
	assert_int_equal(bio_asks, 6);
	assert_false(tls_read_held(r.bev));

	/* A later drain that no socket event began (a resume) asks nothing:
	 * the socket was used up, and bytes that come after it are the
	 * socket event's, which the bufferevent's own read serves. */
	assert_int_equal(tls_read_available(r.bev, 1u << 20), 0);
	assert_int_equal(bio_asks, 6);
	assert_int_equal(SSL_write(c, "d", 1), 1);
	assert_true(socket_holds(fd[1]) > 0);
	assert_int_equal(tls_read_available(r.bev, 1u << 20), 0);
	assert_int_equal(bio_asks, 6);
	assert_true(socket_holds(fd[1]) > 0);
	assert_int_equal(event_base_loop(base, EVLOOP_ONCE), 0);
	assert_string_equal(r.got, "abcd");
	assert_int_equal(r.calls, 2);
	assert_int_equal(socket_holds(fd[1]), 0);
	assert_int_equal(bio_asks, 8);

	/* A record in two pieces: the drain stops at the partial record
	 * (OpenSSL holds its start) without a read(2), and its rest, when it
	 * comes, is read in the pass it wakes. */
	assert_int_equal(SSL_write(c, "e", 1), 1);
	{
		char rec[64];
		ssize_t n;

		/* Take the record back off the socket, then send it in two. */
		n = recv(fd[1], rec, sizeof(rec), 0);
		assert_true(n > 8);
		assert_int_equal(send(fd[0], rec, 3, 0), 3);
		assert_int_equal(event_base_loop(base, EVLOOP_ONCE), 0);
		assert_string_equal(r.got, "abcd");
		assert_int_equal(tls_read_available(r.bev, 1u << 20), 0);
		assert_int_equal(socket_holds(fd[1]), 0);
		assert_int_equal(send(fd[0], rec + 3, (size_t)n - 3, 0), n - 3);
		assert_int_equal(event_base_loop(base, EVLOOP_ONCE), 0);
		assert_string_equal(r.got, "abcde");
	}

	/* The end of the stream: close_notify reaches the bufferevent's own
	 * read, which reports it. */
	assert_int_equal(SSL_shutdown(c), 0);
	assert_int_equal(event_base_loop(base, EVLOOP_ONCE), 0);
	assert_true(r.events & BEV_EVENT_EOF);

	bufferevent_free(r.bev);
	SSL_free(c);
	close(fd[0]);
	event_base_free(base);
}

/*
 * OpenSSL's allocations of a record buffer's size (16 KiB and more),
 * counted through CRYPTO_set_mem_functions: how many were made, how many
 * are live.
 */
#define BIG 16384
#define BIG_SLOTS 256
static void *big_live[BIG_SLOTS];
static long big_made;

static void
big_forget(void *p)
{
	for (int i = 0; i < BIG_SLOTS; i++)
		if (big_live[i] == p && p != NULL) {
			big_live[i] = NULL;
			return;
		}
}

static void
big_note(void *p, size_t n)
{
	if (p == NULL || n < BIG)
		return;
	big_made++;
	for (int i = 0; i < BIG_SLOTS; i++)
		if (big_live[i] == NULL) {
			big_live[i] = p;
			return;
		}
}

static int
big_live_count(void)
{
	int n = 0;

	for (int i = 0; i < BIG_SLOTS; i++)
		n += big_live[i] != NULL;
	return n;
}

static void *
count_malloc(size_t n, const char *file, int line)
{
	void *p = malloc(n);

	(void)file; (void)line;
	big_note(p, n);
	return p;
}

static void *
count_realloc(void *old, size_t n, const char *file, int line)
{
	void *p;

	(void)file; (void)line;
	big_forget(old);
	p = realloc(old, n);
	if (p == NULL && n > 0)
		big_note(old, BIG);   /* still there; counted once more */
	else
		big_note(p, n);
	return p;
}

static void
count_free(void *p, const char *file, int line)
{
	(void)file; (void)line;
	big_forget(p);
	free(p);
}

static void
stop_loop(evutil_socket_t fd, short what, void *arg)
{
	(void)fd; (void)what;
	event_base_loopbreak(arg);
}

static void
test_busy_keeps_record_buffers_idle_frees_them(void **state)
{
	struct reader r = { .len = 0 };
	struct event_base *base;
	struct event *t;
	struct timeval second = { 1, 0 };
	SSL *c, *s;
	long made;
	int fd[2], live;

	(void)state;
	assert_non_null(base = event_base_new());
	c = pair_open(&r, base, fd);
	s = bufferevent_openssl_get_ssl(r.bev);
	assert_true(SSL_get_mode(s) & SSL_MODE_RELEASE_BUFFERS);

	/* Cold: a record's read buffer is made and freed for each one (the
	 * writer, without SSL_MODE_RELEASE_BUFFERS, keeps its own). */
	send_and_pass(c, base, "a");
	live = big_live_count();
	made = big_made;
	send_and_pass(c, base, "b");
	assert_true(big_made > made);
	assert_int_equal(big_live_count(), live);
	/* Records that come fast (one read(2) each, 16 within a second)
	 * make it busy: OpenSSL keeps its buffer, and a record more makes
	 * none. */
	for (int i = 2; i < 15; i++)
		send_and_pass(c, base, "c");
	assert_true(SSL_get_mode(s) & SSL_MODE_RELEASE_BUFFERS);
	send_and_pass(c, base, "d");
	assert_string_equal(r.got, "abcccccccccccccd");
	assert_false(SSL_get_mode(s) & SSL_MODE_RELEASE_BUFFERS);
	send_and_pass(c, base, "e");
	made = big_made;
	for (int i = 0; i < 8; i++)
		send_and_pass(c, base, "f");
	assert_int_equal(big_made, made);
	assert_string_equal(r.got, "abcccccccccccccdeffffffff");

	/* Idle for a second: the sweeps (every 250 ms) make it cold again,
	 * its buffers freed (the write buffer of its handshake too). */
	assert_non_null(t = evtimer_new(base, stop_loop, base));
	assert_int_equal(evtimer_add(t, &second), 0);
	assert_int_equal(event_base_dispatch(base), 0);
	event_free(t);
	assert_true(SSL_get_mode(s) & SSL_MODE_RELEASE_BUFFERS);
	live = big_live_count();
	assert_int_equal(SSL_free_buffers(s), 1);
	assert_int_equal(big_live_count(), live);   /* it had none to free */
	/* And reads as before: a buffer made and freed for the record. */
	made = big_made;
	send_and_pass(c, base, "g");
	assert_string_equal(r.got, "abcccccccccccccdeffffffffg");
	assert_true(big_made > made);
	assert_int_equal(big_live_count(), live);

	bufferevent_free(r.bev);
	SSL_free(c);
	close(fd[0]);
	event_base_free(base);
}

static void
test_key_update_mid_drain(void **state)
{
	struct reader r = { .len = 0 };
	struct event_base *base;
	SSL *c, *s;
	char buf[16];
	int fd[2], n;

	(void)state;
	assert_non_null(base = event_base_new());
	c = pair_open(&r, base, fd);
	s = bufferevent_openssl_get_ssl(r.bev);

	/* A record, a KeyUpdate that asks for one back, and two records
	 * under the new keys, all in the socket at once: the bufferevent's
	 * read takes the first, the drain the KeyUpdate and the rest. */
	assert_int_equal(SSL_write(c, "k1", 2), 2);
	assert_int_equal(SSL_key_update(c, SSL_KEY_UPDATE_REQUESTED), 1);
	assert_int_equal(SSL_write(c, "k2", 2), 2);
	assert_int_equal(SSL_write(c, "k3", 2), 2);
	assert_int_equal(event_base_loop(base, EVLOOP_ONCE), 0);
	assert_string_equal(r.got, "k1k2k3");
	assert_int_equal(r.calls, 1);
	assert_false(tls_read_held(r.bev));

	/* The reader answered with a KeyUpdate of its own (sent with its
	 * next write): the writer takes it, and the data after it. */
	assert_int_equal(SSL_write(s, "back", 4), 4);
	n = SSL_read(c, buf, sizeof(buf));
	assert_int_equal(n, 4);
	assert_memory_equal(buf, "back", 4);

	/* And the reader's side key update: its records keep coming. */
	assert_int_equal(SSL_key_update(s, SSL_KEY_UPDATE_NOT_REQUESTED), 1);
	assert_int_equal(SSL_write(s, "more", 4), 4);
	n = SSL_read(c, buf, sizeof(buf));
	assert_int_equal(n, 4);
	assert_memory_equal(buf, "more", 4);
	send_and_pass(c, base, "k4");
	assert_string_equal(r.got, "k1k2k3k4");

	bufferevent_free(r.bev);
	SSL_free(c);
	close(fd[0]);
	event_base_free(base);
}

static void
test_close_notify_behind_data(void **state)
{
	struct reader r = { .len = 0 };
	struct event_base *base;
	SSL *c;
	int fd[2];

	(void)state;
	assert_non_null(base = event_base_new());
	c = pair_open(&r, base, fd);

	/* Two records and close_notify in one flight, then the writer's FIN:
	 * the data is delivered, and the end is reported (the drain that
	 * met close_notify leaves it to the bufferevent's own read, which
	 * the FIN's socket event runs). */
	assert_int_equal(SSL_write(c, "y", 1), 1);
	assert_int_equal(SSL_write(c, "z", 1), 1);
	assert_int_equal(SSL_shutdown(c), 0);
	assert_int_equal(shutdown(fd[0], SHUT_WR), 0);
	for (int i = 0; i < 3 && !(r.events & (BEV_EVENT_EOF | BEV_EVENT_ERROR)); i++)
		assert_int_equal(event_base_loop(base, EVLOOP_ONCE), 0);
	assert_string_equal(r.got, "yz");
	assert_true(r.events & BEV_EVENT_EOF);

	bufferevent_free(r.bev);
	SSL_free(c);
	close(fd[0]);
	event_base_free(base);
}

/*
 * The socket event's read is tlsread's own (it skips libevent's
 * ERR_clear_error and its reservation per wake): what it leaves to
 * libevent's read must still come out as before.  close_notify with the
 * socket left open (no FIN, so no later socket event) is reported in the
 * pass that read it, after the data ahead of it.
 */
static void
test_close_notify_without_fin(void **state)
{
	struct reader r = { .len = 0 };
	struct event_base *base;
	SSL *c;
	int fd[2];

	(void)state;
	assert_non_null(base = event_base_new());
	c = pair_open(&r, base, fd);

	assert_int_equal(SSL_write(c, "w", 1), 1);
	assert_int_equal(SSL_shutdown(c), 0);
	assert_int_equal(event_base_loop(base, EVLOOP_ONCE), 0);
	assert_string_equal(r.got, "w");
	assert_true(r.events & BEV_EVENT_EOF);
	assert_int_equal(socket_holds(fd[1]), 0);

	bufferevent_free(r.bev);
	SSL_free(c);
	close(fd[0]);
	event_base_free(base);
}

/* A socket's error (a Unix socket closed with bytes it never read: the
 * reader's read(2) says ECONNRESET once, then 0) reaches the event
 * callback as an error, not as the EOF a second read(2) would say. */
static void
test_socket_error_is_an_error(void **state)
{
	struct reader r = { .len = 0 };
	struct event_base *base;
	SSL *c;
	int fd[2];

	(void)state;
	assert_non_null(base = event_base_new());
	c = pair_open(&r, base, fd);

	assert_int_equal(send(fd[1], "unread", 6, 0), 6);
	assert_int_equal(close(fd[0]), 0);
	for (int i = 0; i < 3 && !(r.events & (BEV_EVENT_EOF | BEV_EVENT_ERROR)); i++)
		assert_int_equal(event_base_loop(base, EVLOOP_ONCE), 0);
	assert_true(r.events & BEV_EVENT_ERROR);
	assert_false(r.events & BEV_EVENT_EOF);

	bufferevent_free(r.bev);
	SSL_free(c);
	event_base_free(base);
}

/* The read-side high-water mark holds: a socket event reads no further
 * than the mark (plus the record that crosses it); with reading disabled
 * nothing is read at all.  (No read callback while the input is held at the mark:
 * libevent 2.1 runs a read callback again for as long as it leaves the
 * input at the mark with reading on.) */
static void
test_watermark_and_disable_hold(void **state)
{
	struct reader r = { .len = 0 };
	struct event_base *base;
	struct evbuffer *in;
	char big[3000];
	SSL *c;
	int fd[2];

	(void)state;
	assert_non_null(base = event_base_new());
	c = pair_open(&r, base, fd);
	bufferevent_setcb(r.bev, NULL, NULL, reader_event_cb, &r);
	in = bufferevent_get_input(r.bev);
	memset(big, 'x', sizeof(big));

	/* Four records of 3000 bytes with the mark at 4000: two are read. */
	bufferevent_setwatermark(r.bev, EV_READ, 0, 4000);
	for (int i = 0; i < 4; i++)
		assert_int_equal(SSL_write(c, big, sizeof(big)), (int)sizeof(big));
	assert_int_equal(event_base_loop(base, EVLOOP_ONCE), 0);
	assert_int_equal(evbuffer_get_length(in), 6000);
	/* 1: no event added (reading suspended) */
	assert_true(event_base_loop(base, EVLOOP_NONBLOCK) >= 0);
	assert_int_equal(evbuffer_get_length(in), 6000);
	/* The rest was read ahead (one read(2)): a reader takes it with a
	 * drain once it has taken its input below the mark (tlsread.h). */
	evbuffer_drain(in, 6000);
	assert_true(tls_read_held(r.bev));
	assert_int_equal(tls_read_available(r.bev, 1u << 20), 6000);
	assert_false(tls_read_held(r.bev));
	evbuffer_drain(in, 6000);

	/* Reading disabled: a record waits, unread, until it is enabled. */
	bufferevent_setwatermark(r.bev, EV_READ, 0, 0);
	assert_int_equal(bufferevent_disable(r.bev, EV_READ), 0);
	bufferevent_setcb(r.bev, reader_cb, NULL, reader_event_cb, &r);
	assert_int_equal(SSL_write(c, "late", 4), 4);
	assert_true(event_base_loop(base, EVLOOP_NONBLOCK) >= 0);
	assert_int_equal(r.len, 0);
	assert_int_equal(bufferevent_enable(r.bev, EV_READ), 0);
	assert_int_equal(event_base_loop(base, EVLOOP_ONCE), 0);
	assert_string_equal(r.got, "late");

	bufferevent_free(r.bev);
	SSL_free(c);
	close(fd[0]);
	event_base_free(base);
}

/* The room a socket event's read reserves in the input is for what that
 * read may take (up to its limit, the record that crosses it included),
 * not for every record the read-ahead buffer holds: a peer that sends
 * many records at once must not make a connection that reads 4 KiB a
 * wake (no mark, as the gateway's HTTP connections and a tunnel reading
 * small) hold an input chain sized to all of them (libevent rounds a
 * chain up to a power of two: 128 KiB of records made a 256 KiB chain
 * holding ~16 KiB).  The rest stays read ahead (tls_read_held). */
static void
test_socket_read_room_follows_its_limit(void **state)
{
	struct reader r = { .len = 0 };
	struct event_base *base;
	struct evbuffer *in;
	struct evbuffer_iovec v;
	static char big[16384];
	size_t len;
	SSL *c;
	int fd[2];

	(void)state;
	assert_non_null(base = event_base_new());
	c = pair_open(&r, base, fd);
	bufferevent_setcb(r.bev, NULL, NULL, reader_event_cb, &r);
	in = bufferevent_get_input(r.bev);
	memset(big, 'x', sizeof(big));

	/* Eight full records (128 KiB) in one flight; no mark: the read
	 * takes 4 KiB, so one record. */
	for (int i = 0; i < 8; i++)
		assert_int_equal(SSL_write(c, big, sizeof(big)), (int)sizeof(big));
	assert_int_equal(event_base_loop(base, EVLOOP_ONCE), 0);
	len = evbuffer_get_length(in);
	assert_int_equal(len, sizeof(big));
	assert_true(tls_read_held(r.bev));
	/* The last chain's free room: what the read reserved, less what it
	 * took.  At most one more record's worth (a chain is rounded up to
	 * a power of two: 32 KiB for one record). */
	assert_int_equal(evbuffer_reserve_space(in, 1, &v, 1), 1);
	assert_true(v.iov_len + len <= 2 * sizeof(big) + 1024);
	/* The other seven, read ahead, to the reader's drain. */
	evbuffer_drain(in, len);
	assert_int_equal(tls_read_available(r.bev, 1u << 20), 7 * sizeof(big));
	assert_false(tls_read_held(r.bev));

	bufferevent_free(r.bev);
	SSL_free(c);
	close(fd[0]);
	event_base_free(base);
}

/* A read timeout set on the bufferevent is still reported as one. */
static void
test_read_timeout_reported(void **state)
{
	struct reader r = { .len = 0 };
	struct event_base *base;
	struct timeval tv = { 0, 20000 };
	SSL *c;
	int fd[2];

	(void)state;
	assert_non_null(base = event_base_new());
	c = pair_open(&r, base, fd);
	assert_int_equal(bufferevent_set_timeouts(r.bev, &tv, NULL), 0);
	send_and_pass(c, base, "t");
	assert_string_equal(r.got, "t");
	assert_int_equal(event_base_loop(base, EVLOOP_ONCE), 0);
	assert_true(r.events & BEV_EVENT_TIMEOUT);
	assert_true(r.events & BEV_EVENT_READING);

	bufferevent_free(r.bev);
	SSL_free(c);
	close(fd[0]);
	event_base_free(base);
}

/* A bufferevent that defers its callbacks (the gateway's) still has its
 * read callback run from the socket event's callback, at once, once the
 * input reaches the low-water mark; a callback that frees the
 * bufferevent there is safe (ASan). */
static void
test_deferring_bufferevent_reads_in_the_socket_event(void **state)
{
	struct reader r = { .len = 0 };
	struct event_base *base;
	SSL *c;
	int fd[2];

	(void)state;
	assert_non_null(base = event_base_new());
	c = pair_open_opts(&r, base, fd, BEV_OPT_CLOSE_ON_FREE | BEV_OPT_DEFER_CALLBACKS);
	r.base = base;

	send_and_pass(c, base, "one");
	assert_string_equal(r.got, "one");
	assert_int_equal(r.calls, 1);
	/* Run inside the socket's read event, not as a deferred callback
	 * (which libevent runs as no event: NULL). */
	assert_true(r.in_event);

	/* Below the low-water mark: read, no callback; at it: the callback. */
	bufferevent_setwatermark(r.bev, EV_READ, 8, 0);
	send_and_pass(c, base, "abc");
	assert_int_equal(r.calls, 1);
	assert_int_equal(evbuffer_get_length(bufferevent_get_input(r.bev)), 3);
	send_and_pass(c, base, "defgh");
	assert_int_equal(r.calls, 2);
	assert_true(r.in_event);
	assert_string_equal(r.got, "oneabcdefgh");

	/* Freed by its own read callback, inside the socket event. */
	bufferevent_setwatermark(r.bev, EV_READ, 0, 0);
	r.free_in_cb = 1;
	send_and_pass(c, base, "bye");
	assert_int_equal(r.calls, 3);
	assert_null(r.bev);
	assert_true(event_base_loop(base, EVLOOP_NONBLOCK) >= 0);

	SSL_free(c);
	close(fd[0]);
	event_base_free(base);
}

int
main(void)
{
	/* Before OpenSSL allocates anything. */
	if (CRYPTO_set_mem_functions(count_malloc, count_realloc, count_free) != 1)
		return 1;

	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_each_message_in_its_wakeup_pass),
		cmocka_unit_test(test_drain_ends_when_the_socket_is_used_up),
		cmocka_unit_test(test_busy_keeps_record_buffers_idle_frees_them),
		cmocka_unit_test(test_key_update_mid_drain),
		cmocka_unit_test(test_close_notify_behind_data),
		cmocka_unit_test(test_close_notify_without_fin),
		cmocka_unit_test(test_socket_error_is_an_error),
		cmocka_unit_test(test_watermark_and_disable_hold),
		cmocka_unit_test(test_socket_read_room_follows_its_limit),
		cmocka_unit_test(test_read_timeout_reported),
		cmocka_unit_test(test_deferring_bufferevent_reads_in_the_socket_event),
	};

	return cmocka_run_group_tests(tests, setup, teardown);
}
