/*
 * log.c: the single place that encodes, filters and writes log and audit
 * lines (see log.h; the format is docs/0008-log-encoding.md).
 *
 * Cost: one line is built in a thread-local LOG_LINE_MAX buffer and written
 * with one write(2), so lines from several processes sharing a file stay
 * whole (up to PIPE_BUF bytes on a pipe, whole lines on an O_APPEND file).
 * Audit lines may instead be held (log_audit_hold): the lines of one loop
 * pass then leave together, in one write(2) of at most PIPE_BUF bytes.
 * Held lines are per thread (one loop per thread): each loop's pass leaves
 * whole, and two loops' passes interleave pass by pass, never in a line.
 */
#include "log.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#if defined(__SSE2__)
#include <emmintrin.h>
#endif

static const char *log_component = "tether";
/* Bumped by each log_init: a thread's audit_head made before is stale. */
static unsigned log_generation = 1;
enum log_level log_min_level = LOG_LEVEL_INFO;  /* log.h: log_on */
static enum log_format log_fmt = LOG_FORMAT_LOGFMT;
static int audit_fd = STDERR_FILENO;
static char *audit_path;

/* Held audit lines (log_audit_hold): whole lines, in the order logged, at
 * most PIPE_BUF bytes, so one write(2) of them is never split on a pipe.
 * Per thread (docs/0040: one event loop per thread, each holding its own
 * pass's lines): a thread's lines are held only if it called
 * log_audit_hold, and only it flushes them. */
#define AUDIT_HELD_MAX PIPE_BUF
static _Thread_local char audit_held[AUDIT_HELD_MAX];
static _Thread_local size_t audit_held_len;
static _Thread_local bool audit_holding;
static _Thread_local void (*audit_first_held)(void *);
static _Thread_local void *audit_first_held_arg;
/* atexit(flush_at_exit) registered once for the process: ok says it was. */
static pthread_once_t audit_atexit_once = PTHREAD_ONCE_INIT;
static bool audit_atexit_ok;

static const char *const level_names[] = {
	[LOG_LEVEL_DEBUG] = "debug",
	[LOG_LEVEL_INFO] = "info",
	[LOG_LEVEL_WARN] = "warn",
	[LOG_LEVEL_ERROR] = "error",
};

static const char *const format_names[] = {
	[LOG_FORMAT_LOGFMT] = "logfmt",
	[LOG_FORMAT_JSON] = "json",
};

/* Room kept at the end of a line for fields_dropped=N and the newline. */
#define LINE_TAIL 64

void
log_init(const char *component, enum log_level min_level)
{
	log_component = component;
	log_min_level = min_level;
	log_generation++;
}

void
log_set_format(enum log_format format)
{
	log_fmt = format;
}

const char *
log_level_name(enum log_level level)
{
	return level_names[level];
}

static int
name_index(const char *const *names, size_t n, const char *name)
{
	for (size_t i = 0; i < n; i++)
		if (strcmp(name, names[i]) == 0)
			return (int)i;
	return -1;
}

int
log_level_parse(const char *name, enum log_level *out)
{
	int i = name_index(level_names, 4, name);

	if (i < 0)
		return -1;
	*out = (enum log_level)i;
	return 0;
}

int
log_format_parse(const char *name, enum log_format *out)
{
	int i = name_index(format_names, 2, name);

	if (i < 0)
		return -1;
	*out = (enum log_format)i;
	return 0;
}

/* ---- the encoder ---- */

/* An output buffer that never overflows: put() drops what does not fit
 * (callers check room first, so nothing is dropped in practice). */
struct lbuf {
	char *p;
	size_t len, cap;
};

static void
put(struct lbuf *b, const char *s, size_t n)
{
	if (n > b->cap - b->len)
		n = b->cap - b->len;
	memcpy(b->p + b->len, s, n);
	b->len += n;
}

static void
puts_(struct lbuf *b, const char *s)
{
	put(b, s, strlen(s));
}

static void
putc_(struct lbuf *b, char c)
{
	if (b->len < b->cap)
		b->p[b->len++] = c;
}

static void
put_hex(struct lbuf *b, const char *prefix, unsigned v, int digits)
{
	static const char hex[] = "0123456789abcdef";

	puts_(b, prefix);
	for (int d = digits - 1; d >= 0; d--)
		putc_(b, hex[(v >> (4 * d)) & 0xf]);
}

