/*
 * settings.c: the settings this replica pushes to its agents (see
 * settings.h).
 */
#include "settings.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <event2/event.h>

#include "agentdir.h"
#include "carotate.h"
#include "face.h"
#include "frame.h"
#include "gateway.h"
#include "hub.h"
#include "loop.h"
#include "log.h"
#include "runtime.h"
#include "store.h"
#include "store_worker.h"

/* A read of the list on the store thread. */
struct settings_read {
	struct gateway *gw;
	int rc;
	char urls[STORE_URLS_MAX + 1];
	char err[STORE_ERROR_MAX + 1];
};

bool
settings_loaded(struct gateway *gw)
{
	const struct gw_face *face = gw_face_get(gw);
	bool loaded = face->public_urls_loaded;

	gw_face_put(face);
	return loaded;
}

/* The CA rotation agents are told of, or NULL for none. */
static const struct ca_rotation *
rotation(const struct gw_face *face)
{
	const struct ca_rotation *r = face->ca_rotation;

	return r != NULL && r->phase != CA_PHASE_NONE ? r : NULL;
}

bool
settings_any(struct gateway *gw)
{
	const struct gw_face *face = gw_face_get(gw);
	bool any = face->public_urls_loaded || rotation(face) != NULL;

	gw_face_put(face);
	return any;
}

/* "ca": overlap, the new CA and its cross-certificate; final, the new CA
 * (ca.crt now) alone (carotate.h). */
static void
ca_frame(const struct ca_rotation *r, struct frame_ca *ca)
{
	_Static_assert(CA_DER_MAX <= FRAME_CA_DER_MAX,
	    "what carotate reads fits SETTINGS");
	ca->present = true;
	ca->phase = r->phase == CA_PHASE_OVERLAP ? FRAME_CA_OVERLAP :
	    FRAME_CA_FINAL;
	memcpy(ca->next, r->next, r->next_len);
	ca->next_len = r->next_len;
	if (r->phase == CA_PHASE_OVERLAP) {
		memcpy(ca->cross, r->cross, r->cross_len);
		ca->cross_len = r->cross_len;
	}
}

void
settings_frame(struct gateway *gw, struct frame *f)
{
	struct frame_urls *u = &f->u.settings.urls;
	const struct gw_face *face = gw_face_get(gw);
	const char *p = face->public_urls;

	memset(f, 0, sizeof(*f));
	f->type = FRAME_SETTINGS;
	f->u.settings.redial_spread_ms = gw->redial_spread_ms;
	if (rotation(face) != NULL)
		ca_frame(rotation(face), &f->u.settings.ca);
	if (!face->public_urls_loaded) {
		gw_face_put(face);
		return;
	}
	u->present = true;
	while (*p != '\0' && u->n < FRAME_MAX_URLS) {
		size_t len = strcspn(p, " ");

		if (len > 0 && len <= FRAME_URL_MAX) {
			memcpy(u->url[u->n], p, len);
			u->url[u->n++][len] = '\0';
		}
		p += len;
		p += strspn(p, " ");
	}
	gw_face_put(face);
}

int
settings_urls_join(const struct frame_urls *urls, char *out, size_t outlen)
{
	size_t used = 0;

	if (outlen == 0)
		return -1;
	out[0] = '\0';
	for (size_t i = 0; i < urls->n; i++) {
		int n = snprintf(out + used, outlen - used, "%s%s",
		    i > 0 ? " " : "", urls->url[i]);

		if (n < 0 || (size_t)n >= outlen - used)
			return -1;
		used += (size_t)n;
	}
	return 0;
}

int
settings_cas_join(const struct frame_ca *ca, char *out, size_t outlen)
{
	size_t used = 0;

	if (outlen == 0)
		return -1;
	out[0] = '\0';
	for (size_t i = 0; i < ca->nheld; i++) {
		int n = snprintf(out + used, outlen - used, "%s%s",
		    i > 0 ? " " : "", ca->held[i]);

		if (n < 0 || (size_t)n >= outlen - used)
			return -1;
		used += (size_t)n;
	}
	return 0;
}

/* On each loop: its own sessions, through its hub (loop 0's is gw->hub;
 * the hub asks each session to send, hub_ops.send_settings). */
static void
tell_here(void *arg)
{
	struct gateway *gw = arg;
	const struct loop *l = loop_self();

	(void)hub_send_settings(l != NULL && l->gw == gw && l->hub != NULL ?
	    l->hub : gw->hub);
}

size_t
settings_tell_all(struct gateway *gw)
{
	if (gw->loops == NULL)
		return hub_send_settings(gw->hub);
	(void)loop_broadcast(gw->loops, gw->nloops, tell_here, gw, NULL);
	return gw->agents != NULL ? agentdir_count(gw->agents) : 0;
}

