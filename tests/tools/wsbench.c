/*
 * wsbench.c: raw WebSocket throughput of common/wsclient.c, for
 * tests/bench/ws_throughput.sh.
 *
 *   wsbench server [--port P] [--cert F --key F] --mode sink|source
 *                  [--size N] [--bytes TOTAL]     (prints "listening PORT")
 *   wsbench client URL [--cacert F] --mode send|recv [--size N]
 *                  [--bytes TOTAL]
 *
 * The server is the cheapest one libevent allows, so that the client is
 * what gets measured: as a sink it parses frame headers and drops payload
 * without unmasking it; as a source it sends one prebuilt frame by
 * reference, over and over.  It serves one connection and exits.  The
 * client sends (masking every byte) or receives (parsing every frame and
 * handing each message over) TOTAL bytes in N-byte binary messages, and
 * prints "MODE SIZE BYTES SECONDS MB/s CPU-SECONDS MB/CPU-s" from on_open to
 * on_close: the last figure, bytes per second of the client's own CPU time
 * (user + system), is the steadier one on a shared machine.
 */
#include <errno.h>
#include <getopt.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/resource.h>
#include <sys/socket.h>

#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/bufferevent_ssl.h>
#include <event2/event.h>
#include <event2/listener.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/sha.h>
#include <openssl/ssl.h>

#include "runtime.h"
#include "wsclient.h"
#include "wsface.h"
#include "wsframe.h"

#define GUID "258EAFA5-E914-47DA-95CA-C5AB0DC85B11"
#define QUEUE_HIGH (4u << 20) /* keep this much queued for the socket */

static const char *mode = "";
static size_t msg_size = 64 * 1024;
static unsigned long long total = 1ULL << 30;

