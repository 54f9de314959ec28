/*
 * ca.c: the gateway's CA and server certificate (`tether-gateway init`) and
 * the CA checksum nodes pin at join time (see ca.h).
 */
#include "ca.h"

#include <limits.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

#include <openssl/asn1.h>
#include <openssl/bio.h>
#include <openssl/bn.h>
#include <openssl/crypto.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>

#include "agentkey.h"
#include "ca_parts.h"
#include "fileio.h"

/* notBefore is set this far back so a node whose clock runs a little
 * behind the gateway's still accepts a freshly made certificate. */
#define BACKDATE_SECS  (60 * 60)
#define SERIAL_LEN     16
#define CA_CN_RANDOM   8           /* bytes of random hex in the CA's CN */
#define SERVER_CN      "tether-gateway"
#define HOSTNAME_MAX   253

#define CHECKSUM_PREFIX "sha256:"

EVP_PKEY *
ca_p256_generate(void)
{
	EVP_PKEY *key;

	if ((key = EVP_PKEY_Q_keygen(NULL, NULL, "EC", "P-256")) == NULL)
		ERR_clear_error();
	return key;
}

/*
 * A random positive serial: the top bit is cleared so the INTEGER is
 * positive, the next one set so it is never zero and always 16 bytes long.
 */
static int
set_random_serial(X509 *x)
{
	uint8_t buf[SERIAL_LEN];
	BIGNUM *bn = NULL;
	int r = -1;

	if (random_bytes(buf, sizeof(buf)) != 0)
		goto out;
	buf[0] = (uint8_t)((buf[0] & 0x7f) | 0x40);
	if ((bn = BN_bin2bn(buf, sizeof(buf), NULL)) == NULL)
		goto out;
	if (BN_to_ASN1_INTEGER(bn, X509_get_serialNumber(x)) == NULL)
		goto out;
	r = 0;
out:
	BN_free(bn);
	return r;
}

static int
set_validity(X509 *x, long days)
{
	if (X509_gmtime_adj(X509_getm_notBefore(x), -BACKDATE_SECS) == NULL)
		return -1;
	if (X509_time_adj_ex(X509_getm_notAfter(x), (int)days, 0, NULL) == NULL)
		return -1;
	return 0;
}

static int
set_subject_cn(X509 *x, const char *cn)
{
	X509_NAME *name = X509_get_subject_name(x);

	if (X509_NAME_add_entry_by_txt(name, "CN", MBSTRING_UTF8,
	    (const unsigned char *)cn, -1, -1, 0) != 1)
		return -1;
	return 0;
}

/* Adds one extension from OpenSSL's config syntax (fixed strings only). */
int
ca_add_ext(X509 *x, X509 *issuer, int nid, const char *value)
{
	X509V3_CTX ctx;
	X509_EXTENSION *ext = NULL;
	int r = -1;

	X509V3_set_ctx_nodb(&ctx);
	X509V3_set_ctx(&ctx, issuer, x, NULL, NULL, 0);
	if ((ext = X509V3_EXT_nconf_nid(NULL, &ctx, nid, value)) == NULL)
		goto out;
	if (X509_add_ext(x, ext, -1) != 1)
		goto out;
	r = 0;
out:
	X509_EXTENSION_free(ext);
	return r;
}

/* A certificate skeleton: version 3, serial, validity, CN, public key. */
X509 *
ca_cert_skeleton(EVP_PKEY *key, const char *cn, long days)
{
	X509 *x = NULL;

	if ((x = X509_new()) == NULL)
		goto fail;
	if (X509_set_version(x, X509_VERSION_3) != 1 ||
	    set_random_serial(x) != 0 ||
	    set_validity(x, days) != 0 ||
	    set_subject_cn(x, cn) != 0 ||
	    X509_set_pubkey(x, key) != 1)
		goto fail;
	return x;
fail:
	X509_free(x);
	return NULL;
}

