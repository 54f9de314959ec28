/*
 * metrics.c: the gateway's metric families and the hooks that count into
 * them (see metrics.h).  It reads neither the hub nor the store: main.c
 * seeds the agent counts and hands the store metrics_store_timed as its
 * timing hook, the callers of the store move the agent counts with what
 * the store says it changed, and metrics_route.c reads the hub.
 */
#include "metrics.h"

#include <openssl/asn1.h>
#include <openssl/pem.h>
#include <openssl/x509.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "agent_state.h"

/* Every family is read under this lock (metrics_lock).  Written under it:
 * tether_store_duration_seconds (the store thread times its calls through
 * the store's timing hook), and the events any loop may count (an agent's
 * state, a handshake: docs/0040, ~100 ns uncontended).  The /k8s answers,
 * one per request, are counted per thread without it and folded in by the
 * scrape (k8s_fold).  The others are written on loop 0 only, or under
 * metrics_lock by the scrape. */
static pthread_mutex_t metrics_mu = PTHREAD_MUTEX_INITIALIZER;

static const char *const no_values[] = { NULL };
static const char *const version_values[] = { TETHER_VERSION, NULL };
static const char *const state_values[] = {
	"pending-approval", "enroll", "verifying", "active", "revoked", NULL
};
static const char *const ok_values[] = { "ok", NULL };
static const char *const wait_values[] = {
	"served", "expired", "abandoned", "stopped", NULL
};
static const char *const over_values[] = { "5m", "1h", "1d", NULL };
/* Seconds: 1 ms to 10 s for proxied requests, 50 us to 1 s for the store. */
static const double k8s_bounds[] = {
	0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10
};
static const double store_bounds[] = {
	0.00005, 0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025,
	0.05, 0.1, 0.25, 1
};

