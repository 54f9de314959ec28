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
	if (c->principal != NULL)
		c->principal->used -= c->bytes;
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

void
budget_hold_init(struct budget_holder *h, struct budget *b)
{
	h->budget = b;
	h->principal = NULL;
	h->held = 0;
}

void
budget_hold_charge(struct budget_holder *h, struct budget_account *principal)
{
	size_t held = h->held;

	if (h->principal == principal)
		return;
	budget_hold_release(h);
	h->principal = principal;
	if (principal != NULL)
		principal->holders++;
	budget_hold_set(h, held);
}

void
budget_hold_set(struct budget_holder *h, size_t bytes)
{
	if (h->budget == NULL || bytes == h->held)
		return;
	h->budget->held = h->budget->held - h->held + bytes;
	if (h->principal != NULL)
		h->principal->held = h->principal->held - h->held + bytes;
	h->held = bytes;
}

void
budget_hold_release(struct budget_holder *h)
{
	budget_hold_set(h, 0);
	if (h->principal != NULL)
		h->principal->holders--;
	h->principal = NULL;
}

enum budget_refusal
budget_hold_over(const struct budget_holder *h)
{
	const struct budget *b = h->budget;

	if (b == NULL)
		return BUDGET_OK;
	if (b->memory > 0 && b->held > b->memory)
		return BUDGET_TOTAL;
	if (h->principal != NULL && b->memory_share > 0 &&
	    h->principal->held > b->memory_share)
		return BUDGET_PRINCIPAL;
	return BUDGET_OK;
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
