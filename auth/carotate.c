/*
 * carotate.c: CA rotation's files in the data directory (see carotate.h):
 * `ca rotate start` and `finish`, and the phase a serving replica reads.
 */
#include "carotate.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <openssl/bio.h>
#include <openssl/crypto.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>

#include "ca_parts.h"
#include "fileio.h"

#define F_CA       "ca.crt"
#define F_CA_KEY   "ca.key"
#define F_NEXT     "ca.next.crt"
#define F_NEXT_KEY "ca.next.key"
#define F_CROSS    "ca.cross.crt"
#define F_OLD      "ca.old.crt"
#define F_SERVER   "server.crt"
#define F_SERVER_KEY "server.key"
#define F_PEER     "peer.crt"
#define F_PEER_KEY "peer.key"

const char *
ca_phase_name(enum ca_phase phase)
{
	switch (phase) {
	case CA_PHASE_OVERLAP: return "overlap";
	case CA_PHASE_FINAL: return "final";
	case CA_PHASE_NONE: break;
	}
	return "none";
}

/* dir/name exists (a path too long counts as not). */
static int
present(const char *dir, const char *name)
{
	char path[4096], err[8];

	return ca_join_path(path, sizeof(path), dir, name, err, sizeof(err)) == 0 &&
	    file_exists(path);
}

/* The first certificate of dir/name, or NULL with err. */
static X509 *
load_cert(const char *dir, const char *name, char *err, size_t errlen)
{
	char path[4096];

	if (ca_join_path(path, sizeof(path), dir, name, err, errlen) != 0)
		return NULL;
	return ca_cert_load(path, err, errlen);
}

static EVP_PKEY *
load_key(const char *dir, const char *name, char *err, size_t errlen)
{
	char path[4096];

	if (ca_join_path(path, sizeof(path), dir, name, err, errlen) != 0)
		return NULL;
	return ca_key_load(path, err, errlen);
}

/* x's DER into buf (CA_DER_MAX) and its checksum.  0, or -1 with err. */
static int
cert_der(X509 *x, const char *name, unsigned char buf[CA_DER_MAX],
    size_t *len, char sum[CA_CHECKSUM_MAX], char *err, size_t errlen)
{
	int n = i2d_X509(x, NULL);
	unsigned char *p = buf;

	if (n <= 0 || n > CA_DER_MAX) {
		ERR_clear_error();
		snprintf(err, errlen, "%s: %s (at most %d bytes of DER)", name,
		    n <= 0 ? "cannot encode it" : "too large", CA_DER_MAX);
		return -1;
	}
	if (i2d_X509(x, &p) != n || ca_checksum_der(buf, (size_t)n, sum) != 0) {
		ERR_clear_error();
		snprintf(err, errlen, "%s: cannot encode it", name);
		return -1;
	}
	*len = (size_t)n;
	return 0;
}

/* next and cross meet the rotation's rule (ca_cross_why_not) against ca.
 * 0, or -1 with err naming the files. */
static int
overlap_check(X509 *ca, X509 *next, X509 *cross, char *err, size_t errlen)
{
	const char *why = ca_cross_why_not(ca, next, cross);

	if (why == NULL)
		return 0;
	snprintf(err, errlen, "%s (next: " F_NEXT ", cross: " F_CROSS
	    ", the trusted CA: " F_CA ")", why);
	return -1;
}

static int
read_overlap(const char *dir, X509 *ca, struct ca_rotation *out, char *err,
    size_t errlen)
{
	X509 *next = NULL, *cross = NULL;
	struct ca_cert_info info;
	char sum[CA_CHECKSUM_MAX];
	int r = -1;

	if ((next = load_cert(dir, F_NEXT, err, errlen)) == NULL ||
	    (cross = load_cert(dir, F_CROSS, err, errlen)) == NULL ||
	    overlap_check(ca, next, cross, err, errlen) != 0 ||
	    cert_der(next, F_NEXT, out->next, &out->next_len, out->next_checksum,
	    err, errlen) != 0 ||
	    cert_der(cross, F_CROSS, out->cross, &out->cross_len, sum, err,
	    errlen) != 0)
		goto out;
	ca_cert_info_of(next, &info);
	out->next_not_after = info.not_after;
	out->phase = CA_PHASE_OVERLAP;
	r = 0;
out:
	X509_free(next);
	X509_free(cross);
	return r;
}

