/*
 * settings.h: what this replica pushes to its agents in SETTINGS
 * (docs/0031-moving-the-gateway.md): the gateway's public URL list, as the
 * store holds it (the setting "urls", `tetherctl gateway urls set`), and
 * a CA rotation's step ("ca", docs/0033): the new CA and its
 * cross-certificate in the overlap, the new CA alone once final, as the
 * data directory says (the face's ca_rotation, face.h, read by
 * certreload.c, which tells every agent held here when it changes).
 *
 * The replica keeps the list in its face (face.h): read from the store on
 * the store thread at start (again every SETTINGS_RETRY_MS until a read
 * succeeds), when the admin API changed it here, when another replica did
 * (the store's notice "setting:urls", access/notices.c) and after its
 * listener was down.  An agent gets SETTINGS right after WELCOME once the
 * list was read; when the list changes, every agent held here gets it.
 *
 * And the redial spread ("redial_spread_ms", docs/0035): how widely an
 * agent that loses this gateway without a word (kill -9, a crash) spreads
 * its first redial, the tunnels held here over the handshakes the gateway
 * finishes per second (gateway_redial_spread_ms), checked every
 * SETTINGS_SPREAD_EVERY_MS and told again only when it grew by a quarter
 * (at that tick) or halved (at most once per SETTINGS_SPREAD_RETELL_MS
 * after the last tell that reached an agent): retry_after_spread_due.
 *
 * Cost: one store read per change heard; one small frame per agent held
 * here per change (the spread's included: a few per storm, none per
 * tunnel that comes or goes), and one per tunnel at WELCOME.
 */
#ifndef TETHER_SETTINGS_H
#define TETHER_SETTINGS_H

#include <stdbool.h>
#include <stddef.h>

struct gateway;
struct frame;
struct frame_urls;
struct frame_ca;

#define SETTINGS_RETRY_MS 5000
#define SETTINGS_SPREAD_EVERY_MS 5000
/* At most one narrower retelling per this long: in a storm the rate
 * measured swings (a 19,800-agent storm here told 89 s, 286 s, 114 s...
 * within a minute), and each retelling is a frame to every agent, on the
 * loop.  A wider one is told at its tick: a spread too narrow brings a
 * stampede (a gateway killed 20 s after its start had told 500 ms). */
#define SETTINGS_SPREAD_RETELL_MS 30000

/* Whether the list was read from the store since start: SETTINGS is sent
 * only then (an agent is never told "none" for want of a read). */
bool settings_loaded(struct gateway *gw);

/* Whether there is anything to send: the list was read, or a CA rotation
 * is under way (or final).  An agent gets SETTINGS only then. */
bool settings_any(struct gateway *gw);

/* Fills f with a SETTINGS frame carrying gw's list (once read), its CA
 * rotation (when there is one), both from one face (face.h), and the
 * redial spread (once worked out). */
void settings_frame(struct gateway *gw, struct frame *f);

/*
 * The store holds urls (joined by spaces; "" for none) now: kept in
 * the face (published anew, face.h) and, if it differs from what this
 * replica had or is the first read, sent to every agent held here.
 * Returns how many agents were told.  Loop 0 only.
 */
size_t settings_urls_changed(struct gateway *gw, const char *urls);

/*
 * Sends SETTINGS to every agent held here, on every loop, each from its
 * own loop (each loop's hub: hub_send_settings); an agent whose HELLO named no
 * release is skipped (session_send_settings).  Returns how many agents
 * the process holds (those told).  Any loop's thread.
 */
size_t settings_tell_all(struct gateway *gw);

/* Reads the list on the store thread, then settings_urls_changed on the
 * loop; on a failure, again SETTINGS_RETRY_MS later (until stopped). */
void settings_refresh(struct gateway *gw);

/* Works out the redial spread now and every SETTINGS_SPREAD_EVERY_MS on
 * gw->base (stopped by settings_stop).  0, or -1 out of memory (agents
 * are told the spread of now, or none, and no more). */
int settings_spread_start(struct gateway *gw);

/* Stops the retries and the spread's check (the gateway is stopping).
 * Idempotent. */
void settings_stop(struct gateway *gw);

/* SETTINGS_ACK "ca"'s held checksums joined by single spaces into out, as
 * the store keeps them (store_agent_cas).  0, or -1 if they do not fit. */
int settings_cas_join(const struct frame_ca *ca, char *out, size_t outlen);

/* urls' list joined by single spaces into out.  0, or -1 if it does not
 * fit (outlen bytes with the NUL). */
int settings_urls_join(const struct frame_urls *urls, char *out, size_t outlen);

#endif
