/*
 * test_ca.c: the gateway CA (auth/ca.c): the six files `tether-gateway init`
 * writes, the server certificate's chain and names, the peer credential,
 * `cert renew` (server and peer), the CA checksum, and CA rotation
 * (auth/carotate.c): the cross-certificate chain during the overlap and
 * what is refused after the finish.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>

#include "ca.h"
#include "carotate.h"
#include "fileio.h"

static const char *const files[] = { "ca.crt", "ca.key", "server.crt",
    "server.key", "peer.crt", "peer.key" };
#define NFILES (sizeof(files) / sizeof(files[0]))
/* What a CA rotation adds. */
static const char *const rotation_files[] = { "ca.next.crt", "ca.next.key",
    "ca.cross.crt", "ca.old.crt" };

struct fixture {
	char dir[64];
};

static void
path_in(const struct fixture *f, const char *name, char *out, size_t outlen)
{
	snprintf(out, outlen, "%s/%s", f->dir, name);
}

static void
unlink_in(const struct fixture *f, const char *name)
{
	char path[128];

	path_in(f, name, path, sizeof(path));
	unlink(path);
}

static int
setup(void **state)
{
	struct fixture *f = calloc(1, sizeof(*f));

	if (f == NULL)
		return -1;
	snprintf(f->dir, sizeof(f->dir), "/tmp/test_ca.XXXXXX");
	if (mkdtemp(f->dir) == NULL) {
		free(f);
		return -1;
	}
	*state = f;
	return 0;
}

static int
teardown(void **state)
{
	struct fixture *f = *state;
	char path[128];
	size_t i;

	for (i = 0; i < NFILES; i++) {
		path_in(f, files[i], path, sizeof(path));
		unlink(path);
	}
	for (i = 0; i < sizeof(rotation_files) / sizeof(rotation_files[0]); i++) {
		path_in(f, rotation_files[i], path, sizeof(path));
		unlink(path);
	}
	rmdir(f->dir);
	free(f);
	return 0;
}

static void
create(struct fixture *f)
{
	const char *hosts[] = { "gw.example.com", "10.1.2.3", "::1",
	    "localhost" };
	char err[256] = "";

	if (ca_create(f->dir, hosts, 4, err, sizeof(err)) != 0)
		fail_msg("ca_create: %s", err);
}

static X509 *
load_cert(const struct fixture *f, const char *name)
{
	char path[128];
	FILE *fp;
	X509 *x;

	path_in(f, name, path, sizeof(path));
	fp = fopen(path, "r");
	assert_non_null(fp);
	x = PEM_read_X509(fp, NULL, NULL, NULL);
	fclose(fp);
	assert_non_null(x);
	return x;
}

static EVP_PKEY *
load_key(const struct fixture *f, const char *name)
{
	char path[128];
	FILE *fp;
	EVP_PKEY *k;

	path_in(f, name, path, sizeof(path));
	fp = fopen(path, "r");
	assert_non_null(fp);
	k = PEM_read_PrivateKey(fp, NULL, NULL, NULL);
	fclose(fp);
	assert_non_null(k);
	return k;
}

static void
test_files_and_modes(void **state)
{
	struct fixture *f = *state;
	char path[128], *pem = NULL, err[256];
	struct stat st;
	size_t i;

	create(f);
	for (i = 0; i < NFILES; i++) {
		path_in(f, files[i], path, sizeof(path));
		assert_int_equal(stat(path, &st), 0);
		if (strstr(files[i], ".key") != NULL)
			assert_int_equal(st.st_mode & 07777, 0600);
		else
			assert_int_equal(st.st_mode & 07777, 0644);
	}
	/* keys are PKCS#8 */
	path_in(f, "ca.key", path, sizeof(path));
	assert_int_equal(file_read_all(path, 65536, &pem, NULL, err,
	    sizeof(err)), 0);
	assert_non_null(strstr(pem, "-----BEGIN PRIVATE KEY-----"));
	OPENSSL_cleanse(pem, strlen(pem));
	free(pem);
}

static void
assert_p256(EVP_PKEY *k)
{
	char group[64];
	size_t len = 0;

	assert_int_equal(EVP_PKEY_get_base_id(k), EVP_PKEY_EC);
	assert_int_equal(EVP_PKEY_get_utf8_string_param(k, "group", group,
	    sizeof(group), &len), 1);
	assert_string_equal(group, "prime256v1");
}

static void
assert_days(const ASN1_TIME *from, const ASN1_TIME *to, int min, int max)
{
	int days = 0, secs = 0;

	assert_int_equal(ASN1_TIME_diff(&days, &secs, from, to), 1);
	if (days < min || days > max)
		fail_msg("validity %d days, want %d..%d", days, min, max);
}

