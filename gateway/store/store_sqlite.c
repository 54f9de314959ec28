/*
 * store_sqlite.c: the SQLite backend of the store (store_backend.h): runs
 * statements on one connection per struct store.
 *
 * WAL mode, so that readers (a second gateway process, tetherctl on the
 * same host, a backup) never block the writer.  Every value reaches SQL
 * through a bound parameter; the only SQL text run without binding is
 * constant (pragmas, migrations).  A transaction starts with BEGIN
 * IMMEDIATE, which takes the write lock up front: two gateways cannot both
 * see "no agent for this node" and both insert one, and two starting at
 * once migrate one after the other.
 */
#include <errno.h>
#include <stdbool.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <sqlite3.h>

#include "log.h"
#include "store_backend.h"

#define BUSY_TIMEOUT_MS 5000
#define MEMORY_PATH     ":memory:"

#define STMT_CACHE 32             /* prepared statements kept per connection */

/*
 * A connection (struct store's impl): the database and the statements
 * already prepared, so that a query run again (the cluster check of every
 * proxied request) is not parsed and planned again.  A cached statement is
 * reset as soon as it has run (no read transaction stays open), and found
 * by its SQL text (the pointer first, then the text, so that SQL built in
 * a reused buffer never runs the wrong statement).  Costs 32 pointers and
 * SQLite's memory for at most 32 statements.
 */
struct sqlite_conn {
	sqlite3 *db;
	struct {
		const char *sql;          /* the caller's text (compared by pointer, then text) */
		sqlite3_stmt *st;
		int busy;                 /* stepping: a nested run prepares its own */
	} cache[STMT_CACHE];
	unsigned next;                /* the entry replaced next, round robin */
};

#define DB(s) (((struct sqlite_conn *)(s)->impl)->db)
#define ST(r) ((sqlite3_stmt *)(r)->impl)

/* ---- failures ------------------------------------------------------------ */

/* STORE_FULL when SQLite could not write for want of space (SQLITE_FULL,
 * or an I/O error whose cause was ENOSPC), else STORE_ERR. */
static int
failure_code(sqlite3 *db)
{
	int ext = sqlite3_extended_errcode(db);

	if ((ext & 0xff) == SQLITE_FULL)
		return STORE_FULL;
	if ((ext & 0xff) == SQLITE_IOERR && sqlite3_system_errno(db) == ENOSPC)
		return STORE_FULL;
	return STORE_ERR;
}

static int
db_fail(sqlite3 *db, const char *what, const char *msg, char *err,
    size_t errlen)
{
	int rc = failure_code(db);

	snprintf(err, errlen, "%s: %s%s", what,
	    msg != NULL ? msg : sqlite3_errmsg(db),
	    rc == STORE_FULL ? " (no space left for the store)" : "");
	return rc;
}

static enum store_violation
violation(sqlite3 *db)
{
	switch (sqlite3_extended_errcode(db)) {
	case SQLITE_CONSTRAINT_PRIMARYKEY:
		return STORE_V_PRIMARY_KEY;
	case SQLITE_CONSTRAINT_UNIQUE:
		return STORE_V_UNIQUE;
	case SQLITE_CONSTRAINT_FOREIGNKEY:
		return STORE_V_FOREIGN_KEY;
	default:
		return (sqlite3_errcode(db) == SQLITE_CONSTRAINT) ?
		    STORE_V_OTHER : STORE_V_NONE;
	}
}

/* ---- statements ---------------------------------------------------------- */

static int
bind_one(sqlite3_stmt *st, int idx, const struct store_param *p)
{
	switch (p->type) {
	case SP_TEXT_OR_NULL:
		/* How optional references (a token's cluster) are kept, so
		 * that the foreign key only applies when there is one. */
		if (p->text == NULL || *p->text == '\0')
			return sqlite3_bind_null(st, idx);
		/* FALLTHROUGH */
	case SP_TEXT:
		return sqlite3_bind_text(st, idx, p->text, -1, SQLITE_TRANSIENT);
	case SP_INT:
		return sqlite3_bind_int64(st, idx, p->i);
	case SP_KEY:
		return sqlite3_bind_blob(st, idx, p->key, 32, SQLITE_TRANSIENT);
	}
	return SQLITE_MISUSE;
}

