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
 *
 * Threads (docs/0040): windows (`used`) and the principals' `holders` are
 * charged under `mu` when it is set (two loops or more).  What connections
 * hold (`held`) is counted per loop: each loop has a slice
 * (struct budget_slice) that counts its holders exactly, on that loop's
 * thread only, and publishes to the process's figure (an atomic) only when
 * its own total moved by BUDGET_GRANULE; a principal's figure is an atomic
 * beside a per-slice part.  A loop evicts only its own holders, only when
 * the process (or a principal) is over and its own part is over its
 * 1/slices of the limit (budget_hold_over, budget_slice_over).
 */
#ifndef TETHER_BUDGET_H
#define TETHER_BUDGET_H

#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

/* Slices at most: one per loop, and --workers is at most 64. */
#define BUDGET_SLICES 64
/* A slice publishes its held bytes to the process's figure when they
 * moved by this much since it last did (or fell to 0): the figure is
 * within slices x BUDGET_GRANULE of the exact sum. */
#define BUDGET_GRANULE ((size_t)64 << 10)

/* One tunnel's or one principal's share. */
struct budget_account {
	size_t used;             /* bytes of windows charged to it now */
	size_t limit;            /* its share; 0: no share of its own (no limit) */
	int admin;               /* a principal that may use the admin reserve */
	/* Bytes its connections hold now, on every loop (budget_holder):
	 * exact, changed by each holder with one relaxed atomic add. */
	_Atomic size_t held;
	/* NULL, or BUDGET_SLICES counts: of held, what each slice's holders
	 * hold (part[i] written and read by slice i's thread only). */
	size_t *part;
	unsigned holders;        /* connections charged to it (budget_hold_charge), under mu */
	/* NULL, or called when used and holders have both fallen to 0 (a
	 * charge released, a connection gone): under mu, on the thread that
	 * released.  Its owner's garbage collection hears of the accounts
	 * that may be freed without looking at every one (shares.c). */
	void (*idle)(struct budget_account *a);
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
	/* Bytes held now, as the slices published them: within
	 * slices x BUDGET_GRANULE of the exact sum (budget_slice_total). */
	_Atomic size_t held;
	_Atomic uint64_t slices; /* bit i: slice i counts (budget_slice_init) */
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
 * (budget_hold_set), counted in its loop's slice, the process's `held`
 * and its principal's.  Past `memory` or a principal's `memory_share` a
 * loop that holds more than its part drops its own holders, largest first
 * (budget_hold_over, budget_slice_over, budget_pick), until it is back
 * within.  A slice and its holders belong to one thread (a loop's).
 */
struct budget_slice {
	struct budget *budget;   /* NULL: not counted */
	unsigned index;          /* its bit in budget->slices; BUDGET_SLICES: none free */
	size_t held;             /* its holders' bytes, exact */
	size_t published;        /* of held, what budget->held counts */
};

struct budget_holder {
	struct budget_slice *slice;        /* NULL: not counted */
	struct budget_account *principal;  /* NULL: only in the process's total */
	size_t held;                       /* bytes it holds now */
};

/* Starts a slice of b (b NULL: counts nothing) for the calling loop,
 * holding 0: takes the lowest free index (all BUDGET_SLICES taken: the
 * slice still counts in the process's figure but has no part of the
 * principals' and no share of its own).  Cost: an atomic CAS. */
void budget_slice_init(struct budget_slice *s, struct budget *b);
/* Ends s (its holders released first): what it published is taken back,
 * its index freed.  Idempotent. */
void budget_slice_fini(struct budget_slice *s);
/* The process's held bytes as s's loop sees them: the others' published
 * figures and its own exact one.  O(1). */
size_t budget_slice_total(const struct budget_slice *s);
/* Whether s's loop must drop its largest holders for the process's
 * budget: the process is past `memory` and s holds more than
 * memory / (slices counting).  With one slice: the process is past it. */
int budget_slice_over(const struct budget_slice *s);

/* Starts counting h in s (held 0, no principal).  s may be NULL, or a
 * slice of no budget: nothing is counted. */
void budget_hold_init(struct budget_holder *h, struct budget_slice *s);
/* Charges h (what it holds now and later) to principal as well, in place
 * of any principal before; principal->holders counts h (under the
 * budget's mu), so an account is kept while a holder uses it (NULL:
 * none). */
void budget_hold_charge(struct budget_holder *h, struct budget_account *principal);
/* h holds bytes now: its slice's, the principal's and (by granules) the
 * process's counts follow.  From its slice's thread; no lock: one relaxed
 * atomic add for the principal, one for the process per granule moved. */
void budget_hold_set(struct budget_holder *h, size_t bytes);
/* h holds nothing any more and leaves its principal.  Idempotent. */
void budget_hold_release(struct budget_holder *h);
/* Which pool h's loop must drop holders from: BUDGET_TOTAL
 * (budget_slice_over of h's slice), BUDGET_PRINCIPAL (its principal is
 * past memory_share and, when the account has parts, h's slice holds more
 * than memory_share / slices of it), or BUDGET_OK. */
enum budget_refusal budget_hold_over(const struct budget_holder *h);
/* What h's slice holds of pool (BUDGET_TOTAL: all its holders';
 * BUDGET_PRINCIPAL: of h's principal, or the principal's whole figure when
 * the account has no parts): the part the eviction judged.  Logs. */
size_t budget_hold_part(const struct budget_holder *h, enum budget_refusal pool);
/* The largest-first choice: of best (NULL: none yet) and cand, the one to
 * drop first when `pool` is over: cand only if it counts in that pool
 * (BUDGET_PRINCIPAL: charged to principal) and holds more than best
 * (ties keep best), holding anything at all.  Walk every holder through it
 * to find the largest. */
const struct budget_holder *budget_pick(const struct budget_holder *best,
    const struct budget_holder *cand, enum budget_refusal pool,
    const struct budget_account *principal);

#endif
