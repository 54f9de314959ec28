/*
 * test_log.c: the log encoder (common/log.c, docs/0008).  Every line it
 * writes, whatever bytes a value holds, parses back (tests/unit/
 * logfmt_parse.h for logfmt, jansson for JSON) to exactly the fields that
 * were logged: CR, LF, quotes, backslashes, `key=value` look-alikes,
 * invalid UTF-8, control characters and empty values cannot add a line or
 * a field, or change one.  Held audit lines (log_audit_hold) all reach
 * the file, whole and in order: after a burst, beside other lines on a
 * shared stderr, when the audit file changes, and at exit.  Holding is per
 * thread (one event loop per thread, docs/0040): two threads each hold and
 * flush their own lines, and every line of both is whole.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <fcntl.h>
#include <pthread.h>
#include <semaphore.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <jansson.h>

#include "log.h"
#include "logfmt_parse.h"

static char line[LOG_LINE_MAX];
static struct lp_field parsed[LP_MAX_FIELDS];

/* 2026-11-24T08:54:47.123Z */
static const struct timespec when = { 1795510487, 123456789 };

static size_t
enc(enum log_format f, const char *msg, const struct log_field *fields, size_t n)
{
	size_t len = log_encode(line, sizeof(line), f, &when, "info", "gateway",
	    msg, fields, n);

	assert_int_equal(strlen(line), len);
	/* One line: the only newline is the last byte, and no CR at all. */
	assert_true(len > 0 && line[len - 1] == '\n');
	assert_ptr_equal(memchr(line, '\n', len), line + len - 1);
	assert_null(memchr(line, '\r', len));
	return len;
}

/* Parses the logfmt line; the header fields come first. */
static int
parse_logfmt(size_t len, const char *msg)
{
	int n = logfmt_parse(line, len, parsed, LP_MAX_FIELDS);

	if (n < 0)
		fail_msg("does not parse: %s", line);
	assert_true(n >= 4);
	assert_string_equal(parsed[0].key, "time");
	assert_int_equal(parsed[0].len, 24);
	assert_memory_equal(parsed[0].val, "2026-11-24T08:54:47.123Z", 24);
	assert_string_equal(parsed[1].key, "level");
	assert_memory_equal(parsed[1].val, "info", 4);
	assert_string_equal(parsed[2].key, "component");
	assert_string_equal(parsed[3].key, "msg");
	assert_int_equal(parsed[3].len, strlen(msg));
	assert_memory_equal(parsed[3].val, msg, parsed[3].len);
	return n;
}

/* The value, in the bytes logged, of one field of one STR/BYTES value v. */
static void
check_logfmt_value(const char *v, size_t vlen)
{
	struct log_field f = KV_B("target", v, vlen);
	size_t len = enc(LOG_FORMAT_LOGFMT, "m", &f, 1);
	int n = parse_logfmt(len, "m");

	assert_int_equal(n, 5);
	assert_string_equal(parsed[4].key, "target");
	assert_int_equal(parsed[4].len, vlen);
	assert_memory_equal(parsed[4].val, v, vlen);
}

/* JSON: an object with exactly the fields, values as logged; bytes that
 * are not UTF-8 become U+FFFD, which want says. */
static void
check_json_value(const char *v, size_t vlen, const char *want, size_t wantlen)
{
	struct log_field f = KV_B("target", v, vlen);
	size_t len = enc(LOG_FORMAT_JSON, "m", &f, 1);
	json_error_t jerr;
	json_t *o = json_loadb(line, len, JSON_ALLOW_NUL, &jerr);

	if (o == NULL)
		fail_msg("not JSON (%s): %s", jerr.text, line);
	assert_int_equal(json_object_size(o), 5);
	assert_string_equal(json_string_value(json_object_get(o, "time")),
	    "2026-11-24T08:54:47.123Z");
	assert_string_equal(json_string_value(json_object_get(o, "level")), "info");
	assert_string_equal(json_string_value(json_object_get(o, "component")),
	    "gateway");
	assert_string_equal(json_string_value(json_object_get(o, "msg")), "m");
	json_t *t = json_object_get(o, "target");
	assert_true(json_is_string(t));
	assert_int_equal(json_string_length(t), wantlen);
	assert_memory_equal(json_string_value(t), want, wantlen);
	json_decref(o);
}

static void
check_both(const char *v, const char *json_want)
{
	check_logfmt_value(v, strlen(v));
	if (json_want == NULL)
		json_want = v;
	check_json_value(v, strlen(v), json_want, strlen(json_want));
}

static void
test_header_and_bare_values(void **state)
{
	const struct log_field f[] = {
		KV_S("agent", "a1b2"), KV_I("port", -22), KV_U("bytes", 18446744073709551615ULL),
	};
	size_t len = enc(LOG_FORMAT_LOGFMT, "agent connected", f, 3);

	assert_string_equal(line, "time=2026-11-24T08:54:47.123Z level=info "
	    "component=gateway msg=\"agent connected\" agent=a1b2 port=-22 "
	    "bytes=18446744073709551615\n");
	assert_int_equal(parse_logfmt(len, "agent connected"), 7);
	enc(LOG_FORMAT_JSON, "agent connected", f, 3);
	assert_string_equal(line, "{\"time\":\"2026-11-24T08:54:47.123Z\","
	    "\"level\":\"info\",\"component\":\"gateway\",\"msg\":\"agent connected\","
	    "\"agent\":\"a1b2\",\"port\":-22,\"bytes\":18446744073709551615}\n");
}