static struct prom_metric build_info = {
	.name = "tether_build_info", .kind = PROM_GAUGE,
	.help = "Always 1; the version of this tether-gateway.",
	.label = "version", .preset = version_values,
};
static struct prom_metric agents = {
	.name = "tether_agents", .kind = PROM_GAUGE,
	.help = "Registered agents by state, connected or not.",
	.label = "state", .preset = state_values,
};
static struct prom_metric agents_offline = {
	.name = "tether_agents_offline", .kind = PROM_GAUGE,
	.help = "Agents not revoked whose tunnel no replica holds, last seen longer ago than over; counted in the store every --census-interval (30 s), the same on every replica.",
	.label = "over", .preset = over_values,
};
static struct prom_metric agents_by_version = {
	.name = "tether_agents_by_version", .kind = PROM_GAUGE,
	.help = "Agents not revoked by the release their last HELLO named (unknown: none); counted in the store every --census-interval (30 s), the same on every replica.",
	.label = "version", .preset = no_values,
};
static struct prom_metric tunnels = {
	.name = "tether_tunnels_connected", .kind = PROM_GAUGE,
	.help = "Agent tunnels authenticated and connected.",
};
static struct prom_metric handshaking = {
	.name = "tether_handshakes_in_progress", .kind = PROM_GAUGE,
	.help = "Tunnels connected but not yet authenticated.",
};
static struct prom_metric tls_handshaking = {
	.name = "tether_tls_handshakes_in_progress", .kind = PROM_GAUGE,
	.help = "TLS handshakes under way (at most --max-tls-handshakes).",
};
static struct prom_metric tls_waiting = {
	.name = "tether_tls_waiting", .kind = PROM_GAUGE,
	.help = "Accepted connections waiting for a TLS handshake slot.",
};
static struct prom_metric tls_shed = {
	.name = "tether_tls_shed_total", .kind = PROM_COUNTER,
	.help = "Connections closed unread: their client closed while waiting for a TLS slot, they waited over half of --handshake-timeout, or the queue held what it finishes in that time (closed at accept).",
};
static struct prom_metric tls_shed_accept = {
	.name = "tether_tls_shed_at_accept_total", .kind = PROM_COUNTER,
	.help = "Of tether_tls_shed_total, the connections closed at accept: the TLS queue held what its handshakes finish in half of --handshake-timeout.",
};
static struct prom_metric loop_handshakes = {
	.name = "tether_loop_tls_handshakes_total", .kind = PROM_COUNTER,
	.help = "TLS handshakes finished by each event loop (--workers); each loop runs its share, and the connection then lives where its route lands it (--landing any) or on loop 0 (--landing zero).",
	.label = "loop", .preset = no_values,
};
static struct prom_metric loop_cpu = {
	.name = "tether_loop_cpu_seconds_total", .kind = PROM_COUNTER,
	.help = "CPU time of each event loop's thread (--workers; with --landing zero loop 0 carries every tunnel, stream and route).",
	.label = "loop", .preset = no_values,
};
static struct prom_metric loop_tunnels = {
	.name = "tether_loop_tunnels", .kind = PROM_GAUGE,
	.help = "Authenticated agent tunnels each event loop carries (--workers).",
	.label = "loop", .preset = no_values,
};
static struct prom_metric loop_conns = {
	.name = "tether_loop_connections", .kind = PROM_GAUGE,
	.help = "HTTP connections each event loop holds (--workers), those sent there not yet arrived included, and dials (tetherctl connect, forward) until they end; a tunnel or a replica's link leaves the count at its upgrade. The client side --landing weighs.",
	.label = "loop", .preset = no_values,
};
static struct prom_metric loop_tunnel_side = {
	.name = "tether_loop_tunnel_side_connections", .kind = PROM_GAUGE,
	.help = "Operator connections (/k8s, and dials until they end), on any loop, whose streams' tunnel side runs on each event loop (their agent's tunnel is there), as --landing any weighed them when they landed (docs/0040 step 8).",
	.label = "loop", .preset = no_values,
};
static struct prom_metric link_streams = {
	.name = "tether_loop_link_streams_total", .kind = PROM_COUNTER,
	.help = "Streams opened from one event loop to another through their in-process link (docs/0040): an operator connection on loop from reaching a tunnel on loop to.",
	.label = "from", .label2 = "to", .preset = no_values,
};
static struct prom_metric link_bytes = {
	.name = "tether_loop_link_bytes_total", .kind = PROM_COUNTER,
	.help = "Stream payload bytes carried from one event loop to another through their in-process link (docs/0040).",
	.label = "from", .label2 = "to", .preset = no_values,
};
static struct prom_metric store_up = {
	.name = "tether_store_up", .kind = PROM_GAUGE,
	.help = "1 while this replica reaches its store (its /readyz is not 503 for the store), else 0.",
};
static struct prom_metric cert_expiry = {
	.name = "tether_certificate_expiry_timestamp_seconds", .kind = PROM_GAUGE,
	.help = "When the certificate the gateway serves with (server), the replicas' peer credential (peer) and their CA (ca) expire, in Unix seconds (notAfter), as served now (read at start, again on SIGHUP and after a renewal).",
	.label = "cert", .preset = no_values,
};
static struct prom_metric handshakes = {
	.name = "tether_handshakes_total", .kind = PROM_COUNTER,
	.help = "Tunnel handshakes ended, by result (ok or the refusal's code).",
	.label = "result", .preset = ok_values,
};
static struct prom_metric handshake_waits = {
	.name = "tether_handshake_waits_total", .kind = PROM_COUNTER,
	.help = "Tunnel upgrades that waited for a handshake slot (past --max-handshakes, at most --handshake-wait), by how the wait ended: served (a slot freed), expired (503 with Retry-After), abandoned (the client left), stopped (the gateway stopped).",
	.label = "result", .preset = wait_values,
};
static struct prom_metric registrations = {
	.name = "tether_registrations_total", .kind = PROM_COUNTER,
	.help = "Registrations with an import token, by result.",
	.label = "result", .preset = ok_values,
};
static struct prom_metric k8s_requests = {
	.name = "tether_k8s_requests_total", .kind = PROM_COUNTER,
	.help = "Requests to /k8s answered, by HTTP status code.",
	.label = "code", .preset = no_values,
};
static struct prom_metric k8s_duration = {
	.name = "tether_k8s_request_duration_seconds", .kind = PROM_HISTOGRAM,
	.help = "Time from a /k8s request's head to the end of its answer.",
	.bounds = k8s_bounds, .nbounds = sizeof(k8s_bounds) / sizeof(k8s_bounds[0]),
};
static struct prom_metric ca_rotation = {
	.name = "tether_ca_rotation_phase", .kind = PROM_GAUGE,
	.help = "The CA rotation this replica serves, as its data directory says at start and at SIGHUP: 0 none, 1 overlap (agents are sent the new CA, clients of either CA verify), 2 final (finished; agents still told).",
};
static struct prom_metric agents_new_ca = {
	.name = "tether_agents_holding_new_ca", .kind = PROM_GAUGE,
	.help = "Agents not revoked that said they hold the CA this replica hands out (during a rotation, the new one); counted in the store every --census-interval (30 s).",
};
static struct prom_metric store_duration = {
	.name = "tether_store_duration_seconds", .kind = PROM_HISTOGRAM,
	.help = "Time of each store call, by call.",
	.label = "op", .preset = no_values,
	.bounds = store_bounds, .nbounds = sizeof(store_bounds) / sizeof(store_bounds[0]),
};

