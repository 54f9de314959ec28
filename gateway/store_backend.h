/*
 * store_backend.h: what store.c (which picks a backend from the store URL)
 * needs from each backend.  Private to gateway/store*.c: callers go
 * through store.h's store_open.
 */
#ifndef TETHER_STORE_BACKEND_H
#define TETHER_STORE_BACKEND_H

#include <stddef.h>

#include "store.h"

/*
 * The SQLite backend (store_sqlite.c): opens or creates the database at
 * path (":memory:" for a private in-memory one), 0600, WAL mode, schema
 * migrated.  STORE_OK with *out set, or STORE_ERR with a reason in err.
 */
int store_sqlite_open(const char *path, struct store **out, char *err,
    size_t errlen);

#endif
