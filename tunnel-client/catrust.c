/*
 * catrust.c: the gateway CAs a node trusts, and a CA rotation's steps on
 * them (see catrust.h).
 */
#include "catrust.h"

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/x509v3.h>

#include "ca.h"
#include "fileio.h"
#include "state.h"

#define CA_FILE      "ca.crt"
#define CA_NEXT_FILE "ca.next.crt"
#define CA_PEM_MAX   (64 * 1024)

/* Exactly one DER certificate, nothing after it. */
static X509 *
der_cert(const uint8_t *der, size_t len)
{
	const unsigned char *p = der;
	X509 *x;

	if (der == NULL || len == 0 || len > LONG_MAX)
		return NULL;
	x = d2i_X509(NULL, &p, (long)len);
	if (x != NULL && p != der + len) {
		X509_free(x);
		x = NULL;
	}
	return x;
}

static int
same_cert(X509 *a, X509 *b)
{
	return a != NULL && b != NULL && X509_cmp(a, b) == 0;
}

/* notAfter still ahead.  notBefore is not judged: a node whose clock is
 * behind would refuse a CA made a minute ago, and TLS checks it anyway. */
static int
not_expired(X509 *x)
{
	return X509_cmp_current_time(X509_get0_notAfter(x)) > 0;
}

int
catrust_check_cross(X509 *pinned, const uint8_t *next, size_t next_len,
    const uint8_t *cross, size_t cross_len, X509 **next_out, char *why,
    size_t whylen)
{
	X509 *n = der_cert(next, next_len), *c = der_cert(cross, cross_len);
	const char *bad = NULL;

	*next_out = NULL;
	if (pinned == NULL)
		bad = "no pinned CA";
	else if (n == NULL)
		bad = "next is not a certificate";
	else if (c == NULL)
		bad = "cross is not a certificate";
	else if ((bad = ca_cross_why_not(pinned, n, c)) == NULL) {
		if (!not_expired(n))
			bad = "next has expired";
		else if (!not_expired(c))
			bad = "cross has expired";
	}
	ERR_clear_error();
	X509_free(c);
	if (bad != NULL) {
		snprintf(why, whylen, "%s", bad);
		X509_free(n);
		return -1;
	}
	*next_out = n;
	return 0;
}

static int
cert_checksum(X509 *x, char out[CA_CHECKSUM_MAX])
{
	unsigned char *der = NULL;
	int len = i2d_X509(x, &der);
	int r = len > 0 ? ca_checksum_der(der, (size_t)len, out) : -1;

	OPENSSL_free(der);
	return r;
}

static X509 *
cert_file(const char *dir, const char *name, char *err, size_t errlen)
{
	char path[PATH_MAX], *pem = NULL;
	size_t len = 0;
	BIO *b = NULL;
	X509 *x = NULL;

	if (client_path(dir, name, path, sizeof(path)) != 0) {
		snprintf(err, errlen, "%s/%s: path too long", dir, name);
		return NULL;
	}
	if (file_read_all(path, CA_PEM_MAX, &pem, &len, err, errlen) != 0)
		return NULL;
	if (len <= INT_MAX && (b = BIO_new_mem_buf(pem, (int)len)) != NULL)
		x = PEM_read_bio_X509(b, NULL, NULL, NULL);
	if (x == NULL)
		snprintf(err, errlen, "%s: no PEM certificate", path);
	BIO_free(b);
	free(pem);
	ERR_clear_error();
	return x;
}

void
catrust_clear(struct catrust *t)
{
	X509_free(t->ca);
	X509_free(t->next);
	memset(t, 0, sizeof(*t));
}

static void
set_next(struct catrust *t, X509 *next)
{
	X509_free(t->next);
	t->next = next;
	t->next_sum[0] = '\0';
	if (next != NULL && cert_checksum(next, t->next_sum) != 0)
		t->next_sum[0] = '\0';
}

int
catrust_load(const char *dir, struct catrust *t, char *err, size_t errlen)
{
	char path[PATH_MAX];

	memset(t, 0, sizeof(*t));
	if ((t->ca = cert_file(dir, CA_FILE, err, errlen)) == NULL)
		return -1;
	if (cert_checksum(t->ca, t->ca_sum) != 0) {
		snprintf(err, errlen, "%s/%s: cannot take its checksum", dir, CA_FILE);
		catrust_clear(t);
		return -1;
	}
	if (client_path(dir, CA_NEXT_FILE, path, sizeof(path)) != 0 ||
	    !file_exists(path))
		return 0;
	set_next(t, cert_file(dir, CA_NEXT_FILE, err, errlen));
	return t->next != NULL && t->next_sum[0] != '\0' ? 0 : 1;
}