/*
 * Length of the valid UTF-8 sequence at s (at most n bytes) and its code
 * point, or 0 if the bytes there are not valid UTF-8 (overlong forms,
 * surrogates and values above U+10FFFF are invalid).
 */
static size_t
utf8_seq(const unsigned char *s, size_t n, uint32_t *cp)
{
	size_t len;
	uint32_t c, min;

	if (s[0] < 0x80) {
		*cp = s[0];
		return 1;
	}
	if ((s[0] & 0xe0) == 0xc0) {
		len = 2, c = s[0] & 0x1f, min = 0x80;
	} else if ((s[0] & 0xf0) == 0xe0) {
		len = 3, c = s[0] & 0x0f, min = 0x800;
	} else if ((s[0] & 0xf8) == 0xf0) {
		len = 4, c = s[0] & 0x07, min = 0x10000;
	} else {
		return 0;
	}
	if (len > n)
		return 0;
	for (size_t i = 1; i < len; i++) {
		if ((s[i] & 0xc0) != 0x80)
			return 0;
		c = (c << 6) | (s[i] & 0x3f);
	}
	if (c < min || c > 0x10ffff || (c >= 0xd800 && c <= 0xdfff))
		return 0;
	*cp = c;
	return len;
}

/* Code points that are valid but must not appear raw in a log: C0 and C1
 * controls, DEL, line and paragraph separators, bidirectional controls and
 * the BOM (they can make a line look like something else on a terminal). */
static bool
cp_escaped(uint32_t c)
{
	return c < 0x20 || (c >= 0x7f && c <= 0x9f) || c == 0x2028 ||
	    c == 0x2029 || c == 0x200e || c == 0x200f ||
	    (c >= 0x202a && c <= 0x202e) || (c >= 0x2066 && c <= 0x2069) ||
	    c == 0xfeff;
}

/* Byte classes of the encoder, one table lookup a byte: CL_BARE, a byte a
 * logfmt value may hold bare (visible ASCII but '"', '=' and '\\');
 * CL_KEY, a byte a key keeps ([A-Za-z0-9_.-]).  The range tests they
 * replace were ~13 instructions a byte of every audit line. */
enum { CL_BARE = 1, CL_KEY = 2 };
#define IS_BARE(c) ((c) > 0x20 && (c) < 0x7f && (c) != '"' && (c) != '=' && \
	(c) != '\\')
#define IS_KEY(c) (((c) >= 'a' && (c) <= 'z') || ((c) >= 'A' && (c) <= 'Z') || \
	((c) >= '0' && (c) <= '9') || (c) == '_' || (c) == '.' || (c) == '-')
#define CLASS(c) ((IS_BARE(c) ? CL_BARE : 0) | (IS_KEY(c) ? CL_KEY : 0))
#define CLASS4(c) CLASS(c), CLASS((c) + 1), CLASS((c) + 2), CLASS((c) + 3)
#define CLASS16(c) CLASS4(c), CLASS4((c) + 4), CLASS4((c) + 8), CLASS4((c) + 12)
static const unsigned char byte_class[256] = {
	CLASS16(0x00), CLASS16(0x10), CLASS16(0x20), CLASS16(0x30),
	CLASS16(0x40), CLASS16(0x50), CLASS16(0x60), CLASS16(0x70),
	CLASS16(0x80), CLASS16(0x90), CLASS16(0xa0), CLASS16(0xb0),
	CLASS16(0xc0), CLASS16(0xd0), CLASS16(0xe0), CLASS16(0xf0),
};

/* Whether a logfmt value can be written bare: non-empty, visible ASCII,
 * none of '"', '=' or '\\'. */
static bool
logfmt_bare(const char *s, size_t n)
{
	const unsigned char *u = (const unsigned char *)s;

	if (n == 0)
		return false;
	for (size_t i = 0; i < n; i++)
		if (!(byte_class[u[i]] & CL_BARE))
			return false;
	return true;
}

/* One escaped character of a quoted value: \" \\ \n \r \t, else none. */
static const char *
short_escape(unsigned char c)
{
	switch (c) {
	case '"': return "\\\"";
	case '\\': return "\\\\";
	case '\n': return "\\n";
	case '\r': return "\\r";
	case '\t': return "\\t";
	default: return NULL;
	}
}

/* put_text's quoted form ("..." in logfmt, a JSON string), apart from
 * its bare case so that case is a short call. */
