/*
 * httphead.c: helpers for HTTP heads as raw bytes (see httphead.h): the
 * agent's bearer rewrite and the framing rules of every passed-on head.
 */
#include "httphead.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <openssl/crypto.h>
#if defined(__SSE2__)
#include <emmintrin.h>
#endif

#define BEARER_PREFIX "Authorization: Bearer "

/* The first "\n\n" or "\n\r\n" ends the head.  A memchr from one LF to
 * the next, not a test of every byte: ~650 -> ~200 instructions for a
 * /k8s request's head (tests/bench/k8s_instructions.sh BENCH_PROFILE=agent
 * BENCH_SERVICE_TOKEN=1: the agent looks for every head's end). */
size_t
http_head_length(const char *buf, size_t len)
{
	const char *p = buf, *end = buf + len, *nl;

	while (p < end && (nl = memchr(p, '\n', (size_t)(end - p))) != NULL) {
		size_t i = (size_t)(nl - buf);

		if (i + 1 < len && buf[i + 1] == '\n')
			return i + 2;
		if (i + 2 < len && buf[i + 1] == '\r' && buf[i + 2] == '\n')
			return i + 3;
		p = nl + 1;
	}
	return 0;
}

int
http_token_valid(const char *token, size_t len)
{
	if (token == NULL || len == 0 || len > HTTP_TOKEN_MAX)
		return 0;
	for (size_t i = 0; i < len; i++)
		if ((unsigned char)token[i] < 0x21 || (unsigned char)token[i] > 0x7e)
			return 0;
	return 1;
}

/* RFC 9110 tchar: what a field name is made of.  A table: the test runs
 * for every byte of every header name of every request and answer head
 * (a range test and a strchr were ~1.7k instructions per /k8s request). */
#define TC_DIGITS ['0'] = 1, ['1'] = 1, ['2'] = 1, ['3'] = 1, ['4'] = 1, \
	['5'] = 1, ['6'] = 1, ['7'] = 1, ['8'] = 1, ['9'] = 1
#define TC_LOWER ['a'] = 1, ['b'] = 1, ['c'] = 1, ['d'] = 1, ['e'] = 1, \
	['f'] = 1, ['g'] = 1, ['h'] = 1, ['i'] = 1, ['j'] = 1, ['k'] = 1, \
	['l'] = 1, ['m'] = 1, ['n'] = 1, ['o'] = 1, ['p'] = 1, ['q'] = 1, \
	['r'] = 1, ['s'] = 1, ['t'] = 1, ['u'] = 1, ['v'] = 1, ['w'] = 1, \
	['x'] = 1, ['y'] = 1, ['z'] = 1
#define TC_UPPER ['A'] = 1, ['B'] = 1, ['C'] = 1, ['D'] = 1, ['E'] = 1, \
	['F'] = 1, ['G'] = 1, ['H'] = 1, ['I'] = 1, ['J'] = 1, ['K'] = 1, \
	['L'] = 1, ['M'] = 1, ['N'] = 1, ['O'] = 1, ['P'] = 1, ['Q'] = 1, \
	['R'] = 1, ['S'] = 1, ['T'] = 1, ['U'] = 1, ['V'] = 1, ['W'] = 1, \
	['X'] = 1, ['Y'] = 1, ['Z'] = 1
static const unsigned char tchar[256] = {
	TC_DIGITS, TC_LOWER, TC_UPPER,
	['!'] = 1, ['#'] = 1, ['$'] = 1, ['%'] = 1, ['&'] = 1, ['\''] = 1,
	['*'] = 1, ['+'] = 1, ['-'] = 1, ['.'] = 1, ['^'] = 1, ['_'] = 1,
	['`'] = 1, ['|'] = 1, ['~'] = 1,
};

static int
is_tchar(unsigned char c)
{
	return tchar[c];
}

/* 1 if the header line's name (name bytes before the colon) is one the
 * rewrite drops: the rewrite writes its own. */
static int
rewrite_drops(const char *name, size_t n)
{
	return (n == 13 && strncasecmp(name, "authorization", 13) == 0) ||
	    (n == 10 && strncasecmp(name, "connection", 10) == 0) ||
	    (n == 10 && strncasecmp(name, "keep-alive", 10) == 0);
}

/* 1 if the header value v[0..n) lists the token tok (comma-separated,
 * any case, around optional spaces and tabs). */
