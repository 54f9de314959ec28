/*
 * tlsread.h: read every TLS record the socket already holds, in one go.
 *
 * libevent 2.1's OpenSSL bufferevent decrypts one record (16 KiB at most)
 * per wakeup of the loop, so a tunnel moving bulk data spends most of its
 * time going round the loop.  Called from a read callback, this pulls what
 * else OpenSSL can decrypt without blocking straight into the input buffer.
 * Anything that is not data (would-block, close_notify, an error) is left
 * for the bufferevent's own read to find (with tls_read_ahead's BIO, in
 * the same loop pass).
 */
#ifndef TETHER_TLSREAD_H
#define TETHER_TLSREAD_H

#include <stddef.h>

struct bufferevent;

/* Reads until the input holds `limit` bytes or nothing more is ready.
 * Returns the bytes added.  A no-op for bufferevents without TLS.  Cost:
 * with tls_read_ahead's BIO, one SSL_read per record and none more (a BIO
 * used up and no plaintext held ends it; no system call then).  Memory:
 * the input grows by at most limit + 64 KiB, in chains of at most
 * min(512 KiB, limit + 16 KiB) (at least 32 KiB). */
size_t tls_read_available(struct bufferevent *bev, size_t limit);

/* 1 when OpenSSL or the read BIO of tls_read_ahead hold bytes of bev's
 * peer not yet in its input (a record's plaintext, records read ahead):
 * bytes no socket event will announce.  0 for bufferevents without TLS.
 * Cheap: no system call. */
int tls_read_held(struct bufferevent *bev);

/*
 * Lets OpenSSL take many records per read() (up to 264 KiB) instead of two
 * reads per record (header, then body), through a read BIO of our own on
 * the socket (OpenSSL's read-ahead on a filter).  On an open connection
 * (handshake done) the socket event's read is ours too: records are
 * decrypted into the input (as much as libevent's read would take: up to
 * the read high-water mark, else 4 KiB, at most max_single_read) and the
 * read callback runs at once, as libevent's read runs it for a
 * bufferevent that does not defer its callbacks (even if this one does:
 * the socket event's callback is the loop's own, not a caller that queued
 * bytes), without libevent's ERR_clear_error per wake, into room sized to the records
 * read (libevent 2.1 has no call for it: bufferevent_struct.h's ev_read
 * gets our callback, its argument left as it is).  A timeout, a read not
 * enabled, an input at its mark, a handshake, an end (EOF, close_notify,
 * an alert, an error, met by this read or by a drain) go to libevent's
 * own read, which reports them through the event callback as ever, in
 * that loop pass.  Only for a connection
 * whose every reader drains OpenSSL with tls_read_available whenever it
 * reads or resumes (the WebSocket phase of wsconn and wsclient): records
 * read ahead raise no socket event of their own.  Once the socket is used
 * up, a drain reads nothing more until the bufferevent's own read (run by
 * a socket event, so only while EV_READ is enabled) has read it again: a
 * reader that wants bytes keeps EV_READ enabled.  Memory: that buffer
 * exists only while it holds bytes; OpenSSL's read buffer and write
 * buffer (one record each, ~17 KiB) too (SSL_MODE_RELEASE_BUFFERS),
 * except while the connection is busy (16 reads within a second; cold
 * again, the buffers freed, within 250-500 ms of its last read): an idle
 * connection holds none of them (its thread keeps one spare 264 KiB
 * buffer for the next read(2) of any of its connections).  A no-op on a
 * connection that has it already.
 */
void tls_read_ahead(struct bufferevent *bev);

/* Lets the bufferevent itself read in large pieces, never holding more
 * than max_buffered bytes of input. */
void tls_tune_input(struct bufferevent *bev, size_t max_buffered);

#endif
