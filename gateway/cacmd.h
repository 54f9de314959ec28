/*
 * cacmd.h: `tether-gateway ca rotate start|finish|status`, the CA
 * rotation's commands (docs/0033-key-and-ca-rotation.md), run where
 * ca.key is.
 */
#ifndef TETHER_CACMD_H
#define TETHER_CACMD_H

/*
 * `ca rotate start|finish|status --data-dir DIR` and `ca --help`; argv[0]
 * is "ca".  Prints what it did (or the phase) on stdout, errors on
 * stderr.  Returns the exit status: 0 done, 1 it failed (the message
 * says what is left as it was), 2 bad usage.
 */
int cmd_ca(int argc, char **argv);

#endif
