/*
 * stream.c: `tetherctl connect` and `tetherctl forward`: operator ends of
 * streams to a node, over the gateway's dial endpoint.
 *
 * connect: one raw WebSocket; stdin's bytes go up as binary messages and
 * the node's bytes come down to stdout.  An empty message is end of data in
 * that direction, so `ssh` and request/response clients that half-close
 * still get their answer.
 *
 * forward: one tether.v1 WebSocket carrying a stream per accepted local
 * connection (common/bridge.c does the byte moving and flow control).
 */
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/event.h>
#include <event2/listener.h>

#include "bridge.h"
#include "ctl.h"
#include "frame.h"
#include "mux.h"
#include "runtime.h"
#include "wsclient.h"
#include "wsface.h"
#include "wsmux.h"

#define STDIO_HIGH_WATER (1u << 20)  /* bytes buffered before reading pauses */

struct stream_args {
	const char *cluster;
	const char *node;
	const char *spec;             /* HOST:PORT or [LHOST:]LPORT:HOST:PORT */
};

static int
parse_stream_args(const char *cmd, int argc, char **argv, struct stream_args *sa)
{
	memset(sa, 0, sizeof(*sa));
	for (int i = 1; i < argc; i++) {
		if (strcmp(argv[i], "--cluster") == 0 && i + 1 < argc)
			sa->cluster = argv[++i];
		else if (strcmp(argv[i], "--node") == 0 && i + 1 < argc)
			sa->node = argv[++i];
		else if (argv[i][0] == '-' && argv[i][1] != '\0')
			return ctl_usage_error(cmd, "unknown flag %s", argv[i]);
		else if (sa->spec == NULL)
			sa->spec = argv[i];
		else
			return ctl_usage_error(cmd, "unexpected argument %s", argv[i]);
	}
	if (sa->cluster == NULL)
		return ctl_usage_error(cmd, "--cluster ID is required");
	if (sa->spec == NULL)
		return ctl_usage_error(cmd, "%s is required", strcmp(cmd, "connect") == 0 ?
		    "HOST:PORT" : "[LHOST:]LPORT:HOST:PORT");
	return CTL_EXIT_OK;
}

/* wss://HOST/v1/clusters/ID/dial?... from https://HOST. */
static int
dial_url(const struct ctl *c, const struct stream_args *sa, const char *target,
    char *out, size_t outlen)
{
	char *cl = api_escape(sa->cluster), *tg = target ? api_escape(target) : NULL;
	char *nd = sa->node ? api_escape(sa->node) : NULL;
	int n;

	if (cl == NULL || (target && tg == NULL) || (sa->node && nd == NULL)) {
		free(cl);
		free(tg);
		free(nd);
		return -1;
	}
	n = snprintf(out, outlen, "wss://%s/v1/clusters/%s/dial%s%s%s%s%s",
	    c->api.server + strlen("https://"), cl,
	    tg || nd ? "?" : "", tg ? "target=" : "", tg ? tg : "",
	    nd ? (tg ? "&node=" : "node=") : "", nd ? nd : "");
	free(cl);
	free(tg);
	free(nd);
	return n > 0 && (size_t)n < outlen ? 0 : -1;
}

/* How a refused or failed WebSocket maps to tetherctl's exit codes. */
static int
close_exit_code(int http_status)
{
	return http_status == 0 ? CTL_EXIT_UNREACHABLE : CTL_EXIT_SERVER;
}

/* ---- connect ---- */

/*
 * stdin and stdout may be pipes or sockets (ssh's ProxyCommand) or regular
 * files (`< input > output`), which epoll cannot watch: files are read as
 * the WebSocket drains and written directly.
 */
struct connect_state {
	struct event_base *base;
	struct wsface *ws;
	struct bufferevent *in, *out;   /* stdin, stdout; NULL when a regular file */
	int opened;
	int in_eof, remote_eof;
	int ended;                      /* the WebSocket is gone; stop once stdout drains */
	int exit_code;
	const char *target;
};

static void
connect_stop(struct connect_state *cs, int code)
{
	cs->exit_code = code;
	event_base_loopbreak(cs->base);
}

static size_t
out_pending(const struct connect_state *cs)
{
	return cs->out != NULL ? evbuffer_get_length(bufferevent_get_output(cs->out)) : 0;
}

static void
connect_maybe_done(struct connect_state *cs)
{
	/* Both directions ended and everything written: a clean end. */
	if (cs->in_eof && cs->remote_eof && out_pending(cs) == 0 && cs->ws != NULL)
		wsface_close(cs->ws, 1000, "done");
}

