/*
 * wsturn.h: a WebSocket connection's turn of its event loop, the one rule
 * both ends keep (the gateway's accepted side, gateway/transport/wsconn.c,
 * and the dialled side of the agent, tetherctl and the peer links,
 * common/wsclient.c; docs/0009, "And so is the loop's time").
 *
 * A turn parses at most WS_FRAMES_PER_TURN frames and takes at most one
 * pull of input (ws_turn_pull: WS_READ_SMALL, a message's worth in bulk
 * mode, the frame under way if larger).  With more left the connection
 * waits, not reading, until the loop has polled for I/O and served every
 * other ready connection: each side arms its own event as a 0 ms timer
 * (libevent runs due timers after the I/O callbacks of the same pass),
 * then comes back for the rest.  A peer that floods small frames filled a
 * 1 MiB read with ~35,000 of them, each answered: parsed in one callback,
 * that held the loop for seconds, and every other connection on it
 * waited.  Bulk data (frames of 16 KiB and more) is not slowed: 64 of
 * them are a whole 1 MiB read.
 */
#ifndef TETHER_WSTURN_H
#define TETHER_WSTURN_H

#include <stddef.h>

struct bufferevent;

#define WS_FRAMES_PER_TURN 64
/* What the bufferevent's own read reserves in the input (libevent's
 * max_single_read), and a small-mode turn's pull: one TLS record while the
 * connection carries small messages (a pong, a window update), 1 MiB once
 * a read brought more than a record (bulk data: records land back to back
 * in one chain).  A 1 MiB reservation is a 2 MiB allocation: for a 28-byte
 * pong it cost a brk and page faults at the heap's top (docs/0018, "Pings,
 * third pass"). */
#define WS_READ_SMALL      (16u << 10)
#define WS_READ_BULK       (1u << 20)

/* One connection's turn state; zero it when the connection is made. */
struct ws_turn {
	size_t need;        /* bytes the frame at the input's start needs; 0: none */
	size_t data_in;     /* data payload parsed since the last read */
	int bulk;           /* reads reserve WS_READ_BULK */
	int more;           /* the last pull stopped at its limit */
	int yielded;        /* waiting for its next turn: not reading */
};

/* The read a connection starts its bufferevent with: small. */
void ws_turn_start(struct ws_turn *t, struct bufferevent *bev);

/* A read callback begins: sizes the next reads by the data payload the
 * last ones brought (t->data_in, which it zeroes): data messages, not
 * control frames, so a flood of PINGs keeps small reservations
 * (docs/0036).  One libevent call when the mode changes, else none. */
void ws_turn_read(struct ws_turn *t, struct bufferevent *bev);

/* Takes the TLS records ready now, one turn's worth (see above), into
 * bev's input, unless the input already holds that much.  Sets t->more
 * when the input holds that limit and TLS still holds bytes
 * (tls_read_held), whether this pull stopped there or found the input
 * full already: records OpenSSL read ahead raise no socket event, so the
 * caller comes back for them in its next turn (ws_turn_end).  Clears it
 * otherwise: the rest, if any, comes with a socket event.  A no-op
 * (more: 0) for a plain socket. */
void ws_turn_pull(struct ws_turn *t, struct bufferevent *bev, size_t max_message);

/* A turn is over.  full: it parsed WS_FRAMES_PER_TURN frames and input
 * is left; go_on: the connection may parse and read more now (open and
 * not paused, or closing; not ending, not discarding).  Returns 1 when
 * the rest waits for the next turn (full, or the pull stopped at its
 * limit): reading is disabled (t->yielded) and the caller arms its 0 ms
 * timer.  Returns 0 otherwise; a connection that waited for this turn
 * reads again (when go_on). */
int ws_turn_end(struct ws_turn *t, struct bufferevent *bev, int full, int go_on);

#endif
