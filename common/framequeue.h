/*
 * framequeue.h: a bounded FIFO of encoded frames waiting for a WebSocket to
 * become writable.  Both ends of the tunnel use it.
 *
 * Each entry owns one buffer of headroom + len bytes (libwebsockets writes
 * its header into the headroom in place, so nothing is copied again).
 */
#ifndef TETHER_FRAMEQUEUE_H
#define TETHER_FRAMEQUEUE_H

#include <stddef.h>
#include <stdint.h>

struct frame;

struct framequeue_entry {
	struct framequeue_entry *next;
	uint8_t *buf;      /* headroom bytes, then the frame */
	size_t len;        /* frame length, without headroom */
};

struct framequeue {
	struct framequeue_entry *head, *tail;
	size_t bytes;      /* sum of len over the queue */
	size_t max_bytes;  /* framequeue_push refuses beyond this */
	size_t headroom;
};

void framequeue_init(struct framequeue *q, size_t headroom, size_t max_bytes);
/* Encodes f and appends it.  Returns 0; -1 if f cannot be encoded or the
 * queue would exceed max_bytes (nothing queued then). */
int framequeue_push(struct framequeue *q, const struct frame *f);
/* The oldest frame, or NULL; stays queued until framequeue_pop. */
struct framequeue_entry *framequeue_peek(struct framequeue *q);
void framequeue_pop(struct framequeue *q);
void framequeue_clear(struct framequeue *q);

#endif
