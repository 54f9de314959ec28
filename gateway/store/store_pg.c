/*
 * store_pg.c: the PostgreSQL backend of the store (store_backend.h), for
 * several gateway replicas sharing one database.  Runs statements with
 * libpq on one connection per struct store.
 *
 * The URL (postgres://USER@HOST:PORT/DB or postgresql://...) goes to libpq
 * as it is, so every libpq URL parameter works (sslmode, a password from
 * ~/.pgpass or PGPASSWORD).  '?' placeholders become $1, $2, ...; text and
 * integers are sent as text, keys as binary bytea; answers come back as
 * text (bytea in hex).
 *
 * Concurrency: READ COMMITTED transactions in which the rules lock the rows
 * they decide on (STORE_STMT_LOCK adds FOR UPDATE): two replicas spending
 * the same import token queue on its row, the second reading what the first
 * committed.  A registration is one statement, the function
 * tether_register that the dialect's register_fn creates (schema 10,
 * docs/0038): one round trip, the token row locked only while the server
 * runs it.  Migrations run under a transaction-scoped advisory lock, so
 * replicas starting at once migrate one after the other.
 *
 * Calls block until the server answers (docs/0016 says how the event loop
 * is kept from waiting on them).  A connection the server dropped is
 * re-opened before a later statement, at most once per
 * RECONNECT_INTERVAL_MS and for at most CONNECT_TIMEOUT_S (docs/0021):
 * while the server is down, statements fail at once in between.  Every
 * connection sets statement_timeout (5 s) and lock_timeout (2 s)
 * (PG_TIMEOUTS): a statement held by a lock or a slow server fails
 * instead of holding its caller without bound.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <libpq-fe.h>
#include <openssl/crypto.h>

#include "log.h"
#include "runtime.h"
#include "store_backend.h"

/* The most statements sent ahead in one pipeline (BEGIN, deferred writes,
 * the statement or COMMIT that ends it). */
#define PIPE_MAX 8

/* A struct store's connection and when it may next be re-opened. */
struct pg {
	PGconn *conn;
	int64_t next_reset_ms;     /* monotonic; 0: at once */
	bool lost_logged;          /* "connection lost" said once per outage */
	/* Pipeline mode (docs/0038): a BEGIN asked for and not sent yet goes
	 * with the transaction's first statement, and writes no one reads
	 * the answer of (STORE_STMT_DEFER) go with what follows them, so a
	 * transition is two round trips, not four. */
	bool begin_due;            /* BEGIN not sent yet */
	int queued;                /* statements sent, answers not read */
	const char *queued_what[PIPE_MAX];  /* theirs, for errors */
};

#define PGS(s) ((struct pg *)(s)->impl)
#define PG(s) (PGS(s)->conn)
#define RES(r) ((const PGresult *)(r)->impl)

/* libpq's smallest useful value is 2 s; a reconnect on the event loop's
 * connection holds the loop this long at worst (a host that drops SYNs). */
#define CONNECT_TIMEOUT_S "3"
/* Every connection's bounds on one statement and on waiting for a lock
 * (issue 22: a table lock held every read behind it for as long as it
 * lasted).  A statement past them fails (STORE_ERR), so the store thread's
 * queue moves on; a URL that sets "options" itself replaces these. */
#define PG_TIMEOUTS "-c statement_timeout=5000 -c lock_timeout=2000"
#define RECONNECT_INTERVAL_MS 2000
#define MAX_PARAMS 16
#define MAX_SQL 2048
/* pg_advisory_xact_lock's key for migrations: "tether" plus a 1. */
#define MIGRATE_LOCK_SQL "SELECT pg_advisory_xact_lock(127978173456641)"
#define FOR_UPDATE " FOR UPDATE"

/* SQLSTATEs the rules care about. */
#define SQLSTATE_UNIQUE      "23505"
#define SQLSTATE_FOREIGN_KEY "23503"
#define SQLSTATE_INTEGRITY   "23"      /* class: any other constraint */
#define SQLSTATE_DISK_FULL   "53100"

