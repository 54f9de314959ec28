/*
 * test_gwlist.c: the agent's gateway URL list (tunnel-client/gwlist.c) and
 * its place in state.json (tunnel-client/state.c): the order it dials in,
 * the rotation when a URL fails, the join URL as the last resort, a new
 * list keeping the URL in use, and state.json's gateway_urls written 0600
 * and read back, a bad one refused.
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
#include <unistd.h>

#include "fileio.h"
#include "gwlist.h"
#include "state.h"

#define A "https://gw-a.example:8443"
#define B "https://gw-b.example"
#define C "https://10.0.0.3:443"
#define JOIN "https://join.example:8443"

/* The URLs dialled by n successive failures, from the current one. */
static void
assert_rotation(struct gwlist *l, const char *const *want, size_t n)
{
	for (size_t i = 0; i < n; i++) {
		assert_string_equal(gwlist_current(l), want[i]);
		gwlist_next(l);
	}
}

static void
test_join_only(void **state)
{
	struct gwlist l = { 0 };
	static const char *const want[] = { JOIN, JOIN, JOIN };

	(void)state;
	assert_int_equal(gwlist_set(&l, NULL, 0, JOIN), 0);
	assert_int_equal(l.n, 1);
	assert_int_equal(l.npushed, 0);
	assert_rotation(&l, want, 3);
	gwlist_clear(&l);
}

/* Pushed URLs first, in the gateway's order, then the join URL; a failing
 * URL moves to the next, wrapping around. */
static void
test_rotation(void **state)
{
	struct gwlist l = { 0 };
	static const char *const pushed[] = { A, B };
	static const char *const want[] = { A, B, JOIN, A, B, JOIN, A };

	(void)state;
	assert_int_equal(gwlist_set(&l, pushed, 2, JOIN), 0);
	assert_int_equal(l.n, 3);
	assert_int_equal(l.npushed, 2);
	assert_rotation(&l, want, 7);
	gwlist_clear(&l);
}

/* The join URL in the list is dialled once, where the gateway put it;
 * duplicates count once. */
static void
test_duplicates(void **state)
{
	struct gwlist l = { 0 };
	static const char *const pushed[] = { B, JOIN, B, A };
	static const char *const want[] = { B, JOIN, A, B };
	static const char *const same[] = { B, JOIN, A };
	static const char *const other[] = { B, A, JOIN };

	(void)state;
	assert_int_equal(gwlist_set(&l, pushed, 4, JOIN), 0);
	assert_int_equal(l.n, 3);
	assert_int_equal(l.npushed, 3);
	assert_true(gwlist_same_pushed(&l, pushed, 4));
	assert_true(gwlist_same_pushed(&l, same, 3));
	assert_false(gwlist_same_pushed(&l, other, 3));
	assert_false(gwlist_same_pushed(&l, same, 2));
	assert_false(gwlist_same_pushed(&l, NULL, 0));
	assert_rotation(&l, want, 4);
	gwlist_clear(&l);
}

/* A new list keeps the URL in use current (the tunnel does not move);
 * one without it starts at its first URL; an empty one is the join URL. */
static void
test_new_list_keeps_current(void **state)
{
	struct gwlist l = { 0 };
	static const char *const first[] = { A, B };
	static const char *const second[] = { C, B };
	static const char *const third[] = { C };

	(void)state;
	assert_int_equal(gwlist_set(&l, first, 2, JOIN), 0);
	gwlist_next(&l);
	assert_string_equal(gwlist_current(&l), B);
	assert_int_equal(gwlist_set(&l, second, 2, JOIN), 0);
	assert_string_equal(gwlist_current(&l), B);
	assert_int_equal(gwlist_set(&l, third, 1, JOIN), 0);
	assert_string_equal(gwlist_current(&l), C);
	assert_int_equal(gwlist_set(&l, NULL, 0, JOIN), 0);
	assert_string_equal(gwlist_current(&l), JOIN);
	assert_int_equal(l.npushed, 0);
	assert_true(gwlist_same_pushed(&l, NULL, 0));
	/* no join URL, or too many: refused, the list unchanged */
	assert_int_equal(gwlist_set(&l, first, 2, ""), -1);
	assert_int_equal(gwlist_set(&l, first, FRAME_MAX_URLS + 1, JOIN), -1);
	assert_string_equal(gwlist_current(&l), JOIN);
	gwlist_clear(&l);
}

