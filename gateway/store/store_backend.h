/*
 * store_backend.h: the private interface between store.c (the store's
 * rules, backend-neutral) and each backend (store_sqlite.c, store_pg.c).
 * Private to gateway/store*.c: everyone else goes through store.h.
 *
 * A backend does one thing: run a statement.  A statement is SQL text with
 * '?' placeholders, typed parameters and a row callback that reads typed
 * columns through the backend's accessors.  Transactions are three more
 * calls (begin, commit, rollback), and the schema is one definition
 * (store_schema.c) that each backend's dialect spells.
 */
#ifndef TETHER_STORE_BACKEND_H
#define TETHER_STORE_BACKEND_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "store.h"

/* ---- statements ---------------------------------------------------------- */

enum store_ptype {
	SP_TEXT,          /* NUL-terminated text */
	SP_TEXT_OR_NULL,  /* "" or NULL is bound as SQL NULL */
	SP_INT,           /* 64-bit integer */
	SP_KEY,           /* a 32-byte blob (key, verifier) */
};

/* One parameter, bound to the next '?' in order. */
struct store_param {
	enum store_ptype type;
	const char *text;
	int64_t i;
	const uint8_t *key;
};

#define P_TEXT(s)         { .type = SP_TEXT, .text = (s) }
#define P_TEXT_OR_NULL(s) { .type = SP_TEXT_OR_NULL, .text = (s) }
#define P_INT(v)          { .type = SP_INT, .i = (int64_t)(v) }
#define P_KEY(k)          { .type = SP_KEY, .key = (k) }
/* Inside a struct store_stmt initializer: .params and .nparams at once. */
#define PARAMS(...) \
	.params = (const struct store_param[]){ __VA_ARGS__ }, \
	.nparams = sizeof((const struct store_param[]){ __VA_ARGS__ }) / \
	    sizeof(struct store_param)

#define STORE_STMT_LOCK 0x1  /* lock the rows read until the transaction
                              * ends (PostgreSQL: FOR UPDATE; SQLite's
                              * BEGIN IMMEDIATE already holds the lock) */
#define STORE_STMT_DEFER 0x4  /* inside a transaction, a write whose
                              * changes and violation no one reads: the
                              * backend may send it with what follows
                              * (PostgreSQL: with the COMMIT, one round
                              * trip) and fail that instead */
#define STORE_STMT_WRITES 0x2 /* a statement that does not start with INSERT,
                              * UPDATE or DELETE and still writes (a
                              * function): never sent twice */

struct store_stmt {
	const char *sql;      /* constant text, '?' placeholders, no '?' else */
	const char *what;     /* for errors: "read agent", "insert token" */
	const struct store_param *params;
	size_t nparams;
	unsigned flags;       /* STORE_STMT_* */
};

/* A constraint a failed write ran into (struct store_outcome). */
enum store_violation {
	STORE_V_NONE = 0,
	STORE_V_PRIMARY_KEY,
	STORE_V_UNIQUE,       /* a unique constraint other than the primary key */
	STORE_V_FOREIGN_KEY,
	STORE_V_OTHER,        /* a CHECK or NOT NULL */
};

struct store_outcome {
	int64_t changes;      /* rows inserted, updated or deleted */
	enum store_violation violation;
};

/* The row being read: columns are read through the backend's accessors
 * (store_col_* in store.c).  Valid only inside the row callback. */
struct store_row {
	const struct store_backend *be;
	void *impl;
	int index;            /* backend's row number, if it needs one */
};

/* Reads one row.  Returns 0, or -1 for a malformed row (the statement then
 * fails with "malformed ... row"). */
typedef int store_row_fn(const struct store_row *row, void *arg);

/* ---- the backend --------------------------------------------------------- */

/* How a backend spells the parts of the schema that differ (store_schema.c
 * expands them in the one definition of every migration). */
struct store_dialect {
	const char *integer;     /* a 64-bit integer column */
	const char *blob;        /* a byte string column */
	const char *table_end;   /* what closes CREATE TABLE */
	const char *rowid;       /* an insertion-order column "rowid", or "" if
	                          * the engine has one built in */
	const char *notify;      /* triggers announcing changes to other
	                          * replicas (docs/0021), or "" */
	const char *now_ms;      /* the database's clock, Unix ms, as a BIGINT
	                          * expression (leases: store.c's {NOW}) */
	const char *notify_tunnels;  /* the trigger announcing a tunnel's
	                          * record moved (docs/0023), or "" */
	const char *notify_keys; /* the trigger announcing an agent asked to
	                          * rotate its key (schema 7), or "" */
	const char *notify_settings; /* the trigger announcing a gateway
	                          * setting changed (docs/0031), or "" */
	const char *register_fn; /* a server-side function tether_register
	                          * running store_agent_register's rules in
	                          * one statement (docs/0038), or "" / NULL:
	                          * the rules run statement by statement */
};