static void
assert_cn(X509 *x, const char *prefix)
{
	char cn[128];
	int n;

	n = X509_NAME_get_text_by_NID(X509_get_subject_name(x), NID_commonName,
	    cn, sizeof(cn));
	assert_true(n > 0);
	if (strncmp(cn, prefix, strlen(prefix)) != 0)
		fail_msg("CN \"%s\", want \"%s...\"", cn, prefix);
}

/* A random 16-byte positive serial. */
static void
assert_serial(X509 *x)
{
	const ASN1_INTEGER *s = X509_get0_serialNumber(x);

	assert_int_equal(ASN1_STRING_length(s), 16);
	assert_int_equal(ASN1_STRING_type(s), V_ASN1_INTEGER);
}

static void
test_ca_cert(void **state)
{
	struct fixture *f = *state;
	X509 *ca = NULL;
	EVP_PKEY *key = NULL, *pub = NULL;
	BASIC_CONSTRAINTS *bc = NULL;
	int crit = -1;
	char cn[128];

	create(f);
	ca = load_cert(f, "ca.crt");
	key = load_key(f, "ca.key");
	assert_int_equal(X509_check_private_key(ca, key), 1);
	assert_p256(key);

	assert_cn(ca, "Tether CA ");
	X509_NAME_get_text_by_NID(X509_get_subject_name(ca), NID_commonName, cn,
	    sizeof(cn));
	assert_int_equal(strlen(cn), strlen("Tether CA ") + 16);
	assert_int_equal(X509_NAME_cmp(X509_get_subject_name(ca),
	    X509_get_issuer_name(ca)), 0);
	assert_int_equal(X509_get_version(ca), X509_VERSION_3);

	/* self-signed */
	pub = X509_get_pubkey(ca);
	assert_int_equal(X509_verify(ca, pub), 1);

	bc = X509_get_ext_d2i(ca, NID_basic_constraints, &crit, NULL);
	assert_non_null(bc);
	assert_true(bc->ca);
	assert_int_equal(crit, 1);
	assert_int_equal(X509_get_key_usage(ca), KU_KEY_CERT_SIGN | KU_CRL_SIGN);
	assert_true(X509_check_ca(ca) > 0);
	assert_serial(ca);
	assert_days(X509_get0_notBefore(ca), X509_get0_notAfter(ca), 3649, 3651);

	BASIC_CONSTRAINTS_free(bc);
	EVP_PKEY_free(pub);
	EVP_PKEY_free(key);
	X509_free(ca);
}

static void
test_server_cert(void **state)
{
	struct fixture *f = *state;
	X509 *ca = NULL, *server = NULL;
	EVP_PKEY *key = NULL;
	X509_STORE *store = NULL;
	X509_STORE_CTX *ctx = NULL;
	time_t now = time(NULL);

	create(f);
	ca = load_cert(f, "ca.crt");
	server = load_cert(f, "server.crt");
	key = load_key(f, "server.key");
	assert_int_equal(X509_check_private_key(server, key), 1);
	assert_p256(key);
	assert_cn(server, "tether-gateway");
	assert_serial(server);
	assert_days(X509_get0_notBefore(server), X509_get0_notAfter(server),
	    729, 731);
	assert_true(X509_cmp_time(X509_get0_notBefore(server), &now) < 0);

	/* the chain verifies for a TLS server */
	store = X509_STORE_new();
	assert_non_null(store);
	assert_int_equal(X509_STORE_add_cert(store, ca), 1);
	ctx = X509_STORE_CTX_new();
	assert_non_null(ctx);
	assert_int_equal(X509_STORE_CTX_init(ctx, store, server, NULL), 1);
	assert_int_equal(X509_STORE_CTX_set_purpose(ctx, X509_PURPOSE_SSL_SERVER), 1);
	if (X509_verify_cert(ctx) != 1)
		fail_msg("verify: %s", X509_verify_cert_error_string(
		    X509_STORE_CTX_get_error(ctx)));

	/* not a CA; serverAuth only */
	assert_int_equal(X509_check_ca(server), 0);
	assert_true(X509_get_extended_key_usage(server) & XKU_SSL_SERVER);
	assert_false(X509_get_extended_key_usage(server) & XKU_SSL_CLIENT);

	/* names: the given ones plus localhost and 127.0.0.1 */
	assert_int_equal(X509_check_host(server, "gw.example.com", 0, 0, NULL), 1);
	assert_int_equal(X509_check_host(server, "localhost", 0, 0, NULL), 1);
	assert_int_equal(X509_check_ip_asc(server, "127.0.0.1", 0), 1);
	assert_int_equal(X509_check_ip_asc(server, "10.1.2.3", 0), 1);
	assert_int_equal(X509_check_ip_asc(server, "::1", 0), 1);
	assert_int_equal(X509_check_host(server, "other.example.com", 0, 0,
	    NULL), 0);
	/* an address is an IP SAN, not a DNS name */
	assert_int_equal(X509_check_host(server, "10.1.2.3", 0, 0, NULL), 0);
	assert_int_equal(X509_check_ip_asc(server, "10.1.2.4", 0), 0);

	X509_STORE_CTX_free(ctx);
	X509_STORE_free(store);
	EVP_PKEY_free(key);
	X509_free(server);
	X509_free(ca);
}

