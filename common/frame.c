/*
 * frame.c: the tether.v1 frame codec (see frame.h).
 *
 * Every byte a peer sends on the tunnel reaches frame_decode first, so this
 * file is the wall between untrusted input and the protocol phases: shape,
 * types, lengths and value rules are checked here, once, and the rest of the
 * code may trust a struct frame.  The frames are described by tables
 * (positional elements, map keys, their limits) that drive decoding,
 * validation and encoding alike, so the two directions cannot disagree on a
 * limit: whatever frame_decode accepts, frame_encode reproduces, and the
 * reverse.
 *
 * Before msgpack-c sees the input, a flat scan checks that it is exactly one
 * complete msgpack object and that no container announces more elements than
 * bytes remain.  msgpack-c allocates a container's elements as soon as it
 * reads the count, so without the scan a 5-byte array header could make it
 * allocate gigabytes.  DATA in the encodings frame_data_header writes is
 * read without msgpack-c (decode_data), to the same result.
 */
#include "frame.h"

#include <inttypes.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <msgpack.h>

#define NELEM(a) (sizeof(a) / sizeof((a)[0]))

enum field_kind {
	F_STR,      /* char[size], NUL-terminated */
	F_BIN,      /* uint8_t[size], exactly size bytes on the wire */
	F_U32,
	F_U64,
	F_I64,
	F_VERSIONS, /* struct frame_hello: versions[] and nversions */
	F_CRED,     /* enum frame_cred, "import" or "agent" on the wire */
	F_PAYLOAD,  /* struct frame_data: a bin left in the input buffer */
	F_MAP,      /* the frame's map, its keys in frame_desc.keys */
	F_URLS,     /* struct frame_urls: a list of strings, and whether given */
	F_CA,       /* struct frame_ca: a map of variable-length values */
};

enum field_flag {
	F_OPTIONAL = 1 << 0,   /* a map key that may be absent ("" then) */
	F_NONEMPTY = 1 << 1,
	F_NONZERO = 1 << 2,
	F_NODE = 1 << 3,       /* node name syntax, see node_name_ok */
	F_POSITIONAL = 1 << 4, /* an array element: its name is only for messages */
	F_OMIT_EMPTY = 1 << 5, /* with F_OPTIONAL: not encoded when "" or 0
	                        * (F_URLS, F_CA: when not present) */
	F_ACK = 1 << 6,        /* F_CA: SETTINGS_ACK's members, not SETTINGS' */
};

struct field {
	const char *name;
	enum field_kind kind;
	size_t off;      /* offsetof(struct frame, ...) */
	size_t size;     /* F_STR: array size with the NUL; F_BIN: exact length */
	unsigned flags;
};

#define AT(m)   offsetof(struct frame, m)
#define SIZE(m) sizeof(((struct frame *)0)->m)
#define STR(key, m, fl) { key, F_STR, AT(m), SIZE(m), fl }
#define BIN(key, m)     { key, F_BIN, AT(m), SIZE(m), 0 }
#define OPTBIN(key, m)  { key, F_BIN, AT(m), SIZE(m), F_OPTIONAL | F_OMIT_EMPTY }
#define NUM(key, kind, m, fl) { key, kind, AT(m), 0, fl }

static const struct field hello_keys[] = {
	{ "versions", F_VERSIONS, AT(u.hello), 0, 0 },
	STR("node", u.hello.node, F_NODE),
	{ "cred", F_CRED, AT(u.hello.cred), 0, 0 },
	STR("id", u.hello.id, F_NONEMPTY),
	STR("version", u.hello.version, F_OPTIONAL | F_OMIT_EMPTY),
};

static const struct field challenge_keys[] = {
	NUM("version", F_U32, u.challenge.version, F_NONZERO),
	BIN("nonce", u.challenge.nonce),
};

/* next_pubkey and next_sig: only from an agent holding a pending key
 * (docs/interface.md, "Node key rotation"); omitted when all zero. */
static const struct field auth_keys[] = {
	BIN("sig", u.auth.sig),
	OPTBIN("next_pubkey", u.auth.next_pubkey),
	OPTBIN("next_sig", u.auth.next_sig),
};

static const struct field register_keys[] = {
	BIN("pubkey", u.reg.pubkey),
	STR("node", u.reg.node, F_NODE),
	STR("hostname", u.reg.hostname, F_OPTIONAL),
	STR("client_version", u.reg.client_version, F_OPTIONAL),
	OPTBIN("key_sig", u.reg.key_sig),
};

static const struct field registered_keys[] = {
	STR("agent_id", u.registered.agent_id, F_NONEMPTY),
	STR("cluster", u.registered.cluster, F_NONEMPTY),
	NUM("goes_on", F_U32, u.registered.goes_on, F_OPTIONAL | F_OMIT_EMPTY),
};

static const struct field welcome_keys[] = {
	STR("agent_id", u.welcome.agent_id, F_NONEMPTY),
	STR("cluster", u.welcome.cluster, F_NONEMPTY),
	STR("state", u.welcome.state, F_NONEMPTY),
	STR("key", u.welcome.key, F_OPTIONAL | F_OMIT_EMPTY),
};

static const struct field state_keys[] = {
	STR("state", u.state.state, F_NONEMPTY),
	STR("last_error", u.state.last_error, F_OPTIONAL),
};

static const struct field verify_keys[] = {
	BIN("nonce", u.verify.nonce),
	NUM("time_ms", F_I64, u.verify.time_ms, 0),
};

static const struct field verify_ok_keys[] = {
	BIN("nonce", u.verify.nonce),
	NUM("time_ms", F_I64, u.verify.time_ms, 0),
	NUM("version", F_U32, u.verify.version, F_NONZERO),
};

static const struct field error_keys[] = {
	STR("code", u.error.code, F_NONEMPTY),
	STR("reason", u.error.reason, 0),
	NUM("retry_after_ms", F_U32, u.error.retry_after_ms, F_OPTIONAL | F_OMIT_EMPTY),
};

static const struct field ping_keys[] = {
	NUM("seq", F_U64, u.ping.seq, 0),
};

static const struct field reconnect_keys[] = {
	STR("reason", u.reconnect.reason, 0),
	NUM("jitter_ms", F_U32, u.reconnect.jitter_ms, 0),
	NUM("elsewhere", F_U32, u.reconnect.elsewhere, F_OPTIONAL | F_OMIT_EMPTY),
};

/* SETTINGS and SETTINGS_ACK: every key optional (frame.h).  A new setting
 * is one line in SETTINGS', and one in the ACK's if the agent echoes it
 * (redial_spread_ms: not). */
static const struct field settings_keys[] = {
	{ "urls", F_URLS, AT(u.settings.urls), 0, F_OPTIONAL | F_OMIT_EMPTY },
	{ "ca", F_CA, AT(u.settings.ca), 0, F_OPTIONAL | F_OMIT_EMPTY },
	NUM("redial_spread_ms", F_U32, u.settings.redial_spread_ms,
	    F_OPTIONAL | F_OMIT_EMPTY),
};