static int
read_final(const char *dir, X509 *ca, struct ca_rotation *out, char *err,
    size_t errlen)
{
	X509 *old = NULL;
	struct ca_cert_info info;
	unsigned char der[CA_DER_MAX];
	size_t len;
	int r = -1;

	/* ca.old.crt may be missing where ca.crt already is ca.next.crt
	 * (a replica given the new ca.crt but not the rest). */
	if (present(dir, F_OLD) &&
	    ((old = load_cert(dir, F_OLD, err, errlen)) == NULL ||
	    cert_der(old, F_OLD, der, &len, out->old_checksum, err, errlen) != 0))
		goto out;
	if (cert_der(ca, F_CA, out->next, &out->next_len, out->next_checksum, err,
	    errlen) != 0)
		goto out;
	ca_cert_info_of(ca, &info);
	out->next_not_after = info.not_after;
	out->phase = CA_PHASE_FINAL;
	r = 0;
out:
	X509_free(old);
	return r;
}

/* Whether dir's ca.next.crt is ca already: a finish cut short, or a
 * replica given the finished ca.crt beside the overlap's left-overs.  The
 * phase is final then. */
static int
next_is(const char *dir, X509 *ca)
{
	char err[8];
	X509 *next = load_cert(dir, F_NEXT, err, sizeof(err));
	int same = next != NULL && X509_cmp(ca, next) == 0;

	X509_free(next);
	return same;
}

int
ca_rotation_read(const char *dir, struct ca_rotation *out, char *err,
    size_t errlen)
{
	X509 *ca = NULL;
	unsigned char der[CA_DER_MAX];
	struct ca_cert_info info;
	size_t len;
	int r = -1;

	memset(out, 0, sizeof(*out));
	if ((ca = load_cert(dir, F_CA, err, errlen)) == NULL ||
	    cert_der(ca, F_CA, der, &len, out->current_checksum, err, errlen) != 0)
		goto out;
	ca_cert_info_of(ca, &info);
	out->current_not_after = info.not_after;
	if (present(dir, F_NEXT) && !next_is(dir, ca))
		r = read_overlap(dir, ca, out, err, errlen);
	else if (present(dir, F_OLD) || present(dir, F_NEXT))
		r = read_final(dir, ca, out, err, errlen);
	else
		r = 0;
out:
	X509_free(ca);
	if (r != 0) {
		char keep[CA_CHECKSUM_MAX];
		long long after = out->current_not_after;

		memcpy(keep, out->current_checksum, sizeof(keep));
		memset(out, 0, sizeof(*out));
		memcpy(out->current_checksum, keep, sizeof(keep));
		out->current_not_after = after;
	}
	return r;
}

/* ---- start ---- */

/* The cross-certificate: next's subject and key, CA:TRUE, issued by ca
 * with cakey for as long as next is valid.  NULL on failure. */
static X509 *
cross_new(X509 *next, EVP_PKEY *nextkey, X509 *ca, EVP_PKEY *cakey)
{
	X509 *x = ca_cert_skeleton(nextkey, "-", 1);

	if (x == NULL ||
	    X509_set_subject_name(x, X509_get_subject_name(next)) != 1 ||
	    X509_set_issuer_name(x, X509_get_subject_name(ca)) != 1 ||
	    X509_set1_notBefore(x, X509_get0_notBefore(next)) != 1 ||
	    X509_set1_notAfter(x, X509_get0_notAfter(next)) != 1 ||
	    ca_add_ext(x, ca, NID_basic_constraints, "critical,CA:TRUE") != 0 ||
	    ca_add_ext(x, ca, NID_key_usage, "critical,keyCertSign,cRLSign") != 0 ||
	    ca_add_ext(x, x, NID_subject_key_identifier, "hash") != 0 ||
	    ca_add_ext(x, ca, NID_authority_key_identifier, "keyid:always") != 0 ||
	    X509_sign(x, cakey, EVP_sha256()) <= 0) {
		X509_free(x);
		ERR_clear_error();
		return NULL;
	}
	return x;
}

/* dir/name := leaf's PEM then cross's (NULL: leaf alone), 0644,
 * atomically.  0 or -1 with err. */
static int
write_chain(X509 *leaf, X509 *cross, const char *dir, const char *name,
    char *err, size_t errlen)
{
	char path[4096];
	BIO *bio = BIO_new(BIO_s_mem());
	char *data = NULL;
	long len;
	int r = -1;

	if (bio == NULL || PEM_write_bio_X509(bio, leaf) != 1 ||
	    (cross != NULL && PEM_write_bio_X509(bio, cross) != 1) ||
	    (len = BIO_get_mem_data(bio, &data)) <= 0) {
		snprintf(err, errlen, "%s: cannot encode it", name);
		goto out;
	}
	if (ca_join_path(path, sizeof(path), dir, name, err, errlen) != 0)
		goto out;
	r = file_write_atomic(path, data, (size_t)len, 0644, err, errlen);
out:
	BIO_free(bio);
	ERR_clear_error();
	return r;
}