/* ---- failures ------------------------------------------------------------ */

/* The first line of a libpq message (they end in newlines, some have two). */
static void
message(char *err, size_t errlen, const char *what, const char *msg)
{
	size_t len = strcspn(msg, "\n");

	snprintf(err, errlen, "%s: %.*s", what, (int)len, msg);
}

static enum store_violation
violation(const PGresult *res)
{
	const char *state = PQresultErrorField(res, PG_DIAG_SQLSTATE);
	const char *cons = PQresultErrorField(res, PG_DIAG_CONSTRAINT_NAME);
	size_t len;

	if (state == NULL)
		return STORE_V_NONE;
	if (strcmp(state, SQLSTATE_UNIQUE) == 0) {
		/* PostgreSQL names a primary key TABLE_pkey. */
		len = cons != NULL ? strlen(cons) : 0;
		if (len >= 5 && strcmp(cons + len - 5, "_pkey") == 0)
			return STORE_V_PRIMARY_KEY;
		return STORE_V_UNIQUE;
	}
	if (strcmp(state, SQLSTATE_FOREIGN_KEY) == 0)
		return STORE_V_FOREIGN_KEY;
	if (strncmp(state, SQLSTATE_INTEGRITY, 2) == 0)
		return STORE_V_OTHER;
	return STORE_V_NONE;
}

/* A failed result (or none) as STORE_ERR / STORE_FULL with err. */
static int
res_fail(struct store *s, const PGresult *res, const char *what, char *err,
    size_t errlen)
{
	const char *state = res != NULL ?
	    PQresultErrorField(res, PG_DIAG_SQLSTATE) : NULL;

	message(err, errlen, what, res != NULL && *PQresultErrorMessage(res) ?
	    PQresultErrorMessage(res) : PQerrorMessage(PG(s)));
	if (state != NULL && strcmp(state, SQLSTATE_DISK_FULL) == 0) {
		size_t n = strlen(err);

		snprintf(err + n, errlen - n, " (no space left for the store)");
		return STORE_FULL;
	}
	return STORE_ERR;
}

static bool
res_ok(const PGresult *res)
{
	ExecStatusType st = PQresultStatus(res);

	return st == PGRES_COMMAND_OK || st == PGRES_TUPLES_OK;
}

/*
 * A connection the server dropped (a restart) is reset before the next
 * statement, outside a transaction only: inside one, the transaction is
 * lost with the connection and its statement must fail.
 */
static void
revive(struct store *s)
{
	struct pg *p = PGS(s);
	int64_t now = runtime_monotonic_ms();

	if (PQstatus(p->conn) != CONNECTION_BAD || now < p->next_reset_ms)
		return;
	if (!p->lost_logged)
		warn("store connection lost; reconnecting",
		    KV_S("err", PQerrorMessage(p->conn)));
	p->lost_logged = true;
	PQreset(p->conn);
	/* Counted from the end of the attempt: a server that drops SYNs holds
	 * the caller CONNECT_TIMEOUT_S, then leaves it alone for the interval. */
	p->next_reset_ms = runtime_monotonic_ms() + RECONNECT_INTERVAL_MS;
	if (PQstatus(p->conn) == CONNECTION_OK) {
		info("store connection re-opened");
		p->lost_logged = false;
		p->next_reset_ms = 0;
	}
}

/* ---- the pipeline -------------------------------------------------------- */

/* A statement's parameters in libpq's form. */
struct pg_params {
	int n;
	const char *const *values;
	const int *lengths, *formats;
};

/* Whether a transaction is open or due on s's connection. */
static bool
in_txn(struct store *s)
{
	struct pg *g = PGS(s);
	PGTransactionStatusType ts = PQtransactionStatus(g->conn);

	return g->begin_due || g->queued > 0 || ts == PQTRANS_INTRANS ||
	    ts == PQTRANS_INERROR;
}

/* Sends sql (p NULL: no parameters) in pipeline mode, after the BEGIN
 * that is due, without waiting for an answer.  0, or -1 (connection). */