/* Numbers are written by hand (no printf): both ends of each range. */
static void
test_number_ranges(void **state)
{
	const struct log_field f[] = {
		KV_I("lo", LLONG_MIN), KV_I("hi", LLONG_MAX), KV_I("zero", 0),
		KV_U("u0", 0), KV_I("minus", -1), KV_U("ten", 10),
	};

	/* Around each step of two digits. */
	const struct log_field g[] = {
		KV_U("a", 9), KV_U("b", 99), KV_U("c", 100), KV_U("d", 101),
		KV_U("e", 999), KV_U("f", 1000), KV_U("g", 12345),
		KV_U("h", ULLONG_MAX), KV_I("i", -10), KV_I("j", -100),
		KV_I("k", -1001), KV_U("l", 1000000007),
	};

	(void)state;
	enc(LOG_FORMAT_LOGFMT, "n", f, 6);
	assert_string_equal(line, "time=2026-11-24T08:54:47.123Z level=info "
	    "component=gateway msg=n lo=-9223372036854775808 "
	    "hi=9223372036854775807 zero=0 u0=0 minus=-1 ten=10\n");
	enc(LOG_FORMAT_LOGFMT, "n", g, 12);
	assert_string_equal(line, "time=2026-11-24T08:54:47.123Z level=info "
	    "component=gateway msg=n a=9 b=99 c=100 d=101 e=999 f=1000 g=12345 "
	    "h=18446744073709551615 i=-10 j=-100 k=-1001 l=1000000007\n");
}

/* The time to the second is kept per thread from one line to the next
 * (gmtime_r once a second): each line still carries its own time, the
 * milliseconds, the next second, a day and a year apart, and back. */
static void
test_time_each_line(void **state)
{
	static const struct {
		struct timespec t;
		const char *stamp;
	} c[] = {
		{ { 1795510487, 123456789 }, "2026-11-24T08:54:47.123Z" },
		{ { 1795510487, 999999999 }, "2026-11-24T08:54:47.999Z" },
		{ { 1795510488, 0 }, "2026-11-24T08:54:48.000Z" },
		{ { 1795510487, 5000000 }, "2026-11-24T08:54:47.005Z" },
		{ { 1795596887, 123456789 }, "2026-11-25T08:54:47.123Z" },
		{ { 1764233687, 1000000 }, "2025-11-27T08:54:47.001Z" },
		{ { 0, 0 }, "1970-01-01T00:00:00.000Z" },
		{ { 1795510487, 123456789 }, "2026-11-24T08:54:47.123Z" },
	};
	char want[64];

	(void)state;
	for (size_t i = 0; i < sizeof(c) / sizeof(c[0]); i++) {
		log_encode(line, sizeof(line), LOG_FORMAT_LOGFMT, &c[i].t, "info",
		    "gateway", "m", NULL, 0);
		snprintf(want, sizeof(want), "time=%s level=info", c[i].stamp);
		assert_memory_equal(line, want, strlen(want));
	}
}

static void
test_forged_line_stays_one_field(void **state)
{
	const char *forged = "x:1\nFORGED time=2026-11-24T08:54:47.123Z level=info "
	    "component=gateway msg=audit event=stream who=admin:x";
	struct log_field f = KV_S("target", forged);
	size_t len = enc(LOG_FORMAT_LOGFMT, "audit", &f, 1);

	assert_non_null(strstr(line, "target=\"x:1\\nFORGED time="));
	assert_int_equal(parse_logfmt(len, "audit"), 5);
	check_both(forged, NULL);
	check_both("x:1\r\nFORGED", NULL);
	check_both("\r", NULL);
}

static void
test_quotes_backslashes_lookalikes(void **state)
{
	check_both("\"", NULL);
	check_both("\\", NULL);
	check_both("\\\"", NULL);
	check_both("a\" b=\"c", NULL);
	check_both("key=value", NULL);
	check_both("a=b c=d msg=forged", NULL);
	check_both("=", NULL);
	check_both(" ", NULL);
	check_both("\\n", NULL);       /* a backslash and an n, not a newline */
	check_both("\\x41", NULL);
	check_both("\\u0041", NULL);
	check_both("end\\", NULL);
	check_both("\"}{\"level\":\"error\"", NULL);
}

static void
test_invalid_utf8(void **state)
{
	check_both("\xff", "\xef\xbf\xbd");
	check_both("a\xfe\xff" "b", "a\xef\xbf\xbd\xef\xbf\xbd" "b");
	check_both("\xc0\xaf", "\xef\xbf\xbd\xef\xbf\xbd");            /* overlong '/' */
	check_both("\xe2\x82", "\xef\xbf\xbd\xef\xbf\xbd");            /* cut short */
	check_both("\xed\xa0\x80", "\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd"); /* surrogate */
	check_both("\xf4\x90\x80\x80",                                 /* > U+10FFFF */
	    "\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd");
	/* Valid UTF-8 stays as it is. */
	check_both("h\xc3\xa9llo \xe2\x9c\x93 \xf0\x9f\x98\x80", NULL);
}

static void
test_control_characters(void **state)
{
	struct log_field f = KV_S("v", "\x1b[2J\x07\x7f");

	enc(LOG_FORMAT_LOGFMT, "m", &f, 1);
	assert_non_null(strstr(line, "v=\"\\u001b[2J\\u0007\\u007f\""));
	check_both("\x01\x02\x1b[31mred\x1b[0m\t\x7f", NULL);
	check_both("\xc2\x85" "NEL", NULL);                  /* C1 control U+0085 */
	check_both("a\xe2\x80\xa8" "b\xe2\x80\xa9", NULL);   /* U+2028, U+2029 */
	check_both("\xe2\x80\xae" "txt.exe", NULL);          /* U+202E bidi override */
	check_both("\xef\xbb\xbf" "bom", NULL);
	/* No raw escape byte or bidi control is left in either format. */
	f = KV_S("v", "\x1b\xe2\x80\xae");
	enc(LOG_FORMAT_LOGFMT, "m", &f, 1);
	assert_null(strchr(line, 0x1b));
	assert_null(strstr(line, "\xe2\x80\xae"));
	enc(LOG_FORMAT_JSON, "m", &f, 1);
	assert_null(strchr(line, 0x1b));
	assert_null(strstr(line, "\xe2\x80\xae"));
}

