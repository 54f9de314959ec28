/*
 * http.c: HTTP/1.1 requests out of a byte stream (see http.h).
 *
 * http-parser calls back with pieces of the URL, in order and possibly
 * split anywhere (a piece ends where a read ended); we keep it in a growing
 * string.  Every string is bounded because the head as a whole is
 * (HTTP_HEAD_MAX, counted here as bytes are fed: the parser's own count
 * skips long header values), and the body by max_body.
 *
 * A request is handed out one at a time: on_message_complete pauses the
 * parser, so that http_parser_execute stops right after the request and the
 * caller answers it before reading the next one.
 *
 * The head is also kept as read (bounded the same way) and, once
 * complete, must frame the request in one way only (http_head_check,
 * common/httphead.h): a head http-parser would read one way and a next hop
 * another is refused (400) before anything acts on it.  Its headers are
 * read from it then, in one pass (collect_headers), as http-parser reads
 * them (the check leaves one way to): the values of the ones we act on,
 * each in its own growing string, and every header whole, as
 * "name\0value\0" pairs (bounded by the head limit), so that a request
 * passed on (http_reader_stream) can be written again; the body of such a
 * request goes to its sink piece by piece instead of being kept.
 */
#include "http.h"

#include <limits.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include <http_parser.h>
#include <openssl/crypto.h>

#include "httphead.h"

/*
 * A growing NUL-terminated string.  It may hold a secret (the
 * Authorization header's token, in its own string, in the head as read
 * and in every header whole; a body; a query): its bytes are wiped
 * (OPENSSL_cleanse) before its buffer is freed, moved (str_reserve grows
 * by malloc, copy, wipe, free: never realloc, which frees the old block
 * as it is) or kept for the next request (str_clear).  Bytes past p[len]
 * hold nothing of a request (a string that shrinks wipes what it drops:
 * pct_decode), so wiping p[0..len) wipes all of it.
 */
struct str {
	char *p;
	size_t len, cap;
};

/* The headers we keep; everything else is parsed and dropped. */
enum hdr {
	HDR_OTHER,
	HDR_AUTHORIZATION,
	HDR_UPGRADE,
	HDR_CONNECTION,
	HDR_WS_KEY,
	HDR_WS_VERSION,
	HDR_WS_PROTOCOL,
	HDR_EXPECT,
	HDR_REPLICA,
	HDR_ENTRIES          /* must be last */
};

#define NAME_AND_LEN(s) s, sizeof(s) - 1

static const struct {
	const char *name;
	size_t len;          /* strlen(name): a name of another length is not it */
	int list;            /* a list: repeats are joined; else a repeat is an error */
} hdr_info[HDR_ENTRIES] = {
	[HDR_OTHER] = { NAME_AND_LEN(""), 1 },
	[HDR_AUTHORIZATION] = { NAME_AND_LEN("Authorization"), 0 },
	[HDR_UPGRADE] = { NAME_AND_LEN("Upgrade"), 1 },
	[HDR_CONNECTION] = { NAME_AND_LEN("Connection"), 1 },
	[HDR_WS_KEY] = { NAME_AND_LEN("Sec-WebSocket-Key"), 0 },
	[HDR_WS_VERSION] = { NAME_AND_LEN("Sec-WebSocket-Version"), 0 },
	[HDR_WS_PROTOCOL] = { NAME_AND_LEN("Sec-WebSocket-Protocol"), 1 },
	[HDR_EXPECT] = { NAME_AND_LEN("Expect"), 1 },
	[HDR_REPLICA] = { NAME_AND_LEN("Tether-Replica"), 0 },
};

/* Longer than any name above: a longer trailer name is some other one. */
#define FIELD_MAX 32

struct http_reader {
	/* Kept across resets: the settings (max_body; passed-on requests,
	 * http_reader_stream) and the strings, emptied with their buffers
	 * kept (str_clear). */
	size_t max_body;
	int (*stream_match)(const char *path);
	void (*sink)(void *arg, const char *data, size_t len);
	void *sink_arg;
	struct str url;
	struct str hdr[HDR_ENTRIES];     /* [HDR_OTHER] stays empty */
	struct str path_buf, query_buf;
	struct str body;
	struct str all;                  /* every header, "name\0value\0" */
	struct str raw;                  /* the head as read (<= HTTP_HEAD_MAX + 1) */