static int
pipe_send(struct store *s, const char *sql, const struct pg_params *p,
    const char *what)
{
	struct pg *g = PGS(s);

	if (PQpipelineStatus(g->conn) == PQ_PIPELINE_OFF &&
	    PQenterPipelineMode(g->conn) != 1)
		return -1;
	if (g->begin_due) {
		if (PQsendQueryParams(g->conn, "BEGIN", 0, NULL, NULL, NULL,
		    NULL, 0) != 1)
			return -1;
		g->queued_what[g->queued++] = "begin transaction";
		g->begin_due = false;
	}
	if (PQsendQueryParams(g->conn, sql, p != NULL ? p->n : 0, NULL,
	    p != NULL ? p->values : NULL, p != NULL ? p->lengths : NULL,
	    p != NULL ? p->formats : NULL, 0) != 1)
		return -1;
	g->queued_what[g->queued++] = what;
	return 0;
}

/*
 * Ends the pipeline: a sync, then every queued statement's answer, one
 * round trip for all.  Returns the first that failed (later ones were
 * skipped by the server), else the last one's, *what naming it; the
 * caller clears it.  NULL when the connection gave none.  Leaves pipeline
 * mode with nothing queued.
 */
static PGresult *
pipe_finish(struct store *s, const char **what)
{
	struct pg *g = PGS(s);
	PGresult *res[PIPE_MAX] = { NULL }, *r, *pick = NULL;
	int i = 0, nulls = 0, n = g->queued;

	*what = n > 0 ? g->queued_what[n - 1] : "statement";
	if (PQpipelineSync(g->conn) == 1) {
		/* Each statement's results end with a NULL; the sync's answer
		 * ends the lot.  A lost connection answers NULL over and over. */
		while (nulls <= n + 1) {
			if ((r = PQgetResult(g->conn)) == NULL) {
				nulls++;
				if (i < n)
					i++;
				if (PQstatus(g->conn) == CONNECTION_BAD)
					break;
				continue;
			}
			nulls = 0;
			if (PQresultStatus(r) == PGRES_PIPELINE_SYNC) {
				PQclear(r);
				break;
			}
			if (i < n && res[i] == NULL)
				res[i] = r;
			else
				PQclear(r);
		}
	}
	for (i = 0; i < n; i++) {
		if (pick == NULL && res[i] != NULL &&
		    (!res_ok(res[i]) || i == n - 1)) {
			pick = res[i];
			*what = g->queued_what[i];
		} else
			PQclear(res[i]);
	}
	g->queued = 0;
	if (PQpipelineStatus(g->conn) != PQ_PIPELINE_OFF)
		(void)PQexitPipelineMode(g->conn);
	return pick;
}

/* ---- statements ---------------------------------------------------------- */

/*
 * Runs sql with p (NULL: constant SQL, possibly several statements).
 * Outside a transaction, a connection known to be lost is re-opened first
 * (revive); one found lost only by this statement (the first after a
 * server restart) is re-opened and the statement run once more if it may
 * run twice (again: a read, BEGIN).  The result, or NULL (out of memory).
 */
static PGresult *
pg_send(struct store *s, const char *sql, const struct pg_params *p, bool again)
{
	PGTransactionStatusType ts = PQtransactionStatus(PG(s));
	bool outside = ts == PQTRANS_IDLE || ts == PQTRANS_UNKNOWN;
	PGresult *res = NULL;
	int tries;

	for (tries = 0; tries < (outside && again ? 2 : 1); tries++) {
		if (outside)
			revive(s);
		PQclear(res);
		res = p == NULL ? PQexec(PG(s), sql) : PQexecParams(PG(s), sql,
		    p->n, NULL, p->values, p->lengths, p->formats, 0);
		if ((res != NULL && res_ok(res)) ||
		    PQstatus(PG(s)) != CONNECTION_BAD)
			break;
	}
	return res;
}

