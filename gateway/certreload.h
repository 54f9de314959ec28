/*
 * certreload.h: the server certificate a running gateway serves, loaded
 * again without a restart (docs/0030-certificate-renewal.md).
 *
 * SIGHUP (or a renewal) starts a job on a thread of its own: it reads
 * server.crt and server.key from the data directory into new TLS contexts
 * and checks them (the key is the certificate's, ca.crt issued it, it is
 * valid now).  Back on the loop, a good result becomes what new handshakes
 * get (server_tls_use) while every connection already up keeps its own;
 * a bad one is logged and the old certificate kept.  Either way one line
 * says which certificate is served (serial, not_after) or why the old one
 * stayed.  The metric tether_certificate_expiry_timestamp_seconds{cert=
 * "server"} and the face's cert (core/face.h: /readyz, /v1/status) follow.
 *
 * The same job (and the start) reads the CA rotation's phase from the
 * files (auth/carotate.h): in an overlap server.crt must be the new CA's.
 * With a good result the face's ca_rotation becomes what was read, and,
 * unless --public-ca fixed it, its ca_pem and ca_checksum the CA handed
 * out (the new one from the overlap on), published in one swap; tether_ca_rotation_phase and
 * {cert="ca"} follow; when the phase or the new CA changed, one line
 * ("CA rotation", phase=...) says so and every agent held here is sent
 * SETTINGS (agents/settings.h).  Files the rotation cannot be read from
 * fail the job like a bad certificate: nothing changes.
 *
 * Renewal by itself: every hour (and at start) the served certificate's
 * notAfter is compared with --cert-renew-before; when it is that close,
 * the job first renews server.crt as `tether-gateway cert renew` does
 * (ca_renew_server, which needs ca.key in the data directory), then loads
 * it as above; not during a CA rotation's overlap (said once: `cert
 * renew` refuses then).  Nothing of it runs on the loop but the swap.
 */
#ifndef TETHER_CERTRELOAD_H
#define TETHER_CERTRELOAD_H

struct gateway;
struct certreload;

/*
 * After server_start: records the certificate served now in the face and
 * the metric, and arms the renewal check (renew_before_days 0: none).
 * Returns the state (freed by certreload_free), or NULL after saying why.
 */
struct certreload *certreload_start(struct gateway *gw,
    unsigned renew_before_days);

/* Loads the data directory's certificate again, as said above; why
 * ("SIGHUP") goes into the log line.  A request made while a job runs
 * runs once more when it ends.  Loop only. */
void certreload_request(struct certreload *cr, const char *why);

/* Waits for a job under way (a few file reads), frees what it made and cr.
 * NULL is fine.  Before the loop is freed. */
void certreload_free(struct certreload *cr);

#endif