static void
connect_input_eof(struct connect_state *cs)
{
	cs->in_eof = 1;
	wsface_send(cs->ws, (const uint8_t *)"", 0, 1);
	connect_maybe_done(cs);
}

/* stdin is a regular file: read it as fast as the WebSocket drains. */
static void
pump_input_file(struct connect_state *cs)
{
	static uint8_t buf[256 * 1024];
	ssize_t n;

	while (!cs->in_eof && cs->ws != NULL && wsface_pending(cs->ws) < STDIO_HIGH_WATER) {
		n = read(STDIN_FILENO, buf, sizeof(buf));
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0) {
			connect_input_eof(cs);
			return;
		}
		wsface_send(cs->ws, buf, (size_t)n, 1);
	}
}

/* stdout is a regular file: a write there does not wait on a reader. */
static void
write_output_file(struct connect_state *cs, const uint8_t *data, size_t len)
{
	while (len > 0) {
		ssize_t n = write(STDOUT_FILENO, data, len);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0) {
			fprintf(stderr, "tetherctl connect: write to stdout: %s\n", strerror(errno));
			wsface_close(cs->ws, 1000, "output closed");
			return;
		}
		data += n;
		len -= (size_t)n;
	}
}

static void
stdin_read(struct bufferevent *bev, void *arg)
{
	struct connect_state *cs = arg;
	struct evbuffer *in = bufferevent_get_input(bev);
	size_t len;

	while ((len = evbuffer_get_length(in)) > 0) {
		size_t n = len < 65536 ? len : 65536;
		wsface_send(cs->ws, evbuffer_pullup(in, (ssize_t)n), n, 1);
		evbuffer_drain(in, n);
	}
	if (wsface_pending(cs->ws) > STDIO_HIGH_WATER)
		bufferevent_disable(bev, EV_READ);
}

static void
stdin_event(struct bufferevent *bev, short what, void *arg)
{
	struct connect_state *cs = arg;

	if (what & (BEV_EVENT_EOF | BEV_EVENT_ERROR)) {
		stdin_read(bev, cs);
		bufferevent_disable(bev, EV_READ);
		connect_input_eof(cs);
	}
}

static void
stdout_written(struct bufferevent *bev, void *arg)
{
	struct connect_state *cs = arg;

	if (cs->ended) {
		/* Everything the node sent is written: now we may go. */
		event_base_loopbreak(cs->base);
		return;
	}
	if (cs->ws != NULL)
		wsface_pause_reading(cs->ws, 0);
	if (cs->remote_eof)
		shutdown(STDOUT_FILENO, SHUT_WR);   /* harmless on a non-socket */
	connect_maybe_done(cs);
}

static void
stdout_event(struct bufferevent *bev, short what, void *arg)
{
	struct connect_state *cs = arg;

	if (cs->ended) {
		event_base_loopbreak(cs->base);
		return;
	}
	/* The reader went away (ssh exited): nothing more to do. */
	if (cs->ws != NULL)
		wsface_close(cs->ws, 1000, "output closed");
}

static void
connect_open(struct wsface *c, void *arg)
{
	struct connect_state *cs = arg;

	cs->opened = 1;
	if (cs->in != NULL)
		bufferevent_enable(cs->in, EV_READ);
	else
		pump_input_file(cs);
	if (cs->out != NULL)
		bufferevent_enable(cs->out, EV_WRITE);
}

static void
connect_message(struct wsface *c, const uint8_t *data, size_t len, int binary, void *arg)
{
	struct connect_state *cs = arg;

	if (len == 0) {
		cs->remote_eof = 1;
		if (out_pending(cs) == 0)
			stdout_written(cs->out, cs);
		return;
	}
	if (cs->out == NULL) {
		write_output_file(cs, data, len);
		return;
	}
	bufferevent_write(cs->out, data, len);
	if (out_pending(cs) > STDIO_HIGH_WATER)
		wsface_pause_reading(c, 1);
}

static void
connect_drain(struct wsface *c, void *arg)
{
	struct connect_state *cs = arg;

	if (cs->in_eof)
		return;
	if (cs->in != NULL)
		bufferevent_enable(cs->in, EV_READ);
	else
		pump_input_file(cs);
}