static int
value_lists(const char *v, size_t n, const char *tok)
{
	size_t toklen = strlen(tok), i = 0, start, end;

	while (i < n) {
		while (i < n && (v[i] == ' ' || v[i] == '\t' || v[i] == ','))
			i++;
		start = i;
		while (i < n && v[i] != ',')
			i++;
		end = i;
		while (end > start && (v[end - 1] == ' ' || v[end - 1] == '\t'))
			end--;
		if (end - start == toklen && strncasecmp(v + start, tok, toklen) == 0)
			return 1;
	}
	return 0;
}

/* Appends what the rewrite adds before the empty line: the bearer token,
 * then Connection: close when the head asked to close, Upgrade, close
 * for an upgrade, nothing to keep the connection. */
static size_t
rewrite_tail(char *buf, const char *token, size_t toklen, int upgrade, int close_asked)
{
	static const char close[] = "Connection: close\r\n";
	static const char upclose[] = "Connection: Upgrade, close\r\n";
	size_t n = 0;

	memcpy(buf + n, BEARER_PREFIX, sizeof(BEARER_PREFIX) - 1);
	n += sizeof(BEARER_PREFIX) - 1;
	memcpy(buf + n, token, toklen);
	n += toklen;
	memcpy(buf + n, "\r\n", 2);
	n += 2;
	if (upgrade) {
		memcpy(buf + n, upclose, sizeof(upclose) - 1);
		n += sizeof(upclose) - 1;
	} else if (close_asked) {
		memcpy(buf + n, close, sizeof(close) - 1);
		n += sizeof(close) - 1;
	}
	return n;
}

int
http_head_set_bearer(const char *head, size_t len, const char *token,
    char **out, size_t *outlen)
{
	size_t toklen, pos, cap, n = 0;
	int first = 1, have_header = 0, drop = 0, upgrade = 0, close_asked = 0;
	char *buf;

	*out = NULL;
	*outlen = 0;
	if (token == NULL || !http_token_valid(token, toklen = strlen(token)))
		return -1;
	if (head == NULL || len == 0 || http_head_length(head, len) != len ||
	    memchr(head, '\0', len) != NULL)
		return -1;
	cap = len + sizeof(BEARER_PREFIX) - 1 + toklen + 2 +
	    sizeof("Connection: Upgrade, close\r\n");
	if ((buf = malloc(cap)) == NULL)
		return -1;
	for (pos = 0; pos < len;) {
		const char *line = head + pos;
		const char *nl = memchr(line, '\n', len - pos);
		size_t full = (size_t)(nl - line) + 1;   /* with its line end */
		size_t body = (size_t)(nl - line);        /* without it */
		const char *colon;

		if (body > 0 && line[body - 1] == '\r')
			body--;
		pos += full;
		if (first) {
			/* The request line: METHOD SP TARGET SP VERSION. */
			if (body == 0 || line[0] == ' ' || line[0] == '\t' ||
			    memchr(line, ' ', body) == NULL)
				goto bad;
			first = 0;
		} else if (body == 0) {
			/* The empty line: always the last (http_head_length). */
			n += rewrite_tail(buf + n, token, toklen, upgrade, close_asked);
		} else if (line[0] == ' ' || line[0] == '\t') {
			/* obs-fold: part of the header before it. */
			if (!have_header)
				goto bad;
			if (drop)
				continue;
		} else {
			colon = memchr(line, ':', body);
			if (colon == NULL || colon == line)
				goto bad;
			for (const char *p = line; p < colon; p++)
				if (!is_tchar((unsigned char)*p))
					goto bad;
			have_header = 1;
			if (colon - line == 7 && strncasecmp(line, "upgrade", 7) == 0)
				upgrade = 1;
			if (colon - line == 10 && strncasecmp(line, "connection", 10) == 0 &&
			    value_lists(colon + 1, body - (size_t)(colon + 1 - line), "close"))
				close_asked = 1;
			drop = rewrite_drops(line, (size_t)(colon - line));
			if (drop)
				continue;
		}
		memcpy(buf + n, line, full);
		n += full;
	}
	*out = buf;
	*outlen = n;
	return 0;
bad:
	free(buf);
	return -1;
}

