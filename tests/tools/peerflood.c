/*
 * peerflood.c: a hostile WebSocket peer for the queue-cap tests
 * (docs/0009-peer-queue-caps.md): it sends frames that make the gateway
 * answer, as fast as it can, and never reads the answers.
 *
 *   peerflood --cacert FILE [--token T] [--key FILE --agent-id ID --node N]
 *             [--subprotocol P] [--seconds S] [--max-mib M] MODE URL
 *
 * MODE:
 *   ping          WebSocket pings (125-byte payload) right after the
 *                 upgrade: before any authentication on /v1/connect, or on
 *                 a dial connection (--subprotocol "": a raw one; the
 *                 default is tether.v1)
 *   agent-open    authenticates as a registered agent (HELLO, AUTH signed
 *                 with --key), then floods OPEN frames, which agents may
 *                 not send: every one earns an OPEN_FAIL
 *   forward-open  on a tether.v1 dial connection (--token): OPEN frames
 *                 for a service, every one refused with an OPEN_FAIL
 *
 * The socket's receive buffer is made as small as the kernel allows, so
 * the gateway's answers pile up on its side.  Prints one line and exits:
 *   closed FRAMES BYTES     the gateway dropped the connection (exit 0)
 *   open FRAMES BYTES       still open after --seconds (default 20) or
 *                           --max-mib MiB sent (default 64) (exit 1)
 * and exits 2 on bad usage or when the set-up (TLS, upgrade, handshake)
 * fails.  Blocking I/O on purpose: it is a test tool, not part of a daemon.
 */
#include <errno.h>
#include <getopt.h>
#include <netdb.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

#include <openssl/err.h>
#include <openssl/ssl.h>

#include "agentkey.h"
#include "frame.h"

#define HEAD_MAX 8192

struct peer {
	SSL *ssl;
	int fd;
	long frames;
	long long bytes;
};

static void __attribute__((noreturn))
die(const char *what)
{
	fprintf(stderr, "peerflood: %s\n", what);
	exit(2);
}

/* wss://HOST:PORT/PATH?QUERY into its parts. */
static void
parse_url(const char *url, char *host, size_t hlen, char *port, size_t plen,
    const char **path)
{
	const char *p, *colon, *slash;

	if (strncmp(url, "wss://", 6) != 0)
		die("the URL must be wss://HOST:PORT/PATH");
	p = url + 6;
	slash = strchr(p, '/');
	colon = strchr(p, ':');
	if (slash == NULL || colon == NULL || colon > slash ||
	    (size_t)(colon - p) >= hlen || (size_t)(slash - colon - 1) >= plen)
		die("the URL must be wss://HOST:PORT/PATH");
	snprintf(host, hlen, "%.*s", (int)(colon - p), p);
	snprintf(port, plen, "%.*s", (int)(slash - colon - 1), colon + 1);
	*path = slash;
}

static int
tcp_connect(const char *host, const char *port)
{
	struct addrinfo hints = { .ai_socktype = SOCK_STREAM }, *ai;
	int fd, small = 1;
	struct timeval tv = { 2, 0 };

	if (getaddrinfo(host, port, &hints, &ai) != 0)
		die("cannot resolve the host");
	fd = socket(ai->ai_family, SOCK_STREAM, 0);
	/* Before connect, so that the window we offer stays small. */
	setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &small, sizeof(small));
	/* A blocked write comes back, so the deadline is kept. */
	setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
	setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
	if (fd < 0 || connect(fd, ai->ai_addr, ai->ai_addrlen) != 0)
		die("cannot connect");
	freeaddrinfo(ai);
	return fd;
}

static void
write_all(struct peer *p, const void *buf, size_t len)
{
	if (SSL_write(p->ssl, buf, (int)len) != (int)len)
		die("write failed during the set-up");
}

/* One masked WebSocket frame (mask 0: the payload goes as it is). */
static size_t
ws_frame(uint8_t *out, int opcode, const uint8_t *payload, size_t len)
{
	size_t n = 0;

	out[n++] = (uint8_t)(0x80 | opcode);
	if (len < 126) {
		out[n++] = (uint8_t)(0x80 | len);
	} else {
		out[n++] = 0x80 | 126;
		out[n++] = (uint8_t)(len >> 8);
		out[n++] = (uint8_t)len;
	}
	memset(out + n, 0, 4);
	n += 4;
	memcpy(out + n, payload, len);
	return n + len;
}

static void
send_frame(struct peer *p, const struct frame *f)
{
	uint8_t *buf, wire[70000];
	size_t len;

	if (frame_encode(f, 0, &buf, &len) != 0 || len > 65000)
		die("cannot encode a frame");
	len = ws_frame(wire, 0x2, buf, len);
	free(buf);
	write_all(p, wire, len);
}

