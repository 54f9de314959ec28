/*
 * certreload.c: the served certificate and the CA rotation loaded again
 * on SIGHUP, the certificate renewed by itself before it expires (see
 * certreload.h).  One job at a time, on a thread of its own that reads
 * files, signs and builds TLS contexts; it hands its result back through
 * a pipe the loop watches, and only the loop touches the gateway.
 */
#include "certreload.h"

#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <event2/event.h>
#include <openssl/ssl.h>

#include "ca.h"
#include "carotate.h"
#include "face.h"
#include "fileio.h"
#include "gateway.h"
#include "joindoc.h"
#include "log.h"
#include "metrics.h"
#include "peer_link.h"
#include "runtime.h"
#include "server.h"
#include "settings.h"

/* How often the served certificate's notAfter is compared with
 * --cert-renew-before. */
#define RENEW_CHECK_MS (60 * 60 * 1000)
/* What a renewal by itself issues: init's lifetime. */
#define RENEW_DAYS 730
#define DAY_S 86400

/* What the data directory says of its CA: read by the job's thread (and
 * at start), used on the loop (ca_use). */
struct ca_read {
	struct ca_rotation *rot;      /* malloc'd; NULL until read */
	char *ca_pem;                 /* the CA handed out (/v1/ca, join
	                               * documents, kubeconfigs); NULL: keep
	                               * gw's (--public-ca) */
	size_t ca_pem_len;
	char ca_checksum[CA_CHECKSUM_MAX];
};

/* One job's input and output; the thread owns it from start to its byte
 * on the pipe, the loop before and after. */
struct job {
	char dir[4096];
	int ca_fixed;                 /* --public-ca: do not read ca_pem */
	struct ca_read ca;
	int renew;                    /* renew server.crt first */
	int peer;                     /* build --peer-listen's context too */
	SSL_CTX *main, *peer_ctx;     /* made by the thread; NULL on failure */
	struct ca_cert_info info;     /* the new certificate's */
	int renewed;                  /* renew asked and done */
	char err[600];                /* why it failed ("" when it did not) */
	char peer_err[400];           /* why peer.crt was not renewed with it */
	struct ca_cert_info peer_info; /* peer.crt's, when peer_read */
	int peer_read;
};

struct certreload {
	struct gateway *gw;
	unsigned renew_before_days;
	int pipe[2];
	struct event *done;           /* pipe[0] readable: a job ended */
	struct event *check;          /* the renewal check's timer */
	pthread_t thread;
	int running;                  /* a job is out */
	struct job job;
	char why[32];                 /* the running job's reason */
	char again[32];               /* asked while one ran: run once more */
	int no_ca_key_said;           /* the missing ca.key was logged once */
	int rotation_said;            /* ... and a renewal put off by a CA
	                               * rotation */
};

/* ---- the thread ---- */

/* Frees what r holds; r itself is kept, emptied. */
static void
ca_read_clear(struct ca_read *r)
{
	free(r->rot);
	free(r->ca_pem);
	memset(r, 0, sizeof(*r));
}

/*
 * Reads dir's CA rotation (carotate.h) into r, the path of the CA that
 * issues server.crt now into issuer (ca.next.crt in an overlap, else
 * ca.crt), and, unless fixed, the CA handed out: the new one from the
 * overlap on.  0, or -1 with err.  Files only: the thread, or start.
 */
static int
ca_read(const char *dir, int fixed, struct ca_read *r, char *issuer,
    size_t issuerlen, char *err, size_t errlen)
{
	char why[400];

	if ((r->rot = malloc(sizeof(*r->rot))) == NULL) {
		snprintf(err, errlen, "out of memory");
		return -1;
	}
	if (ca_rotation_read(dir, r->rot, why, sizeof(why)) != 0) {
		snprintf(err, errlen, "the CA rotation's files: %s", why);
		return -1;
	}
	snprintf(issuer, issuerlen, "%s/%s", dir,
	    r->rot->phase == CA_PHASE_OVERLAP ? "ca.next.crt" : "ca.crt");
	if (fixed)
		return 0;
	if (file_read_all(issuer, 65536, &r->ca_pem, &r->ca_pem_len, err,
	    errlen) != 0)
		return -1;
	return ca_checksum_pem(r->ca_pem, r->ca_pem_len, r->ca_checksum, err,
	    errlen);
}

