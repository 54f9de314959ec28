/*
 * test_store.c: the store against a real database: opening and migrating
 * (a schema-1 database upgraded in place), clusters, tokens, user tokens and
 * their scopes, the register rules, persisted transitions, a second
 * connection, and several connections registering and migrating at once.
 *
 * By default on SQLite, a database file in a temp directory per test.  With
 * TETHER_TEST_PG_URL=postgres://... (test_store_postgres.sh starts a private
 * PostgreSQL and sets it) the same tests run on PostgreSQL, the schema
 * dropped before each; the few that are about SQLite's files and locks
 * are skipped there.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <dirent.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <libpq-fe.h>
#include <sqlite3.h>

#include "log.h"
#include "store.h"
#include "store_backend.h"   /* groups: the store thread's (store_worker.c) */

#define NOW 1700000000
#define SCHEMA_NOW 11      /* the schema version this gateway migrates to */

/* The PostgreSQL database the tests run on, or NULL for SQLite. */
static const char *pg_url;

struct fixture {
	char dir[64];
	char path[128];
	char url[160];
	struct store *s;
};

/* ---- helpers ------------------------------------------------------------ */

static void
quiet(void *arg, const char *msg)
{
	(void)arg;
	(void)msg;
}

/* Runs sql on a PostgreSQL connection of our own; the answer's first
 * value as an integer (0 when there is none), or -1 on a failure. */
static int64_t
pg_sql(const char *sql)
{
	PGconn *c = PQconnectdb(pg_url);
	PGresult *r;
	int64_t v = -1;

	if (PQstatus(c) == CONNECTION_OK) {
		PQsetNoticeProcessor(c, quiet, NULL);
		r = PQexec(c, sql);
		if (PQresultStatus(r) == PGRES_TUPLES_OK && PQntuples(r) > 0)
			v = strtoll(PQgetvalue(r, 0, 0), NULL, 10);
		else if (PQresultStatus(r) == PGRES_TUPLES_OK ||
		    PQresultStatus(r) == PGRES_COMMAND_OK)
			v = 0;
		else
			fprintf(stderr, "%s: %s", sql, PQerrorMessage(c));
		PQclear(r);
	} else {
		fprintf(stderr, "%s", PQerrorMessage(c));
	}
	PQfinish(c);
	return v;
}

/* An empty database for the next test. */
static int
pg_reset(void)
{
	return pg_sql("DROP SCHEMA public CASCADE; CREATE SCHEMA public") ==
	    -1 ? -1 : 0;
}

static void
sqlite_only(void)
{
	if (pg_url != NULL)
		skip();
}

static int
setup(void **state)
{
	struct fixture *f = calloc(1, sizeof(*f));
	char err[STORE_ERROR_MAX + 1];

	if (f == NULL)
		return -1;
	snprintf(f->dir, sizeof(f->dir), "/tmp/tether-store-XXXXXX");
	if (mkdtemp(f->dir) == NULL) {
		free(f);
		return -1;
	}
	snprintf(f->path, sizeof(f->path), "%s/tether.db", f->dir);
	snprintf(f->url, sizeof(f->url), "sqlite://%s", f->path);
	if (pg_url != NULL) {
		if (pg_reset() != 0) {
			free(f);
			return -1;
		}
		snprintf(f->url, sizeof(f->url), "%s", pg_url);
	}
	if (store_open(f->url, &f->s, err, sizeof(err)) != STORE_OK) {
		fprintf(stderr, "store_open: %s\n", err);
		free(f);
		return -1;
	}
	*state = f;
	return 0;
}

/* Removes whatever the test left in its directory (db, -wal, -shm). */
static int
teardown(void **state)
{
	struct fixture *f = *state;
	char p[512];
	struct dirent *de;
	DIR *d;

	store_close(f->s);
	if ((d = opendir(f->dir)) != NULL) {
		while ((de = readdir(d)) != NULL) {
			if (strcmp(de->d_name, ".") == 0 ||
			    strcmp(de->d_name, "..") == 0)
				continue;
			snprintf(p, sizeof(p), "%s/%s", f->dir, de->d_name);
			unlink(p);
		}
		closedir(d);
	}
	rmdir(f->dir);
	free(f);
	return 0;
}

static void
reopen(struct fixture *f)
{
	char err[STORE_ERROR_MAX + 1];

	store_close(f->s);
	f->s = NULL;
	assert_int_equal(store_open(f->url, &f->s, err, sizeof(err)), STORE_OK);
}

static int
is_id(const char *id, char prefix)
{
	size_t i;

	if (strlen(id) != 14 || id[0] != prefix || id[1] != '-')
		return 0;
	for (i = 2; i < 14; i++)
		if (strchr("0123456789abcdef", id[i]) == NULL)
			return 0;
	return 1;
}

static void
make_cluster(struct fixture *f, const char *name, struct store_cluster *c)
{
	char err[STORE_ERROR_MAX + 1];

	assert_int_equal(store_cluster_create(f->s, name, NOW, c, err,
	    sizeof(err)), STORE_OK);
}

static void
fill_token(struct store_token *t, const char *id, enum token_kind kind,
    const char *cluster)
{
	memset(t, 0, sizeof(*t));
	snprintf(t->id, sizeof(t->id), "%s", id);
	t->kind = kind;
	snprintf(t->cluster, sizeof(t->cluster), "%s", cluster);
	memset(t->verifier, 0x5a, sizeof(t->verifier));
	t->expires_at = NOW + 3600;
	t->uses_left = 1;
	t->created_at = NOW;
}

static void
insert_token(struct fixture *f, const struct store_token *t)
{
	char err[STORE_ERROR_MAX + 1];

	assert_int_equal(store_token_insert(f->s, t, err, sizeof(err)),
	    STORE_OK);
}

/* An import token with the given uses, for cluster *c, which is first
 * created as "prod" when its id is empty. */
static void
make_import(struct fixture *f, const char *token_id, int64_t uses,
    bool manual, struct store_cluster *c)
{
	struct store_token t;

	if (c->id[0] == '\0')
		make_cluster(f, "prod", c);
	fill_token(&t, token_id, TOKEN_IMPORT, c->id);
	t.uses_left = uses;
	t.approval_manual = manual;
	insert_token(f, &t);
}

static void
key(uint8_t k[32], uint8_t fill)
{
	memset(k, fill, 32);
}

static int64_t
uses_of(struct fixture *f, const char *token_id)
{
	struct store_token t;

	assert_int_equal(store_token_get(f->s, token_id, &t), STORE_OK);
	return t.uses_left;
}

static void
expect_refused(struct fixture *f, const char *token_id, const char *node,
    uint8_t keyfill, const char *want)
{
	char err[STORE_ERROR_MAX + 1] = "";
	struct store_agent a;
	bool created = true;
	uint8_t k[32];

	key(k, keyfill);
	assert_int_equal(store_agent_register(f->s, token_id, node, k, NOW, &a,
	    &created, err, sizeof(err)), STORE_REFUSED);
	assert_string_equal(err, want);
}

static void
do_register(struct fixture *f, const char *token_id, const char *node,
    uint8_t keyfill, struct store_agent *a, bool *created)
{
	char err[STORE_ERROR_MAX + 1] = "";
	uint8_t k[32];
	int rc;

	key(k, keyfill);
	rc = store_agent_register(f->s, token_id, node, k, NOW, a, created, err,
	    sizeof(err));
	if (rc != STORE_OK)
		fprintf(stderr, "register: %s\n", err);
	assert_int_equal(rc, STORE_OK);
}

static void
do_transition(struct store *s, const char *id, enum agent_event ev,
    const char *last_error, struct store_agent *a)
{
	char err[STORE_ERROR_MAX + 1] = "";
	int rc;

	rc = store_agent_transition(s, id, ev, last_error, NOW + 10, a, NULL, err,
	    sizeof(err));
	if (rc != STORE_OK)
		fprintf(stderr, "transition: %s\n", err);
	assert_int_equal(rc, STORE_OK);
}

/* Runs a query that answers one integer, on a connection of our own. */
static int64_t
raw_int(const char *path, const char *sql)
{
	if (pg_url != NULL) {
		int64_t v = pg_sql(sql);

		assert_true(v >= 0);
		return v;
	}
	sqlite3 *db = NULL;
	sqlite3_stmt *st = NULL;
	int64_t v;

	assert_int_equal(sqlite3_open_v2(path, &db, SQLITE_OPEN_READWRITE,
	    NULL), SQLITE_OK);
	assert_int_equal(sqlite3_prepare_v2(db, sql, -1, &st, NULL), SQLITE_OK);
	assert_int_equal(sqlite3_step(st), SQLITE_ROW);
	v = sqlite3_column_int64(st, 0);
	sqlite3_finalize(st);
	sqlite3_close(db);
	return v;
}

/* ---- open and migrations ------------------------------------------------ */

static void
test_open_creates_and_migrates(void **state)
{
	struct fixture *f = *state;
	struct store_cluster c, got;
	struct stat st;
	char wal[160];

	assert_int_equal(store_schema_version(f->s), SCHEMA_NOW);
	make_cluster(f, "keepme", &c);
	if (pg_url == NULL) {
		assert_int_equal(stat(f->path, &st), 0);
		assert_int_equal(st.st_mode & 0777, 0600);
		/* SQLite gives the WAL the database file's mode. */
		snprintf(wal, sizeof(wal), "%s-wal", f->path);
		assert_int_equal(stat(wal, &st), 0);
		assert_int_equal(st.st_mode & 0777, 0600);
	}

	reopen(f);
	assert_int_equal(store_schema_version(f->s), SCHEMA_NOW);
	assert_int_equal(store_cluster_get(f->s, c.id, &got), STORE_OK);
	assert_string_equal(got.name, "keepme");
	/* Each migration ran once, not once per open. */
	assert_int_equal(raw_int(f->path, "SELECT count(*) FROM schema_version"),
	    SCHEMA_NOW);
	if (pg_url == NULL)
		assert_int_equal(raw_int(f->path,
		    "SELECT journal_mode = 'wal' FROM pragma_journal_mode"), 1);
}

/*
 * A registration's same-key read (store.c find_same_key, and PostgreSQL's
 * tether_register) finds the node's agents, revoked ones too, through an
 * index on (cluster_id, node): the partial agents_live_node cannot serve
 * it, and without schema 11 SQLite scanned every agent of the cluster
 * (agents_by_cluster), a join costing the cluster's size.  PostgreSQL
 * plans by table statistics (an empty table is scanned whatever the
 * indexes), so there the index's presence is what is checked.
 */
static void
test_same_key_read_indexed(void **state)
{
	struct fixture *f = *state;
	sqlite3 *db = NULL;
	sqlite3_stmt *st = NULL;
	bool by_node = false;

	if (pg_url != NULL) {
		assert_int_equal(pg_sql("SELECT count(*) FROM pg_indexes "
		    "WHERE tablename = 'agents' AND indexname = 'agents_by_node'"), 1);
		return;
	}
	assert_int_equal(sqlite3_open_v2(f->path, &db, SQLITE_OPEN_READONLY,
	    NULL), SQLITE_OK);
	assert_int_equal(sqlite3_prepare_v2(db, "EXPLAIN QUERY PLAN "
	    "SELECT id FROM agents WHERE cluster_id = ? AND node = ? "
	    "AND pubkey = ? ORDER BY state = 'revoked', created_at DESC, "
	    "rowid DESC LIMIT 1", -1, &st, NULL), SQLITE_OK);
	while (sqlite3_step(st) == SQLITE_ROW) {
		const char *detail = (const char *)sqlite3_column_text(st, 3);

		if (detail != NULL && strstr(detail, "agents_by_node "
		    "(cluster_id=? AND node=?)") != NULL)
			by_node = true;
	}
	sqlite3_finalize(st);
	sqlite3_close(db);
	assert_true(by_node);
}

static void
test_open_bad_urls(void **state)
{
	struct fixture *f = *state;
	char err[STORE_ERROR_MAX + 1], url[256];
	struct store *s = (struct store *)1;

	/* Nothing listens on port 1: refused at once, the password not
	 * echoed. */
	assert_int_equal(store_open("postgres://u:pw@127.0.0.1:1/tether", &s,
	    err, sizeof(err)), STORE_ERR);
	assert_null(s);
	assert_non_null(strstr(err, "cannot connect to PostgreSQL"));
	assert_null(strstr(err, "pw"));

	assert_int_equal(store_open("mysql://u:secret@db", &s, err, sizeof(err)),
	    STORE_ERR);
	assert_null(strstr(err, "secret"));
	assert_int_equal(store_open("sqlite://", &s, err, sizeof(err)),
	    STORE_ERR);
	assert_int_equal(store_open("", &s, err, sizeof(err)), STORE_ERR);

	snprintf(url, sizeof(url), "sqlite://%s/no/such/dir/x.db", f->dir);
	assert_int_equal(store_open(url, &s, err, sizeof(err)), STORE_ERR);
	assert_null(s);
}