int
http_head_set_bearer_lines(const char *head, size_t len,
    const struct http_lines *lines, const char *token, size_t toklen,
    char **out, size_t *outlen)
{
	size_t first, from = 0, n = 0, cap;
	int upgrade = 0, close_asked = 0;
	char *buf;

	*out = NULL;
	*outlen = 0;
	if (head == NULL || lines == NULL || lines->more || len < 4 ||
	    token == NULL || toklen == 0 || toklen > HTTP_TOKEN_MAX)
		return -1;
	/* The request line (with its CRLF: `first` bytes), as
	 * http_head_set_bearer wants it: first in the head (the check lets
	 * empty lines come before it), METHOD SP TARGET SP VERSION. */
	first = lines->n > 0 ? lines->at[0].off : len - 2;
	if (first < 3 || head[0] == '\r' || head[0] == ' ' || head[0] == '\t' ||
	    memchr(head, ' ', first - 2) == NULL)
		return -1;
	cap = len + sizeof(BEARER_PREFIX) - 1 + toklen + 2 +
	    sizeof("Connection: Upgrade, close\r\n");
	if ((buf = malloc(cap)) == NULL)
		return -1;
	/* The lines are back to back: a dropped line ends the run of kept
	 * bytes before it, copied at once. */
	for (unsigned i = 0; i < lines->n; i++) {
		const char *line = head + lines->at[i].off;
		size_t name = lines->at[i].name, vlen = lines->at[i].len - name - 1;

		if (name == 7 && strncasecmp(line, "upgrade", 7) == 0)
			upgrade = 1;
		if (name == 10 && strncasecmp(line, "connection", 10) == 0 &&
		    value_lists(line + name + 1, vlen, "close"))
			close_asked = 1;
		if (!rewrite_drops(line, name))
			continue;
		memcpy(buf + n, head + from, lines->at[i].off - from);
		n += lines->at[i].off - from;
		from = lines->at[i].off + lines->at[i].len + 2;
	}
	memcpy(buf + n, head + from, len - 2 - from);
	n += len - 2 - from;
	n += rewrite_tail(buf + n, token, toklen, upgrade, close_asked);
	memcpy(buf + n, "\r\n", 2);
	n += 2;
	*out = buf;
	*outlen = n;
	return 0;
}

/* Trims SP and HT from both ends of [*p, *p + *n). */
static void
trim_ows(const char **p, size_t *n)
{
	while (*n > 0 && (**p == ' ' || **p == '\t')) {
		(*p)++;
		(*n)--;
	}
	while (*n > 0 && ((*p)[*n - 1] == ' ' || (*p)[*n - 1] == '\t'))
		(*n)--;
}

/*
 * The bytes of w (read from memory as is) below 0x20 or 0x7f (a tab too:
 * callers look at such a byte themselves; 0x80 and above are not flagged:
 * obs-text), as a mask of their high bits; at least one bit when there is
 * one such byte.  Its lowest set bit, on a little-endian machine, is
 * exactly the first such byte in memory (the subtractions borrow only
 * from a flagged byte, so only bits above a true one can be false).
 */
static uint64_t
suspect_bits(uint64_t w)
{
	const uint64_t ones = 0x0101010101010101ull, high = 0x8080808080808080ull;
	uint64_t del = w ^ (ones * 0x7f);

	return (((w - ones * 0x20) & ~w) | ((del - ones) & ~del)) & high;
}

/* 1 if one of the 8 bytes of w is below 0x20 or is 0x7f (suspect_bits). */
static int
word_suspect(uint64_t w)
{
	return suspect_bits(w) != 0;
}

/* The first byte of line[0..n) that no line may hold, as a reason; NULL
 * if none.  Eight bytes at a time (word_suspect), one by one only in a
 * word that holds a control byte or a tab, and in a line shorter than
 * eight.  Only for a line clean_line refused (the reason). */
static const char *
bad_byte(const char *line, size_t n)
{
	size_t i = 0;
	uint64_t w;

	for (; i + 8 <= n; i += 8) {
		memcpy(&w, line + i, 8);
		if (word_suspect(w))
			break;
	}
	if (i == n)
		return NULL;
	if (i + 8 > n && n >= 8) {
		/* Every whole word passed: the last bytes as the line's last
		 * eight (some passed already). */
		memcpy(&w, line + n - 8, 8);
		if (!word_suspect(w))
			return NULL;
	}
	for (; i < n; i++) {
		unsigned char c = (unsigned char)line[i];

		if (c == '\r')
			return "a bare CR";
		if (c == '\0')
			return "a NUL byte";
		if ((c < 0x20 && c != '\t') || c == 0x7f)
			return "a control byte";
	}
	return NULL;
}

