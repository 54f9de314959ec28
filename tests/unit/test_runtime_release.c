/*
 * test_runtime_release.c: runtime_release_startup (common/runtime.c), what
 * the agent calls once its tunnel is active: the resident pages of the
 * read-only file mappings (code and constants of the program and its
 * libraries) go, writable data (RELRO'd pointer tables included) and the
 * heap keep their contents, and the code still runs afterwards.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <openssl/evp.h>
#include <openssl/sha.h>

#include "runtime.h"

/* KiB resident in file mappings that are not writable (smaps). */
static long
readonly_file_rss_kib(void)
{
	FILE *f = fopen("/proc/self/smaps", "r");
	char line[512], perms[8], path[256];
	long total = 0, kib;
	int counting = 0;

	assert_non_null(f);
	while (fgets(line, sizeof(line), f) != NULL) {
		unsigned long lo, hi;

		path[0] = '\0';
		if (sscanf(line, "%lx-%lx %7s %*s %*s %*s %255s", &lo, &hi, perms, path) >= 3)
			counting = perms[1] != 'w' && path[0] == '/';
		else if (counting && sscanf(line, "Rss: %ld kB", &kib) == 1)
			total += kib;
	}
	fclose(f);
	return total;
}

static int add_one(int x) { return x + 1; }
static int add_two(int x) { return x + 2; }
/* A table of pointers: .data.rel.ro in a PIE, written by the loader. */
static int (*const ops[])(int) = { add_one, add_two };
static int counter = 41;
static volatile int untouched = 7;	/* writable, never written: the file's */

static void
sha256_abc(unsigned char out[SHA256_DIGEST_LENGTH])
{
	unsigned int n = 0;

	assert_int_equal(EVP_Digest("abc", 3, out, &n, EVP_sha256(), NULL), 1);
	assert_int_equal(n, SHA256_DIGEST_LENGTH);
}

static void
test_release_keeps_data_drops_code(void **state)
{
	unsigned char before[SHA256_DIGEST_LENGTH], after[SHA256_DIGEST_LENGTH];
	char *heap = strdup("kept on the heap");
	EVP_PKEY *key = EVP_PKEY_Q_keygen(NULL, NULL, "EC", "P-256");
	long rss_before, rss_after;
	size_t released;

	(void)state;
	/* Start-up work: libcrypto's code and tables resident. */
	assert_non_null(key);
	sha256_abc(before);
	counter++;
	rss_before = readonly_file_rss_kib();

	released = runtime_release_startup();
	rss_after = readonly_file_rss_kib();
	print_message("released %zu KiB; read-only file mappings resident %ld -> %ld KiB\n",
	    released / 1024, rss_before, rss_after);
	assert_true(released > 0);
	assert_true(rss_after < rss_before / 2);

	/* Writable data, pointer tables and the heap are intact; code runs. */
	assert_int_equal(counter, 42);
	assert_int_equal(untouched, 7);
	assert_int_equal(ops[0](1) + ops[1](1), 5);
	assert_string_equal(heap, "kept on the heap");
	sha256_abc(after);
	assert_memory_equal(before, after, sizeof(before));
	EVP_PKEY_free(key);
	free(heap);
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_release_keeps_data_drops_code),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