static const struct field settings_ack_keys[] = {
	{ "urls", F_URLS, AT(u.settings.urls), 0, F_OPTIONAL | F_OMIT_EMPTY },
	{ "ca", F_CA, AT(u.settings.ca), 0, F_OPTIONAL | F_OMIT_EMPTY | F_ACK },
};

static const struct field key_rotate_keys[] = {
	OPTBIN("nonce", u.key_rotate.nonce),
};

static const struct field key_proof_keys[] = {
	BIN("pubkey", u.key_proof.pubkey),
	BIN("old_pubkey", u.key_proof.old_pubkey),
	BIN("old_sig", u.key_proof.old_sig),
	BIN("new_sig", u.key_proof.new_sig),
};

static const struct field key_done_keys[] = {
	BIN("pubkey", u.key_done.pubkey),
};

/* Both optional here; check_open wants exactly one of them. */
static const struct field open_keys[] = {
	STR("target", u.open.target, F_OPTIONAL),
	STR("service", u.open.service, F_OPTIONAL),
	NUM("window", F_U32, u.open.window, 0),
	STR("agent", u.open.agent, F_OPTIONAL | F_OMIT_EMPTY),
	STR("principal", u.open.principal, F_OPTIONAL | F_OMIT_EMPTY),
};

static const struct field open_ok_keys[] = {
	NUM("window", F_U32, u.open_ok_window, 0),
};

static const struct field open_fail_keys[] = {
	STR("code", u.open_fail.code, F_NONEMPTY),
	STR("reason", u.open_fail.reason, 0),
};

#define STREAM_ID { "stream id", F_U32, AT(stream_id), 0, F_NONZERO | F_POSITIONAL }
#define BODY      { "body", F_MAP, 0, 0, F_POSITIONAL }

static const struct field control_args[] = { BODY };
static const struct field stream_map_args[] = { STREAM_ID, BODY };
static const struct field fin_args[] = { STREAM_ID };
static const struct field data_args[] = {
	STREAM_ID,
	{ "payload", F_PAYLOAD, AT(u.data), 0, F_POSITIONAL },
};
static const struct field window_args[] = {
	STREAM_ID,
	NUM("credit", F_U32, u.window_credit, F_NONZERO | F_POSITIONAL),
};
static const struct field reset_args[] = {
	STREAM_ID,
	STR("code", u.reset_code, F_NONEMPTY | F_POSITIONAL),
};

struct ctx;

struct frame_desc {
	const char *name;
	const struct field *args; /* the array's elements after the type */
	size_t nargs;
	const struct field *keys; /* the F_MAP element's keys */
	size_t nkeys;
	int (*check)(struct ctx *c, const struct frame *f); /* cross-field rules */
	size_t usize;             /* bytes of f->u this type fills (frame_decode zeroes them) */
};

static int check_open(struct ctx *c, const struct frame *f);

#define CONTROL(nm, k, m) { nm, control_args, 1, k, NELEM(k), NULL, SIZE(u.m) }
#define STREAM(nm, a, m)  { nm, a, NELEM(a), NULL, 0, NULL, SIZE(u.m) }

static const struct frame_desc descs[] = {
	[FRAME_HELLO] = CONTROL("HELLO", hello_keys, hello),
	[FRAME_CHALLENGE] = CONTROL("CHALLENGE", challenge_keys, challenge),
	[FRAME_AUTH] = CONTROL("AUTH", auth_keys, auth),
	[FRAME_REGISTER] = CONTROL("REGISTER", register_keys, reg),
	[FRAME_REGISTERED] = CONTROL("REGISTERED", registered_keys, registered),
	[FRAME_WELCOME] = CONTROL("WELCOME", welcome_keys, welcome),
	[FRAME_STATE] = CONTROL("STATE", state_keys, state),
	[FRAME_VERIFY] = CONTROL("VERIFY", verify_keys, verify),
	[FRAME_VERIFY_OK] = CONTROL("VERIFY_OK", verify_ok_keys, verify),
	[FRAME_ERROR] = CONTROL("ERROR", error_keys, error),
	[FRAME_PING] = CONTROL("PING", ping_keys, ping),
	[FRAME_PONG] = CONTROL("PONG", ping_keys, ping),
	[FRAME_RECONNECT] = CONTROL("RECONNECT", reconnect_keys, reconnect),
	[FRAME_SETTINGS] = CONTROL("SETTINGS", settings_keys, settings),
	[FRAME_SETTINGS_ACK] = CONTROL("SETTINGS_ACK", settings_ack_keys, settings),
	[FRAME_KEY_ROTATE] = CONTROL("KEY_ROTATE", key_rotate_keys, key_rotate),
	[FRAME_KEY_PROOF] = CONTROL("KEY_PROOF", key_proof_keys, key_proof),
	[FRAME_KEY_ROTATED] = CONTROL("KEY_ROTATED", key_done_keys, key_done),
	[FRAME_KEY_SWITCHED] = CONTROL("KEY_SWITCHED", key_done_keys, key_done),
	[FRAME_OPEN] = { "OPEN", stream_map_args, 2, open_keys, NELEM(open_keys), check_open, SIZE(u.open) },
	[FRAME_OPEN_OK] = { "OPEN_OK", stream_map_args, 2, open_ok_keys, NELEM(open_ok_keys), NULL, SIZE(u.open_ok_window) },
	[FRAME_OPEN_FAIL] = { "OPEN_FAIL", stream_map_args, 2, open_fail_keys, NELEM(open_fail_keys), NULL, SIZE(u.open_fail) },
	[FRAME_DATA] = STREAM("DATA", data_args, data),
	[FRAME_WINDOW] = STREAM("WINDOW", window_args, window_credit),
	[FRAME_FIN] = { "FIN", fin_args, NELEM(fin_args), NULL, 0, NULL, 0 },
	[FRAME_RESET] = STREAM("RESET", reset_args, reset_code),
};

static const struct frame_desc *
desc_of(int64_t type)
{
	if (type < 0 || (uint64_t)type >= NELEM(descs) || descs[type].name == NULL)
		return NULL;
	return &descs[type];
}

const char *
frame_type_name(int type)
{
	const struct frame_desc *d = desc_of(type);

	return d != NULL ? d->name : "UNKNOWN";
}

/* Where a reason goes; name prefixes it once the frame type is known. */
struct ctx {
	const char *name;
	char *err;
	size_t errlen;
	const uint8_t *end; /* of the input being decoded */
};

