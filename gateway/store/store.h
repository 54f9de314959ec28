/*
 * store.h: the gateway's persistent state, one interface over its backends.
 *
 * store_open picks the backend from the URL: "sqlite://PATH" (embedded,
 * WAL mode, the default) or "postgres://USER@HOST:PORT/DB" (one database
 * shared by several gateway replicas; "postgresql://" too).  Every backend
 * has the same schema and applies migrations in order at open, one process
 * at a time, so a newer gateway upgrades an older database in place
 * (store_schema.c; docs/0016).
 *
 * Calls are synchronous: they return when the database has answered, so
 * the event loop makes none once the gateway serves (docs/0016, 0022):
 * agent sessions, presence, the admin API, the status page and /metrics
 * call the store on the store thread (store_worker.h, answer_later.h),
 * each with its own connection.  The loop's own connection (gateway.h's
 * gw->store) opens and migrates the store at start-up and seeds the
 * metrics; after that only access.c's synchronous token checks use it
 * (/k8s, once per token and cluster per ACCESS_CACHE_TTL_MS), until it
 * takes the asynchronous forms (access.h) as dial and forward have.
 *
 * Records are plain structs with fixed-size strings; list calls return an
 * array the caller frees with free().
 *
 * The store keeps no count of its own above the database: a call that
 * changes an agent's state says so to its caller (store_agent_register's
 * *created, store_agent_transition's *was), and the caller, on the loop,
 * moves what it counts (tether_agents).  Its one hook is the timing of
 * its calls (store_set_timing), handed in by the layer above.
 */
#ifndef TETHER_STORE_H
#define TETHER_STORE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "agent_state.h"
#include "token.h"

#define STORE_ID_MAX    31
#define STORE_NAME_MAX  63
#define STORE_ERROR_MAX 255
#define STORE_VERSION_MAX 63   /* an agent's release: [A-Za-z0-9.+~_-] */
#define STORE_TOKEN_CLUSTERS_MAX 64   /* clusters one user token may reach */
#define STORE_URLS_MAX 511    /* a URL list: its URLs joined by one space */
#define STORE_CAS_MAX 299     /* CA checksums ("sha256:" + 64 hex) joined
                               * by one space: four of them */

enum store_result {
	STORE_OK = 0,
	STORE_ERR = -1,       /* backend failure; err says what */
	STORE_NOTFOUND = -2,  /* no such record */
	STORE_CONFLICT = -3,  /* unique name taken */
	STORE_REFUSED = -4,   /* a rule said no; err says why */
	STORE_FULL = -5,      /* no space left to write; nothing was changed,
	                       * the same call may succeed once there is */
};

struct store;

struct store_cluster {
	char id[STORE_ID_MAX + 1];        /* "c-" + 12 hex */
	char name[STORE_NAME_MAX + 1];
	int64_t created_at;               /* Unix seconds */
};

struct store_token {
	char id[TOKEN_ID_LEN + 1];
	enum token_kind kind;
	char cluster[STORE_ID_MAX + 1];   /* import tokens: the cluster; else "" */
	char name[STORE_NAME_MAX + 1];    /* admin/user tokens: who; else "" */
	uint8_t verifier[32];             /* hash (admin, user) or Ed25519 public key (import) */
	int64_t expires_at;               /* Unix seconds; 0 = never */
	int64_t uses_left;                /* import tokens; -1 = unlimited */
	bool approval_manual;             /* import tokens: agents start pending-approval */
	bool revoked;
	int64_t created_at;
};

/* A user token with the clusters it is scoped to (no secret, no hash). */
struct store_user_token {
	char id[TOKEN_ID_LEN + 1];
	char name[STORE_NAME_MAX + 1];    /* the user it was issued to */
	size_t nclusters;
	char clusters[STORE_TOKEN_CLUSTERS_MAX][STORE_ID_MAX + 1];
	int64_t expires_at;               /* Unix seconds; 0 = never */
	bool revoked;
	int64_t created_at;
};