	/* Zeroed by every reset, from here to the end (http_reader_reset). */
	http_parser parser;
	unsigned seen;                   /* bit per enum hdr: header present */
	/* A trailer being read (on_header_field, on_header_value). */
	char field[FIELD_MAX];           /* its name */
	size_t field_len;                /* > FIELD_MAX - 1: too long, "other" */
	enum hdr cur;                    /* where value pieces go */
	int in_value;                    /* last piece was a value */
	int all_state;                   /* 0 none yet, 1 in a name, 2 in a value */

	char *path, *query;              /* decoded at the end of the head
	                                    (into path_buf, query_buf), or NULL */
	struct http_framing framing;     /* what the head says (check_framing) */
	int may_continue;                /* a body that fits, HTTP/1.1: an
	                                    Expect: 100-continue is heard */

	int streamed;                    /* this request is passed on */
	int streaming;                   /* ... and its body goes to the sink */
	int head_reported;               /* HTTP_READ_HEAD was returned */

	int started;                     /* a byte of this request was read */
	size_t head_bytes;               /* fed before the head was complete */
	int head_done;
	int head_paused;                 /* paused by on_headers_complete */
	int want_continue;               /* Expect: 100-continue, not yet taken */
	int complete;                    /* on_message_complete ran */
	int cut;                         /* stopped at the body limit */
	int too_large;                   /* the head announced a body over it */
	int err_status;                  /* an error found by us, not the parser */
	char err_reason[160];

	struct http_request req;
};

/* ---- strings ---- */

/* Room in s for len more bytes and a NUL; -1 when out of memory (s as
 * it was).  Growing moves the bytes to a new block and wipes the old one:
 * a copy and a wipe of s->len bytes per growth (doubling: under twice the
 * string's final size in all), where realloc might have grown in place;
 * kept buffers (str_clear) seldom grow. */
static int
str_reserve(struct str *s, size_t len)
{
	if (s->len + len + 1 > s->cap) {
		size_t cap = s->cap ? s->cap : 64;
		char *p;

		while (cap < s->len + len + 1)
			cap *= 2;
		p = malloc(cap);
		if (p == NULL)
			return -1;
		if (s->p != NULL) {
			memcpy(p, s->p, s->len + 1);
			OPENSSL_cleanse(s->p, s->len);
			free(s->p);
		}
		s->p = p;
		s->cap = cap;
	}
	return 0;
}

static int
str_append(struct str *s, const char *data, size_t len)
{
	if (str_reserve(s, len) != 0)
		return -1;
	memcpy(s->p + s->len, data, len);
	s->len += len;
	s->p[s->len] = '\0';
	return 0;
}

/* Wipes s's bytes (s->len of them), then frees its buffer. */
static void
str_free(struct str *s)
{
	if (s->p != NULL)
		OPENSSL_cleanse(s->p, s->len);
	free(s->p);
	memset(s, 0, sizeof(*s));
}

/* A string's buffer kept for the connection's next request when it is at
 * most this large: growing them again from nothing (a malloc, reallocs,
 * a free each, for the URL, the headers kept, the head, the decoded path
 * and query) was ~4k of a /k8s request's ~86k instructions.  An idle
 * keep-alive connection holds a few hundred bytes of them (its last
 * request's head twice, its URL twice), at most ~6 x 4 KiB. */
#define STR_KEEP_MAX 4096

/* Empties s for the next request: its buffer kept (STR_KEEP_MAX), the
 * bytes this request used wiped first (the next request overwrites only
 * what it uses: a longer token before a shorter one would keep its tail
 * while the connection idles).  Costs a wipe of s->len bytes, not of the
 * buffer's capacity: per request about twice its head's size (the head
 * as read, the headers whole), its URL's and its body's; ~450 of a /k8s
 * request's ~63k instructions in OPENSSL_cleanse (~0.5 a byte). */
static void
str_clear(struct str *s)
{
	if (s->cap > STR_KEEP_MAX) {
		str_free(s);
		return;
	}
	if (s->p != NULL) {
		OPENSSL_cleanse(s->p, s->len);
		s->p[0] = '\0';
	}
	s->len = 0;
}

static const char *
str_or_empty(const struct str *s)
{
	return s->p != NULL ? s->p : "";
}

/*
 * A percent-decoded copy of in[0..len) in buf (its contents replaced);
 * '+' becomes a space when plus_is_space (query strings).  Returns buf's
 * string, or NULL for a malformed escape or an encoded NUL (which would
 * cut the C string the API sees), or out of memory.
 */