/* 1 if the header name (n bytes) is Content-Length or Transfer-Encoding. */
static int
is_framing(const char *name, size_t n)
{
	return (n == 14 && strncasecmp(name, "content-length", 14) == 0) ||
	    (n == 17 && strncasecmp(name, "transfer-encoding", 17) == 0);
}

/* One header line (without its CRLF, which follows it: line[n] is its
 * CR): name, colon, value.  The line holds no byte bad_byte flags (the
 * caller checked). */
static int
check_field(const char *line, size_t n, struct http_framing *f, int *te,
    size_t *name_len, const char **why)
{
	const char *colon, *v;
	size_t name = 0, vn;

	if (line[0] == ' ' || line[0] == '\t') {
		*why = "an obs-fold (a header line starting with a space or tab)";
		return -1;
	}
	/* The name's token bytes up to the colon (not one): one pass, with
	 * no bound: the line's CR (line[n]) is not a token byte. */
	while (is_tchar((unsigned char)line[name]))
		name++;
	if (name == n || line[name] != ':' || name == 0) {
		colon = memchr(line, ':', n);
		*why = colon == NULL || colon == line ?
		    "a header line without a name and a colon" :
		    "a header name that is not a token";
		return -1;
	}
	*name_len = name;
	/* Every rule below is about a name of 7, 14 or 17 bytes or more:
	 * the other lines (most) are done. */
	if (name != 7 && name != 14 && name < 17)
		return 0;
	colon = line + name;
	/* http-parser takes a name that merely starts with Transfer-Encoding
	 * for one and forgets an earlier chunked (found by fuzz_http_head):
	 * the two readers would end the message in different places. */
	if (name > 17 && strncasecmp(line, "transfer-encoding", 17) == 0) {
		*why = "a header name that extends Transfer-Encoding";
		return -1;
	}
	v = colon + 1;
	vn = n - name - 1;
	if (is_framing(line, name) && memchr(v, '\t', vn) != NULL) {
		/* Next hops differ on tabs around these values. */
		*why = "a tab in Content-Length or Transfer-Encoding";
		return -1;
	}
	trim_ows(&v, &vn);
	if (name == 14 && strncasecmp(line, "content-length", 14) == 0) {
		if (f->has_length) {
			*why = "more than one Content-Length";
			return -1;
		}
		if (vn == 0 || vn > HTTP_LENGTH_DIGITS) {
			*why = "a Content-Length that is not a number";
			return -1;
		}
		f->length = 0;
		for (size_t i = 0; i < vn; i++) {
			if (v[i] < '0' || v[i] > '9') {
				*why = "a Content-Length that is not a number";
				return -1;
			}
			f->length = f->length * 10 + (uint64_t)(v[i] - '0');
		}
		f->has_length = 1;
	} else if (name == 17 && strncasecmp(line, "transfer-encoding", 17) == 0) {
		if (*te) {
			*why = "more than one Transfer-Encoding";
			return -1;
		}
		*te = 1;
		if (vn != 7 || strncasecmp(v, "chunked", 7) != 0) {
			*why = "a Transfer-Encoding other than chunked";
			return -1;
		}
		f->chunked = 1;
	} else if (name == 7 && strncasecmp(line, "upgrade", 7) == 0)
		f->upgrade = 1;
	return 0;
}

/* 1 for a byte that stops a line's clean run: a control byte (CR, LF and
 * HT among them) or DEL: suspect_bits's set, byte by byte. */
static int
stops_run(unsigned char c)
{
	return c < 0x20 || c == 0x7f;
}

/*
 * The length of the line at p (end: the head's end) when it is clean: no
 * byte bad_byte flags before a CR that an LF follows; or -1 when it is
 * not (no LF, a bare LF, a bad byte: line_refused says which).  Sixteen
 * bytes at a time with SSE2 (~8 instructions a step), else eight, the
 * first control byte (or tab) of a word found from its bits, not byte by
 * byte.  One pass per line, where a memchr for its
 * LF and then bad_byte over the line were two: a /k8s request's two heads
 * (~200 and ~250 bytes) took ~3.4k instructions in http_head_check, now
 * ~2k.
 */
