/*
 * face.h: what the gateway shows the world that changes while it runs,
 * as one published, immutable, refcounted copy (docs/0040 section 1,
 * step 4): the CA handed out (/v1/ca, join documents, kubeconfigs), the
 * data directory's CA rotation (SETTINGS "ca", /v1/ca/status), the server
 * certificate served (/readyz, /v1/status, the status page) and the public
 * URL list agents are told (SETTINGS "urls").
 *
 * Loop 0 is the only writer (main.c at start, certreload.c on SIGHUP and
 * renewals, settings.c on a store notice): it takes a private copy with
 * gw_face_edit, changes it, and gw_face_publish swaps it in whole under
 * gw->publish_mu.  Any thread reads: gw_face_get takes a reference to the
 * face published now (what it says stays as it is however often loop 0
 * publishes meanwhile) and gw_face_put gives it back; the last put frees
 * it.  A reader never sees half of a change (a CA and the checksum of
 * another).  Costs: get and put, one mutex and one atomic each; a
 * publish, a copy (~10 KiB with a rotation's DER) and a free, a few times
 * a day.
 */
#ifndef TETHER_FACE_H
#define TETHER_FACE_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>

#include "ca.h"

struct gateway;
struct ca_rotation;

#define GW_FACE_URLS_MAX 511

/* A field added here is copied in gw_face_edit (face.c). */
struct gw_face {
	atomic_uint refs;               /* face.c's: readers' references + 1
	                                   while published */
	char *ca_pem;                   /* the CA handed out (/v1/ca, join
	                                   documents, kubeconfigs): the new
	                                   one from a rotation's overlap on
	                                   unless --public-ca fixed it; NULL:
	                                   none read */
	size_t ca_pem_len;
	char ca_checksum[CA_CHECKSUM_MAX];
	struct ca_rotation *ca_rotation; /* as certreload.c last read it; NULL
	                                   before it did */
	struct ca_cert_info cert;       /* the server certificate served */
	char public_urls[GW_FACE_URLS_MAX + 1]; /* joined by spaces; "" none */
	bool public_urls_loaded;        /* ... read from the store since start */
};

/* Makes gw->publish_mu and publishes an empty face.  Before any thread
 * but loop 0's runs.  0, or -1 when out of memory. */
int gw_face_init(struct gateway *gw);
/* Puts the published face and destroys the mutex, after every reader is
 * done (the loops joined).  Safe when gw_face_init never ran. */
void gw_face_fini(struct gateway *gw);

/* The face published now, with a reference the caller gives back with
 * gw_face_put (soon: a face held keeps its memory).  Never NULL: on a
 * gateway gw_face_init never ran for (unit tests'), an empty face.  Any
 * thread. */
const struct gw_face *gw_face_get(struct gateway *gw);
/* Gives back a reference from gw_face_get (frees the face if it was the
 * last).  NULL is a no-op.  Any thread. */
void gw_face_put(const struct gw_face *f);

/* Loop 0 only: a private copy of the face published now (ca_pem and
 * ca_rotation copied too), to change then publish, or NULL when out of
 * memory (nothing changes).  Free it with gw_face_put if not published. */
struct gw_face *gw_face_edit(struct gateway *gw);
/* Loop 0 only (the writer): the face published now, without a reference:
 * valid until loop 0 publishes again.  Never NULL (as gw_face_get). */
const struct gw_face *gw_face_now(struct gateway *gw);
/* Loop 0 only, after gw_face_init: f (from gw_face_edit, changed) becomes
 * the face; the caller's reference goes with it, and the old face is put
 * (freed once its last reader put it). */
void gw_face_publish(struct gateway *gw, struct gw_face *f);

/* The new CA's checksum while a CA rotation is under way (phase not none)
 * into out (size len, NUL-terminated), else "": what the census counts
 * agents holding and /v1/ca/status reports.  Any thread; takes and puts a
 * reference. */
void gw_face_rotating_ca(struct gateway *gw, char *out, size_t len);

#endif