static struct prom_metric *const families[] = {
	&build_info, &agents, &agents_offline, &agents_by_version, &agents_new_ca,
	&ca_rotation, &tunnels, &handshaking, &tls_handshaking, &tls_waiting,
	&tls_shed, &tls_shed_accept, &loop_handshakes, &loop_cpu, &loop_tunnels,
	&loop_conns, &loop_tunnel_side,
	&link_streams, &link_bytes, &store_up, &cert_expiry, &handshakes, &handshake_waits,
	&registrations,
	&k8s_requests, &k8s_duration, &store_duration,
};

void
metrics_init(void)
{
	prom_set(&build_info, TETHER_VERSION, 1);
	for (size_t i = 0; i < AGENT_STATE_ENTRIES; i++)
		prom_set(&agents, agent_state_name((enum agent_state)i), 0);
}

void
metrics_agent_moved(int from, int to)
{
	if (from == to)
		return;
	pthread_mutex_lock(&metrics_mu);
	if (from >= 0 && from < AGENT_STATE_ENTRIES)
		prom_add(&agents, agent_state_name((enum agent_state)from), -1);
	if (to >= 0 && to < AGENT_STATE_ENTRIES)
		prom_add(&agents, agent_state_name((enum agent_state)to), 1);
	pthread_mutex_unlock(&metrics_mu);
}

void
metrics_lock(void)
{
	pthread_mutex_lock(&metrics_mu);
}

void
metrics_unlock(void)
{
	pthread_mutex_unlock(&metrics_mu);
}

void
metrics_handshake(int registering, const char *result)
{
	pthread_mutex_lock(&metrics_mu);
	prom_inc(registering ? &registrations : &handshakes, result);
	pthread_mutex_unlock(&metrics_mu);
}

void
metrics_handshake_wait(const char *result)
{
	pthread_mutex_lock(&metrics_mu);
	prom_inc(&handshake_waits, result);
	pthread_mutex_unlock(&metrics_mu);
}

/*
 * The /k8s answers, counted per thread (per loop): each loop writes its own
 * counts with relaxed atomic stores (one writer, no lock, no snprintf, no
 * cache line shared with another loop); the scrape folds what each
 * thread counted since the last one into tether_k8s_requests_total and
 * tether_k8s_request_duration_seconds (k8s_fold, under metrics_mu).  The
 * mutex and the snprintf per answer were ~1.5k of a /k8s request's
 * ~100k instructions, and a lock every loop took per request.
 */
#define K8S_CODES 600		/* 100..599; 0 for any other status */
#define K8S_NBOUNDS (sizeof(k8s_bounds) / sizeof(k8s_bounds[0]))

struct k8s_counts {
	/* Written by the owning thread only; read by the scrape. */
	_Atomic uint64_t code[K8S_CODES];
	_Atomic uint64_t bucket[K8S_NBOUNDS + 1];	/* the last: above all */
	_Atomic uint64_t sum_ns;
	/* What k8s_fold has folded so far (under metrics_mu). */
	uint64_t folded_code[K8S_CODES];
	uint64_t folded_bucket[K8S_NBOUNDS + 1];
	uint64_t folded_sum_ns;
	struct k8s_counts *next;	/* k8s_threads' list (under metrics_mu) */
};