struct store_agent {
	char id[STORE_ID_MAX + 1];        /* "a-" + 12 hex */
	char cluster[STORE_ID_MAX + 1];
	char node[STORE_NAME_MAX + 1];
	uint8_t pubkey[32];
	enum agent_state state;
	char last_error[STORE_ERROR_MAX + 1];
	char token_id[TOKEN_ID_LEN + 1];  /* the import token it registered with */
	int64_t created_at;
	int64_t updated_at;
	char version[STORE_VERSION_MAX + 1]; /* its release, from its last
	                                      * HELLO; "" before one said */
	int64_t last_seen;                /* Unix s: its last tunnel came up
	                                   * or ended; 0 never connected */
	/* Key rotation (schema 7, docs/interface.md "Node key rotation"). */
	bool has_next;                    /* next_pubkey is staged */
	uint8_t next_pubkey[32];          /* valid beside pubkey while staged */
	bool key_rotate;                  /* an operator asked for a rotation */
	int64_t key_since;                /* Unix s: pubkey taken; 0 = created_at */
	char urls[STORE_URLS_MAX + 1];    /* the gateway URLs it last said it
	                                   * holds (SETTINGS_ACK), joined by
	                                   * spaces; "" for none */
	bool urls_known;                  /* it said so once; never for an
	                                   * agent older than SETTINGS */
	char cas[STORE_CAS_MAX + 1];      /* the CAs it last said it trusts
	                                   * (SETTINGS_ACK "ca", schema 9):
	                                   * checksums joined by spaces */
	bool cas_known;                   /* it said so once (a CA rotation
	                                   * reached it) */
};

/* Opens (creating and migrating as needed).  Returns STORE_OK or STORE_ERR
 * with err; *out is NULL on failure. */
int store_open(const char *url, struct store **out, char *err, size_t errlen);
/* Whether url names a PostgreSQL store (shared by replicas), not SQLite. */
bool store_url_is_postgres(const char *url);
void store_close(struct store *s);

/*
 * Told after each of s's public calls that reads or changes records (the
 * clusters, tokens, user tokens and agents; presence is not timed), on the
 * thread that made the call: op is the call's name without "store_"
 * ("agent_get", "cluster_create"; "user_tokens_select" for the two user
 * token reads), seconds its duration by the monotonic clock.  A call made
 * inside another is told too, before the outer one.  One hook may serve
 * stores used by several threads: it must then be thread-safe.
 */
typedef void store_timing_fn(void *arg, const char *op, double seconds);
/* Sets s's timing hook (fn NULL: none, the default).  Before s is used
 * from another thread. */
void store_set_timing(struct store *s, store_timing_fn *fn, void *arg);
/* The schema version the open database is at. */
int store_schema_version(struct store *s);

int store_cluster_create(struct store *s, const char *name, int64_t now,
    struct store_cluster *out, char *err, size_t errlen);
int store_cluster_get(struct store *s, const char *id, struct store_cluster *out);
int store_cluster_list(struct store *s, struct store_cluster **out, size_t *n);

/* Inserts a token record as given (id unique).  STORE_CONFLICT on a
 * duplicate id. */
int store_token_insert(struct store *s, const struct store_token *t,
    char *err, size_t errlen);
int store_token_get(struct store *s, const char *id, struct store_token *out);

/*
 * User names: 1 to STORE_NAME_MAX characters of A-Z a-z 0-9 . _ @ -, so
 * that an e-mail address fits.  Returns 1 if name is one.
 */
int store_user_name_valid(const char *name);

/*
 * Inserts a user token (t->kind TOKEN_USER, t->name a valid user name,
 * t->cluster "") scoped to the given clusters, in one transaction: either
 * the token and every scope row are written, or nothing is.  Duplicate
 * cluster ids count once.  STORE_REFUSED (err) for a bad record or name, no
 * clusters or more than STORE_TOKEN_CLUSTERS_MAX; STORE_NOTFOUND (err "no
 * cluster ID") when a cluster does not exist; STORE_CONFLICT on a duplicate
 * token id.  *out (may be NULL) holds the record as stored.
 */
