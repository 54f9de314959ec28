/*
 * tlswrite.h: a TLS connection's records gathered into large socket writes.
 *
 * OpenSSL hands every record (16 KiB at most) to its socket BIO as soon as
 * it is sealed, so a tunnel moving bulk data makes one write(2) per record:
 * on a machine where a syscall is dear that costs more than the crypto.
 * tls_write_batch puts a BIO in front of the socket that keeps sealed
 * records in one buffer and writes them with one send(2) from the event
 * loop, after the callbacks that produced them have run (or at once when
 * the buffer is full).  Records are never reordered, split across calls or
 * held past the loop iteration that made them, unless the socket refuses
 * them: then the rest waits for the socket to be writable again.
 *
 * Only for the WebSocket phase of a TLS bufferevent on a socket (wsconn,
 * wsclient); a bufferevent whose TLS runs over another bufferevent (an
 * https proxy's filter) is left as it is.
 */
#ifndef TETHER_TLSWRITE_H
#define TETHER_TLSWRITE_H

#include <stddef.h>

struct bufferevent;

/* Records written but not yet taken by the kernel: at most this.  Two
 * DATA frames of the multiplexer's largest payload (128 KiB, mux.h's
 * max_payload) sealed: 2 x (131,072 + ~30 bytes of frame headers + 9
 * records x 22 bytes of TLS 1.3 overhead) = 262,600 B, just over 256 KiB:
 * at 256 KiB the second frame's records flushed the first alone, one
 * send(2) per frame (tetherctl forward 8,160 sends per GiB, 4,100-4,300
 * at 264 KiB: tests/bench/throughput_profile.sh). */
#define TLS_WRITE_BATCH_MAX (264u * 1024u)

/*
 * Installs the batching write BIO on bev (a TLS bufferevent made on a
 * socket, handshake done).  Returns 1 if installed, 0 if bev is not such a
 * bufferevent (no TLS, a filter) or has it already.  Memory: a 264 KiB
 * buffer while records wait, none while idle; one event.  When the socket
 * takes the last of them and bev's output is empty, bev's write callback
 * runs (from the loop), so an owner waiting for "all written" learns it.  A write error shuts the socket down both ways: bev's next read
 * reports the end.
 */
int tls_write_batch(struct bufferevent *bev);

/*
 * Sends a small message (at most TLS_WRITE_NOW_MAX bytes: a WebSocket
 * control frame, a tunnel's window update, the DATA of a small request or
 * answer) with this loop pass's send(2), when bev's output holds nothing
 * ahead of it.  The small messages of one pass wait as plaintext and are
 * sealed together at the end of the pass, one record for up to 16 KiB of
 * them (a record each cost the peer a decryption per message: 16
 * connections' answers relayed in one pass were 16 records).  Through
 * bev's output instead, libevent's OpenSSL bufferevent would arm its write
 * event and wait for the socket to be reported writable: two epoll_ctl(2)
 * and a loop pass for every ping and pong of an idle tunnel.  Returns 1 if
 * taken (bev's write callback runs once the kernel has it, as after an
 * output write), 0 if the caller must add the message to bev's output as
 * usual (bytes queued ahead, no batching BIO, the socket refusing bytes,
 * no room in the batch), -1 if the TLS connection failed (it is shut
 * down: bev's next read reports it).  Cost: a copy now, one SSL_write per
 * connection and pass.
 */
#define TLS_WRITE_NOW_MAX 4096u   /* callers copy a frame on their stack */
int tls_write_now(struct bufferevent *bev, const void *data, size_t len);

/*
 * Runs fn() once, on this thread, right after the flush of this loop
 * pass's records (the event tls_write_now and the batching BIO schedule),
 * when one is scheduled now on base: one event of the pass then serves
 * both (each activation and dispatch of an event is ~300 instructions;
 * runtime.c's audit flush rides it).  Returns 1 if fn will run so (also
 * when the flush is taken back, its last batch freed: fn runs then), 0 if
 * no flush is scheduled on base, or another fn already waits: the caller
 * schedules its own.  At most one fn waits at a time.
 */
struct event_base;
int tls_write_after_flush(struct event_base *base, void (*fn)(void));

/* Sealed records bev holds that the kernel has not taken (0 without the
 * batching BIO).  "Everything is written" is an empty output buffer and
 * this at 0. */
size_t tls_write_pending(struct bufferevent *bev);

#endif
