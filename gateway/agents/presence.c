/*
 * presence.c: this replica's lease and its tunnels' records in the store
 * (see presence.h).  Every store call is a job on the store thread
 * (store_worker.h): the loop never waits for the database.  The thread runs
 * jobs in order, so a tunnel's record and its removal, and the renewals and
 * the final drop, reach the store in the order they were asked for.  The
 * one exception is the first claim of the lease, made before the loop
 * runs (presence_start).
 *
 * The lease is this process's while its row ends where this process last
 * wrote it (gw->lease_mine_ms, kept by the store thread): a second process
 * with the same id cannot renew, drop or record under it.  A tunnel record
 * or removal the store did not take (down, full, the queue full) marks the
 * records dirty; the next renewal then carries the ids of the agents held
 * (agentdir.h) and makes the store's records match them
 * (store_tunnels_sync): no ghost of a tunnel that closed during an outage
 * outlives the outage.
 */
#include "presence.h"

#include <pthread.h>
#include <signal.h>
#include <stdbool.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <event2/event.h>

#include "agentdir.h"
#include "carotate.h"
#include "face.h"
#include "gateway.h"
#include "log.h"
#include "loop.h"
#include "metrics.h"
#include "runtime.h"
#include "store.h"
#include "store_worker.h"

struct presence {
	struct event *renew;       /* every PRESENCE_RENEW_MS */
	int renewing;              /* a renewal is queued: the next one waits */
	unsigned renewals;         /* queued so far: every census_every()th
	                            * also takes the census (presence.h) */
	int64_t renew_queued_ms;   /* monotonic: when that renewal was queued */
	int failing;               /* the last renewal failed (logged once) */
	int unreachable;           /* ... and not for a full disk: the store is down */
	char problem[512];         /* why, while unreachable or lost */
	int lost;                  /* another process took the id: stopping */
	int dirty;                 /* a tunnel record or removal was lost: the
	                            * next renewal makes the records match */
	unsigned losses;           /* such losses so far */
	int reading;               /* a directory read (PJ_DIR) is queued */
	int read_again;            /* ... and another was asked for meanwhile */
};

/* PJ_RENEW_COUNT: a renewal that also counts the agents offline. */
enum pjob_kind { PJ_RENEW, PJ_RENEW_COUNT, PJ_DROP, PJ_UP, PJ_DOWN, PJ_DIR };

/* The spans tether_agents_offline{over} counts agents offline beyond. */
static const struct {
	int64_t s;
	const char *label;
} offline_spans[STORE_OFFLINE_SPANS] = {
	{ 300, "5m" }, { 3600, "1h" }, { 86400, "1d" },
};

/* A caller's store call riding in a tunnel record's job
 * (presence_tunnel_up_with, presence_tunnel_down_with). */
struct pjob_also {
	store_work_fn *work;
	store_done_fn *done;
	void *arg;
	bool first;                /* run and answered before the record's
	                            * (UP: the agent's stamp was queued first) */
};

/* One store call.  Holds copies: the thread reads nothing else. */
struct pjob {
	enum pjob_kind kind;
	struct gateway *gw;        /* for done, on the loop only */
	char replica[sizeof(((struct gateway *)0)->replica_id)];
	char peer_url[sizeof(((struct gateway *)0)->peer_url)];
	char agent_id[STORE_ID_MAX + 1];
	int64_t ms;                /* now (RENEW, UP: since) */
	char (*ids)[STORE_ID_MAX + 1];  /* RENEW while dirty: the agents held */
	size_t nids;
	unsigned losses;           /* ... and p->losses when they were taken */
	int synced;                /* the records match them now */
	size_t repaired;           /* ... after this many changes */
	struct store_lease held;   /* RENEW: the row as the claim found it */
	int lost;                  /* ... another process's, live */
	int retaken;               /* ... gone or a dead holder's: this
	                            * replica's records went with it */
	struct presence_table *table;  /* RENEW, DIR: the directory read and
	                            * indexed (NULL: not read) */
	int64_t offline[STORE_OFFLINE_SPANS];  /* RENEW_COUNT: the counts */
	int offline_ok;            /* ... if they were read */
	struct store_version_count versions[STORE_VERSIONS_MAX];  /* RENEW_COUNT */
	size_t nversions;
	int versions_ok;           /* ... if they were read */
	char ca_sum[CA_CHECKSUM_MAX];  /* RENEW_COUNT in a CA rotation: the new
	                            * CA ("": none) */
	struct store_ca_count ca;  /* ... who holds it */
	int ca_ok;                 /* ... if it was counted */
	int rc;
	char err[STORE_ERROR_MAX + 1];
	struct pjob_also also;     /* UP, DOWN: the caller's call in the same
	                            * job (work NULL: none) */
};

