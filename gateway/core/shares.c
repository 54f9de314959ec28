/* shares.c: the principals' accounts in the stream budget (see shares.h). */
#include "shares.h"

#include <stdlib.h>
#include <string.h>

#include "budget.h"
#include "gateway.h"

struct share {
	struct share *next;
	struct budget_account account;
	char principal[];                 /* NUL-terminated */
};

/* Frees the accounts nothing is charged to and no connection holds
 * (budget_hold_charge), but keep. */
static void
sweep(struct gateway *gw, const struct share *keep)
{
	struct share **pp = &gw->shares, *s;

	while ((s = *pp) != NULL) {
		if (s->account.used == 0 && s->account.holders == 0 && s != keep) {
			*pp = s->next;
			free(s);
		} else
			pp = &s->next;
	}
}

struct budget_account *
shares_principal(struct gateway *gw, const char *principal)
{
	struct share *s;
	size_t n = strlen(principal);

	for (s = gw->shares; s != NULL; s = s->next)
		if (strcmp(s->principal, principal) == 0)
			break;
	sweep(gw, s);
	if (s != NULL)
		return &s->account;
	s = calloc(1, sizeof(*s) + n + 1);
	if (s == NULL)
		return NULL;
	memcpy(s->principal, principal, n + 1);
	s->account.limit = gw->budget.principal_share;
	s->account.admin = strncmp(principal, "admin:", 6) == 0;
	s->next = gw->shares;
	gw->shares = s;
	return &s->account;
}

void
shares_free_all(struct gateway *gw)
{
	sweep(gw, NULL);
	/* Streams still charged at shutdown: the accounts go with them. */
	while (gw->shares != NULL) {
		struct share *s = gw->shares;

		gw->shares = s->next;
		free(s);
	}
}