static void
put_quoted(struct lbuf *b, enum log_format f, const char *s, size_t n)
{
	const unsigned char *u = (const unsigned char *)s;
	size_t i = 0;

	putc_(b, '"');
	while (i < n) {
		uint32_t cp;
		size_t len = utf8_seq(u + i, n - i, &cp);
		const char *e;

		if (len == 0) {
			if (f == LOG_FORMAT_LOGFMT)
				put_hex(b, "\\x", u[i], 2);
			else
				puts_(b, "\\ufffd");
			i++;
			continue;
		}
		if (len == 1 && (e = short_escape(u[i])) != NULL)
			puts_(b, e);
		else if (cp_escaped(cp))
			put_hex(b, "\\u", cp, 4);
		else
			put(b, s + i, len);
		i += len;
	}
	putc_(b, '"');
}

/*
 * A text value, quoted as the format needs.  logfmt: bare if it can be,
 * else "..." with \" \\ \n \r \t, \uXXXX for escaped code points and \xNN
 * for a byte that is not valid UTF-8 (so the exact bytes parse back).
 * JSON: a JSON string; an invalid byte becomes U+FFFD (JSON text is
 * Unicode).  At most 6 output bytes per input byte, plus the quotes.
 */
static void
put_text(struct lbuf *b, enum log_format f, const char *s, size_t n)
{
	if (f == LOG_FORMAT_LOGFMT && logfmt_bare(s, n))
		put(b, s, n);
	else
		put_quoted(b, f, s, n);
}

/* The bytes of NUL-terminated s before the first that a bare logfmt value
 * cannot hold (its NUL, if none before): one pass, ~5 instructions a
 * byte, that both measures a bare value and says it is one. */
static size_t
bare_len(const char *s)
{
	const unsigned char *u = (const unsigned char *)s;
	size_t i = 0;

	while (byte_class[u[i]] & CL_BARE)
		i++;
	return i;
}

/*
 * bare_len for text in an array of bound bytes (KV_A), all of them
 * readable: the bytes before the first that a bare value cannot hold, or
 * bound if none.  With SSE2, 16 bytes a step (~15 instructions; a short
 * value's NUL is in its first step), the rest byte by byte.
 */
static size_t
bare_len_in(const char *s, size_t bound)
{
	const unsigned char *u = (const unsigned char *)s;
	size_t i = 0;

#if defined(__SSE2__)
	/* Signed bytes: (0x20, 0x7f) is visible ASCII, 0x80.. are below 0. */
	const __m128i sp = _mm_set1_epi8(0x20), del = _mm_set1_epi8(0x7f);
	const __m128i dq = _mm_set1_epi8('"'), eq = _mm_set1_epi8('=');
	const __m128i bs = _mm_set1_epi8('\\');

	for (; i + 16 <= bound; i += 16) {
		__m128i v = _mm_loadu_si128((const void *)(u + i));
		__m128i ok = _mm_and_si128(_mm_cmpgt_epi8(v, sp),
		    _mm_cmplt_epi8(v, del));
		__m128i no = _mm_or_si128(_mm_or_si128(_mm_cmpeq_epi8(v, dq),
		    _mm_cmpeq_epi8(v, eq)), _mm_cmpeq_epi8(v, bs));
		unsigned bad = ~(unsigned)_mm_movemask_epi8(_mm_andnot_si128(no,
		    ok)) & 0xffffu;

		if (bad != 0)
			return i + (size_t)__builtin_ctz(bad);
	}
#endif
	for (; i < bound; i++)
		if (!(byte_class[u[i]] & CL_BARE))
			return i;
	return bound;
}

/* NUL-terminated s, of which at most max bytes, as put_text writes them:
 * put_text(b, f, s, strnlen(s, max)), without the strnlen when bare. */
static void
put_str(struct lbuf *b, enum log_format f, const char *s, size_t max)
{
	size_t n;

	if (f == LOG_FORMAT_LOGFMT) {
		n = bare_len(s);
		if (s[n] == '\0' && n > 0 && n <= max) {
			put(b, s, n);
			return;
		}
	}
	put_text(b, f, s, strnlen(s, max));
}

/*
 * A separator, then a key: its allowed characters kept, others '_', at
 * most 64, with suffix (a literal of suffix_len bytes) after it; logfmt
 * ' key=', JSON ',"key":'.  One pass copies and checks the key (~7
 * instructions a byte); put_key takes a literal key's from its cache.
 */