int store_user_token_create(struct store *s, const struct store_token *t,
    const char *const *clusters, size_t nclusters,
    struct store_user_token *out, char *err, size_t errlen);

/* Every user token, revoked ones too, by creation, each with its clusters
 * in the order they were given. */
int store_user_token_list(struct store *s, struct store_user_token **out,
    size_t *n);
/* The user token with this id (one indexed lookup, whatever the number of
 * tokens), revoked or not: STORE_OK, STORE_NOTFOUND or STORE_ERR. */
int store_user_token_get(struct store *s, const char *id,
    struct store_user_token *out);

/*
 * Revokes the one user token with this id (one transaction; a token
 * already revoked stays so); *out (may be NULL) holds its record after.
 * STORE_NOTFOUND (with err) when no user token has this id: admin and
 * import tokens are not revoked here.
 */
int store_user_token_revoke(struct store *s, const char *id,
    struct store_user_token *out, char *err, size_t errlen);

/*
 * Revokes every user token issued to name, in one transaction; *count is
 * how many were live until now (0 when all already were revoked).
 * STORE_NOTFOUND when name never had a token.
 */
int store_user_revoke(struct store *s, const char *name, int64_t *count,
    char *err, size_t errlen);

/* STORE_OK if token id is scoped to cluster, STORE_NOTFOUND if not (or
 * there is no such token), STORE_ERR on a backend failure (logged). */
int store_token_in_cluster(struct store *s, const char *token_id,
    const char *cluster);

/*
 * Registers an agent with an import token, in one transaction:
 *  - the token must exist, be an import token, not revoked, not expired at
 *    now and have uses left (else STORE_REFUSED, err "import token expired",
 *    "import token used up", "unknown import token", ...);
 *  - if the cluster already has an agent named node with this same pubkey
 *    (a retried registration), that agent is returned, *created false, and
 *    no use is consumed;
 *  - if it has a non-revoked agent named node with another key, STORE_REFUSED
 *    ("node NAME is already registered in cluster C as agent A");
 *  - otherwise a new agent is inserted, in pending-approval or enroll per
 *    the token, one use consumed, *created true.
 */
int store_agent_register(struct store *s, const char *token_id,
    const char *node, const uint8_t pubkey[32], int64_t now,
    struct store_agent *out, bool *created, char *err, size_t errlen);

/*
 * store_agent_register for an agent that goes on as itself on the tunnel
 * that registers it (docs/0044), with that tunnel's first two writes
 * folded in (docs/0045): when the call creates the agent in enroll, it
 * also applies AGENT_EV_VERIFY (agent_state_next: enroll -> verifying,
 * last_error "") and records it seen at now with version (as
 * store_agent_seen; non-NULL, "" for none), in one statement, in the
 * registration's own transaction where the store runs the rules itself
 * (SQLite), else right after it, only if the agent is still in enroll
 * then.  *started (non-NULL) says whether it did: *out is then the record
 * as verifying (the registration made it in enroll: the caller tells the
 * agent both); else the call is store_agent_register's, nothing more
 * written, and the caller makes those writes itself.  Return values as
 * store_agent_register's; a failed second statement on PostgreSQL leaves
 * the registration done and is STORE_OK with *started false.
 */
int store_agent_register_on(struct store *s, const char *token_id,
    const char *node, const uint8_t pubkey[32], const char *version,
    int64_t now, struct store_agent *out, bool *created, bool *started,
    char *err, size_t errlen);

int store_agent_get(struct store *s, const char *id, struct store_agent *out);
/* All agents, or those of one cluster when cluster is non-NULL, by creation. */
int store_agent_list(struct store *s, const char *cluster,
    struct store_agent **out, size_t *n);