/* What start reads: the CA and its key, the server certificate and key,
 * each checked against its pair.  0 or -1 with err. */
static int
start_inputs(const char *dir, X509 **ca, EVP_PKEY **cakey, X509 **server,
    EVP_PKEY **key, char *err, size_t errlen)
{
	char path[4096];

	if (present(dir, F_NEXT)) {
		snprintf(err, errlen, "%s/%s: a CA rotation is under way already "
		    "('tether-gateway ca rotate status'; finish it with 'ca rotate "
		    "finish')", dir, F_NEXT);
		return -1;
	}
	if (ca_join_path(path, sizeof(path), dir, F_CA_KEY, err, errlen) != 0)
		return -1;
	if (!file_exists(path)) {
		snprintf(err, errlen, "%s: no CA key here: run 'ca rotate start' "
		    "where the CA key is (the data directory init made)", path);
		return -1;
	}
	if ((*cakey = ca_key_load(path, err, errlen)) == NULL ||
	    (*ca = load_cert(dir, F_CA, err, errlen)) == NULL)
		return -1;
	if (X509_check_private_key(*ca, *cakey) != 1) {
		ERR_clear_error();
		snprintf(err, errlen, "%s/%s is not the key of %s/%s", dir, F_CA_KEY,
		    dir, F_CA);
		return -1;
	}
	if ((*key = load_key(dir, F_SERVER_KEY, err, errlen)) == NULL ||
	    (*server = load_cert(dir, F_SERVER, err, errlen)) == NULL)
		return -1;
	if (X509_check_private_key(*server, *key) != 1) {
		ERR_clear_error();
		snprintf(err, errlen, "%s/%s is not the key of %s/%s", dir,
		    F_SERVER_KEY, dir, F_SERVER);
		return -1;
	}
	return 0;
}

int
ca_rotate_start(const char *dir, struct ca_rotation *out, char *err,
    size_t errlen)
{
	X509 *ca = NULL, *old = NULL, *next = NULL, *cross = NULL;
	X509 *server = NULL, *peer = NULL;
	EVP_PKEY *cakey = NULL, *key = NULL, *nextkey = NULL, *peerkey = NULL;
	int r = -1;

	if (start_inputs(dir, &ca, &cakey, &old, &key, err, errlen) != 0)
		goto out;
	if ((nextkey = ca_p256_generate()) == NULL ||
	    (peerkey = ca_p256_generate()) == NULL) {
		snprintf(err, errlen, "cannot generate a P-256 key");
		goto out;
	}
	if ((next = ca_root_new(nextkey)) == NULL ||
	    (cross = cross_new(next, nextkey, ca, cakey)) == NULL ||
	    (peer = ca_peer_cert_new(peerkey, next, nextkey, PEER_DAYS)) == NULL) {
		snprintf(err, errlen, "cannot build the new CA's certificates");
		goto out;
	}
	if ((server = ca_server_cert_renewed(old, key, next, nextkey, SERVER_DAYS,
	    err, errlen)) == NULL)
		goto out;
	/* ca.next.crt last: until it is there, nothing says "overlap" and a
	 * start cut short is run again from the top. */
	if (ca_write_key(nextkey, dir, F_NEXT_KEY, err, errlen) != 0 ||
	    ca_write_cert(cross, dir, F_CROSS, err, errlen) != 0 ||
	    ca_write_key(peerkey, dir, F_PEER_KEY, err, errlen) != 0 ||
	    write_chain(peer, cross, dir, F_PEER, err, errlen) != 0 ||
	    write_chain(server, cross, dir, F_SERVER, err, errlen) != 0 ||
	    ca_write_cert(next, dir, F_NEXT, err, errlen) != 0)
		goto out;
	r = ca_rotation_read(dir, out, err, errlen);
out:
	X509_free(ca);
	X509_free(old);
	X509_free(next);
	X509_free(cross);
	X509_free(server);
	X509_free(peer);
	/* EVP_PKEY_free wipes the private key material. */
	EVP_PKEY_free(cakey);
	EVP_PKEY_free(key);
	EVP_PKEY_free(nextkey);
	EVP_PKEY_free(peerkey);
	ERR_clear_error();
	return r;
}

/* ---- finish ---- */

/* dir/to := dir/from's bytes, atomically with mode; the bytes are wiped
 * after (a key's are secret).  0 or -1 with err. */
