/*
 * carotate.h: CA rotation in the gateway's data directory
 * (docs/0033-key-and-ca-rotation.md, "CA rotation").
 *
 * The files, and the phase they make:
 *   none     ca.crt, ca.key as `init` made them (no ca.next.crt or .old.crt).
 *   overlap  `ca rotate start` added ca.next.key and ca.next.crt (a new
 *            self-signed CA) and ca.cross.crt (the new CA's subject and key,
 *            issued by ca.crt: CA:TRUE), and rewrote server.crt and peer.crt
 *            as the new CA's, each file holding its leaf then ca.cross.crt,
 *            so a client trusting only ca.crt verifies them through the
 *            cross-certificate and one trusting ca.next.crt stops at it.
 *            ca.next.crt is written last: it is what makes the phase.
 *   final    `ca rotate finish` made the new CA ca.crt (and ca.key), kept the
 *            old one as ca.old.crt, rewrote server.crt and peer.crt without
 *            the cross-certificate and removed ca.next.key, ca.next.crt and
 *            ca.cross.crt.  It lasts while ca.old.crt is there: agents that
 *            connect then are still told "final".  Removing ca.old.crt ends
 *            it (phase none).  ca.next.crt equal to ca.crt (a finish cut
 *            short, or a replica given the new ca.crt beside the overlap's
 *            files) is final too.
 * Serving replicas need none of the keys but server.key and peer.key: they
 * read the phase from the certificates (ca_rotation_read).
 *
 * Every call here reads or writes files and signs: off any event loop.
 */
#ifndef TETHER_CAROTATE_H
#define TETHER_CAROTATE_H

#include <stddef.h>

#include "ca.h"

/* The most bytes of DER a CA or cross-certificate may have to be sent to
 * agents (SETTINGS "ca", docs/interface.md). */
#define CA_DER_MAX 4096

enum ca_phase {
	CA_PHASE_NONE = 0,
	CA_PHASE_OVERLAP = 1,
	CA_PHASE_FINAL = 2,
};

/* "none", "overlap", "final". */
const char *ca_phase_name(enum ca_phase phase);

/* What a data directory says of a rotation. */
struct ca_rotation {
	enum ca_phase phase;
	/* The new CA, DER: ca.next.crt in overlap, ca.crt in final; empty in
	 * none. */
	unsigned char next[CA_DER_MAX];
	size_t next_len;
	char next_checksum[CA_CHECKSUM_MAX];   /* of next; "" in none */
	long long next_not_after;              /* Unix s; 0 in none */
	/* ca.cross.crt, DER: overlap only. */
	unsigned char cross[CA_DER_MAX];
	size_t cross_len;
	char current_checksum[CA_CHECKSUM_MAX]; /* ca.crt's */
	long long current_not_after;            /* ca.crt's notAfter, Unix s */
	char old_checksum[CA_CHECKSUM_MAX];     /* ca.old.crt's in final, else "" */
};

/*
 * Reads dir's phase into *out.  In overlap it checks what agents will be
 * told: ca.next.crt is a self-signed CA certificate, ca.cross.crt has its
 * subject and public key, is a CA and was issued by ca.crt; each DER at
 * most CA_DER_MAX bytes.  Returns 0, or -1 with err naming the file and
 * what is wrong (*out is then phase none).  Cost: up to four small file
 * reads and two signature checks.
 */
int ca_rotation_read(const char *dir, struct ca_rotation *out, char *err,
    size_t errlen);

/*
 * `ca rotate start`: needs ca.crt + ca.key, server.crt + server.key; refused
 * (-1, err) when ca.next.crt exists (under way already).  Makes a new CA
 * key and certificate, the cross-certificate, server.crt for server.key
 * (same subject and names, SERVER_DAYS) and a new peer.key + peer.crt,
 * both issued by the new CA and chained to the cross-certificate; writes
 * ca.next.key (0600), ca.cross.crt, peer.key (0600), peer.crt, server.crt,
 * then ca.next.crt, each atomically; private keys are wiped when freed.
 * A start cut short (no ca.next.crt yet) is simply run again.  Fills *out
 * as ca_rotation_read would.  0, or -1 with err.
 */
int ca_rotate_start(const char *dir, struct ca_rotation *out, char *err,
    size_t errlen);

/*
 * `ca rotate finish`: needs the overlap's files; refused (-1, err) in
 * another phase.  Writes ca.old.crt (ca.crt as it was), server.crt and
 * peer.crt without the cross-certificate (each must be the new CA's), then
 * ca.key := ca.next.key (0600), ca.crt := ca.next.crt, and removes
 * ca.next.key, ca.next.crt, then ca.cross.crt.  A finish cut short is run
 * again (it sees ca.crt already is the new CA and does the rest).
 * Fills *out (phase final).  0, or -1 with err.
 */
int ca_rotate_finish(const char *dir, struct ca_rotation *out, char *err,
    size_t errlen);

#endif