size_t
settings_urls_changed(struct gateway *gw, const char *urls)
{
	const struct gw_face *now = gw_face_get(gw);
	bool same = now->public_urls_loaded && strcmp(now->public_urls, urls) == 0;
	struct gw_face *f;
	size_t told;

	gw_face_put(now);
	if (same)
		return 0;
	if ((f = gw_face_edit(gw)) == NULL) {
		warn("settings: out of memory to keep the gateway's URL list: "
		    "agents are not told", KV_S("urls", urls));
		return 0;
	}
	snprintf(f->public_urls, sizeof(f->public_urls), "%s", urls);
	f->public_urls_loaded = true;
	gw_face_publish(gw, f);
	told = settings_tell_all(gw);
	info("settings: the gateway's URL list", KV_S("urls", urls),
	    KV_U("agents_told", told));
	return told;
}

static void
read_work(struct store *st, void *arg)
{
	struct settings_read *r = arg;

	r->rc = store_setting_get(st, STORE_SETTING_URLS, r->urls,
	    sizeof(r->urls), r->err, sizeof(r->err));
}

static void
settings_retry(evutil_socket_t fd, short what, void *arg)
{
	(void)fd;
	(void)what;
	settings_refresh(arg);
}

static void
retry_later(struct gateway *gw)
{
	struct timeval tv = runtime_ms_timeval(SETTINGS_RETRY_MS);

	if (gw->settings_stopped)
		return;
	if (gw->settings_timer == NULL &&
	    (gw->settings_timer = evtimer_new(gw->base, settings_retry, gw)) == NULL)
		return;
	evtimer_add(gw->settings_timer, &tv);
}

static void
read_done(void *arg)
{
	struct settings_read *r = arg;

	if (r->gw->settings_stopped) {
		/* The sessions are going away. */
	} else if (r->rc == STORE_OK || r->rc == STORE_NOTFOUND) {
		settings_urls_changed(r->gw, r->rc == STORE_OK ? r->urls : "");
	} else {
		warn("settings: cannot read the gateway's URL list: trying again",
		    KV_S("err", r->err), KV_U("in_ms", SETTINGS_RETRY_MS));
		retry_later(r->gw);
	}
	free(r);
}

void
settings_refresh(struct gateway *gw)
{
	struct settings_read *r;

	if (gw->settings_stopped)
		return;
	if ((r = calloc(1, sizeof(*r))) == NULL) {
		retry_later(gw);
		return;
	}
	r->gw = gw;
	r->rc = STORE_ERR;
	snprintf(r->err, sizeof(r->err), "the gateway is stopping");
	if (store_worker_submit(gw->storew, read_work, read_done, r) != 0) {
		free(r);
		retry_later(gw);
	}
}

/* The spread for the tunnels held now; agents told again when it moved
 * far enough, on a tick, never per tunnel: wider at once, narrower at most
 * once per SETTINGS_SPREAD_RETELL_MS (retry_after_spread_due).  A tell
 * that reached no agent (the start's) starts no clock. */
static void
spread_check(struct gateway *gw)
{
	uint32_t tunnels = gw->agents != NULL ?
	    (uint32_t)agentdir_count(gw->agents) : 0;
	uint32_t spread = gateway_redial_spread_ms(gw, tunnels);
	size_t told = 0;
	int64_t now = runtime_monotonic_ms();

	if (!retry_after_spread_due(gw->redial_spread_ms, spread,
	    gw->spread_told_ms != 0 ? now - gw->spread_told_ms : -1,
	    SETTINGS_SPREAD_RETELL_MS))
		return;
	gw->redial_spread_ms = spread;
	if (settings_any(gw) && gw->hub != NULL)
		told = settings_tell_all(gw);
	if (told > 0)
		gw->spread_told_ms = now;
	info("settings: the redial spread after an unannounced loss",
	    KV_U("spread_ms", spread), KV_U("tunnels", tunnels),
	    KV_U("agents_told", told));
}

static void
spread_tick(evutil_socket_t fd, short what, void *arg)
{
	(void)fd;
	(void)what;
	spread_check(arg);
}

int
settings_spread_start(struct gateway *gw)
{
	struct timeval tv = runtime_ms_timeval(SETTINGS_SPREAD_EVERY_MS);

	spread_check(gw);
	gw->spread_timer = event_new(gw->base, -1, EV_PERSIST, spread_tick, gw);
	if (gw->spread_timer == NULL)
		return -1;
	return event_add(gw->spread_timer, &tv);
}

void
settings_stop(struct gateway *gw)
{
	gw->settings_stopped = true;
	if (gw->settings_timer != NULL)
		event_free(gw->settings_timer);
	gw->settings_timer = NULL;
	if (gw->spread_timer != NULL)
		event_free(gw->spread_timer);
	gw->spread_timer = NULL;
}

_Static_assert(sizeof(((struct gw_face *)0)->public_urls) == STORE_URLS_MAX + 1,
    "the face's public_urls holds what the store holds");
