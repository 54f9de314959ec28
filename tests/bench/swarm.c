/*
 * swarm.c: tether-swarm, thousands of real agents in one process, for the
 * scale benchmarks (tests/bench/idle_tunnels.sh, reconnect_storm.sh) and
 * the smoke test (tests/integration/test_swarm.sh).
 *
 * Every agent is the agent's own tunnel code (tunnel-client/agent_tunnel.c)
 * on one shared libevent loop: its own TLS connection, its own Ed25519 key
 * made at start, the real handshake (registering with the multi-use import
 * token of a join document, then AUTH with its key), VERIFY, keepalive
 * pings both ways, redial with the agent's backoff and jitter after a lost
 * tunnel.  What `tether-client run` keeps in its state directory stays in
 * memory here.  A stream the gateway opens to an active agent is answered
 * by an echo, whatever its target.
 *
 *   tether-swarm --join FILE --ca-file FILE --agents N [options]
 *
 * Once a report interval it prints one line to stdout:
 *
 *   swarm ms=WALL agents=N started=S established=E active=A stopped=X
 *         dials=D streams=K echoed=BYTES told=T early=Y max_dials=M
 *         spread_ms=S losses=L draws=R drawn_ms=SUM max_drawn_ms=X
 *         waited_ms=W
 *         [probe_n=.. probe_p50_us=.. probe_p99_us=.. probe_max_us=..
 *         probe_lost=..]
 *
 * (ms: Unix time in ms; established: authenticated tunnels; active: those
 * whose agent state is `active`; stopped: agents refused for good; told:
 * refusals that said when to come back (Retry-After, an ERROR's
 * retry_after_ms); early: dials made before that moment, 0 unless
 * --ignore-retry-after; max_dials: the most one agent dialled; spread_ms:
 * the largest redial spread a gateway told an agent (docs/0035); losses:
 * established tunnels lost without a word; draws: first redials drawn in
 * [0, spread], their delays' sum and largest; waited_ms: the measured
 * waits from each such loss to its next dial, summed), and
 * `swarm all_active ms=WALL` each time every agent becomes active again.
 * --probe makes agent 1 send a tunnel PING every 100 ms and report the
 * round trips of the interval: an established tunnel's latency while the
 * others connect.  Exit: 0 after SIGINT/SIGTERM or --seconds, 1 when an
 * agent was refused for good, 2 on bad usage or set-up.
 *
 * Costs: one struct swarm_agent (~200 bytes) and an Ed25519 key per agent,
 * plus its tunnel (agent_tunnel.h) and TLS connection while connected; one
 * descriptor per connected agent (more agents than the open-files limit
 * allows take several processes, see --first).
 */
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <event2/event.h>
#include <openssl/crypto.h>
#include <openssl/ssl.h>

#include "agent_tunnel.h"
#include "url.h"
#include "agentkey.h"
#include "fileio.h"
#include "joindoc.h"
#include "log.h"
#include "mux.h"
#include "runtime.h"
#include "token.h"
#include "wsclient.h"

#define STR_(x) #x
#define STR(x) STR_(x)

#define PROBE_EVERY_MS  100
#define PROBE_SAMPLES   1024          /* round trips kept per report */
#define FD_RESERVE      64            /* descriptors kept for everything else */

struct swarm;

struct swarm_agent {
	struct swarm *sw;
	struct agent_tunnel *t;
	EVP_PKEY *key;
	char node[FRAME_NODE_MAX + 1];
	bool connected, active, stopped;
};

/* An echo stream: bytes the tunnel would not take yet wait in buf (at most
 * the stream's receive window, since they are not drained until sent). */
struct echo {
	struct swarm *sw;
	uint8_t *buf;
	size_t len, cap;
	bool fin;
};