static void
connect_close(struct wsface *c, int http_status, const char *reason, void *arg)
{
	struct connect_state *cs = arg;

	cs->ws = NULL;     /* freed when this returns */
	if (!cs->opened) {
		if (http_status > 0)
			fprintf(stderr, "tetherctl connect: %s (HTTP %d)\n", reason, http_status);
		else
			fprintf(stderr, "tetherctl connect: %s\n", reason);
		connect_stop(cs, close_exit_code(http_status));
		return;
	}
	if (strcmp(reason, "done") == 0 || (cs->in_eof && cs->remote_eof)) {
		cs->exit_code = CTL_EXIT_OK;
	} else {
		fprintf(stderr, "tetherctl connect: stream to %s ended: %s\n", cs->target, reason);
		cs->exit_code = CTL_EXIT_SERVER;
	}
	/* What the node sent must reach stdout before we go: a pipe's reader
	 * may be slower than the tunnel. */
	cs->ended = 1;
	if (out_pending(cs) == 0)
		event_base_loopbreak(cs->base);
}

static const struct wsface_handlers connect_callbacks = {
	.on_open = connect_open,
	.on_message = connect_message,
	.on_drain = connect_drain,
	.on_close = connect_close,
};

static int
is_regular_file(int fd)
{
	struct stat st;

	/* epoll refuses regular files, block devices and /dev/null alike. */
	return fstat(fd, &st) == 0 && (S_ISREG(st.st_mode) || S_ISBLK(st.st_mode) ||
	    (S_ISCHR(st.st_mode) && !isatty(fd)));
}

int
cmd_connect(struct ctl *c, int argc, char **argv)
{
	struct stream_args sa;
	struct connect_state cs;
	struct wsclient_config cfg;
	char url[1024], err[256];
	int r;

	if (ctl_wants_help(argc, argv)) {
		help_connect();
		return CTL_EXIT_OK;
	}
	if ((r = parse_stream_args("connect", argc, argv, &sa)) != CTL_EXIT_OK)
		return r;
	if (strchr(sa.spec, ':') == NULL)
		return ctl_usage_error("connect", "target %s: want HOST:PORT", sa.spec);
	if ((r = ctl_ready(c)) != CTL_EXIT_OK)
		return r;
	if (dial_url(c, &sa, sa.spec, url, sizeof(url)) != 0)
		return ctl_usage_error("connect", "arguments too long");

	memset(&cs, 0, sizeof(cs));
	cs.target = sa.spec;
	cs.exit_code = CTL_EXIT_SERVER;
	cs.base = runtime_event_base();
	if (cs.base == NULL) {
		fprintf(stderr, "tetherctl connect: cannot set up the event loop\n");
		return CTL_EXIT_SERVER;
	}
	if (!is_regular_file(STDIN_FILENO)) {
		cs.in = bufferevent_socket_new(cs.base, STDIN_FILENO, 0);
		bufferevent_setcb(cs.in, stdin_read, NULL, stdin_event, &cs);
		bufferevent_disable(cs.in, EV_READ);
	}
	if (!is_regular_file(STDOUT_FILENO)) {
		cs.out = bufferevent_socket_new(cs.base, STDOUT_FILENO, 0);
		bufferevent_setcb(cs.out, NULL, stdout_written, stdout_event, &cs);
	}

	memset(&cfg, 0, sizeof(cfg));
	cfg.url = url;
	cfg.ca_file = c->api.cacert;
	cfg.bearer_token = c->api.token;
	cfg.max_message = 16u << 20;
	cfg.low_water = STDIO_HIGH_WATER / 2;
	cs.ws = wsclient_connect(cs.base, &cfg, &connect_callbacks, &cs, err, sizeof(err));
	if (cs.ws == NULL) {
		fprintf(stderr, "tetherctl connect: %s\n", err);
		r = CTL_EXIT_USAGE;
	} else {
		event_base_dispatch(cs.base);
		r = cs.exit_code;
	}
	if (cs.ws != NULL)
		wsface_free(cs.ws);
	if (cs.in != NULL)
		bufferevent_free(cs.in);
	if (cs.out != NULL)
		bufferevent_free(cs.out);
	runtime_drain(cs.base);   /* the client's memory goes from the loop */
	event_base_free(cs.base);
	return r;
}

/* ---- forward ---- */

struct forward_state {
	struct event_base *base;
	struct wsface *ws;
	struct mux *mux;
	struct evconnlistener *listener;
	struct event *sigint, *sigterm;
	const char *lhost;
	int lport;
	char target[FRAME_TARGET_MAX + 1];
	int exit_code;
	unsigned active;
};

