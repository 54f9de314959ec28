/*
 * join.h: the tether-client commands that work on the state directory
 * without a tunnel: `join` (validate a join document, pin the gateway's CA,
 * write the state directory) and `status` (report what state.json and the
 * running agent's status.json say).
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

/* `tether-client status ...`; argv[0] is "status".  Returns the exit code:
 * 0, 1 if DIR is not joined or unreadable, 2 on bad usage. */
int client_status(int argc, char **argv);
void client_status_usage(void);

#endif