/* Steps st to its end, calling fn on each row. */
static int
step_all(struct store *s, sqlite3_stmt *st, const struct store_stmt *q,
    store_row_fn *fn, void *arg, struct store_outcome *out, char *err,
    size_t errlen)
{
	struct store_row row = { .be = s->be, .impl = st };
	int r;

	while ((r = sqlite3_step(st)) == SQLITE_ROW) {
		if (fn != NULL && fn(&row, arg) == -1) {
			snprintf(err, errlen, "%s: malformed row", q->what);
			return STORE_ERR;
		}
		row.index++;
	}
	if (r != SQLITE_DONE) {
		if (out != NULL)
			out->violation = violation(DB(s));
		return db_fail(DB(s), q->what, NULL, err, errlen);
	}
	if (out != NULL)
		out->changes = sqlite3_changes(DB(s));
	return STORE_OK;
}

/* The cache entry holding sql's statement, or -1. */
static int
stmt_find(struct sqlite_conn *c, const char *sql)
{
	for (int i = 0; i < STMT_CACHE; i++)
		if (c->cache[i].st != NULL && c->cache[i].sql == sql &&
		    strcmp(sqlite3_sql(c->cache[i].st), sql) == 0)
			return i;
	return -1;
}

/* A statement for sql: the cached one (*slot its entry, marked busy), or
 * a new one, cached when it can be (*slot -1: the caller finalizes it). */
static int
stmt_get(struct sqlite_conn *c, const char *sql, sqlite3_stmt **st, int *slot)
{
	int i = stmt_find(c, sql);

	*slot = -1;
	if (i >= 0 && !c->cache[i].busy) {
		*st = c->cache[i].st;
		c->cache[i].busy = 1;
		*slot = i;
		return SQLITE_OK;
	}
	if (sqlite3_prepare_v3(c->db, sql, -1, i >= 0 ? 0 : SQLITE_PREPARE_PERSISTENT,
	    st, NULL) != SQLITE_OK)
		return SQLITE_ERROR;
	if (i >= 0)
		return SQLITE_OK;      /* nested run of a busy statement: its own */
	i = (int)(c->next++ % STMT_CACHE);
	if (c->cache[i].busy)
		return SQLITE_OK;      /* every entry busy: not cached */
	sqlite3_finalize(c->cache[i].st);
	c->cache[i].sql = sql;
	c->cache[i].st = *st;
	c->cache[i].busy = 1;
	*slot = i;
	return SQLITE_OK;
}

/* Done with a statement from stmt_get. */
static void
stmt_put(struct sqlite_conn *c, sqlite3_stmt *st, int slot)
{
	if (slot < 0) {
		sqlite3_finalize(st);
		return;
	}
	sqlite3_reset(st);
	sqlite3_clear_bindings(st);
	c->cache[slot].busy = 0;
}

static int
sqlite_run(struct store *s, const struct store_stmt *q, store_row_fn *fn,
    void *arg, struct store_outcome *out, char *err, size_t errlen)
{
	struct sqlite_conn *c = s->impl;
	sqlite3_stmt *st = NULL;
	size_t i;
	int rc, slot;

	if (out != NULL)
		*out = (struct store_outcome){ 0 };
	if (stmt_get(c, q->sql, &st, &slot) != SQLITE_OK)
		return db_fail(DB(s), q->what, NULL, err, errlen);
	for (i = 0; i < q->nparams; i++) {
		if (bind_one(st, (int)i + 1, &q->params[i]) != SQLITE_OK) {
			rc = db_fail(DB(s), q->what, NULL, err, errlen);
			stmt_put(c, st, slot);
			return rc;
		}
	}
	rc = step_all(s, st, q, fn, arg, out, err, errlen);
	stmt_put(c, st, slot);
	return rc;
}

/* Whether sql is one transaction-control statement (BEGIN, COMMIT,
 * SAVEPOINT, RELEASE, ROLLBACK TO): every call that writes runs two
 * (its transaction's, or its savepoint's in a group), so they run
 * prepared once, from the statement cache (docs/0045). */
static bool
control_stmt(const char *sql)
{
	static const char *const verbs[] = { "BEGIN ", "COMMIT", "SAVEPOINT ",
	    "RELEASE ", "ROLLBACK TO " };

	if (strchr(sql, ';') != NULL)
		return false;
	for (size_t i = 0; i < sizeof(verbs) / sizeof(verbs[0]); i++)
		if (strncmp(sql, verbs[i], strlen(verbs[i])) == 0)
			return true;
	return false;
}

/* Runs constant SQL (no values in it: those are always bound): a
 * transaction's control from the statement cache, anything else (pragmas,
 * migrations of several statements) through sqlite3_exec. */
