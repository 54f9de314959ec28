/*
 * agent.h: `tether-client run`: the agent's tunnel to the gateway.
 *
 * Connects with the credential in the state directory (registering first
 * when only an import token is there), keeps the tunnel up with exponential
 * backoff and jitter, follows the state the gateway assigns, and exits on
 * SIGINT/SIGTERM.
 */
#ifndef TETHER_AGENT_H
#define TETHER_AGENT_H

/*
 * Runs until a signal or a final refusal.  Returns the process exit code:
 * 0 after a signal, 1 when not joined, refused by the gateway (the reason
 * logged) or revoked.
 */
int agent_run(const char *state_dir);

#endif
