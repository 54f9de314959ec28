/*
 * store_sqlite.c: the SQLite backend of store.h.
 *
 * One connection per struct store, in WAL mode so that readers (a second
 * gateway process, tetherctl on the same host, a backup) never block the
 * writer.  Every value reaches SQL through a bound parameter; the only SQL
 * text run without binding is constant (pragmas, migrations).  Reads that
 * decide a write (register, transition) run inside BEGIN IMMEDIATE, which
 * takes the write lock up front, so two gateways cannot both see "no agent
 * for this node" and both insert one.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <sqlite3.h>

#include "agentkey.h"
#include "log.h"
#include "metrics.h"
#include "store.h"
#include "store_backend.h"


#define BUSY_TIMEOUT_MS 5000
#define ID_RANDOM_BYTES 6     /* 12 hex characters after the prefix */
#define ID_ATTEMPTS     3     /* fresh ids tried when one collides */
#define MEMORY_PATH     ":memory:"

struct store {
	sqlite3 *db;
	int version;              /* schema version after migration */
};

/*
 * The migrations, in order: migrations[i] takes the schema from version i to
 * i + 1.  Append only: a released migration is never edited, because
 * databases in the field have already run it.
 */
static const char *const migrations[] = {
	/* 1: clusters, tokens and agents. */
	"CREATE TABLE clusters ("
	"  id         TEXT NOT NULL PRIMARY KEY,"
	"  name       TEXT NOT NULL UNIQUE,"
	"  created_at INTEGER NOT NULL"
	") STRICT;"
	"CREATE TABLE tokens ("
	"  id              TEXT NOT NULL PRIMARY KEY,"
	"  kind            TEXT NOT NULL"
	"                  CHECK (kind IN ('admin', 'import', 'user')),"
	"  cluster_id      TEXT REFERENCES clusters (id),"
	"  name            TEXT NOT NULL DEFAULT '',"
	"  verifier        BLOB NOT NULL CHECK (length(verifier) = 32),"
	"  expires_at      INTEGER NOT NULL DEFAULT 0,"
	"  uses_left       INTEGER NOT NULL DEFAULT -1 CHECK (uses_left >= -1),"
	"  approval_manual INTEGER NOT NULL DEFAULT 0"
	"                  CHECK (approval_manual IN (0, 1)),"
	"  revoked         INTEGER NOT NULL DEFAULT 0 CHECK (revoked IN (0, 1)),"
	"  created_at      INTEGER NOT NULL,"
	"  CHECK (kind <> 'import' OR cluster_id IS NOT NULL)"
	") STRICT;"
	"CREATE INDEX tokens_by_cluster ON tokens (cluster_id);"
	"CREATE TABLE agents ("
	"  id         TEXT NOT NULL PRIMARY KEY,"
	"  cluster_id TEXT NOT NULL REFERENCES clusters (id),"
	"  node       TEXT NOT NULL,"
	"  pubkey     BLOB NOT NULL CHECK (length(pubkey) = 32),"
	"  state      TEXT NOT NULL CHECK (state IN ('pending-approval',"
	"             'enroll', 'verifying', 'active', 'revoked')),"
	"  last_error TEXT NOT NULL DEFAULT '',"
	"  token_id   TEXT NOT NULL REFERENCES tokens (id),"
	"  created_at INTEGER NOT NULL,"
	"  updated_at INTEGER NOT NULL"
	") STRICT;"
	/* The register transaction checks this first to give a clear reason;
	 * the index is the backstop that holds whatever the code does. */
	"CREATE UNIQUE INDEX agents_live_node ON agents (cluster_id, node)"
	"  WHERE state <> 'revoked';"
	"CREATE INDEX agents_by_cluster ON agents (cluster_id, created_at);",

	/* 2: user tokens, each scoped to one or more clusters.  A row here is
	 * the only thing that lets a user token reach a cluster: no row, no
	 * access.  Rows are never deleted (a token is revoked, not removed),
	 * and their rowid keeps the order the clusters were given in. */
	"CREATE TABLE token_clusters ("
	"  token_id   TEXT NOT NULL REFERENCES tokens (id),"
	"  cluster_id TEXT NOT NULL REFERENCES clusters (id),"
	"  PRIMARY KEY (token_id, cluster_id)"
	") STRICT;"
	"CREATE INDEX token_clusters_by_cluster ON token_clusters (cluster_id);"
	"CREATE INDEX tokens_by_user ON tokens (name) WHERE kind = 'user';",
};

#define SCHEMA_VERSION ((int)(sizeof(migrations) / sizeof(migrations[0])))

#define CLUSTER_COLS "id, name, created_at"
#define TOKEN_COLS "id, kind, cluster_id, name, verifier, expires_at, " \
	"uses_left, approval_manual, revoked, created_at"
#define AGENT_COLS "id, cluster_id, node, pubkey, state, last_error, " \
	"token_id, created_at, updated_at"

/* Stored as words rather than enum values so the database reads on its own
 * and a reordered enum cannot silently change meaning. */
static const char *const token_kinds[] = {
	[TOKEN_ADMIN] = "admin",
	[TOKEN_IMPORT] = "import",
	[TOKEN_USER] = "user",
};

#define TOKEN_KINDS ((int)(sizeof(token_kinds) / sizeof(token_kinds[0])))

/* ---- small helpers ---------------------------------------------------- */

/* STORE_FULL when SQLite could not write for want of space (SQLITE_FULL,
 * or an I/O error whose cause was ENOSPC), else STORE_ERR. */
static int
failure_code(struct store *s)
{
	int ext = sqlite3_extended_errcode(s->db);

	if ((ext & 0xff) == SQLITE_FULL)
		return STORE_FULL;
	if ((ext & 0xff) == SQLITE_IOERR && sqlite3_system_errno(s->db) == ENOSPC)
		return STORE_FULL;
	return STORE_ERR;
}

static int
db_fail(struct store *s, const char *what, char *err, size_t errlen)
{
	int rc = failure_code(s);

	snprintf(err, errlen, "%s: %s%s", what, sqlite3_errmsg(s->db),
	    rc == STORE_FULL ? " (no space left for the store)" : "");
	return rc;
}

/* Runs constant SQL (no values in it: those are always bound). */
static int
exec_sql(struct store *s, const char *sql, const char *what, char *err,
    size_t errlen)
{
	char *msg = NULL;

	if (sqlite3_exec(s->db, sql, NULL, NULL, &msg) != SQLITE_OK) {
		int rc = failure_code(s);

		snprintf(err, errlen, "%s: %s%s", what,
		    msg != NULL ? msg : sqlite3_errmsg(s->db),
		    rc == STORE_FULL ? " (no space left for the store)" : "");
		sqlite3_free(msg);
		return rc;
	}
	return STORE_OK;
}

static int
prepare(struct store *s, const char *sql, sqlite3_stmt **st, char *err,
    size_t errlen)
{
	if (sqlite3_prepare_v2(s->db, sql, -1, st, NULL) != SQLITE_OK) {
		*st = NULL;
		return db_fail(s, "prepare", err, errlen);
	}
	return STORE_OK;
}

/* BEGIN IMMEDIATE: take the write lock now, waiting up to the busy timeout,
 * rather than failing half way through when a read turns into a write. */
static int
begin(struct store *s, char *err, size_t errlen)
{
	return exec_sql(s, "BEGIN IMMEDIATE", "begin transaction", err, errlen);
}