static int
sqlite_exec(struct store *s, const char *sql, const char *what, char *err,
    size_t errlen)
{
	char *msg = NULL;
	int rc;

	if (control_stmt(sql))
		return sqlite_run(s, &(struct store_stmt){ .sql = sql,
		    .what = what }, NULL, NULL, NULL, err, errlen);
	if (sqlite3_exec(DB(s), sql, NULL, NULL, &msg) == SQLITE_OK)
		return STORE_OK;
	rc = db_fail(DB(s), what, msg, err, errlen);
	sqlite3_free(msg);
	return rc;
}

/* BEGIN IMMEDIATE: take the write lock now, waiting up to the busy timeout,
 * rather than failing half way through when a read turns into a write.  It
 * serializes migrations too, so migrating needs nothing more. */
static int
sqlite_begin(struct store *s, bool migrating, char *err, size_t errlen)
{
	(void)migrating;
	return sqlite_exec(s, "BEGIN IMMEDIATE", "begin transaction", err,
	    errlen);
}

static void
sqlite_rollback(struct store *s)
{
	char *msg = NULL;

	/* SQLite may already have rolled back on its own (e.g. SQLITE_FULL). */
	if (sqlite3_get_autocommit(DB(s)))
		return;
	if (sqlite3_exec(DB(s), "ROLLBACK", NULL, NULL, &msg) != SQLITE_OK) {
		error("store rollback failed",
		    KV_S("err", msg != NULL ? msg : sqlite3_errmsg(DB(s))));
		sqlite3_free(msg);
	}
}

static int
sqlite_commit(struct store *s, char *err, size_t errlen)
{
	return sqlite_exec(s, "COMMIT", "commit", err, errlen);
}

/* SQLite ends a transaction on its own after some failures (a full disk,
 * an I/O error): a group (store_group_begin) must hear of it. */
static bool
sqlite_in_transaction(struct store *s)
{
	return !sqlite3_get_autocommit(DB(s));
}

/* ---- columns ------------------------------------------------------------- */

static bool
sqlite_col_null(const struct store_row *r, int col)
{
	return sqlite3_column_type(ST(r), col) == SQLITE_NULL;
}

static int64_t
sqlite_col_int(const struct store_row *r, int col)
{
	return sqlite3_column_int64(ST(r), col);
}

/* NULL reads as ""; -1 if the text does not fit, which only a database
 * edited by hand can cause. */
static int
sqlite_col_text(const struct store_row *r, int col, char *dst, size_t dstlen)
{
	const unsigned char *text = sqlite3_column_text(ST(r), col);
	int len = sqlite3_column_bytes(ST(r), col);

	if (text == NULL) {
		dst[0] = '\0';
		return 0;
	}
	if (len < 0 || (size_t)len >= dstlen)
		return -1;
	memcpy(dst, text, (size_t)len);
	dst[len] = '\0';
	return 0;
}

static int
sqlite_col_key(const struct store_row *r, int col, uint8_t dst[32])
{
	const void *blob = sqlite3_column_blob(ST(r), col);

	if (blob == NULL || sqlite3_column_bytes(ST(r), col) != 32)
		return -1;
	memcpy(dst, blob, 32);
	return 0;
}

static void
sqlite_close(struct store *s)
{
	struct sqlite_conn *c = s->impl;

	if (c == NULL)
		return;
	for (int i = 0; i < STMT_CACHE; i++)
		sqlite3_finalize(c->cache[i].st);
	/* Every other statement is finalized where it is run, so this
	 * cannot be busy; if it is, that is a leak worth hearing about. */
	if (c->db != NULL && sqlite3_close(c->db) != SQLITE_OK)
		error("closing the store failed", KV_S("err", sqlite3_errmsg(c->db)));
	free(c);
	s->impl = NULL;
}

static const struct store_dialect sqlite_dialect = {
	.integer = "INTEGER",
	.blob = "BLOB",
	.table_end = ") STRICT",
	.rowid = "",
	.notify = "",     /* one gateway: nobody else to tell */
	.notify_tunnels = "",
	.notify_keys = "",
	/* One host holds the file: its clock is the database's. */
	.now_ms = "CAST((julianday('now') - 2440587.5) * 86400000.0 AS INTEGER)",
	.notify_settings = "",
};