/*
 * The directory as one published, immutable table (docs/0040 step 4):
 * made and indexed on the store thread, published by loop 0 under
 * gw->publish_mu, read by any loop with a reference (table_get/put), so
 * a swap never frees a table a reader is searching.
 */
struct presence_table {
	atomic_uint refs;          /* readers + 1 while published */
	atomic_uint rotor;         /* spreads picks (carried over at a swap) */
	int64_t read_ms;           /* monotonic: when loop 0 took it */
	int64_t others;            /* other replicas whose lease ran, then */
	size_t n;
	struct store_remote_agent *dir;         /* sorted by (cluster, node) */
	const struct store_remote_agent **by_id; /* the same, by agent id */
};

static int
dir_cmp(const void *a, const void *b)
{
	const struct store_remote_agent *x = a, *y = b;
	int c = strcmp(x->cluster, y->cluster);

	return c != 0 ? c : strcmp(x->node, y->node);
}

static int
by_id_cmp(const void *a, const void *b)
{
	const struct store_remote_agent *const *x = a, *const *y = b;

	return strcmp((*x)->agent_id, (*y)->agent_id);
}

static void
table_put(struct presence_table *t)
{
	if (t == NULL ||
	    atomic_fetch_sub_explicit(&t->refs, 1, memory_order_acq_rel) != 1)
		return;
	free(t->by_id);
	free(t->dir);
	free(t);
}

/* The table published now, with a reference (table_put), or NULL. */
static struct presence_table *
table_get(struct gateway *gw)
{
	struct presence_table *t;

	if (!gw->publish_ready)
		return NULL;      /* a unit test's gateway: nothing published */
	pthread_mutex_lock(&gw->publish_mu);
	if ((t = gw->remote_agents) != NULL)
		atomic_fetch_add_explicit(&t->refs, 1, memory_order_relaxed);
	pthread_mutex_unlock(&gw->publish_mu);
	return t;
}

/* Loop 0: t (NULL: none) becomes the published table; the old is put. */
static void
table_publish(struct gateway *gw, struct presence_table *t)
{
	struct presence_table *old;

	if (!gw->publish_ready) {
		table_put(t);     /* a unit test's gateway: nowhere to publish */
		return;
	}
	pthread_mutex_lock(&gw->publish_mu);
	old = gw->remote_agents;
	gw->remote_agents = t;
	pthread_mutex_unlock(&gw->publish_mu);
	if (old != NULL && t != NULL)
		atomic_store(&t->rotor, atomic_load(&old->rotor));
	table_put(old);
}

/* On the store thread: the directory as of the lease's start, sorted by
 * (cluster, node) and indexed by agent id (O(n log n) here, none on a
 * loop), and the other replicas live.  A failed read (or no memory)
 * leaves j->table NULL and the loop's table as it is, until it is too old
 * to use (a store this replica cannot read also fails its renewals:
 * logged). */
static void
dir_read(struct store *st, struct pjob *j)
{
	char err[STORE_ERROR_MAX + 1];
	struct presence_table *t = calloc(1, sizeof(*t));

	if (t == NULL)
		return;
	atomic_init(&t->refs, 1);
	atomic_init(&t->rotor, 0);
	if (store_remote_agents(st, j->replica, &t->dir, &t->n, err,
	    sizeof(err)) != STORE_OK ||
	    store_replicas_live(st, j->replica, &t->others, err,
	    sizeof(err)) != STORE_OK ||
	    (t->by_id = malloc((t->n > 0 ? t->n : 1) * sizeof(*t->by_id))) == NULL) {
		table_put(t);
		return;
	}
	if (t->n > 1)
		qsort(t->dir, t->n, sizeof(*t->dir), dir_cmp);
	for (size_t i = 0; i < t->n; i++)
		t->by_id[i] = &t->dir[i];
	if (t->n > 1)
		qsort(t->by_id, t->n, sizeof(*t->by_id), by_id_cmp);
	j->table = t;
}