static void
test_empty_null_and_nul(void **state)
{
	const struct log_field f[] = {
		KV_S("a", ""), KV_S("b", NULL), KV_B("c", "x\0y", 3), KV_B("d", NULL, 5),
	};
	size_t len = enc(LOG_FORMAT_LOGFMT, "m", f, 4);

	assert_non_null(strstr(line, " a=\"\" b=\"\" c=\"x\\u0000y\" d=\"\"\n"));
	assert_int_equal(parse_logfmt(len, "m"), 8);
	check_logfmt_value("x\0y", 3);
	check_json_value("x\0y", 3, "x\0y", 3);
}

static void
test_every_byte(void **state)
{
	char v[3];

	for (int c = 0; c < 256; c++) {
		v[0] = 'a';
		v[1] = (char)c;
		v[2] = 'z';
		check_logfmt_value(v, 3);
		if (c < 0x80)
			check_json_value(v, 3, v, 3);
		else
			check_json_value(v, 3, "a\xef\xbf\xbdz", 5);
	}
}

/* Pseudo-random values (a fixed LCG): logfmt gives back the same bytes. */
static void
test_random_values(void **state)
{
	uint32_t x = 12345;
	char v[64];

	for (int i = 0; i < 5000; i++) {
		size_t n = (x >> 8) % sizeof(v);

		for (size_t k = 0; k < n; k++) {
			x = x * 1103515245u + 12345u;
			v[k] = (char)(x >> 16);
		}
		x = x * 1103515245u + 12345u;
		check_logfmt_value(v, n);
	}
}

static void
test_long_value_cut(void **state)
{
	char *v = malloc(5000);
	struct log_field f;
	size_t len;
	int n;

	assert_non_null(v);
	memset(v, '\n', 5000);
	f = KV_B("path", v, 5000);
	len = enc(LOG_FORMAT_LOGFMT, "m", &f, 1);
	n = parse_logfmt(len, "m");
	assert_int_equal(n, 6);
	assert_int_equal(parsed[4].len, LOG_VALUE_MAX);
	assert_string_equal(parsed[5].key, "path_len");
	assert_memory_equal(parsed[5].val, "5000", 4);
	/* A cut never splits a UTF-8 sequence: U+20AC is 3 bytes. */
	for (size_t i = 0; i + 3 <= 5000; i += 3)
		memcpy(v + i, "\xe2\x82\xac", 3);
	f = KV_B("path", v, 4998);
	len = enc(LOG_FORMAT_LOGFMT, "m", &f, 1);
	assert_int_equal(parse_logfmt(len, "m"), 6);
	assert_int_equal(parsed[4].len, LOG_VALUE_MAX - LOG_VALUE_MAX % 3);
	assert_null(strstr(line, "\\x"));
	free(v);
}

static void
test_too_many_fields_dropped(void **state)
{
	struct log_field f[40];
	char *v = malloc(LOG_VALUE_MAX);
	size_t len;
	int n;

	assert_non_null(v);
	memset(v, 0x01, LOG_VALUE_MAX);  /* 4 bytes each once escaped */
	for (size_t i = 0; i < 40; i++)
		f[i] = KV_B("v", v, LOG_VALUE_MAX);
	len = enc(LOG_FORMAT_LOGFMT, "m", f, 40);
	assert_true(len < LOG_LINE_MAX);
	n = parse_logfmt(len, "m");
	assert_true(n > 5);
	assert_string_equal(parsed[n - 1].key, "fields_dropped");
	char dropped[8];
	snprintf(dropped, sizeof(dropped), "%d", 40 - (n - 5));
	assert_int_equal(parsed[n - 1].len, strlen(dropped));
	assert_memory_equal(parsed[n - 1].val, dropped, strlen(dropped));
	len = enc(LOG_FORMAT_JSON, "m", f, 40);
	json_t *o = json_loadb(line, len, 0, NULL);
	assert_non_null(o);
	assert_true(json_is_integer(json_object_get(o, "fields_dropped")));
	json_decref(o);
	free(v);
}

static void
test_keys_sanitized(void **state)
{
	const struct log_field f[] = { KV_S("bad key=\"x\n", "v"), KV_S("", "w") };
	size_t len = enc(LOG_FORMAT_LOGFMT, "m", f, 2);

	assert_int_equal(parse_logfmt(len, "m"), 6);
	assert_string_equal(parsed[4].key, "bad_key__x_");
	assert_string_equal(parsed[5].key, "_");
}

/* A key is written the same whether the compiler knew its length (a
 * literal: klen, the quick check) or not (klen 0: the encoder measures
 * it): kept whole when allowed, '_' for each other byte, cut at 64. */