static void
test_newer_schema_refused(void **state)
{
	struct fixture *f = *state;
	char err[STORE_ERROR_MAX + 1];
	sqlite3 *db;

	if (pg_url != NULL) {
		assert_int_equal(pg_sql("INSERT INTO schema_version "
		    "VALUES (99, 0)"), 0);
	} else {
		assert_int_equal(sqlite3_open(f->path, &db), SQLITE_OK);
		assert_int_equal(sqlite3_exec(db, "INSERT INTO schema_version "
		    "VALUES (99, 0)", NULL, NULL, NULL), SQLITE_OK);
		sqlite3_close(db);
	}

	store_close(f->s);
	assert_int_equal(store_open(f->url, &f->s, err, sizeof(err)), STORE_ERR);
	assert_null(f->s);
	assert_non_null(strstr(err, "newer"));
}

/*
 * Migration 1 exactly as released (migrations are never edited), to build
 * the database a schema-1 gateway left behind.
 */
static const char schema_v1[] =
	"CREATE TABLE schema_version ("
	"  version    INTEGER NOT NULL PRIMARY KEY,"
	"  applied_at INTEGER NOT NULL"
	") STRICT;"
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
	"CREATE UNIQUE INDEX agents_live_node ON agents (cluster_id, node)"
	"  WHERE state <> 'revoked';"
	"CREATE INDEX agents_by_cluster ON agents (cluster_id, created_at);"
	"INSERT INTO schema_version VALUES (1, 1700000000);"
	/* What a schema-1 gateway had in it. */
	"INSERT INTO clusters VALUES ('c-0000000000aa', 'old', 1700000000);"
	"INSERT INTO tokens (id, kind, name, verifier, created_at) VALUES "
	"  ('aaaaaaaaaaaaaaaa', 'admin', 'admin', zeroblob(32), 1700000000);"
	"INSERT INTO tokens (id, kind, cluster_id, verifier, uses_left, "
	"  created_at) VALUES ('bbbbbbbbbbbbbbbb', 'import', 'c-0000000000aa', "
	"  zeroblob(32), 1, 1700000000);";

static void
test_migrates_v1_in_place(void **state)
{
	struct fixture *f = *state;
	char err[STORE_ERROR_MAX + 1], path[160], url[192];
	const char *ids[] = { "c-0000000000aa" };
	struct store_cluster c;
	struct store_token t;
	struct store_user_token u;
	struct store *s = NULL;
	sqlite3 *db;

	sqlite_only();
	snprintf(path, sizeof(path), "%s/v1.db", f->dir);
	snprintf(url, sizeof(url), "sqlite://%s", path);
	assert_int_equal(sqlite3_open(path, &db), SQLITE_OK);
	assert_int_equal(sqlite3_exec(db, schema_v1, NULL, NULL, NULL),
	    SQLITE_OK);
	sqlite3_close(db);

	assert_int_equal(store_open(url, &s, err, sizeof(err)), STORE_OK);
	assert_int_equal(store_schema_version(s), SCHEMA_NOW);
	assert_int_equal(raw_int(path, "SELECT max(version) FROM schema_version"),
	    SCHEMA_NOW);
	/* What was there is still there, and reads as before. */
	assert_int_equal(store_cluster_get(s, "c-0000000000aa", &c), STORE_OK);
	assert_string_equal(c.name, "old");
	assert_int_equal(store_token_get(s, "aaaaaaaaaaaaaaaa", &t), STORE_OK);
	assert_int_equal(t.kind, TOKEN_ADMIN);
	assert_int_equal(store_token_get(s, "bbbbbbbbbbbbbbbb", &t), STORE_OK);
	assert_int_equal(t.kind, TOKEN_IMPORT);
	assert_int_equal(raw_int(path, "SELECT count(*) FROM token_clusters"), 0);

	/* And the new tables work on it. */
	fill_token(&t, "cccccccccccccccc", TOKEN_USER, "");
	snprintf(t.name, sizeof(t.name), "alice");
	assert_int_equal(store_user_token_create(s, &t, ids, 1, &u, err,
	    sizeof(err)), STORE_OK);
	assert_int_equal(store_token_in_cluster(s, t.id, "c-0000000000aa"),
	    STORE_OK);
	store_close(s);
	unlink(path);
}

/* ---- user tokens -------------------------------------------------------- */

static void
fill_user(struct store_token *t, const char *id, const char *name)
{
	fill_token(t, id, TOKEN_USER, "");
	snprintf(t->name, sizeof(t->name), "%s", name);
	t->expires_at = 0;
	t->uses_left = -1;
}

static void
test_user_tokens(void **state)
{
	struct fixture *f = *state;
	char err[STORE_ERROR_MAX + 1];
	struct store_cluster a, b, c;
	struct store_token t, got;
	struct store_user_token u, *list;
	const char *ids[3];
	size_t n;

	make_cluster(f, "a", &a);
	make_cluster(f, "b", &b);
	make_cluster(f, "c", &c);

	/* Scoped to a and b, a given twice: counted once, order kept. */
	fill_user(&t, "1111111111111111", "alice@example.com");
	ids[0] = b.id;
	ids[1] = a.id;
	ids[2] = b.id;
	assert_int_equal(store_user_token_create(f->s, &t, ids, 3, &u, err,
	    sizeof(err)), STORE_OK);
	assert_string_equal(u.id, t.id);
	assert_string_equal(u.name, "alice@example.com");
	assert_int_equal(u.nclusters, 2);
	assert_string_equal(u.clusters[0], b.id);
	assert_string_equal(u.clusters[1], a.id);
	assert_false(u.revoked);
	assert_int_equal(u.created_at, NOW);
	/* The token itself is an ordinary record, kind user, no cluster. */
	assert_int_equal(store_token_get(f->s, t.id, &got), STORE_OK);
	assert_int_equal(got.kind, TOKEN_USER);
	assert_string_equal(got.cluster, "");
	assert_memory_equal(got.verifier, t.verifier, 32);

	assert_int_equal(store_token_in_cluster(f->s, t.id, a.id), STORE_OK);
	assert_int_equal(store_token_in_cluster(f->s, t.id, b.id), STORE_OK);
	assert_int_equal(store_token_in_cluster(f->s, t.id, c.id),
	    STORE_NOTFOUND);
	assert_int_equal(store_token_in_cluster(f->s, t.id, "c-000000000000"),
	    STORE_NOTFOUND);
	assert_int_equal(store_token_in_cluster(f->s, "ffffffffffffffff", a.id),
	    STORE_NOTFOUND);

	/* A second token for alice, one for bob. */
	fill_user(&t, "2222222222222222", "alice@example.com");
	t.created_at = NOW + 1;
	ids[0] = c.id;
	assert_int_equal(store_user_token_create(f->s, &t, ids, 1, NULL, err,
	    sizeof(err)), STORE_OK);
	fill_user(&t, "3333333333333333", "bob");
	t.created_at = NOW + 2;
	assert_int_equal(store_user_token_create(f->s, &t, ids, 1, NULL, err,
	    sizeof(err)), STORE_OK);

	assert_int_equal(store_user_token_list(f->s, &list, &n), STORE_OK);
	assert_int_equal(n, 3);
	assert_string_equal(list[0].id, "1111111111111111");
	assert_int_equal(list[0].nclusters, 2);
	assert_string_equal(list[0].clusters[0], b.id);
	assert_string_equal(list[0].clusters[1], a.id);
	assert_string_equal(list[1].id, "2222222222222222");
	assert_int_equal(list[1].nclusters, 1);
	assert_string_equal(list[1].clusters[0], c.id);
	assert_string_equal(list[2].name, "bob");
	free(list);

	/* One token by its id, with its clusters in order; nothing else. */
	memset(&u, 0, sizeof(u));
	assert_int_equal(store_user_token_get(f->s, "1111111111111111", &u), STORE_OK);
	assert_string_equal(u.name, "alice@example.com");
	assert_int_equal(u.nclusters, 2);
	assert_string_equal(u.clusters[0], b.id);
	assert_string_equal(u.clusters[1], a.id);
	assert_int_equal(store_user_token_get(f->s, "3333333333333333", &u), STORE_OK);
	assert_string_equal(u.name, "bob");
	assert_int_equal(u.nclusters, 1);
	assert_int_equal(store_user_token_get(f->s, "ffffffffffffffff", &u),
	    STORE_NOTFOUND);
	/* An admin token's id is not a user token. */
	memset(&t, 0, sizeof(t));
	snprintf(t.id, sizeof(t.id), "4444444444444444");
	t.kind = TOKEN_ADMIN;
	snprintf(t.name, sizeof(t.name), "admin");
	t.uses_left = -1;
	assert_int_equal(store_token_insert(f->s, &t, err, sizeof(err)), STORE_OK);
	assert_int_equal(store_user_token_get(f->s, "4444444444444444", &u),
	    STORE_NOTFOUND);
}

static void
test_user_revoke(void **state)
{
	struct fixture *f = *state;
	char err[STORE_ERROR_MAX + 1];
	struct store_cluster a;
	struct store_token t;
	struct store_user_token *list;
	const char *ids[1];
	int64_t count = -1;
	size_t n, i;

	make_cluster(f, "a", &a);
	ids[0] = a.id;
	fill_user(&t, "1111111111111111", "alice");
	assert_int_equal(store_user_token_create(f->s, &t, ids, 1, NULL, err,
	    sizeof(err)), STORE_OK);
	fill_user(&t, "2222222222222222", "alice");
	assert_int_equal(store_user_token_create(f->s, &t, ids, 1, NULL, err,
	    sizeof(err)), STORE_OK);
	fill_user(&t, "3333333333333333", "alice2");
	assert_int_equal(store_user_token_create(f->s, &t, ids, 1, NULL, err,
	    sizeof(err)), STORE_OK);

	assert_int_equal(store_user_revoke(f->s, "alice", &count, err,
	    sizeof(err)), STORE_OK);
	assert_int_equal(count, 2);
	/* Again: nothing left to revoke, but the user is known. */
	assert_int_equal(store_user_revoke(f->s, "alice", &count, err,
	    sizeof(err)), STORE_OK);
	assert_int_equal(count, 0);
	assert_int_equal(store_user_revoke(f->s, "carol", &count, err,
	    sizeof(err)), STORE_NOTFOUND);
	assert_int_equal(store_user_revoke(f->s, "bad name", &count, err,
	    sizeof(err)), STORE_REFUSED);

	assert_int_equal(store_user_token_list(f->s, &list, &n), STORE_OK);
	assert_int_equal(n, 3);
	for (i = 0; i < n; i++)
		assert_int_equal(list[i].revoked, strcmp(list[i].name, "alice") == 0);
	free(list);
	/* Revoking changes nothing about scope: the checks look at both. */
	assert_int_equal(store_token_in_cluster(f->s, "1111111111111111", a.id),
	    STORE_OK);
}

/* One user token by its id: only that one, only a user token. */
static void
test_user_token_revoke(void **state)
{
	struct fixture *f = *state;
	char err[STORE_ERROR_MAX + 1];
	struct store_cluster a = { .id = "" };
	struct store_token t;
	struct store_user_token u;
	const char *ids[1];

	make_cluster(f, "a", &a);
	ids[0] = a.id;
	fill_user(&t, "1111111111111111", "alice");
	assert_int_equal(store_user_token_create(f->s, &t, ids, 1, NULL, err,
	    sizeof(err)), STORE_OK);
	fill_user(&t, "2222222222222222", "alice");
	assert_int_equal(store_user_token_create(f->s, &t, ids, 1, NULL, err,
	    sizeof(err)), STORE_OK);
	make_import(f, "3333333333333333", 1, false, &a);

	assert_int_equal(store_user_token_revoke(f->s, "1111111111111111", &u,
	    err, sizeof(err)), STORE_OK);
	assert_string_equal(u.id, "1111111111111111");
	assert_string_equal(u.name, "alice");
	assert_true(u.revoked);
	/* Again: still revoked, still found. */
	assert_int_equal(store_user_token_revoke(f->s, "1111111111111111", &u,
	    err, sizeof(err)), STORE_OK);
	/* The user's other token is untouched. */
	assert_int_equal(store_user_token_get(f->s, "2222222222222222", &u),
	    STORE_OK);
	assert_false(u.revoked);
	/* An import token, and no token: not here. */
	assert_int_equal(store_user_token_revoke(f->s, "3333333333333333", &u,
	    err, sizeof(err)), STORE_NOTFOUND);
	assert_int_equal(store_user_token_revoke(f->s, "4444444444444444", NULL,
	    err, sizeof(err)), STORE_NOTFOUND);
	assert_string_equal(err, "no user token 4444444444444444");
}

