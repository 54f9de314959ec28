/*
 * test_joindoc.c: the join document (common/joindoc.c): the strict parser
 * (every refusal names the key at fault and never repeats the token), the
 * formatter, and RFC 3339 timestamps.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "joindoc.h"

#define TOKEN    "tti_0123456789abcdef.SeCrEtXyZsEcReTxYzSeCrEtXyZsEcReTxYz0123456"
#define SECRET   "SeCrEtXyZ"
#define URL      "https://gw.example:8443"
#define CHECKSUM "sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"
#define CLUSTER  "c-0123456789ab"
#define EXPIRES  "2026-11-22T10:00:00Z"
#define EXPIRES_UNIX INT64_C(1795341600)

static const char *const keys[] = {
	"gateway_url", "ca_checksum", "cluster", "token", "expires_at",
};
static const char *const values[] = {
	"\"" URL "\"", "\"" CHECKSUM "\"", "\"" CLUSTER "\"", "\"" TOKEN "\"",
	"\"" EXPIRES "\"",
};
#define NKEYS 5

/*
 * A document with every key, except that skip (if not NULL) is left out and
 * key set (if not NULL) gets the raw JSON value raw.
 */
static void
make_doc(char *out, size_t outlen, const char *skip, const char *set,
    const char *raw)
{
	size_t off = 0;
	int first = 1;

	off += (size_t)snprintf(out + off, outlen - off, "{");
	for (int i = 0; i < NKEYS; i++) {
		const char *v = values[i];

		if (skip != NULL && strcmp(skip, keys[i]) == 0)
			continue;
		if (set != NULL && strcmp(set, keys[i]) == 0)
			v = raw;
		off += (size_t)snprintf(out + off, outlen - off, "%s\"%s\":%s",
		    first ? "" : ",", keys[i], v);
		first = 0;
	}
	snprintf(out + off, outlen - off, "}");
}

/* json must be refused with a reason containing want and no token part. */
static void
expect_refused(const char *json, const char *want)
{
	struct joindoc doc;
	char err[256] = "";

	if (joindoc_parse(json, strlen(json), &doc, err, sizeof(err)) != -1)
		fail_msg("accepted: %s", json);
	if (strstr(err, want) == NULL)
		fail_msg("%s: reason \"%s\" lacks \"%s\"", json, err, want);
	if (strstr(err, SECRET) != NULL || strstr(err, "tti_0123") != NULL)
		fail_msg("%s: reason \"%s\" repeats the token", json, err);
	/* A refusal leaves no token behind. */
	assert_int_equal(doc.token[0], '\0');
}

static void
expect_value_refused(const char *key, const char *raw)
{
	char json[1024];

	make_doc(json, sizeof(json), NULL, key, raw);
	expect_refused(json, key);
}

static void
expect_value_accepted(const char *key, const char *raw, struct joindoc *doc)
{
	char json[1024], err[256] = "";

	make_doc(json, sizeof(json), NULL, key, raw);
	if (joindoc_parse(json, strlen(json), doc, err, sizeof(err)) != 0)
		fail_msg("refused %s: %s", json, err);
}

static void
test_valid(void **state)
{
	struct joindoc doc;
	char json[1024], err[256] = "";

	(void)state;
	make_doc(json, sizeof(json), NULL, NULL, NULL);
	assert_int_equal(joindoc_parse(json, strlen(json), &doc, err,
	    sizeof(err)), 0);
	assert_string_equal(doc.gateway_url, URL);
	assert_string_equal(doc.ca_checksum, CHECKSUM);
	assert_string_equal(doc.cluster, CLUSTER);
	assert_string_equal(doc.token, TOKEN);
	assert_int_equal(doc.expires_at, EXPIRES_UNIX);
	joindoc_clear(&doc);
	assert_int_equal(doc.token[0], '\0');
}