/* On the store thread: the agents offline beyond each span (one query);
 * a failure leaves the metric as it was (the renewal says why). */
static void
offline_count(struct store *st, struct pjob *j)
{
	int64_t over[STORE_OFFLINE_SPANS];
	char err[STORE_ERROR_MAX + 1];

	for (int i = 0; i < STORE_OFFLINE_SPANS; i++)
		over[i] = offline_spans[i].s;
	j->offline_ok = store_agents_offline(st, j->ms / 1000, over, j->offline,
	    err, sizeof(err)) == STORE_OK;
}

static int
id_cmp(const void *a, const void *b)
{
	return strcmp(a, b);
}

/* On the store thread: renews the lease (a lease this process lost stays
 * lost: gw->lease_mine_ms 0), then, when the job carries the agents held,
 * makes the tunnel records match them. */
static void
renew(struct store *st, struct pjob *j)
{
	int64_t *mine = &j->gw->lease_mine_ms, was = *mine;
	char err[STORE_ERROR_MAX + 1];

	j->rc = store_replica_claim(st, j->replica, j->peer_url, PRESENCE_LEASE_MS,
	    mine, &j->held, j->err, sizeof(j->err));
	if (j->rc == STORE_REFUSED) {
		j->lost = 1;
		*mine = 0;
		return;
	}
	j->retaken = j->rc == STORE_OK && was != 0 && j->held.until_ms != was;
	if (j->rc != STORE_OK || j->ids == NULL)
		return;
	if (j->nids > 1)
		qsort(j->ids, j->nids, sizeof(*j->ids), id_cmp);
	if (store_tunnels_sync(st, j->replica, j->ids, j->nids, j->ms,
	    &j->repaired, err, sizeof(err)) == STORE_OK)
		j->synced = 1;
}

/* On the store thread: last_seen is now for every agent this replica
 * holds (one statement); a failure leaves them as they were (the renewal
 * says why the store fails). */
static void
seen_here(struct store *st, struct pjob *j)
{
	char err[STORE_ERROR_MAX + 1];

	(void)store_agents_seen_here(st, j->replica, (j->ms - PRESENCE_LEASE_MS) / 1000,
	    err, sizeof(err));
}

/* The call itself (pjob_work: and the caller's beside it). */
static void
pjob_work_own(struct store *st, struct pjob *j)
{
	int64_t mine = j->gw->lease_mine_ms;

	/* Not this process's lease (lost, or never taken for a full disk):
	 * nothing is written under its id but by a renewal. */
	if (mine == 0 && (j->kind == PJ_UP || j->kind == PJ_DOWN || j->kind == PJ_DROP)) {
		j->rc = j->kind == PJ_DROP ? STORE_OK : STORE_ERR;
		snprintf(j->err, sizeof(j->err), "this replica holds no lease");
		return;
	}
	char verr[STORE_ERROR_MAX + 1];

	switch (j->kind) {
	case PJ_RENEW_COUNT:
		offline_count(st, j);
		j->versions_ok = store_agents_by_version(st, j->versions,
		    &j->nversions, verr, sizeof(verr)) == STORE_OK;
		j->ca_ok = j->ca_sum[0] != '\0' && store_agents_holding_ca(st,
		    j->ca_sum, &j->ca, verr, sizeof(verr)) == STORE_OK;
		if (j->gw->lease_mine_ms != 0)   /* its tunnels are this process's */
			seen_here(st, j);
		/* FALLTHROUGH */
	case PJ_RENEW:
		renew(st, j);
		dir_read(st, j);
		break;
	case PJ_DROP:
		j->rc = store_replica_drop(st, j->replica, mine, j->err,
		    sizeof(j->err));
		break;
	case PJ_UP:
		j->rc = store_tunnel_record(st, j->agent_id, j->replica, j->ms,
		    j->err, sizeof(j->err));
		break;
	case PJ_DOWN:
		j->rc = store_tunnel_forget(st, j->agent_id, j->replica, j->err,
		    sizeof(j->err));
		break;
	case PJ_DIR:
		dir_read(st, j);
		j->rc = STORE_OK;
		break;
	}
}

