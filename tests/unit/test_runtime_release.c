/*
 * test_runtime_release.c: runtime_release_startup (common/runtime.c), what
 * the agent calls once its tunnel is active: the resident pages of the
 * read-only file mappings (code and constants of the program and its
 * libraries) go, writable data (RELRO'd pointer tables included) and the
 * heap keep their contents, and the code still runs afterwards; and a
 * pagemap that calls a written page the file's (qemu-user serves the
 * host's) costs that page nothing.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

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
/* A page of its own, writable and never written: what the file holds. */
static volatile unsigned char pristine[8192] __attribute__((aligned(4096))) = { 1, 2, 3 };
static int written = 41;		/* made 42 below: no longer the file's */

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

/* pagemap's entry for the page at addr, from the file fd (laid out as
 * /proc/self/pagemap). */
static uint64_t
pagemap_entry(int fd, const volatile void *addr)
{
	uint64_t e = 0;
	off_t at = (off_t)((uintptr_t)addr / 4096 * sizeof(e));

	assert_int_equal(pread(fd, &e, sizeof(e), at), (ssize_t)sizeof(e));
	return e;
}

/*
 * A pagemap that says the page of a written variable is present and still
 * the file's, as the host's pagemap did for the armhf agent under qemu-user
 * (whose dropped guard page then aborted it: "stack smashing detected"):
 * the written page keeps its value, and a page that does hold the file's
 * bytes is still released (the real pagemap says it left).
 */
static void
test_release_distrusts_pagemap(void **state)
{
	const uint64_t present_file = 1ull << 63 | 1ull << 61;
	char path[] = "/tmp/test_runtime_release.XXXXXX";
	int fake = mkstemp(path), real;
	size_t released;

	(void)state;
	assert_true(sysconf(_SC_PAGESIZE) == 4096);
	assert_true(fake >= 0);
	written++;
	assert_int_equal(pristine[0] + pristine[1] + pristine[2], 6);  /* present */
	assert_int_equal(pwrite(fake, &present_file, sizeof(present_file),
	    (off_t)((uintptr_t)&written / 4096 * 8)), (ssize_t)sizeof(present_file));
	assert_int_equal(pwrite(fake, &present_file, sizeof(present_file),
	    (off_t)((uintptr_t)pristine / 4096 * 8)), (ssize_t)sizeof(present_file));
	/* Every other entry of the program's pages reads "not present" (a
	 * hole), none short: the program's writable segment ends well within. */
	assert_int_equal(ftruncate(fake, (off_t)((uintptr_t)pristine / 4096 * 8) + (1 << 20)), 0);

	released = runtime_release_startup_with(path);
	real = open("/proc/self/pagemap", O_RDONLY | O_CLOEXEC);
	assert_true(real >= 0);
	print_message("released %zu KiB; pristine page present %d\n", released / 1024,
	    (int)(pagemap_entry(real, pristine) >> 63));
	assert_int_equal(pagemap_entry(real, pristine) >> 63, 0);
	assert_int_equal(written, 42);
	assert_int_equal(pristine[0] + pristine[1] + pristine[2], 6);
	close(real);
	close(fake);
	unlink(path);
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_release_keeps_data_drops_code),
		cmocka_unit_test(test_release_distrusts_pagemap),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