/*
 * Runs sql after what is queued or due (the BEGIN, deferred writes) in one
 * pipeline: one round trip.  The first failure among them, else sql's
 * result; *what names the statement it is.  A transaction that has only
 * just begun (the BEGIN due, nothing queued) is sent again once on a
 * connection found lost, as pg_send does, when again allows.
 */
static PGresult *
pg_send_piped(struct store *s, const char *sql, const struct pg_params *p,
    const char *what_in, bool again, const char **what)
{
	struct pg *g = PGS(s);
	bool fresh = g->begin_due && g->queued == 0;
	PGresult *res = NULL;
	int tries;

	*what = what_in;
	for (tries = 0; tries < (fresh && again ? 2 : 1); tries++) {
		if (tries > 0) {
			PQclear(res);
			res = NULL;
			g->begin_due = true;
		}
		if (fresh)
			revive(s);
		if (pipe_send(s, sql, p, what_in) == 0)
			res = pipe_finish(s, what);
		else {
			PQclear(pipe_finish(s, what));
			*what = what_in;
		}
		if ((res != NULL && res_ok(res)) ||
		    PQstatus(g->conn) != CONNECTION_BAD)
			break;
	}
	g->begin_due = false;
	return res;
}

/* q's SQL with $1, $2, ... for '?' and FOR UPDATE when asked. */
static int
pg_sql(const struct store_stmt *q, char *out, size_t outlen)
{
	size_t o = 0, n = 0;
	const char *p;
	int w;

	for (p = q->sql; *p != '\0'; p++) {
		if (*p == '?')
			w = snprintf(out + o, outlen - o, "$%zu", ++n);
		else
			w = snprintf(out + o, outlen - o, "%c", *p);
		if (w < 0 || (size_t)w >= outlen - o)
			return -1;
		o += (size_t)w;
	}
	if ((q->flags & STORE_STMT_LOCK) != 0) {
		w = snprintf(out + o, outlen - o, "%s", FOR_UPDATE);
		if (w < 0 || (size_t)w >= outlen - o)
			return -1;
	}
	return n == q->nparams ? 0 : -1;
}

/* The values of q's parameters in libpq's form; ints are written into
 * nums.  Text and integers as text, keys as binary. */
static void
pg_params(const struct store_stmt *q, const char **values, int *lengths,
    int *formats, char nums[][24])
{
	size_t i;

	for (i = 0; i < q->nparams; i++) {
		const struct store_param *p = &q->params[i];

		lengths[i] = 0;
		formats[i] = 0;
		switch (p->type) {
		case SP_TEXT_OR_NULL:
			values[i] = (p->text == NULL || *p->text == '\0') ?
			    NULL : p->text;
			break;
		case SP_TEXT:
			values[i] = p->text;
			break;
		case SP_INT:
			snprintf(nums[i], sizeof(nums[i]), "%lld",
			    (long long)p->i);
			values[i] = nums[i];
			break;
		case SP_KEY:
			values[i] = (const char *)p->key;
			lengths[i] = 32;
			formats[i] = 1;
			break;
		}
	}
}

static int
each_row(struct store *s, const PGresult *res, const struct store_stmt *q,
    store_row_fn *fn, void *arg, char *err, size_t errlen)
{
	struct store_row row = { .be = s->be, .impl = (void *)res };
	int rows = PQntuples(res);

	for (row.index = 0; fn != NULL && row.index < rows; row.index++) {
		if (fn(&row, arg) == -1) {
			snprintf(err, errlen, "%s: malformed row", q->what);
			return STORE_ERR;
		}
	}
	return STORE_OK;
}