static char *
pct_decode(struct str *buf, const char *in, size_t len, int plus_is_space)
{
	const char *pct = memchr(in, '%', len);
	char *out, *o;
	size_t i;

	if (buf->len > 0)                      /* replaced: wiped first */
		OPENSSL_cleanse(buf->p, buf->len);
	buf->len = 0;
	if (str_append(buf, in, len) != 0)    /* room for it and the NUL */
		return NULL;
	/* Nothing to decode (most paths): the copy is the answer.  Byte by
	 * byte, a /k8s request's path and query were ~600 instructions. */
	if (pct == NULL && (!plus_is_space || memchr(in, '+', len) == NULL))
		return buf->p;
	/* Up to the first '%' (or from the start, for a '+'), the copy holds. */
	i = pct != NULL && !plus_is_space ? (size_t)(pct - in) : 0;
	out = buf->p;
	o = out + i;
	for (; i < len; i++) {
		if (in[i] == '%') {
			int hi, lo;

			if (len - i < 3)
				goto bad;
			hi = OPENSSL_hexchar2int((unsigned char)in[i + 1]);
			lo = OPENSSL_hexchar2int((unsigned char)in[i + 2]);
			if (hi < 0 || lo < 0 || (hi == 0 && lo == 0))
				goto bad;
			*o++ = (char)(hi << 4 | lo);
			i += 2;
		} else if (in[i] == '+' && plus_is_space)
			*o++ = ' ';
		else
			*o++ = in[i];
	}
	/* Shorter than the copy: the copy's tail wiped (struct str). */
	OPENSSL_cleanse(o, (size_t)(out + len - o));
	*o = '\0';
	buf->len = (size_t)(o - out);
	return out;
bad:
	OPENSSL_cleanse(out, len);
	buf->len = 0;
	out[0] = '\0';
	return NULL;
}

int
http_token_list_has(const char *list, const char *token)
{
	size_t tlen = strlen(token);
	const char *p = list;

	while (*p != '\0') {
		const char *end;
		size_t n;

		while (*p == ' ' || *p == '\t' || *p == ',')
			p++;
		end = p;
		while (*end != '\0' && *end != ',')
			end++;
		n = (size_t)(end - p);
		while (n > 0 && (p[n - 1] == ' ' || p[n - 1] == '\t'))
			n--;
		if (n == tlen && n > 0 && strncasecmp(p, token, n) == 0)
			return 1;
		p = end;
	}
	return 0;
}

/* ---- http-parser callbacks ---- */

static int
reader_fail(struct http_reader *r, int status, const char *reason)
{
	if (r->err_status == 0) {
		r->err_status = status;
		snprintf(r->err_reason, sizeof(r->err_reason), "%s", reason);
	}
	return -1;
}

static int
on_message_begin(http_parser *p)
{
	struct http_reader *r = p->data;

	r->started = 1;
	return 0;
}

static int
on_url(http_parser *p, const char *at, size_t len)
{
	struct http_reader *r = p->data;

	if (str_append(&r->url, at, len) != 0)
		return reader_fail(r, 500, "out of memory");
	return 0;
}

/* Which of the headers we keep name (n bytes) is: the one of its length
 * (no two of hdr_info have the same; a new one of a length taken needs
 * its own case), if its first letter and then the rest match. */
static enum hdr
classify(const char *name, size_t n)
{
	enum hdr h;

	switch (n) {
	case 6: h = HDR_EXPECT; break;
	case 7: h = HDR_UPGRADE; break;
	case 10: h = HDR_CONNECTION; break;
	case 13: h = HDR_AUTHORIZATION; break;
	case 14: h = HDR_REPLICA; break;
	case 17: h = HDR_WS_KEY; break;
	case 21: h = HDR_WS_VERSION; break;
	case 22: h = HDR_WS_PROTOCOL; break;
	default: return HDR_OTHER;
	}
	if ((name[0] | 0x20) != (hdr_info[h].name[0] | 0x20) ||
	    strncasecmp(name, hdr_info[h].name, n) != 0)
		return HDR_OTHER;
	return h;
}

/* A header named name (n bytes) begins: *h says where its value goes in
 * r->hdr[] (HDR_OTHER: nowhere); a list's repeat gets ", " first, another
 * header's repeat is refused.  0, or -1 with the error set. */