static void
test_literal_keys_same_as_measured(void **state)
{
	static const char *const lits[] = {
		"who", "bytes_down", "bad key=\"x\n", "caf\xc3\xa9", "a.b-c_D9",
		"0123456789012345678901234567890123456789012345678901234567890123",
	};
	struct log_field lit[7], dyn[7];
	char keys[7][80], want[LOG_LINE_MAX];
	size_t len;

	(void)state;
#if defined(__GNUC__)
	assert_int_equal(KV_S("who", "v").klen, 3);
	assert_int_equal(KV_S("", "v").klen, 0);
	/* 65 bytes: past the 64 kept, measured by the encoder. */
	assert_int_equal(KV_S("01234567890123456789012345678901234567890123456789"
	    "012345678901234", "v").klen, 0);
#endif
	assert_int_equal(KV_S(keys[0], "v").klen, 0);
	lit[0] = KV_S("who", "alice");
	lit[1] = KV_U("bytes_down", 42);
	lit[2] = KV_S("bad key=\"x\n", "v");
	lit[3] = KV_I("caf\xc3\xa9", -1);
	lit[4] = KV_B("a.b-c_D9", "x y", 3);
	lit[5] = KV_S("0123456789012345678901234567890123456789012345678901234567890123",
	    "w");
	lit[6] = KV_S("01234567890123456789012345678901234567890123456789"
	    "0123456789012345", "z");
	for (size_t i = 0; i < 7; i++) {
		snprintf(keys[i], sizeof(keys[i]), "%s", i < 6 ? lits[i] :
		    "01234567890123456789012345678901234567890123456789"
		    "0123456789012345");
		dyn[i] = lit[i];
		dyn[i].key = keys[i];
		dyn[i].klen = 0;
	}
	for (int fmt = 0; fmt < 2; fmt++) {
		enum log_format f = fmt ? LOG_FORMAT_JSON : LOG_FORMAT_LOGFMT;

		len = enc(f, "m", dyn, 7);
		memcpy(want, line, len + 1);
		/* Twice: the second time as a key already seen. */
		for (int k = 0; k < 2; k++) {
			assert_int_equal(enc(f, "m", lit, 7), len);
			assert_string_equal(line, want);
		}
	}
	assert_non_null(strstr(want, ",\"who\":\"alice\",\"bytes_down\":42,"
	    "\"bad_key__x_\":\"v\",\"caf__\":-1,\"a.b-c_D9\":\"x y\","
	    "\"0123456789012345678901234567890123456789012345678901234567890123\":"
	    "\"w\",\"0123456789012345678901234567890123456789012345678901234567890123\":"
	    "\"z\"}\n"));
	len = enc(LOG_FORMAT_LOGFMT, "m", lit, 7);
	assert_non_null(strstr(line, " msg=m who=alice bytes_down=42 "
	    "bad_key__x_=v caf__=-1 a.b-c_D9=\"x y\" "
	    "0123456789012345678901234567890123456789012345678901234567890123=w "
	    "0123456789012345678901234567890123456789012345678901234567890123=z\n"));
}

static void
test_parse_names(void **state)
{
	enum log_level l;
	enum log_format f;

	assert_int_equal(log_level_parse("warn", &l), 0);
	assert_int_equal(l, LOG_LEVEL_WARN);
	assert_int_equal(log_level_parse("WARN", &l), -1);
	assert_int_equal(log_format_parse("json", &f), 0);
	assert_int_equal(f, LOG_FORMAT_JSON);
	assert_int_equal(log_format_parse("logfmt", &f), 0);
	assert_int_equal(f, LOG_FORMAT_LOGFMT);
	assert_int_equal(log_format_parse("text", &f), -1);
}


/* ---- held audit lines ---- */

static int held_calls;

static void
count_held(void *arg)
{
	(void)arg;
	held_calls++;
}

static off_t
file_size(const char *path)
{
	struct stat st;

	assert_int_equal(stat(path, &st), 0);
	return st.st_size;
}

/* The file's lines must be audit lines event=EVENT n=0..count-1, in order,
 * each whole (a line that a split write cut would not parse). */
static void
assert_audit_lines(const char *path, const char *event, int count)
{
	FILE *f = fopen(path, "r");
	char *l = NULL, want[64];
	size_t cap = 0;
	ssize_t len;
	int i = 0;

	assert_non_null(f);
	while ((len = getline(&l, &cap, f)) > 0) {
		assert_true(i < count);
		assert_true(l[len - 1] == '\n');
		snprintf(want, sizeof(want), " msg=audit event=%s n=%d "
		    "client=192.0.2.1:4242\n", event, i);
		assert_non_null(strstr(l, want));
		assert_true(strncmp(l, "time=", 5) == 0);
		i++;
	}
	free(l);
	fclose(f);
	assert_int_equal(i, count);
}

static void
tmp_path(char *path, size_t cap, const char *what)
{
	int fd;

	snprintf(path, cap, "%s/test_log_%s.XXXXXX",
	    getenv("TMPDIR") != NULL ? getenv("TMPDIR") : "/tmp", what);
	assert_true((fd = mkstemp(path)) >= 0);
	close(fd);
}

static void
test_audit_burst_held_then_all_written_in_order(void **state)
{
	char path[256], path2[256], err[256];

	(void)state;
	tmp_path(path, sizeof(path), "burst");
	tmp_path(path2, sizeof(path2), "burst2");
	assert_int_equal(log_set_audit_file(path, err, sizeof(err)), 0);
	held_calls = 0;
	log_audit_hold(count_held, NULL);
	for (int i = 0; i < 3; i++)
		audit("burst", "192.0.2.1:4242", KV_I("n", i));
	/* Held: nothing written yet, and the owner was told once. */
	assert_int_equal(file_size(path), 0);
	assert_int_equal(held_calls, 1);
	/* A burst larger than the buffer: written in whole lines as it
	 * fills, and the owner told again each time it starts over. */
	for (int i = 3; i < 500; i++)
		audit("burst", "192.0.2.1:4242", KV_I("n", i));
	assert_true(file_size(path) > 0);
	assert_true(held_calls > 1);
	log_audit_flush();
	assert_audit_lines(path, "burst", 500);
	/* A held line goes to the file it was logged for. */
	off_t before = file_size(path);
	audit("switch", "192.0.2.1:4242", KV_I("n", 0));
	assert_int_equal(file_size(path), before);
	assert_int_equal(log_set_audit_file(path2, err, sizeof(err)), 0);
	assert_true(file_size(path) > before);
	assert_int_equal(file_size(path2), 0);
	log_audit_hold(NULL, NULL);
	audit("burst", "192.0.2.1:4242", KV_I("n", 501));	/* not held: written at once */
	assert_int_equal(log_set_audit_file(NULL, err, sizeof(err)), 0);
	unlink(path);
	unlink(path2);
}

