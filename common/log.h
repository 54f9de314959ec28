/*
 * log.h: the one encoder for every log and audit line (docs/0008).
 *
 * A line is a message and typed fields:
 *
 *     info("stream refused", KV_S("target", target), KV_I("port", port));
 *
 * becomes, in logfmt (the default),
 *
 *     time=2026-11-24T08:54:47.123Z level=info component=gateway
 *     msg="stream refused" target="x:1\nFORGED" port=22
 *
 * on one line, or the same fields as one JSON object per line
 * (--log-format json).  The message must be a string literal (the macros
 * refuse anything else at compile time), so a peer's bytes can only ever
 * be a field value, and every value is quoted and escaped: each line parses
 * back to exactly the fields that were logged, whatever bytes a peer sent.
 * Keys are constants chosen by the code.
 *
 * Secrets are never logged: callers pass identifiers (agent ids, token ids),
 * never token or key material.
 */
#ifndef TETHER_LOG_H
#define TETHER_LOG_H

#include <stddef.h>
#include <time.h>

enum log_level {
	LOG_LEVEL_DEBUG,
	LOG_LEVEL_INFO,
	LOG_LEVEL_WARN,
	LOG_LEVEL_ERROR,
};

enum log_format {
	LOG_FORMAT_LOGFMT,	/* key=value, values quoted and escaped as needed */
	LOG_FORMAT_JSON,	/* one JSON object per line */
};

enum log_kind {
	LOG_KIND_STR,		/* NUL-terminated text; NULL logs as "" */
	LOG_KIND_BYTES,		/* n bytes, any values (a peer's, unterminated) */
	LOG_KIND_INT,
	LOG_KIND_UINT,
};

/* One field.  Build it with the KV_* macros, never by hand. */
struct log_field {
	const char *key;	/* [A-Za-z0-9_.-], a constant (others become '_') */
	enum log_kind kind;
	unsigned char klen;	/* strlen(key) when the compiler knew it (a
				 * string literal of 1..64 bytes, whose bytes
				 * never change: the encoder keeps it as
				 * written, per thread, by its address), else
				 * 0 (checked and written each line).  Either
				 * way the same bytes. */
	const char *s;		/* STR, BYTES */
	size_t n;		/* BYTES: length of s.  STR: 0, or (KV_A)
				 * the size of the array s is: every byte of
				 * it may be read, past the NUL too */
	long long i;		/* INT */
	unsigned long long u;	/* UINT */
};

/* The length of key k when it is a string literal of 1..64 bytes (folded
 * at compile time: no cost at the call), else 0. */
#if defined(__GNUC__)
#define LOG_KLEN_(k) ((unsigned char)(__builtin_constant_p(k) && \
	__builtin_strlen(k) <= 64 ? __builtin_strlen(k) : 0))
#else
#define LOG_KLEN_(k) ((unsigned char)0)
#endif

#define KV_S(k, v) ((struct log_field){ .key = (k), .klen = LOG_KLEN_(k), \
	.kind = LOG_KIND_STR, .s = (v) })
/* Text in a char array (not a pointer: that does not compile), written as
 * KV_S writes it (up to its NUL); the encoder may read the whole array, so
 * it checks and copies a short value 16 bytes at a time. */
#define KV_A(k, arr) ((struct log_field){ .key = (k), .klen = LOG_KLEN_(k), \
	.kind = LOG_KIND_STR, .s = (arr), .n = sizeof(arr) + LOG_MUST_BE_ARRAY_(arr) })
#if defined(__GNUC__)
#define LOG_MUST_BE_ARRAY_(a) (0 * sizeof(struct { int log_not_an_array_ : \
	__builtin_types_compatible_p(__typeof__(a), __typeof__(&(a)[0])) ? -1 : 1; }))
#else
#define LOG_MUST_BE_ARRAY_(a) 0
#endif
#define KV_B(k, p, len) ((struct log_field){ .key = (k), .klen = LOG_KLEN_(k), \
	.kind = LOG_KIND_BYTES, .s = (const char *)(p), .n = (len) })
#define KV_I(k, v) ((struct log_field){ .key = (k), .klen = LOG_KLEN_(k), \
	.kind = LOG_KIND_INT, .i = (long long)(v) })
#define KV_U(k, v) ((struct log_field){ .key = (k), .klen = LOG_KLEN_(k), \
	.kind = LOG_KIND_UINT, .u = (unsigned long long)(v) })

/* A value longer than this many bytes is cut (on a UTF-8 boundary) and the
 * field KEY_len=ORIGINAL_LENGTH follows it. */
#define LOG_VALUE_MAX 1024
/* The longest line, newline included.  Fields that would not fit are left
 * out and counted in a last field fields_dropped=N. */
#define LOG_LINE_MAX 65536

/* Component name on every line ("gateway", "client", ...) and the lowest
 * level written.  component is kept, not copied: a constant (each thread
 * keeps an audit line's header made with it until the next log_init).
 * Lines go to stderr until log_set_audit_file. */