static int
keep_start(struct http_reader *r, const char *name, size_t n, enum hdr *h_out)
{
	enum hdr h = classify(name, n);
	unsigned bit = 1u << h;

	*h_out = h;
	if (h == HDR_OTHER)
		return 0;
	if (r->seen & bit) {
		char reason[80];

		if (!hdr_info[h].list) {
			snprintf(reason, sizeof(reason), "duplicate %s header",
			    hdr_info[h].name);
			return reader_fail(r, 400, reason);
		}
		if (str_append(&r->hdr[h], ", ", 2) != 0)
			return reader_fail(r, 500, "out of memory");
	}
	r->seen |= bit;
	return 0;
}

/* One whole header, name (n bytes) and value (vn bytes), into r->hdr[]
 * (keep_start's rules). */
static int
keep_header(struct http_reader *r, const char *name, size_t n,
    const char *value, size_t vn)
{
	enum hdr h;

	if (keep_start(r, name, n, &h) != 0)
		return -1;
	if (h != HDR_OTHER && str_append(&r->hdr[h], value, vn) != 0)
		return reader_fail(r, 500, "out of memory");
	return 0;
}

/*
 * Trailers (the fields after a chunked body): http-parser's header
 * callbacks, in pieces, as the head's headers once were.  Their values go
 * to r->hdr[] and r->all as the head's do (a repeated Authorization is
 * refused there too).  During the head they return at once: its headers
 * are read from the whole head (collect_headers).
 */

/* Appends a piece of a trailer name (value 0) or value (1) to r->all. */
static int
all_append(struct http_reader *r, int value, const char *at, size_t len)
{
	int want = value ? 2 : 1;

	if (r->all_state != 0 && r->all_state != want &&
	    str_append(&r->all, "", 1) != 0)
		return reader_fail(r, 500, "out of memory");
	r->all_state = want;
	if (str_append(&r->all, at, len) != 0)
		return reader_fail(r, 500, "out of memory");
	return 0;
}

static int
on_header_field(http_parser *p, const char *at, size_t len)
{
	struct http_reader *r = p->data;

	if (!r->head_done)
		return 0;
	if (all_append(r, 0, at, len) != 0)
		return -1;
	if (r->in_value) {
		r->in_value = 0;
		r->field_len = 0;
	}
	if (r->field_len + len < FIELD_MAX) {
		memcpy(r->field + r->field_len, at, len);
		r->field_len += len;
		r->field[r->field_len] = '\0';
	} else
		r->field_len = FIELD_MAX;    /* longer than any header we keep */
	return 0;
}

static int
on_header_value(http_parser *p, const char *at, size_t len)
{
	struct http_reader *r = p->data;

	if (!r->head_done)
		return 0;
	if (all_append(r, 1, at, len) != 0)
		return -1;
	if (!r->in_value) {
		/* The first piece: where do its pieces go? */
		r->in_value = 1;
		if (keep_start(r, r->field, r->field_len < FIELD_MAX ?
		    r->field_len : 0, &r->cur) != 0)
			return -1;
	}
	if (r->cur != HDR_OTHER && str_append(&r->hdr[r->cur], at, len) != 0)
		return reader_fail(r, 500, "out of memory");
	return 0;
}

/* Splits the URL into the decoded path and query. */
static int
split_url(struct http_reader *r)
{
	struct http_parser_url u;
	const char *url = str_or_empty(&r->url);
	struct span { const char *p; size_t n; } path, query = { "", 0 };

	if (r->url.len > 0 && url[0] == '/') {
		/* The origin form (RFC 9112, 3.2.1), every request's but a
		 * proxy's, split as http_parser_parse_url splits it: the path
		 * up to a '?' or '#', the query from there up to a '#'
		 * (http-parser took every byte of it already; its second pass
		 * was ~1.4k of a /k8s request's instructions). */
		size_t n = r->url.len, i, q;

		/* The URL holds no NUL (http-parser refuses one in a target):
		 * strcspn stops at its end at the latest. */
		i = strcspn(url, "?#");
		if (i > n)
			i = n;
		path.p = url;
		path.n = i;
		if (i < n && url[i] == '?') {
			for (q = ++i; i < n && url[i] != '#'; i++)
				;
			query.p = url + q;
			query.n = i - q;
		}
	} else {
		http_parser_url_init(&u);
		if (http_parser_parse_url(url, r->url.len, 0, &u) != 0 ||
		    !(u.field_set & (1 << UF_PATH)))
			return reader_fail(r, 400, "request target is not a path");
		path.p = url + u.field_data[UF_PATH].off;
		path.n = u.field_data[UF_PATH].len;
		if (u.field_set & (1 << UF_QUERY)) {
			query.p = url + u.field_data[UF_QUERY].off;
			query.n = u.field_data[UF_QUERY].len;
		}
	}
	if (path.n == 0 || path.p[0] != '/')
		return reader_fail(r, 400, "request target is not a path");
	r->path = pct_decode(&r->path_buf, path.p, path.n, 0);
	if (r->path == NULL)
		return reader_fail(r, 400, "malformed percent-encoding in the path");
	r->query = pct_decode(&r->query_buf, query.p, query.n, 1);
	if (r->query == NULL)
		return reader_fail(r, 400, "malformed percent-encoding in the query");
	return 0;
}