/* Every thread's counts, kept to the end of the process (a stopped
 * loop's answers stay counted). */
static struct k8s_counts *k8s_threads;
static _Thread_local struct k8s_counts *k8s_mine;

/* This thread's counts, made and listed on its first answer; NULL if out
 * of memory. */
static struct k8s_counts *
k8s_counts_mine(void)
{
	struct k8s_counts *c = k8s_mine;

	if (c != NULL)
		return c;
	if ((c = calloc(1, sizeof(*c))) == NULL)
		return NULL;
	pthread_mutex_lock(&metrics_mu);
	c->next = k8s_threads;
	k8s_threads = c;
	pthread_mutex_unlock(&metrics_mu);
	return k8s_mine = c;
}

/* One more in a counter only this thread writes. */
static void
bump(_Atomic uint64_t *v, uint64_t n)
{
	atomic_store_explicit(v, atomic_load_explicit(v, memory_order_relaxed) + n,
	    memory_order_relaxed);
}

void
metrics_k8s_request(int status, double seconds)
{
	struct k8s_counts *c = k8s_counts_mine();
	size_t b = 0;

	if (c == NULL)
		return;		/* out of memory: this answer goes uncounted */
	bump(&c->code[status >= 100 && status < K8S_CODES ? status : 0], 1);
	while (b < K8S_NBOUNDS && seconds > k8s_bounds[b])
		b++;
	bump(&c->bucket[b], 1);
	bump(&c->sum_ns, seconds > 0 ? (uint64_t)(seconds * 1e9 + 0.5) : 0);
}

/* What one thread counted since the last fold, into the families. */
static void
k8s_fold_one(struct k8s_counts *c)
{
	uint64_t bucket[K8S_NBOUNDS + 1], count = 0, now, sum;
	char code[8];

	for (size_t i = 0; i < K8S_CODES; i++) {
		now = atomic_load_explicit(&c->code[i], memory_order_relaxed);
		if (now == c->folded_code[i])
			continue;
		snprintf(code, sizeof(code), "%zu", i);
		prom_add(&k8s_requests, code, (double)(now - c->folded_code[i]));
		c->folded_code[i] = now;
	}
	for (size_t b = 0; b <= K8S_NBOUNDS; b++) {
		now = atomic_load_explicit(&c->bucket[b], memory_order_relaxed);
		bucket[b] = now - c->folded_bucket[b];
		count += bucket[b];
		c->folded_bucket[b] = now;
	}
	now = atomic_load_explicit(&c->sum_ns, memory_order_relaxed);
	sum = now - c->folded_sum_ns;
	c->folded_sum_ns = now;
	if (count > 0)
		prom_observe_counts(&k8s_duration, NULL, bucket, count, (double)sum / 1e9);
}

/* Every thread's new /k8s counts into the families.  Under metrics_mu. */
static void
k8s_fold(void)
{
	for (struct k8s_counts *c = k8s_threads; c != NULL; c = c->next)
		k8s_fold_one(c);
}

void
metrics_store_timed(void *arg, const char *op, double seconds)
{
	(void)arg;
	pthread_mutex_lock(&metrics_mu);
	prom_observe(&store_duration, op, seconds);
	pthread_mutex_unlock(&metrics_mu);
}

void
metrics_agents_by_version(const char *const *versions, const int64_t *counts,
    size_t n)
{
	prom_reset(&agents_by_version);
	for (size_t i = 0; i < n; i++)
		prom_set(&agents_by_version, versions[i][0] != '\0' ? versions[i] :
		    "unknown", (double)counts[i]);
}

void
metrics_tls_admission(uint32_t in_progress, uint32_t waiting, uint64_t shed)
{
	prom_set(&tls_handshaking, NULL, (double)in_progress);
	prom_set(&tls_waiting, NULL, (double)waiting);
	prom_set(&tls_shed, NULL, (double)shed);
}

