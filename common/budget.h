/*
 * budget.h: the stream memory budget and its fair shares, as pure
 * arithmetic (docs/0006-streams.md, "Fair shares").
 *
 * Every stream commits a receive window: the most its peer may send that we
 * may have to hold.  All windows of the process together stay within
 * `total`; each tunnel (one multiplexer) and each principal (a user, an
 * admin token) within its share; the last `reserve` bytes of the total are
 * for admin principals only, so an operator can still get in when users
 * have spent the rest.
 *
 * Under pressure windows shrink before streams are refused.  For each of
 * the three pools a stream draws on (the process, its tunnel, its
 * principal) with limit L of which `used` is taken:
 *
 *   free >= L/2:  the full window
 *   free <  L/2:  window * free / (L/2)   (shrinking to 0 as the pool fills)
 *
 * The stream gets the smallest of the three, never more than any pool's
 * free bytes, and at least min_window: it is refused only when some pool
 * has less than min_window left.  So a pool hands out full windows until it
 * is half used, then ever smaller ones, and holds many small streams before
 * it refuses the next one.
 *
 * Costs: a budget and an account are a few words; every call is O(1).
 */
#ifndef TETHER_BUDGET_H
#define TETHER_BUDGET_H

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

/* One tunnel's or one principal's share. */
struct budget_account {
	size_t used;             /* bytes of windows charged to it now */
	size_t limit;            /* its share; 0: no share of its own (no limit) */
	int admin;               /* a principal that may use the admin reserve */
	size_t held;             /* bytes its connections hold now (budget_holder) */
	unsigned holders;        /* connections charged to it (budget_hold_charge) */
};

struct budget {
	size_t total;            /* all windows of the process together */
	size_t reserve;          /* of total: for admin principals only */
	size_t tunnel_share;     /* limit of each tunnel's account */
	size_t principal_share;  /* limit of each principal's account */
	uint32_t min_window;     /* smallest window granted under pressure */
	size_t used;             /* bytes of windows charged now */
	/* Held by budget_take and budget_release while they charge and give
	 * back (used, and the accounts' used), when windows are charged from
	 * several threads (the loops' links, docs/0040); NULL: one thread. */
	pthread_mutex_t *mu;
	/* Queued output and buffers (budget_holder): all connections'
	 * together within memory, one principal's within memory_share. */
	size_t memory;           /* 0: not counted */
	size_t memory_share;     /* 0: no share per principal */
	size_t held;             /* bytes held now */
};

#define BUDGET_DEFAULT { \
	.total = 256u << 20, \
	.reserve = 32u << 20, \
	.tunnel_share = 128u << 20, \
	.principal_share = 64u << 20, \
	.min_window = 16u << 10, \
	.memory = 256u << 20, \
	.memory_share = 64u << 20, \
}

/* What one stream holds; released exactly once. */
struct budget_charge {
	struct budget_account *tunnel;     /* may be NULL */
	struct budget_account *principal;  /* may be NULL */
	uint32_t bytes;                    /* 0: nothing held */
};

enum budget_refusal {
	BUDGET_OK,
	BUDGET_TOTAL,        /* the process's budget (or all but the reserve) is spent */
	BUDGET_TUNNEL,       /* the tunnel's share is spent */
	BUDGET_PRINCIPAL,    /* the principal's share is spent */
	BUDGET_ENTRIES       /* must be last */
};

/*
 * The window a new stream would get now: want, or less under pressure (see
 * above); 0 when it must be refused, with the pool that refuses in *why.
 * tunnel and principal may be NULL (no share to respect).
 */
uint32_t budget_window(const struct budget *b, const struct budget_account *tunnel,
    const struct budget_account *principal, uint32_t want, enum budget_refusal *why);
/* The same, and charges the window to the process, the tunnel and the
 * principal, recorded in *c, under b->mu when set.  Returns the window, or
 * 0 (nothing charged, c->bytes 0). */
uint32_t budget_take(struct budget *b, struct budget_account *tunnel,
    struct budget_account *principal, uint32_t want, struct budget_charge *c,
    enum budget_refusal *why);
/* Gives back what c holds, under b->mu when set.  Idempotent (c->bytes
 * becomes 0). */
void budget_release(struct budget *b, struct budget_charge *c);
/* A reason for a refusal, for OPEN_FAIL and logs. */
const char *budget_refusal_str(enum budget_refusal why);

/*
 * The memory budget (docs/0036-memory-budget.md): what connections hold
 * now, not what they may be sent.  Each connection is a holder: its
 * queued output and input buffers, set again whenever they change
 * (budget_hold_set), counted in the process's `held` and its principal's.
 * Past `memory` or a principal's `memory_share` the owner drops holders,
 * largest first (budget_hold_over, budget_pick), until it is back within.
 */
struct budget_holder {
	struct budget *budget;             /* NULL: not counted */
	struct budget_account *principal;  /* NULL: only in the process's total */
	size_t held;                       /* bytes it holds now */
};

/* Starts counting h in b (held 0, no principal).  b may be NULL. */
void budget_hold_init(struct budget_holder *h, struct budget *b);
/* Charges h (what it holds now and later) to principal as well, in place
 * of any principal before; principal->holders counts h, so an account is
 * kept while a holder uses it (NULL: none). */
void budget_hold_charge(struct budget_holder *h, struct budget_account *principal);
/* h holds bytes now: the process's and the principal's counts follow. */
void budget_hold_set(struct budget_holder *h, size_t bytes);
/* h holds nothing any more and leaves its principal.  Idempotent. */
void budget_hold_release(struct budget_holder *h);
/* Which pool h's holding is past: BUDGET_TOTAL (the process's memory),
 * BUDGET_PRINCIPAL (its principal's memory_share), or BUDGET_OK. */
enum budget_refusal budget_hold_over(const struct budget_holder *h);
/* The largest-first choice: of best (NULL: none yet) and cand, the one to
 * drop first when `pool` is over: cand only if it counts in that pool
 * (BUDGET_PRINCIPAL: charged to principal) and holds more than best
 * (ties keep best), holding anything at all.  Walk every holder through it
 * to find the largest. */
const struct budget_holder *budget_pick(const struct budget_holder *best,
    const struct budget_holder *cand, enum budget_refusal pool,
    const struct budget_account *principal);

#endif
