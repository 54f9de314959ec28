/*
 * face.c: the gateway's published face (see face.h).  A face's refs
 * count its readers plus one while it is the published one; the mutex
 * orders a reader's load of gw->face and its increment against loop 0's
 * swap, so a face is never freed between the two.
 */
#include "face.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "carotate.h"
#include "gateway.h"

/* What a gateway without gw_face_init shows: nothing read yet.  Never
 * counted nor freed. */
static struct gw_face face_none;

static void
face_free(struct gw_face *f)
{
	free(f->ca_pem);
	free(f->ca_rotation);
	free(f);
}

int
gw_face_init(struct gateway *gw)
{
	struct gw_face *f = calloc(1, sizeof(*f));

	if (f == NULL)
		return -1;
	if (pthread_mutex_init(&gw->publish_mu, NULL) != 0) {
		free(f);
		return -1;
	}
	atomic_init(&f->refs, 1);
	gw->face = f;
	gw->publish_ready = true;
	return 0;
}

void
gw_face_fini(struct gateway *gw)
{
	if (!gw->publish_ready)
		return;
	gw_face_put(gw->face);
	gw->face = NULL;
	gw->publish_ready = false;
	pthread_mutex_destroy(&gw->publish_mu);
}

const struct gw_face *
gw_face_get(struct gateway *gw)
{
	struct gw_face *f;

	if (!gw->publish_ready)
		return &face_none;
	pthread_mutex_lock(&gw->publish_mu);
	f = gw->face;
	atomic_fetch_add_explicit(&f->refs, 1, memory_order_relaxed);
	pthread_mutex_unlock(&gw->publish_mu);
	return f;
}

const struct gw_face *
gw_face_now(struct gateway *gw)
{
	return gw->face != NULL ? gw->face : &face_none;
}

void
gw_face_put(const struct gw_face *cf)
{
	struct gw_face *f = (struct gw_face *)cf;

	if (f == NULL || f == &face_none)
		return;
	if (atomic_fetch_sub_explicit(&f->refs, 1, memory_order_acq_rel) == 1)
		face_free(f);
}

struct gw_face *
gw_face_edit(struct gateway *gw)
{
	const struct gw_face *now = gw->face != NULL ? gw->face : &face_none;
	struct gw_face *f = calloc(1, sizeof(*f));

	if (f == NULL)
		return NULL;
	/* Field by field: readers change now->refs meanwhile (and every
	 * field face.h adds is copied here). */
	atomic_init(&f->refs, 1);
	f->ca_pem_len = now->ca_pem_len;
	memcpy(f->ca_checksum, now->ca_checksum, sizeof(f->ca_checksum));
	f->cert = now->cert;
	memcpy(f->public_urls, now->public_urls, sizeof(f->public_urls));
	f->public_urls_loaded = now->public_urls_loaded;
	if (now->ca_pem != NULL) {
		if ((f->ca_pem = malloc(now->ca_pem_len + 1)) == NULL)
			goto oom;
		memcpy(f->ca_pem, now->ca_pem, now->ca_pem_len);
		f->ca_pem[now->ca_pem_len] = '\0';
	}
	if (now->ca_rotation != NULL) {
		if ((f->ca_rotation = malloc(sizeof(*f->ca_rotation))) == NULL)
			goto oom;
		*f->ca_rotation = *now->ca_rotation;
	}
	return f;
oom:
	face_free(f);
	return NULL;
}

void
gw_face_publish(struct gateway *gw, struct gw_face *f)
{
	struct gw_face *old;

	pthread_mutex_lock(&gw->publish_mu);
	old = gw->face;
	gw->face = f;
	pthread_mutex_unlock(&gw->publish_mu);
	gw_face_put(old);
}

void
gw_face_rotating_ca(struct gateway *gw, char *out, size_t len)
{
	const struct gw_face *face = gw_face_get(gw);

	if (len > 0)
		out[0] = '\0';
	if (face->ca_rotation != NULL &&
	    face->ca_rotation->phase != CA_PHASE_NONE)
		snprintf(out, len, "%s", face->ca_rotation->next_checksum);
	gw_face_put(face);
}
