/*
 * shares.h: the principals' accounts in the gateway's stream budget
 * (common/budget.h, docs/0006-streams.md "Fair shares").
 *
 * A principal is who a stream is for: "user:NAME" or "admin:TOKEN_ID" (the
 * audit lines' who=).  Each holds at most --principal-share bytes of
 * windows; "admin:" principals may also use the admin reserve.  Its
 * connections together hold at most --memory-share bytes of queued output
 * and buffers (budget_holder, docs/0036).  An account exists while
 * streams are charged to it or connections hold it (budget_hold_charge):
 * one with neither is freed at the next lookup, so callers look one up
 * right before they charge it (mux_open, mux_stream_accept,
 * wsface_charge_to) and never keep the pointer otherwise.
 *
 * Costs: one small allocation per principal with streams open; a lookup
 * walks them all (O(principals with streams)).
 */
#ifndef TETHER_SHARES_H
#define TETHER_SHARES_H

struct gateway;
struct budget_account;

/* The account of principal, made if needed.  Valid until the next call;
 * NULL when out of memory. */
struct budget_account *shares_principal(struct gateway *gw, const char *principal);
/* Frees every account (shutdown, after every stream ended). */
void shares_free_all(struct gateway *gw);

#endif