X509 *
ca_root_new(EVP_PKEY *cakey)
{
	X509 *x = NULL;
	char rnd[2 * CA_CN_RANDOM + 1];
	char cn[64];

	if (random_hex(rnd, CA_CN_RANDOM) != 0)
		goto fail;
	/* A random CN tells one installation's CA from another's. */
	snprintf(cn, sizeof(cn), "Tether CA %s", rnd);
	if ((x = ca_cert_skeleton(cakey, cn, CA_DAYS)) == NULL)
		goto fail;
	if (X509_set_issuer_name(x, X509_get_subject_name(x)) != 1)
		goto fail;
	/* The subject key id must exist before the authority key id uses it. */
	if (ca_add_ext(x, x, NID_basic_constraints, "critical,CA:TRUE") != 0 ||
	    ca_add_ext(x, x, NID_key_usage, "critical,keyCertSign,cRLSign") != 0 ||
	    ca_add_ext(x, x, NID_subject_key_identifier, "hash") != 0 ||
	    ca_add_ext(x, x, NID_authority_key_identifier, "keyid:always") != 0)
		goto fail;
	if (X509_sign(x, cakey, EVP_sha256()) <= 0)
		goto fail;
	return x;
fail:
	X509_free(x);
	return NULL;
}

/* A DNS name as it may appear in a SAN: no spaces, commas or controls. */
static int
hostname_ok(const char *h)
{
	size_t i, len = strlen(h);

	if (len == 0 || len > HOSTNAME_MAX)
		return 0;
	for (i = 0; i < len; i++) {
		char c = h[i];

		if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
		    (c >= '0' && c <= '9') || c == '-' || c == '.' ||
		    c == '_' || c == '*'))
			return 0;
	}
	return 1;
}

/*
 * Appends one SAN unless an equal one is already there: an IP address if
 * name parses as one, else a DNS name.  Returns 0 or -1.
 */
static int
san_add(GENERAL_NAMES *gens, const char *name)
{
	GENERAL_NAME *gen = NULL;
	ASN1_OCTET_STRING *ip = NULL;
	ASN1_IA5STRING *dns = NULL;
	int i, r = -1;

	if ((gen = GENERAL_NAME_new()) == NULL)
		goto out;
	if ((ip = a2i_IPADDRESS(name)) != NULL) {
		GENERAL_NAME_set0_value(gen, GEN_IPADD, ip);
		ip = NULL;
	} else {
		ERR_clear_error();
		if (!hostname_ok(name))
			goto out;
		if ((dns = ASN1_IA5STRING_new()) == NULL ||
		    ASN1_STRING_set(dns, name, -1) != 1)
			goto out;
		GENERAL_NAME_set0_value(gen, GEN_DNS, dns);
		dns = NULL;
	}
	for (i = 0; i < sk_GENERAL_NAME_num(gens); i++) {
		GENERAL_NAME *have = sk_GENERAL_NAME_value(gens, i);

		if (GENERAL_NAME_cmp(have, gen) == 0 ||
		    (have->type == GEN_DNS && gen->type == GEN_DNS &&
		    have->d.dNSName->length == gen->d.dNSName->length &&
		    strncasecmp((const char *)have->d.dNSName->data,
		    (const char *)gen->d.dNSName->data,
		    (size_t)gen->d.dNSName->length) == 0)) {
			r = 0; /* a duplicate: nothing to add */
			goto out;
		}
	}
	if (sk_GENERAL_NAME_push(gens, gen) <= 0)
		goto out;
	gen = NULL;
	r = 0;
out:
	GENERAL_NAME_free(gen);
	ASN1_OCTET_STRING_free(ip);
	ASN1_IA5STRING_free(dns);
	return r;
}

/*
 * The SAN extension is built from GENERAL_NAMEs, not a config string, so a
 * hostname can never smuggle in further entries.
 */