/* The peer credential: the CA's, CN tether-replica, clientAuth alone; the
 * server certificate is not one. */
static void
test_peer_cert(void **state)
{
	struct fixture *f = *state;
	X509 *ca, *peer, *server;
	EVP_PKEY *key, *skey;

	create(f);
	ca = load_cert(f, "ca.crt");
	peer = load_cert(f, "peer.crt");
	server = load_cert(f, "server.crt");
	key = load_key(f, "peer.key");
	skey = load_key(f, "server.key");
	assert_int_equal(X509_check_private_key(peer, key), 1);
	assert_int_equal(X509_verify(peer, X509_get0_pubkey(ca)), 1);
	assert_cn(peer, CA_PEER_CN);
	assert_int_equal(X509_get_extended_key_usage(peer), XKU_SSL_CLIENT);
	assert_int_equal(X509_check_ca(peer), 0);
	assert_true(ca_is_peer_cert(peer));
	assert_false(ca_is_peer_cert(server));
	assert_false(ca_is_peer_cert(ca));
	/* its own key, not the server's */
	assert_int_not_equal(EVP_PKEY_eq(key, skey), 1);
	EVP_PKEY_free(skey);
	EVP_PKEY_free(key);
	X509_free(server);
	X509_free(peer);
	X509_free(ca);
}

/* cert renew: a new serial for the same key and names, a new peer key;
 * nothing written without ca.key. */
static void
test_renew(void **state)
{
	struct fixture *f = *state;
	X509 *old, *renewed, *ca, *oldpeer, *peer;
	struct ca_cert_info info;
	char err[512] = "", path[128];
	time_t now = time(NULL);

	create(f);
	old = load_cert(f, "server.crt");
	oldpeer = load_cert(f, "peer.crt");
	ca = load_cert(f, "ca.crt");
	assert_int_equal(ca_renew_server(f->dir, 90, &info, err, sizeof(err)), 0);
	renewed = load_cert(f, "server.crt");
	assert_int_not_equal(ASN1_INTEGER_cmp(X509_get0_serialNumber(old),
	    X509_get0_serialNumber(renewed)), 0);
	assert_int_equal(EVP_PKEY_eq(X509_get0_pubkey(old),
	    X509_get0_pubkey(renewed)), 1);
	assert_int_equal(X509_verify(renewed, X509_get0_pubkey(ca)), 1);
	assert_int_equal(X509_check_host(renewed, "gw.example.com", 0, 0, NULL), 1);
	assert_int_equal(X509_check_ip_asc(renewed, "::1", 0), 1);
	assert_days(X509_get0_notBefore(renewed), X509_get0_notAfter(renewed),
	    89, 91);
	assert_true(info.not_after > (long long)now + 89 * 86400);
	assert_int_equal(ca_server_check(renewed, "/nonexistent", &info, err,
	    sizeof(err)), -1);
	path_in(f, "ca.crt", path, sizeof(path));
	assert_int_equal(ca_server_check(renewed, path, &info, err, sizeof(err)), 0);
	assert_int_equal(ca_server_check(old, path, &info, err, sizeof(err)), 0);
	assert_int_equal(ca_server_check(ca, path, &info, err, sizeof(err)), 0);

	assert_int_equal(ca_renew_peer(f->dir, 90, &info, err, sizeof(err)), 0);
	peer = load_cert(f, "peer.crt");
	assert_true(ca_is_peer_cert(peer));
	assert_int_not_equal(EVP_PKEY_eq(X509_get0_pubkey(oldpeer),
	    X509_get0_pubkey(peer)), 1);

	/* without ca.key: refused, server.crt unchanged */
	path_in(f, "ca.key", path, sizeof(path));
	unlink(path);
	assert_int_equal(ca_renew_server(f->dir, 90, &info, err, sizeof(err)), -1);
	assert_non_null(strstr(err, "no CA key here"));
	assert_int_equal(ca_renew_peer(f->dir, 90, &info, err, sizeof(err)), -1);
	X509_free(old);
	old = load_cert(f, "server.crt");
	assert_int_equal(ASN1_INTEGER_cmp(X509_get0_serialNumber(old),
	    X509_get0_serialNumber(renewed)), 0);
	X509_free(peer);
	X509_free(renewed);
	X509_free(ca);
	X509_free(oldpeer);
	X509_free(old);
}