static void
test_user_token_refusals(void **state)
{
	struct fixture *f = *state;
	static const char *const bad[] = {
		"", "a b", "a/b", "x:y", "alice\n", "caf\xc3\xa9", "a\"b",
	};
	const char *ids[STORE_TOKEN_CLUSTERS_MAX + 1];
	char err[STORE_ERROR_MAX + 1];
	struct store_cluster a;
	struct store_token t, got;
	struct store_user_token *list;
	size_t i, n;

	make_cluster(f, "a", &a);
	for (i = 0; i < sizeof(ids) / sizeof(ids[0]); i++)
		ids[i] = a.id;

	for (i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		fill_user(&t, "1111111111111111", bad[i]);
		assert_int_equal(store_user_token_create(f->s, &t, ids, 1, NULL,
		    err, sizeof(err)), STORE_REFUSED);
		assert_non_null(strstr(err, "invalid user name"));
	}
	/* One over the limit does not fit a record; the rule still says no. */
	assert_false(store_user_name_valid(
	    "0123456789012345678901234567890123456789012345678901234567890123"));
	assert_false(store_user_name_valid(NULL));
	assert_true(store_user_name_valid("alice@example.com"));

	fill_user(&t, "1111111111111111", "alice");
	assert_int_equal(store_user_token_create(f->s, &t, ids, 0, NULL, err,
	    sizeof(err)), STORE_REFUSED);
	assert_int_equal(store_user_token_create(f->s, &t, ids,
	    STORE_TOKEN_CLUSTERS_MAX + 1, NULL, err, sizeof(err)), STORE_REFUSED);
	/* Only user tokens, and only through the list. */
	fill_token(&t, "1111111111111111", TOKEN_ADMIN, "");
	snprintf(t.name, sizeof(t.name), "alice");
	assert_int_equal(store_user_token_create(f->s, &t, ids, 1, NULL, err,
	    sizeof(err)), STORE_REFUSED);
	fill_user(&t, "1111111111111111", "alice");
	snprintf(t.cluster, sizeof(t.cluster), "%s", a.id);
	assert_int_equal(store_user_token_create(f->s, &t, ids, 1, NULL, err,
	    sizeof(err)), STORE_REFUSED);

	/* An unknown cluster anywhere in the list: nothing is written. */
	fill_user(&t, "1111111111111111", "alice");
	ids[1] = "c-000000000000";
	assert_int_equal(store_user_token_create(f->s, &t, ids, 2, NULL, err,
	    sizeof(err)), STORE_NOTFOUND);
	assert_string_equal(err, "no cluster c-000000000000");
	assert_int_equal(store_token_get(f->s, t.id, &got), STORE_NOTFOUND);
	assert_int_equal(raw_int(f->path, "SELECT count(*) FROM token_clusters"),
	    0);
	assert_int_equal(store_user_token_list(f->s, &list, &n), STORE_OK);
	assert_int_equal(n, 0);
	free(list);

	/* The longest name, and a duplicate id. */
	fill_user(&t, "1111111111111111",
	    "012345678901234567890123456789012345678901234567890123456789.@_");
	assert_int_equal(store_user_token_create(f->s, &t, ids, 1, NULL, err,
	    sizeof(err)), STORE_OK);
	assert_int_equal(store_user_token_create(f->s, &t, ids, 1, NULL, err,
	    sizeof(err)), STORE_CONFLICT);
}

/* ---- clusters ----------------------------------------------------------- */

static void
test_clusters(void **state)
{
	struct fixture *f = *state;
	char err[STORE_ERROR_MAX + 1];
	struct store_cluster a, b, got, *list;
	size_t n;

	make_cluster(f, "prod", &a);
	assert_true(is_id(a.id, 'c'));
	assert_string_equal(a.name, "prod");
	assert_int_equal(a.created_at, NOW);
	make_cluster(f, "edge-01.site_a", &b);
	assert_string_not_equal(a.id, b.id);

	assert_int_equal(store_cluster_get(f->s, a.id, &got), STORE_OK);
	assert_string_equal(got.id, a.id);
	assert_string_equal(got.name, "prod");
	assert_int_equal(got.created_at, NOW);
	assert_int_equal(store_cluster_get(f->s, "c-000000000000", &got),
	    STORE_NOTFOUND);

	assert_int_equal(store_cluster_list(f->s, &list, &n), STORE_OK);
	assert_int_equal(n, 2);
	assert_string_equal(list[0].name, "prod");
	assert_string_equal(list[1].name, "edge-01.site_a");
	free(list);

	assert_int_equal(store_cluster_create(f->s, "prod", NOW, &got, err,
	    sizeof(err)), STORE_CONFLICT);
	assert_string_equal(err, "cluster prod already exists");
}

static void
test_cluster_names(void **state)
{
	struct fixture *f = *state;
	static const char *const bad[] = {
		"", "a b", "a/b", "../x", "prod\n", "caf\xc3\xa9", "x;drop",
		"0123456789012345678901234567890123456789012345678901234567890123",
	};
	char err[STORE_ERROR_MAX + 1], longest[STORE_NAME_MAX + 1];
	struct store_cluster c, *list;
	size_t i, n;

	for (i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		err[0] = '\0';
		assert_int_equal(store_cluster_create(f->s, bad[i], NOW, &c, err,
		    sizeof(err)), STORE_REFUSED);
		assert_non_null(strstr(err, "invalid cluster name"));
	}
	assert_int_equal(store_cluster_create(f->s, NULL, NOW, &c, err,
	    sizeof(err)), STORE_REFUSED);
	assert_int_equal(store_cluster_list(f->s, &list, &n), STORE_OK);
	assert_int_equal(n, 0);
	free(list);

	memset(longest, 'x', STORE_NAME_MAX);
	longest[STORE_NAME_MAX] = '\0';
	make_cluster(f, longest, &c);
	assert_string_equal(c.name, longest);
}

/* ---- tokens ------------------------------------------------------------- */

static void
test_tokens(void **state)
{
	struct fixture *f = *state;
	char err[STORE_ERROR_MAX + 1];
	struct store_cluster c;
	struct store_token t, got;

	make_cluster(f, "prod", &c);
	fill_token(&t, "0123456789abcdef", TOKEN_IMPORT, c.id);
	t.uses_left = 5;
	t.approval_manual = true;
	insert_token(f, &t);
	assert_int_equal(store_token_get(f->s, t.id, &got), STORE_OK);
	assert_string_equal(got.id, t.id);
	assert_int_equal(got.kind, TOKEN_IMPORT);
	assert_string_equal(got.cluster, c.id);
	assert_string_equal(got.name, "");
	assert_memory_equal(got.verifier, t.verifier, 32);
	assert_int_equal(got.expires_at, NOW + 3600);
	assert_int_equal(got.uses_left, 5);
	assert_true(got.approval_manual);
	assert_false(got.revoked);
	assert_int_equal(got.created_at, NOW);

	assert_int_equal(store_token_insert(f->s, &t, err, sizeof(err)),
	    STORE_CONFLICT);

	/* Admin and user tokens belong to no cluster. */
	fill_token(&t, "aaaaaaaaaaaaaaaa", TOKEN_ADMIN, "");
	snprintf(t.name, sizeof(t.name), "alice@example.com");
	t.expires_at = 0;
	t.uses_left = -1;
	insert_token(f, &t);
	assert_int_equal(store_token_get(f->s, t.id, &got), STORE_OK);
	assert_int_equal(got.kind, TOKEN_ADMIN);
	assert_string_equal(got.cluster, "");
	assert_string_equal(got.name, "alice@example.com");
	assert_int_equal(got.uses_left, -1);

	assert_int_equal(store_token_get(f->s, "ffffffffffffffff", &got),
	    STORE_NOTFOUND);

	fill_token(&t, "bbbbbbbbbbbbbbbb", TOKEN_IMPORT, "");
	assert_int_equal(store_token_insert(f->s, &t, err, sizeof(err)),
	    STORE_REFUSED);
	fill_token(&t, "bbbbbbbbbbbbbbbb", TOKEN_IMPORT, "c-000000000000");
	assert_int_equal(store_token_insert(f->s, &t, err, sizeof(err)),
	    STORE_REFUSED);
	fill_token(&t, "bbbbbbbbbbbbbbbb", (enum token_kind)7, c.id);
	assert_int_equal(store_token_insert(f->s, &t, err, sizeof(err)),
	    STORE_REFUSED);
}

/* ---- register ----------------------------------------------------------- */

static void
test_register_happy(void **state)
{
	struct fixture *f = *state;
	struct store_cluster c = { .id = "" };
	struct store_agent a, got;
	bool created = false;
	uint8_t k[32];

	make_import(f, "1111111111111111", 2, false, &c);
	do_register(f, "1111111111111111", "node-1", 0x01, &a, &created);
	assert_true(created);
	assert_true(is_id(a.id, 'a'));
	assert_string_equal(a.cluster, c.id);
	assert_string_equal(a.node, "node-1");
	key(k, 0x01);
	assert_memory_equal(a.pubkey, k, 32);
	assert_int_equal(a.state, AGENT_ENROLL);
	assert_string_equal(a.last_error, "");
	assert_string_equal(a.token_id, "1111111111111111");
	assert_int_equal(a.created_at, NOW);
	assert_int_equal(a.updated_at, NOW);
	assert_int_equal(uses_of(f, "1111111111111111"), 1);

	assert_int_equal(store_agent_get(f->s, a.id, &got), STORE_OK);
	assert_memory_equal(&got, &a, sizeof(a));
	assert_int_equal(store_agent_get(f->s, "a-000000000000", &got),
	    STORE_NOTFOUND);
}

/* store_agent_seen: last_seen and the release, nothing else. */
static void
test_agent_seen(void **state)
{
	struct fixture *f = *state;
	struct store_cluster c = { .id = "" };
	struct store_agent a, got;
	char err[STORE_ERROR_MAX + 1] = "";
	bool created = false;

	make_import(f, "1212121212121212", 1, false, &c);
	do_register(f, "1212121212121212", "node-s", 0x12, &a, &created);
	assert_string_equal(a.version, "");
	assert_int_equal(a.last_seen, 0);
	assert_int_equal(store_agent_seen(f->s, a.id, "1.2.3 \"x\"\n", NOW + 5,
	    err, sizeof(err)), STORE_OK);
	assert_int_equal(store_agent_get(f->s, a.id, &got), STORE_OK);
	assert_string_equal(got.version, "1.2.3__x__");
	assert_int_equal(got.last_seen, NOW + 5);
	assert_int_equal(got.updated_at, a.updated_at);
	assert_int_equal(got.state, a.state);
	/* No version: the one recorded stays. */
	assert_int_equal(store_agent_seen(f->s, a.id, NULL, NOW + 9, err,
	    sizeof(err)), STORE_OK);
	assert_int_equal(store_agent_get(f->s, a.id, &got), STORE_OK);
	assert_string_equal(got.version, "1.2.3__x__");
	assert_int_equal(got.last_seen, NOW + 9);
	assert_int_equal(store_agent_seen(f->s, "a-000000000000", "1", NOW, err,
	    sizeof(err)), STORE_OK);
}

/* Node key rotation: request, stage beside the key, swap in one
 * transaction; a retry of the swap is harmless, a stale stage refused,
 * an abandon drops only the key it names. */
static void
test_agent_key_rotation(void **state)
{
	struct fixture *f = *state;
	struct store_cluster c = { .id = "" };
	struct store_agent a, got;
	char err[STORE_ERROR_MAX + 1] = "";
	uint8_t k1[32], k2[32], k3[32];
	bool created = false;

	key(k1, 0x31);
	key(k2, 0x32);
	key(k3, 0x33);
	make_import(f, "3131313131313131", 1, false, &c);
	do_register(f, "3131313131313131", "node-k", 0x31, &a, &created);
	assert_false(a.has_next);
	assert_false(a.key_rotate);
	assert_int_equal(a.key_since, 0);

	assert_int_equal(store_agent_key_request(f->s, a.id, NOW + 1, &got, err,
	    sizeof(err)), STORE_OK);
	assert_true(got.key_rotate);
	assert_int_equal(store_agent_key_request(f->s, "a-000000000000", NOW, NULL,
	    err, sizeof(err)), STORE_NOTFOUND);

	/* Staged only over the key the agent holds. */
	assert_int_equal(store_agent_key_stage(f->s, a.id, k3, k2, err,
	    sizeof(err)), STORE_REFUSED);
	assert_string_equal(err, "the agent's key changed");
	assert_int_equal(store_agent_key_stage(f->s, a.id, k1, k2, err,
	    sizeof(err)), STORE_OK);
	assert_int_equal(store_agent_get(f->s, a.id, &got), STORE_OK);
	assert_memory_equal(got.pubkey, k1, 32);
	assert_true(got.has_next);
	assert_memory_equal(got.next_pubkey, k2, 32);

	/* An abandon naming another key leaves the stage alone. */
	assert_int_equal(store_agent_key_abandon(f->s, a.id, k3, err,
	    sizeof(err)), STORE_OK);
	assert_int_equal(store_agent_get(f->s, a.id, &got), STORE_OK);
	assert_true(got.has_next);

	/* Commit: only the staged key, then once more as a retry. */
	assert_int_equal(store_agent_key_commit(f->s, a.id, k3, NOW + 2, NULL, err,
	    sizeof(err)), STORE_REFUSED);
	assert_int_equal(store_agent_key_commit(f->s, a.id, k2, NOW + 3, &got, err,
	    sizeof(err)), STORE_OK);
	assert_memory_equal(got.pubkey, k2, 32);
	assert_false(got.has_next);
	assert_false(got.key_rotate);
	assert_int_equal(got.key_since, NOW + 3);
	assert_int_equal(store_agent_key_commit(f->s, a.id, k2, NOW + 4, &got, err,
	    sizeof(err)), STORE_OK);
	assert_int_equal(got.key_since, NOW + 3);
	/* The old key is no longer staged nor current: a stage over it fails. */
	assert_int_equal(store_agent_key_stage(f->s, a.id, k1, k3, err,
	    sizeof(err)), STORE_REFUSED);

	/* Abandon: the staged key goes, the current one stays. */
	assert_int_equal(store_agent_key_stage(f->s, a.id, k2, k3, err,
	    sizeof(err)), STORE_OK);
	assert_int_equal(store_agent_key_abandon(f->s, a.id, k3, err,
	    sizeof(err)), STORE_OK);
	assert_int_equal(store_agent_get(f->s, a.id, &got), STORE_OK);
	assert_false(got.has_next);
	assert_memory_equal(got.pubkey, k2, 32);

	/* A revoked agent rotates nothing. */
	assert_int_equal(store_agent_transition(f->s, a.id, AGENT_EV_REVOKE, NULL,
	    NOW + 5, NULL, NULL, err, sizeof(err)), STORE_OK);
	assert_int_equal(store_agent_key_request(f->s, a.id, NOW + 6, NULL, err,
	    sizeof(err)), STORE_REFUSED);
	assert_int_equal(store_agent_key_stage(f->s, a.id, k2, k3, err,
	    sizeof(err)), STORE_REFUSED);
}