static void
put_sep_key(struct lbuf *b, enum log_format f, const char *key,
    const char *suffix, size_t suffix_len)
{
	const unsigned char *k = (const unsigned char *)(key != NULL ? key : "");
	int json = f == LOG_FORMAT_JSON;
	char *p;
	size_t i;

	/* The most this writes: 2 + 64 + suffix + 2; byte by byte near the
	 * end of the buffer (put() and putc_ drop what does not fit). */
	if (b->cap - b->len < 68 + suffix_len) {
		if (json)
			put(b, ",\"", 2);
		else
			putc_(b, ' ');
		for (i = 0; i < 64 && k[i] != '\0'; i++)
			putc_(b, byte_class[k[i]] & CL_KEY ? (char)k[i] : '_');
		if (i == 0)
			putc_(b, '_');
		put(b, suffix, suffix_len);
		put(b, json ? "\":" : "=", json ? 2 : 1);
		return;
	}
	p = b->p + b->len;
	*p++ = json ? ',' : ' ';
	if (json)
		*p++ = '"';
	for (i = 0; i < 64 && k[i] != '\0'; i++)
		p[i] = byte_class[k[i]] & CL_KEY ? (char)k[i] : '_';
	if (i == 0)
		p[i++] = '_';
	p += i;
	memcpy(p, suffix, suffix_len);
	p += suffix_len;
	if (json)
		*p++ = '"';
	*p++ = json ? ':' : '=';
	b->len = (size_t)(p - b->p);
}

/*
 * Literal keys as written, per thread: a field whose key the compiler knew
 * (klen != 0: a string literal, whose bytes never change) has its ' key='
 * or ',"key":' made by put_sep_key once per thread and format, then
 * copied (~30 instructions, not ~100: an audit line has 12 such keys).
 * A key lives in one of KEY_PROBES slots from its address's hash (found
 * in the first, nearly always); a full window gives up one of its slots
 * in turn.  One slot a key, not two keys sharing one: 14 keys in 64
 * direct-mapped slots shared one in most link layouts, and two keys that
 * share a slot are remade on every line.  128 slots, 10 KiB a thread.
 */
#define KEY_SLOTS 128
#define KEY_PROBES 4
#define KEY_FRAG 70		/* put_sep_key's most, 68 (a slot: 80 bytes) */
struct key_slot {
	const char *key;	/* NULL: empty */
	unsigned char format;
	unsigned char len;	/* of frag */
	char frag[KEY_FRAG];
};
static _Thread_local struct key_slot key_slots[KEY_SLOTS];
static _Thread_local unsigned key_evict;	/* which of a full window */

#if defined(__GNUC__)
#define NOINLINE __attribute__((noinline))
#define ALWAYS_INLINE inline __attribute__((always_inline))
#else
#define NOINLINE
#define ALWAYS_INLINE inline
#endif

/* Slot ks's bytes at the end of b (room for KEY_FRAG checked). */
static inline void
put_slot(struct lbuf *b, const struct key_slot *ks)
{
	/* 16 bytes whatever the length when it fits (one copy, no call):
	 * the bytes past len are overwritten by what follows. */
	if (ks->len <= 16)
		memcpy(b->p + b->len, ks->frag, 16);
	else
		memcpy(b->p + b->len, ks->frag, ks->len);
	b->len += ks->len;
}

/* A key in none of its slots (from h on): made, kept in the first empty
 * one or else the next to give up, written (out of line, so that
 * put_key's hit needs no frame). */
static NOINLINE void
put_key_miss(struct lbuf *b, enum log_format f, const char *key, size_t h)
{
	struct key_slot *ks = NULL;
	struct lbuf kb;

	for (size_t i = 0; i < KEY_PROBES && ks == NULL; i++)
		if (key_slots[(h + i) & (KEY_SLOTS - 1)].key == NULL)
			ks = &key_slots[(h + i) & (KEY_SLOTS - 1)];
	if (ks == NULL)
		ks = &key_slots[(h + key_evict++ % KEY_PROBES) & (KEY_SLOTS - 1)];
	kb = (struct lbuf){ ks->frag, 0, sizeof(ks->frag) };
	put_sep_key(&kb, f, key, "", 0);
	ks->key = key;
	ks->format = (unsigned char)f;
	ks->len = (unsigned char)kb.len;
	put_slot(b, ks);
}

