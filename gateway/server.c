/*
 * server.c: libwebsockets on the gateway's libevent loop (see server.h).
 *
 * Two lws protocols share the one TLS port:
 *   "http"       every plain HTTP request -> api_handle
 *   "tether.v1"  WebSocket upgrades on /v1/connect -> one conn + session each
 *
 * Buffer ownership: a conn owns its reassembly buffer (rx, bounded by the
 * session's current message limit) and its queue of encoded frames (out,
 * bounded by limits.max_queue_bytes).  Both die with the conn.
 */
#include "server.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <event2/event.h>
#include <libwebsockets.h>

#include "api.h"
#include "frame.h"
#include "framequeue.h"
#include "gateway.h"
#include "log.h"
#include "session.h"

#define HTTP_PATH_MAX 512
#define HTTP_QUERY_MAX 1024
#define HTTP_AUTH_MAX 256
#define HTTP_CHUNK 16384

struct conn {
	struct lws *wsi;
	struct gateway *gw;
	struct session *session;
	struct framequeue out;    /* encoded frames waiting for WRITEABLE */
	uint8_t *rx;              /* a message being reassembled from fragments */
	size_t rx_len, rx_cap;
	int rx_discard;           /* message already refused: drop its remaining fragments */
	int closing;              /* close once out is empty */
	char peer[64];
};

/* Per-request state of the http protocol; lws reuses it across keep-alive. */
struct http_conn {
	char method[8];
	char path[HTTP_PATH_MAX];
	char query[HTTP_QUERY_MAX];
	char auth[HTTP_AUTH_MAX];
	char *body;
	size_t body_len;
	int body_too_large;
	struct api_response resp;
	size_t sent;
	int responding;
};

/* Depth of lws callbacks on the stack: outside them, asking lws for a
 * writable callback needs a nudge (lws 4.1.6's libevent glue otherwise may
 * not notice until the next event). */
static int in_lws_callback;

static void
server_nudge(struct gateway *gw)
{
	if (in_lws_callback == 0 && gw->lws != NULL)
		lws_cancel_service(gw->lws);
}

/* ---- tunnel connections ---- */

const char *
conn_peer(const struct conn *c)
{
	return c->peer;
}

static void
conn_free_buffers(struct conn *c)
{
	framequeue_clear(&c->out);
	free(c->rx);
	c->rx = NULL;
	c->rx_len = c->rx_cap = 0;
}

int
conn_send(struct conn *c, const struct frame *f)
{
	if (c->wsi == NULL || c->closing)
		return -1;
	if (framequeue_push(&c->out, f) != 0) {
		warn("tunnel %s: cannot queue %s frame (%zu bytes queued, limit %zu): "
		    "closing", c->peer, frame_type_name(f->type), c->out.bytes,
		    c->out.max_bytes);
		/* A peer that does not read loses its tunnel, not our memory. */
		framequeue_clear(&c->out);
		c->closing = 1;
	}
	lws_callback_on_writable(c->wsi);
	server_nudge(c->gw);
	return c->closing ? -1 : 0;
}

void
conn_close(struct conn *c)
{
	if (c->wsi == NULL || c->closing)
		return;
	c->closing = 1;
	lws_callback_on_writable(c->wsi);
	server_nudge(c->gw);
}

/* Writes the next queued frame.  Returns -1 to make lws close the wsi. */
static int
conn_writable(struct conn *c)
{
	struct framequeue_entry *e = framequeue_peek(&c->out);

	if (e == NULL) {
		if (c->closing) {
			lws_close_reason(c->wsi, LWS_CLOSE_STATUS_NORMAL, NULL, 0);
			return -1;
		}
		return 0;
	}
	if (lws_write(c->wsi, e->buf + LWS_PRE, e->len, LWS_WRITE_BINARY) < (int)e->len) {
		warn("tunnel %s: write failed", c->peer);
		return -1;
	}
	framequeue_pop(&c->out);
	if (framequeue_peek(&c->out) != NULL || c->closing)
		lws_callback_on_writable(c->wsi);
	return 0;
}