/* store_agent_urls: unknown (NULL) until an agent said, then what it
 * said, "" too; nothing else moves.  Settings: absent until set, then
 * replaced whole (docs/0031). */
static void
test_agent_urls_and_settings(void **state)
{
	struct fixture *f = *state;
	struct store_cluster c = { .id = "" };
	struct store_agent a, got;
	char err[STORE_ERROR_MAX + 1] = "", v[STORE_URLS_MAX + 1], big[600];
	bool created = false;

	make_import(f, "5656565656565656", 1, false, &c);
	do_register(f, "5656565656565656", "node-u", 0x56, &a, &created);
	assert_false(a.urls_known);
	assert_string_equal(a.urls, "");
	assert_int_equal(store_agent_urls(f->s, a.id, "", err, sizeof(err)),
	    STORE_OK);
	assert_int_equal(store_agent_get(f->s, a.id, &got), STORE_OK);
	assert_true(got.urls_known);
	assert_string_equal(got.urls, "");
	assert_int_equal(store_agent_urls(f->s, a.id,
	    "https://b.example:8443 https://a.example", err, sizeof(err)), STORE_OK);
	assert_int_equal(store_agent_get(f->s, a.id, &got), STORE_OK);
	assert_true(got.urls_known);
	assert_string_equal(got.urls, "https://b.example:8443 https://a.example");
	assert_int_equal(got.updated_at, a.updated_at);
	assert_int_equal(got.state, a.state);
	memset(big, 'u', sizeof(big) - 1);
	big[sizeof(big) - 1] = '\0';
	assert_int_equal(store_agent_urls(f->s, a.id, big, err, sizeof(err)),
	    STORE_ERR);
	assert_int_equal(store_agent_urls(f->s, "a-000000000000", "", err,
	    sizeof(err)), STORE_OK);

	assert_int_equal(store_setting_get(f->s, STORE_SETTING_URLS, v, sizeof(v),
	    err, sizeof(err)), STORE_NOTFOUND);
	assert_int_equal(store_setting_set(f->s, STORE_SETTING_URLS,
	    "https://a.example", NOW, err, sizeof(err)), STORE_OK);
	assert_int_equal(store_setting_set(f->s, STORE_SETTING_URLS,
	    "https://b.example https://a.example", NOW + 1, err, sizeof(err)),
	    STORE_OK);
	assert_int_equal(store_setting_get(f->s, STORE_SETTING_URLS, v, sizeof(v),
	    err, sizeof(err)), STORE_OK);
	assert_string_equal(v, "https://b.example https://a.example");
	assert_int_equal(store_setting_set(f->s, STORE_SETTING_URLS, "", NOW + 2,
	    err, sizeof(err)), STORE_OK);
	assert_int_equal(store_setting_get(f->s, STORE_SETTING_URLS, v, sizeof(v),
	    err, sizeof(err)), STORE_OK);
	assert_string_equal(v, "");
}

/* store_agents_offline: agents no live replica holds, by last contact;
 * a revoked one never, a held one not while its replica's lease runs. */
static void
test_agents_offline(void **state)
{
	struct fixture *f = *state;
	struct store_cluster c = { .id = "" };
	struct store_agent a, b, r;
	char err[STORE_ERROR_MAX + 1] = "";
	const int64_t over[STORE_OFFLINE_SPANS] = { 300, 3600, 86400 };
	const int64_t t0 = (int64_t)NOW * 1000;
	int64_t n[STORE_OFFLINE_SPANS], mine = 0;
	bool created = false;

	make_import(f, "3434343434343434", 3, false, &c);
	do_register(f, "3434343434343434", "node-a", 0x34, &a, &created);
	do_register(f, "3434343434343434", "node-b", 0x35, &b, &created);
	do_register(f, "3434343434343434", "node-r", 0x36, &r, &created);
	assert_int_equal(store_agent_seen(f->s, a.id, NULL, NOW - 7200, err,
	    sizeof(err)), STORE_OK);
	assert_int_equal(store_agent_seen(f->s, b.id, NULL, NOW - 2 * 86400, err,
	    sizeof(err)), STORE_OK);
	assert_int_equal(store_agent_seen(f->s, r.id, NULL, NOW - 2 * 86400, err,
	    sizeof(err)), STORE_OK);
	do_transition(f->s, r.id, AGENT_EV_REVOKE, NULL, &r);
	assert_int_equal(store_agents_offline(f->s, NOW, over, n, err,
	    sizeof(err)), STORE_OK);
	assert_int_equal(n[0], 2);
	assert_int_equal(n[1], 2);
	assert_int_equal(n[2], 1);
	/* b held by r1: not offline while r1's lease runs, again after. */
	assert_int_equal(store_replica_claim(f->s, "r1", "", 6000, &mine, NULL,
	    err, sizeof(err)), STORE_OK);
	assert_int_equal(store_tunnel_record(f->s, b.id, "r1", t0, err,
	    sizeof(err)), STORE_OK);
	assert_int_equal(store_agents_offline(f->s, NOW, over, n, err,
	    sizeof(err)), STORE_OK);
	assert_int_equal(n[0], 1);
	assert_int_equal(n[2], 0);
	assert_int_equal(store_replica_claim(f->s, "r1", "", -1, &mine, NULL,
	    err, sizeof(err)), STORE_OK);   /* its lease ends now */
	assert_int_equal(store_agents_offline(f->s, NOW, over, n, err,
	    sizeof(err)), STORE_OK);
	assert_int_equal(n[2], 1);
}

/* store_agent_cas and store_agents_holding_ca (CA rotation, docs/0033):
 * unknown (NULL) until an agent said; counted by the CA it named, among
 * all agents not revoked and among those a live replica holds. */
static void
test_agent_cas(void **state)
{
	struct fixture *f = *state;
	struct store_cluster c = { .id = "" };
	struct store_agent a, b, r, got;
	struct store_ca_count n;
	char err[STORE_ERROR_MAX + 1] = "", two[200], big[STORE_CAS_MAX + 2];
	const char *oldca = "sha256:1111111111111111111111111111111111111111111111111111111111111111";
	const char *newca = "sha256:2222222222222222222222222222222222222222222222222222222222222222";
	int64_t mine = 0;
	bool created = false;

	make_import(f, "7878787878787878", 3, false, &c);
	do_register(f, "7878787878787878", "node-a", 0x78, &a, &created);
	do_register(f, "7878787878787878", "node-b", 0x79, &b, &created);
	do_register(f, "7878787878787878", "node-r", 0x7a, &r, &created);
	assert_false(a.cas_known);
	assert_string_equal(a.cas, "");
	assert_int_equal(store_agents_holding_ca(f->s, newca, &n, err,
	    sizeof(err)), STORE_OK);
	assert_int_equal(n.agents, 3);
	assert_int_equal(n.holding, 0);

	snprintf(two, sizeof(two), "%s %s", oldca, newca);
	assert_int_equal(store_agent_cas(f->s, a.id, two, err, sizeof(err)),
	    STORE_OK);
	assert_int_equal(store_agent_cas(f->s, b.id, oldca, err, sizeof(err)),
	    STORE_OK);
	assert_int_equal(store_agent_cas(f->s, r.id, newca, err, sizeof(err)),
	    STORE_OK);
	do_transition(f->s, r.id, AGENT_EV_REVOKE, NULL, &r);
	assert_int_equal(store_agent_get(f->s, a.id, &got), STORE_OK);
	assert_true(got.cas_known);
	assert_string_equal(got.cas, two);
	assert_int_equal(got.updated_at, a.updated_at);
	assert_int_equal(store_agents_holding_ca(f->s, newca, &n, err,
	    sizeof(err)), STORE_OK);
	assert_int_equal(n.agents, 2);         /* r is revoked */
	assert_int_equal(n.holding, 1);        /* a */
	assert_int_equal(n.connected, 0);
	assert_int_equal(store_agents_holding_ca(f->s, oldca, &n, err,
	    sizeof(err)), STORE_OK);
	assert_int_equal(n.holding, 2);

	/* b moves to the new CA alone; a is connected through r1. */
	assert_int_equal(store_agent_cas(f->s, b.id, newca, err, sizeof(err)),
	    STORE_OK);
	assert_int_equal(store_replica_claim(f->s, "r1", "", 6000, &mine, NULL,
	    err, sizeof(err)), STORE_OK);
	assert_int_equal(store_tunnel_record(f->s, a.id, "r1", (int64_t)NOW * 1000,
	    err, sizeof(err)), STORE_OK);
	assert_int_equal(store_agents_holding_ca(f->s, newca, &n, err,
	    sizeof(err)), STORE_OK);
	assert_int_equal(n.agents, 2);
	assert_int_equal(n.holding, 2);
	assert_int_equal(n.connected, 1);
	assert_int_equal(n.connected_holding, 1);
	assert_int_equal(store_agents_holding_ca(f->s, oldca, &n, err,
	    sizeof(err)), STORE_OK);
	assert_int_equal(n.holding, 1);
	assert_int_equal(n.connected_holding, 1);

	/* Refused: too long; a pattern that is not a checksum. */
	memset(big, 'c', sizeof(big) - 1);
	big[sizeof(big) - 1] = '\0';
	assert_int_equal(store_agent_cas(f->s, a.id, big, err, sizeof(err)),
	    STORE_ERR);
	assert_int_equal(store_agents_holding_ca(f->s, "sha256:%", &n, err,
	    sizeof(err)), STORE_ERR);
}

static void
test_register_manual_and_unlimited(void **state)
{
	struct fixture *f = *state;
	struct store_cluster c = { .id = "" };
	struct store_agent a;
	bool created = false;

	make_import(f, "2222222222222222", -1, true, &c);
	do_register(f, "2222222222222222", "node-1", 0x01, &a, &created);
	assert_true(created);
	assert_int_equal(a.state, AGENT_PENDING_APPROVAL);
	do_register(f, "2222222222222222", "node-2", 0x02, &a, &created);
	assert_true(created);
	/* Unlimited stays unlimited. */
	assert_int_equal(uses_of(f, "2222222222222222"), -1);
}

static void
test_register_refusals(void **state)
{
	struct fixture *f = *state;
	struct store_cluster c = { .id = "" };
	struct store_token t;
	struct store_agent *list;
	size_t n;

	make_import(f, "3333333333333333", 1, false, &c);

	fill_token(&t, "e000000000000000", TOKEN_IMPORT, c.id);
	t.expires_at = NOW;                 /* expires at the very second */
	insert_token(f, &t);
	expect_refused(f, "e000000000000000", "n1", 1, "import token expired");

	fill_token(&t, "u000000000000000", TOKEN_IMPORT, c.id);
	t.uses_left = 0;
	insert_token(f, &t);
	expect_refused(f, "u000000000000000", "n1", 1, "import token used up");

	fill_token(&t, "r000000000000000", TOKEN_IMPORT, c.id);
	t.revoked = true;
	insert_token(f, &t);
	expect_refused(f, "r000000000000000", "n1", 1, "import token revoked");

	fill_token(&t, "k000000000000000", TOKEN_USER, "");
	insert_token(f, &t);
	expect_refused(f, "k000000000000000", "n1", 1, "not an import token");
	fill_token(&t, "k100000000000000", TOKEN_ADMIN, "");
	insert_token(f, &t);
	expect_refused(f, "k100000000000000", "n1", 1, "not an import token");

	expect_refused(f, "ffffffffffffffff", "n1", 1, "unknown import token");
	expect_refused(f, "", "n1", 1, "unknown import token");

	expect_refused(f, "3333333333333333", "", 1,
	    "invalid node name: use 1 to 63 characters of A-Z a-z 0-9 . _ -");
	expect_refused(f, "3333333333333333", "a b", 1,
	    "invalid node name: use 1 to 63 characters of A-Z a-z 0-9 . _ -");

	/* Nothing was registered and the good token kept its use. */
	assert_int_equal(store_agent_list(f->s, NULL, &list, &n), STORE_OK);
	assert_int_equal(n, 0);
	free(list);
	assert_int_equal(uses_of(f, "3333333333333333"), 1);
	assert_int_equal(uses_of(f, "u000000000000000"), 0);
}