/* "localhost" given again is not listed twice. */
static void
test_san_no_duplicates(void **state)
{
	struct fixture *f = *state;
	X509 *server = NULL;
	GENERAL_NAMES *gens = NULL;

	create(f);
	server = load_cert(f, "server.crt");
	gens = X509_get_ext_d2i(server, NID_subject_alt_name, NULL, NULL);
	assert_non_null(gens);
	/* gw.example.com, 10.1.2.3, ::1, localhost, 127.0.0.1 */
	assert_int_equal(sk_GENERAL_NAME_num(gens), 5);
	GENERAL_NAMES_free(gens);
	X509_free(server);
}

static void
test_bad_hostnames(void **state)
{
	struct fixture *f = *state;
	const char *bad[] = { "", "two words", "a,DNS:evil.example", "x\n" };
	char err[256], path[128];
	size_t i, j;

	for (i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		err[0] = '\0';
		assert_int_equal(ca_create(f->dir, &bad[i], 1, err, sizeof(err)), -1);
		assert_true(strlen(err) > 0);
		/* nothing half-written */
		for (j = 0; j < NFILES; j++) {
			path_in(f, files[j], path, sizeof(path));
			assert_false(file_exists(path));
		}
	}
	err[0] = '\0';
	assert_int_equal(ca_create("/nonexistent/tether-test", NULL, 0, err,
	    sizeof(err)), -1);
	assert_true(strlen(err) > 0);
}

/* No hostnames at all still gives localhost and 127.0.0.1. */
static void
test_no_hostnames(void **state)
{
	struct fixture *f = *state;
	X509 *server = NULL;
	char err[256];

	assert_int_equal(ca_create(f->dir, NULL, 0, err, sizeof(err)), 0);
	server = load_cert(f, "server.crt");
	assert_int_equal(X509_check_host(server, "localhost", 0, 0, NULL), 1);
	assert_int_equal(X509_check_ip_asc(server, "127.0.0.1", 0), 1);
	X509_free(server);
}

/* The checksum computed here, independently: "sha256:" + hex(SHA-256(DER)). */
static void
reference_checksum(X509 *x, char out[CA_CHECKSUM_MAX])
{
	unsigned char *der = NULL;
	unsigned char md[32];
	unsigned int mdlen = 0;
	int len, i;

	len = i2d_X509(x, &der);
	assert_true(len > 0);
	assert_int_equal(EVP_Digest(der, (size_t)len, md, &mdlen, EVP_sha256(),
	    NULL), 1);
	OPENSSL_free(der);
	strcpy(out, "sha256:");
	for (i = 0; i < 32; i++)
		snprintf(out + 7 + 2 * i, 3, "%02x", md[i]);
}

static void
test_checksum(void **state)
{
	struct fixture *f = *state;
	X509 *ca = NULL;
	char want[CA_CHECKSUM_MAX], got[CA_CHECKSUM_MAX], path[128], err[256];
	char *crt = NULL, *key = NULL, *both = NULL;
	size_t crtlen = 0, keylen = 0;

	create(f);
	ca = load_cert(f, "ca.crt");
	reference_checksum(ca, want);
	X509_free(ca);

	path_in(f, "ca.crt", path, sizeof(path));
	assert_int_equal(ca_checksum_file(path, got, err, sizeof(err)), 0);
	assert_string_equal(got, want);
	assert_int_equal(strlen(got), 71);
	assert_int_equal(ca_checksum_valid(got), 0);

	/* from a buffer, and the first certificate after some other block */
	assert_int_equal(file_read_all(path, 65536, &crt, &crtlen, err,
	    sizeof(err)), 0);
	assert_int_equal(ca_checksum_pem(crt, crtlen, got, err, sizeof(err)), 0);
	assert_string_equal(got, want);
	path_in(f, "server.key", path, sizeof(path));
	assert_int_equal(file_read_all(path, 65536, &key, &keylen, err,
	    sizeof(err)), 0);
	both = malloc(keylen + crtlen + 1);
	assert_non_null(both);
	memcpy(both, key, keylen);
	memcpy(both + keylen, crt, crtlen + 1);
	assert_int_equal(ca_checksum_pem(both, keylen + crtlen, got, err,
	    sizeof(err)), 0);
	assert_string_equal(got, want);

	/* the server certificate has a different checksum */
	path_in(f, "server.crt", path, sizeof(path));
	assert_int_equal(ca_checksum_file(path, got, err, sizeof(err)), 0);
	assert_string_not_equal(got, want);

	free(both);
	free(key);
	free(crt);
}