static void
job_run(struct job *j)
{
	char ca[4200], why[400];
	struct ca_cert_info peer;

	j->err[0] = '\0';
	if (j->renew) {
		if (ca_renew_server(j->dir, RENEW_DAYS, &j->info, why,
		    sizeof(why)) != 0) {
			snprintf(j->err, sizeof(j->err), "renewal failed: %s", why);
			return;
		}
		j->renewed = 1;
		/* The peer credential was issued with it and expires with it. */
		if (ca_renew_peer(j->dir, RENEW_DAYS, &peer, why, sizeof(why)) != 0)
			snprintf(j->peer_err, sizeof(j->peer_err), "%s", why);
	}
	if ((j->main = server_tls_context_new(j->dir, 0, why, sizeof(why))) == NULL ||
	    (j->peer && (j->peer_ctx = server_tls_context_new(j->dir, 1, why,
	    sizeof(why))) == NULL)) {
		snprintf(j->err, sizeof(j->err), "%s", why);
		return;
	}
	if (ca_read(j->dir, j->ca_fixed, &j->ca, ca, sizeof(ca), why,
	    sizeof(why)) != 0) {
		snprintf(j->err, sizeof(j->err), "%s", why);
		return;
	}
	if (ca_server_check(SSL_CTX_get0_certificate(j->main), ca, &j->info, why,
	    sizeof(why)) != 0)
		snprintf(j->err, sizeof(j->err), "%s/server.crt: %s", j->dir, why);
	snprintf(ca, sizeof(ca), "%s/peer.crt", j->dir);
	j->peer_read = ca_cert_file_info(ca, &j->peer_info, why, sizeof(why)) == 0;
}

static void *
job_main(void *arg)
{
	struct certreload *cr = arg;
	char one = 1;

	job_run(&cr->job);
	/* The loop reads it; a pipe this empty never blocks a one-byte write. */
	if (write(cr->pipe[1], &one, 1) != 1)
		abort();
	return NULL;
}

/* ---- the loop ---- */

static void
job_clear(struct job *j)
{
	SSL_CTX_free(j->main);
	SSL_CTX_free(j->peer_ctx);
	j->main = j->peer_ctx = NULL;
	ca_read_clear(&j->ca);
}

/* r (read just now) becomes gw's: the rotation, the CA handed out, the
 * metric; agents are told when the phase or the new CA changed. */
static void
ca_use(struct gateway *gw, struct ca_read *r)
{
	const struct ca_rotation *was = gw_face_now(gw)->ca_rotation;
	bool changed = was == NULL ? r->rot->phase != CA_PHASE_NONE :
	    was->phase != r->rot->phase ||
	    strcmp(was->next_checksum, r->rot->next_checksum) != 0;
	struct gw_face *f = gw_face_edit(gw);
	const struct gw_face *now;

	if (f == NULL) {
		error("out of memory: the CA rotation read is not used");
		return;
	}
	free(f->ca_rotation);
	f->ca_rotation = r->rot;
	r->rot = NULL;
	if (r->ca_pem != NULL) {
		free(f->ca_pem);
		f->ca_pem = r->ca_pem;
		f->ca_pem_len = r->ca_pem_len;
		memcpy(f->ca_checksum, r->ca_checksum, sizeof(f->ca_checksum));
		r->ca_pem = NULL;
	}
	/* Published whole: no reader sees a CA with another's checksum. */
	gw_face_publish(gw, f);
	now = gw_face_now(gw);
	metrics_ca_rotation((int)now->ca_rotation->phase);
	metrics_ca_certificate((int64_t)now->ca_rotation->current_not_after);
	if (!changed)
		return;
	info("CA rotation", KV_S("phase", ca_phase_name(now->ca_rotation->phase)),
	    KV_S("ca", now->ca_rotation->current_checksum),
	    KV_S("new_ca", now->ca_rotation->next_checksum),
	    KV_S("handed_out", now->ca_checksum),
	    KV_U("agents_told", settings_tell_all(gw)));
}

/* The served certificate is now info's: the face's cert and the metric. */
static void
served(struct gateway *gw, const struct ca_cert_info *info)
{
	struct gw_face *f = gw_face_edit(gw);

	if (f != NULL) {
		f->cert = *info;
		gw_face_publish(gw, f);
	} else {
		error("out of memory: /readyz and the status page keep naming the "
		    "old server certificate", KV_S("serial", info->serial));
	}
	metrics_server_certificate((int64_t)info->not_after);
}