struct swarm {
	struct event_base *base;
	struct swarm_agent *agents;
	uint32_t n, started, first;
	uint32_t rate;                /* agents started per second; 0 all at once */
	uint32_t established, active, stopped;
	uint64_t streams, echoed;
	bool all_active;
	int exit_code;
	struct joindoc doc;
	struct token token;
	EVP_PKEY *import_key;
	SSL_CTX *tls_ctx;             /* one for every agent: verifies the gateway */
	const char *ca_file, *prefix;
	uint32_t ping_interval_ms, ping_timeout_ms;
	bool ignore_retry_after;
	bool ignore_redial_spread;
	struct event *starter, *reporter, *prober, *stopper, *sigterm, *sigint;
	uint32_t report_ms, seconds;
	/* --probe */
	bool probe;
	uint32_t probe_seq;
	int64_t probe_sent_us;        /* 0: no ping outstanding */
	uint32_t probe_lost, nsamples;
	int64_t samples[PROBE_SAMPLES];
};

static int64_t
now_us(clockid_t clk)
{
	struct timespec ts;

	clock_gettime(clk, &ts);
	return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

/* ---- the agents' hooks ---- */

static int
swarm_registered(void *arg, const char *agent_id)
{
	return 0;  /* the tunnel keeps the id; nothing to persist */
}

static void
swarm_status(void *arg, const char *state, bool connected, const char *last_error)
{
	struct swarm_agent *a = arg;
	struct swarm *sw = a->sw;
	bool active = connected && strcmp(state, "active") == 0;

	sw->established += (uint32_t)connected - (uint32_t)a->connected;
	sw->active += (uint32_t)active - (uint32_t)a->active;
	a->connected = connected;
	a->active = active;
	if (sw->active < sw->n) {
		sw->all_active = false;
	} else if (!sw->all_active) {
		sw->all_active = true;
		printf("swarm all_active ms=%" PRId64 "\n", now_us(CLOCK_REALTIME) / 1000);
	}
}

static void
swarm_stopped(void *arg, int code)
{
	struct swarm_agent *a = arg;

	a->stopped = true;
	a->sw->stopped++;
	a->sw->exit_code = 1;
	fprintf(stderr, "swarm: %s refused for good (see the log line above)\n", a->node);
}

static void
swarm_pong(void *arg, uint32_t seq)
{
	struct swarm *sw = ((struct swarm_agent *)arg)->sw;

	if (sw->probe_sent_us == 0 || seq != sw->probe_seq)
		return;
	if (sw->nsamples < PROBE_SAMPLES)
		sw->samples[sw->nsamples++] = now_us(CLOCK_MONOTONIC) - sw->probe_sent_us;
	sw->probe_sent_us = 0;
}

/* ---- echo streams ---- */

static void
echo_flush(struct mux_stream *s, struct echo *e)
{
	size_t n = e->len > 0 ? mux_stream_send(s, e->buf, e->len) : 0;

	memmove(e->buf, e->buf + n, e->len - n);
	e->len -= n;
	e->sw->echoed += n;
	mux_stream_drained(s, n);
	if (e->len == 0 && e->fin) {
		e->fin = false;
		mux_stream_fin(s);  /* may end the stream: e is not used after */
	}
}

static void
echo_data(struct mux_stream *s, const uint8_t *data, size_t len, void *arg)
{
	struct echo *e = arg;
	uint8_t *grown;

	if (e->len + len > e->cap) {
		grown = realloc(e->buf, e->len + len);
		if (grown == NULL) {
			mux_stream_reset(s, "busy");
			return;
		}
		e->buf = grown;
		e->cap = e->len + len;
	}
	memcpy(e->buf + e->len, data, len);
	e->len += len;
	echo_flush(s, e);
}

static void
echo_writable(struct mux_stream *s, void *arg)
{
	echo_flush(s, arg);
}

static void
echo_fin(struct mux_stream *s, void *arg)
{
	struct echo *e = arg;

	e->fin = true;
	echo_flush(s, e);
}

static void
echo_close(struct mux_stream *s, const char *code, void *arg)
{
	struct echo *e = arg;

	free(e->buf);
	free(e);
}

static const struct mux_stream_handlers echo_handlers = {
	.on_data = echo_data,
	.on_writable = echo_writable,
	.on_fin = echo_fin,
	.on_close = echo_close,
};

static void
swarm_open(struct mux *m, struct mux_stream *s, const struct frame_open *req,
    void *arg)
{
	struct swarm_agent *a = arg;
	struct echo *e = calloc(1, sizeof(*e));

	if (e == NULL) {
		mux_stream_refuse(s, "busy", "out of memory");
		return;
	}
	e->sw = a->sw;
	if (mux_stream_accept(s, NULL, &echo_handlers, e) != 0) {
		free(e);
		return;
	}
	a->sw->streams++;
}

static const struct agent_tunnel_hooks swarm_hooks = {
	.registered = swarm_registered,
	.status = swarm_status,
	.stopped = swarm_stopped,
	.on_open = swarm_open,
	.pong = swarm_pong,
};

/* ---- starting, reporting, probing ---- */

static int
swarm_start_one(struct swarm *sw, struct swarm_agent *a, uint32_t index)
{
	struct agent_tunnel_config cfg = {
		.gateway_url = sw->doc.gateway_url,
		.ca_file = sw->ca_file,
		.tls_ctx = sw->tls_ctx,
		.node = a->node,
		.cluster = sw->doc.cluster,
		.agent_id = "",
		.import_key = sw->import_key,
		.import_id = sw->token.id,
		.stream_window = 256 * 1024,
		.max_streams = 64,
		.ping_interval_ms = sw->ping_interval_ms,
		.ping_timeout_ms = sw->ping_timeout_ms,
		.hooks = &swarm_hooks,
		.arg = a,
		.ignore_retry_after = sw->ignore_retry_after,
		.ignore_redial_spread = sw->ignore_redial_spread,
	};

	a->sw = sw;
	snprintf(a->node, sizeof(a->node), "%s-%" PRIu32, sw->prefix, index);
	a->key = agentkey_generate();
	cfg.agent_key = a->key;
	if (a->key == NULL || (a->t = agent_tunnel_new(sw->base, &cfg)) == NULL) {
		fprintf(stderr, "swarm: out of memory starting agent %s\n", a->node);
		return -1;
	}
	return agent_tunnel_start(a->t);
}

static void
swarm_start_more(evutil_socket_t fd, short what, void *arg)
{
	struct swarm *sw = arg;
	uint32_t batch = sw->rate == 0 ? sw->n : (sw->rate + 9) / 10;
	struct timeval tv = runtime_ms_timeval(100);

	for (; batch > 0 && sw->started < sw->n; batch--, sw->started++)
		if (swarm_start_one(sw, &sw->agents[sw->started],
		    sw->first + sw->started) != 0) {
			sw->exit_code = 2;
			event_base_loopbreak(sw->base);
			return;
		}
	if (sw->started < sw->n)
		evtimer_add(sw->starter, &tv);
}

static int
cmp_i64(const void *x, const void *y)
{
	int64_t a = *(const int64_t *)x, b = *(const int64_t *)y;

	return a < b ? -1 : a > b;
}

static void
swarm_report(evutil_socket_t fd, short what, void *arg)
{
	struct swarm *sw = arg;
	struct timeval tv = runtime_ms_timeval(sw->report_ms);
	uint64_t dials = 0, told = 0, early = 0, drawn = 0, waited = 0;
	uint32_t n, t, e, d, max_dials = 0, spread = 0, max_drawn = 0;
	uint32_t losses = 0, draws = 0;
	struct agent_spread sp;

	for (uint32_t i = 0; i < sw->started; i++) {
		agent_tunnel_spread(sw->agents[i].t, &sp);
		spread = sp.spread_ms > spread ? sp.spread_ms : spread;
		max_drawn = sp.max_drawn_ms > max_drawn ? sp.max_drawn_ms : max_drawn;
		losses += sp.losses;
		draws += sp.draws;
		drawn += sp.drawn_ms;
		waited += sp.waited_ms;
		d = agent_tunnel_dials(sw->agents[i].t);
		dials += d;
		max_dials = d > max_dials ? d : max_dials;
		agent_tunnel_retry_after(sw->agents[i].t, &t, &e);
		told += t;
		early += e;
	}
	printf("swarm ms=%" PRId64 " agents=%" PRIu32 " started=%" PRIu32
	    " established=%" PRIu32 " active=%" PRIu32 " stopped=%" PRIu32
	    " dials=%" PRIu64 " streams=%" PRIu64 " echoed=%" PRIu64
	    " told=%" PRIu64 " early=%" PRIu64 " max_dials=%" PRIu32
	    " spread_ms=%" PRIu32 " losses=%" PRIu32 " draws=%" PRIu32
	    " drawn_ms=%" PRIu64 " max_drawn_ms=%" PRIu32 " waited_ms=%" PRIu64,
	    now_us(CLOCK_REALTIME) / 1000, sw->n, sw->started, sw->established,
	    sw->active, sw->stopped, dials, sw->streams, sw->echoed, told, early,
	    max_dials, spread, losses, draws, drawn, max_drawn, waited);
	if (sw->probe) {
		n = sw->nsamples;
		qsort(sw->samples, n, sizeof(sw->samples[0]), cmp_i64);
		printf(" probe_n=%" PRIu32 " probe_p50_us=%" PRId64 " probe_p99_us=%"
		    PRId64 " probe_max_us=%" PRId64 " probe_lost=%" PRIu32, n,
		    n ? sw->samples[n / 2] : 0, n ? sw->samples[(n * 99) / 100] : 0,
		    n ? sw->samples[n - 1] : 0, sw->probe_lost);
		sw->nsamples = 0;
		sw->probe_lost = 0;
	}
	printf("\n");
	fflush(stdout);
	evtimer_add(sw->reporter, &tv);
}

/* Agent 1 pings; a ping unanswered after a second counts as lost. */
static void
swarm_probe(evutil_socket_t fd, short what, void *arg)
{
	struct swarm *sw = arg;
	struct timeval tv = runtime_ms_timeval(PROBE_EVERY_MS);
	int64_t now = now_us(CLOCK_MONOTONIC);

	if (sw->probe_sent_us != 0 && now - sw->probe_sent_us > 1000000) {
		sw->probe_lost++;
		sw->probe_sent_us = 0;
	}
	if (sw->probe_sent_us == 0 && sw->started > 0 &&
	    agent_tunnel_ping(sw->agents[0].t, ++sw->probe_seq) == 0)
		sw->probe_sent_us = now;
	evtimer_add(sw->prober, &tv);
}

static void
swarm_stop(evutil_socket_t fd, short what, void *arg)
{
	event_base_loopbreak(((struct swarm *)arg)->base);
}

/* ---- set-up ---- */

static void __attribute__((noreturn))
usage(const char *why)
{
	if (why != NULL)
		fprintf(stderr, "tether-swarm: %s\n", why);
	fprintf(stderr,
	    "usage: tether-swarm --join FILE --ca-file FILE --agents N [--first K]\n"
	    "         [--prefix NAME] [--rate PER_S] [--ping-interval MS]\n"
	    "         [--ping-timeout MS] [--report-ms MS] [--seconds S] [--probe]\n"
	    "         [--ignore-retry-after] [--ignore-redial-spread]\n"
	    "         [--log-level LEVEL]\n"
	    "  --join FILE      the join document of a multi-use import token\n"
	    "                   (tetherctl token create --uses N)\n"
	    "  --ca-file FILE   the gateway's CA certificate (PEM)\n"
	    "  --agents N       agents to run, named PREFIX-K .. PREFIX-(K+N-1)\n"
	    "  --first K        the first agent's number (default 1)\n"
	    "  --prefix NAME    node name prefix (default swarm)\n"
	    "  --rate PER_S     agents started per second (default 0: all at once)\n"
	    "  --ping-interval MS, --ping-timeout MS  the agents' keepalive\n"
	    "                   (defaults as tether-client run: "
	    STR(AGENT_PING_INTERVAL_MS) " and " STR(AGENT_PING_TIMEOUT_MS) ")\n"
	    "  --report-ms MS   status line interval (default 1000)\n"
	    "  --seconds S      exit after S seconds (default 0: at SIGTERM)\n"
	    "  --probe          agent K pings every 100 ms; report round trips\n"
	    "  --ignore-retry-after  count the gateway's retry-after but redial\n"
	    "                   on the agents' own backoff (a benchmark's before)\n"
	    "  --ignore-redial-spread  after a loss nobody announced, redial on\n"
	    "                   the backoff, not in the gateway's spread\n"
	    "  --log-level L    the agents' log level (default error)\n");
	exit(2);
}

static uint32_t
parse_u32(const char *s, const char *what)
{
	char *end;
	unsigned long v;

	errno = 0;
	v = strtoul(s, &end, 10);
	if (errno != 0 || *end != '\0' || end == s || v > UINT32_MAX) {
		fprintf(stderr, "tether-swarm: %s wants a number, got '%s'\n", what, s);
		exit(2);
	}
	return (uint32_t)v;
}

/* Loads the join document and the import key its token proves. */
static void
swarm_load_join(struct swarm *sw, const char *path)
{
	char err[512], connect_url[URL_MAX], *text = NULL;
	size_t len;

	if (file_read_all(path, JOINDOC_MAX_BYTES, &text, &len, err, sizeof(err)) != 0 ||
	    joindoc_parse(text, len, &sw->doc, err, sizeof(err)) != 0) {
		fprintf(stderr, "tether-swarm: %s: %s\n", path, err);
		exit(2);
	}
	OPENSSL_cleanse(text, len);
	free(text);
	if (token_parse(sw->doc.token, &sw->token, err, sizeof(err)) != 0 ||
	    sw->token.kind != TOKEN_IMPORT ||
	    (sw->import_key = token_import_key(&sw->token)) == NULL) {
		fprintf(stderr, "tether-swarm: %s: not an import token\n", path);
		exit(2);
	}
	if (agent_tunnel_url(sw->doc.gateway_url, connect_url,
	    sizeof(connect_url), NULL, 0, err, sizeof(err)) != 0)
		usage("the join document's gateway_url is not https://HOST[:PORT]");
}

/* The open-files limit raised to the hard one; exits if N cannot fit. */
static void
swarm_check_fds(uint32_t n)
{
	long was, now = runtime_raise_nofile(&was);

	if (now >= 0 && (uint64_t)n + FD_RESERVE > (uint64_t)now) {
		fprintf(stderr, "tether-swarm: the open-files limit (%ld, hard) holds "
		    "about %ld agents, not %" PRIu32 ": run several swarm processes "
		    "(--first) or raise the hard limit (LimitNOFILE=, limits.conf)\n",
		    now, now - FD_RESERVE, n);
		exit(2);
	}
}

static void
swarm_parse(struct swarm *sw, int argc, char **argv)
{
	static const struct option longopts[] = {
		{ "join", required_argument, NULL, 'j' },
		{ "ca-file", required_argument, NULL, 'c' },
		{ "agents", required_argument, NULL, 'n' },
		{ "first", required_argument, NULL, 'f' },
		{ "prefix", required_argument, NULL, 'p' },
		{ "rate", required_argument, NULL, 'r' },
		{ "ping-interval", required_argument, NULL, 'i' },
		{ "ping-timeout", required_argument, NULL, 't' },
		{ "report-ms", required_argument, NULL, 'm' },
		{ "seconds", required_argument, NULL, 's' },
		{ "probe", no_argument, NULL, 'P' },
		{ "ignore-retry-after", no_argument, NULL, 'I' },
		{ "ignore-redial-spread", no_argument, NULL, 'S' },
		{ "log-level", required_argument, NULL, 'l' },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 },
	};
	const char *join = NULL;
	enum log_level level = LOG_LEVEL_ERROR;
	int c;

	sw->first = 1;
	sw->prefix = "swarm";
	sw->ping_interval_ms = AGENT_PING_INTERVAL_MS;   /* run's defaults */
	sw->ping_timeout_ms = AGENT_PING_TIMEOUT_MS;
	sw->report_ms = 1000;
	while ((c = getopt_long(argc, argv, "", longopts, NULL)) != -1) {
		switch (c) {
		case 'j': join = optarg; break;
		case 'c': sw->ca_file = optarg; break;
		case 'n': sw->n = parse_u32(optarg, "--agents"); break;
		case 'f': sw->first = parse_u32(optarg, "--first"); break;
		case 'p': sw->prefix = optarg; break;
		case 'r': sw->rate = parse_u32(optarg, "--rate"); break;
		case 'i': sw->ping_interval_ms = parse_u32(optarg, "--ping-interval"); break;
		case 't': sw->ping_timeout_ms = parse_u32(optarg, "--ping-timeout"); break;
		case 'm': sw->report_ms = parse_u32(optarg, "--report-ms"); break;
		case 's': sw->seconds = parse_u32(optarg, "--seconds"); break;
		case 'P': sw->probe = true; break;
		case 'I': sw->ignore_retry_after = true; break;
		case 'S': sw->ignore_redial_spread = true; break;
		case 'l':
			if (log_level_parse(optarg, &level) != 0)
				usage("--log-level: debug, info, warn or error");
			break;
		case 'h': usage(NULL);
		default: usage(NULL);
		}
	}
	if (optind != argc || join == NULL || sw->ca_file == NULL || sw->n == 0)
		usage("--join, --ca-file and --agents (at least 1) are required");
	if (sw->report_ms == 0 || sw->ping_interval_ms == 0 || sw->ping_timeout_ms == 0)
		usage("--report-ms, --ping-interval and --ping-timeout must be above 0");
	log_init("swarm", level);
	swarm_load_join(sw, join);
}

