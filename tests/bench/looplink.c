/*
 * looplink.c (bench): what a stream's crossing from one loop to another
 * costs (gateway/core/looplink.h, docs/0040 step 5).
 *
 * The same two multiplexers (the gateway's default window, payload and
 * high water) carry TOTAL bytes from one side to the other, 1 and 8
 * streams at once, each stream fed 128 KiB blocks added by reference (as
 * relay.c keeps what it holds) and drained at once by its reader:
 *   - "one loop": both multiplexers on one loop, their frames in an
 *     evbuffer pumped by an event of that loop (the same encode, decode
 *     and chain moves, no thread, no lock);
 *   - "link": each on its own loop and thread, through looplink.
 * Reports MB/s and the CPU seconds per GiB of all threads together.  Run
 * by hand (tether-looplink-bench [MiB]); reported, never pass/fail.
 */
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>

#include <event2/buffer.h>
#include <event2/event.h>

#include "budget.h"
#include "frame.h"
#include "loop.h"
#include "looplink.h"
#include "mux.h"

#define BLOCK    (128u << 10)
#define NMAX     8

static uint8_t block[BLOCK];
static size_t per_stream;
static struct budget budget = BUDGET_DEFAULT;
static pthread_mutex_t budget_mu = PTHREAD_MUTEX_INITIALIZER;

struct tx {
	struct mux_stream *s;
	struct evbuffer *out;
	size_t queued;
};

static struct tx tx[NMAX];
static int nstreams, ndone;
static struct event_base *main_base;
static atomic_size_t received;

static double
now(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec + ts.tv_nsec / 1e9;
}

static double
cpu_now(void)
{
	struct rusage ru;

	getrusage(RUSAGE_SELF, &ru);
	return ru.ru_utime.tv_sec + ru.ru_stime.tv_sec +
	    (ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) / 1e6;
}

static void
no_free(const void *data, size_t len, void *arg)
{
}

static void
feed(struct tx *t)
{
	while (t->s != NULL) {
		if (evbuffer_get_length(t->out) == 0) {
			if (t->queued >= per_stream) {
				mux_stream_fin(t->s);
				t->s = NULL;
				return;
			}
			evbuffer_add_reference(t->out, block, BLOCK, no_free, NULL);
			t->queued += BLOCK;
		}
		if (mux_stream_send_buffer(t->s, t->out) == 0)
			return;
	}
}

static void
tx_opened(struct mux_stream *s, int ok, const char *code, const char *reason,
    void *arg)
{
	if (!ok) {
		fprintf(stderr, "refused: %s\n", reason);
		exit(1);
	}
	feed(arg);
}

static void
tx_writable(struct mux_stream *s, void *arg)
{
	feed(arg);
}

static void
tx_close(struct mux_stream *s, const char *code, void *arg)
{
	if (++ndone == nstreams)
		event_base_loopbreak(main_base);
}

static const struct mux_stream_handlers tx_handlers = {
	.on_opened = tx_opened,
	.on_writable = tx_writable,
	.on_close = tx_close,
};

static void
rx_data(struct mux_stream *s, const uint8_t *data, size_t len, void *arg)
{
	atomic_fetch_add_explicit(&received, len, memory_order_relaxed);
	mux_stream_drained(s, len);
}

static void
rx_fin(struct mux_stream *s, void *arg)
{
	mux_stream_fin(s);
}

static const struct mux_stream_handlers rx_handlers = {
	.on_data = rx_data,
	.on_fin = rx_fin,
};

static void
rx_accept(struct mux_stream *s)
{
	if (mux_stream_accept(s, NULL, &rx_handlers, NULL) != 0) {
		fprintf(stderr, "accept refused\n");
		exit(1);
	}
}

static struct mux_config
config(void)
{
	struct mux_config cfg = MUX_DEFAULT_CONFIG;

	budget.mu = &budget_mu;
	cfg.budget = &budget;
	return cfg;
}

static void
report(const char *what, int n, double secs, double cpu)
{
	double bytes = (double)atomic_exchange(&received, 0);

	printf("%-10s %d stream%s  %8.0f MB/s  %6.2f CPU s/GiB\n", what, n,
	    n == 1 ? " " : "s", bytes / secs / 1e6, cpu / (bytes / (1 << 30)));
}

/* ---- one loop: a memory pipe pumped by an event ---- */

struct pipe_end {
	struct mux *m;
	struct evbuffer *q;            /* what this side sent */
	struct pipe_end *peer;
	struct event *pump;
};

static struct pipe_end ends[2];

static int
pipe_sendv(void *io, const struct iovec *iov, int iovcnt)
{
	struct pipe_end *e = io;
	uint32_t len = 0;

	for (int i = 0; i < iovcnt; i++)
		len += (uint32_t)iov[i].iov_len;
	evbuffer_add(e->q, &len, sizeof(len));
	for (int i = 0; i < iovcnt; i++)
		evbuffer_add(e->q, iov[i].iov_base, iov[i].iov_len);
	event_active(e->pump, EV_TIMEOUT, 1);
	return 0;
}

static int
pipe_sendbuf(void *io, const uint8_t *hdr, size_t hdrlen, struct evbuffer *src,
    size_t n)
{
	struct pipe_end *e = io;
	uint32_t len = (uint32_t)(hdrlen + n);

	evbuffer_add(e->q, &len, sizeof(len));
	evbuffer_add(e->q, hdr, hdrlen);
	evbuffer_remove_buffer(src, e->q, n);
	event_active(e->pump, EV_TIMEOUT, 1);
	return 0;
}