static void
test_audit_held_keeps_order_on_shared_stderr(void **state)
{
	char path[256], err[256];
	int saved = dup(STDERR_FILENO), fd;
	FILE *f;
	char buf[4096];
	size_t n;

	(void)state;
	tmp_path(path, sizeof(path), "stderr");
	assert_true(saved >= 0);
	assert_true((fd = open(path, O_WRONLY | O_APPEND)) >= 0);
	assert_int_equal(dup2(fd, STDERR_FILENO), STDERR_FILENO);
	close(fd);
	assert_int_equal(log_set_audit_file(NULL, err, sizeof(err)), 0);
	log_audit_hold(count_held, NULL);
	audit("first", "192.0.2.1:4242");
	warn("second");
	audit("third", NULL);
	log_audit_hold(NULL, NULL);
	assert_int_equal(dup2(saved, STDERR_FILENO), STDERR_FILENO);
	close(saved);
	assert_non_null(f = fopen(path, "r"));
	n = fread(buf, 1, sizeof(buf) - 1, f);
	fclose(f);
	buf[n] = '\0';
	char *a = strstr(buf, "event=first"), *b = strstr(buf, "msg=second"),
	    *c = strstr(buf, "event=third");
	assert_true(a != NULL && b != NULL && c != NULL);
	assert_true(a < b && b < c);
	/* Every audit line ends with the client's address, "-" when none. */
	assert_non_null(strstr(buf, "event=first client=192.0.2.1:4242\n"));
	assert_non_null(strstr(buf, "event=third client=-\n"));
	unlink(path);
}

static void
test_audit_held_written_at_exit(void **state)
{
	char path[256], err[256];
	pid_t pid;
	int st;

	(void)state;
	tmp_path(path, sizeof(path), "exit");
	pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		if (log_set_audit_file(path, err, sizeof(err)) != 0)
			_exit(2);
		log_audit_hold(count_held, NULL);
		for (int i = 0; i < 5; i++)
			audit("exit", "192.0.2.1:4242", KV_I("n", i));
		if (file_size(path) != 0)
			_exit(3);
		exit(0);	/* atexit writes the held lines */
	}
	assert_int_equal(waitpid(pid, &st, 0), pid);
	assert_true(WIFEXITED(st) && WEXITSTATUS(st) == 0);
	assert_audit_lines(path, "exit", 5);
	unlink(path);
}

/* ---- held audit lines, per thread ---- */

enum auditor_step { STEP_HOLD3, STEP_FLUSH, STEP_BURST, STEP_QUIT };

/* A thread that logs audit lines event=EVENT n=0,1,... when told, holding
 * its own (an event loop thread in small). */
struct auditor {
	const char *event;
	pthread_t thread;
	sem_t go, done;
	enum auditor_step step;
	int next_n;
	int held_calls;		/* its first_held, called on its own thread */
	int held_elsewhere;	/* ... or on another: a failure */
};

static void
auditor_held(void *arg)
{
	struct auditor *a = arg;

	a->held_calls++;
	if (!pthread_equal(pthread_self(), a->thread))
		a->held_elsewhere++;
}

static void
auditor_log(struct auditor *a, int count)
{
	for (int i = 0; i < count; i++)
		log_audit_kv(a->event, "192.0.2.1:4242",
		    LOG_FIELDS_(KV_I("n", a->next_n++)));
}

static void *
auditor_main(void *arg)
{
	struct auditor *a = arg;

	for (;;) {
		while (sem_wait(&a->go) != 0)
			;
		switch (a->step) {
		case STEP_HOLD3:
			log_audit_hold(auditor_held, a);
			auditor_log(a, 3);
			break;
		case STEP_FLUSH:
			log_audit_flush();
			break;
		case STEP_BURST:
			/* More than the buffer: flushed whole as it fills. */
			auditor_log(a, 400);
			log_audit_hold(NULL, NULL);
			break;
		case STEP_QUIT:
			sem_post(&a->done);
			return NULL;
		}
		sem_post(&a->done);
	}
}

static void
auditor_start(struct auditor *a, const char *event)
{
	memset(a, 0, sizeof(*a));
	a->event = event;
	assert_int_equal(sem_init(&a->go, 0, 0), 0);
	assert_int_equal(sem_init(&a->done, 0, 0), 0);
	assert_int_equal(pthread_create(&a->thread, NULL, auditor_main, a), 0);
}

static void
auditor_tell(struct auditor *a, enum auditor_step step)
{
	a->step = step;
	sem_post(&a->go);
}

static void
auditor_wait(struct auditor *a)
{
	while (sem_wait(&a->done) != 0)
		;
}

/* Runs one step on a and waits for it. */
static void
auditor_do(struct auditor *a, enum auditor_step step)
{
	auditor_tell(a, step);
	auditor_wait(a);
}

/* Counts the file's lines per event (a, b, main); each must be a whole
 * audit line, and each event's n must run 0, 1, ... in order. */
