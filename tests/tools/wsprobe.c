/*
 * wsprobe.c: a command-line probe for common/wsclient.c, for integration
 * tests and by hand.
 *
 *   wsprobe [--cacert FILE] [--subprotocol P] [--token T] [--timeout MS]
 *           [--text] [--close-after N] [--pause-ms MS] [--pings N] URL [HEX]
 *
 * Connects to URL, sends one message (HEX, decoded; binary unless --text)
 * once open, and prints one line per event on stdout:
 *
 *   open
 *   message binary|text LEN HEX
 *   close STATUS REASON
 *   ping                     (only with --pings: the server pinged)
 *
 * --close-after N closes (1000) after N messages; --pause-ms MS pauses
 * reading for MS milliseconds after open, to exercise backpressure;
 * --pings N prints the server's pings and closes (1000) after N of them.
 * Exits 0 once on_close arrived, 1 if wsclient_connect refused the
 * arguments, 2 on bad usage.
 */
#include <ctype.h>
#include <errno.h>
#include <getopt.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <event2/event.h>
#include <openssl/crypto.h>

#include "runtime.h"
#include "wsclient.h"
#include "wsface.h"

struct probe {
	struct event_base *base;
	struct event *resume;
	uint8_t *msg;
	size_t msg_len;
	int text;
	long close_after;
	long pings;                /* --pings: close after this many */
	long pinged;
	long received;
	long pause_ms;
	int closed;
};

static void
usage(void)
{
	fprintf(stderr, "usage: wsprobe [--cacert FILE] [--subprotocol P] "
	    "[--token T] [--timeout MS] [--text] [--close-after N] "
	    "[--pause-ms MS] [--pings N] URL [HEX]\n");
	exit(2);
}

static uint8_t *
unhex(const char *s, size_t *len)
{
	size_t n = strlen(s);
	uint8_t *out;

	if (n % 2 != 0)
		return NULL;
	if ((out = malloc(n / 2 + 1)) == NULL)
		return NULL;
	for (size_t i = 0; i < n / 2; i++) {
		int hi = OPENSSL_hexchar2int((unsigned char)s[2 * i]);
		int lo = OPENSSL_hexchar2int((unsigned char)s[2 * i + 1]);
		if (hi < 0 || lo < 0) {
			free(out);
			return NULL;
		}
		out[i] = (uint8_t)(hi << 4 | lo);
	}
	*len = n / 2;
	return out;
}

static void
resume_cb(evutil_socket_t fd, short what, void *arg)
{
	struct wsface *c = arg;

	printf("resume\n");
	fflush(stdout);
	wsface_pause_reading(c, 0);
}

static void
on_open(struct wsface *c, void *arg)
{
	struct probe *p = arg;

	printf("open\n");
	fflush(stdout);
	if (p->msg != NULL && wsface_send(c, p->msg, p->msg_len, !p->text) != 0)
		fprintf(stderr, "wsprobe: send failed\n");
	if (p->pause_ms > 0) {
		struct timeval tv = { p->pause_ms / 1000, (p->pause_ms % 1000) * 1000 };

		wsface_pause_reading(c, 1);
		p->resume = evtimer_new(p->base, resume_cb, c);
		if (p->resume == NULL || evtimer_add(p->resume, &tv) != 0) {
			fprintf(stderr, "wsprobe: cannot arm the resume timer\n");
			wsface_pause_reading(c, 0);
		}
	}
}

static void
on_message(struct wsface *c, const uint8_t *data, size_t len, int binary,
    void *arg)
{
	struct probe *p = arg;

	printf("message %s %zu ", binary ? "binary" : "text", len);
	for (size_t i = 0; i < len; i++)
		printf("%02x", data[i]);
	printf("\n");
	fflush(stdout);
	if (p->close_after > 0 && ++p->received == p->close_after)
		wsface_close(c, 1000, "probe done");
}

static void
on_ping(struct wsface *c, void *arg)
{
	struct probe *p = arg;

	if (p->pings <= 0)
		return;
	printf("ping\n");
	fflush(stdout);
	if (++p->pinged == p->pings)
		wsface_close(c, 1000, "probe done");
}

static void
on_close(struct wsface *c, int status, const char *reason, void *arg)
{
	struct probe *p = arg;

	printf("close %d %s\n", status, reason);
	fflush(stdout);
	p->closed = 1;
	/* c is freed when this returns (wsface.h). */
	if (p->resume != NULL) {
		event_free(p->resume);
		p->resume = NULL;
	}
}

int
main(int argc, char **argv)
{
	static const struct option opts[] = {
		{ "cacert", required_argument, NULL, 'c' },
		{ "subprotocol", required_argument, NULL, 's' },
		{ "token", required_argument, NULL, 't' },
		{ "timeout", required_argument, NULL, 'T' },
		{ "text", no_argument, NULL, 'x' },
		{ "close-after", required_argument, NULL, 'n' },
		{ "pause-ms", required_argument, NULL, 'p' },
		{ "pings", required_argument, NULL, 'P' },
		{ NULL, 0, NULL, 0 },
	};
	struct wsclient_config cfg = { 0 };
	struct wsface_handlers cb = { .on_open = on_open, .on_message = on_message,
	    .on_close = on_close, .on_ping = on_ping };
	struct probe p = { 0 };
	struct wsface *c;
	char err[512];
	int ch;

	signal(SIGPIPE, SIG_IGN);
	while ((ch = getopt_long(argc, argv, "", opts, NULL)) != -1) {
		switch (ch) {
		case 'c': cfg.ca_file = optarg; break;
		case 's': cfg.subprotocol = optarg; break;
		case 't': cfg.bearer_token = optarg; break;
		case 'T': cfg.connect_timeout_ms = (uint32_t)strtoul(optarg, NULL, 10); break;
		case 'x': p.text = 1; break;
		case 'n': p.close_after = strtol(optarg, NULL, 10); break;
		case 'p': p.pause_ms = strtol(optarg, NULL, 10); break;
		case 'P': p.pings = strtol(optarg, NULL, 10); break;
		default: usage();
		}
	}
	if (optind >= argc || argc - optind > 2)
		usage();
	cfg.url = argv[optind];
	if (optind + 1 < argc &&
	    (p.msg = unhex(argv[optind + 1], &p.msg_len)) == NULL) {
		fprintf(stderr, "wsprobe: bad hex message\n");
		return 2;
	}

	if ((p.base = event_base_new()) == NULL) {
		fprintf(stderr, "wsprobe: cannot create an event base\n");
		return 1;
	}
	if ((c = wsclient_connect(p.base, &cfg, &cb, &p, err, sizeof(err))) == NULL) {
		fprintf(stderr, "wsprobe: %s\n", err);
		printf("error %s\n", err);
		free(p.msg);
		event_base_free(p.base);
		return 1;
	}
	event_base_dispatch(p.base);
	free(p.msg);
	runtime_drain(p.base);   /* the freed client's memory goes from the loop */
	event_base_free(p.base);
	if (!p.closed) {
		fprintf(stderr, "wsprobe: the loop ended without on_close\n");
		return 1;
	}
	return 0;
}