static void
fwd_peer_open(struct mux *m, struct mux_stream *s, const struct frame_open *req, void *arg)
{
	mux_stream_refuse(s, "not_allowed", "tetherctl forward accepts no streams");
}

static const struct mux_handlers fwd_mux_handlers = { .on_open = fwd_peer_open };

static void
fwd_opened(struct bridge *b, int ok, const char *code, const char *reason, void *arg)
{
	/* The gateway refuses for want of an agent or a live token; every
	 * other refusal is the node's. */
	if (!ok)
		fprintf(stderr, "tetherctl forward: connection refused by the %s: %s (%s)\n",
		    strcmp(code, "no_agent") == 0 || strcmp(code, "unauthorized") == 0 ?
		    "gateway" : "node", reason, code);
}

static void
fwd_done(struct bridge *b, const struct bridge_stats *st, void *arg)
{
	struct forward_state *fs = arg;

	fs->active--;
}

static void
fwd_accept(struct evconnlistener *l, evutil_socket_t fd, struct sockaddr *sa,
    int salen, void *arg)
{
	struct forward_state *fs = arg;
	struct bufferevent *bev;
	int one = 1;

	setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
	bev = bufferevent_socket_new(fs->base, fd, BEV_OPT_CLOSE_ON_FREE);
	if (bev == NULL) {
		evutil_closesocket(fd);
		return;
	}
	if (fs->mux == NULL || bridge_open(fs->mux, fs->target, bev, fwd_opened,
	    fwd_done, fs) == NULL) {
		fprintf(stderr, "tetherctl forward: too many streams; connection dropped\n");
		bufferevent_free(bev);
		return;
	}
	fs->active++;
}

static int
fwd_listen(struct forward_state *fs)
{
	struct sockaddr_storage ss;
	int sslen = sizeof(ss);
	char addr[300];

	snprintf(addr, sizeof(addr), "%s:%d", fs->lhost, fs->lport);
	if (evutil_parse_sockaddr_port(addr, (struct sockaddr *)&ss, &sslen) != 0) {
		fprintf(stderr, "tetherctl forward: bad listen address %s\n", addr);
		return -1;
	}
	fs->listener = evconnlistener_new_bind(fs->base, fwd_accept, fs,
	    LEV_OPT_CLOSE_ON_FREE | LEV_OPT_REUSEABLE, 128, (struct sockaddr *)&ss, sslen);
	if (fs->listener == NULL) {
		fprintf(stderr, "tetherctl forward: cannot listen on %s: %s\n", addr,
		    strerror(errno));
		return -1;
	}
	fprintf(stderr, "tetherctl forward: %s -> %s on the node\n", addr, fs->target);
	return 0;
}

static void
fwd_open(struct wsface *c, void *arg)
{
	struct forward_state *fs = arg;
	struct mux_config cfg = MUX_DEFAULT_CONFIG;

	cfg.odd_ids = 0;
	fs->mux = wsmux_new(fs->base, &cfg, c, &fwd_mux_handlers, fs);
	if (fs->mux == NULL || fwd_listen(fs) != 0) {
		fs->exit_code = CTL_EXIT_SERVER;
		wsface_close(c, 1000, "cannot listen");
	}
}

static void
fwd_message(struct wsface *c, const uint8_t *data, size_t len, int binary, void *arg)
{
	struct forward_state *fs = arg;
	struct frame f;
	char err[200];
	int rc = frame_decode(data, len, &f, err, sizeof(err));

	/* A newer gateway's frame of a type this release does not know:
	 * skipped, as the agent does (docs/interface.md, "The tunnel"). */
	if (rc == FRAME_UNKNOWN_TYPE)
		return;
	if (rc != 0 || mux_on_frame(fs->mux, &f, err, sizeof(err)) != 0) {
		fprintf(stderr, "tetherctl forward: protocol error from the gateway: %s\n", err);
		wsface_close(c, 1002, "protocol error");
	}
}

static void
fwd_drain(struct wsface *c, void *arg)
{
	struct forward_state *fs = arg;

	if (fs->mux != NULL)
		mux_on_drain(fs->mux);
}

static void
fwd_close(struct wsface *c, int http_status, const char *reason, void *arg)
{
	struct forward_state *fs = arg;

	/* The multiplexer goes before its face, which goes when this returns. */
	mux_free(fs->mux);
	fs->mux = NULL;
	fs->ws = NULL;
	if (fs->exit_code == -1) {
		if (http_status > 101)
			fprintf(stderr, "tetherctl forward: %s (HTTP %d)\n", reason, http_status);
		else
			fprintf(stderr, "tetherctl forward: connection to the gateway lost: %s\n",
			    reason);
		fs->exit_code = close_exit_code(http_status);
	}
	event_base_loopbreak(fs->base);
}