static int
add_san(X509 *x, const char *const *hostnames, size_t n, char *err,
    size_t errlen)
{
	GENERAL_NAMES *gens = NULL;
	size_t i;
	int r = -1;

	if ((gens = GENERAL_NAMES_new()) == NULL) {
		snprintf(err, errlen, "out of memory");
		goto out;
	}
	for (i = 0; i < n; i++) {
		if (hostnames[i] == NULL || san_add(gens, hostnames[i]) != 0) {
			snprintf(err, errlen, "invalid hostname \"%s\"",
			    hostnames[i] == NULL ? "(null)" : hostnames[i]);
			goto out;
		}
	}
	if (san_add(gens, "localhost") != 0 || san_add(gens, "127.0.0.1") != 0) {
		snprintf(err, errlen, "cannot build subjectAltName");
		goto out;
	}
	if (X509_add1_ext_i2d(x, NID_subject_alt_name, gens, 0,
	    X509V3_ADD_DEFAULT) != 1) {
		snprintf(err, errlen, "cannot add subjectAltName");
		goto out;
	}
	r = 0;
out:
	GENERAL_NAMES_free(gens);
	return r;
}

static X509 *
server_cert_new(EVP_PKEY *key, X509 *ca, EVP_PKEY *cakey,
    const char *const *hostnames, size_t n, char *err, size_t errlen)
{
	X509 *x = NULL;

	if ((x = ca_cert_skeleton(key, SERVER_CN, SERVER_DAYS)) == NULL ||
	    X509_set_issuer_name(x, X509_get_subject_name(ca)) != 1) {
		snprintf(err, errlen, "cannot build server certificate");
		goto fail;
	}
	if (ca_add_ext(x, ca, NID_basic_constraints, "critical,CA:FALSE") != 0 ||
	    ca_add_ext(x, ca, NID_key_usage, "critical,digitalSignature") != 0 ||
	    ca_add_ext(x, ca, NID_ext_key_usage, "serverAuth") != 0 ||
	    ca_add_ext(x, ca, NID_subject_key_identifier, "hash") != 0 ||
	    ca_add_ext(x, ca, NID_authority_key_identifier, "keyid:always") != 0) {
		snprintf(err, errlen, "cannot add server certificate extensions");
		goto fail;
	}
	if (add_san(x, hostnames, n, err, errlen) != 0)
		goto fail;
	if (X509_sign(x, cakey, EVP_sha256()) <= 0) {
		snprintf(err, errlen, "cannot sign server certificate");
		goto fail;
	}
	return x;
fail:
	X509_free(x);
	return NULL;
}

/* The replicas' own credential (ca.h): CN CA_PEER_CN, clientAuth only. */
X509 *
ca_peer_cert_new(EVP_PKEY *key, X509 *ca, EVP_PKEY *cakey, long days)
{
	X509 *x = NULL;

	if ((x = ca_cert_skeleton(key, CA_PEER_CN, days)) == NULL ||
	    X509_set_issuer_name(x, X509_get_subject_name(ca)) != 1 ||
	    ca_add_ext(x, ca, NID_basic_constraints, "critical,CA:FALSE") != 0 ||
	    ca_add_ext(x, ca, NID_key_usage, "critical,digitalSignature") != 0 ||
	    ca_add_ext(x, ca, NID_ext_key_usage, "clientAuth") != 0 ||
	    ca_add_ext(x, ca, NID_subject_key_identifier, "hash") != 0 ||
	    ca_add_ext(x, ca, NID_authority_key_identifier, "keyid:always") != 0 ||
	    X509_sign(x, cakey, EVP_sha256()) <= 0) {
		X509_free(x);
		ERR_clear_error();
		return NULL;
	}
	return x;
}

int
ca_join_path(char *out, size_t outlen, const char *dir, const char *name,
    char *err, size_t errlen)
{
	if (snprintf(out, outlen, "%s/%s", dir, name) >= (int)outlen) {
		snprintf(err, errlen, "%s: path too long", dir);
		return -1;
	}
	return 0;
}