static int
swarm_events(struct swarm *sw)
{
	struct timeval zero = { 0, 0 }, report = runtime_ms_timeval(sw->report_ms);
	struct timeval probe = runtime_ms_timeval(PROBE_EVERY_MS);
	struct timeval end = { .tv_sec = sw->seconds, .tv_usec = 0 };

	sw->starter = evtimer_new(sw->base, swarm_start_more, sw);
	sw->reporter = evtimer_new(sw->base, swarm_report, sw);
	sw->prober = evtimer_new(sw->base, swarm_probe, sw);
	sw->stopper = evtimer_new(sw->base, swarm_stop, sw);
	sw->sigterm = evsignal_new(sw->base, SIGTERM, swarm_stop, sw);
	sw->sigint = evsignal_new(sw->base, SIGINT, swarm_stop, sw);
	if (sw->starter == NULL || sw->reporter == NULL || sw->prober == NULL ||
	    sw->stopper == NULL || sw->sigterm == NULL || sw->sigint == NULL ||
	    evsignal_add(sw->sigterm, NULL) != 0 || evsignal_add(sw->sigint, NULL) != 0)
		return -1;
	evtimer_add(sw->starter, &zero);
	evtimer_add(sw->reporter, &report);
	if (sw->probe)
		evtimer_add(sw->prober, &probe);
	if (sw->seconds > 0)
		evtimer_add(sw->stopper, &end);
	return 0;
}