/*
 * Applies ev to the agent (agent_state_next) and persists the new state and
 * last_error (NULL keeps "" ; VERIFY_OK clears it) in one transaction.
 * STORE_REFUSED with err when the transition is not allowed.  On STORE_OK
 * *out holds the new record and *was the state it left (out->state the one
 * it entered; the same one for an event that keeps the state); either may
 * be NULL.  Nothing is written to them on failure.
 */
int store_agent_transition(struct store *s, const char *id,
    enum agent_event ev, const char *last_error, int64_t now,
    struct store_agent *out, enum agent_state *was, char *err, size_t errlen);

/*
 * Records that the agent was seen at now (Unix s): its tunnel came up or
 * ended.  version non-NULL also records its release ("" for an agent
 * that did not say; kept to [A-Za-z0-9.+~_-], other bytes become '_').  Touches neither the
 * state nor updated_at, and notifies no replica.  STORE_OK, or STORE_ERR
 * with err; an unknown id changes nothing and is STORE_OK.
 */
int store_agent_seen(struct store *s, const char *id, const char *version,
    int64_t now, char *err, size_t errlen);

/*
 * Node key rotation, each in one transaction on the agent's locked row
 * (docs/interface.md, "Node key rotation").  At any time the agent's
 * pubkey is valid, and while one is staged next_pubkey too:
 *  - key_request: an operator asks for a rotation (key_rotate = 1; the
 *    replica holding the tunnel hears of it).  STORE_NOTFOUND, or
 *    STORE_REFUSED for a revoked agent.
 *  - key_stage: the agent proved old_pub and new_pub (the caller checked
 *    the proof): next_pubkey = new_pub, if pubkey is still old_pub (else
 *    STORE_REFUSED "the agent's key changed").
 *  - key_commit: the agent uses new_pub alone: pubkey = new_pub,
 *    next_pubkey and key_rotate cleared, key_since = now, if new_pub is
 *    staged; STORE_OK changing nothing if pubkey is new_pub already (a
 *    retry); STORE_REFUSED otherwise.
 *  - key_abandon: the agent proved its pubkey and did not offer the
 *    staged key: next_pubkey = NULL if it is still staged_pub.
 * *out (may be NULL) gets the record as committed.
 */
int store_agent_key_request(struct store *s, const char *id, int64_t now,
    struct store_agent *out, char *err, size_t errlen);
int store_agent_key_stage(struct store *s, const char *id,
    const uint8_t old_pub[32], const uint8_t new_pub[32], char *err, size_t errlen);
int store_agent_key_commit(struct store *s, const char *id,
    const uint8_t new_pub[32], int64_t now, struct store_agent *out,
    char *err, size_t errlen);
int store_agent_key_abandon(struct store *s, const char *id,
    const uint8_t staged_pub[32], char *err, size_t errlen);

/*
 * Records the gateway URL list agent id says it holds (urls: joined by
 * spaces, at most STORE_URLS_MAX bytes; "" for none): urls_known from
 * then on.  Touches neither the state nor updated_at, and notifies no
 * replica.  STORE_OK, or STORE_ERR with err; an unknown id changes
 * nothing and is STORE_OK.
 */
int store_agent_urls(struct store *s, const char *id, const char *urls,
    char *err, size_t errlen);

/*
 * Records the CAs agent id says it trusts (cas: checksums joined by
 * spaces, at most STORE_CAS_MAX bytes): cas_known from then on.  As
 * store_agent_urls: no state, no updated_at, no notice; STORE_OK for an
 * unknown id, or STORE_ERR with err.
 */
int store_agent_cas(struct store *s, const char *id, const char *cas,
    char *err, size_t errlen);

/* How far a CA rotation reached: agents not revoked, those of them whose
 * last word (store_agent_cas) named the CA with this checksum, and the
 * same two among those a live replica holds a tunnel of. */
struct store_ca_count {
	int64_t agents, holding;
	int64_t connected, connected_holding;
};
/* One query, O(agents) in the database.  STORE_OK, or STORE_ERR with
 * err (also for a checksum that is not ca_checksum_valid's shape). */