/* The separator and key of field fl (put_sep_key's bytes, always).
 * Inlined: a call was a third of a hit's ~40 instructions. */
static ALWAYS_INLINE void
put_key(struct lbuf *b, enum log_format f, const struct log_field *fl)
{
	size_t h;

	if (fl->klen == 0 || b->cap - b->len < KEY_FRAG) {
		put_sep_key(b, f, fl->key, "", 0);
		return;
	}
	h = (size_t)(((uintptr_t)fl->key * UINT64_C(0x9e3779b97f4a7c15)) >>
	    (64 - 7));
	for (size_t i = 0; i < KEY_PROBES; i++) {
		const struct key_slot *ks = &key_slots[(h + i) & (KEY_SLOTS - 1)];

		if (ks->key == fl->key && ks->format == (unsigned char)f) {
			put_slot(b, ks);
			return;
		}
		if (ks->key == NULL)
			break;
	}
	put_key_miss(b, f, fl->key, h);
}

/* A separator and a key the encoder names itself, k a literal of allowed
 * characters: one copy, no check. */
#define PUT_OWN_KEY(b, f, k) ((f) == LOG_FORMAT_JSON ? \
	put((b), ",\"" k "\":", sizeof(",\"" k "\":") - 1) : \
	put((b), " " k "=", sizeof(" " k "=") - 1))

/* Where a value of n bytes is cut: at most LOG_VALUE_MAX, never inside a
 * UTF-8 sequence that would be valid whole. */
static size_t
cut_point(const char *s, size_t n)
{
	size_t cut;

	if (n <= LOG_VALUE_MAX)
		return n;
	cut = LOG_VALUE_MAX;
	for (size_t back = 0; back < 3 && cut > 0; back++) {
		if (((unsigned char)s[cut] & 0xc0) != 0x80)
			break;
		cut--;
	}
	if (((unsigned char)s[cut] & 0xc0) == 0x80)
		cut = LOG_VALUE_MAX; /* not a sequence anyway: cut anywhere */
	return cut;
}

/* The length of a text field's value (0 for a number or a NULL value),
 * read once per field: field_room and put_field both take it. */
static size_t
value_len(const struct log_field *fl)
{
	size_t n;

	if (fl->s == NULL || fl->kind == LOG_KIND_INT || fl->kind == LOG_KIND_UINT)
		return 0;
	if (fl->kind != LOG_KIND_STR)
		return fl->n;		/* BYTES */
	n = strnlen(fl->s, LOG_VALUE_MAX + 1);
	return n > LOG_VALUE_MAX ? strlen(fl->s) : n;
}

/* The worst-case size of one field whose value is n bytes: key,
 * separators, 6 bytes per value byte kept, and a KEY_len=N that may
 * follow. */
static size_t
field_room(size_t n)
{
	if (n > LOG_VALUE_MAX)
		n = LOG_VALUE_MAX;
	return 2 * 64 + 16 + 6 * n + 2 + 32;
}

/* "00" "01" ... "99": two digits a step. */
static const char digit_pairs[201] =
	"0001020304050607080910111213141516171819"
	"2021222324252627282930313233343536373839"
	"4041424344454647484950515253545556575859"
	"6061626364656667686970717273747576777879"
	"8081828384858687888990919293949596979899";

/* v in decimal, '-' first when neg, ending at end (a NUL there); returns
 * its first character.  By hand: an audit line has four numbers, and a
 * snprintf each was a sixth of the line's encoding; two digits a step
 * (one division by 100, not two by 10). */
static char *
decimal(char *end, unsigned long long v, int neg)
{
	char *p = end;

	*p = '\0';
	while (v >= 100) {
		unsigned d = (unsigned)(v % 100);

		v /= 100;
		p -= 2;
		memcpy(p, digit_pairs + 2 * d, 2);
	}
	if (v >= 10) {
		p -= 2;
		memcpy(p, digit_pairs + 2 * v, 2);
	} else {
		*--p = (char)('0' + v);
	}
	if (neg)
		*--p = '-';
	return p;
}