static int
pg_run(struct store *s, const struct store_stmt *q, store_row_fn *fn,
    void *arg, struct store_outcome *out, char *err, size_t errlen)
{
	const char *values[MAX_PARAMS];
	int lengths[MAX_PARAMS], formats[MAX_PARAMS];
	char nums[MAX_PARAMS][24], sql[MAX_SQL];
	const char *what = q->what;
	struct pg_params pp;
	PGresult *res;
	bool again;
	int rc;

	if (out != NULL)
		*out = (struct store_outcome){ 0 };
	if (q->nparams > MAX_PARAMS || pg_sql(q, sql, sizeof(sql)) == -1) {
		snprintf(err, errlen, "%s: statement does not fit", q->what);
		return STORE_ERR;
	}
	pg_params(q, values, lengths, formats, nums);
	pp = (struct pg_params){ (int)q->nparams, values, lengths, formats };
	again = strncmp(q->sql, "SELECT", 6) == 0 &&
	    (q->flags & STORE_STMT_WRITES) == 0;
	/* A write no one reads the answer of waits for what follows it.
	 * The parameters are copied by libpq when sent. */
	if ((q->flags & STORE_STMT_DEFER) != 0 && fn == NULL && in_txn(s) &&
	    PGS(s)->queued + 3 <= PIPE_MAX) {
		if (pipe_send(s, sql, &pp, q->what) == 0)
			return STORE_OK;
		res = pipe_finish(s, &what);
		rc = res_fail(s, res, what, err, errlen);
		PQclear(res);
		return rc;
	}
	if (PGS(s)->begin_due || PGS(s)->queued > 0)
		res = pg_send_piped(s, sql, &pp, q->what, again, &what);
	else
		res = pg_send(s, sql, &pp, again);
	if (res == NULL || !res_ok(res)) {
		if (out != NULL && res != NULL)
			out->violation = violation(res);
		rc = res_fail(s, res, what, err, errlen);
		PQclear(res);
		return rc;
	}
	if (out != NULL)
		out->changes = strtoll(PQcmdTuples(res), NULL, 10);
	rc = each_row(s, res, q, fn, arg, err, errlen);
	PQclear(res);
	return rc;
}

/* Runs constant SQL, possibly several statements (the migrations). */
/* Sends what is due or queued (the BEGIN, deferred writes) and reads
 * their answers: STORE_OK, or the first failure. */
static int
pipe_flush(struct store *s, char *err, size_t errlen)
{
	struct pg *g = PGS(s);
	const char *what;
	PGresult *res;
	int rc = STORE_OK;

	if (g->begin_due && g->queued == 0) {
		g->begin_due = false;
		res = pg_send(s, "BEGIN", NULL, true);
		what = "begin transaction";
	} else if (g->queued > 0)
		res = pipe_finish(s, &what);
	else
		return STORE_OK;
	if (res == NULL || !res_ok(res))
		rc = res_fail(s, res, what, err, errlen);
	PQclear(res);
	return rc;
}

static int
pg_exec(struct store *s, const char *sql, const char *what, char *err,
    size_t errlen)
{
	PGresult *res;
	int rc = STORE_OK;

	/* Constant SQL may hold several statements, which a pipeline cannot
	 * carry: what is due goes first. */
	if ((rc = pipe_flush(s, err, errlen)) != STORE_OK)
		return rc;
	res = pg_send(s, sql, NULL, strcmp(sql, "BEGIN") == 0);
	if (res == NULL || !res_ok(res))
		rc = res_fail(s, res, what, err, errlen);
	PQclear(res);
	return rc;
}

/* A rule's transaction begins with its first statement, in the same
 * round trip (pipe_send); the migrations' at once, with their lock. */
static int
pg_begin(struct store *s, bool migrating, char *err, size_t errlen)
{
	int rc;

	if (!migrating) {
		PGS(s)->begin_due = true;
		return STORE_OK;
	}
	if ((rc = pg_exec(s, "BEGIN", "begin transaction", err, errlen)) !=
	    STORE_OK)
		return rc;
	if (migrating && (rc = pg_exec(s, MIGRATE_LOCK_SQL, "lock migrations",
	    err, errlen)) != STORE_OK)
		return rc;
	return STORE_OK;
}