int store_agents_holding_ca(struct store *s, const char *checksum,
    struct store_ca_count *out, char *err, size_t errlen);

/* ---- gateway settings (docs/0031) ---- */

/* The public URL list agents are told to dial ("https://A https://B"). */
#define STORE_SETTING_URLS "urls"

/* Reads setting name into out (outlen bytes, NUL-terminated).  STORE_OK,
 * STORE_NOTFOUND when it was never set, or STORE_ERR with err (also for a
 * value longer than outlen - 1). */
int store_setting_get(struct store *s, const char *name, char *out,
    size_t outlen, char *err, size_t errlen);
/* Sets name to value at now (Unix s), replacing what was there, in one
 * statement; with PostgreSQL every replica hears "setting:NAME"
 * (store_listen.h).  STORE_OK, or STORE_ERR/STORE_FULL with err. */
int store_setting_set(struct store *s, const char *name, const char *value,
    int64_t now, char *err, size_t errlen);

/*
 * Records that every agent whose tunnel replica holds (its rows in tunnels)
 * was seen at now (Unix s): the periodic last_seen of connected agents,
 * so that a replica killed with -9 leaves last contacts at most one period
 * old (presence.c, every --census-interval).  One statement
 * (O(replica's tunnels) rows written); nothing else changes and no replica
 * is notified.  STORE_OK, or STORE_ERR with err.
 */
int store_agents_seen_here(struct store *s, const char *replica, int64_t now,
    char *err, size_t errlen);

/*
 * Counts the agents offline longer than each of over_s[0..2] seconds at
 * now (Unix s) into counts[0..2]: agents not revoked whose tunnel no
 * replica with a running lease (database clock) holds, by their last contact
 * (last_seen; updated_at for one never seen since schema version 6).  One
 * query, a scan of agents (O(agents)); nothing per agent is returned.
 * STORE_OK, or STORE_ERR with err.
 */
/*
 * The agents not revoked, by the release their last HELLO named ("" for
 * none), the most common first: at most STORE_VERSIONS_MAX entries, the
 * last of them "other" summing the rest when there are more.  One query
 * (GROUP BY, O(agents) in the database).  STORE_OK, or STORE_ERR.
 */
#define STORE_VERSIONS_MAX 16
struct store_version_count {
	char version[STORE_VERSION_MAX + 1];
	int64_t n;
};
int store_agents_by_version(struct store *s,
    struct store_version_count out[STORE_VERSIONS_MAX], size_t *n,
    char *err, size_t errlen);

#define STORE_OFFLINE_SPANS 3
int store_agents_offline(struct store *s, int64_t now,
    const int64_t over_s[STORE_OFFLINE_SPANS],
    int64_t counts[STORE_OFFLINE_SPANS], char *err, size_t errlen);

/* ---- presence (gateway/agents/presence.h, docs/0017) ---- */

#define STORE_REPLICA_MAX  63     /* replica ids: [A-Za-z0-9._-] */
#define STORE_PEER_URL_MAX 255

/* One agent's tunnel and the replica that holds it. */
struct store_presence {
	char agent_id[STORE_ID_MAX + 1];
	char replica[STORE_REPLICA_MAX + 1];
	int64_t since_ms;                 /* Unix ms: when it was recorded */
};

/*
 * Leases are stamped and compared by the database's clock (PostgreSQL's
 * now(), SQLite's on its one host), never the writer's: replicas whose
 * clocks disagree still see each other's leases as they are.
 */

/* A replica's lease row as store_replica_claim found it. */
struct store_lease {
	int64_t until_ms;     /* its end, database clock, Unix ms */
	int64_t left_ms;      /* how long it still runs (> 0) */
	char peer_url[STORE_PEER_URL_MAX + 1];  /* its holder's */
};