static void
job_start(struct certreload *cr, const char *why, int renew)
{
	struct job *j = &cr->job;

	memset(j, 0, sizeof(*j));
	snprintf(j->dir, sizeof(j->dir), "%s", cr->gw->data_dir);
	j->ca_fixed = cr->gw->ca_pem_fixed;
	j->renew = renew;
	j->peer = server_mtls_port(cr->gw) >= 0;
	snprintf(cr->why, sizeof(cr->why), "%s", why);
	if (pthread_create(&cr->thread, NULL, job_main, cr) != 0) {
		error("cannot start loading the certificate: still serving the "
		    "old one", KV_S("reason", why), KV_S("err", "no thread"));
		return;
	}
	cr->running = 1;
}

/* The job's result, logged and (good) served. */
static void
job_done(evutil_socket_t fd, short what, void *arg)
{
	struct certreload *cr = arg;
	struct job *j = &cr->job;
	char one, after[32];

	if (read(fd, &one, 1) != 1)
		return;
	pthread_join(cr->thread, NULL);
	cr->running = 0;
	if (j->err[0] != '\0') {
		rfc3339_format((int64_t)gw_face_now(cr->gw)->cert.not_after, after);
		error("kept the old server certificate: the new one cannot be served",
		    KV_S("reason", cr->why), KV_S("err", j->err),
		    KV_S("serial", gw_face_now(cr->gw)->cert.serial), KV_S("not_after", after));
	} else {
		server_tls_use(cr->gw, j->main, j->peer_ctx);
		j->main = j->peer_ctx = NULL;
		peer_link_tls_renewed(cr->gw);
		served(cr->gw, &j->info);
		ca_use(cr->gw, &j->ca);
		rfc3339_format((int64_t)j->info.not_after, after);
		if (j->renewed)
			info("server certificate renewed, now serving it",
			    KV_S("reason", cr->why), KV_S("serial", j->info.serial),
			    KV_S("not_after", after));
		else
			info("now serving the data directory's server certificate",
			    KV_S("reason", cr->why), KV_S("serial", j->info.serial),
			    KV_S("not_after", after));
	}
	if (j->peer_err[0] != '\0')
		error("the peer credential was not renewed with the server "
		    "certificate", KV_S("err", j->peer_err));
	if (j->peer_read)
		metrics_peer_certificate((int64_t)j->peer_info.not_after);
	job_clear(j);
	if (cr->again[0] != '\0') {
		char why[32];

		snprintf(why, sizeof(why), "%s", cr->again);
		cr->again[0] = '\0';
		job_start(cr, why, 0);
	}
}

void
certreload_request(struct certreload *cr, const char *why)
{
	if (cr == NULL)
		return;
	if (cr->running) {
		snprintf(cr->again, sizeof(cr->again), "%s", why);
		return;
	}
	job_start(cr, why, 0);
}

/* Whether the data directory holds the CA key renewal needs (said once
 * when it does not).  A stat: cheap enough for an hourly timer. */
static int
can_renew(struct certreload *cr)
{
	char path[4200];

	snprintf(path, sizeof(path), "%s/ca.key", cr->gw->data_dir);
	if (access(path, R_OK) == 0)
		return 1;
	if (!cr->no_ca_key_said)
		warn("the server certificate expires soon and cannot be renewed "
		    "here: no ca.key in the data directory; run 'tether-gateway "
		    "cert renew' where it is", KV_S("serial", gw_face_now(cr->gw)->cert.serial));
	cr->no_ca_key_said = 1;
	return 0;
}

/* Whether a CA rotation's overlap is served (said once): the server
 * certificate is then the new CA's, which `cert renew` refuses to
 * replace; `ca rotate finish` ends it. */
static int
in_rotation(struct certreload *cr)
{
	const struct gw_face *face = gw_face_now(cr->gw);
	const struct ca_rotation *r = face->ca_rotation;

	if (r == NULL || r->phase != CA_PHASE_OVERLAP) {
		cr->rotation_said = 0;
		return 0;
	}
	if (!cr->rotation_said)
		warn("the server certificate expires soon but is not renewed "
		    "during a CA rotation: finish it ('tether-gateway ca rotate "
		    "finish'), then it is renewed", KV_S("serial", face->cert.serial));
	cr->rotation_said = 1;
	return 1;
}