static void
pg_rollback(struct store *s)
{
	struct pg *g = PGS(s);
	const char *what;
	PGresult *res;

	g->begin_due = false;
	/* Deferred writes still unanswered are ended with the rollback. */
	if (g->queued > 0 && pipe_send(s, "ROLLBACK", NULL, "rollback") == 0)
		PQclear(pipe_finish(s, &what));
	else if (g->queued > 0)
		PQclear(pipe_finish(s, &what));
	if (PQtransactionStatus(PG(s)) == PQTRANS_IDLE)
		return;
	res = PQexec(PG(s), "ROLLBACK");
	if (res == NULL || !res_ok(res))
		error("store rollback failed",
		    KV_S("err", PQerrorMessage(PG(s))));
	PQclear(res);
}

/* COMMIT of a transaction a failed statement spoiled answers ROLLBACK,
 * not an error: that is a failure here. */
static int
pg_commit(struct store *s, char *err, size_t errlen)
{
	struct pg *g = PGS(s);
	const char *what = "commit";
	PGresult *res;
	int rc = STORE_OK;

	/* A transaction that ran no statement has nothing to commit. */
	if (g->begin_due && g->queued == 0) {
		g->begin_due = false;
		return STORE_OK;
	}
	/* Deferred writes go with the COMMIT: their failure is its. */
	if (g->queued > 0)
		res = pipe_send(s, "COMMIT", NULL, "commit") == 0 ?
		    pipe_finish(s, &what) : (PQclear(pipe_finish(s, &what)), NULL);
	else
		res = PQexec(PG(s), "COMMIT");
	if (res == NULL || !res_ok(res))
		rc = res_fail(s, res, what, err, errlen);
	else if (strcmp(PQcmdStatus(res), "COMMIT") != 0) {
		snprintf(err, errlen, "commit: the transaction was rolled back");
		rc = STORE_ERR;
	}
	PQclear(res);
	return rc;
}

/* ---- columns ------------------------------------------------------------- */

static bool
pg_col_null(const struct store_row *r, int col)
{
	return PQgetisnull(RES(r), r->index, col) != 0;
}

static int64_t
pg_col_int(const struct store_row *r, int col)
{
	return strtoll(PQgetvalue(RES(r), r->index, col), NULL, 10);
}

/* NULL reads as ""; -1 if the text does not fit. */
static int
pg_col_text(const struct store_row *r, int col, char *dst, size_t dstlen)
{
	int len = PQgetlength(RES(r), r->index, col);

	if (len < 0 || (size_t)len >= dstlen)
		return -1;
	memcpy(dst, PQgetvalue(RES(r), r->index, col), (size_t)len);
	dst[len] = '\0';
	return 0;
}

/* bytea in hex output: "\x" and 64 hex digits. */
static int
pg_col_key(const struct store_row *r, int col, uint8_t dst[32])
{
	const char *v = PQgetvalue(RES(r), r->index, col);
	int i, hi, lo;

	if (PQgetisnull(RES(r), r->index, col) ||
	    PQgetlength(RES(r), r->index, col) != 66 ||
	    v[0] != '\\' || v[1] != 'x')
		return -1;
	for (i = 0; i < 32; i++) {
		if ((hi = OPENSSL_hexchar2int((unsigned char)v[2 + 2 * i])) == -1 ||
		    (lo = OPENSSL_hexchar2int((unsigned char)v[3 + 2 * i])) == -1)
			return -1;
		dst[i] = (uint8_t)(hi << 4 | lo);
	}
	return 0;
}

static void
pg_close(struct store *s)
{
	if (s->impl != NULL) {
		PQfinish(PG(s));
		free(s->impl);
	}
	s->impl = NULL;
}

