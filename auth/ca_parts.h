/*
 * ca_parts.h: the pieces auth/ca.c builds and stores certificates with,
 * shared with auth/carotate.c (CA rotation) and nothing else: not part of
 * the auth layer's interface (ca.h and carotate.h are).
 *
 * Every function returns what it made (the caller frees it) or NULL / -1;
 * those taking err fill it with a reason naming the file.  None logs.
 */
#ifndef TETHER_CA_PARTS_H
#define TETHER_CA_PARTS_H

#include <stddef.h>

#include <openssl/evp.h>
#include <openssl/x509.h>

#include "ca.h"

#define CA_DAYS        (10 * 365)
#define SERVER_DAYS    (2 * 365)
#define PEER_DAYS      SERVER_DAYS
#define CERT_FILE_MAX  (1024 * 1024)

/* A fresh ECDSA P-256 key, or NULL. */
EVP_PKEY *ca_p256_generate(void);

/* A certificate skeleton: version 3, random serial, valid from an hour ago
 * for days days, subject CN cn, key's public key; no issuer, no
 * extensions, unsigned.  NULL on failure. */
X509 *ca_cert_skeleton(EVP_PKEY *key, const char *cn, long days);

/* Adds one extension in OpenSSL's config syntax (fixed strings only) to x,
 * issuer being what authorityKeyIdentifier names.  0 or -1. */
int ca_add_ext(X509 *x, X509 *issuer, int nid, const char *value);

/* A new self-signed CA certificate for cakey ("Tether CA <random hex>",
 * CA:TRUE, keyCertSign, CA_DAYS), or NULL. */
X509 *ca_root_new(EVP_PKEY *cakey);

/* A peer credential for key issued by ca (signed with cakey), or NULL. */
X509 *ca_peer_cert_new(EVP_PKEY *key, X509 *ca, EVP_PKEY *cakey, long days);

/* A server certificate with old's subject, subjectAltName and usages for
 * key, issued by ca with cakey, a new serial, days long; NULL with err. */
X509 *ca_server_cert_renewed(X509 *old, EVP_PKEY *key, X509 *ca,
    EVP_PKEY *cakey, long days, char *err, size_t errlen);

/* out = dir/name; -1 with err when it does not fit. */
int ca_join_path(char *out, size_t outlen, const char *dir, const char *name,
    char *err, size_t errlen);

/* dir/name written atomically: key as PKCS#8 PEM, 0600, its encoding
 * wiped; x as PEM, 0644.  0 or -1 with err. */
int ca_write_key(EVP_PKEY *key, const char *dir, const char *name, char *err,
    size_t errlen);
int ca_write_cert(X509 *x, const char *dir, const char *name, char *err,
    size_t errlen);

/* The first certificate / the private key of the PEM file at path (at
 * most CERT_FILE_MAX bytes, wiped after), or NULL with err. */
X509 *ca_cert_load(const char *path, char *err, size_t errlen);
EVP_PKEY *ca_key_load(const char *path, char *err, size_t errlen);

/* x's serial and notAfter into *out. */
void ca_cert_info_of(X509 *x, struct ca_cert_info *out);

#endif