struct store_backend {
	const char *name;                 /* "sqlite", "postgres" */
	const struct store_dialect *dialect;
	/*
	 * Runs one statement; fn (may be NULL) is called for each row, in order.
	 * Returns STORE_OK, or STORE_ERR / STORE_FULL with err ("what: reason").
	 * out (may be NULL) gets the changes and, on failure, the violation.
	 */
	int (*run)(struct store *s, const struct store_stmt *q, store_row_fn *fn,
	    void *arg, struct store_outcome *out, char *err, size_t errlen);
	/* Runs constant SQL, possibly several statements (the migrations). */
	int (*exec)(struct store *s, const char *sql, const char *what,
	    char *err, size_t errlen);
	/*
	 * Begins a transaction in which rules read then write: a backend either
	 * serializes writers (SQLite) or the rules lock the rows they read
	 * (STORE_STMT_LOCK).  migrating: the one that applies migrations, which
	 * several processes may start at once; it must let only one at a time in.
	 */
	int (*begin)(struct store *s, bool migrating, char *err, size_t errlen);
	int (*commit)(struct store *s, char *err, size_t errlen);
	void (*rollback)(struct store *s);    /* logs its own failure */
	/* Whether a transaction is open on s (the engine may end one on its
	 * own: SQLite rolls back on a full disk).  NULL for a backend that
	 * runs no groups (store_group_begin). */
	bool (*in_transaction)(struct store *s);
	/* Column accessors; col counts from 0. */
	bool (*col_null)(const struct store_row *r, int col);
	int64_t (*col_int)(const struct store_row *r, int col);
	/* Copies text into dst (dstlen incl. the NUL); -1 if it does not fit. */
	int (*col_text)(const struct store_row *r, int col, char *dst,
	    size_t dstlen);
	/* Copies a 32-byte blob; -1 if it is not 32 bytes. */
	int (*col_key)(const struct store_row *r, int col, uint8_t dst[32]);
	/* Frees the connection and s->impl (not s). */
	void (*close)(struct store *s);
};

/* Where s stands with a group (store_group_begin). */
enum store_group_state {
	STORE_GROUP_NONE = 0,  /* no group: each call is its own transaction */
	STORE_GROUP_OPEN,      /* in a group: each call is a savepoint */
	STORE_GROUP_BROKEN,    /* the group's transaction ended under it: every
	                        * call fails until store_group_end */
};

/* What every backend shares; impl is the backend's own connection. */
struct store {
	const struct store_backend *be;
	void *impl;
	int version;          /* schema version after migration */
	store_timing_fn *timing;  /* store_set_timing's hook, or NULL */
	void *timing_arg;
	enum store_group_state group;  /* store_group_begin's, else NONE */
};

/*
 * Opens a backend connection into s (s->be and s->impl set) from the rest
 * of the store URL (after the scheme).  The schema is not touched: store.c
 * migrates once the connection is up.  STORE_OK, or STORE_ERR with err.
 */
int store_sqlite_connect(const char *path, struct store *s, char *err,
    size_t errlen);
/* The PostgreSQL backend (store_pg.c): url is the whole postgres:// or
 * postgresql:// URL, as libpq reads it. */
int store_pg_connect(const char *url, struct store *s, char *err,
    size_t errlen);
/* The PostgreSQL channel the schema's triggers notify on and every replica
 * listens to (store_listen.h, docs/0021). */
#define STORE_PG_CHANNEL "tether"

/*
 * Ends the transaction begun with be->begin: commits when rc is STORE_OK,
 * else rolls back.  Returns the final result (a failed commit's).
 */
int store_finish(struct store *s, int rc, char *err, size_t errlen);

/* ---- groups: many calls, one commit (docs/0039) -------------------------- */

/*
 * Whether s's backend runs groups (SQLite: one writer, whose commit is the
 * cost; not PostgreSQL, whose row locks a group would hold across calls).
 */
bool store_group_able(const struct store *s);

/*
 * Opens a group on s: one transaction (the backend's begin, so SQLite's
 * write lock) in which each of s's calls runs as a savepoint, committed
 * or rolled back alone as it would be alone (a failed call leaves the
 * others), and a statement run outside a call is part of the group.
 * Nothing is durable, and no caller may be told a result, until
 * store_group_end commits.  STORE_OK, or STORE_ERR with err (no group).
 * Only when store_group_able; groups do not nest.
 */
int store_group_begin(struct store *s, char *err, size_t errlen);

/* Whether s's group still holds every call made in it since
 * store_group_begin (false once the engine rolled it back on its own:
 * every call since fails, and the group's work is lost). */
bool store_group_whole(struct store *s);

/*
 * Ends s's group: commits it when it is whole, else rolls back what is
 * left.  STORE_OK when every call of the group is committed; otherwise
 * STORE_ERR/STORE_FULL with err and none is (each must be made again,
 * alone, for its answer to be true).  s is out of the group either way.
 * Timed as "group_end" (store_set_timing).
 */
int store_group_end(struct store *s, char *err, size_t errlen);

/* ---- the schema (store_schema.c) ---------------------------------------- */

/* The version the migrations bring a database to. */
int store_schema_latest(void);

/*
 * Brings s's schema up to store_schema_latest() inside the transaction the
 * caller (store_open) opened with be->begin(migrating) and ends with
 * store_finish, so a failed migration leaves the database as it was and
 * several processes starting at once migrate one after the other, the
 * later ones finding nothing to do.  Sets s->version.
 */
int store_schema_migrate(struct store *s, char *err, size_t errlen);

#endif
