/* budget.c: the stream memory budget and its fair shares (see budget.h). */
#include "budget.h"

static const char *const refusal_names[BUDGET_ENTRIES] = {
	[BUDGET_OK] = "ok",
	[BUDGET_TOTAL] = "the stream memory budget is spent",
	[BUDGET_TUNNEL] = "this tunnel's share of the stream memory budget is spent",
	[BUDGET_PRINCIPAL] = "the share of the stream memory budget of this user or token is spent",
};

/* The window one pool allows (limit, used): full while at least half is
 * free, then shrinking with what is left; never more than is free. */
static uint64_t
pool_window(size_t limit, size_t used, uint32_t want)
{
	uint64_t free, half, w = want;

	if (used >= limit)
		return 0;
	free = limit - used;
	half = limit / 2;
	if (free < half)
		w = w * free / half;
	return w < free ? w : free;
}

static size_t
pool_free(size_t limit, size_t used)
{
	return used < limit ? limit - used : 0;
}

/* Narrows (w, room) to one pool; records it as the reason if it is the
 * tightest so far. */
static void
narrow(size_t limit, size_t used, uint32_t want, enum budget_refusal pool,
    uint64_t *w, uint64_t *room, enum budget_refusal *tightest)
{
	uint64_t pw = pool_window(limit, used, want), pf = pool_free(limit, used);

	if (pw < *w)
		*w = pw;
	if (pf < *room) {
		*room = pf;
		*tightest = pool;
	}
}

uint32_t
budget_window(const struct budget *b, const struct budget_account *tunnel,
    const struct budget_account *principal, uint32_t want, enum budget_refusal *why)
{
	int admin = principal != NULL && principal->admin;
	size_t total = b->total;
	uint64_t w = want, room = UINT64_MAX;
	uint32_t floor = b->min_window < want ? b->min_window : want;
	enum budget_refusal tightest = BUDGET_TOTAL;

	if (!admin)
		total = b->reserve < total ? total - b->reserve : 0;
	narrow(total, b->used, want, BUDGET_TOTAL, &w, &room, &tightest);
	if (tunnel != NULL && tunnel->limit > 0)
		narrow(tunnel->limit, tunnel->used, want, BUDGET_TUNNEL, &w, &room,
		    &tightest);
	if (principal != NULL && principal->limit > 0)
		narrow(principal->limit, principal->used, want, BUDGET_PRINCIPAL, &w,
		    &room, &tightest);
	if (w < floor)
		w = room >= floor ? floor : 0;
	if (why != NULL)
		*why = w > 0 ? BUDGET_OK : tightest;
	return (uint32_t)w;
}

uint32_t
budget_take(struct budget *b, struct budget_account *tunnel,
    struct budget_account *principal, uint32_t want, struct budget_charge *c,
    enum budget_refusal *why)
{
	uint32_t w;

	if (b->mu != NULL)
		pthread_mutex_lock(b->mu);
	w = budget_window(b, tunnel, principal, want, why);
	c->tunnel = tunnel;
	c->principal = principal;
	c->bytes = w;
	if (w > 0) {
		b->used += w;
		if (tunnel != NULL)
			tunnel->used += w;
		if (principal != NULL)
			principal->used += w;
	}
	if (b->mu != NULL)
		pthread_mutex_unlock(b->mu);
	return w;
}

/* a's used or holders fell: its owner hears when both are 0 (under mu). */
static void
account_fell(struct budget_account *a)
{
	if (a->idle != NULL && a->used == 0 && a->holders == 0)
		a->idle(a);
}

void
budget_release(struct budget *b, struct budget_charge *c)
{
	if (c->bytes == 0)
		return;
	if (b->mu != NULL)
		pthread_mutex_lock(b->mu);
	b->used -= c->bytes;
	if (c->tunnel != NULL)
		c->tunnel->used -= c->bytes;
	if (c->principal != NULL) {
		c->principal->used -= c->bytes;
		account_fell(c->principal);
	}
	if (b->mu != NULL)
		pthread_mutex_unlock(b->mu);
	c->bytes = 0;
}

const char *
budget_refusal_str(enum budget_refusal why)
{
	return why < BUDGET_ENTRIES ? refusal_names[why] : "?";
}

/* ---- the memory budget (held bytes) ---- */

/* How many slices count now (budget_slice_init). */
static unsigned
slices_counting(const struct budget *b)
{
	unsigned n = (unsigned)__builtin_popcountll(atomic_load_explicit(&b->slices,
	    memory_order_relaxed));

	return n > 0 ? n : 1;
}

void
budget_slice_init(struct budget_slice *s, struct budget *b)
{
	uint64_t bits, bit;
	unsigned i;

	s->budget = b;
	s->index = BUDGET_SLICES;
	s->held = s->published = 0;
	if (b == NULL)
		return;
	bits = atomic_load(&b->slices);
	do {
		if (bits == UINT64_MAX)
			return;
		i = (unsigned)__builtin_ctzll(~bits);
		bit = (uint64_t)1 << i;
	} while (!atomic_compare_exchange_weak(&b->slices, &bits, bits | bit));
	s->index = i;
}

