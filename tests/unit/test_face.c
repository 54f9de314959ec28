/*
 * test_face.c: the gateway's published face (gateway/core/face.c): a
 * gateway never initialised shows an empty face; an edit is a private
 * deep copy (the published face does not change until it is published);
 * a reader's face stays whole and readable after loop 0 published
 * another (freed at its last put: ASan sees a leak or a use after free
 * otherwise); and readers on other threads while loop 0 publishes always
 * see a CA and the checksum that goes with it.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "carotate.h"
#include "face.h"
#include "gateway.h"

/* Loop 0's change: the CA handed out becomes "CA n" with checksum "n". */
static void
publish_ca(struct gateway *gw, int n)
{
	struct gw_face *f = gw_face_edit(gw);
	char pem[32];

	assert_non_null(f);
	snprintf(pem, sizeof(pem), "CA %d", n);
	free(f->ca_pem);
	assert_non_null(f->ca_pem = strdup(pem));
	f->ca_pem_len = strlen(pem);
	snprintf(f->ca_checksum, sizeof(f->ca_checksum), "%d", n);
	gw_face_publish(gw, f);
}

static void
test_none(void **state)
{
	struct gateway gw;
	const struct gw_face *f;

	(void)state;
	memset(&gw, 0, sizeof(gw));
	f = gw_face_get(&gw);
	assert_non_null(f);
	assert_null(f->ca_pem);
	assert_null(f->ca_rotation);
	assert_false(f->public_urls_loaded);
	assert_ptr_equal(gw_face_now(&gw), f);
	gw_face_put(f);
	gw_face_put(NULL);
	gw_face_fini(&gw);      /* never initialised: nothing to do */
}

static void
test_edit_publish_hold(void **state)
{
	struct gateway gw;
	const struct gw_face *held, *now;
	struct gw_face *edit;

	(void)state;
	memset(&gw, 0, sizeof(gw));
	assert_int_equal(gw_face_init(&gw), 0);
	publish_ca(&gw, 1);
	held = gw_face_get(&gw);
	assert_string_equal(held->ca_pem, "CA 1");

	/* An edit changes nothing until published, and copies deeply. */
	assert_non_null(edit = gw_face_edit(&gw));
	assert_ptr_not_equal(edit->ca_pem, held->ca_pem);
	assert_non_null(edit->ca_rotation = calloc(1, sizeof(*edit->ca_rotation)));
	edit->ca_rotation->phase = CA_PHASE_OVERLAP;
	snprintf(edit->public_urls, sizeof(edit->public_urls), "https://a");
	edit->public_urls_loaded = true;
	now = gw_face_get(&gw);
	assert_ptr_equal(now, held);
	assert_null(now->ca_rotation);
	gw_face_put(now);
	gw_face_publish(&gw, edit);

	/* The reader's face is as it was; a new get sees the change. */
	assert_string_equal(held->ca_pem, "CA 1");
	assert_null(held->ca_rotation);
	assert_false(held->public_urls_loaded);
	now = gw_face_get(&gw);
	assert_ptr_not_equal(now, held);
	assert_string_equal(now->ca_pem, "CA 1");
	assert_int_equal(now->ca_rotation->phase, CA_PHASE_OVERLAP);
	assert_string_equal(now->public_urls, "https://a");
	assert_ptr_equal(gw_face_now(&gw), now);
	gw_face_put(held);      /* the old face goes now (ASan: freed once) */
	gw_face_put(now);

	/* An edit not published is put. */
	assert_non_null(edit = gw_face_edit(&gw));
	assert_non_null(edit->ca_rotation);
	assert_ptr_not_equal(edit->ca_rotation, gw_face_now(&gw)->ca_rotation);
	gw_face_put(edit);
	gw_face_fini(&gw);
}

/* Readers on two threads while loop 0 publishes 2000 faces: each face
 * read is whole (its CA and its checksum agree) and outlives the swap. */
#define PUBLISHES 2000

struct reader {
	struct gateway *gw;
	atomic_int *stop;
	long reads;
	int bad;
};

static void *
read_faces(void *arg)
{
	struct reader *r = arg;

	while (!atomic_load(r->stop) || r->reads < 100) {
		const struct gw_face *f = gw_face_get(r->gw);
		char pem[32];

		snprintf(pem, sizeof(pem), "CA %s", f->ca_checksum);
		if (f->ca_pem == NULL || strcmp(f->ca_pem, pem) != 0 ||
		    f->ca_pem_len != strlen(pem))
			r->bad++;
		r->reads++;
		gw_face_put(f);
	}
	return NULL;
}

static void
test_readers_while_publishing(void **state)
{
	struct gateway gw;
	atomic_int stop = 0;
	struct reader r[2];
	pthread_t t[2];

	(void)state;
	memset(&gw, 0, sizeof(gw));
	assert_int_equal(gw_face_init(&gw), 0);
	publish_ca(&gw, 0);
	for (int i = 0; i < 2; i++) {
		r[i] = (struct reader){ .gw = &gw, .stop = &stop };
		assert_int_equal(pthread_create(&t[i], NULL, read_faces, &r[i]), 0);
	}
	for (int n = 1; n <= PUBLISHES; n++)
		publish_ca(&gw, n);
	atomic_store(&stop, 1);
	for (int i = 0; i < 2; i++) {
		assert_int_equal(pthread_join(t[i], NULL), 0);
		assert_int_equal(r[i].bad, 0);
		assert_true(r[i].reads >= 100);
	}
	assert_string_equal(gw_face_now(&gw)->ca_checksum, "2000");
	gw_face_fini(&gw);
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_none),
		cmocka_unit_test(test_edit_publish_hold),
		cmocka_unit_test(test_readers_while_publishing),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
