/* flow.c: credit arithmetic for one stream (see flow.h). */
#include "flow.h"

void
flow_init(struct flow *f, uint32_t our_window, uint32_t peer_window)
{
	f->tx_credit = peer_window;
	f->rx_window = our_window;
	f->rx_expected = our_window;
	f->rx_consumed = 0;
	f->rx_buffered = 0;
}

size_t
flow_tx_allowed(const struct flow *f, size_t want)
{
	return want < f->tx_credit ? want : (size_t)f->tx_credit;
}

void
flow_tx_sent(struct flow *f, size_t n)
{
	f->tx_credit -= n <= f->tx_credit ? n : f->tx_credit;
}

int
flow_tx_grant(struct flow *f, uint32_t credit)
{
	if (credit == 0 || f->tx_credit + credit > FLOW_MAX_WINDOW)
		return -1;
	f->tx_credit += credit;
	return 0;
}

int
flow_rx_received(struct flow *f, size_t n)
{
	if (n > f->rx_expected)
		return -1;
	f->rx_expected -= n;
	f->rx_buffered += n;
	return 0;
}

void
flow_rx_drained(struct flow *f, size_t n)
{
	if (n > f->rx_buffered)
		n = (size_t)f->rx_buffered;
	f->rx_buffered -= n;
	f->rx_consumed += n;
}

uint32_t
flow_rx_take_grant(struct flow *f)
{
	uint32_t grant;

	/* Batch: one WINDOW per half window drained keeps control traffic
	 * small while the peer never waits on an empty window for long. */
	if (f->rx_consumed == 0 || f->rx_consumed < f->rx_window / 2)
		return 0;
	grant = (uint32_t)f->rx_consumed;
	f->rx_consumed = 0;
	f->rx_expected += grant;
	return grant;
}