static void
pjob_work(struct store *st, void *arg)
{
	struct pjob *j = arg;

	if (j->also.work != NULL && j->also.first)
		j->also.work(st, j->also.arg);
	pjob_work_own(st, j);
	if (j->also.work != NULL && !j->also.first)
		j->also.work(st, j->also.arg);
}

/* A directory read: published whole (jobs end in the order they were
 * queued, so a later read is never replaced by an earlier one). */
static void
dir_swap(struct gateway *gw, struct pjob *j)
{
	if (j->table == NULL)
		return;
	j->table->read_ms = runtime_monotonic_ms();
	table_publish(gw, j->table);
	j->table = NULL;
}

static void
dir_done(struct gateway *gw, struct pjob *j)
{
	struct presence *p = gw->presence;

	if (p == NULL)
		return;       /* stopped meanwhile */
	p->reading = 0;
	dir_swap(gw, j);
	if (p->read_again) {
		p->read_again = 0;
		presence_refresh(gw);
	}
}

static void records_lost(struct gateway *gw);

static void
records_lost_home(void *arg)
{
	records_lost(arg);
}

/* A tunnel record or removal the store did not take: the next renewal
 * makes every record match the agents held.  The presence is loop 0's:
 * a tunnel's loop tells it there (docs/0040 step 7). */
static void
records_lost(struct gateway *gw)
{
	struct presence *p;
	struct loop *l = loop_self();

	if (l != NULL && l->index != 0 && l->gw == gw && gw->loops != NULL) {
		(void)loop_call(&gw->loops[0], records_lost_home, gw, NULL);
		return;
	}
	if ((p = gw->presence) == NULL)
		return;
	p->dirty = 1;
	p->losses++;
}

/* Writes "2026-01-02T03:04:05.678Z" for a Unix ms time into buf. */
static void
iso_ms(int64_t ms, char *buf, size_t len)
{
	time_t t = (time_t)(ms / 1000);
	struct tm tm;

	if (gmtime_r(&t, &tm) == NULL) {
		snprintf(buf, len, "%lld", (long long)ms);
		return;
	}
	snprintf(buf, len, "%04d-%02d-%02dT%02d:%02d:%02d.%03dZ", tm.tm_year + 1900,
	    tm.tm_mon + 1, tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec,
	    (int)(ms % 1000));
}

/* Why the id cannot be this process's: the holder's peer URL and when it
 * last renewed (database clock), into buf. */
static void
held_reason(const char *replica, const struct store_lease *h, char *buf,
    size_t len)
{
	char renewed[40];

	iso_ms(h->until_ms - PRESENCE_LEASE_MS, renewed, sizeof(renewed));
	snprintf(buf, len, "replica id %s is held by a live replica (peer URL "
	    "\"%s\", lease last renewed %s, %lld ms more to run): give this one "
	    "another --replica-id, or stop that one", replica, h->peer_url,
	    renewed, (long long)h->left_ms);
}

/* A renewal found the id held by another process (this one's lease ended
 * while the store was out of reach and that one took it): this one stops
 * recording and stops as on SIGTERM, its agents moving to other replicas. */
static void
lease_lost(struct presence *p, struct pjob *j)
{
	if (p->lost)
		return;
	p->lost = 1;
	held_reason(j->replica, &j->held, p->problem, sizeof(p->problem));
	error("presence: another process took this replica's id: stopping",
	    KV_S("replica", j->replica), KV_S("err", p->problem));
	raise(SIGTERM);
}