/* Appends one fragment; delivers the message when it is complete. */
static void
conn_receive(struct conn *c, const uint8_t *in, size_t len)
{
	size_t max = session_max_message(c->session);
	int first = lws_is_first_fragment(c->wsi);
	int final = lws_is_final_fragment(c->wsi) && lws_remaining_packet_payload(c->wsi) == 0;

	if (c->closing)
		return;
	if (first)
		c->rx_discard = 0;
	if (c->rx_discard)
		return;
	if (first && !lws_frame_is_binary(c->wsi)) {
		c->rx_discard = 1;
		session_protocol_error(c->session, "protocol", "text messages are not part of tether.v1; frames are binary");
		return;
	}
	if (c->rx_len + len > max) {
		char reason[96];
		c->rx_discard = 1;
		c->rx_len = 0;
		snprintf(reason, sizeof(reason), "frame larger than %zu bytes", max);
		session_protocol_error(c->session, "frame_too_large", reason);
		return;
	}
	if (first && final) {
		/* The common case: one fragment, no copy. */
		session_on_message(c->session, in, len);
		return;
	}
	if (c->rx_len + len > c->rx_cap) {
		size_t cap = c->rx_cap ? c->rx_cap : 4096;
		while (cap < c->rx_len + len)
			cap *= 2;
		uint8_t *p = realloc(c->rx, cap);
		if (p == NULL) {
			session_protocol_error(c->session, "internal", "out of memory");
			return;
		}
		c->rx = p;
		c->rx_cap = cap;
	}
	memcpy(c->rx + c->rx_len, in, len);
	c->rx_len += len;
	if (final) {
		session_on_message(c->session, c->rx, c->rx_len);
		c->rx_len = 0;
	}
}

static int
uri_is(struct lws *wsi, enum lws_token_indexes tok, const char *want)
{
	char uri[HTTP_PATH_MAX];

	if (lws_hdr_copy(wsi, uri, sizeof(uri), tok) <= 0)
		return 0;
	return strcmp(uri, want) == 0;
}

static int
tunnel_callback(struct lws *wsi, enum lws_callback_reasons reason, void *user,
    void *in, size_t len)
{
	struct conn *c = user;
	struct gateway *gw = lws_context_user(lws_get_context(wsi));

	switch (reason) {
	case LWS_CALLBACK_FILTER_PROTOCOL_CONNECTION:
		if (!uri_is(wsi, WSI_TOKEN_GET_URI, "/v1/connect"))
			return -1;
		if (gw->stopping)
			return -1;
		if (gw->handshakes >= gw->limits.max_handshakes) {
			warn("refusing tunnel: %u handshakes under way (--max-handshakes)",
			    gw->handshakes);
			return -1;
		}
		return 0;
	case LWS_CALLBACK_ESTABLISHED:
		memset(c, 0, sizeof(*c));
		c->wsi = wsi;
		c->gw = gw;
		framequeue_init(&c->out, LWS_PRE, gw->limits.max_queue_bytes);
		lws_get_peer_simple(wsi, c->peer, sizeof(c->peer));
		c->session = session_new(gw, c);
		if (c->session == NULL)
			return -1;
		return 0;
	case LWS_CALLBACK_RECEIVE:
		if (c->session != NULL)
			conn_receive(c, in, len);
		return 0;
	case LWS_CALLBACK_SERVER_WRITEABLE:
		return conn_writable(c);
	case LWS_CALLBACK_CLOSED:
		if (c->session != NULL) {
			struct session *s = c->session;
			c->session = NULL;
			c->wsi = NULL;
			session_closed(s);
		}
		conn_free_buffers(c);
		return 0;
	default:
		return 0;
	}
}

/* ---- plain HTTP ---- */

static const char *
http_method(struct lws *wsi)
{
	if (lws_hdr_total_length(wsi, WSI_TOKEN_GET_URI) > 0)
		return "GET";
	if (lws_hdr_total_length(wsi, WSI_TOKEN_POST_URI) > 0)
		return "POST";
	if (lws_hdr_total_length(wsi, WSI_TOKEN_PUT_URI) > 0)
		return "PUT";
	if (lws_hdr_total_length(wsi, WSI_TOKEN_DELETE_URI) > 0)
		return "DELETE";
	return "OTHER";
}

