/*
 * store_schema.c: the store's schema, one definition for every backend,
 * and the migrations that bring a database to it.
 *
 * Each migration is written once.  Where the engines must differ the text
 * holds a marker that the backend's dialect (store_backend.h) spells:
 *   {INT}   a 64-bit integer column   (SQLite INTEGER, PostgreSQL BIGINT)
 *   {BLOB}  a byte string column      (BLOB, BYTEA)
 *   {END}   what closes CREATE TABLE  (") STRICT", ")")
 *   {ROWID} an insertion-order column named rowid (SQLite has one built in;
 *           PostgreSQL gets "rowid BIGSERIAL NOT NULL,")
 *   {NOTIFY} the triggers that tell other replicas of a change (docs/0021;
 *           PostgreSQL: pg_notify on the channel "tether" in the changing
 *           transaction; SQLite: nothing, it serves a single gateway)
 *   {NOTIFY_TUNNELS} the same for a tunnel's record (docs/0023)
 *   {NOTIFY_KEYS} the same for an agent asked to rotate its key
 *   {NOTIFY_SETTINGS} the same for a gateway setting (docs/0031)
 *   {REGISTER_FN} the server-side function registering an agent in one
 *           statement (PostgreSQL; SQLite: nothing, docs/0038)
 * A dialect that leaves a marker's word NULL spells it "".
 * Everything else (partial indexes, CHECKs, foreign keys) is SQL both
 * engines read the same.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "log.h"
#include "store_backend.h"

/*
 * The migrations, in order: migrations[i] takes the schema from version i to
 * i + 1.  Append only: a released migration is never edited in a way that
 * changes the schema it makes, because databases in the field have run it.
 */