static void
make_dir(char *dir, size_t len)
{
	snprintf(dir, len, "/tmp/test_gwlist.XXXXXX");
	assert_non_null(mkdtemp(dir));
}

static void
remove_dir(const char *dir)
{
	char path[512];

	snprintf(path, sizeof(path), "%s/state.json", dir);
	unlink(path);
	rmdir(dir);
}

static void
base_state(struct client_state *st)
{
	memset(st, 0, sizeof(*st));
	snprintf(st->gateway_url, sizeof(st->gateway_url), "%s", JOIN);
	snprintf(st->ca_checksum, sizeof(st->ca_checksum), "sha256:00");
	snprintf(st->cluster, sizeof(st->cluster), "c-1");
	snprintf(st->node, sizeof(st->node), "n1");
	snprintf(st->agent_id, sizeof(st->agent_id), "a-1");
}

/* state.json: the list written whole, 0600, and read back in order; none
 * written leaves the key out; a bad entry makes the file unreadable, not
 * half-read. */
static void
test_state_urls(void **state)
{
	struct client_state st, back;
	char dir[64], path[512], err[256], *text = NULL;
	struct stat sb;
	size_t len;

	(void)state;
	make_dir(dir, sizeof(dir));
	base_state(&st);
	assert_int_equal(client_state_save(dir, &st, err, sizeof(err)), 0);
	snprintf(path, sizeof(path), "%s/state.json", dir);
	assert_int_equal(file_read_all(path, 65536, &text, &len, err, sizeof(err)), 0);
	assert_null(strstr(text, "gateway_urls"));
	free(text);

	snprintf(st.gateway_urls[0], sizeof(st.gateway_urls[0]), "%s", B);
	snprintf(st.gateway_urls[1], sizeof(st.gateway_urls[1]), "%s", A);
	st.ngateway_urls = 2;
	assert_int_equal(client_state_save(dir, &st, err, sizeof(err)), 0);
	assert_int_equal(stat(path, &sb), 0);
	assert_int_equal(sb.st_mode & 0777, 0600);
	assert_int_equal(client_state_load(dir, &back, err, sizeof(err)), 0);
	assert_int_equal(back.ngateway_urls, 2);
	assert_string_equal(back.gateway_urls[0], B);
	assert_string_equal(back.gateway_urls[1], A);
	assert_string_equal(back.gateway_url, JOIN);

	snprintf(st.gateway_urls[1], sizeof(st.gateway_urls[1]),
	    "http://gw-a.example");
	assert_int_equal(client_state_save(dir, &st, err, sizeof(err)), 0);
	assert_int_equal(client_state_load(dir, &back, err, sizeof(err)), -1);
	assert_non_null(strstr(err, "gateway_urls: entry 2"));
	remove_dir(dir);
}

static void
test_gateway_url_valid(void **state)
{
	(void)state;
	assert_true(client_gateway_url_valid(A));
	assert_true(client_gateway_url_valid("https://[::1]:8443"));
	assert_false(client_gateway_url_valid("http://gw.example"));
	assert_false(client_gateway_url_valid("https://gw.example/path"));
	assert_false(client_gateway_url_valid("https://u@gw.example"));
	assert_false(client_gateway_url_valid(""));
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_join_only),
		cmocka_unit_test(test_rotation),
		cmocka_unit_test(test_duplicates),
		cmocka_unit_test(test_new_list_keeps_current),
		cmocka_unit_test(test_state_urls),
		cmocka_unit_test(test_gateway_url_valid),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
