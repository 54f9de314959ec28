/* wsturn.c: a WebSocket connection's turn of its event loop (see wsturn.h). */
#include "wsturn.h"
#include "tlsread.h"

#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/bufferevent_ssl.h>
#include <event2/event.h>

void
ws_turn_start(struct ws_turn *t, struct bufferevent *bev)
{
	t->bulk = 0;
	bufferevent_set_max_single_read(bev, WS_READ_SMALL);
}

void
ws_turn_read(struct ws_turn *t, struct bufferevent *bev)
{
	int bulk = t->data_in > WS_READ_SMALL;

	t->data_in = 0;
	if (bulk == t->bulk)
		return;
	t->bulk = bulk;
	bufferevent_set_max_single_read(bev, bulk ? WS_READ_BULK : WS_READ_SMALL);
}

void
ws_turn_pull(struct ws_turn *t, struct bufferevent *bev, size_t max_message)
{
	size_t limit = t->bulk ? max_message + 16 : WS_READ_SMALL;
	struct evbuffer *in = bufferevent_get_input(bev);

	if (t->need > limit)
		limit = t->need;    /* a frame larger than a turn: all of it */
	if (evbuffer_get_length(in) < limit)
		tls_read_available(bev, limit);
	/* Stopped at the limit, or found the input already there (the
	 * bufferevent's own read takes a record, WS_READ_SMALL: a message
	 * of two records waited in the BIO for an unrelated socket event,
	 * a keepalive ping seconds later): what is still held is the next
	 * turn's. */
	t->more = evbuffer_get_length(in) >= limit && tls_read_held(bev);
}

int
ws_turn_end(struct ws_turn *t, struct bufferevent *bev, int full, int go_on)
{
	if (go_on && (full || t->more)) {
		/* Nothing more is read until the turn comes: what a connection
		 * holds stays one pull's worth (100 pinging peers would
		 * otherwise each keep a read high-water mark's worth,
		 * docs/0036).  The records the pull left (in OpenSSL, read
		 * ahead) raise no socket event: they are the next turn's. */
		t->more = 0;
		t->yielded = 1;
		bufferevent_disable(bev, EV_READ);
		return 1;
	}
	if (t->yielded) {
		t->yielded = 0;
		if (go_on)
			bufferevent_enable(bev, EV_READ);
	}
	return 0;
}
