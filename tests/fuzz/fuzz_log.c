/*
 * fuzz_log.c: libFuzzer target for the log encoder (common/log.c).  The
 * input is split at 0x00 0x00 into field values (any bytes, a peer's);
 * each line is encoded in logfmt and JSON.
 *
 * Checks beyond "no crash": the logfmt line is one line that parses back
 * (tests/unit/logfmt_parse.h) to exactly the fields given, the same bytes
 * for every value not cut; the JSON line is a JSON object with as many
 * members.  The same fields with literal keys (log_field.klen known, the
 * encoder's quick path for them) encode to the very same bytes, and so do
 * they as NUL-terminated text (KV_S: measured by the encoder, a bare one
 * in one pass) where a value holds no NUL, and as text in an array (KV_A,
 * read 16 bytes at a time, bytes after the NUL that are not a value's)
 * where it also fits in one.
 */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "log.h"
#include "../unit/logfmt_parse.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define MAX_VALUES 8

static char line[LOG_LINE_MAX], line2[LOG_LINE_MAX];
static char arrays[MAX_VALUES][300];
static struct lp_field parsed[LP_MAX_FIELDS];

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static const char *const keys[MAX_VALUES] = {
		"target", "node", "reason", "code", "path", "user", "who", "method",
	};
	static const struct timespec when = { 0, 0 };
	struct log_field f[MAX_VALUES + 1], lit[MAX_VALUES + 1];
	size_t nf = 0, start = 0, len;
	int n;

	for (size_t i = 0; i <= size && nf < MAX_VALUES; i++) {
		if (i == size || (i + 1 < size && data[i] == 0 && data[i + 1] == 0)) {
			f[nf] = KV_B(keys[nf], data + start, i - start);
			nf++;
			start = i + 2;
			i++;
		}
	}
	f[nf++] = KV_I("n", (long long)size);
	/* keys[i] as literals: the compiler knows their lengths. */
	for (size_t i = 0; i + 1 < nf; i++) {
		switch (i) {
		case 0: lit[i] = KV_B("target", f[i].s, f[i].n); break;
		case 1: lit[i] = KV_B("node", f[i].s, f[i].n); break;
		case 2: lit[i] = KV_B("reason", f[i].s, f[i].n); break;
		case 3: lit[i] = KV_B("code", f[i].s, f[i].n); break;
		case 4: lit[i] = KV_B("path", f[i].s, f[i].n); break;
		case 5: lit[i] = KV_B("user", f[i].s, f[i].n); break;
		case 6: lit[i] = KV_B("who", f[i].s, f[i].n); break;
		default: lit[i] = KV_B("method", f[i].s, f[i].n); break;
		}
	}
	lit[nf - 1] = f[nf - 1];
	for (size_t i = 0; i + 1 < nf; i++) {
		char *t;

		if (memchr(f[i].s, 0, f[i].n) != NULL)
			continue;
		if ((t = malloc(f[i].n + 1)) == NULL)
			abort();
		memcpy(t, f[i].s, f[i].n);
		t[f[i].n] = '\0';
		lit[i].kind = LOG_KIND_STR;
		lit[i].s = t;
		lit[i].n = 0;
	}
	for (int fmt = 0; fmt < 2; fmt++) {
		enum log_format lf = fmt ? LOG_FORMAT_JSON : LOG_FORMAT_LOGFMT;

		len = log_encode(line, sizeof(line), lf, &when, "info", "fuzz",
		    "m", f, nf);
		if (log_encode(line2, sizeof(line2), lf, &when, "info", "fuzz",
		    "m", lit, nf) != len || memcmp(line, line2, len + 1) != 0)
			abort();
	}
	for (size_t i = 0; i + 1 < nf; i++) {
		if (lit[i].kind == LOG_KIND_STR)
			free((char *)lit[i].s);
		lit[i] = f[i];
		if (f[i].n >= sizeof(arrays[i]) ||
		    memchr(f[i].s, 0, f[i].n) != NULL)
			continue;
		memset(arrays[i], '=', sizeof(arrays[i]));
		memcpy(arrays[i], f[i].s, f[i].n);
		arrays[i][f[i].n] = '\0';
		lit[i] = KV_A("v", arrays[i]);
		lit[i].key = f[i].key;
		lit[i].klen = 0;
	}
	for (int fmt = 0; fmt < 2; fmt++) {
		enum log_format lf = fmt ? LOG_FORMAT_JSON : LOG_FORMAT_LOGFMT;

		len = log_encode(line, sizeof(line), lf, &when, "info", "fuzz",
		    "m", f, nf);
		if (log_encode(line2, sizeof(line2), lf, &when, "info", "fuzz",
		    "m", lit, nf) != len || memcmp(line, line2, len + 1) != 0)
			abort();
	}

	len = log_encode(line, sizeof(line), LOG_FORMAT_LOGFMT, &when, "info",
	    "fuzz", "m", f, nf);
	if (len != strlen(line) || memchr(line, '\n', len) != line + len - 1 ||
	    memchr(line, '\r', len) != NULL)
		abort();
	n = logfmt_parse(line, len, parsed, LP_MAX_FIELDS);
	if (n < 4)
		abort();
	/* No value is long enough to be cut or dropped here unless the input
	 * is: compare the fields that came back whole. */
	for (int k = 4, j = 0; k < n && j < (int)nf; k++, j++) {
		if (strcmp(parsed[k].key, f[j].key) != 0)
			abort();
		if (f[j].kind == LOG_KIND_BYTES && f[j].n <= LOG_VALUE_MAX &&
		    (parsed[k].len != f[j].n ||
		    memcmp(parsed[k].val, f[j].s, f[j].n) != 0))
			abort();
		if (f[j].kind == LOG_KIND_BYTES && f[j].n > LOG_VALUE_MAX)
			k++; /* KEY_len follows */
	}
	if (size <= LOG_VALUE_MAX && n != 4 + (int)nf)
		abort();

	len = log_encode(line, sizeof(line), LOG_FORMAT_JSON, &when, "info",
	    "fuzz", "m", f, nf);
	json_t *o = json_loadb(line, len, JSON_ALLOW_NUL, NULL);
	if (o == NULL || !json_is_object(o))
		abort();
	/* Each value has its own key: one member per field. */
	if (size <= LOG_VALUE_MAX && json_object_size(o) != 4 + nf)
		abort();
	json_decref(o);
	return 0;
}
