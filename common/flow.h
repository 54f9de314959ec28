/*
 * flow.h: credit-based flow control for one stream, as pure arithmetic.
 *
 * Each side grants its peer credit: the number of bytes the peer may send
 * before it hears from us again.  Credit is returned (a WINDOW frame) only
 * when received bytes have *left* our buffers for their destination, never
 * merely on receipt, so a slow reader at either end bounds the memory held
 * for its stream by the window.  Credit goes back in batches, once half the
 * window has been consumed, so WINDOW frames stay rare.
 *
 *   sender:   tx_credit   -- sent -->   0      WINDOW(n): tx_credit += n
 *   receiver: rx_expected  (what the peer may still send) shrinks on DATA;
 *             rx_consumed  grows as bytes drain out; once it reaches half the
 *             window it is granted back and added to rx_expected.
 */
#ifndef TETHER_FLOW_H
#define TETHER_FLOW_H

#include <stddef.h>
#include <stdint.h>

#define FLOW_MAX_WINDOW (1u << 30)  /* credit beyond this is a peer error */

struct flow {
	uint64_t tx_credit;     /* bytes we may send now */
	uint32_t rx_window;     /* the window we grant: most the peer may have in flight */
	uint64_t rx_expected;   /* bytes the peer may still send without more credit */
	uint64_t rx_consumed;   /* received bytes drained out, not yet granted back */
	uint64_t rx_buffered;   /* received bytes still held by us */
};

/* our_window: credit we grant the peer; peer_window: credit it granted us. */
void flow_init(struct flow *f, uint32_t our_window, uint32_t peer_window);

/* How many of `want` bytes may be sent now. */
size_t flow_tx_allowed(const struct flow *f, size_t want);
/* Records n bytes sent (n <= flow_tx_allowed). */
void flow_tx_sent(struct flow *f, size_t n);
/* A WINDOW frame granted `credit`.  Returns 0, or -1 for 0 or a grant that
 * would push the credit past FLOW_MAX_WINDOW (a misbehaving peer). */
int flow_tx_grant(struct flow *f, uint32_t credit);

/* n bytes of DATA arrived.  Returns 0, or -1 if they exceed the credit we
 * granted (the peer overran its window: a protocol error). */
int flow_rx_received(struct flow *f, size_t n);
/* n received bytes left our buffers for their destination. */
void flow_rx_drained(struct flow *f, size_t n);
/* Credit to grant back now (0: not yet worth a WINDOW frame).  When non-zero
 * the caller must send it: the function has already counted it as granted. */
uint32_t flow_rx_take_grant(struct flow *f);

#endif