static void
count_thread_lines(const char *path, int *na, int *nb, int *nmain)
{
	FILE *f = fopen(path, "r");
	char *l = NULL, ev[16];
	size_t cap = 0;
	ssize_t len;
	int n, used, *seen;

	assert_non_null(f);
	*na = *nb = *nmain = 0;
	while ((len = getline(&l, &cap, f)) > 0) {
		const char *p = strstr(l, " msg=audit event=");

		assert_true(strncmp(l, "time=", 5) == 0);
		assert_true(l[len - 1] == '\n');
		assert_non_null(p);
		used = 0;
		assert_int_equal(sscanf(p, " msg=audit event=%15[a-z] n=%d%n", ev,
		    &n, &used), 2);
		assert_string_equal(p + used, " client=192.0.2.1:4242\n");
		seen = strcmp(ev, "a") == 0 ? na : strcmp(ev, "b") == 0 ? nb :
		    strcmp(ev, "main") == 0 ? nmain : NULL;
		assert_non_null(seen);
		assert_int_equal(n, *seen);
		(*seen)++;
	}
	free(l);
	fclose(f);
}

static void
test_audit_held_per_thread(void **state)
{
	struct auditor a, b;
	char path[256], err[256];
	int na, nb, nmain;

	(void)state;
	tmp_path(path, sizeof(path), "threads");
	assert_int_equal(log_set_audit_file(path, err, sizeof(err)), 0);
	auditor_start(&a, "a");
	auditor_start(&b, "b");
	/* Both hold: neither's lines are written, each was told once, on its
	 * own thread. */
	auditor_do(&a, STEP_HOLD3);
	auditor_do(&b, STEP_HOLD3);
	assert_int_equal(file_size(path), 0);
	assert_int_equal(a.held_calls, 1);
	assert_int_equal(b.held_calls, 1);
	/* A thread that does not hold writes at once, beside them. */
	log_audit_kv("main", "192.0.2.1:4242", LOG_FIELDS_(KV_I("n", 0)));
	count_thread_lines(path, &na, &nb, &nmain);
	assert_int_equal(na + nb, 0);
	assert_int_equal(nmain, 1);
	/* Each flush writes that thread's lines, and only them. */
	auditor_do(&a, STEP_FLUSH);
	count_thread_lines(path, &na, &nb, &nmain);
	assert_int_equal(na, 3);
	assert_int_equal(nb, 0);
	auditor_do(&b, STEP_FLUSH);
	count_thread_lines(path, &na, &nb, &nmain);
	assert_int_equal(nb, 3);
	/* Both at once, past their buffers: every line whole, each thread's
	 * in its order. */
	auditor_tell(&a, STEP_BURST);
	auditor_tell(&b, STEP_BURST);
	auditor_wait(&a);
	auditor_wait(&b);
	count_thread_lines(path, &na, &nb, &nmain);
	assert_int_equal(na, 403);
	assert_int_equal(nb, 403);
	assert_int_equal(nmain, 1);
	assert_int_equal(a.held_elsewhere + b.held_elsewhere, 0);
	assert_true(a.held_calls > 1 && b.held_calls > 1);
	auditor_do(&a, STEP_QUIT);
	auditor_do(&b, STEP_QUIT);
	assert_int_equal(pthread_join(a.thread, NULL), 0);
	assert_int_equal(pthread_join(b.thread, NULL), 0);
	sem_destroy(&a.go);
	sem_destroy(&a.done);
	sem_destroy(&b.go);
	sem_destroy(&b.done);
	assert_int_equal(log_set_audit_file(NULL, err, sizeof(err)), 0);
	unlink(path);
}

/* A text value (KV_S, measured by the encoder, a bare one in the same
 * pass that checks it) is written as the same bytes given with their
 * length (KV_B): bare or quoted, empty, at and past the cut. */
static void
test_str_values_as_bytes(void **state)
{
	static char big[3000];
	const char *vals[] = { "x", "", "-", "/version", "user:alice@x", "a b",
	    "ab\"", "a=b", "a\\b", "caf\xc3\xa9", "tab\there", "end\n",
	    "\x7f", big, big + 2999 - LOG_VALUE_MAX, big + 2999 - LOG_VALUE_MAX - 1,
	    big + 2999 - LOG_VALUE_MAX + 1 };	/* 2999, 1024, 1025, 1023 'v' */
	char want[LOG_LINE_MAX];
	size_t len;

	(void)state;
	memset(big, 'v', sizeof(big) - 1);
	for (size_t i = 0; i < sizeof(vals) / sizeof(vals[0]); i++) {
		for (int fmt = 0; fmt < 2; fmt++) {
			enum log_format f = fmt ? LOG_FORMAT_JSON : LOG_FORMAT_LOGFMT;
			struct log_field fb = KV_B("v", vals[i], strlen(vals[i]));
			struct log_field fs = KV_S("v", vals[i]);

			len = enc(f, "m", &fb, 1);
			memcpy(want, line, len + 1);
			assert_int_equal(enc(f, "m", &fs, 1), len);
			assert_string_equal(line, want);
		}
	}
	/* NULL is "", as an empty value. */
	struct log_field fn = KV_S("v", NULL);
	len = enc(LOG_FORMAT_LOGFMT, "m", &fn, 1);
	assert_non_null(strstr(line, " msg=m v=\"\"\n"));
	/* The header's text: a component cut at 64 bytes, bare or quoted. */
	len = log_encode(line, sizeof(line), LOG_FORMAT_LOGFMT, &when, "info",
	    big + 2999 - 65, "m", NULL, 0);
	assert_non_null(strstr(line, " component=" "vvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvv"
	    "vvvvvvvvvvvvvvvvvvvvvvvvvvvvvvvv msg=m\n"));
	len = log_encode(line, sizeof(line), LOG_FORMAT_LOGFMT, &when, "in fo",
	    "", "a=b", NULL, 0);
	assert_non_null(strstr(line, " level=\"in fo\" component=\"\" "
	    "msg=\"a=b\"\n"));
}

/* Text in an array (KV_A: the encoder may read all of it, 16 bytes a
 * step) is written as the same bytes given with their length (KV_B):
 * arrays of 1 to 100 bytes, every length that leaves room for the NUL, a
 * byte of each kind at each place, and bytes after the NUL that a bare
 * value could not hold (they must not count). */