static void
test_checksum_errors(void **state)
{
	static const char garbage[] = "this is not a certificate\n";
	static const char broken[] = "-----BEGIN CERTIFICATE-----\nAAAA\n"
	    "-----END CERTIFICATE-----\n";
	char out[CA_CHECKSUM_MAX], err[256];

	err[0] = '\0';
	assert_int_equal(ca_checksum_pem(garbage, sizeof(garbage) - 1, out, err,
	    sizeof(err)), -1);
	assert_true(strlen(err) > 0);
	err[0] = '\0';
	assert_int_equal(ca_checksum_pem(broken, sizeof(broken) - 1, out, err,
	    sizeof(err)), -1);
	assert_true(strlen(err) > 0);
	err[0] = '\0';
	assert_int_equal(ca_checksum_pem("", 0, out, err, sizeof(err)), -1);
	assert_true(strlen(err) > 0);
	err[0] = '\0';
	assert_int_equal(ca_checksum_file("/nonexistent/ca.crt", out, err,
	    sizeof(err)), -1);
	assert_non_null(strstr(err, "/nonexistent/ca.crt"));
}

static void
test_checksum_valid(void **state)
{
	const char *hex = "0123456789abcdef0123456789abcdef"
	    "0123456789abcdef0123456789abcdef";
	char s[128];

	snprintf(s, sizeof(s), "sha256:%s", hex);
	assert_int_equal(ca_checksum_valid(s), 0);

	assert_int_equal(ca_checksum_valid(hex), -1);
	assert_int_equal(ca_checksum_valid(""), -1);
	assert_int_equal(ca_checksum_valid("sha256:"), -1);
	snprintf(s, sizeof(s), "sha1:%s", hex);
	assert_int_equal(ca_checksum_valid(s), -1);
	snprintf(s, sizeof(s), "SHA256:%s", hex);
	assert_int_equal(ca_checksum_valid(s), -1);
	snprintf(s, sizeof(s), "sha256:%.63s", hex);
	assert_int_equal(ca_checksum_valid(s), -1);
	snprintf(s, sizeof(s), "sha256:%s0", hex);
	assert_int_equal(ca_checksum_valid(s), -1);
	snprintf(s, sizeof(s), "sha256:%s\n", hex);
	assert_int_equal(ca_checksum_valid(s), -1);
	snprintf(s, sizeof(s), "sha256:%.63sA", hex);
	assert_int_equal(ca_checksum_valid(s), -1);
	snprintf(s, sizeof(s), "sha256:%.63sg", hex);
	assert_int_equal(ca_checksum_valid(s), -1);
	snprintf(s, sizeof(s), " sha256:%s", hex);
	assert_int_equal(ca_checksum_valid(s), -1);
}

/* ---- CA rotation ---- */

/* Every certificate of the PEM file dir/name, in order. */
static STACK_OF(X509) *
load_chain(const struct fixture *f, const char *name)
{
	STACK_OF(X509) *sk = sk_X509_new_null();
	char path[128];
	FILE *fp;
	X509 *x;

	assert_non_null(sk);
	path_in(f, name, path, sizeof(path));
	fp = fopen(path, "r");
	assert_non_null(fp);
	while ((x = PEM_read_X509(fp, NULL, NULL, NULL)) != NULL)
		assert_true(sk_X509_push(sk, x) > 0);
	ERR_clear_error();
	fclose(fp);
	assert_true(sk_X509_num(sk) > 0);
	return sk;
}

/*
 * What a client trusting only anchor makes of the chain in file name (the
 * leaf first, the rest sent as untrusted intermediates, as TLS does), for
 * purpose: X509_V_OK or the verify error.
 */
static int
verify_with(const struct fixture *f, X509 *anchor, const char *name,
    int purpose)
{
	STACK_OF(X509) *chain = load_chain(f, name);
	X509_STORE *store = X509_STORE_new();
	X509_STORE_CTX *ctx = X509_STORE_CTX_new();
	int e;

	assert_non_null(store);
	assert_non_null(ctx);
	assert_int_equal(X509_STORE_add_cert(store, anchor), 1);
	assert_int_equal(X509_STORE_CTX_init(ctx, store, sk_X509_value(chain, 0),
	    chain), 1);
	assert_int_equal(X509_STORE_CTX_set_purpose(ctx, purpose), 1);
	e = X509_verify_cert(ctx) == 1 ? X509_V_OK : X509_STORE_CTX_get_error(ctx);
	if (e == X509_V_OK)
		assert_int_equal(X509_STORE_CTX_get_error(ctx), X509_V_OK);
	X509_STORE_CTX_free(ctx);
	X509_STORE_free(store);
	sk_X509_pop_free(chain, X509_free);
	ERR_clear_error();
	return e;
}

