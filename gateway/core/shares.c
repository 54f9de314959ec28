/* shares.c: the principals' accounts in the stream budget (see shares.h). */
#include "shares.h"

#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "budget.h"
#include "gateway.h"

struct share {
	struct share *next;
	struct budget_account account;
	unsigned pins;                    /* lookups not given back (shares_unpin) */
	size_t part[BUDGET_SLICES];       /* account.part: held per loop */
	char principal[];                 /* NUL-terminated */
};

/* With two loops or more, budget.mu guards the list, pins, and the
 * accounts' used and holders. */
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

/* The gc: frees the accounts nothing is charged to, no connection holds
 * (budget_hold_charge) and no caller pinned.  Under the lock. */
static void
sweep(struct gateway *gw)
{
	struct share **pp = &gw->shares, *s;

	while ((s = *pp) != NULL) {
		if (s->account.used == 0 && s->account.holders == 0 && s->pins == 0) {
			*pp = s->next;
			free(s);
		} else
			pp = &s->next;
	}
}

/* A new account for principal, first in the list; NULL when out of
 * memory.  Under the lock. */
static struct share *
share_new(struct gateway *gw, const char *principal)
{
	size_t n = strlen(principal);
	struct share *s = calloc(1, sizeof(*s) + n + 1);

	if (s == NULL)
		return NULL;
	memcpy(s->principal, principal, n + 1);
	s->account.limit = gw->budget.principal_share;
	s->account.admin = strncmp(principal, "admin:", 6) == 0;
	s->account.part = s->part;
	s->next = gw->shares;
	gw->shares = s;
	return s;
}

struct budget_account *
shares_principal(struct gateway *gw, const char *principal)
{
	struct share *s;

	shares_lock(gw);
	for (s = gw->shares; s != NULL; s = s->next)
		if (strcmp(s->principal, principal) == 0)
			break;
	if (s != NULL)
		s->pins++;
	sweep(gw);
	if (s == NULL && (s = share_new(gw, principal)) != NULL)
		s->pins++;
	shares_unlock(gw);
	return s != NULL ? &s->account : NULL;
}

void
shares_unpin(struct gateway *gw, struct budget_account *account)
{
	struct share *s;

	if (account == NULL)
		return;
	s = (struct share *)(void *)((char *)account - offsetof(struct share, account));
	shares_lock(gw);
	s->pins--;
	shares_unlock(gw);
}

size_t
shares_count(struct gateway *gw)
{
	const struct share *s;
	size_t n = 0;

	shares_lock(gw);
	for (s = gw->shares; s != NULL; s = s->next)
		n++;
	shares_unlock(gw);
	return n;
}

void
shares_free_all(struct gateway *gw)
{
	shares_lock(gw);
	sweep(gw);
	shares_unlock(gw);
	/* Streams still charged at shutdown: the accounts go with them. */
	while (gw->shares != NULL) {
		struct share *s = gw->shares;

		gw->shares = s->next;
		free(s);
	}
}
