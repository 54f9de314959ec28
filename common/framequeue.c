/* framequeue.c: bounded FIFO of encoded frames (see framequeue.h). */
#include "framequeue.h"

#include <stdlib.h>

#include "frame.h"

void
framequeue_init(struct framequeue *q, size_t headroom, size_t max_bytes)
{
	q->head = q->tail = NULL;
	q->bytes = 0;
	q->max_bytes = max_bytes;
	q->headroom = headroom;
}

int
framequeue_push(struct framequeue *q, const struct frame *f)
{
	struct framequeue_entry *e;
	uint8_t *buf;
	size_t len;

	if (frame_encode(f, q->headroom, &buf, &len) != 0)
		return -1;
	if (q->bytes + len > q->max_bytes || (e = malloc(sizeof(*e))) == NULL) {
		free(buf);
		return -1;
	}
	e->next = NULL;
	e->buf = buf;
	e->len = len;
	if (q->tail != NULL)
		q->tail->next = e;
	else
		q->head = e;
	q->tail = e;
	q->bytes += len;
	return 0;
}

struct framequeue_entry *
framequeue_peek(struct framequeue *q)
{
	return q->head;
}

void
framequeue_pop(struct framequeue *q)
{
	struct framequeue_entry *e = q->head;

	if (e == NULL)
		return;
	q->head = e->next;
	if (q->head == NULL)
		q->tail = NULL;
	q->bytes -= e->len;
	free(e->buf);
	free(e);
}

void
framequeue_clear(struct framequeue *q)
{
	while (q->head != NULL)
		framequeue_pop(q);
}