static void
assert_checksum_of(const struct fixture *f, const char *name, const char *want)
{
	char path[128], sum[CA_CHECKSUM_MAX], err[256];

	path_in(f, name, path, sizeof(path));
	assert_int_equal(ca_checksum_file(path, sum, err, sizeof(err)), 0);
	assert_string_equal(sum, want);
}

static int
exists_in(const struct fixture *f, const char *name)
{
	char path[128];

	path_in(f, name, path, sizeof(path));
	return file_exists(path);
}

static void
rotate_start(struct fixture *f, struct ca_rotation *r)
{
	char err[512] = "";

	if (ca_rotate_start(f->dir, r, err, sizeof(err)) != 0)
		fail_msg("ca_rotate_start: %s", err);
}

/* The overlap: the server chain and the peer chain verify for a client
 * trusting only the old CA (through the cross-certificate) and for one
 * trusting only the new CA; server.key is kept, peer.key is new. */
static void
test_rotate_start(void **state)
{
	struct fixture *f = *state;
	struct ca_rotation *r = calloc(1, sizeof(*r));
	X509 *old, *next, *cross, *server;
	EVP_PKEY *oldpeer, *peer;
	struct ca_cert_info info;
	char path[128], err[512], oldsum[CA_CHECKSUM_MAX];
	struct stat st;

	assert_non_null(r);
	create(f);
	old = load_cert(f, "ca.crt");
	oldpeer = load_key(f, "peer.key");
	path_in(f, "ca.crt", path, sizeof(path));
	assert_int_equal(ca_checksum_file(path, oldsum, err, sizeof(err)), 0);
	assert_int_equal(ca_rotation_read(f->dir, r, err, sizeof(err)), 0);
	assert_int_equal(r->phase, CA_PHASE_NONE);

	rotate_start(f, r);
	assert_int_equal(r->phase, CA_PHASE_OVERLAP);
	assert_string_equal(r->current_checksum, oldsum);
	assert_checksum_of(f, "ca.next.crt", r->next_checksum);
	assert_string_not_equal(r->next_checksum, oldsum);
	assert_true(r->cross_len > 0 && r->next_len > 0);
	path_in(f, "ca.next.key", path, sizeof(path));
	assert_int_equal(stat(path, &st), 0);
	assert_int_equal(st.st_mode & 07777, 0600);

	next = load_cert(f, "ca.next.crt");
	cross = load_cert(f, "ca.cross.crt");
	server = load_cert(f, "server.crt");
	assert_int_equal(X509_verify(next, X509_get0_pubkey(next)), 1);
	assert_int_equal(X509_verify(cross, X509_get0_pubkey(old)), 1);
	assert_int_equal(X509_NAME_cmp(X509_get_subject_name(cross),
	    X509_get_subject_name(next)), 0);
	assert_true(X509_check_ca(cross) > 0);
	assert_int_equal(X509_verify(server, X509_get0_pubkey(next)), 1);
	assert_int_equal(X509_check_host(server, "gw.example.com", 0, 0, NULL), 1);

	/* The point of the overlap: both kinds of client verify both chains. */
	assert_int_equal(verify_with(f, old, "server.crt", X509_PURPOSE_SSL_SERVER),
	    X509_V_OK);
	assert_int_equal(verify_with(f, next, "server.crt", X509_PURPOSE_SSL_SERVER),
	    X509_V_OK);
	assert_int_equal(verify_with(f, old, "peer.crt", X509_PURPOSE_SSL_CLIENT),
	    X509_V_OK);
	assert_int_equal(verify_with(f, next, "peer.crt", X509_PURPOSE_SSL_CLIENT),
	    X509_V_OK);
	peer = load_key(f, "peer.key");
	assert_int_not_equal(EVP_PKEY_eq(peer, oldpeer), 1);
	/* What certreload checks it serves: the new CA's, not the old one's. */
	path_in(f, "ca.crt", path, sizeof(path));
	assert_int_equal(ca_server_check(server, path, &info, err, sizeof(err)), -1);
	path_in(f, "ca.next.crt", path, sizeof(path));
	assert_int_equal(ca_server_check(server, path, &info, err, sizeof(err)), 0);

	/* Under way: a second start and cert renew are refused. */
	assert_int_equal(ca_rotate_start(f->dir, r, err, sizeof(err)), -1);
	assert_non_null(strstr(err, "under way"));
	assert_int_equal(ca_renew_server(f->dir, 90, &info, err, sizeof(err)), -1);
	assert_non_null(strstr(err, "rotation is under way"));
	assert_int_equal(ca_renew_peer(f->dir, 90, &info, err, sizeof(err)), -1);
	assert_checksum_of(f, "ca.next.crt", r->next_checksum);

	EVP_PKEY_free(peer);
	EVP_PKEY_free(oldpeer);
	X509_free(server);
	X509_free(cross);
	X509_free(next);
	X509_free(old);
	free(r);
}