static const struct store_dialect pg_dialect = {
	.integer = "BIGINT",
	.blob = "BYTEA",
	.table_end = ")",
	.rowid = "rowid BIGSERIAL NOT NULL,",
	/* The server's clock at the transaction's start (now()): every
	 * replica's leases by one clock, whatever theirs say. */
	.now_ms = "CAST(EXTRACT(EPOCH FROM now()) * 1000 AS BIGINT)",
	/* In the changing transaction: delivered at its commit, to every
	 * replica listening (store_listen.c), never for a rollback. */
	.notify =
	"CREATE FUNCTION tether_agent_changed() RETURNS trigger"
	"  LANGUAGE plpgsql AS $$ BEGIN"
	"    PERFORM pg_notify('" STORE_PG_CHANNEL "', 'agent:' || NEW.id);"
	"    RETURN NULL;"
	"  END $$;"
	"CREATE TRIGGER agents_changed AFTER UPDATE OF state ON agents"
	"  FOR EACH ROW WHEN (OLD.state IS DISTINCT FROM NEW.state)"
	"  EXECUTE FUNCTION tether_agent_changed();"
	"CREATE FUNCTION tether_token_revoked() RETURNS trigger"
	"  LANGUAGE plpgsql AS $$ BEGIN"
	"    PERFORM pg_notify('" STORE_PG_CHANNEL "', 'token:' || NEW.id);"
	"    RETURN NULL;"
	"  END $$;"
	"CREATE TRIGGER tokens_revoked AFTER UPDATE OF revoked ON tokens"
	"  FOR EACH ROW WHEN (OLD.revoked IS DISTINCT FROM NEW.revoked)"
	"  EXECUTE FUNCTION tether_token_revoked();",
	.notify_tunnels =
	"CREATE FUNCTION tether_tunnel_changed() RETURNS trigger"
	"  LANGUAGE plpgsql AS $$ BEGIN"
	"    IF TG_OP = 'DELETE' THEN"
	"      PERFORM pg_notify('" STORE_PG_CHANNEL "', 'tunnel:' || OLD.agent_id);"
	"    ELSE"
	"      PERFORM pg_notify('" STORE_PG_CHANNEL "', 'tunnel:' || NEW.agent_id);"
	"    END IF;"
	"    RETURN NULL;"
	"  END $$;"
	"CREATE TRIGGER tunnels_changed AFTER INSERT OR UPDATE OR DELETE ON tunnels"
	"  FOR EACH ROW EXECUTE FUNCTION tether_tunnel_changed();",
	/* An operator's rotate-key reaches the replica holding the tunnel
	 * as an agent notice (notices.c re-reads the agent). */
	.notify_keys =
	"CREATE TRIGGER agents_key_rotate AFTER UPDATE OF key_rotate ON agents"
	"  FOR EACH ROW WHEN (NEW.key_rotate = 1 AND OLD.key_rotate = 0)"
	"  EXECUTE FUNCTION tether_agent_changed();",
	.notify_settings =
	"CREATE FUNCTION tether_setting_changed() RETURNS trigger"
	"  LANGUAGE plpgsql AS $$ BEGIN"
	"    PERFORM pg_notify('" STORE_PG_CHANNEL "', 'setting:' || NEW.name);"
	"    RETURN NULL;"
	"  END $$;"
	"CREATE TRIGGER settings_changed AFTER INSERT OR UPDATE ON settings"
	"  FOR EACH ROW EXECUTE FUNCTION tether_setting_changed();",
	/*
	 * store_agent_register's rules (store.h) in one round trip (docs/0038):
	 * the token row is locked for the server's microseconds, not for the
	 * client's round trips, so registrations sharing a token stop queueing
	 * behind each other's network latency.  The same steps, in the same
	 * order, as store.c's register_locked, which SQLite keeps running; each
	 * statement of a VOLATILE function under READ COMMITTED reads what was
	 * committed before it, as the client's statements did.  p_id is the new
	 * agent's id; one already taken inserts nothing ('collided': the caller
	 * draws another).  code: 'created', 'retry' (the same node and key's
	 * agent, no use spent), 'taken' (agent: the live one, detail: its
	 * cluster's name), 'refused' (detail: why), 'collided'.
	 */
	.register_fn =
	"CREATE FUNCTION tether_register(p_token TEXT, p_node TEXT,"
	"    p_key BYTEA, p_now BIGINT, p_id TEXT,"
	"    OUT code TEXT, OUT detail TEXT, OUT agent agents)"
	"  LANGUAGE plpgsql AS $$"
	"  DECLARE t tokens%ROWTYPE;"
	"  BEGIN"
	"    SELECT * INTO t FROM tokens WHERE id = p_token FOR UPDATE;"
	"    code := 'refused';"
	"    IF NOT FOUND THEN"
	"      detail := 'unknown import token'; RETURN;"
	"    ELSIF t.kind <> 'import' THEN"
	"      detail := 'not an import token'; RETURN;"
	"    ELSIF t.revoked <> 0 THEN"
	"      detail := 'import token revoked'; RETURN;"
	"    ELSIF t.expires_at <> 0 AND p_now >= t.expires_at THEN"
	"      detail := 'import token expired'; RETURN;"
	"    END IF;"
	"    SELECT * INTO agent FROM agents WHERE cluster_id = t.cluster_id"
	"      AND node = p_node AND pubkey = p_key"
	"      ORDER BY state = 'revoked', created_at DESC, rowid DESC LIMIT 1;"
	"    IF FOUND THEN code := 'retry'; RETURN; END IF;"
	"    IF t.uses_left = 0 THEN"
	"      detail := 'import token used up'; RETURN;"
	"    END IF;"
	"    SELECT * INTO agent FROM agents WHERE cluster_id = t.cluster_id"
	"      AND node = p_node AND state <> 'revoked';"
	"    IF FOUND THEN"
	"      code := 'taken';"
	"      SELECT COALESCE(max(name), t.cluster_id) INTO detail"
	"        FROM clusters WHERE id = t.cluster_id;"
	"      RETURN;"
	"    END IF;"
	"    INSERT INTO agents (id, cluster_id, node, pubkey, state,"
	"      last_error, token_id, created_at, updated_at)"
	"      VALUES (p_id, t.cluster_id, p_node, p_key,"
	"      CASE WHEN t.approval_manual <> 0 THEN 'pending-approval'"
	"      ELSE 'enroll' END, '', t.id, p_now, p_now)"
	"      ON CONFLICT (id) DO NOTHING RETURNING * INTO agent;"
	"    IF NOT FOUND THEN code := 'collided'; RETURN; END IF;"
	"    IF t.uses_left > 0 THEN"
	"      UPDATE tokens SET uses_left = uses_left - 1 WHERE id = t.id;"
	"    END IF;"
	"    code := 'created';"
	"  END $$;",
};