static int
on_headers_complete(http_parser *p)
{
	struct http_reader *r = p->data;
	int has_body = (p->flags & F_CHUNKED) ||
	    (p->content_length > 0 && p->content_length != ULLONG_MAX);

	r->head_done = 1;
	if (split_url(r) != 0)
		return -1;
	if (r->stream_match != NULL && r->stream_match(r->path)) {
		r->streamed = 1;
		r->streaming = has_body;
	}
	if (has_body && !r->streamed && !(p->flags & F_CHUNKED) &&
	    p->content_length > r->max_body)
		/* Refused before a byte of it is read (413, close), once the
		 * head is checked (reader_execute). */
		r->too_large = 1;
	else if (has_body && p->http_minor >= 1)
		r->may_continue = 1;    /* if it asked (collect_headers) */
	/* Stop here so that http_reader_feed can count the head's bytes. */
	r->head_paused = 1;
	http_parser_pause(p, 1);
	return 0;
}

static int
on_body(http_parser *p, const char *at, size_t len)
{
	struct http_reader *r = p->data;

	if (r->streaming) {
		if (r->sink != NULL)
			r->sink(r->sink_arg, at, len);
		return 0;
	}
	if (r->body.len + len > r->max_body) {
		/* Keep the first max_body bytes, however the body was split into
		 * reads; the rest of the body is not read. */
		if (r->max_body > r->body.len &&
		    str_append(&r->body, at, r->max_body - r->body.len) != 0)
			return reader_fail(r, 500, "out of memory");
		r->req.body_too_large = 1;
		r->cut = 1;
		return -1;
	}
	if (str_append(&r->body, at, len) != 0)
		return reader_fail(r, 500, "out of memory");
	return 0;
}

static int
on_message_complete(http_parser *p)
{
	struct http_reader *r = p->data;

	r->complete = 1;
	/* Stop right after this request: the caller answers it first. */
	http_parser_pause(p, 1);
	return 0;
}

static const http_parser_settings settings = {
	.on_message_begin = on_message_begin,
	.on_url = on_url,
	.on_header_field = on_header_field,
	.on_header_value = on_header_value,
	.on_headers_complete = on_headers_complete,
	.on_body = on_body,
	.on_message_complete = on_message_complete,
};

/* ---- the reader ---- */

/* Every string of the reader, for reader_clear and the reset. */
#define READER_STRS(r) { &(r)->url, &(r)->body, &(r)->all, &(r)->raw, \
	&(r)->path_buf, &(r)->query_buf, &(r)->hdr[0], &(r)->hdr[1], \
	&(r)->hdr[2], &(r)->hdr[3], &(r)->hdr[4], &(r)->hdr[5], &(r)->hdr[6], \
	&(r)->hdr[7], &(r)->hdr[8] }
#define READER_NSTRS 15
_Static_assert(HDR_ENTRIES == 9, "READER_STRS names every hdr[]");

static void
reader_clear(struct http_reader *r)
{
	struct str *strs[READER_NSTRS] = READER_STRS(r);

	for (size_t i = 0; i < READER_NSTRS; i++)
		str_free(strs[i]);
	r->path = r->query = NULL;
}

/* The reader made new for the next request on its connection: its
 * strings emptied, their buffers kept (str_clear), all from the parser on
 * zeroed (struct http_reader's layout). */
void
http_reader_reset(struct http_reader *r)
{
	struct str *strs[READER_NSTRS] = READER_STRS(r);

	for (size_t i = 0; i < READER_NSTRS; i++)
		str_clear(strs[i]);
	memset(&r->parser, 0, sizeof(*r) - offsetof(struct http_reader, parser));
	http_parser_init(&r->parser, HTTP_REQUEST);
	r->parser.data = r;
}

struct http_reader *
http_reader_new(size_t max_body)
{
	struct http_reader *r = calloc(1, sizeof(*r));

	if (r == NULL)
		return NULL;
	r->max_body = max_body;
	http_reader_reset(r);
	return r;
}

