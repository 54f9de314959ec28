/*
 * shares.h: the principals' accounts in the gateway's stream budget
 * (common/budget.h, docs/0006-streams.md "Fair shares").
 *
 * A principal is who a stream is for: "user:NAME" or "admin:TOKEN_ID" (the
 * audit lines' who=).  Each holds at most --principal-share bytes of
 * windows; "admin:" principals may also use the admin reserve.  Its
 * connections together hold at most --memory-share bytes of queued output
 * and buffers (budget_holder, docs/0036).  An account exists while
 * streams are charged to it, connections hold it (budget_hold_charge) or
 * a caller pinned it: one with none of these is freed at the next lookup
 * (from any loop; the budget tells when a charge or a connection leaves
 * one with none: budget_account.idle).
 *
 * Threads (docs/0040): with two loops or more (gw->budget.mu set) the
 * table, the lookup, the insert and that sweep are under budget.mu, the
 * mutex budget_take and budget_hold_charge charge under, so an account a
 * loop found stays until it charged it: shares_principal returns it
 * pinned, and the caller, once it charged it (mux_open,
 * mux_stream_accept, wsface_charge_to) or gave up, calls shares_unpin.
 * From then on the charge (its `used`, its `holders`) keeps it, until the
 * stream's charge ends or the connection leaves it.
 *
 * Costs: one small allocation per principal with streams open (and
 * BUDGET_SLICES words for its per-loop parts), and a hash table of at most
 * one bucket pointer per account at the most there were (64 at least; it
 * does not shrink).  A lookup is one bucket's chain plus freeing the
 * accounts that went idle since the last (O(1) expected, amortised), an
 * unpin O(1), under the mutex; with 10,000 principals 0.6 us a lookup,
 * where walking them all took 318 us (tether-shares-bench).
 */
#ifndef TETHER_SHARES_H
#define TETHER_SHARES_H

#include <stddef.h>

struct gateway;
struct budget_account;

/* The account of principal, made if needed, pinned: valid until
 * shares_unpin, which the caller calls once it charged the account (or
 * not).  NULL when out of memory.  Any loop. */
struct budget_account *shares_principal(struct gateway *gw, const char *principal);
/* Gives back the pin of shares_principal (a NULL account: nothing).  The
 * account may be freed by the next lookup unless something charged it. */
void shares_unpin(struct gateway *gw, struct budget_account *account);
/* How many accounts exist now (pinned, charged or not yet swept).  Any
 * loop; O(1) under the mutex. */
size_t shares_count(struct gateway *gw);
/* Accounts the lookups have looked at so far (each compared in a bucket,
 * freed by a sweep or moved by a doubling): the lookups' cost, for tests
 * and benchmarks.  Any loop; O(1) under the mutex. */
size_t shares_work(struct gateway *gw);
/* Frees every account (shutdown, after every stream ended and every
 * loop thread was joined). */
void shares_free_all(struct gateway *gw);

#endif
