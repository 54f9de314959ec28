/*
 * status.h: `tether-client status`: report what state.json and the running
 * agent's status.json say, as one JSON object on stdout.
 */
#ifndef TETHER_CLIENT_STATUS_H
#define TETHER_CLIENT_STATUS_H

/* `tether-client status ...`; argv[0] is "status".  Returns the exit code:
 * 0, 1 if DIR is not joined or unreadable, 2 on bad usage. */
int client_status(int argc, char **argv);
/* The command's --help text, on stdout. */
void client_status_usage(void);

#endif