static void
swarm_free(struct swarm *sw)
{
	struct event *evs[] = { sw->starter, sw->reporter, sw->prober, sw->stopper,
	    sw->sigterm, sw->sigint };

	for (uint32_t i = 0; i < sw->started; i++) {
		agent_tunnel_free(sw->agents[i].t);
		EVP_PKEY_free(sw->agents[i].key);
	}
	free(sw->agents);
	for (size_t i = 0; i < sizeof(evs) / sizeof(evs[0]); i++)
		if (evs[i] != NULL)
			event_free(evs[i]);
	if (sw->base != NULL) {
		runtime_drain(sw->base);   /* the tunnels' clients go from the loop */
		event_base_free(sw->base);
	}
	EVP_PKEY_free(sw->import_key);
	SSL_CTX_free(sw->tls_ctx);
	token_clear(&sw->token);
	joindoc_clear(&sw->doc);
}

int
main(int argc, char **argv)
{
	static struct swarm sw;
	char err[320];

	runtime_init();
	swarm_parse(&sw, argc, argv);
	swarm_check_fds(sw.n);
	sw.agents = calloc(sw.n, sizeof(*sw.agents));
	sw.base = runtime_event_base();
	sw.tls_ctx = wsclient_tls_context(sw.ca_file, err, sizeof(err));
	if (sw.tls_ctx == NULL)
		fprintf(stderr, "tether-swarm: %s\n", err);
	if (sw.agents == NULL || sw.base == NULL || sw.tls_ctx == NULL ||
	    swarm_events(&sw) != 0) {
		fprintf(stderr, "tether-swarm: cannot set up the loop\n");
		swarm_free(&sw);
		return 2;
	}
	event_base_dispatch(sw.base);
	swarm_report(-1, 0, &sw);
	swarm_free(&sw);
	return sw.exit_code;
}
