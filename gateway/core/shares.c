/* shares.c: the principals' accounts in the stream budget (see shares.h).
 *
 * A hash table of chained buckets by principal (FNV-1a, as srccount.c and
 * agentdir.c), doubled when it holds two accounts a bucket, and a list of
 * the accounts that went idle (pins, used and holders all 0: shares_unpin,
 * or the budget's hook when a charge or a connection left one), which the
 * next lookup frees.  A lookup costs one bucket's chain and the accounts
 * that went idle since the last one: O(1) expected, amortised (a doubling
 * rehashes every account once).  It walked every account twice, under the
 * mutex every loop charges windows under: the find, then the sweep. */
#include "shares.h"

#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "budget.h"
#include "gateway.h"

#define SHARES_BUCKETS_MIN 64        /* a power of two */

struct shares;

struct share {
	struct share *next;               /* same bucket */
	struct share *idle_next;          /* in the idle list, if on it */
	struct shares *table;             /* the table it is in */
	int on_idle;                      /* on the idle list */
	struct budget_account account;
	unsigned pins;                    /* lookups not given back (shares_unpin) */
	size_t part[BUDGET_SLICES];       /* account.part: held per loop */
	char principal[];                 /* NUL-terminated */
};

struct shares {
	struct share **b;
	size_t nb;                        /* buckets: a power of two */
	size_t n;                         /* accounts */
	struct share *idle;               /* went idle since the last sweep
	                                   * (each looked at again: it may be
	                                   * busy by then) */
	size_t work;                      /* accounts looked at (shares_work) */
};

/* With two loops or more, budget.mu guards the table, the idle list,
 * pins, and the accounts' used and holders. */
static void
shares_lock(struct gateway *gw)
{
	if (gw->budget.mu != NULL)
		pthread_mutex_lock(gw->budget.mu);
}

static void
shares_unlock(struct gateway *gw)
{
	if (gw->budget.mu != NULL)
		pthread_mutex_unlock(gw->budget.mu);
}

static struct share *
share_of(struct budget_account *a)
{
	return (struct share *)(void *)((char *)a - offsetof(struct share, account));
}

/* FNV-1a over the principal. */
static size_t
share_hash(const char *principal)
{
	uint32_t h = 2166136261u;

	for (; *principal != '\0'; principal++)
		h = (h ^ (uint8_t)*principal) * 16777619u;
	return h;
}

static int
share_is_idle(const struct share *s)
{
	return s->account.used == 0 && s->account.holders == 0 && s->pins == 0;
}

/* s may be idle now: onto the idle list, once.  Under the lock. */
static void
share_went_idle(struct share *s)
{
	struct shares *t = s->table;

	if (s->on_idle || !share_is_idle(s))
		return;
	s->on_idle = 1;
	s->idle_next = t->idle;
	t->idle = s;
}

/* The budget's hook (budget_account.idle), under budget.mu: a charge
 * released or a connection gone left the account's used and holders 0. */
static void
account_idle(struct budget_account *a)
{
	share_went_idle(share_of(a));
}

/* s out of its bucket and freed.  Under the lock. */
static void
share_free(struct shares *t, struct share *s)
{
	struct share **pp = &t->b[share_hash(s->principal) & (t->nb - 1)];

	while (*pp != s) {
		pp = &(*pp)->next;
		t->work++;
	}
	*pp = s->next;
	t->n--;
	free(s);
}

/* The gc: frees the accounts nothing is charged to, no connection holds
 * (budget_hold_charge) and no caller pinned: those on the idle list that
 * are still idle.  Under the lock. */
static void
sweep(struct shares *t)
{
	struct share *s;

	while ((s = t->idle) != NULL) {
		t->work++;
		t->idle = s->idle_next;
		s->on_idle = 0;
		if (share_is_idle(s))
			share_free(t, s);
	}
}

/* Twice the buckets, when the accounts are twice the buckets (out of
 * memory: the chains just grow longer).  Under the lock. */
static void
grow(struct shares *t)
{
	size_t nb = t->nb * 2;
	struct share **b, *s, *next;

	if (t->n < 2 * t->nb || (b = calloc(nb, sizeof(*b))) == NULL)
		return;
	for (size_t i = 0; i < t->nb; i++)
		for (s = t->b[i]; s != NULL; s = next) {
			t->work++;
			next = s->next;
			s->next = b[share_hash(s->principal) & (nb - 1)];
			b[share_hash(s->principal) & (nb - 1)] = s;
		}
	free(t->b);
	t->b = b;
	t->nb = nb;
}

/* The gateway's table, made at its first use; NULL when out of memory.
 * Under the lock. */
static struct shares *
table(struct gateway *gw)
{
	struct shares *t = gw->shares;

	if (t != NULL)
		return t;
	if ((t = calloc(1, sizeof(*t))) == NULL ||
	    (t->b = calloc(SHARES_BUCKETS_MIN, sizeof(*t->b))) == NULL) {
		free(t);
		return NULL;
	}
	t->nb = SHARES_BUCKETS_MIN;
	gw->shares = t;
	return t;
}

/* A new account for principal in bucket *head; NULL when out of memory.
 * Under the lock. */
static struct share *
share_new(struct gateway *gw, struct shares *t, struct share **head,
    const char *principal)
{
	size_t n = strlen(principal);
	struct share *s = calloc(1, sizeof(*s) + n + 1);

	if (s == NULL)
		return NULL;
	memcpy(s->principal, principal, n + 1);
	s->table = t;
	s->account.limit = gw->budget.principal_share;
	s->account.admin = strncmp(principal, "admin:", 6) == 0;
	s->account.part = s->part;
	s->account.idle = account_idle;
	s->next = *head;
	*head = s;
	t->n++;
	return s;
}

struct budget_account *
shares_principal(struct gateway *gw, const char *principal)
{
	struct shares *t;
	struct share *s = NULL;
	size_t h = share_hash(principal);

	shares_lock(gw);
	if ((t = table(gw)) != NULL) {
		for (s = t->b[h & (t->nb - 1)]; s != NULL; s = s->next) {
			t->work++;
			if (strcmp(s->principal, principal) == 0)
				break;
		}
		if (s != NULL)
			s->pins++;
		sweep(t);
		if (s == NULL) {
			grow(t);
			if ((s = share_new(gw, t, &t->b[h & (t->nb - 1)],
			    principal)) != NULL)
				s->pins++;
		}
	}
	shares_unlock(gw);
	return s != NULL ? &s->account : NULL;
}

void
shares_unpin(struct gateway *gw, struct budget_account *account)
{
	struct share *s;

	if (account == NULL)
		return;
	s = share_of(account);
	shares_lock(gw);
	s->pins--;
	share_went_idle(s);
	shares_unlock(gw);
}

size_t
shares_count(struct gateway *gw)
{
	size_t n;

	shares_lock(gw);
	n = gw->shares != NULL ? gw->shares->n : 0;
	shares_unlock(gw);
	return n;
}

size_t
shares_work(struct gateway *gw)
{
	size_t n;

	shares_lock(gw);
	n = gw->shares != NULL ? gw->shares->work : 0;
	shares_unlock(gw);
	return n;
}

void
shares_free_all(struct gateway *gw)
{
	struct shares *t = gw->shares;
	struct share *s;

	if (t == NULL)
		return;
	/* Streams still charged at shutdown: the accounts go with them. */
	for (size_t i = 0; i < t->nb; i++)
		while ((s = t->b[i]) != NULL) {
			t->b[i] = s->next;
			free(s);
		}
	free(t->b);
	free(t);
	gw->shares = NULL;
}