/* A field whose value is n bytes (value_len). */
static void
put_field(struct lbuf *b, enum log_format f, const struct log_field *fl,
    size_t n)
{
	char num[32], *end = num + sizeof(num) - 1, *d;
	size_t cut;

	put_key(b, f, fl);
	switch (fl->kind) {
	case LOG_KIND_INT:
		/* The magnitude in unsigned arithmetic: LLONG_MIN too. */
		d = decimal(end, fl->i < 0 ? 0ULL - (unsigned long long)fl->i :
		    (unsigned long long)fl->i, fl->i < 0);
		put(b, d, (size_t)(end - d));
		return;
	case LOG_KIND_UINT:
		d = decimal(end, fl->u, 0);
		put(b, d, (size_t)(end - d));
		return;
	default:
		break;
	}
	cut = cut_point(fl->s, n);
	put_text(b, f, fl->s, cut);
	if (cut < n) {
		put_sep_key(b, f, fl->key, "_len", 4);
		d = decimal(end, n, 0);
		put(b, d, (size_t)(end - d));
	}
}

/* v (0 <= v < 10^digits) as exactly digits decimal digits at p. */
static void
put_digits(char *p, int v, int digits)
{
	for (int i = digits - 1; i >= 0; i--, v /= 10)
		p[i] = (char)('0' + v % 10);
}

/* tm as "2026-11-24T08:54:47" (19 bytes, no NUL) at stamp. */
static void
put_stamp_secs(char *stamp, const struct tm *tm)
{
	int year;

	/* Digits by hand: snprintf was a third of an audit line's cost. */
	year = tm->tm_year + 1900;
	if (year < 0 || year > 9999)
		year = 0;
	put_digits(stamp, year, 4);
	stamp[4] = '-';
	put_digits(stamp + 5, tm->tm_mon + 1, 2);
	stamp[7] = '-';
	put_digits(stamp + 8, tm->tm_mday, 2);
	stamp[10] = 'T';
	put_digits(stamp + 11, tm->tm_hour, 2);
	stamp[13] = ':';
	put_digits(stamp + 14, tm->tm_min, 2);
	stamp[16] = ':';
	put_digits(stamp + 17, tm->tm_sec, 2);
}

/*
 * The time to the second, "2026-11-24T08:54:47", for the last second this
 * thread wrote: gmtime_r (which takes glibc's time-zone lock) once a
 * second, not once a line (a /k8s request's audit line wrote it each).
 */
static _Thread_local time_t stamp_sec = (time_t)-1;
static _Thread_local char stamp_secs[19];

static void
put_time(struct lbuf *b, const struct timespec *when)
{
	struct tm tm;
	char stamp[24];		/* 2026-11-24T08:54:47.123Z */
	time_t sec = when->tv_sec;
	long ms = (long)(when->tv_nsec / 1000000) % 1000;

	if (sec != stamp_sec || sec == (time_t)-1) {
		stamp_sec = sec;
		if (gmtime_r(&sec, &tm) == NULL)
			memset(&tm, 0, sizeof(tm));
		put_stamp_secs(stamp_secs, &tm);
	}
	memcpy(stamp, stamp_secs, sizeof(stamp_secs));
	stamp[19] = '.';
	put_digits(stamp + 20, (int)(ms < 0 ? 0 : ms), 3);
	stamp[23] = 'Z';
	put(b, stamp, sizeof(stamp));
}

/* A line's fields, in runs: an audit line's event=, the caller's, then
 * client=, without copying them into one array. */
struct field_run {
	const struct log_field *f;
	size_t n;
};

/* The level, component and msg of a line's header (after its time). */
static void
put_head(struct lbuf *b, enum log_format f, const char *level,
    const char *component, const char *msg)
{
	PUT_OWN_KEY(b, f, "level");
	put_str(b, f, level, SIZE_MAX);
	PUT_OWN_KEY(b, f, "component");
	put_str(b, f, component, 64);
	PUT_OWN_KEY(b, f, "msg");
	put_str(b, f, msg, LOG_VALUE_MAX);
}

/* log_encode, the fields given as nruns runs, one after the other; head,
 * when not NULL, is put_head's bytes for level, component and msg (made
 * before, once). */