/* Writes what the BIO holds to dir/name atomically with mode. */
static int
write_bio(BIO *bio, const char *dir, const char *name, mode_t mode, char *err,
    size_t errlen)
{
	char path[4096];
	char *data = NULL;
	long len;

	if (ca_join_path(path, sizeof(path), dir, name, err, errlen) != 0)
		return -1;
	if ((len = BIO_get_mem_data(bio, &data)) <= 0) {
		snprintf(err, errlen, "%s: nothing to write", path);
		return -1;
	}
	return file_write_atomic(path, data, (size_t)len, mode, err, errlen);
}

int
ca_write_key(EVP_PKEY *key, const char *dir, const char *name, char *err,
    size_t errlen)
{
	BIO *bio = NULL;
	int r = -1;

	/* A secure-memory BIO: the PEM private key is wiped when freed. */
	if ((bio = BIO_new(BIO_s_secmem())) == NULL) {
		snprintf(err, errlen, "%s: out of memory", name);
		goto out;
	}
	if (PEM_write_bio_PKCS8PrivateKey(bio, key, NULL, NULL, 0, NULL,
	    NULL) != 1) {
		snprintf(err, errlen, "%s: cannot encode private key", name);
		goto out;
	}
	r = write_bio(bio, dir, name, 0600, err, errlen);
out:
	BIO_free(bio);
	return r;
}

int
ca_write_cert(X509 *x, const char *dir, const char *name, char *err,
    size_t errlen)
{
	BIO *bio = NULL;
	int r = -1;

	if ((bio = BIO_new(BIO_s_mem())) == NULL) {
		snprintf(err, errlen, "%s: out of memory", name);
		goto out;
	}
	if (PEM_write_bio_X509(bio, x) != 1) {
		snprintf(err, errlen, "%s: cannot encode certificate", name);
		goto out;
	}
	r = write_bio(bio, dir, name, 0644, err, errlen);
out:
	BIO_free(bio);
	return r;
}

int
ca_create(const char *dir, const char *const *hostnames, size_t nhostnames,
    char *err, size_t errlen)
{
	EVP_PKEY *cakey = NULL, *key = NULL, *peerkey = NULL;
	X509 *ca = NULL, *server = NULL, *peer = NULL;
	int r = -1;

	if (hostnames == NULL && nhostnames > 0) {
		snprintf(err, errlen, "no hostnames given");
		goto out;
	}
	if ((cakey = ca_p256_generate()) == NULL ||
	    (key = ca_p256_generate()) == NULL ||
	    (peerkey = ca_p256_generate()) == NULL) {
		snprintf(err, errlen, "cannot generate P-256 key");
		goto out;
	}
	if ((ca = ca_root_new(cakey)) == NULL) {
		snprintf(err, errlen, "cannot build CA certificate");
		goto out;
	}
	if ((server = server_cert_new(key, ca, cakey, hostnames, nhostnames,
	    err, errlen)) == NULL)
		goto out;
	if ((peer = ca_peer_cert_new(peerkey, ca, cakey, PEER_DAYS)) == NULL) {
		snprintf(err, errlen, "cannot build the peer certificate");
		goto out;
	}
	/* Keys first: a certificate on disk without its key is useless. */
	if (ca_write_key(cakey, dir, "ca.key", err, errlen) != 0 ||
	    ca_write_cert(ca, dir, "ca.crt", err, errlen) != 0 ||
	    ca_write_key(key, dir, "server.key", err, errlen) != 0 ||
	    ca_write_cert(server, dir, "server.crt", err, errlen) != 0 ||
	    ca_write_key(peerkey, dir, "peer.key", err, errlen) != 0 ||
	    ca_write_cert(peer, dir, "peer.crt", err, errlen) != 0)
		goto out;
	r = 0;
out:
	X509_free(peer);
	EVP_PKEY_free(peerkey);
	X509_free(server);
	X509_free(ca);
	EVP_PKEY_free(key);
	EVP_PKEY_free(cakey);
	ERR_clear_error();
	return r;
}

