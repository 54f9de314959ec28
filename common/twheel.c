/*
 * twheel.c: the hashed timing wheel (see twheel.h).
 *
 * A slot's list is doubly linked through pprev (the address of whatever
 * points at the node), so a node leaves any list, a slot's or the one an
 * advance is working through, without knowing which.
 */
#include "twheel.h"

#include <stdlib.h>

static void
slot_push(struct twheel_node **head, struct twheel_node *n)
{
	n->next = *head;
	if (n->next != NULL)
		n->next->pprev = &n->next;
	*head = n;
	n->pprev = head;
}

static void
node_unlink(struct twheel_node *n)
{
	if (n->next != NULL)
		n->next->pprev = n->pprev;
	*n->pprev = n->next;
	n->next = NULL;
	n->pprev = NULL;
}

int
twheel_init(struct twheel *w, uint32_t tick_ms, size_t nslots, uint64_t now_ms)
{
	size_t n = 2;

	while (n < nslots)
		n <<= 1;
	w->slots = calloc(n, sizeof(*w->slots));
	if (w->slots == NULL)
		return -1;
	w->mask = n - 1;
	w->tick_ms = tick_ms > 0 ? tick_ms : 1;
	w->now_ms = now_ms;
	w->next = now_ms / w->tick_ms + 1;
	w->count = 0;
	return 0;
}

void
twheel_free(struct twheel *w)
{
	free(w->slots);
	w->slots = NULL;
	w->count = 0;
}

void
twheel_node_init(struct twheel_node *n)
{
	n->next = NULL;
	n->pprev = NULL;
	n->tick = 0;
}

int
twheel_armed(const struct twheel_node *n)
{
	return n->pprev != NULL;
}

void
twheel_cancel(struct twheel *w, struct twheel_node *n)
{
	if (n->pprev == NULL)
		return;
	node_unlink(n);
	w->count--;
}

void
twheel_arm(struct twheel *w, struct twheel_node *n, uint64_t due_ms)
{
	uint64_t t = due_ms / w->tick_ms + (due_ms % w->tick_ms != 0);

	twheel_cancel(w, n);
	if (t < w->next)
		t = w->next;
	n->tick = t;
	slot_push(&w->slots[t & w->mask], n);
	w->count++;
}

void
twheel_arm_in(struct twheel *w, struct twheel_node *n, uint64_t delay_ms)
{
	twheel_arm(w, n, w->now_ms + delay_ms);
}

uint64_t
twheel_now(const struct twheel *w)
{
	return w->now_ms;
}

void
twheel_sync(struct twheel *w, uint64_t now_ms)
{
	if (w->count > 0 || now_ms < w->now_ms)
		return;
	w->now_ms = now_ms;
	w->next = now_ms / w->tick_ms + 1;
}

/* Fires the nodes of one slot due by tick `upto`; the others stay.  The
 * slot's list is taken whole first, so nodes armed meanwhile wait. */
static size_t
slot_run(struct twheel *w, size_t i, uint64_t upto,
    void (*fire)(struct twheel_node *, void *), void *arg)
{
	struct twheel_node *work = w->slots[i], *n;
	size_t fired = 0;

	w->slots[i] = NULL;
	if (work != NULL)
		work->pprev = &work;
	while ((n = work) != NULL) {
		node_unlink(n);
		if (n->tick > upto) {
			slot_push(&w->slots[i], n);   /* a lap or more ahead */
			continue;
		}
		w->count--;
		fired++;
		fire(n, arg);
	}
	return fired;
}

size_t
twheel_advance(struct twheel *w, uint64_t now_ms,
    void (*fire)(struct twheel_node *n, void *arg), void *arg)
{
	uint64_t target = now_ms / w->tick_ms;
	size_t fired = 0;

	if (now_ms <= w->now_ms)
		return 0;
	w->now_ms = now_ms;
	if (target >= w->next && target - w->next > w->mask) {
		/* More than a lap behind: one visit of every slot. */
		w->next = target + 1;
		for (size_t i = 0; i <= w->mask; i++)
			fired += slot_run(w, i, target, fire, arg);
		return fired;
	}
	while (w->next <= target) {
		uint64_t cur = w->next++;

		fired += slot_run(w, (size_t)(cur & w->mask), cur, fire, arg);
	}
	return fired;
}