static int
copy_file(const char *dir, const char *from, const char *to, mode_t mode,
    char *err, size_t errlen)
{
	char src[4096], dst[4096];
	char *data = NULL;
	size_t len = 0;
	int r = -1;

	if (ca_join_path(src, sizeof(src), dir, from, err, errlen) != 0 ||
	    ca_join_path(dst, sizeof(dst), dir, to, err, errlen) != 0 ||
	    file_read_all(src, CERT_FILE_MAX, &data, &len, err, errlen) != 0)
		goto out;
	r = file_write_atomic(dst, data, len, mode, err, errlen);
out:
	if (data != NULL)
		OPENSSL_cleanse(data, len);
	free(data);
	return r;
}

/* Removes dir/name (gone already is fine) and fsyncs dir.  0 or -1. */
static int
remove_durable(const char *dir, const char *name, char *err, size_t errlen)
{
	char path[4096];
	int fd, r = 0;

	if (ca_join_path(path, sizeof(path), dir, name, err, errlen) != 0)
		return -1;
	if (unlink(path) != 0 && errno != ENOENT) {
		snprintf(err, errlen, "%s: cannot remove it: %s", path,
		    strerror(errno));
		return -1;
	}
	if ((fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC)) < 0 ||
	    fsync(fd) != 0) {
		snprintf(err, errlen, "%s: cannot sync it: %s", dir, strerror(errno));
		r = -1;
	}
	if (fd >= 0)
		close(fd);
	return r;
}

/* dir/name := its first certificate alone, which must be issued by ca.
 * 0 or -1 with err. */
static int
drop_cross(const char *dir, const char *name, X509 *ca, char *err,
    size_t errlen)
{
	X509 *leaf = load_cert(dir, name, err, errlen);
	int r = -1;

	if (leaf == NULL)
		return -1;
	if (X509_verify(leaf, X509_get0_pubkey(ca)) != 1)
		snprintf(err, errlen, "%s/%s was not issued by the new CA (%s): "
		    "was it replaced during the rotation?", dir, name, F_NEXT);
	else
		r = write_chain(leaf, NULL, dir, name, err, errlen);
	X509_free(leaf);
	ERR_clear_error();
	return r;
}

int
ca_rotate_finish(const char *dir, struct ca_rotation *out, char *err,
    size_t errlen)
{
	struct ca_rotation *now = NULL;
	X509 *next = NULL;
	EVP_PKEY *nextkey = NULL;
	int r = -1;

	if ((now = malloc(sizeof(*now))) == NULL) {
		snprintf(err, errlen, "out of memory");
		return -1;
	}
	if (ca_rotation_read(dir, now, err, errlen) != 0)
		goto out;
	/* Final with ca.next.crt still there: a finish cut short. */
	if (now->phase != CA_PHASE_OVERLAP &&
	    !(now->phase == CA_PHASE_FINAL && present(dir, F_NEXT))) {
		snprintf(err, errlen, "%s: no CA rotation under way (phase %s): "
		    "'ca rotate start' begins one", dir, ca_phase_name(now->phase));
		goto out;
	}
	if ((next = load_cert(dir, F_NEXT, err, errlen)) == NULL ||
	    drop_cross(dir, F_SERVER, next, err, errlen) != 0 ||
	    drop_cross(dir, F_PEER, next, err, errlen) != 0)
		goto out;
	/* A finish cut short after ca.crt was replaced (it is the new CA
	 * already, maybe ca.next.key gone) does the rest only: the new CA
	 * must not become the old one. */
	if (strcmp(now->current_checksum, now->next_checksum) != 0) {
		if ((nextkey = load_key(dir, F_NEXT_KEY, err, errlen)) == NULL)
			goto out;
		if (X509_check_private_key(next, nextkey) != 1) {
			snprintf(err, errlen, "%s/%s is not the key of %s/%s", dir,
			    F_NEXT_KEY, dir, F_NEXT);
			goto out;
		}
		if (copy_file(dir, F_CA, F_OLD, 0644, err, errlen) != 0 ||
		    copy_file(dir, F_NEXT_KEY, F_CA_KEY, 0600, err, errlen) != 0 ||
		    copy_file(dir, F_NEXT, F_CA, 0644, err, errlen) != 0)
			goto out;
	}
	/* ca.next.crt before ca.cross.crt: the phase is final from then on
	 * (ca.old.crt is there), and a left-over cross-certificate is read by
	 * nothing. */
	if (remove_durable(dir, F_NEXT_KEY, err, errlen) != 0 ||
	    remove_durable(dir, F_NEXT, err, errlen) != 0 ||
	    remove_durable(dir, F_CROSS, err, errlen) != 0)
		goto out;
	r = ca_rotation_read(dir, out, err, errlen);
out:
	X509_free(next);
	EVP_PKEY_free(nextkey);
	free(now);
	ERR_clear_error();
	return r;
}