/* The finish: the new CA alone; a client trusting only the old one is
 * refused by the server chain and the peer chain. */
static void
test_rotate_finish(void **state)
{
	struct fixture *f = *state;
	struct ca_rotation *r = calloc(1, sizeof(*r));
	X509 *old, *next, *ca;
	EVP_PKEY *key;
	STACK_OF(X509) *chain;
	struct ca_cert_info info;
	char err[512] = "", oldsum[CA_CHECKSUM_MAX], newsum[CA_CHECKSUM_MAX];

	assert_non_null(r);
	create(f);
	old = load_cert(f, "ca.crt");
	assert_int_equal(ca_rotate_finish(f->dir, r, err, sizeof(err)), -1);
	assert_non_null(strstr(err, "no CA rotation under way"));
	rotate_start(f, r);
	snprintf(oldsum, sizeof(oldsum), "%s", r->current_checksum);
	snprintf(newsum, sizeof(newsum), "%s", r->next_checksum);
	next = load_cert(f, "ca.next.crt");

	if (ca_rotate_finish(f->dir, r, err, sizeof(err)) != 0)
		fail_msg("ca_rotate_finish: %s", err);
	assert_int_equal(r->phase, CA_PHASE_FINAL);
	assert_string_equal(r->current_checksum, newsum);
	assert_string_equal(r->next_checksum, newsum);
	assert_string_equal(r->old_checksum, oldsum);
	assert_int_equal(r->cross_len, 0);
	assert_checksum_of(f, "ca.crt", newsum);
	assert_checksum_of(f, "ca.old.crt", oldsum);
	assert_false(exists_in(f, "ca.next.crt"));
	assert_false(exists_in(f, "ca.next.key"));
	assert_false(exists_in(f, "ca.cross.crt"));
	ca = load_cert(f, "ca.crt");
	key = load_key(f, "ca.key");
	assert_int_equal(X509_check_private_key(ca, key), 1);
	chain = load_chain(f, "server.crt");
	assert_int_equal(sk_X509_num(chain), 1);
	sk_X509_pop_free(chain, X509_free);

	/* The old CA is refused now; the new one verifies. */
	assert_int_not_equal(verify_with(f, old, "server.crt",
	    X509_PURPOSE_SSL_SERVER), X509_V_OK);
	assert_int_not_equal(verify_with(f, old, "peer.crt",
	    X509_PURPOSE_SSL_CLIENT), X509_V_OK);
	assert_int_equal(verify_with(f, next, "server.crt",
	    X509_PURPOSE_SSL_SERVER), X509_V_OK);
	assert_int_equal(verify_with(f, next, "peer.crt",
	    X509_PURPOSE_SSL_CLIENT), X509_V_OK);

	/* Final until ca.old.crt goes; a second finish is refused; cert
	 * renew works again, from the new CA. */
	assert_int_equal(ca_rotation_read(f->dir, r, err, sizeof(err)), 0);
	assert_int_equal(r->phase, CA_PHASE_FINAL);
	assert_int_equal(ca_rotate_finish(f->dir, r, err, sizeof(err)), -1);
	assert_int_equal(ca_renew_server(f->dir, 90, &info, err, sizeof(err)), 0);
	assert_int_equal(verify_with(f, next, "server.crt",
	    X509_PURPOSE_SSL_SERVER), X509_V_OK);
	unlink_in(f, "ca.old.crt");
	assert_int_equal(ca_rotation_read(f->dir, r, err, sizeof(err)), 0);
	assert_int_equal(r->phase, CA_PHASE_NONE);

	EVP_PKEY_free(key);
	X509_free(ca);
	X509_free(next);
	X509_free(old);
	free(r);
}

/* dir/to := dir/from's bytes. */
static void
copy_in(const struct fixture *f, const char *from, const char *to, mode_t mode)
{
	char src[128], dst[128], *data = NULL, err[256];
	size_t len = 0;

	path_in(f, from, src, sizeof(src));
	path_in(f, to, dst, sizeof(dst));
	assert_int_equal(file_read_all(src, 65536, &data, &len, err,
	    sizeof(err)), 0);
	assert_int_equal(file_write_atomic(dst, data, len, mode, err,
	    sizeof(err)), 0);
	free(data);
}

