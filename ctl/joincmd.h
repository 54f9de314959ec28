/*
 * joincmd.h: the registration command of `tetherctl token create --format
 * command`: one line of POSIX shell that an operator pastes, as root, on a
 * node.  It carries the join document (base64) and the CA checksum, runs
 * `tether-client join` with the document on stdin and the checksum as
 * --ca-checksum (join refuses a document whose checksum differs, and a
 * gateway whose CA does not match it), then enables and starts the agent's
 * systemd unit:
 *
 *   printf %s 'eyJ...' | base64 -d | tether-client join
 *     --state-dir "${TETHER_STATE_DIR:-/var/lib/tether-client}"
 *     --ca-checksum 'sha256:...' [--allow '...']...
 *     && systemctl enable --now tether-client
 *
 * TETHER_STATE_DIR, when set in the operator's shell, overrides the state
 * directory (the unit must then be told as well; tests use it).
 */
#ifndef TETHER_CTL_JOINCMD_H
#define TETHER_CTL_JOINCMD_H

#include <stddef.h>

#include <jansson.h>

/* Where the packaged tether-client.service keeps its state. */
#define JOINCMD_STATE_DIR "/var/lib/tether-client"
/* The agent's systemd unit. */
#define JOINCMD_UNIT      "tether-client"

/*
 * Formats the command for the join document doc (an object with a string
 * "ca_checksum"), passing the nargs strings of join_args on to `tether-client
 * join`, each shell-quoted (so any byte but NUL is carried literally).
 * Returns a fresh NUL-terminated string (caller frees; it holds the import
 * token, so wipe it first), or NULL if doc has no ca_checksum or memory ran
 * out.  Cost: O(size of doc + args).
 */
char *joincmd_format(json_t *doc, char *const *join_args, size_t nargs);

#endif