static void
renew_check(evutil_socket_t fd, short what, void *arg)
{
	struct certreload *cr = arg;
	struct timeval tv = runtime_ms_timeval(RENEW_CHECK_MS);
	const struct gw_face *face = gw_face_now(cr->gw);
	long long left = face->cert.not_after - (long long)gateway_now();

	evtimer_add(cr->check, &tv);
	if (left > (long long)cr->renew_before_days * DAY_S || cr->running ||
	    in_rotation(cr) || !can_renew(cr))
		return;
	info("the server certificate expires within --cert-renew-before: "
	    "renewing it", KV_S("serial", face->cert.serial),
	    KV_I("days_left", left / DAY_S),
	    KV_U("renew_before_days", cr->renew_before_days));
	job_start(cr, "renewal", 1);
}

/* At start: peer.crt's expiry for the metric; a replica (one with a
 * --peer-url) without one is told how to get it (it cannot dial peers). */
static void
peer_seen(struct gateway *gw)
{
	struct ca_cert_info info;
	char path[4200], why[400];

	snprintf(path, sizeof(path), "%s/peer.crt", gw->data_dir);
	if (ca_cert_file_info(path, &info, why, sizeof(why)) == 0)
		metrics_peer_certificate((int64_t)info.not_after);
	else if (gw->peer_url[0] != '\0')
		warn("no peer credential: links to other replicas cannot be "
		    "dialed from here; run 'tether-gateway cert renew' where "
		    "ca.key is and copy peer.crt and peer.key here",
		    KV_S("err", why));
}

struct certreload *
certreload_start(struct gateway *gw, unsigned renew_before_days)
{
	struct certreload *cr = calloc(1, sizeof(*cr));
	char ca[4200], why[400];
	struct ca_cert_info cert;
	X509 *x = server_certificate(gw);

	if (cr == NULL) {
		error("out of memory");
		return NULL;
	}
	cr->gw = gw;
	cr->renew_before_days = renew_before_days;
	cr->pipe[0] = cr->pipe[1] = -1;
	if (pipe2(cr->pipe, O_CLOEXEC | O_NONBLOCK) != 0 ||
	    (cr->done = event_new(gw->base, cr->pipe[0], EV_READ | EV_PERSIST,
	    job_done, cr)) == NULL || event_add(cr->done, NULL) != 0 ||
	    (cr->check = evtimer_new(gw->base, renew_check, cr)) == NULL) {
		error("cannot watch for certificate reloads");
		certreload_free(cr);
		return NULL;
	}
	if (ca_read(gw->data_dir, gw->ca_pem_fixed, &cr->job.ca, ca, sizeof(ca),
	    why, sizeof(why)) != 0) {
		/* Served as before a rotation: ca.crt alone. */
		warn("the CA rotation's files cannot be read: serving as if there "
		    "were none", KV_S("err", why));
		ca_read_clear(&cr->job.ca);
		snprintf(ca, sizeof(ca), "%s/ca.crt", gw->data_dir);
	} else {
		ca_use(gw, &cr->job.ca);
		ca_read_clear(&cr->job.ca);
	}
	cert = gw_face_now(gw)->cert;
	if (x != NULL && ca_server_check(x, ca, &cert, why, sizeof(why)) != 0)
		warn("the server certificate served is not one to keep serving",
		    KV_S("serial", cert.serial), KV_S("err", why));
	if (x != NULL)
		served(gw, &cert);
	peer_seen(gw);
	if (renew_before_days > 0)
		renew_check(-1, 0, cr);
	return cr;
}

void
certreload_free(struct certreload *cr)
{
	if (cr == NULL)
		return;
	if (cr->running)
		pthread_join(cr->thread, NULL);
	job_clear(&cr->job);
	if (cr->done != NULL)
		event_free(cr->done);
	if (cr->check != NULL)
		event_free(cr->check);
	if (cr->pipe[0] >= 0)
		close(cr->pipe[0]);
	if (cr->pipe[1] >= 0)
		close(cr->pipe[1]);
	free(cr);
}