static void
test_register_retry(void **state)
{
	struct fixture *f = *state;
	struct store_cluster c = { .id = "" };
	struct store_agent a, b, *list;
	bool created = false;
	size_t n;

	make_import(f, "4444444444444444", 2, false, &c);
	do_register(f, "4444444444444444", "node-1", 0x01, &a, &created);
	assert_true(created);
	assert_int_equal(uses_of(f, "4444444444444444"), 1);

	do_register(f, "4444444444444444", "node-1", 0x01, &b, &created);
	assert_false(created);
	assert_string_equal(b.id, a.id);
	assert_memory_equal(&b, &a, sizeof(a));
	assert_int_equal(uses_of(f, "4444444444444444"), 1);

	assert_int_equal(store_agent_list(f->s, NULL, &list, &n), STORE_OK);
	assert_int_equal(n, 1);
	free(list);
}

/* store_agent_register_on (docs/0045): a created agent comes back
 * verifying and seen, in the store too, one use spent; a retry, a manual
 * approval and a refusal write nothing more than store_agent_register. */
static void
test_register_on(void **state)
{
	struct fixture *f = *state;
	struct store_cluster c = { .id = "" };
	struct store_agent a, b, got;
	char err[STORE_ERROR_MAX + 1] = "";
	bool created = false, started = false;
	uint8_t k[32];

	make_import(f, "4545454545454545", 2, false, &c);
	key(k, 0x45);
	assert_int_equal(store_agent_register_on(f->s, "4545454545454545",
	    "node-on", k, "1.2 \"x\"", NOW, &a, &created, &started, err,
	    sizeof(err)), STORE_OK);
	assert_true(created);
	assert_true(started);
	assert_int_equal(a.state, AGENT_VERIFYING);
	assert_string_equal(a.last_error, "");
	assert_int_equal(a.last_seen, NOW);
	assert_string_equal(a.version, "1.2__x_");
	assert_int_equal(a.updated_at, NOW);
	assert_int_equal(uses_of(f, "4545454545454545"), 1);
	assert_int_equal(store_agent_get(f->s, a.id, &got), STORE_OK);
	assert_memory_equal(&got, &a, sizeof(a));

	/* A retry hands the agent back as it is, and starts nothing. */
	assert_int_equal(store_agent_register_on(f->s, "4545454545454545",
	    "node-on", k, "2.0", NOW + 7, &b, &created, &started, err,
	    sizeof(err)), STORE_OK);
	assert_false(created);
	assert_false(started);
	assert_memory_equal(&b, &a, sizeof(a));
	assert_int_equal(uses_of(f, "4545454545454545"), 1);

	/* Refused (the node is taken by another key): nothing. */
	key(k, 0x46);
	started = true;
	assert_int_equal(store_agent_register_on(f->s, "4545454545454545",
	    "node-on", k, "2.0", NOW, &b, &created, &started, err,
	    sizeof(err)), STORE_REFUSED);
	assert_false(started);
	assert_int_equal(uses_of(f, "4545454545454545"), 1);

	/* Manual approval: registered pending, nothing started or seen. */
	make_import(f, "4646464646464646", 1, true, &c);
	assert_int_equal(store_agent_register_on(f->s, "4646464646464646",
	    "node-manual", k, "2.0", NOW, &b, &created, &started, err,
	    sizeof(err)), STORE_OK);
	assert_true(created);
	assert_false(started);
	assert_int_equal(b.state, AGENT_PENDING_APPROVAL);
	assert_int_equal(store_agent_get(f->s, b.id, &got), STORE_OK);
	assert_int_equal(got.state, AGENT_PENDING_APPROVAL);
	assert_int_equal(got.last_seen, 0);
	assert_string_equal(got.version, "");
}

/* A one-use token: the reply to the first REGISTER was lost, the node asks
 * again with the same key and must get its agent, not "used up". */
static void
test_register_retry_after_last_use(void **state)
{
	struct fixture *f = *state;
	struct store_cluster c = { .id = "" };
	struct store_agent a, b;
	bool created = false;

	make_import(f, "5555555555555555", 1, false, &c);
	do_register(f, "5555555555555555", "node-1", 0x01, &a, &created);
	assert_int_equal(uses_of(f, "5555555555555555"), 0);
	do_register(f, "5555555555555555", "node-1", 0x01, &b, &created);
	assert_false(created);
	assert_string_equal(b.id, a.id);
	/* A new node, though, is refused. */
	expect_refused(f, "5555555555555555", "node-2", 0x02,
	    "import token used up");
}

static void
test_register_other_key_refused(void **state)
{
	struct fixture *f = *state;
	struct store_cluster c = { .id = "" };
	struct store_agent a;
	char want[STORE_ERROR_MAX + 1];
	bool created = false;

	make_import(f, "6666666666666666", 5, false, &c);
	do_register(f, "6666666666666666", "node-1", 0x01, &a, &created);
	snprintf(want, sizeof(want), "node node-1 is already registered in "
	    "cluster prod as agent %s", a.id);
	expect_refused(f, "6666666666666666", "node-1", 0x02, want);
	assert_int_equal(uses_of(f, "6666666666666666"), 4);
}

static void
test_register_after_revoke(void **state)
{
	struct fixture *f = *state;
	struct store_cluster c = { .id = "" };
	struct store_agent a, b, r, *list;
	bool created = false;
	size_t n;

	make_import(f, "7777777777777777", 5, false, &c);
	do_register(f, "7777777777777777", "node-1", 0x01, &a, &created);
	do_transition(f->s, a.id, AGENT_EV_REVOKE, NULL, &r);
	assert_int_equal(r.state, AGENT_REVOKED);

	do_register(f, "7777777777777777", "node-1", 0x02, &b, &created);
	assert_true(created);
	assert_string_not_equal(b.id, a.id);
	assert_int_equal(b.state, AGENT_ENROLL);
	assert_int_equal(uses_of(f, "7777777777777777"), 3);

	/* The revoked key, retried, gets the revoked agent back rather than
	 * a fresh one; the live agent now holds the node. */
	do_register(f, "7777777777777777", "node-1", 0x01, &r, &created);
	assert_false(created);
	assert_string_equal(r.id, a.id);
	assert_int_equal(r.state, AGENT_REVOKED);

	assert_int_equal(store_agent_list(f->s, c.id, &list, &n), STORE_OK);
	assert_int_equal(n, 2);
	free(list);
}

/* ---- transitions and lists ---------------------------------------------- */

static void
test_transitions_persist(void **state)
{
	struct fixture *f = *state;
	struct store_cluster c = { .id = "" };
	struct store_agent a, got;
	char err[STORE_ERROR_MAX + 1], longmsg[400];
	bool created = false;

	make_import(f, "8888888888888888", 1, true, &c);
	do_register(f, "8888888888888888", "node-1", 0x01, &a, &created);
	assert_int_equal(a.state, AGENT_PENDING_APPROVAL);

	assert_int_equal(store_agent_transition(f->s, a.id, AGENT_EV_VERIFY,
	    NULL, NOW, &got, NULL, err, sizeof(err)), STORE_REFUSED);
	assert_string_equal(err, "cannot verify: agent awaits approval");

	do_transition(f->s, a.id, AGENT_EV_APPROVE, NULL, &got);
	assert_int_equal(got.state, AGENT_ENROLL);
	assert_int_equal(got.updated_at, NOW + 10);
	do_transition(f->s, a.id, AGENT_EV_VERIFY, NULL, &got);
	do_transition(f->s, a.id, AGENT_EV_VERIFY_FAIL, "bad signature", &got);
	assert_int_equal(got.state, AGENT_ENROLL);
	assert_string_equal(got.last_error, "bad signature");

	reopen(f);
	assert_int_equal(store_agent_get(f->s, a.id, &got), STORE_OK);
	assert_int_equal(got.state, AGENT_ENROLL);
	assert_string_equal(got.last_error, "bad signature");

	/* Other events keep the error until verification succeeds. */
	do_transition(f->s, a.id, AGENT_EV_VERIFY, NULL, &got);
	assert_string_equal(got.last_error, "bad signature");
	do_transition(f->s, a.id, AGENT_EV_VERIFY_OK, "ignored", &got);
	assert_int_equal(got.state, AGENT_ACTIVE);
	assert_string_equal(got.last_error, "");

	assert_int_equal(store_agent_transition(f->s, a.id, AGENT_EV_APPROVE,
	    NULL, NOW, &got, NULL, err, sizeof(err)), STORE_REFUSED);
	assert_string_equal(err, "cannot approve: agent is active");

	/* A failure without a message still records one; a long one is
	 * clipped to fit. */
	do_transition(f->s, a.id, AGENT_EV_VERIFY, NULL, &got);
	do_transition(f->s, a.id, AGENT_EV_VERIFY_FAIL, NULL, &got);
	assert_string_equal(got.last_error, "verification failed");
	do_transition(f->s, a.id, AGENT_EV_VERIFY, NULL, &got);
	memset(longmsg, 'e', sizeof(longmsg) - 1);
	longmsg[sizeof(longmsg) - 1] = '\0';
	do_transition(f->s, a.id, AGENT_EV_VERIFY_FAIL, longmsg, &got);
	assert_int_equal(strlen(got.last_error), STORE_ERROR_MAX);

	do_transition(f->s, a.id, AGENT_EV_REVOKE, "key leaked", &got);
	reopen(f);
	assert_int_equal(store_agent_get(f->s, a.id, &got), STORE_OK);
	assert_int_equal(got.state, AGENT_REVOKED);
	assert_string_equal(got.last_error, "key leaked");
	assert_int_equal(store_agent_transition(f->s, a.id, AGENT_EV_VERIFY,
	    NULL, NOW, &got, NULL, err, sizeof(err)), STORE_REFUSED);
	assert_string_equal(err, "agent is revoked");

	assert_int_equal(store_agent_transition(f->s, "a-000000000000",
	    AGENT_EV_REVOKE, NULL, NOW, &got, NULL, err, sizeof(err)), STORE_NOTFOUND);
}

/* A transition says which state it left; a refused one writes nothing. */
static void
test_transition_says_what_moved(void **state)
{
	struct fixture *f = *state;
	struct store_cluster c = { .id = "" };
	struct store_agent a, got;
	enum agent_state was = AGENT_STATE_ENTRIES;
	char err[STORE_ERROR_MAX + 1];
	bool created = false;

	make_import(f, "8888888888888887", 1, true, &c);
	do_register(f, "8888888888888887", "node-1", 0x01, &a, &created);
	assert_true(created);
	assert_int_equal(a.state, AGENT_PENDING_APPROVAL);

	assert_int_equal(store_agent_transition(f->s, a.id, AGENT_EV_APPROVE,
	    NULL, NOW, &got, &was, err, sizeof(err)), STORE_OK);
	assert_int_equal(was, AGENT_PENDING_APPROVAL);
	assert_int_equal(got.state, AGENT_ENROLL);
	assert_int_equal(store_agent_transition(f->s, a.id, AGENT_EV_VERIFY,
	    NULL, NOW, NULL, &was, err, sizeof(err)), STORE_OK);
	assert_int_equal(was, AGENT_ENROLL);

	was = AGENT_STATE_ENTRIES;
	assert_int_equal(store_agent_transition(f->s, a.id, AGENT_EV_APPROVE,
	    NULL, NOW, &got, &was, err, sizeof(err)), STORE_REFUSED);
	assert_int_equal(was, AGENT_STATE_ENTRIES);
}

/* What a timing hook heard: each call's name, in order. */
struct heard {
	char ops[16][32];
	size_t n;
};

static void
hear(void *arg, const char *op, double seconds)
{
	struct heard *h = arg;

	assert_true(seconds >= 0);
	if (h->n < 16)
		snprintf(h->ops[h->n], sizeof(h->ops[0]), "%s", op);
	h->n++;
}

/* The store tells its timing hook each call by name, an inner call before
 * the outer one, and nothing once the hook is taken away. */