/* A finish cut short after ca.crt became the new CA reads as final (what
 * a replica given the new ca.crt beside the overlap's files serves) and
 * finishes when run again, keeping the real old CA as ca.old.crt. */
static void
test_rotate_finish_resumes(void **state)
{
	struct fixture *f = *state;
	struct ca_rotation *r = calloc(1, sizeof(*r));
	char err[512] = "", oldsum[CA_CHECKSUM_MAX], newsum[CA_CHECKSUM_MAX];

	assert_non_null(r);
	create(f);
	rotate_start(f, r);
	snprintf(oldsum, sizeof(oldsum), "%s", r->current_checksum);
	snprintf(newsum, sizeof(newsum), "%s", r->next_checksum);
	copy_in(f, "ca.crt", "ca.old.crt", 0644);
	copy_in(f, "ca.next.key", "ca.key", 0600);
	copy_in(f, "ca.next.crt", "ca.crt", 0644);
	unlink_in(f, "ca.next.key");
	assert_int_equal(ca_rotation_read(f->dir, r, err, sizeof(err)), 0);
	assert_int_equal(r->phase, CA_PHASE_FINAL);
	assert_string_equal(r->next_checksum, newsum);
	assert_string_equal(r->old_checksum, oldsum);
	assert_int_equal(r->cross_len, 0);
	if (ca_rotate_finish(f->dir, r, err, sizeof(err)) != 0)
		fail_msg("ca_rotate_finish: %s", err);
	assert_int_equal(r->phase, CA_PHASE_FINAL);
	assert_checksum_of(f, "ca.crt", newsum);
	assert_checksum_of(f, "ca.old.crt", oldsum);
	free(r);
}

/* What a serving replica will not send agents: a cross-certificate that is
 * not a CA, a "new CA" that is not self-signed; and start needs ca.key. */
static void
test_rotation_read_refuses(void **state)
{
	struct fixture *f = *state;
	struct ca_rotation *r = calloc(1, sizeof(*r));
	char err[512] = "";

	assert_non_null(r);
	create(f);
	rotate_start(f, r);
	copy_in(f, "ca.cross.crt", "ca.next.crt.keep", 0644);
	copy_in(f, "server.crt", "ca.cross.crt", 0644);
	assert_int_equal(ca_rotation_read(f->dir, r, err, sizeof(err)), -1);
	assert_non_null(strstr(err, "cross is not a CA certificate"));
	assert_int_equal(r->phase, CA_PHASE_NONE);
	assert_true(r->current_checksum[0] != '\0');
	copy_in(f, "ca.next.crt.keep", "ca.cross.crt", 0644);
	copy_in(f, "ca.next.crt.keep", "ca.next.crt", 0644);
	unlink_in(f, "ca.next.crt.keep");
	assert_int_equal(ca_rotation_read(f->dir, r, err, sizeof(err)), -1);
	assert_non_null(strstr(err, "not a self-signed CA"));

	unlink_in(f, "ca.next.crt");
	unlink_in(f, "ca.key");
	assert_int_equal(ca_rotate_start(f->dir, r, err, sizeof(err)), -1);
	assert_non_null(strstr(err, "no CA key here"));
	assert_false(exists_in(f, "ca.next.crt"));
	free(r);
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_files_and_modes, setup, teardown),
		cmocka_unit_test_setup_teardown(test_ca_cert, setup, teardown),
		cmocka_unit_test_setup_teardown(test_server_cert, setup, teardown),
		cmocka_unit_test_setup_teardown(test_peer_cert, setup, teardown),
		cmocka_unit_test_setup_teardown(test_renew, setup, teardown),
		cmocka_unit_test_setup_teardown(test_san_no_duplicates, setup,
		    teardown),
		cmocka_unit_test_setup_teardown(test_bad_hostnames, setup, teardown),
		cmocka_unit_test_setup_teardown(test_no_hostnames, setup, teardown),
		cmocka_unit_test_setup_teardown(test_checksum, setup, teardown),
		cmocka_unit_test_setup_teardown(test_rotate_start, setup, teardown),
		cmocka_unit_test_setup_teardown(test_rotate_finish, setup, teardown),
		cmocka_unit_test_setup_teardown(test_rotate_finish_resumes, setup,
		    teardown),
		cmocka_unit_test_setup_teardown(test_rotation_read_refuses, setup,
		    teardown),
		cmocka_unit_test(test_checksum_errors),
		cmocka_unit_test(test_checksum_valid),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