/* Joins the decoded query fragments with '&'. */
static void
http_query(struct lws *wsi, char *out, size_t outlen)
{
	char frag[256];
	size_t used = 0;

	out[0] = '\0';
	for (int i = 0; lws_hdr_copy_fragment(wsi, frag, sizeof(frag),
	    WSI_TOKEN_HTTP_URI_ARGS, i) > 0; i++) {
		int n = snprintf(out + used, outlen - used, "%s%s", used ? "&" : "", frag);
		if (n < 0 || (size_t)n >= outlen - used)
			break;
		used += (size_t)n;
	}
}

static void
http_reset(struct http_conn *h)
{
	free(h->body);
	free(h->resp.body);
	memset(h, 0, sizeof(*h));
}

static int
http_respond(struct lws *wsi, struct gateway *gw, struct http_conn *h)
{
	uint8_t hdr[LWS_PRE + 1024], *start = &hdr[LWS_PRE], *p = start,
	    *end = &hdr[sizeof(hdr) - 1];
	struct api_request req = {
		.method = h->method, .path = h->path, .query = h->query,
		.authorization = h->auth, .body = h->body, .body_len = h->body_len,
		.body_too_large = h->body_too_large,
	};

	api_handle(gw, &req, &h->resp);
	h->responding = 1;
	h->sent = 0;
	if (lws_add_http_common_headers(wsi, (unsigned)h->resp.status,
	    h->resp.content_type, h->resp.body_len, &p, end) ||
	    lws_add_http_header_by_name(wsi, (const unsigned char *)"cache-control:",
	    (const unsigned char *)"no-store", 8, &p, end) ||
	    lws_finalize_write_http_header(wsi, start, &p, end))
		return -1;
	lws_callback_on_writable(wsi);
	return 0;
}

static int
http_writable(struct lws *wsi, struct http_conn *h)
{
	uint8_t buf[LWS_PRE + HTTP_CHUNK];
	size_t left, n;
	enum lws_write_protocol mode;

	if (!h->responding)
		return 0;
	left = h->resp.body_len - h->sent;
	n = left < HTTP_CHUNK ? left : HTTP_CHUNK;
	mode = n == left ? LWS_WRITE_HTTP_FINAL : LWS_WRITE_HTTP;
	memcpy(buf + LWS_PRE, h->resp.body + h->sent, n);
	if (lws_write(wsi, buf + LWS_PRE, n, mode) != (int)n)
		return -1;
	h->sent += n;
	if (mode != LWS_WRITE_HTTP_FINAL) {
		lws_callback_on_writable(wsi);
		return 0;
	}
	http_reset(h);
	return lws_http_transaction_completed(wsi) ? -1 : 0;
}

static int
http_body(struct gateway *gw, struct http_conn *h, const void *in, size_t len)
{
	if (h->body_too_large)
		return 0;
	if (h->body_len + len > gw->limits.max_body_bytes) {
		h->body_too_large = 1;
		return 0;
	}
	char *p = realloc(h->body, h->body_len + len + 1);
	if (p == NULL)
		return -1;
	h->body = p;
	memcpy(h->body + h->body_len, in, len);
	h->body_len += len;
	h->body[h->body_len] = '\0';
	return 0;
}

static int
http_callback(struct lws *wsi, enum lws_callback_reasons reason, void *user,
    void *in, size_t len)
{
	struct http_conn *h = user;
	struct gateway *gw = lws_context_user(lws_get_context(wsi));
	char clen[24];

	switch (reason) {
	case LWS_CALLBACK_FILTER_PROTOCOL_CONNECTION:
		/* A WebSocket upgrade that did not ask for tether.v1. */
		return -1;
	case LWS_CALLBACK_HTTP:
		http_reset(h);
		snprintf(h->method, sizeof(h->method), "%s", http_method(wsi));
		snprintf(h->path, sizeof(h->path), "%s", (const char *)in);
		http_query(wsi, h->query, sizeof(h->query));
		if (lws_hdr_copy(wsi, h->auth, sizeof(h->auth), WSI_TOKEN_HTTP_AUTHORIZATION) < 0)
			h->auth[0] = '\0';
		if (strcmp(h->method, "GET") == 0 || strcmp(h->method, "DELETE") == 0 ||
		    lws_hdr_copy(wsi, clen, sizeof(clen), WSI_TOKEN_HTTP_CONTENT_LENGTH) <= 0 ||
		    strcmp(clen, "0") == 0)
			return http_respond(wsi, gw, h);
		return 0; /* the body follows */
	case LWS_CALLBACK_HTTP_BODY:
		return http_body(gw, h, in, len);
	case LWS_CALLBACK_HTTP_BODY_COMPLETION:
		return http_respond(wsi, gw, h);
	case LWS_CALLBACK_HTTP_WRITEABLE:
		return http_writable(wsi, h);
	case LWS_CALLBACK_HTTP_DROP_PROTOCOL:
	case LWS_CALLBACK_CLOSED_HTTP:
		if (h != NULL)
			http_reset(h);
		return 0;
	default:
		return lws_callback_http_dummy(wsi, reason, user, in, len);
	}
}