static void
renew_done(struct gateway *gw, struct pjob *j)
{
	struct presence *p = gw->presence;

	if (p == NULL)
		return;       /* stopped meanwhile */
	p->renewing = 0;
	dir_swap(gw, j);
	if (j->lost) {
		lease_lost(p, j);
		return;
	}
	if (j->retaken) {
		warn("presence: this replica's lease was gone from the store: "
		    "recording its tunnels again", KV_S("replica", j->replica));
		records_lost(gw);
	}
	if (j->synced && j->losses == p->losses) {
		p->dirty = 0;
		if (j->repaired > 0)
			info("presence: tunnel records repaired after the store's "
			    "return", KV_S("replica", j->replica),
			    KV_U("changed", j->repaired));
	}
	for (int i = 0; j->offline_ok && i < STORE_OFFLINE_SPANS; i++)
		metrics_agents_offline(offline_spans[i].label, j->offline[i]);
	if (j->versions_ok) {
		const char *names[STORE_VERSIONS_MAX];
		int64_t counts[STORE_VERSIONS_MAX];

		for (size_t i = 0; i < j->nversions; i++) {
			names[i] = j->versions[i].version;
			counts[i] = j->versions[i].n;
		}
		metrics_agents_by_version(names, counts, j->nversions);
	}
	if (j->ca_ok || (j->kind == PJ_RENEW_COUNT && j->ca_sum[0] == '\0'))
		metrics_agents_holding_new_ca(j->ca_ok ? j->ca.holding : 0);
	/* A full disk still answers (reads work); anything else is a store
	 * this replica cannot reach (/readyz says so, docs/0021). */
	p->unreachable = j->rc != STORE_OK && j->rc != STORE_FULL;
	snprintf(p->problem, sizeof(p->problem), "%s", j->err);
	if (j->rc != STORE_OK) {
		if (!p->failing)
			warn("presence: cannot renew this replica's lease: other "
			    "replicas will see its agents as gone",
			    KV_S("replica", j->replica), KV_S("err", j->err));
		p->failing = 1;
	} else if (p->failing) {
		info("presence: lease renewed again", KV_S("replica", j->replica));
		p->failing = 0;
	}
}

static void
pjob_done(void *arg)
{
	struct pjob *j = arg;

	if (j->also.done != NULL && j->also.first)
		j->also.done(j->also.arg);
	if ((j->kind == PJ_UP || j->kind == PJ_DOWN) && j->rc != STORE_OK)
		records_lost(j->gw);

	if (j->kind == PJ_RENEW || j->kind == PJ_RENEW_COUNT || j->kind == PJ_DIR) {
		if (j->kind != PJ_DIR)
			renew_done(j->gw, j);
		else
			dir_done(j->gw, j);
		table_put(j->table);    /* NULL once published */
		free(j->ids);
	} else if (j->rc != STORE_OK && j->kind == PJ_DROP)
		warn("presence: cannot give up this replica's lease: it ends by "
		    "itself", KV_S("replica", j->replica), KV_S("err", j->err));
	else if (j->rc != STORE_OK && j->kind == PJ_UP)
		warn("presence: cannot record the tunnel", KV_S("agent", j->agent_id),
		    KV_S("err", j->err));
	else if (j->rc != STORE_OK)
		warn("presence: cannot forget the tunnel", KV_S("agent", j->agent_id),
		    KV_S("err", j->err));
	if (j->also.done != NULL && !j->also.first)
		j->also.done(j->also.arg);
	free(j);
}

struct ids_fill {
	char (*ids)[STORE_ID_MAX + 1];
	size_t n, cap;
};

static void
add_id(const struct agentdir_entry *e, void *arg)
{
	struct ids_fill *f = arg;

	if (f->n < f->cap)
		snprintf(f->ids[f->n++], sizeof(f->ids[0]), "%s", e->agent_id);
}

/* While the records are dirty, a renewal carries the ids of the agents
 * this process holds (agentdir.h; one array, O(tunnels here)); out of
 * memory, it goes without (a later one carries them).  One added between
 * the count and the copy recorded its own tunnel. */
static void
renew_ids(struct gateway *gw, struct pjob *j)
{
	struct ids_fill f = { .cap = agentdir_count(gw->agents) };

	if (gw->presence == NULL || !gw->presence->dirty)
		return;
	if ((f.ids = calloc(f.cap > 0 ? f.cap : 1, sizeof(*f.ids))) == NULL)
		return;
	(void)agentdir_foreach(gw->agents, add_id, &f);
	j->ids = f.ids;
	j->nids = f.n;
	j->losses = gw->presence->losses;
}

