/*
 * test_apibody.c: what a client sends, read before anything acts on it:
 * the admin API's JSON bodies and query parameters (gateway/routes/apibody.c) and
 * the targets of the dial endpoint and forward OPENs (target_parse in
 * common/hostname.c).  Each refusal has its status and reason; nothing a
 * client sends is guessed at (a parameter given twice, a value too long).
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <string.h>

#include "apibody.h"
#include "hostname.h"

static char why[256];

static int
parse(enum api_body_kind kind, const char *body, struct api_body *b)
{
	return api_body_parse(kind, body, strlen(body), 0, b, why, sizeof(why));
}

static void
test_cluster_body(void **state)
{
	struct api_body b;

	assert_int_equal(parse(API_BODY_CLUSTER, "{\"name\":\"edge\"}", &b), 0);
	assert_string_equal(b.name, "edge");
	api_body_free(&b);
	assert_int_equal(parse(API_BODY_CLUSTER, "", &b), 400);
	assert_string_equal(why, "field \"name\" (a string) is required");
	assert_null(b.root);
	assert_int_equal(parse(API_BODY_CLUSTER, "{\"name\":1}", &b), 400);
	assert_int_equal(parse(API_BODY_CLUSTER, "{\"name\":\"a\",\"colour\":1}", &b), 400);
	assert_string_equal(why, "unknown field \"colour\"");
	assert_int_equal(parse(API_BODY_CLUSTER, "{\"name\":\"a\",\"name\":\"b\"}", &b), 400);
	assert_non_null(strstr(why, "invalid JSON body"));
	assert_int_equal(parse(API_BODY_CLUSTER, "[1]", &b), 400);
	assert_string_equal(why, "request body must be a JSON object");
	assert_int_equal(parse(API_BODY_CLUSTER, "{\"name\":\"a\\u0000b\"}", &b), 400);
	assert_int_equal(api_body_parse(API_BODY_CLUSTER, "{}", 2, 1, &b, why,
	    sizeof(why)), 413);
	assert_string_equal(why, "request body too large");
}

static void
test_tokens_body(void **state)
{
	struct api_body b;

	assert_int_equal(parse(API_BODY_TOKENS, "{}", &b), 0);
	assert_int_equal(b.ttl_seconds, API_TTL_DEFAULT);
	assert_int_equal(b.uses, 1);
	assert_int_equal(b.approval_manual, 0);
	api_body_free(&b);
	assert_int_equal(parse(API_BODY_TOKENS, "{\"ttl_seconds\":60,\"uses\":5,"
	    "\"approval\":\"manual\"}", &b), 0);
	assert_int_equal(b.ttl_seconds, 60);
	assert_int_equal(b.uses, 5);
	assert_int_equal(b.approval_manual, 1);
	api_body_free(&b);
	assert_int_equal(parse(API_BODY_TOKENS, "{\"ttl_seconds\":0}", &b), 400);
	assert_string_equal(why, "field \"ttl_seconds\" must be an integer from 1 to 31622400");
	assert_int_equal(parse(API_BODY_TOKENS, "{\"uses\":1000001}", &b), 400);
	assert_int_equal(parse(API_BODY_TOKENS, "{\"uses\":1.5}", &b), 400);
	assert_int_equal(parse(API_BODY_TOKENS, "{\"approval\":\"later\"}", &b), 400);
	assert_string_equal(why, "field \"approval\" must be \"auto\" or \"manual\"");
}

static void
test_user_body(void **state)
{
	struct api_body b;
	char big[4096];
	size_t o;

	assert_int_equal(parse(API_BODY_USER, "{\"name\":\"alice\",\"clusters\":"
	    "[\"c-1\",\"c-2\"]}", &b), 0);
	assert_string_equal(b.name, "alice");
	assert_int_equal(b.nclusters, 2);
	assert_string_equal(b.clusters[1], "c-2");
	api_body_free(&b);
	assert_int_equal(parse(API_BODY_USER, "{\"name\":\"alice\",\"clusters\":[]}", &b), 400);
	assert_string_equal(why, "field \"clusters\" (a non-empty array of cluster ids) is required");
	assert_int_equal(parse(API_BODY_USER, "{\"name\":\"alice\",\"clusters\":[1]}", &b), 400);
	assert_int_equal(parse(API_BODY_USER, "{\"clusters\":[\"c\"]}", &b), 400);
	o = (size_t)snprintf(big, sizeof(big), "{\"name\":\"a\",\"clusters\":[");
	for (int i = 0; i <= STORE_TOKEN_CLUSTERS_MAX; i++)
		o += (size_t)snprintf(big + o, sizeof(big) - o, "%s\"c\"", i ? "," : "");
	snprintf(big + o, sizeof(big) - o, "]}");
	assert_int_equal(parse(API_BODY_USER, big, &b), 400);
	assert_string_equal(why, "field \"clusters\": at most 64 clusters per token");
}

static void
test_kubeconfig_body(void **state)
{
	struct api_body b;

	assert_int_equal(parse(API_BODY_KUBECONFIG, "", &b), 0);
	assert_string_equal(b.user, API_KUBECONFIG_DEFAULT_USER);
	api_body_free(&b);
	assert_int_equal(parse(API_BODY_KUBECONFIG, "{\"user\":\"bob\"}", &b), 0);
	assert_string_equal(b.user, "bob");
	api_body_free(&b);
	assert_int_equal(parse(API_BODY_KUBECONFIG, "{\"user\":null}", &b), 400);
	assert_string_equal(why, "field \"user\" must be a string");
}

static void
test_query_param(void **state)
{
	char v[8];

	assert_int_equal(api_query_param("a=1&target=h:22&b=", "target", v, sizeof(v)), 0);
	assert_string_equal(v, "h:22");
	assert_int_equal(api_query_param("b=", "b", v, sizeof(v)), 0);
	assert_string_equal(v, "");
	assert_int_equal(api_query_param("xtarget=1&target", "target", v, sizeof(v)), -1);
	assert_int_equal(api_query_param("", "target", v, sizeof(v)), -1);
	assert_int_equal(api_query_param("target=a&target=b", "target", v, sizeof(v)), -2);
	assert_string_equal(v, "");
	assert_int_equal(api_query_param("target=12345678", "target", v, sizeof(v)), -2);
	assert_int_equal(api_query_param("target=1234567", "target", v, sizeof(v)), 0);
}

static int
target_ok(const char *t, size_t *hlen, unsigned *port)
{
	return target_parse(t, strlen(t), hlen, port, why, sizeof(why));
}

static void
test_target_parse(void **state)
{
	size_t hlen;
	unsigned port;

	assert_int_equal(target_ok("db.internal:5432", &hlen, &port), 0);
	assert_int_equal(hlen, 11);
	assert_int_equal(port, 5432);
	assert_int_equal(target_ok("10.0.0.1:1", &hlen, &port), 0);
	assert_int_equal(target_ok("[::1]:65535", &hlen, &port), 0);
	assert_int_equal(hlen, 5);
	assert_int_equal(port, 65535);

	static const char *const bad_port[] = { "h:0", "h:65536", "h:", "h:-1",
	    "h:+22", "h:022", "h:22 ", "h:2\n2", "h:99999999999", NULL };
	for (int i = 0; bad_port[i] != NULL; i++) {
		assert_int_equal(target_ok(bad_port[i], &hlen, &port), -1);
		assert_string_equal(why, "the port must be a number from 1 to 65535");
	}
	static const char *const bad_host[] = { "x\n:1", "x:1\nFORGED:22",
	    "a b:22", "a\"b:22", "k=v:22", "a\\b:22", "\xff:22", "-a:22",
	    "a..b:22", "999.1.1.1:22", "http://h:22", "h/p:22", "::1:22",
	    NULL };
	for (int i = 0; bad_host[i] != NULL; i++)
		assert_int_equal(target_ok(bad_host[i], &hlen, &port), -1);
	assert_int_equal(target_ok("", &hlen, &port), -1);
	assert_string_equal(why, "want HOST:PORT");
	assert_int_equal(target_ok("noport", &hlen, &port), -1);
	assert_int_equal(target_ok("[::1]x:22", &hlen, &port), -1);
	/* The reason never quotes the target. */
	assert_int_equal(target_ok("evil\n:22", &hlen, &port), -1);
	assert_null(strstr(why, "evil"));
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_cluster_body),
		cmocka_unit_test(test_tokens_body),
		cmocka_unit_test(test_user_body),
		cmocka_unit_test(test_kubeconfig_body),
		cmocka_unit_test(test_query_param),
		cmocka_unit_test(test_target_parse),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