static size_t
encode_runs(char *out, size_t cap, enum log_format f,
    const struct timespec *when, const char *level, const char *component,
    const char *msg, const struct lbuf *head, const struct field_run *runs,
    size_t nruns)
{
	struct lbuf b = { out, 0, cap - LINE_TAIL };
	size_t dropped = 0;
	char num[32];

	if (f == LOG_FORMAT_JSON) {
		puts_(&b, "{\"time\":\"");
		put_time(&b, when);
		puts_(&b, "\"");
	} else {
		puts_(&b, "time=");
		put_time(&b, when);
	}
	if (head != NULL)
		put(&b, head->p, head->len);
	else
		put_head(&b, f, level, component, msg);
	for (size_t r = 0; r < nruns; r++) {
		const struct log_field *fields = runs[r].f;

		for (size_t i = 0; i < runs[r].n; i++) {
			const struct log_field *fl = &fields[i];
			size_t n;

			/* A bare logfmt text value, where any value fits: measured
			 * and checked in one pass (put_field's bytes). */
			if (fl->kind == LOG_KIND_STR && f == LOG_FORMAT_LOGFMT &&
			    fl->s != NULL &&
			    b.cap - b.len >= field_room(LOG_VALUE_MAX)) {
				n = fl->n != 0 ? bare_len_in(fl->s, fl->n) :
				    bare_len(fl->s);
				if ((fl->n == 0 || n < fl->n) && fl->s[n] == '\0' &&
				    n > 0 && n <= LOG_VALUE_MAX) {
					put_key(&b, f, fl);
					/* From an array of 16+ bytes, a short
					 * value is one 16-byte copy (in
					 * bounds both sides), not a call. */
					if (n <= 16 && fl->n >= 16) {
						memcpy(b.p + b.len, fl->s, 16);
						b.len += n;
					} else {
						put(&b, fl->s, n);
					}
					continue;
				}
			}
			n = value_len(fl);
			if (field_room(n) > b.cap - b.len) {
				dropped++;
				continue;
			}
			put_field(&b, f, fl, n);
		}
	}
	b.cap = cap;
	if (dropped > 0) {
		PUT_OWN_KEY(&b, f, "fields_dropped");
		snprintf(num, sizeof(num), "%zu", dropped);
		puts_(&b, num);
	}
	if (f == LOG_FORMAT_JSON)
		putc_(&b, '}');
	b.cap = cap - 1;
	putc_(&b, '\n');
	out[b.len] = '\0';
	return b.len;
}

size_t
log_encode(char *out, size_t cap, enum log_format f, const struct timespec *when,
    const char *level, const char *component, const char *msg,
    const struct log_field *fields, size_t nfields)
{
	struct field_run run = { fields, nfields };

	return encode_runs(out, cap, f, when, level, component, msg, NULL, &run,
	    1);
}

/* ---- writing ---- */

static void
write_line(int fd, const char *line, size_t len)
{
	while (len > 0) {
		ssize_t w = write(fd, line, len);

		if (w < 0 && errno == EINTR)
			continue;
		if (w <= 0)
			return; /* nowhere to report it */
		line += w;
		len -= (size_t)w;
	}
}

/* Encodes one line into this thread's buffer; returns its length.
 * head: NULL, or put_head's bytes for level, log_component and msg. */
static size_t
encode_now(char *line, size_t cap, const char *level, const char *msg,
    const struct lbuf *head, const struct field_run *runs, size_t nruns)
{
	struct timespec now;

	clock_gettime(CLOCK_REALTIME, &now);
	return encode_runs(line, cap, log_fmt, &now, level, log_component, msg,
	    head, runs, nruns);
}

/*
 * An audit line's level=info component=COMPONENT msg=audit as written
 * (put_head), per thread, made again when the format or log_init changed
 * it: one copy a line, not three values checked (~230 instructions).
 * 512 bytes hold the longest (a 64-byte component, 6 bytes a byte).
 */
static _Thread_local char audit_head_bytes[512];
static _Thread_local struct lbuf audit_head_buf;
static _Thread_local unsigned audit_head_generation;
static _Thread_local enum log_format audit_head_format;

static const struct lbuf *
audit_head(void)
{
	if (audit_head_generation != log_generation ||
	    audit_head_format != log_fmt) {
		audit_head_buf = (struct lbuf){ audit_head_bytes, 0,
		    sizeof(audit_head_bytes) };
		put_head(&audit_head_buf, log_fmt, "info", log_component, "audit");
		audit_head_generation = log_generation;
		audit_head_format = log_fmt;
	}
	return &audit_head_buf;
}

void
log_audit_flush(void)
{
	size_t len = audit_held_len;

	if (len == 0)
		return;
	audit_held_len = 0;
	write_line(audit_fd, audit_held, len);
}