static void
checksum_format(const uint8_t digest[32], char out[CA_CHECKSUM_MAX])
{
	static const char digits[] = "0123456789abcdef";
	size_t i, o = sizeof(CHECKSUM_PREFIX) - 1;

	memcpy(out, CHECKSUM_PREFIX, o);
	for (i = 0; i < 32; i++) {
		out[o++] = digits[digest[i] >> 4];
		out[o++] = digits[digest[i] & 0x0f];
	}
	out[o] = '\0';
}

int
ca_checksum_der(const unsigned char *der, size_t len,
    char out[CA_CHECKSUM_MAX])
{
	uint8_t digest[32];
	unsigned int dlen = 0;

	if (EVP_Digest(der, len, digest, &dlen, EVP_sha256(), NULL) != 1 ||
	    dlen != sizeof(digest)) {
		ERR_clear_error();
		return -1;
	}
	checksum_format(digest, out);
	return 0;
}

int
ca_checksum_pem(const char *pem, size_t len, char out[CA_CHECKSUM_MAX],
    char *err, size_t errlen)
{
	BIO *bio = NULL;
	X509 *x = NULL;
	unsigned char *der = NULL;
	int derlen, r = -1;

	if (len > INT_MAX || (bio = BIO_new_mem_buf(pem, (int)len)) == NULL) {
		snprintf(err, errlen, "CA certificate too large");
		goto out;
	}
	if ((x = PEM_read_bio_X509(bio, NULL, NULL, NULL)) == NULL) {
		snprintf(err, errlen, "no PEM certificate found");
		goto out;
	}
	if ((derlen = i2d_X509(x, &der)) <= 0) {
		snprintf(err, errlen, "cannot encode certificate");
		goto out;
	}
	if (ca_checksum_der(der, (size_t)derlen, out) != 0) {
		snprintf(err, errlen, "SHA-256 failed");
		goto out;
	}
	r = 0;
out:
	OPENSSL_free(der);
	X509_free(x);
	BIO_free(bio);
	ERR_clear_error();
	return r;
}

int
ca_checksum_file(const char *path, char out[CA_CHECKSUM_MAX], char *err,
    size_t errlen)
{
	char *pem = NULL;
	size_t len = 0;
	char why[256];
	int r = -1;

	if (file_read_all(path, CERT_FILE_MAX, &pem, &len, err, errlen) != 0)
		goto out;
	if (ca_checksum_pem(pem, len, out, why, sizeof(why)) != 0) {
		snprintf(err, errlen, "%s: %s", path, why);
		goto out;
	}
	r = 0;
out:
	free(pem);
	return r;
}

int
ca_checksum_valid(const char *s)
{
	size_t i, plen = sizeof(CHECKSUM_PREFIX) - 1;

	if (s == NULL || strncmp(s, CHECKSUM_PREFIX, plen) != 0)
		return -1;
	s += plen;
	for (i = 0; i < 64; i++) {
		if (!((s[i] >= '0' && s[i] <= '9') || (s[i] >= 'a' && s[i] <= 'f')))
			return -1;
	}
	return s[64] == '\0' ? 0 : -1;
}

/* ---- renewal (`tether-gateway cert renew`) ---- */

/* The first certificate (want_key 0) or the private key (1) of the PEM
 * file at path, at most CERT_FILE_MAX bytes, or NULL with err.  The file's
 * bytes are wiped before they are freed (a key's are secret). */
static void *
pem_load(const char *path, int want_key, char *err, size_t errlen)
{
	char *pem = NULL;
	size_t len = 0;
	BIO *bio = NULL;
	void *obj = NULL;

	if (file_read_all(path, CERT_FILE_MAX, &pem, &len, err, errlen) != 0)
		return NULL;
	if ((bio = BIO_new_mem_buf(pem, (int)len)) != NULL)
		obj = want_key ? (void *)PEM_read_bio_PrivateKey(bio, NULL, NULL, NULL) :
		    (void *)PEM_read_bio_X509(bio, NULL, NULL, NULL);
	if (obj == NULL)
		snprintf(err, errlen, "%s: not a PEM %s", path,
		    want_key ? "private key" : "certificate");
	BIO_free(bio);
	OPENSSL_cleanse(pem, len);
	free(pem);
	ERR_clear_error();
	return obj;
}

