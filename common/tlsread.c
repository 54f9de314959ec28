/* tlsread.c: drain ready TLS records into a bufferevent's input (see tlsread.h). */
#include "tlsread.h"

#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/bufferevent_ssl.h>
#include <event2/event.h>
#include <openssl/err.h>
#include <openssl/ssl.h>

#define TLS_RECORD_MAX 16384
#define TLS_CHAIN_SIZE (512 * 1024)
#define TLS_READ_AHEAD (128 * 1024)  /* bytes OpenSSL may take per read() */

void
tls_read_ahead(struct bufferevent *bev)
{
	SSL *ssl = bufferevent_openssl_get_ssl(bev);

	if (ssl == NULL)
		return;
	SSL_set_default_read_buffer_len(ssl, TLS_READ_AHEAD);
	SSL_set_read_ahead(ssl, 1);
}

void
tls_tune_input(struct bufferevent *bev, size_t max_buffered)
{
	/* With a high-water mark the OpenSSL bufferevent reserves room for
	 * up to that much at once instead of 4 KiB pieces. */
	bufferevent_setwatermark(bev, EV_READ, 0, max_buffered);
}

size_t
tls_read_available(struct bufferevent *bev, size_t limit)
{
	SSL *ssl = bufferevent_openssl_get_ssl(bev);
	struct evbuffer *in = bufferevent_get_input(bev);
	struct evbuffer_iovec v;
	size_t added = 0, chain;
	int r;

	if (ssl == NULL)
		return 0;
	/* A small limit (a connection not yet authenticated) gets a chain to
	 * match, not 512 KiB of memory it may never fill. */
	chain = limit + TLS_RECORD_MAX;
	if (chain > TLS_CHAIN_SIZE)
		chain = TLS_CHAIN_SIZE;
	if (chain < 2 * TLS_RECORD_MAX)
		chain = 2 * TLS_RECORD_MAX;
	while (evbuffer_get_length(in) < limit) {
		/* Records land back to back in big chains, so that a whole
		 * message is usually contiguous and needs no pullup copy. */
		if (evbuffer_reserve_space(in, TLS_RECORD_MAX, &v, 1) < 1)
			break;
		if (v.iov_len < 2 * TLS_RECORD_MAX &&
		    evbuffer_reserve_space(in, (ev_ssize_t)chain, &v, 1) < 1)
			break;
		if (v.iov_len > 4 * TLS_RECORD_MAX)
			v.iov_len = 4 * TLS_RECORD_MAX;
		ERR_clear_error();
		r = SSL_read(ssl, v.iov_base, (int)v.iov_len);
		if (r <= 0) {
			/* Nothing committed: would-block, close_notify and errors
			 * are seen again by the bufferevent's own SSL_read. */
			ERR_clear_error();
			break;
		}
		v.iov_len = (size_t)r;
		evbuffer_commit_space(in, &v, 1);
		added += (size_t)r;
	}
	return added;
}