/*
 * Takes or extends replica's lease for this process until the database's
 * now plus lease_ms (<= 0: ends at once), recording peer_url ("" if none).
 * *mine: in, the lease end this process last wrote (0: none yet); out, the
 * new one.  The row is this process's while its end is *mine; no row, or
 * one whose lease has ended, is taken, and the tunnel records its last
 * holder left under the id are forgotten with it.  *seen (may be NULL)
 * gets the row as it was (until_ms 0: none): a row taken rather than
 * renewed has an end other than *mine's old value.  STORE_REFUSED while
 * another process's lease runs (*seen says whose; nothing written), else
 * STORE_OK or STORE_ERR/STORE_FULL with err.  One transaction: a locked
 * read, one or two writes; a second when another process inserted the id
 * meanwhile.
 */
int store_replica_claim(struct store *s, const char *replica, const char *peer_url,
    int64_t lease_ms, int64_t *mine, struct store_lease *seen, char *err,
    size_t errlen);
/* Forgets the replicas whose lease ended more than dead_ms ago (database
 * clock) and the tunnels recorded against them: what processes killed
 * without a clean stop left (each HOST-PID id is used once).  *forgot (may
 * be NULL) counts the replicas.  Two statements in one transaction. */
int store_replicas_forget_dead(struct store *s, int64_t dead_ms, size_t *forgot,
    char *err, size_t errlen);
/* Gives replica's lease up and forgets every tunnel recorded against it,
 * if the lease is still this process's (its end is mine); another's is
 * left alone (STORE_OK either way). */
int store_replica_drop(struct store *s, const char *replica, int64_t mine,
    char *err, size_t errlen);
/* Records that replica holds agent_id's tunnel (replacing any record). */
int store_tunnel_record(struct store *s, const char *agent_id, const char *replica,
    int64_t now_ms, char *err, size_t errlen);
/* Forgets agent_id's tunnel if replica is the one recorded (a newer tunnel
 * on another replica stays). */
int store_tunnel_forget(struct store *s, const char *agent_id, const char *replica,
    char *err, size_t errlen);
/*
 * Makes the tunnels recorded against replica exactly ids[0..n-1] (sorted in
 * strcmp order): forgets its other records (tunnels that closed while the
 * store could not be told: ghosts other replicas would route to) and
 * records the missing ones since now_ms, unless a replica with a running
 * lease holds that agent's record.  *changed (may be NULL) counts the rows
 * forgotten and recorded.  One read of replica's records, then one write
 * per difference.  STORE_OK, or STORE_ERR/STORE_FULL with err (some rows
 * may be fixed: calling it again finishes).
 */
int store_tunnels_sync(struct store *s, const char *replica,
    const char (*ids)[STORE_ID_MAX + 1], size_t n, int64_t now_ms,
    size_t *changed, char *err, size_t errlen);
/* The tunnels whose replica's lease runs (database clock), in no order
 * (*out: caller frees, *n records).  One query. */
int store_presence_list(struct store *s,
    struct store_presence **out, size_t *n, char *err, size_t errlen);

/* How many replicas other than self have a running lease (database clock)
 * into *n: where a draining replica's agents can go (docs/0017).  One
 * query; STORE_OK, or STORE_ERR with err. */
int store_replicas_live(struct store *s, const char *self, int64_t *n,
    char *err, size_t errlen);

/* An agent whose tunnel another live replica holds (docs/0023). */
struct store_remote_agent {
	char agent_id[STORE_ID_MAX + 1];
	char cluster[STORE_ID_MAX + 1];
	char node[STORE_NAME_MAX + 1];
	enum agent_state state;
	char replica[STORE_REPLICA_MAX + 1];
	char peer_url[STORE_PEER_URL_MAX + 1];
};
/* The agents whose tunnels replicas other than self hold, of replicas
 * whose lease runs (database clock), in no order (*out: caller frees, *n
 * records).  One query (tunnels joined to replicas and agents). */
int store_remote_agents(struct store *s, const char *self,
    struct store_remote_agent **out, size_t *n, char *err, size_t errlen);

#endif