static const struct store_backend sqlite_backend = {
	.name = "sqlite",
	.dialect = &sqlite_dialect,
	.run = sqlite_run,
	.exec = sqlite_exec,
	.begin = sqlite_begin,
	.commit = sqlite_commit,
	.rollback = sqlite_rollback,
	.in_transaction = sqlite_in_transaction,
	.col_null = sqlite_col_null,
	.col_int = sqlite_col_int,
	.col_text = sqlite_col_text,
	.col_key = sqlite_col_key,
	.close = sqlite_close,
};

/* ---- opening ------------------------------------------------------------- */

/*
 * Creates the database file with mode 0600 before SQLite opens it: SQLite
 * would create it 0644 (less the umask), and it holds every agent's key
 * and token verifiers.  SQLite gives the -wal and -shm files the database
 * file's mode, so they follow.
 */
static int
create_private(const char *path, char *err, size_t errlen)
{
	int fd;

	if (strcmp(path, MEMORY_PATH) == 0)
		return STORE_OK;
	fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
	if (fd == -1) {
		snprintf(err, errlen, "cannot open %s: %s", path,
		    strerror(errno));
		return STORE_ERR;
	}
	close(fd);
	return STORE_OK;
}

static int
read_text(const struct store_row *row, void *arg)
{
	char *out = arg;

	return sqlite_col_text(row, 0, out, 32);
}

/* Runs a pragma that answers with one text row (up to 31 bytes). */
static int
pragma_text(struct store *s, const char *sql, char out[32], char *err,
    size_t errlen)
{
	out[0] = '\0';
	return sqlite_run(s, &(struct store_stmt){ .sql = sql, .what = sql },
	    read_text, out, NULL, err, errlen);
}

static int
configure(struct store *s, const char *path, char *err, size_t errlen)
{
	char val[32];

	/* Before anything else, so that even the switch to WAL waits for a
	 * second process rather than failing with "database is locked". */
	if (sqlite3_busy_timeout(DB(s), BUSY_TIMEOUT_MS) != SQLITE_OK)
		return db_fail(DB(s), "busy timeout", NULL, err, errlen);
	sqlite3_extended_result_codes(DB(s), 1);

	if (pragma_text(s, "PRAGMA journal_mode=WAL", val, err, errlen) !=
	    STORE_OK)
		return STORE_ERR;
	/* An in-memory database cannot use WAL and has nothing to share. */
	if (strcmp(val, "wal") != 0 && strcmp(path, MEMORY_PATH) != 0) {
		snprintf(err, errlen, "cannot enable WAL mode (journal_mode "
		    "is %s)", val);
		return STORE_ERR;
	}
	/* FULL: a commit is on the disk (the WAL synced) before the caller
	 * is answered, power loss included; NORMAL would lose the last
	 * commits before one.  The store thread's group commit pays one sync
	 * for all the calls queued together (docs/0039). */
	if (sqlite_exec(s, "PRAGMA synchronous=FULL", "synchronous", err,
	    errlen) != STORE_OK)
		return STORE_ERR;
	if (sqlite_exec(s, "PRAGMA foreign_keys=ON", "foreign_keys", err,
	    errlen) != STORE_OK)
		return STORE_ERR;
	/* The pragma is silently ignored by a build without foreign keys. */
	if (pragma_text(s, "PRAGMA foreign_keys", val, err, errlen) != STORE_OK)
		return STORE_ERR;
	if (strcmp(val, "1") != 0) {
		snprintf(err, errlen, "this SQLite does not enforce foreign keys");
		return STORE_ERR;
	}
	return STORE_OK;
}

int
store_sqlite_connect(const char *path, struct store *s, char *err,
    size_t errlen)
{
	struct sqlite_conn *c;
	sqlite3 *db = NULL;

	s->be = &sqlite_backend;
	if (*path == '\0') {
		snprintf(err, errlen, "sqlite:// needs a path");
		return STORE_ERR;
	}
	if (create_private(path, err, errlen) != STORE_OK)
		return STORE_ERR;
	if (sqlite3_open_v2(path, &db, SQLITE_OPEN_READWRITE |
	    SQLITE_OPEN_CREATE | SQLITE_OPEN_NOMUTEX, NULL) != SQLITE_OK) {
		snprintf(err, errlen, "cannot open %s: %s", path,
		    db != NULL ? sqlite3_errmsg(db) : "out of memory");
		sqlite3_close(db);
		return STORE_ERR;
	}
	if ((c = calloc(1, sizeof(*c))) == NULL) {
		snprintf(err, errlen, "cannot open %s: out of memory", path);
		sqlite3_close(db);
		return STORE_ERR;
	}
	c->db = db;
	s->impl = c;
	return configure(s, path, err, errlen);
}
