/*
 * join.h: `tether-client join`: validate a join document, pin the
 * gateway's CA, write the state directory (status.h reads it back).
 */
#ifndef TETHER_CLIENT_JOIN_H
#define TETHER_CLIENT_JOIN_H

/* Exit codes of `join` (docs/interface.md). */
#define JOIN_EXIT_OK          0
#define JOIN_EXIT_FAIL        1  /* a local failure: cannot write DIR, ... */
#define JOIN_EXIT_USAGE       2  /* invalid document or arguments */
#define JOIN_EXIT_CONFLICT    3  /* DIR already belongs to a cluster */
#define JOIN_EXIT_GATEWAY     4  /* gateway unreachable or CA mismatch */

/* `tether-client join ...`; argv[0] is "join".  Returns the exit code. */
int client_join(int argc, char **argv);
void client_join_usage(void);

#endif