static double
now(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* CPU seconds this process used, user and system. */
static double
cpu(void)
{
	struct rusage ru;

	getrusage(RUSAGE_SELF, &ru);
	return (double)ru.ru_utime.tv_sec + (double)ru.ru_utime.tv_usec / 1e6 +
	    (double)ru.ru_stime.tv_sec + (double)ru.ru_stime.tv_usec / 1e6;
}

static void
die(const char *what)
{
	fprintf(stderr, "wsbench: %s\n", what);
	exit(1);
}

/* ---- server ----------------------------------------------------------- */

struct server {
	struct event_base *base;
	SSL_CTX *ctx;
	struct bufferevent *bev;
	int upgraded;
	uint8_t *frame;        /* source: one prebuilt frame */
	size_t frame_len;
	unsigned long long sent, received;
	int closing;
};

static void
server_done(struct server *s)
{
	if (s->bev != NULL) {
		bufferevent_free(s->bev);
		s->bev = NULL;
	}
	event_base_loopexit(s->base, NULL);
}

static void
no_free(const void *data, size_t len, void *arg)
{
}

/* Source: keep the output topped up with references to the frame. */
static void
server_fill(struct server *s)
{
	struct evbuffer *out = bufferevent_get_output(s->bev);

	while (!s->closing && evbuffer_get_length(out) < QUEUE_HIGH) {
		if (s->sent >= total) {
			static const uint8_t close_frame[] = { 0x88, 0x02, 0x03, 0xe8 };
			evbuffer_add(out, close_frame, sizeof(close_frame));
			s->closing = 1;
			break;
		}
		evbuffer_add_reference(out, s->frame, s->frame_len, no_free, NULL);
		s->sent += msg_size;
	}
}

static void
server_upgrade(struct server *s, struct evbuffer *in)
{
	struct evbuffer_ptr end = evbuffer_search(in, "\r\n\r\n", 4, NULL);
	unsigned char sha[SHA_DIGEST_LENGTH];
	char req[4096], buf[128], accept[64];
	const char *k;
	int one = 1;

	if (end.pos < 0)
		return;
	if ((size_t)end.pos + 4 >= sizeof(req))
		die("request too long");
	evbuffer_remove(in, req, (size_t)end.pos + 4);
	req[end.pos + 4] = '\0';
	if ((k = strcasestr(req, "Sec-WebSocket-Key:")) == NULL)
		die("no key");
	k += 18;
	k += strspn(k, " ");
	snprintf(buf, sizeof(buf), "%.*s%s", (int)strcspn(k, "\r"), k, GUID);
	SHA1((unsigned char *)buf, strlen(buf), sha);
	EVP_EncodeBlock((unsigned char *)accept, sha, sizeof(sha));
	evbuffer_add_printf(bufferevent_get_output(s->bev),
	    "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\n"
	    "Connection: Upgrade\r\nSec-WebSocket-Accept: %s\r\n\r\n", accept);
	setsockopt(bufferevent_getfd(s->bev), IPPROTO_TCP, TCP_NODELAY, &one,
	    sizeof(one));
	s->upgraded = 1;
	if (strcmp(mode, "source") == 0)
		server_fill(s);
}

/* Sink: headers parsed, payload dropped unread. */
static void
server_sink(struct server *s, struct evbuffer *in)
{
	for (;;) {
		size_t avail = evbuffer_get_length(in), n = avail < 14 ? avail : 14;
		struct ws_frame_header h;
		char err[128];
		int hl;

		if (avail < 2)
			return;
		hl = ws_parse_header(evbuffer_pullup(in, (ev_ssize_t)n), n, 1, &h,
		    err, sizeof(err));
		if (hl < 0)
			die(err);
		if (hl == 0 || avail < hl + h.payload_len)
			return;
		evbuffer_drain(in, hl + h.payload_len);
		if (h.opcode == 0x8) {
			static const uint8_t close_frame[] = { 0x88, 0x02, 0x03, 0xe8 };
			bufferevent_write(s->bev, close_frame, sizeof(close_frame));
			s->closing = 1;
			bufferevent_disable(s->bev, EV_READ);
			return;
		}
		s->received += h.payload_len;
	}
}

static void
server_read(struct bufferevent *bev, void *arg)
{
	struct server *s = arg;
	struct evbuffer *in = bufferevent_get_input(bev);

	if (!s->upgraded)
		server_upgrade(s, in);
	if (!s->upgraded)
		return;
	if (strcmp(mode, "sink") == 0)
		server_sink(s, in);
	else
		evbuffer_drain(in, evbuffer_get_length(in)); /* pongs, close */
}

static void
server_write(struct bufferevent *bev, void *arg)
{
	struct server *s = arg;

	if (!s->upgraded)
		return;
	if (s->closing) {
		if (evbuffer_get_length(bufferevent_get_output(bev)) == 0 &&
		    strcmp(mode, "sink") == 0)
			server_done(s);
		return;
	}
	if (strcmp(mode, "source") == 0)
		server_fill(s);
}

static void
server_event(struct bufferevent *bev, short what, void *arg)
{
	if (what & (BEV_EVENT_EOF | BEV_EVENT_ERROR))
		server_done(arg);
}

static void
server_accept(struct evconnlistener *lis, evutil_socket_t fd,
    struct sockaddr *sa, int salen, void *arg)
{
	struct server *s = arg;

	if (s->bev != NULL) {
		evutil_closesocket(fd);
		return;
	}
	if (s->ctx != NULL)
		s->bev = bufferevent_openssl_socket_new(s->base, fd, SSL_new(s->ctx),
		    BUFFEREVENT_SSL_ACCEPTING, BEV_OPT_CLOSE_ON_FREE);
	else
		s->bev = bufferevent_socket_new(s->base, fd, BEV_OPT_CLOSE_ON_FREE);
	if (s->bev == NULL)
		die("cannot create a bufferevent");
	bufferevent_setcb(s->bev, server_read, server_write, server_event, s);
	bufferevent_setwatermark(s->bev, EV_WRITE, QUEUE_HIGH / 2, 0);
	bufferevent_enable(s->bev, EV_READ | EV_WRITE);
}

static int
run_server(int port, const char *cert, const char *key)
{
	struct server s = { 0 };
	struct sockaddr_in sin = { .sin_family = AF_INET };
	struct evconnlistener *lis;
	size_t hl = 2;

	s.base = event_base_new();
	if (cert != NULL) {
		s.ctx = SSL_CTX_new(TLS_server_method());
		if (s.ctx == NULL ||
		    SSL_CTX_use_certificate_chain_file(s.ctx, cert) != 1 ||
		    SSL_CTX_use_PrivateKey_file(s.ctx, key, SSL_FILETYPE_PEM) != 1)
			die("cannot load the certificate or key");
	}
	/* The source's frame: header and a patterned payload. */
	s.frame = malloc(msg_size + 10);
	if (s.frame == NULL)
		die("out of memory");
	s.frame[0] = 0x82;
	if (msg_size < 126)
		s.frame[1] = (uint8_t)msg_size;
	else if (msg_size <= 0xffff) {
		s.frame[1] = 126;
		s.frame[2] = (uint8_t)(msg_size >> 8);
		s.frame[3] = (uint8_t)msg_size;
		hl = 4;
	} else {
		s.frame[1] = 127;
		for (int i = 0; i < 8; i++)
			s.frame[2 + i] = (uint8_t)((uint64_t)msg_size >> (56 - 8 * i));
		hl = 10;
	}
	for (size_t i = 0; i < msg_size; i++)
		s.frame[hl + i] = (uint8_t)(i * 31);
	s.frame_len = hl + msg_size;

	sin.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	sin.sin_port = htons((uint16_t)port);
	lis = evconnlistener_new_bind(s.base, server_accept, &s,
	    LEV_OPT_CLOSE_ON_FREE | LEV_OPT_REUSEABLE, 4,
	    (struct sockaddr *)&sin, sizeof(sin));
	if (lis == NULL)
		die("cannot listen");
	{
		socklen_t sl = sizeof(sin);

		getsockname(evconnlistener_get_fd(lis), (struct sockaddr *)&sin, &sl);
	}
	/* --port 0: the kernel's choice, for the caller to read. */
	printf("listening %d\n", ntohs(sin.sin_port));
	fflush(stdout);
	event_base_dispatch(s.base);
	if (strcmp(mode, "sink") == 0)
		fprintf(stderr, "wsbench server: received %llu bytes\n", s.received);
	evconnlistener_free(lis);
	if (s.bev != NULL)
		bufferevent_free(s.bev);
	SSL_CTX_free(s.ctx);
	free(s.frame);
	event_base_free(s.base);
	return 0;
}

/* ---- client ----------------------------------------------------------- */

struct client {
	struct event_base *base;
	uint8_t *payload;
	unsigned long long queued, received;
	unsigned long messages;
	double t0, t1, cpu0, cpu1;
	int status;
	char reason[256];
	int done_sending;
};

static void
client_fill(struct wsface *c, struct client *k)
{
	while (!k->done_sending && wsface_pending(c) < QUEUE_HIGH) {
		if (k->queued >= total) {
			k->done_sending = 1;
			wsface_close(c, 1000, "done");
			return;
		}
		if (wsface_send(c, k->payload, msg_size, 1) != 0)
			die("send failed");
		k->queued += msg_size;
	}
}

static void
client_open(struct wsface *c, void *arg)
{
	struct client *k = arg;

	k->t0 = now();
	k->cpu0 = cpu();
	if (strcmp(mode, "send") == 0)
		client_fill(c, k);
}

static void
client_message(struct wsface *c, const uint8_t *data, size_t len,
    int binary, void *arg)
{
	struct client *k = arg;

	/* Touch the payload, as a real consumer would. */
	if (len > 0 && data[len - 1] != (uint8_t)((len - 1) * 31))
		die("payload corrupted");
	k->received += len;
	k->messages++;
}

static void
client_drain(struct wsface *c, void *arg)
{
	struct client *k = arg;

	if (strcmp(mode, "send") == 0)
		client_fill(c, k);
}

static void
client_close(struct wsface *c, int status, const char *reason, void *arg)
{
	struct client *k = arg;

	k->t1 = now();
	k->cpu1 = cpu();
	k->status = status;
	snprintf(k->reason, sizeof(k->reason), "%s", reason);
	event_base_loopexit(k->base, NULL);
}

static int
run_client(const char *url, const char *cacert)
{
	struct wsface_handlers cb = { .on_open = client_open,
	    .on_message = client_message, .on_drain = client_drain,
	    .on_close = client_close };
	struct wsclient_config cfg = { 0 };
	struct client k = { 0 };
	unsigned long long bytes;
	char err[256];
	double secs;

	k.base = event_base_new();
	k.payload = malloc(msg_size);
	if (k.base == NULL || k.payload == NULL)
		die("out of memory");
	for (size_t i = 0; i < msg_size; i++)
		k.payload[i] = (uint8_t)(i * 7);
	cfg.url = url;
	cfg.ca_file = cacert;
	cfg.max_message = msg_size + 1;
	cfg.low_water = QUEUE_HIGH / 2;
	if (wsclient_connect(k.base, &cfg, &cb, &k, err, sizeof(err)) == NULL)
		die(err);
	event_base_dispatch(k.base);
	if (k.t0 == 0)
		die(k.reason);
	secs = k.t1 - k.t0;
	bytes = strcmp(mode, "send") == 0 ? k.queued : k.received;
	printf("%s %zu %llu %.3f %.0f %.3f %.0f\n", mode, msg_size, bytes, secs,
	    (double)bytes / secs / 1e6, k.cpu1 - k.cpu0,
	    (double)bytes / (k.cpu1 - k.cpu0) / 1e6);
	if (k.status != 101)
		fprintf(stderr, "wsbench: closed with %d %s\n", k.status, k.reason);
	free(k.payload);
	runtime_drain(k.base);   /* the freed client's memory goes from the loop */
	event_base_free(k.base);
	return k.status == 101 ? 0 : 1;
}

int
main(int argc, char **argv)
{
	static const struct option opts[] = {
		{ "port", required_argument, NULL, 'p' },
		{ "cert", required_argument, NULL, 'c' },
		{ "key", required_argument, NULL, 'k' },
		{ "cacert", required_argument, NULL, 'a' },
		{ "mode", required_argument, NULL, 'm' },
		{ "size", required_argument, NULL, 's' },
		{ "bytes", required_argument, NULL, 'b' },
		{ NULL, 0, NULL, 0 },
	};
	const char *cert = NULL, *key = NULL, *cacert = NULL, *role;
	int port = 0, ch;

	signal(SIGPIPE, SIG_IGN);
	if (argc < 2)
		die("usage: wsbench server|client ...");
	role = argv[1];
	optind = 2;
	while ((ch = getopt_long(argc, argv, "", opts, NULL)) != -1) {
		switch (ch) {
		case 'p': port = atoi(optarg); break;
		case 'c': cert = optarg; break;
		case 'k': key = optarg; break;
		case 'a': cacert = optarg; break;
		case 'm': mode = optarg; break;
		case 's': msg_size = strtoul(optarg, NULL, 10); break;
		case 'b': total = strtoull(optarg, NULL, 10); break;
		default: die("bad option");
		}
	}
	if (msg_size == 0)
		die("--size must be positive");
	if (strcmp(role, "server") == 0)
		return run_server(port, cert, key);
	if (strcmp(role, "client") == 0 && optind < argc)
		return run_client(argv[optind], cacert);
	die("usage: wsbench server|client ...");
	return 2;
}