/* The first certificate of the PEM file at path, or NULL with err. */
X509 *
ca_cert_load(const char *path, char *err, size_t errlen)
{
	return pem_load(path, 0, err, errlen);
}

/* The private key in the PEM file at path, or NULL with err. */
EVP_PKEY *
ca_key_load(const char *path, char *err, size_t errlen)
{
	return pem_load(path, 1, err, errlen);
}

void
ca_cert_info_of(X509 *x, struct ca_cert_info *out)
{
	BIGNUM *bn = ASN1_INTEGER_to_BN(X509_get0_serialNumber(x), NULL);
	char *hex = bn != NULL ? BN_bn2hex(bn) : NULL;
	struct tm tm;

	snprintf(out->serial, sizeof(out->serial), "%s", hex != NULL ? hex : "?");
	out->not_after = 0;
	if (ASN1_TIME_to_tm(X509_get0_notAfter(x), &tm) == 1)
		out->not_after = (long long)timegm(&tm);
	OPENSSL_free(hex);
	BN_free(bn);
	ERR_clear_error();
}

/* The new certificate: old's subject, SANs and usages, for key, issued by
 * ca with cakey, a new serial, days long.  NULL with err. */
X509 *
ca_server_cert_renewed(X509 *old, EVP_PKEY *key, X509 *ca, EVP_PKEY *cakey,
    long days, char *err, size_t errlen)
{
	X509 *x = NULL;
	int i = X509_get_ext_by_NID(old, NID_subject_alt_name, -1);

	if ((x = ca_cert_skeleton(key, SERVER_CN, days)) == NULL ||
	    X509_set_subject_name(x, X509_get_subject_name(old)) != 1 ||
	    X509_set_issuer_name(x, X509_get_subject_name(ca)) != 1 ||
	    ca_add_ext(x, ca, NID_basic_constraints, "critical,CA:FALSE") != 0 ||
	    ca_add_ext(x, ca, NID_key_usage, "critical,digitalSignature") != 0 ||
	    ca_add_ext(x, ca, NID_ext_key_usage, "serverAuth") != 0 ||
	    ca_add_ext(x, ca, NID_subject_key_identifier, "hash") != 0 ||
	    ca_add_ext(x, ca, NID_authority_key_identifier, "keyid:always") != 0 ||
	    (i >= 0 && X509_add_ext(x, X509_get_ext(old, i), -1) != 1)) {
		snprintf(err, errlen, "cannot build the new server certificate");
		goto fail;
	}
	if (X509_sign(x, cakey, EVP_sha256()) <= 0) {
		snprintf(err, errlen, "cannot sign the new server certificate");
		goto fail;
	}
	return x;
fail:
	X509_free(x);
	ERR_clear_error();
	return NULL;
}

/* -1 with err while a CA rotation is under way in dir (ca.next.crt,
 * carotate.h): the server certificate and peer credential are then the
 * new CA's, and renewing them from ca.key would undo that.  Else 0. */
static int
no_rotation_under_way(const char *dir, char *err, size_t errlen)
{
	char path[4096];

	if (ca_join_path(path, sizeof(path), dir, "ca.next.crt", err, errlen) != 0)
		return -1;
	if (!file_exists(path))
		return 0;
	snprintf(err, errlen, "%s: a CA rotation is under way; finish it first "
	    "('tether-gateway ca rotate finish'), then renew", path);
	return -1;
}

/* Loads what renewal needs from dir, checking that each belongs with the
 * others.  0, or -1 with err (what is loaded is freed by the caller). */