static void
test_timing_hook(void **state)
{
	struct fixture *f = *state;
	struct store_cluster c = { .id = "" }, got;
	struct store_user_token *list = NULL;
	struct store_token t;
	struct heard h = { .n = 0 };
	char err[STORE_ERROR_MAX + 1];
	const char *ids[1];
	size_t n = 0;

	store_set_timing(f->s, hear, &h);
	make_cluster(f, "timed", &c);
	assert_int_equal(store_cluster_get(f->s, c.id, &got), STORE_OK);
	fill_user(&t, "3333333333333333", "carol");
	ids[0] = c.id;
	assert_int_equal(store_user_token_create(f->s, &t, ids, 1, NULL, err,
	    sizeof(err)), STORE_OK);
	assert_int_equal(store_user_token_list(f->s, &list, &n), STORE_OK);
	free(list);
	assert_int_equal(h.n, 5);
	assert_string_equal(h.ops[0], "cluster_create");
	assert_string_equal(h.ops[1], "cluster_get");
	assert_string_equal(h.ops[2], "token_insert");
	assert_string_equal(h.ops[3], "user_token_create");
	assert_string_equal(h.ops[4], "user_tokens_select");

	store_set_timing(f->s, NULL, NULL);
	assert_int_equal(store_cluster_get(f->s, c.id, &got), STORE_OK);
	assert_int_equal(h.n, 5);
}

/* A tunnel's record, its removal and a replica's lease dropped are timed
 * as every other call (tether_store_duration_seconds). */
static void
test_timing_tunnels(void **state)
{
	struct fixture *f = *state;
	struct heard h = { .n = 0 };
	char err[STORE_ERROR_MAX + 1];

	store_set_timing(f->s, hear, &h);
	assert_int_equal(store_tunnel_record(f->s, "a-1", "r1", 1000, err,
	    sizeof(err)), STORE_OK);
	assert_int_equal(store_tunnel_forget(f->s, "a-1", "r1", err,
	    sizeof(err)), STORE_OK);
	assert_int_equal(store_replica_drop(f->s, "r1", 1, err, sizeof(err)),
	    STORE_OK);
	store_set_timing(f->s, NULL, NULL);
	assert_int_equal(h.n, 3);
	assert_string_equal(h.ops[0], "tunnel_record");
	assert_string_equal(h.ops[1], "tunnel_forget");
	assert_string_equal(h.ops[2], "replica_drop");
}

static void
test_list_by_cluster(void **state)
{
	struct fixture *f = *state;
	struct store_cluster c1 = { .id = "" }, c2, c3;
	struct store_token t;
	struct store_agent a1, a2, a3, *list;
	bool created;
	size_t n;

	make_import(f, "9999999999999999", -1, false, &c1);
	make_cluster(f, "staging", &c2);
	make_cluster(f, "empty", &c3);
	fill_token(&t, "9999999999999998", TOKEN_IMPORT, c2.id);
	t.uses_left = -1;
	insert_token(f, &t);

	do_register(f, "9999999999999999", "n1", 1, &a1, &created);
	do_register(f, "9999999999999998", "n1", 2, &a2, &created);
	do_register(f, "9999999999999999", "n2", 3, &a3, &created);

	assert_int_equal(store_agent_list(f->s, NULL, &list, &n), STORE_OK);
	assert_int_equal(n, 3);
	assert_string_equal(list[0].id, a1.id);
	assert_string_equal(list[1].id, a2.id);
	assert_string_equal(list[2].id, a3.id);
	free(list);

	assert_int_equal(store_agent_list(f->s, c1.id, &list, &n), STORE_OK);
	assert_int_equal(n, 2);
	assert_string_equal(list[0].id, a1.id);
	assert_string_equal(list[1].id, a3.id);
	free(list);

	assert_int_equal(store_agent_list(f->s, c2.id, &list, &n), STORE_OK);
	assert_int_equal(n, 1);
	assert_string_equal(list[0].node, "n1");
	assert_string_equal(list[0].cluster, c2.id);
	free(list);

	assert_int_equal(store_agent_list(f->s, c3.id, &list, &n), STORE_OK);
	assert_int_equal(n, 0);
	free(list);
}

/* Many agents, so the list grows its array more than once. */
static void
test_list_many(void **state)
{
	struct fixture *f = *state;
	struct store_cluster c = { .id = "" };
	struct store_agent a, *list;
	char node[16];
	bool created;
	size_t i, n;

	make_import(f, "abababababababab", -1, false, &c);
	for (i = 0; i < 40; i++) {
		snprintf(node, sizeof(node), "n%zu", i);
		do_register(f, "abababababababab", node, (uint8_t)i, &a,
		    &created);
	}
	assert_int_equal(store_agent_list(f->s, c.id, &list, &n), STORE_OK);
	assert_int_equal(n, 40);
	assert_string_equal(list[39].node, "n39");
	free(list);
}

/* ---- a second connection ------------------------------------------------ */

static void
test_second_connection(void **state)
{
	struct fixture *f = *state;
	char err[STORE_ERROR_MAX + 1];
	struct store *other = NULL;
	struct store_cluster c = { .id = "" }, got;
	struct store_agent a, seen;
	bool created;

	assert_int_equal(store_open(f->url, &other, err, sizeof(err)), STORE_OK);
	assert_int_equal(store_schema_version(other), SCHEMA_NOW);

	make_import(f, "cdcdcdcdcdcdcdcd", 3, false, &c);
	assert_int_equal(store_cluster_get(other, c.id, &got), STORE_OK);
	assert_string_equal(got.name, "prod");

	/* Registered through the other connection, seen through the first. */
	assert_int_equal(store_agent_register(other, "cdcdcdcdcdcdcdcd", "n1",
	    (const uint8_t[32]){ 9 }, NOW, &a, &created, err, sizeof(err)),
	    STORE_OK);
	assert_int_equal(store_agent_get(f->s, a.id, &seen), STORE_OK);
	assert_int_equal(uses_of(f, "cdcdcdcdcdcdcdcd"), 2);

	do_transition(f->s, a.id, AGENT_EV_VERIFY, NULL, &seen);
	assert_int_equal(store_agent_get(other, a.id, &seen), STORE_OK);
	assert_int_equal(seen.state, AGENT_VERIFYING);

	/* Both see the same rule: the node is taken for another key. */
	assert_int_equal(store_agent_register(other, "cdcdcdcdcdcdcdcd", "n1",
	    (const uint8_t[32]){ 8 }, NOW, &a, &created, err, sizeof(err)),
	    STORE_REFUSED);
	store_close(other);
}

struct holder {
	const char *path;
	sqlite3 *db;
	pthread_barrier_t locked;
};

/* Holds the write lock for a moment, as another gateway might. */
static void *
hold_lock(void *arg)
{
	struct holder *h = arg;

	sqlite3_open(h->path, &h->db);
	sqlite3_exec(h->db, "BEGIN IMMEDIATE", NULL, NULL, NULL);
	pthread_barrier_wait(&h->locked);
	usleep(300 * 1000);
	sqlite3_exec(h->db, "COMMIT", NULL, NULL, NULL);
	sqlite3_close(h->db);
	return NULL;
}

static void
test_waits_for_lock(void **state)
{
	struct fixture *f = *state;
	struct holder h = { .path = f->path };
	struct store_cluster c;
	struct timespec t0, t1;
	pthread_t th;

	sqlite_only();
	assert_int_equal(pthread_barrier_init(&h.locked, NULL, 2), 0);
	assert_int_equal(pthread_create(&th, NULL, hold_lock, &h), 0);
	pthread_barrier_wait(&h.locked);
	/* Blocks until the holder commits, well within the busy timeout. */
	clock_gettime(CLOCK_MONOTONIC, &t0);
	make_cluster(f, "patient", &c);
	clock_gettime(CLOCK_MONOTONIC, &t1);
	assert_true((t1.tv_sec - t0.tv_sec) * 1000 +
	    (t1.tv_nsec - t0.tv_nsec) / 1000000 >= 200);
	pthread_join(th, NULL);
	pthread_barrier_destroy(&h.locked);
}

/* Runs sql on the test's SQLite file with a connection of our own: 0, or
 * -1 on a failure. */
static int
sqlite_sql(struct fixture *f, const char *sql)
{
	sqlite3 *db = NULL;
	int rc = -1;

	if (sqlite3_open(f->path, &db) == SQLITE_OK &&
	    sqlite3_exec(db, sql, NULL, NULL, NULL) == SQLITE_OK)
		rc = 0;
	sqlite3_close(db);
	return rc;
}

/*
 * A transition whose write the database refuses (a trigger here) fails
 * with the write's reason and changes nothing, and the connection goes on
 * serving: on PostgreSQL that write is sent with the COMMIT (pipeline
 * mode, docs/0038), so its failure is the commit's.
 */
static void
test_transition_write_refused(void **state)
{
	struct fixture *f = *state;
	struct store_cluster c = { .id = "" };
	struct store_agent bad, ok, got;
	char err[STORE_ERROR_MAX + 1] = "";
	bool created = false;
	int i;

	make_import(f, "deferdeferdefer1", 2, false, &c);
	do_register(f, "deferdeferdefer1", "node-bad", 0x41, &bad, &created);
	do_register(f, "deferdeferdefer1", "node-ok", 0x42, &ok, &created);
	assert_int_equal(pg_url != NULL ? (int)pg_sql(
	    "CREATE FUNCTION refuse() RETURNS trigger LANGUAGE plpgsql AS $$"
	    "  BEGIN RAISE EXCEPTION 'refused by the test'; END $$;"
	    "CREATE TRIGGER refuse BEFORE UPDATE OF state ON agents"
	    "  FOR EACH ROW WHEN (NEW.node = 'node-bad')"
	    "  EXECUTE FUNCTION refuse()") : sqlite_sql(f,
	    "CREATE TRIGGER refuse BEFORE UPDATE OF state ON agents"
	    "  WHEN NEW.node = 'node-bad'"
	    "  BEGIN SELECT RAISE(ABORT, 'refused by the test'); END"), 0);
	for (i = 0; i < 2; i++) {
		assert_int_equal(store_agent_transition(f->s, bad.id,
		    AGENT_EV_VERIFY, NULL, NOW, &got, NULL, err, sizeof(err)),
		    STORE_ERR);
		assert_non_null(strstr(err, "update agent"));
		assert_non_null(strstr(err, "refused by the test"));
		assert_int_equal(store_agent_get(f->s, bad.id, &got), STORE_OK);
		assert_int_equal(got.state, AGENT_ENROLL);
	}
	do_transition(f->s, ok.id, AGENT_EV_VERIFY, NULL, &got);
	assert_int_equal(got.state, AGENT_VERIFYING);
	assert_int_equal(store_agent_get(f->s, ok.id, &got), STORE_OK);
	assert_int_equal(got.state, AGENT_VERIFYING);
}

/* ---- several connections at once --------------------------------------- */

#define RACERS     4     /* connections, each on its own thread */
#define RACE_TRIES 5     /* registrations each, every one a new node */
#define RACE_USES  7     /* fewer than RACERS * RACE_TRIES */

struct racer {
	const char *url;
	int id;
	pthread_barrier_t *go;
	int created, refused, failed, retried;
	bool same_key;         /* race_twin: every racer's key the same */
	const char *node;      /* race_twin's node */
};

/* Registers RACE_TRIES new nodes with the shared token, all racers at once. */
static void *
race_register(void *arg)
{
	struct racer *r = arg;
	char err[STORE_ERROR_MAX + 1], node[32];
	struct store *s = NULL;
	struct store_agent a;
	bool created;
	int i, rc;

	if (store_open(r->url, &s, err, sizeof(err)) != STORE_OK) {
		r->failed = RACE_TRIES;
		pthread_barrier_wait(r->go);
		return NULL;
	}
	pthread_barrier_wait(r->go);
	for (i = 0; i < RACE_TRIES; i++) {
		snprintf(node, sizeof(node), "r%d-n%d", r->id, i);
		rc = store_agent_register(s, "racetokenracetok", node,
		    (const uint8_t[32]){ (uint8_t)(r->id * 16 + i + 1) }, NOW,
		    &a, &created, err, sizeof(err));
		if (rc == STORE_OK && created)
			r->created++;
		else if (rc == STORE_REFUSED && strcmp(err,
		    "import token used up") == 0)
			r->refused++;
		else
			r->failed++;
	}
	store_close(s);
	return NULL;
}

/* One limited token spent from several connections at once: exactly its
 * uses become agents, the rest are refused as used up. */
static void
test_register_concurrent(void **state)
{
	struct fixture *f = *state;
	struct store_cluster c = { .id = "" };
	struct store_agent *list;
	struct racer r[RACERS];
	pthread_t th[RACERS];
	pthread_barrier_t go;
	int i, created = 0, refused = 0, failed = 0;
	size_t n;

	make_import(f, "racetokenracetok", RACE_USES, false, &c);
	assert_int_equal(pthread_barrier_init(&go, NULL, RACERS), 0);
	for (i = 0; i < RACERS; i++) {
		r[i] = (struct racer){ .url = f->url, .id = i, .go = &go };
		assert_int_equal(pthread_create(&th[i], NULL, race_register,
		    &r[i]), 0);
	}
	for (i = 0; i < RACERS; i++) {
		pthread_join(th[i], NULL);
		created += r[i].created;
		refused += r[i].refused;
		failed += r[i].failed;
	}
	pthread_barrier_destroy(&go);
	assert_int_equal(failed, 0);
	assert_int_equal(created, RACE_USES);
	assert_int_equal(refused, RACERS * RACE_TRIES - RACE_USES);
	assert_int_equal(uses_of(f, "racetokenracetok"), 0);
	assert_int_equal(store_agent_list(f->s, c.id, &list, &n), STORE_OK);
	assert_int_equal(n, RACE_USES);
	free(list);
}

