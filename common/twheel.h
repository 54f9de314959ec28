/*
 * twheel.h: a hashed timing wheel for many coarse deadlines (the gateway's
 * per-connection pings: docs/0018, "Pings, third pass").
 *
 * Deadlines are rounded up to whole ticks; a node sits on an intrusive list
 * in the slot of its tick (tick mod slots).  Arming, re-arming and removing
 * are O(1) and allocate nothing; advancing the wheel visits one slot per
 * tick passed and touches only the nodes in it (due ones, plus those a
 * whole lap or more ahead, which stay).  Nothing here reads a clock: the
 * owner passes the time in milliseconds (any monotonic origin).
 *
 * Costs: the wheel is one pointer per slot (2 KiB for 256 slots); a node is
 * three words inside its owner.  A deadline fires at the first advance whose
 * time has reached it rounded up to its tick: never early, late by less than
 * a tick plus however late the owner advances.
 */
#ifndef TETHER_TWHEEL_H
#define TETHER_TWHEEL_H

#include <stddef.h>
#include <stdint.h>

struct twheel_node {
	struct twheel_node *next;
	struct twheel_node **pprev;   /* NULL: not armed */
	uint64_t tick;                /* its deadline, in ticks */
};

struct twheel {
	struct twheel_node **slots;
	size_t mask;                  /* slots - 1 (a power of two) */
	uint32_t tick_ms;
	uint64_t next;                /* the first tick not yet processed */
	uint64_t now_ms;              /* the time of the last advance (or init) */
	size_t count;                 /* nodes armed */
};

/* Sets up an empty wheel of nslots (rounded up to a power of two, at least
 * 2) ticks of tick_ms (> 0), its time now_ms.  Returns 0, or -1 when out of
 * memory. */
int twheel_init(struct twheel *w, uint32_t tick_ms, size_t nslots, uint64_t now_ms);
/* Frees the slots; the nodes still armed are simply forgotten (their
 * owners must not cancel them afterwards). */
void twheel_free(struct twheel *w);

/* Initialises a node as not armed (a zeroed node is one too). */
void twheel_node_init(struct twheel_node *n);
/* Arms n (cancelling it first if armed) to fire once the wheel's time has
 * reached due_ms rounded up to a tick; a deadline already passed fires at
 * the first advance that reaches the next tick. */
void twheel_arm(struct twheel *w, struct twheel_node *n, uint64_t due_ms);
/* Arms n delay_ms after the wheel's time (twheel_now). */
void twheel_arm_in(struct twheel *w, struct twheel_node *n, uint64_t delay_ms);
/* Disarms n; nothing if it is not armed.  Safe from a callback of
 * twheel_advance, for any node. */
void twheel_cancel(struct twheel *w, struct twheel_node *n);
/* 1 if n is armed. */
int twheel_armed(const struct twheel_node *n);
/* The wheel's time: that of its last advance (or of init/twheel_sync). */
uint64_t twheel_now(const struct twheel *w);
/* Moves an EMPTY wheel's time to now_ms without visiting slots (the owner
 * stopped advancing it while nothing was armed).  No effect if not empty. */
void twheel_sync(struct twheel *w, uint64_t now_ms);

/*
 * Advances the wheel to now_ms: every node whose deadline's tick has been
 * reached is disarmed and passed to fire(n, arg), in the order of their
 * ticks (nodes of one tick in no set order).  fire may arm, re-arm or
 * cancel any node, n included: a node re-armed at or before now_ms fires
 * again in this call only if its tick comes after the one being processed.
 * When now_ms is more than a lap past the wheel's time, every slot is
 * visited once and all nodes due fire in slot order.  Time never goes
 * backwards: an older now_ms does nothing.  Returns how many fired.
 */
size_t twheel_advance(struct twheel *w, uint64_t now_ms,
    void (*fire)(struct twheel_node *n, void *arg), void *arg);

#endif
