/*
 * store.c: the store's rules (store.h), written once for every backend.
 *
 * store_open picks the backend from the URL's scheme (each backend owns
 * the rest of its URL) and migrates the schema (store_schema.c).  Every
 * other call here runs statements through the backend's one runner
 * (store_backend.h): SQL with '?' placeholders, typed parameters, a row
 * callback reading typed columns.  Every value reaches SQL as a parameter.
 *
 * Rules that read then write (register, transition, user revoke, user token
 * create) run in a transaction whose reads lock what they decide on
 * (STORE_STMT_LOCK): SQLite takes its write lock at BEGIN, PostgreSQL locks
 * the rows, so two gateways cannot both see "one use left" and both spend
 * it.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "agentkey.h"
#include "log.h"
#include "store.h"
#include "store_backend.h"

#define SQLITE_SCHEME   "sqlite://"
#define POSTGRES_SCHEME "postgres://"
#define POSTGRESQL_SCHEME "postgresql://"

#define ID_RANDOM_BYTES 6     /* 12 hex characters after the prefix */
#define ID_ATTEMPTS     3     /* fresh ids tried when one collides */

#define CLUSTER_COLS "id, name, created_at"
#define TOKEN_COLS "id, kind, cluster_id, name, verifier, expires_at, " \
	"uses_left, approval_manual, revoked, created_at"
#define AGENT_COLS "id, cluster_id, node, pubkey, state, last_error, " \
	"token_id, created_at, updated_at"
/* What is read of an agent: the columns written at insert, then those
 * kept up by store_agent_seen (schema version 6), key rotation's (7) and
 * store_agent_urls (8) and store_agent_cas (9). */
#define AGENT_READ_COLS AGENT_COLS ", version, last_seen, " \
	"CASE WHEN next_pubkey IS NULL THEN 0 ELSE 1 END, " \
	"COALESCE(next_pubkey, pubkey), key_rotate, key_since, urls, cas"
/* How many columns AGENT_READ_COLS reads (register_at_once's answer
 * follows them): change the two together. */
#define AGENT_READ_NCOLS 17

/* Stored as words rather than enum values so the database reads on its own
 * and a reordered enum cannot silently change meaning. */
static const char *const token_kinds[] = {
	[TOKEN_ADMIN] = "admin",
	[TOKEN_IMPORT] = "import",
	[TOKEN_USER] = "user",
};

#define TOKEN_KINDS ((int)(sizeof(token_kinds) / sizeof(token_kinds[0])))

/* ---- timing the calls --------------------------------------------------- */