/* Reads one whole server frame into f (binary messages only). */
static void
read_frame(struct peer *p, struct frame *f)
{
	uint8_t hdr[10], buf[65536];
	size_t len, got = 0;
	char err[160];

	for (;;) {
		if (SSL_read(p->ssl, hdr, 2) != 2)
			die("no frame from the gateway");
		len = hdr[1] & 0x7f;
		if (len == 126) {
			if (SSL_read(p->ssl, hdr + 2, 2) != 2)
				die("short frame header");
			len = (size_t)hdr[2] << 8 | hdr[3];
		} else if (len == 127)
			die("frame too large for this tool");
		for (got = 0; got < len;) {
			int n = SSL_read(p->ssl, buf + got, (int)(len - got));
			if (n <= 0)
				die("short frame");
			got += (size_t)n;
		}
		if ((hdr[0] & 0x0f) == 0x2)
			break;
	}
	if (frame_decode(buf, len, f, err, sizeof(err)) != 0)
		die(err);
}

static void
upgrade(struct peer *p, const char *host, const char *port, const char *path,
    const char *token, const char *proto)
{
	char req[2048], head[HEAD_MAX];
	size_t n = 0;

	snprintf(req, sizeof(req), "GET %s HTTP/1.1\r\nHost: %s:%s\r\n"
	    "Upgrade: websocket\r\nConnection: Upgrade\r\n"
	    "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n"
	    "Sec-WebSocket-Version: 13\r\n%s%s%s%s%s%s\r\n", path, host, port,
	    proto[0] ? "Sec-WebSocket-Protocol: " : "", proto, proto[0] ? "\r\n" : "",
	    token ? "Authorization: Bearer " : "", token ? token : "", token ? "\r\n" : "");
	write_all(p, req, strlen(req));
	/* Byte by byte: nothing after the head may be taken from the socket. */
	while (n < sizeof(head) - 1) {
		if (SSL_read(p->ssl, head + n, 1) != 1)
			die("no answer to the upgrade");
		n++;
		if (n >= 4 && memcmp(head + n - 4, "\r\n\r\n", 4) == 0)
			break;
	}
	head[n] = '\0';
	if (strncmp(head, "HTTP/1.1 101", 12) != 0)
		die("the upgrade was refused");
}

static void
agent_handshake(struct peer *p, const char *keyfile, const char *id, const char *node)
{
	char err[256];
	EVP_PKEY *key = agentkey_load(keyfile, err, sizeof(err));
	uint8_t msg[AUTH_TRANSCRIPT_MAX];
	struct frame f, in;
	size_t len;

	if (key == NULL)
		die(err);
	memset(&f, 0, sizeof(f));
	f.type = FRAME_HELLO;
	f.u.hello.versions[0] = TETHER_PROTOCOL_VERSION;
	f.u.hello.nversions = 1;
	f.u.hello.cred = FRAME_CRED_AGENT;
	snprintf(f.u.hello.node, sizeof(f.u.hello.node), "%s", node);
	snprintf(f.u.hello.id, sizeof(f.u.hello.id), "%s", id);
	send_frame(p, &f);
	read_frame(p, &in);
	if (in.type != FRAME_CHALLENGE)
		die("no CHALLENGE");
	memset(&f, 0, sizeof(f));
	f.type = FRAME_AUTH;
	len = auth_transcript(msg, sizeof(msg), in.u.challenge.version,
	    FRAME_CRED_AGENT, id, node, in.u.challenge.nonce);
	if (len == 0 || agentkey_sign(key, msg, len, f.u.auth.sig) != 0)
		die("cannot sign the challenge");
	EVP_PKEY_free(key);
	send_frame(p, &f);
	read_frame(p, &in);
	if (in.type != FRAME_WELCOME)
		die("no WELCOME");
}

/* Many frames at once into one buffer, then one write: the flood. */
static size_t
batch(const char *mode, uint32_t *next_id, uint8_t *out, size_t cap, int *count)
{
	uint8_t payload[125];
	size_t n = 0;

	memset(payload, 'p', sizeof(payload));
	*count = 0;
	while (n + 256 < cap) {
		if (strcmp(mode, "ping") == 0) {
			n += ws_frame(out + n, 0x9, payload, sizeof(payload));
		} else {
			struct frame f;
			uint8_t *buf;
			size_t len;

			memset(&f, 0, sizeof(f));
			f.type = FRAME_OPEN;
			f.stream_id = *next_id;
			*next_id += 2;
			if (strcmp(mode, "agent-ping") == 0) {
				f.type = FRAME_PING;       /* answered with PONG */
				f.stream_id = 0;
				f.u.ping.seq = *next_id;
			} else if (strcmp(mode, "agent-open") == 0)
				snprintf(f.u.open.target, sizeof(f.u.open.target), "x:1");
			else   /* a forward client may not name a service:
				* refused at once, no agent is asked */
				snprintf(f.u.open.service, sizeof(f.u.open.service), "x");
			f.u.open.window = 65536;
			if (frame_encode(&f, 0, &buf, &len) != 0)
				die("cannot encode a frame");
			n += ws_frame(out + n, 0x2, buf, len);
			free(buf);
		}
		(*count)++;
	}
	return n;
}