static int
renew_inputs(const char *dir, X509 **ca, EVP_PKEY **cakey, X509 **old,
    EVP_PKEY **key, char *err, size_t errlen)
{
	char path[4096];

	if (no_rotation_under_way(dir, err, errlen) != 0 ||
	    ca_join_path(path, sizeof(path), dir, "ca.key", err, errlen) != 0)
		return -1;
	if (!file_exists(path)) {
		snprintf(err, errlen, "%s: no CA key here: run cert renew where "
		    "the CA key is (the data directory init made), then copy "
		    "server.crt to the others", path);
		return -1;
	}
	if ((*cakey = ca_key_load(path, err, errlen)) == NULL)
		return -1;
	if (ca_join_path(path, sizeof(path), dir, "ca.crt", err, errlen) != 0 ||
	    (*ca = ca_cert_load(path, err, errlen)) == NULL)
		return -1;
	if (X509_check_private_key(*ca, *cakey) != 1) {
		ERR_clear_error();
		snprintf(err, errlen, "%s/ca.key is not the key of %s", dir, path);
		return -1;
	}
	if (ca_join_path(path, sizeof(path), dir, "server.key", err, errlen) != 0 ||
	    (*key = ca_key_load(path, err, errlen)) == NULL)
		return -1;
	if (ca_join_path(path, sizeof(path), dir, "server.crt", err, errlen) != 0 ||
	    (*old = ca_cert_load(path, err, errlen)) == NULL)
		return -1;
	if (X509_check_private_key(*old, *key) != 1) {
		ERR_clear_error();
		snprintf(err, errlen, "%s/server.key is not the key of %s", dir, path);
		return -1;
	}
	if (X509_verify(*old, X509_get0_pubkey(*ca)) != 1) {
		ERR_clear_error();
		snprintf(err, errlen, "%s was not issued by %s/ca.crt", path, dir);
		return -1;
	}
	return 0;
}

int
ca_renew_server(const char *dir, long days, struct ca_cert_info *out,
    char *err, size_t errlen)
{
	X509 *ca = NULL, *old = NULL, *x = NULL;
	EVP_PKEY *cakey = NULL, *key = NULL;
	int r = -1;

	if (days < 1 || days > CA_DAYS) {
		snprintf(err, errlen, "days must be 1 to %d", CA_DAYS);
		return -1;
	}
	if (renew_inputs(dir, &ca, &cakey, &old, &key, err, errlen) != 0)
		goto out;
	if ((x = ca_server_cert_renewed(old, key, ca, cakey, days, err,
	    errlen)) == NULL)
		goto out;
	if (ca_write_cert(x, dir, "server.crt", err, errlen) != 0)
		goto out;
	ca_cert_info_of(x, out);
	r = 0;
out:
	X509_free(x);
	X509_free(old);
	X509_free(ca);
	EVP_PKEY_free(key);
	EVP_PKEY_free(cakey);
	ERR_clear_error();
	return r;
}

/* The rotation's pair (ca.h). */
const char *
ca_cross_why_not(X509 *ca, X509 *next, X509 *cross)
{
	const char *why = NULL;

	if (X509_check_ca(next) < 1 ||
	    X509_NAME_cmp(X509_get_subject_name(next),
	    X509_get_issuer_name(next)) != 0 ||
	    X509_verify(next, X509_get0_pubkey(next)) != 1)
		why = "next is not a self-signed CA certificate";
	else if (X509_check_ca(cross) < 1)
		why = "cross is not a CA certificate";
	else if (X509_NAME_cmp(X509_get_subject_name(cross),
	    X509_get_subject_name(next)) != 0 ||
	    EVP_PKEY_eq(X509_get0_pubkey(cross), X509_get0_pubkey(next)) != 1)
		why = "cross does not name next's subject and key";
	else if (X509_NAME_cmp(X509_get_issuer_name(cross),
	    X509_get_subject_name(ca)) != 0 ||
	    X509_verify(cross, X509_get0_pubkey(ca)) != 1)
		why = "cross was not issued by the trusted CA";
	ERR_clear_error();
	return why;
}