/* Queues a call, with the caller's in the same job when also is not NULL
 * (presence_tunnel_up_with, presence_tunnel_down_with); 0, or -1 (logged)
 * when the store queue is full. */
static int
pjob_submit_with(struct gateway *gw, enum pjob_kind kind, const char *agent_id,
    int64_t ms, const struct pjob_also *also)
{
	struct pjob *j = calloc(1, sizeof(*j));

	if (j == NULL) {
		warn("presence: out of memory for a store call");
		return -1;
	}
	if (also != NULL)
		j->also = *also;
	j->kind = kind;
	j->gw = gw;
	j->ms = ms;
	j->rc = STORE_ERR;
	snprintf(j->err, sizeof(j->err), "the gateway is stopping");
	snprintf(j->replica, sizeof(j->replica), "%s", gw->replica_id);
	snprintf(j->peer_url, sizeof(j->peer_url), "%s", gw->peer_url);
	snprintf(j->agent_id, sizeof(j->agent_id), "%s", agent_id != NULL ? agent_id : "");
	if (kind == PJ_RENEW || kind == PJ_RENEW_COUNT)
		renew_ids(gw, j);
	if (kind == PJ_RENEW_COUNT)
		gw_face_rotating_ca(gw, j->ca_sum, sizeof(j->ca_sum));
	/* A tunnel's record, one statement whose work may run twice, shares
	 * the commit of the calls queued beside it (on SQLite, docs/0039):
	 * alone it was one commit, and one sync, per tunnel up or down, and
	 * it ended the group of the joins around it. */
	if (store_worker_submit_keyed(gw->storew, NULL, kind == PJ_UP || kind == PJ_DOWN,
	    pjob_work, pjob_done, j) != 0) {
		warn("presence: store queue full: a presence update is lost",
		    KV_S("replica", gw->replica_id));
		free(j->ids);
		free(j);
		if (kind == PJ_UP || kind == PJ_DOWN)
			records_lost(gw);
		return -1;
	}
	return 0;
}

static int
pjob_submit(struct gateway *gw, enum pjob_kind kind, const char *agent_id, int64_t ms)
{
	return pjob_submit_with(gw, kind, agent_id, ms, NULL);
}

/* The census's period in renewals: --census-interval rounded up to a
 * whole number of them, at least one. */
static unsigned
census_every(const struct gateway *gw)
{
	unsigned n = (gw->limits.census_interval_ms + PRESENCE_RENEW_MS - 1) /
	    PRESENCE_RENEW_MS;

	return n > 0 ? n : 1;
}

static void
presence_renew(evutil_socket_t fd, short what, void *arg)
{
	struct gateway *gw = arg;
	struct presence *p = gw->presence;
	struct timeval tv = runtime_ms_timeval(PRESENCE_RENEW_MS);

	if (p->lost)
		return;     /* stopping: no renewal takes the id back */
	/* A store that stalls gets one renewal at a time, not a backlog. */
	if (!p->renewing && pjob_submit(gw,
	    p->renewals % census_every(gw) == 0 ? PJ_RENEW_COUNT : PJ_RENEW,
	    NULL, gateway_now_ms()) == 0) {
		p->renewals++;
		p->renewing = 1;
		p->renew_queued_ms = runtime_monotonic_ms();
	}
	evtimer_add(p->renew, &tv);
}

/* Sleeps ms (start-up only: the loop does not run yet). */
static void
claim_pause(int64_t ms)
{
	struct timespec ts = { .tv_sec = ms / 1000, .tv_nsec = (ms % 1000) * 1000000 };

	while (nanosleep(&ts, &ts) != 0)
		;
}

/*
 * Takes the lease on the loop's connection before anything listens
 * (blocking; the loop does not run yet).  An id another process holds is
 * watched for up to its lease's end: renewed meanwhile, its holder is
 * alive and this start is refused; not renewed (a holder killed moments
 * ago), it ends and is taken.  STORE_OK, STORE_REFUSED with err saying who
 * holds it, or the store's failure with err.
 */