void
http_reader_free(struct http_reader *r)
{
	if (r == NULL)
		return;
	reader_clear(r);
	free(r);
}

/* Fills r->req from what the callbacks collected. */
static void
reader_finish(struct http_reader *r)
{
	struct http_request *q = &r->req;

	q->method = http_method_str((enum http_method)r->parser.method);
	q->path = r->path != NULL ? r->path : "";
	q->query = r->query != NULL ? r->query : "";
	q->authorization = str_or_empty(&r->hdr[HDR_AUTHORIZATION]);
	q->upgrade = str_or_empty(&r->hdr[HDR_UPGRADE]);
	q->connection = str_or_empty(&r->hdr[HDR_CONNECTION]);
	q->ws_key = str_or_empty(&r->hdr[HDR_WS_KEY]);
	q->ws_version = str_or_empty(&r->hdr[HDR_WS_VERSION]);
	q->ws_protocol = str_or_empty(&r->hdr[HDR_WS_PROTOCOL]);
	q->replica = str_or_empty(&r->hdr[HDR_REPLICA]);
	q->body = r->body.len > 0 ? r->body.p : NULL;
	q->body_len = r->body.len;
	/* A cut request leaves unread body bytes: the stream is lost.  HTTP/1.0
	 * keep-alive is not offered (it would need an answer header of its own). */
	q->keep_alive = !r->cut && r->parser.http_major == 1 &&
	    r->parser.http_minor >= 1 && http_should_keep_alive(&r->parser);
	q->head_only = r->parser.method == HTTP_HEAD;
	q->http_minor = r->parser.http_minor;
	q->target = str_or_empty(&r->url);
	q->headers = str_or_empty(&r->all);
	q->headers_len = r->all.len;
	/* The head's framing, as checked: http-parser's own flag also follows
	 * a Transfer-Encoding in the trailers (found by fuzz_http_request). */
	q->body_chunked = r->framing.chunked;
	q->has_length = r->framing.has_length;
	q->content_length = r->framing.length;
}

int
http_reader_stream(struct http_reader *r, int (*match)(const char *path),
    void (*sink)(void *arg, const char *data, size_t len), void *arg)
{
	r->stream_match = match;
	r->sink = sink;
	r->sink_arg = arg;
	return 0;
}

static void
head_too_large(struct http_reader *r)
{
	char reason[80];

	snprintf(reason, sizeof(reason), "request head larger than %d bytes",
	    HTTP_HEAD_MAX);
	reader_fail(r, 431, reason);
}

/* One header line of the head (its name at line, name bytes, its colon
 * after them, its CR at cr) into r->all at *o and, if it is one we act
 * on, r->hdr[]: the value as http-parser reads it, from its first byte
 * that is not a space or a tab.  Returns keep_header's answer. */
static int
collect_line(struct http_reader *r, char **o, const char *line, size_t name,
    const char *cr)
{
	const char *v;
	char *p = *o;

	for (v = line + name + 1; v < cr && (*v == ' ' || *v == '\t'); v++)
		;
	memcpy(p, line, name);
	p[name] = '\0';
	p += name + 1;
	memcpy(p, v, (size_t)(cr - v));
	p[cr - v] = '\0';
	*o = p + (cr - v) + 1;
	return keep_header(r, line, name, v, (size_t)(cr - v));
}

/*
 * The headers of the whole head in r->raw, which http_head_check_lines
 * passed (start line first, maybe after empty lines; then "NAME:VALUE"
 * lines ending with CRLF, a token for NAME, no obs-fold, no CR or LF
 * inside; `lines` says where they are), as http-parser reads them: each
 * name as sent, each value from its first byte that is not a space or a
 * tab up to the CR.  Into r->all ("name\0value\0" pairs) and r->hdr[]
 * (the ones we act on), and want_continue.  From the line index (a head
 * of more than HTTP_LINES_MAX lines: from its bytes, in one pass):
 * collected from http-parser's header callbacks, piece by piece, they
 * were ~1.5k of a /k8s request's instructions, and a memchr for each
 * line's end and its colon ~300 more.  Returns 0, or -1 with the error
 * set (a duplicate header that may not repeat, out of memory).
 */