static size_t
pipe_pending(void *io)
{
	return evbuffer_get_length(((struct pipe_end *)io)->q);
}

static const struct mux_io pipe_io = {
	.sendv = pipe_sendv,
	.pending = pipe_pending,
	.sendbuf = pipe_sendbuf,
};

/* e's frames to its peer, taken whole as the link's reader does. */
static void
pipe_pump(evutil_socket_t fd, short what, void *arg)
{
	struct pipe_end *e = arg;
	struct evbuffer *rx = evbuffer_new();
	struct frame f;
	char err[200];
	uint32_t len;

	evbuffer_add_buffer(rx, e->q);
	mux_on_drain(e->m);
	while (evbuffer_remove(rx, &len, sizeof(len)) == sizeof(len)) {
		static uint8_t scratch[BLOCK + 64];
		struct evbuffer_iovec v;
		uint8_t *p = scratch;

		/* As the link does: in place when one chain holds it. */
		if (evbuffer_peek(rx, len, NULL, &v, 1) == 1 && v.iov_len >= len)
			p = v.iov_base;
		else
			evbuffer_copyout(rx, scratch, len);

		if (frame_decode(p, len, &f, err, sizeof(err)) != 0 ||
		    mux_on_frame(e->peer->m, &f, err, sizeof(err)) != 0) {
			fprintf(stderr, "pipe: %s\n", err);
			exit(1);
		}
		evbuffer_drain(rx, len);
	}
	evbuffer_free(rx);
}

static void
pipe_on_open(struct mux *m, struct mux_stream *s, const struct frame_open *req,
    void *arg)
{
	rx_accept(s);
}

static const struct mux_handlers pipe_handlers = { .on_open = pipe_on_open };

static void
run_one_loop(int n)
{
	struct mux_config cfg = config();
	struct frame_open req;
	double t0, c0;

	main_base = event_base_new();
	for (int i = 0; i < 2; i++) {
		ends[i].q = evbuffer_new();
		ends[i].peer = &ends[1 - i];
		ends[i].pump = event_new(main_base, -1, 0, pipe_pump, &ends[i]);
		cfg.odd_ids = i == 0;
		ends[i].m = mux_new(main_base, &cfg, &pipe_io, &ends[i], &pipe_handlers, NULL);
	}
	nstreams = n;
	ndone = 0;
	t0 = now();
	c0 = cpu_now();
	frame_open_init(&req, "bench:1", NULL);
	for (int i = 0; i < n; i++) {
		tx[i] = (struct tx){ .out = evbuffer_new() };
		tx[i].s = mux_open(ends[0].m, NULL, &req, &tx_handlers, &tx[i]);
	}
	event_base_dispatch(main_base);
	report("one loop", n, now() - t0, cpu_now() - c0);
	for (int i = 0; i < 2; i++) {
		mux_free(ends[i].m);
		event_free(ends[i].pump);
		evbuffer_free(ends[i].q);
	}
	for (int i = 0; i < n; i++)
		evbuffer_free(tx[i].out);
	event_base_free(main_base);
}

/* ---- two loops: the link ---- */

static struct looplinks *links;

static void
link_on_open(void *ctx, unsigned from, struct mux_stream *s, const struct frame_open *req)
{
	rx_accept(s);
}

static void
close_here(void *arg)
{
	looplink_close(links);
}

static void
run_link(int n)
{
	struct mux_config cfg = config();
	struct frame_open req;
	struct loop *loops;
	char err[200];
	double t0, c0;

	main_base = event_base_new();
	loops = loops_new(main_base, 2, NULL, err, sizeof(err));
	links = loops != NULL ? looplinks_new(loops, 2, &cfg, link_on_open, NULL,
	    err, sizeof(err)) : NULL;
	if (links == NULL) {
		fprintf(stderr, "%s\n", err);
		exit(1);
	}
	nstreams = n;
	ndone = 0;
	t0 = now();
	c0 = cpu_now();
	frame_open_init(&req, "bench:1", NULL);
	for (int i = 0; i < n; i++) {
		tx[i] = (struct tx){ .out = evbuffer_new() };
		tx[i].s = looplink_open(links, 1, &req, &tx_handlers, &tx[i], err,
		    sizeof(err));
	}
	event_base_dispatch(main_base);
	report("link", n, now() - t0, cpu_now() - c0);
	loop_call(&loops[1], close_here, NULL, NULL);
	looplink_close(links);
	loops_stop(loops, 2);
	looplinks_free(links);
	loops_free(loops, 2);
	for (int i = 0; i < n; i++)
		evbuffer_free(tx[i].out);
	event_base_free(main_base);
}

int
main(int argc, char **argv)
{
	size_t mib = argc > 1 ? strtoul(argv[1], NULL, 10) : 2048;

	memset(block, 0x5a, sizeof(block));
	if (getenv("ONLY") != NULL) {
		per_stream = mib << 20;
		if (strcmp(getenv("ONLY"), "link") == 0)
			run_link(1);
		else
			run_one_loop(1);
		return 0;
	}
	for (int n = 1; n <= NMAX; n *= 8) {
		per_stream = (mib << 20) / n;
		run_one_loop(n);
		run_link(n);
	}
	return 0;
}
