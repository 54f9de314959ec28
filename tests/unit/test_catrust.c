/*
 * test_catrust.c: the agent's side of a CA rotation (tunnel-client/catrust.c):
 * the cross-certificate check, pure, on certificates two real gateway data
 * directories made (auth/ca.c, auth/carotate.c: `init` and `ca rotate
 * start`); then the state directory's files through "overlap" and "final",
 * each step repeated (idempotent), refusals leaving the files alone, and
 * the sets a crash can leave (ca.crt old or new, perhaps ca.next.crt)
 * loading as a trust the next dial can use.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <openssl/pem.h>
#include <openssl/x509.h>

#include "ca.h"
#include "carotate.h"
#include "catrust.h"
#include "fileio.h"

struct fixture {
	char gw_a[64], gw_b[64], node[64];  /* two gateways, one node */
	struct ca_rotation rot_a, rot_b;    /* each one's `ca rotate start` */
	char *ca_a_pem;                     /* gw_a's ca.crt before the rotation */
	X509 *pinned_a;
	unsigned char server_der[CA_DER_MAX];  /* gw_a's new server.crt leaf */
	size_t server_len;
};

static void
path_in(const char *dir, const char *name, char *out, size_t outlen)
{
	snprintf(out, outlen, "%s/%s", dir, name);
}

static char *
read_in(const char *dir, const char *name)
{
	char path[128], err[256], *buf = NULL;

	path_in(dir, name, path, sizeof(path));
	if (file_read_all(path, 65536, &buf, NULL, err, sizeof(err)) != 0)
		return NULL;
	return buf;
}

static X509 *
pem_cert(const char *pem)
{
	BIO *b = BIO_new_mem_buf(pem, -1);
	X509 *x = PEM_read_bio_X509(b, NULL, NULL, NULL);

	BIO_free(b);
	return x;
}

static void
write_in(const char *dir, const char *name, const char *text)
{
	char path[128], err[256];

	path_in(dir, name, path, sizeof(path));
	assert_int_equal(file_write_atomic(path, text, strlen(text), 0644, err,
	    sizeof(err)), 0);
}

static int
exists_in(const char *dir, const char *name)
{
	char path[128];

	path_in(dir, name, path, sizeof(path));
	return file_exists(path);
}

static void
gateway(char *dir, const char *tmpl, struct ca_rotation *rot, char **ca_pem)
{
	static const char *const hosts[] = { "127.0.0.1" };
	char err[256];

	strcpy(dir, tmpl);
	assert_non_null(mkdtemp(dir));
	if (ca_create(dir, hosts, 1, err, sizeof(err)) != 0)
		fail_msg("ca_create: %s", err);
	if (ca_pem != NULL)
		assert_non_null(*ca_pem = read_in(dir, "ca.crt"));
	if (ca_rotate_start(dir, rot, err, sizeof(err)) != 0)
		fail_msg("ca_rotate_start: %s", err);
	assert_int_equal(rot->phase, CA_PHASE_OVERLAP);
}

static int
setup(void **state)
{
	struct fixture *f = calloc(1, sizeof(*f));
	char *server_pem;
	X509 *leaf;
	unsigned char *p;
	int n;

	gateway(f->gw_a, "/tmp/test_catrust_a.XXXXXX", &f->rot_a, &f->ca_a_pem);
	gateway(f->gw_b, "/tmp/test_catrust_b.XXXXXX", &f->rot_b, NULL);
	assert_non_null(f->pinned_a = pem_cert(f->ca_a_pem));
	assert_non_null(server_pem = read_in(f->gw_a, "server.crt"));
	assert_non_null(leaf = pem_cert(server_pem));
	n = i2d_X509(leaf, NULL);
	assert_true(n > 0 && (size_t)n <= sizeof(f->server_der));
	p = f->server_der;
	i2d_X509(leaf, &p);
	f->server_len = (size_t)n;
	X509_free(leaf);
	free(server_pem);
	/* The node, as join leaves it: gw_a's CA pinned. */
	strcpy(f->node, "/tmp/test_catrust_node.XXXXXX");
	assert_non_null(mkdtemp(f->node));
	write_in(f->node, "ca.crt", f->ca_a_pem);
	*state = f;
	return 0;
}

static int
teardown(void **state)
{
	struct fixture *f = *state;
	char cmd[256];

	snprintf(cmd, sizeof(cmd), "rm -rf %s %s %s", f->gw_a, f->gw_b, f->node);
	if (system(cmd) != 0)
		fprintf(stderr, "cannot remove %s\n", cmd);
	X509_free(f->pinned_a);
	free(f->ca_a_pem);
	free(f);
	return 0;
}

/* ---- the cross-certificate check (pure) ---- */

static void
check_refused(X509 *pinned, const unsigned char *next, size_t next_len,
    const unsigned char *cross, size_t cross_len, const char *want)
{
	X509 *out = (X509 *)1;
	char why[256] = "";

	assert_int_equal(catrust_check_cross(pinned, next, next_len, cross,
	    cross_len, &out, why, sizeof(why)), -1);
	assert_null(out);
	if (strcmp(why, want) != 0)
		fail_msg("reason \"%s\", want \"%s\"", why, want);
}