static const char *const migrations[] = {
	/* 1: clusters, tokens and agents. */
	"CREATE TABLE clusters ("
	"  {ROWID}"
	"  id         TEXT NOT NULL PRIMARY KEY,"
	"  name       TEXT NOT NULL UNIQUE,"
	"  created_at {INT} NOT NULL"
	"{END};"
	"CREATE TABLE tokens ("
	"  {ROWID}"
	"  id              TEXT NOT NULL PRIMARY KEY,"
	"  kind            TEXT NOT NULL"
	"                  CHECK (kind IN ('admin', 'import', 'user')),"
	"  cluster_id      TEXT REFERENCES clusters (id),"
	"  name            TEXT NOT NULL DEFAULT '',"
	"  verifier        {BLOB} NOT NULL CHECK (length(verifier) = 32),"
	"  expires_at      {INT} NOT NULL DEFAULT 0,"
	"  uses_left       {INT} NOT NULL DEFAULT -1 CHECK (uses_left >= -1),"
	"  approval_manual {INT} NOT NULL DEFAULT 0"
	"                  CHECK (approval_manual IN (0, 1)),"
	"  revoked         {INT} NOT NULL DEFAULT 0 CHECK (revoked IN (0, 1)),"
	"  created_at      {INT} NOT NULL,"
	"  CHECK (kind <> 'import' OR cluster_id IS NOT NULL)"
	"{END};"
	"CREATE INDEX tokens_by_cluster ON tokens (cluster_id);"
	"CREATE TABLE agents ("
	"  {ROWID}"
	"  id         TEXT NOT NULL PRIMARY KEY,"
	"  cluster_id TEXT NOT NULL REFERENCES clusters (id),"
	"  node       TEXT NOT NULL,"
	"  pubkey     {BLOB} NOT NULL CHECK (length(pubkey) = 32),"
	"  state      TEXT NOT NULL CHECK (state IN ('pending-approval',"
	"             'enroll', 'verifying', 'active', 'revoked')),"
	"  last_error TEXT NOT NULL DEFAULT '',"
	"  token_id   TEXT NOT NULL REFERENCES tokens (id),"
	"  created_at {INT} NOT NULL,"
	"  updated_at {INT} NOT NULL"
	"{END};"
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
	"  {ROWID}"
	"  token_id   TEXT NOT NULL REFERENCES tokens (id),"
	"  cluster_id TEXT NOT NULL REFERENCES clusters (id),"
	"  PRIMARY KEY (token_id, cluster_id)"
	"{END};"
	"CREATE INDEX token_clusters_by_cluster ON token_clusters (cluster_id);"
	"CREATE INDEX tokens_by_user ON tokens (name) WHERE kind = 'user';",

	/* 3: presence (docs/0017).  A replica's lease, renewed every few
	 * seconds, and the agents whose tunnels it holds.  A tunnel row
	 * counts only while its replica's lease runs: a replica killed with
	 * its rows in place drops out when its lease ends. */
	"CREATE TABLE replicas ("
	"  id          TEXT NOT NULL PRIMARY KEY,"
	"  peer_url    TEXT NOT NULL DEFAULT '',"
	"  lease_until {INT} NOT NULL"
	"{END};"
	"CREATE TABLE tunnels ("
	"  agent_id   TEXT NOT NULL PRIMARY KEY,"
	"  replica_id TEXT NOT NULL,"
	"  since      {INT} NOT NULL"
	"{END};"
	"CREATE INDEX tunnels_by_replica ON tunnels (replica_id);",

	/* 4: cluster-wide effects (docs/0021): an agent's state or a token's
	 * revocation, changed by any replica, is announced to all of them. */
	"{NOTIFY}",

	/* 5: a tunnel recorded, moved or forgotten is announced too, so that
	 * every replica's presence directory follows at once (docs/0023). */
	"{NOTIFY_TUNNELS}",

	/* 6: an agent's release (from its HELLO) and when it was last seen
	 * (its tunnel came up or ended): kept across restarts, never cleared
	 * (issue 20). */
	"ALTER TABLE agents ADD COLUMN version TEXT NOT NULL DEFAULT '';"
	"ALTER TABLE agents ADD COLUMN last_seen {INT} NOT NULL DEFAULT 0;",

	/* 7: node key rotation (issue 21): the new key an agent proved and
	 * staged, valid beside pubkey until the agent uses it alone (then it
	 * replaces pubkey in one transaction); an operator's request to
	 * rotate; when the key in pubkey was taken (0: at created_at). */
	"ALTER TABLE agents ADD COLUMN next_pubkey {BLOB}"
	"  CHECK (next_pubkey IS NULL OR length(next_pubkey) = 32);"
	"ALTER TABLE agents ADD COLUMN key_rotate {INT} NOT NULL DEFAULT 0"
	"  CHECK (key_rotate IN (0, 1));"
	"ALTER TABLE agents ADD COLUMN key_since {INT} NOT NULL DEFAULT 0;"
	"{NOTIFY_KEYS}",
	/* 8: moving the gateway (docs/0031): settings every replica pushes to
	 * its agents (the public URL list, "urls"), announced when changed,
	 * and the URL list each agent last said it holds (SETTINGS_ACK; NULL
	 * until one did: an older agent never does). */
	"CREATE TABLE settings ("
	"  name       TEXT NOT NULL PRIMARY KEY,"
	"  value      TEXT NOT NULL,"
	"  updated_at {INT} NOT NULL"
	"{END};"
	"ALTER TABLE agents ADD COLUMN urls TEXT;"
	"{NOTIFY_SETTINGS}",
	/* 9: CA rotation (docs/0033): the CAs each agent last said it trusts
	 * (SETTINGS_ACK "ca": their checksums joined by spaces; NULL until
	 * one did: an older agent never does). */
	"ALTER TABLE agents ADD COLUMN cas TEXT;",
	/* 10: a registration in one round trip (docs/0038): PostgreSQL runs
	 * its rules in a function; SQLite, in the same process, needs none. */
	"{REGISTER_FN}",
	/* 11: a registration's same-key read (the node's agents, revoked ones
	 * too) found by the node, not by scanning every agent of its cluster
	 * (agents_live_node skips revoked agents, so that read could not use
	 * it): one join no longer costs the cluster's size (docs/0038). */
	"CREATE INDEX agents_by_node ON agents (cluster_id, node);",
};

#define SCHEMA_VERSION ((int)(sizeof(migrations) / sizeof(migrations[0])))

/* The table the version lives in; created before any migration runs. */
static const char schema_version_table[] =
	"CREATE TABLE IF NOT EXISTS schema_version ("
	"  version    {INT} NOT NULL PRIMARY KEY,"
	"  applied_at {INT} NOT NULL"
	"{END}";

int
store_schema_latest(void)
{
	return SCHEMA_VERSION;
}

