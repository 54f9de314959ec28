/*
 * catrust.h: the gateway CAs a node trusts, and how a CA rotation changes
 * them (docs/0033-key-and-ca-rotation.md, "CA rotation: the agent").
 *
 * The state directory holds them:
 *   DIR/ca.crt       (0644) the CA pinned at join (by the join document's
 *                    ca_checksum), or the one a finished rotation made it.
 *   DIR/ca.next.crt  (0644) during a rotation's overlap only: the new CA,
 *                    believed because the gateway sent it over the pinned,
 *                    authenticated tunnel with a cross-certificate that
 *                    ca.crt signed.  The agent dials trusting both.
 *
 * Every change is one atomic step (fileio.h): ca.next.crt written whole,
 * then at "final" renamed over ca.crt.  A process killed at any moment
 * leaves ca.crt (old or new) and perhaps ca.next.crt: a set the next dial
 * can verify the gateway with, whichever phase it is in.
 *
 * Calls here read and write small files and check two signatures: cheap,
 * done on the agent's loop as the state.json writes are.
 */
#ifndef TETHER_CLIENT_CATRUST_H
#define TETHER_CLIENT_CATRUST_H

#include <stddef.h>
#include <stdint.h>

#include <openssl/x509.h>

#include "ca.h"
#include "frame.h"

struct catrust {
	X509 *ca;                        /* DIR/ca.crt */
	X509 *next;                      /* DIR/ca.next.crt, or NULL */
	char ca_sum[CA_CHECKSUM_MAX];    /* their checksums (ca.h), "" if none */
	char next_sum[CA_CHECKSUM_MAX];
};

/*
 * Checks what SETTINGS "ca" offers against the pinned CA (pure: no files,
 * no clock but the certificates' validity): next (DER) is a self-signed
 * CA certificate, in its validity period; cross (DER) is a CA certificate
 * with next's subject and public key, issued (name and signature) by
 * pinned, in its validity period.  Returns 0 with *next_out (the caller
 * frees it), or -1 with why.
 */
int catrust_check_cross(X509 *pinned, const uint8_t *next, size_t next_len,
    const uint8_t *cross, size_t cross_len, X509 **next_out, char *why,
    size_t whylen);

/*
 * Loads DIR/ca.crt (required) and DIR/ca.next.crt (if there) into *t.
 * Returns 0; 1 when ca.next.crt is there but unusable (not a certificate:
 * ignored, t->next NULL, the reason in err); -1 with err when ca.crt is
 * unusable.  Free with catrust_clear.
 */
int catrust_load(const char *dir, struct catrust *t, char *err, size_t errlen);
void catrust_clear(struct catrust *t);

/*
 * Applies a SETTINGS "ca" that came over the established, pinned tunnel:
 *   "overlap": checked (catrust_check_cross with t->ca); next written to
 *              DIR/ca.next.crt; the same next again changes nothing.
 *   "final":   next is made DIR/ca.crt (a durable rename of ca.next.crt)
 *              when it is the ca.next.crt held, or when cross verifies it
 *              with t->ca (then ca.next.crt is written first); when next
 *              already is ca.crt nothing changes.
 * Returns 1 when the trusted set changed (t updated: dial with it from now
 * on), 0 when it did not, -1 with why when it is refused (t and the files
 * unchanged, except a ca.next.crt a failed promotion leaves, still valid).
 */
int catrust_apply(const char *dir, struct catrust *t, const struct frame_ca *in,
    char *why, size_t whylen);

/* The checksums of the CAs trusted now (ca, then next), for SETTINGS_ACK;
 * returns how many (1 or 2). */
size_t catrust_held(const struct catrust *t,
    char held[FRAME_CA_MAX_HELD][FRAME_CA_SUM_LEN + 1]);

#endif