static double
now_seconds(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* One timed call under way: its store, its name, when it began. */
struct store_timer {
	struct store *s;
	const char *op;
	double start;
};

/* Tells s's timing hook how long the call took, named by its function
 * without "store_". */
static void
store_timer_done(struct store_timer *t)
{
	const char *op = t->op;

	if (t->s->timing == NULL)
		return;
	if (strncmp(op, "store_", 6) == 0)
		op += 6;
	t->s->timing(t->s->timing_arg, op, now_seconds() - t->start);
}

/* Times the call it is declared in (on store s), until it returns. */
#define STORE_TIMED(s) \
	struct store_timer store_timer_ \
	    __attribute__((cleanup(store_timer_done))) = { (s), __func__, \
	    now_seconds() }

/* ---- running statements ------------------------------------------------- */

/* In a broken group nothing runs: a statement would commit on its own
 * what the group's caller is to make again, alone. */
static int
run(struct store *s, const struct store_stmt *q, store_row_fn *fn, void *arg,
    struct store_outcome *out, char *err, size_t errlen)
{
	if (s->group != STORE_GROUP_NONE && !store_group_whole(s)) {
		if (out != NULL)
			*out = (struct store_outcome){ 0 };
		snprintf(err, errlen, "%s: the store group was rolled back",
		    q->what);
		return STORE_ERR;
	}
	return s->be->run(s, q, fn, arg, out, err, errlen);
}

static int
col_text(const struct store_row *r, int col, char *dst, size_t dstlen)
{
	return r->be->col_text(r, col, dst, dstlen);
}

static int64_t
col_int(const struct store_row *r, int col)
{
	return r->be->col_int(r, col);
}

static int
col_key(const struct store_row *r, int col, uint8_t dst[32])
{
	return r->be->col_key(r, col, dst);
}

/* The first row of a query, read by its reader into out. */
struct one_row {
	store_row_fn *read;
	void *out;
	bool found;
};

static int
take_first(const struct store_row *row, void *arg)
{
	struct one_row *o = arg;

	if (o->found)
		return 0;
	o->found = true;
	return o->read(row, o->out);
}

/* Runs q for at most one row: STORE_OK with *out filled by read,
 * STORE_NOTFOUND, or STORE_ERR/STORE_FULL with err. */
static int
query_one(struct store *s, const struct store_stmt *q, store_row_fn *read,
    void *out, char *err, size_t errlen)
{
	struct one_row o = { .read = read, .out = out };
	int rc;

	if ((rc = run(s, q, take_first, &o, NULL, err, errlen)) != STORE_OK)
		return rc;
	return o.found ? STORE_OK : STORE_NOTFOUND;
}

static int
ignore_row(const struct store_row *row, void *arg)
{
	(void)row;
	(void)arg;
	return 0;
}

/* Whether q has a row: STORE_OK, STORE_NOTFOUND or a failure. */
static int
query_exists(struct store *s, const struct store_stmt *q, char *err,
    size_t errlen)
{
	return query_one(s, q, ignore_row, NULL, err, errlen);
}

/* Runs a statement that writes; *changes (may be NULL) the rows it
 * touched, *v (may be NULL) the constraint a failure ran into. */
static int
write_stmt(struct store *s, const struct store_stmt *q, int64_t *changes,
    enum store_violation *v, char *err, size_t errlen)
{
	struct store_outcome o;
	int rc = run(s, q, NULL, NULL, &o, err, errlen);

	if (changes != NULL)
		*changes = o.changes;
	if (v != NULL)
		*v = o.violation;
	return rc;
}

/* Doubles *cap when n reached it.  Returns 0 or -1 (out of memory). */
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

/* Every row of a query read into a growing array of elem-sized records. */
struct all_rows {
	store_row_fn *read;
	size_t elem;
	unsigned char *arr;
	size_t cap, count;
	bool oom;
};

static int
take_each(const struct store_row *row, void *arg)
{
	struct all_rows *a = arg;

	if (grow((void **)&a->arr, &a->cap, a->count, a->elem) == -1) {
		a->oom = true;
		return -1;
	}
	if (a->read(row, a->arr + a->count * a->elem) == -1)
		return -1;
	a->count++;
	return 0;
}

/*
 * Runs q, reading every row into a new array (*out, caller frees; *n
 * records).  Returns STORE_OK, or a failure with err and nothing allocated.
 */
static int
query_all(struct store *s, const struct store_stmt *q, size_t elem,
    store_row_fn *read, void **out, size_t *n, char *err, size_t errlen)
{
	struct all_rows a = { .read = read, .elem = elem };
	int rc;

	rc = run(s, q, take_each, &a, NULL, err, errlen);
	if (rc != STORE_OK) {
		if (a.oom)
			snprintf(err, errlen, "%s: out of memory", q->what);
		free(a.arr);
		return rc;
	}
	/* An empty answer still hands out an array, as callers free it. */
	if (a.arr == NULL && (a.arr = calloc(1, elem)) == NULL) {
		snprintf(err, errlen, "%s: out of memory", q->what);
		return STORE_ERR;
	}
	*out = a.arr;
	*n = a.count;
	return STORE_OK;
}

/* ---- groups (store_backend.h) ------------------------------------------ */

/* Every call's transaction in a group is this savepoint (calls do not
 * nest, so one name serves). */
#define SAVEPOINT_SQL  "SAVEPOINT call"
#define RELEASE_SQL    "RELEASE call"
#define ROLLBACK_TO_SQL "ROLLBACK TO call"

bool
store_group_able(const struct store *s)
{
	return s->be->in_transaction != NULL;
}

int
store_group_begin(struct store *s, char *err, size_t errlen)
{
	int rc;

	if (!store_group_able(s) || s->group != STORE_GROUP_NONE) {
		snprintf(err, errlen, "begin group: not here");
		return STORE_ERR;
	}
	if ((rc = s->be->begin(s, false, err, errlen)) == STORE_OK)
		s->group = STORE_GROUP_OPEN;
	return rc;
}

bool
store_group_whole(struct store *s)
{
	if (s->group == STORE_GROUP_OPEN && !s->be->in_transaction(s))
		s->group = STORE_GROUP_BROKEN;
	return s->group == STORE_GROUP_OPEN;
}

int
store_group_end(struct store *s, char *err, size_t errlen)
{
	bool whole = store_group_whole(s);
	STORE_TIMED(s);     /* "group_end": the group's commit and its sync */

	s->group = STORE_GROUP_NONE;
	if (!whole) {
		s->be->rollback(s);     /* a no-op once the engine rolled back */
		snprintf(err, errlen, "the store group was rolled back");
		return STORE_ERR;
	}
	return store_finish(s, STORE_OK, err, errlen);
}

/* Ends a call's savepoint in a group: kept (released into the group) on
 * STORE_OK, else undone alone.  A savepoint that cannot be undone breaks
 * the group. */
static int
savepoint_finish(struct store *s, int rc, char *err, size_t errlen)
{
	char why[STORE_ERROR_MAX + 1];

	if (!store_group_whole(s)) {
		if (rc == STORE_OK) {
			snprintf(err, errlen, "the store group was rolled back");
			rc = STORE_ERR;
		}
		return rc;
	}
	if (rc == STORE_OK && (rc = s->be->exec(s, RELEASE_SQL,
	    "release savepoint", err, errlen)) == STORE_OK)
		return STORE_OK;
	if (s->be->exec(s, ROLLBACK_TO_SQL, "roll back savepoint", why,
	    sizeof(why)) != STORE_OK ||
	    s->be->exec(s, RELEASE_SQL, "release savepoint", why,
	    sizeof(why)) != STORE_OK) {
		error("store: a failed call could not be undone alone; its "
		    "group is rolled back", KV_S("err", why));
		s->group = STORE_GROUP_BROKEN;
		s->be->rollback(s);
	}
	return rc;
}

int
store_finish(struct store *s, int rc, char *err, size_t errlen)
{
	if (s->group != STORE_GROUP_NONE)
		return savepoint_finish(s, rc, err, errlen);
	if (rc != STORE_OK) {
		s->be->rollback(s);
		return rc;
	}
	if ((rc = s->be->commit(s, err, errlen)) != STORE_OK) {
		s->be->rollback(s);
		return rc;
	}
	return STORE_OK;
}

/* A call's transaction: its own, or a savepoint in s's group. */
static int
begin(struct store *s, char *err, size_t errlen)
{
	if (s->group == STORE_GROUP_NONE)
		return s->be->begin(s, false, err, errlen);
	if (!store_group_whole(s)) {
		snprintf(err, errlen, "begin: the store group was rolled back");
		return STORE_ERR;
	}
	return s->be->exec(s, SAVEPOINT_SQL, "begin savepoint", err, errlen);
}

/* The longest presence statement, with {NOW} spelled out. */
#define NOW_SQL_MAX 1024

/*
 * sql with each "{NOW}" spelled as the backend's expression for the
 * database's clock in Unix ms (into buf): leases are stamped and compared
 * by the database, so replicas' clocks may disagree.
 */
static const char *
db_now_sql(const struct store *s, const char *sql, char *buf, size_t len)
{
	const char *now = s->be->dialect->now_ms, *p;
	size_t o = 0, nlen = strlen(now);

	for (p = sql; *p != '\0' && o + 1 < len; ) {
		if (strncmp(p, "{NOW}", 5) == 0 && o + nlen < len) {
			memcpy(buf + o, now, nlen);
			o += nlen;
			p += 5;
		} else
			buf[o++] = *p++;
	}
	buf[o] = '\0';
	return buf;
}

/* ---- small helpers ---------------------------------------------------- */

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
refuse_user_name(char *err, size_t errlen)
{
	/* As refuse_name: the bad name is not echoed. */
	snprintf(err, errlen, "invalid user name: use 1 to %d characters "
	    "of A-Z a-z 0-9 . _ @ -", STORE_NAME_MAX);
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

/* ---- opening ------------------------------------------------------------- */

static int
has_prefix(const char *s, const char *prefix)
{
	return strncmp(s, prefix, strlen(prefix)) == 0;
}

/* Connects the backend the URL names; the schema is not touched yet. */
static int
connect_backend(const char *url, struct store *s, char *err, size_t errlen)
{
	if (url == NULL || *url == '\0') {
		snprintf(err, errlen, "no store URL given");
		return STORE_ERR;
	}
	if (has_prefix(url, SQLITE_SCHEME))
		return store_sqlite_connect(url + strlen(SQLITE_SCHEME), s, err,
		    errlen);
	/* libpq reads the whole URL, scheme included. */
	if (store_url_is_postgres(url))
		return store_pg_connect(url, s, err, errlen);
	/* Print only the scheme: a URL may carry a password. */
	snprintf(err, errlen, "unsupported store URL scheme \"%.*s\" "
	    "(expected sqlite://PATH or postgres://USER@HOST:PORT/DB)",
	    (int)strcspn(url, ":/"), url);
	return STORE_ERR;
}

bool
store_url_is_postgres(const char *url)
{
	return has_prefix(url, POSTGRES_SCHEME) ||
	    has_prefix(url, POSTGRESQL_SCHEME);
}

int
store_open(const char *url, struct store **out, char *err, size_t errlen)
{
	struct store *s;

	*out = NULL;
	if ((s = calloc(1, sizeof(*s))) == NULL) {
		snprintf(err, errlen, "out of memory");
		return STORE_ERR;
	}
	if (connect_backend(url, s, err, errlen) != STORE_OK ||
	    s->be->begin(s, true, err, errlen) != STORE_OK ||
	    store_finish(s, store_schema_migrate(s, err, errlen), err,
	    errlen) != STORE_OK) {
		store_close(s);
		return STORE_ERR;
	}
	*out = s;
	return STORE_OK;
}

void
store_set_timing(struct store *s, store_timing_fn *fn, void *arg)
{
	s->timing = fn;
	s->timing_arg = arg;
}

void
store_close(struct store *s)
{
	if (s == NULL)
		return;
	if (s->be != NULL)
		s->be->close(s);
	free(s);
}

int
store_schema_version(struct store *s)
{
	return s->version;
}

/* ---- clusters ----------------------------------------------------------- */

static int
read_cluster(const struct store_row *row, void *out)
{
	struct store_cluster *c = out;

	memset(c, 0, sizeof(*c));
	if (col_text(row, 0, c->id, sizeof(c->id)) == -1 ||
	    col_text(row, 1, c->name, sizeof(c->name)) == -1)
		return -1;
	c->created_at = col_int(row, 2);
	return 0;
}

/* One attempt at inserting a cluster; *collided says the random id was
 * taken, the one failure worth another try. */
static int
insert_cluster(struct store *s, const struct store_cluster *c, bool *collided,
    char *err, size_t errlen)
{
	enum store_violation v;
	int rc;

	rc = write_stmt(s, &(struct store_stmt){
	    .sql = "INSERT INTO clusters (id, name, created_at) VALUES (?, ?, ?)",
	    .what = "insert cluster",
	    PARAMS(P_TEXT(c->id), P_TEXT(c->name), P_INT(c->created_at)) },
	    NULL, &v, err, errlen);
	*collided = rc != STORE_OK && v == STORE_V_PRIMARY_KEY;
	if (rc != STORE_OK && v == STORE_V_UNIQUE) {
		snprintf(err, errlen, "cluster %s already exists", c->name);
		return STORE_CONFLICT;
	}
	return rc;
}

int
store_cluster_create(struct store *s, const char *name, int64_t now,
    struct store_cluster *out, char *err, size_t errlen)
{
	struct store_cluster c;
	bool collided = true;
	int attempt, rc = STORE_ERR;
	STORE_TIMED(s);

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

int
store_cluster_get(struct store *s, const char *id, struct store_cluster *out)
{
	char err[STORE_ERROR_MAX + 1];
	int rc;
	STORE_TIMED(s);

	rc = query_one(s, &(struct store_stmt){
	    .sql = "SELECT " CLUSTER_COLS " FROM clusters WHERE id = ?",
	    .what = "read cluster", PARAMS(P_TEXT(id)) }, read_cluster, out,
	    err, sizeof(err));
	if (rc == STORE_ERR)
		error("store: reading a cluster failed", KV_S("cluster", id), KV_S("err", err));
	return rc;
}

int
store_cluster_list(struct store *s, struct store_cluster **out, size_t *n)
{
	char err[STORE_ERROR_MAX + 1];
	int rc;
	STORE_TIMED(s);

	*out = NULL;
	*n = 0;
	rc = query_all(s, &(struct store_stmt){
	    .sql = "SELECT " CLUSTER_COLS " FROM clusters "
	    "ORDER BY created_at, rowid", .what = "read cluster" },
	    sizeof(**out), read_cluster, (void **)out, n, err, sizeof(err));
	if (rc != STORE_OK)
		error("store: listing clusters failed", KV_S("err", err));
	return rc;
}

/* ---- tokens ------------------------------------------------------------- */

static int
read_token(const struct store_row *row, void *out)
{
	struct store_token *t = out;
	char kind[16];

	memset(t, 0, sizeof(*t));
	if (col_text(row, 0, t->id, sizeof(t->id)) == -1 ||
	    col_text(row, 1, kind, sizeof(kind)) == -1 ||
	    token_kind_parse(kind, &t->kind) == -1 ||
	    col_text(row, 2, t->cluster, sizeof(t->cluster)) == -1 ||
	    col_text(row, 3, t->name, sizeof(t->name)) == -1 ||
	    col_key(row, 4, t->verifier) == -1)
		return -1;
	t->expires_at = col_int(row, 5);
	t->uses_left = col_int(row, 6);
	t->approval_manual = col_int(row, 7) != 0;
	t->revoked = col_int(row, 8) != 0;
	t->created_at = col_int(row, 9);
	return 0;
}

/* Looks a token up, with err for callers that report it; flags
 * STORE_STMT_LOCK holds the row until the transaction ends. */
static int
token_lookup(struct store *s, const char *id, unsigned flags,
    struct store_token *out, char *err, size_t errlen)
{
	return query_one(s, &(struct store_stmt){
	    .sql = "SELECT " TOKEN_COLS " FROM tokens WHERE id = ?",
	    .what = "read token", .flags = flags, PARAMS(P_TEXT(id)) },
	    read_token, out, err, errlen);
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
	enum store_violation v;
	int rc;
	STORE_TIMED(s);

	if ((rc = token_check(t, err, errlen)) != STORE_OK)
		return rc;
	rc = write_stmt(s, &(struct store_stmt){
	    .sql = "INSERT INTO tokens (" TOKEN_COLS ") "
	    "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)", .what = "insert token",
	    PARAMS(P_TEXT(t->id), P_TEXT(token_kinds[t->kind]),
	    P_TEXT_OR_NULL(t->cluster), P_TEXT(t->name), P_KEY(t->verifier),
	    P_INT(t->expires_at), P_INT(t->uses_left),
	    P_INT(t->approval_manual ? 1 : 0), P_INT(t->revoked ? 1 : 0),
	    P_INT(t->created_at)) }, NULL, &v, err, errlen);
	if (rc == STORE_OK)
		return STORE_OK;
	switch (v) {
	case STORE_V_PRIMARY_KEY:
		snprintf(err, errlen, "token %s already exists", t->id);
		return STORE_CONFLICT;
	case STORE_V_FOREIGN_KEY:
		snprintf(err, errlen, "no cluster %s", t->cluster);
		return STORE_REFUSED;
	default:
		return rc;
	}
}

int
store_token_get(struct store *s, const char *id, struct store_token *out)
{
	char err[STORE_ERROR_MAX + 1];
	int rc;
	STORE_TIMED(s);

	rc = token_lookup(s, id, 0, out, err, sizeof(err));
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
	if (!store_user_name_valid(t->name))
		return refuse_user_name(err, errlen);
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
	int rc;

	rc = query_exists(s, &(struct store_stmt){
	    .sql = "SELECT 1 FROM clusters WHERE id = ?", .what = "read cluster",
	    PARAMS(P_TEXT(id)) }, err, errlen);
	if (rc == STORE_NOTFOUND)
		snprintf(err, errlen, "no cluster %.*s", STORE_ID_MAX, id);
	return rc;
}

/* Adds one scope row; *added is false when the pair was already there. */
static int
insert_scope(struct store *s, const char *token_id, const char *cluster,
    bool *added, char *err, size_t errlen)
{
	int64_t changes = 0;
	int rc;

	rc = write_stmt(s, &(struct store_stmt){
	    .sql = "INSERT INTO token_clusters (token_id, cluster_id) "
	    "VALUES (?, ?) ON CONFLICT DO NOTHING", .what = "insert token scope",
	    PARAMS(P_TEXT(token_id), P_TEXT(cluster)) }, &changes, NULL, err,
	    errlen);
	*added = rc == STORE_OK && changes == 1;
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
	STORE_TIMED(s);

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
	if ((rc = store_finish(s, rc, err, errlen)) == STORE_OK && out != NULL)
		*out = u;
	return rc;
}

/* The user tokens a list query has read so far. */
struct user_rows {
	struct store_user_token *arr;
	size_t cap, count;
	char err[STORE_ERROR_MAX + 1];
};

/* Fills u's token columns from a row of the list query (clusters apart). */
static int
read_user_token(const struct store_row *row, struct store_user_token *u)
{
	memset(u, 0, sizeof(*u));
	if (col_text(row, 0, u->id, sizeof(u->id)) == -1 ||
	    col_text(row, 1, u->name, sizeof(u->name)) == -1)
		return -1;
	u->expires_at = col_int(row, 2);
	u->revoked = col_int(row, 3) != 0;
	u->created_at = col_int(row, 4);
	return 0;
}

/*
 * Adds one row of the list query: a new token when its id differs from the
 * last one's, and its cluster (NULL for a token with none, which only a
 * database edited by hand holds).
 */
static int
add_user_row(const struct store_row *row, void *arg)
{
	struct user_rows *r = arg;
	struct store_user_token *u;
	char id[TOKEN_ID_LEN + 1];

	if (row->be->col_null(row, 0) ||
	    col_text(row, 0, id, sizeof(id)) == -1) {
		snprintf(r->err, sizeof(r->err), "malformed user token row");
		return -1;
	}
	if (r->count == 0 || strcmp(r->arr[r->count - 1].id, id) != 0) {
		if (grow((void **)&r->arr, &r->cap, r->count,
		    sizeof(*r->arr)) == -1) {
			snprintf(r->err, sizeof(r->err), "out of memory");
			return -1;
		}
		if (read_user_token(row, &r->arr[r->count]) == -1) {
			snprintf(r->err, sizeof(r->err),
			    "malformed user token row");
			return -1;
		}
		r->count++;
	}
	u = &r->arr[r->count - 1];
	if (row->be->col_null(row, 5))
		return 0;
	if (u->nclusters == STORE_TOKEN_CLUSTERS_MAX ||
	    col_text(row, 5, u->clusters[u->nclusters],
	    sizeof(u->clusters[0])) == -1) {
		snprintf(r->err, sizeof(r->err),
		    "user token %s: malformed scope", u->id);
		return -1;
	}
	u->nclusters++;
	return 0;
}

/* User tokens with their clusters: all of them, or the one with id (the
 * primary key: at most one row of tokens) when id is non-NULL. */
static int
user_tokens_select(struct store *s, const char *id,
    struct store_user_token **out, size_t *n)
{
	char err[STORE_ERROR_MAX + 1];
	struct user_rows r = { .count = 0 };
	int rc;
	STORE_TIMED(s);

	*out = NULL;
	*n = 0;
	r.err[0] = '\0';
	if (id == NULL)
		rc = run(s, &(struct store_stmt){
		    .sql = "SELECT " USER_TOKEN_COLS ", c.cluster_id "
		    "FROM tokens t LEFT JOIN token_clusters c "
		    "ON c.token_id = t.id WHERE t.kind = 'user' "
		    "ORDER BY t.created_at, t.rowid, c.rowid",
		    .what = "read user tokens" }, add_user_row, &r, NULL, err,
		    sizeof(err));
	else
		rc = run(s, &(struct store_stmt){
		    .sql = "SELECT " USER_TOKEN_COLS ", c.cluster_id "
		    "FROM tokens t LEFT JOIN token_clusters c "
		    "ON c.token_id = t.id WHERE t.kind = 'user' AND t.id = ? "
		    "ORDER BY c.rowid", .what = "read user tokens",
		    PARAMS(P_TEXT(id)) }, add_user_row, &r, NULL, err,
		    sizeof(err));
	if (rc != STORE_OK) {
		error("store: reading user tokens failed",
		    KV_S("err", r.err[0] != '\0' ? r.err : err));
		free(r.arr);
		return rc;
	}
	*out = r.arr;
	*n = r.count;
	return STORE_OK;
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

static int
read_int(const struct store_row *row, void *out)
{
	*(int64_t *)out = col_int(row, 0);
	return 0;
}

static int
user_revoke_locked(struct store *s, const char *name, int64_t *count,
    char *err, size_t errlen)
{
	int64_t total = 0;
	int rc;

	rc = query_one(s, &(struct store_stmt){
	    .sql = "SELECT count(*) FROM tokens WHERE kind = 'user' AND name = ?",
	    .what = "count user tokens", PARAMS(P_TEXT(name)) }, read_int,
	    &total, err, errlen);
	if (rc != STORE_OK)
		return rc == STORE_NOTFOUND ? STORE_ERR : rc;
	if (total == 0) {
		snprintf(err, errlen, "user %s has no tokens", name);
		return STORE_NOTFOUND;
	}
	return write_stmt(s, &(struct store_stmt){
	    .sql = "UPDATE tokens SET revoked = 1 WHERE kind = 'user' AND "
	    "name = ? AND revoked = 0", .what = "revoke user tokens",
	    PARAMS(P_TEXT(name)) }, count, NULL, err, errlen);
}

int
store_user_revoke(struct store *s, const char *name, int64_t *count,
    char *err, size_t errlen)
{
	int64_t n = 0;
	int rc;
	STORE_TIMED(s);

	if (!store_user_name_valid(name))
		return refuse_user_name(err, errlen);
	if (begin(s, err, errlen) != STORE_OK)
		return STORE_ERR;
	rc = user_revoke_locked(s, name, &n, err, errlen);
	if ((rc = store_finish(s, rc, err, errlen)) == STORE_OK && count != NULL)
		*count = n;
	return rc;
}

int
store_user_token_revoke(struct store *s, const char *id,
    struct store_user_token *out, char *err, size_t errlen)
{
	struct store_user_token *arr = NULL;
	size_t n = 0;
	int rc;
	STORE_TIMED(s);

	if (begin(s, err, errlen) != STORE_OK)
		return STORE_ERR;
	rc = write_stmt(s, &(struct store_stmt){
	    .sql = "UPDATE tokens SET revoked = 1 WHERE kind = 'user' AND "
	    "id = ? AND revoked = 0", .what = "revoke a user token",
	    PARAMS(P_TEXT(id)) }, NULL, NULL, err, errlen);
	if (rc == STORE_OK && (rc = user_tokens_select(s, id, &arr, &n)) == STORE_OK &&
	    n != 1) {
		snprintf(err, errlen, "no user token %s", id);
		rc = STORE_NOTFOUND;
	}
	if ((rc = store_finish(s, rc, err, errlen)) == STORE_OK && out != NULL)
		*out = arr[0];
	free(arr);
	return rc;
}

int
store_token_in_cluster(struct store *s, const char *token_id,
    const char *cluster)
{
	char err[STORE_ERROR_MAX + 1];
	int rc;
	STORE_TIMED(s);

	rc = query_exists(s, &(struct store_stmt){
	    .sql = "SELECT 1 FROM token_clusters WHERE token_id = ? AND "
	    "cluster_id = ?", .what = "read token scope",
	    PARAMS(P_TEXT(token_id), P_TEXT(cluster)) }, err, sizeof(err));
	if (rc == STORE_ERR || rc == STORE_FULL) {
		error("store: reading a token's scope failed", KV_S("token", token_id), KV_S("err", err));
		return STORE_ERR;
	}
	return rc;
}

/* ---- agents ------------------------------------------------------------- */

static int
read_agent(const struct store_row *row, void *out)
{
	struct store_agent *a = out;
	char state[32];

	memset(a, 0, sizeof(*a));
	if (col_text(row, 0, a->id, sizeof(a->id)) == -1 ||
	    col_text(row, 1, a->cluster, sizeof(a->cluster)) == -1 ||
	    col_text(row, 2, a->node, sizeof(a->node)) == -1 ||
	    col_key(row, 3, a->pubkey) == -1 ||
	    col_text(row, 4, state, sizeof(state)) == -1 ||
	    agent_state_parse(state, &a->state) == -1 ||
	    col_text(row, 5, a->last_error, sizeof(a->last_error)) == -1 ||
	    col_text(row, 6, a->token_id, sizeof(a->token_id)) == -1)
		return -1;
	a->created_at = col_int(row, 7);
	a->updated_at = col_int(row, 8);
	if (col_text(row, 9, a->version, sizeof(a->version)) == -1)
		return -1;
	a->last_seen = col_int(row, 10);
	a->has_next = col_int(row, 11) != 0;
	if (col_key(row, 12, a->next_pubkey) == -1)
		return -1;
	if (!a->has_next)
		memset(a->next_pubkey, 0, sizeof(a->next_pubkey));
	a->key_rotate = col_int(row, 13) != 0;
	a->key_since = col_int(row, 14);
	a->urls_known = !row->be->col_null(row, 15);
	if (a->urls_known && col_text(row, 15, a->urls, sizeof(a->urls)) == -1)
		return -1;
	a->cas_known = !row->be->col_null(row, 16);
	if (a->cas_known && col_text(row, 16, a->cas, sizeof(a->cas)) == -1)
		return -1;
	return 0;
}

/* A release string as stored: at most STORE_VERSION_MAX characters of
 * [A-Za-z0-9.+~_-], any other byte '_' (it reaches JSON and logs). */
static void
version_clean(const char *in, char out[STORE_VERSION_MAX + 1])
{
	size_t i;

	for (i = 0; i < STORE_VERSION_MAX && in[i] != '\0'; i++)
		out[i] = strchr("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"
		    "0123456789.+~_-", in[i]) != NULL ? in[i] : '_';
	out[i] = '\0';
}

int
store_agent_seen(struct store *s, const char *id, const char *version,
    int64_t now, char *err, size_t errlen)
{
	char v[STORE_VERSION_MAX + 1];
	STORE_TIMED(s);

	if (version == NULL)
		return write_stmt(s, &(struct store_stmt){
		    .sql = "UPDATE agents SET last_seen = ? WHERE id = ?",
		    .what = "record agent seen", PARAMS(P_INT(now), P_TEXT(id)) },
		    NULL, NULL, err, errlen);
	version_clean(version, v);
	return write_stmt(s, &(struct store_stmt){
	    .sql = "UPDATE agents SET last_seen = ?, version = ? WHERE id = ?",
	    .what = "record agent seen",
	    PARAMS(P_INT(now), P_TEXT(v), P_TEXT(id)) }, NULL, NULL, err, errlen);
}

int
store_agent_urls(struct store *s, const char *id, const char *urls,
    char *err, size_t errlen)
{
	STORE_TIMED(s);

	if (strlen(urls) > STORE_URLS_MAX) {
		snprintf(err, errlen, "record agent urls: over %d bytes",
		    STORE_URLS_MAX);
		return STORE_ERR;
	}
	return write_stmt(s, &(struct store_stmt){
	    .sql = "UPDATE agents SET urls = ? WHERE id = ?",
	    .what = "record agent urls", PARAMS(P_TEXT(urls), P_TEXT(id)) },
	    NULL, NULL, err, errlen);
}

int
store_agent_cas(struct store *s, const char *id, const char *cas,
    char *err, size_t errlen)
{
	STORE_TIMED(s);

	if (strlen(cas) > STORE_CAS_MAX) {
		snprintf(err, errlen, "record agent cas: over %d bytes",
		    STORE_CAS_MAX);
		return STORE_ERR;
	}
	return write_stmt(s, &(struct store_stmt){
	    .sql = "UPDATE agents SET cas = ? WHERE id = ?",
	    .what = "record agent cas", PARAMS(P_TEXT(cas), P_TEXT(id)) },
	    NULL, NULL, err, errlen);
}

static int
read_ca_count(const struct store_row *row, void *out)
{
	struct store_ca_count *c = out;

	c->agents = col_int(row, 0);
	c->holding = col_int(row, 1);
	c->connected = col_int(row, 2);
	c->connected_holding = col_int(row, 3);
	return 0;
}

int
store_agents_holding_ca(struct store *s, const char *checksum,
    struct store_ca_count *out, char *err, size_t errlen)
{
	char sql[NOW_SQL_MAX], like[80];
	STORE_TIMED(s);

	memset(out, 0, sizeof(*out));
	/* Its shape keeps LIKE's wildcards out of the pattern. */
	if (strncmp(checksum, "sha256:", 7) != 0 || strlen(checksum) != 71 ||
	    strspn(checksum + 7, "0123456789abcdef") != 64) {
		snprintf(err, errlen, "count agents holding a CA: not a checksum");
		return STORE_ERR;
	}
	snprintf(like, sizeof(like), "%% %s %%", checksum);
	return query_one(s, &(struct store_stmt){
	    .sql = db_now_sql(s, "SELECT COUNT(*), COALESCE(SUM(h), 0),"
	    " COALESCE(SUM(c), 0), COALESCE(SUM(h * c), 0) FROM (SELECT"
	    " CASE WHEN a.cas IS NOT NULL AND (' ' || a.cas || ' ') LIKE ?"
	    " THEN 1 ELSE 0 END AS h,"
	    " CASE WHEN EXISTS (SELECT 1 FROM tunnels t JOIN replicas r"
	    " ON r.id = t.replica_id WHERE t.agent_id = a.id"
	    " AND r.lease_until > {NOW}) THEN 1 ELSE 0 END AS c"
	    " FROM agents a WHERE a.state <> 'revoked') x", sql, sizeof(sql)),
	    .what = "count agents holding a CA", PARAMS(P_TEXT(like)) },
	    read_ca_count, out, err, errlen);
}

/* ---- gateway settings --------------------------------------------------- */

struct setting_out {
	char *out;
	size_t outlen;
};

static int
read_setting(const struct store_row *row, void *arg)
{
	struct setting_out *o = arg;

	return col_text(row, 0, o->out, o->outlen);
}

int
store_setting_get(struct store *s, const char *name, char *out,
    size_t outlen, char *err, size_t errlen)
{
	struct setting_out o = { out, outlen };
	STORE_TIMED(s);

	out[0] = '\0';
	return query_one(s, &(struct store_stmt){
	    .sql = "SELECT value FROM settings WHERE name = ?",
	    .what = "read setting", PARAMS(P_TEXT(name)) }, read_setting, &o,
	    err, errlen);
}

int
store_setting_set(struct store *s, const char *name, const char *value,
    int64_t now, char *err, size_t errlen)
{
	STORE_TIMED(s);

	return write_stmt(s, &(struct store_stmt){
	    .sql = "INSERT INTO settings (name, value, updated_at) VALUES (?, ?, ?) "
	    "ON CONFLICT (name) DO UPDATE SET value = excluded.value, "
	    "updated_at = excluded.updated_at",
	    .what = "write setting",
	    PARAMS(P_TEXT(name), P_TEXT(value), P_INT(now)) }, NULL, NULL,
	    err, errlen);
}

int
store_agents_seen_here(struct store *s, const char *replica, int64_t now,
    char *err, size_t errlen)
{
	STORE_TIMED(s);

	return write_stmt(s, &(struct store_stmt){
	    .sql = "UPDATE agents SET last_seen = ? WHERE id IN"
	    " (SELECT agent_id FROM tunnels WHERE replica_id = ?)",
	    .what = "record connected agents seen",
	    PARAMS(P_INT(now), P_TEXT(replica)) }, NULL, NULL, err, errlen);
}

static int
read_version_count(const struct store_row *row, void *out)
{
	struct store_version_count *v = out;

	if (col_text(row, 0, v->version, sizeof(v->version)) != 0)
		snprintf(v->version, sizeof(v->version), "other");
	v->n = col_int(row, 1);
	return 0;
}

int
store_agents_by_version(struct store *s,
    struct store_version_count out[STORE_VERSIONS_MAX], size_t *n,
    char *err, size_t errlen)
{
	struct store_version_count *all = NULL;
	size_t nall = 0;
	int rc;
	STORE_TIMED(s);

	rc = query_all(s, &(struct store_stmt){
	    .sql = "SELECT version, COUNT(*) FROM agents WHERE state <> 'revoked'"
	    " GROUP BY version ORDER BY COUNT(*) DESC, version",
	    .what = "count agents by version" },
	    sizeof(*all), read_version_count, (void **)&all, &nall, err, errlen);
	if (rc != STORE_OK)
		return rc;
	*n = 0;
	for (size_t i = 0; i < nall; i++) {
		if (*n < STORE_VERSIONS_MAX - 1 || nall == STORE_VERSIONS_MAX) {
			out[(*n)++] = all[i];
		} else {
			if (*n == STORE_VERSIONS_MAX - 1) {
				snprintf(out[*n].version, sizeof(out[*n].version), "other");
				out[(*n)++].n = 0;
			}
			out[*n - 1].n += all[i].n;
		}
	}
	free(all);
	return STORE_OK;
}

static int
read_offline(const struct store_row *row, void *out)
{
	int64_t *counts = out;

	for (int i = 0; i < STORE_OFFLINE_SPANS; i++)
		counts[i] = col_int(row, i);
	return 0;
}

int
store_agents_offline(struct store *s, int64_t now,
    const int64_t over_s[STORE_OFFLINE_SPANS],
    int64_t counts[STORE_OFFLINE_SPANS], char *err, size_t errlen)
{
	char sql[NOW_SQL_MAX];
	int rc;
	STORE_TIMED(s);

	/* seen: last contact; each column counts those before now - over. */
#define SEEN "(CASE WHEN a.last_seen > 0 THEN a.last_seen ELSE a.updated_at END)"
	rc = query_one(s, &(struct store_stmt){
	    .sql = db_now_sql(s, "SELECT COALESCE(SUM(CASE WHEN " SEEN " < ? THEN 1 ELSE 0 END), 0),"
	    " COALESCE(SUM(CASE WHEN " SEEN " < ? THEN 1 ELSE 0 END), 0),"
	    " COALESCE(SUM(CASE WHEN " SEEN " < ? THEN 1 ELSE 0 END), 0)"
	    " FROM agents a WHERE a.state <> 'revoked' AND NOT EXISTS"
	    " (SELECT 1 FROM tunnels t JOIN replicas r ON r.id = t.replica_id"
	    " WHERE t.agent_id = a.id AND r.lease_until > {NOW})", sql, sizeof(sql)),
	    .what = "count offline agents",
	    PARAMS(P_INT(now - over_s[0]), P_INT(now - over_s[1]),
	        P_INT(now - over_s[2])) },
	    read_offline, counts, err, errlen);
#undef SEEN
	return rc;
}

/* flags STORE_STMT_LOCK holds the row until the transaction ends. */
static int
agent_lookup(struct store *s, const char *id, unsigned flags,
    struct store_agent *out, char *err, size_t errlen)
{
	int rc;

	rc = query_one(s, &(struct store_stmt){
	    .sql = "SELECT " AGENT_READ_COLS " FROM agents WHERE id = ?",
	    .what = "read agent", .flags = flags, PARAMS(P_TEXT(id)) },
	    read_agent, out, err, errlen);
	if (rc == STORE_NOTFOUND)
		snprintf(err, errlen, "no agent %s", id);
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
	return query_one(s, &(struct store_stmt){
	    .sql = "SELECT " AGENT_READ_COLS " FROM agents "
	    "WHERE cluster_id = ? AND node = ? AND pubkey = ? "
	    "ORDER BY state = 'revoked', created_at DESC, rowid DESC LIMIT 1",
	    .what = "read agent",
	    PARAMS(P_TEXT(cluster), P_TEXT(node), P_KEY(pubkey)) },
	    read_agent, out, err, errlen);
}

/* The node's live (not revoked) agent; the unique index allows one. */
static int
find_live(struct store *s, const char *cluster, const char *node,
    struct store_agent *out, char *err, size_t errlen)
{
	return query_one(s, &(struct store_stmt){
	    .sql = "SELECT " AGENT_READ_COLS " FROM agents "
	    "WHERE cluster_id = ? AND node = ? AND state <> 'revoked'",
	    .what = "read agent", PARAMS(P_TEXT(cluster), P_TEXT(node)) },
	    read_agent, out, err, errlen);
}

/*
 * One attempt at inserting the agent; *collided as for insert_cluster.  A
 * taken id inserts nothing rather than failing, so that a backend whose
 * failed statement spoils the transaction (PostgreSQL) can try again.
 */
static int
insert_agent(struct store *s, const struct store_agent *a, bool *collided,
    char *err, size_t errlen)
{
	int64_t changes = 0;
	int rc;

	rc = write_stmt(s, &(struct store_stmt){
	    .sql = "INSERT INTO agents (" AGENT_COLS ") "
	    "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT (id) DO NOTHING",
	    .what = "insert agent",
	    PARAMS(P_TEXT(a->id), P_TEXT(a->cluster), P_TEXT(a->node),
	    P_KEY(a->pubkey), P_TEXT(agent_state_name(a->state)),
	    P_TEXT(a->last_error), P_TEXT(a->token_id), P_INT(a->created_at),
	    P_INT(a->updated_at)) }, &changes, NULL, err, errlen);
	*collided = rc == STORE_OK && changes == 0;
	if (*collided) {
		snprintf(err, errlen, "insert agent: no free agent id");
		return STORE_ERR;
	}
	return rc;
}

/* Spends one use of a limited token; unlimited ones (-1) are left alone. */
static int
consume_use(struct store *s, const struct store_token *t, char *err,
    size_t errlen)
{
	int64_t changes = 0;
	int rc;

	if (t->uses_left < 0)
		return STORE_OK;
	rc = write_stmt(s, &(struct store_stmt){
	    .sql = "UPDATE tokens SET uses_left = uses_left - 1 "
	    "WHERE id = ? AND uses_left > 0", .what = "consume token use",
	    PARAMS(P_TEXT(t->id)) }, &changes, NULL, err, errlen);
	if (rc != STORE_OK)
		return rc;
	/* The row was read and locked in this same transaction, so this
	 * cannot miss; if it does, nothing is spent twice. */
	if (changes != 1) {
		snprintf(err, errlen, "import token used up");
		return STORE_REFUSED;
	}
	return STORE_OK;
}

/* The token rules that hold even for a retry: it must be a live import
 * token.  Use counts are checked later, as a retry spends none.  The token
 * row stays locked until the transaction ends. */
static int
check_import_token(struct store *s, const char *token_id, int64_t now,
    struct store_token *t, char *err, size_t errlen)
{
	const char *why;
	int rc;

	rc = token_lookup(s, token_id, STORE_STMT_LOCK, t, err, errlen);
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

/* What the server-side register (tether_register) answered: the agent's
 * columns (read_agent's), then its code and detail. */
struct register_answer {
	char code[16];
	char detail[STORE_ERROR_MAX + 1];
	struct store_agent agent;
};

static int
read_register_answer(const struct store_row *row, void *out)
{
	struct register_answer *r = out;

	if (col_text(row, AGENT_READ_NCOLS, r->code, sizeof(r->code)) == -1 ||
	    col_text(row, AGENT_READ_NCOLS + 1, r->detail,
	    sizeof(r->detail)) == -1)
		return -1;
	/* Refusals and collisions carry no agent. */
	if (strcmp(r->code, "refused") == 0 || strcmp(r->code, "collided") == 0)
		return 0;
	return read_agent(row, &r->agent);
}

/*
 * register_locked's rules in one statement, where the backend has them as
 * a function (the dialect's register_fn, docs/0038): one round trip, the
 * token row locked only while the server runs them.  The statement is its
 * own transaction.  A drawn id already taken is drawn again, as new_agent
 * does.
 */
static int
register_at_once(struct store *s, const char *token_id, const char *node,
    const uint8_t pubkey[32], int64_t now, struct store_agent *out,
    bool *created, char *err, size_t errlen)
{
	struct register_answer r;
	char id[STORE_ID_MAX + 1];
	int attempt, rc;

	for (attempt = 0; attempt < ID_ATTEMPTS; attempt++) {
		if (make_id("a-", id, err, errlen) != STORE_OK)
			return STORE_ERR;
		memset(&r, 0, sizeof(r));
		rc = query_one(s, &(struct store_stmt){
		    .sql = "SELECT v.*, r.code, r.detail "
		    "FROM tether_register(?, ?, ?, ?, ?) r "
		    "LEFT JOIN LATERAL (SELECT " AGENT_READ_COLS
		    " FROM (SELECT (r.agent).*) agents) v ON true",
		    .what = "register agent", .flags = STORE_STMT_WRITES,
		    PARAMS(P_TEXT(token_id), P_TEXT(node), P_KEY(pubkey),
		    P_INT(now), P_TEXT(id)) },
		    read_register_answer, &r, err, errlen);
		if (rc == STORE_NOTFOUND) {
			snprintf(err, errlen, "register agent: no answer");
			return STORE_ERR;
		}
		if (rc != STORE_OK)
			return rc;
		if (strcmp(r.code, "collided") != 0)
			break;
	}
	if (strcmp(r.code, "refused") == 0) {
		snprintf(err, errlen, "%s", r.detail);
		return STORE_REFUSED;
	}
	if (strcmp(r.code, "taken") == 0) {
		snprintf(err, errlen, "node %s is already registered in "
		    "cluster %s as agent %s", r.agent.node, r.detail, r.agent.id);
		return STORE_REFUSED;
	}
	if (strcmp(r.code, "created") != 0 && strcmp(r.code, "retry") != 0) {
		snprintf(err, errlen, "insert agent: no free agent id");
		return STORE_ERR;
	}
	*out = r.agent;
	*created = strcmp(r.code, "created") == 0;
	return STORE_OK;
}

static bool
has_register_fn(const struct store *s)
{
	const char *fn = s->be->dialect->register_fn;

	return fn != NULL && *fn != '\0';
}

static void next_error(const struct store_agent *a, enum agent_event ev,
    const char *given, char out[STORE_ERROR_MAX + 1]);

/*
 * The first writes of an agent's own tunnel folded into its registration
 * (store_agent_register_on): the start of its verification and when it
 * was seen, one statement, applied only while a is still in enroll.  *a
 * becomes the record after it when *started.
 */
static int
start_on_tunnel(struct store *s, struct store_agent *a, const char *version,
    int64_t now, bool *started, char *err, size_t errlen)
{
	struct store_agent next = *a;
	char v[STORE_VERSION_MAX + 1] = "";    /* zeroed: the record is
	                                        * compared whole */
	int64_t changes = 0;
	int rc;

	*started = false;
	if (agent_state_next(a->state, AGENT_EV_VERIFY, &next.state, err,
	    errlen) == -1)
		return STORE_REFUSED;
	next_error(a, AGENT_EV_VERIFY, NULL, next.last_error);
	next.updated_at = now;
	next.last_seen = now;
	version_clean(version, v);
	memcpy(next.version, v, sizeof(next.version));
	rc = write_stmt(s, &(struct store_stmt){
	    .sql = "UPDATE agents SET state = ?, last_error = ?, updated_at = ?, "
	    "last_seen = ?, version = ? WHERE id = ? AND state = ?",
	    .what = "start agent verification",
	    PARAMS(P_TEXT(agent_state_name(next.state)), P_TEXT(next.last_error),
	    P_INT(now), P_INT(now), P_TEXT(v), P_TEXT(a->id),
	    P_TEXT(agent_state_name(a->state))) }, &changes, NULL, err, errlen);
	if (rc != STORE_OK || changes != 1)
		return rc;
	*a = next;
	*started = true;
	return STORE_OK;
}

/* store_agent_register, and store_agent_register_on's fold when version
 * is non-NULL. */
static int
register_call(struct store *s, const char *token_id, const char *node,
    const uint8_t pubkey[32], const char *version, int64_t now,
    struct store_agent *out, bool *created, bool *started, char *err,
    size_t errlen)
{
	struct store_agent a;
	bool made = false, on = false;
	int rc;

	if (!name_valid(node))
		return refuse_name("node", err, errlen);
	if (token_id == NULL || *token_id == '\0') {
		snprintf(err, errlen, "unknown import token");
		return STORE_REFUSED;
	}
	if (has_register_fn(s)) {
		if ((rc = register_at_once(s, token_id, node, pubkey, now, &a,
		    &made, err, errlen)) != STORE_OK)
			return rc;
		/* Its own statement after the registration's: a failure
		 * leaves the caller to make the writes as before. */
		if (version != NULL && made && a.state == AGENT_ENROLL &&
		    start_on_tunnel(s, &a, version, now, &on, err, errlen) !=
		    STORE_OK)
			on = false;
	} else {
		if (begin(s, err, errlen) != STORE_OK)
			return STORE_ERR;
		rc = register_locked(s, token_id, node, pubkey, now, &a, &made,
		    err, errlen);
		if (rc == STORE_OK && version != NULL && made &&
		    a.state == AGENT_ENROLL)
			rc = start_on_tunnel(s, &a, version, now, &on, err,
			    errlen);
		if ((rc = store_finish(s, rc, err, errlen)) != STORE_OK)
			return rc;
	}
	/* Only a committed result is handed out. */
	if (out != NULL)
		*out = a;
	if (created != NULL)
		*created = made;
	if (started != NULL)
		*started = on;
	return STORE_OK;
}

int
store_agent_register(struct store *s, const char *token_id,
    const char *node, const uint8_t pubkey[32], int64_t now,
    struct store_agent *out, bool *created, char *err, size_t errlen)
{
	STORE_TIMED(s);

	return register_call(s, token_id, node, pubkey, NULL, now, out,
	    created, NULL, err, errlen);
}

int
store_agent_register_on(struct store *s, const char *token_id,
    const char *node, const uint8_t pubkey[32], const char *version,
    int64_t now, struct store_agent *out, bool *created, bool *started,
    char *err, size_t errlen)
{
	STORE_TIMED(s);

	if (started != NULL)
		*started = false;
	return register_call(s, token_id, node, pubkey,
	    version != NULL ? version : "", now, out, created, started, err,
	    errlen);
}

int
store_agent_get(struct store *s, const char *id, struct store_agent *out)
{
	char err[STORE_ERROR_MAX + 1];
	int rc;
	STORE_TIMED(s);

	rc = agent_lookup(s, id, 0, out, err, sizeof(err));
	if (rc == STORE_ERR)
		error("store: reading an agent failed", KV_S("agent", id), KV_S("err", err));
	return rc;
}

int
store_agent_list(struct store *s, const char *cluster,
    struct store_agent **out, size_t *n)
{
	char err[STORE_ERROR_MAX + 1];
	int rc;
	STORE_TIMED(s);

	*out = NULL;
	*n = 0;
	if (cluster != NULL)
		rc = query_all(s, &(struct store_stmt){
		    .sql = "SELECT " AGENT_READ_COLS " FROM agents "
		    "WHERE cluster_id = ? ORDER BY created_at, rowid",
		    .what = "read agent", PARAMS(P_TEXT(cluster)) },
		    sizeof(**out), read_agent, (void **)out, n, err,
		    sizeof(err));
	else
		rc = query_all(s, &(struct store_stmt){
		    .sql = "SELECT " AGENT_READ_COLS " FROM agents "
		    "ORDER BY created_at, rowid", .what = "read agent" },
		    sizeof(**out), read_agent, (void **)out, n, err,
		    sizeof(err));
	if (rc != STORE_OK)
		error("store: listing agents failed", KV_S("err", err));
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
	return write_stmt(s, &(struct store_stmt){
	    .sql = "UPDATE agents SET state = ?, last_error = ?, "
	    "updated_at = ? WHERE id = ?", .what = "update agent",
	    .flags = STORE_STMT_DEFER, PARAMS(P_TEXT(agent_state_name(a->state)), P_TEXT(a->last_error),
	    P_INT(a->updated_at), P_TEXT(a->id)) }, NULL, NULL, err, errlen);
}

/* *from: the state before (told the caller once committed). */
static int
transition_locked(struct store *s, const char *id, enum agent_event ev,
    const char *last_error, int64_t now, struct store_agent *a,
    enum agent_state *from, char *err, size_t errlen)
{
	enum agent_state next;
	char msg[STORE_ERROR_MAX + 1];
	int rc;

	if ((rc = agent_lookup(s, id, STORE_STMT_LOCK, a, err, errlen)) !=
	    STORE_OK)
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
    struct store_agent *out, enum agent_state *was, char *err, size_t errlen)
{
	struct store_agent a;
	enum agent_state from = AGENT_STATE_ENTRIES;
	int rc;
	STORE_TIMED(s);

	if (begin(s, err, errlen) != STORE_OK)
		return STORE_ERR;
	rc = transition_locked(s, id, ev, last_error, now, &a, &from, err, errlen);
	if ((rc = store_finish(s, rc, err, errlen)) != STORE_OK)
		return rc;
	if (out != NULL)
		*out = a;
	if (was != NULL)
		*was = from;
	return STORE_OK;
}

/* ---- node key rotation ------------------------------------------------- */

/* Runs fn on the agent's locked row in one transaction; *out (may be
 * NULL) gets the record as committed. */
static int
key_txn(struct store *s, const char *id, struct store_agent *out,
    int (*fn)(struct store *s, struct store_agent *a, const void *arg,
    char *err, size_t errlen), const void *arg, char *err, size_t errlen)
{
	struct store_agent a;
	int rc;

	if (begin(s, err, errlen) != STORE_OK)
		return STORE_ERR;
	rc = agent_lookup(s, id, STORE_STMT_LOCK, &a, err, errlen);
	if (rc == STORE_OK)
		rc = fn(s, &a, arg, err, errlen);
	if (rc == STORE_OK)
		rc = agent_lookup(s, id, 0, &a, err, errlen);
	if ((rc = store_finish(s, rc, err, errlen)) != STORE_OK)
		return rc;
	if (out != NULL)
		*out = a;
	return STORE_OK;
}

static int
key_request_locked(struct store *s, struct store_agent *a, const void *arg,
    char *err, size_t errlen)
{
	const int64_t *now = arg;

	if (a->state == AGENT_REVOKED) {
		snprintf(err, errlen, "agent %s is revoked", a->id);
		return STORE_REFUSED;
	}
	return write_stmt(s, &(struct store_stmt){
	    .sql = "UPDATE agents SET key_rotate = 1, updated_at = ? WHERE id = ?",
	    .what = "request key rotation", PARAMS(P_INT(*now), P_TEXT(a->id)) },
	    NULL, NULL, err, errlen);
}

int
store_agent_key_request(struct store *s, const char *id, int64_t now,
    struct store_agent *out, char *err, size_t errlen)
{
	STORE_TIMED(s);

	return key_txn(s, id, out, key_request_locked, &now, err, errlen);
}

struct key_pair {
	const uint8_t *old_pub, *new_pub;
	int64_t now;
};

static int
key_stage_locked(struct store *s, struct store_agent *a, const void *arg,
    char *err, size_t errlen)
{
	const struct key_pair *k = arg;

	if (a->state == AGENT_REVOKED) {
		snprintf(err, errlen, "agent %s is revoked", a->id);
		return STORE_REFUSED;
	}
	if (memcmp(a->pubkey, k->old_pub, sizeof(a->pubkey)) != 0) {
		snprintf(err, errlen, "the agent's key changed");
		return STORE_REFUSED;
	}
	return write_stmt(s, &(struct store_stmt){
	    .sql = "UPDATE agents SET next_pubkey = ? WHERE id = ?",
	    .what = "stage agent key", PARAMS(P_KEY(k->new_pub), P_TEXT(a->id)) },
	    NULL, NULL, err, errlen);
}

int
store_agent_key_stage(struct store *s, const char *id,
    const uint8_t old_pub[32], const uint8_t new_pub[32], char *err, size_t errlen)
{
	struct key_pair k = { old_pub, new_pub, 0 };
	STORE_TIMED(s);

	return key_txn(s, id, NULL, key_stage_locked, &k, err, errlen);
}

static int
key_commit_locked(struct store *s, struct store_agent *a, const void *arg,
    char *err, size_t errlen)
{
	const struct key_pair *k = arg;

	if (memcmp(a->pubkey, k->new_pub, sizeof(a->pubkey)) == 0 && !a->has_next)
		return STORE_OK;   /* committed before: a retry */
	if (!a->has_next ||
	    memcmp(a->next_pubkey, k->new_pub, sizeof(a->next_pubkey)) != 0) {
		snprintf(err, errlen, "no such key staged");
		return STORE_REFUSED;
	}
	return write_stmt(s, &(struct store_stmt){
	    .sql = "UPDATE agents SET pubkey = next_pubkey, next_pubkey = NULL, "
	    "key_rotate = 0, key_since = ? WHERE id = ?",
	    .what = "swap agent key", PARAMS(P_INT(k->now), P_TEXT(a->id)) },
	    NULL, NULL, err, errlen);
}

int
store_agent_key_commit(struct store *s, const char *id,
    const uint8_t new_pub[32], int64_t now, struct store_agent *out,
    char *err, size_t errlen)
{
	struct key_pair k = { NULL, new_pub, now };
	STORE_TIMED(s);

	return key_txn(s, id, out, key_commit_locked, &k, err, errlen);
}

static int
key_abandon_locked(struct store *s, struct store_agent *a, const void *arg,
    char *err, size_t errlen)
{
	const struct key_pair *k = arg;

	if (!a->has_next ||
	    memcmp(a->next_pubkey, k->new_pub, sizeof(a->next_pubkey)) != 0)
		return STORE_OK;   /* another stage since: not this one's */
	return write_stmt(s, &(struct store_stmt){
	    .sql = "UPDATE agents SET next_pubkey = NULL WHERE id = ?",
	    .what = "drop staged agent key", PARAMS(P_TEXT(a->id)) },
	    NULL, NULL, err, errlen);
}

int
store_agent_key_abandon(struct store *s, const char *id,
    const uint8_t staged_pub[32], char *err, size_t errlen)
{
	struct key_pair k = { NULL, staged_pub, 0 };
	STORE_TIMED(s);

	return key_txn(s, id, NULL, key_abandon_locked, &k, err, errlen);
}

/* ---- presence -------------------------------------------------------------- */

/* A replica's lease row, as read to claim it. */
struct lease_row {
	int64_t now_ms;            /* the database's clock */
	struct store_lease l;
};

static int
read_lease(const struct store_row *r, void *out)
{
	struct lease_row *lr = out;

	lr->now_ms = col_int(r, 0);
	lr->l.until_ms = col_int(r, 1);
	lr->l.left_ms = lr->l.until_ms - lr->now_ms;
	return col_text(r, 2, lr->l.peer_url, sizeof(lr->l.peer_url));
}

static int
read_now(const struct store_row *r, void *out)
{
	*(int64_t *)out = col_int(r, 0);
	return 0;
}

/* In claim's transaction: the database's now and replica's row (locked),
 * STORE_NOTFOUND (lr->now_ms set) when there is none. */
static int
lease_read(struct store *s, const char *replica, struct lease_row *lr,
    char *err, size_t errlen)
{
	char sql[NOW_SQL_MAX];
	int rc;

	rc = query_one(s, &(struct store_stmt){
	    .sql = db_now_sql(s, "SELECT {NOW}, lease_until, peer_url FROM replicas"
	    " WHERE id = ?", sql, sizeof(sql)), .what = "read replica lease",
	    .flags = STORE_STMT_LOCK, PARAMS(P_TEXT(replica)) },
	    read_lease, lr, err, errlen);
	if (rc != STORE_NOTFOUND)
		return rc;
	rc = query_one(s, &(struct store_stmt){ .sql = db_now_sql(s,
	    "SELECT {NOW}", sql, sizeof(sql)), .what = "read the database's clock" },
	    read_now, &lr->now_ms, err, errlen);
	return rc == STORE_OK ? STORE_NOTFOUND : rc;
}

/* In claim's transaction: writes the lease's row (new or taken over), and
 * for a row not this process's forgets what its last holder recorded. */
static int
lease_write(struct store *s, const char *replica, const char *peer_url,
    int64_t until, bool exists, bool ours, char *err, size_t errlen)
{
	enum store_violation v = STORE_V_NONE;
	int rc;

	if (!ours && (rc = write_stmt(s, &(struct store_stmt){
	    .sql = "DELETE FROM tunnels WHERE replica_id = ?",
	    .what = "forget a dead holder's tunnels", PARAMS(P_TEXT(replica)) },
	    NULL, NULL, err, errlen)) != STORE_OK)
		return rc;
	if (exists)
		return write_stmt(s, &(struct store_stmt){
		    .sql = "UPDATE replicas SET peer_url = ?, lease_until = ?"
		    " WHERE id = ?", .what = "renew replica lease",
		    PARAMS(P_TEXT(peer_url), P_INT(until), P_TEXT(replica)) },
		    NULL, NULL, err, errlen);
	rc = write_stmt(s, &(struct store_stmt){
	    .sql = "INSERT INTO replicas (id, peer_url, lease_until) VALUES (?, ?, ?)",
	    .what = "take replica lease",
	    PARAMS(P_TEXT(replica), P_TEXT(peer_url), P_INT(until)) },
	    NULL, &v, err, errlen);
	/* Another process inserted the id since it was read: read again. */
	return rc != STORE_OK && v == STORE_V_PRIMARY_KEY ? STORE_CONFLICT : rc;
}

/* One try of store_replica_claim; STORE_CONFLICT when another process
 * inserted the id between the read and the write. */
static int
claim_once(struct store *s, const char *replica, const char *peer_url,
    int64_t lease_ms, int64_t *mine, struct store_lease *seen, char *err,
    size_t errlen)
{
	struct lease_row lr;
	bool exists, ours;
	int64_t until;
	int rc;

	memset(&lr, 0, sizeof(lr));
	if ((rc = begin(s, err, errlen)) != STORE_OK)
		return rc;
	rc = lease_read(s, replica, &lr, err, errlen);
	exists = rc == STORE_OK;
	if (rc != STORE_OK && rc != STORE_NOTFOUND)
		return store_finish(s, rc, err, errlen);
	ours = exists && *mine != 0 && lr.l.until_ms == *mine;
	if (seen != NULL)
		*seen = lr.l;
	if (exists && !ours && lr.l.left_ms > 0) {
		snprintf(err, errlen, "replica id %s is held by a live replica "
		    "(peer URL \"%s\", lease for %lld ms more)", replica,
		    lr.l.peer_url, (long long)lr.l.left_ms);
		return store_finish(s, STORE_REFUSED, err, errlen);
	}
	/* Never the end it had: a renewal in the same millisecond still
	 * leaves a mark another process could not have written. */
	until = lr.now_ms + lease_ms;
	if (exists && until == lr.l.until_ms)
		until++;
	rc = lease_write(s, replica, peer_url, until, exists, ours, err, errlen);
	if ((rc = store_finish(s, rc, err, errlen)) == STORE_OK)
		*mine = until;
	return rc;
}

int
store_replica_claim(struct store *s, const char *replica, const char *peer_url,
    int64_t lease_ms, int64_t *mine, struct store_lease *seen, char *err,
    size_t errlen)
{
	int rc;
	STORE_TIMED(s);

	rc = claim_once(s, replica, peer_url, lease_ms, mine, seen, err, errlen);
	if (rc == STORE_CONFLICT)
		rc = claim_once(s, replica, peer_url, lease_ms, mine, seen, err,
		    errlen);
	return rc == STORE_CONFLICT ? STORE_ERR : rc;
}

int
store_replicas_forget_dead(struct store *s, int64_t dead_ms, size_t *forgot,
    char *err, size_t errlen)
{
	char sql[NOW_SQL_MAX];
	int64_t n = 0;
	int rc;
	STORE_TIMED(s);

	if ((rc = begin(s, err, errlen)) != STORE_OK)
		return rc;
	rc = write_stmt(s, &(struct store_stmt){ .sql = db_now_sql(s,
	    "DELETE FROM tunnels WHERE replica_id IN (SELECT id FROM replicas"
	    " WHERE lease_until < {NOW} - ?)", sql, sizeof(sql)),
	    .what = "forget dead replicas' tunnels", PARAMS(P_INT(dead_ms)) },
	    NULL, NULL, err, errlen);
	if (rc == STORE_OK)
		rc = write_stmt(s, &(struct store_stmt){ .sql = db_now_sql(s,
		    "DELETE FROM replicas WHERE lease_until < {NOW} - ?", sql,
		    sizeof(sql)), .what = "forget dead replicas",
		    PARAMS(P_INT(dead_ms)) }, &n, NULL, err, errlen);
	if ((rc = store_finish(s, rc, err, errlen)) == STORE_OK && forgot != NULL)
		*forgot = (size_t)n;
	return rc;
}

int
store_replica_drop(struct store *s, const char *replica, int64_t mine,
    char *err, size_t errlen)
{
	int64_t changes = 0;
	int rc;
	STORE_TIMED(s);

	if ((rc = begin(s, err, errlen)) != STORE_OK)
		return rc;
	rc = write_stmt(s, &(struct store_stmt){
	    .sql = "DELETE FROM replicas WHERE id = ? AND lease_until = ?",
	    .what = "drop replica lease", PARAMS(P_TEXT(replica), P_INT(mine)) },
	    &changes, NULL, err, errlen);
	if (rc == STORE_OK && changes > 0)
		rc = write_stmt(s, &(struct store_stmt){
		    .sql = "DELETE FROM tunnels WHERE replica_id = ?",
		    .what = "forget replica tunnels", PARAMS(P_TEXT(replica)) },
		    NULL, NULL, err, errlen);
	return store_finish(s, rc, err, errlen);
}

int
store_tunnel_record(struct store *s, const char *agent_id, const char *replica,
    int64_t now_ms, char *err, size_t errlen)
{
	const struct store_stmt q = {
		.sql = "INSERT INTO tunnels (agent_id, replica_id, since) VALUES (?, ?, ?)"
		    " ON CONFLICT (agent_id) DO UPDATE SET replica_id = excluded.replica_id,"
		    " since = excluded.since",
		.what = "record tunnel",
		PARAMS(P_TEXT(agent_id), P_TEXT(replica), P_INT(now_ms)),
	};
	STORE_TIMED(s);

	return write_stmt(s, &q, NULL, NULL, err, errlen);
}

int
store_tunnel_forget(struct store *s, const char *agent_id, const char *replica,
    char *err, size_t errlen)
{
	const struct store_stmt q = {
		.sql = "DELETE FROM tunnels WHERE agent_id = ? AND replica_id = ?",
		.what = "forget tunnel",
		PARAMS(P_TEXT(agent_id), P_TEXT(replica)),
	};
	STORE_TIMED(s);

	return write_stmt(s, &q, NULL, NULL, err, errlen);
}

/* One agent id of a replica's records (store_tunnels_sync). */
static int
read_id(const struct store_row *r, void *out)
{
	return col_text(r, 0, out, STORE_ID_MAX + 1);
}

static int
id_cmp(const void *a, const void *b)
{
	return strcmp(a, b);
}

/* Records agent_id's tunnel against replica unless a replica with a
 * running lease holds its record (sync's repair of a lost record). */
static int
tunnel_rerecord(struct store *s, const char *agent_id, const char *replica,
    int64_t now_ms, int64_t *changes, char *err, size_t errlen)
{
	char sql[NOW_SQL_MAX];

	return write_stmt(s, &(struct store_stmt){ .sql = db_now_sql(s,
	    "INSERT INTO tunnels (agent_id, replica_id, since) VALUES (?, ?, ?)"
	    " ON CONFLICT (agent_id) DO UPDATE SET replica_id = excluded.replica_id,"
	    " since = excluded.since WHERE NOT EXISTS (SELECT 1 FROM replicas r"
	    " WHERE r.id = tunnels.replica_id AND r.lease_until > {NOW})",
	    sql, sizeof(sql)), .what = "record tunnel again",
	    PARAMS(P_TEXT(agent_id), P_TEXT(replica), P_INT(now_ms)) },
	    changes, NULL, err, errlen);
}

int
store_tunnels_sync(struct store *s, const char *replica,
    const char (*ids)[STORE_ID_MAX + 1], size_t n, int64_t now_ms,
    size_t *changed, char *err, size_t errlen)
{
	char (*have)[STORE_ID_MAX + 1] = NULL;
	size_t nhave = 0, i = 0, j = 0, done = 0;
	int64_t c;
	int rc;
	STORE_TIMED(s);

	rc = query_all(s, &(struct store_stmt){
	    .sql = "SELECT agent_id FROM tunnels WHERE replica_id = ?",
	    .what = "list replica tunnels", PARAMS(P_TEXT(replica)) },
	    sizeof(*have), read_id, (void **)&have, &nhave, err, errlen);
	if (rc != STORE_OK)
		return rc;
	if (nhave > 1)
		qsort(have, nhave, sizeof(*have), id_cmp);
	/* A merge of two sorted lists: what only the store has goes, what
	 * only this replica holds is recorded. */
	while (rc == STORE_OK && (i < nhave || j < n)) {
		int d = i == nhave ? 1 : j == n ? -1 : strcmp(have[i], ids[j]);

		c = 0;
		if (d < 0)
			rc = write_stmt(s, &(struct store_stmt){
			    .sql = "DELETE FROM tunnels WHERE agent_id = ? AND replica_id = ?",
			    .what = "forget a closed tunnel",
			    PARAMS(P_TEXT(have[i]), P_TEXT(replica)) },
			    &c, NULL, err, errlen);
		else if (d > 0)
			rc = tunnel_rerecord(s, ids[j], replica, now_ms, &c, err, errlen);
		done += c > 0;
		i += d <= 0;
		j += d >= 0;
	}
	free(have);
	if (changed != NULL)
		*changed = done;
	return rc;
}

static int
read_presence(const struct store_row *r, void *out)
{
	struct store_presence *p = out;

	if (col_text(r, 0, p->agent_id, sizeof(p->agent_id)) == -1 ||
	    col_text(r, 1, p->replica, sizeof(p->replica)) == -1)
		return -1;
	p->since_ms = col_int(r, 2);
	return 0;
}

int
store_presence_list(struct store *s, struct store_presence **out,
    size_t *n, char *err, size_t errlen)
{
	char sql[NOW_SQL_MAX];
	const struct store_stmt q = {
		.sql = db_now_sql(s, "SELECT t.agent_id, t.replica_id, t.since"
		    " FROM tunnels t JOIN replicas r ON r.id = t.replica_id"
		    " WHERE r.lease_until > {NOW}", sql, sizeof(sql)),
		.what = "list presence",
	};

	return query_all(s, &q, sizeof(**out), read_presence, (void **)out, n,
	    err, errlen);
}

static int
read_remote_agent(const struct store_row *r, void *out)
{
	struct store_remote_agent *a = out;
	char state[32];

	memset(a, 0, sizeof(*a));
	if (col_text(r, 0, a->agent_id, sizeof(a->agent_id)) == -1 ||
	    col_text(r, 1, a->cluster, sizeof(a->cluster)) == -1 ||
	    col_text(r, 2, a->node, sizeof(a->node)) == -1 ||
	    col_text(r, 3, state, sizeof(state)) == -1 ||
	    agent_state_parse(state, &a->state) == -1 ||
	    col_text(r, 4, a->replica, sizeof(a->replica)) == -1 ||
	    col_text(r, 5, a->peer_url, sizeof(a->peer_url)) == -1)
		return -1;
	return 0;
}

int
store_remote_agents(struct store *s, const char *self,
    struct store_remote_agent **out, size_t *n, char *err, size_t errlen)
{
	char sql[NOW_SQL_MAX];
	const struct store_stmt q = {
		.sql = db_now_sql(s, "SELECT a.id, a.cluster_id, a.node, a.state,"
		    " r.id, r.peer_url FROM tunnels t"
		    " JOIN replicas r ON r.id = t.replica_id"
		    " JOIN agents a ON a.id = t.agent_id"
		    " WHERE r.lease_until > {NOW} AND r.id <> ?", sql, sizeof(sql)),
		.what = "list remote agents",
		PARAMS(P_TEXT(self)),
	};

	return query_all(s, &q, sizeof(**out), read_remote_agent, (void **)out, n,
	    err, errlen);
}

int
store_replicas_live(struct store *s, const char *self, int64_t *n, char *err,
    size_t errlen)
{
	char sql[NOW_SQL_MAX];
	const struct store_stmt q = {
		.sql = db_now_sql(s, "SELECT count(*) FROM replicas"
		    " WHERE lease_until > {NOW} AND id <> ?", sql, sizeof(sql)),
		.what = "count live replicas",
		PARAMS(P_TEXT(self)),
	};

	*n = 0;
	return query_one(s, &q, read_now, n, err, errlen);
}