static const struct store_backend pg_backend = {
	.name = "postgres",
	.dialect = &pg_dialect,
	.run = pg_run,
	.exec = pg_exec,
	.begin = pg_begin,
	.commit = pg_commit,
	.rollback = pg_rollback,
	.col_null = pg_col_null,
	.col_int = pg_col_int,
	.col_text = pg_col_text,
	.col_key = pg_col_key,
	.close = pg_close,
};

/* ---- connecting ---------------------------------------------------------- */

/* NOTICEs ("relation already exists, skipping") are not for the log. */
static void
quiet(void *arg, const char *msg)
{
	(void)arg;
	(void)msg;
}

int
store_pg_connect(const char *url, struct store *s, char *err, size_t errlen)
{
	/* The URL comes last, so that what it sets wins over the defaults. */
	const char *const keys[] = { "connect_timeout", "application_name",
	    "options", "dbname", NULL };
	const char *const values[] = { CONNECT_TIMEOUT_S, "tether-gateway",
	    PG_TIMEOUTS, url, NULL };
	struct pg *p = calloc(1, sizeof(*p));
	PGconn *conn;

	s->be = &pg_backend;
	conn = p != NULL ? PQconnectdbParams(keys, values, 1) : NULL;
	if (conn == NULL) {
		free(p);
		snprintf(err, errlen, "cannot connect to PostgreSQL: out of memory");
		return STORE_ERR;
	}
	p->conn = conn;
	s->impl = p;
	if (PQstatus(conn) != CONNECTION_OK) {
		/* libpq's reason names host and port, never the password. */
		message(err, errlen, "cannot connect to PostgreSQL",
		    PQerrorMessage(conn));
		return STORE_ERR;
	}
	PQsetNoticeProcessor(conn, quiet, NULL);
	return STORE_OK;
}