int
ca_server_check(X509 *leaf, const char *ca_path, struct ca_cert_info *out,
    char *err, size_t errlen)
{
	X509 *ca = ca_cert_load(ca_path, err, errlen);
	int r = -1;

	if (ca == NULL)
		return -1;
	ca_cert_info_of(leaf, out);
	if (X509_verify(leaf, X509_get0_pubkey(ca)) != 1)
		snprintf(err, errlen, "not issued by %s", ca_path);
	else if (X509_cmp_current_time(X509_get0_notAfter(leaf)) <= 0)
		snprintf(err, errlen, "expired (notAfter passed)");
	else if (X509_cmp_current_time(X509_get0_notBefore(leaf)) >= 0)
		snprintf(err, errlen, "not valid yet (notBefore ahead)");
	else
		r = 0;
	X509_free(ca);
	ERR_clear_error();
	return r;
}

int
ca_renew_peer(const char *dir, long days, struct ca_cert_info *out, char *err,
    size_t errlen)
{
	X509 *ca = NULL, *x = NULL;
	EVP_PKEY *cakey = NULL, *key = NULL;
	char path[4096];
	int r = -1;

	if (days < 1 || days > CA_DAYS) {
		snprintf(err, errlen, "days must be 1 to %d", CA_DAYS);
		return -1;
	}
	if (no_rotation_under_way(dir, err, errlen) != 0 ||
	    ca_join_path(path, sizeof(path), dir, "ca.key", err, errlen) != 0)
		goto out;
	if (!file_exists(path)) {
		snprintf(err, errlen, "%s: no CA key here: run cert renew where "
		    "the CA key is", path);
		goto out;
	}
	if ((cakey = ca_key_load(path, err, errlen)) == NULL ||
	    ca_join_path(path, sizeof(path), dir, "ca.crt", err, errlen) != 0 ||
	    (ca = ca_cert_load(path, err, errlen)) == NULL)
		goto out;
	if (X509_check_private_key(ca, cakey) != 1) {
		snprintf(err, errlen, "%s/ca.key is not the key of %s", dir, path);
		goto out;
	}
	if ((key = ca_p256_generate()) == NULL ||
	    (x = ca_peer_cert_new(key, ca, cakey, days)) == NULL) {
		snprintf(err, errlen, "cannot build the peer certificate");
		goto out;
	}
	if (ca_write_key(key, dir, "peer.key", err, errlen) != 0 ||
	    ca_write_cert(x, dir, "peer.crt", err, errlen) != 0)
		goto out;
	ca_cert_info_of(x, out);
	r = 0;
out:
	X509_free(x);
	X509_free(ca);
	EVP_PKEY_free(key);
	EVP_PKEY_free(cakey);
	ERR_clear_error();
	return r;
}

int
ca_is_peer_cert(X509 *x)
{
	X509_NAME *name = X509_get_subject_name(x);
	int i = X509_NAME_get_index_by_NID(name, NID_commonName, -1);
	ASN1_STRING *cn;
	uint32_t xku;

	if (i < 0 || X509_NAME_get_index_by_NID(name, NID_commonName, i) >= 0)
		return 0;   /* none, or more than one */
	cn = X509_NAME_ENTRY_get_data(X509_NAME_get_entry(name, i));
	if (cn == NULL || (size_t)ASN1_STRING_length(cn) != strlen(CA_PEER_CN) ||
	    memcmp(ASN1_STRING_get0_data(cn), CA_PEER_CN, strlen(CA_PEER_CN)) != 0)
		return 0;
	xku = X509_get_extended_key_usage(x);
	/* Exactly clientAuth: a server certificate is never a peer's. */
	return (X509_get_extension_flags(x) & EXFLAG_XKUSAGE) != 0 &&
	    xku == XKU_SSL_CLIENT;
}

int
ca_cert_file_info(const char *path, struct ca_cert_info *out, char *err,
    size_t errlen)
{
	X509 *x = ca_cert_load(path, err, errlen);

	if (x == NULL)
		return -1;
	ca_cert_info_of(x, out);
	X509_free(x);
	return 0;
}