static long
clean_line(const char *p, const char *end)
{
	const char *q = p;
	uint64_t w, m;
#if defined(__SSE2__)
	/* stops_run's set, 16 bytes a step: below 0x20 (no bit of 0xe0), or
	 * 0x7f. */
	const __m128i hi3 = _mm_set1_epi8((char)0xe0), none = _mm_setzero_si128();
	const __m128i del = _mm_set1_epi8(0x7f);
#endif

	for (;;) {
		m = 0;
#if defined(__SSE2__)
		for (; end - q >= 16; q += 16) {
			__m128i v = _mm_loadu_si128((const void *)q);
			__m128i stop = _mm_or_si128(_mm_cmpeq_epi8(_mm_and_si128(v,
			    hi3), none), _mm_cmpeq_epi8(v, del));

			if ((m = (unsigned)_mm_movemask_epi8(stop)) != 0) {
				q += __builtin_ctz((unsigned)m);
				break;
			}
		}
#endif
		for (; m == 0 && end - q >= 8; q += 8) {
			memcpy(&w, q, 8);
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
			if ((m = suspect_bits(w)) != 0) {
				q += __builtin_ctzll(m) / 8;
				break;
			}
#else
			if ((m = suspect_bits(w)) != 0) {
				while (!stops_run((unsigned char)*q))
					q++;
				break;
			}
#endif
		}
		if (m == 0) {
			/* Fewer than eight bytes left: one by one. */
			while (q < end && !stops_run((unsigned char)*q))
				q++;
			if (q == end)
				return -1;
		}
		if (*q == '\t') {
			q++;
			continue;
		}
		if (*q == '\r' && end - q >= 2 && q[1] == '\n')
			return (long)(q - p);
		return -1;
	}
}

/* Why the line at line (up to end) is refused, clean_line having said
 * -1: the rules in their order (no LF, a bare LF, then its first bad
 * byte).  Off the common path. */
static const char *
line_refused(const char *line, const char *end)
{
	const char *nl = memchr(line, '\n', (size_t)(end - line));
	const char *bad;

	if (nl == NULL)
		return "no empty line at the end of the head";
	if (nl == line || nl[-1] != '\r')
		return "a bare LF";
	bad = bad_byte(line, (size_t)(nl - line) - 1);
	return bad != NULL ? bad : "a control byte";    /* not reached */
}

int
http_head_check(const char *head, size_t len, struct http_framing *f,
    const char **why)
{
	return http_head_check_lines(head, len, f, NULL, why);
}

int
http_head_check_lines(const char *head, size_t len, struct http_framing *f,
    struct http_lines *lines, const char **why)
{
	const char *end = head + len, *line;
	int start = 1, te = 0;
	unsigned nlines = 0, room = 0;	/* a local count: no reload per line */
	size_t name;
	long n;

	memset(f, 0, sizeof(*f));
	if (lines != NULL) {
		lines->n = 0;
		lines->more = len > UINT32_MAX;    /* offsets are 32 bits */
		room = lines->more ? 0 : HTTP_LINES_MAX;
	}
	for (line = head; line < end; line += n + 2) {
		if ((n = clean_line(line, end)) < 0) {
			*why = line_refused(line, end);
			return -1;
		}
		if (start) {
			/* Empty lines before the start line are ignored
			 * (RFC 9112, 2.2); the gateway never passes them on. */
			start = n == 0;
			continue;
		}
		if (n == 0) {
			if (line + 2 != end) {
				*why = "bytes after the empty line";
				return -1;
			}
			if (f->has_length && f->chunked) {
				*why = "both Content-Length and Transfer-Encoding";
				return -1;
			}
			if (lines != NULL)
				lines->n = nlines;
			*why = NULL;
			return 0;
		}
		if (check_field(line, (size_t)n, f, &te, &name, why) != 0)
			return -1;
		if (nlines < room) {
			lines->at[nlines].off = (uint32_t)(line - head);
			lines->at[nlines].name = (uint32_t)name;
			lines->at[nlines].len = (uint32_t)n;
			nlines++;
		} else if (lines != NULL)
			lines->more = 1;
	}
	*why = "no empty line at the end of the head";
	return -1;
}

/* States of struct http_body_end. */
enum {
	BE_LENGTH,          /* counting down a length */
	BE_SIZE,            /* a chunk-size line: hex digits */
	BE_EXT,             /* ... its extension, up to CR */
	BE_SIZE_LF,         /* ... its LF */
	BE_DATA,            /* chunk data */
	BE_DATA_CR,         /* the CRLF after it */
	BE_DATA_LF,
	BE_TRAILER,         /* the start of a trailer line or the last CRLF */
	BE_TRAILER_LINE,    /* in a trailer line, up to CR */
	BE_TRAILER_LF,      /* ... its LF */
	BE_LAST_LF,         /* the LF of the last CRLF */
	BE_DONE
};

