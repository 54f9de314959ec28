/*
 * ca.h: the gateway's certificate authority and the CA checksum.
 *
 * `tether-gateway init` creates a self-signed CA (ECDSA P-256, 10 years) and a
 * server certificate it signs (ECDSA P-256, 2 years, serverAuth, subjectAltName
 * = every given hostname plus localhost and 127.0.0.1; a name that parses as
 * an IPv4/IPv6 address becomes an IP SAN).  ECDSA keeps reconnect storms'
 * TLS handshakes cheap.
 *
 * The CA checksum nodes pin at join time is "sha256:" + lowercase hex of the
 * SHA-256 of the CA certificate's DER encoding.
 */
#ifndef TETHER_CA_H
#define TETHER_CA_H

#include <stddef.h>

#define CA_CHECKSUM_MAX 72 /* "sha256:" + 64 hex + NUL */

/*
 * The replicas' peer credential (peer.crt, peer.key; docs/0030): issued by
 * the CA to CN CA_PEER_CN with extendedKeyUsage clientAuth alone.  It is
 * what a replica proves to another one (tlspeer.h); the server certificate
 * (serverAuth, CN tether-gateway) is never one, so server.key alone opens
 * no peer link.
 */
#define CA_PEER_CN "tether-replica"

/*
 * Writes ca.crt, ca.key, server.crt, server.key, peer.crt, peer.key into
 * dir (which must exist); keys 0600, certificates 0644, each atomically.
 * Returns 0 or -1 with err.
 */
int ca_create(const char *dir, const char *const *hostnames, size_t nhostnames,
    char *err, size_t errlen);

/* What identifies a certificate to an operator. */
struct ca_cert_info {
	char serial[48];        /* hex, uppercase, as openssl x509 -serial says */
	long long not_after;    /* Unix seconds */
};

/*
 * `tether-gateway cert renew`: signs a new server certificate for dir's
 * server.key (kept: its public key is what the certificate names, and
 * what replicas recognise each other by, tlspeer.h) with dir's ca.crt and
 * ca.key: a new serial, valid from an hour ago for days days, the same
 * subject, subjectAltName and usages as the server.crt in dir, which must
 * be one the CA issued for that key.  Writes server.crt atomically (0644)
 * and its identity into *out.  Returns 0, or -1 with err naming the file
 * and what is wrong with it (missing ca.key: where to run the command);
 * on failure dir is unchanged.  Cost: file reads, one ECDSA signature, an
 * fsynced write: run it off any event loop.
 */
int ca_renew_server(const char *dir, long days, struct ca_cert_info *out,
    char *err, size_t errlen);

/*
 * `cert renew`, the peer credential: a new key and a certificate for it
 * (CA_PEER_CN, clientAuth, days days) from dir's ca.crt and ca.key,
 * written as peer.key (0600) then peer.crt (0644), each atomically;
 * creates them where there were none (a data directory from before).
 * Fills *out.  Returns 0, or -1 with err (dir unchanged).  Cost: a key
 * generation, a signature, two fsynced writes: off any event loop.
 */
int ca_renew_peer(const char *dir, long days, struct ca_cert_info *out,
    char *err, size_t errlen);

/* The identity of the first certificate in the PEM file at path.  0, or
 * -1 with err.  Reads a file. */
int ca_cert_file_info(const char *path, struct ca_cert_info *out, char *err,
    size_t errlen);

struct x509_st;
/* 1 if x is a peer credential (CA_PEER_CN, clientAuth alone), else 0.
 * Says nothing of who issued it: the caller verifies the chain. */
int ca_is_peer_cert(struct x509_st *x);

/*
 * The rule a CA rotation's pair meets (docs/0033), one place for the
 * replica reading its files and the agent reading SETTINGS: next is a
 * self-signed CA certificate; cross is a CA certificate with next's
 * subject and public key, issued by ca (issuer name and signature).
 * Returns NULL when it holds, else why not, a static string naming them
 * "next", "cross" and "the trusted CA".  Judges no dates (the caller
 * decides whether expiry matters).  Clears OpenSSL's error queue.
 * Cost: three signature checks.
 */
const char *ca_cross_why_not(struct x509_st *ca, struct x509_st *next,
    struct x509_st *cross);

/*
 * Checks that leaf, about to be served, was issued by the CA certificate in
 * the PEM file ca_path and is valid now, and fills *out.  Returns 0, or -1
 * with err saying what is wrong.
 */
int ca_server_check(struct x509_st *leaf, const char *ca_path,
    struct ca_cert_info *out, char *err, size_t errlen);

/* Checksum of a certificate's DER encoding (der, len bytes).  0, or -1
 * if SHA-256 failed. */
int ca_checksum_der(const unsigned char *der, size_t len,
    char out[CA_CHECKSUM_MAX]);

/* Checksum of the first certificate in a PEM buffer.  Returns 0 or -1. */
int ca_checksum_pem(const char *pem, size_t len, char out[CA_CHECKSUM_MAX],
    char *err, size_t errlen);

/* Checksum of the certificate in a PEM file.  Returns 0 or -1 with err. */
int ca_checksum_file(const char *path, char out[CA_CHECKSUM_MAX], char *err,
    size_t errlen);

/* Checks that s looks like "sha256:<64 lowercase hex>".  Returns 0 or -1. */
int ca_checksum_valid(const char *s);

#endif