static void
test_whitespace_and_order(void **state)
{
	const char *json = "\n  { \"token\" : \"" TOKEN "\",\n"
	    "\"expires_at\":\"" EXPIRES "\", \"cluster\":\"" CLUSTER "\",\n"
	    "\"ca_checksum\":\"" CHECKSUM "\",\"gateway_url\":\"" URL "/\"}\n\n";
	struct joindoc doc;
	char err[256];

	(void)state;
	assert_int_equal(joindoc_parse(json, strlen(json), &doc, err,
	    sizeof(err)), 0);
	/* The trailing '/' is stripped. */
	assert_string_equal(doc.gateway_url, URL);
}

static void
test_missing_key(void **state)
{
	char json[1024];

	(void)state;
	for (int i = 0; i < NKEYS; i++) {
		make_doc(json, sizeof(json), keys[i], NULL, NULL);
		expect_refused(json, keys[i]);
	}
}

static void
test_extra_key(void **state)
{
	char json[2048], base[1024];

	(void)state;
	make_doc(base, sizeof(base), NULL, NULL, NULL);
	base[strlen(base) - 1] = '\0';
	snprintf(json, sizeof(json), "%s,\"gateway_uri\":\"x\"}", base);
	expect_refused(json, "unknown key \"gateway_uri\"");
	snprintf(json, sizeof(json), "%s,\"\":1}", base);
	expect_refused(json, "unknown key");
}

static void
test_wrong_type(void **state)
{
	static const char *const raws[] = {
		"1", "null", "true", "[]", "{}", "1.5",
	};

	(void)state;
	for (int i = 0; i < NKEYS; i++) {
		for (size_t j = 0; j < sizeof(raws) / sizeof(raws[0]); j++)
			expect_value_refused(keys[i], raws[j]);
	}
}

static void
test_gateway_url(void **state)
{
	static const char *const bad[] = {
		"\"http://gw.example:8443\"",
		"\"https://\"",
		"\"https:///\"",
		"\"gw.example:8443\"",
		"\"https://gw.example:8443/v1\"",
		"\"https://gw.example:8443//\"",
		"\"https://gw.example:8443?x=1\"",
		"\"https://gw.example:8443#x\"",
		"\"https://user@gw.example:8443\"",
		"\"https://gw.example:\"",
		"\"https://gw.example:0\"",
		"\"https://gw.example:65536\"",
		"\"https://gw.example:08443\"",
		"\"https://gw.example:84a3\"",
		"\"https://gw_example\"",
		"\"https://-gw.example\"",
		"\"https://gw..example\"",
		"\"https://999.1.1.1\"",
		"\"https://[::1\"",
		"\"https://[nope]:8443\"",
		"\"https://[::1]x\"",
		"\"https://gw example\"",
		"\"HTTPS://gw.example\"",
		"\"\"",
	};
	struct joindoc doc;

	(void)state;
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
		expect_value_refused("gateway_url", bad[i]);
	expect_value_accepted("gateway_url", "\"https://127.0.0.1:8443/\"", &doc);
	assert_string_equal(doc.gateway_url, "https://127.0.0.1:8443");
	expect_value_accepted("gateway_url", "\"https://[::1]:8443\"", &doc);
	assert_string_equal(doc.gateway_url, "https://[::1]:8443");
	expect_value_accepted("gateway_url", "\"https://gw.example\"", &doc);
	assert_string_equal(doc.gateway_url, "https://gw.example");
	expect_value_accepted("gateway_url", "\"https://gw.example:65535\"", &doc);
}

static void
test_checksum(void **state)
{
	(void)state;
	expect_value_refused("ca_checksum", "\"0123456789abcdef0123456789abcdef"
	    "0123456789abcdef0123456789abcdef\"");
	expect_value_refused("ca_checksum", "\"sha256:0123456789ABCDEF"
	    "0123456789abcdef0123456789abcdef0123456789abcdef\"");
	expect_value_refused("ca_checksum", "\"sha256:0123\"");
	expect_value_refused("ca_checksum", "\"" CHECKSUM "0\"");
	expect_value_refused("ca_checksum", "\"sha1:0123456789abcdef0123456789"
	    "abcdef0123456789abcdef0123456789abcdef\"");
	expect_value_refused("ca_checksum", "\"sha256:0123456789abcdef0123456789"
	    "abcdef0123456789abcdef0123456789abcdeg\"");
}

