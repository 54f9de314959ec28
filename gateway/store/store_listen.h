/*
 * store_listen.h: hearing, on the event loop, what other replicas changed
 * in a shared PostgreSQL store (docs/0021).
 *
 * The schema's triggers (store_schema.c, migration 4) notify the channel
 * STORE_PG_CHANNEL when an agent's state changes ("agent:<id>") and when a
 * token is revoked ("token:<id>"), in the changing transaction, so every
 * replica hears each committed change, its own included.  The listener is
 * one libpq connection driven asynchronously on the loop (PQconnectPoll,
 * an event on its socket, PQconsumeInput, PQnotifies): it never blocks the
 * loop, except for libpq resolving a host name (give an address, or a
 * name /etc/hosts answers).  Lost, it reconnects by itself with backoff
 * (STORE_LISTEN_BACKOFF_MIN_MS doubling to STORE_LISTEN_BACKOFF_MAX_MS),
 * each attempt bounded by STORE_LISTEN_CONNECT_MS.
 *
 * Costs: one connection per replica; one callback per notice.  libpq
 * queues notices the loop has not read yet, bounded by what the server
 * sends between two loop turns.
 */
#ifndef TETHER_STORE_LISTEN_H
#define TETHER_STORE_LISTEN_H

#include <stddef.h>

#define STORE_LISTEN_CONNECT_MS     5000
#define STORE_LISTEN_BACKOFF_MIN_MS 500
#define STORE_LISTEN_BACKOFF_MAX_MS 5000

struct event_base;
struct store_listener;

/*
 * What the listener hands the loop: one notice's payload ("agent:<id>",
 * "token:<id>"; from the server: treat as untrusted text), or NULL when it
 * has just started listening (first or again): anything may have been
 * missed while it was not.
 */
typedef void store_notice_fn(const char *payload, void *arg);

/*
 * Starts listening to url's store from base's loop; fn(payload, arg) is
 * called on the loop.  A store that is not PostgreSQL has nobody else to
 * hear (one gateway): 0 with *out NULL.  0, or -1 with err (out of memory).
 */
int store_listen_start(struct event_base *base, const char *url,
    store_notice_fn *fn, void *arg, struct store_listener **out, char *err,
    size_t errlen);

/* NULL while listening; else why not ("connecting", "connection lost:
 * ..."), valid until the loop runs again.  NULL for l NULL. */
const char *store_listen_problem(const struct store_listener *l);

/* Closes the connection and frees l.  NULL is allowed. */
void store_listen_stop(struct store_listener *l);

#endif