void
metrics_tls_shed_at_accept(uint64_t shed)
{
	prom_set(&tls_shed_accept, NULL, (double)shed);
}

void
metrics_loop(unsigned loop, uint64_t tls_handshakes, double cpu_seconds)
{
	char name[16];

	snprintf(name, sizeof(name), "%u", loop);
	prom_set(&loop_handshakes, name, (double)tls_handshakes);
	prom_set(&loop_cpu, name, cpu_seconds);
}

void
metrics_loop_tunnels(unsigned loop, size_t n)
{
	char name[16];

	snprintf(name, sizeof(name), "%u", loop);
	prom_set(&loop_tunnels, name, (double)n);
}

void
metrics_loop_weights(unsigned loop, size_t connections, size_t tunnel_side)
{
	char name[16];

	snprintf(name, sizeof(name), "%u", loop);
	prom_set(&loop_conns, name, (double)connections);
	prom_set(&loop_tunnel_side, name, (double)tunnel_side);
}

void
metrics_loop_link(unsigned from, unsigned to, uint64_t streams, uint64_t bytes)
{
	char name[24];

	snprintf(name, sizeof(name), "%u,%u", from, to);
	prom_set(&link_streams, name, (double)streams);
	prom_set(&link_bytes, name, (double)bytes);
}

void
metrics_agents_offline(const char *over, int64_t n)
{
	prom_set(&agents_offline, over, (double)n);
}

void
metrics_store_up(int up)
{
	prom_set(&store_up, NULL, up ? 1 : 0);
}

/* The notAfter of the first certificate in the PEM file at path (Unix s),
 * or -1 with err. */
static int64_t
cert_not_after(const char *path, char *err, size_t errlen)
{
	FILE *f;
	X509 *x;
	struct tm tm;
	time_t t;

	if ((f = fopen(path, "r")) == NULL) {
		snprintf(err, errlen, "%s: cannot open", path);
		return -1;
	}
	x = PEM_read_X509(f, NULL, NULL, NULL);
	fclose(f);
	if (x == NULL) {
		snprintf(err, errlen, "%s: not a PEM certificate", path);
		return -1;
	}
	if (ASN1_TIME_to_tm(X509_get0_notAfter(x), &tm) != 1 ||
	    (t = timegm(&tm)) == (time_t)-1) {
		X509_free(x);
		snprintf(err, errlen, "%s: its notAfter cannot be read", path);
		return -1;
	}
	X509_free(x);
	return (int64_t)t;
}

int
metrics_certificates(const char *server_pem, const char *ca_pem, char *err,
    size_t errlen)
{
	const char *paths[2] = { server_pem, ca_pem };
	const char *names[2] = { "server", "ca" };
	char why[2][320];
	int64_t t;
	int failed = -1;

	for (int i = 0; i < 2; i++) {
		if ((t = cert_not_after(paths[i], why[i], sizeof(why[i]))) < 0) {
			if (failed < 0)
				failed = i;
			continue;
		}
		prom_set(&cert_expiry, names[i], (double)t);
	}
	if (failed < 0)
		return 0;
	snprintf(err, errlen, "%s", why[failed]);
	return -1;
}

void
metrics_server_certificate(int64_t not_after)
{
	prom_set(&cert_expiry, "server", (double)not_after);
}

void
metrics_ca_certificate(int64_t not_after)
{
	prom_set(&cert_expiry, "ca", (double)not_after);
}

void
metrics_ca_rotation(int phase)
{
	prom_set(&ca_rotation, NULL, (double)phase);
}

void
metrics_agents_holding_new_ca(int64_t n)
{
	prom_set(&agents_new_ca, NULL, (double)n);
}

void
metrics_peer_certificate(int64_t not_after)
{
	prom_set(&cert_expiry, "peer", (double)not_after);
}

size_t
metrics_families(struct prom_metric *const **out, size_t tunnels_now,
    size_t handshakes_now)
{
	prom_set(&tunnels, NULL, (double)tunnels_now);
	prom_set(&handshaking, NULL, (double)handshakes_now);
	k8s_fold();
	*out = families;
	return sizeof(families) / sizeof(families[0]);
}