static int
presence_claim(struct gateway *gw, char *err, size_t errlen)
{
	struct store_lease held, first = { 0 };
	int64_t until = 0;
	size_t dead = 0;
	int rc;

	/* What processes killed long ago left (each HOST-PID is used once). */
	if (store_replicas_forget_dead(gw->store, PRESENCE_DEAD_MS, &dead, err,
	    errlen) != STORE_OK)
		warn("presence: cannot forget dead replicas", KV_S("err", err));
	else if (dead > 0)
		info("presence: forgot replicas dead for an hour and their tunnel "
		    "records", KV_U("replicas", dead));
	for (;;) {
		rc = store_replica_claim(gw->store, gw->replica_id, gw->peer_url,
		    PRESENCE_LEASE_MS, &gw->lease_mine_ms, &held, err, errlen);
		if (rc != STORE_REFUSED)
			return rc;
		if (first.until_ms == 0) {
			first = held;
			until = runtime_monotonic_ms() + (held.left_ms <
			    PRESENCE_LEASE_MS ? held.left_ms : PRESENCE_LEASE_MS) +
			    PRESENCE_CLAIM_POLL_MS;
			info("presence: this replica's id is held: waiting for its "
			    "lease to end or be renewed", KV_S("replica", gw->replica_id),
			    KV_S("holder_peer_url", held.peer_url),
			    KV_I("lease_left_ms", held.left_ms));
		}
		if (held.until_ms != first.until_ms || runtime_monotonic_ms() >= until) {
			held_reason(gw->replica_id, &held, err, errlen);
			return STORE_REFUSED;
		}
		claim_pause(PRESENCE_CLAIM_POLL_MS);
	}
}

int
presence_start(struct gateway *gw, char *err, size_t errlen)
{
	struct presence *p;
	int rc = presence_claim(gw, err, errlen);

	/* A live holder, or a store this replica cannot reach (a store down
	 * at start already stopped it at store_open): it does not start.  A
	 * full disk does not stop it: it serves what needs no write, the
	 * renewals retry and then record its tunnels. */
	if (rc != STORE_OK && rc != STORE_FULL)
		return -1;
	if ((p = calloc(1, sizeof(*p))) == NULL ||
	    (p->renew = evtimer_new(gw->base, presence_renew, gw)) == NULL) {
		free(p);
		snprintf(err, errlen, "out of memory");
		return -1;
	}
	gw->presence = p;
	p->dirty = rc != STORE_OK;
	if (rc != STORE_OK)
		warn("presence: cannot take this replica's lease yet: retrying",
		    KV_S("replica", gw->replica_id), KV_S("err", err));
	presence_renew(-1, 0, gw);
	return 0;
}

void
presence_stop(struct gateway *gw)
{
	struct presence *p = gw->presence;

	if (p == NULL)
		return;
	event_free(p->renew);
	table_publish(gw, NULL);
	free(p);
	gw->presence = NULL;
	/* After whatever is queued: no renewal can bring the lease back. */
	(void)pjob_submit(gw, PJ_DROP, NULL, 0);
}

void
presence_tunnel_up(struct gateway *gw, const char *agent_id)
{
	if (gw->presence != NULL)
		(void)pjob_submit(gw, PJ_UP, agent_id, gateway_now_ms());
}

void
presence_tunnel_down(struct gateway *gw, const char *agent_id)
{
	if (gw->presence != NULL)
		(void)pjob_submit(gw, PJ_DOWN, agent_id, 0);
}

/* A tunnel coming up: one job for the agent's stamp and its record, the
 * stamp first as it was queued first (a reconnect storm of N agents
 * queued 2 N jobs on a queue of 4,096, docs/0017). */
int
presence_tunnel_up_with(struct gateway *gw, const char *agent_id,
    store_work_fn *work, store_done_fn *done, void *arg)
{
	const struct pjob_also also = { work, done, arg, true };

	if (gw->presence == NULL)
		return -1;
	return pjob_submit_with(gw, PJ_UP, agent_id, gateway_now_ms(), &also);
}

int
presence_tunnel_down_with(struct gateway *gw, const char *agent_id,
    store_work_fn *work, store_done_fn *done, void *arg)
{
	const struct pjob_also also = { work, done, arg, false };

	if (gw->presence == NULL)
		return -1;
	return pjob_submit_with(gw, PJ_DOWN, agent_id, 0, &also);
}