/* The dialect's word for a marker at p (which starts with '{'), or NULL. */
static const char *
marker_word(const struct store_dialect *d, const char *p, size_t *mlen)
{
	static const struct {
		const char *marker;
		size_t off;
	} markers[] = {
		{ "{INT}", offsetof(struct store_dialect, integer) },
		{ "{BLOB}", offsetof(struct store_dialect, blob) },
		{ "{END}", offsetof(struct store_dialect, table_end) },
		{ "{ROWID}", offsetof(struct store_dialect, rowid) },
		{ "{NOTIFY_TUNNELS}", offsetof(struct store_dialect, notify_tunnels) },
		{ "{NOTIFY_KEYS}", offsetof(struct store_dialect, notify_keys) },
		{ "{NOTIFY_SETTINGS}", offsetof(struct store_dialect, notify_settings) },
		{ "{NOTIFY}", offsetof(struct store_dialect, notify) },
		{ "{REGISTER_FN}", offsetof(struct store_dialect, register_fn) },
	};
	const char *w;
	size_t i;

	for (i = 0; i < sizeof(markers) / sizeof(markers[0]); i++) {
		*mlen = strlen(markers[i].marker);
		if (strncmp(p, markers[i].marker, *mlen) != 0)
			continue;
		w = *(const char *const *)(const void *)
		    ((const char *)d + markers[i].off);
		return w != NULL ? w : "";
	}
	return NULL;
}

/*
 * The SQL of a schema text in dialect d (caller frees), or NULL when out of
 * memory.  Cost: two passes over the text.
 */
static char *
expand(const struct store_dialect *d, const char *text)
{
	size_t len = 0, mlen, pass;
	const char *p, *w;
	char *out = NULL, *o = NULL;

	for (pass = 0; pass < 2; pass++) {
		for (p = text; *p != '\0'; ) {
			if (*p == '{' && (w = marker_word(d, p, &mlen)) != NULL) {
				if (o != NULL)
					o = stpcpy(o, w);
				len += strlen(w);
				p += mlen;
				continue;
			}
			if (o != NULL)
				*o++ = *p;
			len++;
			p++;
		}
		if (o != NULL)
			break;
		if ((out = o = malloc(len + 1)) == NULL)
			return NULL;
	}
	*o = '\0';
	return out;
}

/* Runs a schema text in s's dialect. */
static int
exec_schema(struct store *s, const char *text, const char *what, char *err,
    size_t errlen)
{
	char *sql = expand(s->be->dialect, text);
	int rc;

	if (sql == NULL) {
		snprintf(err, errlen, "%s: out of memory", what);
		return STORE_ERR;
	}
	rc = s->be->exec(s, sql, what, err, errlen);
	free(sql);
	return rc;
}

static int
read_int(const struct store_row *row, void *arg)
{
	*(int64_t *)arg = row->be->col_int(row, 0);
	return 0;
}

static int
read_version(struct store *s, int *version, char *err, size_t errlen)
{
	int64_t v = -1;
	int rc;

	rc = s->be->run(s, &(struct store_stmt){
	    .sql = "SELECT coalesce(max(version), 0) FROM schema_version",
	    .what = "read schema version" }, read_int, &v, NULL, err, errlen);
	if (rc != STORE_OK)
		return rc;
	if (v < 0 || v > 1000000) {
		snprintf(err, errlen, "read schema version: no answer");
		return STORE_ERR;
	}
	*version = (int)v;
	return STORE_OK;
}

static int
record_version(struct store *s, int version, char *err, size_t errlen)
{
	return s->be->run(s, &(struct store_stmt){
	    .sql = "INSERT INTO schema_version (version, applied_at) "
	    "VALUES (?, ?)", .what = "record schema version",
	    PARAMS(P_INT(version), P_INT(time(NULL))) }, NULL, NULL, NULL,
	    err, errlen);
}

int
store_schema_migrate(struct store *s, char *err, size_t errlen)
{
	char what[64];
	int v, rc;

	if ((rc = exec_schema(s, schema_version_table, "create schema_version",
	    err, errlen)) != STORE_OK)
		return rc;
	if ((rc = read_version(s, &v, err, errlen)) != STORE_OK)
		return rc;
	/* A newer gateway has been here: its schema is not ours to guess. */
	if (v > SCHEMA_VERSION) {
		snprintf(err, errlen, "database schema version %d is newer than "
		    "this gateway supports (%d)", v, SCHEMA_VERSION);
		return STORE_ERR;
	}
	for (; v < SCHEMA_VERSION; v++) {
		snprintf(what, sizeof(what), "migration %d", v + 1);
		if ((rc = exec_schema(s, migrations[v], what, err, errlen)) !=
		    STORE_OK)
			return rc;
		if ((rc = record_version(s, v + 1, err, errlen)) != STORE_OK)
			return rc;
		info("store schema migrated", KV_S("backend", s->be->name),
		    KV_I("version", v + 1));
	}
	s->version = v;
	return STORE_OK;
}