int
http_answer_bodiless(int status, int head_request)
{
	return head_request || status / 100 == 1 || status == 204 ||
	    status == 304;
}

enum http_answer_kind
http_answer_body(int status, const struct http_framing *f, int head_request,
    int upgrade_request, const char **why)
{
	int framed = f->chunked || f->has_length;

	if (status < 100 || status > 999) {
		*why = "a status outside 100-999";
		return HTTP_ANSWER_REFUSED;
	}
	if (status / 100 == 1 && framed) {
		*why = "a 1xx answer with Content-Length or Transfer-Encoding";
		return HTTP_ANSWER_REFUSED;
	}
	if (status == 204 && framed) {
		*why = "a 204 answer with Content-Length or Transfer-Encoding";
		return HTTP_ANSWER_REFUSED;
	}
	if (status == 101 && !upgrade_request) {
		*why = "a 101 Switching Protocols to a request that asked for no upgrade";
		return HTTP_ANSWER_REFUSED;
	}
	if (status == 101 && !f->upgrade) {
		*why = "a 101 Switching Protocols without an Upgrade header";
		return HTTP_ANSWER_REFUSED;
	}
	if (status == 101)
		return HTTP_ANSWER_SWITCH;
	if (status / 100 == 1)
		return HTTP_ANSWER_INTERIM;
	if (http_answer_bodiless(status, head_request))
		return HTTP_ANSWER_NONE;
	if (f->chunked)
		return HTTP_ANSWER_CHUNKED;
	return f->has_length ? HTTP_ANSWER_LENGTH : HTTP_ANSWER_TO_EOF;
}

void
http_body_end_init(struct http_body_end *e, const struct http_framing *f)
{
	memset(e, 0, sizeof(*e));
	if (f->chunked)
		e->state = BE_SIZE;
	else if (f->has_length && f->length > 0) {
		e->state = BE_LENGTH;
		e->left = f->length;
	} else
		e->state = BE_DONE;
}

/* One byte of chunk framing (not data); -1 if malformed. */
static int
body_end_step(struct http_body_end *e, unsigned char c)
{
	int h;

	if (++e->line > HTTP_CHUNK_LINE_MAX)
		return -1;
	switch (e->state) {
	case BE_SIZE:
		if ((h = OPENSSL_hexchar2int(c)) >= 0) {
			if (e->line > 15)
				return -1;
			e->left = e->left * 16 + (uint64_t)h;
			return 0;
		}
		if (e->line == 1 || (c != ';' && c != '\r'))
			return -1;
		e->state = c == ';' ? BE_EXT : BE_SIZE_LF;
		return 0;
	case BE_EXT:
		if (c == '\r')
			e->state = BE_SIZE_LF;
		else if (c == '\n')
			return -1;
		return 0;
	case BE_SIZE_LF:
		if (c != '\n')
			return -1;
		e->line = 0;
		e->state = e->left > 0 ? BE_DATA : BE_TRAILER;
		return 0;
	case BE_DATA_CR:
		e->state = BE_DATA_LF;
		return c == '\r' ? 0 : -1;
	case BE_DATA_LF:
		e->line = 0;
		e->state = BE_SIZE;
		return c == '\n' ? 0 : -1;
	case BE_TRAILER:
		if (c == '\n')
			return -1;
		e->state = c == '\r' ? BE_LAST_LF : BE_TRAILER_LINE;
		return 0;
	case BE_TRAILER_LINE:
		if (c == '\r')
			e->state = BE_TRAILER_LF;
		else if (c == '\n')
			return -1;
		return 0;
	case BE_TRAILER_LF:
		e->line = 0;
		e->state = BE_TRAILER;
		return c == '\n' ? 0 : -1;
	case BE_LAST_LF:
		e->state = BE_DONE;
		return c == '\n' ? 0 : -1;
	default:
		return -1;
	}
}

size_t
http_body_end_feed(struct http_body_end *e, const char *data, size_t len,
    int *done)
{
	size_t i = 0;

	while (i < len && e->state != BE_DONE) {
		if (e->state == BE_LENGTH || e->state == BE_DATA) {
			uint64_t n = len - i < e->left ? len - i : e->left;

			i += (size_t)n;
			e->left -= n;
			if (e->left == 0)
				e->state = e->state == BE_LENGTH ? BE_DONE : BE_DATA_CR;
			continue;
		}
		if (body_end_step(e, (unsigned char)data[i]) != 0)
			return (size_t)-1;
		i++;
	}
	*done = e->state == BE_DONE;
	return i;
}
