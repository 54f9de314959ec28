/*
 * certcmd.h: `tether-gateway cert ...`, the server certificate's commands
 * (docs/0030-certificate-renewal.md).
 */
#ifndef TETHER_CERTCMD_H
#define TETHER_CERTCMD_H

/*
 * `cert renew --data-dir DIR [--days N]` and `cert --help`; argv[0] is
 * "cert".  Prints what it did on stdout, errors on stderr.  Returns the
 * exit status: 0 done, 1 it failed (DIR unchanged), 2 bad usage.
 */
int cmd_cert(int argc, char **argv);

#endif