/* Registers the one node r->node with its own key (same_key: the same
 * key as every other racer), all racers at once. */
static void *
race_twin(void *arg)
{
	struct racer *r = arg;
	char err[STORE_ERROR_MAX + 1], want[80];
	struct store *s = NULL;
	struct store_agent a;
	bool created = false;
	int rc;

	snprintf(want, sizeof(want), "node %s is already registered in "
	    "cluster twins as agent a-", r->node);

	if (store_open(r->url, &s, err, sizeof(err)) != STORE_OK) {
		r->failed = 1;
		pthread_barrier_wait(r->go);
		return NULL;
	}
	pthread_barrier_wait(r->go);
	rc = store_agent_register(s, "twintokentwintok", r->node,
	    (const uint8_t[32]){ (uint8_t)(r->same_key ? 1 : r->id + 1) }, NOW,
	    &a, &created, err, sizeof(err));
	if (rc == STORE_OK && created)
		r->created++;
	else if (rc == STORE_OK)
		r->retried++;
	else if (rc == STORE_REFUSED && strncmp(err, want, strlen(want)) == 0)
		r->refused++;
	else
		r->failed++;
	store_close(s);
	return NULL;
}

/* One node registering through several connections at once: with
 * different keys exactly one agent is made and the others are refused
 * as a duplicate node; with the same key (retries) one is made and the
 * others get it back.  One use is spent either way. */
static void
test_register_twins_concurrent(void **state)
{
	struct fixture *f = *state;
	struct store_cluster c = { .id = "" };
	struct store_agent *list;
	struct racer r[RACERS];
	pthread_t th[RACERS];
	pthread_barrier_t go;
	int i, round, created, refused, retried, failed;
	size_t n;

	make_cluster(f, "twins", &c);
	make_import(f, "twintokentwintok", 10, false, &c);
	for (round = 0; round < 2; round++) {
		created = refused = retried = failed = 0;
		assert_int_equal(pthread_barrier_init(&go, NULL, RACERS), 0);
		for (i = 0; i < RACERS; i++) {
			r[i] = (struct racer){ .url = f->url, .id = i, .go = &go,
			    .same_key = round == 1,
			    .node = round == 0 ? "twin-a" : "twin-b" };
			assert_int_equal(pthread_create(&th[i], NULL, race_twin,
			    &r[i]), 0);
		}
		for (i = 0; i < RACERS; i++) {
			pthread_join(th[i], NULL);
			created += r[i].created;
			refused += r[i].refused;
			retried += r[i].retried;
			failed += r[i].failed;
		}
		pthread_barrier_destroy(&go);
		assert_int_equal(failed, 0);
		assert_int_equal(created, 1);
		assert_int_equal(refused, round == 0 ? RACERS - 1 : 0);
		assert_int_equal(retried, round == 0 ? 0 : RACERS - 1);
		assert_int_equal(uses_of(f, "twintokentwintok"), 9 - round);
		assert_int_equal(store_agent_list(f->s, c.id, &list, &n), STORE_OK);
		assert_int_equal(n, (size_t)round + 1);
		free(list);
	}
}

/*
 * PostgreSQL: a registration is one statement, its own transaction, so one
 * round trip to a far database and the token row locked only while the
 * server runs it (docs/0038).  Triggers record the client statement (by
 * its start time) that inserted the agent and the one that spent the
 * token's use: the same one.
 */
static void
test_register_one_statement(void **state)
{
	struct fixture *f = *state;
	struct store_cluster c = { .id = "" };
	struct store_agent a;
	bool created = false;

	if (pg_url == NULL)
		skip();
	assert_int_equal(pg_sql(
	    "CREATE TABLE probe (stamp TIMESTAMPTZ NOT NULL);"
	    "CREATE FUNCTION probe() RETURNS trigger LANGUAGE plpgsql AS $$"
	    "  BEGIN INSERT INTO probe VALUES (statement_timestamp());"
	    "  RETURN NULL; END $$;"
	    "CREATE TRIGGER probe AFTER INSERT ON agents"
	    "  FOR EACH ROW EXECUTE FUNCTION probe();"
	    "CREATE TRIGGER probe AFTER UPDATE OF uses_left ON tokens"
	    "  FOR EACH ROW EXECUTE FUNCTION probe()"), 0);
	make_import(f, "onestatementtokn", 2, false, &c);
	do_register(f, "onestatementtokn", "node-one", 0x31, &a, &created);
	assert_true(created);
	assert_int_equal(uses_of(f, "onestatementtokn"), 1);
	assert_int_equal(pg_sql("SELECT count(*) FROM probe"), 2);
	assert_int_equal(pg_sql("SELECT count(DISTINCT stamp) FROM probe"), 1);
}

struct opener {
	const char *url;
	pthread_barrier_t *go;
	int rc, version;
	char err[STORE_ERROR_MAX + 1];
};

static void *
race_open(void *arg)
{
	struct opener *o = arg;
	struct store *s = NULL;

	pthread_barrier_wait(o->go);
	o->rc = store_open(o->url, &s, o->err, sizeof(o->err));
	if (s != NULL)
		o->version = store_schema_version(s);
	store_close(s);
	return NULL;
}

/* Several gateways opening an empty database at once: every one opens,
 * and each migration is applied once. */
static void
test_open_concurrent(void **state)
{
	struct fixture *f = *state;
	struct opener o[RACERS];
	pthread_t th[RACERS];
	pthread_barrier_t go;
	char url[192];
	int i;

	if (pg_url != NULL) {
		store_close(f->s);
		f->s = NULL;
		assert_int_equal(pg_reset(), 0);
		snprintf(url, sizeof(url), "%s", pg_url);
	} else {
		snprintf(url, sizeof(url), "sqlite://%s/race.db", f->dir);
	}
	assert_int_equal(pthread_barrier_init(&go, NULL, RACERS), 0);
	for (i = 0; i < RACERS; i++) {
		o[i] = (struct opener){ .url = url, .go = &go };
		assert_int_equal(pthread_create(&th[i], NULL, race_open, &o[i]),
		    0);
	}
	for (i = 0; i < RACERS; i++) {
		pthread_join(th[i], NULL);
		if (o[i].rc != STORE_OK)
			fprintf(stderr, "open %d: %s\n", i, o[i].err);
		assert_int_equal(o[i].rc, STORE_OK);
		assert_int_equal(o[i].version, SCHEMA_NOW);
	}
	pthread_barrier_destroy(&go);
	assert_int_equal(raw_int(url + strlen("sqlite://"),
	    "SELECT count(*) FROM schema_version"), SCHEMA_NOW);
	if (pg_url != NULL)
		reopen(f);
}

/* Presence: leases, tunnel records, and what a reader sees as time goes
 * (leases by the database's clock: one ended is one renewed to end now). */
static void
test_presence(void **state)
{
	struct fixture *f = *state;
	char err[STORE_ERROR_MAX + 1];
	struct store_presence *ps;
	const int64_t t0 = (int64_t)NOW * 1000;
	int64_t m1 = 0, m2 = 0, other = 0, was;
	struct store_lease held;
	size_t n;

	assert_int_equal(store_replica_claim(f->s, "r1", "https://10.0.0.1:8443",
	    6000, &m1, NULL, err, sizeof(err)), STORE_OK);
	assert_int_equal(store_replica_claim(f->s, "r2", "", 6000, &m2, NULL,
	    err, sizeof(err)), STORE_OK);
	assert_true(m1 > 0 && m2 > 0);
	assert_int_equal(store_tunnel_record(f->s, "a-1", "r1", t0, err,
	    sizeof(err)), STORE_OK);
	assert_int_equal(store_tunnel_record(f->s, "a-2", "r2", t0, err,
	    sizeof(err)), STORE_OK);
	assert_int_equal(store_presence_list(f->s, &ps, &n, err,
	    sizeof(err)), STORE_OK);
	assert_int_equal(n, 2);
	free(ps);

	/* The agent moves to r2: one record, r2's; r1 forgetting it later
	 * (its old tunnel closing) leaves r2's record alone. */
	assert_int_equal(store_tunnel_record(f->s, "a-1", "r2", t0 + 10, err,
	    sizeof(err)), STORE_OK);
	assert_int_equal(store_tunnel_forget(f->s, "a-1", "r1", err, sizeof(err)),
	    STORE_OK);
	/* r2 renews, r1's lease ends (killed): only r2's records count. */
	was = m2;
	assert_int_equal(store_replica_claim(f->s, "r2", "", 9000, &m2, NULL,
	    err, sizeof(err)), STORE_OK);
	assert_true(m2 != was);
	assert_int_equal(store_tunnel_record(f->s, "a-3", "r1", t0, err,
	    sizeof(err)), STORE_OK);
	assert_int_equal(store_replica_claim(f->s, "r1", "https://10.0.0.1:8443",
	    -1, &m1, NULL, err, sizeof(err)), STORE_OK);
	assert_int_equal(store_presence_list(f->s, &ps, &n, err,
	    sizeof(err)), STORE_OK);
	assert_int_equal(n, 2);
	for (size_t i = 0; i < n; i++)
		assert_string_equal(ps[i].replica, "r2");
	free(ps);

	/* A second process with r2's id is refused while r2's lease runs,
	 * told by whom, and can neither renew nor drop it. */
	assert_int_equal(store_replica_claim(f->s, "r2", "https://other:1", 6000,
	    &other, &held, err, sizeof(err)), STORE_REFUSED);
	assert_int_equal(other, 0);
	assert_string_equal(held.peer_url, "");
	assert_int_equal(held.until_ms, m2);
	assert_true(held.left_ms > 0 && held.left_ms <= 9000);
	assert_non_null(strstr(err, "replica id r2 is held by a live replica"));
	other = m2 + 1;
	assert_int_equal(store_replica_claim(f->s, "r2", "", 6000, &other, NULL,
	    err, sizeof(err)), STORE_REFUSED);
	assert_int_equal(store_replica_drop(f->s, "r2", m2 + 1, err, sizeof(err)),
	    STORE_OK);
	assert_int_equal(store_presence_list(f->s, &ps, &n, err,
	    sizeof(err)), STORE_OK);
	assert_int_equal(n, 2);
	free(ps);

	/* r1's ended lease is taken by a new process: what the dead one
	 * recorded (a-3) is forgotten with it. */
	other = 0;
	assert_int_equal(store_replica_claim(f->s, "r1", "https://10.0.0.9:8443",
	    6000, &other, NULL, err, sizeof(err)), STORE_OK);
	assert_int_equal(store_presence_list(f->s, &ps, &n, err,
	    sizeof(err)), STORE_OK);
	assert_int_equal(n, 2);
	for (size_t i = 0; i < n; i++)
		assert_string_equal(ps[i].replica, "r2");
	free(ps);

	/* A clean stop drops the lease and every record of the replica. */
	assert_int_equal(store_replica_drop(f->s, "r2", m2, err, sizeof(err)),
	    STORE_OK);
	assert_int_equal(store_presence_list(f->s, &ps, &n, err,
	    sizeof(err)), STORE_OK);
	assert_int_equal(n, 0);
	free(ps);
}

/* Replicas dead long ago are forgotten (what kill -9 of HOST-PID ids
 * leaves); a claim tells what it found. */
static void
test_replicas_forget_dead(void **state)
{
	struct fixture *f = *state;
	char err[STORE_ERROR_MAX + 1];
	struct store_lease seen;
	int64_t old = 0, young = 0, again = 0, was;
	size_t n = 99;

	assert_int_equal(store_replica_claim(f->s, "old", "", -2 * 3600000,
	    &old, NULL, err, sizeof(err)), STORE_OK);
	assert_int_equal(store_replica_claim(f->s, "young", "", -1000, &young,
	    NULL, err, sizeof(err)), STORE_OK);
	assert_int_equal(store_replicas_forget_dead(f->s, 3600000, &n, err,
	    sizeof(err)), STORE_OK);
	assert_int_equal(n, 1);
	/* "old" is gone: a new claim finds no row; "young" is still there,
	 * its ended lease taken over by a new process. */
	assert_int_equal(store_replica_claim(f->s, "old", "", 6000, &again,
	    &seen, err, sizeof(err)), STORE_OK);
	assert_int_equal(seen.until_ms, 0);
	was = young;
	again = 0;
	assert_int_equal(store_replica_claim(f->s, "young", "", 6000, &again,
	    &seen, err, sizeof(err)), STORE_OK);
	assert_int_equal(seen.until_ms, was);
	assert_true(seen.left_ms <= -1000);
	/* A renewal finds its own end. */
	was = again;
	assert_int_equal(store_replica_claim(f->s, "young", "", 6000, &again,
	    &seen, err, sizeof(err)), STORE_OK);
	assert_int_equal(seen.until_ms, was);
	assert_true(again != was);
}