static int fail(struct ctx *c, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
static int field_fail(struct ctx *c, const struct field *fld, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* Always returns -1 so that callers can "return fail(...)". */
static int
fail(struct ctx *c, const char *fmt, ...)
{
	va_list ap;
	int n = 0;

	if (c->err == NULL || c->errlen == 0)
		return -1;
	if (c->name != NULL)
		n = snprintf(c->err, c->errlen, "%s: ", c->name);
	if (n < 0 || (size_t)n >= c->errlen)
		return -1;
	va_start(ap, fmt);
	vsnprintf(c->err + n, c->errlen - (size_t)n, fmt, ap);
	va_end(ap);
	return -1;
}

/* Map keys are quoted as they appear on the wire; array elements are not. */
static int
field_fail(struct ctx *c, const struct field *fld, const char *fmt, ...)
{
	char msg[128];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	if (fld->flags & F_POSITIONAL)
		return fail(c, "%s %s", fld->name, msg);
	return fail(c, "\"%s\" %s", fld->name, msg);
}

/* ---- the pre-scan ---- */

enum head_kind { H_BAD, H_FIXED, H_BLOB, H_ARRAY, H_MAP };

/*
 * Head bytes 0xc0..0xdf.  H_FIXED: size bytes follow.  Otherwise a size-byte
 * big-endian length or count follows, then (H_BLOB) extra + length bytes.
 */
static const struct {
	uint8_t kind, size, extra;
} heads[32] = {
	[0x00] = { H_FIXED, 0, 0 },                               /* nil */
	[0x01] = { H_BAD, 0, 0 },                                 /* never used */
	[0x02] = { H_FIXED, 0, 0 }, [0x03] = { H_FIXED, 0, 0 },   /* false, true */
	[0x04] = { H_BLOB, 1, 0 }, [0x05] = { H_BLOB, 2, 0 }, [0x06] = { H_BLOB, 4, 0 },
	[0x07] = { H_BLOB, 1, 1 }, [0x08] = { H_BLOB, 2, 1 }, [0x09] = { H_BLOB, 4, 1 },
	[0x0a] = { H_FIXED, 4, 0 }, [0x0b] = { H_FIXED, 8, 0 },   /* float */
	[0x0c] = { H_FIXED, 1, 0 }, [0x0d] = { H_FIXED, 2, 0 },   /* uint */
	[0x0e] = { H_FIXED, 4, 0 }, [0x0f] = { H_FIXED, 8, 0 },
	[0x10] = { H_FIXED, 1, 0 }, [0x11] = { H_FIXED, 2, 0 },   /* int */
	[0x12] = { H_FIXED, 4, 0 }, [0x13] = { H_FIXED, 8, 0 },
	[0x14] = { H_FIXED, 2, 0 }, [0x15] = { H_FIXED, 3, 0 },   /* fixext */
	[0x16] = { H_FIXED, 5, 0 }, [0x17] = { H_FIXED, 9, 0 },
	[0x18] = { H_FIXED, 17, 0 },
	[0x19] = { H_BLOB, 1, 0 }, [0x1a] = { H_BLOB, 2, 0 }, [0x1b] = { H_BLOB, 4, 0 },
	[0x1c] = { H_ARRAY, 2, 0 }, [0x1d] = { H_ARRAY, 4, 0 },
	[0x1e] = { H_MAP, 2, 0 }, [0x1f] = { H_MAP, 4, 0 },
};

static uint64_t
get_be(const uint8_t *p, size_t n)
{
	uint64_t v = 0;

	while (n-- > 0)
		v = v << 8 | *p++;
	return v;
}

/*
 * One counter of objects still to read replaces a stack: every object takes
 * at least one byte, so "pending <= bytes left" bounds every container and
 * the whole walk is O(len) with no recursion.
 */
static int
scan_object(struct ctx *c, const uint8_t *buf, size_t len)
{
	uint64_t pending = 1;
	size_t pos = 0;

	while (pending > 0) {
		unsigned kind, size = 0, extra = 0;
		uint64_t n;
		uint8_t b;

		if (pos >= len)
			return fail(c, "truncated msgpack");
		b = buf[pos++];
		pending--;
		if (b <= 0x7f || b >= 0xe0)
			continue; /* fixint */
		if (b <= 0x8f) {
			kind = H_MAP;
			n = b & 0x0f;
		} else if (b <= 0x9f) {
			kind = H_ARRAY;
			n = b & 0x0f;
		} else if (b <= 0xbf) {
			kind = H_BLOB;
			n = b & 0x1f;
		} else {
			kind = heads[b - 0xc0].kind;
			size = heads[b - 0xc0].size;
			extra = heads[b - 0xc0].extra;
			if (kind == H_BAD)
				return fail(c, "malformed msgpack (byte 0x%02x)", b);
			if (kind == H_FIXED) {
				kind = H_BLOB;
				n = size;
			} else {
				if (len - pos < size)
					return fail(c, "truncated msgpack");
				n = get_be(buf + pos, size);
				pos += size;
			}
		}
		if (kind == H_BLOB) {
			if (len - pos < n + extra)
				return fail(c, "truncated msgpack");
			pos += (size_t)(n + extra);
		} else {
			pending += kind == H_MAP ? 2 * n : n;
		}
		if (pending > len - pos)
			return fail(c, "truncated msgpack");
	}
	if (pos != len)
		return fail(c, "%zu trailing bytes after the frame", len - pos);
	return 0;
}

/* ---- decoding ---- */

#define FIELD(f, fld, type) ((type *)((char *)(f) + (fld)->off))
#define CFIELD(f, fld, type) ((const type *)((const char *)(f) + (fld)->off))

static int
dec_uint(struct ctx *c, const struct field *fld, const msgpack_object *o,
    uint64_t max, uint64_t *v)
{
	if (o->type == MSGPACK_OBJECT_NEGATIVE_INTEGER)
		return field_fail(c, fld, "is negative");
	if (o->type != MSGPACK_OBJECT_POSITIVE_INTEGER)
		return field_fail(c, fld, "is not an integer");
	if (o->via.u64 > max)
		return field_fail(c, fld, "is out of range");
	*v = o->via.u64;
	return 0;
}

static int
dec_i64(struct ctx *c, const struct field *fld, const msgpack_object *o, int64_t *v)
{
	if (o->type == MSGPACK_OBJECT_NEGATIVE_INTEGER) {
		*v = o->via.i64;
		return 0;
	}
	if (o->type != MSGPACK_OBJECT_POSITIVE_INTEGER)
		return field_fail(c, fld, "is not an integer");
	if (o->via.u64 > INT64_MAX)
		return field_fail(c, fld, "is out of range");
	*v = (int64_t)o->via.u64;
	return 0;
}

/* A NUL inside would silently cut the string short once it is a C string. */
static int
dec_str(struct ctx *c, const struct field *fld, const msgpack_object *o,
    char *dst, size_t size)
{
	if (o->type != MSGPACK_OBJECT_STR)
		return field_fail(c, fld, "is not a string");
	if (o->via.str.size > size - 1)
		return field_fail(c, fld, "is too long (%" PRIu32 " > %zu bytes)",
		    o->via.str.size, size - 1);
	dst[0] = '\0';
	/* msgpack-c may give an empty string a NULL pointer */
	if (o->via.str.size == 0)
		return 0;
	if (memchr(o->via.str.ptr, '\0', o->via.str.size) != NULL)
		return field_fail(c, fld, "contains a NUL byte");
	memcpy(dst, o->via.str.ptr, o->via.str.size);
	dst[o->via.str.size] = '\0';
	return 0;
}

static int
dec_bin(struct ctx *c, const struct field *fld, const msgpack_object *o, uint8_t *dst)
{
	if (o->type != MSGPACK_OBJECT_BIN)
		return field_fail(c, fld, "is not binary");
	if (o->via.bin.size != fld->size)
		return field_fail(c, fld, "must be %zu bytes, got %" PRIu32,
		    fld->size, o->via.bin.size);
	memcpy(dst, o->via.bin.ptr, fld->size);
	return 0;
}

static int
dec_versions(struct ctx *c, const struct field *fld, const msgpack_object *o,
    struct frame_hello *h)
{
	uint64_t v;

	if (o->type != MSGPACK_OBJECT_ARRAY)
		return field_fail(c, fld, "is not an array");
	if (o->via.array.size < 1 || o->via.array.size > FRAME_MAX_VERSIONS)
		return field_fail(c, fld, "must list 1 to %d versions, got %" PRIu32,
		    FRAME_MAX_VERSIONS, o->via.array.size);
	for (uint32_t i = 0; i < o->via.array.size; i++) {
		if (dec_uint(c, fld, &o->via.array.ptr[i], UINT32_MAX, &v) < 0)
			return -1;
		h->versions[i] = (uint32_t)v;
	}
	h->nversions = o->via.array.size;
	return 0;
}

/* 0..FRAME_MAX_URLS non-empty strings; their syntax is the user's to
 * check (the agent: agent_tunnel_url). */
static int
dec_urls(struct ctx *c, const struct field *fld, const msgpack_object *o,
    struct frame_urls *u)
{
	struct field one = { fld->name, F_STR, 0, FRAME_URL_MAX + 1, 0 };

	if (o->type != MSGPACK_OBJECT_ARRAY)
		return field_fail(c, fld, "is not an array");
	if (o->via.array.size > FRAME_MAX_URLS)
		return field_fail(c, fld, "lists more than %d URLs (%" PRIu32 ")",
		    FRAME_MAX_URLS, o->via.array.size);
	for (uint32_t i = 0; i < o->via.array.size; i++) {
		if (dec_str(c, &one, &o->via.array.ptr[i], u->url[i],
		    sizeof(u->url[i])) < 0)
			return -1;
		if (u->url[i][0] == '\0')
			return field_fail(c, fld, "lists an empty URL");
	}
	u->n = o->via.array.size;
	u->present = true;
	return 0;
}

static int
str_is(const msgpack_object *o, const char *s)
{
	size_t n = strlen(s);

	return o->type == MSGPACK_OBJECT_STR && o->via.str.size == n &&
	    (n == 0 || memcmp(o->via.str.ptr, s, n) == 0);
}

static int map_lookup(struct ctx *c, const msgpack_object_map *m,
    const char *key, const msgpack_object **val);

/* A bin of 1..FRAME_CA_DER_MAX bytes (a certificate's DER; parsing it is
 * the agent's). */
static int
dec_der(struct ctx *c, const struct field *fld, const msgpack_object *o,
    uint8_t *dst, size_t *len)
{
	if (o->type != MSGPACK_OBJECT_BIN)
		return field_fail(c, fld, "is not binary");
	if (o->via.bin.size == 0)
		return field_fail(c, fld, "is empty");
	if (o->via.bin.size > FRAME_CA_DER_MAX)
		return field_fail(c, fld, "is too long (%" PRIu32 " > %d bytes)",
		    o->via.bin.size, FRAME_CA_DER_MAX);
	memcpy(dst, o->via.bin.ptr, o->via.bin.size);
	*len = o->via.bin.size;
	return 0;
}

/* 1..FRAME_CA_MAX_HELD strings; their syntax is check_ca's. */
static int
dec_held(struct ctx *c, const struct field *fld, const msgpack_object *o,
    struct frame_ca *ca)
{
	struct field one = { fld->name, F_STR, 0, FRAME_CA_SUM_LEN + 1, 0 };

	if (o->type != MSGPACK_OBJECT_ARRAY)
		return field_fail(c, fld, "is not an array");
	if (o->via.array.size < 1 || o->via.array.size > FRAME_CA_MAX_HELD)
		return field_fail(c, fld, "must list 1 to %d CAs, got %" PRIu32,
		    FRAME_CA_MAX_HELD, o->via.array.size);
	for (uint32_t i = 0; i < o->via.array.size; i++) {
		if (dec_str(c, &one, &o->via.array.ptr[i], ca->held[i],
		    sizeof(ca->held[i])) < 0)
			return -1;
	}
	ca->nheld = o->via.array.size;
	return 0;
}

/*
 * "ca": a map whose members are looked up by name (unknown ones skipped,
 * as in every map); which of them a direction needs is check_ca's.
 */
static int
dec_ca(struct ctx *c, const struct field *fld, const msgpack_object *o,
    struct frame_ca *ca)
{
	static const struct field phase = { "ca.phase", F_STR, 0, 0, 0 };
	static const struct field next = { "ca.next", F_BIN, 0, 0, 0 };
	static const struct field cross = { "ca.cross", F_BIN, 0, 0, 0 };
	static const struct field held = { "ca.held", F_STR, 0, 0, 0 };
	const msgpack_object_map *m = &o->via.map;
	const msgpack_object *v;

	if (o->type != MSGPACK_OBJECT_MAP)
		return field_fail(c, fld, "is not a map");
	ca->present = true;
	if (map_lookup(c, m, "phase", &v) < 0)
		return -1;
	if (v != NULL) {
		if (str_is(v, "overlap"))
			ca->phase = FRAME_CA_OVERLAP;
		else if (str_is(v, "final"))
			ca->phase = FRAME_CA_FINAL;
		else
			return field_fail(c, &phase,
			    "must be \"overlap\" or \"final\"");
	}
	if (map_lookup(c, m, "next", &v) < 0 ||
	    (v != NULL && dec_der(c, &next, v, ca->next, &ca->next_len) < 0))
		return -1;
	if (map_lookup(c, m, "cross", &v) < 0 ||
	    (v != NULL && dec_der(c, &cross, v, ca->cross, &ca->cross_len) < 0))
		return -1;
	if (map_lookup(c, m, "held", &v) < 0 ||
	    (v != NULL && dec_held(c, &held, v, ca) < 0))
		return -1;
	return 0;
}

static int
dec_cred(struct ctx *c, const struct field *fld, const msgpack_object *o,
    enum frame_cred *cred)
{
	if (str_is(o, "import"))
		*cred = FRAME_CRED_IMPORT;
	else if (str_is(o, "agent"))
		*cred = FRAME_CRED_AGENT;
	else
		return field_fail(c, fld, "must be \"import\" or \"agent\"");
	return 0;
}

static int
dec_payload(struct ctx *c, const struct field *fld, const msgpack_object *o,
    struct frame_data *d)
{
	if (o->type != MSGPACK_OBJECT_BIN)
		return field_fail(c, fld, "is not binary");
	/*
	 * msgpack-c leaves bins pointing into the input: zero copy.  An empty
	 * one it points at its own header; point that at the frame's end,
	 * where a payload would start, so payload == input + header length
	 * holds for every DATA frame.
	 */
	d->payload = o->via.bin.size > 0 ? (const uint8_t *)o->via.bin.ptr : c->end;
	d->len = o->via.bin.size;
	return 0;
}

static int dec_map(struct ctx *c, const struct frame_desc *d,
    const struct field *fld, const msgpack_object *o, struct frame *f);

static int
dec_field(struct ctx *c, const struct frame_desc *d, const struct field *fld,
    const msgpack_object *o, struct frame *f)
{
	uint64_t v;

	switch (fld->kind) {
	case F_STR:
		return dec_str(c, fld, o, FIELD(f, fld, char), fld->size);
	case F_BIN:
		return dec_bin(c, fld, o, FIELD(f, fld, uint8_t));
	case F_U32:
		if (dec_uint(c, fld, o, UINT32_MAX, &v) < 0)
			return -1;
		*FIELD(f, fld, uint32_t) = (uint32_t)v;
		return 0;
	case F_U64:
		return dec_uint(c, fld, o, UINT64_MAX, FIELD(f, fld, uint64_t));
	case F_I64:
		return dec_i64(c, fld, o, FIELD(f, fld, int64_t));
	case F_VERSIONS:
		return dec_versions(c, fld, o, FIELD(f, fld, struct frame_hello));
	case F_CRED:
		return dec_cred(c, fld, o, FIELD(f, fld, enum frame_cred));
	case F_PAYLOAD:
		return dec_payload(c, fld, o, FIELD(f, fld, struct frame_data));
	case F_MAP:
		return dec_map(c, d, fld, o, f);
	case F_URLS:
		return dec_urls(c, fld, o, FIELD(f, fld, struct frame_urls));
	case F_CA:
		return dec_ca(c, fld, o, FIELD(f, fld, struct frame_ca));
	}
	return fail(c, "internal error: field kind %d", (int)fld->kind);
}

/*
 * Finds key in m.  A key given twice is an error rather than "first wins":
 * two parsers picking different copies is how smuggling bugs start.
 */
static int
map_lookup(struct ctx *c, const msgpack_object_map *m, const char *key,
    const msgpack_object **val)
{
	*val = NULL;
	for (uint32_t i = 0; i < m->size; i++) {
		if (!str_is(&m->ptr[i].key, key))
			continue;
		if (*val != NULL)
			return fail(c, "duplicate key \"%s\"", key);
		*val = &m->ptr[i].val;
	}
	return 0;
}

/* Unknown keys are skipped, so only the known ones are looked up. */
static int
dec_map(struct ctx *c, const struct frame_desc *d, const struct field *fld,
    const msgpack_object *o, struct frame *f)
{
	const msgpack_object_map *m = &o->via.map;
	const msgpack_object *val;

	if (o->type != MSGPACK_OBJECT_MAP)
		return field_fail(c, fld, "is not a map");
	for (uint32_t i = 0; i < m->size; i++) {
		if (m->ptr[i].key.type != MSGPACK_OBJECT_STR)
			return fail(c, "map key is not a string");
	}
	for (size_t i = 0; i < d->nkeys; i++) {
		const struct field *k = &d->keys[i];

		if (map_lookup(c, m, k->name, &val) < 0)
			return -1;
		if (val == NULL) {
			if (k->flags & F_OPTIONAL)
				continue;
			return fail(c, "missing key \"%s\"", k->name);
		}
		if (dec_field(c, d, k, val, f) < 0)
			return -1;
	}
	return 0;
}

/* ---- validation, shared by both directions ---- */

/*
 * [A-Za-z0-9._-]{1,63}, not starting with '-' (it would read as an option on
 * a command line) or '.' (hidden files, "." and "..").
 */
static int
node_name_ok(const char *s)
{
	size_t n = strlen(s);

	if (n < 1 || n > FRAME_NODE_MAX || s[0] == '-' || s[0] == '.')
		return 0;
	return strspn(s, "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"
	    "0123456789._-") == n;
}

static int check_fields(struct ctx *c, const struct frame_desc *d,
    const struct field *fields, size_t n, const struct frame *f);

static int
check_str(struct ctx *c, const struct field *fld, const char *s)
{
	size_t n = strnlen(s, fld->size);

	/* Only an encoder's caller can get this wrong; decode terminates. */
	if (n == fld->size)
		return field_fail(c, fld, "is too long (no NUL within %zu bytes)",
		    fld->size);
	if (n == 0 && (fld->flags & (F_NONEMPTY | F_NODE)))
		return field_fail(c, fld, "is empty");
	if ((fld->flags & F_NODE) && !node_name_ok(s))
		return field_fail(c, fld, "is not a valid node name");
	return 0;
}

static int
check_versions(struct ctx *c, const struct field *fld, const struct frame_hello *h)
{
	if (h->nversions < 1 || h->nversions > FRAME_MAX_VERSIONS)
		return field_fail(c, fld, "must list 1 to %d versions, got %zu",
		    FRAME_MAX_VERSIONS, h->nversions);
	for (size_t i = 0; i < h->nversions; i++) {
		if (h->versions[i] == 0)
			return field_fail(c, fld, "lists version 0");
	}
	return 0;
}

static int
check_urls(struct ctx *c, const struct field *fld, const struct frame_urls *u)
{
	if (!u->present)
		return u->n == 0 ? 0 : field_fail(c, fld, "has URLs but is absent");
	if (u->n > FRAME_MAX_URLS)
		return field_fail(c, fld, "lists more than %d URLs", FRAME_MAX_URLS);
	for (size_t i = 0; i < u->n; i++) {
		size_t n = strnlen(u->url[i], sizeof(u->url[i]));

		if (n == sizeof(u->url[i]))
			return field_fail(c, fld, "has a URL over %d bytes",
			    FRAME_URL_MAX);
		if (n == 0)
			return field_fail(c, fld, "lists an empty URL");
	}
	return 0;
}

/* "sha256:" and 64 lowercase hex digits, as ca_checksum (auth/ca.h). */
static int
ca_sum_ok(const char *s)
{
	static const char prefix[] = "sha256:";

	if (strnlen(s, FRAME_CA_SUM_LEN + 1) != FRAME_CA_SUM_LEN ||
	    strncmp(s, prefix, sizeof(prefix) - 1) != 0)
		return 0;
	return strspn(s + sizeof(prefix) - 1, "0123456789abcdef") ==
	    FRAME_CA_SUM_LEN - (sizeof(prefix) - 1);
}

/* The gateway's word: a phase, next, and cross in "overlap"; nothing of
 * the agent's. */
static int
check_ca_settings(struct ctx *c, const struct field *fld, const struct frame_ca *ca)
{
	if (ca->nheld != 0)
		return field_fail(c, fld, "has \"held\" (SETTINGS_ACK's)");
	if (ca->phase != FRAME_CA_OVERLAP && ca->phase != FRAME_CA_FINAL)
		return field_fail(c, fld, "needs a \"phase\"");
	if (ca->next_len == 0)
		return field_fail(c, fld, "needs \"next\"");
	if (ca->phase == FRAME_CA_OVERLAP && ca->cross_len == 0)
		return field_fail(c, fld, "needs \"cross\" in \"overlap\"");
	return 0;
}

/* The agent's word: the checksums it holds, nothing of the gateway's. */
static int
check_ca_ack(struct ctx *c, const struct field *fld, const struct frame_ca *ca)
{
	if (ca->phase != FRAME_CA_NONE || ca->next_len != 0 || ca->cross_len != 0)
		return field_fail(c, fld, "has SETTINGS' members in an ACK");
	if (ca->nheld < 1)
		return field_fail(c, fld, "needs \"held\"");
	for (size_t i = 0; i < ca->nheld; i++) {
		if (!ca_sum_ok(ca->held[i]))
			return field_fail(c, fld, "\"held\" lists a malformed "
			    "checksum (want sha256:<64 hex>)");
	}
	return 0;
}

static int
check_ca(struct ctx *c, const struct field *fld, const struct frame_ca *ca)
{
	if (!ca->present) {
		if (ca->phase != FRAME_CA_NONE || ca->next_len != 0 ||
		    ca->cross_len != 0 || ca->nheld != 0)
			return field_fail(c, fld, "has values but is absent");
		return 0;
	}
	/* Only an encoder's caller can get these wrong; decode bounds them. */
	if (ca->next_len > FRAME_CA_DER_MAX || ca->cross_len > FRAME_CA_DER_MAX ||
	    ca->nheld > FRAME_CA_MAX_HELD)
		return field_fail(c, fld, "has a value over its limit");
	if (fld->flags & F_ACK)
		return check_ca_ack(c, fld, ca);
	return check_ca_settings(c, fld, ca);
}

static int
check_field(struct ctx *c, const struct frame_desc *d, const struct field *fld,
    const struct frame *f)
{
	const struct frame_data *data;
	enum frame_cred cred;

	switch (fld->kind) {
	case F_STR:
		return check_str(c, fld, CFIELD(f, fld, char));
	case F_U32:
		if ((fld->flags & F_NONZERO) && *CFIELD(f, fld, uint32_t) == 0)
			return field_fail(c, fld, "must not be 0");
		return 0;
	case F_VERSIONS:
		return check_versions(c, fld, CFIELD(f, fld, struct frame_hello));
	case F_CRED:
		cred = *CFIELD(f, fld, enum frame_cred);
		if (cred != FRAME_CRED_IMPORT && cred != FRAME_CRED_AGENT)
			return field_fail(c, fld, "is not a known credential kind");
		return 0;
	case F_PAYLOAD:
		data = CFIELD(f, fld, struct frame_data);
		if (data->len > UINT32_MAX)
			return field_fail(c, fld, "is too long");
		if (data->len > 0 && data->payload == NULL)
			return field_fail(c, fld, "is NULL");
		return 0;
	case F_MAP:
		return check_fields(c, d, d->keys, d->nkeys, f);
	case F_URLS:
		return check_urls(c, fld, CFIELD(f, fld, struct frame_urls));
	case F_CA:
		return check_ca(c, fld, CFIELD(f, fld, struct frame_ca));
	case F_BIN:
	case F_U64:
	case F_I64:
		return 0;
	}
	return fail(c, "internal error: field kind %d", (int)fld->kind);
}

static int
check_fields(struct ctx *c, const struct frame_desc *d,
    const struct field *fields, size_t n, const struct frame *f)
{
	for (size_t i = 0; i < n; i++) {
		if (check_field(c, d, &fields[i], f) < 0)
			return -1;
	}
	return 0;
}

/*
 * A stream names either an address or a service, never both: the agent
 * checks one of them against its allowlist, and it must be unambiguous
 * which.
 */
static int
check_open(struct ctx *c, const struct frame *f)
{
	int has_target = f->u.open.target[0] != '\0';
	int has_service = f->u.open.service[0] != '\0';

	if (has_target == has_service)
		return fail(c, "needs exactly one of \"target\" and \"service\"");
	return 0;
}

static int
validate(struct ctx *c, const struct frame_desc *d, const struct frame *f)
{
	if (check_fields(c, d, d->args, d->nargs, f) < 0)
		return -1;
	return d->check != NULL ? d->check(c, f) : 0;
}

static int
dec_frame(struct ctx *c, const msgpack_object *root, struct frame *f)
{
	const msgpack_object *el;
	const struct frame_desc *d;
	uint32_t n;

	if (root->type != MSGPACK_OBJECT_ARRAY)
		return fail(c, "frame is not an array");
	el = root->via.array.ptr;
	n = root->via.array.size;
	if (n == 0)
		return fail(c, "frame is an empty array");
	if (el[0].type != MSGPACK_OBJECT_POSITIVE_INTEGER)
		return fail(c, "frame type is not a positive integer");
	d = el[0].via.u64 <= INT64_MAX ? desc_of((int64_t)el[0].via.u64) : NULL;
	if (d == NULL) {
		(void)fail(c, "unknown frame type %" PRIu64, el[0].via.u64);
		return FRAME_UNKNOWN_TYPE;
	}
	c->name = d->name;
	memset(&f->u, 0, d->usize);
	f->type = (enum frame_type)el[0].via.u64;
	if (n != 1 + d->nargs)
		return fail(c, "expected %zu elements, got %" PRIu32, 1 + d->nargs, n);
	for (size_t i = 0; i < d->nargs; i++) {
		if (dec_field(c, d, &d->args[i], &el[1 + i], f) < 0)
			return -1;
	}
	return validate(c, d, f);
}

/*
 * The zone msgpack-c builds a frame's objects in.  msgpack_unpack_next
 * makes one (two mallocs, the first chunk 8 KiB) and frees it for every
 * frame: ~660 of the agent's ~22,000 instructions per /k8s request.  One
 * zone per thread instead, emptied after each frame (msgpack_zone_clear:
 * the first chunk kept, any more that a large frame needed freed), freed
 * when the thread ends (zone_key's destructor; the main thread's stays
 * reachable until exit).  Nothing decoded points into it: strings and
 * binaries are copied into struct frame, and DATA's payload points into
 * the caller's input (msgpack-c refers to the input for str and bin).
 */
static pthread_once_t zone_once = PTHREAD_ONCE_INIT;
static pthread_key_t zone_key;
static int zone_key_ok;
static _Thread_local msgpack_zone *zone;

static void
zone_free(void *arg)
{
	msgpack_zone_free(arg);
	zone = NULL;
}

static void
zone_key_make(void)
{
	zone_key_ok = pthread_key_create(&zone_key, zone_free) == 0;
}

/* The thread's zone (empty), NULL if it cannot have one (out of memory):
 * the caller then makes and frees one of its own. */
static msgpack_zone *
zone_get(void)
{
	msgpack_zone *z;

	if (zone != NULL)
		return zone;
	if (pthread_once(&zone_once, zone_key_make) != 0 || !zone_key_ok ||
	    (z = msgpack_zone_new(MSGPACK_ZONE_CHUNK_SIZE)) == NULL)
		return NULL;
	if (pthread_setspecific(zone_key, z) != 0) {
		msgpack_zone_free(z);
		return NULL;
	}
	return zone = z;
}

/* msgpack-c's reading of the frame scan_object found well-formed; dec_frame
 * fills f.  (msgpack_unpack, which msgpack-c's header calls obsolete, is
 * its call that builds in a zone of the caller's.) */
static int
unpack_frame(struct ctx *c, const uint8_t *buf, size_t len, struct frame *f)
{
	msgpack_zone *z = zone_get(), *own = NULL;
	msgpack_object obj;
	msgpack_unpack_return ret;
	size_t off = 0;
	int rc;

	if (z == NULL && (z = own = msgpack_zone_new(MSGPACK_ZONE_CHUNK_SIZE)) == NULL)
		return fail(c, "out of memory");
	ret = msgpack_unpack((const char *)buf, len, &off, z, &obj);
	if (ret == MSGPACK_UNPACK_SUCCESS && off == len)
		rc = dec_frame(c, &obj, f);
	else if (ret == MSGPACK_UNPACK_NOMEM_ERROR)
		/* msgpack-c also says this past 32 levels of nesting */
		rc = fail(c, "msgpack nested too deeply or out of memory");
	else
		rc = fail(c, "malformed msgpack");
	if (own != NULL)
		msgpack_zone_free(own);
	else
		msgpack_zone_clear(z);
	return rc;
}

/*
 * A DATA frame in the encodings frame_data_header writes (a fixarray of 3,
 * the type as a fixint, the stream id as a positive fixint or uint 8/16/32,
 * the payload as bin 8/16/32 of exactly the bytes left): read here,
 * without msgpack-c, since every byte a stream carries comes in one.  What
 * it takes is what the general path accepts too, with the same result
 * (dec_frame, dec_payload, check_field: the id is not 0 and fits 32 bits,
 * an empty payload points at the end); everything else (another encoding,
 * an id of 0, a short or long frame) returns 0 and goes the general way,
 * which accepts or refuses it with its reason.  ~850 -> ~40 instructions
 * per DATA frame (the agent decodes one per /k8s request,
 * tests/bench/k8s_instructions.sh BENCH_PROFILE=agent; the gateway one per
 * answer).  Returns 1 with f filled, else 0 with f untouched.
 */
static int
decode_data(const uint8_t *buf, size_t len, struct frame *f)
{
	size_t pos, size;
	uint64_t id, n;

	if (len < 4 || buf[0] != 0x93 || buf[1] != FRAME_DATA)
		return 0;
	if (buf[2] <= 0x7f) {
		id = buf[2];
		pos = 3;
	} else {
		size = buf[2] == 0xcc ? 1 : buf[2] == 0xcd ? 2 : buf[2] == 0xce ? 4 : 0;
		if (size == 0 || len - 3 < size)
			return 0;
		id = get_be(buf + 3, size);
		pos = 3 + size;
	}
	if (id == 0 || pos >= len)
		return 0;
	size = buf[pos] == 0xc4 ? 1 : buf[pos] == 0xc5 ? 2 : buf[pos] == 0xc6 ? 4 : 0;
	if (size == 0 || len - pos - 1 < size)
		return 0;
	n = get_be(buf + pos + 1, size);
	pos += 1 + size;
	if (n != len - pos)
		return 0;
	f->type = FRAME_DATA;
	f->stream_id = (uint32_t)id;
	f->u.data.payload = buf + pos;   /* the end when empty, as dec_payload */
	f->u.data.len = (size_t)n;
	return 1;
}

int
frame_decode(const uint8_t *buf, size_t len, struct frame *f, char *err,
    size_t errlen)
{
	struct ctx c = { NULL, err, errlen, NULL };
	int rc;

	if (err != NULL && errlen > 0)
		err[0] = '\0';
	/* Only the header and the decoded type's member of f->u are zeroed
	 * on success (dec_frame): the whole of struct frame is 10.6 KB, and
	 * zeroing it was ~10k of the ~114k instructions of a /k8s request
	 * (docs/performance.md, 2026-11-28).  A failure zeroes all of it. */
	if (buf != NULL && decode_data(buf, len, f))
		return 0;
	f->type = 0;
	f->stream_id = 0;
	if (buf == NULL || len == 0)
		rc = fail(&c, "empty frame");
	else {
		c.end = buf + len;
		rc = scan_object(&c, buf, len) < 0 ? -1 : unpack_frame(&c, buf, len, f);
	}
	if (rc != 0)
		memset(f, 0, sizeof(*f));
	return rc;
}

/* ---- encoding ---- */

/* An F_OMIT_EMPTY string that is "", binary that is all zero, or number
 * that is 0, is left out of the map. */
static int
enc_omitted(const struct field *fld, const struct frame *f)
{
	const uint8_t *b;

	if (!(fld->flags & F_OMIT_EMPTY))
		return 0;
	if (fld->kind == F_URLS)
		return !CFIELD(f, fld, struct frame_urls)->present;
	if (fld->kind == F_CA)
		return !CFIELD(f, fld, struct frame_ca)->present;
	if (fld->kind == F_U32)
		return *CFIELD(f, fld, uint32_t) == 0;
	if (fld->kind == F_STR)
		return CFIELD(f, fld, char)[0] == '\0';
	if (fld->kind != F_BIN)
		return 0;
	b = CFIELD(f, fld, uint8_t);
	for (size_t i = 0; i < fld->size; i++)
		if (b[i] != 0)
			return 0;
	return 1;
}

static uint32_t
enc_key_count(const struct frame_desc *d, const struct frame *f)
{
	uint32_t n = 0;

	for (size_t i = 0; i < d->nkeys; i++)
		n += !enc_omitted(&d->keys[i], f);
	return n;
}

static int
enc_key(msgpack_packer *pk, const char *s)
{
	return msgpack_pack_str_with_body(pk, s, strlen(s));
}

/* "ca": only the members that are there (check_ca said which may be). */
static int
enc_ca(msgpack_packer *pk, const struct frame_ca *ca)
{
	const char *phase = ca->phase == FRAME_CA_OVERLAP ? "overlap" : "final";
	int rc;

	rc = msgpack_pack_map(pk, (ca->phase != FRAME_CA_NONE) +
	    (ca->next_len > 0) + (ca->cross_len > 0) + (ca->nheld > 0));
	if (ca->phase != FRAME_CA_NONE)
		rc |= enc_key(pk, "phase") | enc_key(pk, phase);
	if (ca->next_len > 0)
		rc |= enc_key(pk, "next") |
		    msgpack_pack_bin_with_body(pk, ca->next, ca->next_len);
	if (ca->cross_len > 0)
		rc |= enc_key(pk, "cross") |
		    msgpack_pack_bin_with_body(pk, ca->cross, ca->cross_len);
	if (ca->nheld > 0) {
		rc |= enc_key(pk, "held") | msgpack_pack_array(pk, ca->nheld);
		for (size_t i = 0; i < ca->nheld; i++)
			rc |= enc_key(pk, ca->held[i]);
	}
	return rc;
}

static int
enc_field(msgpack_packer *pk, const struct frame_desc *d,
    const struct field *fld, const struct frame *f)
{
	const struct frame_hello *h;
	const struct frame_data *data;
	const char *s;
	int rc = 0;

	switch (fld->kind) {
	case F_STR:
		s = CFIELD(f, fld, char);
		return msgpack_pack_str_with_body(pk, s, strlen(s));
	case F_BIN:
		return msgpack_pack_bin_with_body(pk, CFIELD(f, fld, uint8_t), fld->size);
	case F_U32:
		return msgpack_pack_uint32(pk, *CFIELD(f, fld, uint32_t));
	case F_U64:
		return msgpack_pack_uint64(pk, *CFIELD(f, fld, uint64_t));
	case F_I64:
		return msgpack_pack_int64(pk, *CFIELD(f, fld, int64_t));
	case F_VERSIONS:
		h = CFIELD(f, fld, struct frame_hello);
		rc = msgpack_pack_array(pk, h->nversions);
		for (size_t i = 0; i < h->nversions; i++)
			rc |= msgpack_pack_uint32(pk, h->versions[i]);
		return rc;
	case F_CRED:
		s = *CFIELD(f, fld, enum frame_cred) == FRAME_CRED_IMPORT ?
		    "import" : "agent";
		return msgpack_pack_str_with_body(pk, s, strlen(s));
	case F_PAYLOAD:
		data = CFIELD(f, fld, struct frame_data);
		return msgpack_pack_bin_with_body(pk, data->payload, data->len);
	case F_URLS: {
		const struct frame_urls *u = CFIELD(f, fld, struct frame_urls);

		rc = msgpack_pack_array(pk, u->n);
		for (size_t i = 0; i < u->n; i++)
			rc |= msgpack_pack_str_with_body(pk, u->url[i],
			    strlen(u->url[i]));
		return rc;
	}
	case F_CA:
		return enc_ca(pk, CFIELD(f, fld, struct frame_ca));
	case F_MAP:
		rc = msgpack_pack_map(pk, enc_key_count(d, f));
		for (size_t i = 0; i < d->nkeys; i++) {
			if (enc_omitted(&d->keys[i], f))
				continue;
			s = d->keys[i].name;
			rc |= msgpack_pack_str_with_body(pk, s, strlen(s));
			rc |= enc_field(pk, d, &d->keys[i], f);
		}
		return rc;
	}
	return -1;
}

/* Writes tag then v as size big-endian bytes; returns the bytes written. */
static size_t
put_head(uint8_t *p, uint8_t tag, uint64_t v, size_t size)
{
	p[0] = tag;
	for (size_t i = size; i > 0; i--) {
		p[i] = (uint8_t)v;
		v >>= 8;
	}
	return 1 + size;
}

/* The smallest encodings, as msgpack-c's packer would choose them. */
size_t
frame_data_header(uint8_t *hdr, uint32_t stream_id, size_t payload_len)
{
	size_t n = 0;

	/* Neither could be decoded; 0 is never a valid header length. */
	if (stream_id == 0 || payload_len > UINT32_MAX)
		return 0;
	hdr[n++] = 0x93; /* fixarray of 3 */
	hdr[n++] = FRAME_DATA;
	if (stream_id <= 0x7f)
		hdr[n++] = (uint8_t)stream_id;
	else if (stream_id <= UINT8_MAX)
		n += put_head(hdr + n, 0xcc, stream_id, 1);
	else if (stream_id <= UINT16_MAX)
		n += put_head(hdr + n, 0xcd, stream_id, 2);
	else
		n += put_head(hdr + n, 0xce, stream_id, 4);
	if (payload_len <= UINT8_MAX)
		n += put_head(hdr + n, 0xc4, payload_len, 1);
	else if (payload_len <= UINT16_MAX)
		n += put_head(hdr + n, 0xc5, payload_len, 2);
	else
		n += put_head(hdr + n, 0xc6, payload_len, 4);
	return n;
}

/* Hands back a copy of frame bytes behind headroom spare bytes. */
static int
emit(const uint8_t *hdr, size_t hlen, const void *body, size_t blen,
    size_t headroom, uint8_t **out, size_t *outlen)
{
	uint8_t *buf;

	if (blen > SIZE_MAX - hlen || headroom > SIZE_MAX - hlen - blen)
		return -1;
	buf = malloc(headroom + hlen + blen);
	if (buf == NULL)
		return -1;
	memcpy(buf + headroom, hdr, hlen);
	if (blen > 0)
		memcpy(buf + headroom + hlen, body, blen);
	*out = buf;
	*outlen = hlen + blen;
	return 0;
}

int
frame_encode(const struct frame *f, size_t headroom, uint8_t **out,
    size_t *outlen)
{
	struct ctx c = { NULL, NULL, 0, NULL };
	const struct frame_desc *d;
	uint8_t hdr[FRAME_DATA_HEADER_MAX];
	msgpack_sbuffer sb;
	msgpack_packer pk;
	int rc;

	if (f == NULL || out == NULL || outlen == NULL)
		return -1;
	d = desc_of(f->type);
	if (d == NULL || validate(&c, d, f) < 0)
		return -1;
	if (f->type == FRAME_DATA)
		return emit(hdr, frame_data_header(hdr, f->stream_id, f->u.data.len),
		    f->u.data.payload, f->u.data.len, headroom, out, outlen);

	msgpack_sbuffer_init(&sb);
	msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
	rc = msgpack_pack_array(&pk, 1 + d->nargs);
	rc |= msgpack_pack_uint32(&pk, (uint32_t)f->type);
	for (size_t i = 0; i < d->nargs; i++)
		rc |= enc_field(&pk, d, &d->args[i], f);
	if (rc == 0)
		rc = emit((const uint8_t *)sb.data, sb.size, NULL, 0, headroom,
		    out, outlen);
	msgpack_sbuffer_destroy(&sb);
	return rc == 0 ? 0 : -1;
}

/* Truncates rather than fails: an error report must always be sendable. */
void
frame_make_error(struct frame *f, const char *code, const char *reason)
{
	memset(f, 0, sizeof(*f));
	f->type = FRAME_ERROR;
	snprintf(f->u.error.code, sizeof(f->u.error.code), "%s",
	    code != NULL && code[0] != '\0' ? code : "error");
	snprintf(f->u.error.reason, sizeof(f->u.error.reason), "%s",
	    reason != NULL ? reason : "");
}

void
frame_open_init(struct frame_open *o, const char *target, const char *service)
{
	memset(o, 0, sizeof(*o));
	snprintf(o->target, sizeof(o->target), "%s", target != NULL ? target : "");
	snprintf(o->service, sizeof(o->service), "%s", service != NULL ? service : "");
}
