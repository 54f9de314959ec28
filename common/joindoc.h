/*
 * joindoc.h: the join document, produced by the gateway (`tetherctl token
 * create`) and consumed on the node by `tether-client join` on stdin:
 *
 *   {"gateway_url":"https://gw.example:8443","ca_checksum":"sha256:<64 hex>",
 *    "cluster":"c-...","token":"tti_...","expires_at":"2026-11-22T10:00:00Z"}
 *
 * Parsing is strict: one JSON object, exactly these five keys, each a string
 * of the right form (an unknown key is refused, so a typo is caught rather
 * than ignored).  Expiry is checked by the caller against its clock.
 */
#ifndef TETHER_JOINDOC_H
#define TETHER_JOINDOC_H

#include <stddef.h>
#include <stdint.h>

#define JOINDOC_MAX_BYTES 65536
#define JOINDOC_URL_MAX   255

struct joindoc {
	char gateway_url[JOINDOC_URL_MAX + 1]; /* https://HOST[:PORT], no path */
	char ca_checksum[72];
	char cluster[32];
	char token[80];                         /* secret: never log */
	int64_t expires_at;                     /* Unix seconds */
};

/* Parses len bytes of JSON.  Returns 0, or -1 with a reason in err that
 * names the offending key and never repeats the token. */
int joindoc_parse(const char *json, size_t len, struct joindoc *doc,
    char *err, size_t errlen);

/* Serializes doc as one line of JSON into a fresh string (caller frees). */
char *joindoc_format(const struct joindoc *doc);

/* RFC 3339 UTC "YYYY-MM-DDTHH:MM:SSZ" <-> Unix seconds.  parse returns 0 or -1. */
int rfc3339_parse(const char *s, int64_t *out);
void rfc3339_format(int64_t t, char out[32]);

/* Wipes the token. */
void joindoc_clear(struct joindoc *doc);

#endif