#define ARRAY_CASE(size) do {						\
	char a[size];							\
	for (size_t len = 0; len < (size); len++)			\
		for (size_t at = 0; at <= len; at++)			\
			for (size_t k = 0; k < sizeof(probe); k++) {	\
				memset(a, '"', sizeof(a));		\
				memset(a, 'v', len);			\
				if (at < len)				\
					a[at] = (char)probe[k];		\
				a[len] = '\0';				\
				array_case(KV_A("v", a), a, len);	\
			}						\
} while (0)

static const unsigned char probe[] = { 'a', 0x20, 0x21, '"', '=', '\\',
    0x7e, 0x7f, 0x80, 0xff, 0x01, 0xc3 };

static void
array_case(struct log_field fa, const char *a, size_t len)
{
	static char want[LOG_LINE_MAX];
	struct log_field fb = KV_B("v", a, len);
	size_t n;

	assert_int_equal(fa.kind, LOG_KIND_STR);
	for (int fmt = 0; fmt < 2; fmt++) {
		enum log_format f = fmt ? LOG_FORMAT_JSON : LOG_FORMAT_LOGFMT;

		n = enc(f, "m", &fb, 1);
		memcpy(want, line, n + 1);
		assert_int_equal(enc(f, "m", &fa, 1), n);
		assert_string_equal(line, want);
	}
}

static void
test_array_values_as_bytes(void **state)
{
	(void)state;
	ARRAY_CASE(1);
	ARRAY_CASE(8);
	ARRAY_CASE(15);
	ARRAY_CASE(16);
	ARRAY_CASE(17);
	ARRAY_CASE(24);
	ARRAY_CASE(32);
	ARRAY_CASE(33);
	ARRAY_CASE(100);
	/* The size is the array's. */
	char a40[40] = "x";
	assert_int_equal(KV_A("v", a40).n, 40);
}

/* 128 literal keys, more than the encoder keeps per thread (64 slots):
 * each written as measured whichever slot it shares, in both formats, one
 * after another and again. */
#define LK2(p) KV_U(p "0", 0), KV_U(p "1", 1)
#define LK8(p) LK2(p "a"), LK2(p "b"), LK2(p "c"), LK2(p "d")
#define LK32(p) LK8(p "e"), LK8(p "f"), LK8(p "g"), LK8(p "h")
#define LK128(p) LK32(p "w"), LK32(p "x"), LK32(p "y"), LK32(p ".z")

static void
test_many_literal_keys(void **state)
{
	const struct log_field lit[] = { LK128("k") };
	struct log_field dyn[128];
	char keys[128][8], want[2][LOG_LINE_MAX];
	size_t len[2];

	(void)state;
	for (size_t i = 0; i < 128; i++) {
		assert_true(lit[i].klen == 0 || lit[i].klen == strlen(lit[i].key));
		snprintf(keys[i], sizeof(keys[i]), "%s", lit[i].key);
		dyn[i] = lit[i];
		dyn[i].key = keys[i];
		dyn[i].klen = 0;
	}
	for (int fmt = 0; fmt < 2; fmt++) {
		len[fmt] = enc(fmt ? LOG_FORMAT_JSON : LOG_FORMAT_LOGFMT, "m", dyn,
		    128);
		memcpy(want[fmt], line, len[fmt] + 1);
	}
	assert_non_null(strstr(want[0], " kwea0=0 kwea1=1 kweb0=0 "));
	assert_non_null(strstr(want[1], ",\"k.zhd1\":1}\n"));
	for (int round = 0; round < 4; round++) {
		int fmt = round % 2;

		assert_int_equal(enc(fmt ? LOG_FORMAT_JSON : LOG_FORMAT_LOGFMT,
		    "m", lit, 128), len[fmt]);
		assert_string_equal(line, want[fmt]);
	}
}

/* An audit line (log_audit_kv), byte for byte after its time: a /k8s
 * request's (gateway/routes/k8s.c x_audit) in logfmt and in JSON, one
 * with more fields than an audit line holds (event=, 30, client=), and
 * the header after log_init names another component, then this one. */