void
budget_slice_fini(struct budget_slice *s)
{
	struct budget *b = s->budget;

	if (b == NULL)
		return;
	atomic_fetch_sub_explicit(&b->held, s->published, memory_order_relaxed);
	if (s->index < BUDGET_SLICES)
		atomic_fetch_and(&b->slices, ~((uint64_t)1 << s->index));
	s->budget = NULL;
	s->index = BUDGET_SLICES;
	s->held = s->published = 0;
}

size_t
budget_slice_total(const struct budget_slice *s)
{
	if (s->budget == NULL)
		return 0;
	/* Modular: the others' published figures are never negative. */
	return atomic_load_explicit(&s->budget->held, memory_order_relaxed) -
	    s->published + s->held;
}

int
budget_slice_over(const struct budget_slice *s)
{
	const struct budget *b = s->budget;

	if (b == NULL || b->memory == 0 || budget_slice_total(s) <= b->memory)
		return 0;
	return s->index >= BUDGET_SLICES || s->held > b->memory / slices_counting(b);
}

/* s's held moved: the process's figure follows once it moved by a
 * granule since s last published, or fell to 0 (exact when idle). */
static void
slice_publish(struct budget_slice *s)
{
	size_t d = s->held - s->published;   /* modular: may be "negative" */

	if (d == 0 || (s->held != 0 && (d < BUDGET_GRANULE || -d < BUDGET_GRANULE)))
		return;
	atomic_fetch_add_explicit(&s->budget->held, d, memory_order_relaxed);
	s->published = s->held;
}

/* The budget's mutex, when windows and holders are charged from several
 * threads. */
static void
hold_lock(const struct budget_holder *h, int lock)
{
	pthread_mutex_t *mu = h->slice != NULL ? h->slice->budget->mu : NULL;

	if (mu == NULL)
		return;
	if (lock)
		pthread_mutex_lock(mu);
	else
		pthread_mutex_unlock(mu);
}

void
budget_hold_init(struct budget_holder *h, struct budget_slice *s)
{
	h->slice = s != NULL && s->budget != NULL ? s : NULL;
	h->principal = NULL;
	h->held = 0;
}

void
budget_hold_charge(struct budget_holder *h, struct budget_account *principal)
{
	size_t held = h->held;

	if (h->principal == principal)
		return;
	budget_hold_set(h, 0);
	hold_lock(h, 1);
	if (h->principal != NULL) {
		h->principal->holders--;
		account_fell(h->principal);
	}
	if (principal != NULL)
		principal->holders++;
	hold_lock(h, 0);
	h->principal = principal;
	budget_hold_set(h, held);
}

void
budget_hold_set(struct budget_holder *h, size_t bytes)
{
	struct budget_slice *s = h->slice;
	struct budget_account *p = h->principal;
	size_t d = bytes - h->held;          /* modular */

	if (s == NULL || bytes == h->held)
		return;
	s->held += d;
	if (p != NULL) {
		atomic_fetch_add_explicit(&p->held, d, memory_order_relaxed);
		if (p->part != NULL && s->index < BUDGET_SLICES)
			p->part[s->index] += d;
	}
	h->held = bytes;
	slice_publish(s);
}

void
budget_hold_release(struct budget_holder *h)
{
	budget_hold_set(h, 0);
	if (h->principal != NULL) {
		hold_lock(h, 1);
		h->principal->holders--;
		account_fell(h->principal);
		hold_lock(h, 0);
	}
	h->principal = NULL;
}

/* Whether h's principal is past its share and h's loop holds more than
 * its part of it (all of it without parts). */
static int
principal_over(const struct budget_holder *h)
{
	const struct budget *b = h->slice->budget;
	const struct budget_account *p = h->principal;
	unsigned i = h->slice->index;

	if (p == NULL || b->memory_share == 0 ||
	    atomic_load_explicit(&p->held, memory_order_relaxed) <= b->memory_share)
		return 0;
	return p->part == NULL || i >= BUDGET_SLICES ||
	    p->part[i] > b->memory_share / slices_counting(b);
}

enum budget_refusal
budget_hold_over(const struct budget_holder *h)
{
	if (h->slice == NULL)
		return BUDGET_OK;
	if (budget_slice_over(h->slice))
		return BUDGET_TOTAL;
	if (principal_over(h))
		return BUDGET_PRINCIPAL;
	return BUDGET_OK;
}

size_t
budget_hold_part(const struct budget_holder *h, enum budget_refusal pool)
{
	const struct budget_account *p = h->principal;

	if (h->slice == NULL)
		return 0;
	if (pool != BUDGET_PRINCIPAL)
		return h->slice->held;
	if (p == NULL)
		return 0;
	if (p->part == NULL || h->slice->index >= BUDGET_SLICES)
		return atomic_load_explicit(&p->held, memory_order_relaxed);
	return p->part[h->slice->index];
}

const struct budget_holder *
budget_pick(const struct budget_holder *best, const struct budget_holder *cand,
    enum budget_refusal pool, const struct budget_account *principal)
{
	if (cand == NULL || cand->held == 0)
		return best;
	if (pool == BUDGET_PRINCIPAL && cand->principal != principal)
		return best;
	return best == NULL || cand->held > best->held ? cand : best;
}