static void
test_cross_accepted(void **state)
{
	struct fixture *f = *state;
	X509 *next = NULL;
	char why[256] = "", sum[CA_CHECKSUM_MAX];
	unsigned char *der = NULL;
	int n;

	assert_int_equal(catrust_check_cross(f->pinned_a, f->rot_a.next,
	    f->rot_a.next_len, f->rot_a.cross, f->rot_a.cross_len, &next, why,
	    sizeof(why)), 0);
	assert_non_null(next);
	n = i2d_X509(next, &der);
	assert_int_equal(ca_checksum_der(der, (size_t)n, sum), 0);
	assert_string_equal(sum, f->rot_a.next_checksum);
	OPENSSL_free(der);
	X509_free(next);
}

static void
test_cross_refused(void **state)
{
	struct fixture *f = *state;
	const struct ca_rotation *a = &f->rot_a, *b = &f->rot_b;
	unsigned char junk[64];

	memset(junk, 0x30, sizeof(junk));
	/* another installation's rotation, offered to gw_a's nodes */
	check_refused(f->pinned_a, b->next, b->next_len, b->cross, b->cross_len,
	    "cross was not issued by the trusted CA");
	/* a next the cross-certificate does not name */
	check_refused(f->pinned_a, b->next, b->next_len, a->cross, a->cross_len,
	    "cross does not name next's subject and key");
	/* the new CA vouching for itself */
	check_refused(f->pinned_a, a->next, a->next_len, a->next, a->next_len,
	    "cross was not issued by the trusted CA");
	/* a leaf as the next CA */
	check_refused(f->pinned_a, f->server_der, f->server_len, a->cross,
	    a->cross_len, "next is not a self-signed CA certificate");
	/* a leaf as the cross-certificate */
	check_refused(f->pinned_a, a->next, a->next_len, f->server_der,
	    f->server_len, "cross is not a CA certificate");
	/* not certificates at all */
	check_refused(f->pinned_a, junk, sizeof(junk), a->cross, a->cross_len,
	    "next is not a certificate");
	check_refused(f->pinned_a, a->next, a->next_len - 1, a->cross,
	    a->cross_len, "next is not a certificate");
	check_refused(f->pinned_a, a->next, a->next_len, a->cross, 0,
	    "cross is not a certificate");
	/* one certificate and something after it */
	{
		unsigned char longer[CA_DER_MAX + 1];

		memcpy(longer, a->next, a->next_len);
		longer[a->next_len] = 0;
		check_refused(f->pinned_a, longer, a->next_len + 1, a->cross,
		    a->cross_len, "next is not a certificate");
	}
	check_refused(NULL, a->next, a->next_len, a->cross, a->cross_len,
	    "no pinned CA");
}

/* ---- the state directory's files ---- */

static void
settings_ca(struct frame_ca *ca, enum frame_ca_phase phase,
    const struct ca_rotation *rot, bool with_cross)
{
	memset(ca, 0, sizeof(*ca));
	ca->present = true;
	ca->phase = phase;
	memcpy(ca->next, rot->next, rot->next_len);
	ca->next_len = rot->next_len;
	if (with_cross) {
		memcpy(ca->cross, rot->cross, rot->cross_len);
		ca->cross_len = rot->cross_len;
	}
}

static void
assert_held(const struct catrust *t, const char *first, const char *second)
{
	char held[FRAME_CA_MAX_HELD][FRAME_CA_SUM_LEN + 1];
	size_t n = catrust_held(t, held);

	assert_int_equal(n, second != NULL ? 2 : 1);
	assert_string_equal(held[0], first);
	if (second != NULL)
		assert_string_equal(held[1], second);
}

static void
apply_ok(const char *dir, struct catrust *t, const struct frame_ca *in, int want)
{
	char why[256] = "";
	int r = catrust_apply(dir, t, in, why, sizeof(why));

	if (r != want)
		fail_msg("catrust_apply: %d (%s), want %d", r, why, want);
}

static void
test_overlap_then_final(void **state)
{
	struct fixture *f = *state;
	const char *old_sum, *new_sum = f->rot_a.next_checksum;
	struct catrust t, again;
	struct frame_ca in;
	char err[256], *pem;

	assert_int_equal(catrust_load(f->node, &t, err, sizeof(err)), 0);
	assert_null(t.next);
	old_sum = f->rot_a.current_checksum;
	assert_held(&t, old_sum, NULL);

	settings_ca(&in, FRAME_CA_OVERLAP, &f->rot_a, true);
	apply_ok(f->node, &t, &in, 1);
	assert_true(exists_in(f->node, "ca.next.crt"));
	assert_held(&t, old_sum, new_sum);
	apply_ok(f->node, &t, &in, 0);          /* the same next again */
	/* what a restarted agent reads: both */
	assert_int_equal(catrust_load(f->node, &again, err, sizeof(err)), 0);
	assert_held(&again, old_sum, new_sum);
	catrust_clear(&again);

	settings_ca(&in, FRAME_CA_FINAL, &f->rot_a, false);
	apply_ok(f->node, &t, &in, 1);
	assert_false(exists_in(f->node, "ca.next.crt"));
	assert_held(&t, new_sum, NULL);
	apply_ok(f->node, &t, &in, 0);          /* a repeated "final" */
	settings_ca(&in, FRAME_CA_OVERLAP, &f->rot_a, true);
	apply_ok(f->node, &t, &in, 0);          /* a lagging replica's "overlap" */
	assert_false(exists_in(f->node, "ca.next.crt"));
	assert_int_equal(catrust_load(f->node, &again, err, sizeof(err)), 0);
	assert_held(&again, new_sum, NULL);
	catrust_clear(&again);
	/* ca.crt is the gateway's new CA, byte for byte */
	assert_non_null(pem = read_in(f->gw_a, "ca.next.crt"));
	{
		char *mine = read_in(f->node, "ca.crt");

		assert_non_null(mine);
		assert_string_equal(mine, pem);
		free(mine);
	}
	free(pem);
	catrust_clear(&t);
}