static void
test_audit_line_exact(void **state)
{
	char path[256], err[256], buf[8192];
	const struct log_field f[] = { KV_S("who", "user:alice"),
	    KV_S("cluster", "prod"), KV_S("node", "-"), KV_S("method", "GET"),
	    KV_S("path", "/api/v1/pods?watch=1"), KV_I("status", 200),
	    KV_U("bytes_up", 0), KV_U("bytes_down", 1234),
	    KV_I("duration_ms", 7), KV_S("replica", "gw-1") };
	struct log_field many[35];
	FILE *fp;
	size_t n;
	int nf;

	(void)state;
	tmp_path(path, sizeof(path), "exact");
	assert_int_equal(log_set_audit_file(path, err, sizeof(err)), 0);
	log_audit_kv("k8s", "192.0.2.1:4242", f, 10);
	log_set_format(LOG_FORMAT_JSON);
	log_audit_kv("k8s", NULL, f, 10);
	log_set_format(LOG_FORMAT_LOGFMT);
	for (size_t i = 0; i < 35; i++)
		many[i] = KV_U("n", i);
	log_audit_kv("many", "", many, 35);
	/* A new component (log_init) is on the next audit line. */
	log_init("gw 2", LOG_LEVEL_INFO);
	log_audit_kv("k8s", "-", NULL, 0);
	log_init("tether", LOG_LEVEL_INFO);
	log_audit_kv("k8s", "-", NULL, 0);
	assert_non_null(fp = fopen(path, "r"));
	n = fread(buf, 1, sizeof(buf) - 1, fp);
	fclose(fp);
	buf[n] = '\0';
	/* Five lines, each cut at its newline. */
	char *l[5], *nl;

	l[0] = buf;
	for (int i = 0; i < 5; i++) {
		assert_non_null(nl = strchr(l[i], '\n'));
		*nl = '\0';
		if (i < 4)
			l[i + 1] = nl + 1;
		else
			assert_int_equal(nl[1], '\0');
	}
	char *l1 = l[0], *l2 = l[1], *l3 = l[2];

	/* The fourth with the new component, the fifth the first's again. */
	assert_true(strlen(l[3]) > 29 && strlen(l[4]) > 29);
	assert_string_equal(l[3] + 29, " level=info component=\"gw 2\" "
	    "msg=audit event=k8s client=-");
	assert_string_equal(l[4] + 29, " level=info component=tether "
	    "msg=audit event=k8s client=-");
	assert_true(strncmp(l1, "time=", 5) == 0 && strlen(l1) > 29);
	assert_string_equal(l1 + 5 + 24, " level=info component=tether msg=audit "
	    "event=k8s who=user:alice cluster=prod node=- method=GET "
	    "path=\"/api/v1/pods?watch=1\" status=200 bytes_up=0 bytes_down=1234 "
	    "duration_ms=7 replica=gw-1 client=192.0.2.1:4242");
	assert_true(strncmp(l2, "{\"time\":\"", 9) == 0 && strlen(l2) > 33);
	assert_string_equal(l2 + 9 + 24, "\",\"level\":\"info\",\"component\":"
	    "\"tether\",\"msg\":\"audit\",\"event\":\"k8s\",\"who\":\"user:alice\","
	    "\"cluster\":\"prod\",\"node\":\"-\",\"method\":\"GET\",\"path\":"
	    "\"/api/v1/pods?watch=1\",\"status\":200,\"bytes_up\":0,"
	    "\"bytes_down\":1234,\"duration_ms\":7,\"replica\":\"gw-1\","
	    "\"client\":\"-\"}");
	size_t n3 = strlen(l3);

	l3[n3] = '\n';		/* logfmt_parse wants the line's end */
	nf = logfmt_parse(l3, n3 + 1, parsed, LP_MAX_FIELDS);
	assert_int_equal(nf, 4 + 32);
	assert_string_equal(parsed[4].key, "event");
	for (int i = 0; i < 30; i++) {
		char want[8];

		snprintf(want, sizeof(want), "%d", i);
		assert_string_equal(parsed[5 + i].key, "n");
		assert_int_equal(parsed[5 + i].len, strlen(want));
		assert_memory_equal(parsed[5 + i].val, want, strlen(want));
	}
	assert_string_equal(parsed[35].key, "client");
	assert_memory_equal(parsed[35].val, "-", 1);
	assert_int_equal(log_set_audit_file(NULL, err, sizeof(err)), 0);
	unlink(path);
}

/* log_on answers as log_kv writes: from log_init's level up. */
static void
test_log_on_follows_the_level(void **state)
{
	(void)state;
	log_init("tether", LOG_LEVEL_DEBUG);
	assert_true(log_on(LOG_LEVEL_DEBUG));
	assert_true(log_on(LOG_LEVEL_ERROR));
	log_init("tether", LOG_LEVEL_WARN);
	assert_false(log_on(LOG_LEVEL_DEBUG));
	assert_false(log_on(LOG_LEVEL_INFO));
	assert_true(log_on(LOG_LEVEL_WARN));
	assert_true(log_on(LOG_LEVEL_ERROR));
	log_init("tether", LOG_LEVEL_INFO);
	assert_false(log_on(LOG_LEVEL_DEBUG));
	assert_true(log_on(LOG_LEVEL_INFO));
}

static int made;

static int64_t
make_field(void)
{
	return ++made;
}

/* A debug line's fields are made only while debug lines are written: with
 * the level above debug, debug() evaluates none of its arguments. */
static void
test_debug_fields_not_made_when_off(void **state)
{
	(void)state;
	made = 0;
	log_init("tether", LOG_LEVEL_INFO);
	debug("never written", KV_I("n", make_field()));
	assert_int_equal(made, 0);
	log_init("tether", LOG_LEVEL_DEBUG);
	debug("written", KV_I("n", make_field()));
	assert_int_equal(made, 1);
	log_init("tether", LOG_LEVEL_INFO);
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_header_and_bare_values),
		cmocka_unit_test(test_log_on_follows_the_level),
		cmocka_unit_test(test_debug_fields_not_made_when_off),
		cmocka_unit_test(test_number_ranges),
		cmocka_unit_test(test_time_each_line),
		cmocka_unit_test(test_forged_line_stays_one_field),
		cmocka_unit_test(test_quotes_backslashes_lookalikes),
		cmocka_unit_test(test_invalid_utf8),
		cmocka_unit_test(test_control_characters),
		cmocka_unit_test(test_empty_null_and_nul),
		cmocka_unit_test(test_every_byte),
		cmocka_unit_test(test_random_values),
		cmocka_unit_test(test_long_value_cut),
		cmocka_unit_test(test_too_many_fields_dropped),
		cmocka_unit_test(test_keys_sanitized),
		cmocka_unit_test(test_literal_keys_same_as_measured),
		cmocka_unit_test(test_many_literal_keys),
		cmocka_unit_test(test_str_values_as_bytes),
		cmocka_unit_test(test_array_values_as_bytes),
		cmocka_unit_test(test_audit_line_exact),
		cmocka_unit_test(test_parse_names),
		cmocka_unit_test(test_audit_burst_held_then_all_written_in_order),
		cmocka_unit_test(test_audit_held_keeps_order_on_shared_stderr),
		cmocka_unit_test(test_audit_held_written_at_exit),
		cmocka_unit_test(test_audit_held_per_thread),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