static void
test_cluster(void **state)
{
	(void)state;
	expect_value_refused("cluster", "\"0123456789ab\"");
	expect_value_refused("cluster", "\"c-0123456789AB\"");
	expect_value_refused("cluster", "\"c-0123456789a\"");
	expect_value_refused("cluster", "\"c-0123456789abc\"");
	expect_value_refused("cluster", "\"a-0123456789ab\"");
}

static void
test_token(void **state)
{
	char raw[256];

	(void)state;
	expect_value_refused("token", "\"tta_0123456789abcdef.SeCrEtXyZ\"");
	expect_value_refused("token", "\"ttu_0123456789abcdef.SeCrEtXyZ\"");
	expect_value_refused("token", "\"tti_\"");
	expect_value_refused("token", "\"\"");
	expect_value_refused("token", "\"tti_0123 SeCrEtXyZ\"");
	expect_value_refused("token", "\"tti_0123\\nSeCrEtXyZ\"");
	expect_value_refused("token", "\"tti_0123\\u0000SeCrEtXyZ\"");
	/* Longer than the struct holds. */
	snprintf(raw, sizeof(raw), "\"tti_0123456789abcdef.%s%s\"",
	    "SeCrEtXyZSeCrEtXyZSeCrEtXyZSeCrEtXyZ",
	    "SeCrEtXyZSeCrEtXyZSeCrEtXyZSeCrEtXyZ");
	expect_value_refused("token", raw);
}

static void
test_expires_at(void **state)
{
	static const char *const bad[] = {
		"\"2026-11-22T10:00:00\"",
		"\"2026-11-22T10:00:00+00:00\"",
		"\"2026-11-22T10:00:00.123Z\"",
		"\"2026-11-22 10:00:00Z\"",
		"\"2026-11-22t10:00:00z\"",
		"\"2026-13-22T10:00:00Z\"",
		"\"2026-00-22T10:00:00Z\"",
		"\"2026-02-29T10:00:00Z\"",
		"\"2026-04-31T10:00:00Z\"",
		"\"2026-11-22T24:00:00Z\"",
		"\"2026-11-22T10:60:00Z\"",
		"\"2026-11-22T10:00:60Z\"",
		"\"1969-12-31T23:59:59Z\"",
		"\"2026-1-22T10:00:00Z\"",
		"\"+026-11-22T10:00:00Z\"",
		"\"tomorrow\"",
	};

	(void)state;
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
		expect_value_refused("expires_at", bad[i]);
}

static void
test_not_an_object(void **state)
{
	(void)state;
	expect_refused("[]", "not a JSON object");
	expect_refused("\"" TOKEN "\"", "not a JSON object");
	expect_refused("42", "not a JSON object");
	expect_refused("null", "not a JSON object");
	expect_refused("", "JSON");
	expect_refused("   ", "JSON");
}

static void
test_duplicate_key(void **state)
{
	char json[2048], base[1024];

	(void)state;
	make_doc(base, sizeof(base), NULL, NULL, NULL);
	base[strlen(base) - 1] = '\0';
	snprintf(json, sizeof(json), "%s,\"token\":\"tti_0123SeCrEtXyZ\"}", base);
	expect_refused(json, "token");
	snprintf(json, sizeof(json), "%s,\"cluster\":\"c-aaaaaaaaaaaa\"}", base);
	expect_refused(json, "cluster");
}

