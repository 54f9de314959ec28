/*
 * backoff.c: the agent's waits before it tries the gateway again (see
 * backoff.h).
 */
#include "backoff.h"

#include "agentkey.h"

/* A uniform-enough draw in [0, n) from the CSPRNG (n small: the modulo's
 * bias is below 2^-20). */
static uint32_t
draw(uint32_t n)
{
	uint32_t r = 0;

	if (n == 0)
		return 0;
	(void)random_bytes((uint8_t *)&r, sizeof(r));
	return r % n;
}

uint32_t
backoff_next(uint32_t *backoff_ms, uint32_t cap_ms)
{
	uint32_t cap = cap_ms != 0 ? cap_ms : AGENT_BACKOFF_MAX_MS;

	*backoff_ms = *backoff_ms == 0 ? AGENT_BACKOFF_MIN_MS :
	    (*backoff_ms * 2 > cap ? cap : *backoff_ms * 2);
	return *backoff_ms / 2 + draw(*backoff_ms / 2 + 1);
}

uint32_t
backoff_told(uint32_t told_ms, uint32_t *bounded)
{
	uint32_t told = told_ms > AGENT_RETRY_AFTER_MAX_MS ?
	    AGENT_RETRY_AFTER_MAX_MS : told_ms;

	if (bounded != NULL)
		*bounded = told;
	return told + draw(AGENT_RETRY_AFTER_JITTER_MS);
}