static void
rollback(struct store *s)
{
	char *msg = NULL;

	/* SQLite may already have rolled back on its own (e.g. SQLITE_FULL). */
	if (sqlite3_get_autocommit(s->db))
		return;
	if (sqlite3_exec(s->db, "ROLLBACK", NULL, NULL, &msg) != SQLITE_OK) {
		error("store rollback failed", KV_S("err", msg != NULL ? msg : sqlite3_errmsg(s->db)));
		sqlite3_free(msg);
	}
}

/* Commits when rc is STORE_OK, else rolls back; returns the final result. */
static int
finish(struct store *s, int rc, char *err, size_t errlen)
{
	if (rc != STORE_OK) {
		rollback(s);
		return rc;
	}
	if ((rc = exec_sql(s, "COMMIT", "commit", err, errlen)) != STORE_OK) {
		rollback(s);
		return rc;
	}
	return STORE_OK;
}

/* Copies a text column into a fixed buffer; -1 if it does not fit, which
 * only a database edited by hand can cause. */
static int
col_text(sqlite3_stmt *st, int col, char *dst, size_t dstlen)
{
	const unsigned char *text = sqlite3_column_text(st, col);
	int len = sqlite3_column_bytes(st, col);

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
col_key(sqlite3_stmt *st, int col, uint8_t dst[32])
{
	const void *blob = sqlite3_column_blob(st, col);

	if (blob == NULL || sqlite3_column_bytes(st, col) != 32)
		return -1;
	memcpy(dst, blob, 32);
	return 0;
}

static int
bind_text(sqlite3_stmt *st, int idx, const char *text)
{
	return sqlite3_bind_text(st, idx, text, -1, SQLITE_TRANSIENT);
}

/* Binds "" as NULL: how optional references (a token's cluster) are kept,
 * so that the foreign key only applies when there is one. */
static int
bind_text_or_null(sqlite3_stmt *st, int idx, const char *text)
{
	if (text == NULL || *text == '\0')
		return sqlite3_bind_null(st, idx);
	return bind_text(st, idx, text);
}

static int
bind_key(sqlite3_stmt *st, int idx, const uint8_t key[32])
{
	return sqlite3_bind_blob(st, idx, key, 32, SQLITE_TRANSIENT);
}

/* Doubles *cap when *n reached it.  Returns 0 or -1 (out of memory). */
static int
grow(void **arr, size_t *cap, size_t n, size_t elem)
{
	size_t ncap;
	void *p;

	if (n < *cap)
		return 0;
	ncap = *cap == 0 ? 8 : *cap * 2;
	if ((p = reallocarray(*arr, ncap, elem)) == NULL)
		return -1;
	*arr = p;
	*cap = ncap;
	return 0;
}

/* Length of s clipped to max bytes without splitting a UTF-8 sequence. */
static size_t
clip_utf8(const char *s, size_t max)
{
	size_t len = strlen(s);

	if (len <= max)
		return len;
	len = max;
	while (len > 0 && ((unsigned char)s[len] & 0xC0) == 0x80)
		len--;
	return len;
}

/* "c-" or "a-" and 12 lowercase hex characters from the CSPRNG. */
static int
make_id(const char *prefix, char out[STORE_ID_MAX + 1], char *err,
    size_t errlen)
{
	char hex[2 * ID_RANDOM_BYTES + 1];

	if (random_hex(hex, ID_RANDOM_BYTES) == -1) {
		snprintf(err, errlen, "cannot draw a random id");
		return STORE_ERR;
	}
	snprintf(out, STORE_ID_MAX + 1, "%s%s", prefix, hex);
	return STORE_OK;
}

/*
 * Cluster and node names end up in URLs (/k8s/clusters/NAME), kubeconfig
 * entries and log lines, so they are kept to a plain, safe alphabet.
 */
#define NAME_CHARS "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz" \
	"0123456789._-"
#define USER_NAME_CHARS NAME_CHARS "@"

static int
name_in(const char *name, const char *alphabet)
{
	size_t len;

	if (name == NULL)
		return 0;
	len = strlen(name);
	if (len == 0 || len > STORE_NAME_MAX)
		return 0;
	return strspn(name, alphabet) == len;
}

static int
name_valid(const char *name)
{
	return name_in(name, NAME_CHARS);
}

/* User names may also hold '@', so that an e-mail address is one; they
 * never reach a URL path unescaped. */
int
store_user_name_valid(const char *name)
{
	return name_in(name, USER_NAME_CHARS);
}

static int
refuse_name(const char *what, char *err, size_t errlen)
{
	/* The bad name is not echoed: it may hold control characters. */
	snprintf(err, errlen, "invalid %s name: use 1 to %d characters of "
	    "A-Z a-z 0-9 . _ -", what, STORE_NAME_MAX);
	return STORE_REFUSED;
}

static int
token_kind_parse(const char *name, enum token_kind *out)
{
	int i;

	for (i = 0; i < TOKEN_KINDS; i++) {
		if (token_kinds[i] != NULL && strcmp(name, token_kinds[i]) == 0) {
			*out = (enum token_kind)i;
			return 0;
		}
	}
	return -1;
}

/* ---- opening and migrations ------------------------------------------- */

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

/* Runs a pragma that answers with one text row, e.g. journal_mode. */
static int
pragma_text(struct store *s, const char *sql, char *out, size_t outlen,
    char *err, size_t errlen)
{
	sqlite3_stmt *st = NULL;
	int rc = STORE_ERR;

	if (prepare(s, sql, &st, err, errlen) != STORE_OK)
		goto out;
	if (sqlite3_step(st) != SQLITE_ROW) {
		db_fail(s, sql, err, errlen);
		goto out;
	}
	if (col_text(st, 0, out, outlen) == -1) {
		snprintf(err, errlen, "%s: unexpected answer", sql);
		goto out;
	}
	rc = STORE_OK;
out:
	sqlite3_finalize(st);
	return rc;
}

static int
configure(struct store *s, const char *path, char *err, size_t errlen)
{
	char val[32];

	/* Before anything else, so that even the switch to WAL waits for a
	 * second process rather than failing with "database is locked". */
	if (sqlite3_busy_timeout(s->db, BUSY_TIMEOUT_MS) != SQLITE_OK)
		return db_fail(s, "busy timeout", err, errlen);
	sqlite3_extended_result_codes(s->db, 1);

	if (pragma_text(s, "PRAGMA journal_mode=WAL", val, sizeof(val), err,
	    errlen) != STORE_OK)
		return STORE_ERR;
	/* An in-memory database cannot use WAL and has nothing to share. */
	if (strcmp(val, "wal") != 0 && strcmp(path, MEMORY_PATH) != 0) {
		snprintf(err, errlen, "cannot enable WAL mode (journal_mode "
		    "is %s)", val);
		return STORE_ERR;
	}
	/* NORMAL is durable in WAL mode except for the last commits before a
	 * power loss; it never corrupts the database. */
	if (exec_sql(s, "PRAGMA synchronous=NORMAL", "synchronous", err,
	    errlen) != STORE_OK)
		return STORE_ERR;
	if (exec_sql(s, "PRAGMA foreign_keys=ON", "foreign_keys", err,
	    errlen) != STORE_OK)
		return STORE_ERR;
	/* The pragma is silently ignored by a build without foreign keys. */
	if (pragma_text(s, "PRAGMA foreign_keys", val, sizeof(val), err,
	    errlen) != STORE_OK)
		return STORE_ERR;
	if (strcmp(val, "1") != 0) {
		snprintf(err, errlen, "this SQLite does not enforce foreign keys");
		return STORE_ERR;
	}
	return STORE_OK;
}

static int
read_version(struct store *s, int *version, char *err, size_t errlen)
{
	sqlite3_stmt *st = NULL;
	int rc = STORE_ERR;

	if (prepare(s, "SELECT coalesce(max(version), 0) FROM schema_version",
	    &st, err, errlen) != STORE_OK)
		goto out;
	if (sqlite3_step(st) != SQLITE_ROW) {
		db_fail(s, "read schema version", err, errlen);
		goto out;
	}
	*version = sqlite3_column_int(st, 0);
	rc = STORE_OK;
out:
	sqlite3_finalize(st);
	return rc;
}

static int
record_version(struct store *s, int version, char *err, size_t errlen)
{
	sqlite3_stmt *st = NULL;
	int rc = STORE_ERR;

	if (prepare(s, "INSERT INTO schema_version (version, applied_at) "
	    "VALUES (?, ?)", &st, err, errlen) != STORE_OK)
		goto out;
	sqlite3_bind_int(st, 1, version);
	sqlite3_bind_int64(st, 2, (sqlite3_int64)time(NULL));
	if (sqlite3_step(st) != SQLITE_DONE) {
		db_fail(s, "record schema version", err, errlen);
		goto out;
	}
	rc = STORE_OK;
out:
	sqlite3_finalize(st);
	return rc;
}

/* Brings the schema up to SCHEMA_VERSION; runs inside migrate's
 * transaction, so a failed migration leaves the database as it was. */
static int
migrate_locked(struct store *s, char *err, size_t errlen)
{
	char what[64];
	int v;

	if (exec_sql(s, "CREATE TABLE IF NOT EXISTS schema_version ("
	    "  version    INTEGER NOT NULL PRIMARY KEY,"
	    "  applied_at INTEGER NOT NULL"
	    ") STRICT", "create schema_version", err, errlen) != STORE_OK)
		return STORE_ERR;
	if (read_version(s, &v, err, errlen) != STORE_OK)
		return STORE_ERR;
	/* A newer gateway has been here: its schema is not ours to guess. */
	if (v > SCHEMA_VERSION) {
		snprintf(err, errlen, "database schema version %d is newer than "
		    "this gateway supports (%d)", v, SCHEMA_VERSION);
		return STORE_ERR;
	}
	for (; v < SCHEMA_VERSION; v++) {
		snprintf(what, sizeof(what), "migration %d", v + 1);
		if (exec_sql(s, migrations[v], what, err, errlen) != STORE_OK)
			return STORE_ERR;
		if (record_version(s, v + 1, err, errlen) != STORE_OK)
			return STORE_ERR;
		info("store schema migrated", KV_I("version", v + 1));
	}
	s->version = v;
	return STORE_OK;
}

static int
migrate(struct store *s, char *err, size_t errlen)
{
	/* Immediate: two gateways starting together migrate one after the
	 * other, the second finding nothing left to do. */
	if (begin(s, err, errlen) != STORE_OK)
		return STORE_ERR;
	return finish(s, migrate_locked(s, err, errlen), err, errlen);
}

int
store_sqlite_open(const char *path, struct store **out, char *err,
    size_t errlen)
{
	struct store *s = NULL;
	int rc = STORE_ERR;

	*out = NULL;
	if (*path == '\0') {
		snprintf(err, errlen, "sqlite:// needs a path");
		goto out;
	}
	if (create_private(path, err, errlen) != STORE_OK)
		goto out;
	if ((s = calloc(1, sizeof(*s))) == NULL) {
		snprintf(err, errlen, "out of memory");
		goto out;
	}
	if (sqlite3_open_v2(path, &s->db, SQLITE_OPEN_READWRITE |
	    SQLITE_OPEN_CREATE | SQLITE_OPEN_NOMUTEX, NULL) != SQLITE_OK) {
		snprintf(err, errlen, "cannot open %s: %s", path,
		    s->db != NULL ? sqlite3_errmsg(s->db) : "out of memory");
		goto out;
	}
	if (configure(s, path, err, errlen) != STORE_OK)
		goto out;
	if (migrate(s, err, errlen) != STORE_OK)
		goto out;
	*out = s;
	s = NULL;
	rc = STORE_OK;
out:
	store_close(s);
	return rc;
}

void
store_close(struct store *s)
{
	if (s == NULL)
		return;
	/* Every statement is finalized where it is used, so this cannot be
	 * busy; if it is, that is a leak worth hearing about. */
	if (sqlite3_close(s->db) != SQLITE_OK)
		error("closing the store failed", KV_S("err", sqlite3_errmsg(s->db)));
	free(s);
}

int
store_schema_version(struct store *s)
{
	return s->version;
}

/* ---- clusters ----------------------------------------------------------- */

static int
read_cluster(sqlite3_stmt *st, struct store_cluster *c)
{
	memset(c, 0, sizeof(*c));
	if (col_text(st, 0, c->id, sizeof(c->id)) == -1 ||
	    col_text(st, 1, c->name, sizeof(c->name)) == -1)
		return -1;
	c->created_at = sqlite3_column_int64(st, 2);
	return 0;
}

/* One attempt at inserting a cluster; *collided says the random id was
 * taken, the one failure worth another try. */
static int
insert_cluster(struct store *s, const struct store_cluster *c, bool *collided,
    char *err, size_t errlen)
{
	sqlite3_stmt *st = NULL;
	int rc = STORE_ERR;

	*collided = false;
	if (prepare(s, "INSERT INTO clusters (id, name, created_at) "
	    "VALUES (?, ?, ?)", &st, err, errlen) != STORE_OK)
		goto out;
	bind_text(st, 1, c->id);
	bind_text(st, 2, c->name);
	sqlite3_bind_int64(st, 3, c->created_at);
	if (sqlite3_step(st) == SQLITE_DONE) {
		rc = STORE_OK;
		goto out;
	}
	switch (sqlite3_extended_errcode(s->db)) {
	case SQLITE_CONSTRAINT_UNIQUE:
		snprintf(err, errlen, "cluster %s already exists", c->name);
		rc = STORE_CONFLICT;
		break;
	case SQLITE_CONSTRAINT_PRIMARYKEY:
		*collided = true;
		/* FALLTHROUGH */
	default:
		rc = db_fail(s, "insert cluster", err, errlen);
		break;
	}
out:
	sqlite3_finalize(st);
	return rc;
}

int
store_cluster_create(struct store *s, const char *name, int64_t now,
    struct store_cluster *out, char *err, size_t errlen)
{
	struct store_cluster c;
	bool collided = true;
	int attempt, rc = STORE_ERR;
	METRICS_STORE_TIMED();

	if (!name_valid(name))
		return refuse_name("cluster", err, errlen);
	memset(&c, 0, sizeof(c));
	snprintf(c.name, sizeof(c.name), "%s", name);
	c.created_at = now;
	for (attempt = 0; attempt < ID_ATTEMPTS && collided; attempt++) {
		if (make_id("c-", c.id, err, errlen) != STORE_OK)
			return STORE_ERR;
		rc = insert_cluster(s, &c, &collided, err, errlen);
	}
	if (rc == STORE_OK && out != NULL)
		*out = c;
	return rc;
}

/* Reads one row of a query into a record (void * so that one loop can
 * collect any kind of record). */
typedef int row_reader(sqlite3_stmt *st, void *out);

static int
read_cluster_row(sqlite3_stmt *st, void *out)
{
	return read_cluster(st, out);
}

static int read_agent_row(sqlite3_stmt *st, void *out);

/*
 * Steps st to its end, reading every row into a growing array of
 * elem-sized records (*out, caller frees; *n records).  Returns STORE_OK,
 * or STORE_ERR with err and nothing allocated.
 */
static int
collect_rows(struct store *s, sqlite3_stmt *st, size_t elem, row_reader *read_row,
    const char *what, void **out, size_t *n, char *err, size_t errlen)
{
	unsigned char *arr = NULL;
	size_t cap = 0, count = 0;
	char action[64];
	int r;

	for (;;) {
		if (grow((void **)&arr, &cap, count, elem) == -1) {
			snprintf(err, errlen, "out of memory");
			goto fail;
		}
		r = sqlite3_step(st);
		if (r == SQLITE_DONE)
			break;
		if (r != SQLITE_ROW) {
			snprintf(action, sizeof(action), "read %s", what);
			db_fail(s, action, err, errlen);
			goto fail;
		}
		if (read_row(st, arr + count * elem) == -1) {
			snprintf(err, errlen, "malformed %s row", what);
			goto fail;
		}
		count++;
	}
	*out = arr;
	*n = count;
	return STORE_OK;
fail:
	free(arr);
	return STORE_ERR;
}

/* Steps a prepared query for at most one row of any kind: STORE_OK with
 * *out filled, STORE_NOTFOUND, or STORE_ERR with err. */
static int
step_row(struct store *s, sqlite3_stmt *st, row_reader *read_row, const char *what,
    void *out, char *err, size_t errlen)
{
	char action[64];

	switch (sqlite3_step(st)) {
	case SQLITE_ROW:
		if (read_row(st, out) == -1) {
			snprintf(err, errlen, "malformed %s row", what);
			return STORE_ERR;
		}
		return STORE_OK;
	case SQLITE_DONE:
		return STORE_NOTFOUND;
	default:
		snprintf(action, sizeof(action), "read %s", what);
		return db_fail(s, action, err, errlen);
	}
}

static int
step_cluster(struct store *s, sqlite3_stmt *st, struct store_cluster *out,
    char *err, size_t errlen)
{
	return step_row(s, st, read_cluster_row, "cluster", out, err, errlen);
}

int
store_cluster_get(struct store *s, const char *id, struct store_cluster *out)
{
	char err[STORE_ERROR_MAX + 1];
	sqlite3_stmt *st = NULL;
	int rc = STORE_ERR;
	METRICS_STORE_TIMED();

	if (prepare(s, "SELECT " CLUSTER_COLS " FROM clusters WHERE id = ?",
	    &st, err, sizeof(err)) != STORE_OK)
		goto out;
	bind_text(st, 1, id);
	rc = step_cluster(s, st, out, err, sizeof(err));
out:
	if (rc == STORE_ERR)
		error("store: reading a cluster failed", KV_S("cluster", id), KV_S("err", err));
	sqlite3_finalize(st);
	return rc;
}

int
store_cluster_list(struct store *s, struct store_cluster **out, size_t *n)
{
	char err[STORE_ERROR_MAX + 1];
	sqlite3_stmt *st = NULL;
	int rc = STORE_ERR;
	METRICS_STORE_TIMED();

	*out = NULL;
	*n = 0;
	if (prepare(s, "SELECT " CLUSTER_COLS " FROM clusters "
	    "ORDER BY created_at, rowid", &st, err, sizeof(err)) == STORE_OK)
		rc = collect_rows(s, st, sizeof(**out), read_cluster_row, "cluster",
		    (void **)out, n, err, sizeof(err));
	if (rc != STORE_OK)
		error("store: listing clusters failed", KV_S("err", err));
	sqlite3_finalize(st);
	return rc;
}

/* ---- tokens ------------------------------------------------------------- */

static int
read_token(sqlite3_stmt *st, struct store_token *t)
{
	char kind[16];

	memset(t, 0, sizeof(*t));
	if (col_text(st, 0, t->id, sizeof(t->id)) == -1 ||
	    col_text(st, 1, kind, sizeof(kind)) == -1 ||
	    token_kind_parse(kind, &t->kind) == -1 ||
	    col_text(st, 2, t->cluster, sizeof(t->cluster)) == -1 ||
	    col_text(st, 3, t->name, sizeof(t->name)) == -1 ||
	    col_key(st, 4, t->verifier) == -1)
		return -1;
	t->expires_at = sqlite3_column_int64(st, 5);
	t->uses_left = sqlite3_column_int64(st, 6);
	t->approval_manual = sqlite3_column_int(st, 7) != 0;
	t->revoked = sqlite3_column_int(st, 8) != 0;
	t->created_at = sqlite3_column_int64(st, 9);
	return 0;
}

/* Looks a token up, with err for callers that report it. */
static int
token_lookup(struct store *s, const char *id, struct store_token *out,
    char *err, size_t errlen)
{
	sqlite3_stmt *st = NULL;
	int rc = STORE_ERR;

	if (prepare(s, "SELECT " TOKEN_COLS " FROM tokens WHERE id = ?",
	    &st, err, errlen) != STORE_OK)
		goto out;
	bind_text(st, 1, id);
	switch (sqlite3_step(st)) {
	case SQLITE_ROW:
		if (read_token(st, out) == -1) {
			snprintf(err, errlen, "malformed token row");
			goto out;
		}
		rc = STORE_OK;
		break;
	case SQLITE_DONE:
		rc = STORE_NOTFOUND;
		break;
	default:
		db_fail(s, "read token", err, errlen);
		break;
	}
out:
	sqlite3_finalize(st);
	return rc;
}

/* Refuses records that the schema would refuse less clearly. */
static int
token_check(const struct store_token *t, char *err, size_t errlen)
{
	if ((unsigned)t->kind >= (unsigned)TOKEN_KINDS ||
	    token_kinds[t->kind] == NULL) {
		snprintf(err, errlen, "unknown token kind %d", (int)t->kind);
		return STORE_REFUSED;
	}
	/* The struct's strings must be terminated within their arrays. */
	if (strnlen(t->id, sizeof(t->id)) == 0 ||
	    strnlen(t->id, sizeof(t->id)) == sizeof(t->id) ||
	    strnlen(t->cluster, sizeof(t->cluster)) == sizeof(t->cluster) ||
	    strnlen(t->name, sizeof(t->name)) == sizeof(t->name)) {
		snprintf(err, errlen, "malformed token record");
		return STORE_REFUSED;
	}
	if (t->kind == TOKEN_IMPORT && t->cluster[0] == '\0') {
		snprintf(err, errlen, "an import token needs a cluster");
		return STORE_REFUSED;
	}
	if (t->uses_left < -1) {
		snprintf(err, errlen, "uses left must be -1 (unlimited) or more");
		return STORE_REFUSED;
	}
	return STORE_OK;
}

int
store_token_insert(struct store *s, const struct store_token *t,
    char *err, size_t errlen)
{
	sqlite3_stmt *st = NULL;
	int rc;
	METRICS_STORE_TIMED();

	if ((rc = token_check(t, err, errlen)) != STORE_OK)
		return rc;
	rc = STORE_ERR;
	if (prepare(s, "INSERT INTO tokens (" TOKEN_COLS ") "
	    "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)", &st, err, errlen) !=
	    STORE_OK)
		goto out;
	bind_text(st, 1, t->id);
	bind_text(st, 2, token_kinds[t->kind]);
	bind_text_or_null(st, 3, t->cluster);
	bind_text(st, 4, t->name);
	bind_key(st, 5, t->verifier);
	sqlite3_bind_int64(st, 6, t->expires_at);
	sqlite3_bind_int64(st, 7, t->uses_left);
	sqlite3_bind_int(st, 8, t->approval_manual ? 1 : 0);
	sqlite3_bind_int(st, 9, t->revoked ? 1 : 0);
	sqlite3_bind_int64(st, 10, t->created_at);
	if (sqlite3_step(st) == SQLITE_DONE) {
		rc = STORE_OK;
		goto out;
	}
	switch (sqlite3_extended_errcode(s->db)) {
	case SQLITE_CONSTRAINT_PRIMARYKEY:
		snprintf(err, errlen, "token %s already exists", t->id);
		rc = STORE_CONFLICT;
		break;
	case SQLITE_CONSTRAINT_FOREIGNKEY:
		snprintf(err, errlen, "no cluster %s", t->cluster);
		rc = STORE_REFUSED;
		break;
	default:
		rc = db_fail(s, "insert token", err, errlen);
		break;
	}
out:
	sqlite3_finalize(st);
	return rc;
}

int
store_token_get(struct store *s, const char *id, struct store_token *out)
{
	char err[STORE_ERROR_MAX + 1];
	int rc;
	METRICS_STORE_TIMED();

	rc = token_lookup(s, id, out, err, sizeof(err));
	if (rc == STORE_ERR)
		error("store: reading a token failed", KV_S("token", id), KV_S("err", err));
	return rc;
}

/* ---- user tokens -------------------------------------------------------- */

#define USER_TOKEN_COLS "t.id, t.name, t.expires_at, t.revoked, t.created_at"

static int
user_token_check(const struct store_token *t, size_t nclusters, char *err,
    size_t errlen)
{
	int rc;

	if ((rc = token_check(t, err, errlen)) != STORE_OK)
		return rc;
	if (t->kind != TOKEN_USER) {
		snprintf(err, errlen, "not a user token");
		return STORE_REFUSED;
	}
	if (!store_user_name_valid(t->name)) {
		/* As refuse_name: the bad name is not echoed. */
		snprintf(err, errlen, "invalid user name: use 1 to %d characters "
		    "of A-Z a-z 0-9 . _ @ -", STORE_NAME_MAX);
		return STORE_REFUSED;
	}
	if (t->cluster[0] != '\0') {
		snprintf(err, errlen, "a user token reaches clusters through its "
		    "cluster list only");
		return STORE_REFUSED;
	}
	if (nclusters == 0) {
		snprintf(err, errlen, "a user token needs at least one cluster");
		return STORE_REFUSED;
	}
	if (nclusters > STORE_TOKEN_CLUSTERS_MAX) {
		snprintf(err, errlen, "a user token may name at most %d clusters",
		    STORE_TOKEN_CLUSTERS_MAX);
		return STORE_REFUSED;
	}
	return STORE_OK;
}

/* STORE_OK if the cluster exists, STORE_NOTFOUND (err) if not. */
static int
cluster_exists(struct store *s, const char *id, char *err, size_t errlen)
{
	sqlite3_stmt *st = NULL;
	int rc = STORE_ERR;

	if (prepare(s, "SELECT 1 FROM clusters WHERE id = ?", &st, err,
	    errlen) != STORE_OK)
		goto out;
	bind_text(st, 1, id);
	switch (sqlite3_step(st)) {
	case SQLITE_ROW:
		rc = STORE_OK;
		break;
	case SQLITE_DONE:
		snprintf(err, errlen, "no cluster %.*s", STORE_ID_MAX, id);
		rc = STORE_NOTFOUND;
		break;
	default:
		db_fail(s, "read cluster", err, errlen);
		break;
	}
out:
	sqlite3_finalize(st);
	return rc;
}

/* Adds one scope row; *added is false when the pair was already there. */
static int
insert_scope(struct store *s, const char *token_id, const char *cluster,
    bool *added, char *err, size_t errlen)
{
	sqlite3_stmt *st = NULL;
	int rc = STORE_ERR;

	*added = false;
	if (prepare(s, "INSERT OR IGNORE INTO token_clusters "
	    "(token_id, cluster_id) VALUES (?, ?)", &st, err, errlen) !=
	    STORE_OK)
		goto out;
	bind_text(st, 1, token_id);
	bind_text(st, 2, cluster);
	if (sqlite3_step(st) != SQLITE_DONE) {
		rc = db_fail(s, "insert token scope", err, errlen);
		goto out;
	}
	*added = sqlite3_changes(s->db) == 1;
	rc = STORE_OK;
out:
	sqlite3_finalize(st);
	return rc;
}

static int
user_token_create_locked(struct store *s, const struct store_token *t,
    const char *const *clusters, size_t nclusters,
    struct store_user_token *u, char *err, size_t errlen)
{
	bool added;
	size_t i;
	int rc;

	if ((rc = store_token_insert(s, t, err, errlen)) != STORE_OK)
		return rc;
	for (i = 0; i < nclusters; i++) {
		if (clusters[i] == NULL) {
			snprintf(err, errlen, "no cluster (null)");
			return STORE_NOTFOUND;
		}
		if ((rc = cluster_exists(s, clusters[i], err, errlen)) !=
		    STORE_OK)
			return rc;
		if ((rc = insert_scope(s, t->id, clusters[i], &added, err,
		    errlen)) != STORE_OK)
			return rc;
		/* It exists, so it fits. */
		if (added)
			snprintf(u->clusters[u->nclusters++],
			    sizeof(u->clusters[0]), "%s", clusters[i]);
	}
	return STORE_OK;
}

int
store_user_token_create(struct store *s, const struct store_token *t,
    const char *const *clusters, size_t nclusters,
    struct store_user_token *out, char *err, size_t errlen)
{
	struct store_user_token u;
	int rc;
	METRICS_STORE_TIMED();

	if ((rc = user_token_check(t, nclusters, err, errlen)) != STORE_OK)
		return rc;
	/* Built aside: *out is written only once the transaction commits. */
	memset(&u, 0, sizeof(u));
	snprintf(u.id, sizeof(u.id), "%s", t->id);
	snprintf(u.name, sizeof(u.name), "%s", t->name);
	u.expires_at = t->expires_at;
	u.revoked = t->revoked;
	u.created_at = t->created_at;
	if (begin(s, err, errlen) != STORE_OK)
		return STORE_ERR;
	rc = user_token_create_locked(s, t, clusters, nclusters, &u, err,
	    errlen);
	if ((rc = finish(s, rc, err, errlen)) == STORE_OK && out != NULL)
		*out = u;
	return rc;
}

/* Fills u's token columns from a row of the list query (clusters apart). */
static int
read_user_token(sqlite3_stmt *st, struct store_user_token *u)
{
	memset(u, 0, sizeof(*u));
	if (col_text(st, 0, u->id, sizeof(u->id)) == -1 ||
	    col_text(st, 1, u->name, sizeof(u->name)) == -1)
		return -1;
	u->expires_at = sqlite3_column_int64(st, 2);
	u->revoked = sqlite3_column_int(st, 3) != 0;
	u->created_at = sqlite3_column_int64(st, 4);
	return 0;
}

/*
 * Adds one row of the list query to arr: a new token when its id differs
 * from the last one's, and its cluster (NULL for a token with none, which
 * only a database edited by hand holds).
 */
static int
add_user_row(sqlite3_stmt *st, struct store_user_token **arr, size_t *cap,
    size_t *count, char *err, size_t errlen)
{
	const unsigned char *id = sqlite3_column_text(st, 0);
	struct store_user_token *u;

	if (id == NULL) {
		snprintf(err, errlen, "malformed user token row");
		return STORE_ERR;
	}
	if (*count == 0 || strcmp((*arr)[*count - 1].id, (const char *)id) != 0) {
		if (grow((void **)arr, cap, *count, sizeof(**arr)) == -1) {
			snprintf(err, errlen, "out of memory");
			return STORE_ERR;
		}
		if (read_user_token(st, &(*arr)[*count]) == -1) {
			snprintf(err, errlen, "malformed user token row");
			return STORE_ERR;
		}
		(*count)++;
	}
	u = &(*arr)[*count - 1];
	if (sqlite3_column_type(st, 5) == SQLITE_NULL)
		return STORE_OK;
	if (u->nclusters == STORE_TOKEN_CLUSTERS_MAX ||
	    col_text(st, 5, u->clusters[u->nclusters],
	    sizeof(u->clusters[0])) == -1) {
		snprintf(err, errlen, "user token %s: malformed scope", u->id);
		return STORE_ERR;
	}
	u->nclusters++;
	return STORE_OK;
}

/* User tokens with their clusters: all of them, or the one with id (the
 * primary key: at most one row of tokens) when id is non-NULL. */
static int
user_tokens_select(struct store *s, const char *id,
    struct store_user_token **out, size_t *n)
{
	char err[STORE_ERROR_MAX + 1];
	struct store_user_token *arr = NULL;
	sqlite3_stmt *st = NULL;
	size_t cap = 0, count = 0;
	int rc = STORE_ERR, step;
	METRICS_STORE_TIMED();

	*out = NULL;
	*n = 0;
	if (prepare(s, id == NULL ?
	    "SELECT " USER_TOKEN_COLS ", c.cluster_id "
	    "FROM tokens t LEFT JOIN token_clusters c ON c.token_id = t.id "
	    "WHERE t.kind = 'user' ORDER BY t.created_at, t.rowid, c.rowid" :
	    "SELECT " USER_TOKEN_COLS ", c.cluster_id "
	    "FROM tokens t LEFT JOIN token_clusters c ON c.token_id = t.id "
	    "WHERE t.kind = 'user' AND t.id = ? ORDER BY c.rowid",
	    &st, err, sizeof(err)) != STORE_OK)
		goto out;
	if (id != NULL)
		bind_text(st, 1, id);
	while ((step = sqlite3_step(st)) == SQLITE_ROW) {
		if (add_user_row(st, &arr, &cap, &count, err, sizeof(err)) !=
		    STORE_OK)
			goto out;
	}
	if (step != SQLITE_DONE) {
		db_fail(s, "read user tokens", err, sizeof(err));
		goto out;
	}
	*out = arr;
	*n = count;
	arr = NULL;
	rc = STORE_OK;
out:
	if (rc != STORE_OK)
		error("store: reading user tokens failed", KV_S("err", err));
	free(arr);
	sqlite3_finalize(st);
	return rc;
}

int
store_user_token_list(struct store *s, struct store_user_token **out,
    size_t *n)
{
	return user_tokens_select(s, NULL, out, n);
}

int
store_user_token_get(struct store *s, const char *id,
    struct store_user_token *out)
{
	struct store_user_token *arr;
	size_t n;
	int rc;

	if ((rc = user_tokens_select(s, id, &arr, &n)) != STORE_OK)
		return rc;
	if (n == 1)
		*out = arr[0];
	free(arr);
	return n == 1 ? STORE_OK : STORE_NOTFOUND;
}

/* How many user tokens name was ever issued. */
static int
count_user_tokens(struct store *s, const char *name, int64_t *count,
    char *err, size_t errlen)
{
	sqlite3_stmt *st = NULL;
	int rc = STORE_ERR;

	if (prepare(s, "SELECT count(*) FROM tokens WHERE kind = 'user' AND "
	    "name = ?", &st, err, errlen) != STORE_OK)
		goto out;
	bind_text(st, 1, name);
	if (sqlite3_step(st) != SQLITE_ROW) {
		db_fail(s, "count user tokens", err, errlen);
		goto out;
	}
	*count = sqlite3_column_int64(st, 0);
	rc = STORE_OK;
out:
	sqlite3_finalize(st);
	return rc;
}

static int
user_revoke_locked(struct store *s, const char *name, int64_t *count,
    char *err, size_t errlen)
{
	sqlite3_stmt *st = NULL;
	int64_t total = 0;
	int rc;

	if ((rc = count_user_tokens(s, name, &total, err, errlen)) != STORE_OK)
		return rc;
	if (total == 0) {
		snprintf(err, errlen, "user %s has no tokens", name);
		return STORE_NOTFOUND;
	}
	rc = STORE_ERR;
	if (prepare(s, "UPDATE tokens SET revoked = 1 WHERE kind = 'user' AND "
	    "name = ? AND revoked = 0", &st, err, errlen) != STORE_OK)
		goto out;
	bind_text(st, 1, name);
	if (sqlite3_step(st) != SQLITE_DONE) {
		rc = db_fail(s, "revoke user tokens", err, errlen);
		goto out;
	}
	*count = sqlite3_changes(s->db);
	rc = STORE_OK;
out:
	sqlite3_finalize(st);
	return rc;
}

int
store_user_revoke(struct store *s, const char *name, int64_t *count,
    char *err, size_t errlen)
{
	int64_t n = 0;
	int rc;
	METRICS_STORE_TIMED();

	if (!store_user_name_valid(name)) {
		snprintf(err, errlen, "invalid user name: use 1 to %d characters "
		    "of A-Z a-z 0-9 . _ @ -", STORE_NAME_MAX);
		return STORE_REFUSED;
	}
	if (begin(s, err, errlen) != STORE_OK)
		return STORE_ERR;
	rc = user_revoke_locked(s, name, &n, err, errlen);
	if ((rc = finish(s, rc, err, errlen)) == STORE_OK && count != NULL)
		*count = n;
	return rc;
}

int
store_token_in_cluster(struct store *s, const char *token_id,
    const char *cluster)
{
	char err[STORE_ERROR_MAX + 1];
	sqlite3_stmt *st = NULL;
	int rc = STORE_ERR;
	METRICS_STORE_TIMED();

	if (prepare(s, "SELECT 1 FROM token_clusters WHERE token_id = ? AND "
	    "cluster_id = ?", &st, err, sizeof(err)) != STORE_OK)
		goto out;
	bind_text(st, 1, token_id);
	bind_text(st, 2, cluster);
	switch (sqlite3_step(st)) {
	case SQLITE_ROW:
		rc = STORE_OK;
		break;
	case SQLITE_DONE:
		rc = STORE_NOTFOUND;
		break;
	default:
		db_fail(s, "read token scope", err, sizeof(err));
		break;
	}
out:
	if (rc == STORE_ERR)
		error("store: reading a token's scope failed", KV_S("token", token_id), KV_S("err", err));
	sqlite3_finalize(st);
	return rc;
}

/* ---- agents ------------------------------------------------------------- */

static int
read_agent(sqlite3_stmt *st, struct store_agent *a)
{
	char state[32];

	memset(a, 0, sizeof(*a));
	if (col_text(st, 0, a->id, sizeof(a->id)) == -1 ||
	    col_text(st, 1, a->cluster, sizeof(a->cluster)) == -1 ||
	    col_text(st, 2, a->node, sizeof(a->node)) == -1 ||
	    col_key(st, 3, a->pubkey) == -1 ||
	    col_text(st, 4, state, sizeof(state)) == -1 ||
	    agent_state_parse(state, &a->state) == -1 ||
	    col_text(st, 5, a->last_error, sizeof(a->last_error)) == -1 ||
	    col_text(st, 6, a->token_id, sizeof(a->token_id)) == -1)
		return -1;
	a->created_at = sqlite3_column_int64(st, 7);
	a->updated_at = sqlite3_column_int64(st, 8);
	return 0;
}

static int
read_agent_row(sqlite3_stmt *st, void *out)
{
	return read_agent(st, out);
}

static int
step_agent(struct store *s, sqlite3_stmt *st, struct store_agent *out,
    char *err, size_t errlen)
{
	return step_row(s, st, read_agent_row, "agent", out, err, errlen);
}

static int
agent_lookup(struct store *s, const char *id, struct store_agent *out,
    char *err, size_t errlen)
{
	sqlite3_stmt *st = NULL;
	int rc = STORE_ERR;

	if (prepare(s, "SELECT " AGENT_COLS " FROM agents WHERE id = ?",
	    &st, err, errlen) != STORE_OK)
		goto out;
	bind_text(st, 1, id);
	rc = step_agent(s, st, out, err, errlen);
	if (rc == STORE_NOTFOUND)
		snprintf(err, errlen, "no agent %s", id);
out:
	sqlite3_finalize(st);
	return rc;
}

/*
 * The agent a retried registration left behind: same cluster, node and key.
 * A live one is preferred; a revoked one is still returned, so a node
 * retrying with a revoked key learns that rather than getting a fresh,
 * unrevoked agent under the same key.
 */
static int
find_same_key(struct store *s, const char *cluster, const char *node,
    const uint8_t pubkey[32], struct store_agent *out, char *err,
    size_t errlen)
{
	sqlite3_stmt *st = NULL;
	int rc = STORE_ERR;

	if (prepare(s, "SELECT " AGENT_COLS " FROM agents "
	    "WHERE cluster_id = ? AND node = ? AND pubkey = ? "
	    "ORDER BY state = 'revoked', created_at DESC, rowid DESC LIMIT 1",
	    &st, err, errlen) != STORE_OK)
		goto out;
	bind_text(st, 1, cluster);
	bind_text(st, 2, node);
	bind_key(st, 3, pubkey);
	rc = step_agent(s, st, out, err, errlen);
out:
	sqlite3_finalize(st);
	return rc;
}

/* The node's live (not revoked) agent; the unique index allows one. */
static int
find_live(struct store *s, const char *cluster, const char *node,
    struct store_agent *out, char *err, size_t errlen)
{
	sqlite3_stmt *st = NULL;
	int rc = STORE_ERR;

	if (prepare(s, "SELECT " AGENT_COLS " FROM agents "
	    "WHERE cluster_id = ? AND node = ? AND state <> 'revoked'",
	    &st, err, errlen) != STORE_OK)
		goto out;
	bind_text(st, 1, cluster);
	bind_text(st, 2, node);
	rc = step_agent(s, st, out, err, errlen);
out:
	sqlite3_finalize(st);
	return rc;
}

/* One attempt at inserting the agent; *collided as for insert_cluster. */
static int
insert_agent(struct store *s, const struct store_agent *a, bool *collided,
    char *err, size_t errlen)
{
	sqlite3_stmt *st = NULL;
	int rc = STORE_ERR;

	*collided = false;
	if (prepare(s, "INSERT INTO agents (" AGENT_COLS ") "
	    "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)", &st, err, errlen) != STORE_OK)
		goto out;
	bind_text(st, 1, a->id);
	bind_text(st, 2, a->cluster);
	bind_text(st, 3, a->node);
	bind_key(st, 4, a->pubkey);
	bind_text(st, 5, agent_state_name(a->state));
	bind_text(st, 6, a->last_error);
	bind_text(st, 7, a->token_id);
	sqlite3_bind_int64(st, 8, a->created_at);
	sqlite3_bind_int64(st, 9, a->updated_at);
	if (sqlite3_step(st) != SQLITE_DONE) {
		*collided = sqlite3_extended_errcode(s->db) ==
		    SQLITE_CONSTRAINT_PRIMARYKEY;
		rc = db_fail(s, "insert agent", err, errlen);
		goto out;
	}
	rc = STORE_OK;
out:
	sqlite3_finalize(st);
	return rc;
}

/* Spends one use of a limited token; unlimited ones (-1) are left alone. */
static int
consume_use(struct store *s, const struct store_token *t, char *err,
    size_t errlen)
{
	sqlite3_stmt *st = NULL;
	int rc = STORE_ERR;

	if (t->uses_left < 0)
		return STORE_OK;
	if (prepare(s, "UPDATE tokens SET uses_left = uses_left - 1 "
	    "WHERE id = ? AND uses_left > 0", &st, err, errlen) != STORE_OK)
		goto out;
	bind_text(st, 1, t->id);
	if (sqlite3_step(st) != SQLITE_DONE) {
		rc = db_fail(s, "consume token use", err, errlen);
		goto out;
	}
	/* The row was read in this same transaction, so this cannot miss. */
	if (sqlite3_changes(s->db) != 1) {
		snprintf(err, errlen, "import token used up");
		rc = STORE_REFUSED;
		goto out;
	}
	rc = STORE_OK;
out:
	sqlite3_finalize(st);
	return rc;
}

/* The token rules that hold even for a retry: it must be a live import
 * token.  Use counts are checked later, as a retry spends none. */
static int
check_import_token(struct store *s, const char *token_id, int64_t now,
    struct store_token *t, char *err, size_t errlen)
{
	const char *why;
	int rc;

	rc = token_lookup(s, token_id, t, err, errlen);
	if (rc == STORE_NOTFOUND) {
		snprintf(err, errlen, "unknown import token");
		return STORE_REFUSED;
	}
	if (rc != STORE_OK)
		return rc;
	if (t->kind != TOKEN_IMPORT) {
		snprintf(err, errlen, "not an import token");
		return STORE_REFUSED;
	}
	if (t->revoked) {
		snprintf(err, errlen, "import token revoked");
		return STORE_REFUSED;
	}
	/* Expiry alone: uses_left -1 keeps the use count out of it. */
	if ((why = token_unusable_reason(t->expires_at, -1, now)) != NULL) {
		snprintf(err, errlen, "import token %s", why);
		return STORE_REFUSED;
	}
	return STORE_OK;
}

static int
refuse_taken(struct store *s, const struct store_agent *live, char *err,
    size_t errlen)
{
	struct store_cluster c;

	/* The name is what the operator knows the cluster by. */
	if (store_cluster_get(s, live->cluster, &c) != STORE_OK)
		snprintf(c.name, sizeof(c.name), "%s", live->cluster);
	snprintf(err, errlen, "node %s is already registered in cluster %s "
	    "as agent %s", live->node, c.name, live->id);
	return STORE_REFUSED;
}

static int
new_agent(struct store *s, const struct store_token *t, const char *node,
    const uint8_t pubkey[32], int64_t now, struct store_agent *a,
    char *err, size_t errlen)
{
	bool collided = true;
	int attempt, rc = STORE_ERR;

	memset(a, 0, sizeof(*a));
	snprintf(a->cluster, sizeof(a->cluster), "%s", t->cluster);
	snprintf(a->node, sizeof(a->node), "%s", node);
	memcpy(a->pubkey, pubkey, sizeof(a->pubkey));
	a->state = t->approval_manual ? AGENT_PENDING_APPROVAL : AGENT_ENROLL;
	snprintf(a->token_id, sizeof(a->token_id), "%s", t->id);
	a->created_at = a->updated_at = now;
	for (attempt = 0; attempt < ID_ATTEMPTS && collided; attempt++) {
		if (make_id("a-", a->id, err, errlen) != STORE_OK)
			return STORE_ERR;
		rc = insert_agent(s, a, &collided, err, errlen);
	}
	return rc;
}

static int
register_locked(struct store *s, const char *token_id, const char *node,
    const uint8_t pubkey[32], int64_t now, struct store_agent *out,
    bool *created, char *err, size_t errlen)
{
	struct store_token t;
	struct store_agent found;
	const char *why;
	int rc;

	if ((rc = check_import_token(s, token_id, now, &t, err, errlen)) !=
	    STORE_OK)
		return rc;

	/* A retry (the REGISTERED reply was lost): same answer, no use spent. */
	rc = find_same_key(s, t.cluster, node, pubkey, &found, err, errlen);
	if (rc == STORE_OK) {
		*out = found;
		*created = false;
		return STORE_OK;
	}
	if (rc != STORE_NOTFOUND)
		return rc;

	if ((why = token_unusable_reason(0, t.uses_left, now)) != NULL) {
		snprintf(err, errlen, "import token %s", why);
		return STORE_REFUSED;
	}

	rc = find_live(s, t.cluster, node, &found, err, errlen);
	if (rc == STORE_OK)
		return refuse_taken(s, &found, err, errlen);
	if (rc != STORE_NOTFOUND)
		return rc;

	if ((rc = new_agent(s, &t, node, pubkey, now, out, err, errlen)) !=
	    STORE_OK)
		return rc;
	if ((rc = consume_use(s, &t, err, errlen)) != STORE_OK)
		return rc;
	*created = true;
	return STORE_OK;
}

int
store_agent_register(struct store *s, const char *token_id,
    const char *node, const uint8_t pubkey[32], int64_t now,
    struct store_agent *out, bool *created, char *err, size_t errlen)
{
	struct store_agent a;
	bool made = false;
	int rc;
	METRICS_STORE_TIMED();

	if (!name_valid(node))
		return refuse_name("node", err, errlen);
	if (token_id == NULL || *token_id == '\0') {
		snprintf(err, errlen, "unknown import token");
		return STORE_REFUSED;
	}
	if (begin(s, err, errlen) != STORE_OK)
		return STORE_ERR;
	rc = register_locked(s, token_id, node, pubkey, now, &a, &made, err,
	    errlen);
	if ((rc = finish(s, rc, err, errlen)) != STORE_OK)
		return rc;
	if (made)
		metrics_agent_moved(-1, (int)a.state);
	/* Only a committed result is handed out. */
	if (out != NULL)
		*out = a;
	if (created != NULL)
		*created = made;
	return STORE_OK;
}

int
store_agent_get(struct store *s, const char *id, struct store_agent *out)
{
	char err[STORE_ERROR_MAX + 1];
	int rc;
	METRICS_STORE_TIMED();

	rc = agent_lookup(s, id, out, err, sizeof(err));
	if (rc == STORE_ERR)
		error("store: reading an agent failed", KV_S("agent", id), KV_S("err", err));
	return rc;
}

int
store_agent_list(struct store *s, const char *cluster,
    struct store_agent **out, size_t *n)
{
	char err[STORE_ERROR_MAX + 1];
	sqlite3_stmt *st = NULL;
	int rc = STORE_ERR;
	METRICS_STORE_TIMED();

	*out = NULL;
	*n = 0;
	if (prepare(s, cluster != NULL ?
	    "SELECT " AGENT_COLS " FROM agents WHERE cluster_id = ? "
	    "ORDER BY created_at, rowid" :
	    "SELECT " AGENT_COLS " FROM agents ORDER BY created_at, rowid",
	    &st, err, sizeof(err)) == STORE_OK) {
		if (cluster != NULL)
			bind_text(st, 1, cluster);
		rc = collect_rows(s, st, sizeof(**out), read_agent_row, "agent",
		    (void **)out, n, err, sizeof(err));
	}
	if (rc != STORE_OK)
		error("store: listing agents failed", KV_S("err", err));
	sqlite3_finalize(st);
	return rc;
}

/* The last_error an event leaves behind (see store.h). */
static void
next_error(const struct store_agent *a, enum agent_event ev,
    const char *given, char out[STORE_ERROR_MAX + 1])
{
	const char *e;

	if (ev == AGENT_EV_VERIFY_OK)
		e = "";
	else if (given != NULL)
		e = given;
	else if (ev == AGENT_EV_VERIFY_FAIL)
		e = "verification failed";  /* a failure always says so */
	else
		e = a->last_error;
	/* Clip rather than refuse: the transition matters more than the
	 * tail of a message. */
	snprintf(out, STORE_ERROR_MAX + 1, "%.*s",
	    (int)clip_utf8(e, STORE_ERROR_MAX), e);
}

static int
update_agent_state(struct store *s, const struct store_agent *a, char *err,
    size_t errlen)
{
	sqlite3_stmt *st = NULL;
	int rc = STORE_ERR;

	if (prepare(s, "UPDATE agents SET state = ?, last_error = ?, "
	    "updated_at = ? WHERE id = ?", &st, err, errlen) != STORE_OK)
		goto out;
	bind_text(st, 1, agent_state_name(a->state));
	bind_text(st, 2, a->last_error);
	sqlite3_bind_int64(st, 3, a->updated_at);
	bind_text(st, 4, a->id);
	if (sqlite3_step(st) != SQLITE_DONE) {
		rc = db_fail(s, "update agent", err, errlen);
		goto out;
	}
	rc = STORE_OK;
out:
	sqlite3_finalize(st);
	return rc;
}

/* *from: the state before (for the metrics, once committed). */
static int
transition_locked(struct store *s, const char *id, enum agent_event ev,
    const char *last_error, int64_t now, struct store_agent *a,
    enum agent_state *from, char *err, size_t errlen)
{
	enum agent_state next;
	char msg[STORE_ERROR_MAX + 1];
	int rc;

	if ((rc = agent_lookup(s, id, a, err, errlen)) != STORE_OK)
		return rc;
	if (agent_state_next(a->state, ev, &next, err, errlen) == -1)
		return STORE_REFUSED;
	next_error(a, ev, last_error, msg);
	*from = a->state;
	a->state = next;
	memcpy(a->last_error, msg, sizeof(a->last_error));
	a->updated_at = now;
	return update_agent_state(s, a, err, errlen);
}

int
store_agent_transition(struct store *s, const char *id,
    enum agent_event ev, const char *last_error, int64_t now,
    struct store_agent *out, char *err, size_t errlen)
{
	struct store_agent a;
	enum agent_state from = AGENT_STATE_ENTRIES;
	int rc;
	METRICS_STORE_TIMED();

	if (begin(s, err, errlen) != STORE_OK)
		return STORE_ERR;
	rc = transition_locked(s, id, ev, last_error, now, &a, &from, err, errlen);
	if ((rc = finish(s, rc, err, errlen)) != STORE_OK)
		return rc;
	metrics_agent_moved((int)from, (int)a.state);
	if (out != NULL)
		*out = a;
	return STORE_OK;
}