static void
test_syntax_errors(void **state)
{
	char json[1024];

	(void)state;
	make_doc(json, sizeof(json), NULL, NULL, NULL);
	strcat(json, " trailing");
	expect_refused(json, "after the JSON object");
	make_doc(json, sizeof(json), NULL, NULL, NULL);
	strcat(json, "{}");
	expect_refused(json, "after the JSON object");
	/* Truncated inside the token: jansson would quote it; we must not. */
	expect_refused("{\"token\":\"tti_0123SeCrEtXyZ", "JSON");
	expect_refused("{\"token\":tti_0123SeCrEtXyZ}", "JSON");
	expect_refused("{\"tok\\u0000en\":\"tti_0123SeCrEtXyZ\"}", "NUL");
	expect_refused("{\"token\":\"tti_0123\xff" "SeCrEtXyZ\"}", "UTF-8");
}

static void
test_too_big(void **state)
{
	struct joindoc doc;
	char err[256];
	char *big;

	(void)state;
	big = malloc(JOINDOC_MAX_BYTES + 2);
	assert_non_null(big);
	memset(big, ' ', JOINDOC_MAX_BYTES + 1);
	big[JOINDOC_MAX_BYTES + 1] = '\0';
	assert_int_equal(joindoc_parse(big, JOINDOC_MAX_BYTES + 1, &doc, err,
	    sizeof(err)), -1);
	assert_non_null(strstr(err, "larger"));
	free(big);
}

static void
test_format_roundtrip(void **state)
{
	struct joindoc doc, again;
	char json[1024], err[256];
	char *s;

	(void)state;
	make_doc(json, sizeof(json), NULL, NULL, NULL);
	assert_int_equal(joindoc_parse(json, strlen(json), &doc, err,
	    sizeof(err)), 0);
	s = joindoc_format(&doc);
	assert_non_null(s);
	/* One line, exactly the documented shape and order. */
	assert_string_equal(s, json);
	assert_null(strchr(s, '\n'));
	assert_int_equal(joindoc_parse(s, strlen(s), &again, err,
	    sizeof(err)), 0);
	assert_memory_equal(&doc, &again, sizeof(doc));
	free(s);
}

static void
test_rfc3339(void **state)
{
	char out[32];
	int64_t t;

	(void)state;
	assert_int_equal(rfc3339_parse("1970-01-01T00:00:00Z", &t), 0);
	assert_int_equal(t, 0);
	assert_int_equal(rfc3339_parse(EXPIRES, &t), 0);
	assert_int_equal(t, EXPIRES_UNIX);
	assert_int_equal(rfc3339_parse("2024-02-29T23:59:59Z", &t), 0);
	assert_int_equal(t, INT64_C(1709251199));
	assert_int_equal(rfc3339_parse("2023-02-29T00:00:00Z", &t), -1);
	assert_int_equal(rfc3339_parse("2000-02-29T00:00:00Z", &t), 0);
	assert_int_equal(rfc3339_parse("2100-02-29T00:00:00Z", &t), -1);
	assert_int_equal(rfc3339_parse("2026-11-22T10:00:00Z ", &t), -1);
	rfc3339_format(EXPIRES_UNIX, out);
	assert_string_equal(out, EXPIRES);
	rfc3339_format(0, out);
	assert_string_equal(out, "1970-01-01T00:00:00Z");
	rfc3339_format(INT64_C(1709251199), out);
	assert_string_equal(out, "2024-02-29T23:59:59Z");
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_valid),
		cmocka_unit_test(test_whitespace_and_order),
		cmocka_unit_test(test_missing_key),
		cmocka_unit_test(test_extra_key),
		cmocka_unit_test(test_wrong_type),
		cmocka_unit_test(test_gateway_url),
		cmocka_unit_test(test_checksum),
		cmocka_unit_test(test_cluster),
		cmocka_unit_test(test_token),
		cmocka_unit_test(test_expires_at),
		cmocka_unit_test(test_not_an_object),
		cmocka_unit_test(test_duplicate_key),
		cmocka_unit_test(test_syntax_errors),
		cmocka_unit_test(test_too_big),
		cmocka_unit_test(test_format_roundtrip),
		cmocka_unit_test(test_rfc3339),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