static void
emit(int fd, const char *level, const char *msg, const struct lbuf *head,
    const struct field_run *runs, size_t nruns)
{
	static _Thread_local char line[LOG_LINE_MAX];
	size_t len = encode_now(line, sizeof(line), level, msg, head, runs,
	    nruns);

	/* Held audit lines come first: a file shared with the log (stderr)
	 * keeps the order in which this thread logged. */
	log_audit_flush();
	write_line(fd, line, len);
}

/* An audit line joins this thread's held ones, or leaves now (this
 * thread not holding, longer than the buffer). */
static void
emit_audit(const struct field_run *runs, size_t nruns)
{
	static _Thread_local char line[LOG_LINE_MAX];
	size_t len;

	if (!audit_holding) {
		emit(audit_fd, "info", "audit", audit_head(), runs, nruns);
		return;
	}
	len = encode_now(line, sizeof(line), "info", "audit", audit_head(), runs,
	    nruns);
	if (len > AUDIT_HELD_MAX - audit_held_len)
		log_audit_flush();
	if (len > AUDIT_HELD_MAX) {
		write_line(audit_fd, line, len);
		return;
	}
	memcpy(audit_held + audit_held_len, line, len);
	audit_held_len += len;
	if (audit_held_len == len && audit_first_held != NULL)
		audit_first_held(audit_first_held_arg);
}

/* At exit(3): the exiting thread's held lines (other threads flush theirs
 * before they return: log_audit_hold(NULL, NULL)). */
static void
flush_at_exit(void)
{
	log_audit_flush();
}

static void
register_flush_at_exit(void)
{
	audit_atexit_ok = atexit(flush_at_exit) == 0;
}

void
log_audit_hold(void (*first_held)(void *), void *arg)
{
	log_audit_flush();
	if (first_held == NULL) {
		audit_holding = false;
		audit_first_held = NULL;
		audit_first_held_arg = NULL;
		return;
	}
	if (pthread_once(&audit_atexit_once, register_flush_at_exit) != 0 ||
	    !audit_atexit_ok)
		return;		/* not holding: nothing may wait for an exit */
	audit_first_held = first_held;
	audit_first_held_arg = arg;
	audit_holding = true;
}

void
log_kv(enum log_level level, const char *msg, const struct log_field *fields,
    size_t nfields)
{
	struct field_run run = { fields, nfields };

	if (level < log_min_level)
		return;
	emit(STDERR_FILENO, level_names[level], msg, NULL, &run, 1);
}

void
log_audit_kv(const char *event, const char *client,
    const struct log_field *fields, size_t nfields)
{
	const struct log_field ev = KV_S("event", event);
	const struct log_field cl = KV_S("client",
	    client != NULL && client[0] != '\0' ? client : "-");
	/* At most 30 of the caller's fields (32 in all, as always). */
	const struct field_run runs[3] = {
		{ &ev, 1 }, { fields, nfields < 30 ? nfields : 30 }, { &cl, 1 },
	};

	emit_audit(runs, 3);
}

void
log_fatal_kv(const char *msg, const struct log_field *fields, size_t nfields)
{
	struct field_run run = { fields, nfields };

	emit(STDERR_FILENO, level_names[LOG_LEVEL_ERROR], msg, NULL, &run, 1);
	exit(1);
}

/* ---- the audit file ---- */

static int
open_audit(const char *path, char *err, size_t errlen)
{
	int fd = open(path, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC | O_NOCTTY,
	    0640);

	if (fd < 0)
		snprintf(err, errlen, "%s: %s", path, strerror(errno));
	return fd;
}

int
log_set_audit_file(const char *path, char *err, size_t errlen)
{
	char *copy = NULL;
	int fd = STDERR_FILENO;

	if (path != NULL) {
		if ((copy = strdup(path)) == NULL) {
			snprintf(err, errlen, "out of memory");
			return -1;
		}
		if ((fd = open_audit(path, err, errlen)) < 0) {
			free(copy);
			return -1;
		}
	}
	log_audit_flush();
	if (audit_fd != STDERR_FILENO)
		close(audit_fd);
	free(audit_path);
	audit_fd = fd;
	audit_path = copy;
	return 0;
}

int
log_reopen_audit_file(char *err, size_t errlen)
{
	int fd;

	if (audit_path == NULL)
		return 0;
	if ((fd = open_audit(audit_path, err, errlen)) < 0)
		return -1;
	log_audit_flush();
	close(audit_fd);
	audit_fd = fd;
	return 0;
}