const char *
presence_problem(struct gateway *gw)
{
	struct presence *p = gw->presence;

	if (p == NULL)
		return NULL;
	if (p->lost)
		return p->problem;
	if (p->renewing &&
	    runtime_monotonic_ms() - p->renew_queued_ms > PRESENCE_LEASE_MS)
		return "the store has not answered a lease renewal for a whole lease";
	return p->unreachable ? p->problem : NULL;
}

/* The first entry of t at or after (cluster, node). */
static size_t
dir_lower_bound(const struct presence_table *t, const char *cluster,
    const char *node)
{
	struct store_remote_agent key;
	size_t lo = 0, hi = t->n;

	snprintf(key.cluster, sizeof(key.cluster), "%s", cluster);
	snprintf(key.node, sizeof(key.node), "%s", node != NULL ? node : "");
	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;

		if (dir_cmp(&t->dir[mid], &key) < 0)
			lo = mid + 1;
		else
			hi = mid;
	}
	return lo;
}

/* 1 if e is of cluster (and of node, when non-NULL). */
static int
dir_matches(const struct store_remote_agent *e, const char *cluster,
    const char *node)
{
	return strcmp(e->cluster, cluster) == 0 &&
	    (node == NULL || strcmp(e->node, node) == 0);
}

/* The table published now if it is fresh enough to use (with a reference:
 * table_put), else NULL. */
static struct presence_table *
table_fresh(struct gateway *gw)
{
	struct presence_table *t = table_get(gw);

	if (t != NULL && runtime_monotonic_ms() - t->read_ms > PRESENCE_LEASE_MS) {
		table_put(t);
		t = NULL;
	}
	return t;
}

/* Of t, an active agent of cluster (node) in turn, or NULL. */
static const struct store_remote_agent *
table_pick(struct presence_table *t, const char *cluster, const char *node,
    int *seen)
{
	size_t first, i, active = 0, want;

	first = dir_lower_bound(t, cluster, node);
	for (i = first; i < t->n && dir_matches(&t->dir[i], cluster, node); i++) {
		*seen = 1;
		active += t->dir[i].state == AGENT_ACTIVE;
	}
	if (active == 0)
		return NULL;
	want = atomic_fetch_add_explicit(&t->rotor, 1, memory_order_relaxed) %
	    active;
	for (i = first; ; i++)
		if (t->dir[i].state == AGENT_ACTIVE && want-- == 0)
			return &t->dir[i];
}

int
presence_remote_pick(struct gateway *gw, const char *cluster, const char *node,
    struct store_remote_agent *out, int *seen)
{
	struct presence_table *t;
	const struct store_remote_agent *e = NULL;
	int any = 0;

	if ((t = table_fresh(gw)) != NULL) {
		if ((e = table_pick(t, cluster, node, &any)) != NULL)
			*out = *e;
		table_put(t);
	}
	if (seen != NULL)
		*seen = any;
	return e != NULL;
}

int
presence_remote_find(struct gateway *gw, const char *agent_id,
    struct store_remote_agent *out)
{
	struct presence_table *t;
	int found = 0;

	if ((t = table_fresh(gw)) == NULL)
		return 0;
	for (size_t lo = 0, hi = t->n; lo < hi && !found; ) {
		size_t mid = lo + (hi - lo) / 2;
		int c = strcmp(t->by_id[mid]->agent_id, agent_id);

		if (c == 0) {
			if (out != NULL)
				*out = *t->by_id[mid];
			found = 1;
		} else if (c < 0) {
			lo = mid + 1;
		} else {
			hi = mid;
		}
	}
	table_put(t);
	return found;
}

int
presence_others_live(struct gateway *gw)
{
	struct presence_table *t = table_fresh(gw);
	int live = t != NULL && t->others > 0;

	table_put(t);
	return live;
}

void
presence_refresh(struct gateway *gw)
{
	struct presence *p = gw->presence;

	if (p == NULL)
		return;
	if (p->reading) {
		p->read_again = 1;
		return;
	}
	if (pjob_submit(gw, PJ_DIR, NULL, gateway_now_ms()) == 0)
		p->reading = 1;
}