static void
flood(struct peer *p, const char *mode, int seconds, long long max_bytes)
{
	static uint8_t out[16384];
	uint32_t next_id = 2;
	time_t end = time(NULL) + seconds;
	size_t n = 0;
	int count = 0;

	while (time(NULL) < end && p->bytes < max_bytes) {
		int w;

		/* A write that timed out is retried with the same bytes, as
		 * OpenSSL requires. */
		if (n == 0)
			n = batch(mode, &next_id, out, sizeof(out), &count);
		w = SSL_write(p->ssl, out, (int)n);
		if (w <= 0) {
			int e = SSL_get_error(p->ssl, w);

			if (e == SSL_ERROR_WANT_WRITE || (e == SSL_ERROR_SYSCALL &&
			    (errno == EAGAIN || errno == EWOULDBLOCK)))
				continue;       /* the gateway is slow to read */
			printf("closed %ld %lld\n", p->frames, p->bytes);
			return;
		}
		p->frames += count;
		p->bytes += w;
		n = 0;
	}
	printf("open %ld %lld\n", p->frames, p->bytes);
	exit(1);
}

int
main(int argc, char **argv)
{
	static const struct option opts[] = {
		{ "cacert", required_argument, NULL, 'c' },
		{ "token", required_argument, NULL, 't' },
		{ "key", required_argument, NULL, 'k' },
		{ "agent-id", required_argument, NULL, 'a' },
		{ "node", required_argument, NULL, 'n' },
		{ "seconds", required_argument, NULL, 's' },
		{ "subprotocol", required_argument, NULL, 'p' },
		{ "max-mib", required_argument, NULL, 'm' },
		{ NULL, 0, NULL, 0 },
	};
	const char *cacert = NULL, *token = NULL, *key = NULL, *id = NULL, *node = NULL;
	const char *mode, *path, *proto = "tether.v1";
	char host[256], port[16];
	int seconds = 20, c;
	long long max_mib = 64;
	struct peer p = { 0 };
	SSL_CTX *ctx;

	while ((c = getopt_long(argc, argv, "", opts, NULL)) != -1) {
		switch (c) {
		case 'c': cacert = optarg; break;
		case 't': token = optarg; break;
		case 'k': key = optarg; break;
		case 'a': id = optarg; break;
		case 'n': node = optarg; break;
		case 's': seconds = atoi(optarg); break;
		case 'p': proto = optarg; break;
		case 'm': max_mib = atoll(optarg); break;
		default: die("usage: peerflood --cacert FILE [--token T] [--key FILE "
		    "--agent-id ID --node N] [--subprotocol P] [--seconds S] [--max-mib M] MODE URL");
		}
	}
	if (argc - optind != 2 || cacert == NULL)
		die("usage: peerflood --cacert FILE ... MODE URL");
	mode = argv[optind];
	if (strcmp(mode, "ping") != 0 && strcmp(mode, "agent-open") != 0 &&
	    strcmp(mode, "agent-ping") != 0 && strcmp(mode, "forward-open") != 0)
		die("MODE is ping, agent-open, agent-ping or forward-open");
	if (strncmp(mode, "agent-", 6) == 0 && (key == NULL || id == NULL || node == NULL))
		die("agent modes need --key, --agent-id and --node");
	signal(SIGPIPE, SIG_IGN);
	parse_url(argv[optind + 1], host, sizeof(host), port, sizeof(port), &path);
	ctx = SSL_CTX_new(TLS_client_method());
	if (ctx == NULL || SSL_CTX_load_verify_locations(ctx, cacert, NULL) != 1)
		die("cannot load the CA file");
	SSL_CTX_set_verify(ctx, SSL_VERIFY_PEER, NULL);
	p.fd = tcp_connect(host, port);
	p.ssl = SSL_new(ctx);
	SSL_set_fd(p.ssl, p.fd);
	SSL_set_tlsext_host_name(p.ssl, host);
	if (SSL_connect(p.ssl) != 1)
		die("TLS handshake failed");
	upgrade(&p, host, port, path, token, proto);
	if (strncmp(mode, "agent-", 6) == 0)
		agent_handshake(&p, key, id, node);
	flood(&p, mode, seconds, max_mib << 20);
	SSL_free(p.ssl);
	SSL_CTX_free(ctx);
	close(p.fd);
	return 0;
}
