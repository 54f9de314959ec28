/*
 * retry_after.h: when an agent turned away during a storm should come back
 * (docs/0035-no-stampede.md).
 *
 * A refused dial that redials on its own backoff comes back when the
 * gateway is as full as before, so a storm of N agents costs several dials
 * each.  Instead the gateway hands each agent it turns away a place in a
 * schedule: slots spaced by the rate at which its handshake slots free up
 * (capacity over the mean time a handshake holds one, measured), after the
 * connections already waiting ahead (its TLS queue), each jittered within
 * its slot.  The agents come back about as fast as the gateway can take
 * them, spread out, and most get in on their next dial.  (The rate is not
 * what handshakes finished per second: while agents wait as told, that
 * measures the demand the schedule let in, not what the gateway can do.)
 *
 * Pure state, no clock or randomness of its own (the caller passes them),
 * zero-initialised ready to use; one per gateway (struct gateway), used
 * from its loop only.  Cost: O(1) per call.
 */
#ifndef TETHER_RETRY_AFTER_H
#define TETHER_RETRY_AFTER_H

#include <stdint.h>

/* The time a handshake holds its slot, assumed until one has ended. */
#define RA_GUESS_MS  200
/* Bounds of a wait: at least a second (the header's unit), at most a
 * minute (agents cap what they are told at AGENT_RETRY_AFTER_MAX_MS too). */
#define RA_MIN_MS    1000
#define RA_MAX_MS    60000
/* Slots are handed out at this share (percent) of the rate: the rest is
 * left to dials that were never refused (agents still arriving; those
 * that come a little early wait for a slot, tunnel.c). */
#define RA_SHARE_PCT 90
/* The rate's measuring window, and the weight of each busy one (1/N). */
#define RA_WINDOW_MS 250
#define RA_WINDOW_WEIGHT 4

struct retry_after {
	double mean_ms;               /* a handshake's time, moving average
	                               * (1/8 per sample); 0: none yet */
	double horizon_ms;            /* the end of the last slot handed out
	                               * (fractions kept: no drift) */
	double measured;              /* handshakes ended per second in busy
	                               * windows, moving average; 0: none yet */
	int64_t window_ms;            /* the current window's start; 0: none */
	uint32_t window_ended;        /* handshakes ended in it */
	int window_idle;              /* one ended in it while not busy */
};

/*
 * A tunnel handshake that began at began_ms ended at now_ms (either way).
 * busy: every slot was taken, or upgrades were waiting for one, when it
 * ended (the gateway was the limit, not the demand).
 */
void retry_after_done(struct retry_after *ra, int64_t began_ms, int64_t now_ms,
    int busy);

/*
 * Handshakes the gateway can finish per second: the measured rate of busy
 * windows, or before there is one capacity * 1000 / the mean handshake
 * time (RA_GUESS_MS before any ended).  Never below capacity * 1000 /
 * timeout_ms (every slot held until the handshake deadline), nor below 1.
 */
double retry_after_rate(const struct retry_after *ra, uint32_t capacity,
    uint32_t timeout_ms);

/*
 * The wait, in ms, for an agent turned away at now_ms with `ahead`
 * connections waiting in front of it: the next slot of the schedule (slots
 * RA_SHARE_PCT of the rate apart), at the latest of the horizon,
 * now + RA_MIN_MS and now + ahead / rate, plus
 * jitter (any 32 random bits) within the slot; at most RA_MAX_MS.  Moves
 * the horizon one slot on.
 */
uint32_t retry_after_next(struct retry_after *ra, int64_t now_ms,
    uint32_t ahead, uint32_t capacity, uint32_t timeout_ms, uint32_t jitter);

/*
 * Of `waiting` upgrades in line for a slot (--handshake-wait), how many
 * can still take one before the line's last waiter runs out of its wait
 * (left_ms from now; <= 0: it has run out too): at most the rate times
 * left_ms.  Those are ahead of an agent turned away now; the others run
 * out and are turned away too, each told a slot of the schedule after its
 * own (the horizon): counted ahead as well, they would be counted twice.
 * (A wave of N waits that ran out together was told ahead/rate plus N
 * slots: about 2 N / rate for the last, docs/0035.)  Cost: O(1).
 */
uint32_t retry_after_line(const struct retry_after *ra, uint32_t waiting,
    int64_t left_ms, uint32_t capacity, uint32_t timeout_ms);

/*
 * The redial spread (docs/0035, "Told ahead of time"): how widely agents
 * that lose this gateway without a word (kill -9, a crash: no RECONNECT)
 * should spread their first redial, so that the replacement takes them
 * about as fast as it can: tunnels over the handshakes it can finish per
 * second, at least min_ms (RA_SPREAD_MIN_MS when 0), at most
 * RA_SPREAD_MAX_MS.  rate <= 0 counts as 1 per second.  Told in SETTINGS
 * "redial_spread_ms"; the agent draws its first redial in [0, spread].
 */
#define RA_SPREAD_MIN_MS 500
#define RA_SPREAD_MAX_MS 300000
uint32_t retry_after_spread_ms(uint32_t tunnels, double rate, uint32_t min_ms);

/*
 * Whether a spread computed now differs enough from the one agents were
 * told to tell them again: wider by a quarter or more (a spread told too
 * narrow brings the agents back faster than they can be taken), narrower
 * by half or more (too wide only slows them), or none was told (told 0).
 * Retelling is one frame per agent, so it happens on such moves only,
 * never per tunnel that comes or goes: in a ramp from nothing to N tunnels
 * about 5 N frames in all (a geometric series of ratio 4/5).
 */
int retry_after_spread_moved(uint32_t told, uint32_t now);

/*
 * Whether a spread computed now is to be told: it moved
 * (retry_after_spread_moved), and either it is wider (told at once: agents
 * holding one too narrow would come back faster than the gateway takes
 * them) or it is narrower and no tell reached an agent for narrow_every_ms
 * (since_ms: milliseconds since the last tell that reached one, -1 if none
 * did).  A narrower spread only slows agents down, so it waits; a wider
 * one never does, so a gateway restarted and killed again within a minute
 * has told what it holds (one told 500 ms before: docs/0035).
 */
int retry_after_spread_due(uint32_t told, uint32_t now, int64_t since_ms,
    uint32_t narrow_every_ms);

#endif