/* An agent that was down for the overlap but up at the finish, while the
 * gateway still serves the cross-certificate: "final" with cross. */
static void
test_final_through_cross(void **state)
{
	struct fixture *f = *state;
	struct catrust t;
	struct frame_ca in;
	char err[256];

	assert_int_equal(catrust_load(f->node, &t, err, sizeof(err)), 0);
	settings_ca(&in, FRAME_CA_FINAL, &f->rot_a, true);
	apply_ok(f->node, &t, &in, 1);
	assert_false(exists_in(f->node, "ca.next.crt"));
	assert_held(&t, f->rot_a.next_checksum, NULL);
	catrust_clear(&t);
}

static void
test_refusals_change_nothing(void **state)
{
	struct fixture *f = *state;
	const char *old_sum = f->rot_a.current_checksum;
	struct catrust t;
	struct frame_ca in;
	char err[256], why[256];

	assert_int_equal(catrust_load(f->node, &t, err, sizeof(err)), 0);
	/* another installation's overlap */
	settings_ca(&in, FRAME_CA_OVERLAP, &f->rot_b, true);
	assert_int_equal(catrust_apply(f->node, &t, &in, why, sizeof(why)), -1);
	assert_string_equal(why, "cross was not issued by the trusted CA");
	assert_false(exists_in(f->node, "ca.next.crt"));
	/* "final" naming a CA nothing vouches for */
	settings_ca(&in, FRAME_CA_FINAL, &f->rot_a, false);
	assert_int_equal(catrust_apply(f->node, &t, &in, why, sizeof(why)), -1);
	settings_ca(&in, FRAME_CA_FINAL, &f->rot_b, true);
	assert_int_equal(catrust_apply(f->node, &t, &in, why, sizeof(why)), -1);
	assert_false(exists_in(f->node, "ca.next.crt"));
	assert_held(&t, old_sum, NULL);
	catrust_clear(&t);
	assert_int_equal(catrust_load(f->node, &t, err, sizeof(err)), 0);
	assert_held(&t, old_sum, NULL);
	catrust_clear(&t);
}

/*
 * What a kill -9 can leave, step by step: before ca.next.crt (old alone),
 * after it (both), after the rename (new alone: ca.next.crt gone in the
 * same step).  Each loads as a set of 1 or 2 CAs; a ca.next.crt that is
 * not a certificate (not written by the agent: file_write_atomic never
 * leaves half a file) is ignored, not fatal.
 */
static void
test_crash_states_load(void **state)
{
	struct fixture *f = *state;
	struct catrust t;
	char err[256], *next_pem;

	assert_non_null(next_pem = read_in(f->gw_a, "ca.next.crt"));
	write_in(f->node, "ca.next.crt", next_pem);
	assert_int_equal(catrust_load(f->node, &t, err, sizeof(err)), 0);
	assert_held(&t, f->rot_a.current_checksum, f->rot_a.next_checksum);
	catrust_clear(&t);
	write_in(f->node, "ca.next.crt", "not a certificate\n");
	assert_int_equal(catrust_load(f->node, &t, err, sizeof(err)), 1);
	assert_null(t.next);
	assert_held(&t, f->rot_a.current_checksum, NULL);
	catrust_clear(&t);
	write_in(f->node, "ca.crt", next_pem);
	assert_int_equal(catrust_load(f->node, &t, err, sizeof(err)), 1);
	assert_held(&t, f->rot_a.next_checksum, NULL);
	catrust_clear(&t);
	write_in(f->node, "ca.crt", "garbage\n");
	assert_int_equal(catrust_load(f->node, &t, err, sizeof(err)), -1);
	free(next_pem);
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_cross_accepted, setup, teardown),
		cmocka_unit_test_setup_teardown(test_cross_refused, setup, teardown),
		cmocka_unit_test_setup_teardown(test_overlap_then_final, setup, teardown),
		cmocka_unit_test_setup_teardown(test_final_through_cross, setup, teardown),
		cmocka_unit_test_setup_teardown(test_refusals_change_nothing, setup, teardown),
		cmocka_unit_test_setup_teardown(test_crash_states_load, setup, teardown),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
