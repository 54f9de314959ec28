/*
 * test_agent_url.c: the URLs the agent reads, all through common/url.c:
 * its tunnel URL (agent_tunnel_url), which tether-client run and the swarm
 * derive from the gateway URL they joined, and the services of join
 * --service NAME=URL (client_service_url, client_service_valid).
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <string.h>

#include "agent_tunnel.h"
#include "state.h"

static void
test_good(void **state)
{
	char url[300], host[256], why[160];

	(void)state;
	assert_int_equal(agent_tunnel_url("https://gw.example:8443", url,
	    sizeof(url), host, sizeof(host), why, sizeof(why)), 0);
	assert_string_equal(url, "wss://gw.example:8443/v1/connect");
	assert_string_equal(host, "gw.example");

	/* No port named: none written (443 is wss's default). */
	assert_int_equal(agent_tunnel_url("https://[::1]/", url, sizeof(url),
	    host, sizeof(host), why, sizeof(why)), 0);
	assert_string_equal(url, "wss://[::1]/v1/connect");
	assert_string_equal(host, "::1");
}

static void
test_bad(void **state)
{
	static const struct {
		const char *url, *want;
	} bad[] = {
		{ "http://gw.example", "unsupported scheme" },
		{ "https://gw.example:0", "bad port" },
		{ "https://gw.example:8443/path", "path" },
		{ "https://gw.example?x=1", "query" },
		{ "https://user@gw.example", "user" },
		{ "https://gw exa", "space" },
	};
	char url[300], why[160];

	(void)state;
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		why[0] = '\0';
		if (agent_tunnel_url(bad[i].url, url, sizeof(url), NULL, 0, why,
		    sizeof(why)) != -1)
			fail_msg("accepted %s", bad[i].url);
		if (strstr(why, bad[i].want) == NULL)
			fail_msg("%s: reason \"%s\" lacks \"%s\"", bad[i].url, why,
			    bad[i].want);
	}
	/* Too long for the caller's buffer: refused, not cut. */
	assert_int_equal(agent_tunnel_url("https://gw.example:8443", url, 20,
	    NULL, 0, why, sizeof(why)), -1);
	assert_non_null(strstr(why, "too long"));
}

static void
test_service(void **state)
{
	char target[300];
	int tls = -1;

	(void)state;
	assert_int_equal(client_service_url("https://10.0.0.5:6443/", target,
	    sizeof(target), &tls), 0);
	assert_string_equal(target, "10.0.0.5:6443");
	assert_int_equal(tls, 1);
	assert_int_equal(client_service_url("http://[::1]:8080", target,
	    sizeof(target), &tls), 0);
	assert_string_equal(target, "[::1]:8080");
	assert_int_equal(tls, 0);
	assert_int_equal(client_service_valid("kube-api", "https://k8s.local:443"), 1);

	/* The port must be named; no path, query, user or other scheme. */
	assert_int_equal(client_service_valid("api", "https://k8s.local"), 0);
	assert_int_equal(client_service_valid("api", "https://k8s.local:6443/x"), 0);
	assert_int_equal(client_service_valid("api", "https://k8s.local:6443?a"), 0);
	assert_int_equal(client_service_valid("api", "https://u@k8s.local:6443"), 0);
	assert_int_equal(client_service_valid("api", "ftp://k8s.local:21"), 0);
	assert_int_equal(client_service_valid("api", "https://k8s.local:0"), 0);
	/* The name: 1..31 of a-z 0-9 -. */
	assert_int_equal(client_service_valid("API", "https://k8s.local:6443"), 0);
	assert_int_equal(client_service_valid("", "https://k8s.local:6443"), 0);
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_good),
		cmocka_unit_test(test_bad),
		cmocka_unit_test(test_service),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