void log_init(const char *component, enum log_level min_level);
void log_set_format(enum log_format format);
/* Parse "debug", "info", "warn", "error" / "logfmt", "json"; 0 or -1. */
int log_level_parse(const char *name, enum log_level *out);
int log_format_parse(const char *name, enum log_format *out);

/* From now on audit lines go to path (created 0640, appended to) instead of
 * stderr.  path NULL: back to stderr.  Returns 0, or -1 with err set (the
 * previous destination stays). */
int log_set_audit_file(const char *path, char *err, size_t errlen);
/* Reopens the audit file by its path (logrotate moved it away): call on
 * SIGHUP.  Returns 0 (also when there is no audit file), or -1 with err set;
 * then the old file stays open and in use. */
int log_reopen_audit_file(char *err, size_t errlen);

/*
 * Holding audit lines, per thread (each event loop thread holds its own,
 * docs/0040): from now on the audit lines the calling thread logs wait in
 * that thread's buffer (at most PIPE_BUF bytes, 4 KiB) and leave together
 * in one write(2) when it calls log_audit_flush, when the buffer would
 * overflow, before any other line it logs (a shared stderr keeps the
 * order), when it changes or reopens the audit file, and at exit(3) if it
 * is the thread that exits (atexit).  first_held(arg) is called, on this
 * thread, when a line is held with none before it: the owner schedules a
 * flush (runtime_audit_per_pass: at the end of the loop pass).  Threads
 * that did not call this write their lines at once, as before.  Lines of
 * two holding threads never mix inside a line; their passes interleave.
 * A crash (a signal that kills) loses the lines held, at most one loop
 * pass's per thread.  first_held NULL: flushes this thread's lines and
 * stops holding; a holding thread other than the one that calls exit(3)
 * must do so before it returns, or its held lines are lost.
 */
void log_audit_hold(void (*first_held)(void *), void *arg);
/* Writes the calling thread's held audit lines now (nothing when none). */
void log_audit_flush(void);

/*
 * Encodes one line, '\n' included, into out (cap >= 256 bytes) and returns
 * its length (< cap).  Pure: no clock, no I/O; the unit tests and the fuzz
 * target call it directly.  level: a name from log_level_name (or "audit").
 */
size_t log_encode(char *out, size_t cap, enum log_format format,
    const struct timespec *when, const char *level, const char *component,
    const char *msg, const struct log_field *fields, size_t nfields);
const char *log_level_name(enum log_level level);

/* Writes one line if level >= the minimum.  Use the macros below. */
void log_kv(enum log_level level, const char *msg,
    const struct log_field *fields, size_t nfields);
/* Writes one audit line (msg=audit event=EVENT, the fields, then
 * client=CLIENT) to the audit destination, whatever the level.  client: the
 * address (ip:port, the PROXY header's when a trusted balancer sent one)
 * of the connection the audited action came in on; NULL or "" when there
 * is none (a stream asked for by another replica) writes "-". */
void log_audit_kv(const char *event, const char *client,
    const struct log_field *fields, size_t nfields);
/* Logs at error level and exits 1.  Only for start-up and broken
 * invariants, never for one peer's misbehaviour. */
void log_fatal_kv(const char *msg, const struct log_field *fields,
    size_t nfields) __attribute__((noreturn));

/* The fields of a call as (array, count); a leading empty element makes an
 * empty list legal C. */
#define LOG_FIELDS_(...) \
	((const struct log_field[]){ { .key = NULL }, __VA_ARGS__ }) + 1, \
	sizeof((const struct log_field[]){ { .key = NULL }, __VA_ARGS__ }) / \
	    sizeof(struct log_field) - 1

/* The lowest level written (log_init's min_level; set before the threads
 * start, then only read). */
extern enum log_level log_min_level;

/* 1 when lines of this level are written.  debug() asks it itself (a
 * debug line per request was ~70 instructions with the level off); a
 * caller whose line needs work before the call (text formatted into a
 * buffer) asks first.  Cost: a load. */
static inline int
log_on(enum log_level level)
{
	return level >= log_min_level;
}

/* msg must be a string literal ("" msg does not compile otherwise).  A
 * debug line's fields are not made while debug is off (the usual level):
 * a field must never carry work that has to happen (do it before, into a
 * variable).  Cost with the level off: a load and a branch. */
#define debug(msg, ...) do { \
	if (log_on(LOG_LEVEL_DEBUG)) \
		log_kv(LOG_LEVEL_DEBUG, "" msg, LOG_FIELDS_(__VA_ARGS__)); \
} while (0)
#define info(msg, ...)  log_kv(LOG_LEVEL_INFO, "" msg, LOG_FIELDS_(__VA_ARGS__))
#define warn(msg, ...)  log_kv(LOG_LEVEL_WARN, "" msg, LOG_FIELDS_(__VA_ARGS__))
#define error(msg, ...) log_kv(LOG_LEVEL_ERROR, "" msg, LOG_FIELDS_(__VA_ARGS__))
#define fatal(msg, ...) log_fatal_kv("" msg, LOG_FIELDS_(__VA_ARGS__))
#define audit(event, client, ...) \
	log_audit_kv("" event, (client), LOG_FIELDS_(__VA_ARGS__))

#endif