static const struct wsface_handlers fwd_callbacks = {
	.on_open = fwd_open,
	.on_message = fwd_message,
	.on_drain = fwd_drain,
	.on_close = fwd_close,
};

static void
fwd_signal(evutil_socket_t sig, short what, void *arg)
{
	struct forward_state *fs = arg;

	fs->exit_code = CTL_EXIT_OK;
	event_base_loopbreak(fs->base);
}

/* [LHOST:]LPORT:HOST:PORT, with HOST possibly [v6]. */
static int
parse_forward_spec(const char *spec, char *lhost, size_t lhlen, int *lport,
    char *target, size_t tlen)
{
	char copy[FRAME_TARGET_MAX + 64], *parts[4];
	int n = 0;
	char *p = copy, *end;

	snprintf(copy, sizeof(copy), "%s", spec);
	while (n < 4 && p != NULL) {
		parts[n++] = p;
		if (*p == '[') {
			char *rb = strchr(p, ']');
			p = rb != NULL ? strchr(rb, ':') : NULL;
		} else {
			p = strchr(p, ':');
		}
		if (p != NULL)
			*p++ = '\0';
	}
	if (p != NULL || n < 3)
		return -1;
	snprintf(lhost, lhlen, "%s", n == 4 ? parts[0] : "127.0.0.1");
	*lport = (int)strtol(parts[n - 3], &end, 10);
	if (*end != '\0' || *lport < 0 || *lport > 65535)
		return -1;
	snprintf(target, tlen, "%s:%s", parts[n - 2], parts[n - 1]);
	strtol(parts[n - 1], &end, 10);
	return *end == '\0' && parts[n - 2][0] != '\0' ? 0 : -1;
}

int
cmd_forward(struct ctl *c, int argc, char **argv)
{
	struct stream_args sa;
	struct forward_state fs;
	struct wsclient_config cfg;
	char url[1024], err[256], lhost[256];
	int r;

	if (ctl_wants_help(argc, argv)) {
		help_forward();
		return CTL_EXIT_OK;
	}
	if ((r = parse_stream_args("forward", argc, argv, &sa)) != CTL_EXIT_OK)
		return r;
	memset(&fs, 0, sizeof(fs));
	if (parse_forward_spec(sa.spec, lhost, sizeof(lhost), &fs.lport, fs.target,
	    sizeof(fs.target)) != 0)
		return ctl_usage_error("forward", "%s: want [LHOST:]LPORT:HOST:PORT", sa.spec);
	fs.lhost = lhost;
	if ((r = ctl_ready(c)) != CTL_EXIT_OK)
		return r;
	if (dial_url(c, &sa, NULL, url, sizeof(url)) != 0)
		return ctl_usage_error("forward", "arguments too long");

	fs.exit_code = -1;
	fs.base = runtime_event_base();
	if (fs.base == NULL)
		return CTL_EXIT_SERVER;
	fs.sigint = evsignal_new(fs.base, SIGINT, fwd_signal, &fs);
	fs.sigterm = evsignal_new(fs.base, SIGTERM, fwd_signal, &fs);
	evsignal_add(fs.sigint, NULL);
	evsignal_add(fs.sigterm, NULL);
	memset(&cfg, 0, sizeof(cfg));
	cfg.url = url;
	cfg.subprotocol = TETHER_SUBPROTOCOL;
	cfg.ca_file = c->api.cacert;
	cfg.bearer_token = c->api.token;
	cfg.max_message = 1u << 20;
	cfg.low_water = 128 * 1024;
	fs.ws = wsclient_connect(fs.base, &cfg, &fwd_callbacks, &fs, err, sizeof(err));
	if (fs.ws == NULL) {
		fprintf(stderr, "tetherctl forward: %s\n", err);
		fs.exit_code = CTL_EXIT_USAGE;
	} else {
		event_base_dispatch(fs.base);
	}
	mux_free(fs.mux);
	if (fs.ws != NULL)
		wsface_free(fs.ws);
	if (fs.listener != NULL)
		evconnlistener_free(fs.listener);
	event_free(fs.sigint);
	event_free(fs.sigterm);
	runtime_drain(fs.base);   /* ended bridges, streams and client go now */
	event_base_free(fs.base);
	return fs.exit_code < 0 ? CTL_EXIT_SERVER : fs.exit_code;
}