/* Counts the callback depth around every lws callback (see server_nudge). */
static int
callback_http(struct lws *wsi, enum lws_callback_reasons reason, void *user,
    void *in, size_t len)
{
	int r;

	in_lws_callback++;
	r = http_callback(wsi, reason, user, in, len);
	in_lws_callback--;
	return r;
}

static int
callback_tunnel(struct lws *wsi, enum lws_callback_reasons reason, void *user,
    void *in, size_t len)
{
	int r;

	in_lws_callback++;
	r = tunnel_callback(wsi, reason, user, in, len);
	in_lws_callback--;
	return r;
}

static const struct lws_protocols protocols[] = {
	{ "http", callback_http, sizeof(struct http_conn), 0, 0, NULL, 0 },
	{ TETHER_SUBPROTOCOL, callback_tunnel, sizeof(struct conn), 4096, 0, NULL, 0 },
	{ NULL, NULL, 0, 0, 0, NULL, 0 }
};

static void
lws_log_bridge(int level, const char *line)
{
	size_t n = strlen(line);

	while (n > 0 && (line[n - 1] == '\n' || line[n - 1] == ' '))
		n--;
	if (level & LLL_ERR)
		error("lws: %.*s", (int)n, line);
	else
		debug("lws: %.*s", (int)n, line);
}

/* Idle tunnels are pinged after 30 s of silence and dropped after 70 s, so a
 * vanished agent (NAT state lost, host gone) leaves the hub promptly. */
static const lws_retry_bo_t idle_policy = {
	.secs_since_valid_ping = 30,
	.secs_since_valid_hangup = 70,
};

int
server_start(struct gateway *gw, const char *host, int port, char *err, size_t errlen)
{
	struct lws_context_creation_info info;
	char cert[4200], key[4200];
	void *foreign_loops[1] = { gw->base };

	snprintf(cert, sizeof(cert), "%s/server.crt", gw->data_dir);
	snprintf(key, sizeof(key), "%s/server.key", gw->data_dir);
	lws_set_log_level(LLL_ERR, lws_log_bridge);

	memset(&info, 0, sizeof(info));
	info.port = port;
	info.iface = host;
	info.protocols = protocols;
	info.options = LWS_SERVER_OPTION_LIBEVENT |
	    LWS_SERVER_OPTION_DO_SSL_GLOBAL_INIT;
	info.foreign_loops = foreign_loops;
	info.user = gw;
	info.ssl_cert_filepath = cert;
	info.ssl_private_key_filepath = key;
	info.alpn = "http/1.1";
	info.timeout_secs = 20;
	info.retry_and_idle_policy = &idle_policy;
	info.max_http_header_data = 8192;
	info.pt_serv_buf_size = 65536;
	info.vhost_name = "tether";
	info.tls1_3_plus_cipher_list = "TLS_AES_128_GCM_SHA256:TLS_AES_256_GCM_SHA384:TLS_CHACHA20_POLY1305_SHA256";

	gw->lws = lws_create_context(&info);
	if (gw->lws == NULL) {
		snprintf(err, errlen, "cannot listen on %s:%d (address in use, or "
		    "the TLS files in %s unreadable)", host, port, gw->data_dir);
		return -1;
	}
	return 0;
}

int
server_port(struct gateway *gw)
{
	struct lws_vhost *vh = lws_get_vhost_by_name(gw->lws, "tether");

	return vh != NULL ? lws_get_vhost_listen_port(vh) : -1;
}

void
server_stop(struct gateway *gw)
{
	if (gw->lws == NULL)
		return;
	lws_context_destroy(gw->lws);
	gw->lws = NULL;
}