static int
collect_headers(struct http_reader *r, const struct http_lines *lines)
{
	const char *at = r->raw.p, *end = r->raw.p + r->raw.len;
	int start = 1;
	char *o;

	/* Room for all of it at once (r->all is empty): each pair is
	 * shorter than its line. */
	if (str_reserve(&r->all, r->raw.len) != 0)
		return reader_fail(r, 500, "out of memory");
	o = r->all.p + r->all.len;
	for (unsigned i = 0; !lines->more && i < lines->n; i++) {
		const char *line = r->raw.p + lines->at[i].off;

		if (collect_line(r, &o, line, lines->at[i].name,
		    line + lines->at[i].len) != 0)
			break;
	}
	while (lines->more && at < end) {
		const char *line = at, *cr = memchr(at, '\r', (size_t)(end - at));
		const char *colon;
		size_t n;

		if (cr == NULL)
			break;              /* not after http_head_check */
		n = (size_t)(cr - line);
		at = cr + 2;
		if (start) {
			start = n == 0;     /* empty lines, then the start line */
			continue;
		}
		if (n == 0 || (colon = memchr(line, ':', n)) == NULL)
			break;              /* the empty line: the end */
		if (collect_line(r, &o, line, (size_t)(colon - line), cr) != 0)
			break;
	}
	r->all.len = (size_t)(o - r->all.p);
	r->all.p[r->all.len] = '\0';
	if (r->err_status != 0)
		return -1;
	if (r->may_continue && http_token_list_has(str_or_empty(&r->hdr[HDR_EXPECT]),
	    "100-continue"))
		r->want_continue = 1;
	return 0;
}

/* The whole head is in r->raw: refuse ambiguous framing (httphead.h),
 * even where http-parser would pick one reading of it. */
static void
check_framing(struct http_reader *r)
{
	struct http_framing f;
	struct http_lines lines;	/* not zeroed: filled by the check */
	const char *why;
	char reason[160];

	/* HTTP/0.9 has no headers: http-parser reads it without framing. */
	if (r->parser.http_major != 1) {
		reader_fail(r, 400, "malformed request: HTTP version other than 1.x");
		return;
	}
	if (http_head_check_lines(r->raw.p, r->raw.len, &f, &lines, &why) == 0) {
		r->framing = f;
		(void)collect_headers(r, &lines);
		return;
	}
	snprintf(reason, sizeof(reason), "ambiguous request framing: %s", why);
	reader_fail(r, 400, reason);
}

/*
 * Runs the parser over data[0..len); returns the bytes it took.  *head_end
 * is 1 if it stopped at the end of the head (it may have taken 0 bytes then).
 */
static size_t
reader_execute(struct http_reader *r, const char *data, size_t len, int *head_end)
{
	size_t n;
	int in_head = !r->head_done;

	n = http_parser_execute(&r->parser, &settings, data, len);
	if (in_head) {
		r->head_bytes += n;
		if (str_append(&r->raw, data, n) != 0)
			reader_fail(r, 500, "out of memory");
	}
	*head_end = r->head_paused;
	if (r->head_paused) {
		r->head_paused = 0;
		http_parser_pause(&r->parser, 0);
		/* Paused on the head's last byte, not yet taken: with it, the
		 * head must frame the request in one way only. */
		if (n >= len)
			reader_fail(r, 400, "malformed request");
		else if (str_append(&r->raw, data + n, 1) != 0)
			reader_fail(r, 500, "out of memory");
		else
			check_framing(r);
		if (r->too_large && r->err_status == 0) {
			r->req.body_too_large = 1;
			r->cut = 1;
		}
	}
	return n;
}

/* A refused request: was it one to pass on?  Its path, from as much of the
 * target as was read, says (the refusal is then answered the way the
 * proxy answers). */
static void
error_target(struct http_reader *r)
{
	if (r->stream_match == NULL || r->url.len == 0)
		return;
	if (r->path == NULL)
		(void)split_url(r);      /* err_status is set: nothing changes */
	if (r->path != NULL && r->stream_match(r->path))
		r->streamed = 1;
	reader_finish(r);
}

static size_t reader_feed(struct http_reader *r, const char *data, size_t len,
    enum http_read_result *res);

size_t
http_reader_feed(struct http_reader *r, const char *data, size_t len,
    enum http_read_result *res)
{
	int failed = r->err_status != 0;
	size_t n = reader_feed(r, data, len, res);

	if (*res == HTTP_READ_ERROR && !failed && r->err_status != 0)
		error_target(r);
	return n;
}

static size_t
reader_feed(struct http_reader *r, const char *data, size_t len,
    enum http_read_result *res)
{
	size_t total = 0;
	enum http_errno e;