/* Tunnel records made to match a replica's tunnels after an outage: the
 * ghosts go, the lost ones come back, another live replica's stay. */
static void
test_tunnels_sync(void **state)
{
	struct fixture *f = *state;
	char err[STORE_ERROR_MAX + 1];
	struct store_presence *ps;
	char ids[3][STORE_ID_MAX + 1] = { "x-2", "x-3", "x-4" };
	const int64_t t0 = (int64_t)NOW * 1000;
	int64_t m1 = 0, m3 = 0;
	size_t n, changed = 99;

	assert_int_equal(store_replica_claim(f->s, "r1", "", 6000, &m1, NULL,
	    err, sizeof(err)), STORE_OK);
	assert_int_equal(store_replica_claim(f->s, "r3", "", 6000, &m3, NULL,
	    err, sizeof(err)), STORE_OK);
	assert_int_equal(store_tunnel_record(f->s, "x-1", "r3", t0, err,
	    sizeof(err)), STORE_OK);
	assert_int_equal(store_tunnel_record(f->s, "x-2", "r3", t0, err,
	    sizeof(err)), STORE_OK);
	assert_int_equal(store_tunnel_record(f->s, "x-4", "r1", t0, err,
	    sizeof(err)), STORE_OK);
	/* r3 holds x-2, x-3 and (it thinks) x-4: x-1 closed unseen, x-3's
	 * record was lost, x-4's is live r1's. */
	assert_int_equal(store_tunnels_sync(f->s, "r3", (const char (*)[STORE_ID_MAX + 1])ids,
	    3, t0, &changed, err, sizeof(err)), STORE_OK);
	assert_int_equal(changed, 2);
	assert_int_equal(store_presence_list(f->s, &ps, &n, err,
	    sizeof(err)), STORE_OK);
	assert_int_equal(n, 3);
	for (size_t i = 0; i < n; i++) {
		assert_string_not_equal(ps[i].agent_id, "x-1");
		assert_string_equal(ps[i].replica,
		    strcmp(ps[i].agent_id, "x-4") == 0 ? "r1" : "r3");
	}
	free(ps);
	/* Again: nothing to change. */
	assert_int_equal(store_tunnels_sync(f->s, "r3", (const char (*)[STORE_ID_MAX + 1])ids,
	    3, t0, &changed, err, sizeof(err)), STORE_OK);
	assert_int_equal(changed, 0);
	/* r1's lease ended: its record of x-4 is r3's to take. */
	assert_int_equal(store_replica_claim(f->s, "r1", "", -1, &m1, NULL,
	    err, sizeof(err)), STORE_OK);
	assert_int_equal(store_tunnels_sync(f->s, "r3", (const char (*)[STORE_ID_MAX + 1])ids,
	    3, t0, &changed, err, sizeof(err)), STORE_OK);
	assert_int_equal(changed, 1);
}

/* The presence directory's read: agents other live replicas hold, with
 * cluster, node, state and the holder's peer URL; never ours, never a dead
 * replica's.  store_replicas_live counts the other live replicas, with
 * tunnels or not. */
static void
test_remote_agents(void **state)
{
	struct fixture *f = *state;
	char err[STORE_ERROR_MAX + 1];
	struct store_cluster c = { .id = "" };
	struct store_agent a1, a2, a3;
	struct store_remote_agent *ra;
	const int64_t t0 = (int64_t)NOW * 1000;
	int64_t m1 = 0, m2 = 0, m3 = 0, m4 = 0, live;
	bool created;
	size_t n;

	make_import(f, "4444444444444444", 3, false, &c);
	do_register(f, "4444444444444444", "n1", 0x01, &a1, &created);
	do_register(f, "4444444444444444", "n2", 0x02, &a2, &created);
	do_register(f, "4444444444444444", "n3", 0x03, &a3, &created);
	assert_int_equal(store_replica_claim(f->s, "me", "https://127.0.0.1:1",
	    6000, &m1, NULL, err, sizeof(err)), STORE_OK);
	assert_int_equal(store_replica_claim(f->s, "r2", "https://127.0.0.1:2",
	    6000, &m2, NULL, err, sizeof(err)), STORE_OK);
	assert_int_equal(store_replica_claim(f->s, "r3", "https://127.0.0.1:3",
	    6000, &m3, NULL, err, sizeof(err)), STORE_OK);
	assert_int_equal(store_tunnel_record(f->s, a1.id, "me", t0, err,
	    sizeof(err)), STORE_OK);
	assert_int_equal(store_tunnel_record(f->s, a2.id, "r2", t0, err,
	    sizeof(err)), STORE_OK);
	assert_int_equal(store_tunnel_record(f->s, a3.id, "r3", t0, err,
	    sizeof(err)), STORE_OK);

	/* Ours is left out; r2 and r3 are live. */
	assert_int_equal(store_remote_agents(f->s, "me", &ra, &n, err,
	    sizeof(err)), STORE_OK);
	assert_int_equal(n, 2);
	for (size_t i = 0; i < n; i++) {
		assert_string_equal(ra[i].cluster, c.id);
		if (strcmp(ra[i].replica, "r2") == 0) {
			assert_int_equal(ra[i].state, a2.state);
			assert_string_equal(ra[i].agent_id, a2.id);
			assert_string_equal(ra[i].node, "n2");
			assert_string_equal(ra[i].peer_url, "https://127.0.0.1:2");
		} else {
			assert_string_equal(ra[i].replica, "r3");
			assert_int_equal(ra[i].state, a3.state);
			assert_string_equal(ra[i].agent_id, a3.id);
			assert_string_equal(ra[i].node, "n3");
			assert_string_equal(ra[i].peer_url, "https://127.0.0.1:3");
		}
	}
	free(ra);
	/* The other replicas live: r2 and r3, and r4 that holds no tunnel
	 * (where a draining replica's agents can go, docs/0017). */
	assert_int_equal(store_replicas_live(f->s, "me", &live, err,
	    sizeof(err)), STORE_OK);
	assert_int_equal(live, 2);
	assert_int_equal(store_replica_claim(f->s, "r4", "https://127.0.0.1:4",
	    6000, &m4, NULL, err, sizeof(err)), STORE_OK);
	assert_int_equal(store_replicas_live(f->s, "me", &live, err,
	    sizeof(err)), STORE_OK);
	assert_int_equal(live, 3);

	/* r3's lease has ended: only r2's agent; its state is the store's as
	 * of now. */
	assert_int_equal(store_replica_claim(f->s, "r3", "https://127.0.0.1:3",
	    -1, &m3, NULL, err, sizeof(err)), STORE_OK);
	do_transition(f->s, a2.id, AGENT_EV_REVOKE, NULL, &a2);
	assert_int_equal(store_remote_agents(f->s, "me", &ra, &n, err,
	    sizeof(err)), STORE_OK);
	assert_int_equal(n, 1);
	assert_string_equal(ra[0].agent_id, a2.id);
	assert_int_equal(ra[0].state, AGENT_REVOKED);
	free(ra);
	assert_int_equal(store_replicas_live(f->s, "me", &live, err,
	    sizeof(err)), STORE_OK);
	assert_int_equal(live, 2);          /* r2 and r4 */
	assert_int_equal(store_replica_claim(f->s, "r4", "https://127.0.0.1:4",
	    -1, &m4, NULL, err, sizeof(err)), STORE_OK);
	assert_int_equal(store_replicas_live(f->s, "r2", &live, err,
	    sizeof(err)), STORE_OK);
	assert_int_equal(live, 1);          /* r2 sees me */

	/* Another replica's view leaves its own out and sees ours. */
	assert_int_equal(store_remote_agents(f->s, "r2", &ra, &n, err,
	    sizeof(err)), STORE_OK);
	assert_int_equal(n, 1);
	assert_string_equal(ra[0].agent_id, a1.id);
	assert_string_equal(ra[0].replica, "me");
	free(ra);
}

/*
 * A group (store_group_begin) whose transaction the engine ended on its
 * own, as SQLite does on a full disk: no call made after it runs, not
 * even a statement that would commit by itself, the group ends in an
 * error, nothing of it is kept, and the connection works alone again.
 */
static void
test_group_broken(void **state)
{
	struct fixture *f = *state;
	char err[STORE_ERROR_MAX + 1];
	struct store_cluster c = { 0 };
	struct store_agent a, *all = NULL;
	bool created;
	size_t n = 9;
	uint8_t k[32];

	sqlite_only();
	make_import(f, "4444444444444444", 5, false, &c);
	assert_true(store_group_able(f->s));
	assert_int_equal(store_group_begin(f->s, err, sizeof(err)), STORE_OK);
	key(k, 1);
	assert_int_equal(store_agent_register(f->s, "4444444444444444", "g1",
	    k, NOW, &a, &created, err, sizeof(err)), STORE_OK);
	assert_true(store_group_whole(f->s));
	f->s->be->rollback(f->s);           /* what the engine does itself */
	assert_false(store_group_whole(f->s));
	key(k, 2);
	assert_int_equal(store_agent_register(f->s, "4444444444444444", "g2",
	    k, NOW, &a, &created, err, sizeof(err)), STORE_ERR);
	assert_non_null(strstr(err, "rolled back"));
	assert_int_equal(store_agent_seen(f->s, a.id, "1.0", NOW, err,
	    sizeof(err)), STORE_ERR);
	assert_int_equal(store_group_end(f->s, err, sizeof(err)), STORE_ERR);
	assert_int_equal(store_agent_list(f->s, NULL, &all, &n), STORE_OK);
	assert_int_equal(n, 0);
	free(all);
	assert_int_equal(uses_of(f, "4444444444444444"), 5);
	/* Alone again: the call commits as ever. */
	assert_int_equal(store_agent_register(f->s, "4444444444444444", "g2",
	    k, NOW, &a, &created, err, sizeof(err)), STORE_OK);
	assert_int_equal(uses_of(f, "4444444444444444"), 4);
}

/* A group's calls are committed by store_group_end, which the timing hook
 * hears as "group_end" (its commit and sync), after the calls. */
static void
test_group_commit_timed(void **state)
{
	struct fixture *f = *state;
	char err[STORE_ERROR_MAX + 1];
	struct store_cluster c = { 0 };
	struct store_agent a, got;
	struct heard h = { .n = 0 };
	bool created;
	uint8_t k[32];

	sqlite_only();
	make_import(f, "6666666666666666", 5, false, &c);
	store_set_timing(f->s, hear, &h);
	assert_int_equal(store_group_begin(f->s, err, sizeof(err)), STORE_OK);
	key(k, 1);
	assert_int_equal(store_agent_register(f->s, "6666666666666666", "t1",
	    k, NOW, &a, &created, err, sizeof(err)), STORE_OK);
	assert_int_equal(store_group_end(f->s, err, sizeof(err)), STORE_OK);
	assert_int_equal(h.n, 2);
	assert_string_equal(h.ops[0], "agent_register");
	assert_string_equal(h.ops[1], "group_end");
	store_set_timing(f->s, NULL, NULL);
	assert_int_equal(store_agent_get(f->s, a.id, &got), STORE_OK);
	assert_int_equal(uses_of(f, "6666666666666666"), 4);
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
#define T(fn) cmocka_unit_test_setup_teardown(fn, setup, teardown)
		T(test_open_creates_and_migrates),
		T(test_open_bad_urls),
		T(test_same_key_read_indexed),
		T(test_newer_schema_refused),
		T(test_migrates_v1_in_place),
		T(test_user_tokens),
		T(test_user_revoke),
		T(test_user_token_revoke),
		T(test_user_token_refusals),
		T(test_clusters),
		T(test_cluster_names),
		T(test_tokens),
		T(test_register_happy),
		T(test_agent_seen),
		T(test_agent_key_rotation),
		T(test_agent_urls_and_settings),
		T(test_agent_cas),
		T(test_agents_offline),
		T(test_register_manual_and_unlimited),
		T(test_register_refusals),
		T(test_register_retry),
		T(test_register_on),
		T(test_register_retry_after_last_use),
		T(test_register_other_key_refused),
		T(test_register_after_revoke),
		T(test_transitions_persist),
		T(test_transition_says_what_moved),
		T(test_transition_write_refused),
		T(test_timing_hook),
		T(test_timing_tunnels),
		T(test_list_by_cluster),
		T(test_list_many),
		T(test_second_connection),
		T(test_waits_for_lock),
		T(test_register_concurrent),
		T(test_register_twins_concurrent),
		T(test_register_one_statement),
		T(test_open_concurrent),
		T(test_presence),
		T(test_tunnels_sync),
		T(test_replicas_forget_dead),
		T(test_remote_agents),
		T(test_group_broken),
		T(test_group_commit_timed),
#undef T
	};

	pg_url = getenv("TETHER_TEST_PG_URL");
	if (pg_url != NULL && *pg_url == '\0')
		pg_url = NULL;
	/* Keep the output to the test results. */
	log_init("test", LOG_LEVEL_WARN);
	return cmocka_run_group_tests(tests, NULL, NULL);
}