/* DIR/ca.next.crt := next, PEM, 0644, atomically. */
static int
write_next(const char *dir, X509 *next, char *why, size_t whylen)
{
	char path[PATH_MAX], *pem;
	BIO *b = BIO_new(BIO_s_mem());
	long len;
	int r = -1;

	if (client_path(dir, CA_NEXT_FILE, path, sizeof(path)) != 0)
		snprintf(why, whylen, "%s/%s: path too long", dir, CA_NEXT_FILE);
	else if (b == NULL || PEM_write_bio_X509(b, next) != 1 ||
	    (len = BIO_get_mem_data(b, &pem)) <= 0)
		snprintf(why, whylen, "cannot encode the new CA as PEM");
	else
		r = file_write_atomic(path, pem, (size_t)len, 0644, why, whylen);
	BIO_free(b);
	ERR_clear_error();
	return r;
}

/* "overlap": next believed through cross, kept as ca.next.crt. */
static int
apply_overlap(const char *dir, struct catrust *t, const struct frame_ca *in,
    char *why, size_t whylen)
{
	X509 *next = der_cert(in->next, in->next_len);
	int same = same_cert(next, t->next) || same_cert(next, t->ca);

	X509_free(next);
	if (same)
		return 0;   /* held already (or promoted: a replica lagging) */
	if (catrust_check_cross(t->ca, in->next, in->next_len, in->cross,
	    in->cross_len, &next, why, whylen) != 0)
		return -1;
	if (write_next(dir, next, why, whylen) != 0) {
		X509_free(next);
		return -1;
	}
	set_next(t, next);
	return 1;
}

/* "final": ca.next.crt (written first if only cross vouches for next)
 * renamed over ca.crt. */
static int
apply_final(const char *dir, struct catrust *t, const struct frame_ca *in,
    char *why, size_t whylen)
{
	char from[PATH_MAX], to[PATH_MAX];
	X509 *next = der_cert(in->next, in->next_len);
	char sum[CA_CHECKSUM_MAX];

	if (next == NULL) {
		snprintf(why, whylen, "next is not a certificate");
		return -1;
	}
	if (same_cert(next, t->ca)) {
		X509_free(next);
		return 0;   /* promoted already: a repeat */
	}
	if (!same_cert(next, t->next)) {
		X509_free(next);
		if (in->cross_len == 0) {
			snprintf(why, whylen, "the final CA is not the one this node "
			    "holds as next, and no cross-certificate vouches for it");
			return -1;
		}
		if (catrust_check_cross(t->ca, in->next, in->next_len, in->cross,
		    in->cross_len, &next, why, whylen) != 0)
			return -1;
		if (write_next(dir, next, why, whylen) != 0) {
			X509_free(next);
			return -1;
		}
		set_next(t, next);
	} else {
		X509_free(next);
	}
	if (client_path(dir, CA_NEXT_FILE, from, sizeof(from)) != 0 ||
	    client_path(dir, CA_FILE, to, sizeof(to)) != 0) {
		snprintf(why, whylen, "%s: path too long", dir);
		return -1;
	}
	if (cert_checksum(t->next, sum) != 0) {
		snprintf(why, whylen, "cannot take the new CA's checksum");
		return -1;
	}
	if (file_rename_durable(from, to, why, whylen) != 0)
		return -1;
	X509_free(t->ca);
	t->ca = t->next;
	t->next = NULL;
	memcpy(t->ca_sum, sum, sizeof(t->ca_sum));
	t->next_sum[0] = '\0';
	return 1;
}

int
catrust_apply(const char *dir, struct catrust *t, const struct frame_ca *in,
    char *why, size_t whylen)
{
	if (t->ca == NULL) {
		snprintf(why, whylen, "no pinned CA");
		return -1;
	}
	if (in->phase == FRAME_CA_OVERLAP)
		return apply_overlap(dir, t, in, why, whylen);
	if (in->phase == FRAME_CA_FINAL)
		return apply_final(dir, t, in, why, whylen);
	snprintf(why, whylen, "no phase");
	return -1;
}

size_t
catrust_held(const struct catrust *t,
    char held[FRAME_CA_MAX_HELD][FRAME_CA_SUM_LEN + 1])
{
	size_t n = 0;

	if (t->ca_sum[0] != '\0')
		snprintf(held[n++], FRAME_CA_SUM_LEN + 1, "%s", t->ca_sum);
	if (t->next != NULL && t->next_sum[0] != '\0')
		snprintf(held[n++], FRAME_CA_SUM_LEN + 1, "%s", t->next_sum);
	return n;
}