	*res = HTTP_READ_ERROR;
	if (r->complete || r->err_status != 0)
		return 0;        /* the caller must reset (or close) first */
	for (;;) {
		size_t chunk = len - total, n;
		int head_end;

		/*
		 * While in the head, feed at most one byte past the limit: the
		 * callbacks then never hold more than that, however much input
		 * arrived at once.
		 */
		if (!r->head_done && chunk > HTTP_HEAD_MAX + 1 - r->head_bytes)
			chunk = HTTP_HEAD_MAX + 1 - r->head_bytes;
		n = reader_execute(r, data + total, chunk, &head_end);
		total += n;
		if (r->err_status != 0)
			return total;
		if (r->head_bytes > HTTP_HEAD_MAX) {
			head_too_large(r);
			return total;
		}
		if (r->complete || r->cut) {
			reader_finish(r);
			*res = HTTP_READ_REQUEST;
			return total;
		}
		if (head_end && r->streaming && !r->head_reported) {
			/* The body follows through the sink. */
			r->head_reported = 1;
			reader_finish(r);
			*res = HTTP_READ_HEAD;
			return total;
		}
		e = HTTP_PARSER_ERRNO(&r->parser);
		if (e == HPE_HEADER_OVERFLOW) {
			head_too_large(r);
			return total;
		}
		if (e != HPE_OK) {
			char reason[160];

			snprintf(reason, sizeof(reason), "malformed request: %s",
			    http_errno_description(e));
			reader_fail(r, 400, reason);
			return total;
		}
		if (total == len)
			break;
		if (n == 0 && !head_end) {
			/* Cannot happen: the parser takes all it is given
			 * unless it stops for a reason handled above. */
			reader_fail(r, 400, "malformed request");
			return total;
		}
	}
	*res = HTTP_READ_MORE;
	return total;
}

const struct http_request *
http_reader_request(const struct http_reader *r)
{
	return &r->req;
}

int
http_reader_error(const struct http_reader *r, const char **reason)
{
	*reason = r->err_reason;
	return r->err_status;
}

int
http_reader_streamed(const struct http_reader *r)
{
	return r->streamed;
}

int
http_reader_started(const struct http_reader *r)
{
	return r->started;
}

int
http_reader_take_continue(struct http_reader *r)
{
	/* Not when the body is already here: the client did not wait. */
	int want = r->want_continue && !r->complete && !r->cut && r->err_status == 0;

	r->want_continue = 0;
	return want;
}

/* A decoded copy of in[0..len) into out (outlen bytes, NUL-terminated):
 * 0, or -1 (malformed, or too long). */
static int
decode_into(const char *in, size_t len, int plus_is_space, char *out,
    size_t outlen)
{
	struct str buf = { NULL, 0, 0 };
	char *decoded = pct_decode(&buf, in, len, plus_is_space);
	int r = -1;

	if (decoded != NULL && buf.len < outlen) {
		memcpy(out, decoded, buf.len + 1);
		r = 0;
	}
	str_free(&buf);
	return r;
}

int
http_line_target(const char *buf, size_t len, char *path, size_t pathlen,
    char *query, size_t querylen)
{
	const char *nl = memchr(buf, '\n', len);
	const char *sp1, *sp2, *end, *url;
	struct http_parser_url u;

	if (nl == NULL)
		return -1;
	end = nl > buf && nl[-1] == '\r' ? nl - 1 : nl;
	if ((sp1 = memchr(buf, ' ', (size_t)(end - buf))) == NULL || sp1 == buf ||
	    (sp2 = memchr(sp1 + 1, ' ', (size_t)(end - sp1 - 1))) == NULL ||
	    sp2 == sp1 + 1 || (size_t)(end - sp2 - 1) < 5 ||
	    memcmp(sp2 + 1, "HTTP/", 5) != 0)
		return -1;
	url = sp1 + 1;
	http_parser_url_init(&u);
	if (http_parser_parse_url(url, (size_t)(sp2 - url), 0, &u) != 0 ||
	    !(u.field_set & (1 << UF_PATH)) || u.field_data[UF_PATH].len == 0 ||
	    url[u.field_data[UF_PATH].off] != '/')
		return -1;
	if (decode_into(url + u.field_data[UF_PATH].off,
	    u.field_data[UF_PATH].len, 0, path, pathlen) != 0)
		return -1;
	if (u.field_set & (1 << UF_QUERY))
		return decode_into(url + u.field_data[UF_QUERY].off,
		    u.field_data[UF_QUERY].len, 1, query, querylen);
	if (querylen == 0)
		return -1;
	query[0] = '\0';
	return 0;
}
